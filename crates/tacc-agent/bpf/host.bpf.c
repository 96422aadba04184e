// SPDX-License-Identifier: MIT
/* The host shim's per-packet work, in the hypervisor namespace:
 * - vm_ingress    (tc ingress of each VM's port): what a VM sends. Scrubs what only a shim
 *                 may send: feedback packets are dropped, an IPR bit is cleared.
 * - uplink_egress (tc egress of the NIC): what leaves for the network. Counts per (VM,
 *                 remote) pair, sets ECT(0), echoes pending CE marks in the IPR bit, and picks
 *                 the rate limiter's HTB class (skb->priority) the agent made for the pair,
 *                 or, with the BPF limiter, drops what the pair's token bucket cannot pay.
 * - uplink_ingress(tc ingress of the NIC): what arrives for a VM. Consumes feedback packets,
 *                 counts and clears IPR bits and CE marks, clamps the window of ACKs of pairs
 *                 the agent flagged (SICC), with incremental checksum updates.
 * Where a switch takes the packets before tc ingress (Open vSwitch's userspace datapath
 * reads its ports with packet sockets), uplink_ingress runs on the tc egress of each VM's
 * port instead, and uplink_egress scrubs (F_SCRUB_EGRESS); vm_ingress then only learns.
 * The user-space agent reads the counters and runs the mechanism's state machine; this code
 * keeps no policy of its own beyond what the maps tell it. */
#include "common.h"

/* Built a second time with PIN_MAPS for `tacc agent`, which pins every map by name in its
 * pin directory: an agent started again after a crash takes over the maps in force (rates,
 * classes, buckets, clamps, counts, learned addresses) instead of starting empty. */
#ifdef PIN_MAPS
#define PINNED __uint(pinning, LIBBPF_PIN_BY_NAME);
#else
#define PINNED
#endif

#define FEEDBACK_PROTO 143

/* Which of the work above the mechanism wants (config[0]). */
#define F_SET_ECT (1 << 0)
#define F_COUNT_CE (1 << 1)
#define F_IPR (1 << 2)
#define F_FEEDBACK (1 << 3)
#define F_SCRUB (1 << 4)
#define F_CLAMP (1 << 5)
#define F_BUCKET (1 << 6)
#define F_ADMISSION (1 << 7)
#define F_LEARN (1 << 8) /* VMs' addresses by port, remotes' MACs: tacc agent only */
/* The VMs' packets reach the uplink unscrubbed (a switch that takes them before tc ingress,
 * as Open vSwitch's userspace datapath does): scrub them there. */
#define F_SCRUB_EGRESS (1 << 9)

/* skb->mark of the agent's own feedback packets (SO_MARK on its socket). */
#define FEEDBACK_MARK 0x7acc0fb0

/* Addresses in network byte order. */
struct pair_key {
	__u32 vm;
	__u32 remote;
};

/* Written by this program only, with atomic adds. */
struct pair_counts {
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 ce_cleared;
	__u64 ipr_set;
	__u64 ipr_seen;
	__u64 feedback_packets;
	__u64 feedback_marks;
};

struct clamp {
	__u16 window; /* the rwnd field value to write at most */
	__u16 mss;    /* at most this on a SYN-ACK */
	__u32 pad;
	__u64 expires_ns; /* CLOCK_MONOTONIC */
};

enum counter {
	C_SCRUB_FEEDBACK,
	C_SCRUB_IPR,
	C_RWND_REWRITES,
	C_UNKNOWN_PAIRS,
	C_BUCKET_DROPS,
	C_ADMISSION_DROPS,
	C_MAX,
};

/* The BPF limiter: a dropping token bucket per (VM, remote) or (VM, 0), the alternative to
 * the HTB classes. The agent writes the rates; the tokens are this program's alone. */
struct bucket_rate {
	__u64 bytes_per_sec;
	__u64 burst_bytes;
};

struct bucket_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__s64 tokens; /* below 0: the debt of a packet longer than the burst */
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	PINNED
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	PINNED
	__uint(max_entries, 16384);
	__type(key, struct pair_key);
	__type(value, struct pair_counts);
} pairs SEC(".maps");

/* Written by the agent only: marks of the pair it sent back in feedback packets, no longer
 * pending for IPR echoes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	PINNED
	__uint(max_entries, 16384);
	__type(key, struct pair_key);
	__type(value, __u64);
} flushed SEC(".maps");

/* (VM, remote) or (VM, 0) -> HTB class id (major << 16 | minor). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	PINNED
	__uint(max_entries, 16384);
	__type(key, struct pair_key);
	__type(value, __u32);
} classes SEC(".maps");

/* (VM, remote) -> window clamp of ACKs from the remote to the VM. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	PINNED
	__uint(max_entries, 16384);
	__type(key, struct pair_key);
	__type(value, struct clamp);
} clamps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	PINNED
	__uint(max_entries, 16384);
	__type(key, struct pair_key);
	__type(value, struct bucket_rate);
} bucket_rates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	PINNED
	__uint(max_entries, 16384);
	__type(key, struct pair_key);
	__type(value, struct bucket_state);
} buckets SEC(".maps");

/* Admission control: destinations (network byte order) towards which the VMs may open no
 * connection now. The agent keeps it to the shim's list. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	PINNED
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} refused SEC(".maps");

/* The source addresses of what the VMs send, by the VM port it came in on (ifindex): how
 * `tacc agent` learns the addresses of VMs its config does not give. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	PINNED
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} vm_sources SEC(".maps");

/* The source MAC of the last packet from each remote address (network byte order): where a
 * hypervisor without routes (VMs on a bridge) sends its feedback packets, as an Ethernet
 * frame out of the uplink. */
