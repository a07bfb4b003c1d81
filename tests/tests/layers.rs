//! The crate graph runs one way (issue 14, item 2): every crate of the workspace has a layer,
//! and a crate depends (`[dependencies]`, `[build-dependencies]`) only on crates of lower
//! layers. The daemons (pcmd, the IOS agent, the peer server) talk to each other through
//! protocols (`pcm-proto`, libp2p), never through each other's crates: no crate depends on
//! one of them. Dev-dependencies are free: a test may exercise the crates above its own.
//!
//! The folders show the same layers (issue 41, item 2): taking each top-level folder of the
//! repository (`pcm/`, `pcmd/`, `ios-agent/`, ...) with the crates under it, no two folders
//! depend on each other, directly or through others. A crate that lower crates use does
//! not live inside the folder of a crate that uses it: `pcm-proto`, under `pcmd/` until
//! then, made `node-sensor/` and `pcmd/` depend on each other and put `pcm/` above `pcmd/`.
//!
//! The graph is read with `cargo metadata --no-deps --offline` on this workspace, or on the
//! one whose `Cargo.toml` `MPI_IOS_LAYERS_MANIFEST` names (to check another checkout).
//! docs/architecture.md draws the same layers.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The layers, lowest first. PCM (checkpointing and migration) lies under IOS (the agents
/// that decide where processes run), which uses PCM only through pcmd's protocol.
const LAYERS: &[(&str, &[&str])] = &[
    ("protocol", &["pcm-proto"]),
    ("libraries", &["pcm", "node-sensor", "mpi-ios-plots"]),
    (
        "PCM",
        &[
            "pcm-capi",
            "heat2d",
            "cg",
            "mpi-ios-bench-programs",
            "mpi-ios-test-programs",
            "pcmrun",
            "pcmd",
        ],
    ),
    ("IOS core", &["ios-agent-core"]),
    (
        "IOS components",
        &["ios-agent-profile", "ios-agent-net", "ios-agent-proto"],
    ),
    ("IOS programs", &["ios-agent", "peer-server"]),
    ("test harness", &["mpi-ios-tests"]),
    ("benchmarks", &["mpi-ios-bench"]),
];

/// Programs that are nobody's library: others talk to them over a socket.
const DAEMONS: &[&str] = &["pcmd", "ios-agent", "peer-server"];

/// A workspace crate and its dependencies on other workspace crates, dev-dependencies left
/// out.
#[derive(Debug)]
struct Crate {
    name: String,
    /// The top-level folder of the repository the crate lives in (`pcmd` for
    /// `pcmd/Cargo.toml`).
    folder: String,
    depends_on: Vec<String>,
}

fn layer_of(name: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, crates))| crates.contains(&name))
        .map(|(i, (layer, _))| (i, *layer))
}

/// Every way the graph breaks the rules, one line each.
fn violations(crates: &[Crate]) -> Vec<String> {
    let mut found = Vec::new();
    for c in crates {
        let Some((level, layer)) = layer_of(&c.name) else {
            found.push(format!(
                "{} has no layer: add it to LAYERS in tests/tests/layers.rs and to docs/architecture.md",
                c.name
            ));
            continue;
        };
        for dep in &c.depends_on {
            if DAEMONS.contains(&dep.as_str()) {
                found.push(format!(
                    "{} depends on the daemon crate {dep}: talk to it through its protocol",
                    c.name
                ));
            }
            match layer_of(dep) {
                Some((dep_level, dep_layer)) if dep_level >= level => found.push(format!(
                    "{} ({layer}) depends on {dep} ({dep_layer}), which is not below it",
                    c.name
                )),
                _ => {}
            }
        }
    }
    found
}

/// Every pair of top-level folders that depend on each other, directly or through other
/// folders, one line each: a folder's crates depending on another's is an arrow between
/// them, and an arrow whose end leads back to its start runs back up.
fn folder_circles(crates: &[Crate]) -> Vec<String> {
    let folder_of: BTreeMap<&str, &str> = crates
        .iter()
        .map(|c| (c.name.as_str(), c.folder.as_str()))
        .collect();
    // (from, to) -> the crate dependencies that draw the arrow.
    let mut arrows: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for c in crates {
        for dep in &c.depends_on {
            if let Some(&to) = folder_of.get(dep.as_str()) {
                if to != c.folder {
                    arrows
                        .entry((c.folder.as_str(), to))
                        .or_default()
                        .push(format!("{} on {dep}", c.name));
                }
            }
        }
    }
    let reaches = |from: &str, target: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(at) = todo.pop() {
            if at == target {
                return true;
            }
            if seen.insert(at) {
                todo.extend(arrows.keys().filter(|(f, _)| *f == at).map(|(_, t)| *t));
            }
        }
        false
    };
    arrows
        .iter()
        .filter(|((from, to), _)| reaches(to, from))
        .map(|((from, to), why)| {
            format!(
                "{from}/ depends on {to}/ ({}) and {to}/ leads back to {from}/: give the crate \
                 both use a folder of its own",
                why.join(", ")
            )
        })
        .collect()
}

