//! I5 bounded takeover: a dead holder's scope goes to a waiting rival within
//! the bound, where true time maps onto server time.

use super::*;

impl<'h> Checker<'h> {
    /// I5's bounded part: dead holders' grants against the next grant of their scope.
    pub(super) fn check_takeovers(&mut self, bound: Option<&TakeoverBound>) {
        type Incarnation<'a> = (&'a str, u64);
        let events = &self.history.events;
        let event_at = |index: u64| events.get(index as usize);
        // Which incarnation each owner is, from the events that invoked its ops.
        let mut incarnation_of: BTreeMap<&str, Incarnation<'_>> = BTreeMap::new();
        for record in self.ops.values() {
            if let Some(event) = event_at(record.invoke_event) {
                incarnation_of
                    .entry(record.op.owner())
                    .or_insert((&event.worker, event.incarnation));
            }
        }
        // Each incarnation's events in order, and each worker's last incarnation.
        let mut events_of: BTreeMap<Incarnation<'_>, Vec<u64>> = BTreeMap::new();
        let mut incarnation_max: BTreeMap<&str, u64> = BTreeMap::new();
        for event in events {
            events_of
                .entry((&event.worker, event.incarnation))
                .or_default()
                .push(event.index);
            let highest = incarnation_max.entry(&event.worker).or_insert(0);
            *highest = (*highest).max(event.incarnation);
        }
        // Who may have extended a grant no ok outcome shows (as in I3).
        let mut extendable: BTreeSet<(&str, &str, Option<u64>)> = BTreeSet::new();
        for record in self.ops.values().filter(|record| record.is_unknown()) {
            match record.op {
                Op::Acquire { scope, owner, .. } => {
                    extendable.insert((scope, owner, None));
                }
                Op::Renew {
                    scope,
                    owner,
                    token,
                    ..
                } => {
                    extendable.insert((scope, owner, Some(*token)));
                }
                Op::Release { .. } | Op::Commit { .. } | Op::Write { .. } => {}
            }
        }
        let ops = &self.ops;
        // An event that leaves its worker in the acquisition loop for `scope`:
        // an acquisition invoked that did not succeed, or one that completed
        // without a grant. An acquisition that was granted is not waiting,
        // even while its reply is on the way: its worker waits for a reply,
        // not for the scope, and will not retry (the model's delayed grant
        // replies found this: a rival whose grant of long ago was still being
        // delivered counted as waiting).
        let acquiring = |index: u64, scope: &str| -> bool {
            let Some(event) = event_at(index) else {
                return false;
            };
            let op_id = match &event.kind {
                EventKind::Invoke { op_id, .. } => {
                    let granted = ops.get(op_id).is_some_and(|record| {
                        matches!(record.completion, Some((_, Outcome::Ok { .. })))
                    });
                    if granted {
                        return false;
                    }
                    op_id
                }
                EventKind::Complete { op_id, outcome } => {
                    if matches!(outcome, Outcome::Ok { .. }) {
                        return false;
                    }
                    op_id
                }
                EventKind::BeliefStart { .. } | EventKind::BeliefEnd { .. } => return false,
            };
            ops.get(op_id).is_some_and(
                |record| matches!(record.op, Op::Acquire { scope: wanted, .. } if wanted == scope),
            )
        };

        let mut delays_us = Vec::new();
        let mut violations = Vec::new();
        for (scope, scope_grants) in &self.grants {
            for grant in scope_grants.values() {
                if grant.released.is_some()
                    || extendable.contains(&(scope, &grant.owner, None))
                    || extendable.contains(&(scope, &grant.owner, Some(grant.token)))
                {
                    continue;
                }
                let Some(&holder) = incarnation_of.get(grant.owner.as_str()) else {
                    continue;
                };
                let holder_events = &events_of[&holder];
                let last_event = *holder_events.last().expect("an owner has events");
                let restarted = incarnation_max[holder.0] > holder.1;
                let died_mid_operation = event_at(last_event).is_some_and(|event| {
                    matches!(&event.kind, EventKind::Invoke { op_id, .. }
                        if ops.get(op_id).is_some_and(|record| record.completion.is_none()))
                });
                let silent_after_grant = last_event <= grant.expires_event;
                if !(restarted || died_mid_operation || silent_after_grant) {
                    continue;
                }
                // The next grant must be the next token: a gap is a grant no ok
                // outcome reported, which may have held the scope meanwhile.
                let Some(next) = scope_grants.get(&(grant.token + 1)) else {
                    continue;
                };
                let expired_at_us = grant.expires_at_us_max;
                let delay_us = next.granted_at_us - expired_at_us;
                if delay_us < 0 {
                    // An overlap: I1's business.
                    continue;
                }
                delays_us.push(delay_us);
                let Some(bound) = bound else {
                    continue;
                };
                if delay_us <= bound.slack_us {
                    continue;
                }
                let window_end_us = expired_at_us + bound.slack_us;
                let server_us = |index: u64| {
                    event_at(index).map_or(i64::MAX, |event| {
                        event.true_time_us + bound.server_minus_true_us
                    })
                };
                let waiting_rival = events_of.iter().find_map(|(rival, rival_events)| {
                    if *rival == holder {
                        return None;
                    }
                    let split =
                        rival_events.partition_point(|index| server_us(*index) <= expired_at_us);
                    let at_expiry = *rival_events.get(split.checked_sub(1)?)?;
                    let window_split =
                        rival_events.partition_point(|index| server_us(*index) <= window_end_us);
                    let alive_after = *rival_events.get(window_split)?;
                    let waited = std::iter::once(at_expiry)
                        .chain(rival_events[split..window_split].iter().copied())
                        .all(|index| acquiring(index, scope));
                    waited.then_some((*rival, at_expiry, alive_after))
                });
                if let Some(((rival_worker, rival_incarnation), at_expiry, alive_after)) =
                    waiting_rival
                {
                    violations.push((
                        scope.clone(),
                        vec![grant.expires_event, next.first_event, at_expiry, alive_after],
                        format!(
                            "{} (token {}) died holding a grant that expired at {}; the next grant (token {} to {}) came at {}, {} us later, \
                             beyond the bound of {} us, while {rival_worker}#{rival_incarnation} was waiting for the scope (server us)",
                            grant.owner, grant.token, expired_at_us, next.token, next.owner, next.granted_at_us,
                            delay_us, bound.slack_us
                        ),
                    ));
                }
            }
        }
        delays_us.sort_unstable();
        self.report.stats.dead_holder_takeover_delays_us = delays_us;
        for (scope, events, message) in violations {
            self.violation(Invariant::BoundedTakeover, &scope, events, vec![], message);
        }
    }
}
