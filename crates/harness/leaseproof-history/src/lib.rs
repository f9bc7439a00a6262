//! The lease history and its checker: the one judge of every leaseproof run.
//!
//! Goal: decide whether a run — a turmoil simulation, a real-PostgreSQL race
//! between tasks or OS processes, a file on disk — kept the lease invariants
//! I1 (mutual exclusion), I2 (token order), I3 (fenced writes) and I4 (nothing
//! lost), count belief overlaps, measure how soon dead holders are taken over
//! and, given a [`TakeoverBound`], judge that delay (I5's bounded part).
//!
//! Method: workers record Jepsen-style events ([`Event`]: invoke / complete
//! with ok, fail or unknown outcomes, and belief start / end) through a
//! [`Recorder`]; after the run the guarded table's rows ([`GuardedRow`]) are
//! added as ground truth; [`check`] reconstructs each scope's grants from the ok
//! outcomes (only they are facts; unknown ones neither prove nor refute) and
//! returns a [`CheckReport`] of [`Violation`]s and [`Stats`].
//!
//! ```
//! use leaseproof_history::{check, CheckConfig, GuardedRow, Op, OpResult, Outcome, Recorder, Stamp};
//!
//! let recorder = Recorder::new();
//! let stamp = Stamp { worker: "tick", incarnation: 0, true_time_us: 5, local_time_us: 9 };
//! let acquire = Op::Acquire { scope: "nightly".into(), owner: "tick-1".into(), ttl_us: 30_000_000 };
//! let op_id = recorder.invoke(stamp, acquire);
//! let lease = OpResult::Lease {
//!     token: 1, owner: "tick-1".into(), granted_at_us: 1_000, expires_at_us: 30_001_000,
//! };
//! recorder.complete(stamp, op_id, Outcome::Ok { result: lease });
//! let commit = Op::Commit {
//!     scope: "nightly".into(), owner: "tick-1".into(), token: 1, cycle_id: 7, items: 1,
//! };
//! let op_id = recorder.invoke(stamp, commit);
//! recorder.complete(stamp, op_id, Outcome::Unknown { reason: "connection reset".into() });
//! // After the run, the guarded table is the ground truth.
//! recorder.set_guarded_rows(vec![GuardedRow {
//!     seq: 1, scope: "nightly".into(), owner: "tick-1".into(), token: 1,
//!     cycle_id: 7, item: 0, written_at_us: 2_000, committed_at_us: None,
//! }]);
//! let report = check(&recorder.snapshot(), &CheckConfig::default());
//! assert!(report.is_ok(), "{report}");
//! assert_eq!(report.stats.grants, 1);
//! assert_eq!(report.stats.unknown_ops, 1);
//! ```
//!
//! **Architecture invariant:** this crate knows nothing of PostgreSQL, turmoil,
//! stateright, or even the protocol crate's types: plain integers and strings.
#![deny(missing_docs)]

mod check;
mod design;
mod document;
mod event;
mod field_path;
mod history;
pub mod model;
mod recorder;
mod timeline;

pub use check::{
    invariant_codes, CheckConfig, CheckReport, GrantStamps, Invariant, ShownReport, Stats,
    TakeoverBound, Violation,
};
pub use document::{CheckDocument, Document, Envelope};
pub use event::{Event, EventKind, FailReason, GuardedRow, Op, OpResult, Outcome, WorkRow};
pub use field_path::{by_name, duplicate_key, field_in_error};
pub use history::{History, HistoryError, TablesRead};
pub use recorder::{Recorder, Stamp};
pub use timeline::{timeline_html, Annotation};

/// Judges `history`: every invariant, every count.
///
/// With `LEASEPROOF_MODEL_BESIDE=DIR` set, the model judges it too and a
/// history the two judge differently is saved there ([`model`]).
pub fn check(history: &History, config: &CheckConfig) -> CheckReport {
    beside_the_model(history, config, check::check(history, config))
}

/// Like [`check`], and also judges dead holders' takeovers against `bound` (I5).
/// The bound is beside [`CheckConfig`] rather than in it so callers that spell
/// the config out field by field keep compiling.
pub fn check_with_takeover_bound(
    history: &History,
    config: &CheckConfig,
    bound: &TakeoverBound,
) -> CheckReport {
    let report = check::check_with_takeover_bound(history, config, bound);
    beside_the_model(history, config, report)
}

fn beside_the_model(history: &History, config: &CheckConfig, report: CheckReport) -> CheckReport {
    if let Some(directory) = std::env::var_os("LEASEPROOF_MODEL_BESIDE") {
        model::beside::compare(history, config, &report, directory.as_ref());
    }
    report
}
