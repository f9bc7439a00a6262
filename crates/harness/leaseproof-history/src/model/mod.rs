//! The judge's model of a lease: a history passes iff some explanation of
//! it exists.
//!
//! Goal: report a violation only when no assignment of effect instants,
//! store-clock readings and unknown outcomes satisfies the lease's
//! specification, and carry the proof beside every verdict. `docs/model.md`
//! states the model; `lease` is its letter.
//!
//! Method, per scope (scopes share nothing): pair the operations
//! (`operations`), search for an explanation (`search`: Wing and Gong's
//! order search, the clock's unknowns as difference constraints in a
//! `zone::Zone`). Found: the explanation, replayed to concrete readings
//! ([`Explanation`]), which [`validate`] checks without the zone. None:
//! search again with one part of the specification dropped at a time to
//! name what no explanation satisfies ([`Certificate::invariants`]), and
//! weaken the operations that are not needed to unknown outcome, one at a
//! time, to keep the smallest set that still has none. Over the assumptions:
//! could not judge.

pub(crate) mod beside;
mod certificate;
mod document;
mod lease;
mod operations;
mod search;
pub mod validate;
mod zone;

use std::collections::BTreeSet;
use std::fmt;

use crate::check::{CheckReport, Invariant, Violation};
use crate::design::{CheckConfig, GrantStamps};
use crate::history::History;

pub use document::{documents, EffectDocument, ScopeDocument};
pub use lease::Choice;
pub use operations::{Answer, Call, Operation};

use lease::{Relax, Row, KEPT};
use search::{Found, Placed, Scope};
use zone::Zone;

/// What the judge assumes of the store beyond the history, and how hard it
/// may look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Assumptions {
    /// States tried per scope before it is reported as not judged.
    pub states: u64,
    /// How far below a reading taken before its statement began a stamp
    /// may be: a store that stamps milliseconds rounds up to 1,000 µs
    /// away; PostgreSQL's `now()` none.
    pub stamp_rounding_us: i64,
    /// Whether a re-acquisition or renewal may restamp its grant's
    /// `granted_at` (the reference keeps it).
    pub restamps: bool,
}

impl Default for Assumptions {
    /// Two million states; a millisecond of rounding and restamps, which
    /// assume nothing of the store that a file does not say.
    fn default() -> Assumptions {
        Assumptions {
            states: 2_000_000,
            stamp_rounding_us: 1_000,
            restamps: true,
        }
    }
}

impl Assumptions {
    /// The defaults, with what the history's design line declares of its
    /// store's stamps (`stamp_rounding_us`, `restamps`) in their place.
    pub fn declared_by(config: &CheckConfig) -> Assumptions {
        let default = Assumptions::default();
        Assumptions {
            stamp_rounding_us: config
                .stamp_rounding_us
                .unwrap_or(default.stamp_rounding_us),
            restamps: config.restamps.unwrap_or(default.restamps),
            ..default
        }
    }
}

/// Explanations are drawn to concrete readings up to this many effects.
const EXPLAINED_EFFECTS_MAX: usize = 400;

/// The model's verdict on every scope of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelReport {
    /// One verdict per scope, by name.
    pub scopes: Vec<ScopeVerdict>,
}

/// The verdict on one scope and how hard the search looked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeVerdict {
    /// The scope.
    pub scope: String,
    /// Its lease operations.
    pub operations: Vec<Operation>,
    /// States the searches tried.
    pub states: u64,
    /// What was found.
    pub verdict: Verdict,
}

/// What the model says of a scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// An explanation exists; here is one (none drawn for a long scope).
    Explained(Option<Explanation>),
    /// Explained as the stamps are declared (`statement-start`), not if
    /// they were decision stamps: a violation only under that assumption.
    Possible(Certificate),
    /// No explanation exists.
    Violated(Certificate),
    /// The search went over its budget.
    CouldNotJudge(String),
    /// The scope is not the model's (its grants answer `lock`).
    NotModelled(String),
}

