//! An explanation checked on its own: the effects replayed with concrete
//! readings against the table of `docs/model.md`, with no search and no zone.
//!
//! Written apart from `crate::model::lease` so that the two must agree on
//! the model, not on code: the tests run it on every explanation the judge
//! gives.

use crate::design::GrantStamps;
use crate::model::lease::Choice;
use crate::model::operations::{Answer, Call, Operation};
use crate::model::{Assumptions, Explanation};

/// The token a row names: answered, or made by an operation of unknown
/// outcome and larger than the one before, until a call or answer names it.
#[derive(Clone, Copy, PartialEq)]
enum Held {
    Token(u64),
    Above(u64),
}

#[derive(Default)]
struct Row {
    holder: Option<(String, Held)>,
    granted_at: i64,
    expires_at: i64,
    max_token: u64,
}

/// `Ok` when `explanation` is a legal schedule of `operations`: every
/// operation answered `ok` placed once inside its window, none refused
/// placed, the store's clock never back, and every effect what the row
/// allows and what was answered.
pub fn validate(
    operations: &[Operation],
    stamps: GrantStamps,
    assumptions: Assumptions,
    explanation: &Explanation,
) -> Result<(), String> {
    let rounding_us = assumptions.stamp_rounding_us;
    let mut seen = vec![false; operations.len()];
    let mut now_us = i64::MIN;
    let mut clock_us = i64::MIN;
    let mut latest_completion = i64::MIN;
    let mut last_answered_us = i64::MIN;
    let mut row = Row::default();
    for (position, effect) in explanation.effects.iter().enumerate() {
        let operation = operations.get(effect.operation).ok_or(format!(
            "effect {position}: no operation {}",
            effect.operation
        ))?;
        let at = |problem: String| {
            format!(
                "effect {position} (event {}): {problem}",
                operation.invoke_event
            )
        };
        if std::mem::replace(&mut seen[effect.operation], true) {
            return Err(at("placed twice".into()));
        }
        if operation.answer == Answer::Refused {
            return Err(at("a refused operation took effect".into()));
        }
        now_us = now_us.max(operation.invoke_us);
        if operation.took_effect() && operation.complete_us.is_some_and(|done| now_us > done) {
            return Err(at(format!(
                "it cannot take effect at {now_us} µs, after its completion"
            )));
        }
        if effect.decision_us < clock_us {
            return Err(at(format!(
                "the clock went back from {clock_us} to {}",
                effect.decision_us
            )));
        }
        // The effects certainly before the call was sent: all of them,
        // when an operation answered no later than it was sent is still to
        // come (it, or one after it); else the answered ones, when every
        // one of them had completed.
        let deadline = explanation.effects[position..]
            .iter()
            .filter_map(|later| operations.get(later.operation)?.deadline_us())
            .min()
            .unwrap_or(i64::MAX);
        let floor = if deadline <= operation.invoke_us {
            clock_us
        } else if latest_completion < operation.invoke_us {
            last_answered_us
        } else {
            i64::MIN
        };
        let stamp_ok = effect.stamp_us <= effect.decision_us
            && effect.stamp_us >= floor.saturating_sub(rounding_us);
        let compared_us = match stamps {
            GrantStamps::Decision => effect.stamp_us,
            GrantStamps::StatementStart => effect.decision_us,
        };
        if !stamp_ok {
            return Err(at(format!(
                "stamp {} does not fit {stamps} stamps",
                effect.stamp_us
            )));
        }
        clock_us = effect.decision_us;
        if let Some(completed) = operation.deadline_us() {
            latest_completion = latest_completion.max(completed);
            last_answered_us = effect.decision_us;
        }
        apply(
            assumptions.restamps,
            &mut row,
            operation,
            effect.choice,
            compared_us,
            effect.stamp_us,
        )
        .map_err(at)?;
    }
    match operations
        .iter()
        .zip(&seen)
        .find(|(operation, seen)| operation.took_effect() && !**seen)
    {
        Some((operation, _)) => Err(format!(
            "event {}: answered ok, but takes no effect",
            operation.invoke_event
        )),
        None => Ok(()),
    }
}

/// What one effect of an explanation needs beside the row.
struct Effect<'o> {
    operation: &'o Operation,
    choice: Choice,
    /// What the store compared with.
    now: i64,
    stamp: i64,
    restamps: bool,
}

impl Row {
    /// Whether the row names `owner` and, if given, may name `token`.
    fn holds(&self, owner: &str, token: Option<u64>) -> bool {
        self.holder.as_ref().is_some_and(|(o, held)| {
            o == owner
                && token.is_none_or(|token| match *held {
                    Held::Token(held) => held == token,
                    Held::Above(above) => token > above,
                })
        })
    }

