//! The history format: JSON lines round trip, errors name their line, files,
//! merging several processes' histories, and the recorder shared by threads.

use leaseproof_history::{
    check, CheckConfig, EventKind, FailReason, History, HistoryError, Op, Outcome, Recorder, Stamp,
};

use crate::builder::{Builder, CommitEnd};

fn sample_history() -> History {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.belief_start("a", "s", 1);
    builder.commit("a", "s", 1, 10, 2, CommitEnd::Ok, 1_010);
    builder.rows("a", "s", 1, 10, 0..2, 1, 1_010);
    builder.commit("a", "s", 1, 11, 2, CommitEnd::Unknown, 1_020);
    builder.belief_end("a", "s", 1);
    builder.release_ok("a", "s", 1, 1_030);
    builder.acquire_held("b", "s");
    builder.acquire_unknown("b", "s");
    builder.commit("b", "s", 2, 1, 1, CommitEnd::Stale, 0);
    builder.build()
}

#[test]
fn json_lines_round_trip_preserves_every_record() {
    let history = sample_history();
    let text = history.to_json_lines();
    // One `table_read` line: the work table was read and found empty.
    assert_eq!(
        text.lines().count(),
        history.events.len() + 1 + history.guarded_rows.len()
    );
    assert!(text.contains(r#"{"record":"table_read","table":"work_row"}"#));
    let parsed = History::from_json_lines(&text).expect("parses");
    assert_eq!(parsed, history);
    assert!(text.contains(r#""record":"event""#));
    assert!(text.contains(r#""record":"guarded_row""#));
}

#[test]
fn json_lines_skip_blank_lines_and_name_the_bad_line() {
    let history = sample_history();
    let mut text = history.to_json_lines();
    text.insert(0, '\n');
    assert_eq!(History::from_json_lines(&text).expect("parses"), history);
    text.push_str("{\"record\":\"event\",\"index\":\"not a number\"}\n");
    let error = History::from_json_lines(&text).expect_err("last line is bad");
    let HistoryError::Invalid {
        line_number, field, ..
    } = error
    else {
        panic!("expected an invalid line, got {error}");
    };
    assert_eq!(line_number, text.lines().count());
    assert_eq!(field, "index");
}

#[test]
fn save_then_load_gives_the_same_history() {
    let history = sample_history();
    let directory = tempfile::tempdir().expect("temp dir");
    let path = directory.path().join("run.jsonl");
    history.save(&path).expect("saves");
    assert_eq!(History::load(&path).expect("loads"), history);
    let missing = History::load(&directory.path().join("missing.jsonl"));
    assert!(matches!(missing, Err(HistoryError::Io { .. })));
}

#[test]
fn a_file_that_is_not_utf8_is_refused_at_its_line() {
    let directory = tempfile::tempdir().expect("temp dir");
    let path = directory.path().join("run.jsonl");
    let mut bytes = sample_history().to_json_lines().into_bytes();
    let second_line = bytes
        .iter()
        .position(|&byte| byte == b'\n')
        .expect("two lines")
        + 1;
    bytes[second_line + 3] = 0xff;
    std::fs::write(&path, bytes).expect("writes");
    let error = History::load(&path).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "line 2: field `.`: not UTF-8 (byte 4 of the line): JSON text is UTF-8"
    );
}

#[test]
fn merge_orders_by_true_time_reindexes_and_keeps_colliding_op_ids_apart() {
    // Two processes, each numbering its ops from 0: a holds first, b takes over.
    let mut process_a = Builder::new();
    process_a.acquire_ok("a", "s", 1, 1_000); // true times 1, 2
    process_a.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 1_010); // 3, 4
    process_a.rows("a", "s", 1, 1, 0..1, 1, 1_010);
    let mut process_b = Builder::new();
    process_b.acquire_held("b", "s"); // 1, 2
    process_b.acquire_ok("b", "s", 2, 1_100); // 3, 4
    process_b.commit("b", "s", 2, 1, 1, CommitEnd::Ok, 1_110); // 5, 6
    process_b.rows("a", "s", 1, 1, 0..1, 1, 1_010); // b read the same table
    process_b.rows("b", "s", 2, 1, 0..1, 2, 1_110);

    let merged = History::merge([process_a.build(), process_b.build()]);
    assert_eq!(merged.events.len(), 4 + 6);
    for (position, event) in merged.events.iter().enumerate() {
        assert_eq!(event.index, position as u64);
    }
    let order: Vec<(i64, &str)> = merged
        .events
        .iter()
        .map(|event| (event.true_time_us, event.worker.as_str()))
        .collect();
    let mut expected = order.clone();
    expected.sort();
    assert_eq!(order, expected);
    assert_eq!(merged.guarded_rows.len(), 2, "the shared row appears once");

    let invoked: Vec<u64> = merged
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Invoke { op_id, .. } => Some(*op_id),
            _ => None,
        })
        .collect();
    let mut distinct = invoked.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), invoked.len(), "op ids unique after merge");

    let report = check(&merged, &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.commits, 2);
    assert_eq!(report.stats.takeovers, 1);
    assert_eq!(report.stats.distinct_holders, 2);
}

