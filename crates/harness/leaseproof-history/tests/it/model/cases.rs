//! Stories the model must explain, and their twins it must not: among them
//! the two classes of correct histories the rules once convicted.

use leaseproof_history::model::Verdict;
use leaseproof_history::{GrantStamps, Invariant};

use leaseproof_history::model::Assumptions;

use super::story::{
    acquire, judged, judged_assuming, lease, release, released, renew, unlocked, verdict, End,
    Story,
};

fn blamed(story: &Story, stamps: GrantStamps) -> Vec<Invariant> {
    let report = judged(&story.history(), stamps);
    match verdict(&report) {
        Verdict::Violated(certificate) => certificate.invariants.clone(),
        other => panic!("expected a violation, got {other:?}\n{report}"),
    }
}

fn explained(story: &Story, stamps: GrantStamps) {
    let report = judged(&story.history(), stamps);
    assert!(
        matches!(verdict(&report), Verdict::Explained(Some(_))),
        "{report}"
    );
}

#[test]
fn a_release_then_a_rival_is_explained_and_an_overlap_is_i1_with_both_grants_as_proof() {
    let mut story = Story::default();
    story
        .op(acquire("a", 100), 10, 20, lease("a", 1, 1_000, 1_100))
        .op(release("a", 1), 30, 40, released(1_050))
        .op(acquire("b", 100), 50, 60, lease("b", 2, 1_070, 1_170));
    explained(&story, GrantStamps::Decision);

    let mut overlap = Story::default();
    overlap
        .op(acquire("a", 100), 10, 20, lease("a", 1, 1_000, 1_100))
        .op(acquire("b", 100), 30, 40, lease("b", 2, 1_050, 1_150));
    let report = judged(&overlap.history(), GrantStamps::Decision);
    let Verdict::Violated(certificate) = verdict(&report) else {
        panic!("{report}")
    };
    assert_eq!(certificate.invariants, [Invariant::MutualExclusion]);
    assert_eq!(certificate.operations, [0, 1], "{report}");
}

/// A renewal with a shorter TTL keeps the longer expiry (`greatest`); the
/// release's answer is lost; a rival granted after the release was sent is
/// no double grant. With the release refused it is.
#[test]
fn a_shorter_renewal_keeps_the_expiry_and_a_lost_release_makes_room_for_a_rival() {
    let told = |end: End| {
        let mut story = Story::default();
        story
            .op(acquire("a", 1_000), 10, 20, lease("a", 1, 1_000, 2_000))
            .op(renew("a", 1, 300), 30, 40, lease("a", 1, 1_000, 2_000))
            .op(release("a", 1), 50, 55, end)
            .op(acquire("b", 300), 60, 70, lease("b", 2, 1_500, 1_800));
        story
    };
    explained(&told(End::Unknown), GrantStamps::Decision);
    explained(&told(End::Never), GrantStamps::Decision);
    explained(&told(unlocked()), GrantStamps::Decision);
    assert_eq!(
        blamed(&told(End::Refused), GrantStamps::Decision),
        [Invariant::MutualExclusion]
    );
}

/// A re-acquisition of unknown outcome may have extended the grant, so a
/// later restamped re-acquisition of the same token is the same grant;
/// with that one refused, the grant had expired and the token is reused.
#[test]
fn an_unknown_reacquisition_may_have_kept_the_grant_for_a_restamped_one() {
    let told = |end: End| {
        let mut story = Story::default();
        story
            .op(acquire("a", 100), 10, 20, lease("a", 1, 1_000, 1_100))
            .op(acquire("a", 100), 30, 40, end)
            .op(acquire("a", 100), 50, 60, lease("a", 1, 1_150, 1_250));
        story
    };
    explained(&told(End::Unknown), GrantStamps::Decision);
    assert_eq!(
        blamed(&told(End::Refused), GrantStamps::Decision),
        [Invariant::TokenOrder]
    );
}

#[test]
fn a_release_stamped_before_its_grant_is_a_clock_that_went_back() {
    let mut rounded = Story::default();
    rounded
        .op(acquire("a", 500), 10, 20, lease("a", 1, 5_000, 5_500))
        .op(release("a", 1), 30, 40, released(4_100));
    explained(&rounded, GrantStamps::Decision);

    let mut story = Story::default();
    story
        .op(acquire("a", 500), 10, 20, lease("a", 1, 5_000, 5_500))
        .op(release("a", 1), 30, 40, released(3_900));
    assert_eq!(
        blamed(&story, GrantStamps::Decision),
        [Invariant::WellFormed]
    );
}

