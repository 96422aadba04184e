// SPDX-License-Identifier: MIT
/* A switch port's ECN marking, on the tc egress of the port's veth, ahead of the HTB that
 * makes the port's rate and the bfifo that holds its buffer. The queue it judges is the
 * port's own: the root qdisc's backlog, read through the packet's device (the packet is not
 * in it yet, as at an enqueue). At K or above an ECT frame gets CE and a Not-ECT frame is
 * dropped: the simulator's red-ecn queue (RED with min = max = K on the instantaneous
 * queue). Counters per port, and the backlog the port's last packet found, which tells the
 * switch agent how full the port is (RWNDQ's control loop), so it runs on every port,
 * marking or not.
 *
 * Where the controller's copy rules match TCP flags only (SICC's SYN and FIN copies), the
 * port reports the matching packets' headers to the agent in their place: a copy through
 * Open vSwitch's userspace datapath is an upcall in the thread that forwards, and slows the
 * switch for milliseconds at each volley of SYNs.
 *
 * An earlier version kept a phantom queue instead (each packet's bytes in, drained at the
 * port's rate by the clock). It agreed with the qdisc only while the qdisc never paused:
 * each stall of the host let the qdisc keep its packets while the phantom drained, and as
 * ACK-clocked senders then hold their arrivals at the port's rate, the difference stayed. A
 * DCTCP run's phantom sat at K while the real queue drifted to 60 packets and overflowed. */
#include "common.h"

/* The fields of the kernel's types read here, found in the running kernel's BTF when the
 * program loads (CO-RE). */
struct gnet_stats_queue___tacc {
	__u32 backlog;
} __attribute__((preserve_access_index));

struct Qdisc___tacc {
	struct gnet_stats_queue___tacc qstats;
} __attribute__((preserve_access_index));

struct net_device___tacc {
	struct Qdisc___tacc *qdisc;
} __attribute__((preserve_access_index));

struct sk_buff___tacc {
	struct net_device___tacc *dev;
} __attribute__((preserve_access_index));

/* Bytes in the root qdisc of the packet's device (htb counts a packet's IP bytes on a
 * veth: 1500 B a full packet), or 0 if it cannot be read. */
static __always_inline __u64 qdisc_backlog(struct __sk_buff *skb)
{
	struct sk_buff___tacc *kskb = (void *)skb;
	struct net_device___tacc *dev = 0;
	struct Qdisc___tacc *q = 0;
	__u32 backlog = 0;

	if (bpf_probe_read_kernel(&dev, sizeof(dev), &kskb->dev) || !dev)
		return 0;
	if (bpf_probe_read_kernel(&q, sizeof(q), &dev->qdisc) || !q)
		return 0;
	if (bpf_probe_read_kernel(&backlog, sizeof(backlog), &q->qstats.backlog))
		return 0;
	return backlog;
}

struct port_config {
	__u64 k_bytes; /* ~0: this port does not mark */
	__u64 limit_bytes;
};

/* queue_bytes and last_ns are written without a lock: a reader that pairs one packet's
 * backlog with the next one's time is off by the few bytes the port sent between them. */
struct port_state {
	__u64 queue_bytes; /* the backlog after the last packet joined it */
	__u64 last_ns;     /* when */
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 marks;
	__u64 drops;
};

/* Keyed by ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct port_config);
} port_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct port_state);
} ports SEC(".maps");

/* TCP flows seen leaving a port, for RWNDQ's flow count and its ACK rewrites. */
struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
};

#define SEEN_SYN (1 << 0)
#define SEEN_DATA (1 << 1)
#define SEEN_END (1 << 2) /* FIN or RST */

struct flow_seen {
	__u64 packets;
	__u32 ifindex;
	__u32 seen; /* SEEN_* since the agent last took them */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, struct flow_seen);
} flows SEC(".maps");

/* ifindex of a port -> the window field the ACKs of its flows get at most (0: none). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} windows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rwnd_rewrites SEC(".maps");

/* The TCP flags the copy rules match: a packet is reported if flags & mask == value for
 * one of them. The agent fills them from index 0; the first with mask 0 ends the list, so
 * a port without copy rules pays one lookup a TCP packet. */
#define COPY_RULES 4

struct copy_rule {
	__u8 mask;
	__u8 value;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COPY_RULES);
	__type(key, __u32);
	__type(value, struct copy_rule);
} copy_rules SEC(".maps");

/* The IPv4 and TCP headers of a reported packet, as the controller's packet-in would carry
 * them (options included). */
#define REPORT_MAX 120

