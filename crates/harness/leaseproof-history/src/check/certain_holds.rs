//! I1 and I2 for locks that report no server times, judged in real time.
//!
//! Goal: judge any lock — an advisory lock, a Redis key, a ZooKeeper node —
//! from what it promised, without inventing timestamps it does not have, and
//! never report a double hold the evidence does not prove.
//! Method: every ok acquisition reporting [`OpResult::Lock`] gives a *certain
//! hold* on the common clock: from the acquisition's acknowledgement (the lock
//! was granted by then) until the earliest of
//! - the holder's release, invoked (it gave the lock up no earlier),
//! - the promised lifetime from the invocation of the acquisition or of an
//!   ok renewal invoked while the promise still ran, whichever ends last
//!   (`lifetime_us`: the store received the request no earlier, so the
//!   promise runs at least that long; a promise once made is not taken
//!   back by a shorter one); a renewal invoked once the promise had run out
//!   ends the hold there and begins a new one at its acknowledgement,
//! - the holder learning the lock is gone or its belief ending (`BeliefEnd`),
//! - for a lock without a lifetime (it lives with its session, which can end
//!   behind its holder's back at any instant), the invocation of the
//!   holder's last operation that proves it still held: an ok renewal or an
//!   ok release (the acknowledgement alone, without one),
//! - the holder's next acquisition of the scope.
//!
//! Two certain holds of different owners that overlap are a real double grant
//! (I1): both locks had promised to be held at that instant; so is a grant
//! requested and answered inside another owner's certain hold (made at some
//! instant in between, when the other held), even with nothing certain after. Where both carry
//! tokens and one was certainly granted before the other (acknowledged before
//! the other was invoked), the later token must be larger (I2).
//! Invariant: a hold is judged only inside what was certain, so a correct lock
//! is never reported, whatever its latency; a lock that breaks its promise (a
//! store restart losing keys before their lifetime, a session lock granted
//! to a rival while its holder went on proving it held) is reported, and
//! rightly: two holders relied on it at once. A session lock whose session
//! ended unseen is no broken promise: its holder's belief outlives it (a
//! belief overlap), and what that holder wrote meanwhile is judged by I3.

use std::collections::BTreeMap;

use super::{OpRecord, PendingViolation};
use crate::check::Invariant;
use crate::event::{EventKind, Op, OpResult, Outcome};
use crate::history::History;

/// One certain hold of a lock.
#[derive(Debug)]
pub(super) struct Hold<'h> {
    pub(super) owner: &'h str,
    token: Option<u64>,
    invoked_true_us: i64,
    /// The acquisition's acknowledgement: held from then on.
    pub(super) from_true_us: i64,
    /// Held certainly until then (exclusive).
    pub(super) until_true_us: i64,
    /// The acquisition's events, and the one that ends the hold.
    pub(super) events: Vec<u64>,
    /// A renewal invoked after the promise had run out began it, not an
    /// acquisition: counted as neither a grant nor a takeover.
    renewed: bool,
}

impl Hold<'_> {
    /// Nothing of it is certain: acknowledged, then at once no longer
    /// counted on (or its promise already spent).
    pub(super) fn is_empty(&self) -> bool {
        self.from_true_us >= self.until_true_us
    }
}

/// An incarnation: (worker, incarnation).
type Incarnation<'h> = (&'h str, u64);

/// What a run's certain holds exercised: distinct holders, and takeovers (a
/// hold an acquisition began whose previous hold of the scope, by start, was
/// another owner's; a lapsed renewal's hold is no grant, so no takeover).
pub(super) fn exercised<'h>(
    holds: &BTreeMap<&'h str, Vec<Hold<'h>>>,
) -> (std::collections::BTreeSet<&'h str>, u64) {
    let mut holders = std::collections::BTreeSet::new();
    let mut takeovers = 0;
    for scope_holds in holds.values() {
        let certain: Vec<&Hold<'h>> = scope_holds.iter().filter(|hold| !hold.is_empty()).collect();
        holders.extend(certain.iter().map(|hold| hold.owner));
        takeovers += certain
            .windows(2)
            .filter(|pair| pair[0].owner != pair[1].owner && !pair[1].renewed)
            .count() as u64;
    }
    (holders, takeovers)
}

