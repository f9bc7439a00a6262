//! Stateright models of the leaseproof lease protocol and its broken variants.
//!
//! Goal: prove, for a few workers and a bounded server clock, that the
//! reference protocol keeps I1 (mutual exclusion), I2 (token order) and I3
//! (fenced writes) under pauses, lost and delayed replies, crashes with
//! restart, clock offset and drift and concurrent schema creation; and show
//! that each broken variant is refuted by a short counterexample.
//! Method: `LeaseModel` implements `stateright::Model`; `check` runs a
//! breadth-first search (exhaustive for the reference, stopping at the first
//! violation of the expected property for a variant) and turns the shortest
//! counterexample into a readable `Trace`.
//! Invariant: the model knows nothing of PostgreSQL, turmoil or the history
//! crate; it re-states the protocol of docs/protocol.md in its own terms.

#![deny(missing_docs)]

mod document;
pub mod judged;
mod model;
pub mod properties;
mod trace;
mod variant;

pub use document::{
    CounterexampleDocument, ModelDocument, ModelVerdict, PropertyVerdict, StepDocument,
};
pub use model::{
    representative, Clock, Ghost, GhostGrant, LateKind, LateStatement, LeaseAction, LeaseModel,
    LeaseRow, LeaseState, Owner, Phase, Schema, Step, WORKERS_MAX,
};
pub use trace::{Trace, TraceStep};
pub use variant::{UnknownVariant, Variant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// How `check` searches the state space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Search {
    /// Breadth-first over every reachable state; decides every property.
    Exhaustive,
    /// Depth-first over every reachable state up to a renaming of workers
    /// (symmetry reduction); decides every property with fewer states, but its
    /// discovery paths are not the shortest.
    ExhaustiveSymmetric,
    /// Breadth-first until the variant's expected property (any `always` for
    /// the reference) fails; the counterexample is the shortest one.
    FirstViolation,
}

/// What to check and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckConfig {
    /// The model, with its variant and bounds.
    pub model: LeaseModel,
    /// The search strategy.
    pub search: Search,
}

impl CheckConfig {
    /// Exhaustive with symmetry reduction for the reference (it has no
    /// counterexample to make short, and 3 workers need the reduction), first
    /// violation for a broken variant.
    pub fn new(model: LeaseModel) -> Self {
        let search = if model.variant == Variant::Reference {
            Search::ExhaustiveSymmetric
        } else {
            Search::FirstViolation
        };
        CheckConfig { model, search }
    }
}

/// The verdict on one property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropertyOutcome {
    /// An `always` property: no reachable state violates it (search complete).
    Holds,
    /// An `always` property: a counterexample with this many steps exists.
    Violated {
        /// Steps of the counterexample found.
        steps: usize,
    },
    /// A `sometimes` property: a witness with this many steps exists.
    Witnessed {
        /// Steps of the witness found.
        steps: usize,
    },
    /// A `sometimes` property: no reachable state satisfies it (search complete).
    NotWitnessed,
    /// The search stopped before deciding this property.
    Undecided,
}

impl PropertyOutcome {
    /// Whether this outcome is what the reference protocol must produce.
    pub fn is_good(self) -> bool {
        matches!(
            self,
            PropertyOutcome::Holds | PropertyOutcome::Witnessed { .. }
        )
    }
}

/// The result of one `check`.
#[derive(Clone, Debug)]
pub struct ModelReport {
    /// The configuration checked.
    pub config: CheckConfig,
    /// Unique states the checker generated (after symmetry reduction, if any).
    pub unique_states: usize,
    /// Wall time the search took (both passes for `FirstViolation`).
    pub elapsed: Duration,
    /// `unique_states / elapsed`.
    pub states_per_second: f64,
    /// Whether the whole reachable state space was explored.
    pub complete: bool,
    /// Every property with its outcome, in the model's order.
    pub properties: Vec<(&'static str, PropertyOutcome)>,
    /// The counterexample to the expected (or first failing) property.
    pub counterexample: Option<Trace>,
}

impl ModelReport {
    /// The outcome of the property `name`, if the model has it.
    pub fn outcome(&self, name: &str) -> Option<PropertyOutcome> {
        self.properties
            .iter()
            .find(|(property, _)| *property == name)
            .map(|(_, outcome)| *outcome)
    }

    /// Whether some `always` property was violated.
    pub fn refuted(&self) -> bool {
        self.properties
            .iter()
            .any(|(_, outcome)| matches!(outcome, PropertyOutcome::Violated { .. }))
    }

    /// For a variant: whether its expected property was violated. For the
    /// reference: whether every `always` holds and every `sometimes` was witnessed.
    pub fn as_expected(&self) -> bool {
        match self.config.model.variant.expected_violation() {
            Some(name) => matches!(self.outcome(name), Some(PropertyOutcome::Violated { .. })),
            None => self.complete && self.properties.iter().all(|(_, outcome)| outcome.is_good()),
        }
    }
}

type LeasePath = Path<LeaseState, LeaseAction>;

struct SearchResult {
    unique_states: usize,
    discoveries: HashMap<&'static str, LeasePath>,
}

fn run_search(config: &CheckConfig, target_max_depth: Option<usize>) -> SearchResult {
    let model = config.model;
    let mut builder = model.checker();
    if let Some(depth) = target_max_depth {
        builder = builder.target_max_depth(depth);
    }
    match config.search {
        Search::Exhaustive => collect(builder.spawn_bfs().join()),
        Search::ExhaustiveSymmetric => {
            collect(builder.symmetry_fn(representative).spawn_dfs().join())
        }
        Search::FirstViolation => {
            let finish_when = match model.variant.expected_violation() {
                Some(name) => HasDiscoveries::AnyOf(BTreeSet::from([name])),
                None => HasDiscoveries::AnyFailures,
            };
            collect(builder.finish_when(finish_when).spawn_bfs().join())
        }
    }
}

/// The shortest path (fewest steps) to a state that decides `property`: a
/// counterexample for an `always`, a witness for a `sometimes`. `None` when
/// no reachable state decides it. Breadth-first, without symmetry reduction.
pub fn shortest_path(model: &LeaseModel, property: &'static str) -> Option<Trace> {
    let search = |target_max_depth: Option<usize>| {
        let mut builder = model
            .checker()
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])));
        if let Some(depth) = target_max_depth {
            builder = builder.target_max_depth(depth);
        }
        builder.spawn_bfs().join().discovery(property)
    };
    let found = search(None)?;
    // See `check`: one more search, a step shorter, settles minimality.
    let steps = path_steps(&found);
    let path = match steps {
        0 => found,
        _ => search(Some(steps + 1)).unwrap_or(found),
    };
    Some(Trace::from_path(model, property, &path))
}

