//! I3 and I4 for writes that no store checks: the maintenance a lock holder
//! runs on its own connection ([`Op::Write`], rows in [`History::work_rows`]),
//! and, for the real-time rule, fenced commits too.
//!
//! Goal: judge the write a lock exists to protect — two replicas maintaining
//! one table at once — for locks that give no token and report no server
//! time, without a rule the evidence cannot prove.
//! Method, three rules:
//! - **Inside a rival's certain hold** (real time): a write acknowledged ok
//!   whose whole span, invoke to completion, lies inside another owner's
//!   certain hold of the scope (see `certain_holds`) committed while the lock
//!   was promised to that rival — unless the writer's own certain hold,
//!   acknowledged after the rival's began, covers the write too: the lock then
//!   broke its promise to the rival (I1), and it is the rival's writes that
//!   are stale, not the newer holder's.
//! - **Commit order** (the store's commit clock): A's write under grant G_A
//!   committed strictly after B's write under G_B, although G_A was
//!   acknowledged before G_B was even invoked. A correct lock ended G_A
//!   before granting G_B, and B wrote after G_B was granted, so A wrote after
//!   its grant ended: a stale write. A write's grant is its owner's latest
//!   acquisition of the scope before it, which must be ok and acknowledged
//!   before the write was invoked, with no acquisition of the writer invoked
//!   while the write was in flight — otherwise the write is not judged.
//! - **Nothing lost**: a write reported ok has all its rows, one reported
//!   failed has none, none is partial; rows from no recorded write are I3.
//!
//! Invariant: every rule rests on real-time order of harness stamps, on rows
//! that exist, or on commit times of one clock — never on a client's word
//! about time.

use super::certain_holds::certain_holds;
use super::*;
use crate::event::WorkRow;

/// A recorded write and the grant it ran under, if one can be named.
struct WriteUnder<'c, 'h> {
    record: &'c OpRecord<'h>,
    scope: &'h str,
    owner: &'h str,
    cycle_id: u64,
    /// The writer's grant, where one can be named.
    grant: Option<GrantOfWrite>,
}

/// The acquisition a write ran under.
#[derive(Clone, Copy, Debug)]
struct GrantOfWrite {
    invoke_event: u64,
    invoked_true_us: i64,
    /// The answer that granted it: the evidence that it came first.
    acknowledged_event: u64,
    acknowledged_true_us: i64,
}

impl<'h> Checker<'h> {
    /// I3 and I4 for unfenced writes, and the real-time rule for every write.
    pub(super) fn check_lock_writes(&mut self) {
        let mut violations: Vec<PendingViolation> = Vec::new();
        let rows = work_rows_by_write(&self.history.work_rows);
        let writes = self.writes_with_grants();
        violations.extend(self.writes_inside_rival_holds(&writes));
        violations.extend(commit_order(&writes, &rows));
        let table_read = self.history.tables_read.work;
        violations.extend(nothing_lost(&writes, &rows, table_read));
        for (invariant, scope, events, rows, message) in violations {
            self.violation(invariant, &scope, events, rows, message);
        }
        let writes_recorded = self
            .ops
            .values()
            .any(|record| matches!(record.op, Op::Write { .. }));
        if !table_read && writes_recorded {
            self.report.not_judged.push(
                "I4 for writes: the work table was not read (no work_row or table_read line), \
                 so no write is judged missing from it"
                    .to_string(),
            );
        }
        if self
            .history
            .work_rows
            .iter()
            .any(|row| row.committed_at_us.is_none())
        {
            self.report.not_judged.push(
                "I3 in commit order for unfenced writes: some work rows carry no commit time"
                    .to_string(),
            );
        }
    }

