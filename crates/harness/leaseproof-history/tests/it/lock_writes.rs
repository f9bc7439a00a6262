//! I3 and I4 for unfenced writes (`Op::Write`, work rows): the maintenance a
//! lock holder runs on its own connection, judged without a token.
//!
//! Goal: the stale write a paused holder makes after its lock expired is
//! caught from the evidence a real run has — real-time stamps and the rows'
//! commit times — and a correct hand-over is never reported. Method:
//! hand-made stories, each failing one paired with a passing twin that
//! differs in one fact.

use leaseproof_history::{EventKind, Invariant, Op, OpResult, Outcome, WorkRow};

use crate::builder::{assert_passes, only_violation, Builder, CommitEnd};

const SCOPE: &str = "t";

/// A lock with a 100 us lifetime and no token: invoked at `at`, acknowledged at `at + 2`.
fn lock(builder: &mut Builder, worker: &str, at: i64) {
    lock_living(builder, worker, at, Some(100));
}

/// A session lock (no lifetime, no token): invoked at `at`, acknowledged at `at + 2`.
fn session_lock(builder: &mut Builder, worker: &str, at: i64) {
    lock_living(builder, worker, at, None);
}

/// A tokenless lock promising `lifetime_us` (`None`: as long as its session).
fn lock_living(builder: &mut Builder, worker: &str, at: i64, lifetime_us: Option<i64>) {
    builder.at(at);
    let (_, op_id) = builder.invoke(
        worker,
        Op::Acquire {
            scope: SCOPE.to_string(),
            owner: worker.to_string(),
            ttl_us: 100,
        },
    );
    builder.at(at + 2);
    let result = OpResult::Lock {
        token: None,
        lifetime_us,
    };
    builder.complete(worker, op_id, Outcome::Ok { result });
}

/// `worker` writes `cycle_id` (2 items): invoked at `at`, answered `outcome` at `at + 3`.
fn write(builder: &mut Builder, worker: &str, cycle_id: u64, at: i64, outcome: Outcome) {
    builder.at(at);
    let (_, op_id) = builder.invoke(
        worker,
        Op::Write {
            scope: SCOPE.to_string(),
            owner: worker.to_string(),
            cycle_id,
            items: 2,
        },
    );
    builder.at(at + 3);
    builder.complete(worker, op_id, outcome);
}

fn written() -> Outcome {
    Outcome::Ok {
        result: OpResult::Written {},
    }
}

/// Both rows of `worker`'s write `cycle_id`, committed at `committed_at_us`.
fn rows(builder: &mut Builder, worker: &str, cycle_id: u64, committed_at_us: i64) {
    for item in 0..2 {
        push_row(builder, worker, cycle_id, item, SCOPE, committed_at_us);
    }
}

/// One work row, the next `seq`.
fn push_row(
    builder: &mut Builder,
    worker: &str,
    cycle_id: u64,
    item: u32,
    scope: &str,
    committed_at_us: i64,
) {
    let seq = builder.history.work_rows.len() as u64 + 1;
    builder.history.work_rows.push(WorkRow {
        seq,
        scope: scope.to_string(),
        owner: worker.to_string(),
        cycle_id,
        item,
        committed_at_us: Some(committed_at_us),
    });
}

#[test]
fn a_hand_over_with_writes_in_order_passes() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    write(&mut builder, "a", 1, 20, written());
    lock(&mut builder, "b", 200);
    write(&mut builder, "b", 1, 210, written());
    rows(&mut builder, "a", 1, 5_000);
    rows(&mut builder, "b", 1, 6_000);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.commits, 2);
}

#[test]
fn a_write_committed_after_a_later_grants_write_is_a_stale_write() {
    // a's lock expired during a pause; b was granted and wrote; a woke and
    // wrote: its rows committed after b's.
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    lock(&mut builder, "b", 200);
    write(&mut builder, "b", 1, 210, written());
    write(&mut builder, "a", 1, 400, written());
    rows(&mut builder, "b", 1, 5_000);
    rows(&mut builder, "a", 1, 6_000);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(violation.message.contains("a stale write"), "{violation}");
    assert_eq!(violation.rows, vec![1, 2, 3, 4]);
    // The evidence: a's grant asked and answered (before b asked), b's
    // grant asked, and both writes.
    assert_eq!(violation.events, vec![0, 1, 2, 4, 5, 6, 7]);
}

