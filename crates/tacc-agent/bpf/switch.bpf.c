// SPDX-License-Identifier: MIT
/* A switch port's ECN marking, on the tc egress of the port's veth, ahead of the HTB that
 * makes the port's rate and the bfifo that holds its buffer. tc cannot show a BPF program
 * the qdisc's backlog, so the program keeps a phantom queue: it adds each frame's bytes and
 * drains at the port's rate (times a fraction, 1 by default) since the last frame, capped at
 * the buffer. Above K an ECT frame gets CE and a Not-ECT frame is dropped: the simulator's
 * red-ecn queue (RED with min = max = K on the instantaneous queue). Counters per port. */
#include "common.h"

struct port_config {
	__u64 drain_bytes_per_sec; /* 0: this port does not mark */
	__u64 k_bytes;
	__u64 limit_bytes;
};

struct port_state {
	struct bpf_spin_lock lock;
	__u64 queue_bytes; /* the phantom queue */
	__u64 last_ns;
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

SEC("classifier")
int port_egress(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct port_config *cfg = bpf_map_lookup_elem(&port_config, &ifindex);
	struct port_state *st = bpf_map_lookup_elem(&ports, &ifindex);
	if (!cfg || !st)
		return TC_ACT_OK;
	__u64 now = bpf_ktime_get_ns();
	__u64 len = skb->len;
	int above_k = 0;

	bpf_spin_lock(&st->lock);
	__u64 elapsed = now > st->last_ns ? now - st->last_ns : 0;
	/* bytes drained = elapsed ns x rate / 1e9, split to stay within 64 bits */
	__u64 drained = (elapsed / 1000) * (cfg->drain_bytes_per_sec / 1000) / 1000;
	st->queue_bytes = st->queue_bytes > drained ? st->queue_bytes - drained : 0;
	st->last_ns = now;
	if (cfg->drain_bytes_per_sec && st->queue_bytes >= cfg->k_bytes)
		above_k = 1;
	st->queue_bytes += len;
	if (st->queue_bytes > cfg->limit_bytes)
		st->queue_bytes = cfg->limit_bytes;
	bpf_spin_unlock(&st->lock);

	struct iphdr *ip = ipv4_of(skb);
	if (above_k && ip) {
		if (ecn_of(ip) == ECN_NOT_ECT) {
			__sync_fetch_and_add(&st->drops, 1);
			return TC_ACT_SHOT;
		}
		if (ecn_of(ip) != ECN_CE)
			set_ecn(ip, ECN_CE);
		__sync_fetch_and_add(&st->marks, 1);
	}
	__sync_fetch_and_add(&st->tx_packets, 1);
	__sync_fetch_and_add(&st->tx_bytes, len);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
