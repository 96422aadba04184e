// SPDX-License-Identifier: MIT
/* DCTCP (Alizadeh et al., SIGCOMM 2010; RFC 8257) as a BPF TCP congestion control, for
 * kernels built without the dctcp module. `tacc testbed` registers it under the name "dctcp"
 * (bpftool struct_ops register) so that the VMs' sockets select it as they would the module.
 *
 * Sender: alpha, the EWMA (gain g = 1/16) of the fraction of bytes acknowledged with ECE,
 * updated once per window of data; on congestion the window is cut to cwnd (1 - alpha/2);
 * growth is Reno's. Receiver: the CE state of arriving data is echoed exactly: when it
 * changes, a delayed ACK is sent at once with the old state, and ECE follows the new one. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define TCP_ECN_DEMAND_CWR 4
#define TCP_CONG_NEEDS_ECN 0x2
#define MAX_ALPHA 1024U /* alpha in units of 1/1024 */
#define G_SHIFT 4       /* g = 1/16 */

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

/* Lives in the socket's icsk_ca_priv. */
struct dctcp {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 next_seq;
	__u32 alpha;
	__u32 loss_cwnd;
	__u32 prior_rcv_nxt;
	__u32 ce_state;
};

static __always_inline struct dctcp *state(struct sock *sk)
{
	return (struct dctcp *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct tcp_sock *tcp(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

/* A new observation window starts at the next byte to send. */
static __always_inline void new_window(struct tcp_sock *tp, struct dctcp *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops")
void BPF_PROG(tacc_dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = state(sk);

	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->alpha = MAX_ALPHA; /* start cautious: the first cut halves */
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	new_window(tp, ca);
}

SEC("struct_ops")
__u32 BPF_PROG(tacc_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = state(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 cut = (__u32)(((__u64)cwnd * ca->alpha) >> 11); /* cwnd x alpha / 2 */

	ca->loss_cwnd = cwnd;
	return cwnd - cut > 2 ? cwnd - cut : 2;
}

SEC("struct_ops")
void BPF_PROG(tacc_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = state(sk);

	if ((__s32)(tp->snd_una - ca->next_seq) < 0)
		return; /* the window is not over yet */
	__u32 delivered = tp->delivered - ca->old_delivered;
	__u32 marked = tp->delivered_ce - ca->old_delivered_ce;
	__u32 alpha = ca->alpha;
	__u32 decay = alpha >> G_SHIFT;
	/* alpha <- (1 - g) alpha + g F; below 1/g the decay takes what is left, so that alpha
	 * reaches 0 on a path without marks. */
	alpha -= decay ? decay : alpha;
	if (marked && delivered) {
		__u32 add = (marked << (10 - G_SHIFT)) / delivered;
		alpha = alpha + add < MAX_ALPHA ? alpha + add : MAX_ALPHA;
	}
	ca->alpha = alpha;
	new_window(tp, ca);
}

static __always_inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = state(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = tp->snd_cwnd >> 1 > 2 ? tp->snd_cwnd >> 1 : 2;
}

SEC("struct_ops")
void BPF_PROG(tacc_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;

	if (new_state == TCP_CA_Recovery && new_state != icsk->icsk_ca_state)
		react_to_loss(sk);
}

static __always_inline void echo_ce(struct tcp_sock *tp, __u32 ce_state)
{
	if (ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

SEC("struct_ops")
void BPF_PROG(tacc_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = state(sk);

	if (ev == CA_EVENT_LOSS) {
		react_to_loss(sk);
		return;
	}
	if (ev != CA_EVENT_ECN_IS_CE && ev != CA_EVENT_ECN_NO_CE)
		return;
	__u32 ce_state = ev == CA_EVENT_ECN_IS_CE;
	if (ca->ce_state != ce_state) {
		/* The CE state changed: a delayed ACK goes out now, with the old state. */
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			echo_ce(tp, ca->ce_state);
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = ce_state;
	echo_ce(tp, ce_state);
}

SEC("struct_ops")
__u32 BPF_PROG(tacc_dctcp_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = state(sk);

	return tp->snd_cwnd > ca->loss_cwnd ? tp->snd_cwnd : ca->loss_cwnd;
}

SEC("struct_ops")
void BPF_PROG(tacc_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC(".struct_ops")
struct tcp_congestion_ops tacc_dctcp = {
	.init = (void *)tacc_dctcp_init,
	.ssthresh = (void *)tacc_dctcp_ssthresh,
	.in_ack_event = (void *)tacc_dctcp_in_ack_event,
	.set_state = (void *)tacc_dctcp_set_state,
	.cwnd_event = (void *)tacc_dctcp_cwnd_event,
	.undo_cwnd = (void *)tacc_dctcp_undo_cwnd,
	.cong_avoid = (void *)tacc_dctcp_cong_avoid,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "dctcp",
};

char LICENSE[] SEC("license") = "Dual MIT/GPL";
