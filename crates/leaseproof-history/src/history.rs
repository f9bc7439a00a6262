//! A whole history: the events of every worker plus the guarded table's rows.
//!
//! Goal: one value the checker judges, whatever produced it. Method: events are
//! kept in a total order (by `index`), JSON lines carry one record per line so a
//! crashed writer leaves every complete line readable, and [`History::merge`]
//! joins the histories of several processes into one with fresh indices and op ids.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventKind, GuardedRow, WorkRow};

/// Everything the checker needs about one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// All events; `events[i].index == i` in a well-formed history.
    pub events: Vec<Event>,
    /// The guarded table's contents after the run.
    pub guarded_rows: Vec<GuardedRow>,
    /// Rows of unfenced writes ([`crate::Op::Write`]) after the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub work_rows: Vec<WorkRow>,
}

/// A line of the JSON-lines format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Record {
    Event(Event),
    GuardedRow(GuardedRow),
    WorkRow(WorkRow),
}

/// Reading or writing a history failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A line is not a valid record.
    #[error("line {line_number}: {source}")]
    Json {
        /// 1-based line number.
        line_number: usize,
        /// The parse error.
        source: serde_json::Error,
    },
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The IO error.
        source: std::io::Error,
    },
}

impl History {
    /// Appends `kind` as the next event, giving it the next index; returns the index.
    pub fn push(
        &mut self,
        worker: &str,
        incarnation: u64,
        true_time_us: i64,
        local_time_us: i64,
        kind: EventKind,
    ) -> u64 {
        let index = self.events.len() as u64;
        self.events.push(Event {
            index,
            worker: worker.to_string(),
            incarnation,
            true_time_us,
            local_time_us,
            kind,
        });
        index
    }

    /// One JSON object per line: every event, then every guarded row.
    pub fn to_json_lines(&self) -> String {
        let mut text = String::new();
        let records = self
            .events
            .iter()
            .cloned()
            .map(Record::Event)
            .chain(self.guarded_rows.iter().cloned().map(Record::GuardedRow))
            .chain(self.work_rows.iter().cloned().map(Record::WorkRow));
        for record in records {
            // Serialising plain structs of strings and integers cannot fail.
            let line = serde_json::to_string(&record).expect("history records serialise");
            text.push_str(&line);
            text.push('\n');
        }
        text
    }

    /// Parses [`History::to_json_lines`] output; blank lines are skipped.
    pub fn from_json_lines(text: &str) -> Result<History, HistoryError> {
        let mut history = History::default();
        for (line_index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let record: Record =
                serde_json::from_str(line).map_err(|source| HistoryError::Json {
                    line_number: line_index + 1,
                    source,
                })?;
            match record {
                Record::Event(event) => history.events.push(event),
                Record::GuardedRow(row) => history.guarded_rows.push(row),
                Record::WorkRow(row) => history.work_rows.push(row),
            }
        }
        Ok(history)
    }

    /// Writes the JSON-lines form to `path`.
    pub fn save(&self, path: &Path) -> Result<(), HistoryError> {
        std::fs::write(path, self.to_json_lines()).map_err(|source| HistoryError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads a JSON-lines file written by [`History::save`] (or by hand).
    pub fn load(path: &Path) -> Result<History, HistoryError> {
        let text = std::fs::read_to_string(path).map_err(|source| HistoryError::Io {
            path: path.display().to_string(),
            source,
        })?;
        History::from_json_lines(&text)
    }

    /// Joins the histories of several processes or tasks into one.
    ///
    /// Events are ordered by true time, then worker name (stable, so one
    /// worker's events at the same instant keep their order), then re-indexed.
    /// Op ids are renumbered in order of first appearance so ids that collide
    /// across inputs stay distinct. Guarded rows are unioned: identical rows
    /// (the same table read by several inputs) appear once, sorted by `seq`.
    /// The true-time clocks of the inputs must be comparable.
    pub fn merge(histories: impl IntoIterator<Item = History>) -> History {
        let mut tagged: Vec<(usize, Event)> = Vec::new();
        let mut rows: BTreeSet<GuardedRow> = BTreeSet::new();
        let mut work_rows: BTreeSet<WorkRow> = BTreeSet::new();
        for (input_index, history) in histories.into_iter().enumerate() {
            let mut events = history.events;
            events.sort_by_key(|event| event.index);
            tagged.extend(events.into_iter().map(|event| (input_index, event)));
            rows.extend(history.guarded_rows);
            work_rows.extend(history.work_rows);
        }
        tagged.sort_by(|(_, a), (_, b)| {
            (a.true_time_us, &a.worker).cmp(&(b.true_time_us, &b.worker))
        });

        let mut op_ids: BTreeMap<(usize, u64), u64> = BTreeMap::new();
        let mut merged = History::default();
        for (input_index, mut event) in tagged {
            match &mut event.kind {
                EventKind::Invoke { op_id, .. } | EventKind::Complete { op_id, .. } => {
                    let next = op_ids.len() as u64;
                    *op_id = *op_ids.entry((input_index, *op_id)).or_insert(next);
                }
                EventKind::BeliefStart { .. } | EventKind::BeliefEnd { .. } => {}
            }
            event.index = merged.events.len() as u64;
            merged.events.push(event);
        }
        let mut rows: Vec<GuardedRow> = rows.into_iter().collect();
        rows.sort_by_key(|row| row.seq);
        merged.guarded_rows = rows;
        let mut work_rows: Vec<WorkRow> = work_rows.into_iter().collect();
        work_rows.sort_by_key(|row| row.seq);
        merged.work_rows = work_rows;
        merged
    }
}
