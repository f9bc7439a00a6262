//! I2 token order: the grants the ok outcomes report, and the rules of a
//! single grant (its owner, a renewal keeps its token, tokens only grow).

use super::*;

impl<'h> Checker<'h> {
    /// Builds [`Grant`]s from ok acquire/renew/release outcomes; checks the I2
    /// rules that concern a single grant.
    pub(super) fn collect_grants(&mut self) {
        let mut violations = Vec::new();
        let mut renewals = 0;
        // In the order the outcomes arrived, not by op id: a file's op ids
        // need only be unique, and grants are built first come, first kept.
        let mut records: Vec<&OpRecord<'h>> = self.ops.values().collect();
        records.sort_by_key(|record| record.completion.map_or(u64::MAX, |(event, _)| event));
        // Per (scope, owner, token): the starts ok renewals reported, the
        // earliest invoke of a renewal whose outcome is not known, the
        // earliest server time an ok release ended the grant, and the
        // earliest true time one answered without a server time (`unlocked`)
        // was acknowledged.
        let mut renewal_starts: BTreeMap<(&str, &str, u64, i64), i64> = BTreeMap::new();
        let mut unknown_renewal_invoked_min: BTreeMap<(&str, &str, u64), i64> = BTreeMap::new();
        let mut released_at_min: BTreeMap<(&str, &str, u64), i64> = BTreeMap::new();
        let mut unlocked_acknowledged_min: BTreeMap<(&str, &str, u64), i64> = BTreeMap::new();
        for record in &records {
            let outcome = record.completion.map(|(_, outcome)| outcome);
            match (record.op, outcome) {
                (
                    Op::Renew {
                        scope,
                        owner,
                        token,
                        ..
                    },
                    Some(Outcome::Ok {
                        result: OpResult::Lease { granted_at_us, .. },
                    }),
                ) => earliest(
                    &mut renewal_starts,
                    (scope.as_str(), owner.as_str(), *token, *granted_at_us),
                    record.invoke_true_us,
                ),
                (Op::Renew { .. }, Some(Outcome::Fail { .. } | Outcome::Ok { .. })) => {}
                (
                    Op::Renew {
                        scope,
                        owner,
                        token,
                        ..
                    },
                    _,
                ) => earliest(
                    &mut unknown_renewal_invoked_min,
                    (scope.as_str(), owner.as_str(), *token),
                    record.invoke_true_us,
                ),
                (
                    Op::Release {
                        scope,
                        owner,
                        token,
                    },
                    Some(Outcome::Ok { result }),
                ) => {
                    let key = (scope.as_str(), owner.as_str(), *token);
                    match result {
                        OpResult::Released { released_at_us } => {
                            earliest(&mut released_at_min, key, *released_at_us);
                        }
                        _ => earliest(
                            &mut unlocked_acknowledged_min,
                            key,
                            record.acknowledged_by_true_us(),
                        ),
                    }
                }
                _ => {}
            }
        }
        for record in records {
            let Some((complete_event, Outcome::Ok { result })) = record.completion else {
                continue;
            };
            let reported_true_us = record.acknowledged_by_true_us();
            let (scope, requested_owner, ttl_us, renewed_token) = match record.op {
                Op::Acquire {
                    scope,
                    owner,
                    ttl_us,
                } => (scope, owner, *ttl_us, None),
                Op::Renew {
                    scope,
                    owner,
                    token,
                    ttl_us,
                } => (scope, owner, *ttl_us, Some(*token)),
                Op::Release { .. } | Op::Commit { .. } | Op::Write { .. } => continue,
            };
            let OpResult::Lease {
                token,
                owner,
                granted_at_us,
                expires_at_us,
            } = result
            else {
                continue;
            };
            let events = record.events();
            if owner != requested_owner {
                violations.push((
                    Invariant::TokenOrder,
                    scope.clone(),
                    events.clone(),
                    format!("{requested_owner} was answered with {owner}'s row (token {token})"),
                ));
            }
            if let Some(renewed_token) = renewed_token {
                if renewed_token != *token {
                    violations.push((
                        Invariant::TokenOrder,
                        scope.clone(),
                        events.clone(),
                        format!("{owner} renewed token {renewed_token} but got token {token}"),
                    ));
                }
            }
            let scope_grants = self.grants.entry(scope.clone()).or_default();
            match scope_grants.get_mut(token) {
                None => {
                    if renewed_token.is_some() {
                        renewals += 1;
                    }
                    scope_grants.insert(
                        *token,
                        Grant {
                            token: *token,
                            owner: owner.clone(),
                            granted_at_us: *granted_at_us,
                            first_event: complete_event,
                            expires_at_us_max: *expires_at_us,
                            expires_event: complete_event,
                            revived_until_us: i64::MIN,
                            revived_from_us: i64::MAX,
                            live_at_us_max: expires_at_us - ttl_us,
                            reported_by_true_us: reported_true_us,
                            stamped_by_true_us: renewed_token.is_none().then_some(reported_true_us),
                            released: None,
                            release_acknowledged: None,
                            reported_live_by_true_us_max: reported_true_us,
                            release_unknown: None,
                            live_after_invoke_true_us: record.invoke_true_us,
                        },
                    );
                }
                Some(grant) => {
                    if grant.owner != *owner {
                        violations.push((
                            Invariant::TokenOrder,
                            scope.clone(),
                            vec![grant.first_event, complete_event],
                            format!("token {token} granted to both {} and {owner}", grant.owner),
                        ));
                        // Not the same grant: merging them would stretch the
                        // first over the gap between the two, and a third
                        // owner's grant inside the gap would read as an overlap.
                        continue;
                    }
                    grant.reported_live_by_true_us_max =
                        grant.reported_live_by_true_us_max.max(reported_true_us);
                    // A renewal extends its grant: whether it reports the
                    // grant's start or its own time as `granted_at` is the
                    // design's choice (both are seen), never a second grant.
                    // So does the owner's re-acquisition while the grant
                    // lived: stamped before its expiry (an idempotent upsert
                    // may restamp its owner's start, as a renewal may), or at
                    // it with a start a renewal of the token stamped (one an
                    // ok renewal reported, or any, after a renewal whose
                    // outcome is not known). A start after the grant's
                    // expiry, or after it was released, is a new grant: the
                    // increment was forgotten.
                    let key = (scope.as_str(), owner.as_str(), *token);
                    let invoked_before =
                        |invoked_true_us: &i64| may_precede(*invoked_true_us, reported_true_us);
                    let stamped_by_a_renewal = renewal_starts
                        .get(&(key.0, key.1, key.2, *granted_at_us))
                        .is_some_and(invoked_before)
                        || unknown_renewal_invoked_min
                            .get(&key)
                            .is_some_and(invoked_before);
                    let not_released = released_at_min
                        .get(&key)
                        .is_none_or(|released_at_us| granted_at_us < released_at_us)
                        && unlocked_acknowledged_min
                            .get(&key)
                            .is_none_or(|acknowledged_us| {
                                may_precede(record.invoke_true_us, *acknowledged_us)
                            });
                    // Grants run on [granted_at, expires_at).
                    let restamped = *granted_at_us < grant.expires_at_us_max;
                    let stamped_at_its_end =
                        stamped_by_a_renewal && *granted_at_us == grant.expires_at_us_max;
                    let extends = renewed_token.is_some()
                        || (not_released && (restamped || stamped_at_its_end));
                    if !extends && grant.granted_at_us != *granted_at_us {
                        violations.push((
                            Invariant::TokenOrder,
                            scope.clone(),
                            vec![grant.first_event, complete_event],
                            format!(
                                "token {token} granted twice: at {} and at {granted_at_us} (server us)",
                                grant.granted_at_us
                            ),
                        ));
                        continue; // a second grant, not an extension of the first
                    }
                    renewals += 1;
                    // A renewal decided after its grant had expired by the
                    // server's own stamps (its `expires_at - ttl` is when it
                    // was decided, or a lower bound of it) revives a lease a
                    // rival may have held in the gap between: it does not extend the
                    // grant over the gap, and what it revived is not judged
                    // against other grants (whether a revival is a new grant
                    // is the design's to say, not the evidence's).
                    if extends && expires_at_us - ttl_us > grant.expires_at_us_max {
                        grant.revived_until_us = grant.revived_until_us.max(*expires_at_us);
                        grant.revived_from_us = grant.revived_from_us.min(expires_at_us - ttl_us);
                        continue;
                    }
                    if *expires_at_us > grant.expires_at_us_max {
                        grant.expires_at_us_max = *expires_at_us;
                        grant.expires_event = complete_event;
                    }
                    grant.live_at_us_max = grant.live_at_us_max.max(expires_at_us - ttl_us);
                    grant.reported_by_true_us = grant.reported_by_true_us.min(reported_true_us);
                    grant.live_after_invoke_true_us =
                        grant.live_after_invoke_true_us.max(record.invoke_true_us);
                }
            }
        }
        self.report.stats.renewals = renewals;

        // Releases cut a grant short; an unknown one may have.
        for record in self.ops.values() {
            let Op::Release {
                scope,
                owner,
                token,
            } = record.op
            else {
                continue;
            };
            let Some(grant) = self
                .grants
                .get_mut(scope)
                .and_then(|grants| grants.get_mut(token))
            else {
                continue;
            };
            match record.completion {
                Some((
                    complete_event,
                    Outcome::Ok {
                        result: OpResult::Released { released_at_us },
                    },
                )) => {
                    if grant.owner != *owner {
                        violations.push((
                            Invariant::TokenOrder,
                            scope.clone(),
                            vec![grant.first_event, complete_event],
                            format!(
                                "{owner} released token {token}, which was granted to {}",
                                grant.owner
                            ),
                        ));
                    }
                    let earliest = grant.released.map_or(i64::MAX, |(at_us, _)| at_us);
                    if *released_at_us < earliest {
                        grant.released = Some((*released_at_us, complete_event));
                    }
                    let acknowledged_true_us = record.acknowledged_by_true_us();
                    if grant.owner == *owner
                        && grant
                            .release_acknowledged
                            .is_none_or(|first| acknowledged_true_us < first.acknowledged_true_us)
                    {
                        grant.release_acknowledged = Some(ReleaseAcknowledged {
                            invoked_true_us: record.invoke_true_us,
                            acknowledged_true_us,
                            event: complete_event,
                        });
                    }
                    // A release that released before the grant's expiry
                    // found it live (one stamped at or after the expiry
                    // released a grant already over, which shows nothing).
                    if *released_at_us < grant.expires_at_us_max {
                        grant.live_after_invoke_true_us =
                            grant.live_after_invoke_true_us.max(record.invoke_true_us);
                    }
                }
                // A lease's release answered without a server time (as a
                // lock's is: `unlocked`) took effect at a time unknown: like
                // one whose outcome is unknown, it may have ended the grant
                // at any server time after it was last seen live.
                None
                | Some((_, Outcome::Unknown { .. }))
                | Some((
                    _,
                    Outcome::Ok {
                        result: OpResult::Unlocked {},
                    },
                )) if grant.owner == *owner => {
                    let invoked = (record.invoke_true_us, record.invoke_event);
                    if grant
                        .release_unknown
                        .is_none_or(|earliest| invoked < earliest)
                    {
                        grant.release_unknown = Some(invoked);
                    }
                }
                _ => {}
            }
        }
        for (invariant, scope, events, message) in violations {
            self.violation(invariant, &scope, events, vec![], message);
        }
    }
}

/// Keeps the earliest of the times seen for `key`.
fn earliest<K: Ord>(map: &mut BTreeMap<K, i64>, key: K, at: i64) {
    let earliest = map.entry(key).or_insert(i64::MAX);
    *earliest = (*earliest).min(at);
}
