//! I3 fenced writes: guarded rows carry a granted (owner, token), lie inside
//! their grant's window in server time, keep token order and never interleave.

use leaseproof_history::{check, CheckConfig, Invariant, Op, OpResult, Outcome};

use crate::builder::{assert_passes, only_violation, Builder, CommitEnd};

#[test]
fn write_committed_under_a_stale_token_after_the_next_grant_is_a_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (_, b_granted) = builder.acquire_ok("b", "s", 2, 1_200);
    let (commit_invoked, commit_completed) =
        builder.commit("a", "s", 1, 7, 2, CommitEnd::Ok, 1_250);
    builder.rows("a", "s", 1, 7, 0..2, 1, 1_250);
    // Two faces of one stale write: after the next grant, and after its own
    // grant ended (a takeover needs the old grant to have ended first).
    let report = check(&builder.build(), &CheckConfig::default());
    assert_eq!(report.violations.len(), 2, "{report}");
    assert!(
        report
            .violations
            .iter()
            .all(|v| v.invariant == Invariant::FencedWrites),
        "{report}"
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.message.contains("after the grant ended at 1100")),
        "{report}"
    );
    let violation = report
        .violations
        .iter()
        .find(|violation| violation.message.contains("stale write"))
        .expect("the stale write names the next grant")
        .clone();
    assert_eq!(
        violation.events,
        vec![b_granted, commit_invoked, commit_completed]
    );
    assert_eq!(violation.rows, vec![1, 2]);
    assert!(
        violation.message.contains(
            "stale write: a wrote cycle 7 under token 1 at 1250, after b got token 2 at 1200"
        ),
        "{violation}"
    );
}

#[test]
fn write_after_expiry_before_any_takeover_is_a_violation() {
    // The fence checks owner, token AND expiry under the row lock, and a
    // guarded row's written_at is its transaction's start, before the fence:
    // a row written after its grant expired was not fenced, even though nobody
    // else had been granted yet.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_150);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_150);
    builder.acquire_ok("b", "s", 2, 1_200);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(
        violation.message.contains("after the grant ended at 1100"),
        "{violation}"
    );
}

#[test]
fn write_after_expiry_is_allowed_when_an_unknown_renewal_may_have_extended_it() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.renew_unknown("a", "s", 1);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_150);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_150);
    assert_passes(&builder.build());
}

#[test]
fn write_before_its_grant_is_a_violation() {
    // A fence run more than the stamps' rounding (1 ms) before the grant's
    // own acquisition stamped it: it cannot have found the token current.
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 10_000);
    let (commit_invoked, commit_completed) =
        builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 8_990);
    builder.rows("a", "s", 1, 7, 0..1, 1, 8_990);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(
        violation.message.contains(
            "a's cycle 7 (token 1) was fenced at 8990 before token 1 was granted at 10000"
        ),
        "{violation}"
    );
    assert_eq!(
        violation.events,
        vec![a_granted, commit_invoked, commit_completed]
    );
    assert_eq!(violation.rows, vec![1]);

    // A row committed that early, whatever its fence said.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 10_000);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 10_010);
    builder.rows("a", "s", 1, 7, 0..1, 1, 8_990);
    builder.committed_at(1..2, 8_990);
    let violation = only_violation(&builder.build());
    assert!(
        violation
            .message
            .contains("committed at 8990 before token 1"),
        "{violation}"
    );
}

/// A row may carry the start of a transaction opened before its grant, and
/// stamps of one clock may be rounded to a millisecond: neither proves a
/// write came before its grant.
#[test]
fn a_row_stamped_before_its_grant_or_within_a_millisecond_proves_nothing() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 10_000);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 10_010);
    builder.rows("a", "s", 1, 7, 0..1, 1, 8_000);
    assert_passes(&builder.build());

    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 10_000);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 9_000);
    builder.rows("a", "s", 1, 7, 0..1, 1, 9_000);
    builder.committed_at(1..2, 9_000);
    assert_passes(&builder.build());
}

