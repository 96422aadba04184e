//! Output queues of switch ports and host NICs: drop-tail, RED-ECN on the instantaneous queue
//! (min = max = K) and classic averaged RED. Every drop and mark is counted with its reason.

use crate::rng::Rng;
use crate::scenario::QueueKind;
use crate::units::Size;
use tacc_mech::headers::Ecn;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Enqueue,
    /// Enqueued after setting CE.
    Mark,
    /// Dropped because the buffer is full.
    DropOverflow,
    /// Dropped by the AQM (RED on a non-ECT packet).
    DropAqm,
}

#[derive(Clone, Debug)]
pub struct RedParams {
    pub min_th: f64,
    pub max_th: f64,
    pub max_p: f64,
    pub weight: f64,
    pub ecn: bool,
    /// Transmission time of a 1500-byte packet on the port: RED's idle-time decay counts how
    /// many such packets could have left while the queue was empty.
    pub pkt_time_ns: u64,
}

/// `repr(C)`: what every admission reads (limit, threshold, kind) first, RED's state after.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Qdisc {
    pub limit: Size,
    /// red-ecn threshold.
    pub k: Size,
    pub kind: QueueKind,
    avg: f64,
    count: i64,
    idle_since: Option<u64>,
    pub red: RedParams,
}

fn exceeds(s: Size, pkts: u64, bytes: u64) -> bool {
    match s {
        Size::Packets(n) => pkts >= n,
        Size::Bytes(n) => bytes >= n,
    }
}

impl Qdisc {
    /// The bytes at its start that every admission reads.
    pub const HOT_BYTES: usize = std::mem::offset_of!(Qdisc, kind) + 1;

    pub fn new(kind: QueueKind, limit: Size, k: Size, red: RedParams) -> Qdisc {
        // RED's average never exceeds the buffer (each sample is a queue the buffer held), so
        // with its minimum threshold beyond the buffer it can never mark or drop early: it
        // admits as drop-tail, without keeping an average it would never act on (the SICC
        // papers' baseline queues are configured so).
        let kind = match kind {
            QueueKind::Red if (limit.count() as f64) < red.min_th => QueueKind::Droptail,
            kind => kind,
        };
        Qdisc {
            kind,
            limit,
            k,
            red,
            avg: 0.0,
            count: -1,
            idle_since: None,
        }
    }

    /// Decides the fate of a packet of `len` bytes arriving at a queue holding `pkts`/`bytes`.
    #[inline]
    pub fn admit(
        &mut self,
        now: u64,
        pkts: u64,
        bytes: u64,
        len: u32,
        ecn: Ecn,
        rng: &mut Rng,
    ) -> Verdict {
        let full = match self.limit {
            Size::Packets(n) => pkts + 1 > n,
            Size::Bytes(n) => bytes + len as u64 > n,
        };
        let verdict = match self.kind {
            QueueKind::Droptail => Verdict::Enqueue,
            QueueKind::RedEcn => {
                if exceeds(self.k, pkts, bytes) {
                    if ecn.is_ect() {
                        Verdict::Mark
                    } else {
                        Verdict::DropAqm
                    }
                } else {
                    Verdict::Enqueue
                }
            }
            QueueKind::Red => self.red_decide(now, pkts, bytes, len, ecn, rng),
        };
        if full {
            Verdict::DropOverflow
        } else {
            verdict
        }
    }

    fn red_decide(
        &mut self,
        now: u64,
        pkts: u64,
        bytes: u64,
        len: u32,
        ecn: Ecn,
        rng: &mut Rng,
    ) -> Verdict {
        let q = match self.limit {
            Size::Packets(_) => pkts as f64,
            Size::Bytes(_) => bytes as f64,
        };
        let w = self.red.weight;
        if let Some(t) = self.idle_since.take() {
            // Decay the average as if m small packets had departed while idle.
            let m = (now.saturating_sub(t)) as f64 / self.red.pkt_time_ns.max(1) as f64;
            self.avg *= (1.0 - w).powf(m);
        }
        self.avg = (1.0 - w) * self.avg + w * q;
        let r = &self.red;
        let congested = if self.avg < r.min_th {
            self.count = -1;
            false
        } else if self.avg >= r.max_th {
            self.count = 0;
            true
        } else {
            self.count += 1;
            let pb = r.max_p * (self.avg - r.min_th) / (r.max_th - r.min_th);
            let scale = match self.limit {
                Size::Packets(_) => 1.0,
                Size::Bytes(_) => len as f64 / 1500.0,
            };
            let pb = pb * scale;
            let pa = pb / (1.0 - self.count as f64 * pb).max(1e-9);
            if rng.uniform() < pa {
                self.count = 0;
                true
            } else {
                false
            }
        };
        match (congested, self.red.ecn && ecn.is_ect()) {
            (false, _) => Verdict::Enqueue,
            (true, true) => Verdict::Mark,
            (true, false) => {
                if pkts == 0 {
                    // The queue stays idle: keep decaying the average from now on.
                    self.idle_since = Some(now);
                }
                Verdict::DropAqm
            }
        }
    }