/// A table one process read was read for the merged history: an empty one
/// read by one input is evidence that its rows are not there, though the
/// other input read nothing.
#[test]
fn merge_keeps_a_table_read_by_any_input() {
    let mut read_both = History::default();
    read_both.tables_read.guarded = true;
    read_both.tables_read.work = true;
    for order in [
        [read_both.clone(), History::default()],
        [History::default(), read_both.clone()],
    ] {
        let merged = History::merge(order);
        assert!(merged.tables_read.guarded);
        assert!(merged.tables_read.work);
    }
    let neither = History::merge([History::default(), History::default()]);
    assert!(!neither.tables_read.guarded);
    assert!(!neither.tables_read.work);
}

#[test]
fn recorder_shared_by_threads_gives_unique_op_ids_and_indices() {
    let recorder = Recorder::new();
    let threads: Vec<_> = (0..4)
        .map(|thread_index| {
            let recorder = recorder.clone();
            std::thread::spawn(move || {
                let worker = format!("w{thread_index}");
                for step in 0..50 {
                    let stamp = Stamp {
                        worker: &worker,
                        incarnation: 0,
                        true_time_us: step,
                        local_time_us: step,
                    };
                    let op_id = recorder.invoke(
                        stamp,
                        Op::Acquire {
                            scope: "s".to_string(),
                            owner: worker.clone(),
                            ttl_us: 10,
                        },
                    );
                    recorder.complete(
                        stamp,
                        op_id,
                        leaseproof_history::Outcome::Fail {
                            reason: leaseproof_history::FailReason::Held,
                        },
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread ran");
    }
    let history = recorder.snapshot();
    assert_eq!(history.events.len(), 4 * 50 * 2);
    for (position, event) in history.events.iter().enumerate() {
        assert_eq!(event.index, position as u64);
    }
    let report = check(&history, &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.grants, 0);
}

#[test]
fn a_check_report_round_trips_through_json_naming_each_invariant_by_its_slug() {
    for invariant in leaseproof_history::Invariant::ALL {
        let value = serde_json::to_value(invariant).unwrap();
        assert_eq!(
            value,
            serde_json::Value::String(invariant.slug().to_string())
        );
        let back: leaseproof_history::Invariant = serde_json::from_value(value).unwrap();
        assert_eq!(back, invariant);
    }
    // A report with violations, a possible one, a rule not judged and stats.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 10, 1, CommitEnd::Ok, 1_010);
    builder.acquire_ok("b", "s", 1, 1_000);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(!report.violations.is_empty(), "{report:?}");
    let text = serde_json::to_string(&report).unwrap();
    let back: leaseproof_history::CheckReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, report);
    assert!(text.contains("\"invariant\":\"i"), "{text}");
    // Unknown fields are refused: a reader never guesses.
    let padded = text.replacen('{', "{\"extra\":1,", 1);
    assert!(serde_json::from_str::<leaseproof_history::CheckReport>(&padded).is_err());
}

/// A fail reason as the format documents it: `{"kind", "detail"}`, the
/// detail a note for `held` and `stale`, required for `error`.
#[test]
fn fail_reasons_take_the_documented_detail() {
    let line = |reason: &str| {
        format!(
            "{{\"record\":\"event\",\"index\":0,\"worker\":\"a\",\"incarnation\":0,\"true_time_us\":1,\"local_time_us\":1,\"kind\":{{\"type\":\"invoke\",\"op_id\":0,\"op\":{{\"op\":\"acquire\",\"scope\":\"s\",\"owner\":\"a\",\"ttl_us\":100}}}}}}\n\
             {{\"record\":\"event\",\"index\":1,\"worker\":\"a\",\"incarnation\":0,\"true_time_us\":2,\"local_time_us\":2,\"kind\":{{\"type\":\"complete\",\"op_id\":0,\"outcome\":{{\"outcome\":\"fail\",\"reason\":{reason}}}}}}}\n"
        )
    };
    let reason_of = |text: &str| match &History::from_json_lines(text).unwrap().events[1].kind {
        EventKind::Complete {
            outcome: Outcome::Fail { reason },
            ..
        } => reason.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(reason_of(&line(r#"{"kind":"held"}"#)), FailReason::Held);
    assert_eq!(
        reason_of(&line(r#"{"kind":"held","detail":"b holds it"}"#)),
        FailReason::Held
    );
    assert_eq!(
        reason_of(&line(r#"{"kind":"stale","detail":"token 3 < 4"}"#)),
        FailReason::Stale
    );
    assert_eq!(
        reason_of(&line(r#"{"kind":"error","detail":"disk full"}"#)),
        FailReason::Error("disk full".to_string())
    );
    for refused in [
        r#"{"kind":"error"}"#,
        r#"{"kind":"hold"}"#,
        r#"{"kind":"held","detial":"typo"}"#,
    ] {
        let error = History::from_json_lines(&line(refused)).unwrap_err();
        assert!(
            error.to_string().starts_with("line 2:"),
            "{refused}: {error}"
        );
    }
    // Written as before: a unit kind has no detail.
    let mut history = History::from_json_lines(&line(r#"{"kind":"held","detail":"x"}"#)).unwrap();
    history.events.truncate(2);
    assert!(history
        .to_json_lines()
        .contains(r#""reason":{"kind":"held"}"#));
}

#[test]
fn a_cycle_id_named_by_two_commits_of_one_owner_is_refused() {
    // Rows are matched to their commit by (owner, cycle id): a retry that
    // reuses the id would make them ambiguous, so the file is not judged.
    let commit = |index: u64, op_id: u64, scope: &str| {
        format!(
            r#"{{"record":"event","index":{index},"worker":"a","incarnation":0,"true_time_us":{index},"local_time_us":{index},"kind":{{"type":"invoke","op_id":{op_id},"op":{{"op":"commit","scope":"{scope}","owner":"a","token":1,"cycle_id":7,"items":1}}}}}}"#
        )
    };
    let write = r#"{"record":"event","index":1,"worker":"a","incarnation":0,"true_time_us":1,"local_time_us":1,"kind":{"type":"invoke","op_id":1,"op":{"op":"write","scope":"x","owner":"a","cycle_id":7,"items":1}}}"#;
    // A write may share the number: its rows are another table's.
    let text = format!("{}\n{write}\n", commit(0, 0, "x"));
    History::from_json_lines(&text).expect("a commit and a write of one id");
    // Another scope does not make it another cycle.
    let text = format!("{}\n{}\n", commit(0, 0, "x"), commit(1, 1, "y"));
    let error = History::from_json_lines(&text).expect_err("a cycle id used twice");
    let HistoryError::Invalid {
        line_number,
        field,
        problem,
    } = error
    else {
        panic!("expected an invalid line, got {error}");
    };
    assert_eq!((line_number, field.as_str()), (2, "kind.op.cycle_id"));
    assert!(problem.contains("named by op 0 too"), "{problem}");
}