#[test]
fn cycles_of_two_owners_interleaved_are_a_violation() {
    // One token for two owners (an I2 finding of its own) and their rows
    // interleaved: two owners wrote at once, whatever the tokens say.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 1, 2, CommitEnd::Ok, 1_010);
    builder.commit("b", "s", 1, 2, 1, CommitEnd::Ok, 1_010);
    builder.rows("a", "s", 1, 1, 0..1, 1, 1_010);
    builder.rows("b", "s", 1, 2, 0..1, 2, 1_010);
    builder.rows("a", "s", 1, 1, 1..2, 3, 1_010);
    let report = check(&builder.build(), &CheckConfig::default());
    let interleaved: Vec<_> = report
        .violations
        .iter()
        .filter(|violation| violation.message.contains("cycles interleave"))
        .collect();
    assert_eq!(interleaved.len(), 1, "{report}");
    assert_eq!(interleaved[0].invariant, Invariant::FencedWrites);
    assert_eq!(interleaved[0].rows, vec![2, 3]);
    assert!(
        interleaved[0].message.contains(
            "cycles interleave: cycle 1 of a resumes at seq 3 after cycle 2 of b at seq 2"
        ),
        "{report}"
    );
}

#[test]
fn one_owners_cycles_may_interleave_under_one_grant() {
    // Two writers of one holder under a shared fence: their rows interleave,
    // each under the current grant. Not a rival's write.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 1, 2, CommitEnd::Ok, 1_010);
    builder.commit("a", "s", 1, 2, 1, CommitEnd::Ok, 1_010);
    builder.rows("a", "s", 1, 1, 0..1, 1, 1_010);
    builder.rows("a", "s", 1, 2, 0..1, 2, 1_010);
    builder.rows("a", "s", 1, 1, 1..2, 3, 1_010);
    assert_passes(&builder.build());
}

#[test]
fn cycles_of_different_scopes_may_interleave() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "t", 1, 1_000);
    builder.commit("a", "s", 1, 1, 2, CommitEnd::Ok, 1_010);
    builder.commit("b", "t", 1, 1, 1, CommitEnd::Ok, 1_010);
    builder.rows("a", "s", 1, 1, 0..1, 1, 1_010);
    builder.rows("b", "t", 1, 1, 0..1, 2, 1_010);
    builder.rows("a", "s", 1, 1, 1..2, 3, 1_010);
    assert_passes(&builder.build());
}

#[test]
fn token_going_backwards_in_commit_order_is_a_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 1_050);
    builder.acquire_ok("b", "s", 2, 1_200);
    builder.commit("b", "s", 2, 1, 1, CommitEnd::Ok, 1_250);
    builder.rows("b", "s", 2, 1, 0..1, 1, 1_250);
    builder.rows("a", "s", 1, 1, 0..1, 2, 1_050);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert_eq!(violation.rows, vec![1, 2]);
    assert!(
        violation
            .message
            .contains("token went backwards in commit order"),
        "{violation}"
    );
}

#[test]
fn row_with_a_never_granted_token_is_a_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (commit_invoked, commit_completed) =
        builder.commit("a", "s", 5, 1, 1, CommitEnd::Ok, 1_050);
    builder.rows("a", "s", 5, 1, 0..1, 1, 1_050);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert_eq!(violation.events, vec![commit_invoked, commit_completed]);
    assert_eq!(violation.rows, vec![1]);
    assert!(
        violation
            .message
            .contains("token 5, which was never granted"),
        "{violation}"
    );
}

#[test]
fn row_with_a_token_from_a_lost_acquire_reply_is_allowed() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_unknown("b", "s"); // granted token 2 at 1100, reply lost
    builder.commit("b", "s", 2, 1, 1, CommitEnd::Unknown, 1_110);
    builder.rows("b", "s", 2, 1, 0..1, 1, 1_110);
    assert_passes(&builder.build());
}

