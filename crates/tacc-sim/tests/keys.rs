//! The key declarations (`tacc keys`, docs/scenario-keys.md) against the parser: every table
//! declares exactly the keys its struct reads, every default written as a value is the one an
//! omitted key gets, and every range is what the checks accept at its edges.

use serde::de::DeserializeOwned;
use tacc_mech::vocab::keys::{KeyDoc, TableDoc};
use tacc_mech::MechanismConfig;
use tacc_sim::keys::{lookup, tables};
use tacc_sim::scenario::*;

const PROBE: &str = "zz_not_a_key";

const MINIMAL: &str = r#"
duration = "1ms"
[topology]
kind = "star"
senders = 1
receivers = 1
link_rate = "1Gbps"
link_delay = "1us"
"#;

/// The names serde lists after "expected" in an unknown-field error (none: no fields).
fn expected_fields(message: &str) -> Vec<String> {
    assert!(
        message.contains(PROBE),
        "not an unknown-field error: {message}"
    );
    if message.contains("there are no fields") {
        return Vec::new();
    }
    let tail = &message[message.find("expected").expect(message)..];
    tail.split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

fn probe<T: DeserializeOwned + std::fmt::Debug>(tag: Option<(&str, &str)>) -> Vec<String> {
    let mut text = String::new();
    if let Some((k, v)) = tag {
        text.push_str(&format!("{k} = \"{v}\"\n"));
    }
    text.push_str(&format!("{PROBE} = 0\n"));
    let err = toml::from_str::<T>(&text).expect_err("the probe key is refused");
    expected_fields(&err.to_string())
}

/// The keys the parser reads for one documented table.
fn parser_keys(t: &TableDoc) -> Vec<String> {
    match t.table {
        "" => {
            let parsed = parse(&format!("{PROBE} = 0\n{MINIMAL}"), "probe.toml", &[]);
            let e = parsed
                .errors
                .iter()
                .find(|e| e.field == PROBE)
                .expect("probe refused");
            expected_fields(&e.message)
        }
        "topology" => probe::<Topology>(t.tag),
        "topology.links" => probe::<LinkCfg>(None),
        "queue" => probe::<QueueCfg>(None),
        "queue.overrides" => probe::<PortQueueCfg>(None),
        "nic" => probe::<NicCfg>(None),
        "tcp" => probe::<TcpCfg>(None),
        "flows" => probe::<FlowCfg>(None),
        "incast" => probe::<IncastCfg>(None),
        "traffic" => probe::<TrafficCfg>(None),
        "rules" => probe::<RuleCfg>(None),
        "loss" => probe::<LossCfg>(t.tag),
        "mechanism" => probe::<MechanismConfig>(t.tag),
        "output" => probe::<OutputCfg>(None),
        other => panic!("a documented table the test cannot probe: {other:?}"),
    }
}

#[test]
fn every_table_declares_exactly_the_keys_its_struct_reads() {
    let all = tables();
    assert!(all.len() >= 24, "{} tables", all.len());
    for t in &all {
        let mut declared: Vec<String> = t.keys.iter().map(|k| k.key.to_string()).collect();
        let mut read = parser_keys(t);
        if let Some((tag, _)) = t.tag {
            read.retain(|k| k != tag);
        }
        declared.sort();
        read.sort();
        assert_eq!(
            declared,
            read,
            "table {:?}: declared keys against the parser's",
            t.name()
        );
        for k in &t.keys {
            assert!(
                !k.doc.is_empty() && !k.unit.is_empty() && !k.default.is_empty(),
                "{}.{}: doc, unit and default must be given: {k:?}",
                t.name(),
                k.key
            );
        }
        assert!(!t.doc.is_empty(), "table {:?} has no doc", t.name());
    }
}

/// A value of `unit` the parser accepts, for the keys a table requires.
fn sample(k: &KeyDoc) -> String {
    match k.unit {
        "time" => "\"1ms\"".into(),
        "rate" => "\"1Gbps\"".into(),
        "size" => "\"10pkt\"".into(),
        "bytes" => "\"1KB\"".into(),
        "integer" => "2".into(),
        "number" | "fraction" | "probability" => "0.5".into(),
        "bool" => "true".into(),
        "names" => "[\"h0\"]".into(),
        "list of tables" => "[]".into(),
        _ => "\"h0\"".into(),
    }
}

/// A documented default as a TOML value: "true", "2", "0.5" as written, "1ms" as a string.
fn as_toml(default: &str) -> String {
    match toml::from_str::<toml::Table>(&format!("x = {default}")) {
        Ok(_) => default.to_string(),
        Err(_) => format!("{default:?}"),
    }
}

/// Defaults written as a value: a TOML value or a value with a unit ("25us"), not "required",
/// "none", another key ("link_rate") or a sentence of how it is computed.
fn literal(k: &KeyDoc) -> bool {
    let d = k.default;
    let value = toml::from_str::<toml::Table>(&format!("x = {d}")).is_ok()
        || d.starts_with(|c: char| c.is_ascii_digit());
    value && !d.contains(' ') && !matches!(d, "required" | "none")
}

fn table_text(t: &TableDoc, extra: Option<&KeyDoc>) -> String {
    let mut text = String::new();
    if let Some((tag, v)) = t.tag {
        text.push_str(&format!("{tag} = \"{v}\"\n"));
    }
    for k in t.keys.iter().filter(|k| k.default == "required") {
        text.push_str(&format!("{} = {}\n", k.key, sample(k)));
    }
    if let Some(k) = extra {
        text.push_str(&format!("{} = {}\n", k.key, as_toml(k.default)));
    }
    text
}

/// The table as the parser reads it, printed (`None` where this table is not read alone).
fn read_alone(t: &TableDoc, text: &str) -> Option<Result<String, String>> {
    fn read<T: DeserializeOwned + std::fmt::Debug>(text: &str) -> Result<String, String> {
        toml::from_str::<T>(text)
            .map(|v| format!("{v:?}"))
            .map_err(|e| e.to_string())
    }
    Some(match t.table {
        "topology" => read::<Topology>(text),
        "topology.links" => read::<LinkCfg>(text),
        "queue" => read::<QueueCfg>(text),
        "queue.overrides" => read::<PortQueueCfg>(text),
        "nic" => read::<NicCfg>(text),
        "flows" => read::<FlowCfg>(text),
        "incast" => read::<IncastCfg>(text),
        "traffic" => read::<TrafficCfg>(text),
        "rules" => read::<RuleCfg>(text),
        "loss" => read::<LossCfg>(text),
        "output" => read::<OutputCfg>(text),
        "mechanism" => read::<MechanismConfig>(text),
        _ => return None,
    })
}

#[test]
fn a_documented_default_is_what_an_omitted_key_gets() {
    let mut checked = 0;
    for t in tables() {
        for k in t.keys.iter().filter(|k| literal(k)) {
            let without = table_text(&t, None);
            let with = table_text(&t, Some(k));
            let name = format!("{}.{}", t.name(), k.key);
            match t.table {
                "" => continue, // the top level's only literal default, seed, is read below
                "tcp" => {
                    let tcp = |table: &str| {
                        let text = format!("{MINIMAL}\n[tcp]\n{table}");
                        let p = tacc_sim::load(&text, "keys.toml", &[], None)
                            .unwrap_or_else(|e| panic!("{name}: {e}"));
                        format!("{:?}", p.tcp)
                    };
                    assert_eq!(
                        tcp(&without),
                        tcp(&with),
                        "{name}: documented {:?}",
                        k.default
                    );
                }
                _ => {
                    let plain = read_alone(&t, &without).unwrap().expect(&name);
                    if plain.contains(&format!("{}: None", k.key)) {
                        continue; // an Option resolved where the world is built
                    }
                    let given = read_alone(&t, &with).unwrap().expect(&name);
                    assert_eq!(plain, given, "{name}: documented {:?}", k.default);
                }
            }
            checked += 1;
        }
    }
    eprintln!("{checked} documented defaults checked against the parser");
    assert!(checked >= 40, "only {checked} defaults checked");
    assert!(
        linux_profile_defaults() >= 9,
        "the linux profile's defaults checked"
    );
    let seed = lookup("seed");
    assert_eq!(seed.len(), 1);
    assert_eq!(seed[0].keys[0].default, "1");
}

/// A `[tcp]` default written "classic (linux: L)": the classic value is what an omitted key
/// gets, and L what it gets under `profile = "linux"`. Returns how many were checked.
fn linux_profile_defaults() -> usize {
    let tcp = |table: &str| {
        let text = format!("{MINIMAL}\n[tcp]\n{table}");
        let p = tacc_sim::load(&text, "keys.toml", &[], None).unwrap_or_else(|e| panic!("{e}"));
        format!("{:?}", p.tcp)
    };
    let mut checked = 0;
    let table = tables().into_iter().find(|t| t.table == "tcp").unwrap();
    for k in &table.keys {
        let Some((classic, linux)) = k.default.split_once(" (linux: ") else {
            continue;
        };
        let linux = linux.strip_suffix(')').expect(k.default);
        for (profile, value) in [("classic", classic), ("linux", linux)] {
            let omitted = tcp(&format!("profile = \"{profile}\"\n"));
            let given = tcp(&format!(
                "profile = \"{profile}\"\n{} = {}\n",
                k.key,
                as_toml(value)
            ));
            assert_eq!(omitted, given, "tcp.{} under {profile}", k.key);
        }
        checked += 1;
    }
    checked
}

#[test]
fn lookup_finds_tables_variants_and_keys() {
    let hygenicc = lookup("mechanism.hygenicc");
    assert_eq!(hygenicc.len(), 1);
    assert!(hygenicc[0].keys.iter().any(|k| k.key == "update_interval"));
    assert!(
        hygenicc[0].keys.iter().any(|k| k.key == "burst"),
        "the limiter keys too"
    );
    let mechanism = lookup("mechanism");
    let kinds = mechanism.iter().filter(|t| t.table == "mechanism").count();
    assert_eq!(kinds, MechanismConfig::KINDS.len());
    assert!(
        mechanism.iter().any(|t| t.table.is_empty()),
        "and the top level's key"
    );
    let rto = lookup("tcp.rto_min");
    assert_eq!((rto.len(), rto[0].keys.len()), (1, 1));
    assert_eq!(rto[0].keys[0].key, "rto_min");
    assert!(
        lookup("topology.link_rate").len() >= 3,
        "every topology kind with the key"
    );
    assert_eq!(lookup("mechanism.sicc.interval")[0].keys.len(), 1);
    assert!(lookup("tcp.warp_drive").is_empty());
    assert!(lookup("nonsense").is_empty());
}

/// A value of `unit` written from `n` of its base unit (ns, bit/s, bytes, packets, or the
/// number itself).
fn written(unit: &str, n: f64) -> String {
    match unit {
        "time" => format!("\"{}ns\"", n as i64),
        "rate" => format!("\"{}bps\"", n as i64),
        "bytes" => format!("\"{}B\"", n as i64),
        "size" => format!("\"{}pkt\"", n as i64),
        "integer" => format!("{}", n as i64),
        _ => format!("{n:?}"),
    }
}

/// A bound as written in a range ("1us", "0", "65535B") in `unit`'s base unit; `None` where it
/// names another key or a sentence.
fn bound(unit: &str, text: &str) -> Option<f64> {
    use tacc_sim::units::{Bytes, Duration, Rate};
    match unit {
        "time" => Duration::parse(text).map(|d| d.0 as f64),
        "rate" => Rate::parse(text).map(|r| r.0 as f64),
        "bytes" => Bytes::parse(text).map(|b| b.0 as f64),
        "integer" | "number" | "fraction" | "probability" => text.parse().ok(),
        _ => None,
    }
}

/// Values a documented range refuses and values it accepts, from the forms it can read:
/// "> X", ">= X", "<= X", "A..B", "X and Y", a list of quoted choices. `None` for a range that
/// names another key, depends on a mode, or says it in words.
fn range_values(k: &KeyDoc) -> Option<(Vec<String>, Vec<String>)> {
    let range = &k.range;
    if range.is_empty() || range.contains('(') {
        return None;
    }
    let step = match k.unit {
        "number" | "fraction" | "probability" => 0.001,
        _ => 1.0,
    };
    if range.starts_with('"') {
        let choices: Vec<String> = range
            .split('"')
            .skip(1)
            .step_by(2)
            .map(|c| format!("{c:?}"))
            .collect();
        let words: String = range.split('"').step_by(2).collect();
        if !words
            .chars()
            .all(|c| c == ',' || c == ' ' || "or".contains(c))
        {
            return None; // choices and something else ("a port of the switch")
        }
        return Some((vec!["\"zz-not-a-choice\"".into()], choices));
    }
    let (mut refused, mut accepted) = (Vec::new(), Vec::new());
    for part in range.split(" and ") {
        let part = part.trim();
        if let Some((a, b)) = part.split_once("..") {
            let (a, b) = (bound(k.unit, a)?, bound(k.unit, b)?);
            refused.extend([written(k.unit, a - step), written(k.unit, b + step)]);
            accepted.extend([written(k.unit, a), written(k.unit, b)]);
            continue;
        }
        let (op, x) = part.split_once(' ')?;
        let x = bound(k.unit, x)?;
        let (out, inside) = match op {
            ">" => (x, x + step),
            ">=" => (x - step, x),
            "<" => (x, x - step),
            "<=" => (x + step, x),
            _ => return None,
        };
        refused.push(written(k.unit, out));
        accepted.push(written(k.unit, inside));
    }
    // Below zero an unsigned key fails to parse at all: refused just the same.
    Some((refused, accepted))
}

/// Whether the parser and checks refuse `value` for `key` of table `t` (alone with its required
/// keys), naming the key; `None` where the table is not read alone, or where it is not valid
/// with sample values for its required keys (an explicit topology's nodes).
fn refused(t: &TableDoc, k: &KeyDoc, value: &str) -> Option<bool> {
    let mut body = String::new();
    if let Some((tag, v)) = t.tag {
        body.push_str(&format!("{tag} = \"{v}\"\n"));
    }
    for r in t
        .keys
        .iter()
        .filter(|r| r.default == "required" && r.key != k.key)
    {
        body.push_str(&format!("{} = {}\n", r.key, sample(r)));
    }
    let scenario = |body: &str| {
        if t.table == "topology" {
            format!("duration = \"1ms\"\n[topology]\n{body}")
        } else {
            format!("{MINIMAL}\n[{}]\n{body}", t.table)
        }
    };
    if t.table != "mechanism" && tacc_sim::load(&scenario(&body), "keys.toml", &[], None).is_err() {
        return None;
    }
    body.push_str(&format!("{} = {value}\n", k.key));
    match t.table {
        "mechanism" => Some(match toml::from_str::<MechanismConfig>(&body) {
            Err(_) => true,
            Ok(c) => c
                .check(&|_| Some(1))
                .iter()
                .any(|p| p.key == format!("mechanism.{}", k.key)),
        }),
        "tcp" | "queue" | "nic" | "output" | "topology" => {
            let field = format!("{}.{}", t.table, k.key);
            Some(
                match tacc_sim::load(&scenario(&body), "keys.toml", &[], None) {
                    Ok(_) => false,
                    Err(e) => e.0.iter().any(|e| e.field == field),
                },
            )
        }
        _ => None,
    }
}

#[test]
fn a_documented_range_is_what_the_checks_accept() {
    let mut checked = 0;
    for t in tables() {
        for k in &t.keys {
            let Some((out, inside)) = range_values(k) else {
                continue;
            };
            for v in &out {
                let Some(r) = refused(&t, k, v) else { continue };
                assert!(
                    r,
                    "{}.{} = {v} is outside {:?} but accepted",
                    t.name(),
                    k.key,
                    k.range
                );
                checked += 1;
            }
            for v in &inside {
                let Some(r) = refused(&t, k, v) else { continue };
                assert!(
                    !r,
                    "{}.{} = {v} is inside {:?} but refused",
                    t.name(),
                    k.key,
                    k.range
                );
                checked += 1;
            }
        }
    }
    eprintln!("{checked} values at the edges of documented ranges checked");
    assert!(checked >= 60, "only {checked} range edges checked");
}
