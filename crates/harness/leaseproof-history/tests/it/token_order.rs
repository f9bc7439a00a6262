//! I2 token order: tokens strictly increase with granted_at, one token has one
//! owner and one granted_at, renewals and idempotent re-acquires keep it.

use leaseproof_history::{check, CheckConfig, Invariant, Op, OpResult, Outcome};

use crate::builder::{assert_passes, only_violation, Builder};

#[test]
fn token_going_backwards_is_a_violation() {
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 2, 1_000);
    let (_, b_granted) = builder.acquire_ok("b", "s", 1, 1_200);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert_eq!(violation.events, vec![a_granted, b_granted]);
    assert!(
        violation.message.contains("token went backwards"),
        "{violation}"
    );
}

#[test]
fn one_token_for_two_owners_is_a_violation() {
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, b_granted) = builder.acquire_ok("b", "s", 1, 1_000);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert_eq!(violation.events, vec![a_granted, b_granted]);
    assert!(
        violation
            .message
            .contains("token 1 granted to both a and b"),
        "{violation}"
    );
}

#[test]
fn one_token_granted_twice_is_a_violation() {
    // The second grant forgot the increment: same owner, same token, new granted_at.
    let mut builder = Builder::new();
    let (_, first) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, second) = builder.acquire_ok("a", "s", 1, 1_200);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert_eq!(violation.events, vec![first, second]);
    assert!(
        violation
            .message
            .contains("granted twice: at 1000 and at 1200"),
        "{violation}"
    );
}

#[test]
fn a_token_granted_again_does_not_stretch_its_first_grant_over_the_gap() {
    // a holds token 5 on [0, 100), c token 6 on [150, 250), then token 5
    // again (to b, or to a with a new start) on [260, 360): I2, and no
    // overlap — nobody held [100, 150) or [250, 260) twice.
    for second_owner in ["b", "a"] {
        let mut builder = Builder::new();
        builder.acquire_ok_until("a", "s", 5, 0, 100);
        builder.acquire_ok_until("c", "s", 6, 150, 250);
        builder.acquire_ok_until(second_owner, "s", 5, 260, 360);
        let report = check(&builder.build(), &CheckConfig::default());
        assert!(!report.violations.is_empty(), "{report}");
        for violation in &report.violations {
            assert_eq!(violation.invariant, Invariant::TokenOrder, "{report}");
        }
        assert_eq!(report.stats.renewals, 0, "{report}");
    }
}

#[test]
fn a_renewal_reporting_its_own_time_as_granted_at_is_no_second_grant() {
    // Designs differ on what a renewal reports as `granted_at`: the grant's
    // start (the reference) or the renewal's time. Neither is a violation.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.renew_ok("a", "s", 1, 1_200, 1_200 + 1_000_000);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.renewals, 1);

    // Such a store answers a later idempotent re-acquisition with the time
    // its renewal stamped: the same grant, not a second one.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.renew_unknown("a", "s", 1);
    builder.acquire_ok_until("a", "s", 1, 1_050, 1_150);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.renewals, 1);
    // An ok renewal that stamped its own time, then the re-acquisition.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.renew_ok("a", "s", 1, 1_050, 1_150);
    builder.acquire_ok_until("a", "s", 1, 1_050, 1_150);
    assert_passes(&builder.build());
    // A re-acquisition stamped while the grant lived may restamp its start
    // whatever the renewals report (an upsert that sets the start anew for
    // its owner): no rival could come between them, so it is the same grant.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.renew_ok("a", "s", 1, 1_000, 1_150);
    builder.acquire_ok_until("a", "s", 1, 1_050, 1_150);
    assert_passes(&builder.build());
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok_until("a", "s", 1, 1_050, 1_150);
    assert_passes(&builder.build());
    // Stamped at or after the grant's expiry: a new grant that forgot the
    // increment.
    for start in [1_100, 1_101] {
        let mut builder = Builder::new();
        builder.acquire_ok("a", "s", 1, 1_000);
        builder.acquire_ok_until("a", "s", 1, start, start + 100);
        let violation = only_violation(&builder.build());
        assert_eq!(violation.invariant, Invariant::TokenOrder);
        assert!(violation.message.contains("granted twice"), "{violation}");
    }
    // At the expiry itself only with a start a renewal may have stamped (one
    // of unknown outcome sent before); a start past it is a new grant even
    // so (the renewal's effect is unknown: nothing is merged across a gap).
    for (start, second_grant) in [(1_100, false), (1_101, true)] {
        let mut builder = Builder::new();
        builder.acquire_ok("a", "s", 1, 1_000);
        builder.renew_unknown("a", "s", 1);
        builder.acquire_ok_until("a", "s", 1, start, start + 100);
        let report = check(&builder.build(), &CheckConfig::default());
        assert_eq!(!report.is_ok(), second_grant, "{start}: {report}");
    }
    // A renewal that certainly failed stamped nothing: at the expiry, a
    // new grant.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.renew_stale("a", "s", 1);
    builder.acquire_ok_until("a", "s", 1, 1_100, 1_200);
    let violation = only_violation(&builder.build());
    assert!(violation.message.contains("granted twice"), "{violation}");
    // Released at 1030 on the store's clock: a start from then on is a new
    // grant, one before it the same.
    for (start, second_grant) in [(1_029, false), (1_030, true), (1_031, true)] {
        let mut builder = Builder::new();
        builder.acquire_ok("a", "s", 1, 1_000);
        builder.release_ok("a", "s", 1, 1_030);
        builder.acquire_ok_until("a", "s", 1, start, start + 100);
        let report = check(&builder.build(), &CheckConfig::default());
        let twice = report
            .violations
            .iter()
            .any(|violation| violation.message.contains("granted twice"));
        assert_eq!(twice, second_grant, "{start}: {report}");
    }
    // Released (acknowledged `unlocked`) before the re-acquisition was sent:
    // a new grant, however early its start.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.release_unlocked("a", "s", 1);
    builder.acquire_ok_until("a", "s", 1, 1_050, 1_150);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert!(violation.message.contains("granted twice"), "{violation}");
}

