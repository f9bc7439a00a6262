//! I3 fenced writes: every guarded row lies inside its grant, under a granted
//! token, in token order (by `seq`, and by commit time where rows carry it),
//! and cycles never interleave.

use super::server_clock::STAMP_ROUNDING_US;
use super::*;

impl<'h> Checker<'h> {
    /// I3: every guarded row, grouped by cycle, against the grants and `seq`
    /// order, then in commit order; each rule one function below.
    pub(super) fn check_guarded_rows(&mut self) {
        let mut violations: Vec<PendingViolation> = Vec::new();
        let mut possible: Vec<PendingViolation> = Vec::new();
        let commits = self.commits_by_cycle();
        let cycles = cycles_of(&self.history.guarded_rows);
        let bounds: BTreeMap<&str, GrantBounds<'_>> = self
            .grants
            .iter()
            .map(|(scope, grants)| (scope.as_str(), GrantBounds::new(grants)))
            .collect();
        let unknown = self.unknown_grants();
        let lock_tokens = self.lock_tokens();
        for ((owner, cycle_id), rows) in &cycles {
            let cycle = Cycle {
                owner,
                cycle_id: *cycle_id,
                rows,
                commit: commits.get(&(owner.as_str(), *cycle_id)).copied(),
            };
            violations.extend(cycle.consistency());
            let scope_grants = self.grants.get(&rows[0].scope);
            let grant = scope_grants.and_then(|grants| grants.get(&rows[0].token));
            // A lock that reports no server times: its rows have no window in
            // server time to lie in; only their order (seq, commit times)
            // is judged below.
            if grant.is_none()
                && lock_tokens.contains(&(rows[0].scope.as_str(), owner.as_str(), rows[0].token))
            {
                continue;
            }
            // A worker declared unfenced commits without a fence: its rows'
            // own times are the evidence.
            let unfenced = cycle.commit.is_some_and(|record| {
                let worker = &self.history.events[record.invoke_event as usize].worker;
                self.config.unfenced_workers.contains(worker)
            });
            let scope = rows[0].scope.as_str();
            let judged = Judged {
                grant_stamps: self.grant_stamps(scope),
                unfenced,
                clock_contradicted: self.clock_contradicted.contains(scope),
            };
            let (outside, events) = cycle.within_its_grant(scope_grants, &unknown, judged);
            violations.extend(outside);
            // Bounds in server time: no earlier than the latest grant with a
            // token <= T, before the earliest grant with a larger token.
            let around = bounds
                .get(rows[0].scope.as_str())
                .map_or((None, None), |bounds| bounds.around(rows[0].token));
            let (certain, maybe) = cycle.between_rival_grants(around, &events, judged);
            violations.extend(certain);
            possible.extend(maybe);
        }
        violations.extend(seq_order_violations(&self.history.guarded_rows));
        violations.extend(commit_order_violations(&self.history.guarded_rows));
        let rows = &self.history.guarded_rows;
        let untimed = rows
            .iter()
            .filter(|row| row.committed_at_us.is_none())
            .count();
        if untimed > 0 {
            self.report.not_judged.push(format!(
                "I3 in commit order: {untimed} of {} guarded rows carry no commit time (on \
                 PostgreSQL, track_commit_timestamp = on); a write of theirs that began before \
                 a takeover and committed after it cannot be seen",
                rows.len()
            ));
        }
        for (invariant, scope, events, rows, message) in violations {
            self.violation(invariant, &scope, events, rows, message);
        }
        for (invariant, scope, events, rows, message) in possible {
            self.report.possible.push(Violation {
                invariant,
                scope,
                events: sorted(events),
                rows: sorted(rows),
                message,
            });
        }
    }

