//! The lease's sequential specification, stepped symbolically: one row per
//! scope, its times as readings in a [`Zone`].
//!
//! `docs/model.md` states it; this is its letter. A step takes the row and
//! the zone before an effect and one [`Choice`] of what the effect did, and
//! gives the row after, or nothing when the choice is impossible there.

use crate::design::GrantStamps;
use crate::model::operations::{Answer, Call, Operation};
use crate::model::zone::{Var, Zone, ZERO};

/// The store clock's reading at the last effect placed.
pub(crate) const LAST: Var = 1;
/// The row's `expires_at`.
pub(crate) const EXPIRES: Var = 2;
/// The row's `granted_at`.
pub(crate) const GRANTED: Var = 3;
/// The store clock's reading at the last effect placed whose answer came.
pub(crate) const LAST_ANSWERED: Var = 4;
/// Readings kept between steps (`ZERO` included).
pub(crate) const KEPT: usize = 5;

/// The row, apart from its times.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Row {
    /// The owner (an index in the scope's owners) and token the row names.
    pub holder: Option<(usize, u64)>,
    /// The largest token ever granted.
    pub max_token: u64,
}

/// Which parts of the specification are dropped (to find which one no
/// explanation can satisfy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Relax {
    /// I1: a new grant needs no free row.
    pub mutual_exclusion: bool,
    /// I2: tokens and owners answered need not be the row's.
    pub tokens: bool,
    /// H: the store's clock may go back.
    pub clock: bool,
}

/// What one effect did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// A new grant of this token.
    NewGrant {
        /// Its token.
        token: u64,
    },
    /// The caller's live grant kept (acquire) or renewed: its `expires_at`
    /// moved to `stamp + ttl` (`extends`) or stayed, and its `granted_at`
    /// answered was the stamp (`restamped`) or the grant's own.
    Extended {
        /// The expiry moved.
        extends: bool,
        /// The answer's `granted_at` is this effect's stamp.
        restamped: bool,
    },
    /// A release ended the caller's live grant.
    Ended,
    /// A release that found nothing to end.
    Nothing,
}

/// What a step needs beside the row: the caller, the stamps' meaning, what
/// is relaxed, and whether every answered effect placed completed before
/// the call.
pub(crate) struct Context<'c> {
    pub owner: usize,
    pub stamps: GrantStamps,
    /// How far the store rounds its stamps.
    pub rounding_us: i64,
    /// Whether it may restamp a grant's `granted_at`.
    pub restamps: bool,
    pub relax: Relax,
    /// Every answered effect placed had completed before the call was
    /// sent (so its statement began after them).
    pub after_the_answered: bool,
    /// Every effect placed came before the call was sent: an answered
    /// operation still to take effect (it, or this one) was answered no
    /// later than the call was sent.
    pub after_every_effect: bool,
    /// The tokens this owner is seen to know (a grant of unknown outcome
    /// may have had any of them).
    pub known_tokens: &'c [u64],
}

/// The choices worth trying for `operation` on `row`.
pub(crate) fn choices(row: &Row, operation: &Operation, context: &Context<'_>) -> Vec<Choice> {
    let own = row.holder.is_some_and(|(owner, _)| owner == context.owner);
    let both = |extends: &[bool]| -> Vec<Choice> {
        let restamps: &[bool] = if context.restamps {
            &[false, true]
        } else {
            &[false]
        };
        let mut choices = Vec::new();
        for &extends in extends {
            for &restamped in restamps {
                choices.push(Choice::Extended { extends, restamped });
            }
        }
        choices
    };
    let extends: &[bool] = &[true, false];
    match (&operation.call, &operation.answer) {
        (Call::Acquire { .. }, answer) => {
            let mut choices = match answer {
                Answer::Lease { token, .. } => vec![Choice::NewGrant { token: *token }],
                _ => new_tokens(row, context)
                    .map(|token| Choice::NewGrant { token })
                    .collect(),
            };
            if own {
                choices.extend(both(extends));
            }
            choices
        }
        (Call::Renew { .. }, _) => both(extends),
        (Call::Release { .. }, Answer::Unknown) => vec![Choice::Ended],
        (Call::Release { .. }, _) => vec![Choice::Ended, Choice::Nothing],
    }
}

