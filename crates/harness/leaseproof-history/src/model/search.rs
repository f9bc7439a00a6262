//! The search for an explanation of one scope: which operations took
//! effect, in what order, and what each did.
//!
//! Wing and Gong's search as Porcupine runs it: depth first, each step
//! places one operation that may take effect next — one whose invoke is not
//! after the earliest completion of an operation answered `ok` not yet
//! placed (that one's effect came no later than its completion). An
//! operation of unknown outcome is always a candidate and never needed.
//! The store's clock is a [`Zone`] per state; a state whose every
//! continuation failed is remembered and not tried again.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::design::GrantStamps;
use crate::model::lease::{self, Choice, Context, Relax, Row, KEPT, LAST};
use crate::model::operations::{Answer, Call, Operation};
use crate::model::zone::Zone;

/// One scope's operations, as the search reads them.
pub(crate) struct Scope<'s> {
    pub operations: &'s [Operation],
    /// Each operation's owner, as an index.
    owners: Vec<usize>,
    /// Per owner, the tokens its calls and answers show it knew.
    known_tokens: Vec<Vec<u64>>,
    /// Operations answered `ok`, by completion: the order their deadlines come.
    by_deadline: Vec<usize>,
    pub stamps: GrantStamps,
}

impl<'s> Scope<'s> {
    pub(crate) fn new(operations: &'s [Operation], stamps: GrantStamps) -> Scope<'s> {
        let mut names = BTreeMap::new();
        let owners: Vec<usize> = operations
            .iter()
            .map(|operation| {
                let next = names.len();
                *names.entry(operation.owner.as_str()).or_insert(next)
            })
            .collect();
        let mut known: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); names.len()];
        for (operation, &owner) in operations.iter().zip(&owners) {
            match (&operation.call, &operation.answer) {
                (_, Answer::Lease { token, .. })
                | (Call::Renew { token, .. }, _)
                | (Call::Release { token }, _) => {
                    known[owner].insert(*token);
                }
                _ => {}
            }
        }
        let mut by_deadline: Vec<usize> = (0..operations.len())
            .filter(|&index| operations[index].deadline_us().is_some())
            .collect();
        by_deadline.sort_by_key(|&index| operations[index].deadline_us());
        Scope {
            operations,
            owners,
            known_tokens: known
                .into_iter()
                .map(|set| set.into_iter().collect())
                .collect(),
            by_deadline,
            stamps,
        }
    }
}

impl Scope<'_> {
    /// What a step of operation `index` needs, after effects whose latest
    /// completion was `latest_completion` (`None`: one of unknown outcome).
    pub(crate) fn context(
        &self,
        index: usize,
        latest_completion: Option<i64>,
        relax: Relax,
    ) -> Context<'_> {
        let owner = self.owners[index];
        let invoke_us = self.operations[index].invoke_us;
        Context {
            owner,
            stamps: self.stamps,
            relax,
            after_every_effect: latest_completion.is_some_and(|at| at < invoke_us),
            known_tokens: &self.known_tokens[owner],
        }
    }
}

/// One effect of an explanation: which operation, and what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placed {
    pub operation: usize,
    pub choice: Choice,
}

/// What the search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// These effects, in this order, explain the scope.
    Explanation(Vec<Placed>),
    /// Every candidate was tried: no explanation exists.
    None,
    /// The budget of states ran out first.
    OverBudget,
}

/// A state of the search: what is placed, the row, the clock.
#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    placed: Vec<u64>,
    /// How many operations answered `ok` are placed.
    mandatory: usize,
    /// The latest completion of an effect placed; `None` once one of
    /// unknown outcome is (it may have come at any time).
    latest_completion: Option<i64>,
    row: Row,
    zone: Zone,
}

struct Frame {
    state: State,
    /// Effects to try from here, the next last.
    untried: Vec<(Placed, State)>,
    /// How this frame was reached.
    via: Option<Placed>,
}

/// Searches `scope` under `relax`; `states` counts what was tried.
pub(crate) fn search(scope: &Scope<'_>, relax: Relax, budget: u64, states: &mut u64) -> Found {
    let start = State {
        placed: vec![0; scope.operations.len().div_ceil(64)],
        mandatory: 0,
        latest_completion: Some(i64::MIN),
        row: Row::default(),
        zone: Zone::new(KEPT - 1),
    };
    let mandatory = scope.operations.iter().filter(|o| o.took_effect()).count();
    let mut failed: HashSet<State> = HashSet::new();
    let mut stack = vec![Frame {
        untried: successors(scope, &start, relax),
        state: start,
        via: None,
    }];
    loop {
        let Some(frame) = stack.last_mut() else {
            return Found::None;
        };
        if frame.state.mandatory == mandatory {
            return Found::Explanation(stack.iter().filter_map(|frame| frame.via).collect());
        }
        let Some((placed, state)) = frame.untried.pop() else {
            let done = stack.pop().expect("a frame");
            failed.insert(done.state);
            continue;
        };
        if failed.contains(&state) {
            continue;
        }
        *states += 1;
        if *states > budget {
            return Found::OverBudget;
        }
        stack.push(Frame {
            untried: successors(scope, &state, relax),
            state,
            via: Some(placed),
        });
    }
}

fn is_placed(state: &State, index: usize) -> bool {
    state.placed[index / 64] & (1 << (index % 64)) != 0
}

/// Every effect that may come next, the most promising last (it is tried
/// first): operations answered `ok` before those of unknown outcome.
fn successors(scope: &Scope<'_>, state: &State, relax: Relax) -> Vec<(Placed, State)> {
    let deadline = scope
        .by_deadline
        .iter()
        .find(|&&index| !is_placed(state, index))
        .and_then(|&index| scope.operations[index].deadline_us())
        .unwrap_or(i64::MAX);
    let mut next = Vec::new();
    for (index, operation) in scope.operations.iter().enumerate() {
        if operation.invoke_us > deadline {
            break;
        }
        if is_placed(state, index) || operation.answer == Answer::Refused {
            continue;
        }
        let context = scope.context(index, state.latest_completion, relax);
        for choice in lease::choices(&state.row, operation, &context) {
            if let Some(after) = place(scope, state, index, choice, &context) {
                next.push((
                    Placed {
                        operation: index,
                        choice,
                    },
                    after,
                ));
            }
        }
    }
    next.sort_by_key(|(placed, _)| scope.operations[placed.operation].took_effect());
    next
}

/// The state after operation `index` took effect as `choice`, if it can.
fn place(
    scope: &Scope<'_>,
    state: &State,
    index: usize,
    choice: Choice,
    context: &Context<'_>,
) -> Option<State> {
    let mut zone = state.zone.clone();
    let readings = lease::read_clock(&mut zone, context)?;
    let operation = &scope.operations[index];
    let row = lease::step(&state.row, &mut zone, readings, operation, choice, context)?;
    zone.assign(LAST, readings.decision);
    zone.truncate(KEPT);
    let mut placed = state.placed.clone();
    placed[index / 64] |= 1 << (index % 64);
    let deadline = operation.deadline_us();
    Some(State {
        placed,
        mandatory: state.mandatory + usize::from(deadline.is_some()),
        latest_completion: state.latest_completion.zip(deadline).map(|(a, b)| a.max(b)),
        row,
        zone,
    })
}
