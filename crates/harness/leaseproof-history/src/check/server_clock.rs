//! Server times against real time: stamps from one store clock that only
//! advances follow the order real time proves.
//!
//! A stamp was taken inside a window of real time: a grant's `granted_at`
//! no earlier than the first invoke of an acquisition that may have made it
//! and, when an acquisition's answer reported it, no later than that
//! answer; a live release's `released_at` (before the grant's expiry)
//! between the release's invoke and its answer. When one window ends
//! strictly before another begins, the first stamp cannot be the larger —
//! by more than a millisecond, which rounding to milliseconds allows. A file where it is was not stamped by one
//! clock that only advances (a store whose clock stepped back, stamps from
//! the clients' clocks): `H`, and the scope's server times prove nothing
//! more — it is judged as `statement-start`: what they show must be proven
//! in real time.

use super::*;

/// How far apart two stamps of one clock may read the wrong way round: a
/// store keeping milliseconds rounds (PostgreSQL's `timestamptz(3)` rounds
/// to the nearest one), so readings in and out of such a column disagree
/// by up to a millisecond.
pub(super) const STAMP_ROUNDING_US: i64 = 1_000;

/// One server-time stamp and the real-time window it was taken in.
struct Stamp {
    server_us: i64,
    /// Taken no earlier than this (true time; `i64::MIN`: no bound).
    taken_after_true_us: i64,
    /// Taken no later than this (true time; `i64::MAX`: no bound).
    taken_by_true_us: i64,
    event: u64,
    what: String,
}

impl<'h> Checker<'h> {
    /// Files `H` for each scope whose server times contradict real time,
    /// and marks the scope to be judged by real time only.
    pub(super) fn check_server_clock(&mut self) {
        let acquisitions = &self.acquisitions;
        let mut stamps: BTreeMap<&str, Vec<Stamp>> = BTreeMap::new();
        for (scope, scope_grants) in &self.grants {
            for grant in scope_grants.values() {
                stamps.entry(scope.as_str()).or_default().push(Stamp {
                    server_us: grant.granted_at_us,
                    taken_after_true_us: acquisitions.decided_after_us(scope, grant),
                    taken_by_true_us: grant.stamped_by_true_us.unwrap_or(i64::MAX),
                    event: grant.first_event,
                    what: format!("{}'s grant of token {}", grant.owner, grant.token),
                });
            }
        }
        for record in self.ops.values() {
            let (
                Op::Release {
                    scope,
                    owner,
                    token,
                },
                Some((
                    complete_event,
                    Outcome::Ok {
                        result: OpResult::Released { released_at_us },
                    },
                )),
                Some(complete_true_us),
            ) = (record.op, record.completion, record.complete_true_us)
            else {
                continue;
            };
            // A release stamped at or after its grant's expiry may report
            // when the grant ended rather than read the clock during the
            // release: it places nothing.
            let live = self
                .grants
                .get(scope.as_str())
                .and_then(|grants| grants.get(token))
                .is_some_and(|grant| *released_at_us < grant.expires_at_us_max);
            if !live {
                continue;
            }
            stamps.entry(scope.as_str()).or_default().push(Stamp {
                server_us: *released_at_us,
                taken_after_true_us: record.invoke_true_us,
                taken_by_true_us: complete_true_us,
                event: complete_event,
                what: format!("{owner}'s release of token {token}"),
            });
        }
        let mut contradictions = Vec::new();
        for (scope, scope_stamps) in stamps {
            if let Some((earlier, later)) = first_contradiction(&scope_stamps) {
                let message = format!(
                    "server times go back against real time: {} stamped {} by {} (true us), \
                     {} stamped {} from {} on — one store clock that only advances cannot \
                     give these; the scope's overlaps must be proven in real time",
                    earlier.what,
                    earlier.server_us,
                    earlier.taken_by_true_us,
                    later.what,
                    later.server_us,
                    later.taken_after_true_us,
                );
                contradictions.push((scope.to_string(), vec![earlier.event, later.event], message));
            }
        }
        for (scope, events, message) in contradictions {
            self.violation(Invariant::WellFormed, &scope, events, vec![], message);
            self.clock_contradicted.insert(scope);
        }
    }
}

/// A pair of stamps whose real-time order (the first's window ends
/// strictly before the second's begins) the server times reverse.
fn first_contradiction(stamps: &[Stamp]) -> Option<(&Stamp, &Stamp)> {
    // Windows by their end; a prefix maximum of the stamps finds, for each
    // later window, the largest stamp of those that certainly came before.
    let mut by_end: Vec<&Stamp> = stamps.iter().collect();
    by_end.sort_by_key(|stamp| (stamp.taken_by_true_us, stamp.event));
    let mut largest_so_far: Vec<&Stamp> = Vec::with_capacity(by_end.len());
    for stamp in &by_end {
        let largest = match largest_so_far.last() {
            Some(largest) if largest.server_us >= stamp.server_us => *largest,
            _ => *stamp,
        };
        largest_so_far.push(largest);
    }
    let mut by_start: Vec<&Stamp> = stamps.iter().collect();
    by_start.sort_by_key(|stamp| (stamp.taken_after_true_us, stamp.event));
    by_start.into_iter().find_map(|later| {
        let before =
            by_end.partition_point(|stamp| stamp.taken_by_true_us < later.taken_after_true_us);
        let earlier = *largest_so_far.get(before.checked_sub(1)?)?;
        (earlier.server_us > later.server_us.saturating_add(STAMP_ROUNDING_US))
            .then_some((earlier, later))
    })
}
