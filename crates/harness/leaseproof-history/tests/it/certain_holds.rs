//! I1 and I2 for locks that report no server times (`OpResult::Lock`),
//! judged in real time from certain holds.
//!
//! Goal: a lock without timestamps (advisory, Redis, ZooKeeper) is judged
//! from what it promised and never reported on latency alone. Method:
//! hand-made stories on the common clock; each passing story has a failing
//! twin that differs in one fact. Invariant: a double hold is reported only
//! where both locks had certainly promised to be held at one instant.

use leaseproof_history::{check, CheckConfig, EventKind, Invariant, Op, OpResult, Outcome};

use crate::builder::{assert_passes, only_violation, Builder};

fn acquire_op(worker: &str) -> Op {
    Op::Acquire {
        scope: "t".to_string(),
        owner: worker.to_string(),
        ttl_us: 100,
    }
}

/// `worker` acquires: invoked at `invoked_us`, acknowledged at `acked_us`.
fn lock(
    builder: &mut Builder,
    worker: &str,
    token: Option<u64>,
    lifetime_us: Option<i64>,
    invoked_us: i64,
    acked_us: i64,
) {
    builder.at(invoked_us);
    let (_, op_id) = builder.invoke(worker, acquire_op(worker));
    builder.at(acked_us);
    builder.complete(
        worker,
        op_id,
        Outcome::Ok {
            result: OpResult::Lock { token, lifetime_us },
        },
    );
}

/// `worker` invokes its release at `invoked_us`; it succeeds at once.
fn unlock(builder: &mut Builder, worker: &str, invoked_us: i64) {
    builder.at(invoked_us);
    let (_, op_id) = builder.invoke(
        worker,
        Op::Release {
            scope: "t".to_string(),
            owner: worker.to_string(),
            token: 0,
        },
    );
    builder.complete(
        worker,
        op_id,
        Outcome::Ok {
            result: OpResult::Unlocked {},
        },
    );
}

#[test]
fn two_session_locks_certainly_held_at_once_are_an_i1_violation() {
    // Built in time order: a's acquisition at 8..10, b acknowledged at 200
    // while a held until 300.
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, None, 8, 10);
    builder.at(150);
    let (_, b_op) = builder.invoke("b", acquire_op("b"));
    builder.at(200);
    builder.complete(
        "b",
        b_op,
        Outcome::Ok {
            result: OpResult::Lock {
                token: None,
                lifetime_us: None,
            },
        },
    );
    unlock(&mut builder, "a", 300);
    unlock(&mut builder, "b", 400);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(
        violation.message,
        "a and b certainly held t at once in real time: [10, 300) and [200, 400) (true us)"
    );
}

#[test]
fn a_rival_acknowledged_after_the_release_was_invoked_passes() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, None, 8, 10);
    // b invoked while a held (it may have queued), acknowledged after a let go.
    builder.at(150);
    let (_, b_op) = builder.invoke("b", acquire_op("b"));
    unlock(&mut builder, "a", 300);
    builder.at(310);
    builder.complete(
        "b",
        b_op,
        Outcome::Ok {
            result: OpResult::Lock {
                token: None,
                lifetime_us: None,
            },
        },
    );
    unlock(&mut builder, "b", 400);
    assert_passes(&builder.build());
}

#[test]
fn a_lost_signal_ends_a_session_locks_promise() {
    // a learns at 150 that its lock is gone (its connection died); b gets
    // it at 200: no double hold.
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, None, 8, 10);
    builder.at(150);
    builder.history.push(
        "a",
        0,
        150,
        150,
        EventKind::BeliefEnd {
            scope: "t".to_string(),
            token: 0,
            reason: "lost".to_string(),
        },
    );
    lock(&mut builder, "b", None, None, 160, 200);
    unlock(&mut builder, "a", 300);
    unlock(&mut builder, "b", 400);
    assert_passes(&builder.build());
}

