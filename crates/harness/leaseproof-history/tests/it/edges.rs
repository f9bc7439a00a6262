//! The checker's edges: boundaries, counts, the report's text, and rules that
//! only a rare story reaches. Each test names the mistake it catches — found
//! by mutation testing (`ci/mutants.sh`): a mutant of the checker that every
//! other test let live.

use leaseproof_history::{
    check, CheckConfig, CheckReport, EventKind, GrantStamps, GuardedRow, History, Invariant, Op,
    OpResult, Outcome, Violation,
};

use crate::builder::{assert_passes, only_violation, Builder, CommitEnd};

#[test]
fn grant_stamps_parse_by_name_and_refuse_others() {
    assert_eq!("decision".parse(), Ok(GrantStamps::Decision));
    assert_eq!("statement-start".parse(), Ok(GrantStamps::StatementStart));
    assert!("now".parse::<GrantStamps>().is_err());
    // Printed as parsed: `check` shows the rule it judged by in these words.
    for stamps in [GrantStamps::Decision, GrantStamps::StatementStart] {
        assert_eq!(stamps.to_string().parse(), Ok(stamps));
    }
}

#[test]
fn a_violation_reads_as_one_line_with_its_evidence() {
    let violation = Violation {
        invariant: Invariant::FencedWrites,
        scope: "s".to_string(),
        events: vec![3, 5],
        rows: vec![],
        message: "stale".to_string(),
    };
    assert_eq!(
        violation.to_string(),
        "I3 fenced writes [s]: stale (events [3, 5])"
    );
    let rows_only = Violation {
        events: vec![],
        rows: vec![7],
        ..violation
    };
    assert_eq!(
        rows_only.to_string(),
        "I3 fenced writes [s]: stale (rows seq [7])"
    );
}

#[test]
fn an_operation_completed_twice_is_ill_formed() {
    let mut builder = Builder::new();
    let (_, op_id) = builder.invoke(
        "a",
        Op::Acquire {
            scope: "s".to_string(),
            owner: "a".to_string(),
            ttl_us: 100,
        },
    );
    for _ in 0..2 {
        builder.complete(
            "a",
            op_id,
            Outcome::Unknown {
                reason: "lost".to_string(),
            },
        );
    }
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::WellFormed);
    assert_eq!(violation.scope, "s", "the violation names the op's scope");
    assert!(violation.message.contains("completed twice"), "{violation}");
}

#[test]
fn a_release_or_commit_answered_with_a_lease_is_ill_formed() {
    let lease = Outcome::Ok {
        result: OpResult::Lease {
            token: 1,
            owner: "a".to_string(),
            granted_at_us: 1,
            expires_at_us: 2,
        },
    };
    for op in [
        Op::Release {
            scope: "s".to_string(),
            owner: "a".to_string(),
            token: 1,
        },
        Op::Commit {
            scope: "s".to_string(),
            owner: "a".to_string(),
            token: 1,
            cycle_id: 1,
            items: 1,
        },
    ] {
        let mut builder = Builder::new();
        let (_, op_id) = builder.invoke("a", op);
        builder.complete("a", op_id, lease.clone());
        let report = check(&builder.build(), &CheckConfig::default());
        assert!(
            report
                .violations_of(Invariant::WellFormed)
                .iter()
                .any(|violation| violation.message.contains("does not fit")),
            "{report}"
        );
    }
}

#[test]
fn renewals_are_counted_one_by_one() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.renew_ok("a", "s", 1, 1_000, 1_150);
    builder.renew_ok("a", "s", 1, 1_000, 1_200);
    builder.renew_ok("a", "s", 1, 1_000, 1_250);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.renewals, 3);
}

#[test]
fn takeovers_count_only_new_owners_after_the_first_grant() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    // a again after its own expiry: a new grant, not a takeover.
    builder.acquire_ok("a", "s", 2, 1_200);
    builder.acquire_ok("b", "s", 3, 1_400);
    let report = assert_passes(&builder.build());
    assert_eq!(report.stats.grants, 3);
    assert_eq!(report.stats.takeovers, 1);
}