#[test]
fn renewal_returning_another_token_is_a_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (renew_invoked, renew_completed) = builder.renew_returning("a", "s", 1, 2, 1_200, 1_300);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert_eq!(violation.events, vec![renew_invoked, renew_completed]);
    assert!(
        violation
            .message
            .contains("renewed token 1 but got token 2"),
        "{violation}"
    );
}

#[test]
fn idempotent_reacquire_keeps_the_token_and_counts_as_renewal() {
    let mut builder = Builder::new();
    builder.acquire_unknown("a", "s"); // the reply of the grant was lost
    builder.acquire_ok_until("a", "s", 1, 1_000, 1_150); // the retry finds it
    builder.acquire_ok("b", "s", 2, 1_150);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.grants, 2);
    assert_eq!(report.stats.renewals, 0);
    assert_eq!(report.stats.unknown_ops, 1);

    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok_until("a", "s", 1, 1_000, 1_150);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.grants, 1);
    assert_eq!(report.stats.renewals, 1);
}

#[test]
fn reacquire_of_a_live_grant_under_a_new_token_is_a_violation() {
    let mut builder = Builder::new();
    let (_, first) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, second) = builder.acquire_ok("a", "s", 2, 1_050);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert_eq!(violation.events, vec![first, second]);
    assert!(
        violation
            .message
            .contains("re-acquired its live grant under a new token"),
        "{violation}"
    );
}

#[test]
fn acquire_answered_with_another_owners_row_is_a_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (invoked, completed) = builder.acquire_answered_as("b", "s", "a", 1, 1_000);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert_eq!(violation.events, vec![invoked, completed]);
}

/// A token is judged against every earlier grant, not only the one stamped
/// just before it: here b's token 4 is stamped half a millisecond before a's
/// token 1 (the rounding of one clock, which real time reverses: a was
/// answered before b asked) and 1.5 ms before c's token 3, which real time
/// does not order against it — a token that went backwards on one clock.
#[test]
fn a_token_is_judged_against_every_earlier_grant_not_only_its_neighbour() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 999_500);
    builder.acquire_unknown("b", "s");
    builder.acquire_ok("c", "s", 3, 1_000_500);
    builder.acquire_ok("b", "s", 4, 999_000);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::TokenOrder);
    assert!(
        violation.message.starts_with(
            "token went backwards: b got token 4 at 999000, then c got token 3 at 1000500"
        ),
        "{violation}"
    );
}

