//! I1 mutual exclusion: effective grant intervals of one scope never overlap.
//! Each test breaks it one way and asserts the exact violation and its events.

use leaseproof_history::{check, CheckConfig, Invariant, Op, OpResult, Outcome};

use crate::builder::{assert_passes, only_violation, Builder, TTL_US};

#[test]
fn takeover_before_expiry_is_an_overlap() {
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, b_granted) = builder.acquire_ok("b", "s", 2, 1_050);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(violation.scope, "s");
    assert_eq!(violation.events, vec![a_granted, b_granted]);
    let text = violation.to_string();
    assert!(text.starts_with("I1 mutual exclusion [s]"), "{text}");
    assert!(text.contains("a token 1 holds [1000, 1100)"), "{text}");
    assert!(text.contains("b token 2 was granted at 1050"), "{text}");
}

#[test]
fn takeover_exactly_at_expiry_is_not_an_overlap() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_000 + TTL_US);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.takeovers, 1);
}

#[test]
fn takeover_inside_a_renewed_grant_is_an_overlap() {
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, a_renewed) = builder.renew_ok("a", "s", 1, 1_000, 1_180);
    let (_, b_granted) = builder.acquire_ok("b", "s", 2, 1_150);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(violation.events, vec![a_granted, a_renewed, b_granted]);
}

#[test]
fn a_renewal_decided_after_its_grant_expired_does_not_bridge_the_gap() {
    // a's grant ends at 1_100 (server); b holds [1_120, 1_130) and releases;
    // a's renewal, decided at 1_150 (expires 1_250 with a TTL of 100),
    // revives token 1 — but a held nothing in between.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_120);
    builder.release_ok("b", "s", 2, 1_130);
    builder.renew_ok("a", "s", 1, 1_000, 1_250);
    assert_passes(&builder.build());
}

#[test]
fn a_renewal_decided_the_instant_its_grant_expired_leaves_no_gap() {
    // Decided at 1_100, the instant [1_000, 1_100) ended: a is live again
    // from 1_100, when b's grant began — both live at 1_100.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_100);
    builder.release_ok("b", "s", 2, 1_105);
    builder.renew_ok("a", "s", 1, 1_000, 1_200);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
}

#[test]
fn release_ends_the_grant_early() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.release_ok("a", "s", 1, 1_020);
    builder.acquire_ok("b", "s", 2, 1_020);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.releases, 1);

    // b's acquisition was in flight while a released: its grant stamped
    // before the release is an overlap.
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, b_acquire) = builder.invoke("b", acquire("b"));
    let (_, a_released) = builder.release_ok("a", "s", 1, 1_020);
    let b_granted = builder.complete("b", b_acquire, lease("b", 2, 1_019));
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(violation.events, vec![a_granted, a_released, b_granted]);
}

fn acquire(owner: &str) -> Op {
    Op::Acquire {
        scope: "s".to_string(),
        owner: owner.to_string(),
        ttl_us: TTL_US,
    }
}

fn lease(owner: &str, token: u64, granted_at_us: i64) -> Outcome {
    Outcome::Ok {
        result: OpResult::Lease {
            token,
            owner: owner.to_string(),
            granted_at_us,
            expires_at_us: granted_at_us + TTL_US,
        },
    }
}

#[test]
fn server_times_that_real_time_contradicts_are_h_and_prove_nothing_more() {
    // The release was acknowledged before b asked, yet b's grant is stamped
    // before it: no one clock that only advances stamped both. Not an I1
    // (real time shows the release first), but H.
    let mut builder = Builder::new();
    builder.acquire_ok_until("a", "s", 1, 10_000, 20_000);
    let (_, a_released) = builder.release_ok("a", "s", 1, 15_000);
    let (_, b_granted) = builder.acquire_ok_until("b", "s", 2, 13_000, 23_000);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::WellFormed);
    assert_eq!(violation.events, vec![a_released, b_granted]);
    assert!(
        violation
            .message
            .contains("server times go back against real time"),
        "{violation}"
    );

    // a's grant was acknowledged before b asked, yet b's is stamped
    // earlier: token order holds in real time, so not I2 — H. a's release,
    // invoked after b's grant was acknowledged, found a's grant live: an
    // overlap real time proves, whichever grant the stamps put first.
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok_until("a", "s", 1, 10_000, 20_000);
    let (_, b_granted) = builder.acquire_ok_until("b", "s", 2, 5_000, 30_000);
    builder.release_ok("a", "s", 1, 12_000);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        report.violations_of(Invariant::TokenOrder).is_empty(),
        "{report}"
    );
    let clock = report.violations_of(Invariant::WellFormed);
    assert_eq!(clock.len(), 1, "{report}");
    assert_eq!(clock[0].events, vec![a_granted, b_granted]);
    assert_eq!(
        report.violations_of(Invariant::MutualExclusion).len(),
        1,
        "{report}"
    );
}