#[test]
fn an_expiring_lock_is_judged_only_inside_its_promised_lifetime() {
    // a's lock promises 100 µs from its invocation at 0: certain until 100.
    // b acknowledged at 120 overlaps nothing certain, though a released
    // only at 300 (a stalled holder is the fence's business).
    let mut passing = Builder::new();
    lock(&mut passing, "a", None, Some(100), 1, 10);
    lock(&mut passing, "b", None, Some(100), 110, 120);
    unlock(&mut passing, "a", 300);
    assert_passes(&passing.build());
    // The twin: b acknowledged at 90, inside a's promise.
    let mut failing = Builder::new();
    lock(&mut failing, "a", None, Some(100), 1, 10);
    lock(&mut failing, "b", None, Some(100), 80, 90);
    unlock(&mut failing, "a", 300);
    let violation = only_violation(&failing.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
}

#[test]
fn an_ok_renewal_extends_the_promise() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, Some(100), 1, 10);
    renew(&mut builder, "a", 100, 80, 81);
    // Certain until 180 now: b at 150 is a double hold.
    lock(&mut builder, "b", None, Some(100), 140, 150);
    unlock(&mut builder, "a", 300);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert!(violation.message.contains("[10, 180)"), "{violation}");
}

/// `worker` renews, invoked at `invoked_us`, acknowledged at `acked_us`,
/// promised `lifetime_us` from its invocation.
fn renew(builder: &mut Builder, worker: &str, lifetime_us: i64, invoked_us: i64, acked_us: i64) {
    renew_as(builder, worker, worker, lifetime_us, invoked_us, acked_us);
}

/// [`renew`], the renewal naming `owner`.
fn renew_as(
    builder: &mut Builder,
    worker: &str,
    owner: &str,
    lifetime_us: i64,
    invoked_us: i64,
    acked_us: i64,
) {
    builder.at(invoked_us);
    let (_, op_id) = builder.invoke(
        worker,
        Op::Renew {
            scope: "t".to_string(),
            owner: owner.to_string(),
            token: 0,
            ttl_us: 100,
        },
    );
    builder.at(acked_us);
    builder.complete(
        worker,
        op_id,
        Outcome::Ok {
            result: OpResult::Lock {
                token: None,
                lifetime_us: Some(lifetime_us),
            },
        },
    );
}

#[test]
fn a_renewal_invoked_after_the_promise_ran_out_does_not_bridge_the_gap() {
    // a's promise ends at 101; b holds [150, 170) and lets go; a's renewal,
    // invoked at 200, is a promise from then on, not for [101, 200).
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, Some(100), 1, 10);
    lock(&mut builder, "b", None, Some(100), 140, 150);
    unlock(&mut builder, "b", 170);
    renew(&mut builder, "a", 100, 200, 210);
    unlock(&mut builder, "a", 250);
    assert_passes(&builder.build());
}

#[test]
fn a_hold_a_lapsed_renewal_begins_is_judged_too() {
    // The same, but b still holds (until 260) when a's renewal is
    // acknowledged at 210: a certainly held again from 210, b until 240.
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, Some(100), 1, 10);
    lock(&mut builder, "b", None, Some(100), 140, 150);
    renew(&mut builder, "a", 100, 200, 210);
    unlock(&mut builder, "a", 250);
    unlock(&mut builder, "b", 260);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(
        violation.message,
        "b and a certainly held t at once in real time: [150, 240) and [210, 250) (true us)"
    );
}

#[test]
fn holds_lapsed_renewals_begin_in_turn_are_neither_grants_nor_takeovers() {
    // a [10, 101), b [210, 301), then each renews after its promise ran
    // out: a holds again from 410, b from 610 — four holds, two grants, one
    // takeover (the checker once counted three and failed its own
    // assertion that takeovers never outnumber grants).
    let story = |b_renews_at_us: i64| {
        let mut builder = Builder::new();
        lock(&mut builder, "a", None, Some(100), 1, 10);
        lock(&mut builder, "b", None, Some(100), 200, 210);
        renew(&mut builder, "a", 100, 400, 410);
        renew(&mut builder, "b", 100, b_renews_at_us, b_renews_at_us + 10);
        check(&builder.build(), &CheckConfig::default())
    };
    let report = story(600);
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.grants, 2, "{report}");
    assert_eq!(report.stats.renewals, 2, "{report}");
    assert_eq!(report.stats.takeovers, 1, "{report}");
    assert_eq!(report.stats.distinct_holders, 2, "{report}");
    // b's renewal acknowledged while a's new hold still runs: two holders.
    let report = story(450);
    let violations = report.violations_of(Invariant::MutualExclusion);
    assert_eq!(violations.len(), 1, "{report}");
    assert_eq!(
        violations[0].message,
        "a and b certainly held t at once in real time: [410, 500) and [460, 550) (true us)"
    );
}

