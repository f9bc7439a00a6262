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

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use crate::design::GrantStamps;
use crate::model::lease::{self, Choice, Context, Relax, Row, KEPT};
use crate::model::operations::{Answer, Call, Operation};
use crate::model::zone::Zone;
use crate::model::Assumptions;

/// One scope's operations, as the search reads them.
pub(crate) struct Scope<'s> {
    pub operations: &'s [Operation],
    /// Each operation's owner, as an index.
    owners: Vec<usize>,
    /// Operations answered `ok`, by completion: the order their deadlines come.
    by_deadline: Vec<usize>,
    /// Per owner, its operations answered `ok`, the latest answered first
    /// (see [`spent`]).
    answered_by_owner: Vec<Vec<usize>>,
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
        let mut by_deadline: Vec<usize> = (0..operations.len())
            .filter(|&index| operations[index].deadline_us().is_some())
            .collect();
        by_deadline.sort_by_key(|&index| operations[index].deadline_us());
        Scope {
            answered_by_owner: answered_by_owner(operations, &owners),
            operations,
            owners,
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
    ) -> Context {
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
        }
    }
}

/// Per owner, its operations answered `ok`, the latest answered first.
fn answered_by_owner(operations: &[Operation], owners: &[usize]) -> Vec<Vec<usize>> {
    let mut answered = vec![Vec::new(); owners.iter().max().map_or(0, |max| max + 1)];
    for (index, operation) in operations.iter().enumerate() {
        if operation.took_effect() {
            answered[owners[index]].push(index);
        }
    }
    for list in &mut answered {
        list.sort_by_key(|&index| Reverse(operations[index].complete_us));
    }
    answered
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

/// A state of the search: what is settled, the row, the clock.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct State {
    settled: Settled,
    /// The first of the scope's `by_deadline` not yet placed.
    next_deadline: usize,
    /// How many operations answered `ok` are placed.
    mandatory: usize,
    /// The latest completion of an answered effect placed.
    latest_completion: i64,
    row: Row,
    zone: Zone,
}

struct Frame {
    state: State,
    /// Effects to try from here, the next last: those of operations
    /// answered `ok` first, then, once they are all tried, those of
    /// unknown outcome.
    untried: Vec<Placed>,
    unknowns_listed: bool,
    /// How this frame was reached.
    via: Option<Placed>,
}

/// Searches `scope` under `relax`; `states` counts what was tried.
pub(crate) fn search(scope: &Scope<'_>, relax: Relax, budget: u64, states: &mut u64) -> Found {
    let mut start = State {
        settled: Settled::default(),
        next_deadline: 0,
        mandatory: 0,
        latest_completion: i64::MIN,
        row: Row::default(),
        zone: Zone::new(KEPT - 1),
    };
    advance(scope, &mut start, relax);
    let mandatory = scope.by_deadline.len();
    let mut failed: BTreeSet<State> = BTreeSet::new();
    let mut stack = vec![Frame {
        untried: candidates(scope, &start, relax, false),
        unknowns_listed: false,
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
        if frame.untried.is_empty() && !frame.unknowns_listed {
            frame.untried = candidates(scope, &frame.state, relax, true);
            frame.unknowns_listed = true;
        }
        let Some(placed) = frame.untried.pop() else {
            let done = stack.pop().expect("a frame");
            failed.insert(done.state);
            continue;
        };
        let Some(state) = place(scope, &frame.state, placed, relax) else {
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
            untried: candidates(scope, &state, relax, false),
            unknowns_listed: false,
            state,
            via: Some(placed),
        });
    }
}

/// Which operations are settled — placed, refused, or of unknown outcome
/// and no longer worth placing — kept small: every operation before
/// `frontier` is, but those in `open` (of unknown outcome, still worth
/// placing); from it on, those in `placed` are, and refused ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Settled {
    frontier: usize,
    /// Shared between states until one changes it.
    open: Rc<Vec<usize>>,
    placed: Vec<usize>,
}

impl Settled {
    fn contains(&self, index: usize) -> bool {
        if index < self.frontier {
            self.open.binary_search(&index).is_err()
        } else {
            self.placed.binary_search(&index).is_ok()
        }
    }

    fn place(&mut self, index: usize) {
        if index < self.frontier {
            if let Ok(position) = self.open.binary_search(&index) {
                Rc::make_mut(&mut self.open).remove(position);
            }
        } else if let Err(position) = self.placed.binary_search(&index) {
            self.placed.insert(position, index);
        }
    }
}

fn is_settled(state: &State, index: usize) -> bool {
    state.settled.contains(index)
}

/// The earliest completion of an answered operation not yet placed.
fn deadline(scope: &Scope<'_>, state: &State) -> i64 {
    scope
        .by_deadline
        .get(state.next_deadline)
        .and_then(|&index| scope.operations[index].deadline_us())
        .unwrap_or(i64::MAX)
}

