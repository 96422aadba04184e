//! Values with units as they appear in scenario files: "1Gbps", "25us", "100pkt", "2MB".
//!
//! Each type deserializes from a string and reports what it expected when the string is wrong.

use serde::{Deserialize, Deserializer};
use std::fmt;

/// Time in integer nanoseconds since the start of a run (or any fixed epoch).
pub type Nanos = u64;

/// Nanoseconds per second.
pub const NS_PER_SEC: u64 = 1_000_000_000;

/// Nanoseconds to serialize `len` bytes at `rate_bps`, rounded up.
pub fn ser_ns(rate_bps: u64, len: u32) -> u64 {
    ((len as u128 * 8_000_000_000u128).div_ceil(rate_bps as u128)) as u64
}

fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|(_, c)| {
            !(c.is_ascii_digit() || *c == '.' || *c == 'e' || *c == 'E' || *c == '-' || *c == '+')
        })
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    // "e" inside a unit (none of ours start with e) would be ambiguous; numbers come first.
    let (num, unit) = s.split_at(end);
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() {
        return None;
    }
    Some((v, unit.trim()))
}

fn scaled(v: f64, mult: f64) -> Option<u64> {
    let x = v * mult;
    if x < 0.0 || !x.is_finite() || x > u64::MAX as f64 / 2.0 {
        return None;
    }
    Some(x.round() as u64)
}

/// A link or source rate in bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(pub u64);

impl Rate {
    pub fn parse(s: &str) -> Option<Rate> {
        let (v, unit) = split_number(s)?;
        let mult = match unit {
            "bps" => 1.0,
            "Kbps" | "kbps" => 1e3,
            "Mbps" => 1e6,
            "Gbps" => 1e9,
            "Tbps" => 1e12,
            _ => return None,
        };
        scaled(v, mult).map(Rate)
    }
    pub fn bps(self) -> u64 {
        self.0
    }
}

/// A duration or point in time in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Duration(pub u64);

impl Duration {
    pub fn parse(s: &str) -> Option<Duration> {
        let (v, unit) = split_number(s)?;
        let mult = match unit {
            "ns" => 1.0,
            "us" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            _ => return None,
        };
        scaled(v, mult).map(Duration)
    }
    pub fn ns(self) -> u64 {
        self.0
    }
}

/// An amount of data in bytes ("1460B", "64KB", "2MB", "1GB"; powers of 1000, "KiB"/"MiB" for 1024).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl Bytes {
    pub fn parse(s: &str) -> Option<Bytes> {
        let (v, unit) = split_number(s)?;
        let mult = match unit {
            "B" => 1.0,
            "KB" | "kB" => 1e3,
            "MB" => 1e6,
            "GB" => 1e9,
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            "GiB" => 1024.0 * 1024.0 * 1024.0,
            _ => return None,
        };
        scaled(v, mult).map(Bytes)
    }
}

/// A buffer size or threshold in packets ("100pkt") or bytes ("125KB").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Packets(u64),
    Bytes(u64),
}

impl Size {
    pub fn parse(s: &str) -> Option<Size> {
        let t = s.trim();
        if let Some(n) = t.strip_suffix("pkt").or_else(|| t.strip_suffix("pkts")) {
            let n: u64 = n.trim().parse().ok()?;
            return Some(Size::Packets(n));
        }
        Bytes::parse(t).map(|b| Size::Bytes(b.0))
    }
    pub fn is_zero(self) -> bool {
        self.count() == 0
    }
    /// The number in its own unit (packets or bytes).
    pub fn count(self) -> u64 {
        match self {
            Size::Packets(n) | Size::Bytes(n) => n,
        }
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Size::Packets(n) => write!(f, "{n}pkt"),
            Size::Bytes(n) => write!(f, "{n}B"),
        }
    }
}

/// `value` in the largest of `units` (ascending multiples) that holds it exactly, as a
/// scenario would write it: what is serialized reads back to the same value.
fn with_unit(value: u64, units: &[(&str, u64)]) -> String {
    let (name, mult) = units
        .iter()
        .rev()
        .find(|(_, m)| value.is_multiple_of(*m) && value >= *m)
        .unwrap_or(&units[0]);
    format!("{}{name}", value / mult)
}