#[test]
fn a_lapsed_renewal_naming_another_owner_is_still_the_acquirers_hold() {
    // One worker acquires as a, then renews late naming b: nothing was ever
    // granted to b, so no second holder (the checker once counted one, and
    // failed its own assertion that holders never outnumber grants).
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, Some(100), 1, 10);
    renew_as(&mut builder, "a", "b", 100, 200, 210);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.grants, 1, "{report}");
    assert_eq!(report.stats.distinct_holders, 1, "{report}");
    assert_eq!(report.stats.takeovers, 0, "{report}");
}

#[test]
fn a_renewal_invoked_the_instant_the_promise_ends_has_lapsed() {
    // Promised [10, 101); the renewal invoked at 101 may have reached the
    // store after b's acquisition: no certain hold of a at 150.
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, Some(100), 1, 10);
    builder.at(101);
    let (_, renewal) = builder.invoke(
        "a",
        Op::Renew {
            scope: "t".to_string(),
            owner: "a".to_string(),
            token: 0,
            ttl_us: 100,
        },
    );
    lock(&mut builder, "b", None, Some(100), 140, 150);
    unlock(&mut builder, "b", 170);
    builder.at(180);
    builder.complete(
        "a",
        renewal,
        Outcome::Ok {
            result: OpResult::Lock {
                token: None,
                lifetime_us: Some(100),
            },
        },
    );
    unlock(&mut builder, "a", 190);
    assert_passes(&builder.build());
}

#[test]
fn tokens_must_grow_with_certain_grant_order() {
    let story = |b_token: u64| {
        let mut builder = Builder::new();
        lock(&mut builder, "a", Some(5), Some(100), 1, 10);
        unlock(&mut builder, "a", 50);
        lock(&mut builder, "b", Some(b_token), Some(100), 60, 70);
        builder.build()
    };
    assert_passes(&story(6));
    let violation = only_violation(&story(5));
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert_eq!(
        violation.message,
        "b was granted token 5 after a had been granted token 5"
    );
}

#[test]
fn tokens_of_grants_in_no_certain_order_are_not_compared() {
    // b invoked before a was acknowledged: either may have been granted
    // first, so their tokens prove nothing (and their promises do not meet).
    let mut unordered = Builder::new();
    unordered.at(1);
    let (_, b_op) = unordered.invoke("b", acquire_op("b"));
    lock(&mut unordered, "a", Some(7), Some(100), 5, 10);
    unlock(&mut unordered, "a", 20);
    unordered.at(30);
    unordered.complete(
        "b",
        b_op,
        Outcome::Ok {
            result: OpResult::Lock {
                token: Some(3),
                lifetime_us: Some(100),
            },
        },
    );
    assert_passes(&unordered.build());
    // b certainly first (acknowledged before a was invoked), with the larger
    // token: I2; a's acknowledgement inside b's promise: I1.
    let mut builder = Builder::new();
    lock(&mut builder, "b", Some(9), Some(100), 1, 5);
    lock(&mut builder, "a", Some(3), Some(100), 6, 8);
    let report = check(&builder.build(), &CheckConfig::default());
    // a invoked after b's acknowledgement: b certainly first, and its token
    // is the larger: I2; and a's acknowledgement lies inside b's promise: I1.
    assert_eq!(report.violations.len(), 2, "{report}");
}

#[test]
fn lock_grants_are_counted() {
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, None, 1, 10);
    unlock(&mut builder, "a", 20);
    lock(&mut builder, "b", None, None, 30, 40);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.grants, 2);
    assert_eq!(report.stats.releases, 1);
}