#[test]
fn an_unknown_release_cuts_a_grant_back_to_its_last_renewal_not_its_start() {
    // a was seen live at 1050 (its renewal's now()); its release is unknown.
    // b granted at 1040 overlaps what a's renewal proved.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.renew_ok("a", "s", 1, 1_000, 1_150);
    builder.release_unknown("a", "s", 1);
    builder.acquire_ok("b", "s", 2, 1_040);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        !report.violations_of(Invariant::MutualExclusion).is_empty(),
        "{report}"
    );
}

#[test]
fn a_release_sent_by_another_owner_does_not_end_a_grant() {
    // c's release of a's token cannot succeed (the owner must match): a's
    // grant runs to its expiry, and b inside it is a double grant.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.release_unknown("c", "s", 1);
    builder.acquire_ok("b", "s", 2, 1_050);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        !report.violations_of(Invariant::MutualExclusion).is_empty(),
        "{report}"
    );
}

#[test]
fn an_unknown_release_invoked_after_a_rival_was_reported_is_no_excuse_later() {
    // a's grant runs to 1100; its release, unknown, was invoked after b's
    // grant (server 1060) was reported but before x's (server 1020, ended
    // 1040, reported late). The release may explain x, not b: b overlaps a.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (_, x_op) = builder.invoke(
        "x",
        Op::Acquire {
            scope: "s".to_string(),
            owner: "x".to_string(),
            ttl_us: 20,
        },
    );
    builder.acquire_ok_until("b", "s", 3, 1_060, 1_160);
    builder.release_unknown("a", "s", 1);
    builder.complete(
        "x",
        x_op,
        Outcome::Ok {
            result: OpResult::Lease {
                token: 2,
                owner: "x".to_string(),
                granted_at_us: 1_020,
                expires_at_us: 1_040,
            },
        },
    );
    let report = check(&builder.build(), &CheckConfig::default());
    let overlaps = report.violations_of(Invariant::MutualExclusion);
    assert_eq!(overlaps.len(), 1, "{report}");
    assert!(
        overlaps[0]
            .message
            .contains("b token 3 was granted at 1060"),
        "{report}"
    );
}

/// a granted [1000, 1200) (acknowledged at true 20, renewed at true
/// `renew_invoked_us`), b granted at 1050: an overlap in server time whose
/// proof, for statement-start stamps, needs strict real-time order.
fn statement_start_story(b_invoked_us: i64, b_acked_us: i64, renew_invoked_us: i64) -> CheckReport {
    let lease = |owner: &str, token: u64, granted_at_us: i64, expires_at_us: i64| Outcome::Ok {
        result: OpResult::Lease {
            token,
            owner: owner.to_string(),
            granted_at_us,
            expires_at_us,
        },
    };
    let acquire = |owner: &str| Op::Acquire {
        scope: "s".to_string(),
        owner: owner.to_string(),
        ttl_us: 100,
    };
    let mut history = History::default();
    let mut push = |worker: &str, true_us: i64, kind: EventKind| {
        history.push(worker, 0, true_us, true_us, kind);
    };
    push(
        "a",
        10,
        EventKind::Invoke {
            op_id: 0,
            op: acquire("a"),
        },
    );
    push(
        "a",
        20,
        EventKind::Complete {
            op_id: 0,
            outcome: lease("a", 1, 1_000, 1_100),
        },
    );
    push(
        "b",
        b_invoked_us,
        EventKind::Invoke {
            op_id: 1,
            op: acquire("b"),
        },
    );
    push(
        "b",
        b_acked_us,
        EventKind::Complete {
            op_id: 1,
            outcome: lease("b", 2, 1_050, 1_150),
        },
    );
    let renew = Op::Renew {
        scope: "s".to_string(),
        owner: "a".to_string(),
        token: 1,
        ttl_us: 100,
    };
    push(
        "a",
        renew_invoked_us,
        EventKind::Invoke {
            op_id: 2,
            op: renew,
        },
    );
    push(
        "a",
        renew_invoked_us + 1,
        EventKind::Complete {
            op_id: 2,
            outcome: lease("a", 1, 1_000, 1_200),
        },
    );
    let config = CheckConfig {
        grant_stamps: GrantStamps::StatementStart,
        ..CheckConfig::default()
    };
    check(&history, &config)
}