#[test]
fn the_same_commit_order_under_grants_not_known_to_be_ordered_is_not_judged() {
    // b's acquisition was invoked before a's was acknowledged: which was
    // granted first is unknown, so commit order proves nothing.
    let mut builder = Builder::new();
    builder.at(10);
    let (_, a_op) = builder.invoke(
        "a",
        Op::Acquire {
            scope: SCOPE.to_string(),
            owner: "a".to_string(),
            ttl_us: 100,
        },
    );
    lock(&mut builder, "b", 11);
    builder.at(20);
    builder.complete(
        "a",
        a_op,
        Outcome::Ok {
            result: OpResult::Lock {
                token: None,
                lifetime_us: Some(100),
            },
        },
    );
    write(&mut builder, "b", 1, 300, written());
    write(&mut builder, "a", 1, 400, written());
    rows(&mut builder, "b", 1, 5_000);
    rows(&mut builder, "a", 1, 6_000);
    // (The holds overlap in real time, though: that is I1, judged elsewhere.)
    let report = leaseproof_history::check(&builder.build(), &Default::default());
    assert!(
        report.violations_of(Invariant::FencedWrites).is_empty(),
        "{report}"
    );
}

#[test]
fn a_write_inside_a_rivals_certain_hold_is_a_stale_write_without_rows() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    lock(&mut builder, "b", 200); // a's lifetime ended at 110
    write(&mut builder, "a", 1, 220, written()); // inside b's hold [202, 300)
    rows(&mut builder, "a", 1, 5_000);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(
        violation.message.contains("while b certainly held"),
        "{violation}"
    );
}

/// `worker`'s session lock proven still held: a renewal, or with `release`
/// a release, invoked at `at` and answered ok at `at + 2`.
fn proven(builder: &mut Builder, worker: &str, at: i64, release: bool) {
    builder.at(at);
    let (scope, owner) = (SCOPE.to_string(), worker.to_string());
    let (op, result) = if release {
        let op = Op::Release {
            scope,
            owner,
            token: 0,
        };
        (op, OpResult::Unlocked {})
    } else {
        let op = Op::Renew {
            scope,
            owner,
            token: 0,
            ttl_us: 100,
        };
        let result = OpResult::Lock {
            token: None,
            lifetime_us: None,
        };
        (op, result)
    };
    let (_, op_id) = builder.invoke(worker, op);
    builder.at(at + 2);
    builder.complete(worker, op_id, Outcome::Ok { result });
}

/// The violations' invariants and the stale writes' messages.
fn judged(builder: Builder) -> (Vec<Invariant>, Vec<String>) {
    let report = leaseproof_history::check(&builder.build(), &Default::default());
    let invariants = report.violations.iter().map(|v| v.invariant).collect();
    let stale = report
        .violations_of(Invariant::FencedWrites)
        .iter()
        .map(|violation| violation.message.clone())
        .collect();
    (invariants, stale)
}

#[test]
fn a_holder_granted_while_the_lock_was_promised_to_another_is_not_the_stale_writer() {
    // a's session lock, proven held at 250 (an ok renewal), was granted to b
    // at 202: the lock broke its promise (I1). b's write at 220 lies inside
    // a's proven hold, but under b's newer grant: not stale. a's write at
    // 300 lies inside b's hold [202, 500): a's is the stale one.
    let mut builder = Builder::new();
    session_lock(&mut builder, "a", 10);
    session_lock(&mut builder, "b", 200);
    write(&mut builder, "b", 1, 220, written());
    proven(&mut builder, "a", 250, false);
    write(&mut builder, "a", 1, 300, written());
    proven(&mut builder, "b", 500, true);
    rows(&mut builder, "b", 1, 5_000);
    rows(&mut builder, "a", 1, 5_100);
    let (invariants, stale) = judged(builder);
    assert!(
        invariants.contains(&Invariant::MutualExclusion),
        "{stale:?}"
    );
    assert!(
        stale.iter().any(|message| message
            .starts_with("a wrote (cycle 1) in [300, 303] while b certainly held t in [202, 500)")),
        "{stale:?}"
    );
    assert!(
        stale
            .iter()
            .all(|message| message.starts_with("a ") || message.starts_with("a's ")),
        "only a's write is stale: {stale:?}"
    );
}

