//! The advisory lock manager in the simulation: its own code, by seed.
//!
//! Goal: the scenarios `advisory-pause`, `advisory-crash`,
//! `advisory-session-kill`, `advisory-restart` and `advisory-chaos` run
//! `PostgresAdvisoryLockManager` — its session per lock, probe, idle cache
//! and release — over the simulated database's session locks, and the
//! harness both clears what holds and catches what breaks. Method: sweeps of
//! the reference (nothing beyond each scenario's known breaks, every known
//! break shown), a planted shared lock that must be caught, and the *lost*
//! signal traced from the termination that caused it. Invariant: the one
//! checker judges every run.

use std::collections::BTreeSet;

use leaseproof_history::Invariant;
use leaseproof_sim::{run, RunOptions, RunOutcome, Scenario};

use Invariant::FencedWrites as I3;

fn runs(name: &str, seeds: std::ops::Range<u64>, options: RunOptions) -> Vec<RunOutcome> {
    let scenario = Scenario::load(name).expect("the scenario loads");
    seeds.map(|seed| run(&scenario, seed, options)).collect()
}

#[test]
fn the_advisory_scenarios_break_exactly_their_known_breaks() {
    for (name, known) in [
        ("advisory-pause", vec![]),
        ("advisory-crash", vec![]),
        ("advisory-session-kill", vec![I3]),
        ("advisory-restart", vec![I3]),
        ("advisory-chaos", vec![I3]),
    ] {
        let scenario = Scenario::load(name).unwrap();
        assert_eq!(scenario.lock.as_ref().unwrap().breaks, known, "{name}");
        let outcomes = runs(name, 0..24, RunOptions::default());
        let mut broken = BTreeSet::new();
        for outcome in &outcomes {
            assert!(
                outcome.is_ok(),
                "{name} seed {}: {:?}",
                outcome.seed,
                outcome.first_problem()
            );
            broken.extend(outcome.invariants_broken());
        }
        // Every claimed break is shown by some seed, and nothing else is.
        assert_eq!(broken, known.into_iter().collect(), "{name}");
        let takeovers: u64 = outcomes
            .iter()
            .map(|outcome| outcome.report.stats.takeovers)
            .sum();
        let commits: u64 = outcomes
            .iter()
            .map(|outcome| outcome.report.stats.commits)
            .sum();
        assert!(takeovers > 20, "{name}: {takeovers} takeovers");
        assert!(commits > 100, "{name}: {commits} writes");
        if name == "advisory-chaos" {
            // Its lost replies and restarts leave outcomes unknown.
            let unknown: u64 = outcomes
                .iter()
                .map(|outcome| outcome.report.stats.unknown_ops)
                .sum();
            assert!(unknown > 0, "{name}: no unknown outcome: nothing was lost");
        }
    }
}

#[test]
fn a_crashed_holders_lock_is_freed_with_its_session_and_taken_by_a_rival() {
    let traced = RunOptions {
        trace: true,
        ..RunOptions::default()
    };
    let mut freed_by_crash = 0;
    for outcome in runs("advisory-crash", 0..8, traced) {
        let trace = &outcome.trace;
        for (index, line) in trace.iter().enumerate() {
            if !line.contains("driver: crash-w") {
                continue;
            }
            // The crash closes the holder's connections: the database ends
            // its session, and the lock with it, before anything else runs.
            let after = &trace[index + 1..];
            let freed = after
                .iter()
                .take_while(|line| !line.contains("driver: "))
                .position(|line| line.contains("session ended, advisory lock(s)"));
            if let Some(freed) = freed {
                freed_by_crash += 1;
                assert!(
                    after[freed..]
                        .iter()
                        .any(|line| line.contains("advisory lock") && line.contains("GRANTED")),
                    "seed {}: the lock freed by {line} was never granted again",
                    outcome.seed
                );
            }
        }
    }
    assert!(
        freed_by_crash >= 2,
        "only {freed_by_crash} crashes of a holder"
    );
}

#[test]
fn a_database_granting_shared_advisory_locks_is_caught_by_the_writes_it_lets_interleave() {
    // Each holder's release then finds the lock another's (stale): nothing
    // proves two sessions held it at once (a session may end unseen), but
    // the writes the shared lock lets land under a rival's hold are proven.
    let planted = RunOptions {
        shared_advisory_locks: true,
        ..RunOptions::default()
    };
    let caught = runs("advisory-pause", 0..12, planted)
        .iter()
        .filter(|outcome| outcome.invariants_broken().contains(&I3) && !outcome.is_ok())
        .count();
    assert!(
        caught >= 6,
        "only {caught} of 12 seeds caught a shared lock"
    );
    let replay = run(&Scenario::load("advisory-pause").unwrap(), 0, planted).replay_command();
    assert!(replay.ends_with("--shared-advisory-locks"), "{replay}");
}

