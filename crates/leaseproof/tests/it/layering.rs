//! The product builds no harness.
//!
//! Goal: a team that depends on the lease or the lock managers compiles the
//! lease and the managers — not the checker, the simulator, the races, the
//! model checker or the test servers. Method: `cargo tree` of each product
//! crate's normal dependencies, with its default features, as a user's
//! build resolves them. Invariant: no harness crate (nor turmoil,
//! stateright, clap, indicatif) in a product crate's tree; the conformance
//! suite, which judges with the checker, and the harness's port are behind
//! features a user's build leaves off.

use std::process::Command;

use super::repository;

const PRODUCT: [&str; 3] = [
    "leaseproof-protocol",
    "leaseproof-postgres",
    "leaseproof-locks",
];

const HARNESS: [&str; 12] = [
    "leaseproof-history",
    "leaseproof-worker",
    "leaseproof-sim",
    "leaseproof-races",
    "leaseproof-models",
    "leaseproof-benches",
    "leaseproof-pgcluster",
    "leaseproof-redis-server",
    "turmoil",
    "stateright",
    "clap",
    "indicatif",
];

/// The packages in `package`'s normal dependency tree (with `features`).
fn tree(package: &str, features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    command
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .current_dir(repository());
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    let output = command.output().expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn no_product_crate_pulls_in_the_harness() {
    for package in PRODUCT {
        let packages = tree(package, &[]);
        assert!(packages.len() > 3, "{package}: {packages:?}");
        for harness in HARNESS {
            assert!(
                !packages.iter().any(|found| found == harness),
                "{package} depends on {harness}"
            );
        }
    }
    // Nor do they build the harness's port and checks: the feature that
    // compiles them (`harness`) is off in a user's build of each.
    for package in PRODUCT {
        let features = feature_tree(package);
        assert!(
            !features.contains("feature \"harness\""),
            "{package} builds the harness's port by default:\n{features}"
        );
    }
    assert!(
        feature_tree("leaseproof-races").contains("leaseproof-postgres feature \"harness\""),
        "the negative control: the harness enables it"
    );
    // The negative control: the suite's feature does bring in the checker,
    // so the scan above can see a harness crate when there is one.
    let with_suite = tree("leaseproof-locks", &["conformance"]);
    assert!(with_suite.iter().any(|found| found == "leaseproof-history"));
}

/// The features `package`'s normal dependency tree enables, as `cargo tree
/// -e normal,features` prints them.
fn feature_tree(package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal,features",
            "-p",
            package,
        ])
        .current_dir(repository())
        .output()
        .expect("run cargo tree");
    assert!(output.status.success(), "cargo tree -p {package}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Only the binary parses arguments and draws progress: the harness crates
/// and the benchmark return what they found.
#[test]
fn no_harness_crate_parses_arguments_or_draws_progress() {
    for package in [
        "leaseproof-history",
        "leaseproof-worker",
        "leaseproof-sim",
        "leaseproof-races",
        "leaseproof-models",
        "leaseproof-benches",
    ] {
        let packages = tree(package, &[]);
        assert!(packages.len() > 3, "{package}: {packages:?}");
        for front_end in ["clap", "indicatif"] {
            assert!(
                !packages.iter().any(|found| found == front_end),
                "{package} depends on {front_end}"
            );
        }
    }
    // The negative control: the binary does.
    assert!(tree("leaseproof", &[]).iter().any(|found| found == "clap"));
}

/// Paths in backticks under the repository's top-level folders, in `text`.
fn named_paths(text: &str) -> Vec<String> {
    const ROOTS: [&str; 8] = [
        "crates/",
        "models/",
        "benches/",
        "scenarios/",
        "docs/",
        "examples/",
        "ci/",
        ".ci/",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| ROOTS.iter().any(|root| quoted.starts_with(root)))
        // A path, not a command line or a glob.
        .filter(|quoted| !quoted.contains(' ') && !quoted.contains('*') && !quoted.contains('<'))
        .map(|quoted| quoted.trim_end_matches([',', '.', ':', ')']).to_string())
        .collect()
}

/// Every path ARCHITECTURE.md, the README and the docs name exists: the
/// map stays true to the tree.
#[test]
fn every_path_the_architecture_and_the_docs_name_exists() {
    let root = repository();
    let mut documents = vec![root.join("ARCHITECTURE.md"), root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        if entry
            .path()
            .extension()
            .is_some_and(|extension| extension == "md")
        {
            documents.push(entry.path());
        }
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for document in &documents {
        let text = std::fs::read_to_string(document).unwrap();
        for path in named_paths(&text) {
            checked += 1;
            // `file.rs:120` names a line; the file must exist.
            let file = path.split(':').next().unwrap_or(&path);
            if !root.join(file).exists() {
                missing.push(format!("{}: {path}", document.display()));
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} paths found: the scan is broken"
    );
    assert!(
        missing.is_empty(),
        "named but missing:\n{}",
        missing.join("\n")
    );
    // The negative control: a made-up path is seen as missing.
    assert_eq!(
        named_paths("see `crates/no-such-crate/src/lib.rs`."),
        ["crates/no-such-crate/src/lib.rs"]
    );
    assert!(!root.join("crates/no-such-crate/src/lib.rs").exists());
}