#[test]
fn a_session_lock_is_certain_only_as_far_as_its_holder_proved_it_held() {
    // a's session may have ended right after its grant (a reset, a
    // terminated backend): b granted at 202 is no double grant, only a
    // belief a outlived. a's write inside b's hold (proven by b's release)
    // is the stale write.
    let mut builder = Builder::new();
    session_lock(&mut builder, "a", 10);
    session_lock(&mut builder, "b", 200);
    write(&mut builder, "b", 1, 220, written());
    write(&mut builder, "a", 1, 300, written());
    proven(&mut builder, "b", 500, true);
    rows(&mut builder, "b", 1, 5_000);
    rows(&mut builder, "a", 1, 5_100);
    let (invariants, stale) = judged(builder);
    assert!(
        !invariants.contains(&Invariant::MutualExclusion),
        "{invariants:?}"
    );
    assert!(
        stale.iter().any(|message| message
            .starts_with("a wrote (cycle 1) in [300, 303] while b certainly held t in [202, 500)")),
        "{stale:?}"
    );
    // Without b's release, nothing proves b held when a wrote.
    let mut builder = Builder::new();
    session_lock(&mut builder, "a", 10);
    session_lock(&mut builder, "b", 200);
    write(&mut builder, "a", 1, 300, written());
    let (_, stale) = judged(builder);
    assert!(
        !stale
            .iter()
            .any(|message| message.contains("certainly held")),
        "{stale:?}"
    );
    // A writer holding nothing of its own inside a's proven hold is stale.
    let mut builder = Builder::new();
    session_lock(&mut builder, "a", 10);
    write(&mut builder, "b", 1, 220, written());
    proven(&mut builder, "a", 400, true);
    let (_, stale) = judged(builder);
    assert!(
        stale.iter().any(|message| message
            .starts_with("b wrote (cycle 1) in [220, 223] while a certainly held t in [12, 400)")),
        "{stale:?}"
    );
}

#[test]
fn a_write_reaching_past_the_rivals_promise_is_not_judged_in_real_time() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    lock(&mut builder, "b", 200);
    write(&mut builder, "a", 1, 298, written()); // answered at 301: b's promise ran out at 300
    rows(&mut builder, "a", 1, 5_000);
    assert_passes(&builder.build());
}

#[test]
fn a_write_answered_the_instant_the_rivals_promise_ends_is_not_judged_in_real_time() {
    // b's certain hold is [202, 300): a write answered at 300 may have
    // committed at 300, when b's promise no longer held.
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    lock(&mut builder, "b", 200);
    write(&mut builder, "a", 1, 297, written()); // answered at 300
    rows(&mut builder, "a", 1, 5_000);
    assert_passes(&builder.build());
    // One microsecond earlier it lay inside b's promise.
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    lock(&mut builder, "b", 200);
    write(&mut builder, "a", 1, 296, written()); // answered at 299
    rows(&mut builder, "a", 1, 5_000);
    assert_eq!(
        only_violation(&builder.build()).invariant,
        Invariant::FencedWrites
    );
}

#[test]
fn a_write_reported_ok_whose_rows_are_missing_is_lost() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    write(&mut builder, "a", 1, 20, written());
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::NothingLost);
    assert!(violation.message.contains("missing"), "{violation}");
}

#[test]
fn a_write_reported_failed_whose_rows_are_there_is_a_lie() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    write(
        &mut builder,
        "a",
        1,
        20,
        Outcome::Fail {
            reason: leaseproof_history::FailReason::Error("cancelled".to_string()),
        },
    );
    rows(&mut builder, "a", 1, 5_000);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::NothingLost);
    assert!(violation.message.contains("reported failed"), "{violation}");
}

#[test]
fn an_unknown_write_may_be_there_or_not() {
    let unknown = || Outcome::Unknown {
        reason: "killed".to_string(),
    };
    let mut with_rows = Builder::new();
    lock(&mut with_rows, "a", 10);
    write(&mut with_rows, "a", 1, 20, unknown());
    rows(&mut with_rows, "a", 1, 5_000);
    assert_passes(&with_rows.build());
    let mut without = Builder::new();
    lock(&mut without, "a", 10);
    write(&mut without, "a", 1, 20, unknown());
    assert_passes(&without.build());
}