#[test]
fn row_under_another_owners_token_is_a_violation() {
    let mut builder = Builder::new();
    let (_, a_granted) = builder.acquire_ok("a", "s", 1, 1_000);
    let (commit_invoked, commit_completed) =
        builder.commit("b", "s", 1, 1, 1, CommitEnd::Ok, 1_050);
    builder.rows("b", "s", 1, 1, 0..1, 1, 1_050);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert_eq!(
        violation.events,
        vec![a_granted, commit_invoked, commit_completed]
    );
    assert!(
        violation
            .message
            .contains("b wrote cycle 1 under token 1, which was granted to a"),
        "{violation}"
    );
}

#[test]
fn row_of_no_recorded_commit_is_a_violation() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.rows("a", "s", 1, 9, 0..1, 1, 1_050);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert_eq!(violation.rows, vec![1]);
    assert!(
        violation.message.contains("no recorded commit"),
        "{violation}"
    );
}

#[test]
fn write_after_expiry_is_not_excused_by_an_unknown_renewal_sent_after_the_commit_completed() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (commit_invoked, commit_completed) =
        builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_150);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_150);
    builder.renew_unknown("a", "s", 1);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(violation.events.contains(&commit_invoked));
    assert!(violation.events.contains(&commit_completed));
    assert_eq!(violation.rows, vec![1]);
    assert!(
        violation.message.contains("after the grant ended at 1100"),
        "{violation}"
    );
}

#[test]
fn write_after_expiry_is_not_excused_by_an_unknown_acquire_sent_after_the_commit_completed() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_150);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_150);
    builder.acquire_unknown("a", "s");
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(
        violation.message.contains("after the grant ended at 1100"),
        "{violation}"
    );
}

#[test]
fn write_after_expiry_is_allowed_when_an_unknown_re_acquire_was_sent_before_the_commit() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_unknown("a", "s");
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_150);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_150);
    assert_passes(&builder.build());
}

#[test]
fn unknown_commit_may_land_after_a_later_unknown_renewal() {
    // A commit whose outcome is unknown was never acknowledged: it may have
    // reached the server after the renewal that followed it.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Unknown, 1_150);
    builder.renew_unknown("a", "s", 1);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_150);
    assert_passes(&builder.build());
}

#[test]
fn never_granted_token_is_not_excused_by_an_unknown_acquire_sent_after_the_commit_completed() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (commit_invoked, commit_completed) =
        builder.commit("a", "s", 2, 1, 1, CommitEnd::Ok, 1_050);
    builder.rows("a", "s", 2, 1, 0..1, 1, 1_050);
    builder.acquire_unknown("a", "s");
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert_eq!(violation.events, vec![commit_invoked, commit_completed]);
    assert!(
        violation
            .message
            .contains("token 2, which was never granted"),
        "{violation}"
    );
}

#[test]
fn a_token_after_an_unknown_acquire_of_its_owner_may_have_been_granted() {
    // Nothing bounds the token an unknown acquisition got: a store's counter
    // need not go up by one (nor start at one).
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_unknown("a", "s");
    builder.commit("a", "s", 42, 1, 1, CommitEnd::Ok, 1_150);
    builder.rows("a", "s", 42, 1, 0..1, 1, 1_150);
    assert_passes(&builder.build());

    // Another owner's unknown acquire grants this owner nothing.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_unknown("b", "s");
    builder.commit("a", "s", 5, 1, 1, CommitEnd::Ok, 1_150);
    builder.rows("a", "s", 5, 1, 0..1, 1, 1_150);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(
        violation
            .message
            .contains("token 5, which was never granted"),
        "{violation}"
    );
}

#[test]
fn token_from_a_lost_acquire_reply_is_allowed_in_an_acknowledged_commit() {
    // Two lost replies (one of them a rival's) could reach token 3.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_unknown("c", "s");
    builder.acquire_unknown("b", "s");
    builder.commit("b", "s", 3, 1, 1, CommitEnd::Ok, 1_250);
    builder.rows("b", "s", 3, 1, 0..1, 1, 1_250);
    assert_passes(&builder.build());
}