struct mac {
	__u8 addr[6];
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	PINNED
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct mac);
} remote_macs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	PINNED
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline __u32 flags(void)
{
	__u32 zero = 0;
	__u32 *f = bpf_map_lookup_elem(&config, &zero);
	return f ? *f : 0;
}

static __always_inline void count(enum counter c)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline struct pair_counts *pair(__u32 vm, __u32 remote)
{
	struct pair_key key = { .vm = vm, .remote = remote };
	struct pair_counts *c = bpf_map_lookup_elem(&pairs, &key);
	if (c)
		return c;
	struct pair_counts zero = {};
	if (bpf_map_update_elem(&pairs, &key, &zero, BPF_NOEXIST) && !bpf_map_lookup_elem(&pairs, &key)) {
		count(C_UNKNOWN_PAIRS); /* the map is full */
		return 0;
	}
	return bpf_map_lookup_elem(&pairs, &key);
}

/* The entry of `map` for the pair, or else for the VM as a whole (remote 0); `key` is left
 * naming the one found. */
static __always_inline void *pair_or_vm(void *map, struct pair_key *key)
{
	void *v = bpf_map_lookup_elem(map, key);
	if (!v) {
		key->remote = 0;
		v = bpf_map_lookup_elem(map, key);
	}
	return v;
}

/* Takes `len` bytes from the bucket of `key` if it holds them: refilled at its rate since
 * the last packet, up to its burst. A packet longer than the burst (a GSO packet of a VM
 * whose port offloads segmentation, up to 64 KB) passes once the bucket is full and leaves
 * it in debt, which the refill pays back before the next packet passes: the rate holds. */
static __always_inline int bucket_pays(struct pair_key *key, struct bucket_rate *rate, __u64 len)
{
	__u64 now = bpf_ktime_get_ns();
	struct bucket_state *st = bpf_map_lookup_elem(&buckets, key);
	if (!st) {
		struct bucket_state fresh = { .tokens = rate->burst_bytes, .last_ns = now };
		bpf_map_update_elem(&buckets, key, &fresh, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&buckets, key);
		if (!st)
			return 1; /* the map is full: fail open */
	}
	bpf_spin_lock(&st->lock);
	__u64 elapsed = now > st->last_ns ? now - st->last_ns : 0;
	if (elapsed > NS_PER_SEC)
		elapsed = NS_PER_SEC; /* a full bucket takes far less; keeps 64 bits */
	__s64 burst = rate->burst_bytes;
	__s64 tokens = st->tokens + (__s64)(elapsed * rate->bytes_per_sec / NS_PER_SEC);
	if (tokens > burst)
		tokens = burst;
	__s64 need = (__s64)len < burst ? (__s64)len : burst;
	int pays = tokens >= need;
	st->tokens = pays ? tokens - (__s64)len : tokens;
	st->last_ns = now;
	bpf_spin_unlock(&st->lock);
	return pays;
}

SEC("classifier")
int vm_ingress(struct __sk_buff *skb)
{
	__u32 f = flags();
	if (!(f & (F_SCRUB | F_LEARN)))
		return TC_ACT_OK;
	struct iphdr *ip = ipv4_of(skb);
	if (!ip)
		return TC_ACT_OK;
	if (f & F_LEARN) {
		__u32 src = ip->saddr, port = skb->ifindex;
		__u32 *known = bpf_map_lookup_elem(&vm_sources, &src);
		if (!known || *known != port)
			bpf_map_update_elem(&vm_sources, &src, &port, BPF_ANY);
	}
	if (!(f & F_SCRUB))
		return TC_ACT_OK;
	if (ip->protocol == FEEDBACK_PROTO) {
		count(C_SCRUB_FEEDBACK);
		return TC_ACT_SHOT;
	}
	if (reserved_bit(ip)) {
		set_reserved_bit(ip, 0);
		count(C_SCRUB_IPR);
	}
	return TC_ACT_OK;
}