#[test]
fn rows_no_write_explains_are_reported() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    rows(&mut builder, "a", 7, 5_000);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(
        violation.message.contains("no recorded write"),
        "{violation}"
    );
}

#[test]
fn work_rows_round_trip_through_the_json_lines_format() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    write(&mut builder, "a", 1, 20, written());
    rows(&mut builder, "a", 1, 5_000);
    let history = builder.build();
    let text = history.to_json_lines();
    assert!(text.contains("\"record\":\"work_row\""), "{text}");
    assert_eq!(
        leaseproof_history::History::from_json_lines(&text).unwrap(),
        history
    );
}

#[test]
fn a_write_whose_grant_is_not_known_is_not_judged_by_commit_order() {
    // a's write was invoked before its acquisition was acknowledged (a
    // history from a program that writes optimistically): the write is not
    // attributed to that grant, so commit order says nothing of it.
    let mut builder = Builder::new();
    builder.at(10);
    let (_, acquire) = builder.invoke(
        "a",
        Op::Acquire {
            scope: SCOPE.to_string(),
            owner: "a".to_string(),
            ttl_us: 100,
        },
    );
    write(&mut builder, "a", 1, 12, written());
    builder.at(30);
    builder.complete(
        "a",
        acquire,
        Outcome::Ok {
            result: OpResult::Lock {
                token: None,
                lifetime_us: Some(1),
            },
        },
    );
    lock(&mut builder, "b", 200);
    write(&mut builder, "b", 1, 210, written());
    rows(&mut builder, "b", 1, 5_000);
    rows(&mut builder, "a", 1, 6_000);
    assert_passes(&builder.build());
}

#[test]
fn a_write_in_flight_while_its_writer_acquired_again_is_not_judged_by_commit_order() {
    // a's write was slow; meanwhile b held and wrote, and a acquired again:
    // a's rows may have landed under its second grant.
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    builder.at(20);
    let (_, slow) = builder.invoke(
        "a",
        Op::Write {
            scope: SCOPE.to_string(),
            owner: "a".to_string(),
            cycle_id: 1,
            items: 2,
        },
    );
    lock(&mut builder, "b", 200);
    write(&mut builder, "b", 1, 210, written());
    lock(&mut builder, "a", 400);
    builder.at(450);
    builder.complete("a", slow, written());
    rows(&mut builder, "b", 1, 5_000);
    rows(&mut builder, "a", 1, 6_000);
    let report = leaseproof_history::check(&builder.build(), &Default::default());
    assert!(
        report.violations_of(Invariant::FencedWrites).is_empty(),
        "{report}"
    );
}

/// One work row of `worker`'s write `cycle_id`, item `item`, in `scope`.
fn row(builder: &mut Builder, worker: &str, cycle_id: u64, item: u32, scope: &str) {
    let committed_at_us = 5_001 + builder.history.work_rows.len() as i64;
    push_row(builder, worker, cycle_id, item, scope, committed_at_us);
}

#[test]
fn writes_committed_at_the_same_instant_are_in_no_order() {
    // As the stale-write story, but a's rows committed in the very
    // microsecond b's last one did: "after" is not proven.
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    lock(&mut builder, "b", 200);
    write(&mut builder, "b", 1, 210, written());
    write(&mut builder, "a", 1, 400, written());
    rows(&mut builder, "b", 1, 5_000);
    rows(&mut builder, "a", 1, 5_000);
    let report = leaseproof_history::check(&builder.build(), &Default::default());
    assert!(
        report.violations_of(Invariant::FencedWrites).is_empty(),
        "{report}"
    );
}

