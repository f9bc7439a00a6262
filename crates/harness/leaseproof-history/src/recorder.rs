//! A thread-safe, cloneable recorder that workers append events to.
//!
//! Goal: every worker task (or thread) of a run writes into one history without
//! coordinating. Method: an `Arc<Mutex<History>>`; the lock is held only to push
//! one event, and op ids come from the same lock so they are unique per recorder.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::event::{EventKind, GuardedRow, Op, Outcome};
use crate::history::History;

/// Shared handle to a history being recorded. Clones share the history.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    state: Arc<Mutex<RecorderState>>,
}

#[derive(Debug, Default)]
struct RecorderState {
    history: History,
    op_id_next: u64,
}

/// The clocks and identity stamped on one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp<'a> {
    /// The worker's name.
    pub worker: &'a str,
    /// The worker's incarnation.
    pub incarnation: u64,
    /// The common clock.
    pub true_time_us: i64,
    /// The worker's own clock.
    pub local_time_us: i64,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    fn lock(&self) -> MutexGuard<'_, RecorderState> {
        // A worker that panicked while holding the lock only ever pushed whole
        // events, so the history is still consistent: keep recording.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the invocation of `op`; returns its fresh op id.
    pub fn invoke(&self, stamp: Stamp<'_>, op: Op) -> u64 {
        let mut state = self.lock();
        let op_id = state.op_id_next;
        state.op_id_next += 1;
        state.history.push(
            stamp.worker,
            stamp.incarnation,
            stamp.true_time_us,
            stamp.local_time_us,
            EventKind::Invoke { op_id, op },
        );
        op_id
    }

    /// Records the outcome of operation `op_id`; returns the event index.
    pub fn complete(&self, stamp: Stamp<'_>, op_id: u64, outcome: Outcome) -> u64 {
        self.record(stamp, EventKind::Complete { op_id, outcome })
    }

    /// Records any event; returns its index.
    pub fn record(&self, stamp: Stamp<'_>, kind: EventKind) -> u64 {
        self.lock().history.push(
            stamp.worker,
            stamp.incarnation,
            stamp.true_time_us,
            stamp.local_time_us,
            kind,
        )
    }

    /// Sets the guarded table's contents, read after the run.
    pub fn set_guarded_rows(&self, rows: Vec<GuardedRow>) {
        let mut history = self.lock();
        history.history.guarded_rows = rows;
        history.history.tables_read.guarded = true;
    }

    /// A copy of the history so far.
    pub fn snapshot(&self) -> History {
        self.lock().history.clone()
    }
}