SEC("classifier")
int uplink_egress(struct __sk_buff *skb)
{
	struct iphdr *ip = ipv4_of(skb);
	if (!ip)
		return TC_ACT_OK;
	__u32 f = flags();
	if (ip->protocol == FEEDBACK_PROTO) {
		/* The agent's own feedback goes out as it is, a VM's not. */
		if ((f & F_SCRUB_EGRESS) && skb->mark != FEEDBACK_MARK) {
			count(C_SCRUB_FEEDBACK);
			return TC_ACT_SHOT;
		}
		return TC_ACT_OK;
	}
	if ((f & F_SCRUB_EGRESS) && reserved_bit(ip)) {
		set_reserved_bit(ip, 0);
		count(C_SCRUB_IPR);
	}
	if ((f & F_ADMISSION) && bpf_map_lookup_elem(&refused, &ip->daddr)) {
		struct tcphdr *tcp = tcp_of(skb, ip);
		if (tcp && tcp->syn && !tcp->ack) {
			count(C_ADMISSION_DROPS);
			return TC_ACT_SHOT;
		}
	}
	struct pair_counts *c = pair(ip->saddr, ip->daddr);
	if (c) {
		__sync_fetch_and_add(&c->tx_packets, 1);
		__sync_fetch_and_add(&c->tx_bytes, skb->len);
		if (f & F_IPR) {
			struct pair_key key = { .vm = ip->saddr, .remote = ip->daddr };
			__u64 *fl = bpf_map_lookup_elem(&flushed, &key);
			if (c->ce_cleared > c->ipr_set + (fl ? *fl : 0)) {
				set_reserved_bit(ip, 1);
				__sync_fetch_and_add(&c->ipr_set, 1);
			}
		}
	}
	if ((f & F_SET_ECT) && ecn_of(ip) == ECN_NOT_ECT)
		set_ecn(ip, ECN_ECT0);
	struct pair_key key = { .vm = ip->saddr, .remote = ip->daddr };
	if (f & F_BUCKET) {
		struct bucket_rate *rate = pair_or_vm(&bucket_rates, &key);
		/* A GSO packet's IP length may not say its whole length; the skb's does. */
		__u64 len = bpf_ntohs(ip->tot_len);
		if (skb->len > ETH_HLEN + len)
			len = skb->len - ETH_HLEN;
		if (rate && !bucket_pays(&key, rate, len)) {
			count(C_BUCKET_DROPS);
			return TC_ACT_SHOT;
		}
		return TC_ACT_OK;
	}
	__u32 *class = pair_or_vm(&classes, &key);
	if (class)
		skb->priority = *class;
	return TC_ACT_OK;
}

static __always_inline void clamp_window(struct __sk_buff *skb, struct iphdr *ip)
{
	struct tcphdr *tcp = tcp_of(skb, ip);
	if (!tcp || !tcp->ack)
		return;
	struct pair_key key = { .vm = ip->daddr, .remote = ip->saddr };
	struct clamp *cl = bpf_map_lookup_elem(&clamps, &key);
	if (!cl || bpf_ktime_get_ns() >= cl->expires_ns)
		return;
	__u16 limit = tcp->syn ? cl->mss : cl->window;
	if (bpf_ntohs(tcp->window) > limit) {
		rewrite_word(&tcp->window, &tcp->check, bpf_htons(limit));
		count(C_RWND_REWRITES);
	}
}

SEC("classifier")
int uplink_ingress(struct __sk_buff *skb)
{
	struct iphdr *ip = ipv4_of(skb);
	if (!ip)
		return TC_ACT_OK;
	__u32 f = flags();
	if (f & F_LEARN) {
		struct ethhdr *eth = (void *)ip - sizeof(*eth); /* within what ipv4_of checked */
		__u32 src = ip->saddr;
		struct mac *known = bpf_map_lookup_elem(&remote_macs, &src);
		struct mac m = {};
		for (int i = 0; i < 6; i++)
			m.addr[i] = eth->h_source[i];
		if (!known || *(__u64 *)known != *(__u64 *)&m)
			bpf_map_update_elem(&remote_macs, &src, &m, BPF_ANY);
	}
	if (ip->protocol == FEEDBACK_PROTO) {
		if (!(f & F_FEEDBACK))
			return TC_ACT_OK;
		struct pair_counts *c = pair(ip->daddr, ip->saddr);
		if (c) {
			__sync_fetch_and_add(&c->feedback_packets, 1);
			__sync_fetch_and_add(&c->feedback_marks, bpf_ntohs(ip->id));
		}
		return TC_ACT_SHOT;
	}
	if (f & (F_IPR | F_COUNT_CE)) {
		struct pair_counts *c = pair(ip->daddr, ip->saddr);
		if ((f & F_IPR) && reserved_bit(ip)) {
			set_reserved_bit(ip, 0);
			if (c)
				__sync_fetch_and_add(&c->ipr_seen, 1);
		}
		if ((f & F_COUNT_CE) && ecn_of(ip) == ECN_CE) {
			set_ecn(ip, ECN_ECT0);
			if (c)
				__sync_fetch_and_add(&c->ce_cleared, 1);
		}
	}
	if (f & F_CLAMP)
		clamp_window(skb, ip);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