/// Tokens a grant nobody saw may have had: the next one, or one its owner
/// is later seen to know.
fn new_tokens<'a>(row: &'a Row, context: &'a Context<'_>) -> impl Iterator<Item = u64> + 'a {
    let next = row.max_token + 1;
    std::iter::once(next).chain(
        context
            .known_tokens
            .iter()
            .copied()
            .filter(move |&token| token > next),
    )
}

/// The readings one effect adds to the zone: the store's clock at the
/// effect (what it decided with) and the stamp it wrote.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Readings {
    pub decision: Var,
    pub stamp: Var,
    /// What the store compared with: its stamp, for decision stamps; its
    /// clock at the effect, for statement-start stamps.
    pub compare: Var,
}

/// Adds the effect's readings and the clock's constraints on them: the
/// clock never goes back; a stamp was read when the statement began, at or
/// before its effect, and after every answered effect that had completed
/// when the call was sent (less the store's rounding). The store compares with
/// the stamp (decision) or with its clock at the effect (statement-start).
pub(crate) fn read_clock(zone: &mut Zone, context: &Context<'_>) -> Option<Readings> {
    let decision = zone.push();
    let stamp = zone.push();
    let ok = context.relax.clock
        || (zone.constrain(LAST, decision, 0)
            && zone.constrain(stamp, decision, 0)
            && began_after(zone, stamp, context));
    let compare = match context.stamps {
        GrantStamps::Decision => stamp,
        GrantStamps::StatementStart => decision,
    };
    ok.then_some(Readings {
        decision,
        stamp,
        compare,
    })
}

/// A stamp is no earlier than the effects that certainly came before its
/// call was sent, less the store's rounding.
fn began_after(zone: &mut Zone, stamp: Var, context: &Context<'_>) -> bool {
    if context.after_every_effect {
        zone.constrain(LAST, stamp, context.rounding_us)
    } else if context.after_the_answered {
        zone.constrain(LAST_ANSWERED, stamp, context.rounding_us)
    } else {
        true
    }
}

/// The row after `operation` took effect as `choice` says, the zone
/// constrained accordingly; `None` when the specification forbids it.
pub(crate) fn step(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    operation: &Operation,
    choice: Choice,
    context: &Context<'_>,
) -> Option<Row> {
    let ok = match choice {
        Choice::NewGrant { token } => new_grant(row, zone, readings, operation, token, context),
        Choice::Extended { extends, restamped } => {
            extend(row, zone, readings, operation, extends, restamped, context)
        }
        Choice::Ended | Choice::Nothing => {
            return release(
                row,
                zone,
                readings,
                operation,
                choice == Choice::Ended,
                context,
            )
        }
    };
    ok.then(|| Row {
        holder: Some((context.owner, token_after(row, operation, choice))),
        max_token: match choice {
            Choice::NewGrant { token } => row.max_token.max(token),
            _ => row.max_token,
        },
    })
}

fn token_after(row: &Row, operation: &Operation, choice: Choice) -> u64 {
    match (choice, &operation.call, &operation.answer) {
        (Choice::NewGrant { token }, _, _) => token,
        (_, _, Answer::Lease { token, .. }) => *token,
        (_, Call::Renew { token, .. }, _) => *token,
        _ => row.holder.map_or(0, |(_, token)| token),
    }
}

/// Whether the answer names the caller (checked unless I2 is relaxed).
fn answers_the_caller(operation: &Operation, context: &Context<'_>) -> bool {
    match &operation.answer {
        Answer::Lease { owner, .. } => context.relax.tokens || *owner == operation.owner,
        _ => true,
    }
}

fn new_grant(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    operation: &Operation,
    token: u64,
    context: &Context<'_>,
) -> bool {
    let Call::Acquire { ttl_us } = operation.call else {
        return false;
    };
    if !context.relax.tokens && token <= row.max_token {
        return false;
    }
    if !answers_the_caller(operation, context) {
        return false;
    }
    let free = row.holder.is_none()
        || context.relax.mutual_exclusion
        || zone.constrain(EXPIRES, readings.compare, 0);
    if !free {
        return false;
    }
    zone.forget(EXPIRES);
    zone.assign(GRANTED, readings.stamp);
    match operation.answer {
        Answer::Lease {
            granted_at_us,
            expires_at_us,
            ..
        } => zone.fix(readings.stamp, granted_at_us) && zone.fix(EXPIRES, expires_at_us),
        _ => zone.equal(EXPIRES, readings.stamp, ttl_us),
    }
}

