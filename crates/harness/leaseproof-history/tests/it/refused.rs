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
    // A millisecond clock, an invoke rounded down and a completion up: the
    // next invoke in the same tick goes back, and the message says why.
    let coarse = [
        acquired(r#"{"result":"lock"}"#, 1_000),
        event(2, "a", 500, &invoke(1, ACQUIRE)),
    ]
    .join("\n");
    refused(&coarse, 3, "true_time_us");
    let message = History::from_json_lines(&coarse).unwrap_err().to_string();
    assert!(message.contains("stamp in microseconds"), "{message}");
    let message = History::from_json_lines(&acquired(r#"{"result":"lock"}"#, 9))
        .unwrap_err()
        .to_string();
    assert!(!message.contains("microseconds"), "{message}");
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
fn a_workers_incarnation_never_goes_back() {
    let incarnations = |first: u64, second: u64| {
        [
            event(0, "a", 10, &invoke(0, ACQUIRE))
                .replace(r#""incarnation":0"#, &format!(r#""incarnation":{first}"#)),
            event(1, "a", 11, &invoke(1, ACQUIRE))
                .replace(r#""incarnation":0"#, &format!(r#""incarnation":{second}"#)),
        ]
        .join("\n")
    };
    accepted(&incarnations(1, 1));
    accepted(&incarnations(1, 2));
    refused(&incarnations(2, 1), 2, "incarnation");
}

#[test]
fn a_ttl_is_zero_or_more() {
    let acquire = |ttl_us: i64| {
        event(
            0,
            "a",
            10,
            &invoke(
                0,
                &format!(r#"{{"op":"acquire","scope":"s","owner":"a","ttl_us":{ttl_us}}}"#),
            ),
        )
    };
    // 0: a lock that lives with its session.
    accepted(&acquire(0));
    refused(&acquire(-1), 1, "kind.op.ttl_us");
    let renew = event(
        0,
        "a",
        10,
        &invoke(
            0,
            r#"{"op":"renew","scope":"s","owner":"a","token":1,"ttl_us":-1}"#,
        ),
    );
    refused(&renew, 1, "kind.op.ttl_us");
}

#[test]
fn each_commit_and_each_write_of_an_owner_names_a_cycle_of_its_own() {
    let twice = |first: &str, second: &str| {
        [
            event(0, "a", 10, &invoke(0, first)),
            event(1, "a", 11, &invoke(1, second)),
        ]
        .join("\n")
    };
    let write = |owner: &str, cycle_id: u64| {
        format!(r#"{{"op":"write","scope":"s","owner":"{owner}","cycle_id":{cycle_id},"items":1}}"#)
    };
    let commit = |owner: &str, cycle_id: u64| {
        format!(
            r#"{{"op":"commit","scope":"s","owner":"{owner}","token":1,"cycle_id":{cycle_id},"items":1}}"#
        )
    };
    refused(
        &twice(&write("a", 1), &write("a", 1)),
        2,
        "kind.op.cycle_id",
    );
    refused(
        &twice(&commit("a", 1), &commit("a", 1)),
        2,
        "kind.op.cycle_id",
    );
    // Another cycle, another owner, or the other kind of op: rows tell them apart.
    accepted(&twice(&write("a", 1), &write("a", 2)));
    accepted(&twice(&write("a", 1), &write("b", 1)));
    accepted(&twice(&write("a", 1), &commit("a", 1)));
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

/// A key or a tag that stands at several depths is named where it is the
/// culprit, not at the deepest object that has (or lacks) one.
#[test]
fn a_field_is_named_at_its_own_depth_when_its_name_stands_at_others() {
    // Missing at the top, though `kind.op` lacks an `index` too.
    let no_index = event(0, "a", 10, &invoke(0, ACQUIRE)).replace(r#""index":0,"#, "");
    refused(&no_index, 1, "index");
    // Missing in `kind`, though the result below lacks an `op_id` too.
    let no_op_id = [
        event(0, "a", 10, &invoke(0, ACQUIRE)),
        event(1, "a", 20, &complete(0, r#"{"result":"lock"}"#)).replace(r#""op_id":0,"#, ""),
    ]
    .join("\n");
    refused(&no_op_id, 2, "kind.op_id");
    // A `result` a failure cannot have, holding an object with a `result` tag.
    let failed_with_result = r#"{"type":"complete","op_id":0,"outcome":{"outcome":"fail","reason":{"kind":"held"},"result":{"result":"lock"}}}"#;
    let text = [
        event(0, "a", 10, &invoke(0, ACQUIRE)),
        event(1, "a", 20, failed_with_result),
    ]
    .join("\n");
    refused(&text, 2, "kind.outcome.result");
}

#[test]
fn a_result_its_op_cannot_have_is_refused_by_both_names() {
    let text = acquired(r#"{"result":"released","released_at_us":9}"#, 20);
    refused(&text, 2, "kind.outcome.result");
    let message = History::from_json_lines(&text).unwrap_err().to_string();
    assert!(
        message.contains(r#""released" answers release, not the acquire this op id invoked"#),
        "{message}"
    );
}

/// Token 0 names a lock without tokens: a renewal or release naming it for
/// a grant that carried a token matches no grant, and judging it would take
/// that grant for never renewed or released. Refused, by the invoke when
/// the grant's token was already answered, else by the answer.
#[test]
fn a_renewal_or_release_of_a_tokened_grant_names_its_token() {
    let op = |name: &str, token: u64| match name {
        "renew" => {
            format!(r#"{{"op":"renew","scope":"s","owner":"a","token":{token},"ttl_us":100}}"#)
        }
        _ => format!(r#"{{"op":"release","scope":"s","owner":"a","token":{token}}}"#),
    };
    let after_grant = |name: &str, token: u64, answer: &str| {
        [
            acquired(&lease(1, 5, 105), 20),
            event(2, "a", 30, &invoke(1, &op(name, token))),
            event(3, "a", 40, &complete(1, answer)),
        ]
        .join("\n")
    };
    let released = r#"{"result":"released","released_at_us":35}"#;
    accepted(&after_grant("release", 1, released));
    refused(&after_grant("release", 0, released), 3, "kind.op.token");
    refused(
        &after_grant("renew", 0, &lease(1, 5, 135)),
        3,
        "kind.op.token",
    );
    // Nothing answered before: the answer gives it away.
    let alone = |name: &str, answer: &str| {
        [
            event(0, "a", 30, &invoke(1, &op(name, 0))),
            event(1, "a", 40, &complete(1, answer)),
        ]
        .join("\n")
    };
    refused(&alone("release", released), 2, "kind.outcome.result");
    refused(&alone("renew", &lease(1, 5, 135)), 2, "kind.outcome.result");
    refused(
        &alone("renew", r#"{"result":"lock","token":4}"#),
        2,
        "kind.outcome.result",
    );
    // Locks without tokens name 0 throughout.
    accepted(&alone("release", r#"{"result":"unlocked"}"#));
    accepted(&alone("renew", r#"{"result":"lock","lifetime_us":100}"#));
    let lock_then_release = [
        acquired(r#"{"result":"lock","lifetime_us":100}"#, 20),
        event(2, "a", 30, &invoke(1, &op("release", 0))),
        event(3, "a", 40, &complete(1, r#"{"result":"unlocked"}"#)),
    ]
    .join("\n");
    accepted(&lock_then_release);
}

/// A unit value is its name: serde's derive would also take `{"name": null}`,
/// a form the format does not have; a result with no fields has none, and a
/// stray one (a typo) is refused as in every other result.
#[test]
fn names_are_strings_and_a_result_without_fields_takes_none() {
    let design = |stamps: &str| format!(r#"{{"record":"design","grant_stamps":{stamps}}}"#);
    let base = acquired(r#"{"result":"lock"}"#, 20);
    accepted(&[design(r#""decision""#), base.clone()].join("\n"));
    refused(
        &[design(r#"{"decision":null}"#), base.clone()].join("\n"),
        1,
        "grant_stamps",
    );
    let read = r#"{"record":"table_read","table":{"guarded_row":null}}"#;
    refused(&[base.clone(), read.to_string()].join("\n"), 3, "table");
    let failed = r#"{"type":"complete","op_id":0,"outcome":{"outcome":"fail","reason":{"kind":{"held":null}}}}"#;
    let text = [
        event(0, "a", 10, &invoke(0, ACQUIRE)),
        event(1, "a", 20, failed),
    ]
    .join("\n");
    refused(&text, 2, "kind.outcome.reason.kind");

    let release = r#"{"op":"release","scope":"s","owner":"a","token":0}"#;
    let unlocked = |result: &str| {
        [
            event(0, "a", 10, &invoke(0, release)),
            event(1, "a", 20, &complete(0, result)),
        ]
        .join("\n")
    };
    accepted(&unlocked(r#"{"result":"unlocked"}"#));
    refused(
        &unlocked(r#"{"result":"unlocked","released_at_us":5}"#),
        2,
        "kind.outcome.result.released_at_us",
    );
    let write = r#"{"op":"write","scope":"s","owner":"a","cycle_id":1,"items":1}"#;
    let written = [
        event(0, "a", 10, &invoke(0, write)),
        event(1, "a", 20, &complete(0, r#"{"result":"written","rows":1}"#)),
    ]
    .join("\n");
    refused(&written, 2, "kind.outcome.result.rows");
}

/// A field given as `null` is read as absent, the design's too.
#[test]
fn a_design_field_given_as_null_is_absent() {
    use leaseproof_history::{CheckConfig, GrantStamps};
    let base = acquired(r#"{"result":"lock"}"#, 20);
    let design = r#"{"record":"design","grant_stamps":null,"unfenced_workers":null}"#;
    let history = accepted(&[design.to_string(), base].join("\n"));
    assert_eq!(
        history.design,
        Some(CheckConfig {
            grant_stamps: GrantStamps::undeclared(),
            unfenced_workers: Default::default(),
            ..Default::default()
        })
    );
}

/// A time that is not an integer is refused for its type, not its range.
#[test]
fn a_time_that_is_not_an_integer_is_refused_as_such() {
    for time in ["1.5", "1.0", "-0"] {
        let text = acquired(r#"{"result":"lock"}"#, 20).replace(
            r#""local_time_us":20"#,
            &format!(r#""local_time_us":{time}"#),
        );
        refused(&text, 2, "local_time_us");
        let message = History::from_json_lines(&text).unwrap_err().to_string();
        assert!(message.contains("floating point"), "{message}");
        assert!(!message.contains("2^62"), "{message}");
    }
    // An integer beyond 64 bits reads as a float: it is out of range.
    let huge = acquired(r#"{"result":"lock"}"#, 20).replace(
        r#""local_time_us":20"#,
        r#""local_time_us":99999999999999999999"#,
    );
    refused(&huge, 2, "local_time_us");
    let message = History::from_json_lines(&huge).unwrap_err().to_string();
    assert!(message.contains("2^62"), "{message}");
    refused(
        &acquired(&lease(1, 5, 9), 20).replace(r#""token":1"#, r#""token":99999999999999999999"#),
        2,
        "kind.outcome.result.token",
    );
    // Times at the two ends of the range, a worker's time going back: no overflow.
    let far = [
        event(0, "a", 1 << 62, &invoke(0, ACQUIRE)),
        event(1, "a", -(1 << 62), &invoke(1, ACQUIRE)),
    ]
    .join("\n");
    refused(&far, 2, "true_time_us");
}

/// The design's unfenced workers are workers of the history: a name no
/// event has (a typo) would judge the worker it meant as fenced.
#[test]
fn an_unfenced_worker_the_events_lack_is_refused_at_the_design_line() {
    let design = |worker: &str| {
        format!(
            r#"{{"record":"design","grant_stamps":"decision","unfenced_workers":["{worker}"]}}"#
        )
    };
    let base = acquired(r#"{"result":"lock"}"#, 20);
    accepted(&[design("a"), base.clone()].join("\n"));
    refused(
        &["".to_string(), design("A"), base.clone()].join("\n"),
        2,
        "unfenced_workers",
    );
    // What a writer declares names only workers with events.
    let mut history = accepted(&base);
    history.declare(leaseproof_history::CheckConfig {
        unfenced_workers: ["a", "b"].map(str::to_string).into(),
        grant_stamps: leaseproof_history::GrantStamps::Decision,
        ..Default::default()
    });
    let declared = history.design.clone().unwrap();
    assert_eq!(declared.unfenced_workers, ["a".to_string()].into());
    accepted(&history.to_json_lines());
}
