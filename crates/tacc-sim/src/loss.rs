//! Random loss on links: a port's packets are lost on the wire after they were sent (they
//! used the link's time), independently (Bernoulli) or in bursts (Gilbert-Elliott), drawn
//! from the run's one random number generator, so that a (scenario, seed) pair gives the
//! same losses. A port without a loss model draws nothing: runs without loss are unchanged.

use crate::rng::Rng;
use crate::scenario::LossCfg;

#[derive(Clone, Debug, PartialEq)]
pub enum LinkLoss {
    /// Each packet is lost with probability `rate`.
    Bernoulli { rate: f64 },
    /// A two-state Markov chain stepped once per packet (netem's `gemodel`): from good to bad
    /// with probability `p`, from bad to good with `r`; a packet is lost with `loss_good` in
    /// the good state and `loss_bad` in the bad one.
    GilbertElliott {
        p: f64,
        r: f64,
        loss_good: f64,
        loss_bad: f64,
        bad: bool,
    },
}

impl LinkLoss {
    pub fn new(cfg: &LossCfg) -> LinkLoss {
        match *cfg {
            LossCfg::Bernoulli { rate, .. } => LinkLoss::Bernoulli { rate },
            LossCfg::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
                ..
            } => LinkLoss::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
                bad: false,
            },
        }
    }

    /// Whether the next packet on the link is lost.
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        match self {
            LinkLoss::Bernoulli { rate } => rng.uniform() < *rate,
            LinkLoss::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
                bad,
            } => {
                let leave = if *bad { *r } else { *p };
                if rng.uniform() < leave {
                    *bad = !*bad;
                }
                let q = if *bad { *loss_bad } else { *loss_good };
                q > 0.0 && rng.uniform() < q
            }
        }
    }

    /// The long-run fraction of packets lost.
    pub fn mean_rate(&self) -> f64 {
        match *self {
            LinkLoss::Bernoulli { rate } => rate,
            LinkLoss::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
                ..
            } => (r * loss_good + p * loss_bad) / (p + r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(loss: &mut LinkLoss, n: usize) -> Vec<bool> {
        let mut rng = Rng::new(3);
        (0..n).map(|_| loss.lose(&mut rng)).collect()
    }

    /// Five standard errors of a fraction estimated from `n` draws.
    fn five_sigma(q: f64, n: usize) -> f64 {
        5.0 * (q * (1.0 - q) / n as f64).sqrt()
    }

    #[test]
    fn bernoulli_loses_its_rate() {
        let n = 400_000;
        let lost = run(&mut LinkLoss::Bernoulli { rate: 0.01 }, n);
        let q = lost.iter().filter(|&&l| l).count() as f64 / n as f64;
        assert!((q - 0.01).abs() < five_sigma(0.01, n), "{q}");
    }

    #[test]
    fn gilbert_elliott_loses_its_stationary_rate_in_bursts_of_mean_one_over_r() {
        // Bad state: every packet lost; good: none. Stationary loss p / (p + r) = 1%, mean
        // burst 1 / r = 4 packets.
        let mut ge = LinkLoss::GilbertElliott {
            p: 0.0025 / 0.99,
            r: 0.25,
            loss_good: 0.0,
            loss_bad: 1.0,
            bad: false,
        };
        let expected = ge.mean_rate();
        assert!((expected - 0.01).abs() < 1e-9);
        let n = 2_000_000;
        let lost = run(&mut ge, n);
        let q = lost.iter().filter(|&&l| l).count() as f64 / n as f64;
        // Losses come in runs, so the fraction is noisier than independent draws: allow the
        // five sigma of the number of bursts (one per mean burst of packets).
        assert!(
            (q - expected).abs() < five_sigma(expected, n) * 4.0_f64.sqrt(),
            "{q}"
        );
        let bursts = lost.windows(2).filter(|w| !w[0] && w[1]).count();
        let mean_burst = lost.iter().filter(|&&l| l).count() as f64 / bursts as f64;
        // Burst lengths are geometric with mean 4 and standard deviation sqrt(12).
        let sigma = (12.0 / bursts as f64).sqrt();
        assert!(
            (mean_burst - 4.0).abs() < 5.0 * sigma,
            "{mean_burst} over {bursts} bursts"
        );
    }
}
