//! A whole history: the events of every worker plus the guarded table's rows.
//!
//! Goal: one value the checker judges, whatever produced it. Method: events are
//! kept in a total order (by `index`), JSON lines carry one record per line so a
//! crashed writer leaves every complete line readable, and [`History::merge`]
//! joins the histories of several processes into one with fresh indices and op ids.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::design::{CheckConfig, GrantStamps};
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
    /// Which tables the recorder read back after the run. Only a table read
    /// can show that a cycle reported committed is missing from it: a
    /// history that leaves the rows out is judged from its operations.
    #[serde(default)]
    pub tables_read: TablesRead,
    /// What the design that recorded it says about itself (what its grant
    /// stamps mean, which workers write unfenced), so the history is judged
    /// again as it was when recorded; the file's first line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub design: Option<CheckConfig>,
}

/// The tables a recorder read back after its run (rows in a file say so
/// for their table; a `table_read` line says it of a table found empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TablesRead {
    /// The guarded table ([`GuardedRow`]s).
    pub guarded: bool,
    /// The table of unfenced writes ([`WorkRow`]s).
    pub work: bool,
}

/// A table of the format, as a `table_read` line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TableName {
    GuardedRow,
    WorkRow,
}

/// A `table_read` line: the recorder read this table after the run, and
/// every row it found follows (none, when no row line of it does).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TableRead {
    #[serde(deserialize_with = "crate::by_name")]
    table: TableName,
}

/// A line of the JSON-lines format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Record {
    Design(CheckConfig),
    Event(Event),
    TableRead(TableRead),
    GuardedRow(GuardedRow),
    WorkRow(WorkRow),
}