#[test]
fn a_grant_acknowledged_the_instant_the_rivals_was_invoked_is_not_certainly_earlier() {
    // a acknowledged at 10, b invoked at 10 exactly: which was granted first
    // is not known, so the commit order of their writes proves nothing.
    let acquire = |worker: &str| Op::Acquire {
        scope: SCOPE.to_string(),
        owner: worker.to_string(),
        ttl_us: 100,
    };
    let granted = || Outcome::Ok {
        result: OpResult::Lock {
            token: None,
            lifetime_us: Some(100),
        },
    };
    let write_op = |worker: &str| Op::Write {
        scope: SCOPE.to_string(),
        owner: worker.to_string(),
        cycle_id: 1,
        items: 2,
    };
    let story = |a_acknowledged_us: i64| {
        let mut history = leaseproof_history::History::default();
        let mut push = |worker: &str, at: i64, kind: EventKind| {
            history.push(worker, 0, at, at, kind);
        };
        push(
            "a",
            1,
            EventKind::Invoke {
                op_id: 0,
                op: acquire("a"),
            },
        );
        push(
            "a",
            a_acknowledged_us,
            EventKind::Complete {
                op_id: 0,
                outcome: granted(),
            },
        );
        push(
            "b",
            10,
            EventKind::Invoke {
                op_id: 1,
                op: acquire("b"),
            },
        );
        push(
            "b",
            200,
            EventKind::Complete {
                op_id: 1,
                outcome: granted(),
            },
        );
        push(
            "b",
            210,
            EventKind::Invoke {
                op_id: 2,
                op: write_op("b"),
            },
        );
        push(
            "b",
            213,
            EventKind::Complete {
                op_id: 2,
                outcome: written(),
            },
        );
        push(
            "a",
            400,
            EventKind::Invoke {
                op_id: 3,
                op: write_op("a"),
            },
        );
        push(
            "a",
            403,
            EventKind::Complete {
                op_id: 3,
                outcome: written(),
            },
        );
        let mut builder = Builder::new();
        builder.history = history;
        rows(&mut builder, "b", 1, 5_000);
        rows(&mut builder, "a", 1, 6_000);
        leaseproof_history::check(&builder.history, &Default::default())
    };
    assert!(
        story(10).violations_of(Invariant::FencedWrites).is_empty(),
        "{}",
        story(10)
    );
    // Acknowledged a microsecond before b asked: a's grant was certainly
    // earlier, and its write after b's is stale.
    assert!(
        !story(9).violations_of(Invariant::FencedWrites).is_empty(),
        "{}",
        story(9)
    );
}

#[test]
fn a_row_out_of_range_is_named_as_such() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    write(&mut builder, "a", 1, 20, written());
    for item in 0..3 {
        row(&mut builder, "a", 1, item, SCOPE); // item 2 of a 2-item write
    }
    let violation = only_violation(&builder.build());
    assert!(violation.message.contains("out of range"), "{violation}");
}

#[test]
fn an_unknown_write_is_whole_or_absent_never_partial() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    write(
        &mut builder,
        "a",
        1,
        20,
        Outcome::Unknown {
            reason: "killed".to_string(),
        },
    );
    row(&mut builder, "a", 1, 0, SCOPE); // 1 of 2 rows
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::NothingLost);
    assert!(violation.message.contains("partial: 1 of 2"), "{violation}");
}

#[test]
fn a_failed_write_with_no_rows_is_what_it_said() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", 10);
    write(
        &mut builder,
        "a",
        1,
        20,
        Outcome::Fail {
            reason: leaseproof_history::FailReason::Stale,
        },
    );
    assert_passes(&builder.build());
}

/// `worker` takes the lock with fencing `token` (a lock that reports no
/// server times, like Redis with its `INCR` counter), invoked at `at`.
fn fenced_lock(builder: &mut Builder, worker: &str, token: u64, at: i64) {
    builder.at(at);
    let (_, op_id) = builder.invoke(
        worker,
        Op::Acquire {
            scope: SCOPE.to_string(),
            owner: worker.to_string(),
            ttl_us: 100,
        },
    );
    builder.at(at + 2);
    builder.complete(
        worker,
        op_id,
        Outcome::Ok {
            result: OpResult::Lock {
                token: Some(token),
                lifetime_us: Some(100),
            },
        },
    );
}

