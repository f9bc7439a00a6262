//! Integration tests of the lease models: one binary, a module per topic.
//!
//! Goal: pin the reference model's state counts and verdicts, and every broken
//! variant's counterexample, so a change to the model is a visible change.
//! Method: `check` with fixed bounds, single-threaded (deterministic paths).
//! Invariant: the reference satisfies every `always` and witnesses every
//! `sometimes`; each variant violates exactly the property it is named for.

mod combined;
mod judged_by_checker;
mod late_statements;
mod lost_replies;
mod reference;
mod report;
mod retry_interval;
mod variants;
mod vocabulary;
