//! The crate's modules form layers (lib.rs says which): the vocabulary names no mechanism and
//! uses nothing above it, the shared limiters use only the vocabulary, a mechanism kind uses
//! those two and never another kind, and the registry, plan and controller sit on top. No
//! module reaches, directly or through others, back into one that uses it. Tests beside the
//! code are left out: they may use the whole crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The module path of a source file: `vocab/roles.rs` is `vocab::roles`, `mechanisms/sicc/mod.rs`
/// is `mechanisms::sicc`.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().map(String::as_str) == Some("mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The code a module compiles outside its tests, without comments (doc links name modules
/// without using them).
fn code_of(text: &str) -> String {
    text.split("#[cfg(test)]")
        .next()
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a `use` tree starting at `text` names, braces expanded: `a::{b, c::d}` gives
/// `a::b` and `a::c::d`.
fn paths(text: &str) -> Vec<String> {
    fn tree(s: &[char], i: &mut usize, prefix: &str, out: &mut Vec<String>) {
        let mut path = prefix.to_string();
        loop {
            let start = *i;
            while *i < s.len() && is_ident(s[*i]) {
                *i += 1;
            }
            let seg: String = s[start..*i].iter().collect();
            if !seg.is_empty() {
                path = if path.is_empty() {
                    seg
                } else {
                    format!("{path}::{seg}")
                };
            }
            if s[*i..].starts_with(&[':', ':', '{']) {
                *i += 3;
                loop {
                    while *i < s.len() && s[*i].is_whitespace() {
                        *i += 1;
                    }
                    if *i >= s.len() || s[*i] == '}' {
                        *i += 1;
                        return;
                    }
                    tree(s, i, &path, out);
                    while *i < s.len() && (s[*i].is_whitespace() || s[*i] == ',') {
                        *i += 1;
                    }
                }
            } else if s[*i..].starts_with(&[':', ':']) {
                *i += 2;
            } else {
                out.push(path);
                return;
            }
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    tree(&chars, &mut 0, "", &mut out);
    out
}

/// The modules `code` (of module `me`) names through `crate::` and `super::` paths, each the
/// longest prefix of the path that is one of `modules`.
fn uses_in(
    me: &str,
    code: &str,
    modules: &BTreeSet<String>,
    is_dir_module: bool,
) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let parent = {
        // `super` of a folder's mod.rs is the folder's parent; of a file, its folder.
        let mut p: Vec<&str> = me.split("::").collect();
        if !is_dir_module || p.len() > 1 {
            p.pop();
        }
        p.join("::")
    };
    // A folder's mod.rs names its files by `self::` or, in a `use`, by their bare names.
    let children = if is_dir_module {
        me.to_string()
    } else {
        String::new()
    };
    let anchors = [
        ("crate::", String::new()),
        ("super::", parent),
        ("self::", me.to_string()),
        ("use ", children),
    ];
    for (anchor, base) in anchors {
        if anchor == "use " && base.is_empty() {
            continue;
        }
        for (i, _) in code.match_indices(anchor) {
            if i > 0 && is_ident(code[..i].chars().last().unwrap()) {
                continue;
            }
            for p in paths(&code[i + anchor.len()..]) {
                let full = if base.is_empty() {
                    p
                } else {
                    format!("{base}::{p}")
                };
                let segs: Vec<&str> = full.split("::").collect();
                if let Some(m) = (1..=segs.len())
                    .rev()
                    .map(|n| segs[..n].join("::"))
                    .find(|m| modules.contains(m))
                {
                    if m != me {
                        used.insert(m);
                    }
                }
            }
        }
    }
    used
}

/// Module path -> the modules its non-test code uses, and each module's code.
fn read_crate() -> (Graph, BTreeMap<String, String>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut todo = vec![src.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut code = BTreeMap::new();
    let mut dir_module = BTreeSet::new();
    for path in &files {
        let rel = path.strip_prefix(&src).unwrap();
        if rel == Path::new("lib.rs") {
            continue; // declarations and re-exports for the crate's users
        }
        let m = module_of(rel);
        if rel.file_name().unwrap() == "mod.rs" {
            dir_module.insert(m.clone());
        }
        code.insert(m, code_of(&std::fs::read_to_string(path).unwrap()));
    }
    let modules: BTreeSet<String> = code.keys().cloned().collect();
    let graph = code
        .iter()
        .map(|(m, c)| (m.clone(), uses_in(m, c, &modules, dir_module.contains(m))))
        .collect();
    (graph, code)
}

/// 0: vocabulary, 1: shared limiters, 2: mechanism kinds, 3: registry, plan, controller.
fn layer(module: &str) -> u8 {
    match module.split("::").next().unwrap() {
        "vocab" => 0,
        "limiters" => 1,
        "mechanisms" => 2,
        _ => 3,
    }
}

/// The kind a module of layer 2 belongs to (`mechanisms::sicc::keys` -> `sicc`).
fn kind(module: &str) -> Option<&str> {
    module
        .strip_prefix("mechanisms::")
        .map(|k| k.split("::").next().unwrap())
}

const MECHANISM_NAMES: &[&str] = &[
    "hygen", "sdn_gcc", "sdngcc", "sicc", "sdn_ecn", "sdnecn", "rwndq",
];

/// Every breach of the layering in `graph` (modules' `code` for the names they use).
fn violations(graph: &Graph, code: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = Vec::new();
    for (m, uses) in graph {
        for u in uses {
            if layer(u) > layer(m) {
                found.push(format!(
                    "{m} (layer {}) uses {u} (layer {})",
                    layer(m),
                    layer(u)
                ));
            }
            if let (Some(a), Some(b)) = (kind(m), kind(u)) {
                if a != b {
                    found.push(format!("kind {a} uses kind {b} ({m} -> {u})"));
                }
            }
        }
        // Everything reachable from `m`; a cycle brings it back.
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = uses.iter().collect();
        while let Some(u) = todo.pop() {
            if u == m {
                found.push(format!("module cycle through {m}"));
                break;
            }
            if seen.insert(u.clone()) {
                todo.extend(graph.get(u).into_iter().flatten());
            }
        }
    }
    for (m, text) in code.iter().filter(|(m, _)| layer(m) == 0) {
        let lower = text.to_lowercase();
        for name in MECHANISM_NAMES.iter().filter(|n| lower.contains(*n)) {
            found.push(format!("the vocabulary's {m} names a mechanism ({name})"));
        }
    }
    found
}

#[test]
fn the_crate_is_in_layers_without_cycles() {
    let (graph, code) = read_crate();
    for expected in [
        "vocab::roles",
        "limiters::rate_alloc",
        "mechanisms::sicc::build",
        "mechanisms::sicc::config",
        "registry",
    ] {
        assert!(
            graph.contains_key(expected),
            "read {expected}: {:?}",
            graph.keys()
        );
    }
    assert!(
        graph["vocab::roles"].contains("vocab::control"),
        "{graph:?}"
    );
    assert!(
        graph["mechanisms::sicc::build"].contains("mechanisms::sicc"),
        "{graph:?}"
    );
    assert!(
        graph["mechanisms::sicc"].contains("mechanisms::sicc::config"),
        "{graph:?}"
    );
    let v = violations(&graph, &code);
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn an_injected_cycle_a_reach_upwards_and_a_named_mechanism_are_each_caught() {
    let (graph, code) = read_crate();

    // headers <- roles already; headers -> roles closes a cycle inside the vocabulary.
    let mut cyclic = graph.clone();
    cyclic
        .get_mut("vocab::headers")
        .unwrap()
        .insert("vocab::roles".into());
    let v = violations(&cyclic, &code);
    assert!(
        v.iter().any(|s| s == "module cycle through vocab::headers"),
        "{v:?}"
    );

    let mut upward = graph.clone();
    upward
        .get_mut("vocab::control")
        .unwrap()
        .insert("mechanisms::sicc".into());
    let v = violations(&upward, &code);
    assert!(
        v.iter()
            .any(|s| s.contains("vocab::control (layer 0) uses mechanisms::sicc")),
        "{v:?}"
    );

    let mut sideways = graph.clone();
    sideways
        .get_mut("mechanisms::sdn_gcc")
        .unwrap()
        .insert("mechanisms::hygenicc".into());
    let v = violations(&sideways, &code);
    assert!(
        v.iter()
            .any(|s| s.starts_with("kind sdn_gcc uses kind hygenicc")),
        "{v:?}"
    );

    let mut named = code.clone();
    named
        .get_mut("vocab::control")
        .unwrap()
        .push_str("\npub struct SiccMessage;");
    let v = violations(&graph, &named);
    assert!(
        v.iter()
            .any(|s| s.contains("vocab::control names a mechanism")),
        "{v:?}"
    );
}

#[test]
fn grouped_and_relative_paths_are_read() {
    let modules: BTreeSet<String> = [
        "vocab::roles",
        "vocab::units",
        "mechanisms::sicc",
        "mechanisms::sicc::build",
        "mechanisms::sicc::config",
    ]
    .map(String::from)
    .into();
    let code =
        "use crate::vocab::{roles::{Fabric, Instance}, units::Nanos};\nuse super::SiccController;";
    let used = uses_in("mechanisms::sicc::build", code, &modules, false);
    let expected: BTreeSet<String> = ["vocab::roles", "vocab::units", "mechanisms::sicc"]
        .map(String::from)
        .into();
    assert_eq!(used, expected);
    // A folder's mod.rs naming its own files, bare in a `use` or by `self::`.
    for code in [
        "pub use config::SiccConfig;",
        "let c = self::config::SiccConfig::default();",
    ] {
        let used = uses_in("mechanisms::sicc", code, &modules, true);
        assert_eq!(
            used,
            ["mechanisms::sicc::config".to_string()].into(),
            "{code}"
        );
    }
}
