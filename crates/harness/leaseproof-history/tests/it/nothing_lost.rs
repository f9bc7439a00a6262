//! I4 nothing lost: an ok commit is whole in the table, a failed one absent, an
//! unknown one whole or absent — and no cycle is ever partial.

use leaseproof_history::{History, Invariant, TablesRead};

use crate::builder::{assert_passes, only_violation, Builder, CommitEnd};

fn holder() -> Builder {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder
}

#[test]
fn reported_commit_missing_from_the_table_is_a_violation() {
    let mut builder = holder();
    let (invoked, completed) = builder.commit("a", "s", 1, 1, 3, CommitEnd::Ok, 1_010);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::NothingLost);
    assert_eq!(violation.events, vec![invoked, completed]);
    assert!(violation.rows.is_empty());
    assert!(
        violation.message.contains("reported committed is missing"),
        "{violation}"
    );
}

#[test]
fn a_commit_is_judged_missing_only_from_a_table_that_was_read() {
    // The same ok commit, no row: the file read no table (the rows left
    // out: judged from the operations, not convicted), then a file that
    // read it and found it empty (`table_read`): missing, I4.
    let mut builder = holder();
    builder.commit("a", "s", 1, 1, 3, CommitEnd::Ok, 1_010);
    let mut history = builder.build();
    history.tables_read = TablesRead::default();
    let text = history.to_json_lines();
    assert!(!text.contains("table_read"), "{text}");
    let unread = History::from_json_lines(&text).unwrap();
    let report = assert_passes(&unread);
    assert!(
        report
            .not_judged
            .iter()
            .any(|note| note.contains("I4 for commits: the guarded table was not read")),
        "{report}"
    );
    let read_empty = format!("{text}{{\"record\":\"table_read\",\"table\":\"guarded_row\"}}\n");
    let violation = only_violation(&History::from_json_lines(&read_empty).unwrap());
    assert_eq!(violation.invariant, Invariant::NothingLost);
    assert!(
        violation.message.contains("reported committed is missing"),
        "{violation}"
    );
}

#[test]
fn rows_of_one_table_say_nothing_of_the_other() {
    // Work rows were read, the guarded table not: the commit is not judged.
    let mut builder = holder();
    builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 1_010);
    let mut history = builder.build();
    history.tables_read = TablesRead {
        guarded: false,
        work: true,
    };
    assert_passes(&history);
}

#[test]
fn failed_commit_present_in_the_table_is_a_violation() {
    let mut builder = holder();
    let (invoked, completed) = builder.commit("a", "s", 1, 1, 2, CommitEnd::Stale, 1_010);
    builder.rows("a", "s", 1, 1, 0..2, 1, 1_010);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::NothingLost);
    assert_eq!(violation.events, vec![invoked, completed]);
    assert_eq!(violation.rows, vec![1, 2]);
    assert!(
        violation
            .message
            .contains("reported failed is in the table"),
        "{violation}"
    );
}

#[test]
fn partial_cycle_is_a_violation_whatever_the_outcome() {
    for end in [
        CommitEnd::Ok,
        CommitEnd::Stale,
        CommitEnd::Unknown,
        CommitEnd::NeverCompleted,
    ] {
        let mut builder = holder();
        let (invoked, completed) = builder.commit("a", "s", 1, 1, 3, end, 1_010);
        builder.rows("a", "s", 1, 1, 0..2, 1, 1_010);
        let violation = only_violation(&builder.build());
        assert_eq!(violation.invariant, Invariant::NothingLost, "{end:?}");
        let mut events = vec![invoked, completed];
        events.dedup();
        assert_eq!(violation.events, events, "{end:?}");
        assert_eq!(violation.rows, vec![1, 2], "{end:?}");
        assert!(
            violation.message.contains("partial: 2 of 3 items"),
            "{violation}"
        );
    }
}

#[test]
fn lost_commit_reply_is_allowed_present_or_absent() {
    let mut builder = holder();
    builder.commit("a", "s", 1, 1, 2, CommitEnd::Unknown, 1_010);
    builder.rows("a", "s", 1, 1, 0..2, 1, 1_010);
    builder.commit("a", "s", 1, 2, 2, CommitEnd::Unknown, 1_020);
    builder.commit("a", "s", 1, 3, 2, CommitEnd::NeverCompleted, 1_030);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.unknown_ops, 3);
    assert_eq!(report.stats.commits, 0);
}

#[test]
fn item_written_twice_is_a_violation() {
    let mut builder = holder();
    let (invoked, completed) = builder.commit("a", "s", 1, 1, 2, CommitEnd::Ok, 1_010);
    builder.rows("a", "s", 1, 1, 0..2, 1, 1_010);
    builder.rows("a", "s", 1, 1, 1..2, 3, 1_010);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::NothingLost);
    assert_eq!(violation.events, vec![invoked, completed]);
    assert_eq!(violation.rows, vec![3]);
}
