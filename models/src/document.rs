//! `model --json`: the verdict on each model checked, as one document
//! (format `leaseproof-model`, docs/json.md).

use leaseproof_history::Document as _;
use serde::{Deserialize, Serialize};

use crate::{ModelReport, PropertyOutcome, Trace};

/// `model --json`: every model checked in one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDocument {
    /// Always `leaseproof-model`.
    pub format: String,
    /// Always 1.
    pub version: u32,
    /// Every model came out as expected: the reference keeps every property,
    /// each broken variant is refuted on its expected one.
    pub passed: bool,
    /// One entry per model, in the order checked.
    pub models: Vec<ModelVerdict>,
}

/// One model's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelVerdict {
    /// `reference` or the broken variant's name.
    pub variant: String,
    /// Workers in the model.
    pub workers: usize,
    /// `exhaustive`, `exhaustive-symmetric` or `first-violation`.
    pub search: String,
    /// The property a broken variant must violate; `None` for the reference.
    pub expected_violation: Option<String>,
    /// The model came out as expected.
    pub as_expected: bool,
    /// The whole reachable state space was explored.
    pub complete: bool,
    /// Unique states generated.
    pub unique_states: u64,
    /// Wall time of the search, µs.
    pub elapsed_us: u64,
    /// Every property (by its one name, e.g. `i1-mutual-exclusion`), in the model's order.
    pub properties: Vec<PropertyVerdict>,
    /// The counterexample to the expected (or first failing) property.
    pub counterexample: Option<CounterexampleDocument>,
}

/// One property's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PropertyVerdict {
    /// The property's one name.
    pub name: String,
    /// `holds`, `violated`, `witnessed`, `not-witnessed` or `undecided`.
    pub outcome: String,
    /// Steps of the counterexample or witness, when one was found.
    pub steps: Option<u64>,
}

/// A counterexample path, one entry per step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterexampleDocument {
    /// The property it decides.
    pub property: String,
    /// The steps, in order.
    pub steps: Vec<StepDocument>,
}

/// One step of a counterexample.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepDocument {
    /// `w<worker>#<incarnation>`, or `server` for a tick.
    pub actor: String,
    /// What it did, e.g. `Acquire -> Granted { token: 2 }`.
    pub action: String,
    /// The server's clock after the step, ticks.
    pub server_time_ticks: u8,
    /// The actor's local clock after the step, ticks.
    pub local_time_ticks: Option<u8>,
}

impl leaseproof_history::Document for ModelDocument {
    const FORMAT: &'static str = "leaseproof-model";
    const VERSION: u32 = 1;
}

impl ModelDocument {
    /// The document for these reports.
    pub fn new(reports: &[ModelReport]) -> ModelDocument {
        let models: Vec<ModelVerdict> = reports.iter().map(ModelVerdict::from_report).collect();
        ModelDocument {
            format: Self::FORMAT.to_string(),
            version: Self::VERSION,
            passed: models.iter().all(|model| model.as_expected),
            models,
        }
    }
}

impl ModelVerdict {
    /// One report as data.
    pub fn from_report(report: &ModelReport) -> ModelVerdict {
        let model = report.config.model;
        ModelVerdict {
            variant: model.variant.to_string(),
            workers: model.workers,
            search: match report.config.search {
                crate::Search::Exhaustive => "exhaustive",
                crate::Search::ExhaustiveSymmetric => "exhaustive-symmetric",
                crate::Search::FirstViolation => "first-violation",
            }
            .to_string(),
            expected_violation: model.variant.expected_violation().map(str::to_string),
            as_expected: report.as_expected(),
            complete: report.complete,
            unique_states: report.unique_states as u64,
            elapsed_us: u64::try_from(report.elapsed.as_micros()).unwrap_or(u64::MAX),
            properties: report
                .properties
                .iter()
                .map(|(name, outcome)| {
                    let (outcome, steps) = match *outcome {
                        PropertyOutcome::Holds => ("holds", None),
                        PropertyOutcome::Violated { steps } => ("violated", Some(steps as u64)),
                        PropertyOutcome::Witnessed { steps } => ("witnessed", Some(steps as u64)),
                        PropertyOutcome::NotWitnessed => ("not-witnessed", None),
                        PropertyOutcome::Undecided => ("undecided", None),
                    };
                    PropertyVerdict {
                        name: (*name).to_string(),
                        outcome: outcome.to_string(),
                        steps,
                    }
                })
                .collect(),
            counterexample: report.counterexample.as_ref().map(counterexample),
        }
    }
}

fn counterexample(trace: &Trace) -> CounterexampleDocument {
    CounterexampleDocument {
        property: trace.property.to_string(),
        steps: trace
            .steps
            .iter()
            .map(|step| StepDocument {
                actor: match step.actor {
                    Some(owner) => format!("w{}#{}", owner.worker, owner.incarnation),
                    None => "server".to_string(),
                },
                action: step.action.clone(),
                server_time_ticks: step.server_time_ticks,
                local_time_ticks: step.local_time_ticks,
            })
            .collect(),
    }
}