/// Events at explicit true times (the builder's clock only moves forward).
fn at_times(events: &[(&str, i64, EventKind)]) -> leaseproof_history::History {
    let mut history = leaseproof_history::History::default();
    for (worker, true_us, kind) in events {
        history.push(worker, 0, *true_us, *true_us, kind.clone());
    }
    history
}

fn invoke(op_id: u64, op: Op) -> EventKind {
    EventKind::Invoke { op_id, op }
}

fn granted(op_id: u64, token: Option<u64>) -> EventKind {
    EventKind::Complete {
        op_id,
        outcome: Outcome::Ok {
            result: OpResult::Lock {
                token,
                lifetime_us: None,
            },
        },
    }
}

/// A release answered ok: for a session lock, the proof that it still held
/// when the release ran.
fn unlocked(op_id: u64) -> EventKind {
    EventKind::Complete {
        op_id,
        outcome: Outcome::Ok {
            result: OpResult::Unlocked {},
        },
    }
}

fn release_op(worker: &str) -> Op {
    Op::Release {
        scope: "t".to_string(),
        owner: worker.to_string(),
        token: 0,
    }
}

#[test]
fn holds_that_only_touch_do_not_overlap() {
    // a invokes its release at 100; b is acknowledged at 100.
    let history = at_times(&[
        ("a", 1, invoke(0, acquire_op("a"))),
        ("a", 10, granted(0, None)),
        ("b", 50, invoke(1, acquire_op("b"))),
        ("a", 100, invoke(2, release_op("a"))),
        ("b", 100, granted(1, None)),
        ("a", 105, unlocked(2)),
        ("b", 200, invoke(3, release_op("b"))),
        ("b", 205, unlocked(3)),
    ]);
    assert_passes(&history);
}

#[test]
fn a_grant_asked_the_instant_another_hold_began_is_not_certainly_inside_it() {
    // a holds from 10 (proven to its release at 100); b asked at 10 exactly
    // and was answered at 12, nothing proven after: one microsecond proves
    // no order, so b may have been granted before a.
    let story = |b_asks: i64| {
        at_times(&[
            ("a", 1, invoke(0, acquire_op("a"))),
            ("a", 10, granted(0, None)),
            ("b", b_asks, invoke(1, acquire_op("b"))),
            ("b", 12, granted(1, None)),
            ("a", 100, invoke(2, release_op("a"))),
            ("a", 105, unlocked(2)),
        ])
    };
    assert_passes(&story(10));
    // Asked a microsecond later: granted while a certainly held.
    let violation = only_violation(&story(11));
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert!(
        violation.message.starts_with(
            "a certainly held t in [10, 100) while b was granted it (asked at 11, granted by 12)"
        ),
        "{violation}"
    );
}

#[test]
fn a_grant_acknowledged_as_the_other_was_invoked_is_not_certainly_first() {
    // a acknowledged at 10 with token 5; b invoked at 10 exactly, token 4:
    // no certain order, so no token verdict (and the holds do not meet).
    let history = at_times(&[
        ("a", 1, invoke(0, acquire_op("a"))),
        ("a", 10, granted(0, Some(5))),
        ("b", 10, invoke(1, acquire_op("b"))),
        ("a", 20, invoke(2, release_op("a"))),
        ("a", 25, unlocked(2)),
        ("b", 30, granted(1, Some(4))),
        // b's hold must not be empty, or it proves nothing either way.
        ("b", 40, invoke(3, release_op("b"))),
        ("b", 45, unlocked(3)),
    ]);
    assert_passes(&history);
    // One microsecond earlier, a was certainly first: token 4 after 5 is I2.
    let history = at_times(&[
        ("a", 1, invoke(0, acquire_op("a"))),
        ("a", 9, granted(0, Some(5))),
        ("b", 10, invoke(1, acquire_op("b"))),
        ("a", 20, invoke(2, release_op("a"))),
        ("b", 30, granted(1, Some(4))),
        ("b", 40, invoke(3, release_op("b"))),
    ]);
    assert_eq!(only_violation(&history).invariant, Invariant::TokenOrder);
}

