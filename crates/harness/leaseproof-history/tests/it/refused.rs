//! `History::from_json_lines` refuses a history that is not what the format
//! says, naming the line and the field — every structural rule, each at its
//! boundary: the last accepted value passes, the first refused one fails.
//!
//! Goal: the validator's teeth live in its own crate (the binary's catalogue
//! in `leaseproof`'s tests checks the exit codes). Method: small histories
//! written as JSON lines, one fact changed at a time.

use leaseproof_history::History;

use crate::lines::{complete, event, invoke};

const ACQUIRE: &str = r#"{"op":"acquire","scope":"s","owner":"a","ttl_us":100}"#;

/// An acquisition by `a` invoked at 10 and answered `result` at `answered_us`.
fn acquired(result: &str, answered_us: i64) -> String {
    [
        event(0, "a", 10, &invoke(0, ACQUIRE)),
        event(1, "a", answered_us, &complete(0, result)),
    ]
    .join("\n")
}

fn refused(text: &str, line: usize, field: &str) {
    let error = History::from_json_lines(text).expect_err("refused");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("line {line}: field `{field}`")),
        "expected line {line}, field {field}: {message}\n{text}"
    );
}

fn accepted(text: &str) -> History {
    History::from_json_lines(text).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

fn lease(token: u64, granted_at_us: i64, expires_at_us: i64) -> String {
    format!(
        r#"{{"result":"lease","token":{token},"owner":"a","granted_at_us":{granted_at_us},"expires_at_us":{expires_at_us}}}"#
    )
}

#[test]
fn a_lease_has_a_token_of_one_or_more_and_ends_no_earlier_than_it_began() {
    accepted(&acquired(&lease(1, 5, 5), 20));
    refused(
        &acquired(&lease(0, 5, 9), 20),
        2,
        "kind.outcome.result.token",
    );
    refused(
        &acquired(&lease(1, 5, 4), 20),
        2,
        "kind.outcome.result.expires_at_us",
    );
}

#[test]
fn a_lock_promises_a_positive_lifetime_and_a_token_of_one_or_more() {
    accepted(&acquired(r#"{"result":"lock"}"#, 20));
    accepted(&acquired(
        r#"{"result":"lock","token":1,"lifetime_us":1}"#,
        20,
    ));
    refused(
        &acquired(r#"{"result":"lock","token":0}"#, 20),
        2,
        "kind.outcome.result.token",
    );
    refused(
        &acquired(r#"{"result":"lock","lifetime_us":0}"#, 20),
        2,
        "kind.outcome.result.lifetime_us",
    );
    // Both checked, whichever comes first in the record.
    refused(
        &acquired(r#"{"result":"lock","token":3,"lifetime_us":-5}"#, 20),
        2,
        "kind.outcome.result.lifetime_us",
    );
}

#[test]
fn a_commit_names_a_token_of_one_or_more() {
    let commit = |token: u64| {
        event(
            0,
            "a",
            10,
            &invoke(
                0,
                &format!(
                    r#"{{"op":"commit","scope":"s","owner":"a","token":{token},"cycle_id":1,"items":1}}"#
                ),
            ),
        )
    };
    accepted(&commit(1));
    refused(&commit(0), 1, "kind.op.token");
}

#[test]
fn time_never_goes_back_within_a_worker_and_a_completion_follows_its_invoke() {
    // Equal times are fine: two events in one microsecond.
    accepted(&acquired(r#"{"result":"lock"}"#, 10));
    refused(&acquired(r#"{"result":"lock"}"#, 9), 2, "true_time_us");
    // The worker that asked learns the outcome: another worker's
    // completion of its op is refused, even stamped after the invoke.
    let other_worker = [
        event(0, "a", 10, &invoke(0, ACQUIRE)),
        event(1, "b", 10, &complete(0, r#"{"result":"lock"}"#)),
    ]
    .join("\n");
    refused(&other_worker, 2, "kind.op_id");
}

#[test]
fn op_ids_pair_once() {
    let twice_invoked = [
        event(0, "a", 10, &invoke(0, ACQUIRE)),
        event(1, "a", 11, &invoke(0, ACQUIRE)),
    ]
    .join("\n");
    refused(&twice_invoked, 2, "kind.op_id");
    let never_invoked = event(0, "a", 10, &complete(4, r#"{"result":"lock"}"#));
    refused(&never_invoked, 1, "kind.op_id");
    let twice_completed = [
        acquired(r#"{"result":"lock"}"#, 20),
        event(2, "a", 21, &complete(0, r#"{"result":"lock"}"#)),
    ]
    .join("\n");
    refused(&twice_completed, 3, "kind.op_id");
}

#[test]
fn events_are_numbered_by_position_and_come_before_rows() {
    let renumbered = acquired(r#"{"result":"lock"}"#, 20).replace(r#""index":1"#, r#""index":2"#);
    refused(&renumbered, 2, "index");
    let row = r#"{"record":"work_row","seq":1,"scope":"s","owner":"a","cycle_id":1,"item":0}"#;
    let event_after_row = [
        event(0, "a", 10, &invoke(0, ACQUIRE)),
        row.to_string(),
        event(1, "a", 20, &complete(0, r#"{"result":"lock"}"#)),
    ]
    .join("\n");
    refused(&event_after_row, 3, ".");
}

#[test]
fn rows_have_unique_seqs_and_guarded_rows_a_token_of_one_or_more() {
    let guarded = |seq: u64, token: u64| {
        format!(
            r#"{{"record":"guarded_row","seq":{seq},"scope":"s","owner":"a","token":{token},"cycle_id":1,"item":0,"written_at_us":5}}"#
        )
    };
    let work = |seq: u64| {
        format!(
            r#"{{"record":"work_row","seq":{seq},"scope":"s","owner":"a","cycle_id":2,"item":0}}"#
        )
    };
    let base = acquired(r#"{"result":"lock"}"#, 20);
    let history = accepted(&[base.clone(), guarded(1, 1), work(2)].join("\n"));
    assert_eq!(
        (history.guarded_rows.len(), history.work_rows.len()),
        (1, 1)
    );
    refused(&[base.clone(), guarded(1, 0)].join("\n"), 3, "token");
    refused(
        &[base.clone(), guarded(1, 1), guarded(1, 1)].join("\n"),
        4,
        "seq",
    );
    refused(&[base.clone(), work(3), work(3)].join("\n"), 4, "seq");
    // Each table draws its own sequence: one seq in both is two rows.
    accepted(&[base, guarded(5, 1), work(5)].join("\n"));
}

#[test]
fn the_design_line_is_the_first_and_only_once() {
    let design = r#"{"record":"design","grant_stamps":"decision"}"#;
    let base = acquired(r#"{"result":"lock"}"#, 20);
    let history = accepted(&[design, &base].join("\n"));
    assert!(history.design.is_some());
    // Blank lines before it do not count as records.
    accepted(&["", design, &base].join("\n"));
    refused(&[&base, design].join("\n"), 3, "record");
    refused(&[design, design, &base].join("\n"), 2, "record");
    refused(
        &[r#"{"record":"design","grant_stamps":"whenever"}"#, &base].join("\n"),
        1,
        "grant_stamps",
    );
}

#[test]
fn a_result_answers_only_its_own_op() {
    refused(
        &acquired(r#"{"result":"released","released_at_us":5}"#, 20),
        2,
        "kind.outcome.result",
    );
    refused(
        &acquired(r#"{"result":"written"}"#, 20),
        2,
        "kind.outcome.result",
    );
    let release = r#"{"op":"release","scope":"s","owner":"a","token":1}"#;
    let released = |result: &str| {
        [
            event(0, "a", 10, &invoke(0, release)),
            event(1, "a", 20, &complete(0, result)),
        ]
        .join("\n")
    };
    accepted(&released(r#"{"result":"unlocked"}"#));
    refused(&released(r#"{"result":"lock"}"#), 2, "kind.outcome.result");
}

#[test]
fn a_table_is_read_once_and_is_one_of_the_two() {
    let read = |table: &str| format!(r#"{{"record":"table_read","table":"{table}"}}"#);
    let events = acquired(&lease(1, 5, 9), 20);
    accepted(&[events.clone(), read("guarded_row"), read("work_row")].join("\n"));
    refused(
        &[events.clone(), read("guarded_row"), read("guarded_row")].join("\n"),
        4,
        "table",
    );
    refused(&[events.clone(), read("orders")].join("\n"), 3, "table");
    // After the events, like the rows.
    refused(&[read("work_row"), events].join("\n"), 2, ".");
}

#[test]
fn a_value_of_the_wrong_type_is_named_by_its_path_inside_the_tagged_objects() {
    let op = r#"{"op":"acquire","scope":"s","owner":"a","ttl_us":"100"}"#;
    refused(&event(0, "a", 10, &invoke(0, op)), 1, "kind.op.ttl_us");
    refused(
        &acquired(r#"{"result":"lock","token":"7"}"#, 20),
        2,
        "kind.outcome.result.token",
    );
    // A field serde names itself keeps serde's path.
    refused(
        &event(0, "a", 10, &invoke(0, ACQUIRE))
            .replace(r#""incarnation":0"#, r#""incarnation":"0""#),
        1,
        "incarnation",
    );
}

#[test]
fn the_field_finder_starts_from_the_whole_object_and_stops_at_a_leaf() {
    use leaseproof_history::{field_in_error, Outcome};
    let find = |json: &str| {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        let problem = serde_json::from_value::<Outcome>(value.clone())
            .unwrap_err()
            .to_string();
        field_in_error::<Outcome>(&value, ".", &problem)
    };
    assert_eq!(
        find(r#"{"outcome":"ok","result":{"result":"lock","token":"7"}}"#),
        "result.token"
    );
    assert_eq!(find(r#"{"outcome":"unknown","reason":5}"#), "reason");
    // An unknown variant: the key that holds it.
    assert_eq!(find(r#"{"outcome":"maybe"}"#), "outcome");
}

#[test]
fn a_key_twice_in_one_object_is_refused_at_its_path() {
    // serde would keep the last silently: `fail` read as `ok`.
    let twice = r#"{"type":"complete","op_id":0,"outcome":{"outcome":"fail","outcome":"ok","result":{"result":"lock"}}}"#;
    refused(
        &[
            event(0, "a", 10, &invoke(0, ACQUIRE)),
            event(1, "a", 20, twice),
        ]
        .join("\n"),
        2,
        "kind.outcome.outcome",
    );
    refused(
        &event(0, "a", 10, &invoke(0, ACQUIRE))
            .replace(r#""worker":"a","#, r#""worker":"a","worker":"b","#),
        1,
        "worker",
    );
    assert_eq!(
        leaseproof_history::duplicate_key(r#"{"a":[{"b":1,"b":2}]}"#),
        Some("a[0].b".to_string())
    );
    assert_eq!(
        leaseproof_history::duplicate_key(r#"{"a":{"b":1},"c":{"b":2}}"#),
        None
    );
}

#[test]
fn times_beyond_two_to_the_62_and_tokens_beyond_a_bigint_are_refused() {
    const LIMIT: i64 = 1 << 62;
    accepted(&acquired(&lease(1, -LIMIT, LIMIT), 20));
    refused(
        &acquired(&lease(1, -LIMIT - 1, 5), 20),
        2,
        "kind.outcome.result.granted_at_us",
    );
    refused(
        &acquired(&lease(1, 5, LIMIT + 1), 20),
        2,
        "kind.outcome.result.expires_at_us",
    );
    accepted(&acquired(&lease(i64::MAX as u64, 5, 9), 20));
    refused(
        &acquired(&lease(i64::MAX as u64 + 1, 5, 9), 20),
        2,
        "kind.outcome.result.token",
    );
    refused(&acquired(&lease(1, 5, 9), LIMIT + 1), 2, "local_time_us");
}

#[test]
fn an_unknown_or_missing_field_and_an_unknown_tag_are_named_by_their_path() {
    // Unknown field: where it stands.
    refused(
        &acquired(r#"{"result":"lock","tokn":7}"#, 20),
        2,
        "kind.outcome.result.tokn",
    );
    // Missing field: the object that lacks it.
    let op = r#"{"op":"acquire","scope":"s","ttl_us":100}"#;
    refused(&event(0, "a", 10, &invoke(0, op)), 1, "kind.op.owner");
    // Unknown tag: the key that holds it.
    refused(
        &acquired(r#"{"result":"leased"}"#, 20),
        2,
        "kind.outcome.result.result",
    );
    let failed =
        r#"{"type":"complete","op_id":0,"outcome":{"outcome":"fail","reason":{"kind":"lost"}}}"#;
    let text = [
        event(0, "a", 10, &invoke(0, ACQUIRE)),
        event(1, "a", 20, failed),
    ]
    .join("\n");
    refused(&text, 2, "kind.outcome.reason.kind");
}