#[test]
fn stamps_a_millisecond_apart_the_wrong_way_are_rounding_not_h() {
    // A grant kept in milliseconds (rounded up) and a release read in
    // microseconds, both from one clock: no contradiction.
    let mut builder = Builder::new();
    builder.acquire_ok_until("a", "s", 1, 1_001_000, 1_101_000);
    builder.release_ok("a", "s", 1, 1_000_700);
    assert_passes(&builder.build());
    // A release reporting when its grant ended (at its expiry), after a
    // rival's grant: it read no clock during the release.
    let mut builder = Builder::new();
    builder.acquire_ok_until("a", "s", 1, 100_000, 200_000);
    builder.acquire_ok_until("b", "s", 2, 250_000, 350_000);
    builder.release_ok("a", "s", 1, 200_000);
    assert_passes(&builder.build());
}

#[test]
fn a_release_after_the_expiry_ends_nothing_and_shows_nothing_live() {
    // a's grant expired at 1100; b took over at 1150; a release stamped
    // 1200 released a grant already over: no overlap.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_150);
    builder.release_ok("a", "s", 1, 1_200);
    assert_passes(&builder.build());
}

#[test]
fn unknown_release_excuses_an_early_takeover_but_not_before_the_grant_was_seen_live() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.release_unknown("a", "s", 1);
    builder.acquire_ok("b", "s", 2, 1_050);
    assert_passes(&builder.build());

    // The renewal shows the grant live at server time 1040 (expires_at - ttl):
    // whatever the release did, it did it later.
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, a_renewed) = builder.renew_ok("a", "s", 1, 1_000, 1_040 + TTL_US);
    builder.release_unknown("a", "s", 1);
    let (_, b_granted) = builder.acquire_ok("b", "s", 2, 1_030);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(violation.events, vec![a_granted, a_renewed, b_granted]);
}

#[test]
fn overlap_in_one_scope_does_not_concern_another() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "t", 1, 1_050);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.grants, 2);
    assert_eq!(report.stats.takeovers, 0);
}

#[test]
fn unknown_release_invoked_after_the_takeover_completed_does_not_excuse_the_overlap() {
    // b's grant was reported before a even sent its release: whatever the
    // release did, it did it after b was granted, so a still held [1000, 1100).
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, b_granted) = builder.acquire_ok("b", "s", 2, 1_050);
    let (release_invoked, _) = builder.release_unknown("a", "s", 1);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(
        violation.events,
        vec![a_granted, b_granted, release_invoked]
    );
    let text = violation.to_string();
    assert!(text.contains("a token 1 holds [1000, 1100)"), "{text}");
    assert!(text.contains("b token 2 was granted at 1050"), "{text}");
}

#[test]
fn unknown_release_in_flight_while_the_takeover_completed_excuses_the_overlap() {
    // The release was sent before b's grant was reported: it may have taken
    // effect first.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (_, release_op) = builder.invoke(
        "a",
        Op::Release {
            scope: "s".to_string(),
            owner: "a".to_string(),
            token: 1,
        },
    );
    builder.acquire_ok("b", "s", 2, 1_050);
    builder.complete(
        "a",
        release_op,
        Outcome::Unknown {
            reason: "timeout".to_string(),
        },
    );
    assert_passes(&builder.build());
}

#[test]
fn earliest_unknown_release_decides_when_several_were_sent() {
    // A retried release after the takeover does not undo the first one, which
    // was sent before b's grant was reported.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.release_unknown("a", "s", 1);
    builder.acquire_ok("b", "s", 2, 1_050);
    builder.release_unknown("a", "s", 1);
    assert_passes(&builder.build());
}