impl serde::Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let units = [
            ("bps", 1),
            ("Kbps", 1_000),
            ("Mbps", 1_000_000),
            ("Gbps", 1_000_000_000),
        ];
        s.serialize_str(&with_unit(self.0, &units))
    }
}

impl serde::Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let units = [
            ("ns", 1),
            ("us", 1_000),
            ("ms", 1_000_000),
            ("s", 1_000_000_000),
        ];
        s.serialize_str(&with_unit(self.0, &units))
    }
}

macro_rules! deserialize_from_str {
    ($t:ty, $what:expr) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d).map_err(|e| {
                    // A missing key keeps serde's own message; a wrong type says what was expected.
                    if e.to_string().starts_with("missing field") {
                        e
                    } else {
                        serde::de::Error::custom(concat!("expected ", $what))
                    }
                })?;
                <$t>::parse(&s).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!("expected ", $what, ", got {:?}"), s))
                })
            }
        }
    };
}

deserialize_from_str!(Rate, "a rate such as \"1Gbps\" or \"500Mbps\"");
deserialize_from_str!(Duration, "a duration such as \"25us\", \"5ms\" or \"30s\"");
deserialize_from_str!(Bytes, "a size such as \"1460B\", \"64KB\" or \"2MB\"");
deserialize_from_str!(
    Size,
    "a size in packets or bytes such as \"100pkt\" or \"125KB\""
);

/// `#[serde(with = "as_duration")]`: a [`Nanos`] field written as a duration ("25us").
pub mod as_duration {
    use super::{Duration, Nanos};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Nanos, s: S) -> Result<S::Ok, S::Error> {
        Duration(*v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Nanos, D::Error> {
        Duration::deserialize(d).map(|d| d.0)
    }
}

/// `#[serde(with = "as_rate")]`: a bit/s field written as a rate ("1Gbps").
pub mod as_rate {
    use super::Rate;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        Rate(*v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        Rate::deserialize(d).map(|r| r.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_serialize_in_their_largest_exact_unit_and_read_back() {
        fn text(v: impl serde::Serialize) -> String {
            serde_json::to_string(&v).unwrap()
        }
        assert_eq!(text(Rate(500_000_000)), "\"500Mbps\"");
        assert_eq!(text(Rate(1_500_000)), "\"1500Kbps\"");
        assert_eq!(text(Duration(25_000)), "\"25us\"");
        assert_eq!(text(Duration(1_000_000_001)), "\"1000000001ns\"");
        assert_eq!(text(Duration(0)), "\"0ns\"");
        for r in [0, 7, 1_000, 2_500_000, 40_000_000_000] {
            let back: Rate =
                serde_json::from_str(&serde_json::to_string(&Rate(r)).unwrap()).unwrap();
            assert_eq!(back, Rate(r));
        }
        for d in [0, 1, 999, 25_000, 200_000_000, 3_000_000_000] {
            let json = serde_json::to_string(&Duration(d)).unwrap();
            assert_eq!(
                serde_json::from_str::<Duration>(&json).unwrap(),
                Duration(d)
            );
        }
    }

    #[test]
    fn parses_each_unit() {
        assert_eq!(Rate::parse("1Gbps"), Some(Rate(1_000_000_000)));
        assert_eq!(Rate::parse("2.5 Mbps"), Some(Rate(2_500_000)));
        assert_eq!(Duration::parse("25us"), Some(Duration(25_000)));
        assert_eq!(Duration::parse("0.98s"), Some(Duration(980_000_000)));
        assert_eq!(Bytes::parse("10KB"), Some(Bytes(10_000)));
        assert_eq!(Bytes::parse("64KiB"), Some(Bytes(65_536)));
        assert_eq!(Size::parse("100pkt"), Some(Size::Packets(100)));
        assert_eq!(Size::parse("125KB"), Some(Size::Bytes(125_000)));
    }

    #[test]
    fn rejects_missing_or_unknown_units_and_negatives() {
        assert_eq!(Rate::parse("1000"), None);
        assert_eq!(Rate::parse("fast"), None);
        assert_eq!(Duration::parse("5 parsecs"), None);
        assert_eq!(Duration::parse("-1s"), None);
        assert_eq!(Size::parse("-3pkt"), None);
        assert_eq!(Bytes::parse("1e400B"), None);
    }
}
