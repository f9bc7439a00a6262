//! Correct lock clients in every shape the protocol allows are never
//! convicted; the same clients with one bug planted are.
//!
//! Goal: `leaseproof clients` judges a lock written outside the project
//! soundly — whatever optional fields its answers carry, however late it
//! answers, whether it calls `unknown` what took effect, sends `lost` for no
//! reason or answers `ok` to releasing an expired lease — and still catches
//! the bugs such clients really have.
//! Method: `tests/varied_client.py` is a correct PostgreSQL lease (one
//! statement on the server's clock, a fencing token, a row-lock fence in the
//! write's own transaction) whose answers `VARIED_SEED` shapes; `VARIED_PLANT`
//! plants one bug instead; `VARIED_FORM=session` makes it a session lock
//! writing through its own session. Each correct design runs under every
//! fault kind;
//! each planted one under the fault that exposes it, over a bounded number of
//! seeds whose plans strike holders with it (real processes: the plan is
//! exact, the interleaving is not). `ci/nightly.sh` sweeps more seeds.
//! Invariant: I1–I4, as `leaseproof check` documents them.

use leaseproof_history::{check, CheckConfig, GrantStamps, Invariant};
use leaseproof_races::clients::FaultKind;

use super::clients::{
    caught_within, clean_runs, config, describe, faketime_installed, judged, python, servers,
    workspace,
};

/// The command running the varied client with `seed`'s design (and `plant`).
fn varied_client(python: &std::path::Path, seed: u64, plant: Option<&str>) -> String {
    let script = workspace().join("crates/harness/leaseproof-races/tests/varied_client.py");
    format!(
        "VARIED_SEED={seed} VARIED_PLANT={} {} {}",
        plant.unwrap_or(""),
        python.display(),
        script.display()
    )
}

#[tokio::test]
async fn a_session_lock_writing_through_its_session_is_not_convicted_under_any_fault() {
    // A session lock has no lifetime, and its session can end behind its
    // holder's back (a reset, a terminated backend, the holder stopped
    // meanwhile): certain only as far as its holder proved it held. Writing
    // through that very session, a holder whose session ended cannot land a
    // write, so no finding is due under any fault — a pause and a reset
    // together included.
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    let faults = FaultKind::ALL;
    // Seeds whose plans stop a client and end sessions: the stalled holder
    // whose session dies is the case a session lock cannot report in time.
    let ends_sessions =
        |kind: FaultKind| matches!(kind, FaultKind::Reset | FaultKind::TerminateBackends);
    let seeds = (0..).filter(|&seed| {
        let plan = config(String::new(), seed, &faults, 6_000, 1_500).plan();
        plan.strikes
            .iter()
            .any(|strike| strike.kind == FaultKind::PauseLong)
            && plan.strikes.iter().any(|strike| ends_sessions(strike.kind))
    });
    let runs: Vec<(String, u64)> = seeds
        .take(3)
        .map(|seed| {
            let command = format!("VARIED_FORM=session {}", varied_client(&python, seed, None));
            (command, seed)
        })
        .collect();
    let judged_for_real = clean_runs(runs, &faults, "varied session").await;
    assert!(
        judged_for_real >= 2,
        "only {judged_for_real} runs were judged for real"
    );
}

#[tokio::test]
async fn correct_clients_answering_in_every_allowed_shape_are_not_convicted_under_any_fault() {
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    // Designs chosen to cover both grant forms (with and without a token),
    // each `grant_stamps` declaration, renewals that report their own time,
    // a fence inside the insert, work under the fence that outlives the
    // lease, releases answered without their server time, spurious
    // `unknown`s and `lost`s, delayed answers and expired releases answered
    // `ok` (the client prints each design on its stderr).
    let runs = [1, 9, 42, 44, 53, 66].map(|seed| (varied_client(&python, seed, None), seed));
    let judged_for_real = clean_runs(runs, &FaultKind::ALL, "varied").await;
    assert!(
        judged_for_real >= 3,
        "only {judged_for_real} runs were judged for real"
    );
}

/// Runs the client with `plant` under long pauses of its holders until it is
/// caught (at most `tries` seeds); asserts the invariant it broke. Where a
/// strike lands is up to real time, so each plant gets seeds enough that
/// all missing is rare (measured: a run catches the fence in its own
/// transaction 5 times in 8, the other two 3 times in 4).
async fn planted_is_caught(plant: &str, tries: usize, expected: Invariant) {
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    let command = varied_client(&python, 0, Some(plant));
    let outcome = caught_within(&command, FaultKind::PauseLong, tries, 6_000, 1_500).await;
    assert!(
        outcome
            .report
            .violations
            .iter()
            .any(|violation| violation.invariant == expected),
        "{plant}: expected {expected:?}\n{}",
        describe(&outcome)
    );
}

/// The rows land after a rival's, under an older token.
#[tokio::test]
async fn a_fence_in_a_transaction_of_its_own_is_caught_as_a_stale_write() {
    planted_is_caught("fence-outside", 6, Invariant::FencedWrites).await;
}

/// Two certain holders: the promise outlives the lock.
#[tokio::test]
async fn a_lock_promising_twice_its_ttl_is_caught_holding_beside_its_successor() {
    planted_is_caught("overpromise", 5, Invariant::MutualExclusion).await;
}

/// Answered committed, missing from the table.
#[tokio::test]
async fn a_refused_write_answered_ok_is_caught_missing_from_the_table() {
    planted_is_caught("ok-for-refused", 5, Invariant::NothingLost).await;
}

#[tokio::test]
async fn a_skewed_client_clock_is_possible_under_statement_start_stamps_proven_under_decision() {
    // A client whose clock runs ahead takes over live leases. Its grants
    // stamped with their statements' start, nothing in real time proves the
    // victim's grant still live after the takeover (its fence refuses its
    // next write): the checker says "possible", with the overlap, and
    // convicts nothing. The same history judged as decision stamps (what
    // the stamps would mean had the statement decided with them) convicts
    // the overlap: the finding was withheld for want of proof, not missed.
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    if !faketime_installed() {
        return;
    }
    let command = varied_client(&python, 0, Some("client-clock"));
    let mut runs = Vec::new();
    for seed in 0..4 {
        let outcome = judged(config(
            command.clone(),
            seed,
            &[FaultKind::ClockSkew],
            6_000,
            1_500,
        ))
        .await;
        assert!(
            outcome.report.is_ok(),
            "convicted on unproven evidence:\n{}",
            describe(&outcome)
        );
        let possible_overlaps = outcome
            .report
            .possible
            .iter()
            .filter(|finding| finding.invariant == Invariant::MutualExclusion)
            .count();
        if possible_overlaps > 0 {
            let as_decisions = CheckConfig {
                grant_stamps: GrantStamps::Decision,
                ..CheckConfig::default()
            };
            let report = check(&outcome.history, &as_decisions);
            assert!(
                report
                    .violations
                    .iter()
                    .any(|violation| violation.invariant == Invariant::MutualExclusion),
                "judged as decision stamps, the overlap is proven:\n{report}"
            );
            return;
        }
        runs.push(describe(&outcome));
    }
    panic!(
        "no possible overlap reported in 4 seeds:\n{}",
        runs.join("\n---\n")
    );
}
