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
use crate::model::lease::{self, Choice, Context, Relax, Row, KEPT, LAST, LAST_ANSWERED};
use crate::model::operations::{Answer, Call, Operation};
use crate::model::zone::Zone;
use crate::model::Assumptions;

/// One scope's operations, as the search reads them.
pub(crate) struct Scope<'s> {
    pub operations: &'s [Operation],
    /// Each operation's owner, as an index.
    owners: Vec<usize>,
    /// Per owner, the tokens its calls and answers show it knew.
    known_tokens: Vec<Vec<u64>>,
    /// Operations answered `ok`, by completion: the order their deadlines come.
    by_deadline: Vec<usize>,
    /// Operations never worth placing: see [`inert`].
    inert: Vec<bool>,
    pub stamps: GrantStamps,
    assumptions: Assumptions,
}

impl<'s> Scope<'s> {
    pub(crate) fn new(
        operations: &'s [Operation],
        stamps: GrantStamps,
        assumptions: Assumptions,
    ) -> Scope<'s> {
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
            inert: inert(operations),
            operations,
            owners,
            known_tokens: known
                .into_iter()
                .map(|set| set.into_iter().collect())
                .collect(),
            by_deadline,
            stamps,
            assumptions,
        }
    }
}

impl Scope<'_> {
    /// What a step of operation `index` needs, after answered effects
    /// whose latest completion was `latest_completion`, when the earliest
    /// completion of an answered operation still to take effect (this one
    /// included) is `deadline`.
    pub(crate) fn context(
        &self,
        index: usize,
        latest_completion: i64,
        deadline: i64,
        relax: Relax,
    ) -> Context<'_> {
        let owner = self.owners[index];
        let invoke_us = self.operations[index].invoke_us;
        Context {
            owner,
            stamps: self.stamps,
            rounding_us: self.assumptions.stamp_rounding_us,
            restamps: self.assumptions.restamps,
            relax,
            after_the_answered: latest_completion < invoke_us,
            after_every_effect: deadline <= invoke_us,
            known_tokens: &self.known_tokens[owner],
        }
    }
}

/// Acquisitions and renewals of unknown outcome whose owner got no answer
/// to anything it sent later. Such an effect only takes the lease or keeps
/// it, which only its owner's later operations could need: an explanation
/// that places it stays one without it (and without its owner's later
/// operations of unknown outcome), so the search never places it.
fn inert(operations: &[Operation]) -> Vec<bool> {
    let mut answered_later: BTreeMap<&str, i64> = BTreeMap::new();
    for operation in operations
        .iter()
        .filter(|operation| operation.took_effect())
    {
        let latest = answered_later.entry(&operation.owner).or_insert(i64::MIN);
        *latest = (*latest).max(operation.invoke_us);
    }
    operations
        .iter()
        .map(|operation| {
            operation.answer == Answer::Unknown
                && !matches!(operation.call, Call::Release { .. })
                && answered_later
                    .get(operation.owner.as_str())
                    .is_none_or(|&latest| latest <= operation.invoke_us)
        })
        .collect()
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
    /// The latest completion of an answered effect placed.
    latest_completion: i64,
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
        latest_completion: i64::MIN,
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
        if is_placed(state, index) || operation.answer == Answer::Refused || scope.inert[index] {
            continue;
        }
        let context = scope.context(index, state.latest_completion, deadline, relax);
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
    let deadline = operation.deadline_us();
    if deadline.is_some() {
        zone.assign(LAST_ANSWERED, readings.decision);
    }
    zone.truncate(KEPT);
    let mut placed = state.placed.clone();
    placed[index / 64] |= 1 << (index % 64);
    Some(State {
        placed,
        mandatory: state.mandatory + usize::from(deadline.is_some()),
        latest_completion: state.latest_completion.max(deadline.unwrap_or(i64::MIN)),
        row,
        zone,
    })
}
