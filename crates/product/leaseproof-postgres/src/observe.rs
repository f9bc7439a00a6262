//! What the lease reports about itself: `tracing` events and `metrics`.
//!
//! Goal: the meters a team watches a lock by (ShedLock's as the floor) —
//! attempts and their outcomes, renewals, releases, losses, commits, how
//! long a lease was held and how long a waiter waited — without choosing an
//! exporter for them. Method: the `metrics` facade (no-ops until the
//! application installs a recorder: Prometheus, StatsD, …) and `tracing`
//! events at `debug` with the scope, owner, token, outcome and latency of
//! every operation. Labels are outcomes and reasons only: a scope per label
//! would let the number of series grow with the tables.
//! Invariant: observing never changes what an operation does or returns.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `leaseproof_acquisitions_total` | counter | `outcome`: granted, held, unknown, error |
//! | `leaseproof_acquire_seconds` | histogram | — |
//! | `leaseproof_renewals_total` | counter | `outcome`: renewed, lost, unknown, error |
//! | `leaseproof_releases_total` | counter | `outcome`: released, gone, unknown, error |
//! | `leaseproof_losses_total` | counter | `reason`: gone, unconfirmed, … |
//! | `leaseproof_commits_total` | counter | `outcome`: committed, lost, error |
//! | `leaseproof_held_seconds` | histogram | — (grant to release) |
//! | `leaseproof_waited_seconds` | histogram | `outcome`: granted, held (a wait's length) |

use std::time::Duration;

use leaseproof_protocol::{Lease, LeaseError, Owner, Scope};

/// The outcome label of an operation that failed with `error`.
pub(crate) fn failure(error: &LeaseError) -> &'static str {
    match error {
        LeaseError::Held { .. } => "held",
        LeaseError::Lost { .. } => "lost",
        LeaseError::OutcomeUnknown { .. } => "unknown",
        _ => "error",
    }
}

/// An acquisition's outcome.
pub(crate) fn acquired(
    scope: &Scope,
    owner: &Owner,
    result: &Result<Lease, LeaseError>,
    took: Duration,
) {
    let outcome = match result {
        Ok(_) => "granted",
        Err(error) => failure(error),
    };
    metrics::counter!("leaseproof_acquisitions_total", "outcome" => outcome).increment(1);
    metrics::histogram!("leaseproof_acquire_seconds").record(took.as_secs_f64());
    tracing::debug!(
        %scope,
        %owner,
        token = result.as_ref().ok().map(|lease| lease.token().0),
        outcome,
        latency_us = took.as_micros() as u64,
        "acquire"
    );
}

/// A renewal's outcome.
pub(crate) fn renewed(lease: &Lease, result: &Result<Lease, LeaseError>, took: Duration) {
    let outcome = match result {
        Ok(_) => "renewed",
        Err(error) => failure(error),
    };
    operation("leaseproof_renewals_total", "renew", lease, outcome, took);
}

/// A release's outcome (`Ok(false)`: it was already gone).
pub(crate) fn released(lease: &Lease, result: &Result<bool, &LeaseError>, took: Duration) {
    let outcome = match result {
        Ok(true) => "released",
        Ok(false) => "gone",
        Err(error) => failure(error),
    };
    operation("leaseproof_releases_total", "release", lease, outcome, took);
}

/// An operation on a granted lease: its counter by outcome, and its event.
fn operation(
    counter: &'static str,
    name: &'static str,
    lease: &Lease,
    outcome: &'static str,
    took: Duration,
) {
    metrics::counter!(counter, "outcome" => outcome).increment(1);
    tracing::debug!(
        scope = %lease.scope(),
        owner = %lease.owner(),
        token = lease.token().0,
        outcome,
        latency_us = took.as_micros() as u64,
        "{name}"
    );
}

/// A guard learnt its lease is (or may be) lost.
pub(crate) fn lost(lease: &Lease, reason: &str) {
    metrics::counter!("leaseproof_losses_total", "reason" => reason.to_string()).increment(1);
    tracing::debug!(
        scope = %lease.scope(),
        owner = %lease.owner(),
        token = lease.token().0,
        reason,
        "lost"
    );
}

/// A fenced commit cycle's outcome.
pub(crate) fn committed(lease: &Lease, outcome: &'static str, took: Duration) {
    operation("leaseproof_commits_total", "commit", lease, outcome, took);
}

/// A guard's lease was held for `held` (grant to release).
pub(crate) fn held_for(held: Duration) {
    metrics::histogram!("leaseproof_held_seconds").record(held.as_secs_f64());
}

/// A wait ended after `waited`, granted or not.
pub(crate) fn waited(scope: &Scope, granted: bool, waited: Duration) {
    let outcome = if granted { "granted" } else { "held" };
    metrics::histogram!("leaseproof_waited_seconds", "outcome" => outcome)
        .record(waited.as_secs_f64());
    tracing::debug!(%scope, outcome, waited_us = waited.as_micros() as u64, "wait");
}