    /// Grants that may exist though no ok outcome reported them: unknown
    /// acquisitions and renewals, by their invoke times.
    fn unknown_grants(&self) -> UnknownGrants<'h> {
        // Who may hold a grant no ok outcome reported: owners with an unknown
        // acquire, from the earliest invoke (true time) of one.
        let mut acquires: BTreeMap<(&'h str, &'h str), i64> = BTreeMap::new();
        // Renewals whose outcome is unknown may have extended their grant.
        let mut renewals: BTreeMap<(&'h str, &'h str, u64), i64> = BTreeMap::new();
        for record in self.ops.values().filter(|record| record.is_unknown()) {
            let invoked_true_us = record.invoke_true_us;
            match record.op {
                Op::Acquire { scope, owner, .. } => {
                    let earliest = acquires
                        .entry((scope.as_str(), owner.as_str()))
                        .or_insert(invoked_true_us);
                    *earliest = (*earliest).min(invoked_true_us);
                }
                Op::Renew {
                    scope,
                    owner,
                    token,
                    ..
                } => {
                    let earliest = renewals
                        .entry((scope.as_str(), owner.as_str(), *token))
                        .or_insert(invoked_true_us);
                    *earliest = (*earliest).min(invoked_true_us);
                }
                Op::Release { .. } | Op::Commit { .. } | Op::Write { .. } => {}
            }
        }
        UnknownGrants { acquires, renewals }
    }

    /// `(scope, owner, token)` of every lock granted with a token and no
    /// server times.
    fn lock_tokens(&self) -> BTreeSet<(&'h str, &'h str, u64)> {
        self.ops
            .values()
            .filter_map(|record| match (record.op, record.completion) {
                (
                    Op::Acquire { scope, owner, .. },
                    Some((
                        _,
                        Outcome::Ok {
                            result:
                                OpResult::Lock {
                                    token: Some(token), ..
                                },
                        },
                    )),
                ) => Some((scope.as_str(), owner.as_str(), *token)),
                _ => None,
            })
            .collect()
    }
}

/// What unknown outcomes may have granted or extended.
struct UnknownGrants<'h> {
    /// Owners with an unknown acquire, from the earliest invoke (true time) of one.
    acquires: BTreeMap<(&'h str, &'h str), i64>,
    /// Renewals whose outcome is unknown may have extended their grant.
    renewals: BTreeMap<(&'h str, &'h str, u64), i64>,
}

/// One cycle's rows and its commit, judged against the grants.
struct Cycle<'c, 'h> {
    owner: &'c str,
    cycle_id: u64,
    rows: &'c [&'h GuardedRow],
    commit: Option<&'c OpRecord<'h>>,
}