#[test]
fn an_empty_hold_at_the_instant_another_begins_is_no_overlap() {
    // a holds from 10; b's acquisition is acknowledged at 10 and its release
    // invoked at 10: b's certain hold is empty, and proves nothing.
    let history = at_times(&[
        ("a", 1, invoke(0, acquire_op("a"))),
        ("b", 2, invoke(1, acquire_op("b"))),
        ("a", 10, granted(0, None)),
        ("b", 10, granted(1, None)),
        ("b", 10, invoke(2, release_op("b"))),
        ("b", 11, unlocked(2)),
        ("a", 100, invoke(3, release_op("a"))),
        ("a", 101, unlocked(3)),
    ]);
    assert_passes(&history);
}

#[test]
fn the_holders_next_acquisition_ends_its_certain_hold() {
    // a asks again at 50 (it no longer counts on its lock) and is refused;
    // b holds from 60. a's release at 200 does not stretch the first hold.
    let history = at_times(&[
        ("a", 1, invoke(0, acquire_op("a"))),
        ("a", 10, granted(0, None)),
        ("a", 50, invoke(1, acquire_op("a"))),
        (
            "a",
            55,
            EventKind::Complete {
                op_id: 1,
                outcome: Outcome::Fail {
                    reason: leaseproof_history::FailReason::Held,
                },
            },
        ),
        ("b", 56, invoke(2, acquire_op("b"))),
        ("b", 60, granted(2, None)),
        ("b", 100, invoke(3, release_op("b"))),
        ("b", 101, unlocked(3)),
        ("a", 200, invoke(4, release_op("a"))),
        ("a", 201, unlocked(4)),
    ]);
    assert_passes(&history);
}

#[test]
fn an_empty_certain_hold_is_a_double_grant_only_inside_another_certain_hold() {
    // a's promise (50 µs from its invocation at 100) ran out the instant it
    // was acknowledged (150): nothing of a's was certain after. b's hold
    // from 10 is certain only if proven: with b's release answered ok at
    // 300, a was granted at some instant in [100, 150] while b held (I1);
    // without that answer nothing proves b held then.
    let story = |b_proven: bool| {
        let mut events = vec![
            ("b", 1, invoke(0, acquire_op("b"))),
            ("b", 10, granted(0, None)),
            ("a", 100, invoke(1, acquire_op("a"))),
            (
                "a",
                150,
                EventKind::Complete {
                    op_id: 1,
                    outcome: Outcome::Ok {
                        result: OpResult::Lock {
                            token: None,
                            lifetime_us: Some(50),
                        },
                    },
                },
            ),
            ("b", 300, invoke(2, release_op("b"))),
        ];
        if b_proven {
            events.push(("b", 305, unlocked(2)));
        }
        at_times(&events)
    };
    assert_passes(&story(false));
    assert_eq!(
        only_violation(&story(true)).invariant,
        Invariant::MutualExclusion
    );
}

#[test]
fn a_refused_renewal_ends_what_later_answers_can_prove() {
    // a's renewal at 50 is refused (stale): a's own word that the lock was
    // gone. Its later ok release at 300 bridges nothing, so b's grant at
    // 100 is no proven double grant.
    let renew = Op::Renew {
        scope: "t".to_string(),
        owner: "a".to_string(),
        token: 0,
        ttl_us: 100,
    };
    let history = at_times(&[
        ("a", 1, invoke(0, acquire_op("a"))),
        ("a", 10, granted(0, None)),
        ("a", 50, invoke(1, renew)),
        (
            "a",
            55,
            EventKind::Complete {
                op_id: 1,
                outcome: Outcome::Fail {
                    reason: leaseproof_history::FailReason::Stale,
                },
            },
        ),
        ("b", 90, invoke(2, acquire_op("b"))),
        ("b", 100, granted(2, None)),
        ("b", 200, invoke(3, release_op("b"))),
        ("b", 205, unlocked(3)),
        ("a", 300, invoke(4, release_op("a"))),
        ("a", 305, unlocked(4)),
    ]);
    assert!(check(&history, &CheckConfig::default())
        .violations_of(Invariant::MutualExclusion)
        .is_empty());
}