#[test]
fn statement_start_stamps_need_a_strict_real_time_order() {
    // Proven: b invoked after a's acknowledgement, acknowledged before a's
    // renewal (which found a live) was invoked.
    let proven = statement_start_story(21, 30, 40);
    assert_eq!(
        proven.violations_of(Invariant::MutualExclusion).len(),
        1,
        "{proven}"
    );
    // The same instants are not an order: only possible.
    for report in [
        statement_start_story(20, 30, 40),
        statement_start_story(21, 40, 40),
    ] {
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.possible.len(), 1, "{report}");
    }
}

#[test]
fn a_cycle_with_rows_under_two_tokens_is_a_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 7, 2, CommitEnd::Ok, 1_010);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_010);
    builder.rows("a", "s", 2, 7, 1..2, 2, 1_010);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        report
            .violations_of(Invariant::FencedWrites)
            .iter()
            .any(|violation| violation.message.contains("several scopes or tokens")),
        "{report}"
    );
}

#[test]
fn rows_under_another_token_than_their_commit_reported_are_a_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("a", "s", 2, 1_200);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_210);
    builder.rows("a", "s", 2, 7, 0..1, 1, 1_210);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        report
            .violations_of(Invariant::FencedWrites)
            .iter()
            .any(|violation| violation.message.contains("committed under s token 1")),
        "{report}"
    );
}

#[test]
fn a_row_written_at_the_instant_of_its_grant_passes() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_200);
    builder.commit("b", "s", 2, 1, 1, CommitEnd::Ok, 1_200);
    builder.rows("b", "s", 2, 1, 0..1, 1, 1_200);
    assert_passes(&builder.build());
}

#[test]
fn tokens_going_back_after_a_higher_one_are_caught_in_seq_order() {
    // seq: token 1, token 2, token 1 — the third row goes back behind the
    // second, though the first row already had token 1.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 1_010);
    builder.rows("a", "s", 1, 1, 0..1, 1, 1_010);
    builder.acquire_ok("b", "s", 2, 1_200);
    builder.commit("b", "s", 2, 1, 1, CommitEnd::Ok, 1_210);
    builder.rows("b", "s", 2, 1, 0..1, 2, 1_210);
    builder.commit("a", "s", 1, 2, 1, CommitEnd::Ok, 1_050);
    builder.rows("a", "s", 1, 2, 0..1, 3, 1_050);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        report
            .violations_of(Invariant::FencedWrites)
            .iter()
            .any(
                |violation| violation.message.contains("token went backwards")
                    && violation.rows == vec![2, 3]
            ),
        "{report}"
    );
}

#[test]
fn commit_order_is_judged_against_the_highest_token_so_far() {
    // Commit times: token 1 at 10, token 3 at 20, token 2 at 30.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_200);
    builder.acquire_ok("c", "s", 3, 1_400);
    for (worker, token, seq, written_at_us) in
        [("a", 1, 1, 1_010), ("b", 2, 2, 1_210), ("c", 3, 3, 1_410)]
    {
        builder.commit(worker, "s", token, 1, 1, CommitEnd::Ok, written_at_us);
        builder.rows(worker, "s", token, 1, 0..1, seq, written_at_us);
    }
    builder.committed_at(1..2, 10);
    builder.committed_at(3..4, 20);
    builder.committed_at(2..3, 30);
    let report = check(&builder.build(), &CheckConfig::default());
    let out_of_order: Vec<_> = report
        .violations_of(Invariant::FencedWrites)
        .into_iter()
        .filter(|violation| violation.message.contains("committed out of token order"))
        .collect();
    assert_eq!(out_of_order.len(), 1, "{report}");
    assert!(
        out_of_order[0]
            .message
            .contains("(token 2) committed at 30"),
        "{report}"
    );
}

