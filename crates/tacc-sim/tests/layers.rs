//! The engine's modules form layers: no module reaches, directly or through others, back into
//! one that uses it (tests beside the code are left out: they may use the whole crate).

use std::collections::{BTreeMap, BTreeSet};

/// Module name -> the crate modules its non-test code names (`crate::x`).
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Doc links and comments name modules without using them.
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let used: BTreeSet<String> = code
            .match_indices("crate::")
            .map(|(i, _)| {
                code[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .filter(|m| !m.is_empty() && *m != name && src.join(format!("{m}.rs")).exists())
            .collect();
        graph.insert(name, used);
    }
    graph
}

#[test]
fn no_module_reaches_back_into_a_module_that_uses_it() {
    let graph = uses();
    assert!(graph.len() > 10, "read the modules: {graph:?}");
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