/// Reading or writing a history failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A line is not a record of the format, or breaks its structure (an
    /// `index` that is not the event's position, time going back within a
    /// worker, a completion before its invoke, a token of 0…): the history
    /// is refused before anything is judged.
    #[error("line {line_number}: field `{field}`: {problem}")]
    Invalid {
        /// 1-based line number.
        line_number: usize,
        /// The JSON path of the offending field (`kind.op.token`), or `.`.
        field: String,
        /// What is wrong.
        problem: String,
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

    /// One JSON object per line: the design's declaration (if any), every
    /// event, then every row.
    pub fn to_json_lines(&self) -> String {
        let mut text = String::new();
        let records = self
            .design
            .iter()
            .cloned()
            .map(Record::Design)
            .chain(self.events.iter().cloned().map(Record::Event))
            .chain(
                self.empty_tables_read()
                    .map(|table| Record::TableRead(TableRead { table })),
            )
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

    /// The tables read that have no row: a row says its table was read, an
    /// empty table needs its `table_read` line.
    fn empty_tables_read(&self) -> impl Iterator<Item = TableName> {
        let guarded = self.tables_read.guarded && self.guarded_rows.is_empty();
        let work = self.tables_read.work && self.work_rows.is_empty();
        [(guarded, TableName::GuardedRow), (work, TableName::WorkRow)]
            .into_iter()
            .filter_map(|(empty, table)| empty.then_some(table))
    }

    /// Parses [`History::to_json_lines`] output; blank lines are skipped.
    /// Strict: an unknown field, a malformed value or a structural error
    /// (`Validator`) is refused with the line and the field's path.
    pub fn from_json_lines(text: &str) -> Result<History, HistoryError> {
        let mut history = History::default();
        let mut validator = Validator::default();
        let mut design_line_number = 0;
        for (line_index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let line_number = line_index + 1;
            let record = parse_record(line).map_err(|(field, problem)| HistoryError::Invalid {
                line_number,
                field,
                problem,
            })?;
            validator
                .record(&record, history.events.len())
                .map_err(|(field, problem)| HistoryError::Invalid {
                    line_number,
                    field: field.to_string(),
                    problem,
                })?;
            match record {
                Record::Design(design) => {
                    design_line_number = line_number;
                    history.design = Some(design);
                }
                Record::Event(event) => history.events.push(event),
                Record::TableRead(TableRead { table }) => match table {
                    TableName::GuardedRow => history.tables_read.guarded = true,
                    TableName::WorkRow => history.tables_read.work = true,
                },
                Record::GuardedRow(row) => {
                    history.tables_read.guarded = true;
                    history.guarded_rows.push(row);
                }
                Record::WorkRow(row) => {
                    history.tables_read.work = true;
                    history.work_rows.push(row);
                }
            }
        }
        if let Some(problem) = history.unfenced_worker_unknown() {
            return Err(HistoryError::Invalid {
                line_number: design_line_number,
                field: "unfenced_workers".to_string(),
                problem,
            });
        }
        Ok(history)
    }

    /// The workers with events.
    pub fn workers(&self) -> BTreeSet<&str> {
        self.events
            .iter()
            .map(|event| event.worker.as_str())
            .collect()
    }

    /// Records the design the history was judged by, naming as unfenced only
    /// workers with events (one that did nothing has nothing to judge, and a
    /// file naming a worker it lacks is refused: a typo would judge that
    /// worker as fenced).
    pub fn declare(&mut self, mut design: CheckConfig) {
        let workers = self.workers();
        design
            .unfenced_workers
            .retain(|worker| workers.contains(worker.as_str()));
        self.design = Some(design);
    }

    /// Why the design's unfenced workers do not fit the events: one names no
    /// worker that has any.
    fn unfenced_worker_unknown(&self) -> Option<String> {
        let design = self.design.as_ref()?;
        let (unknown, workers) = self.unknown_worker(&design.unfenced_workers)?;
        Some(format!(
            "{unknown:?} names no worker of the history's events ({workers}): a typo would \
             judge that worker as fenced"
        ))
    }

    /// The first of `names` that names no worker with events, with the
    /// workers' names (`"w1", "w2"`) for the refusal: a worker declared
    /// unfenced that the history lacks is a typo, and would judge the worker
    /// meant as fenced.
    pub fn unknown_worker<'n>(
        &self,
        names: impl IntoIterator<Item = &'n String>,
    ) -> Option<(&'n str, String)> {
        let workers = self.workers();
        let unknown = names
            .into_iter()
            .find(|name| !workers.contains(name.as_str()))?;
        let listed = workers
            .iter()
            .map(|worker| format!("{worker:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Some((unknown, listed))
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
        let bytes = std::fs::read(path).map_err(|source| HistoryError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|error| {
            let valid = &error.as_bytes()[..error.utf8_error().valid_up_to()];
            let line_start = valid
                .iter()
                .rposition(|&byte| byte == b'\n')
                .map_or(0, |at| at + 1);
            HistoryError::Invalid {
                line_number: valid.iter().filter(|&&byte| byte == b'\n').count() + 1,
                field: ".".to_string(),
                problem: format!(
                    "not UTF-8 (byte {} of the line): JSON text is UTF-8",
                    valid.len() - line_start + 1
                ),
            }
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
        let mut design = None;
        let mut tables_read = TablesRead::default();
        for (input_index, history) in histories.into_iter().enumerate() {
            // One design recorded them all: the first declaration stands.
            design = design.or(history.design);
            tables_read.guarded |= history.tables_read.guarded;
            tables_read.work |= history.tables_read.work;
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
        merged.design = design;
        merged.tables_read = tables_read;
        merged
    }
}

/// One line as a record, errors as (field path, problem). The `record` tag
/// is read by hand so the fields of the record are parsed with their paths
/// (serde loses them inside an internally tagged enum).
fn parse_record(line: &str) -> Result<Record, (String, String)> {
    if let Some(path) = crate::field_path::duplicate_key(line) {
        return Err((
            path,
            "appears twice in one object: which one counts is a guess".to_string(),
        ));
    }
    if line.starts_with('\u{feff}') {
        return Err((
            ".".to_string(),
            "starts with a byte-order mark (U+FEFF): save the file as UTF-8 without one"
                .to_string(),
        ));
    }
    let value: serde_json::Value = serde_json::from_str(line)
        .map_err(|error| (".".to_string(), format!("not JSON: {error}")))?;
    if let Some((path, problem)) = number_out_of_range(&value, "") {
        return Err((path, problem));
    }
    let serde_json::Value::Object(mut object) = value else {
        return Err((".".to_string(), "expected a JSON object".to_string()));
    };
    let expected =
        "expected \"design\", \"event\", \"table_read\", \"guarded_row\" or \"work_row\"";
    let tag = match object.remove("record") {
        Some(serde_json::Value::String(tag)) => tag,
        Some(other) => return Err(("record".to_string(), format!("{other}: {expected}"))),
        None => return Err(("record".to_string(), format!("missing: {expected}"))),
    };
    fn fields<T: serde::de::DeserializeOwned>(
        object: serde_json::Map<String, serde_json::Value>,
    ) -> Result<T, (String, String)> {
        let record = serde_json::Value::Object(object);
        serde_path_to_error::deserialize(record.clone()).map_err(|error| {
            let path = error.path().to_string();
            let problem = error.into_inner().to_string();
            (
                crate::field_path::field_in_error::<T>(&record, &path, &problem),
                problem,
            )
        })
    }
    match tag.as_str() {
        "design" => fields(object).map(Record::Design),
        "event" => fields(object).map(Record::Event),
        "table_read" => fields(object).map(Record::TableRead),
        "guarded_row" => fields(object).map(Record::GuardedRow),
        "work_row" => fields(object).map(Record::WorkRow),
        other => Err(("record".to_string(), format!("{other:?}: {expected}"))),
    }
}

/// The first number in `value` beyond what the checker's arithmetic takes,
/// with its path below `prefix` and why: a time or duration (`…_us`) beyond
/// ±2^62 µs, a token beyond 2^63 − 1 (a signed 64-bit integer's, as
/// PostgreSQL's `bigint` and Redis's `INCR` give).
fn number_out_of_range(value: &serde_json::Value, prefix: &str) -> Option<(String, String)> {
    const TIME_LIMIT: i64 = 1 << 62;
    let serde_json::Value::Object(object) = value else {
        return None;
    };
    object.iter().find_map(|(key, field)| {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let problem = match field {
            // Not an integer (`1.5`, `1.0`, `-0`): refused by its type below,
            // not as out of range. (An integer beyond 64 bits also reads as a
            // float: that one is out of range.)
            serde_json::Value::Number(number)
                if number.is_f64()
                    && number.as_f64().is_some_and(|value| {
                        value.fract() != 0.0 || value.abs() < 2f64.powi(63)
                    }) =>
            {
                return None
            }
            serde_json::Value::Number(number)
                if key.ends_with("_us")
                    && number
                        .as_i64()
                        .is_none_or(|value| !(-TIME_LIMIT..=TIME_LIMIT).contains(&value)) =>
            {
                "times and durations (`…_us`) lie within ±2^62 µs (±146,000 years); larger \
                 ones would overflow the arithmetic that judges them"
            }
            serde_json::Value::Number(number)
                if key == "token"
                    && (number.is_f64()
                        || number.as_u64().is_some_and(|token| token > i64::MAX as u64)) =>
            {
                "a token is at most 2^63 − 1 (a signed 64-bit integer, as PostgreSQL's bigint \
                 and Redis's INCR give)"
            }
            _ => return number_out_of_range(field, &path),
        };
        Some((path, format!("{field}: {problem}")))
    })
}

/// An invoked op, as the validator remembers it.
#[derive(Debug)]
struct Invoked {
    true_us: i64,
    /// The op's name.
    op: &'static str,
    completed: bool,
    /// Who invoked it: the one that learns its outcome.
    worker: String,
    incarnation: u64,
    /// For an acquisition, renewal or release: (scope, owner, the token a
    /// renewal or release names).
    grant: Option<(String, String, Option<u64>)>,
}

/// The structural rules a history file must keep, checked line by line
/// before anything is judged (docs/history-format.md, "Well-formed").
#[derive(Debug, Default)]
struct Validator {
    /// Latest true time per worker.
    latest_true_us: BTreeMap<String, i64>,
    /// Latest incarnation per worker.
    latest_incarnation: BTreeMap<String, u64>,
    /// Invoked op ids.
    invoked: BTreeMap<u64, Invoked>,
    /// A row has been read: events must come first.
    rows_started: bool,
    /// A record has been read: the design's declaration must be the first.
    records_seen: bool,
    seqs: BTreeSet<(TableName, u64)>,
    /// Tables named by a `table_read` line.
    tables_read: BTreeSet<TableName>,
    /// The op that named each (op, owner, cycle id) of a commit or write.
    cycles: BTreeMap<(&'static str, String, u64), u64>,
    /// A token each (scope, owner) was granted with, once answered.
    tokened: BTreeMap<(String, String), u64>,
}

type Problem = (&'static str, String);

fn token_at_least_one(field: &'static str, token: u64) -> Result<(), Problem> {
    if token == 0 {
        return Err((field, "0: fencing tokens are integers >= 1".to_string()));
    }
    Ok(())
}

impl Validator {
    fn record(&mut self, record: &Record, position: usize) -> Result<(), Problem> {
        let first = !std::mem::replace(&mut self.records_seen, true);
        match record {
            Record::Design(_) if !first => Err((
                "record",
                "\"design\" after another record: the design's declaration is the first line, once"
                    .to_string(),
            )),
            Record::Design(_) => Ok(()),
            Record::Event(event) => self.event(event, position),
            Record::TableRead(TableRead { table }) => {
                self.rows_started = true;
                if !self.tables_read.insert(*table) {
                    return Err(("table", "named twice: a table is read once".to_string()));
                }
                Ok(())
            }
            Record::GuardedRow(row) => {
                self.rows_started = true;
                token_at_least_one("token", row.token)?;
                self.seq(TableName::GuardedRow, row.seq)
            }
            Record::WorkRow(row) => {
                self.rows_started = true;
                self.seq(TableName::WorkRow, row.seq)
            }
        }
    }

    /// Each table draws its own sequence: a seq repeats only within one.
    fn seq(&mut self, table: TableName, seq: u64) -> Result<(), Problem> {
        if !self.seqs.insert((table, seq)) {
            return Err((
                "seq",
                format!("{seq} appears twice in one table: seq numbers are unique in a table"),
            ));
        }
        Ok(())
    }

    /// A worker's true time never goes back.
    fn worker_time(&mut self, event: &Event) -> Result<(), Problem> {
        let latest = self
            .latest_true_us
            .entry(event.worker.clone())
            .or_insert(i64::MIN);
        if event.true_time_us < *latest {
            // An invoke rounded down below the last completion, rounded up.
            let rounded = matches!(event.kind, EventKind::Invoke { .. })
                && latest.saturating_sub(event.true_time_us) <= 1_000;
            let coarse = if rounded {
                " (a clock coarser than a microsecond, rounded, does this: stamp in microseconds)"
            } else {
                ""
            };
            return Err((
                "true_time_us",
                format!(
                    "{} is before {} of an earlier event of worker {:?}: true time never goes back within a worker{coarse}",
                    event.true_time_us, *latest, event.worker
                ),
            ));
        }
        *latest = event.true_time_us;
        Ok(())
    }

    fn event(&mut self, event: &Event, position: usize) -> Result<(), Problem> {
        if self.rows_started {
            return Err((
                ".",
                "an event after a row: events come first, then rows".to_string(),
            ));
        }
        if event.index != position as u64 {
            return Err((
                "index",
                format!(
                    "{}, expected {position} (the event's position among the events)",
                    event.index
                ),
            ));
        }
        self.worker_time(event)?;
        let incarnation = self
            .latest_incarnation
            .entry(event.worker.clone())
            .or_insert(event.incarnation);
        if event.incarnation < *incarnation {
            return Err((
                "incarnation",
                format!(
                    "{} after {} of an earlier event of worker {:?}: a restart is a new, larger incarnation, never an earlier one",
                    event.incarnation, *incarnation, event.worker
                ),
            ));
        }
        *incarnation = event.incarnation;
        match &event.kind {
            EventKind::Invoke { op_id, op } => {
                Self::op(op)?;
                self.cycle(op, *op_id)?;
                let grant = self.names_its_token(op)?;
                let invoked = Invoked {
                    true_us: event.true_time_us,
                    op: op.name(),
                    completed: false,
                    worker: event.worker.clone(),
                    incarnation: event.incarnation,
                    grant,
                };
                if self.invoked.insert(*op_id, invoked).is_some() {
                    return Err(("kind.op_id", format!("{op_id} is invoked twice")));
                }
            }
            EventKind::Complete { op_id, outcome } => {
                Self::outcome(outcome)?;
                match self.invoked.get_mut(op_id) {
                    None => {
                        return Err((
                            "kind.op_id",
                            format!("{op_id} completes, but no earlier line invoked it"),
                        ))
                    }
                    Some(Invoked {
                        completed: true, ..
                    }) => return Err(("kind.op_id", format!("{op_id} completes twice"))),
                    Some(Invoked {
                        worker,
                        incarnation,
                        ..
                    }) if *worker != event.worker || *incarnation != event.incarnation => {
                        return Err((
                            "kind.op_id",
                            format!(
                                "{op_id} was invoked by worker {worker:?} incarnation {incarnation}, \
                                 and completes in worker {:?} incarnation {}: the one that asked learns the outcome",
                                event.worker, event.incarnation
                            ),
                        ))
                    }
                    Some(Invoked {
                        true_us: invoked_us,
                        op,
                        completed,
                        grant,
                        ..
                    }) => {
                        result_answers(outcome, op)?;
                        if let (Some(grant), crate::Outcome::Ok { result }) = (grant, outcome) {
                            tokened_answer(&mut self.tokened, grant, result, *op_id)?;
                        }
                        if event.true_time_us < *invoked_us {
                            return Err((
                                "true_time_us",
                                format!(
                                    "{} is before the invoke of op {op_id} at {invoked_us}: a completion follows its invoke",
                                    event.true_time_us
                                ),
                            ));
                        }
                        *completed = true;
                    }
                }
            }
            EventKind::BeliefStart { .. } | EventKind::BeliefEnd { .. } => {}
        }
        Ok(())
    }

    /// A commit's or write's rows are matched to it by owner and cycle id,
    /// so no two operations of one owner may name the same cycle.
    fn cycle(&mut self, op: &crate::Op, op_id: u64) -> Result<(), Problem> {
        let (kind, owner, cycle_id) = match op {
            crate::Op::Commit {
                owner, cycle_id, ..
            } => ("commit", owner, *cycle_id),
            crate::Op::Write {
                owner, cycle_id, ..
            } => ("write", owner, *cycle_id),
            _ => return Ok(()),
        };
        match self.cycles.insert((kind, owner.clone(), cycle_id), op_id) {
            None => Ok(()),
            Some(earlier) => Err((
                "kind.op.cycle_id",
                format!(
                    "{cycle_id} is named by op {earlier} too ({kind}s of owner {owner:?}): rows are \
                     matched to their {kind} by owner and cycle id, so each {kind} names a cycle of \
                     its own (a retry is a new cycle id)"
                ),
            )),
        }
    }

    /// A renewal or release names the token its grant carried: 0 (a lock
    /// without tokens) for a grant that had one matches no grant, and the
    /// checker would take that grant for never renewed or released. Returns
    /// the grant an acquisition, renewal or release is about.
    fn names_its_token(
        &self,
        op: &crate::Op,
    ) -> Result<Option<(String, String, Option<u64>)>, Problem> {
        use crate::Op;
        let (scope, owner, named) = match op {
            Op::Acquire { scope, owner, .. } => (scope, owner, None),
            Op::Renew {
                scope,
                owner,
                token,
                ..
            }
            | Op::Release {
                scope,
                owner,
                token,
            } => (scope, owner, Some(*token)),
            Op::Commit { .. } | Op::Write { .. } => return Ok(None),
        };
        if let Some(carried) = self.tokened.get(&(scope.clone(), owner.clone())) {
            if named == Some(0) {
                return Err((
                    "kind.op.token",
                    format!(
                        "0 names no token, but owner {owner:?} was granted scope {scope:?} with \
                         token {carried}: a {} names the token it holds (0 is for a lock \
                         without tokens)",
                        op.name()
                    ),
                ));
            }
        }
        Ok(Some((scope.clone(), owner.clone(), named)))
    }

    fn op(op: &crate::Op) -> Result<(), Problem> {
        use crate::Op;
        match op {
            Op::Commit { token, .. } => token_at_least_one("kind.op.token", *token),
            // `expires_at_us − ttl_us` is read as a time the grant was live:
            // a negative TTL would put it after the grant's end.
            Op::Acquire { ttl_us, .. } | Op::Renew { ttl_us, .. } if *ttl_us < 0 => Err((
                "kind.op.ttl_us",
                format!("{ttl_us}: a TTL is >= 0 (0 for a lock that lives with its session)"),
            )),
            // A renewal or release of a lock without tokens names token 0.
            Op::Acquire { .. } | Op::Renew { .. } | Op::Release { .. } | Op::Write { .. } => Ok(()),
        }
    }

    fn outcome(outcome: &crate::Outcome) -> Result<(), Problem> {
        use crate::{OpResult, Outcome};
        match outcome {
            Outcome::Ok {
                result:
                    OpResult::Lease {
                        token,
                        granted_at_us,
                        expires_at_us,
                        ..
                    },
            } => {
                token_at_least_one("kind.outcome.result.token", *token)?;
                if expires_at_us < granted_at_us {
                    return Err((
                        "kind.outcome.result.expires_at_us",
                        format!("{expires_at_us} is before granted_at_us {granted_at_us}"),
                    ));
                }
                Ok(())
            }
            Outcome::Ok {
                result: OpResult::Lock { token, lifetime_us },
            } => {
                if let Some(token) = token {
                    token_at_least_one("kind.outcome.result.token", *token)?;
                }
                match lifetime_us {
                    Some(lifetime_us) if *lifetime_us <= 0 => Err((
                        "kind.outcome.result.lifetime_us",
                        format!("{lifetime_us}: a promised lifetime is > 0"),
                    )),
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

/// Notes the token an acquisition or renewal was answered with; refuses a
/// token (or a lease's release) answering an op that named token 0, which
/// is for locks without tokens.
fn tokened_answer(
    tokened: &mut BTreeMap<(String, String), u64>,
    (scope, owner, named): &(String, String, Option<u64>),
    result: &crate::OpResult,
    op_id: u64,
) -> Result<(), Problem> {
    use crate::OpResult;
    let carried = match result {
        OpResult::Lease { token, .. }
        | OpResult::Lock {
            token: Some(token), ..
        } => Some(*token),
        OpResult::Released { .. } => None,
        OpResult::Lock { token: None, .. }
        | OpResult::Unlocked {}
        | OpResult::Written {}
        | OpResult::Committed { .. } => return Ok(()),
    };
    if *named == Some(0) {
        return Err((
            "kind.outcome.result",
            format!(
                "\"{}\" answers a grant with a token, but op {op_id} named token 0 (a lock \
                 without tokens): name the token the grant carried",
                result.name()
            ),
        ));
    }
    if let Some(token) = carried {
        tokened.insert((scope.clone(), owner.clone()), token);
    }
    Ok(())
}

/// An ok outcome's result must be one its op can have: a `released` for an
/// acquire, say, is no evidence of anything, and judging it as a failed
/// acquisition would convict the design of a mistake in the file.
fn result_answers(outcome: &crate::Outcome, op: &'static str) -> Result<(), Problem> {
    match outcome {
        crate::Outcome::Ok { result } if !result.answers().contains(&op) => Err((
            "kind.outcome.result",
            format!(
                "\"{}\" answers {}, not the {op} this op id invoked",
                result.name(),
                result.answers().join(" or ")
            ),
        )),
        _ => Ok(()),
    }
}

impl CheckConfig {
    /// What `history` declares about its design; for a history that does
    /// not say, the sound rule ([`GrantStamps::undeclared`]): no definite
    /// violation rests on an assumption the file does not state.
    pub fn declared_by(history: &History) -> CheckConfig {
        history.design.clone().unwrap_or(CheckConfig {
            unfenced_workers: BTreeSet::new(),
            grant_stamps: GrantStamps::undeclared(),
            ..Default::default()
        })
    }
}