/// Whether the row lets the caller's call extend a grant: an acquisition
/// its own live one, a renewal the one the row names with its token. With
/// I2 dropped a renewal may also revive a free row (whatever it names);
/// with I1 dropped, any. A grant revived so is forgotten (its times too).
fn may_extend(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    named: Option<u64>,
    context: &Context<'_>,
) -> bool {
    let relax = context.relax;
    let names_caller = row.holder.is_some_and(|(holder, held)| {
        holder == context.owner && named.is_none_or(|token| token == held || relax.tokens)
    });
    if named.is_none() {
        return names_caller && zone.constrain(readings.compare, EXPIRES, -1);
    }
    if names_caller {
        return true;
    }
    let revives = relax.mutual_exclusion
        || (relax.tokens && (row.holder.is_none() || zone.constrain(EXPIRES, readings.compare, 0)));
    if revives {
        zone.forget(EXPIRES);
        zone.forget(GRANTED);
    }
    revives
}

/// An acquisition that keeps the caller's live grant, or a renewal:
/// `expires_at = greatest(expires_at, stamp + ttl)`.
fn extend(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    operation: &Operation,
    extends: bool,
    restamped: bool,
    context: &Context<'_>,
) -> bool {
    let (ttl_us, named) = match operation.call {
        Call::Acquire { ttl_us } => (ttl_us, None),
        Call::Renew { token, ttl_us } => (ttl_us, Some(token)),
        Call::Release { .. } => return false,
    };
    if !may_extend(row, zone, readings, named, context) || !answers_the_caller(operation, context) {
        return false;
    }
    let Answer::Lease {
        token,
        granted_at_us,
        expires_at_us,
        ..
    } = operation.answer
    else {
        // Unknown: it moved the expiry, or restamped the grant, or both.
        if !extends {
            return restamped && zone.constrain(readings.stamp, EXPIRES, -ttl_us) && {
                zone.assign(GRANTED, readings.stamp);
                true
            };
        }
        if !zone.constrain(EXPIRES, readings.stamp, ttl_us) {
            return false;
        }
        zone.forget(EXPIRES);
        if restamped {
            zone.assign(GRANTED, readings.stamp);
        }
        return zone.equal(EXPIRES, readings.stamp, ttl_us);
    };
    let held = named.or(row.holder.map(|(_, held)| held));
    if !context.relax.tokens && Some(token) != held {
        return false;
    }
    let expiry = if extends {
        zone.fix(readings.stamp, expires_at_us - ttl_us)
            && zone.constrain(EXPIRES, ZERO, expires_at_us)
    } else {
        zone.fix(EXPIRES, expires_at_us)
            && zone.constrain(readings.stamp, ZERO, expires_at_us - ttl_us)
    };
    if !expiry {
        return false;
    }
    zone.forget(EXPIRES);
    let granted = if restamped {
        zone.fix(readings.stamp, granted_at_us) && {
            zone.assign(GRANTED, readings.stamp);
            true
        }
    } else {
        zone.fix(GRANTED, granted_at_us)
    };
    granted && zone.fix(EXPIRES, expires_at_us)
}

fn release(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    operation: &Operation,
    ends: bool,
    context: &Context<'_>,
) -> Option<Row> {
    let Call::Release { token } = operation.call else {
        return None;
    };
    if let Answer::Released { at_us: Some(at_us) } = operation.answer {
        if !zone.fix(readings.stamp, at_us) {
            return None;
        }
    }
    let names_caller = row.holder == Some((context.owner, token));
    let ok = if ends {
        names_caller && zone.constrain(readings.compare, EXPIRES, -1) && {
            zone.forget(EXPIRES);
            zone.assign(EXPIRES, readings.stamp);
            true
        }
    } else {
        !names_caller || zone.constrain(EXPIRES, readings.compare, 0)
    };
    ok.then(|| row.clone())
}