/// Statement-start stamps: a rival stamped inside the holder's grant may
/// have queued until it ended, so the overlap is only possible — until the
/// holder renews after the rival's grant was answered.
/// (Stamps within a millisecond of each other are rounding, not order.)
#[test]
fn a_queued_rival_is_possible_and_a_renewal_after_it_proves_the_overlap() {
    let mut story = Story::default();
    story
        .op(acquire("a", 100), 10, 20, lease("a", 1, 1_000, 1_100))
        .op(acquire("b", 100), 30, 40, lease("b", 2, 1_050, 1_150));
    let report = judged(&story.history(), GrantStamps::StatementStart);
    assert!(matches!(verdict(&report), Verdict::Possible(_)), "{report}");
    // Decided late, the renewal may also have revived a free row that
    // names the rival: dropping I2 explains it too.
    story.op(renew("a", 1, 100), 50, 60, lease("a", 1, 1_000, 1_250));
    assert_eq!(
        blamed(&story, GrantStamps::StatementStart),
        [Invariant::MutualExclusion, Invariant::TokenOrder]
    );
}

#[test]
fn a_token_reused_by_a_rival_is_i2() {
    let mut story = Story::default();
    story
        .op(acquire("a", 100), 10, 20, lease("a", 3, 1_000, 1_100))
        .op(acquire("b", 100), 30, 40, lease("b", 3, 1_200, 1_300));
    assert_eq!(
        blamed(&story, GrantStamps::Decision),
        [Invariant::TokenOrder]
    );
}

#[test]
fn overlapping_windows_are_explained_in_the_one_order_that_works() {
    let mut story = Story::default();
    story
        .op(acquire("a", 100), 10, 60, lease("a", 2, 1_200, 1_300))
        .op(acquire("b", 100), 20, 50, lease("b", 1, 1_000, 1_100))
        .op(release("b", 1), 55, 58, released(1_050));
    explained(&story, GrantStamps::Decision);
}

/// A renewal lost, then a re-acquisition answered with the same token and a
/// later start: the renewal may have kept the grant and the re-acquisition
/// restamped it — unless the store never restamps (the reference keeps
/// `granted_at`), and then the token was granted twice.
#[test]
fn a_restamp_explains_a_same_token_grant_only_where_the_store_restamps() {
    let mut story = Story::default();
    story
        .op(
            acquire("a", 100_000),
            10,
            20,
            lease("a", 1, 1_000_000, 1_100_000),
        )
        .op(renew("a", 1, 100_000), 30, 40, End::Unknown)
        .op(
            acquire("a", 100_000),
            50,
            60,
            lease("a", 1, 1_150_000, 1_250_000),
        );
    explained(&story, GrantStamps::Decision);
    let keeps = Assumptions {
        restamps: false,
        ..Assumptions::default()
    };
    let report = judged_assuming(&story.history(), GrantStamps::Decision, keeps);
    let Verdict::Violated(certificate) = verdict(&report) else {
        panic!("{report}")
    };
    assert_eq!(certificate.invariants, [Invariant::TokenOrder], "{report}");
}

/// A holder's release is lost; a rival waiting behind it sends acquisitions
/// whose outcomes are lost too, after the release was sent; another owner's
/// grant is then answered with a start inside the holder's lease. Only the
/// release explains it. An acquisition of unknown outcome may also take
/// effect there (once the lease expired on the store's clock), but then the
/// clock has passed the grant's start, and every order of the others is
/// tried before it is undone: the release, tried first, is one state.
#[test]
fn a_lost_release_is_tried_before_lost_acquisitions_that_lead_nowhere() {
    const LOST: i64 = 8;
    let mut story = Story::default();
    story
        .op(acquire("a", 1_000), 10, 20, lease("a", 1, 1_000, 2_000))
        .op(release("a", 1), 100, 105, End::Unknown);
    for sent in 0..LOST {
        story.op(
            acquire("c", 1_000),
            110 + 2 * sent,
            111 + 2 * sent,
            End::Unknown,
        );
    }
    story
        .op(acquire("b", 1_000), 200, 210, lease("b", 2, 1_500, 2_500))
        .op(release("b", 2), 300, 310, released(1_600))
        .op(acquire("c", 1_000), 400, 410, lease("c", 3, 1_700, 2_700));
    let report = judged_assuming(
        &story.history(),
        GrantStamps::Decision,
        Assumptions {
            stamp_rounding_us: 0,
            restamps: false,
            ..Assumptions::default()
        },
    );
    assert!(
        matches!(verdict(&report), Verdict::Explained(Some(_))),
        "{report}"
    );
    let states = report.scopes[0].states;
    assert!(
        states <= 2 * report.scopes[0].operations.len() as u64,
        "{report}"
    );
}
