//! The run's trace: one line per message and decision, with three clocks.
//!
//! Goal: a failing seed is understood by reading its replay. Method: every
//! line carries the simulated time, the server's clock at that instant and the
//! local clock of the worker the line is about (each a pure function of the
//! simulated time and the drawn offsets), then what happened. The database
//! host, the port, the hooks and the driver append to one shared list; the
//! history's belief events are merged in by simulated time at the end.
//!
//! Invariant: byte-identical for the same (scenario, seed) — lines are
//! appended from one thread in turmoil's deterministic order. Tracing is off in
//! sweeps (formatting costs time) and a failing seed is re-run with it on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::faults::FaultPlan;

/// Microseconds as `seconds.micros` (negative values keep their sign).
pub fn format_us(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let magnitude = us.unsigned_abs();
    format!(
        "{sign}{}.{:06}s",
        magnitude / 1_000_000,
        magnitude % 1_000_000
    )
}

/// A worker's local clock: `offset + true * (1 + drift)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalClock {
    /// Offset from true time.
    pub offset_us: i64,
    /// Drift in parts per million.
    pub drift_ppm: i64,
}

impl LocalClock {
    /// The local reading at true (simulated) time `true_us`.
    pub fn at(self, true_us: i64) -> i64 {
        let drift_us = (i128::from(true_us) * i128::from(self.drift_ppm) / 1_000_000) as i64;
        self.offset_us + true_us + drift_us
    }
}

/// An injected fault as the timeline draws it: (sim µs, the worker's base
/// name or `None` for the database or every worker, what happened).
pub type FaultRecord = (i64, Option<String>, String);

/// Shared, cloneable trace sink.
#[derive(Clone, Debug)]
pub struct Trace {
    enabled: bool,
    server_offset_us: i64,
    clocks: Arc<BTreeMap<String, LocalClock>>,
    lines: Arc<Mutex<Vec<(i64, String)>>>,
    /// The injected faults, for the timeline.
    faults: Arc<Mutex<Vec<FaultRecord>>>,
}

/// The simulated time of the caller's host, in µs (0 outside a simulation).
pub fn sim_now_us() -> i64 {
    turmoil::sim_elapsed().map_or(0, |elapsed| elapsed.as_micros() as i64)
}

impl Trace {
    /// A trace for the run `plan` describes; `enabled = false` records nothing.
    pub fn new(enabled: bool, plan: &FaultPlan) -> Trace {
        let clocks = plan
            .workers
            .iter()
            .map(|worker| {
                (
                    worker.name.clone(),
                    LocalClock {
                        offset_us: worker.clock_offset_us,
                        drift_ppm: worker.clock_drift_ppm,
                    },
                )
            })
            .collect();
        Trace {
            enabled,
            server_offset_us: plan.server_offset_us,
            clocks: Arc::new(clocks),
            lines: Arc::new(Mutex::new(Vec::new())),
            faults: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Whether lines are recorded.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The server's clock at simulated time `sim_us`.
    pub fn server_us(&self, sim_us: i64) -> i64 {
        sim_us + self.server_offset_us
    }

    /// The drawn local clock of `worker` (a base name or an owner id).
    pub fn local_clock(&self, worker: &str) -> Option<LocalClock> {
        let base = worker.split('#').next().unwrap_or(worker);
        self.clocks.get(base).copied()
    }

    /// Records a line about `worker` (a base name like `w2`, or an owner id
    /// like `w2#inc1`; `None` for the database or the driver) at simulated
    /// time `sim_us`. `text` is only called when tracing is enabled.
    pub fn line_at(&self, sim_us: i64, worker: Option<&str>, text: impl FnOnce() -> String) {
        if !self.enabled {
            return;
        }
        let local = worker
            .and_then(|worker| self.local_clock(worker))
            .map_or_else(|| "-".to_string(), |clock| format_us(clock.at(sim_us)));
        let line = format!(
            "[sim {} | srv {} | local {}] {}",
            format_us(sim_us),
            format_us(self.server_us(sim_us)),
            local,
            text()
        );
        self.lines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((sim_us, line));
    }

    /// Records a line at the caller's current simulated time.
    pub fn line(&self, worker: Option<&str>, text: impl FnOnce() -> String) {
        if self.enabled {
            self.line_at(sim_now_us(), worker, text);
        }
    }

    /// Records an injected fault for the timeline picture (and as a trace
    /// line): `worker` as [`Trace::line_at`] takes it, `None` for the
    /// database or every worker. Recorded only when tracing is enabled.
    pub fn fault_at(&self, sim_us: i64, worker: Option<&str>, text: impl FnOnce() -> String) {
        if !self.enabled {
            return;
        }
        let text = text();
        self.record_fault(sim_us, worker, text.clone());
        self.line_at(sim_us, worker, || text);
    }

    /// Records a fault for the timeline only (the caller writes its own line).
    pub fn record_fault(&self, sim_us: i64, worker: Option<&str>, text: String) {
        if !self.enabled {
            return;
        }
        let base = worker.map(|worker| worker.split('#').next().unwrap_or(worker).to_string());
        self.faults
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((sim_us, base, text));
    }

    /// [`Trace::fault_at`] at the caller's current simulated time.
    pub fn fault(&self, worker: Option<&str>, text: impl FnOnce() -> String) {
        if self.enabled {
            self.fault_at(sim_now_us(), worker, text);
        }
    }

    /// The faults recorded so far, in recording order.
    pub fn faults(&self) -> Vec<FaultRecord> {
        self.faults
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The lines so far, with their simulated times, in recording order.
    pub fn take_lines(&self) -> Vec<(i64, String)> {
        std::mem::take(
            &mut *self
                .lines
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }
}