/// One legal schedule: the effects in the order they took place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The effects, in order.
    pub effects: Vec<Effect>,
}

/// One effect of an [`Explanation`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effect {
    /// The operation (an index in [`ScopeVerdict::operations`]).
    pub operation: usize,
    /// What it did.
    pub choice: Choice,
    /// The store's clock when it decided.
    pub decision_us: i64,
    /// The stamp it wrote.
    pub stamp_us: i64,
}

/// Why no explanation exists: what it breaks, and the operations that
/// alone have none (every other one read as of unknown outcome).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    /// The parts of the specification that, dropped together, leave an
    /// explanation: I1, I2, or H (the clock). Empty: none does.
    pub invariants: Vec<Invariant>,
    /// The operations kept as answered (indices in [`ScopeVerdict::operations`]).
    pub operations: Vec<usize>,
}

/// Judges every scope of `history`, its stamps read as `config` says.
pub fn judge(history: &History, config: &CheckConfig, assumptions: Assumptions) -> ModelReport {
    let scopes = operations::lease_operations(history)
        .into_iter()
        .map(|(scope, operations)| match operations {
            Err(reason) => ScopeVerdict {
                scope,
                operations: Vec::new(),
                states: 0,
                verdict: Verdict::NotModelled(reason),
            },
            Ok(operations) => judge_scope(scope, operations, config.grant_stamps, assumptions),
        })
        .collect();
    ModelReport { scopes }
}

/// Judges one scope's operations.
pub fn judge_scope(
    scope: String,
    operations: Vec<Operation>,
    stamps: GrantStamps,
    assumptions: Assumptions,
) -> ScopeVerdict {
    let mut states = 0;
    let verdict = decide(&operations, stamps, assumptions, &mut states);
    ScopeVerdict {
        scope,
        operations,
        states,
        verdict,
    }
}

fn decide(
    operations: &[Operation],
    stamps: GrantStamps,
    assumptions: Assumptions,
    states: &mut u64,
) -> Verdict {
    let over = |states: u64| {
        Verdict::CouldNotJudge(format!(
            "the search tried {states} states, its budget, without deciding"
        ))
    };
    let scope = Scope::new(operations, stamps, assumptions);
    match search::search(&scope, Relax::default(), assumptions.states, states) {
        Found::OverBudget => over(*states),
        Found::None => {
            Verdict::Violated(certificate::find(operations, stamps, assumptions, states))
        }
        Found::Explanation(path) if stamps == GrantStamps::StatementStart => {
            let decided = Scope::new(operations, GrantStamps::Decision, assumptions);
            match search::search(&decided, Relax::default(), assumptions.states, states) {
                Found::None => Verdict::Possible(certificate::find(
                    operations,
                    GrantStamps::Decision,
                    assumptions,
                    states,
                )),
                _ => Verdict::Explained(explain(&scope, &path)),
            }
        }
        Found::Explanation(path) => Verdict::Explained(explain(&scope, &path)),
    }
}

/// The explanation `path` with concrete readings: the path replayed with
/// every reading kept, then each fixed in turn.
fn explain(scope: &Scope<'_>, path: &[Placed]) -> Option<Explanation> {
    if path.len() > EXPLAINED_EFFECTS_MAX {
        return None;
    }
    let mut zone = Zone::new(KEPT - 1);
    let mut row = Row::default();
    let mut latest_completion = i64::MIN;
    let mut readings = Vec::new();
    for (position, placed) in path.iter().enumerate() {
        let operation = &scope.operations[placed.operation];
        let deadline = path[position..]
            .iter()
            .filter_map(|later| scope.operations[later.operation].deadline_us())
            .min()
            .unwrap_or(i64::MAX);
        let context = scope.context(
            placed.operation,
            latest_completion,
            deadline,
            Relax::default(),
        );
        let read;
        (row, read) = lease::take_effect(&row, &mut zone, operation, placed.choice, &context)
            .expect("the path was placed");
        latest_completion = latest_completion.max(operation.deadline_us().unwrap_or(i64::MIN));
        readings.push(read);
    }
    let values = zone.solution();
    let effects = path
        .iter()
        .zip(readings)
        .map(|(placed, read)| Effect {
            operation: placed.operation,
            choice: placed.choice,
            decision_us: values[read.decision],
            stamp_us: values[read.stamp],
        })
        .collect();
    Some(Explanation { effects })
}