    /// Every write and commit, with the grant each ran under where one can
    /// be named.
    fn writes_with_grants(&self) -> Vec<WriteUnder<'_, 'h>> {
        let mut acquisitions: BTreeMap<(&str, &str), Vec<&OpRecord<'h>>> = BTreeMap::new();
        for record in self.ops.values() {
            if let Op::Acquire { scope, owner, .. } = record.op {
                acquisitions
                    .entry((scope.as_str(), owner.as_str()))
                    .or_default()
                    .push(record);
            }
        }
        let mut writes = Vec::new();
        for record in self.ops.values() {
            let (scope, owner, cycle_id) = match record.op {
                Op::Write {
                    scope,
                    owner,
                    cycle_id,
                    ..
                }
                | Op::Commit {
                    scope,
                    owner,
                    cycle_id,
                    ..
                } => (scope.as_str(), owner.as_str(), *cycle_id),
                _ => continue,
            };
            let owner_acquisitions = acquisitions.get(&(scope, owner));
            // An acquisition of the writer invoked while the write was in
            // flight may have granted the lock again before the write
            // committed: the write's grant is then not known.
            let regranted_meanwhile = owner_acquisitions.is_some_and(|acquisitions| {
                acquisitions.iter().any(|acquire| {
                    acquire.invoke_event > record.invoke_event
                        && record.complete_true_us.is_none_or(|completed_true_us| {
                            acquire.invoke_true_us <= completed_true_us
                        })
                })
            });
            let grant = owner_acquisitions
                .filter(|_| !regranted_meanwhile)
                .and_then(|acquisitions| {
                    acquisitions
                        .iter()
                        .filter(|acquire| acquire.invoke_event < record.invoke_event)
                        .max_by_key(|acquire| acquire.invoke_event)
                })
                .and_then(
                    |acquire| match (acquire.completion, acquire.complete_true_us) {
                        (
                            Some((acknowledged_event, Outcome::Ok { .. })),
                            Some(acknowledged_true_us),
                        ) if acknowledged_true_us <= record.invoke_true_us => Some(GrantOfWrite {
                            invoke_event: acquire.invoke_event,
                            invoked_true_us: acquire.invoke_true_us,
                            acknowledged_event,
                            acknowledged_true_us,
                        }),
                        _ => None,
                    },
                );
            writes.push(WriteUnder {
                record,
                scope,
                owner,
                cycle_id,
                grant,
            });
        }
        writes
    }

    fn writes_inside_rival_holds(&self, writes: &[WriteUnder<'_, 'h>]) -> Vec<PendingViolation> {
        let holds = certain_holds(self.history, &self.ops);
        let mut violations = Vec::new();
        for write in writes {
            let (Some((_, Outcome::Ok { .. })), Some(completed_true_us)) =
                (write.record.completion, write.record.complete_true_us)
            else {
                continue;
            };
            let invoked_true_us = write.record.invoke_true_us;
            let scope_holds = holds.get(write.scope).map_or(&[][..], Vec::as_slice);
            // The writer's own certain holds around the whole write (one
            // ending at the write's answer covers it: a session lock is
            // certain up to the invocation of its next proof, which may
            // follow the answer at once). An empty hold covers nothing.
            let own_holds = scope_holds.iter().filter(|hold| {
                hold.owner == write.owner
                    && !hold.is_empty()
                    && hold.from_true_us <= invoked_true_us
                    && completed_true_us <= hold.until_true_us
            });
            let Some(rival) = scope_holds.iter().find(|hold| {
                hold.owner != write.owner
                    // Strictly: a write invoked in the microsecond the
                    // rival's hold began may have come before it.
                    && hold.from_true_us < invoked_true_us
                    && completed_true_us < hold.until_true_us
                    // A writer granted while the lock was promised to this
                    // rival wrote under the newer grant: the lock broke its
                    // promise to the rival (I1, reported for the two holds),
                    // and the stale writes are the rival's, not these.
                    && !own_holds
                        .clone()
                        .any(|own| own.from_true_us > hold.from_true_us)
            }) else {
                continue;
            };
            let mut events = write.record.events();
            events.extend(&rival.events);
            violations.push((
                Invariant::FencedWrites,
                write.scope.to_string(),
                events,
                vec![],
                format!(
                    "{} wrote (cycle {}) in [{}, {}] while {} certainly held {} in [{}, {}) (true us)",
                    write.owner,
                    write.cycle_id,
                    invoked_true_us,
                    completed_true_us,
                    rival.owner,
                    write.scope,
                    rival.from_true_us,
                    rival.until_true_us,
                ),
            ));
        }
        violations
    }
}

type WriteKey<'h> = (&'h str, u64);

/// Work rows grouped by write: (owner, cycle id) → rows in `seq` order.
fn work_rows_by_write(rows: &[WorkRow]) -> BTreeMap<WriteKey<'_>, Vec<&WorkRow>> {
    let mut by_write: BTreeMap<WriteKey<'_>, Vec<&WorkRow>> = BTreeMap::new();
    for row in rows {
        by_write
            .entry((row.owner.as_str(), row.cycle_id))
            .or_default()
            .push(row);
    }
    for rows in by_write.values_mut() {
        rows.sort_by_key(|row| row.seq);
    }
    by_write
}

/// The earliest and latest commit time of a write's rows; `None` unless every
/// row has one.
fn commit_span(rows: &[&WorkRow]) -> Option<(i64, i64)> {
    let times: Option<Vec<i64>> = rows.iter().map(|row| row.committed_at_us).collect();
    let times = times?;
    Some((*times.iter().min()?, *times.iter().max()?))
}