fn collect(checker: impl Checker<LeaseModel>) -> SearchResult {
    SearchResult {
        unique_states: checker.unique_state_count(),
        discoveries: checker.discoveries(),
    }
}

/// Runs the model checker as `config` says and reports every property.
pub fn check(config: &CheckConfig) -> ModelReport {
    let started = Instant::now();
    let model = config.model;
    let mut result = run_search(config, None);
    let target = match model.variant.expected_violation() {
        Some(name) => Some(name),
        None => first_violated(&model, &result.discoveries),
    };
    // A first-violation search that found nothing ran out of states.
    let complete = config.search != Search::FirstViolation
        || !target.is_some_and(|name| result.discoveries.contains_key(name));
    if config.search == Search::FirstViolation {
        // BFS finds the shortest violation first, but a later state of the
        // same block of work may overwrite it with one a step longer: search
        // once more, only up to one step less, to be sure it is the shortest.
        if let Some(steps) = target
            .and_then(|name| result.discoveries.get(name))
            .map(path_steps)
        {
            if steps > 0 {
                let shorter = run_search(config, Some(steps + 1));
                let shorter_found = target
                    .and_then(|name| shorter.discoveries.get(name))
                    .is_some();
                if shorter_found {
                    result.discoveries = shorter.discoveries;
                }
            }
        }
    }
    let elapsed = started.elapsed();
    let properties = model
        .properties()
        .iter()
        .map(|property| {
            let found = result.discoveries.get(property.name).map(path_steps);
            let outcome = match (&property.expectation, found) {
                (Expectation::Sometimes, Some(steps)) => PropertyOutcome::Witnessed { steps },
                (_, Some(steps)) => PropertyOutcome::Violated { steps },
                (_, None) if !complete => PropertyOutcome::Undecided,
                (Expectation::Sometimes, None) => PropertyOutcome::NotWitnessed,
                (_, None) => PropertyOutcome::Holds,
            };
            (property.name, outcome)
        })
        .collect();
    let counterexample = target
        .and_then(|name| result.discoveries.get(name).map(|path| (name, path)))
        .map(|(name, path)| Trace::from_path(&model, name, path));
    let seconds = elapsed.as_secs_f64().max(1e-9);
    ModelReport {
        config: *config,
        unique_states: result.unique_states,
        elapsed,
        states_per_second: result.unique_states as f64 / seconds,
        complete,
        properties,
        counterexample,
    }
}

fn first_violated(
    model: &LeaseModel,
    discoveries: &HashMap<&'static str, LeasePath>,
) -> Option<&'static str> {
    model
        .properties()
        .iter()
        .filter(|property| property.expectation != Expectation::Sometimes)
        .map(|property| property.name)
        .find(|name| discoveries.contains_key(name))
}

fn path_steps(path: &LeasePath) -> usize {
    path.clone().into_actions().len()
}

/// Checks the reference model and every broken variant with `workers` workers
/// (default bounds), each with `CheckConfig::new`.
pub fn verify_all(workers: usize) -> Vec<ModelReport> {
    Variant::ALL
        .into_iter()
        .map(|variant| check(&CheckConfig::new(LeaseModel::new(workers, variant))))
        .collect()
}

/// Serves stateright's web explorer for `config.model` on `address` (e.g.
/// `"localhost:3000"`). Blocks while the server runs; panics if the address
/// cannot be bound (stateright's behaviour).
pub fn explore(config: &CheckConfig, address: impl std::net::ToSocketAddrs) {
    let _checker = config.model.checker().serve(address);
}

impl std::fmt::Display for ModelReport {
    /// A summary for people: the configuration, the size and speed of the
    /// search, every property's outcome, then the counterexample if any.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let model = &self.config.model;
        writeln!(
            formatter,
            "model {} ({}), {} workers, ttl {} ticks, clock to {} ticks, skew up to {} ticks, drift period {} ticks, {} crash(es), {} grants",
            model.variant.name(),
            model.variant.description(),
            model.workers,
            model.ttl_ticks,
            model.time_ticks_max,
            model.skew_ticks_max,
            model.drift_period_ticks,
            model.crashes_max,
            model.grants_max,
        )?;
        writeln!(
            formatter,
            "search {:?}: {} unique states in {:.2?} ({:.0} states/s){}",
            self.config.search,
            self.unique_states,
            self.elapsed,
            self.states_per_second,
            if self.complete {
                ", complete"
            } else {
                ", stopped at the first violation"
            }
        )?;
        for (name, outcome) in &self.properties {
            writeln!(formatter, "  {name:<40} {outcome:?}")?;
        }
        match &self.counterexample {
            Some(trace) => write!(formatter, "counterexample: {trace}"),
            None => Ok(()),
        }
    }
}