impl<'c, 'h> Cycle<'c, 'h> {
    fn scope(&self) -> &'h String {
        &self.rows[0].scope
    }

    fn token(&self) -> u64 {
        self.rows[0].token
    }

    /// The commit's fence time on the store's clock, when it reported one.
    fn fenced_at_us(&self) -> Option<i64> {
        match self.commit?.completion? {
            (
                _,
                Outcome::Ok {
                    result: OpResult::Committed { committed_at_us },
                },
            ) => *committed_at_us,
            _ => None,
        }
    }

    fn commit_events(&self) -> Vec<u64> {
        self.commit.map_or(vec![], |record| record.events())
    }

    /// Unknown operations count only if they may have reached the server
    /// before the write: a write acknowledged ok cannot be excused by an
    /// operation invoked after the acknowledgement.
    fn acknowledged_by_true_us(&self) -> i64 {
        self.commit
            .map_or(i64::MAX, |record| record.acknowledged_by_true_us())
    }

    fn seqs(rows: &[&GuardedRow]) -> Vec<u64> {
        rows.iter().map(|row| row.seq).collect()
    }

    /// An I3 finding of this cycle: `events` and `rows` prove it, `text` says it.
    fn finding(&self, events: Vec<u64>, rows: &[&GuardedRow], text: String) -> PendingViolation {
        (
            Invariant::FencedWrites,
            self.scope().clone(),
            events,
            Self::seqs(rows),
            text,
        )
    }

    /// A finding if any of this cycle's rows was written at a time (server
    /// us) `beyond` accepts: those rows, `events` and `event` prove it;
    /// `text` says it of the first such write time.
    fn rows_beyond(
        &self,
        events: &[u64],
        event: u64,
        beyond: impl Fn(i64) -> bool,
        text: impl FnOnce(i64) -> String,
    ) -> Option<PendingViolation> {
        let rows: Vec<&GuardedRow> = self
            .rows
            .iter()
            .copied()
            .filter(|row| beyond(row.written_at_us))
            .collect();
        let first_written_at_us = rows.first()?.written_at_us;
        let events = events.iter().copied().chain([event]).collect();
        Some(self.finding(events, &rows, text(first_written_at_us)))
    }

    /// One scope and one token for all rows, and the commit that made them
    /// under the same.
    fn consistency(&self) -> Vec<PendingViolation> {
        let (owner, cycle_id, rows, commit) = (self.owner, self.cycle_id, self.rows, self.commit);
        let (scope, token) = (self.scope(), self.token());
        let commit_events = self.commit_events();
        let mut violations = Vec::new();
        if rows
            .iter()
            .any(|row| row.scope != *scope || row.token != token)
        {
            violations.push(self.finding(
                commit_events.clone(),
                rows,
                format!("cycle {cycle_id} of {owner} has rows under several scopes or tokens"),
            ));
        }
        match commit.map(|record| record.op) {
            None => violations.push(self.finding(
                vec![],
                rows,
                format!("rows of cycle {cycle_id} of {owner} (token {token}) come from no recorded commit"),
            )),
            Some(Op::Commit { scope: commit_scope, token: commit_token, .. })
                if commit_scope != scope || *commit_token != token =>
            {
                violations.push(self.finding(
                    commit_events.clone(),
                    rows,
                    format!(
                        "cycle {cycle_id} of {owner} committed under {commit_scope} token {commit_token} \
                         but its rows carry {scope} token {token}"
                    ),
                ));
            }
            Some(_) => {}
        }

        violations
    }

    /// The rows lie inside their own grant: granted to this owner, before
    /// its end, or under a token an unknown acquisition may have granted.
    /// Returns the violations and the evidence events of the cycle (its
    /// commit's, and the grant's first event when another owner holds it).
    fn within_its_grant(
        &self,
        scope_grants: Option<&BTreeMap<u64, Grant>>,
        unknown: &UnknownGrants<'_>,
        Judged {
            grant_stamps,
            unfenced,
            ..
        }: Judged,
    ) -> (Vec<PendingViolation>, Vec<u64>) {
        let (owner, cycle_id, rows) = (self.owner, self.cycle_id, self.rows);
        let (scope, token) = (self.scope(), self.token());
        let acknowledged_by_true_us = self.acknowledged_by_true_us();
        let unknown_acquire_before = unknown
            .acquires
            .get(&(scope.as_str(), owner))
            .is_some_and(|invoked_true_us| may_precede(*invoked_true_us, acknowledged_by_true_us));
        let mut violations = Vec::new();
        let grant = scope_grants.and_then(|grants| grants.get(&token));
        let mut events = self.commit_events();
        match grant {
            Some(grant) if grant.owner != *owner => {
                events.push(grant.first_event);
                violations.push(self.finding(
                    events.clone(),
                    rows,
                    format!("{owner} wrote cycle {cycle_id} under token {token}, which was granted to {}", grant.owner),
                ));
            }
            Some(grant) => {
                // A write must also land while its own grant is current:
                // after expiry (or release) it is not, even if no rival has
                // taken over yet. Rows stamped after the end prove nothing
                // alone — a fence that proved the grant current and holds
                // its row lock to the commit keeps any rival out however
                // long the work runs — so the proof is the fence's own
                // time: strictly after the end, a correct fence refuses.
                // Unknown renewals or re-acquisitions may have extended the
                // grant, and a revival makes its row live again until its
                // end: then that is the end, or it is unknown.
                let extendable = unknown_acquire_before
                    || unknown
                        .renewals
                        .get(&(scope.as_str(), owner, token))
                        .is_some_and(|invoked_true_us| {
                            may_precede(*invoked_true_us, acknowledged_by_true_us)
                        });
                // A release stamped with its statement's start may have
                // been decided later, queued behind this very commit: only
                // a decision stamp ends the grant.
                let released_at_us = match (grant.released, grant_stamps) {
                    (Some((released_at_us, _)), GrantStamps::Decision) => {
                        Some(released_at_us.min(grant.expires_at_us_max))
                    }
                    _ => None,
                };
                let end_us = released_at_us.unwrap_or(grant.expires_at_us_max);
                // Not current after its end — except while a revival made
                // its row live again: from the revival's decision (no
                // earlier than its stamp) to the revival's own end.
                let not_current = |at_us: i64| {
                    at_us > end_us
                        && (at_us < grant.revived_from_us || at_us > grant.revived_until_us)
                };
                // What proves a row after the end stale: a fence decided
                // after it, or no fence at all. (Not a release alone: a
                // fence whose row lock blocks takeovers but not its own
                // holder's release lets the release through mid-commit.)
                // A worker declared unfenced took no fence, whatever time its
                // commit reported as one.
                let late_fence = match self.fenced_at_us() {
                    _ if unfenced => Some(", unfenced,".to_owned()),
                    Some(fenced_at_us) if not_current(fenced_at_us) => {
                        Some(format!(", fenced at {fenced_at_us},"))
                    }
                    _ => None,
                };
                // Real time ends the grant whatever the stamps mean: a
                // release acknowledged before the commit was even sent was
                // decided before the commit's transaction began — unless an
                // acquisition or renewal that may have been decided after
                // the release made the grant live again.
                let commit_invoked_true_us = self.commit.map(|record| record.invoke_true_us);
                let released_before_sent = grant.release_acknowledged.filter(|release| {
                    commit_invoked_true_us
                        .is_some_and(|invoked_us| release.acknowledged_true_us < invoked_us)
                        && grant.reported_live_by_true_us_max < release.invoked_true_us
                });
                if let (false, Some(release)) = (extendable, released_before_sent) {
                    let acknowledged_true_us = release.acknowledged_true_us;
                    let mut events = events.clone();
                    events.push(release.event);
                    violations.push(self.finding(
                        events,
                        rows,
                        format!(
                            "{owner} wrote cycle {cycle_id} under token {token} after releasing it: the release was acknowledged at {acknowledged_true_us} and the commit sent at {} (true us), and nothing renewed the grant since",
                            commit_invoked_true_us.unwrap_or_default()
                        ),
                    ));
                } else if let (false, Some(late_fence)) = (extendable, late_fence) {
                    violations.extend(self.rows_beyond(
                        &events,
                        grant.expires_event,
                        // A fence out of the grant stales every row after the
                        // end; without a fence a row is judged by its own stamp.
                        |written_at_us| {
                            if unfenced {
                                not_current(written_at_us)
                            } else {
                                written_at_us > end_us
                            }
                        },
                        |written_at_us| format!(
                            "{owner} wrote cycle {cycle_id} under token {token} at {written_at_us}{late_fence} after the grant ended at {end_us}{} (server us)",
                            if grant.revived_from_us < i64::MAX {
                                format!(" (a renewal revived it from {} to {})", grant.revived_from_us, grant.revived_until_us)
                            } else {
                                String::new()
                            }
                        ),
                    ));
                }
            }
            None => {
                // No ok outcome reported this token: only an unknown
                // acquisition of this owner's, which may have come first,
                // could have granted it. (Nothing bounds the token such an
                // acquisition got: a store's counter need not go up by one,
                // nor start at one.)
                let maybe_granted = unknown_acquire_before;
                if !maybe_granted {
                    violations.push(self.finding(
                        events.clone(),
                        rows,
                        format!("{owner} wrote cycle {cycle_id} under token {token}, which was never granted"),
                    ));
                }
            }
        }
        (violations, events)
    }

    /// Bounds in server time: no earlier than the latest grant with a token
    /// <= T (`lower`), before the earliest grant with a larger one (`upper`).
    /// Returns the proven violations and the possible ones.
    fn between_rival_grants(
        &self,
        (lower, upper): (Option<&Grant>, Option<&Grant>),
        events: &[u64],
        Judged {
            grant_stamps,
            unfenced,
            clock_contradicted,
        }: Judged,
    ) -> (Vec<PendingViolation>, Vec<PendingViolation>) {
        let (owner, cycle_id, commit) = (self.owner, self.cycle_id, self.commit);
        let token = self.token();
        let (mut violations, mut possible) = (Vec::new(), Vec::new());
        // A row's own stamp may precede its grant (it may carry the start
        // of a transaction opened before the grant), and a renewal may stamp
        // a grant later than it began. A fence or a commit stamped more than
        // the stamps' rounding before the statement that made the grant
        // began may not: the fence ran, or the row was there, before the
        // grant existed.
        let stamped_by_its_acquisition = |lower: &&Grant| lower.stamped_by_true_us.is_some();
        if let (false, Some(lower)) = (clock_contradicted, lower.filter(stamped_by_its_acquisition))
        {
            let before = |at_us: i64| at_us.saturating_add(STAMP_ROUNDING_US) < lower.granted_at_us;
            let fenced_before = self
                .fenced_at_us()
                .filter(|fenced_at_us| !unfenced && before(*fenced_at_us));
            let rows: Vec<&GuardedRow> = self
                .rows
                .iter()
                .copied()
                .filter(|row| fenced_before.is_some() || row.committed_at_us.is_some_and(before))
                .collect();
            let what = match (fenced_before, rows.first()) {
                (Some(fenced_at_us), _) => Some(format!("was fenced at {fenced_at_us}")),
                (None, Some(first)) => Some(format!(
                    "committed at {}",
                    first.committed_at_us.unwrap_or_default()
                )),
                (None, None) => None,
            };
            if let Some(what) = what {
                let events = events.iter().copied().chain([lower.first_event]).collect();
                violations.push(self.finding(
                    events,
                    &rows,
                    format!(
                        "{owner}'s cycle {cycle_id} (token {token}) {what} before token {} was granted at {} (server us)",
                        lower.token, lower.granted_at_us
                    ),
                ));
            }
        }
        if let Some(upper) = upper {
            // A grant stamped with its statement's start may have been
            // decided long after its stamp (queued behind a row lock):
            // only real time proves the write came after it — the rival's
            // grant acknowledged before this commit was even sent.
            let commit_invoked_us = commit.map_or(i64::MIN, |record| record.invoke_true_us);
            let after_in_real_time = upper.reported_by_true_us < commit_invoked_us;
            // Decision stamps place the rival's grant on the store's clock,
            // and a fence after it cannot have found this grant current.
            // A row's own stamp may be later than its fence (any instant
            // of its transaction up to the insert): alone it proves the
            // write late only for a worker declared unfenced; a fence
            // stamped before the rival's grant kept the rival out.
            let (proven_by_stamps, fenced_before) = match (grant_stamps, self.fenced_at_us()) {
                // No fence was taken: the time reported as one keeps nobody out.
                (GrantStamps::Decision, _) if unfenced => (true, false),
                (GrantStamps::Decision, Some(fenced_at_us)) => (
                    fenced_at_us > upper.granted_at_us,
                    fenced_at_us <= upper.granted_at_us,
                ),
                (GrantStamps::Decision, None) => (unfenced, false),
                (GrantStamps::StatementStart, _) => (false, false),
            };
            let proven = after_in_real_time || proven_by_stamps;
            // Proven in real time, every row of the commit is stale: they
            // were written after it was sent, whatever their stamps say.
            let stale = self.rows_beyond(
                events,
                upper.first_event,
                |written_at_us| after_in_real_time || written_at_us > upper.granted_at_us,
                |written_at_us| format!(
                    "stale write: {owner} wrote cycle {cycle_id} under token {token} at {written_at_us}, after {} got token {} at {} (server us){}",
                    upper.owner, upper.token, upper.granted_at_us,
                    if after_in_real_time { "; its commit was sent after that grant was answered" } else { "" }
                ),
            );
            match stale {
                Some(finding) if proven => violations.push(finding),
                Some(_) if fenced_before => {}
                Some(mut finding) => {
                    let because = match grant_stamps {
                        GrantStamps::StatementStart => super::unproven_because(clock_contradicted),
                        GrantStamps::Decision => {
                            "a row's stamp may be later than its fence, none was reported,"
                        }
                    };
                    finding.4.push_str(&format!(
                        "; {because} and real-time order does not prove it"
                    ));
                    possible.push(finding);
                }
                None => {}
            }
        }
        (violations, possible)
    }
}

