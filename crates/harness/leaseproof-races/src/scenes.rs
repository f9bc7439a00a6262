//! Scenes with a fixed plot, for any design behind a [`RaceSubject`].
//!
//! Goal: the classic failure of a lease — its holder stalls past expiry, a
//! rival takes over, the holder wakes and writes — staged on a real server
//! for the reference lease and for a foreign design alike, so a foreign
//! design is its adapter and nothing else. Method: two racers run THE
//! worker loop ([`run_racers`]): the holder pauses once at a chosen step
//! (before its commit by default: the GC pause), the rival starts as that
//! pause begins (so it finds the holder's grant, however long either took to
//! connect), waits out the expiry and commits; the guarded table is read back and the
//! one checker judges the history ([`judge`]). Each racer's clock may be
//! skewed on its own, for designs that take time from their client.
//! Invariant: a fenced design refuses the stale commit (I3 holds); an
//! unfenced one lands it and the checker convicts it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leaseproof_history::{CheckReport, History, Recorder};
use leaseproof_protocol::{LeaseError, Owner, Scope};
use leaseproof_worker::{Step, WorkerSummary};

use crate::clock::{ClockSkew, RunClock};
use crate::hooks::{PauseOnce, Signal};
use crate::race::{judge, run_racers, unique_scope, RaceError, RaceSubject, Racer};
use crate::RaceConfig;

/// The plot of [`pause_takeover`].
#[derive(Debug)]
pub struct PauseTakeover {
    /// TTL of every grant.
    pub ttl_ms: i64,
    /// Where the holder stalls, and for how long (longer than the TTL is the
    /// point). The rival starts as this pause begins.
    pub holder_pause: PauseOnce,
    /// The holder commits without the fence (the configuration the checker
    /// must convict: its rows may land after the rival's).
    pub holder_unfenced: bool,
    /// The holder's clock, and the rival's.
    pub skews: [ClockSkew; 2],
}

impl Default for PauseTakeover {
    /// A 150 ms TTL, the holder paused 450 ms before its commit: takeover
    /// and stale commit on every run, loaded or not.
    fn default() -> PauseTakeover {
        PauseTakeover {
            ttl_ms: 150,
            holder_pause: PauseOnce::at(Step::Commit, Duration::from_millis(450)),
            holder_unfenced: false,
            skews: [ClockSkew::default(); 2],
        }
    }
}

/// What a [`pause_takeover`] run did and how the checker judged it.
#[derive(Debug)]
pub struct SceneOutcome {
    /// The recorded history (its guarded rows read back, its design stated).
    pub history: History,
    /// The checker's verdict on it.
    pub report: CheckReport,
    /// The holder's owner id (its rows carry it).
    pub holder_owner: Owner,
    /// The holder's loop summary (`commits_refused` counts the fence's work).
    pub holder: WorkerSummary,
    /// The rival's.
    pub rival: WorkerSummary,
    /// The holder's pause was slept to its end.
    pub holder_paused: bool,
}

/// Stages the pause-takeover scene on `port` with a fresh scope (the schema
/// is ensured first) and judges it.
pub async fn pause_takeover<S: RaceSubject>(
    port: &S,
    plot: PauseTakeover,
) -> Result<SceneOutcome, RaceError> {
    port.ensure_schema().await?;
    let scope_name = unique_scope("pause");
    let scope = Scope::new(scope_name.clone()).map_err(LeaseError::from)?;
    let race = RaceConfig {
        ttl_ms: plot.ttl_ms,
        ..RaceConfig::default()
    };
    let stop_at_true_us = 5_000_000;
    let holder_owner = Owner::generate();
    let mut holder = race.worker_config(
        "holder".into(),
        holder_owner.clone(),
        scope.clone(),
        stop_at_true_us,
    )?;
    holder.cycles = 1;
    holder.cycles_per_grant = 1;
    holder.unfenced = plot.holder_unfenced;
    let mut rival =
        race.worker_config("rival".into(), Owner::generate(), scope, stop_at_true_us)?;
    rival.cycles = 2;
    let holder_paused = Signal::new();
    let holder_pause = Arc::new(plot.holder_pause.giving(&holder_paused));
    let racers = vec![
        Racer {
            config: holder,
            hooks: Arc::clone(&holder_pause),
            skew: plot.skews[0],
        },
        Racer {
            config: rival,
            // Bounded: a holder that never pauses lets the rival go at last.
            hooks: Arc::new(PauseOnce::until(
                Step::Acquire,
                &holder_paused,
                Duration::from_secs(2),
            )),
            skew: plot.skews[1],
        },
    ];
    let recorder = Recorder::new();
    let mut summaries = run_racers(port, racers, RunClock::start(), &recorder).await;
    let unfenced_workers: BTreeSet<String> = if plot.holder_unfenced {
        ["holder".to_string()].into()
    } else {
        BTreeSet::new()
    };
    let (history, report) = judge(port, &scope_name, &recorder, unfenced_workers).await?;
    let rival = summaries.pop().expect("two racers").1;
    let holder = summaries.pop().expect("two racers").1;
    Ok(SceneOutcome {
        history,
        report,
        holder_owner,
        holder,
        rival,
        holder_paused: holder_pause.fired(),
    })
}
