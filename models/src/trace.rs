//! A counterexample as a reader wants it: one line per step.
//!
//! Goal: make a stateright path readable without the explorer: who did what,
//! at which server time, what that worker's own clock read, and the lease row
//! after the step.
//! Method: replay the path's states pairwise and render each transition.
//! Invariant: the trace has exactly one line per action of the path, numbered
//! from 1, and its last state is the one that breaks (or witnesses) the property.

use crate::model::{Clock, LeaseAction, LeaseModel, LeaseRow, LeaseState, Owner, Phase};
use stateright::Path;
use std::fmt;

/// One step of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceStep {
    /// Step number, from 1.
    pub number: usize,
    /// The worker and incarnation that acted (before the step); `None` for a tick.
    pub actor: Option<Owner>,
    /// What it did, e.g. `"Acquire -> Granted { token: 2 }"`.
    pub action: String,
    /// The server's clock after the step, in ticks.
    pub server_time_ticks: u8,
    /// The acting worker's local clock after the step, in ticks.
    pub local_time_ticks: Option<u8>,
    /// The lease row after the step.
    pub row_after: Option<LeaseRow>,
}

/// A path from an initial state to the state that decides a property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The property this trace decides.
    pub property: &'static str,
    /// Each worker's clock, as chosen in the initial state.
    pub clocks: Vec<Clock>,
    /// The steps, in order.
    pub steps: Vec<TraceStep>,
    /// The final state, for a reader who wants the ghost's verdict.
    pub last_state: LeaseState,
}

impl Trace {
    /// Renders a stateright path of `model`.
    pub fn from_path(
        model: &LeaseModel,
        property: &'static str,
        path: &Path<LeaseState, LeaseAction>,
    ) -> Trace {
        let visited = path.clone().into_vec();
        let first = visited.first().expect("a path has an initial state").0;
        let clocks = (0..model.workers)
            .map(|worker| first.workers[worker].clock)
            .collect();
        let mut steps = Vec::new();
        for (index, pair) in visited.windows(2).enumerate() {
            let (before, action) = (&pair[0].0, pair[0].1);
            let after = &pair[1].0;
            let action = action.expect("every state but the last has an action");
            let (actor, description, local_time_ticks) = match action {
                LeaseAction::Tick => (None, "tick".to_string(), None),
                LeaseAction::Worker(worker, step) => {
                    let worker = worker as usize;
                    let actor = Owner {
                        worker: worker as u8,
                        incarnation: before.workers[worker].incarnation,
                    };
                    let phase_after = describe_phase(after.workers[worker].phase);
                    (
                        Some(actor),
                        format!("{step:?} -> {phase_after}"),
                        Some(model.worker_local_time_ticks(after, worker)),
                    )
                }
            };
            steps.push(TraceStep {
                number: index + 1,
                actor,
                action: description,
                server_time_ticks: after.now_ticks,
                local_time_ticks,
                row_after: after.row,
            });
        }
        let last_state = path.last_state().to_owned();
        Trace {
            property,
            clocks,
            steps,
            last_state,
        }
    }
}

fn describe_phase(phase: Phase) -> String {
    match phase {
        Phase::Holding {
            token,
            belief_deadline_local_ticks,
        } => format!("Holding(token {token}, believes until local {belief_deadline_local_ticks})"),
        Phase::Fenced {
            token,
            belief_deadline_local_ticks,
        } => format!("Fenced(token {token}, believes until local {belief_deadline_local_ticks})"),
        Phase::Granted { token } => format!("Granted(token {token}, reply in flight)"),
        other => format!("{other:?}"),
    }
}

fn describe_row(row: Option<LeaseRow>) -> String {
    match row {
        None => "row: none".to_string(),
        Some(row) => format!(
            "row: owner w{}#{} token {} expires_at {}",
            row.owner.worker, row.owner.incarnation, row.token, row.expires_at_ticks
        ),
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            formatter,
            "{} steps to decide {}",
            self.steps.len(),
            self.property
        )?;
        for (worker, clock) in self.clocks.iter().enumerate() {
            writeln!(
                formatter,
                "  clock w{worker}: offset +{} ticks, {}",
                clock.offset_ticks,
                if clock.slow { "slow" } else { "nominal rate" }
            )?;
        }
        for step in &self.steps {
            let actor = match step.actor {
                Some(owner) => format!("w{}#{}", owner.worker, owner.incarnation),
                None => "server".to_string(),
            };
            let local = match step.local_time_ticks {
                Some(ticks) => format!("local={ticks:<2}"),
                None => "        ".to_string(),
            };
            writeln!(
                formatter,
                "{:>3}. {:<7} server={:<2} {}  {:<62} {}",
                step.number,
                actor,
                step.server_time_ticks,
                local,
                step.action,
                describe_row(step.row_after)
            )?;
        }
        Ok(())
    }
}