    /// The row's token is `token`, now known.
    fn learn(&mut self, token: u64) {
        if let Some((_, held)) = &mut self.holder {
            *held = Held::Token(token);
        }
        self.max_token = self.max_token.max(token);
    }
}

fn apply(
    restamps: bool,
    row: &mut Row,
    operation: &Operation,
    choice: Choice,
    now: i64,
    stamp: i64,
) -> Result<(), String> {
    let effect = Effect {
        operation,
        choice,
        now,
        stamp,
        restamps,
    };
    let owner = operation.owner.as_str();
    let live = row.expires_at > now;
    match (choice, &operation.call) {
        (Choice::NewGrant, Call::Acquire { ttl_us }) => new_grant(row, &effect, *ttl_us)?,
        (Choice::Extended { .. }, _) => extend(row, &effect)?,
        (Choice::Ended, Call::Release { token }) => {
            if !row.holds(owner, Some(*token)) || !live {
                return Err("ends a grant that is not the caller's live one".into());
            }
            row.learn(*token);
            row.expires_at = stamp;
        }
        (Choice::Nothing, Call::Release { token }) => {
            let exactly = row
                .holder
                .as_ref()
                .is_some_and(|(o, held)| o == owner && *held == Held::Token(*token));
            if exactly && live {
                return Err("a release that found its grant live ended nothing".into());
            }
        }
        (choice, call) => return Err(format!("{choice:?} is no effect of {call:?}")),
    }
    if let Answer::Released { at_us: Some(at) } = operation.answer {
        if at != stamp {
            return Err(format!("released at {at}, stamped {stamp}"));
        }
    }
    Ok(())
}

fn new_grant(row: &mut Row, effect: &Effect<'_>, ttl_us: i64) -> Result<(), String> {
    let owner = effect.operation.owner.as_str();
    if row.holder.is_some() && row.expires_at > effect.now {
        return Err(format!(
            "a new grant while the row is live until {}",
            row.expires_at
        ));
    }
    let (held, expires_at) = match &effect.operation.answer {
        Answer::Lease {
            token,
            owner: named,
            granted_at_us,
            expires_at_us,
        } => {
            if *token <= row.max_token || named != owner || *granted_at_us != effect.stamp {
                return Err(format!(
                    "the answer is not a new grant after token {}",
                    row.max_token
                ));
            }
            (Held::Token(*token), *expires_at_us)
        }
        _ => (Held::Above(row.max_token), effect.stamp + ttl_us),
    };
    *row = Row {
        holder: Some((owner.to_string(), held)),
        granted_at: effect.stamp,
        expires_at,
        max_token: match held {
            Held::Token(token) => token,
            Held::Above(above) => above + 1,
        },
    };
    Ok(())
}

fn extend(row: &mut Row, effect: &Effect<'_>) -> Result<(), String> {
    let Choice::Extended { extends, restamped } = effect.choice else {
        return Err("not an extension".into());
    };
    if restamped && !effect.restamps {
        return Err("restamps a grant, which the store never does".into());
    }
    let (owner, stamp) = (effect.operation.owner.as_str(), effect.stamp);
    let (ttl_us, named) = match effect.operation.call {
        Call::Acquire { ttl_us } => (ttl_us, None),
        Call::Renew { token, ttl_us } => (ttl_us, Some(token)),
        Call::Release { .. } => return Err("a release does not extend".into()),
    };
    if !row.holds(owner, named) || (named.is_none() && row.expires_at <= effect.now) {
        return Err("extends a grant that is not the caller's live one".into());
    }
    let greatest = row.expires_at.max(stamp + ttl_us);
    if extends != (stamp + ttl_us >= row.expires_at) && stamp + ttl_us != row.expires_at {
        return Err("the expiry did not move as the choice says".into());
    }
    if let Answer::Lease {
        token,
        owner: named_owner,
        granted_at_us,
        expires_at_us,
    } = &effect.operation.answer
    {
        let granted = if restamped { stamp } else { row.granted_at };
        if !row.holds(owner, Some(*token))
            || named.is_some_and(|named| named != *token)
            || named_owner != owner
            || *expires_at_us != greatest
            || *granted_at_us != granted
        {
            return Err(format!(
                "answered {expires_at_us}, the row holds {greatest}"
            ));
        }
    }
    match (&effect.operation.answer, named) {
        (Answer::Lease { token, .. }, _) => row.learn(*token),
        (_, Some(token)) => row.learn(token),
        _ => {}
    }
    if restamped {
        row.granted_at = stamp;
    }
    row.expires_at = greatest;
    Ok(())
}
