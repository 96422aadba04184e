// SPDX-License-Identifier: MIT
/* DCTCP (Alizadeh et al., SIGCOMM 2010; RFC 8257) as a BPF TCP congestion control, for
 * kernels built without the dctcp module. `tacc testbed` registers it under the name "dctcp"
 * (bpftool struct_ops register) so that the VMs' sockets select it as they would the module.
 *
 * Sender: alpha, the EWMA (gain g = 1/16) of the fraction of bytes acknowledged with ECE,
 * updated once per window of data; on congestion the window is cut to cwnd (1 - alpha/2);
 * growth is Reno's. Receiver: the CE state of arriving data is echoed exactly: when it
 * changes, a delayed ACK is sent at once with the old state, and ECE follows the new one.
 *
 * The window is set here (cong_control) rather than by the kernel's own PRR and Reno: on
 * the development machine's kernel (6.18), idle or loaded, a socket running this program
 * now and then enters CWR with an ssthresh that none of its hooks returned (a kernel text address's low
 * 32 bits, above TCP_INFINITE_SSTHRESH), and the kernel's PRR, scaling by it, set the window
 * to hundreds of millions of segments: the whole send buffer went out at once and the
 * bottleneck dropped thousands of packets. A value above TCP_INFINITE_SSTHRESH is never
 * legitimate, so it is repaired before any window is computed from it, and counted
 * (`repairs`). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define TCP_ECN_DEMAND_CWR 4
#define TCP_CONG_NEEDS_ECN 0x2
#define MAX_ALPHA 1024U /* alpha in units of 1/1024 */
#define G_SHIFT 4       /* g = 1/16 */
#define INFINITE_SSTHRESH 0x7fffffffU
/* tcp_input.c's ACK flags */
#define FLAG_DATA_ACKED 0x04
#define FLAG_SYN_ACKED 0x10
#define FLAG_DATA_SACKED 0x20
#define FLAG_SND_UNA_ADVANCED 0x400
#define FLAG_FORWARD_PROGRESS (FLAG_DATA_ACKED | FLAG_SYN_ACKED | FLAG_DATA_SACKED)
#define DEFAULT_REORDERING 3 /* net.ipv4.tcp_reordering's default */

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
	__u32 prr_high_seq; /* the reduction that prr_delivered counts for */
	__u32 prr_delivered;
};

/* Impossible ssthresh or cwnd values repaired, over every socket (read by the testbed). */
__u64 repairs = 0;

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

/* cwnd (1 - alpha / 2), at least 2. */
static __always_inline __u32 cut(__u32 cwnd, __u32 alpha)
{
	__u32 c = (__u32)(((__u64)cwnd * alpha) >> 11);

	return cwnd - c > 2 ? cwnd - c : 2;
}

SEC("struct_ops")
__u32 BPF_PROG(tacc_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = state(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	return cut(tp->snd_cwnd, ca->alpha);
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

static __always_inline __u32 in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/* Proportional Rate Reduction (RFC 6937, PRR-SSRB), as the kernel's tcp_cwnd_reduction,
 * with the delivered count kept here since that function no longer runs. */
static __always_inline void reduce(struct tcp_sock *tp, struct dctcp *ca,
				   const struct rate_sample *rs, int flag)
{
	int acked_sacked = rs->acked_sacked;
	int sndcnt;

	if (ca->prr_high_seq != tp->high_seq) {
		ca->prr_high_seq = tp->high_seq;
		ca->prr_delivered = 0;
	}
	if (acked_sacked <= 0 || !tp->prior_cwnd)
		return;
	ca->prr_delivered += acked_sacked;
	int delta = (int)tp->snd_ssthresh - (int)in_flight(tp);
	if (delta < 0) {
		__u64 dividend = (__u64)tp->snd_ssthresh * ca->prr_delivered + tp->prior_cwnd - 1;
		sndcnt = (int)(dividend / tp->prior_cwnd) - (int)tp->prr_out;
	} else {
		sndcnt = (int)ca->prr_delivered - (int)tp->prr_out;
		if (sndcnt < acked_sacked)
			sndcnt = acked_sacked;
		if ((flag & FLAG_SND_UNA_ADVANCED) && !rs->losses)
			sndcnt++;
		if (sndcnt > delta)
			sndcnt = delta;
	}
	/* a fast retransmit goes out on entering recovery */
	if (sndcnt < (tp->prr_out ? 0 : 1))
		sndcnt = tp->prr_out ? 0 : 1;
	tp->snd_cwnd = in_flight(tp) + sndcnt;
}

SEC("struct_ops")
void BPF_PROG(tacc_dctcp_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp(sk);
	struct dctcp *ca = state(sk);

	if (tp->snd_ssthresh > INFINITE_SSTHRESH) {
		tp->snd_ssthresh = cut(tp->prior_cwnd <= INFINITE_SSTHRESH ? tp->prior_cwnd
									  : ca->loss_cwnd,
				       ca->alpha);
		__sync_fetch_and_add(&repairs, 1);
	}
	if (tp->snd_cwnd > INFINITE_SSTHRESH) {
		tp->snd_cwnd = tp->snd_ssthresh;
		__sync_fetch_and_add(&repairs, 1);
	}
	if ((1 << icsk->icsk_ca_state) & ((1 << TCP_CA_CWR) | (1 << TCP_CA_Recovery))) {
		reduce(tp, ca, rs, flag);
		return;
	}
	/* Reno's growth, on in-order delivery unless the path reorders (tcp_may_raise_cwnd) */
	if (flag & (tp->reordering > DEFAULT_REORDERING ? FLAG_FORWARD_PROGRESS : FLAG_DATA_ACKED))
		tcp_reno_cong_avoid(sk, ack, rs->acked_sacked);
}

SEC(".struct_ops")
struct tcp_congestion_ops tacc_dctcp = {
	.init = (void *)tacc_dctcp_init,
	.ssthresh = (void *)tacc_dctcp_ssthresh,
	.in_ack_event = (void *)tacc_dctcp_in_ack_event,
	.set_state = (void *)tacc_dctcp_set_state,
	.cwnd_event = (void *)tacc_dctcp_cwnd_event,
	.undo_cwnd = (void *)tacc_dctcp_undo_cwnd,
	.cong_control = (void *)tacc_dctcp_cong_control,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "dctcp",
};

char LICENSE[] SEC("license") = "Dual MIT/GPL";