fn commit_order(
    writes: &[WriteUnder<'_, '_>],
    rows: &BTreeMap<WriteKey<'_>, Vec<&WorkRow>>,
) -> Vec<PendingViolation> {
    let mut violations = Vec::new();
    let spans: Vec<Option<(i64, i64)>> = writes
        .iter()
        .map(|write| {
            let is_write = matches!(write.record.op, Op::Write { .. });
            let rows = rows.get(&(write.owner, write.cycle_id))?;
            is_write.then(|| commit_span(rows)).flatten()
        })
        .collect();
    for (stale_index, stale) in writes.iter().enumerate() {
        let (Some(stale_grant), Some((stale_first_us, _))) = (stale.grant, spans[stale_index])
        else {
            continue;
        };
        let later = writes.iter().enumerate().find(|(index, later)| {
            later.scope == stale.scope
                && later.owner != stale.owner
                && spans[*index].is_some_and(|(_, later_last_us)| stale_first_us > later_last_us)
                // The later grant was invoked after the stale one was
                // acknowledged: certainly granted later.
                && later.grant.is_some_and(|later_grant| {
                    stale_grant.acknowledged_true_us < later_grant.invoked_true_us
                })
        });
        let Some((later_index, later)) = later else {
            continue;
        };
        let (_, later_last_us) = spans[later_index].expect("filtered on");
        let mut events = vec![stale_grant.invoke_event, stale_grant.acknowledged_event];
        events.extend(stale.record.events());
        events.extend(later.grant.map(|grant| grant.invoke_event));
        events.extend(later.record.events());
        let mut seqs: Vec<u64> = rows[&(stale.owner, stale.cycle_id)]
            .iter()
            .map(|row| row.seq)
            .collect();
        seqs.extend(
            rows[&(later.owner, later.cycle_id)]
                .iter()
                .map(|row| row.seq),
        );
        violations.push((
            Invariant::FencedWrites,
            stale.scope.to_string(),
            events,
            seqs,
            format!(
                "{}'s write (cycle {}) committed at {stale_first_us} us, after {}'s write (cycle {}) \
                 committed at {later_last_us} us under a grant made after {}'s: a stale write",
                stale.owner, stale.cycle_id, later.owner, later.cycle_id, stale.owner
            ),
        ));
    }
    violations
}

/// I4 for unfenced writes, and I3 for rows no recorded write explains. A
/// write is missing from the table only if the table was read
/// (`table_read`).
fn nothing_lost(
    writes: &[WriteUnder<'_, '_>],
    rows: &BTreeMap<WriteKey<'_>, Vec<&WorkRow>>,
    table_read: bool,
) -> Vec<PendingViolation> {
    let mut violations = Vec::new();
    let mut recorded: BTreeSet<WriteKey<'_>> = BTreeSet::new();
    for write in writes {
        let Op::Write { items, .. } = write.record.op else {
            continue;
        };
        recorded.insert((write.owner, write.cycle_id));
        let rows = rows
            .get(&(write.owner, write.cycle_id))
            .map_or(&[][..], Vec::as_slice);
        let seqs: Vec<u64> = rows.iter().map(|row| row.seq).collect();
        let mut present = BTreeSet::new();
        let misplaced = rows
            .iter()
            .any(|row| row.item >= *items || row.scope != write.scope || !present.insert(row.item));
        let present_count = present.len() as u64;
        let whole = present_count == u64::from(*items);
        let outcome = match write.record.completion {
            Some((_, Outcome::Ok { .. })) => "ok",
            Some((_, Outcome::Fail { .. })) => "failed",
            None | Some((_, Outcome::Unknown { .. })) => "unknown",
        };
        let what = format!("{} write {} ({items} items)", write.owner, write.cycle_id);
        let message = if misplaced {
            Some(format!(
                "{what}: rows written twice, out of range or under another scope"
            ))
        } else if present_count > 0 && !whole {
            Some(format!(
                "{what} reported {outcome} is partial: {present_count} of {items} rows"
            ))
        } else if outcome == "ok" && !whole && table_read {
            Some(format!("{what} reported ok is missing from the table"))
        } else if outcome == "failed" && present_count > 0 {
            Some(format!("{what} reported failed is in the table"))
        } else {
            None
        };
        if let Some(message) = message {
            violations.push((
                Invariant::NothingLost,
                write.scope.to_string(),
                write.record.events(),
                seqs,
                message,
            ));
        }
    }
    for ((owner, cycle_id), rows) in rows {
        if !recorded.contains(&(*owner, *cycle_id)) {
            violations.push((
                Invariant::FencedWrites,
                rows[0].scope.clone(),
                vec![],
                rows.iter().map(|row| row.seq).collect(),
                format!("rows of write {cycle_id} of {owner} come from no recorded write"),
            ));
        }
    }
    violations
}
