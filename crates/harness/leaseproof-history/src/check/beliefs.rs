//! Belief overlaps (`B`): two workers believing they hold one scope at once,
//! a violation only for a worker configured unfenced.

use super::*;

impl<'h> Checker<'h> {
    /// Belief overlaps, in true time, between different worker incarnations.
    pub(super) fn check_beliefs(&mut self) {
        struct Belief<'a> {
            worker: &'a str,
            incarnation: u64,
            token: u64,
            start_us: i64,
            end_us: i64,
            /// Ended by its incarnation's last event, not a `belief_end`:
            /// seen alive through that instant, which orders nothing else
            /// stamped in the same microsecond.
            ended_unseen: bool,
            start_event: u64,
        }
        let events = &self.history.events;
        // Last true time of each (worker, incarnation): a belief it never
        // closed is certain only while the incarnation is seen alive — after
        // its last event it may have crashed, its belief with it.
        let mut incarnation_last: BTreeMap<(&str, u64), i64> = BTreeMap::new();
        for event in events {
            let last = incarnation_last
                .entry((&event.worker, event.incarnation))
                .or_insert(event.true_time_us);
            *last = (*last).max(event.true_time_us);
        }
        let mut open: BTreeMap<(&str, u64, &str), Belief<'_>> = BTreeMap::new();
        let mut beliefs: BTreeMap<&str, Vec<Belief<'_>>> = BTreeMap::new();
        for event in events {
            match &event.kind {
                EventKind::BeliefStart { scope, token } => {
                    open.entry((&event.worker, event.incarnation, scope))
                        .or_insert(Belief {
                            worker: &event.worker,
                            incarnation: event.incarnation,
                            token: *token,
                            start_us: event.true_time_us,
                            end_us: i64::MAX,
                            ended_unseen: false,
                            start_event: event.index,
                        });
                }
                EventKind::BeliefEnd { scope, .. } => {
                    if let Some(mut belief) =
                        open.remove(&(event.worker.as_str(), event.incarnation, scope.as_str()))
                    {
                        belief.end_us = event.true_time_us;
                        beliefs.entry(scope).or_default().push(belief);
                    }
                }
                EventKind::Invoke { .. } | EventKind::Complete { .. } => {}
            }
        }
        for ((worker, incarnation, scope), mut belief) in open {
            // Through the instant of its last event, and no further.
            belief.end_us = incarnation_last[&(worker, incarnation)].saturating_add(1);
            belief.ended_unseen = true;
            beliefs.entry(scope).or_default().push(belief);
        }

        let mut violations = Vec::new();
        for (scope, mut scope_beliefs) in beliefs {
            scope_beliefs.sort_by_key(|belief| (belief.start_us, belief.start_event));
            let mut active: Vec<&Belief<'_>> = Vec::new();
            for belief in &scope_beliefs {
                active.retain(|other| other.end_us > belief.start_us);
                for other in &active {
                    if (other.worker, other.incarnation) == (belief.worker, belief.incarnation) {
                        continue;
                    }
                    if belief.start_us >= belief.end_us {
                        continue;
                    }
                    // Seen alive last in the very microsecond the other
                    // began: which came first is unknown.
                    if other.ended_unseen && other.end_us - 1 == belief.start_us {
                        continue;
                    }
                    self.report.stats.belief_overlaps += 1;
                    let unfenced = [other.worker, belief.worker]
                        .iter()
                        .any(|worker| self.config.unfenced_workers.contains(*worker));
                    if unfenced {
                        violations.push((
                            scope.to_string(),
                            vec![other.start_event, belief.start_event],
                            format!(
                                "{} (token {}) and {} (token {}) both believed they held it from true time {} us",
                                other.worker, other.token, belief.worker, belief.token, belief.start_us
                            ),
                        ));
                    }
                }
                active.push(belief);
            }
        }
        for (scope, events, message) in violations {
            self.violation(Invariant::BeliefOverlap, &scope, events, vec![], message);
        }
    }
}
