//! A history that contradicts itself is reported, not silently judged: a
//! completion without invoke, an op id invoked twice, a result of the wrong
//! kind, a cycle committed twice. Also the report's text a person reads.

use leaseproof_history::{check, CheckConfig, EventKind, Invariant, OpResult, Outcome};

use crate::builder::{only_violation, Builder, CommitEnd};

#[test]
fn completion_without_invoke_is_reported() {
    let mut builder = Builder::new();
    let completed = builder.complete(
        "a",
        42,
        Outcome::Unknown {
            reason: "?".to_string(),
        },
    );
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::WellFormed);
    assert_eq!(violation.events, vec![completed]);
}

#[test]
fn op_id_invoked_twice_is_reported() {
    let mut builder = Builder::new();
    let (first, _) = builder.acquire_held("a", "s");
    let mut history = builder.build();
    let duplicate = history.events[0].clone();
    let second = history.push("b", 0, 10, 10, duplicate.kind);
    let violation = only_violation(&history);
    assert_eq!(violation.invariant, Invariant::WellFormed);
    assert_eq!(violation.events, vec![first, second]);
}

#[test]
fn result_of_the_wrong_kind_is_reported() {
    let mut builder = Builder::new();
    let (invoked, _) = builder.acquire_held("a", "s");
    let mut history = builder.build();
    let EventKind::Invoke { op_id, .. } = history.events[invoked as usize].kind else {
        panic!("first event is the invoke");
    };
    history.events.pop();
    let wrong = Outcome::Ok {
        result: OpResult::Released { released_at_us: 5 },
    };
    let completed = history.push(
        "a",
        0,
        3,
        3,
        EventKind::Complete {
            op_id,
            outcome: wrong,
        },
    );
    let violation = only_violation(&history);
    assert_eq!(violation.invariant, Invariant::WellFormed);
    assert_eq!(violation.events, vec![completed]);
}

#[test]
fn cycle_committed_twice_is_reported() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (first, _) = builder.commit("a", "s", 1, 1, 1, CommitEnd::Stale, 0);
    let (second, _) = builder.commit("a", "s", 1, 1, 1, CommitEnd::Stale, 0);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::WellFormed);
    assert_eq!(violation.events, vec![first, second]);
}

#[test]
fn report_text_names_counts_then_one_line_per_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_050);
    builder.commit("b", "s", 2, 1, 2, CommitEnd::Ok, 1_060);
    let report = check(&builder.build(), &CheckConfig::default());
    let text = report.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("2 violation(s); grants=2 "), "{text}");
    assert!(lines[0].contains("takeovers=1"), "{text}");
    assert!(
        lines[1].contains("I1 mutual exclusion [s]: overlap: a token 1 holds [1000, 1100)"),
        "{text}"
    );
    assert!(
        lines[2].contains(
            "I4 nothing lost [s]: b cycle 1 (token 2, 2 items) reported committed is missing"
        ),
        "{text}"
    );
}