/// The top-level folder of `manifest` under `root`.
fn top_folder(root: &Path, manifest: &Path) -> String {
    let relative = manifest.strip_prefix(root).unwrap_or(manifest);
    relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The workspace's crates, from `cargo metadata`.
fn workspace() -> Vec<Crate> {
    let manifest = std::env::var_os("MPI_IOS_LAYERS_MANIFEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"));
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cargo metadata on {}: {}",
        manifest.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let root = PathBuf::from(metadata["workspace_root"].as_str().unwrap());
    let packages = metadata["packages"].as_array().unwrap();
    let names: Vec<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    packages
        .iter()
        .map(|p| {
            let mut depends_on: Vec<String> = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .map(|d| d["name"].as_str().unwrap())
                .filter(|d| names.contains(d))
                .map(str::to_owned)
                .collect();
            depends_on.sort();
            depends_on.dedup();
            Crate {
                name: p["name"].as_str().unwrap().to_owned(),
                folder: top_folder(&root, Path::new(p["manifest_path"].as_str().unwrap())),
                depends_on,
            }
        })
        .collect()
}

#[test]
fn every_crate_depends_only_on_crates_of_lower_layers_and_on_no_daemon() {
    let crates = workspace();
    let graph: BTreeMap<_, _> = crates.iter().map(|c| (&c.name, &c.depends_on)).collect();
    let found = violations(&crates);
    assert!(
        found.is_empty(),
        "the crate graph runs the wrong way:\n  {}\ngraph: {graph:#?}",
        found.join("\n  ")
    );
    // The rules see every crate.
    assert!(crates.len() >= 10, "{graph:#?}");
    for (_, layer) in LAYERS {
        for name in *layer {
            assert!(
                graph.contains_key(&(*name).to_owned()),
                "LAYERS names {name}, which is not a crate of the workspace"
            );
        }
    }
}

#[test]
fn no_two_top_level_folders_depend_on_each_other() {
    let crates = workspace();
    let found = folder_circles(&crates);
    let folders: BTreeMap<_, _> = crates.iter().map(|c| (&c.name, &c.folder)).collect();
    assert!(
        found.is_empty(),
        "the folders do not show the layers:\n  {}\nfolders: {folders:#?}",
        found.join("\n  ")
    );
    // Every crate was placed in a folder.
    assert!(crates.iter().all(|c| !c.folder.is_empty()), "{folders:#?}");
}

#[test]
fn the_folder_rule_refuses_the_layout_before_issue_41() {
    let placed = |name: &str, folder: &str, deps: &[&str]| Crate {
        name: name.to_owned(),
        folder: folder.to_owned(),
        depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
    };
    let before = [
        placed("pcm-proto", "pcmd", &[]),
        placed("node-sensor", "node-sensor", &["pcm-proto"]),
        placed("pcmd", "pcmd", &["node-sensor", "pcm-proto"]),
        placed("pcm", "pcm", &["pcm-proto"]),
    ];
    let found = folder_circles(&before);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("node-sensor/ depends on pcmd/ (node-sensor on pcm-proto)"),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("pcmd/ depends on node-sensor/ (pcmd on node-sensor)"),
        "{found:#?}"
    );
    let mut after = before;
    after[0].folder = "pcm-proto".to_owned();
    assert!(folder_circles(&after).is_empty());
    // A circle through a third folder counts too.
    let through = [
        placed("a", "a", &["b"]),
        placed("b", "b", &["c"]),
        placed("c", "c", &["a"]),
    ];
    assert_eq!(folder_circles(&through).len(), 3);
}

#[test]
fn the_rules_refuse_the_graph_before_issue_14() {
    let edge = |name: &str, deps: &[&str]| Crate {
        name: name.to_owned(),
        folder: name.to_owned(),
        depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
    };
    let before = [
        edge("pcm-proto", &[]),
        edge("pcmd", &["ios-agent-profile", "pcm-proto"]),
        edge("ios-agent-core", &["pcm-proto"]),
        edge("ios-agent-profile", &["ios-agent-core", "pcm-proto"]),
        edge(
            "ios-agent",
            &[
                "ios-agent-core",
                "ios-agent-net",
                "ios-agent-profile",
                "pcm-proto",
                "pcmd",
            ],
        ),
    ];
    let found = violations(&before);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("pcmd (PCM) depends on ios-agent-profile"),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("ios-agent depends on the daemon crate pcmd"),
        "{found:#?}"
    );
    assert!(violations(&[edge("new-crate", &[])])[0].contains("has no layer"));
}