/// The rules' report of `history` with the lease scopes' I1, I2 and clock
/// findings replaced by the model's; the rules still judge commits, writes,
/// beliefs and locks without server times.
pub fn check_with_model(
    history: &History,
    config: &CheckConfig,
    assumptions: Assumptions,
) -> (CheckReport, ModelReport) {
    let mut report = crate::check::check(history, config);
    let model = judge(history, config, assumptions);
    let modelled: BTreeSet<&str> = model
        .scopes
        .iter()
        .filter(|scope| !matches!(scope.verdict, Verdict::NotModelled(_)))
        .map(|scope| scope.scope.as_str())
        .collect();
    let the_models = |violation: &Violation| {
        modelled.contains(violation.scope.as_str())
            && match violation.invariant {
                Invariant::MutualExclusion | Invariant::TokenOrder => true,
                Invariant::WellFormed => violation.message.starts_with("server times go back"),
                _ => false,
            }
    };
    report.violations.retain(|violation| !the_models(violation));
    report.possible.retain(|violation| !the_models(violation));
    for scope in &model.scopes {
        match &scope.verdict {
            Verdict::Violated(certificate) => report.violations.push(scope.finding(certificate)),
            Verdict::Possible(certificate) => report.possible.push(scope.finding(certificate)),
            Verdict::CouldNotJudge(reason) => report
                .not_judged
                .push(format!("I1, I2 of scope {:?}: {reason}", scope.scope)),
            Verdict::Explained(_) | Verdict::NotModelled(_) => {}
        }
    }
    (report, model)
}

impl ScopeVerdict {
    /// The violation `certificate` proves, as the rules' reports list them.
    fn finding(&self, certificate: &Certificate) -> Violation {
        let mut events: Vec<u64> = certificate
            .operations
            .iter()
            .flat_map(|&index| self.operations[index].events())
            .collect();
        events.sort_unstable();
        let facts: Vec<String> = certificate
            .operations
            .iter()
            .map(|&index| certificate::fact(&self.operations[index]))
            .collect();
        Violation {
            invariant: certificate
                .invariants
                .first()
                .copied()
                .unwrap_or(Invariant::WellFormed),
            scope: self.scope.clone(),
            events,
            rows: Vec::new(),
            message: format!(
                "no explanation ({} of the specification dropped would give one): {}",
                certificate
                    .invariants
                    .iter()
                    .map(|invariant| invariant.code())
                    .collect::<Vec<_>>()
                    .join("+"),
                facts.join("; ")
            ),
        }
    }
}

impl fmt::Display for ModelReport {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for scope in &self.scopes {
            write!(formatter, "{scope}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ScopeVerdict {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let looked = format!(
            "{} operations, {} states tried",
            self.operations.len(),
            self.states
        );
        match &self.verdict {
            Verdict::Explained(_) => {
                writeln!(formatter, "scope {:?}: explained ({looked})", self.scope)
            }
            Verdict::NotModelled(reason) => {
                writeln!(formatter, "scope {:?}: not modelled: {reason}", self.scope)
            }
            Verdict::CouldNotJudge(reason) => writeln!(
                formatter,
                "scope {:?}: could not judge ({looked}): {reason}",
                self.scope
            ),
            Verdict::Violated(certificate) | Verdict::Possible(certificate) => {
                let possible = matches!(self.verdict, Verdict::Possible(_));
                certificate::describe(formatter, self, certificate, possible)
            }
        }
    }
}