#[test]
fn beliefs_that_only_touch_do_not_overlap() {
    // a (unfenced) stops believing at true 100, b starts at true 100.
    let mut history = History::default();
    let belief = |scope: &str, start: bool| {
        if start {
            EventKind::BeliefStart {
                scope: scope.to_string(),
                token: 1,
            }
        } else {
            EventKind::BeliefEnd {
                scope: scope.to_string(),
                token: 1,
                reason: "released".to_string(),
            }
        }
    };
    history.push("a", 0, 10, 10, belief("s", true));
    history.push("a", 0, 100, 100, belief("s", false));
    history.push("b", 0, 100, 100, belief("s", true));
    history.push("b", 0, 200, 200, belief("s", false));
    let config = CheckConfig {
        unfenced_workers: ["a".to_string(), "b".to_string()].into(),
        ..CheckConfig::default()
    };
    let report = check(&history, &config);
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.belief_overlaps, 0);
}

/// `a` takes token 1 for [1000, 1100); the story goes on with `then`.
fn holder_then(then: impl FnOnce(&mut Builder)) -> CheckReport {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    then(&mut builder);
    check(&builder.build(), &CheckConfig::default())
}

#[test]
fn a_restarted_holders_takeover_delay_is_measured_from_its_expiry() {
    let report = holder_then(|builder| {
        builder.acquire_held("b", "s");
        builder.incarnation(1);
        builder.acquire_held("a", "s");
        builder.incarnation(0);
        builder.acquire_ok("b", "s", 2, 1_150);
    });
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.dead_holder_takeover_delays_us, vec![50]);
}

#[test]
fn a_takeover_at_the_instant_of_expiry_is_a_zero_delay() {
    let report = holder_then(|builder| {
        builder.incarnation(1);
        builder.acquire_held("a", "s");
        builder.incarnation(0);
        builder.acquire_ok("b", "s", 2, 1_100);
    });
    assert_eq!(report.stats.dead_holder_takeover_delays_us, vec![0]);
}

#[test]
fn a_holder_that_released_is_not_a_dead_holder() {
    let report = holder_then(|builder| {
        builder.release_ok("a", "s", 1, 1_020);
        builder.incarnation(1);
        builder.acquire_held("a", "s");
        builder.incarnation(0);
        builder.acquire_ok("b", "s", 2, 1_150);
    });
    assert!(report.is_ok(), "{report}");
    assert!(report.stats.dead_holder_takeover_delays_us.is_empty());
}

#[test]
fn a_holder_whose_acquire_may_have_extended_its_grant_is_not_judged() {
    // An unknown re-acquire of a's own lease may have moved its expiry.
    let report = holder_then(|builder| {
        builder.acquire_unknown("a", "s");
        builder.incarnation(1);
        builder.acquire_held("a", "s");
        builder.incarnation(0);
        builder.acquire_ok("b", "s", 2, 1_150);
    });
    assert!(
        report.stats.dead_holder_takeover_delays_us.is_empty(),
        "{report}"
    );
}

#[test]
fn the_recorder_keeps_the_guarded_rows_it_is_given() {
    let recorder = leaseproof_history::Recorder::new();
    let row = leaseproof_history::GuardedRow {
        seq: 1,
        scope: "s".to_string(),
        owner: "a".to_string(),
        token: 1,
        cycle_id: 1,
        item: 0,
        written_at_us: 5,
        committed_at_us: Some(6),
    };
    recorder.set_guarded_rows(vec![row.clone()]);
    assert_eq!(recorder.snapshot().guarded_rows, vec![row]);
}

#[test]
fn every_invariant_has_one_name_code_and_title() {
    let names: Vec<String> = Invariant::ALL
        .iter()
        .map(|invariant| format!("{} {} {invariant}", invariant.slug(), invariant.code()))
        .collect();
    assert_eq!(
        names,
        [
            "i1-mutual-exclusion I1 I1 mutual exclusion",
            "i2-token-order I2 I2 token order",
            "i3-fenced-writes I3 I3 fenced writes",
            "i4-nothing-lost I4 I4 nothing lost",
            "i5-bounded-takeover I5 I5 bounded takeover",
            "b-belief-overlap B B belief overlap",
            "h-well-formed H H well-formed history",
        ]
    );
}

