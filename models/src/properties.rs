//! The properties the model checker holds the protocol to.
//!
//! Goal: state I1–I3 of docs/protocol.md, start-up and bounded crash recovery as
//! `always` properties, and pair them with `sometimes` witnesses so none of
//! them can pass vacuously (I5).
//! Method: each property is a predicate over one state; history lives in the
//! state's `Ghost` (monitors set at the step that breaks an invariant).
//! Invariant: the reference model satisfies every `always` and reaches every
//! `sometimes`; `tests/it` pins both.
//!
//! Bounded liveness is written as an `always`: stateright's `eventually` is
//! judged only at terminal states and this model has none (workers may retry
//! forever), so "after a holder crashes another worker can acquire once the
//! lease expires" becomes "once TTL has passed since the holder's crash, the
//! acquire rule hands the row to a live worker".

use crate::model::{LeaseModel, LeaseState, Phase};
use leaseproof_history::Invariant;
use stateright::Property;

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

/// Every property, `always` ones first.
pub fn all() -> Vec<Property<LeaseModel>> {
    vec![
        Property::always(MUTUAL_EXCLUSION, |_, state: &LeaseState| {
            !state.ghost.grants_overlapped
        }),
        Property::always(TOKEN_ORDER, |_, state: &LeaseState| {
            !state.ghost.tokens_not_increasing
        }),
        Property::always(FENCED_WRITES, |_, state: &LeaseState| {
            !state.ghost.stale_write_committed
        }),
        Property::always(CRASHED_HOLDER_TAKEN_OVER, crashed_holder_taken_over),
        Property::always(
            EVERY_WORKER_STARTS,
            |model: &LeaseModel, state: &LeaseState| {
                (0..model.workers).all(|worker| state.workers[worker].phase != Phase::Failed)
            },
        ),
        Property::sometimes(TAKEOVER_AFTER_EXPIRY, |_, state: &LeaseState| {
            state.ghost.takeover_after_expiry
        }),
        Property::sometimes(STALE_COMMIT_REFUSED, |_, state: &LeaseState| {
            state.ghost.stale_commit_refused
        }),
        Property::sometimes(COMMIT_AFTER_HOLDER_CRASH, |_, state: &LeaseState| {
            state.ghost.crashed_holder_token > 0
                && state.ghost.commit_token_last > state.ghost.crashed_holder_token
        }),
        Property::sometimes(BELIEFS_OVERLAP, |model: &LeaseModel, state: &LeaseState| {
            (0..model.workers)
                .filter(|&worker| model.believes(state, worker))
                .count()
                >= 2
        }),
        Property::sometimes(
            CONCURRENT_SCHEMA_CREATION,
            |model: &LeaseModel, state: &LeaseState| {
                (0..model.workers).any(|worker| {
                    matches!(state.workers[worker].phase, Phase::SchemaBlocked { .. })
                })
            },
        ),
    ]
}

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

fn crashed_holder_taken_over(model: &LeaseModel, state: &LeaseState) -> bool {
    if model.retry_interval_ticks > 0 {
        return crashed_holder_taken_over_by_waiting_rival(model, state);
    }
    match state.ghost.holder_crashed_at_ticks {
        Some(crashed_at_ticks) if state.now_ticks >= crashed_at_ticks + model.ttl_ticks => {
            model.some_live_worker_could_acquire(state)
        }
        _ => true,
    }
}

/// With a retry interval: once more than one interval has passed since a
/// crashed holder's grant ended (`E`, at most TTL after the crash: nothing
/// renews it after the crash), a rival that has been waiting (refused,
/// retrying on schedule) has taken the scope over. A waiting rival was
/// refused before `E` and retries one interval later, again and again, so
/// its first attempt at or after `E` comes within one interval of it, and
/// time cannot pass a due attempt. The checker's I5 measures the same delay
/// from `expires_at`. Judged only while a new grant is still allowed by the
/// model's bound on grants (otherwise nothing could take over).
fn crashed_holder_taken_over_by_waiting_rival(model: &LeaseModel, state: &LeaseState) -> bool {
    if state.ghost.holder_crashed_at_ticks.is_none() {
        return true;
    }
    let Some(grant) = state.ghost.grant else {
        return true;
    };
    if state.ghost.grants >= model.grants_max {
        return true;
    }
    let bound_ticks = grant.end_server_ticks + model.retry_interval_ticks;
    let rival_waiting = (0..model.workers).any(|worker| {
        let entry = &state.workers[worker];
        entry.phase == Phase::Idle && entry.retry_at_ticks.is_some()
    });
    !(state.now_ticks > bound_ticks && rival_waiting)
}
