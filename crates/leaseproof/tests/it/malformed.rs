//! `leaseproof check` refuses malformed histories before judging anything.
//!
//! Goal: a history written outside the project is judged only when it is
//! what the format says (docs/history-format.md): garbage is never judged.
//! Method: a catalogue of one-fact mutations of `examples/histories/clean.jsonl`
//! (which passes), each run through the binary, expecting exit 2 and a
//! message naming the line and the field. Invariant: no malformed file
//! reaches the checker (exit 1 would mean it was judged).

use super::{leaseproof, repository};

fn check(text: &str) -> (i32, String) {
    check_bytes(text.as_bytes())
}

fn check_bytes(bytes: &[u8]) -> (i32, String) {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("history.jsonl");
    std::fs::write(&path, bytes).unwrap();
    let ran = leaseproof(&["check", path.to_str().unwrap()]);
    (ran.code, ran.text())
}

/// The clean example's events and rows (its `design` line left out, so the
/// line numbers below count events).
fn clean() -> Vec<String> {
    example("clean")
}

/// An example's events and rows, its `design` line left out.
fn example(name: &str) -> Vec<String> {
    std::fs::read_to_string(repository().join(format!("examples/histories/{name}.jsonl")))
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with(r#"{"record":"design""#))
        .map(str::to_string)
        .collect()
}

/// The clean history with line `line` (0-based) passed through `edit`.
fn with_line(line: usize, edit: impl Fn(&str) -> String) -> String {
    edited(clean(), line, edit)
}

/// The fenced example (commits and rows) with line `line` (0-based) edited.
fn fenced_with_line(line: usize, edit: impl Fn(&str) -> String) -> String {
    edited(example("fenced"), line, edit)
}

fn edited(mut lines: Vec<String>, line: usize, edit: impl Fn(&str) -> String) -> String {
    lines[line] = edit(&lines[line]);
    lines.join("\n") + "\n"
}

#[test]
fn the_clean_example_passes() {
    let (code, text) = check(&(clean().join("\n") + "\n"));
    assert_eq!(code, 0, "{text}");
}

#[test]
fn every_malformed_history_is_refused_with_its_line_and_field() {
    let lines = clean();
    let swapped = {
        let mut swapped = lines.clone();
        swapped.swap(2, 3);
        swapped.join("\n") + "\n"
    };
    let row = r#"{"record":"guarded_row","seq":1,"scope":"job","owner":"a","token":1,"cycle_id":0,"item":0,"written_at_us":1700000000000001}"#;
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "not JSON",
            with_line(3, |_| "{oops".to_string()),
            ":4: field `.`: not JSON",
        ),
        (
            "not an object",
            with_line(0, |_| "[1, 2]".to_string()),
            ":1: field `.`: expected a JSON object",
        ),
        (
            "no record tag",
            with_line(0, |line| line.replace(r#""record":"event","#, "")),
            "field `record`: missing",
        ),
        (
            "unknown record",
            with_line(0, |line| {
                line.replace(r#""record":"event""#, r#""record":"evnt""#)
            }),
            "field `record`: \"evnt\"",
        ),
        (
            "index not its position",
            with_line(2, |line| line.replace(r#""index":2"#, r#""index":7"#)),
            ":3: field `index`: 7, expected 2",
        ),
        (
            "every index 0",
            with_line(1, |line| line.replace(r#""index":1"#, r#""index":0"#)),
            ":2: field `index`: 0, expected 1",
        ),
        (
            "index of the wrong type",
            with_line(1, |line| line.replace(r#""index":1"#, r#""index":"1""#)),
            ":2: field `index`: invalid type",
        ),
        ("events shuffled", swapped, "field `index`"),
        (
            "time goes back in a worker",
            with_line(3, |line| {
                line.replace(r#""true_time_us":40"#, r#""true_time_us":25"#)
            }),
            ":4: field `true_time_us`: 25 is before 30",
        ),
        (
            "completion without invoke",
            with_line(1, |line| line.replace(r#""op_id":0"#, r#""op_id":9"#)),
            ":2: field `kind.op_id`: 9 completes, but no earlier line invoked it",
        ),
        (
            "op invoked twice",
            with_line(2, |line| line.replace(r#""op_id":1"#, r#""op_id":0"#)),
            ":3: field `kind.op_id`: 0 is invoked twice",
        ),
        (
            "a completion by another worker",
            with_line(1, |line| line.replace(r#""worker":"a""#, r#""worker":"b""#)),
            ":2: field `kind.op_id`: 0 was invoked by worker \"a\" incarnation 0, and completes in worker \"b\" incarnation 0",
        ),
        (
            "a completion by another incarnation",
            with_line(1, |line| line.replace(r#""incarnation":0"#, r#""incarnation":1"#)),
            ":2: field `kind.op_id`: 0 was invoked by worker \"a\" incarnation 0, and completes in worker \"a\" incarnation 1",
        ),
        (
            "an incarnation goes back",
            with_line(0, |line| line.replace(r#""incarnation":0"#, r#""incarnation":1"#)),
            ":2: field `incarnation`: 0 after 1 of an earlier event of worker \"a\"",
        ),
        (
            "a byte-order mark",
            with_line(0, |line| format!("\u{feff}{line}")),
            ":1: field `.`: starts with a byte-order mark (U+FEFF)",
        ),
        (
            "a value of the wrong type inside the tagged op",
            with_line(0, |line| {
                line.replace(r#""ttl_us":1000000"#, r#""ttl_us":"1000000""#)
            }),
            ":1: field `kind.op.ttl_us`: invalid type",
        ),
        (
            "a value of the wrong type inside the tagged result",
            with_line(1, |line| line.replace(r#""token":1"#, r#""token":"1""#)),
            ":2: field `kind.outcome.result.token`: invalid type",
        ),
        (
            "a negative TTL",
            with_line(0, |line| {
                line.replace(r#""ttl_us":1000000"#, r#""ttl_us":-5"#)
            }),
            ":1: field `kind.op.ttl_us`: -5: a TTL is >= 0",
        ),
        (
            "token 0 in a grant",
            with_line(1, |line| line.replace(r#""token":1"#, r#""token":0"#)),
            ":2: field `kind.outcome.result.token`: 0: fencing tokens are integers >= 1",
        ),
        (
            "unknown field (a typo)",
            with_line(0, |line| {
                line.replace(
                    r#""local_time_us":10"#,
                    r#""local_time_us":10,"committed_at":5"#,
                )
            }),
            ":1: field `committed_at`: unknown field `committed_at`",
        ),
        (
            "unknown field inside an op",
            with_line(0, |line| {
                line.replace(r#""ttl_us":1000000"#, r#""ttl_us":1000000,"tll":1"#)
            }),
            "unknown field `tll`",
        ),
        (
            "missing field",
            with_line(0, |line| line.replace(r#""worker":"a","#, "")),
            "missing field `worker`",
        ),
        (
            "an event after a row",
            {
                let mut with_row = lines.clone();
                with_row.insert(7, row.to_string());
                with_row.join("\n") + "\n"
            },
            ":9: field `.`: an event after a row",
        ),
        (
            "a guarded row under token 0",
            {
                let mut with_row = lines.clone();
                with_row.push(row.replace(r#""token":1"#, r#""token":0"#));
                with_row.join("\n") + "\n"
            },
            ":9: field `token`: 0",
        ),
        (
            "a lease ending before it began",
            with_line(1, |line| {
                line.replace("1700000001000000", "1600000000000000")
            }),
            "field `kind.outcome.result.expires_at_us`",
        ),
        (
            "a result its op cannot have",
            with_line(1, |line| {
                let start = line.find(r#"{"result":"lease""#).unwrap();
                format!("{}{}", &line[..start], r#"{"result":"written"}}}}"#)
            }),
            ":2: field `kind.outcome.result`: \"written\" answers write, not the acquire",
        ),
        (
            "a commit's cycle id named twice (a retry under the same id)",
            fenced_with_line(10, |line| {
                line.replace(r#""cycle_id":1"#, r#""cycle_id":0"#)
            }),
            ":11: field `kind.op.cycle_id`: 0 is named by op 1 too",
        ),
        (
            "a key twice in one object (the last would win silently)",
            with_line(1, |line| {
                line.replace(r#""outcome":"ok","#, r#""outcome":"fail","outcome":"ok","#)
            }),
            ":2: field `kind.outcome.outcome`: appears twice in one object",
        ),
        (
            "a commit under token 0",
            fenced_with_line(2, |line| line.replace(r#""token":1"#, r#""token":0"#)),
            ":3: field `kind.op.token`: 0",
        ),
        (
            "a guarded row's seq twice",
            fenced_with_line(13, |line| line.replace(r#""seq":2"#, r#""seq":1"#)),
            ":14: field `seq`: 1 appears twice",
        ),
    ];
    assert!(cases.len() >= 12);
    for (name, text, expected) in cases {
        let (code, output) = check(&text);
        assert_eq!(
            code, 2,
            "{name}: exit {code}, expected 2 (refused, not judged):\n{output}"
        );
        assert!(
            output.contains(expected),
            "{name}: expected {expected:?} in:\n{output}"
        );
        assert!(output.contains("(not judged)"), "{name}: {output}");
        assert!(!output.contains("panicked"), "{name}: {output}");
    }
}

#[test]
fn a_file_that_is_not_utf8_is_refused_at_its_line() {
    let mut bytes = (clean().join("\n") + "\n").into_bytes();
    let third_line = bytes
        .iter()
        .enumerate()
        .filter(|(_, &byte)| byte == b'\n')
        .nth(1)
        .unwrap()
        .0
        + 1;
    bytes[third_line + 1] = 0xc3; // a lead byte without its continuation
    let (code, output) = check_bytes(&bytes);
    assert_eq!(code, 2, "{output}");
    assert!(
        output.contains(":3: field `.`: not UTF-8 (byte 2 of the line)"),
        "{output}"
    );
}
