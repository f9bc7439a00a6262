//! Deterministic turmoil simulation of the lease protocol, replayable by seed.
//!
//! Goal: run the one worker loop (ensure_schema → acquire → work → fenced
//! commit → renew / release) against a simulated database under clock skew,
//! pauses, crashes, partitions and lost replies, and judge every run with the
//! one history checker.
//!
//! Method:
//! - [`db`]: a database host on turmoil TCP serving exactly the protocol's
//!   semantic model (`LeaseTable`, `GuardedLog`) with its own clock, row locks
//!   for the fence, aborts on dropped connections and the
//!   `CREATE TABLE IF NOT EXISTS` catalog race.
//! - [`port::SimPort`]: the `LeasePort` client for it.
//! - [`Scenario`]: scenarios as data (`scenarios/*.toml`); [`FaultPlan`]: the
//!   fault values one seed draws from a scenario's ranges.
//! - [`run()`]: one run, a pure function of (scenario, seed, options);
//!   [`sweep()`]: many seeds, sharded and in parallel; [`cli`]: the commands.
//!
//! **The tick.** Scenarios simulate TTLs of 2 s with message latencies of
//! 1–15 ms. A run's cost follows ticks × hosts (turmoil's and tokio's per-tick
//! work is >90 % of a profile), so the tick is the largest that keeps time
//! meaningful against the TTL: 20 ms, 1 % of the TTL. Every message arrives
//! within one tick, a fenced commit (connect, BEGIN, FENCE, WRITE, COMMIT) takes
//! ~10 ticks, well inside a grant. A 10 ms tick halves the speed (~800
//! simulated s per CPU s instead of ~1,400 for 5 workers) and, at second-scale
//! TTLs, shows the protocol nothing new.
//!
//! **Architecture invariant:** the simulation never reads wall time or OS
//! entropy and never iterates an unordered map: time is turmoil's, randomness
//! is the run's seed (a tidy test greps this crate). The only wall clock is in
//! [`wall`], which measures sweeps and decides nothing.
#![deny(missing_docs)]

pub mod advisory_client;
pub mod db;
mod faults;
pub mod lock_cells;
pub mod port;
pub mod redis_host;
mod run;
mod scenario;
pub mod shards;
mod sweep;
mod trace;
pub mod true_time;
pub mod wall;
pub mod wire;
pub mod work_store;

pub use faults::{FaultEvent, FaultPlan, WorkerPlan};
pub use run::{
    evidence_dir, invocation, run, Finding, PauseHooks, RunOptions, RunOutcome, SimClocks, SCOPE,
};
pub use scenario::{scenarios_dir, Faults, Scenario, ScenarioError, Span, EMBEDDED};
pub use sweep::{
    projected_seconds, regressions, run_regression, save_regression, seed_window_base, speed,
    speed_line, sweep, Regression, RegressionExpect, SeedFailure, SweepConfig, SweepCounts,
    SweepSummary, STOP_REQUESTED,
};
pub use trace::{format_us, LocalClock, Trace};