#[test]
fn a_clean_lock_race_counts_its_holders_and_takeovers() {
    // a, then b, then a again, each released before the next is granted:
    // three holds, two distinct holders, two takeovers — a real race,
    // though no grant carries a server time.
    let mut builder = Builder::new();
    lock(&mut builder, "a", Some(1), Some(1_000), 5, 10);
    unlock(&mut builder, "a", 100);
    lock(&mut builder, "b", Some(2), Some(1_000), 200, 210);
    unlock(&mut builder, "b", 300);
    lock(&mut builder, "a", Some(3), Some(1_000), 400, 410);
    unlock(&mut builder, "a", 500);
    let history = builder.build();
    let report = check(&history, &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.grants, 3, "{report}");
    assert_eq!(report.stats.distinct_holders, 2, "{report}");
    assert_eq!(report.stats.takeovers, 2, "{report}");
    // One holder re-acquiring is no takeover.
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, None, 5, 10);
    unlock(&mut builder, "a", 100);
    lock(&mut builder, "a", None, None, 200, 210);
    let report = check(&builder.build(), &CheckConfig::default());
    assert_eq!(report.stats.distinct_holders, 1, "{report}");
    assert_eq!(report.stats.takeovers, 0, "{report}");
}

#[test]
fn a_smaller_token_for_a_holder_that_went_silent_at_once_is_still_an_i2_violation() {
    // b's session lock comes back with token 3 after a's token 5 was
    // acknowledged and released, and b records nothing more: no instant of
    // b's hold is certain, but its token was granted, and it went backwards.
    let mut builder = Builder::new();
    lock(&mut builder, "a", Some(5), None, 10, 20);
    unlock(&mut builder, "a", 30);
    lock(&mut builder, "b", Some(3), None, 50, 60);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert!(
        violation
            .message
            .contains("b was granted token 3 after a had been granted token 5"),
        "{violation}"
    );
    // With a larger token, nothing is wrong.
    let mut builder = Builder::new();
    lock(&mut builder, "a", Some(5), None, 10, 20);
    unlock(&mut builder, "a", 30);
    lock(&mut builder, "b", Some(6), None, 50, 60);
    assert_passes(&builder.build());
}

#[test]
fn a_lock_that_grants_everyone_is_reported_once_per_hold_not_once_per_pair() {
    // Four owners granted one after another, each while the others still
    // held, under tokens that never grow: every later hold is named with
    // one earlier hold that proves it (three I1, three I2), not all six pairs.
    let mut builder = Builder::new();
    for (index, worker) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let at_us = 10 + 20 * index as i64;
        lock(&mut builder, worker, Some(1), Some(1_000), at_us, at_us + 5);
    }
    let report = check(&builder.build(), &CheckConfig::default());
    let count = |invariant| {
        report
            .violations
            .iter()
            .filter(|violation| violation.invariant == invariant)
            .count()
    };
    assert_eq!(count(Invariant::MutualExclusion), 3, "{report}");
    assert_eq!(count(Invariant::TokenOrder), 3, "{report}");
    for later in ["b", "c", "d"] {
        assert!(
            report.violations.iter().any(|violation| violation
                .message
                .contains(&format!("and {later} certainly held"))),
            "{later} is named: {report}"
        );
    }
}

#[test]
fn a_smaller_token_is_caught_behind_a_larger_one_of_the_same_owner() {
    // a holds token 5 then token 6 (its own), b takes token 4 afterwards:
    // the rival named is a's largest, whichever order they came in.
    let mut builder = Builder::new();
    lock(&mut builder, "a", Some(5), Some(10), 10, 12);
    lock(&mut builder, "a", Some(6), Some(10), 30, 32);
    lock(&mut builder, "b", Some(4), Some(10), 60, 62);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert!(
        violation
            .message
            .contains("b was granted token 4 after a had been granted token 6"),
        "{violation}"
    );
}