/// `a` writes cycle 7 inside its grant (seq 1..3, written at 1050); `b`
/// takes over at 1100 and commits cycle 1 (seq 3) at 1130. Only the commit
/// times can tell whether `a`'s cycle committed before the takeover.
fn written_before_takeover(a_committed_at_us: Option<i64>) -> leaseproof_history::History {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 7, 2, CommitEnd::Ok, 1_050);
    builder.rows("a", "s", 1, 7, 0..2, 1, 1_050);
    builder.acquire_ok("b", "s", 2, 1_100);
    builder.commit("b", "s", 2, 1, 1, CommitEnd::Ok, 1_120);
    builder.rows("b", "s", 2, 1, 0..1, 3, 1_120);
    builder.committed_at(3..4, 1_130);
    if let Some(committed_at_us) = a_committed_at_us {
        builder.committed_at(1..3, committed_at_us);
    }
    builder.build()
}

#[test]
fn a_cycle_committed_after_a_newer_tokens_cycle_is_a_violation() {
    // Written under its grant, committed after the rival's cycle: the fence
    // did not hold the row until commit. Its seq and written_at look fine.
    let violation = only_violation(&written_before_takeover(Some(1_140)));
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert_eq!(violation.rows, vec![1, 3]);
    assert_eq!(
        violation.message,
        "committed out of token order: cycle 7 of a (token 1) committed at 1140, \
         after cycle 1 of b (token 2) committed at 1130 (server us)"
    );
}

#[test]
fn commit_times_in_token_order_pass() {
    assert_passes(&written_before_takeover(Some(1_090)));
}

#[test]
fn equal_commit_times_prove_no_order() {
    assert_passes(&written_before_takeover(Some(1_130)));
}

#[test]
fn without_commit_times_the_commit_order_is_not_judged() {
    // The hole commit times close: the same story without them passes.
    assert_passes(&written_before_takeover(None));
}

#[test]
fn rows_without_commit_times_say_the_commit_order_was_not_judged() {
    let report = check(&written_before_takeover(None), &CheckConfig::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.not_judged.len(), 1, "{report}");
    assert!(
        report.not_judged[0].starts_with("I3 in commit order"),
        "{report}"
    );
    assert!(report
        .to_string()
        .contains("not judged: I3 in commit order"));
    let judged = check(
        &written_before_takeover(Some(1_090)),
        &CheckConfig::default(),
    );
    assert!(judged.not_judged.is_empty(), "{judged}");
}

#[test]
fn a_backwards_token_is_shown_against_the_first_row_that_reached_the_higher_one() {
    // b's two rows under token 2 (seq 1 and 2), then a's under token 1: the
    // evidence is the row where the tokens first reached 2, not the last.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 1, 1, CommitEnd::Ok, 1_050);
    builder.acquire_ok("b", "s", 2, 1_200);
    builder.commit("b", "s", 2, 1, 2, CommitEnd::Ok, 1_250);
    builder.rows("b", "s", 2, 1, 0..2, 1, 1_250);
    builder.rows("a", "s", 1, 1, 0..1, 3, 1_050);
    let violation = only_violation(&builder.build());
    assert_eq!(violation.rows, vec![1, 3], "{violation}");
}

#[test]
fn a_cycle_committed_out_of_order_is_shown_against_the_first_commit_of_the_higher_token() {
    // b commits two cycles under token 2 (at 1130 and 1135), a's cycle under
    // token 1 commits after both: the evidence names b's first.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_050);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_050);
    builder.acquire_ok("b", "s", 2, 1_100);
    builder.commit("b", "s", 2, 1, 1, CommitEnd::Ok, 1_120);
    builder.rows("b", "s", 2, 1, 0..1, 2, 1_120);
    builder.commit("b", "s", 2, 2, 1, CommitEnd::Ok, 1_125);
    builder.rows("b", "s", 2, 2, 0..1, 3, 1_125);
    builder.committed_at(2..3, 1_130);
    builder.committed_at(3..4, 1_135);
    builder.committed_at(1..2, 1_140);
    let violation = only_violation(&builder.build());
    assert_eq!(
        violation.message,
        "committed out of token order: cycle 7 of a (token 1) committed at 1140, \
         after cycle 1 of b (token 2) committed at 1130 (server us)"
    );
}

