//! What a scenario table is to the crate: its keys, each declared with its doc, unit, default
//! and range ([`KeyDoc`], what `tacc keys` prints and docs/scenario-keys.md lists); for a
//! mechanism kind, the problems its checks find and the [`Mechanism`] trait by which the table
//! becomes the kind's roles.

use crate::vocab::headers::PacketHeaders;
use crate::vocab::roles::{Fabric, Instance};
use crate::vocab::units::{Duration, Nanos};

/// One key of a table, documented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyDoc {
    /// The key as a file writes it.
    pub key: &'static str,
    /// What it sets, in a sentence or two (the papers' value and its source where it has one).
    pub doc: &'static str,
    /// What its value is: "time" ("25us"), "rate" ("1Gbps"), "size" ("100pkt" or "150KB"),
    /// "bytes" ("64KB"), "fraction", "probability", "integer", "bool", "string", "name",
    /// "names" (a list), "table".
    pub unit: &'static str,
    /// What an omitted key is, as a file would write it; "required" where it must be given.
    pub default: &'static str,
    /// The values accepted beyond the unit's own form ("> 0", "0..1", `"drop" or "queue"`);
    /// empty where any value of the unit is.
    pub range: &'static str,
}

/// One table of a scenario file, or one variant of a table whose tag selects its keys
/// (`[topology] kind = "star"`, `[mechanism] kind = "sicc"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableDoc {
    /// The table's path: "tcp", "flows", "topology.links", "mechanism".
    pub table: &'static str,
    /// The tag key and its value selecting this variant (`("kind", "sicc")`).
    pub tag: Option<(&'static str, &'static str)>,
    /// The table is an array of tables (`[[flows]]`).
    pub array: bool,
    pub doc: &'static str,
    pub keys: Vec<KeyDoc>,
}

impl KeyDoc {
    /// The declared default as a time. Declarations are read by every check of an omitted key
    /// (the registry's tests resolve every kind's empty table), so a malformed one fails there.
    pub fn default_time(&self) -> Nanos {
        Duration::parse(self.default)
            .unwrap_or_else(|| {
                panic!(
                    "{}: declared default {:?} is no time",
                    self.key, self.default
                )
            })
            .0
    }

    /// The smallest time the declared range accepts: "> 0" or ">= X".
    pub fn floor(&self) -> Nanos {
        if self.range == "> 0" {
            return 1;
        }
        self.range
            .strip_prefix(">= ")
            .and_then(Duration::parse)
            .unwrap_or_else(|| panic!("{}: declared range {:?} is no floor", self.key, self.range))
            .0
    }

    pub fn default_number(&self) -> f64 {
        self.default.parse().unwrap_or_else(|_| {
            panic!(
                "{}: declared default {:?} is no number",
                self.key, self.default
            )
        })
    }

    pub fn default_flag(&self) -> bool {
        self.default.parse().unwrap_or_else(|_| {
            panic!(
                "{}: declared default {:?} is no bool",
                self.key, self.default
            )
        })
    }

    /// The quoted words of the declared range (`"drop" or "queue"`), the default first.
    pub fn choices(&self) -> Vec<&'static str> {
        let choices: Vec<&'static str> = self.range.split('"').skip(1).step_by(2).collect();
        assert_eq!(
            Some(self.default.trim_matches('"')),
            choices.first().copied(),
            "{}: the declared default is the first choice",
            self.key
        );
        choices
    }
}

impl TableDoc {
    /// The name `tacc keys` takes: the table, then the tag's value ("mechanism.sicc").
    pub fn name(&self) -> String {
        match self.tag {
            Some((_, v)) => format!("{}.{v}", self.table),
            None => self.table.to_string(),
        }
    }
}

/// A problem with one key of the `[mechanism]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The key, e.g. "mechanism.interval" or `mechanism.vms[2]`.
    pub key: String,
    /// What was expected.
    pub message: String,
}

/// What every kind does with its table.
pub trait Mechanism {
    /// What the table resolves to: the state machines' parameters.
    type Params;

    /// Every key of the kind's table (a test checks them against the struct's fields).
    fn keys() -> Vec<KeyDoc>;