/// A false-alarm shape once reported: a design whose release deletes its row and
/// whose rival's insert queued behind that delete, stamped with the insert
/// statement's *start*: B's `granted_at` (1_019) lies before A's release
/// (1_020) in server time, yet B's grant was decided only once the release
/// committed. B's acquisition is invoked before A's release and acknowledged
/// after it, so real-time order cannot order them either.
fn queued_rival_history() -> (leaseproof_history::History, u64, u64) {
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, b_acquire) = builder.invoke(
        "b",
        Op::Acquire {
            scope: "s".to_string(),
            owner: "b".to_string(),
            ttl_us: TTL_US,
        },
    );
    builder.release_ok("a", "s", 1, 1_020);
    let b_granted = builder.complete(
        "b",
        b_acquire,
        Outcome::Ok {
            result: leaseproof_history::OpResult::Lease {
                token: 2,
                owner: "b".to_string(),
                granted_at_us: 1_019,
                expires_at_us: 1_019 + TTL_US,
            },
        },
    );
    (builder.build(), a_granted, b_granted)
}

fn statement_start() -> leaseproof_history::CheckConfig {
    leaseproof_history::CheckConfig {
        grant_stamps: leaseproof_history::GrantStamps::StatementStart,
        ..leaseproof_history::CheckConfig::default()
    }
}

#[test]
fn a_rival_stamped_at_its_statement_start_behind_a_release_is_no_false_alarm() {
    let (history, a_granted, b_granted) = queued_rival_history();
    let report = leaseproof_history::check(&history, &statement_start());
    assert!(report.is_ok(), "{report}");
    // Not a pass of I1 either: the overlap is reported as undecidable.
    assert_eq!(report.possible.len(), 1, "{report}");
    assert_eq!(report.possible[0].invariant, Invariant::MutualExclusion);
    assert!(report.possible[0].events.contains(&a_granted));
    assert!(report.possible[0].events.contains(&b_granted));
    assert!(report.possible[0].message.contains("does not prove it"));
    // With decision stamps (the reference's), the same timestamps are a real overlap.
    let strict = leaseproof_history::check(&history, &leaseproof_history::CheckConfig::default());
    assert_eq!(
        only_violation(&history).invariant,
        Invariant::MutualExclusion
    );
    assert!(strict.possible.is_empty());
}

#[test]
fn real_time_order_proves_an_overlap_of_statement_start_stamps() {
    // B is granted and told so *before* A even invokes the release that then
    // finds A's grant live: both held at once, whatever the stamps mean.
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, b_granted) = builder.acquire_ok("b", "s", 2, 1_019);
    let (_, a_released) = builder.release_ok("a", "s", 1, 1_020);
    let report = leaseproof_history::check(&builder.build(), &statement_start());
    assert_eq!(report.violations.len(), 1, "{report}");
    let violation = &report.violations[0];
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(violation.events, vec![a_granted, b_granted, a_released]);
    assert!(report.possible.is_empty());
}

#[test]
fn a_renewal_that_finds_the_earlier_grant_live_also_proves_the_overlap() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_050);
    builder.renew_ok("a", "s", 1, 1_000, 1_160);
    let report = leaseproof_history::check(&builder.build(), &statement_start());
    assert_eq!(report.violations.len(), 1, "{report}");
    assert_eq!(report.violations[0].invariant, Invariant::MutualExclusion);
}

/// b asked once before a was granted (`early`), then again after; b's grant
/// overlaps a's in server time, and a's renewal after b's grant finds a's
/// grant live.
fn b_asked_early_then_again(early: Outcome) -> leaseproof_history::History {
    let mut builder = Builder::new();
    let acquire_b = Op::Acquire {
        scope: "s".to_string(),
        owner: "b".to_string(),
        ttl_us: TTL_US,
    };
    let (_, first) = builder.invoke("b", acquire_b);
    builder.complete("b", first, early);
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_050);
    builder.renew_ok("a", "s", 1, 1_000, 1_160);
    builder.build()
}

#[test]
fn an_acquisition_that_certainly_failed_made_no_grant_so_the_later_one_proves_the_overlap() {
    // b's first acquisition was refused: b's grant was made by its second,
    // invoked after a's grant was acknowledged. Proven in real time.
    let refused = Outcome::Fail {
        reason: leaseproof_history::FailReason::Held,
    };
    let report = leaseproof_history::check(&b_asked_early_then_again(refused), &statement_start());
    assert_eq!(report.violations.len(), 1, "{report}");
    assert_eq!(report.violations[0].invariant, Invariant::MutualExclusion);
    assert!(report.possible.is_empty(), "{report}");
}