#[test]
fn a_holder_that_carried_on_and_then_restarted_is_a_dead_holder() {
    // a works after its grant (a commit, acknowledged), then restarts: only
    // the restart says it died.
    let report = holder_then(|builder| {
        builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 1_010);
        builder.rows("a", "s", 1, 1, 0..1, 1, 1_010);
        builder.incarnation(1);
        builder.acquire_held("a", "s");
        builder.incarnation(0);
        builder.acquire_ok("b", "s", 2, 1_150);
    });
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.dead_holder_takeover_delays_us, vec![50]);
}

#[test]
fn a_holder_that_carried_on_and_never_restarted_is_not_a_dead_holder() {
    // The negative space: alive and heard from after its grant.
    let report = holder_then(|builder| {
        builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 1_010);
        builder.rows("a", "s", 1, 1, 0..1, 1, 1_010);
        builder.acquire_ok("b", "s", 2, 1_150);
        builder.acquire_held("a", "s");
    });
    assert!(report.is_ok(), "{report}");
    assert!(
        report.stats.dead_holder_takeover_delays_us.is_empty(),
        "{report}"
    );
}

#[test]
fn a_grant_first_seen_through_its_renewal_counts_it_and_was_live_at_the_renewal() {
    // a's acquisition reply was lost; its renewal is the first report of the
    // grant (now() = 1150 - ttl = 1050). Its release is unknown; b granted at
    // 1040 overlaps what the renewal proved.
    let mut builder = Builder::new();
    builder.acquire_unknown("a", "s");
    builder.renew_ok("a", "s", 1, 1_000, 1_150);
    let passing = builder.build();
    let report = check(&passing, &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.renewals, 1, "{report}");
    builder.release_unknown("a", "s", 1);
    builder.acquire_ok("b", "s", 2, 1_040);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        !report.violations_of(Invariant::MutualExclusion).is_empty(),
        "{report}"
    );
}

#[test]
fn the_earliest_invoked_unknown_release_counts_whatever_the_op_ids_say() {
    // Two unknown releases of a's grant, op ids in the opposite order of
    // their invocations (a file from elsewhere may number them so). The one
    // invoked at 50 may have freed the scope before b's grant was reported
    // at 60: b is excused.
    let lease = |owner: &str, token: u64, granted_at_us: i64| Outcome::Ok {
        result: OpResult::Lease {
            token,
            owner: owner.to_string(),
            granted_at_us,
            expires_at_us: granted_at_us + 100,
        },
    };
    let acquire = |owner: &str| Op::Acquire {
        scope: "s".to_string(),
        owner: owner.to_string(),
        ttl_us: 100,
    };
    let release = Op::Release {
        scope: "s".to_string(),
        owner: "a".to_string(),
        token: 1,
    };
    let unknown = Outcome::Unknown {
        reason: "timeout".to_string(),
    };
    let mut history = History::default();
    let mut push = |worker: &str, true_us: i64, kind: EventKind| {
        history.push(worker, 0, true_us, true_us, kind);
    };
    push(
        "a",
        10,
        EventKind::Invoke {
            op_id: 0,
            op: acquire("a"),
        },
    );
    push(
        "a",
        20,
        EventKind::Complete {
            op_id: 0,
            outcome: lease("a", 1, 1_000),
        },
    );
    push(
        "a",
        50,
        EventKind::Invoke {
            op_id: 5,
            op: release.clone(),
        },
    );
    push(
        "a",
        51,
        EventKind::Complete {
            op_id: 5,
            outcome: unknown.clone(),
        },
    );
    push(
        "b",
        55,
        EventKind::Invoke {
            op_id: 1,
            op: acquire("b"),
        },
    );
    push(
        "b",
        60,
        EventKind::Complete {
            op_id: 1,
            outcome: lease("b", 2, 1_050),
        },
    );
    push(
        "a",
        80,
        EventKind::Invoke {
            op_id: 3,
            op: release,
        },
    );
    push(
        "a",
        81,
        EventKind::Complete {
            op_id: 3,
            outcome: unknown,
        },
    );
    let report = check(&history, &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
}

// Histories of correct designs that the checker once convicted, found by
// writing histories outside the project: each must pass (or be at most
// *possible*), and the same story with the order proven must still fail.

fn statement_start() -> CheckConfig {
    CheckConfig {
        grant_stamps: leaseproof_history::GrantStamps::StatementStart,
        ..CheckConfig::default()
    }
}

#[test]
fn a_write_before_a_queued_rivals_statement_start_stamp_is_no_stale_write_under_statement_start() {
    // b's acquisition is sent at 30 and queues behind a's row lock; a
    // commits (its row stamped 95), releases at 100, and b's grant comes
    // back stamped 90 — its statement's start, not its decision.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 0);
    builder.at(30);
    let (_, b_acquire) = builder.invoke(
        "b",
        Op::Acquire {
            scope: "s".into(),
            owner: "b".into(),
            ttl_us: 100,
        },
    );
    builder.at(32);
    builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 95);
    builder
        .rows("a", "s", 1, 1, 0..1, 1, 95)
        .committed_at(1..2, 95);
    builder.at(40);
    builder.release_ok("a", "s", 1, 100);
    builder.at(60);
    builder.complete(
        "b",
        b_acquire,
        Outcome::Ok {
            result: OpResult::Lease {
                token: 2,
                owner: "b".into(),
                granted_at_us: 90,
                expires_at_us: 190,
            },
        },
    );
    let history = builder.build();
    let report = check(&history, &statement_start());
    assert!(report.is_ok(), "{report}");
    assert!(
        report
            .possible
            .iter()
            .any(|possible| possible.message.contains("stale write")),
        "reported as possible: {report}"
    );
    // Decision stamps say b decided at 90, before a's write at 95: proven.
    assert!(!check(&history, &CheckConfig::default())
        .violations_of(Invariant::FencedWrites)
        .is_empty());
}