    /// Turns the table into parameters, recording every problem in `ck`; `vm_address`
    /// resolves VM names as the fabric will.
    fn resolve(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params;

    /// The mechanism's roles in `fabric`.
    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        params: Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P>;

    /// Every problem with the table.
    fn check(&self, vm_address: &dyn Fn(&str) -> Option<u32>) -> Vec<Problem> {
        let mut ck = Checks::default();
        self.resolve(&mut ck, vm_address);
        ck.problems
    }

    /// The mechanism's roles in `fabric`. Call only on a table without problems.
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P> {
        let params = self.resolve(&mut Checks::default(), &|n| fabric.vm_address(n));
        self.instantiate(params, fabric)
    }
}

/// `latency`, the key of every kind with a controller.
pub const CONTROL_LATENCY: KeyDoc = KeyDoc {
    key: "latency",
    unit: "time",
    default: "0s",
    range: "",
    doc: "One-way latency of the out-of-band control channel.",
};

/// Shortest period of a host or switch timer: below it a run only crawls.
pub const MIN_TIMER: Nanos = 1_000;
/// Shortest controller polling interval: no controller reads counters faster, and below it a
/// run spends its time in polls (a 1 ns interval is 30 M polls in 30 ms).
pub const MIN_POLL: Nanos = 10_000;

/// Collects the problems found while turning a table's values into a state machine's config.
#[derive(Default)]
pub struct Checks {
    pub problems: Vec<Problem>,
}

impl Checks {
    pub fn problem(&mut self, key: &str, message: impl Into<String>) {
        self.problems.push(Problem {
            key: format!("mechanism.{key}"),
            message: message.into(),
        });
    }

    /// A time key as declared: its default where omitted, its range ("> 0" or ">= X") checked.
    pub fn time(&mut self, k: &KeyDoc, v: Option<Duration>) -> Nanos {
        if k.range.is_empty() {
            return v.map_or_else(|| k.default_time(), |d| d.0);
        }
        self.period(k.key, v, k.default_time(), k.floor())
    }

    /// A fraction key as declared: its default where omitted, in [0, 1].
    pub fn fraction(&mut self, k: &KeyDoc, v: Option<f64>) -> f64 {
        self.fraction_or(k.key, v, k.default_number())
    }

    /// A boolean key as declared: its default where omitted.
    pub fn flag(&mut self, k: &KeyDoc, v: Option<bool>) -> bool {
        v.unwrap_or_else(|| k.default_flag())
    }

    /// A key with declared choices: the position of the value among them (the default is the
    /// first).
    pub fn choice(&mut self, k: &KeyDoc, v: &Option<String>) -> usize {
        self.choice_of(k.key, v, &k.choices())
    }

    /// A fraction in [0, 1], or `default` (a key whose default is not declared as a value).
    pub fn fraction_or(&mut self, key: &str, v: Option<f64>, default: f64) -> f64 {
        let x = v.unwrap_or(default);
        if !(x.is_finite() && (0.0..=1.0).contains(&x)) {
            self.problem(key, format!("expected a fraction between 0 and 1, got {x}"));
        }
        x
    }

    /// A period of at least `floor` ns (and more than zero), or `default`.
    pub fn period(
        &mut self,
        key: &str,
        v: Option<Duration>,
        default: Nanos,
        floor: Nanos,
    ) -> Nanos {
        let x = v.map(|d| d.0).unwrap_or(default);
        if x == 0 {
            self.problem(key, "must be greater than zero");
        } else if x < floor {
            self.problem(
                key,
                format!(
                    "must be at least {}us (got {x}ns): a shorter period only makes the run crawl",
                    floor / 1000
                ),
            );
        }
        x
    }

    /// A time of more than zero, or `default` (a key whose default is not declared as a value).
    pub fn positive(&mut self, key: &str, v: Option<Duration>, default: Nanos) -> Nanos {
        self.period(key, v, default, 1)
    }

    /// One of `choices` (the first is the default), by position.
    fn choice_of(&mut self, key: &str, v: &Option<String>, choices: &[&str]) -> usize {
        let Some(v) = v else { return 0 };
        choices.iter().position(|c| c == v).unwrap_or_else(|| {
            let quoted: Vec<String> = choices.iter().map(|c| format!("{c:?}")).collect();
            let expected = match quoted.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            self.problem(key, format!("expected {expected}, got {v:?}"));
            0
        })
    }
}