/// Whether operation `index`, of unknown outcome, can no longer help an
/// explanation. An acquisition or renewal only takes the lease or keeps
/// it, which only its owner's operations answered `ok` and answered after
/// it was sent could need (any of its owner's threads): once they have all
/// taken effect, an explanation that places it stays one without it (and
/// without its owner's later operations of unknown outcome). A renewal or a
/// release, besides, once the row's token has passed its own (tokens only
/// grow).
fn spent(scope: &Scope<'_>, state: &State, index: usize, relax: Relax) -> bool {
    let operation = &scope.operations[index];
    let passed = |token: u64| {
        !relax.tokens
            && state
                .row
                .holder
                .is_some_and(|(_, held)| held.least() > token)
    };
    let unneeded = || {
        scope.answered_by_owner[scope.owners[index]]
            .iter()
            .take_while(|&&other| {
                scope.operations[other]
                    .complete_us
                    .is_some_and(|at| at >= operation.invoke_us)
            })
            .all(|&other| is_settled(state, other))
    };
    match operation.call {
        Call::Acquire { .. } => unneeded(),
        Call::Renew { token, .. } => passed(token) || unneeded(),
        Call::Release { token } => passed(token),
    }
}

/// Moves the frontier past what is settled (refused or placed) or of
/// unknown outcome (kept open while it is worth placing), forgets the open
/// ones that are spent, and moves the deadline past what is placed.
fn advance(scope: &Scope<'_>, state: &mut State, relax: Relax) {
    let spent_open: Vec<usize> = (state.settled.open.iter().copied())
        .filter(|&index| spent(scope, state, index, relax))
        .collect();
    if !spent_open.is_empty() {
        Rc::make_mut(&mut state.settled.open).retain(|index| !spent_open.contains(index));
    }
    while let Some(operation) = scope.operations.get(state.settled.frontier) {
        let index = state.settled.frontier;
        if state.settled.placed.first() == Some(&index) {
            state.settled.placed.remove(0);
        } else {
            match operation.answer {
                Answer::Refused => {}
                Answer::Unknown => {
                    if !spent(scope, state, index, relax) {
                        Rc::make_mut(&mut state.settled.open).push(index);
                    }
                }
                Answer::Lease { .. } | Answer::Released { .. } => break,
            }
        }
        state.settled.frontier += 1;
    }
    while scope
        .by_deadline
        .get(state.next_deadline)
        .is_some_and(|&index| is_settled(state, index))
    {
        state.next_deadline += 1;
    }
}

/// Every effect that may come next of the operations answered `ok`, or of
/// those of unknown outcome.
fn candidates(scope: &Scope<'_>, state: &State, relax: Relax, unknowns: bool) -> Vec<Placed> {
    let deadline = deadline(scope, state);
    let open = state.settled.open.iter().copied();
    let ahead = (state.settled.frontier..scope.operations.len())
        .take_while(|&index| scope.operations[index].invoke_us <= deadline);
    let mut next = Vec::new();
    for index in open.chain(ahead) {
        let operation = &scope.operations[index];
        let unknown = operation.answer == Answer::Unknown;
        if operation.invoke_us > deadline
            || unknown != unknowns
            || operation.answer == Answer::Refused
            || (index >= state.settled.frontier && is_settled(state, index))
            || (unknown && spent(scope, state, index, relax))
        {
            continue;
        }
        let context = scope.context(index, state.latest_completion, deadline, relax);
        for choice in lease::choices(&state.row, operation, &context) {
            next.push(Placed {
                operation: index,
                choice,
            });
        }
    }
    // Answered: the one the store stamped first is tried first. Of unknown
    // outcome: releases (they only free the row, what a stuck grant most
    // often waits for), then renewals, then acquisitions; of each, the one
    // sent last (the most likely to matter now).
    if unknowns {
        next.sort_by_key(|placed| {
            let operation = &scope.operations[placed.operation];
            let kind = match operation.call {
                Call::Acquire { .. } => 0,
                Call::Renew { .. } => 1,
                Call::Release { .. } => 2,
            };
            (kind, operation.invoke_us)
        });
    } else {
        next.sort_by_key(|placed| Reverse(stamp_order(&scope.operations[placed.operation])));
    }
    next
}

/// Where the store's clock puts an operation's effect, as far as its answer
/// tells (its stamp, or the expiry less the TTL), then its completion.
fn stamp_order(operation: &Operation) -> (i64, Option<i64>) {
    let stamped = match (&operation.call, &operation.answer) {
        (
            Call::Acquire { ttl_us } | Call::Renew { ttl_us, .. },
            Answer::Lease { expires_at_us, .. },
        ) => expires_at_us - ttl_us,
        (_, Answer::Released { at_us: Some(at_us) }) => *at_us,
        _ => i64::MAX,
    };
    (stamped, operation.complete_us)
}

/// The state after `placed`, if the operation can take effect so.
fn place(scope: &Scope<'_>, state: &State, placed: Placed, relax: Relax) -> Option<State> {
    let index = placed.operation;
    let context = scope.context(
        index,
        state.latest_completion,
        deadline(scope, state),
        relax,
    );
    let mut zone = state.zone.clone();
    let operation = &scope.operations[index];
    let (row, _) = lease::take_effect(&state.row, &mut zone, operation, placed.choice, &context)?;
    let deadline = operation.deadline_us();
    zone.truncate(KEPT);
    let mut after = State {
        settled: state.settled.clone(),
        next_deadline: state.next_deadline,
        mandatory: state.mandatory + usize::from(deadline.is_some()),
        latest_completion: state.latest_completion.max(deadline.unwrap_or(i64::MIN)),
        row,
        zone,
    };
    after.settled.place(index);
    advance(scope, &mut after, relax);
    Some(after)
}