    /// Tells classic RED the queue went idle (for the average's decay).
    pub fn on_idle(&mut self, now: u64) {
        if self.kind == QueueKind::Red {
            self.idle_since = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn red_ecn(k: u64) -> Qdisc {
        Qdisc::new(
            QueueKind::RedEcn,
            Size::Packets(100),
            Size::Packets(k),
            RedParams {
                min_th: 0.0,
                max_th: 0.0,
                max_p: 0.0,
                weight: 0.0,
                ecn: true,
                pkt_time_ns: 1,
            },
        )
    }

    #[test]
    fn red_ecn_marks_ect_and_drops_not_ect_from_k_on() {
        let mut q = red_ecn(20);
        let mut rng = Rng::new(1);
        assert_eq!(
            q.admit(0, 19, 0, 1500, Ecn::Ect0, &mut rng),
            Verdict::Enqueue
        );
        assert_eq!(q.admit(0, 20, 0, 1500, Ecn::Ect0, &mut rng), Verdict::Mark);
        assert_eq!(
            q.admit(0, 20, 0, 1500, Ecn::NotEct, &mut rng),
            Verdict::DropAqm
        );
        assert_eq!(
            q.admit(0, 100, 0, 1500, Ecn::Ect0, &mut rng),
            Verdict::DropOverflow
        );
    }

    #[test]
    fn classic_red_marks_about_max_p_halfway_between_thresholds() {
        let p = RedParams {
            min_th: 10.0,
            max_th: 30.0,
            max_p: 0.1,
            weight: 1.0,
            ecn: true,
            pkt_time_ns: 1,
        };
        let mut q = Qdisc::new(QueueKind::Red, Size::Packets(100), Size::Packets(0), p);
        let mut rng = Rng::new(3);
        let n = 100_000;
        let marks = (0..n)
            .filter(|_| q.admit(0, 20, 0, 1500, Ecn::Ect0, &mut rng) == Verdict::Mark)
            .count();
        // pb = 0.05; with the count correction marks are uniform over 1/pb: rate ~ 2 pb / (1 + pb) ~ 0.095
        let rate = marks as f64 / n as f64;
        assert!((0.06..0.11).contains(&rate), "rate {rate}");
    }

    #[test]
    fn classic_red_with_its_minimum_threshold_beyond_the_buffer_admits_as_drop_tail() {
        // The average follows the queue at once (weight 1), and still cannot reach min_th.
        let p = RedParams {
            min_th: 101.0,
            max_th: 300.0,
            max_p: 1.0,
            weight: 1.0,
            ecn: true,
            pkt_time_ns: 1,
        };
        let mut q = Qdisc::new(QueueKind::Red, Size::Packets(100), Size::Packets(0), p);
        let mut rng = Rng::new(5);
        for pkts in 0..100 {
            for ecn in [Ecn::Ect0, Ecn::NotEct] {
                assert_eq!(q.admit(0, pkts, 0, 1500, ecn, &mut rng), Verdict::Enqueue);
            }
        }
        assert_eq!(
            q.admit(0, 100, 0, 1500, Ecn::Ect0, &mut rng),
            Verdict::DropOverflow
        );
        assert_eq!(rng.uniform(), Rng::new(5).uniform(), "no random draw");
    }

    #[test]
    fn classic_red_average_decays_over_idle_time_even_after_drops() {
        let p = RedParams {
            min_th: 20.0,
            max_th: 60.0,
            max_p: 0.1,
            weight: 0.002,
            ecn: false,
            pkt_time_ns: 120_000,
        };
        let mut q = Qdisc::new(QueueKind::Red, Size::Packets(1000), Size::Packets(0), p);
        let mut rng = Rng::new(1);
        // A long burst drives the average above max_th: arrivals are dropped.
        for _ in 0..3000 {
            q.admit(0, 150, 0, 1500, Ecn::NotEct, &mut rng);
        }
        q.on_idle(1_000_000);
        assert_eq!(
            q.admit(2_000_000, 0, 0, 1500, Ecn::NotEct, &mut rng),
            Verdict::DropAqm
        );
        // One second of idle time later (8333 packet times at 100 Mb/s) the average is ~0.
        assert_eq!(
            q.admit(1_002_000_000, 0, 0, 1500, Ecn::NotEct, &mut rng),
            Verdict::Enqueue
        );
    }
}
