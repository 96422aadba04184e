//! The engine's modules form layers: no module reaches, directly or through others, back into
//! one that uses it (tests beside the code are left out: they may use the whole crate).

use std::collections::{BTreeMap, BTreeSet};

/// Module name -> the crate modules its non-test code names (`crate::x`). A folder is one
/// module: its files together (`sim/` is `sim`).
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let files: Vec<std::path::PathBuf> = if path.is_dir() {
            let mut f: Vec<_> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "rs"))
                .collect();
            f.sort();
            f
        } else {
            vec![path]
        };
        if name == "lib" {
            continue;
        }
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // Doc links and comments name modules without using them.
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            texts.entry(name.clone()).or_default().push_str(&code);
        }
    }
    let is_module = |m: &str| src.join(format!("{m}.rs")).exists() || src.join(m).is_dir();
    texts
        .iter()
        .map(|(name, code)| {
            let used: BTreeSet<String> = code
                .match_indices("crate::")
                .map(|(i, _)| {
                    code[i + 7..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .filter(|m| !m.is_empty() && m != name && is_module(m))
                .collect();
            (name.clone(), used)
        })
        .collect()
}

#[test]
fn no_module_reaches_back_into_a_module_that_uses_it() {
    let graph = uses();
    assert!(graph.len() > 10, "read the modules: {graph:?}");
    assert!(
        graph["sim"].contains("model"),
        "a folder is read as one module: {graph:?}"
    );
    for start in graph.keys() {
        // Everything reachable from `start`; a cycle brings it back.
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = graph[start].iter().collect();
        while let Some(m) = todo.pop() {
            assert!(
                m != start,
                "module cycle through {start}: it is reached again from its own uses ({graph:?})"
            );
            if seen.insert(m.clone()) {
                todo.extend(graph.get(m).into_iter().flatten());
            }
        }
    }
}