#[test]
fn a_row_stamped_after_the_rivals_grant_under_a_fence_stamped_before_it_is_no_stale_write() {
    // The reference lease with rows stamped at their insert: a's fence at
    // 900 holds the lease row; b's takeover, stamped 1000 (its statement's
    // `now()`, the time it decides with), waits on that lock; a's row is
    // stamped 1050, inside its still-open transaction.
    let fenced_at = |fence_us: i64| {
        let mut builder = Builder::new();
        builder.acquire_ok("a", "s", 1, 900);
        let commit = Op::Commit {
            scope: "s".to_string(),
            owner: "a".to_string(),
            token: 1,
            cycle_id: 1,
            items: 1,
        };
        let (_, a_commit) = builder.invoke("a", commit);
        builder.acquire_ok("b", "s", 2, 1_000);
        let committed = Outcome::Ok {
            result: OpResult::Committed {
                committed_at_us: Some(fence_us),
            },
        };
        builder.complete("a", a_commit, committed);
        builder.rows("a", "s", 1, 1, 0..1, 1, 1_050);
        builder.build()
    };
    assert_passes(&fenced_at(950));
    // A fence stamped after the rival's grant could not have found a's
    // grant current: the write is stale.
    let report = check(&fenced_at(1_010), &CheckConfig::default());
    let stale = report.violations_of(Invariant::FencedWrites);
    assert_eq!(stale.len(), report.violations.len(), "{report}");
    assert!(
        stale
            .iter()
            .any(|violation| violation.message.contains("stale write")),
        "{report}"
    );
}

fn commit_op(worker: &str, token: u64, cycle_id: u64) -> Op {
    Op::Commit {
        scope: "s".to_string(),
        owner: worker.to_string(),
        token,
        cycle_id,
        items: 1,
    }
}

/// The report under statement-start stamps: a release's own stamp proves
/// nothing there, only real time does.
fn judged_statement_start(builder: &Builder) -> leaseproof_history::CheckReport {
    let config = CheckConfig {
        grant_stamps: leaseproof_history::GrantStamps::StatementStart,
        ..CheckConfig::default()
    };
    check(&builder.build(), &config)
}

fn committed(committed_at_us: i64) -> Outcome {
    Outcome::Ok {
        result: OpResult::Committed {
            committed_at_us: Some(committed_at_us),
        },
    }
}

/// Real time ends a grant whatever its stamps mean: a release acknowledged
/// before the commit was even sent was decided before the commit's fence, so
/// the commit's rows are stale — under statement-start stamps too, where the
/// release's own stamp (it may have queued behind a commit) proves nothing.
#[test]
fn a_commit_sent_after_its_own_release_was_acknowledged_is_stale_whatever_the_stamps_mean() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (_, released) = builder.release_ok("a", "s", 1, 1_030);
    let (commit_invoked, commit_completed) =
        builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_040);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_040);
    let report = judged_statement_start(&builder);
    assert_eq!(report.violations.len(), 1, "{report}");
    let violation = &report.violations[0];
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(
        violation
            .message
            .contains("a wrote cycle 7 under token 1 after releasing it"),
        "{violation}"
    );
    assert_eq!(
        violation.events,
        [released, commit_invoked, commit_completed]
    );
    assert_eq!(violation.rows, [1]);
}

#[test]
fn a_commit_sent_before_its_release_was_acknowledged_may_have_come_first() {
    // The release may have queued behind the commit's fence.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (_, commit) = builder.invoke("a", commit_op("a", 1, 7));
    let (_, release) = builder.invoke(
        "a",
        Op::Release {
            scope: "s".to_string(),
            owner: "a".to_string(),
            token: 1,
        },
    );
    builder.complete(
        "a",
        release,
        Outcome::Ok {
            result: OpResult::Released {
                released_at_us: 1_030,
            },
        },
    );
    builder.complete("a", commit, committed(1_040));
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_040);
    let report = judged_statement_start(&builder);
    assert!(report.is_ok(), "{report}");
}

