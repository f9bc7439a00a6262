//! The rows read back after a run with their commit times, and the
//! commits of the history given those times.

use leaseproof_history::{EventKind, GuardedRow, History, Op, OpResult, Outcome, WorkRow};

use super::run::ROWS_TABLE;

/// A row of the rows table as read: seq, scope, owner, token, cycle id,
/// item, written at (µs), committed at (µs, if tracked).
pub(super) type RowRecord = (i64, String, String, Option<i64>, i64, i32, i64, Option<i64>);

/// Reads the rows back: a write under a lease (a `commit`) becomes a guarded
/// row, any other a work row; commit times from `pg_xact_commit_timestamp`.
pub(super) async fn read_rows(
    admin: &mut sqlx::PgConnection,
    history: &mut History,
) -> Result<(), sqlx::Error> {
    // track_commit_timestamp may be off on a server the user brought: then
    // the commit times are absent and the report says what was not judged.
    let tracked: String = sqlx::query_scalar("SHOW track_commit_timestamp")
        .fetch_one(&mut *admin)
        .await?;
    let committed = if tracked == "on" {
        "(extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000000)::int8"
    } else {
        "NULL::int8"
    };
    let rows: Vec<RowRecord> = sqlx::query_as(&format!(
        "SELECT seq, scope, owner, token, cycle_id, item, \
         (extract(epoch FROM written_at) * 1000000)::int8, {committed} \
         FROM {ROWS_TABLE} ORDER BY seq"
    ))
    .fetch_all(&mut *admin)
    .await?;
    // One table holds both kinds of row: it was read for both.
    history.tables_read.guarded = true;
    history.tables_read.work = true;
    let commits: std::collections::BTreeSet<(String, u64)> = history
        .events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Invoke {
                op: Op::Commit {
                    owner, cycle_id, ..
                },
                ..
            } => Some((owner.clone(), *cycle_id)),
            _ => None,
        })
        .collect();
    for (seq, scope, owner, token, cycle_id, item, written_at_us, committed_at_us) in rows {
        let (seq, cycle_id) = (seq.unsigned_abs(), cycle_id.unsigned_abs());
        let item = item.unsigned_abs();
        match token {
            Some(token) if commits.contains(&(owner.clone(), cycle_id)) => {
                history.guarded_rows.push(GuardedRow {
                    seq,
                    scope,
                    owner,
                    token: token.unsigned_abs(),
                    cycle_id,
                    item,
                    written_at_us,
                    committed_at_us,
                });
            }
            _ => history.work_rows.push(WorkRow {
                seq,
                scope,
                owner,
                cycle_id,
                item,
                committed_at_us,
            }),
        }
    }
    fill_commit_times(history);
    Ok(())
}

/// A commit answered ok without its server time gets the latest commit time
/// of its rows, read from the store: the evidence, not the client's word.
pub(super) fn fill_commit_times(history: &mut History) {
    let mut commit_times: std::collections::BTreeMap<(String, u64), i64> = Default::default();
    for row in &history.guarded_rows {
        if let Some(committed_at_us) = row.committed_at_us {
            let latest = commit_times
                .entry((row.owner.clone(), row.cycle_id))
                .or_insert(committed_at_us);
            *latest = (*latest).max(committed_at_us);
        }
    }
    let mut cycles: std::collections::BTreeMap<u64, (String, u64)> = Default::default();
    for event in &history.events {
        if let EventKind::Invoke {
            op_id,
            op: Op::Commit {
                owner, cycle_id, ..
            },
        } = &event.kind
        {
            cycles.insert(*op_id, (owner.clone(), *cycle_id));
        }
    }
    for event in &mut history.events {
        if let EventKind::Complete {
            op_id,
            outcome:
                Outcome::Ok {
                    result: OpResult::Committed { committed_at_us },
                },
        } = &mut event.kind
        {
            if committed_at_us.is_none() {
                if let Some(time) = cycles.get(op_id).and_then(|cycle| commit_times.get(cycle)) {
                    *committed_at_us = Some(*time);
                }
            }
        }
    }
}
