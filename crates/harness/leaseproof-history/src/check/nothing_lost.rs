//! I4 nothing lost: a cycle reported committed is in the guarded table, one
//! reported failed is not, and no cycle is partial.

use super::fenced_writes::cycles_of;
use super::*;

impl<'h> Checker<'h> {
    pub(super) fn commits_by_cycle(&self) -> BTreeMap<(&'h str, u64), &OpRecord<'h>> {
        let mut commits = BTreeMap::new();
        for record in self.ops.values() {
            if let Op::Commit {
                owner, cycle_id, ..
            } = record.op
            {
                commits.entry((owner.as_str(), *cycle_id)).or_insert(record);
            }
        }
        commits
    }

    /// I4: each commit's rows against its outcome.
    pub(super) fn check_commits(&mut self) {
        let mut violations = Vec::new();
        let cycles = cycles_of(&self.history.guarded_rows);
        let mut seen_cycles: BTreeMap<(&str, u64), u64> = BTreeMap::new();
        for record in self.ops.values() {
            let Op::Commit {
                scope,
                owner,
                token,
                cycle_id,
                items,
            } = record.op
            else {
                continue;
            };
            if let Some(first) =
                seen_cycles.insert((owner.as_str(), *cycle_id), record.invoke_event)
            {
                violations.push((
                    Invariant::WellFormed,
                    scope.clone(),
                    vec![first, record.invoke_event],
                    vec![],
                    format!("{owner} committed cycle {cycle_id} twice"),
                ));
                continue;
            }
            let rows = cycles
                .get(&(owner.clone(), *cycle_id))
                .map_or(&[][..], |rows| &rows[..]);
            let seqs: Vec<u64> = rows.iter().map(|row| row.seq).collect();
            let mut present = BTreeSet::new();
            let mut duplicated = Vec::new();
            let mut out_of_range = Vec::new();
            for row in rows {
                if row.item >= *items {
                    out_of_range.push(row.seq);
                } else if !present.insert(row.item) {
                    duplicated.push(row.seq);
                }
            }
            let events = record.events();
            let cycle = format!("{owner} cycle {cycle_id} (token {token}, {items} items)");
            if !duplicated.is_empty() || !out_of_range.is_empty() {
                violations.push((
                    Invariant::NothingLost,
                    scope.clone(),
                    events.clone(),
                    [duplicated, out_of_range].concat(),
                    format!("{cycle}: items written twice or out of range"),
                ));
            }
            let present_count = present.len() as u64;
            let whole = present_count == u64::from(*items);
            let outcome = match record.completion {
                Some((_, Outcome::Ok { .. })) => "ok",
                Some((_, Outcome::Fail { .. })) => "failed",
                None | Some((_, Outcome::Unknown { .. })) => "unknown",
            };
            let message = if present_count > 0 && !whole {
                Some(format!("{cycle} reported {outcome} is partial: {present_count} of {items} items in the table"))
            } else if outcome == "ok" && !whole && self.history.tables_read.guarded {
                Some(format!(
                    "{cycle} reported committed is missing from the table"
                ))
            } else if outcome == "failed" && present_count > 0 {
                Some(format!("{cycle} reported failed is in the table"))
            } else {
                None
            };
            if let Some(message) = message {
                violations.push((Invariant::NothingLost, scope.clone(), events, seqs, message));
            }
        }
        for (invariant, scope, events, rows, message) in violations {
            self.violation(invariant, &scope, events, rows, message);
        }
        let commits_recorded = self
            .ops
            .values()
            .any(|record| matches!(record.op, Op::Commit { .. }));
        if !self.history.tables_read.guarded && commits_recorded {
            self.report.not_judged.push(
                "I4 for commits: the guarded table was not read (no guarded_row or table_read \
                 line), so no cycle is judged missing from it"
                    .to_string(),
            );
        }
    }
}
