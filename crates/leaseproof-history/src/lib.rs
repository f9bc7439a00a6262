//! The lease history and its checker: the one judge of every leaseproof run.
//!
//! Goal: decide whether a run — a turmoil simulation, a real-PostgreSQL race
//! between tasks or OS processes, a file on disk — kept the lease invariants
//! I1 (mutual exclusion), I2 (token order), I3 (fenced writes) and I4 (nothing
//! lost), and count belief overlaps.
//!
//! Method: workers record Jepsen-style events ([`Event`]: invoke / complete
//! with ok, fail or unknown outcomes, and belief start / end) through a
//! [`Recorder`]; after the run the guarded table's rows ([`GuardedRow`]) are
//! added as ground truth; [`check`] reconstructs each scope's grants from the ok
//! outcomes (only they are facts; unknown ones neither prove nor refute) and
//! returns a [`CheckReport`] of [`Violation`]s and [`Stats`].
//!
//! **Architecture invariant:** this crate knows nothing of PostgreSQL, turmoil,
//! stateright, or even the protocol crate's types: plain integers and strings.
#![deny(missing_docs)]

mod check;
mod event;
mod history;
mod recorder;

pub use check::{check, CheckConfig, CheckReport, Invariant, Stats, Violation};
pub use event::{Event, EventKind, FailReason, GuardedRow, Op, OpResult, Outcome};
pub use history::{History, HistoryError};
pub use recorder::{Recorder, Stamp};
