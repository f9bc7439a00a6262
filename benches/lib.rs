//! Acquisition under contention, measured beside the round-trip limit.
//!
//! Goal: answer "what does a lease cost?" with figures taken side by side in
//! one run on the same server — every lease operation next to `SELECT 1` (the
//! round-trip limit) and `pg_try_advisory_xact_lock` (PostgreSQL's own lock),
//! as ratios, because a shared 2-core machine makes absolute figures noise.
//!
//! Method: one load generator ([`Rig`], [`measure`]) drives `contenders`
//! tokio tasks, each on its own connection with prepared statements, looping
//! one [`Workload`]'s operation; the criterion benches (`benches/benches/`)
//! and `leaseproof bench` ([`run_bench`]) both use it. The one-round-trip
//! claim is checked with the server's own transaction count
//! ([`transactions_per_operation`]).
//!
//! Invariant: a figure is only reported for a run whose outcomes were right —
//! losers on a held lease never granted, renewals and fences never lost, grants
//! of one scope never overlapping.

#![deny(missing_docs)]

mod document;
mod drive;
mod handoff;
mod measure;
mod observing;
mod report;
mod report_table;
mod report_waiting;
mod rig;
mod workload;

pub use crate::document::{BenchDocument, BenchGoal, BenchPlan, BenchRow};
pub use crate::document::{BenchHandOff, BenchObserved};
pub use crate::drive::{measure, transactions_per_operation};
pub use crate::handoff::{hand_offs, HandOffs};
pub use crate::measure::{Grant, Measurement, TakeoverLatency};
pub use crate::observing::{overhead, Overhead};
pub use crate::report::run_plan;
pub use crate::rig::Rig;
pub use crate::workload::{Workload, HELD_TTL, TAKEOVER_LATENCY_TTL, TAKEOVER_TTL};

/// Why a benchmark run produced no figure.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A statement or connection failed.
    #[error("SQL error: {0}")]
    Sql(#[from] sqlx::Error),
    /// The lease library returned an error other than the expected `Held`.
    #[error("lease error: {0}")]
    Lease(#[from] leaseproof_protocol::LeaseError),
    /// A scope, owner or TTL the benchmark built was refused.
    #[error("input: {0}")]
    Input(#[from] leaseproof_protocol::InvalidInput),
    /// Setting up the contention failed (a scope that should be free was not).
    #[error("setup: {0}")]
    Setup(String),
    /// An operation's outcome was wrong: the run is a failure, not a figure.
    #[error("wrong outcome: {0}")]
    Outcome(String),
}