#[test]
fn a_smaller_token_stamped_later_is_no_backwards_token_under_statement_start() {
    // c asked first (25) and queued longest: its grant, decided last, got
    // token 3, stamped with its statement's start (80) — before b's stamp
    // (90) of token 2.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 0);
    builder.at(25);
    let (_, c_acquire) = builder.invoke(
        "c",
        Op::Acquire {
            scope: "s".into(),
            owner: "c".into(),
            ttl_us: 100,
        },
    );
    builder.at(30);
    let (_, b_acquire) = builder.invoke(
        "b",
        Op::Acquire {
            scope: "s".into(),
            owner: "b".into(),
            ttl_us: 100,
        },
    );
    builder.at(40);
    builder.release_ok("a", "s", 1, 100);
    let lease = |token, owner: &str, granted_at_us| Outcome::Ok {
        result: OpResult::Lease {
            token,
            owner: owner.into(),
            granted_at_us,
            expires_at_us: granted_at_us + 100,
        },
    };
    builder.at(60);
    builder.complete("b", b_acquire, lease(2, "b", 90));
    builder.at(70);
    builder.release_ok("b", "s", 2, 110);
    builder.at(90);
    builder.complete("c", c_acquire, lease(3, "c", 80));
    let report = check(&builder.build(), &statement_start());
    assert!(
        report.violations_of(Invariant::TokenOrder).is_empty(),
        "{report}"
    );
    assert!(
        report
            .possible
            .iter()
            .any(|possible| possible.message.contains("token went backwards")),
        "{report}"
    );
}

#[test]
fn a_write_stamped_in_the_microsecond_of_the_release_and_the_takeover_is_not_stale() {
    // Real time proves the commit finished (38) before the release was
    // sent (40); the three stamps share one microsecond, which orders
    // nothing.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 0);
    builder.at(30);
    builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 60);
    builder
        .rows("a", "s", 1, 1, 0..1, 1, 60)
        .committed_at(1..2, 60);
    builder.at(40);
    builder.release_ok("a", "s", 1, 60);
    builder.at(60);
    builder.acquire_ok("b", "s", 2, 60);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
    // One microsecond later is proof.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 0);
    builder.at(30);
    builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 61);
    builder
        .rows("a", "s", 1, 1, 0..1, 1, 61)
        .committed_at(1..2, 61);
    builder.at(40);
    builder.release_ok("a", "s", 1, 60);
    builder.at(60);
    builder.acquire_ok("b", "s", 2, 60);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(
        !report.violations_of(Invariant::FencedWrites).is_empty(),
        "{report}"
    );
}