#[test]
fn a_renewal_answered_after_the_release_was_sent_may_have_made_the_grant_live_again() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    let (_, renewal) = builder.invoke(
        "a",
        Op::Renew {
            scope: "s".to_string(),
            owner: "a".to_string(),
            token: 1,
            ttl_us: 100,
        },
    );
    builder.release_ok("a", "s", 1, 1_030);
    builder.complete(
        "a",
        renewal,
        Outcome::Ok {
            result: OpResult::Lease {
                token: 1,
                owner: "a".to_string(),
                granted_at_us: 1_000,
                expires_at_us: 1_135,
            },
        },
    );
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_040);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_040);
    let report = judged_statement_start(&builder);
    assert!(report.is_ok(), "{report}");
}

/// A worker declared unfenced took no fence, whatever time its commit
/// reported as one: its rows' own stamps are the evidence.
#[test]
fn an_unfenced_workers_rows_are_judged_by_their_stamps_even_when_its_commit_reports_a_fence_time() {
    let unfenced = CheckConfig {
        unfenced_workers: ["a".to_string()].into(),
        ..CheckConfig::default()
    };
    // After its own grant's expiry (1100), no rival.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_090);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_120);
    let report = check(&builder.build(), &unfenced);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(
        report.violations[0]
            .message
            .contains("at 1120, unfenced, after the grant ended at 1100"),
        "{report}"
    );
    // Declared fenced, the fence at 1090 kept the grant current: clean.
    assert_passes(&builder.build());

    // After a rival's grant (1150), the fence time before it.
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_150);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_090);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_160);
    let report = check(&builder.build(), &unfenced);
    assert!(
        report.violations.iter().any(|violation| violation
            .message
            .starts_with("stale write: a wrote cycle 7")),
        "{report}"
    );
}

/// The rival's grant was answered before the commit was sent: every row of
/// the commit is stale, even one stamped no later than that grant (a row may
/// carry its transaction's start).
#[test]
fn rows_of_a_commit_sent_after_a_rivals_grant_was_answered_are_stale_whatever_their_stamps() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_050);
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 1_050);
    builder.rows("a", "s", 1, 7, 0..1, 1, 1_050);
    let report = judged_statement_start(&builder);
    let stale: Vec<_> = report
        .violations
        .iter()
        .filter(|violation| violation.message.starts_with("stale write"))
        .collect();
    assert_eq!(stale.len(), 1, "{report}");
    assert!(
        stale[0]
            .message
            .ends_with("its commit was sent after that grant was answered"),
        "{report}"
    );
    assert_eq!(stale[0].rows, [1]);
}

/// A renewal decided after its grant expired revives the grant from its own
/// decision on: a fence in the gap before it found the grant expired, and a
/// correct fence refuses there. Inside the revival it is current.
#[test]
fn a_fence_in_the_gap_before_a_reviving_renewal_is_outside_the_grant() {
    let story = |fenced_at_us: i64| {
        let mut builder = Builder::new();
        builder.acquire_ok("a", "s", 1, 1_000);
        builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, fenced_at_us);
        builder.rows("a", "s", 1, 7, 0..1, 1, fenced_at_us);
        // Expired at 1100; renewed at 1200 (its expiry minus its TTL) to 1300.
        builder.renew_ok("a", "s", 1, 1_000, 1_300);
        builder
    };
    let violation = only_violation(&story(1_150).build());
    assert_eq!(violation.invariant, Invariant::FencedWrites);
    assert!(
        violation.message.contains(
            "at 1150, fenced at 1150, after the grant ended at 1100 (a renewal revived it from 1200 to 1300)"
        ),
        "{violation}"
    );
    assert_passes(&story(1_250).build());
    assert_passes(&story(1_200).build());
    // The boundaries: at the end and at the revival's end, still current.
    assert_passes(&story(1_100).build());
    assert_passes(&story(1_300).build());
    let violation = only_violation(&story(1_301).build());
    assert!(violation.message.contains("fenced at 1301"), "{violation}");
}

