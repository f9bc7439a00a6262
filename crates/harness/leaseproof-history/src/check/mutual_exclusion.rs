//! I1 mutual exclusion: grant intervals of one scope never overlap in server
//! time (or, for statement-start stamps, where real-time order proves it).

use super::*;

impl<'h> Checker<'h> {
    /// I1 and the ordering part of I2, per scope, over grants ordered by `granted_at`.
    pub(super) fn check_grant_intervals(&mut self) {
        let mut violations = Vec::new();
        let mut possible = Vec::new();
        let acquisitions = &self.acquisitions;
        let decided_after_us =
            |scope: &str, grant: &Grant| acquisitions.decided_after_us(scope, grant);
        // Files a finding as a violation when proven; otherwise as possible,
        // saying why: the stamps order statements (or contradict real time),
        // and real time did not prove it.
        let mut file = |proven: bool, finding: Finding| {
            if proven {
                violations.push(finding);
            } else {
                let (invariant, scope, events, message) = finding;
                let message = format!(
                    "{message}; {} and real-time order does not prove it",
                    self.unproven_because(&scope)
                );
                possible.push((invariant, scope, events, message));
            }
        };
        let mut holders = BTreeSet::new();
        let (mut grants_judged, mut takeovers) = (0, 0);
        for (scope, scope_grants) in &self.grants {
            let mut ordered: Vec<&Grant> = scope_grants.values().collect();
            ordered.sort_by_key(|grant| (grant.granted_at_us, grant.token));
            // The grant whose interval reaches furthest so far.
            let mut reach: Option<&Grant> = None;
            // Grants with an unknown release, until their latest possible end.
            let mut lingering: Vec<&Grant> = Vec::new();
            let mut previous: Option<&Grant> = None;
            // The largest token granted so far in stamp order: every grant
            // stamped after it must carry a larger one (I2 against every
            // earlier grant, not only the one before).
            let mut highest: Option<&Grant> = None;
            // The highest tokens already reported against, proven or possible
            // (one finding each, not one per grant after it).
            let mut backwards_reported = (BTreeSet::new(), BTreeSet::new());
            for grant in ordered {
                holders.insert(grant.owner.clone());
                grants_judged += 1;
                if let Some(previous) = previous {
                    if grant.token > 1 && previous.owner != grant.owner {
                        takeovers += 1;
                    }
                }
                if let Some(highest) = highest.filter(|highest| grant.token < highest.token) {
                    let message = format!(
                        "token went backwards: {} got token {} at {}, then {} got token {} at {} (server us)",
                        highest.owner,
                        highest.token,
                        highest.granted_at_us,
                        grant.owner,
                        grant.token,
                        grant.granted_at_us
                    );
                    let events = vec![highest.first_event, grant.first_event];
                    // Statement-start stamps order the statements, not the
                    // decisions: the smaller token may have been decided
                    // first, its statement having queued longer. Real time
                    // proves the order when the larger token was
                    // acknowledged before the other owner asked at all.
                    // Decision stamps whose order real time reverses (the
                    // smaller token acknowledged before the larger could be
                    // decided) are wrong, not the tokens: within a
                    // millisecond that is one clock's rounding; further
                    // apart it is H, where the clock rule can see it. Nor
                    // does a start a renewal reported prove the order: it may
                    // be the renewal's own time, later than the grant.
                    let reversed_by_real_time =
                        grant.reported_by_true_us < decided_after_us(scope, highest);
                    let stamped_by_its_acquisition = grant.stamped_by_true_us.is_some();
                    let proven = match self.grant_stamps(scope) {
                        GrantStamps::Decision => {
                            stamped_by_its_acquisition && !reversed_by_real_time
                        }
                        GrantStamps::StatementStart => {
                            highest.reported_by_true_us < decided_after_us(scope, grant)
                        }
                    };
                    let first_of_its_kind = if proven {
                        backwards_reported.0.insert(highest.token)
                    } else {
                        !reversed_by_real_time
                            && stamped_by_its_acquisition
                            && backwards_reported.1.insert(highest.token)
                    };
                    if first_of_its_kind {
                        file(
                            proven,
                            (Invariant::TokenOrder, scope.clone(), events, message),
                        );
                    }
                }
                if highest.is_none_or(|highest| grant.token > highest.token) {
                    highest = Some(grant);
                }
                // Earlier grants that may still be live for this one: the one
                // reaching furthest by its earliest end, then those whose unknown
                // release this grant need not respect (few: pruned as they end).
                lingering
                    .retain(|earlier: &&Grant| earlier.expires_at_us_max > grant.granted_at_us);
                let overlapped = reach
                    .into_iter()
                    .chain(lingering.iter().copied())
                    .map(|earlier| (earlier, earlier.end_against(grant)))
                    .find(|(_, (end_us, _))| grant.granted_at_us < *end_us);
                if let Some((earlier, (end_us, end_events))) = overlapped {
                    let (invariant, what) = if earlier.owner == grant.owner {
                        (
                            Invariant::TokenOrder,
                            "re-acquired its live grant under a new token",
                        )
                    } else {
                        (Invariant::MutualExclusion, "overlap")
                    };
                    let mut events = vec![earlier.first_event, grant.first_event];
                    events.extend(end_events);
                    let message = format!(
                        "{what}: {} token {} holds [{}, {}) and {} token {} was granted at {} (server us)",
                        earlier.owner,
                        earlier.token,
                        earlier.granted_at_us,
                        end_us,
                        grant.owner,
                        grant.token,
                        grant.granted_at_us
                    );
                    // Real-time proof, whichever the stamps put first: one
                    // decided (acknowledged) before any acquisition that may
                    // have made the other was invoked, and the other
                    // acknowledged before an operation that still found the
                    // first live.
                    let in_real_time = |first: &Grant, second: &Grant| {
                        first.reported_by_true_us < decided_after_us(scope, second)
                            && second.reported_by_true_us < first.live_after_invoke_true_us
                    };
                    // Decision stamps whose overlap real time disproves (one
                    // owner's release acknowledged before the other asked)
                    // are wrong, not the grants: within a millisecond that
                    // is one clock's rounding; further apart it is H, where
                    // the clock rule can see it. Either way round: the
                    // stamps may put second the one real time shows first.
                    let ended_before = |first: &Grant, second: &Grant| {
                        first.owner != second.owner
                            && first.release_acknowledged.is_some_and(|release| {
                                release.acknowledged_true_us < decided_after_us(scope, second)
                            })
                    };
                    let ended_first_in_real_time =
                        ended_before(earlier, grant) || ended_before(grant, earlier);
                    let proven = match self.grant_stamps(scope) {
                        GrantStamps::Decision => !ended_first_in_real_time,
                        GrantStamps::StatementStart => {
                            in_real_time(earlier, grant) || in_real_time(grant, earlier)
                        }
                    };
                    if proven || !ended_first_in_real_time {
                        file(proven, (invariant, scope.clone(), events, message));
                    }
                }
                if grant.released.is_none() && grant.release_unknown.is_some() {
                    lingering.push(grant);
                }
                if reach.is_none_or(|reach| grant.end().0 > reach.end().0) {
                    reach = Some(grant);
                }
                previous = Some(grant);
            }
        }
        self.report.stats.grants += grants_judged;
        self.report.stats.takeovers += takeovers;
        self.report.stats.distinct_holders = holders.len() as u64;
        for (invariant, scope, events, message) in violations {
            self.violation(invariant, &scope, events, vec![], message);
        }
        for (invariant, scope, events, message) in possible {
            self.report.possible.push(Violation {
                invariant,
                scope,
                events: sorted(events),
                rows: Vec::new(),
                message,
            });
        }
    }
}

/// One finding of I1 or I2: the invariant, the scope, the events, the sentence.
type Finding = (Invariant, String, Vec<u64>, String);
