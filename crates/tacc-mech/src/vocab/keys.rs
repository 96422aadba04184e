//! What a scenario table is to the crate: its keys, each declared with its doc, unit, default
//! and range ([`KeyDoc`], what `tacc keys` prints and docs/scenario-keys.md lists); for a
//! mechanism kind, the problems its checks find and the [`Mechanism`] trait by which the table
//! becomes the kind's roles.

use crate::vocab::headers::PacketHeaders;
use crate::vocab::roles::{Fabric, Instance};
use crate::vocab::units::{Duration, Nanos};

/// Declares a kind's table: one struct that serde reads (unknown keys refused, omitted keys
/// at their defaults) and the kind's state machines take. Each field is written with its
/// default, `pub key: Type = default,`, the default read from the key's [`KeyDoc`] where the
/// key is declared; `#[serde(skip)]` marks a parameter that is not a key.
macro_rules! table {
    ($(#[$m:meta])* pub struct $name:ident {
        $($(#[$fm:meta])* pub $f:ident: $t:ty = $d:expr,)*
    }) => {
        $(#[$m])*
        #[derive(serde::Deserialize, serde::Serialize, Debug, Clone, PartialEq)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($f: $d,)* }
            }
        }
    };
}
pub(crate) use table;

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
    /// (every kind's `Default` reads its keys' defaults, and the registry's tests read every
    /// kind's empty table), so a malformed one fails there.
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

/// A kind's configuration as a table: one struct, read by serde (its `Default` is the
/// declared defaults), that the kind's state machines take as it is.
pub trait Table {
    /// Every key of the table (a test checks them against the struct's fields).
    fn keys() -> Vec<KeyDoc>;

    /// Records every problem with the values read (ranges, VM names, keys that exclude each
    /// other); `vm_address` resolves VM names as the fabric will.
    fn check_values(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>);

    /// Every problem with the table.
    fn check(&self, vm_address: &dyn Fn(&str) -> Option<u32>) -> Vec<Problem> {
        let mut ck = Checks::default();
        self.check_values(&mut ck, vm_address);
        ck.problems
    }
}

/// What every kind does with its table.
pub trait Mechanism: Table {
    /// The mechanism's roles in `fabric`. Call only on a table without problems.
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P>;
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

    /// A time key in its declared range ("> 0" or ">= X"; any time where none is declared).
    pub fn time(&mut self, k: &KeyDoc, x: Nanos) {
        if k.range.is_empty() {
            return;
        }
        let floor = k.floor();
        if x == 0 {
            self.problem(k.key, "must be greater than zero");
        } else if x < floor {
            self.problem(
                k.key,
                format!(
                    "must be at least {}us (got {x}ns): a shorter period only makes the run crawl",
                    floor / 1000
                ),
            );
        }
    }

    /// A fraction in [0, 1].
    pub fn fraction(&mut self, k: &KeyDoc, x: f64) {
        if !(x.is_finite() && (0.0..=1.0).contains(&x)) {
            self.problem(
                k.key,
                format!("expected a fraction between 0 and 1, got {x}"),
            );
        }
    }
}