#[test]
fn op_ids_need_only_be_unique_not_increasing() {
    // A renewal with a smaller op id than its acquisition: grants are built
    // in the order the outcomes arrived.
    let mut builder = Builder::new();
    let acquire = builder.invoke_as(
        9,
        "a",
        Op::Acquire {
            scope: "s".into(),
            owner: "a".into(),
            ttl_us: 100,
        },
    );
    builder.complete(
        "a",
        acquire,
        Outcome::Ok {
            result: OpResult::Lease {
                token: 1,
                owner: "a".into(),
                granted_at_us: 0,
                expires_at_us: 100,
            },
        },
    );
    let renew = builder.invoke_as(
        3,
        "a",
        Op::Renew {
            scope: "s".into(),
            owner: "a".into(),
            token: 1,
            ttl_us: 100,
        },
    );
    builder.complete(
        "a",
        renew,
        Outcome::Ok {
            result: OpResult::Lease {
                token: 1,
                owner: "a".into(),
                granted_at_us: 50,
                expires_at_us: 150,
            },
        },
    );
    builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 10);
    builder.rows("a", "s", 1, 1, 0..1, 1, 10);
    let report = check(&builder.build(), &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.grants, 1);
}

/// a granted [1000, 1200) (acknowledged at true 20); b granted token 2
/// stamped 1050 (its statement's start), acknowledged at true 30; a's
/// commit, invoked at true `commit_invoked_us`, writes at 1100: after b's
/// stamp, inside a's own grant.
fn statement_start_stale_write(commit_invoked_us: i64) -> CheckReport {
    let lease = |owner: &str, token: u64, granted_at_us: i64, expires_at_us: i64| Outcome::Ok {
        result: OpResult::Lease {
            token,
            owner: owner.to_string(),
            granted_at_us,
            expires_at_us,
        },
    };
    let acquire = |owner: &str| Op::Acquire {
        scope: "s".to_string(),
        owner: owner.to_string(),
        ttl_us: 100,
    };
    let mut history = History::default();
    let mut push = |worker: &str, true_us: i64, kind: EventKind| {
        history.push(worker, 0, true_us, true_us, kind);
    };
    let invoke = |op_id, op| EventKind::Invoke { op_id, op };
    let complete = |op_id, outcome| EventKind::Complete { op_id, outcome };
    push("a", 10, invoke(0, acquire("a")));
    push("a", 20, complete(0, lease("a", 1, 1_000, 1_200)));
    push("b", 21, invoke(1, acquire("b")));
    push("b", 30, complete(1, lease("b", 2, 1_050, 1_150)));
    let commit = Op::Commit {
        scope: "s".to_string(),
        owner: "a".to_string(),
        token: 1,
        cycle_id: 1,
        items: 1,
    };
    push("a", commit_invoked_us, invoke(2, commit));
    let committed = Outcome::Ok {
        result: OpResult::Committed {
            committed_at_us: None,
        },
    };
    push("a", commit_invoked_us + 5, complete(2, committed));
    history.guarded_rows.push(GuardedRow {
        seq: 1,
        scope: "s".to_string(),
        owner: "a".to_string(),
        token: 1,
        cycle_id: 1,
        item: 0,
        written_at_us: 1_100,
        committed_at_us: None,
    });
    check(&history, &statement_start())
}

#[test]
fn a_stale_write_under_statement_start_stamps_needs_the_rival_acknowledged_strictly_before() {
    // Proven: b's grant came back (30) before a's commit was sent (40).
    let proven = statement_start_stale_write(40);
    assert_eq!(
        proven.violations_of(Invariant::FencedWrites).len(),
        1,
        "{proven}"
    );
    // Sent the same microsecond b's grant came back: no order, only possible.
    let same_instant = statement_start_stale_write(30);
    assert!(
        same_instant
            .violations_of(Invariant::FencedWrites)
            .is_empty(),
        "{same_instant}"
    );
    assert!(
        same_instant
            .possible
            .iter()
            .any(|possible| possible.message.contains("stale write")),
        "{same_instant}"
    );
}
