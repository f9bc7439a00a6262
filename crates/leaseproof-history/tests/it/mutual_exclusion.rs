//! I1 mutual exclusion: effective grant intervals of one scope never overlap.
//! Each test breaks it one way and asserts the exact violation and its events.

use leaseproof_history::{Invariant, Op, Outcome};

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
fn release_ends_the_grant_early() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.release_ok("a", "s", 1, 1_020);
    builder.acquire_ok("b", "s", 2, 1_020);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.releases, 1);

    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (_, a_released) = builder.release_ok("a", "s", 1, 1_020);
    let (_, b_granted) = builder.acquire_ok("b", "s", 2, 1_019);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::MutualExclusion);
    assert_eq!(violation.events, vec![a_granted, a_released, b_granted]);
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
