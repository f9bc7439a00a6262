//! A scope without explanation: what it breaks, and the fewest operations
//! that alone have none.
//!
//! Weakening an operation to unknown outcome only adds explanations (it may
//! still have done what it did), so a set of operations kept as answered,
//! every other one weakened, that has no explanation proves the whole
//! scope has none. The set is shrunk one operation at a time, latest
//! first; a trial over its budget keeps the operation (never a guess).

use std::fmt;

use crate::check::Invariant;
use crate::design::GrantStamps;
use crate::model::lease::Relax;
use crate::model::operations::{Answer, Call, Operation};
use crate::model::search::{self, Found, Scope};
use crate::model::{Assumptions, Certificate, ScopeVerdict};

/// The certificate of `operations`, which have no explanation.
pub(crate) fn find(
    operations: &[Operation],
    stamps: GrantStamps,
    assumptions: Assumptions,
    states: &mut u64,
) -> Certificate {
    let invariants = blame(operations, stamps, assumptions, states);
    let mut weakened = operations.to_vec();
    let mut kept: Vec<usize> = (0..operations.len())
        .filter(|&index| operations[index].took_effect())
        .collect();
    for position in (0..kept.len()).rev() {
        let index = kept[position];
        let mut trial = weakened.clone();
        trial[index].answer = Answer::Unknown;
        let scope = Scope::new(&trial, stamps, assumptions);
        let mut tried = 0;
        let found = search::search(
            &scope,
            Relax::default(),
            assumptions.states / 16,
            &mut tried,
        );
        *states += tried;
        if found == Found::None {
            weakened = trial;
            kept.remove(position);
        }
    }
    Certificate {
        invariants,
        operations: kept,
    }
}

/// The parts of the specification whose dropping, alone or together,
/// leaves an explanation: the fewest that do.
fn blame(
    operations: &[Operation],
    stamps: GrantStamps,
    assumptions: Assumptions,
    states: &mut u64,
) -> Vec<Invariant> {
    let parts = [
        (
            Invariant::MutualExclusion,
            Relax {
                mutual_exclusion: true,
                ..Relax::default()
            },
        ),
        (
            Invariant::TokenOrder,
            Relax {
                tokens: true,
                ..Relax::default()
            },
        ),
        (
            Invariant::WellFormed,
            Relax {
                clock: true,
                ..Relax::default()
            },
        ),
    ];
    let scope = Scope::new(operations, stamps, assumptions);
    let explains = |relax: Relax, states: &mut u64| {
        matches!(
            search::search(&scope, relax, assumptions.states, states),
            Found::Explanation(_)
        )
    };
    let single: Vec<Invariant> = parts
        .iter()
        .filter(|(_, relax)| explains(*relax, states))
        .map(|(invariant, _)| *invariant)
        .collect();
    if !single.is_empty() {
        return single;
    }
    for (skip, _) in &parts {
        let relax = parts
            .iter()
            .filter(|(invariant, _)| invariant != skip)
            .fold(Relax::default(), |all, (_, part)| Relax {
                mutual_exclusion: all.mutual_exclusion || part.mutual_exclusion,
                tokens: all.tokens || part.tokens,
                clock: all.clock || part.clock,
            });
        if explains(relax, states) {
            return parts
                .iter()
                .map(|(invariant, _)| *invariant)
                .filter(|invariant| invariant != skip)
                .collect();
        }
    }
    parts.iter().map(|(invariant, _)| *invariant).collect()
}

/// The verdict in words: what is broken, and the operations that prove it.
pub(crate) fn describe(
    formatter: &mut fmt::Formatter<'_>,
    verdict: &ScopeVerdict,
    certificate: &Certificate,
    possible: bool,
) -> fmt::Result {
    let codes: Vec<&str> = certificate.invariants.iter().map(|i| i.code()).collect();
    writeln!(
        formatter,
        "scope {:?}: {} {} ({} operations, {} states tried): no explanation{} of these {} operations, every other one read as of unknown outcome:",
        verdict.scope,
        if possible { "possible" } else { "violated" },
        codes.join("+"),
        verdict.operations.len(),
        verdict.states,
        if possible { " if its stamps are decision stamps" } else { "" },
        certificate.operations.len(),
    )?;
    for &index in &certificate.operations {
        writeln!(formatter, "  {}", fact(&verdict.operations[index]))?;
    }
    Ok(())
}

fn seconds(us: i64) -> String {
    format!("{:.6} s", us as f64 / 1e6)
}

/// One operation as evidence: who asked what, when, and what came back.
pub(crate) fn fact(operation: &Operation) -> String {
    let call = match operation.call {
        Call::Acquire { ttl_us } => format!("acquire (ttl {ttl_us} µs)"),
        Call::Renew { token, ttl_us } => format!("renew of token {token} (ttl {ttl_us} µs)"),
        Call::Release { token } => format!("release of token {token}"),
    };
    let answer = match &operation.answer {
        Answer::Lease {
            token,
            owner,
            granted_at_us,
            expires_at_us,
        } => format!(
            "lease token {token} of {owner:?}, granted at {granted_at_us}, expires at {expires_at_us}"
        ),
        Answer::Released { at_us: Some(at) } => format!("released at {at}"),
        Answer::Released { at_us: None } => "unlocked".to_string(),
        Answer::Refused => "refused".to_string(),
        Answer::Unknown => "unknown".to_string(),
    };
    let answered = operation
        .complete_us
        .map_or("never answered".to_string(), |at| {
            format!("answered at {}", seconds(at))
        });
    format!(
        "event {}: {:?}'s {call}, sent at {}, {answered}: {answer}",
        operation.invoke_event,
        operation.owner,
        seconds(operation.invoke_us),
    )
}