/// How a cycle's scope is judged: what its grant stamps mean, whether its
/// worker is declared unfenced.
#[derive(Clone, Copy)]
struct Judged {
    grant_stamps: GrantStamps,
    unfenced: bool,
    /// The scope's server times contradict real time: no stamp proves anything.
    clock_contradicted: bool,
}

/// An I3 finding in `scope` that the rows `seqs` prove by themselves.
fn rows_finding(scope: &str, seqs: [u64; 2], text: String) -> PendingViolation {
    (
        Invariant::FencedWrites,
        scope.to_string(),
        vec![],
        seqs.to_vec(),
        text,
    )
}

/// Seq order within each scope: tokens never decrease, cycles never interleave.
fn seq_order_violations(guarded_rows: &[GuardedRow]) -> Vec<PendingViolation> {
    let mut violations = Vec::new();
    let mut by_scope: BTreeMap<&str, Vec<&GuardedRow>> = BTreeMap::new();
    for row in guarded_rows {
        by_scope.entry(&row.scope).or_default().push(row);
    }
    for (scope, mut rows) in by_scope {
        rows.sort_by_key(|row| row.seq);
        let mut highest: Option<&GuardedRow> = None;
        let mut reported_backwards = BTreeSet::new();
        // Each cycle's latest row, and the latest two rows of distinct owners:
        // enough to find, for any owner, the latest row of another owner.
        let mut cycle_last_seq: BTreeMap<(&str, u64), u64> = BTreeMap::new();
        let mut latest_owners: [Option<&GuardedRow>; 2] = [None, None];
        let mut reported_interleaved = BTreeSet::new();
        for row in rows {
            let cycle = (row.owner.as_str(), row.cycle_id);
            if let Some(highest) = highest {
                if row.token < highest.token && reported_backwards.insert(cycle) {
                    violations.push(rows_finding(
                        scope,
                        [highest.seq, row.seq],
                        format!(
                            "token went backwards in commit order: seq {} has token {} ({}), seq {} has token {} ({})",
                            highest.seq, highest.token, highest.owner, row.seq, row.token, row.owner
                        ),
                    ));
                }
            }
            if highest.is_none_or(|highest| row.token > highest.token) {
                highest = Some(row);
            }
            // A cycle resuming after another owner's row: two owners wrote
            // at once. (One owner's cycles may interleave: its own writers
            // under one grant, as a shared fence allows.)
            let other = latest_owners
                .into_iter()
                .flatten()
                .find(|latest| latest.owner != row.owner);
            if let (Some(&last_seq), Some(other)) = (cycle_last_seq.get(&cycle), other) {
                if other.seq > last_seq && reported_interleaved.insert(cycle) {
                    violations.push(rows_finding(
                        scope,
                        [other.seq, row.seq],
                        format!(
                            "cycles interleave: cycle {} of {} resumes at seq {} after cycle {} of {} at seq {}",
                            row.cycle_id, row.owner, row.seq, other.cycle_id, other.owner, other.seq
                        ),
                    ));
                }
            }
            cycle_last_seq.insert(cycle, row.seq);
            latest_owners = match latest_owners {
                [Some(first), _] if first.owner == row.owner => [Some(row), latest_owners[1]],
                [first, _] => [Some(row), first],
            };
        }
    }
    violations
}