/// The I2 findings of lock grants made one after another (each acknowledged
/// before the next is invoked, none overlapping): (worker, token) in order.
fn token_findings(grants: &[(&str, u64)]) -> Vec<String> {
    let mut builder = Builder::new();
    for (index, (worker, token)) in grants.iter().enumerate() {
        let at_us = 100 + 100 * index as i64;
        lock(
            &mut builder,
            worker,
            Some(*token),
            Some(10),
            at_us,
            at_us + 5,
        );
    }
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        report
            .violations
            .iter()
            .all(|violation| violation.invariant == Invariant::TokenOrder),
        "{report}"
    );
    report
        .violations
        .iter()
        .map(|violation| violation.message.clone())
        .collect()
}

#[test]
fn a_smaller_token_is_judged_against_the_largest_token_of_another_owner() {
    // The largest so far is the later owner's own: the rival named is the
    // largest of anyone else.
    assert_eq!(
        token_findings(&[("b", 7), ("a", 9), ("a", 6)]),
        vec!["a was granted token 6 after b had been granted token 7"]
    );
    // A later, smaller rival token does not replace a larger one.
    assert_eq!(
        token_findings(&[("a", 9), ("c", 7), ("b", 5), ("a", 6)]),
        vec![
            "c was granted token 7 after a had been granted token 9",
            "b was granted token 5 after a had been granted token 9",
            "a was granted token 6 after c had been granted token 7",
        ]
    );
    // A larger rival token raises the rival's largest.
    assert_eq!(
        token_findings(&[("a", 9), ("b", 5), ("c", 7), ("a", 6)]),
        vec![
            "b was granted token 5 after a had been granted token 9",
            "c was granted token 7 after a had been granted token 9",
            "a was granted token 6 after c had been granted token 7",
        ]
    );
    // A new largest of the same owner keeps the rival's.
    assert_eq!(
        token_findings(&[("b", 7), ("a", 8), ("a", 9), ("a", 6)]),
        vec!["a was granted token 6 after b had been granted token 7"]
    );
    // Own tokens only, growing or not: nothing to compare with another owner.
    assert!(token_findings(&[("a", 9), ("a", 6)]).is_empty());
    // Growing tokens across owners: nothing.
    assert!(token_findings(&[("a", 1), ("b", 2), ("a", 3), ("c", 4)]).is_empty());
    // Equal tokens of two owners: the later is no larger.
    assert_eq!(
        token_findings(&[("a", 3), ("b", 3)]),
        vec!["b was granted token 3 after a had been granted token 3"]
    );
}

#[test]
fn a_token_acknowledged_the_instant_the_other_was_invoked_was_not_certainly_first() {
    // a acknowledged at 10, b invoked at 10: either may have been granted
    // first, so b's smaller token proves nothing; a microsecond earlier it does.
    for (a_acked_us, expected) in [(10, 0), (9, 1)] {
        let history = at_times(&[
            ("a", 1, invoke(0, acquire_op("a"))),
            ("a", a_acked_us, granted(0, Some(5))),
            ("b", 10, invoke(1, acquire_op("b"))),
            ("b", 12, granted(1, Some(4))),
        ]);
        let report = check(&history, &CheckConfig::default());
        assert_eq!(report.violations.len(), expected, "{report}");
    }
}

#[test]
fn a_renewal_that_lapses_after_one_in_time_begins_its_own_hold() {
    // a: acquired (promise to 100), renewed in time at 50 (to 150), renewed
    // again at 200, after that promise ran out: a second hold from 205.
    // b held [165, 185) in the gap (no finding), then again from 225 while
    // a's second hold ran (I1).
    let mut builder = Builder::new();
    lock(&mut builder, "a", None, Some(100), 1, 5);
    renew(&mut builder, "a", 100, 50, 55);
    lock(&mut builder, "b", None, Some(20), 160, 165);
    renew(&mut builder, "a", 100, 200, 205);
    lock(&mut builder, "b", None, Some(20), 220, 225);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert!(
        violation.message.contains("[205, 300) and [225, 240)"),
        "{violation}"
    );
}
