//! Sweeps past one machine: shards run as processes and merged equal one
//! unsharded sweep; a missing, doubled or failing shard fails the merge; the
//! examples for an Indexed Job and a GitHub Actions matrix are well-formed.
//!
//! Method: the built binary, `sim gc-pause --seeds 0..24` once whole and once
//! as 4 concurrent `--shard i/4` processes, each writing `--json`; then `sim
//! merge`. The examples are parsed as YAML (Python's PyYAML, which Debian's
//! python3-yaml provides) into JSON and their sharding checked.
//! Invariant: every count but the wall time is independent of the split.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use leaseproof_sim::shards::ShardReport;

use super::repository;

/// The binary, run in `dir` with `dir` as its temp dir: a failing seed
/// writes its timeline under the temp dir, which must be the test's own.
fn leaseproof(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leaseproof"));
    command.args(args).current_dir(dir).env("TMPDIR", dir);
    command
}

fn run(dir: &Path, args: &[&str]) -> (i32, String) {
    let output = leaseproof(dir, args).output().expect("run leaseproof");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

fn report(path: &Path) -> ShardReport {
    ShardReport::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn path_arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn four_shards_run_as_processes_merge_to_the_unsharded_sweep() {
    let directory = tempfile::tempdir().unwrap();
    let whole = directory.path().join("whole.json");
    let (code, text) = run(
        directory.path(),
        &[
            "sim",
            "gc-pause",
            "--seeds",
            "0..24",
            "--jobs",
            "1",
            "--quiet",
            "--json",
            path_arg(&whole),
        ],
    );
    assert_eq!(code, 0, "{text}");
    let shards: Vec<PathBuf> = (0..4)
        .map(|index| directory.path().join(format!("shard-{index}.json")))
        .collect();
    let children: Vec<_> = shards
        .iter()
        .enumerate()
        .map(|(index, path)| {
            leaseproof(
                directory.path(),
                &[
                    "sim",
                    "gc-pause",
                    "--seeds",
                    "0..24",
                    "--shard",
                    &format!("{index}/4"),
                    "--jobs",
                    "1",
                    "--quiet",
                    "--json",
                    path_arg(path),
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a shard failed");
    }
    for (index, path) in shards.iter().enumerate() {
        let shard = report(path);
        assert_eq!(shard.shard, [index as u64, 4]);
        assert_eq!(shard.scenarios[0].counts.seeds_run, 6);
    }
    let merged = directory.path().join("merged.json");
    let mut args = vec!["sim", "merge"];
    args.extend(shards.iter().map(|path| path_arg(path)));
    args.extend(["--json", path_arg(&merged)]);
    let (code, text) = run(directory.path(), &args);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("4 shard(s) of seeds 0..24"), "{text}");
    let (merged_report, whole_report) = (report(&merged), report(&whole));
    assert_eq!(merged_report.seeds, whole_report.seeds);
    assert_eq!(merged_report.shard, [0, 1]);
    let counts = |report: &ShardReport| -> Vec<_> {
        report
            .scenarios
            .iter()
            .map(|scenario| scenario.without_wall_time())
            .collect()
    };
    assert_eq!(
        counts(&merged_report),
        counts(&whole_report),
        "merged counts differ from the unsharded sweep"
    );
    assert!(
        whole_report.scenarios[0].counts.takeovers > 0,
        "the sweep did something"
    );

    // A missing shard, a shard given twice: the merge fails, naming it.
    let (code, text) = run(
        directory.path(),
        &[
            "sim",
            "merge",
            path_arg(&shards[0]),
            path_arg(&shards[1]),
            path_arg(&shards[2]),
        ],
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("missing shard(s): 3/4"), "{text}");
    let (code, text) = run(
        directory.path(),
        &[
            "sim",
            "merge",
            path_arg(&shards[0]),
            path_arg(&shards[1]),
            path_arg(&shards[2]),
            path_arg(&shards[2]),
        ],
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("given twice"), "{text}");
    // A shard of another sweep.
    let (code, text) = run(
        directory.path(),
        &["sim", "merge", path_arg(&whole), path_arg(&shards[0])],
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("not one sweep"), "{text}");
    // Not a report at all: bad input.
    let (code, text) = run(
        directory.path(),
        &["sim", "merge", path_arg(&repository().join("Cargo.toml"))],
    );
    assert_eq!(code, 2, "{text}");
}

#[test]
fn a_shard_that_found_a_violation_fails_the_merge_with_its_replay_line() {
    let directory = tempfile::tempdir().unwrap();
    let shards: Vec<PathBuf> = (0..2)
        .map(|index| directory.path().join(format!("unfenced-{index}.json")))
        .collect();
    for (index, path) in shards.iter().enumerate() {
        let (code, text) = run(
            directory.path(),
            &[
                "sim",
                "gc-pause",
                "--unfenced",
                "--seeds",
                "0..6",
                "--shard",
                &format!("{index}/2"),
                "--jobs",
                "1",
                "--quiet",
                "--json",
                path_arg(path),
            ],
        );
        assert_eq!(code, 1, "unfenced gc-pause finds violations: {text}");
    }
    let (code, text) = run(
        directory.path(),
        &["sim", "merge", path_arg(&shards[0]), path_arg(&shards[1])],
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAILED seed"), "{text}");
    assert!(text.contains("replay gc-pause --seed"), "{text}");
    assert!(text.contains("--unfenced"), "{text}");
}

/// The YAML documents of `file`, as JSON (via PyYAML), or `None` when
/// python3 with PyYAML is missing (printed as a skip).
fn yaml_documents(file: &Path) -> Option<Vec<serde_json::Value>> {
    let output = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(file)
        .output();
    match output {
        Ok(output) if output.status.success() => {
            Some(serde_json::from_slice(&output.stdout).expect("python printed JSON"))
        }
        Ok(output) if String::from_utf8_lossy(&output.stderr).contains("No module named") => {
            skip("python3 has no yaml module (PyYAML) to parse the sharding examples")
        }
        Ok(output) => panic!(
            "{} is not valid YAML: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(_) => skip("no python3 to parse the sharding examples"),
    }
}

/// A skip line, or a failure under `LEASEPROOF_REQUIRE_CLIENTS=1` (CI), which
/// promises python3.
fn skip(reason: &str) -> Option<Vec<serde_json::Value>> {
    assert!(
        std::env::var("LEASEPROOF_REQUIRE_CLIENTS").as_deref() != Ok("1"),
        "LEASEPROOF_REQUIRE_CLIENTS=1 but {reason}"
    );
    eprintln!("LEASEPROOF SKIP: {reason}");
    None
}

#[test]
fn the_sharding_examples_shard_by_their_index_and_merge_every_shard() {
    let examples = repository().join("examples/sharding");
    let Some(job) = yaml_documents(&examples.join("kubernetes-indexed-job.yaml")) else {
        return;
    };
    assert_eq!(job.len(), 2, "the sweep Job and the merge Job");
    let sweep = &job[0]["spec"];
    assert_eq!(sweep["completionMode"], "Indexed");
    let completions = sweep["completions"].as_u64().unwrap();
    let shard_command = sweep["template"]["spec"]["containers"][0]["args"][0]
        .as_str()
        .unwrap();
    assert!(
        shard_command.contains(&format!("--shard ${{JOB_COMPLETION_INDEX}}/{completions}")),
        "{shard_command}"
    );
    assert!(shard_command.contains("--json"), "{shard_command}");
    let merge_command = job[1]["spec"]["template"]["spec"]["containers"][0]["args"][0]
        .as_str()
        .unwrap();
    assert!(
        merge_command.contains("leaseproof sim merge"),
        "{merge_command}"
    );

    let Some(workflow) = yaml_documents(&examples.join("github-actions.yml")) else {
        return;
    };
    let jobs = &workflow[0]["jobs"];
    let matrix: Vec<u64> = jobs["shard"]["strategy"]["matrix"]["shard"]
        .as_array()
        .unwrap()
        .iter()
        .map(|index| index.as_u64().unwrap())
        .collect();
    let count = matrix.len() as u64;
    assert_eq!(
        matrix,
        (0..count).collect::<Vec<_>>(),
        "every shard index once"
    );
    let steps = jobs["shard"]["steps"].as_array().unwrap();
    assert!(
        steps.iter().any(|step| step["run"]
            .as_str()
            .is_some_and(|run| run.contains(&format!("--shard ${{{{ matrix.shard }}}}/{count}")))),
        "a step runs the matrix's shard"
    );
    assert_eq!(jobs["merge"]["needs"], "shard");
    assert!(jobs["merge"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|step| step["run"]
            .as_str()
            .is_some_and(|run| run.contains("sim merge"))));
}