/// Under statement-start stamps a token going backwards is proven by real
/// time: the larger token was answered before the smaller one was asked for.
#[test]
fn a_larger_token_answered_before_a_smaller_was_asked_for_is_proven_under_statement_start() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 2, 2_000);
    builder.acquire_ok("b", "s", 1, 3_000);
    let config = CheckConfig {
        grant_stamps: leaseproof_history::GrantStamps::StatementStart,
        ..CheckConfig::default()
    };
    let report = check(&builder.build(), &config);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert_eq!(report.violations[0].invariant, Invariant::TokenOrder);
    assert!(
        report.violations[0]
            .message
            .starts_with("token went backwards"),
        "{report}"
    );
}

/// A grant first reported by a renewal may carry the renewal's own time as
/// its start, later than the grant: stamped after a larger token, it proves
/// no token went backwards.
#[test]
fn a_start_a_renewal_reported_proves_no_token_went_backwards() {
    let mut builder = Builder::new();
    builder.acquire_unknown("a", "s");
    builder.acquire_ok("b", "s", 2, 3_000);
    builder.release_ok("b", "s", 2, 3_050);
    builder.renew_ok("a", "s", 1, 5_000, 5_100);
    assert_passes(&builder.build());
}

/// `worker`'s acquisition of scope `s` for 100 µs.
fn acquire(worker: &str) -> Op {
    Op::Acquire {
        scope: "s".to_string(),
        owner: worker.to_string(),
        ttl_us: 100,
    }
}

/// `worker` granted `token` at `granted_at_us` for 100 µs.
fn granted(worker: &str, token: u64, granted_at_us: i64) -> Outcome {
    Outcome::Ok {
        result: OpResult::Lease {
            token,
            owner: worker.to_string(),
            granted_at_us,
            expires_at_us: granted_at_us + 100,
        },
    }
}

/// Under statement-start stamps: the larger token answered the very
/// microsecond the smaller was asked for proves no order (possible only),
/// and real time showing the smaller first leaves nothing to report.
#[test]
fn a_backwards_token_under_statement_start_needs_real_time_strictly_before() {
    use leaseproof_history::{EventKind, History};
    let story = |b_invoked_us: i64| {
        let mut history = History::default();
        // a: token 2 stamped 2000, answered at 10; b: token 1 stamped 3000,
        // answered at 30.
        history.push(
            "a",
            0,
            1,
            1,
            EventKind::Invoke {
                op_id: 0,
                op: acquire("a"),
            },
        );
        history.push(
            "b",
            0,
            b_invoked_us,
            b_invoked_us,
            EventKind::Invoke {
                op_id: 1,
                op: acquire("b"),
            },
        );
        for (worker, op_id, token, granted_at_us, at_us) in
            [("a", 0, 2, 2_000, 10), ("b", 1, 1, 3_000, 30)]
        {
            history.push(
                worker,
                0,
                at_us,
                at_us,
                EventKind::Complete {
                    op_id,
                    outcome: granted(worker, token, granted_at_us),
                },
            );
        }
        let config = CheckConfig {
            grant_stamps: leaseproof_history::GrantStamps::StatementStart,
            ..CheckConfig::default()
        };
        check(&history, &config)
    };
    let report = story(11);
    assert_eq!(report.violations.len(), 1, "{report}");
    let report = story(10);
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.possible.len(), 1, "{report}");
    // Real time shows the smaller token first (b answered before a asked),
    // the stamps within the millisecond of rounding: nothing to report.
    let mut history = History::default();
    history.push(
        "b",
        0,
        1,
        1,
        EventKind::Invoke {
            op_id: 0,
            op: acquire("b"),
        },
    );
    history.push(
        "b",
        0,
        5,
        5,
        EventKind::Complete {
            op_id: 0,
            outcome: granted("b", 1, 3_000),
        },
    );
    history.push(
        "a",
        0,
        10,
        10,
        EventKind::Invoke {
            op_id: 1,
            op: acquire("a"),
        },
    );
    history.push(
        "a",
        0,
        20,
        20,
        EventKind::Complete {
            op_id: 1,
            outcome: granted("a", 2, 2_000),
        },
    );
    let config = CheckConfig {
        grant_stamps: leaseproof_history::GrantStamps::StatementStart,
        ..CheckConfig::default()
    };
    let report = check(&history, &config);
    assert!(report.is_ok(), "{report}");
    assert!(report.possible.is_empty(), "{report}");
}