/// The boundaries of "answered before it was sent": the same microsecond
/// orders nothing (true times are stamped before sending and after
/// receiving), for the release against the commit and for a renewal
/// against the release.
#[test]
fn a_release_answered_the_instant_the_commit_was_sent_proves_no_order() {
    use leaseproof_history::{EventKind, GuardedRow, History};
    let story = |renewal_answered_us: i64, commit_invoked_us: i64| {
        let mut history = History::default();
        let mut push = |at_us: i64, kind: EventKind| {
            history.push("a", 0, at_us, at_us, kind);
        };
        let lease = |expires_at_us: i64| Outcome::Ok {
            result: OpResult::Lease {
                token: 1,
                owner: "a".to_string(),
                granted_at_us: 1_000,
                expires_at_us,
            },
        };
        let scope = "s".to_string();
        let owner = "a".to_string();
        let op = Op::Acquire {
            scope: scope.clone(),
            owner: owner.clone(),
            ttl_us: 100,
        };
        push(1, EventKind::Invoke { op_id: 0, op });
        push(
            2,
            EventKind::Complete {
                op_id: 0,
                outcome: lease(1_100),
            },
        );
        let op = Op::Renew {
            scope: scope.clone(),
            owner: owner.clone(),
            token: 1,
            ttl_us: 100,
        };
        push(3, EventKind::Invoke { op_id: 1, op });
        push(
            renewal_answered_us,
            EventKind::Complete {
                op_id: 1,
                outcome: lease(1_110),
            },
        );
        let op = Op::Release {
            scope: scope.clone(),
            owner: owner.clone(),
            token: 1,
        };
        push(5, EventKind::Invoke { op_id: 2, op });
        let released = Outcome::Ok {
            result: OpResult::Released {
                released_at_us: 1_030,
            },
        };
        push(
            6,
            EventKind::Complete {
                op_id: 2,
                outcome: released,
            },
        );
        push(
            commit_invoked_us,
            EventKind::Invoke {
                op_id: 3,
                op: commit_op("a", 1, 7),
            },
        );
        push(
            commit_invoked_us + 1,
            EventKind::Complete {
                op_id: 3,
                outcome: committed(1_040),
            },
        );
        history.guarded_rows.push(GuardedRow {
            seq: 1,
            scope,
            owner,
            token: 1,
            cycle_id: 7,
            item: 0,
            written_at_us: 1_040,
            committed_at_us: None,
        });
        let config = CheckConfig {
            grant_stamps: leaseproof_history::GrantStamps::StatementStart,
            ..CheckConfig::default()
        };
        check(&history, &config)
    };
    let report = story(4, 7);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(
        report.violations[0].message.contains("after releasing it"),
        "{report}"
    );
    let report = story(4, 6);
    assert!(
        report.is_ok(),
        "the commit sent as the release was answered: {report}"
    );
    let report = story(5, 7);
    assert!(
        report.is_ok(),
        "the renewal answered as the release was sent: {report}"
    );
}

/// A grant first reported by a renewal may carry the renewal's own time as
/// its start, later than the grant began: a fence or commit before that
/// start proves no write came before the grant.
#[test]
fn a_write_before_a_start_a_renewal_reported_proves_nothing() {
    let mut builder = Builder::new();
    builder.acquire_unknown("a", "s");
    builder.commit("a", "s", 1, 7, 1, CommitEnd::Ok, 3_000);
    builder.rows("a", "s", 1, 7, 0..1, 1, 3_000);
    builder.committed_at(1..2, 3_000);
    builder.renew_ok("a", "s", 1, 5_000, 5_100);
    assert_passes(&builder.build());
}
