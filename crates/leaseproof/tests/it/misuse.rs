//! Every bad input to the CLI gets an answer: exit code 2 and a message that
//! names the problem, never a panic, never a silent coercion.
//!
//! Goal: a user who mistypes a flag learns what is wrong at once. Method: a
//! catalogue of bad invocations of every subcommand, run against the built
//! binary; each row states the exit code and a phrase the message must
//! contain. Plus stdout closed early (`leaseproof model | head -1`): the
//! process ends quietly. Invariant: "panicked" never appears; no row runs
//! anything long (every refusal comes before work starts).

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

use super::repository;

/// Runs the binary with `args` (no DATABASE_URL: nothing here may need one).
fn run(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .args(args)
        .current_dir(repository())
        .env_remove("LEASEPROOF_RACE_WORKER")
        .stdin(Stdio::null())
        .output()
        .expect("run leaseproof");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

#[test]
fn every_bad_invocation_is_refused_with_a_message_naming_the_problem() {
    let directory = tempfile::tempdir().unwrap();
    let inverted = directory.path().join("inverted.toml");
    let text = std::fs::read_to_string(repository().join("scenarios/gc-pause.toml")).unwrap();
    let text = text
        .lines()
        .map(|line| {
            if line.starts_with("name") {
                "name = \"my-gc-pause\"".to_string()
            } else if line.starts_with("work_ms") {
                "work_ms = [400, 50]".to_string()
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains("work_ms = [400, 50]"),
        "gc-pause sets work_ms"
    );
    std::fs::write(&inverted, text).unwrap();
    let impostor = directory.path().join("impostor.toml");
    std::fs::copy(repository().join("scenarios/gc-pause.toml"), &impostor).unwrap();
    let inverted = inverted.to_str().unwrap().to_string();
    let impostor = impostor.to_str().unwrap().to_string();

    let catalogue: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec![], 2, "Usage"),
        (vec!["frobnicate"], 2, "frobnicate"),
        (vec!["model", "--workers", "0"], 2, "--workers"),
        (vec!["model", "--workers", "1"], 2, "--workers"),
        (vec!["model", "--workers", "5"], 2, "--workers"),
        (vec!["model", "--variant", "nope"], 2, "unknown variant"),
        (vec!["model", "--explore", "notanaddress"], 2, "--explore"),
        (vec!["sim", "all", "--jobs", "0"], 2, "--jobs"),
        (vec!["sim", "all", "--jobs", "-1"], 2, "--jobs"),
        (vec!["sim", "all", "--seeds", "5..2"], 2, "empty seed range"),
        (vec!["sim", "all", "--seeds", "many"], 2, "A..B"),
        (vec!["sim", "all", "--shard", "3/3"], 2, "0 <= i < n"),
        (
            vec!["sim", "gc-pause", "--shard", "2/3", "--seeds", "0..2"],
            2,
            "holds no seed",
        ),
        (vec!["sim", "no-such-scenario"], 2, "no-such-scenario"),
        (vec!["sim", "all", "--seeds", "random:0"], 2, "random:N"),
        (
            vec!["sim", "gc-pause", "stray-argument"],
            2,
            "unexpected argument",
        ),
        (vec!["sim", "merge"], 2, "name the shard reports"),
        (vec!["verify", "--sim-seeds", "many"], 2, "--sim-seeds"),
        (vec!["verify", "--sim-seeds", "0"], 2, "--sim-seeds"),
        (vec!["sim", &inverted], 2, "work_ms"),
        (vec!["sim", &impostor], 2, "built-in"),
        (
            vec!["replay", "no-such-scenario", "--seed", "1"],
            2,
            "no-such-scenario",
        ),
        (vec!["replay", "gc-pause"], 2, "--seed"),
        (vec!["replay", "gc-pause", "--seed", "-1"], 2, "--seed"),
        (vec!["race", "--workers", "0"], 2, "--workers"),
        (vec!["race", "--workers", "1"], 2, "two workers"),
        (vec!["race", "--workers", "257"], 2, "--workers"),
        (vec!["race", "--workers", "many"], 2, "--workers"),
        (vec!["race", "--ttl-ms", "-5"], 2, "--ttl-ms"),
        (vec!["race", "--rounds", "0"], 2, "--rounds"),
        (vec!["race", "--processes", "1"], 2, "--processes"),
        (vec!["race", "--processes", "1000000"], 2, "--processes"),
        (vec!["race", "--ttl-ms", "0"], 2, "--ttl-ms"),
        (vec!["race", "--lock", "zookeeper"], 2, "--lock"),
        (
            vec!["race", "--clock-offset-ms", "-1"],
            2,
            "--clock-offset-ms",
        ),
        (vec!["bench", "--seconds", "-1"], 2, "--seconds"),
        (vec!["bench", "--seconds", "NaN"], 2, "--seconds"),
        (vec!["bench", "--rounds", "0"], 2, "--rounds"),
        (vec!["race", "--read-first", "sometimes"], 2, "--read-first"),
        (
            vec!["check", "/nonexistent/history.jsonl"],
            2,
            "/nonexistent/history.jsonl",
        ),
        (
            vec!["check", "x.jsonl", "--grant-stamps", "sometimes"],
            2,
            "grant stamps",
        ),
        (vec!["race-worker"], 2, "race --processes"),
    ];
    let mut wrong = Vec::new();
    for (args, code_expected, phrase) in &catalogue {
        let (code, text) = run(args);
        if text.contains("panicked") {
            wrong.push(format!("{args:?}: PANICKED:\n{text}"));
        } else if code != *code_expected || !text.contains(phrase) {
            wrong.push(format!(
                "{args:?}: exit {code} (expected {code_expected}), message must contain {phrase:?}:\n{text}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} rows:\n{}",
        wrong.len(),
        catalogue.len(),
        wrong.join("\n")
    );
    // The inverted range says where it is.
    let (_, text) = run(&["sim", &inverted]);
    assert!(text.contains("line "), "{text}");
    assert!(text.contains("column 1"), "{text}");
}

#[test]
fn stdout_closed_early_ends_the_process_quietly() {
    // `leaseproof model | head -1`: the reader leaves after the first line;
    // the next variant's report meets a closed pipe.
    let mut child = Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .args(["model"])
        .current_dir(repository())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run leaseproof");
    let mut reader = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(first.starts_with("== model reference"), "{first:?}");
    drop(reader);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The status a shell reports for SIGPIPE, as `cat` would.
    assert_eq!(output.status.code(), Some(141), "{stderr}");
}

#[test]
fn a_missing_helper_program_is_named_not_mistaken_for_a_missing_user() {
    use std::os::unix::fs::MetadataExt as _;
    // Only root needs helpers: initdb refuses root, so the throwaway cluster
    // runs as `postgres`, looked up with `id`, switched to with `runuser`/`su`.
    let running_as_root = std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0);
    if !running_as_root || !leaseproof_pgcluster::binaries_available() {
        // CI runs as root with the binaries (LEASEPROOF_REQUIRE_PG=1): there
        // this path must be tried, not skipped.
        assert!(
            !leaseproof_pgcluster::require_pg(),
            "LEASEPROOF_REQUIRE_PG=1, but the helper-program test needs root (here: {running_as_root}) and PostgreSQL's binaries"
        );
        eprintln!(
            "LEASEPROOF SKIP: the helper-program message is root's path with PostgreSQL binaries"
        );
        return;
    }
    // An empty PATH: the PostgreSQL binaries are still found under
    // /usr/lib/postgresql, `runuser` under /usr/sbin, but `id` nowhere.
    let empty = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .arg("pg")
        .current_dir(repository())
        .env("PATH", empty.path())
        .env("TMPDIR", empty.path())
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run leaseproof");
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    assert!(
        text.contains("the `id` program (coreutils) is not on PATH"),
        "{text}"
    );
    assert!(!text.contains("no such user"), "{text}");
    assert!(
        std::fs::read_dir(empty.path()).unwrap().next().is_none(),
        "nothing created before the refusal"
    );
}