/// I1 and I2 over each scope's certain holds (ordered by their start). One
/// finding per later hold, naming one earlier hold that proves it: every
/// hold in a double grant is named, and a lock that grants everyone does
/// not bury its report under every pair (a sweep, so a long history of a
/// correct lock is judged in about linear time).
pub(super) fn violations(holds: &BTreeMap<&str, Vec<Hold<'_>>>) -> Vec<PendingViolation> {
    let mut violations = Vec::new();
    for (scope, holds) in holds {
        overlaps(scope, holds, &mut violations);
        tokens_out_of_order(scope, holds, &mut violations);
    }
    violations
}

/// I1: a hold that began while another owner's was certain — or, for a
/// grant nothing certain follows (a session lock its holder never proved,
/// a promise spent by its answer), a grant made while another owner's hold
/// was certain from its request to its answer: the lock was granted at some
/// instant in between, and the other held at every one.
fn overlaps(scope: &str, holds: &[Hold<'_>], violations: &mut Vec<PendingViolation>) {
    // Holds begun so far that may still run, in order of their start.
    let mut running: Vec<&Hold<'_>> = Vec::new();
    for later in holds {
        running.retain(|earlier| earlier.until_true_us > later.from_true_us);
        let (earlier, message) = if later.is_empty() {
            let covering = running.iter().find(|earlier| {
                // Strictly: stamps in one microsecond prove no order, so a
                // request in the microsecond the other's hold began may
                // have been granted before it.
                earlier.owner != later.owner && earlier.from_true_us < later.invoked_true_us
            });
            let Some(earlier) = covering else { continue };
            let message = format!(
                "{} certainly held {scope} in [{}, {}) while {} was granted it (asked at {}, \
                 granted by {}) in real time (true us)",
                earlier.owner,
                earlier.from_true_us,
                earlier.until_true_us,
                later.owner,
                later.invoked_true_us,
                later.from_true_us
            );
            (earlier, message)
        } else {
            running.push(later);
            let rival = running[..running.len() - 1]
                .iter()
                .find(|earlier| earlier.owner != later.owner);
            let Some(earlier) = rival else { continue };
            let message = format!(
                "{} and {} certainly held {scope} at once in real time: [{}, {}) and [{}, {}) (true us)",
                earlier.owner,
                later.owner,
                earlier.from_true_us,
                earlier.until_true_us,
                later.from_true_us,
                later.until_true_us
            );
            (earlier, message)
        };
        violations.push((
            Invariant::MutualExclusion,
            scope.to_string(),
            [earlier.events.as_slice(), later.events.as_slice()].concat(),
            vec![],
            message,
        ));
    }
}

/// I2: a token no larger than one another owner had been granted before
/// this acquisition was even invoked (acknowledged first: certainly
/// granted first), empty holds included — a token is judged by when it was
/// acknowledged, not by how long it was held.
fn tokens_out_of_order(scope: &str, holds: &[Hold<'_>], violations: &mut Vec<PendingViolation>) {
    let mut by_invocation: Vec<&Hold<'_>> =
        holds.iter().filter(|hold| hold.token.is_some()).collect();
    by_invocation.sort_by_key(|hold| hold.invoked_true_us);
    // The largest token acknowledged so far, and the largest of any other
    // owner: enough to find, for any owner, a larger-or-equal token of
    // someone else.
    let (mut largest, mut largest_of_another): (Option<&Hold<'_>>, Option<&Hold<'_>>) =
        (None, None);
    let mut acknowledged = holds.iter().filter(|hold| hold.token.is_some()).peekable();
    for later in by_invocation {
        while let Some(earlier) =
            acknowledged.next_if(|earlier| earlier.from_true_us < later.invoked_true_us)
        {
            match largest {
                Some(best) if best.token >= earlier.token => {
                    if best.owner != earlier.owner
                        && largest_of_another.is_none_or(|other| other.token < earlier.token)
                    {
                        largest_of_another = Some(earlier);
                    }
                }
                _ => {
                    if largest.is_some_and(|best| best.owner != earlier.owner) {
                        largest_of_another = largest;
                    }
                    largest = Some(earlier);
                }
            }
        }
        let rival = [largest, largest_of_another]
            .into_iter()
            .flatten()
            .find(|earlier| earlier.owner != later.owner);
        if let Some(earlier) = rival.filter(|earlier| earlier.token >= later.token) {
            let (first, second) = (earlier.token.unwrap_or(0), later.token.unwrap_or(0));
            violations.push((
                Invariant::TokenOrder,
                scope.to_string(),
                [earlier.events.as_slice(), later.events.as_slice()].concat(),
                vec![],
                format!(
                    "{} was granted token {second} after {} had been granted token {first}",
                    later.owner, earlier.owner
                ),
            ));
        }
    }
}

/// Certain holds per scope, ordered by their start.
pub(super) fn certain_holds<'h>(
    history: &'h History,
    ops: &BTreeMap<u64, OpRecord<'h>>,
) -> BTreeMap<&'h str, Vec<Hold<'h>>> {
    let incarnation_of = |event: u64| -> Incarnation<'h> {
        let event = &history.events[event as usize];
        (event.worker.as_str(), event.incarnation)
    };
    let mut last_event_true_us: BTreeMap<Incarnation<'h>, i64> = BTreeMap::new();
    let mut belief_ends: BTreeMap<(Incarnation<'h>, &'h str), Vec<(i64, u64)>> = BTreeMap::new();
    for event in &history.events {
        let incarnation = (event.worker.as_str(), event.incarnation);
        let last = last_event_true_us.entry(incarnation).or_insert(i64::MIN);
        *last = (*last).max(event.true_time_us);
        if let EventKind::BeliefEnd { scope, .. } = &event.kind {
            belief_ends
                .entry((incarnation, scope.as_str()))
                .or_default()
                .push((event.true_time_us, event.index));
        }
    }
    // Each incarnation's operations on each scope, in invocation order.
    let mut sequences: BTreeMap<(Incarnation<'h>, &'h str), Vec<&OpRecord<'h>>> = BTreeMap::new();
    for record in ops.values() {
        sequences
            .entry((incarnation_of(record.invoke_event), record.op.scope()))
            .or_default()
            .push(record);
    }
    let mut holds: BTreeMap<&'h str, Vec<Hold<'h>>> = BTreeMap::new();
    for ((incarnation, scope), mut records) in sequences {
        records.sort_by_key(|record| record.invoke_event);
        for (index, record) in records.iter().enumerate() {
            let Op::Acquire { owner, .. } = record.op else {
                continue;
            };
            // A renewal that came after the promise had run out starts a
            // hold of its own: the lock was not promised in between. It is
            // the acquisition's owner's, whatever owner the renewal names:
            // nothing was granted to another.
            let mut start = Some(index);
            while let Some(first) = start {
                let Some((hold, lapsed)) = hold_from(
                    records[first],
                    &records[first + 1..],
                    belief_ends
                        .get(&(incarnation, scope))
                        .map_or(&[], Vec::as_slice),
                    last_event_true_us[&incarnation],
                ) else {
                    break;
                };
                let hold = Hold {
                    owner: owner.as_str(),
                    ..hold
                };
                holds.entry(scope).or_default().push(hold);
                start = lapsed.map(|offset| first + 1 + offset);
            }
        }
    }
    for holds in holds.values_mut() {
        holds.sort_by_key(|hold| (hold.from_true_us, hold.until_true_us));
    }
    holds
}