/// `[sim 12.345678s | …` → 12.345678 s in µs.
fn sim_us(line: &str) -> i64 {
    let seconds = line
        .strip_prefix("[sim ")
        .and_then(|rest| rest.split('s').next())
        .expect("a timed trace line");
    (seconds.parse::<f64>().expect("seconds") * 1e6).round() as i64
}

/// For every termination of a held lock in `outcome`'s trace: how long
/// after it the holder learned, and whether its probe told it (*lost*)
/// rather than its release answered "not yours".
fn learned_after_terminations(outcome: &RunOutcome) -> Vec<(i64, bool)> {
    let trace = &outcome.trace;
    let mut learned = Vec::new();
    for (index, line) in trace.iter().enumerate() {
        // `… of the advisory lock holders {3}`: session 3 held a lock.
        let Some(holders) = line.split("advisory lock holders ").nth(1) else {
            continue;
        };
        if holders == "{}" {
            continue;
        }
        let told = trace[index..]
            .iter()
            .find(|line| {
                line.contains(": LOST signal") || line.contains("release => Fail { reason: Stale }")
            })
            .unwrap_or_else(|| panic!("seed {}: nobody learned of {line}", outcome.seed));
        learned.push((sim_us(told) - sim_us(line), told.contains("LOST signal")));
    }
    learned
}

#[test]
fn a_terminated_lock_session_is_learned_at_the_holders_next_statement() {
    let scenario = Scenario::load("advisory-session-kill").unwrap();
    let probe_us = scenario.lock.as_ref().unwrap().probe_interval_ms as i64 * 1_000;
    let timeout_us = scenario.request_timeout_ms as i64 * 1_000;
    let traced = RunOptions {
        trace: true,
        ..RunOptions::default()
    };
    let mut terminations = 0;
    for outcome in runs("advisory-session-kill", 0..8, traced) {
        for (after_us, _) in learned_after_terminations(&outcome) {
            assert!(
                (0..=probe_us + timeout_us).contains(&after_us),
                "seed {}: learned {after_us} µs after the termination",
                outcome.seed
            );
            terminations += 1;
        }
    }
    assert!(
        terminations >= 4,
        "{terminations} terminations of a held lock"
    );
}

#[test]
fn a_holder_holding_past_its_probe_is_told_by_the_probe() {
    // Holds of 20 writes (1–6 s) outlast the probe interval: a holder that
    // learned only at its release would learn seconds late.
    let text = leaseproof_sim::EMBEDDED
        .iter()
        .find(|(name, _)| *name == "advisory-session-kill")
        .unwrap()
        .1
        .replace(
            "name = \"advisory-session-kill\"",
            "name = \"advisory-long-holds\"",
        )
        .replace("cycles_per_grant = 3", "cycles_per_grant = 20");
    let scenario = Scenario::parse(&text, "test").expect("the long holds load");
    let probe_us = scenario.lock.as_ref().unwrap().probe_interval_ms as i64 * 1_000;
    let timeout_us = scenario.request_timeout_ms as i64 * 1_000;
    let traced = RunOptions {
        trace: true,
        ..RunOptions::default()
    };
    let mut by_probe = 0;
    for seed in 0..8 {
        let outcome = run(&scenario, seed, traced);
        for (after_us, probed) in learned_after_terminations(&outcome) {
            assert!(
                after_us <= probe_us + timeout_us,
                "seed {seed}: learned {after_us} µs after the termination"
            );
            by_probe += usize::from(probed);
        }
    }
    assert!(by_probe >= 4, "the probe told only {by_probe} holders");
}

#[test]
fn the_advisory_settings_are_refused_where_they_would_do_nothing() {
    let base = leaseproof_sim::EMBEDDED
        .iter()
        .find(|(name, _)| *name == "advisory-pause")
        .unwrap()
        .1;
    let no_probe = base.replace(
        "manager = \"advisory\"",
        "manager = \"advisory\"\nprobe_interval_ms = 0",
    );
    assert!(Scenario::parse(&no_probe, "test")
        .unwrap_err()
        .to_string()
        .contains("probe_interval_ms must be positive"));
    let forgetful = base.replace(
        "manager = \"advisory\"",
        "manager = \"advisory\"\npersistent = false",
    );
    assert!(Scenario::parse(&forgetful, "test")
        .unwrap_err()
        .to_string()
        .contains("do nothing for the advisory manager"));
    let redis_kills = leaseproof_sim::EMBEDDED
        .iter()
        .find(|(name, _)| *name == "redis-crash")
        .unwrap()
        .1
        .replace("[faults]", "[faults]\nlock_session_kills = [1, 1]");
    assert!(Scenario::parse(&redis_kills, "test")
        .unwrap_err()
        .to_string()
        .contains("lock_session_kills terminates advisory lock sessions"));
}
