//! What a design line declares of its store's stamps (`stamp_rounding_us`,
//! `restamps`) is what `check --model` assumes: the file says it once, a
//! flag fills only what the file leaves unsaid, and a contradiction or a
//! value out of range is refused (exit 2) before any judgement.

use super::{leaseproof, repository};

/// A re-acquisition answered with its token and a later start after the
/// renewal was lost: a restamp explains it; a store that never restamps
/// granted the token twice (I2).
const STORY: &str =
    "crates/harness/leaseproof-history/tests/cases/model/adversary/p27-lost-renewal-then-reacquire-restamped.jsonl";

/// The story with `design` as its first line.
fn declared(design: &str) -> tempfile::NamedTempFile {
    let story = std::fs::read_to_string(repository().join(STORY)).unwrap();
    let (first, rest) = story.split_once('\n').unwrap();
    assert!(first.contains("\"design\""), "{first}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("{design}\n{rest}")).unwrap();
    file
}

fn check_model(file: &tempfile::NamedTempFile, flags: &[&str]) -> super::Ran {
    let path = file.path().to_str().unwrap();
    let mut args = vec!["check", path, "--model"];
    args.extend_from_slice(flags);
    leaseproof(&args)
}

#[test]
fn the_design_lines_restamps_are_what_the_model_assumes() {
    let silent = declared(r#"{"record": "design", "grant_stamps": "decision"}"#);
    let ran = check_model(&silent, &[]);
    assert_eq!(ran.code, 0, "{}", ran.text());
    let never = declared(r#"{"record": "design", "grant_stamps": "decision", "restamps": false}"#);
    let ran = check_model(&never, &[]);
    assert_eq!(ran.code, 1, "{}", ran.text());
    assert!(ran.text().contains("I2"), "{}", ran.text());
    // The flag says what the silent file does not: the same verdict.
    let ran = check_model(&silent, &["--no-restamps"]);
    assert_eq!(ran.code, 1, "{}", ran.text());
    // Saying it twice is no contradiction.
    assert_eq!(check_model(&never, &["--no-restamps"]).code, 1);
}

#[test]
fn a_flag_contradicting_the_design_line_is_refused() {
    let may = declared(r#"{"record": "design", "grant_stamps": "decision", "restamps": true}"#);
    let ran = check_model(&may, &["--no-restamps"]);
    assert_eq!(ran.code, 2, "{}", ran.text());
    assert!(
        ran.stderr.contains("declares restamps true"),
        "{}",
        ran.stderr
    );
    let exact =
        declared(r#"{"record": "design", "grant_stamps": "decision", "stamp_rounding_us": 0}"#);
    let ran = check_model(&exact, &["--stamp-rounding-us", "1000"]);
    assert_eq!(ran.code, 2, "{}", ran.text());
    assert!(ran.stderr.contains("stamp_rounding_us 0"), "{}", ran.stderr);
    assert_eq!(check_model(&exact, &["--stamp-rounding-us", "0"]).code, 0);
}

#[test]
fn a_rounding_out_of_range_is_refused_with_its_line_and_field() {
    for rounding in ["-1", "1000001"] {
        let file = declared(&format!(
            r#"{{"record": "design", "grant_stamps": "decision", "stamp_rounding_us": {rounding}}}"#
        ));
        let ran = check_model(&file, &[]);
        assert_eq!(ran.code, 2, "{}", ran.text());
        assert!(ran.stderr.contains(":1:"), "{}", ran.stderr);
        assert!(ran.stderr.contains("stamp_rounding_us"), "{}", ran.stderr);
    }
}

#[test]
fn a_simulated_run_declares_exact_stamps_and_the_strict_model_explains_it() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("run.jsonl");
    let path = file.to_str().unwrap();
    let ran = super::leaseproof_in(
        &["replay", "lost-replies", "--seed", "3", "--history", path],
        directory.path(),
        None,
    );
    assert_eq!(ran.code, 0, "{}", ran.text());
    let saved = std::fs::read_to_string(&file).unwrap();
    let design = saved.lines().next().unwrap();
    assert!(design.contains(r#""stamp_rounding_us":0"#), "{design}");
    assert!(design.contains(r#""restamps":false"#), "{design}");
    // Lost replies leave unknown operations: the declared store explains them.
    let ran = leaseproof(&["check", path, "--model"]);
    assert_eq!(ran.code, 0, "{}", ran.text());
    assert!(ran.stdout.contains("explained"), "{}", ran.stdout);
}