/// How long a lock without a lifetime certainly held: its session may have
/// ended at any instant after the grant, so until the invocation of the last
/// operation of the holder that proves it still held — an ok renewal or an
/// ok release, which the protocol defines as found held by that very
/// session (the lock was held when it ran, so throughout since the grant) —
/// before its next acquisition, its first refused renewal or its release;
/// `from_true_us` (nothing beyond the grant's acknowledgement) without one.
/// The proving operation's invoke event comes with it.
fn session_proven_until(from_true_us: i64, later: &[&OpRecord<'_>]) -> (i64, Option<u64>) {
    let mut proven = (from_true_us, None);
    for record in later {
        match (record.op, record.completion) {
            (Op::Acquire { .. }, _) => break,
            (Op::Renew { .. } | Op::Release { .. }, Some((_, Outcome::Ok { .. }))) => {
                if record.invoke_true_us > proven.0 {
                    proven = (record.invoke_true_us, Some(record.invoke_event));
                }
                if matches!(record.op, Op::Release { .. }) {
                    break;
                }
            }
            // A release that did not take effect, or a renewal refused, is
            // the holder's own word that the lock was no longer its: no
            // later answer bridges it.
            (Op::Release { .. }, _) | (Op::Renew { .. }, Some((_, Outcome::Fail { .. }))) => break,
            _ => {}
        }
    }
    proven
}

/// The certain hold an ok lock acquisition `acquire` gives, given the same
/// incarnation's later operations on the scope, its belief ends there and
/// its last event; `None` when it is not a lock grant. Also the position in
/// `later` of an ok renewal invoked once the promise had run out, which
/// ends this hold and begins another (`acquire` is then that renewal).
fn hold_from<'h>(
    acquire: &OpRecord<'h>,
    later: &[&OpRecord<'h>],
    belief_ends: &[(i64, u64)],
    last_event_true_us: i64,
) -> Option<(Hold<'h>, Option<usize>)> {
    let (
        Op::Acquire { owner, .. } | Op::Renew { owner, .. },
        Some((complete_event, Outcome::Ok { result })),
    ) = (acquire.op, acquire.completion)
    else {
        return None;
    };
    // A hold a lapsed renewal begins judges no token order: whether such a
    // renewal is a new grant is the design's to say, not the evidence's.
    let renewed = matches!(acquire.op, Op::Renew { .. });
    let OpResult::Lock { token, lifetime_us } = result else {
        return None;
    };
    let from_true_us = acquire.complete_true_us?;
    let mut promised_until_us =
        lifetime_us.map(|lifetime_us| acquire.invoke_true_us.saturating_add(lifetime_us));
    let mut until_true_us = i64::MAX;
    let mut end_event = complete_event;
    if lifetime_us.is_none() {
        // Without a lifetime the lock lives with its session, which can end
        // behind its holder's back (reset, terminated, the server
        // restarted) at any instant after the grant: certain only up to the
        // last proof that it still held.
        let (proven_until_us, proof_event) = session_proven_until(from_true_us, later);
        until_true_us = proven_until_us.min(last_event_true_us.max(from_true_us));
        end_event = proof_event.unwrap_or(complete_event);
    }
    let mut lapsed = None;
    for (offset, record) in later.iter().enumerate() {
        match (record.op, record.completion) {
            // The holder's next acquisition (it no longer counted on this
            // one) or its release, invoked: the hold is over by then.
            (Op::Acquire { .. } | Op::Release { .. }, _) => {
                if record.invoke_true_us < until_true_us {
                    until_true_us = record.invoke_true_us;
                    end_event = record.invoke_event;
                }
                break;
            }
            (
                Op::Renew { .. },
                Some((
                    _,
                    Outcome::Ok {
                        result:
                            OpResult::Lock {
                                lifetime_us: Some(renewed_us),
                                ..
                            },
                    },
                )),
            ) => {
                // Renewed (before any release or next acquisition, which end
                // the walk): the promise runs on from the renewal's
                // invocation — if it was still running then. A renewal
                // invoked at or after the promise's end may have reached the
                // store after the lock was free to be given away: nothing
                // was promised in between, so this hold ends, and the
                // renewal's begins at its acknowledgement.
                match promised_until_us {
                    Some(until_us) if record.invoke_true_us >= until_us => {
                        lapsed = Some(offset);
                        break;
                    }
                    _ => {
                        promised_until_us = promised_until_us.map(|until_us| {
                            until_us.max(record.invoke_true_us.saturating_add(*renewed_us))
                        });
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(&(ended_true_us, event)) = belief_ends
        .iter()
        .find(|(ended_true_us, _)| *ended_true_us >= from_true_us)
    {
        if ended_true_us < until_true_us {
            until_true_us = ended_true_us;
            end_event = event;
        }
    }
    if let Some(promised_until_us) = promised_until_us {
        until_true_us = until_true_us.min(promised_until_us);
    }
    // Kept even when nothing of it is certain (an empty interval): its
    // token was still granted, and I2 judges tokens by when they were
    // acknowledged, not by how long they were held.
    let hold = Hold {
        owner,
        token: if renewed { None } else { *token },
        invoked_true_us: acquire.invoke_true_us,
        from_true_us,
        until_true_us: until_true_us.max(from_true_us),
        events: vec![acquire.invoke_event, complete_event, end_event],
        renewed,
    };
    Some((hold, lapsed))
}
