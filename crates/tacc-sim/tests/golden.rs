//! Whole-run regression: every shipped scenario, with each mechanism the reproduction runs it
//! with (shortened), must write exactly the result files recorded in `golden_digests.txt`
//! (summary.json without its wall time, and every CSV), each file's digest recorded on its
//! own. A change of results is deliberate: the failure names each case and file that
//! changed; re-record with `TACC_BLESS=1 cargo test --test golden` and explain each in the
//! commit.

use std::collections::{BTreeMap, BTreeSet};
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

/// Each of one run's result files with its digest, by name; `wall_seconds` is the only field
/// allowed to vary.
fn digests(file: &str, duration: &str, sets: &[&str]) -> Vec<(String, String)> {
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
    tacc_sim::run_into(p, &dir, Default::default(), &mut |_, _| {}).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n == "summary.json" || n.ends_with(".csv"))
        .collect();
    names.sort();
    let files = names
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            if n == "summary.json" {
                let text = String::from_utf8(bytes).unwrap();
                // The run's wall time, and a partitioned run's at the barriers.
                for line in text.lines().filter(|l| !l.contains("wall_seconds\"")) {
                    fnv64(&mut h, line.as_bytes());
                }
            } else {
                fnv64(&mut h, &bytes);
            }
            (n, format!("{h:016x}"))
        })
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    files
}

/// A record's lines as case -> (file -> digest).
fn parse(record: &str) -> Vec<(String, BTreeMap<String, String>)> {
    record
        .lines()
        .map(|line| {
            let (case, files) = line.split_once(" -> ").expect("CASE -> FILE=DIGEST ...");
            let files = files
                .split_whitespace()
                .map(|f| {
                    let (name, digest) = f.split_once('=').expect("FILE=DIGEST");
                    (name.to_string(), digest.to_string())
                })
                .collect();
            (case.to_string(), files)
        })
        .collect()
}

/// What differs between the recorded cases and this run's, one line per case and file.
fn changes(
    want: &[(String, BTreeMap<String, String>)],
    got: &[(String, BTreeMap<String, String>)],
) -> Vec<String> {
    let mut out = Vec::new();
    let recorded: BTreeMap<_, _> = want.iter().map(|(c, f)| (c, f)).collect();
    for (case, files) in got {
        let Some(before) = recorded.get(case) else {
            out.push(format!("  {case}: not recorded"));
            continue;
        };
        for name in before.keys().chain(files.keys()).collect::<BTreeSet<_>>() {
            match (before.get(name), files.get(name)) {
                (Some(w), Some(g)) if w != g => {
                    out.push(format!("  {case}: {name} changed ({w} recorded, {g} now)"))
                }
                (Some(_), None) => out.push(format!("  {case}: {name} no longer written")),
                (None, Some(_)) => out.push(format!("  {case}: {name} written, not recorded")),
                _ => {}
            }
        }
    }
    let cases: BTreeSet<_> = got.iter().map(|(c, _)| c).collect();
    for (case, _) in want.iter().filter(|(c, _)| !cases.contains(c)) {
        out.push(format!("  {case}: recorded, no longer run"));
    }
    out
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
        let files: Vec<String> = digests(file, duration, sets)
            .into_iter()
            .map(|(name, d)| format!("{name}={d}"))
            .collect();
        let case = format!("{file} {duration} {}", sets.join(" "));
        writeln!(got, "{} -> {}", case.trim_end(), files.join(" ")).unwrap();
    }
    if std::env::var_os("TACC_BLESS").is_some() {
        std::fs::write(&record, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&record).unwrap();
    let diff = changes(&parse(&want), &parse(&got));
    assert!(diff.is_empty(), "results changed:\n{}", diff.join("\n"));
}

#[test]
fn a_change_is_named_by_case_and_file() {
    let want = parse("a.toml 1s -> flows.csv=01 summary.json=02\nb.toml 1s -> flows.csv=03");
    let got = parse("a.toml 1s -> flows.csv=01 rates.csv=05 summary.json=09\nc.toml 1s -> x=1");
    assert_eq!(
        changes(&want, &got),
        [
            "  a.toml 1s: rates.csv written, not recorded",
            "  a.toml 1s: summary.json changed (02 recorded, 09 now)",
            "  c.toml 1s: not recorded",
            "  b.toml 1s: recorded, no longer run",
        ]
    );
    assert!(changes(&want, &want).is_empty());
}
