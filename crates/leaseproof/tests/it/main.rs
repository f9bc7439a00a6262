//! The `leaseproof` binary, run as a user runs it.
//!
//! Goal: `leaseproof check` judges the example histories of the format's
//! documentation with the documented exit codes. Method: run the built
//! binary on `examples/histories/*.jsonl` and on broken files.

mod correct_services;
mod declared_stamps;
mod function_length;
mod interrupts;
mod json;
mod layering;
mod malformed;
mod misuse;
mod module_cycles;
mod output;
mod possible_findings;
mod public_api;
mod python_recorder;
mod readme;
mod replay;
mod servers;
mod shards;
mod tidy;
mod timeline;

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a run of the binary left: its exit code (-1: killed) and its output.
pub(crate) struct Ran {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ran {
    /// Standard output, then standard error.
    pub(crate) fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs the built binary in the repository with `args`, standard input
/// empty, to its end.
pub(crate) fn leaseproof(args: &[&str]) -> Ran {
    leaseproof_in(args, &repository(), None)
}

/// Runs the built binary in `cwd` with `args` (and `TMPDIR` set to
/// `temp`, when given), standard input empty, to its end.
pub(crate) fn leaseproof_in(args: &[&str], cwd: &Path, temp: Option<&Path>) -> Ran {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leaseproof"));
    command
        .args(args)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null());
    if let Some(temp) = temp {
        command.env("TMPDIR", temp);
    }
    let output = command.output().expect("run leaseproof");
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn check(args: &[&str]) -> (i32, String, String) {
    let ran = leaseproof(&[&["check"], args].concat());
    (ran.code, ran.stdout, ran.stderr)
}

#[test]
fn check_refuses_outputs_it_cannot_write_before_judging() {
    let directory = tempfile::tempdir().unwrap();
    let page = directory.path().join("out");
    let page = page.to_str().unwrap();
    let missing = directory.path().join("missing/verdict.json");
    let missing = missing.to_str().unwrap();
    for (outputs, says) in [
        (
            vec!["--html", page, "--json", page],
            "--html and --json both name",
        ),
        (vec!["--json", missing], "no directory"),
        (
            vec!["--json", directory.path().to_str().unwrap()],
            "a directory, not a file",
        ),
    ] {
        let args = [&["examples/histories/broken.jsonl"], &outputs[..]].concat();
        let (code, stdout, stderr) = check(&args);
        assert_eq!(code, 2, "{outputs:?}: {stdout}{stderr}");
        assert!(stderr.contains(says), "{outputs:?}: {stderr}");
        assert!(stdout.is_empty(), "judged before refusing: {stdout}");
    }
}

#[test]
fn check_refuses_to_write_over_the_history_it_judges() {
    let directory = tempfile::tempdir().unwrap();
    let copy = directory.path().join("broken.jsonl");
    std::fs::copy(repository().join("examples/histories/broken.jsonl"), &copy).unwrap();
    let original = std::fs::read(&copy).unwrap();
    let copy = copy.to_str().unwrap();
    // Also when named another way.
    let dotted = format!("{}/./broken.jsonl", directory.path().display());
    for option in ["--json", "--html"] {
        let (code, stdout, stderr) = check(&[copy, option, &dotted]);
        assert_eq!(code, 2, "{option}: {stdout}{stderr}");
        assert!(
            stderr.contains("destroy the evidence"),
            "{option}: {stderr}"
        );
        assert!(stdout.is_empty(), "judged before refusing: {stdout}");
        assert_eq!(
            std::fs::read(copy).unwrap(),
            original,
            "{option} wrote over it"
        );
    }
}

#[test]
fn check_refuses_an_unfenced_worker_the_history_lacks() {
    // A typo would judge the worker it meant as fenced.
    let (code, stdout, stderr) =
        check(&["examples/histories/broken.jsonl", "--unfenced-worker", "A"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("--unfenced-worker A: no worker"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "judged before refusing: {stdout}");
    let (code, stdout, stderr) =
        check(&["examples/histories/broken.jsonl", "--unfenced-worker", "a"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
}

#[test]
fn check_fail_on_possible_fails_in_the_document_too() {
    let directory = tempfile::tempdir().unwrap();
    let json = directory.path().join("verdict.json");
    let json = json.to_str().unwrap();
    let file = "examples/histories/queued-rival.jsonl";
    for (extra, code_expected, passed) in [(None, 0, true), (Some("--fail-on-possible"), 1, false)]
    {
        let args: Vec<&str> = [file, "--json", json].into_iter().chain(extra).collect();
        let (code, stdout, stderr) = check(&args);
        assert_eq!(code, code_expected, "{extra:?}: {stdout}{stderr}");
        let document: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        assert_eq!(document["passed"], passed, "{extra:?}");
    }
}

#[test]
fn check_passes_the_clean_example_and_fails_the_broken_one() {
    let (code, stdout, _) = check(&["examples/histories/clean.jsonl"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");
    let (code, stdout, _) = check(&["examples/histories/broken.jsonl"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("I1 mutual exclusion [job]"), "{stdout}");
}

#[test]
fn check_judges_the_fenced_example_by_its_rows() {
    let (code, stdout, _) = check(&["examples/histories/fenced.jsonl"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("commits=2 refused_stale_commits=1"),
        "{stdout}"
    );
    // A committed cycle missing one of its rows is a finding of the rows, I4.
    let text =
        std::fs::read_to_string(repository().join("examples/histories/fenced.jsonl")).unwrap();
    let lost_row: Vec<&str> = text
        .lines()
        .filter(|line| !line.contains(r#""record":"guarded_row","seq":2,"#))
        .collect();
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("lost-row.jsonl");
    std::fs::write(&path, lost_row.join("\n") + "\n").unwrap();
    let (code, stdout, _) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("I4 nothing lost [job]"), "{stdout}");
}

#[test]
fn check_judges_statement_start_stamps_without_crying_wolf() {
    // Undeclared stamps: the sound rule, and the user is told.
    let (code, stdout, stderr) = check(&["examples/histories/queued-rival.jsonl"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("possible (could not judge)"), "{stdout}");
    assert!(stderr.contains("sound rule"), "{stderr}");
    let (code, stdout, _) = check(&[
        "examples/histories/queued-rival.jsonl",
        "--grant-stamps",
        "statement-start",
    ]);
    assert_eq!(code, 0, "{stdout}");
    let (code, stdout, _) = check(&[
        "examples/histories/queued-rival.jsonl",
        "--grant-stamps",
        "decision",
    ]);
    assert_eq!(code, 1, "decision stamps make the overlap real: {stdout}");
}

/// A history that declares its grant stamps (its `design` line, as the
/// races and client runs save it) is judged as it declares; a flag that
/// contradicts the declaration is refused; `--fail-on-possible` fails on
/// what could not be judged.
#[test]
fn check_judges_a_history_as_its_design_declares() {
    let directory = tempfile::tempdir().unwrap();
    let declared = directory.path().join("declared.jsonl");
    let queued =
        std::fs::read_to_string(repository().join("examples/histories/queued-rival.jsonl"))
            .unwrap();
    std::fs::write(
        &declared,
        format!("{{\"record\":\"design\",\"grant_stamps\":\"statement-start\"}}\n{queued}"),
    )
    .unwrap();
    let declared = declared.to_str().unwrap();
    let (code, stdout, stderr) = check(&[declared]);
    assert_eq!(code, 0, "judged as statement starts: {stdout}{stderr}");
    assert!(stdout.contains("possible (could not judge)"), "{stdout}");
    assert!(stderr.contains("as the history declares"), "{stderr}");
    let (code, _, stderr) = check(&[declared, "--grant-stamps", "decision"]);
    assert_eq!(code, 2, "a contradiction is refused: {stderr}");
    assert!(stderr.contains("contradicts"), "{stderr}");
    let (code, stdout, _) = check(&[declared, "--grant-stamps", "statement-start"]);
    assert_eq!(code, 0, "{stdout}");
    let (code, stdout, _) = check(&[declared, "--fail-on-possible"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("--fail-on-possible"), "{stdout}");
    // The declaration is the first line, once.
    let late = directory.path().join("late.jsonl");
    std::fs::write(
        &late,
        format!("{queued}{{\"record\":\"design\",\"grant_stamps\":\"decision\"}}\n"),
    )
    .unwrap();
    let (code, _, stderr) = check(&[late.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("design"), "{stderr}");
}

#[test]
fn check_refuses_bad_input_with_the_line_and_field() {
    let directory = tempfile::tempdir().unwrap();
    let bad = directory.path().join("bad.jsonl");
    let clean =
        std::fs::read_to_string(repository().join("examples/histories/clean.jsonl")).unwrap();
    let mut lines: Vec<String> = clean.lines().map(str::to_string).collect();
    lines[2] = lines[2].replace("\"true_time_us\"", "\"true_time\"");
    std::fs::write(&bad, lines.join("\n")).unwrap();
    let (code, _, stderr) = check(&[bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(":3:"), "names the line: {stderr}");
    assert!(stderr.contains("true_time"), "names the field: {stderr}");
    let (code, _, stderr) = check(&["no/such/file.jsonl"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = check(&[
        "examples/histories/clean.jsonl",
        "--grant-stamps",
        "whenever",
    ]);
    assert_eq!(code, 2, "{stderr}");
}
