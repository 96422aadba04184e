/* Shared by the host and switch programs: packet parsing and RFC 1624 checksum patching.
 * The arithmetic is tacc-mech's wire code (update_checksum): HC' = ~(~HC + ~m + m'), on
 * 16-bit words as they sit in the packet (ones' complement sums do not depend on byte order). */
#ifndef TACC_COMMON_H
#define TACC_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define IP_RESERVED_FLAG 0x8000
#define ECN_MASK 0x03
#define ECN_NOT_ECT 0x00
#define ECN_ECT0 0x02
#define ECN_CE 0x03
#define NS_PER_SEC 1000000000ULL

static __always_inline __u16 ones_add(__u16 a, __u16 b)
{
	__u32 sum = (__u32)a + (__u32)b;
	return (__u16)((sum & 0xffff) + (sum >> 16));
}

/* The checksum after one 16-bit word changes from old to new (RFC 1624 eqn. 3). */
static __always_inline __u16 csum_update(__u16 hc, __u16 old, __u16 new)
{
	return (__u16)~ones_add(ones_add((__u16)~hc, (__u16)~old), new);
}

/* Rewrites the 16-bit word at *word and patches the checksum at *csum. */
static __always_inline void rewrite_word(__u16 *word, __u16 *csum, __u16 new)
{
	__u16 old = *word;
	if (old == new)
		return;
	*word = new;
	*csum = csum_update(*csum, old, new);
}

/* The IPv4 header of an Ethernet frame, or NULL. */
static __always_inline struct iphdr *ipv4_of(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	if (ip->ihl < 5 || (void *)ip + ip->ihl * 4 > end)
		return 0;
	return ip;
}

/* The TCP header after `ip`, or NULL. */
static __always_inline struct tcphdr *tcp_of(struct __sk_buff *skb, struct iphdr *ip)
{
	void *end = (void *)(long)skb->data_end;
	struct tcphdr *tcp = (void *)ip + ip->ihl * 4;
	if (ip->protocol != IPPROTO_TCP || (void *)(tcp + 1) > end)
		return 0;
	return tcp;
}

/* The first 16-bit word of the IPv4 header holds version, IHL, DSCP and ECN. */
static __always_inline __u16 *ip_word0(struct iphdr *ip)
{
	return (__u16 *)ip;
}

static __always_inline __u8 ecn_of(struct iphdr *ip)
{
	return ip->tos & ECN_MASK;
}

static __always_inline void set_ecn(struct iphdr *ip, __u8 ecn)
{
	__u16 w = bpf_ntohs(*ip_word0(ip));
	rewrite_word(ip_word0(ip), &ip->check, bpf_htons((w & ~ECN_MASK) | ecn));
}

static __always_inline int reserved_bit(struct iphdr *ip)
{
	return (bpf_ntohs(ip->frag_off) & IP_RESERVED_FLAG) != 0;
}

static __always_inline void set_reserved_bit(struct iphdr *ip, int on)
{
	__u16 w = bpf_ntohs(ip->frag_off);
	w = on ? (w | IP_RESERVED_FLAG) : (w & ~IP_RESERVED_FLAG);
	rewrite_word(&ip->frag_off, &ip->check, bpf_htons(w));
}

#endif