struct report {
	__u32 ifindex;
	__u32 len;
	__u8 headers[REPORT_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} reports SEC(".maps");

/* Reports lost to a full ring (the agent fell behind). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} reports_lost SEC(".maps");

static __always_inline int copied(__u8 flags)
{
#pragma unroll
	for (__u32 i = 0; i < COPY_RULES; i++) {
		__u32 k = i;
		struct copy_rule *r = bpf_map_lookup_elem(&copy_rules, &k);
		if (!r || !r->mask)
			return 0;
		if ((flags & r->mask) == r->value)
			return 1;
	}
	return 0;
}

static __always_inline void report_copy(struct __sk_buff *skb, struct iphdr *ip)
{
	struct tcphdr *tcp = tcp_of(skb, ip);
	if (!tcp || !copied(((__u8 *)tcp)[13]))
		return;
	__u32 len = ip->ihl * 4 + tcp->doff * 4;
	if (len > REPORT_MAX)
		len = REPORT_MAX;
	struct report *r = bpf_ringbuf_reserve(&reports, sizeof(*r), 0);
	if (!r) {
		__u32 zero = 0;
		__u64 *lost = bpf_map_lookup_elem(&reports_lost, &zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return;
	}
	r->ifindex = skb->ifindex;
	/* At least the 40 B tcp_of checked are in the packet. */
	if (len < 40 || bpf_skb_load_bytes(skb, sizeof(struct ethhdr), r->headers, len))
		len = 0;
	r->len = len;
	bpf_ringbuf_submit(r, 0);
}

/* The longest pure ACK: 20 B of IPv4 and 60 B of TCP header. */
#define PURE_ACK_MAX 80

static __always_inline void track_flow(struct __sk_buff *skb, struct iphdr *ip)
{
	struct tcphdr *tcp = tcp_of(skb, ip);
	if (!tcp)
		return;
	struct flow_key key = { ip->saddr, ip->daddr, tcp->source, tcp->dest };
	__u32 seen = (tcp->syn ? SEEN_SYN : 0) | (tcp->fin || tcp->rst ? SEEN_END : 0) |
		     (bpf_ntohs(ip->tot_len) > PURE_ACK_MAX ? SEEN_DATA : 0);
	struct flow_seen *f = bpf_map_lookup_elem(&flows, &key);
	if (!f) {
		if (!seen)
			return; /* a pure ACK opens no flow */
		struct flow_seen fresh = { .packets = 1, .ifindex = skb->ifindex, .seen = seen };
		bpf_map_update_elem(&flows, &key, &fresh, BPF_ANY);
		return;
	}
	__sync_fetch_and_add(&f->packets, 1);
	if (seen)
		__sync_fetch_and_or(&f->seen, seen);
}

SEC("classifier")
int port_ingress(struct __sk_buff *skb)
{
	struct iphdr *ip = ipv4_of(skb);
	if (!ip)
		return TC_ACT_OK;
	struct tcphdr *tcp = tcp_of(skb, ip);
	if (!tcp || !tcp->ack)
		return TC_ACT_OK;
	struct flow_key data = { ip->daddr, ip->saddr, tcp->dest, tcp->source };
	struct flow_seen *f = bpf_map_lookup_elem(&flows, &data);
	if (!f)
		return TC_ACT_OK;
	__u32 ifindex = f->ifindex;
	__u32 *window = bpf_map_lookup_elem(&windows, &ifindex);
	if (!window || !*window || bpf_ntohs(tcp->window) <= *window)
		return TC_ACT_OK;
	rewrite_word(&tcp->window, &tcp->check, bpf_htons((__u16)*window));
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&rwnd_rewrites, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return TC_ACT_OK;
}

SEC("classifier")
int port_egress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct port_config *cfg = bpf_map_lookup_elem(&port_config, &ifindex);
	struct port_state *st = bpf_map_lookup_elem(&ports, &ifindex);
	if (!cfg || !st)
		return TC_ACT_OK;
	struct iphdr *ip = ipv4_of(skb);
	/* Reported before the marking's drop, as a copy rule sees a packet before its queue. */
	if (ip)
		report_copy(skb, ip);
	/* What the port's htb and bfifo count of a packet: its IP bytes (measured: 1500 B per
	 * full packet on a veth). */
	__u64 len = ip ? bpf_ntohs(ip->tot_len) : skb->len;
	__u64 queue = qdisc_backlog(skb);
	int above_k = ip && queue >= cfg->k_bytes;
	/* Above K a Not-ECT packet is dropped here, so it never joins the queue. */
	int dropped = above_k && ecn_of(ip) == ECN_NOT_ECT;
	__u64 after = dropped ? queue : queue + len;

	st->queue_bytes = after < cfg->limit_bytes ? after : cfg->limit_bytes;
	st->last_ns = bpf_ktime_get_ns();

	if (above_k) {
		if (dropped) {
			__sync_fetch_and_add(&st->drops, 1);
			return TC_ACT_SHOT;
		}
		if (ecn_of(ip) != ECN_CE)
			set_ecn(ip, ECN_CE);
		__sync_fetch_and_add(&st->marks, 1);
	}
	__sync_fetch_and_add(&st->tx_packets, 1);
	__sync_fetch_and_add(&st->tx_bytes, len);
	if (ip)
		track_flow(skb, ip);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
