//! The model's verdicts as `check --model --json` writes them: per scope,
//! what was found, how hard the search looked, and the proof — the
//! certificate's events and facts, or the explanation's effects in order.

use serde::{Deserialize, Serialize};

use crate::check::Invariant;
use crate::model::{certificate, Certificate, Choice, ModelReport, ScopeVerdict, Verdict};

/// One scope's verdict and its proof.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeDocument {
    /// The scope.
    pub scope: String,
    /// `explained`, `possible`, `violated`, `could-not-judge` or
    /// `not-modelled`.
    pub verdict: String,
    /// Its lease operations.
    pub operations: u64,
    /// States the searches tried.
    pub states: u64,
    /// Possible or violated: the parts of the specification that, dropped
    /// together, leave an explanation (empty: none does).
    pub invariants: Vec<Invariant>,
    /// Possible or violated: the events of the operations that alone have no
    /// explanation, every other one read as of unknown outcome.
    pub certificate_events: Vec<u64>,
    /// Those operations, each as a fact: what it asked, what it was
    /// answered, when.
    pub facts: Vec<String>,
    /// Explained: the effects in the order they took place (none drawn for
    /// a long scope).
    pub explanation: Option<Vec<EffectDocument>>,
    /// Could not judge or not modelled: why.
    pub reason: Option<String>,
}

/// One effect of an explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectDocument {
    /// The operation's invoke event.
    pub invoke_event: u64,
    /// Its caller.
    pub owner: String,
    /// What it did: `new-grant`, `extended`, `kept`, `ended`, `nothing`.
    pub did: String,
    /// Whether the answer's `granted_at` is this effect's stamp.
    pub restamped: bool,
    /// The store's clock when it decided.
    pub decision_us: i64,
    /// The stamp it wrote.
    pub stamp_us: i64,
}

/// Every scope's document.
pub fn documents(report: &ModelReport) -> Vec<ScopeDocument> {
    report.scopes.iter().map(ScopeVerdict::document).collect()
}

impl ScopeVerdict {
    /// This verdict as `check --json` writes it.
    pub fn document(&self) -> ScopeDocument {
        let mut document = ScopeDocument {
            scope: self.scope.clone(),
            verdict: String::new(),
            operations: self.operations.len() as u64,
            states: self.states,
            invariants: Vec::new(),
            certificate_events: Vec::new(),
            facts: Vec::new(),
            explanation: None,
            reason: None,
        };
        document.verdict = match &self.verdict {
            Verdict::Explained(explanation) => {
                document.explanation = explanation.as_ref().map(|explanation| {
                    (explanation.effects.iter())
                        .map(|effect| self.effect_document(effect))
                        .collect()
                });
                "explained"
            }
            Verdict::Possible(certificate) => {
                self.certify(&mut document, certificate);
                "possible"
            }
            Verdict::Violated(certificate) => {
                self.certify(&mut document, certificate);
                "violated"
            }
            Verdict::CouldNotJudge(reason) => {
                document.reason = Some(reason.clone());
                "could-not-judge"
            }
            Verdict::NotModelled(reason) => {
                document.reason = Some(reason.clone());
                "not-modelled"
            }
        }
        .to_string();
        document
    }

    fn certify(&self, document: &mut ScopeDocument, certificate: &Certificate) {
        document.invariants = certificate.invariants.clone();
        let operations = certificate
            .operations
            .iter()
            .map(|&index| &self.operations[index]);
        let mut events: Vec<u64> = operations
            .clone()
            .flat_map(|operation| operation.events())
            .collect();
        events.sort_unstable();
        document.certificate_events = events;
        document.facts = operations.map(certificate::fact).collect();
    }

    fn effect_document(&self, effect: &crate::model::Effect) -> EffectDocument {
        let operation = &self.operations[effect.operation];
        let (did, restamped) = match effect.choice {
            Choice::NewGrant => ("new-grant", false),
            Choice::Extended { extends, restamped } => {
                (if extends { "extended" } else { "kept" }, restamped)
            }
            Choice::Ended => ("ended", false),
            Choice::Nothing => ("nothing", false),
        };
        EffectDocument {
            invoke_event: operation.invoke_event,
            owner: operation.owner.clone(),
            did: did.to_string(),
            restamped,
            decision_us: effect.decision_us,
            stamp_us: effect.stamp_us,
        }
    }
}
