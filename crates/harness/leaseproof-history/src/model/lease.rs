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
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Row {
    /// The owner (an index in the scope's owners) and token the row names.
    pub holder: Option<(usize, Token)>,
    /// The largest token ever granted is at least this.
    pub max_token: u64,
}

/// A token the row names: one answered, or one a grant of unknown outcome
/// made, which nobody saw — larger than `above`, and learnt exactly when an
/// answer or a call of its owner names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Token {
    Seen(u64),
    Unseen { above: u64 },
}

impl Token {
    /// Whether it may be `token`.
    pub(crate) fn may_be(self, token: u64) -> bool {
        match self {
            Token::Seen(seen) => seen == token,
            Token::Unseen { above } => token > above,
        }
    }

    /// The smallest it may be.
    pub(crate) fn least(self) -> u64 {
        match self {
            Token::Seen(seen) => seen,
            Token::Unseen { above } => above + 1,
        }
    }
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
    /// A new grant (of the token answered, or of one nobody saw).
    NewGrant,
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
pub(crate) struct Context {
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
}

/// The choices worth trying for `operation` on `row`.
pub(crate) fn choices(row: &Row, operation: &Operation, context: &Context) -> Vec<Choice> {
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
        (Call::Acquire { .. }, _) => {
            let mut choices = vec![Choice::NewGrant];
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

/// One effect on the row and the clock: its readings added and
/// constrained, the row stepped, and the readings the next effect needs
/// kept (the last effect's, the last answered one's); `None` when the
/// specification forbids it.
pub(crate) fn take_effect(
    row: &Row,
    zone: &mut Zone,
    operation: &Operation,
    choice: Choice,
    context: &Context,
) -> Option<(Row, Readings)> {
    let readings = read_clock(zone, context)?;
    let row = step(row, zone, readings, operation, choice, context)?;
    zone.assign(LAST, readings.decision);
    if operation.took_effect() {
        zone.assign(LAST_ANSWERED, readings.decision);
    }
    Some((row, readings))
}

/// Adds the effect's readings and the clock's constraints on them: the
/// clock never goes back; a stamp was read when the statement began, at or
/// before its effect, and after every answered effect that had completed
/// when the call was sent (less the store's rounding). The store compares with
/// the stamp (decision) or with its clock at the effect (statement-start).
fn read_clock(zone: &mut Zone, context: &Context) -> Option<Readings> {
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
fn began_after(zone: &mut Zone, stamp: Var, context: &Context) -> bool {
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
fn step(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    operation: &Operation,
    choice: Choice,
    context: &Context,
) -> Option<Row> {
    let holder = match choice {
        Choice::NewGrant => new_grant(row, zone, readings, operation, context)?,
        Choice::Extended { extends, restamped } => {
            extend(row, zone, readings, operation, extends, restamped, context)?
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
    Some(Row {
        holder: Some((context.owner, holder)),
        max_token: row.max_token.max(holder.least()),
    })
}

/// Whether the answer names the caller (checked unless I2 is relaxed).
fn answers_the_caller(operation: &Operation, context: &Context) -> bool {
    match &operation.answer {
        Answer::Lease { owner, .. } => context.relax.tokens || *owner == operation.owner,
        _ => true,
    }
}

/// A new grant: the token answered (larger than every one before), or one
/// nobody saw.
fn new_grant(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    operation: &Operation,
    context: &Context,
) -> Option<Token> {
    let Call::Acquire { ttl_us } = operation.call else {
        return None;
    };
    let token = match operation.answer {
        Answer::Lease { token, .. } => Token::Seen(token),
        _ => Token::Unseen {
            above: row.max_token,
        },
    };
    let increases = context.relax.tokens || token.least() > row.max_token;
    let free = row.holder.is_none()
        || context.relax.mutual_exclusion
        || zone.constrain(EXPIRES, readings.compare, 0);
    if !increases || !answers_the_caller(operation, context) || !free {
        return None;
    }
    zone.forget(EXPIRES);
    zone.assign(GRANTED, readings.stamp);
    let times = match operation.answer {
        Answer::Lease {
            granted_at_us,
            expires_at_us,
            ..
        } => zone.fix(readings.stamp, granted_at_us) && zone.fix(EXPIRES, expires_at_us),
        _ => zone.equal(EXPIRES, readings.stamp, ttl_us),
    };
    times.then_some(token)
}

/// Whether the row lets the caller's call extend a grant: an acquisition
/// its own live one, a renewal the one the row names with its token
/// (`Some(true)`). With I2 dropped a renewal may also revive a free row
/// (whatever it names); with I1 dropped, any (`Some(false)`: a grant
/// revived so is forgotten, its times too).
fn may_extend(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    named: Option<u64>,
    context: &Context,
) -> Option<bool> {
    let relax = context.relax;
    let names_caller = row.holder.is_some_and(|(holder, held)| {
        holder == context.owner && named.is_none_or(|token| held.may_be(token) || relax.tokens)
    });
    if named.is_none() {
        return (names_caller && zone.constrain(readings.compare, EXPIRES, -1)).then_some(true);
    }
    if names_caller {
        return Some(true);
    }
    let revives = relax.mutual_exclusion
        || (relax.tokens && (row.holder.is_none() || zone.constrain(EXPIRES, readings.compare, 0)));
    if revives {
        zone.forget(EXPIRES);
        zone.forget(GRANTED);
    }
    revives.then_some(false)
}

/// An acquisition that keeps the caller's live grant, or a renewal:
/// `expires_at = greatest(expires_at, stamp + ttl)`. The token after it:
/// the one answered or named, which its owner then knows.
fn extend(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    operation: &Operation,
    extends: bool,
    restamped: bool,
    context: &Context,
) -> Option<Token> {
    let (ttl_us, named) = match operation.call {
        Call::Acquire { ttl_us } => (ttl_us, None),
        Call::Renew { token, ttl_us } => (ttl_us, Some(token)),
        Call::Release { .. } => return None,
    };
    let kept = may_extend(row, zone, readings, named, context)?;
    if !answers_the_caller(operation, context) {
        return None;
    }
    let held = row.holder.map(|(_, held)| held).filter(|_| kept);
    let Answer::Lease {
        token,
        granted_at_us,
        expires_at_us,
        ..
    } = operation.answer
    else {
        let after = named.map(Token::Seen).or(held)?;
        return extend_unseen(zone, readings, ttl_us, extends, restamped).then_some(after);
    };
    let agrees =
        named.is_none_or(|named| named == token) && held.is_none_or(|held| held.may_be(token));
    if !context.relax.tokens && !agrees {
        return None;
    }
    let expiry = if extends {
        zone.fix(readings.stamp, expires_at_us - ttl_us)
            && zone.constrain(EXPIRES, ZERO, expires_at_us)
    } else {
        zone.fix(EXPIRES, expires_at_us)
            && zone.constrain(readings.stamp, ZERO, expires_at_us - ttl_us)
    };
    if !expiry {
        return None;
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
    (granted && zone.fix(EXPIRES, expires_at_us)).then_some(Token::Seen(token))
}

/// An extension of unknown outcome: it moved the expiry, or restamped the
/// grant, or both.
fn extend_unseen(
    zone: &mut Zone,
    readings: Readings,
    ttl_us: i64,
    extends: bool,
    restamped: bool,
) -> bool {
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
    zone.equal(EXPIRES, readings.stamp, ttl_us)
}

fn release(
    row: &Row,
    zone: &mut Zone,
    readings: Readings,
    operation: &Operation,
    ends: bool,
    context: &Context,
) -> Option<Row> {
    let Call::Release { token } = operation.call else {
        return None;
    };
    if let Answer::Released { at_us: Some(at_us) } = operation.answer {
        if !zone.fix(readings.stamp, at_us) {
            return None;
        }
    }
    // A token nobody saw may be the one released: ending it learns it;
    // finding nothing to end is allowed whenever the row may name another.
    let names = |exactly: bool| {
        row.holder.is_some_and(|(holder, held)| {
            holder == context.owner
                && if exactly {
                    held == Token::Seen(token)
                } else {
                    held.may_be(token)
                }
        })
    };
    if ends {
        let ended = names(false) && zone.constrain(readings.compare, EXPIRES, -1) && {
            zone.forget(EXPIRES);
            zone.assign(EXPIRES, readings.stamp);
            true
        };
        return ended.then(|| Row {
            holder: Some((context.owner, Token::Seen(token))),
            max_token: row.max_token.max(token),
        });
    }
    (!names(true) || zone.constrain(EXPIRES, readings.compare, 0)).then(|| row.clone())
}
