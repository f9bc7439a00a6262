//! What the harness writes, and where: nothing in the working directory
//! unless asked; evidence under `leaseproof-out` in the temp dir; replay
//! lines that name the binary that ran; a replay that prints a page, not the
//! whole trace.
//!
//! Method: run the built binary from an empty working directory with a
//! `TMPDIR` of the test's own, on a sweep and a replay that fail (unfenced
//! gc-pause), and look at both directories and at what was printed.

use std::path::Path;

fn leaseproof(args: &[&str], cwd: &Path, temp: &Path) -> (i32, String, String) {
    let ran = crate::leaseproof_in(args, cwd, Some(temp));
    (ran.code, ran.stdout, ran.stderr)
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_failing_sweep_and_replay_write_their_evidence_to_the_temp_dir_not_the_cwd() {
    let cwd = tempfile::tempdir().unwrap();
    let temp = tempfile::tempdir().unwrap();
    let binary = env!("CARGO_BIN_EXE_leaseproof");

    // `0..=1`: two seeds, the last included.
    let (code, stdout, stderr) = leaseproof(
        &[
            "sim",
            "gc-pause",
            "--unfenced",
            "--seeds",
            "0..=1",
            "--quiet",
        ],
        cwd.path(),
        temp.path(),
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("gc-pause*               2"), "{stdout}");
    assert_eq!(names(cwd.path()), Vec::<String>::new(), "{stdout}");
    let out = temp.path().join("leaseproof-out");
    assert!(
        names(&out)
            .iter()
            .any(|name| name.starts_with("leaseproof-replay-gc-pause-") && name.ends_with(".html")),
        "{:?}",
        names(&out)
    );
    let replay_line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("replay: "))
        .expect("a replay line");
    assert!(
        replay_line.starts_with(&format!("{binary} replay gc-pause --seed ")),
        "names the binary that ran: {replay_line}"
    );

    // The replay it printed, run as printed: a page of output, not the trace.
    let seed = replay_line
        .split_whitespace()
        .skip_while(|word| *word != "--seed")
        .nth(1)
        .unwrap();
    let (code, stdout, stderr) = leaseproof(
        &["replay", "gc-pause", "--seed", seed, "--unfenced"],
        cwd.path(),
        temp.path(),
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stdout.starts_with(&format!("SEED={seed} scenario=gc-pause")),
        "{stdout}"
    );
    assert!(stdout.contains("verdict: "), "{stdout}");
    let trace = out.join(format!("leaseproof-replay-gc-pause-{seed}-unfenced.trace"));
    let trace_lines = std::fs::read_to_string(&trace).unwrap().lines().count();
    assert!(
        stdout.lines().count() * 4 < trace_lines,
        "{} lines printed of a {trace_lines}-line trace",
        stdout.lines().count()
    );
    assert!(stderr.contains("--print-trace"), "{stderr}");
    assert_eq!(names(cwd.path()), Vec::<String>::new());

    // --print-trace prints it all, byte for byte.
    let (_, printed, _) = leaseproof(
        &[
            "replay",
            "gc-pause",
            "--seed",
            seed,
            "--unfenced",
            "--print-trace",
        ],
        cwd.path(),
        temp.path(),
    );
    assert_eq!(printed, std::fs::read_to_string(&trace).unwrap());
}

#[test]
fn verify_announces_each_stage_before_its_checks() {
    // Its checks take seconds to a minute each: a log read while it runs
    // must say which stage it is in.
    let ran = crate::leaseproof(&["verify", "--stages", "model"]);
    assert_eq!(ran.code, 0, "{}", ran.text());
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "---- model: the stateright models, and the checker judging their paths"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.starts_with("---- "))
            .count(),
        1
    );
    assert!(lines[1].starts_with("PASS model "), "{}", ran.stdout);
}

#[test]
fn check_lists_twenty_findings_and_counts_the_rest() {
    // Thirty grants of one scope, each overlapping the next: 29 proven I1.
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("overlaps.jsonl");
    let mut lines = vec![r#"{"record":"design","grant_stamps":"decision"}"#.to_string()];
    for worker in 0..30u64 {
        let (at_us, index) = (1_000 + worker * 10, worker * 2);
        lines.push(format!(
            r#"{{"record":"event","index":{index},"worker":"w{worker}","incarnation":0,"true_time_us":{at_us},"local_time_us":{at_us},"kind":{{"type":"invoke","op_id":{worker},"op":{{"op":"acquire","scope":"s","owner":"w{worker}","ttl_us":1000000}}}}}}"#
        ));
        lines.push(format!(
            r#"{{"record":"event","index":{},"worker":"w{worker}","incarnation":0,"true_time_us":{},"local_time_us":{},"kind":{{"type":"complete","op_id":{worker},"outcome":{{"outcome":"ok","result":{{"result":"lease","token":{},"owner":"w{worker}","granted_at_us":{at_us},"expires_at_us":{}}}}}}}}}"#,
            index + 1,
            at_us + 5,
            at_us + 5,
            worker + 1,
            at_us + 1_000_000
        ));
    }
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let file = path.to_str().unwrap();
    let listed = |ran: &crate::Ran| {
        ran.stdout
            .lines()
            .filter(|line| line.starts_with("  I1 "))
            .count()
    };

    let ran = crate::leaseproof(&["check", file]);
    assert_eq!(ran.code, 1, "{}", ran.text());
    assert!(ran.stdout.starts_with("29 violation(s);"), "{}", ran.stdout);
    assert_eq!(listed(&ran), 20, "{}", ran.stdout);
    assert!(
        ran.stdout
            .contains("  … and 9 more violation(s) not listed\n"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("--json FILE holds every finding"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.ends_with("FAIL: 29 violation(s)\n"),
        "{}",
        ran.stdout
    );

    let ran = crate::leaseproof(&["check", "--show", "100", file]);
    assert_eq!(listed(&ran), 29, "{}", ran.stdout);
    assert!(!ran.stdout.contains("not listed"), "{}", ran.stdout);
}
