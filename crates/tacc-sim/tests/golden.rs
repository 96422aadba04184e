//! Whole-run regression: every shipped scenario, with each mechanism the reproduction runs it
//! with (shortened), must write exactly the result files recorded in `golden_digests.txt`
//! (summary.json without its wall time, and every CSV). A change of results is deliberate:
//! re-record with `TACC_BLESS=1 cargo test --test golden` and explain it in the commit.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// (scenario under python/tacc/scenarios, simulated time, --set overrides).
const CASES: &[(&str, &str, &[&str])] = &[
    ("default.toml", "10.5s", &[]),
    (
        "default.toml",
        "10.5s",
        &[
            r#"mechanism={kind="hygenicc",on_shortage="queue"}"#,
            "tcp.rcv_buf=29200B",
        ],
    ),
    (
        "default.toml",
        "10.5s",
        &[r#"mechanism={kind="hygenicc",on_shortage="drop",admission_control=true}"#],
    ),
    (
        "default.toml",
        "10.5s",
        &[r#"mechanism={kind="static-rate",rate="500Mbps",on_shortage="queue"}"#],
    ),
    (
        "papers/hygenicc_fig2-5.toml",
        "5.5s",
        &[r#"tcp.cc="dctcp""#],
    ),
    (
        "papers/hygenicc_fig2-5.toml",
        "5.5s",
        &[r#"mechanism={kind="hygenicc",on_shortage="queue"}"#],
    ),
    (
        "papers/sdngcc_fig1-6.toml",
        "10.5s",
        &[r#"mechanism={kind="sdn-gcc",interval="1ms",on_shortage="queue",clear_ce=true}"#],
    ),
    (
        "papers/sdngcc_fig1-6.toml",
        "10.5s",
        &[r#"mechanism={kind="sdn-gcc",interval="5ms",keying="destination"}"#],
    ),
    (
        "papers/sdngcc_fig1-6.toml",
        "10.5s",
        &[r#"mechanism={kind="sdn-gcc",keying="path",latency="50us"}"#],
    ),
    (
        "papers/sdngcc_fig1-6.toml",
        "10.5s",
        &[r#"mechanism={kind="static-rate",rate="250Mbps",on_shortage="queue"}"#],
    ),
    ("papers/sdngcc_fig8_testbed.toml", "10.3s", &[]),
    (
        "papers/sdngcc_fig8_testbed.toml",
        "10.3s",
        &[
            r#"mechanism={kind="sdn-gcc",interval="1ms",split="per-destination",cut_per_mark="5Mbps",on_shortage="queue",clear_ce=true}"#,
        ],
    ),
    ("papers/sicc_dumbbell.toml", "2s", &[]),
    (
        "papers/sicc_dumbbell.toml",
        "2s",
        &[r#"mechanism={kind="sicc",initial_window=2.0,evaluate_on_syn=true}"#],
    ),
    (
        "papers/sicc_dumbbell.toml",
        "2s",
        &[r#"mechanism={kind="sicc",interval="200us",latency="20us"}"#],
    ),
    (
        "papers/sicc_dumbbell.toml",
        "2s",
        &[r#"mechanism={kind="sicc",mode="switch"}"#],
    ),
    (
        "papers/sicc_dumbbell.toml",
        "2s",
        &[r#"mechanism={kind="rwndq"}"#],
    ),
    (
        "papers/sicc_tree144.toml",
        "0.5s",
        &[r#"mechanism={kind="sicc",initial_window=2.0,evaluate_on_syn=true}"#],
    ),
    (
        "papers/sicc_tree288.toml",
        "0.3s",
        &[r#"mechanism={kind="rwndq"}"#],
    ),
    (
        "papers/sdnecn_topo1.toml",
        "6s",
        &[r#"mechanism={kind="sdn-ecn"}"#],
    ),
    (
        "papers/sdnecn_topo2.toml",
        "6s",
        &[r#"mechanism={kind="sdn-ecn",interval="100ms",rule_timeout="50ms"}"#],
    ),
    (
        "papers/sdnecn_multihop.toml",
        "6s",
        &[r#"mechanism={kind="sdn-ecn"}"#],
    ),
];

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/tacc/scenarios")
}

fn fnv64(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h = (*h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// The digest of one run's result files; `wall_seconds` is the only field allowed to vary.
fn digest(file: &str, duration: &str, sets: &[&str]) -> String {
    let path = scenarios().join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut pairs = vec![("duration".to_string(), format!("\"{duration}\""))];
    for s in sets {
        let (k, v) = s.split_once('=').unwrap();
        pairs.push((k.to_string(), v.to_string()));
    }
    let p = tacc_sim::load(&text, file, &pairs, None).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!(
        "tacc-golden-{}-{}",
        std::process::id(),
        fnv_str(&format!("{file}{duration}{sets:?}"))
    ));
    tacc_sim::run_into(p, &dir, &mut |_, _| {}).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n == "summary.json" || n.ends_with(".csv"))
        .collect();
    names.sort();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for n in &names {
        let bytes = std::fs::read(dir.join(n)).unwrap();
        fnv64(&mut h, n.as_bytes());
        if n == "summary.json" {
            let text = String::from_utf8(bytes).unwrap();
            for line in text.lines().filter(|l| !l.contains("\"wall_seconds\"")) {
                fnv64(&mut h, line.as_bytes());
            }
        } else {
            fnv64(&mut h, &bytes);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    format!("{h:016x} {}", names.join(","))
}

fn fnv_str(s: &str) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    fnv64(&mut h, s.as_bytes());
    format!("{h:016x}")
}

#[test]
fn shipped_scenarios_give_the_recorded_results() {
    let record = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden_digests.txt");
    let mut got = String::new();
    for (file, duration, sets) in CASES {
        let d = digest(file, duration, sets);
        writeln!(got, "{file} {duration} {} -> {d}", sets.join(" ")).unwrap();
    }
    if std::env::var_os("TACC_BLESS").is_some() {
        std::fs::write(&record, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&record).unwrap();
    let diff: Vec<String> = want
        .lines()
        .zip(got.lines())
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("  recorded {w}\n  now      {g}"))
        .collect();
    assert!(
        diff.is_empty() && want.lines().count() == got.lines().count(),
        "results changed:\n{}",
        diff.join("\n")
    );
}