/// One scope's grants in token order, indexed so that the grant window of any
/// token is found in logarithmic time (a long run has tens of thousands).
struct GrantBounds<'g> {
    by_token: Vec<&'g Grant>,
    /// `prefix_latest[i]`: the latest-granted of `by_token[..=i]`.
    prefix_latest: Vec<&'g Grant>,
    /// `suffix_earliest[i]`: the earliest-granted of `by_token[i..]`.
    suffix_earliest: Vec<&'g Grant>,
}

impl<'g> GrantBounds<'g> {
    fn new(grants: &'g BTreeMap<u64, Grant>) -> GrantBounds<'g> {
        let by_token: Vec<&Grant> = grants.values().collect();
        let mut prefix_latest: Vec<&Grant> = Vec::with_capacity(by_token.len());
        for grant in &by_token {
            let latest = match prefix_latest.last() {
                Some(latest) if latest.granted_at_us >= grant.granted_at_us => latest,
                _ => grant,
            };
            prefix_latest.push(latest);
        }
        let mut suffix_earliest: Vec<&Grant> = Vec::with_capacity(by_token.len());
        for grant in by_token.iter().rev() {
            let earliest = match suffix_earliest.last() {
                Some(earliest) if earliest.granted_at_us <= grant.granted_at_us => earliest,
                _ => grant,
            };
            suffix_earliest.push(earliest);
        }
        suffix_earliest.reverse();
        GrantBounds {
            by_token,
            prefix_latest,
            suffix_earliest,
        }
    }

    /// The latest grant with a token `<= token` and the earliest with a larger one.
    fn around(&self, token: u64) -> (Option<&'g Grant>, Option<&'g Grant>) {
        let split = self.by_token.partition_point(|grant| grant.token <= token);
        let lower = split.checked_sub(1).map(|index| self.prefix_latest[index]);
        let upper = self.suffix_earliest.get(split).copied();
        (lower, upper)
    }
}

/// Guarded rows grouped by cycle (owner, cycle id), each group in `seq` order.
pub(super) fn cycles_of(rows: &[GuardedRow]) -> BTreeMap<(String, u64), Vec<&GuardedRow>> {
    let mut cycles: BTreeMap<(String, u64), Vec<&GuardedRow>> = BTreeMap::new();
    for row in rows {
        cycles
            .entry((row.owner.clone(), row.cycle_id))
            .or_default()
            .push(row);
    }
    for rows in cycles.values_mut() {
        rows.sort_by_key(|row| row.seq);
    }
    cycles
}

/// A committed cycle's commit time, token and first `seq`.
type CycleCommit = (i64, u64, u64);

/// I3 in commit order, where rows carry their transaction's commit time:
/// committed cycles appear in token order. A cycle under token `t` that
/// committed strictly after a cycle under a larger token landed under a
/// rival's grant — whatever its `seq` and `written_at` say (a cycle that
/// wrote before a takeover and committed after it keeps its early `seq`).
/// Sound for any fence that keeps the lease row locked until commit (the
/// takeover must wait for the commit) and for any token check at the store
/// (it refuses the older token); it assumes commit times come from one clock
/// that does not step back during the run. Equal commit times prove nothing
/// and are not compared; rows without a commit time are not judged here.
fn commit_order_violations(rows: &[GuardedRow]) -> Vec<PendingViolation> {
    // scope -> (owner, cycle_id) -> (committed_at, token, first seq).
    let mut by_scope: BTreeMap<&str, BTreeMap<(&str, u64), CycleCommit>> = BTreeMap::new();
    for row in rows {
        let Some(committed_at_us) = row.committed_at_us else {
            continue;
        };
        by_scope
            .entry(&row.scope)
            .or_default()
            .entry((&row.owner, row.cycle_id))
            .and_modify(|cycle| cycle.2 = cycle.2.min(row.seq))
            .or_insert((committed_at_us, row.token, row.seq));
    }
    let mut violations = Vec::new();
    for (scope, cycles) in by_scope {
        let mut ordered: Vec<(i64, u64, &str, u64, u64)> = cycles
            .into_iter()
            .map(|((owner, cycle_id), (committed_at_us, token, seq))| {
                (committed_at_us, token, owner, cycle_id, seq)
            })
            .collect();
        ordered.sort_unstable();
        // The highest-token cycle among those committed strictly earlier:
        // cycles committed at one instant are judged against earlier
        // instants only.
        let mut highest_before: Option<(i64, u64, &str, u64, u64)> = None;
        for instant in ordered.chunk_by(|a, b| a.0 == b.0) {
            for &(committed_at_us, token, owner, cycle_id, seq) in instant {
                let Some(highest) = highest_before else {
                    break;
                };
                if token < highest.1 {
                    violations.push((
                        Invariant::FencedWrites,
                        scope.to_string(),
                        vec![],
                        vec![highest.4, seq],
                        format!(
                            "committed out of token order: cycle {cycle_id} of {owner} (token {token}) committed at {committed_at_us}, \
                             after cycle {} of {} (token {}) committed at {} (server us)",
                            highest.3, highest.2, highest.1, highest.0
                        ),
                    ));
                }
            }
            for &cycle in instant {
                if highest_before.is_none_or(|highest| cycle.1 > highest.1) {
                    highest_before = Some(cycle);
                }
            }
        }
    }
    violations
}