/// `a` (token 1) then `b` (token 2) each commit a guarded cycle under their
/// lock's token; `b`'s rows carry `b_token`.
fn fenced_lock_hand_over(b_token: u64) -> leaseproof_history::History {
    let mut builder = Builder::new();
    fenced_lock(&mut builder, "a", 1, 10);
    builder.at(20);
    builder.commit("a", SCOPE, 1, 1, 1, CommitEnd::Ok, 5_000);
    builder.rows("a", SCOPE, 1, 1, 0..1, 1, 5_000);
    fenced_lock(&mut builder, "b", 2, 200);
    builder.at(210);
    builder.commit("b", SCOPE, b_token, 1, 1, CommitEnd::Ok, 6_000);
    builder.rows("b", SCOPE, b_token, 1, 0..1, 2, 6_000);
    builder.build()
}

#[test]
fn guarded_rows_under_a_fenced_locks_tokens_are_judged_by_order_alone() {
    // The lock reports its tokens but no server times: its rows have no
    // window in server time to lie in, and are not "never granted".
    let report = assert_passes(&fenced_lock_hand_over(2));
    assert_eq!(report.stats.commits, 2);
    // A token the lock never handed out is still one nobody was granted.
    let violation = only_violation(&fenced_lock_hand_over(3));
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(violation.message.contains("never granted"), "{violation}");
}

#[test]
fn what_the_work_table_cannot_judge_is_said_and_nothing_else() {
    let note_i4 = "I4 for writes: the work table was not read";
    let note_order = "I3 in commit order for unfenced writes: some work rows carry no commit time";
    let noted = |builder: &Builder| {
        let report = assert_passes(&builder.build());
        (
            report
                .not_judged
                .iter()
                .any(|note| note.starts_with(note_i4)),
            report.not_judged.iter().any(|note| note == note_order),
        )
    };
    let one_write = || {
        let mut builder = Builder::new();
        lock(&mut builder, "a", 10);
        write(&mut builder, "a", 1, 20, written());
        builder
    };
    let mut builder = one_write();
    rows(&mut builder, "a", 1, 5_000);
    // Read back, every row with its commit time: nothing left unjudged.
    assert_eq!(noted(&builder), (false, false));
    // Not read back: I4 for writes cannot be judged.
    let mut unread = one_write();
    unread.history.tables_read.work = false;
    assert_eq!(noted(&unread), (true, false));
    // Not read back and nothing written: nothing to say.
    let mut idle = Builder::new();
    idle.history.tables_read.work = false;
    lock(&mut idle, "a", 10);
    assert_eq!(noted(&idle), (false, false));
    // A row without its commit time: commit order cannot be judged.
    builder.history.work_rows[0].committed_at_us = None;
    assert_eq!(noted(&builder), (false, true));
}

#[test]
fn a_grant_made_inside_another_owners_proven_hold_is_a_double_grant() {
    // a's session lock held certainly from 12 to its ok release at 400; b
    // asked at 200 and was granted by 202, at an instant a held: two holders,
    // though nothing certain follows b's grant.
    let mut builder = Builder::new();
    session_lock(&mut builder, "a", 10);
    session_lock(&mut builder, "b", 200);
    proven(&mut builder, "a", 400, true);
    let report = leaseproof_history::check(&builder.build(), &Default::default());
    let double = report.violations_of(Invariant::MutualExclusion);
    assert_eq!(double.len(), 1, "{report}");
    assert!(
        double[0].message.starts_with(
            "a certainly held t in [12, 400) while b was granted it (asked at 200, granted by 202)"
        ),
        "{report}"
    );
    // Asked before a's grant was acknowledged: b may have been granted first.
    let mut builder = Builder::new();
    let acquire = |worker: &str| Op::Acquire {
        scope: SCOPE.to_string(),
        owner: worker.to_string(),
        ttl_us: 100,
    };
    let session = || Outcome::Ok {
        result: OpResult::Lock {
            token: None,
            lifetime_us: None,
        },
    };
    builder.at(10);
    let (_, a_asks) = builder.invoke("a", acquire("a"));
    builder.at(11);
    let (_, b_asks) = builder.invoke("b", acquire("b"));
    builder.at(12);
    builder.complete("a", a_asks, session());
    builder.at(14);
    builder.complete("b", b_asks, session());
    proven(&mut builder, "a", 400, true);
    let report = leaseproof_history::check(&builder.build(), &Default::default());
    assert!(
        report.violations_of(Invariant::MutualExclusion).is_empty(),
        "{report}"
    );
}