#[test]
fn an_acquisition_of_unknown_outcome_may_have_made_the_grant_so_the_overlap_stays_possible() {
    // b's first acquisition may have taken effect, early: its grant may have
    // been decided before a's was, so the stamps prove nothing.
    let lost = Outcome::Unknown {
        reason: "reply lost".to_string(),
    };
    let report = leaseproof_history::check(&b_asked_early_then_again(lost), &statement_start());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.possible.len(), 1, "{report}");
    assert_eq!(report.possible[0].invariant, Invariant::MutualExclusion);
}

#[test]
fn an_acquisition_answered_with_another_token_made_not_the_later_grant() {
    // b held token 1 before (acquired and released), then a took token 2,
    // then b token 3 over a's live grant: b's first acquisition made token
    // 1, not 3, so only b's second bounds when 3 was decided. Proven.
    let mut builder = Builder::new();
    builder.acquire_ok("b", "s", 1, 500);
    builder.release_ok("b", "s", 1, 600);
    builder.acquire_ok("a", "s", 2, 1_000);
    builder.acquire_ok("b", "s", 3, 1_050);
    builder.renew_ok("a", "s", 2, 1_000, 1_160);
    let report = leaseproof_history::check(&builder.build(), &statement_start());
    assert_eq!(report.violations.len(), 1, "{report}");
    assert_eq!(report.violations[0].invariant, Invariant::MutualExclusion);
}

/// A lease's release answered without a server time (`unlocked`, as a lock's
/// is) took effect at a time unknown: it may have made room for a rival
/// granted after it was sent, not for one granted before.
#[test]
fn a_lease_release_answered_without_a_time_ends_the_grant_at_a_time_unknown() {
    let unlocked = Outcome::Ok {
        result: OpResult::Unlocked {},
    };
    let release = Op::Release {
        scope: "s".to_string(),
        owner: "a".to_string(),
        token: 1,
    };
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (_, op_id) = builder.invoke("a", release.clone());
    builder.complete("a", op_id, unlocked.clone());
    builder.acquire_ok("b", "s", 2, 1_050);
    assert_passes(&builder.build());

    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_050);
    let (_, op_id) = builder.invoke("a", release);
    builder.complete("a", op_id, unlocked);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
}

/// Decision stamps of one clock rounded to a millisecond may put a rival's
/// grant up to 1 ms before a release real time shows came first (or a
/// smaller token's grant after a larger one's): that is the rounding, not an
/// overlap nor a token going back; more than a millisecond apart it is H.
#[test]
fn decision_stamps_within_a_millisecond_that_real_time_reverses_are_rounding() {
    // The release answered before the rival asked, stamped 0.5 ms after the
    // rival's grant.
    let released_then_taken = |rival_granted_at_us: i64| {
        let mut builder = Builder::new();
        builder.acquire_ok_until("a", "s", 1, 10_000, 1_000_000);
        builder.release_ok("a", "s", 1, 20_000);
        builder.acquire_ok_until("b", "s", 2, rival_granted_at_us, 1_000_000);
        check(&builder.build(), &CheckConfig::default())
    };
    assert!(
        released_then_taken(19_500).is_ok(),
        "{}",
        released_then_taken(19_500)
    );
    assert!(
        released_then_taken(19_000).is_ok(),
        "{}",
        released_then_taken(19_000)
    );
    let report = released_then_taken(18_999);
    assert!(
        report
            .violations
            .iter()
            .all(|v| v.invariant == Invariant::WellFormed),
        "{report}"
    );
    assert!(!report.violations.is_empty(), "{report}");

    // Real time shows a's grant (token 1) and release first; the stamps put
    // b's token 2 half a millisecond before both.
    let mut builder = Builder::new();
    builder.acquire_ok_until("a", "s", 1, 10_500, 1_000_000);
    builder.release_ok("a", "s", 1, 10_600);
    builder.acquire_ok_until("b", "s", 2, 10_000, 1_000_000);
    assert_passes(&builder.build());

    // Without the release, the grants overlap on any clock: I1 stands.
    let mut builder = Builder::new();
    builder.acquire_ok_until("a", "s", 1, 10_500, 1_000_000);
    builder.acquire_ok_until("b", "s", 2, 10_000, 1_000_000);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::MutualExclusion),
        "{report}"
    );
}
