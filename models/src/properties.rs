//! The properties the model checker holds the protocol to.
//!
//! Goal: state I1–I3 of docs/protocol.md, start-up and bounded crash recovery as
//! `always` properties, and pair them with `sometimes` witnesses so none of
//! them can pass vacuously (I5).
//! Method: each property is a predicate over one state; history lives in the
//! state's `Ghost` (monitors set at the step that breaks an invariant).
//! Invariant: the reference model satisfies every `always` and reaches every
//! `sometimes`; `tests/it` pins both. This module names them (a leaf: the
//! variants name what they break with it); their predicates over the
//! model's state are `model::properties`.
//!
//! Bounded liveness is written as an `always`: stateright's `eventually` is
//! judged only at terminal states and this model has none (workers may retry
//! forever), so "after a holder crashes another worker can acquire once the
//! lease expires" becomes "once TTL has passed since the holder's crash, the
//! acquire rule hands the row to a live worker".

use leaseproof_history::Invariant;

// The invariants are named once, by the checker's `Invariant`: a model
// counterexample and a checker violation of one rule carry one name.

/// I1: grant intervals never overlap in server time.
pub const MUTUAL_EXCLUSION: &str = Invariant::MutualExclusion.slug();
/// I2: each grant's token exceeds every earlier grant's.
pub const TOKEN_ORDER: &str = Invariant::TokenOrder.slug();
/// I3: a guarded write commits only under its current grant, in token order.
pub const FENCED_WRITES: &str = Invariant::FencedWrites.slug();
/// I5, bounded takeover: a crashed holder's scope can be taken over once TTL
/// has passed (the checker's I5 bounds the same delay in a history).
pub const CRASHED_HOLDER_TAKEN_OVER: &str = Invariant::BoundedTakeover.slug();
/// Start-up survives concurrent schema creation: no worker fails to start.
pub const EVERY_WORKER_STARTS: &str = "every-worker-starts";
/// Witness: a lease is taken over by another incarnation after it expired.
pub const TAKEOVER_AFTER_EXPIRY: &str = "takeover-after-expiry";
/// Witness: the fence refused a stale commit.
pub const STALE_COMMIT_REFUSED: &str = "stale-commit-refused";
/// Witness: a guarded write committed under a grant later than a crashed holder's.
pub const COMMIT_AFTER_HOLDER_CRASH: &str = "commit-after-holder-crash";
/// Witness: two workers believe they hold the lease at once (pauses, skew).
pub const BELIEFS_OVERLAP: &str = "beliefs-overlap";
/// Witness: a worker's schema creation blocked on another's.
pub const CONCURRENT_SCHEMA_CREATION: &str = "concurrent-schema-creation";

/// Whether a property name is one of this model's `sometimes` witnesses.
pub fn is_witness(name: &str) -> bool {
    [
        TAKEOVER_AFTER_EXPIRY,
        STALE_COMMIT_REFUSED,
        COMMIT_AFTER_HOLDER_CRASH,
        BELIEFS_OVERLAP,
        CONCURRENT_SCHEMA_CREATION,
    ]
    .contains(&name)
}
