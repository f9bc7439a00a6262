//! The checker: invariants I1–I4 and belief overlaps over one [`History`].
//!
//! Goal: one judge for every run. Method: pair invokes with completions, rebuild
//! each scope's grants from the *ok* outcomes only (they are facts; unknown
//! outcomes neither prove nor refute), then test
//! - I1 mutual exclusion: effective grant intervals `[granted_at, end)` of
//!   distinct tokens never overlap (`end` = the last known `expires_at`, cut
//!   short by an ok release; an unknown release cuts it back to the last time
//!   the grant was seen live, but only against rivals reported after the
//!   release was invoked — one invoked later took effect after them);
//! - I2 token order: tokens strictly increase with `granted_at`, a token has one
//!   owner and one `granted_at`, renewals and idempotent re-acquires keep it;
//! - I3 fenced writes: each guarded row's (owner, token) was granted, its server
//!   time lies in `[granted_at(T), granted_at(next grant))` and before its own
//!   grant's end (unless an unknown renewal or re-acquire may have extended it;
//!   an unknown acquire may also explain a token no ok outcome reported, up to
//!   the known maximum plus one per unknown acquire — only operations invoked
//!   before an ok commit was acknowledged excuse its write),
//!   tokens never go backwards in `seq` order and cycles never interleave. A
//!   row's time is its transaction's start, which precedes the fence, and the
//!   fence checks owner, token and expiry — so a fenced row always lies inside
//!   the grant its fence saw;
//! - I4 nothing lost: ok commits are whole in the table, failed ones absent,
//!   unknown ones whole or absent — never partial;
//!
//! It also counts belief overlaps, a violation only for workers configured unfenced,
//! and measures takeovers of dead holders (I5, the bounded part): for each
//! grant whose holder died (crashed and restarted, or never heard from again)
//! the delay from its `expires_at` to the next grant of the scope, in server
//! time. With a [`TakeoverBound`] ([`check_with_takeover_bound`]) a delay
//! beyond the bound is a violation when a rival was provably waiting for the
//! scope through the whole window (see [`TakeoverBound`] for the soundness
//! conditions).
//!
//! Server times are compared only with server times, true times only with true
//! times: the worker clocks may be skewed and never enter a verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::event::{EventKind, FailReason, GuardedRow, Op, OpResult, Outcome};
use crate::history::History;

mod certain_holds;

/// What the checker is told beyond the history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckConfig {
    /// Workers that write without the fence: their belief overlaps are violations.
    pub unfenced_workers: BTreeSet<String>,
    /// What a design's server timestamps mean, and so what they can prove.
    pub grant_stamps: GrantStamps,
}

/// What the `granted_at` / `expires_at` a design reports mean.
///
/// The checker never cries wolf: an overlap of two grants in server time is a
/// violation only when the timestamps are the times the grants were decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GrantStamps {
    /// Each statement decides with the very time it stamps (the reference:
    /// its takeover compares `expires_at <= now()` with the `now()` it writes
    /// as `granted_at`, however long it waited on a row lock). A server-time
    /// overlap is then a real double grant.
    #[default]
    Decision,
    /// A grant is stamped with its statement's *start* (PostgreSQL's `now()`)
    /// but may be decided later — it queued on a row lock behind the previous
    /// holder's release, say. A stamp is then only a lower bound of the
    /// decision, and a server-time overlap proves nothing: the checker reports
    /// it as *possible* and calls it a violation only when real-time order
    /// proves it (Jepsen's rule): the earlier grant was acknowledged before
    /// the later one's acquisition was invoked, and the later one was
    /// acknowledged before an operation that then found the earlier grant
    /// still live (a renewal or a release of it that succeeded) was invoked.
    StatementStart,
}

impl std::str::FromStr for GrantStamps {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "decision" => Ok(GrantStamps::Decision),
            "statement-start" => Ok(GrantStamps::StatementStart),
            other => Err(format!(
                "unknown grant stamps {other:?}: expected decision or statement-start"
            )),
        }
    }
}

/// Which rule a [`Violation`] breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// I1: two grants of one scope were live at once.
    MutualExclusion,
    /// I2: tokens out of order, shared, or changed by a renewal.
    TokenOrder,
    /// I3: a guarded write outside its grant, under an ungranted token, out of
    /// token order, or interleaved with another cycle.
    FencedWrites,
    /// I4: a commit's rows missing, present after a failure, or partial.
    NothingLost,
    /// Two workers believed they held one scope at once, one of them unfenced.
    BeliefOverlap,
    /// I5: a dead holder's scope was taken over later than the bound allows
    /// although a live rival was waiting for it.
    BoundedTakeover,
    /// The history itself is inconsistent (a completion without invoke, a
    /// duplicated op id, a result of the wrong kind).
    WellFormed,
}

impl Invariant {
    /// Every invariant, in the order reports list them.
    pub const ALL: [Invariant; 7] = [
        Invariant::MutualExclusion,
        Invariant::TokenOrder,
        Invariant::FencedWrites,
        Invariant::NothingLost,
        Invariant::BoundedTakeover,
        Invariant::BeliefOverlap,
        Invariant::WellFormed,
    ];

    /// The one name of the invariant, shared by the checker's reports, the
    /// model's properties (`leaseproof model` prints it) and the docs:
    /// `i1-mutual-exclusion`, …
    pub const fn slug(self) -> &'static str {
        match self {
            Invariant::MutualExclusion => "i1-mutual-exclusion",
            Invariant::TokenOrder => "i2-token-order",
            Invariant::FencedWrites => "i3-fenced-writes",
            Invariant::NothingLost => "i4-nothing-lost",
            Invariant::BoundedTakeover => "i5-bounded-takeover",
            Invariant::BeliefOverlap => "b-belief-overlap",
            Invariant::WellFormed => "h-well-formed",
        }
    }

    /// The short code used in reports: `I1`…`I5`, `B` or `H`.
    pub const fn code(self) -> &'static str {
        match self {
            Invariant::MutualExclusion => "I1",
            Invariant::TokenOrder => "I2",
            Invariant::FencedWrites => "I3",
            Invariant::NothingLost => "I4",
            Invariant::BoundedTakeover => "I5",
            Invariant::BeliefOverlap => "B",
            Invariant::WellFormed => "H",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Invariant::MutualExclusion => "mutual exclusion",
            Invariant::TokenOrder => "token order",
            Invariant::FencedWrites => "fenced writes",
            Invariant::NothingLost => "nothing lost",
            Invariant::BoundedTakeover => "bounded takeover",
            Invariant::BeliefOverlap => "belief overlap",
            Invariant::WellFormed => "well-formed history",
        };
        write!(formatter, "{} {}", self.code(), name)
    }
}

/// One broken rule, with the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub invariant: Invariant,
    /// The scope it concerns (empty for history-wide problems).
    pub scope: String,
    /// Indices of the events that show it, ascending.
    pub events: Vec<u64>,
    /// `seq` of the guarded rows that show it, ascending.
    pub rows: Vec<u64>,
    /// A sentence naming owners, tokens and server times.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{} [{}]: {}",
            self.invariant, self.scope, self.message
        )?;
        if !self.events.is_empty() {
            write!(formatter, " (events {:?})", self.events)?;
        }
        if !self.rows.is_empty() {
            write!(formatter, " (rows seq {:?})", self.rows)?;
        }
        Ok(())
    }
}

/// Counts that show a run exercised something (pair them with the verdict so a
/// pass cannot be vacuous).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Distinct grants (scope, token) seen in ok acquire or renew results.
    pub grants: u64,
    /// Ok renewals, including idempotent re-acquires of a grant already seen.
    pub renewals: u64,
    /// Ok releases.
    pub releases: u64,
    /// Grants of a token > 1 whose previous known grant had another owner.
    pub takeovers: u64,
    /// Ok commits.
    pub commits: u64,
    /// Commits that failed because the lease was lost ([`FailReason::Stale`]).
    pub refused_stale_commits: u64,
    /// Operations whose outcome is unknown (including never completed).
    pub unknown_ops: u64,
    /// Pairs of belief intervals of different workers overlapping on a scope.
    pub belief_overlaps: u64,
    /// Distinct owners that were granted a lease.
    pub distinct_holders: u64,
    /// Server-time delays from a dead holder's `expires_at` to the next grant
    /// of its scope, ascending, in µs. Only judged grants count: the holder
    /// released nothing, no unknown renewal or re-acquire of its may have
    /// extended the grant, and the next token is known (no unseen grant between).
    pub dead_holder_takeover_delays_us: Vec<i64>,
}

impl Stats {
    /// The largest delay in [`Stats::dead_holder_takeover_delays_us`], if any.
    pub fn dead_holder_takeover_delay_us_max(&self) -> Option<i64> {
        self.dead_holder_takeover_delays_us.last().copied()
    }
}

/// The bounded-takeover check (I5): how late a dead holder's scope may be taken
/// over while a rival waits for it.
///
/// Soundness: a rival counts as waiting only if, at the dead grant's
/// `expires_at` (server time `E`), its last event was an acquisition of the
/// scope (invoked, or refused / unknown), every event of it up to `E + slack`
/// is again an acquisition that did not succeed, and it has an event after
/// `E + slack` (it was alive and running through the whole window). Such a
/// rival retries by itself, so a free scope must go to someone within one
/// retry interval plus a round trip. To place worker events (stamped in true
/// time) on the server's clock the check needs the server clock as a fixed
/// offset from true time — exact in the simulation, unknown against a real
/// server, where only the delays are reported. Apply the bound only where the
/// faults cannot legitimately stall a waiting rival (worker crashes alone; not
/// partitions, pauses, lost replies or database crashes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TakeoverBound {
    /// How long after the dead grant's `expires_at` the next grant may come, µs.
    pub slack_us: i64,
    /// Server time minus true time (constant): `server = true + this`.
    pub server_minus_true_us: i64,
}

/// The checker's verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Every broken rule; empty means the history passed.
    pub violations: Vec<Violation>,
    /// What the evidence cannot decide (e.g. a server-time overlap of grants
    /// stamped at their statement's start with no real-time proof): not a
    /// violation, and not a pass of that rule either — "could not judge".
    pub possible: Vec<Violation>,
    /// What the run exercised.
    pub stats: Stats,
}

impl CheckReport {
    /// True when no rule is broken.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The violations of one rule.
    pub fn violations_of(&self, invariant: Invariant) -> Vec<&Violation> {
        self.violations
            .iter()
            .filter(|violation| violation.invariant == invariant)
            .collect()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stats = &self.stats;
        writeln!(
            formatter,
            "{} violation(s); grants={} renewals={} releases={} takeovers={} commits={} \
             refused_stale_commits={} unknown_ops={} belief_overlaps={} distinct_holders={} \
             dead_holder_takeovers={} dead_holder_takeover_delay_us_max={}",
            self.violations.len(),
            stats.grants,
            stats.renewals,
            stats.releases,
            stats.takeovers,
            stats.commits,
            stats.refused_stale_commits,
            stats.unknown_ops,
            stats.belief_overlaps,
            stats.distinct_holders,
            stats.dead_holder_takeover_delays_us.len(),
            stats
                .dead_holder_takeover_delay_us_max()
                .map_or("-".to_string(), |delay_us| delay_us.to_string())
        )?;
        for violation in &self.violations {
            writeln!(formatter, "  {violation}")?;
        }
        for possible in &self.possible {
            writeln!(formatter, "  possible (could not judge): {possible}")?;
        }
        Ok(())
    }
}

/// An invoked operation with its completion, if any.
#[derive(Debug)]
struct OpRecord<'h> {
    invoke_event: u64,
    /// True time of the invoke: the operation reached the server no earlier.
    invoke_true_us: i64,
    op: &'h Op,
    completion: Option<(u64, &'h Outcome)>,
    /// True time of the completion: the operation, if it took effect and was
    /// acknowledged, had taken effect by then.
    complete_true_us: Option<i64>,
}

impl OpRecord<'_> {
    fn is_unknown(&self) -> bool {
        matches!(self.completion, None | Some((_, Outcome::Unknown { .. })))
    }

    fn events(&self) -> Vec<u64> {
        let mut events = vec![self.invoke_event];
        events.extend(self.completion.map(|(index, _)| index));
        events
    }

    /// True time by which the operation certainly took effect, if it did: its
    /// completion when acknowledged ok, else never bounded (an unknown one may
    /// still reach the server after the worker gave up).
    fn acknowledged_by_true_us(&self) -> i64 {
        match (self.completion, self.complete_true_us) {
            (Some((_, Outcome::Ok { .. })), Some(complete_true_us)) => complete_true_us,
            _ => i64::MAX,
        }
    }
}

/// Whether an operation invoked at `invoked_true_us` may have taken effect
/// before something known to have happened by `by_true_us`. True times are
/// stamped before sending and after receiving, so only a strictly later invoke
/// is certainly later; when unsure the answer is yes (the checker stays sound).
fn may_precede(invoked_true_us: i64, by_true_us: i64) -> bool {
    invoked_true_us <= by_true_us
}

/// One grant (scope, token) as the ok outcomes describe it.
#[derive(Debug)]
struct Grant {
    token: u64,
    owner: String,
    granted_at_us: i64,
    /// The event that first reported the grant.
    first_event: u64,
    expires_at_us_max: i64,
    expires_event: u64,
    /// Largest server `now()` at which the grant was seen live (acquire/renew).
    live_at_us_max: i64,
    /// Earliest true time at which an ok outcome reported the grant: it was
    /// made (in server time, `granted_at`) before then.
    reported_by_true_us: i64,
    released: Option<(i64, u64)>,
    /// The earliest-invoked release of unknown outcome: (invoke true time, invoke event).
    release_unknown: Option<(i64, u64)>,
    /// The latest invoke (true time) of an operation that then found this
    /// grant live (an ok acquire or renewal reporting it, an ok release of
    /// it): the grant was certainly live at some point after that instant.
    live_after_invoke_true_us: i64,
}

impl Grant {
    /// The end of the effective interval and the event that shows it, as
    /// early as any rival may see it (an unknown release counts).
    fn end(&self) -> (i64, u64) {
        if let Some(released) = self.released {
            return released;
        }
        if self.release_unknown.is_some() {
            // The release may have taken effect at any server time after the
            // grant was last seen live: only that much is certain.
            return (self.live_at_us_max, self.expires_event);
        }
        (self.expires_at_us_max, self.expires_event)
    }

    /// The end as `rival` must respect it: an unknown release invoked after
    /// the rival's grant was reported took effect (if at all) after the rival
    /// was granted — the server's `now()` only advances — so it cannot have
    /// made room for it. Returns the end and the events that show it.
    fn end_against(&self, rival: &Grant) -> (i64, Vec<u64>) {
        match self.release_unknown {
            Some((invoked_true_us, invoke_event))
                if self.released.is_none()
                    && !may_precede(invoked_true_us, rival.reported_by_true_us) =>
            {
                (
                    self.expires_at_us_max,
                    vec![self.expires_event, invoke_event],
                )
            }
            _ => {
                let (end_us, event) = self.end();
                (end_us, vec![event])
            }
        }
    }
}

/// A violation before it is stamped: invariant, scope, events, rows, message.
type PendingViolation = (Invariant, String, Vec<u64>, Vec<u64>, String);

type Grants = BTreeMap<String, BTreeMap<u64, Grant>>;

struct Checker<'h> {
    history: &'h History,
    config: &'h CheckConfig,
    ops: BTreeMap<u64, OpRecord<'h>>,
    grants: Grants,
    report: CheckReport,
}

/// Judges `history`: every invariant, every count.
pub fn check(history: &History, config: &CheckConfig) -> CheckReport {
    check_inner(history, config, None)
}

/// Like [`check`], and also judges dead holders' takeovers against `bound` (I5).
/// The bound is beside [`CheckConfig`] rather than in it so callers that spell
/// the config out field by field keep compiling.
pub fn check_with_takeover_bound(
    history: &History,
    config: &CheckConfig,
    bound: &TakeoverBound,
) -> CheckReport {
    assert!(bound.slack_us >= 0, "a takeover bound is not negative");
    check_inner(history, config, Some(bound))
}

fn check_inner(
    history: &History,
    config: &CheckConfig,
    bound: Option<&TakeoverBound>,
) -> CheckReport {
    let mut checker = Checker {
        history,
        config,
        ops: BTreeMap::new(),
        grants: BTreeMap::new(),
        report: CheckReport::default(),
    };
    checker.pair_operations();
    checker.collect_grants();
    checker.check_grant_intervals();
    checker.check_certain_holds();
    checker.check_guarded_rows();
    checker.check_commits();
    checker.check_beliefs();
    checker.check_takeovers(bound);
    checker.count_operations();
    let report = checker.report;
    // Postconditions: every verdict carries evidence, and the counts agree.
    for violation in &report.violations {
        assert!(
            !violation.events.is_empty() || !violation.rows.is_empty(),
            "violation without evidence: {violation}"
        );
    }
    assert!(report.stats.takeovers <= report.stats.grants);
    assert!(report.stats.distinct_holders <= report.stats.grants);
    assert!(report.stats.dead_holder_takeover_delays_us.len() as u64 <= report.stats.grants);
    if bound.is_none() {
        assert!(report.violations_of(Invariant::BoundedTakeover).is_empty());
    }
    report
}

fn sorted(mut values: Vec<u64>) -> Vec<u64> {
    values.sort_unstable();
    values.dedup();
    values
}

impl<'h> Checker<'h> {
    fn violation(
        &mut self,
        invariant: Invariant,
        scope: &str,
        events: Vec<u64>,
        rows: Vec<u64>,
        message: String,
    ) {
        self.report.violations.push(Violation {
            invariant,
            scope: scope.to_string(),
            events: sorted(events),
            rows: sorted(rows),
            message,
        });
    }

    fn pair_operations(&mut self) {
        for event in &self.history.events {
            match &event.kind {
                EventKind::Invoke { op_id, op } => {
                    if self.ops.contains_key(op_id) {
                        let first = self.ops[op_id].invoke_event;
                        self.violation(
                            Invariant::WellFormed,
                            op.scope(),
                            vec![first, event.index],
                            vec![],
                            format!("op id {op_id} invoked twice"),
                        );
                        continue;
                    }
                    self.ops.insert(
                        *op_id,
                        OpRecord {
                            invoke_event: event.index,
                            invoke_true_us: event.true_time_us,
                            op,
                            completion: None,
                            complete_true_us: None,
                        },
                    );
                }
                EventKind::Complete { op_id, outcome } => {
                    let problem = match self.ops.get_mut(op_id) {
                        None => Some((
                            "".to_string(),
                            format!("op id {op_id} completed but never invoked"),
                        )),
                        Some(record) if record.completion.is_some() => Some((
                            record.op.scope().to_string(),
                            format!("op id {op_id} completed twice"),
                        )),
                        Some(record) => {
                            let kind_matches = match (record.op, outcome) {
                                (Op::Acquire { .. } | Op::Renew { .. }, Outcome::Ok { result }) => {
                                    matches!(result, OpResult::Lease { .. } | OpResult::Lock { .. })
                                }
                                (Op::Release { .. }, Outcome::Ok { result }) => {
                                    matches!(result, OpResult::Released { .. } | OpResult::Unlocked)
                                }
                                (Op::Commit { .. }, Outcome::Ok { result }) => {
                                    matches!(result, OpResult::Committed { .. })
                                }
                                _ => true,
                            };
                            record.completion = Some((event.index, outcome));
                            record.complete_true_us = Some(event.true_time_us);
                            (!kind_matches).then(|| {
                                (
                                    record.op.scope().to_string(),
                                    format!(
                                        "op id {op_id}: result {outcome:?} does not fit {:?}",
                                        record.op
                                    ),
                                )
                            })
                        }
                    };
                    if let Some((scope, message)) = problem {
                        self.violation(
                            Invariant::WellFormed,
                            &scope,
                            vec![event.index],
                            vec![],
                            message,
                        );
                    }
                }
                EventKind::BeliefStart { .. } | EventKind::BeliefEnd { .. } => {}
            }
        }
    }

    /// Builds [`Grant`]s from ok acquire/renew/release outcomes; checks the I2
    /// rules that concern a single grant.
    fn collect_grants(&mut self) {
        let mut violations = Vec::new();
        let mut renewals = 0;
        for record in self.ops.values() {
            let Some((complete_event, Outcome::Ok { result })) = record.completion else {
                continue;
            };
            let reported_true_us = record.acknowledged_by_true_us();
            let (scope, requested_owner, ttl_us, renewed_token) = match record.op {
                Op::Acquire {
                    scope,
                    owner,
                    ttl_us,
                } => (scope, owner, *ttl_us, None),
                Op::Renew {
                    scope,
                    owner,
                    token,
                    ttl_us,
                } => (scope, owner, *ttl_us, Some(*token)),
                Op::Release { .. } | Op::Commit { .. } => continue,
            };
            let OpResult::Lease {
                token,
                owner,
                granted_at_us,
                expires_at_us,
            } = result
            else {
                continue;
            };
            let events = record.events();
            if owner != requested_owner {
                violations.push((
                    Invariant::TokenOrder,
                    scope.clone(),
                    events.clone(),
                    format!("{requested_owner} was answered with {owner}'s row (token {token})"),
                ));
            }
            if let Some(renewed_token) = renewed_token {
                if renewed_token != *token {
                    violations.push((
                        Invariant::TokenOrder,
                        scope.clone(),
                        events.clone(),
                        format!("{owner} renewed token {renewed_token} but got token {token}"),
                    ));
                }
            }
            let scope_grants = self.grants.entry(scope.clone()).or_default();
            match scope_grants.get_mut(token) {
                None => {
                    if renewed_token.is_some() {
                        renewals += 1;
                    }
                    scope_grants.insert(
                        *token,
                        Grant {
                            token: *token,
                            owner: owner.clone(),
                            granted_at_us: *granted_at_us,
                            first_event: complete_event,
                            expires_at_us_max: *expires_at_us,
                            expires_event: complete_event,
                            live_at_us_max: expires_at_us - ttl_us,
                            reported_by_true_us: reported_true_us,
                            released: None,
                            release_unknown: None,
                            live_after_invoke_true_us: record.invoke_true_us,
                        },
                    );
                }
                Some(grant) => {
                    renewals += 1;
                    if grant.owner != *owner {
                        violations.push((
                            Invariant::TokenOrder,
                            scope.clone(),
                            vec![grant.first_event, complete_event],
                            format!("token {token} granted to both {} and {owner}", grant.owner),
                        ));
                    }
                    if grant.granted_at_us != *granted_at_us {
                        violations.push((
                            Invariant::TokenOrder,
                            scope.clone(),
                            vec![grant.first_event, complete_event],
                            format!(
                                "token {token} granted twice: at {} and at {granted_at_us} (server us)",
                                grant.granted_at_us
                            ),
                        ));
                    }
                    if *expires_at_us > grant.expires_at_us_max {
                        grant.expires_at_us_max = *expires_at_us;
                        grant.expires_event = complete_event;
                    }
                    grant.live_at_us_max = grant.live_at_us_max.max(expires_at_us - ttl_us);
                    grant.reported_by_true_us = grant.reported_by_true_us.min(reported_true_us);
                    grant.live_after_invoke_true_us =
                        grant.live_after_invoke_true_us.max(record.invoke_true_us);
                }
            }
        }
        self.report.stats.renewals = renewals;

        // Releases cut a grant short; an unknown one may have.
        for record in self.ops.values() {
            let Op::Release {
                scope,
                owner,
                token,
            } = record.op
            else {
                continue;
            };
            let Some(grant) = self
                .grants
                .get_mut(scope)
                .and_then(|grants| grants.get_mut(token))
            else {
                continue;
            };
            match record.completion {
                Some((
                    complete_event,
                    Outcome::Ok {
                        result: OpResult::Released { released_at_us },
                    },
                )) => {
                    if grant.owner != *owner {
                        violations.push((
                            Invariant::TokenOrder,
                            scope.clone(),
                            vec![grant.first_event, complete_event],
                            format!(
                                "{owner} released token {token}, which was granted to {}",
                                grant.owner
                            ),
                        ));
                    }
                    let earliest = grant.released.map_or(i64::MAX, |(at_us, _)| at_us);
                    if *released_at_us < earliest {
                        grant.released = Some((*released_at_us, complete_event));
                    }
                    // A release that released found the grant live.
                    grant.live_after_invoke_true_us =
                        grant.live_after_invoke_true_us.max(record.invoke_true_us);
                }
                None | Some((_, Outcome::Unknown { .. })) if grant.owner == *owner => {
                    let invoked = (record.invoke_true_us, record.invoke_event);
                    if grant
                        .release_unknown
                        .is_none_or(|earliest| invoked < earliest)
                    {
                        grant.release_unknown = Some(invoked);
                    }
                }
                _ => {}
            }
        }
        for (invariant, scope, events, message) in violations {
            self.violation(invariant, &scope, events, vec![], message);
        }
    }

    /// I1 and the ordering part of I2, per scope, over grants ordered by `granted_at`.
    fn check_grant_intervals(&mut self) {
        let mut violations = Vec::new();
        let mut possible = Vec::new();
        // Per (scope, owner): the earliest invoke of any acquisition, whatever
        // its outcome: no grant of that owner was decided before it.
        let mut acquire_invoked_min: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for record in self.ops.values() {
            if let Op::Acquire { scope, owner, .. } = record.op {
                let earliest = acquire_invoked_min
                    .entry((scope.as_str(), owner.as_str()))
                    .or_insert(i64::MAX);
                *earliest = (*earliest).min(record.invoke_true_us);
            }
        }
        let mut holders = BTreeSet::new();
        for (scope, scope_grants) in &self.grants {
            let mut ordered: Vec<&Grant> = scope_grants.values().collect();
            ordered.sort_by_key(|grant| (grant.granted_at_us, grant.token));
            // The grant whose interval reaches furthest so far.
            let mut reach: Option<&Grant> = None;
            // Grants with an unknown release, until their latest possible end.
            let mut lingering: Vec<&Grant> = Vec::new();
            let mut previous: Option<&Grant> = None;
            for grant in ordered {
                holders.insert(grant.owner.clone());
                self.report.stats.grants += 1;
                if let Some(previous) = previous {
                    if grant.token > 1 && previous.owner != grant.owner {
                        self.report.stats.takeovers += 1;
                    }
                    if grant.token < previous.token {
                        violations.push((
                            Invariant::TokenOrder,
                            scope.clone(),
                            vec![previous.first_event, grant.first_event],
                            format!(
                                "token went backwards: {} got token {} at {}, then {} got token {} at {} (server us)",
                                previous.owner,
                                previous.token,
                                previous.granted_at_us,
                                grant.owner,
                                grant.token,
                                grant.granted_at_us
                            ),
                        ));
                    }
                }
                // Earlier grants that may still be live for this one: the one
                // reaching furthest by its earliest end, then those whose unknown
                // release this grant need not respect (few: pruned as they end).
                lingering
                    .retain(|earlier: &&Grant| earlier.expires_at_us_max > grant.granted_at_us);
                let overlapped = reach
                    .into_iter()
                    .chain(lingering.iter().copied())
                    .map(|earlier| (earlier, earlier.end_against(grant)))
                    .find(|(_, (end_us, _))| grant.granted_at_us < *end_us);
                if let Some((earlier, (end_us, end_events))) = overlapped {
                    let (invariant, what) = if earlier.owner == grant.owner {
                        (
                            Invariant::TokenOrder,
                            "re-acquired its live grant under a new token",
                        )
                    } else {
                        (Invariant::MutualExclusion, "overlap")
                    };
                    let mut events = vec![earlier.first_event, grant.first_event];
                    events.extend(end_events);
                    let message = format!(
                        "{what}: {} token {} holds [{}, {}) and {} token {} was granted at {} (server us)",
                        earlier.owner,
                        earlier.token,
                        earlier.granted_at_us,
                        end_us,
                        grant.owner,
                        grant.token,
                        grant.granted_at_us
                    );
                    let proven = match self.config.grant_stamps {
                        GrantStamps::Decision => true,
                        GrantStamps::StatementStart => {
                            // Real-time proof: earlier decided (acknowledged)
                            // before any acquisition of the later owner was
                            // invoked, and the later one acknowledged before
                            // an operation that still found earlier live.
                            let later_invoked_us = acquire_invoked_min
                                .get(&(scope.as_str(), grant.owner.as_str()))
                                .copied()
                                .unwrap_or(i64::MIN);
                            earlier.reported_by_true_us < later_invoked_us
                                && grant.reported_by_true_us < earlier.live_after_invoke_true_us
                        }
                    };
                    if proven {
                        violations.push((invariant, scope.clone(), events, message));
                    } else {
                        possible.push((
                            invariant,
                            scope.clone(),
                            events,
                            format!(
                                "{message}; stamps are statement starts and real-time order does not prove it"
                            ),
                        ));
                    }
                }
                if grant.released.is_none() && grant.release_unknown.is_some() {
                    lingering.push(grant);
                }
                if reach.is_none_or(|reach| grant.end().0 > reach.end().0) {
                    reach = Some(grant);
                }
                previous = Some(grant);
            }
        }
        self.report.stats.distinct_holders = holders.len() as u64;
        for (invariant, scope, events, message) in violations {
            self.violation(invariant, &scope, events, vec![], message);
        }
        for (invariant, scope, events, message) in possible {
            self.report.possible.push(Violation {
                invariant,
                scope,
                events: sorted(events),
                rows: Vec::new(),
                message,
            });
        }
    }

    /// I3: every guarded row, grouped by cycle, against the grants and `seq` order.
    fn check_guarded_rows(&mut self) {
        let mut violations: Vec<PendingViolation> = Vec::new();
        let commits = self.commits_by_cycle();
        let cycles = cycles_of(&self.history.guarded_rows);
        let bounds: BTreeMap<&str, GrantBounds<'_>> = self
            .grants
            .iter()
            .map(|(scope, grants)| (scope.as_str(), GrantBounds::new(grants)))
            .collect();
        // Who may hold a grant no ok outcome reported: owners with an unknown
        // acquire, from the earliest invoke (true time) of one.
        let mut unknown_acquires: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        // Each scope's unknown acquires' invoke times, ascending: each may have
        // granted one more token.
        let mut unknown_acquire_times: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        // Renewals whose outcome is unknown may have extended their grant.
        let mut unknown_renewals: BTreeMap<(&str, &str, u64), i64> = BTreeMap::new();
        for record in self.ops.values().filter(|record| record.is_unknown()) {
            let invoked_true_us = record.invoke_true_us;
            match record.op {
                Op::Acquire { scope, owner, .. } => {
                    let earliest = unknown_acquires
                        .entry((scope.as_str(), owner.as_str()))
                        .or_insert(invoked_true_us);
                    *earliest = (*earliest).min(invoked_true_us);
                    unknown_acquire_times
                        .entry(scope.as_str())
                        .or_default()
                        .push(invoked_true_us);
                }
                Op::Renew {
                    scope,
                    owner,
                    token,
                    ..
                } => {
                    let earliest = unknown_renewals
                        .entry((scope.as_str(), owner.as_str(), *token))
                        .or_insert(invoked_true_us);
                    *earliest = (*earliest).min(invoked_true_us);
                }
                Op::Release { .. } | Op::Commit { .. } => {}
            }
        }
        for times in unknown_acquire_times.values_mut() {
            times.sort_unstable();
        }

        for ((owner, cycle_id), rows) in &cycles {
            let scope = &rows[0].scope;
            let token = rows[0].token;
            let commit = commits.get(&(owner.as_str(), *cycle_id));
            let commit_events = commit.map_or(vec![], |record| record.events());
            // Unknown operations count only if they may have reached the server
            // before the write: a write acknowledged ok cannot be excused by an
            // operation invoked after the acknowledgement.
            let acknowledged_by_true_us =
                commit.map_or(i64::MAX, |record| record.acknowledged_by_true_us());
            let unknown_acquire_before = unknown_acquires
                .get(&(scope.as_str(), owner.as_str()))
                .is_some_and(|invoked_true_us| {
                    may_precede(*invoked_true_us, acknowledged_by_true_us)
                });
            let seqs = |rows: &[&GuardedRow]| rows.iter().map(|row| row.seq).collect::<Vec<_>>();
            if rows
                .iter()
                .any(|row| row.scope != *scope || row.token != token)
            {
                violations.push((
                    Invariant::FencedWrites,
                    scope.clone(),
                    commit_events.clone(),
                    seqs(rows),
                    format!("cycle {cycle_id} of {owner} has rows under several scopes or tokens"),
                ));
            }
            match commit.map(|record| record.op) {
                None => violations.push((
                    Invariant::FencedWrites,
                    scope.clone(),
                    vec![],
                    seqs(rows),
                    format!("rows of cycle {cycle_id} of {owner} (token {token}) come from no recorded commit"),
                )),
                Some(Op::Commit { scope: commit_scope, token: commit_token, .. })
                    if commit_scope != scope || *commit_token != token =>
                {
                    violations.push((
                        Invariant::FencedWrites,
                        scope.clone(),
                        commit_events.clone(),
                        seqs(rows),
                        format!(
                            "cycle {cycle_id} of {owner} committed under {commit_scope} token {commit_token} \
                             but its rows carry {scope} token {token}"
                        ),
                    ));
                }
                Some(_) => {}
            }

            let scope_grants = self.grants.get(scope);
            let grant = scope_grants.and_then(|grants| grants.get(&token));
            let mut events = commit_events.clone();
            match grant {
                Some(grant) if grant.owner != *owner => {
                    events.push(grant.first_event);
                    violations.push((
                        Invariant::FencedWrites,
                        scope.clone(),
                        events.clone(),
                        seqs(rows),
                        format!("{owner} wrote cycle {cycle_id} under token {token}, which was granted to {}", grant.owner),
                    ));
                }
                Some(grant) => {
                    // A write must also land before its own grant ended: after
                    // expiry (or release) the grant is not current, even if no
                    // rival has taken over yet. Unknown renewals or
                    // re-acquisitions may have extended it: then the end is unknown.
                    let extendable = unknown_acquire_before
                        || unknown_renewals
                            .get(&(scope.as_str(), owner.as_str(), token))
                            .is_some_and(|invoked_true_us| {
                                may_precede(*invoked_true_us, acknowledged_by_true_us)
                            });
                    let end_us = match grant.released {
                        Some((released_at_us, _)) => released_at_us,
                        None => grant.expires_at_us_max,
                    };
                    let after_end: Vec<&GuardedRow> = rows
                        .iter()
                        .copied()
                        .filter(|row| row.written_at_us >= end_us)
                        .collect();
                    if !extendable && !after_end.is_empty() {
                        let mut events = events.clone();
                        events.push(grant.expires_event);
                        violations.push((
                            Invariant::FencedWrites,
                            scope.clone(),
                            events,
                            seqs(&after_end),
                            format!(
                                "{owner} wrote cycle {cycle_id} under token {token} at {}, after the grant ended at {} (server us)",
                                after_end[0].written_at_us, end_us
                            ),
                        ));
                    }
                }
                None => {
                    // Tokens grow by one per grant, so a token no ok outcome
                    // reported is at most the known maximum plus one per unknown
                    // acquire of the scope that may have come first.
                    let token_known_max = scope_grants
                        .and_then(|grants| grants.keys().next_back().copied())
                        .unwrap_or(0);
                    let unknown_acquires_before =
                        unknown_acquire_times
                            .get(scope.as_str())
                            .map_or(0, |times| {
                                times.partition_point(|invoked_true_us| {
                                    may_precede(*invoked_true_us, acknowledged_by_true_us)
                                })
                            }) as u64;
                    let maybe_granted = unknown_acquire_before
                        && token <= token_known_max.saturating_add(unknown_acquires_before);
                    if !maybe_granted {
                        violations.push((
                            Invariant::FencedWrites,
                            scope.clone(),
                            events.clone(),
                            seqs(rows),
                            format!("{owner} wrote cycle {cycle_id} under token {token}, which was never granted"),
                        ));
                    }
                }
            }
            // Bounds in server time: no earlier than the latest grant with a token
            // <= T, before the earliest grant with a larger token.
            let (lower, upper) = bounds
                .get(scope.as_str())
                .map_or((None, None), |bounds| bounds.around(token));
            if let Some(lower) = lower {
                let early: Vec<&GuardedRow> = rows
                    .iter()
                    .copied()
                    .filter(|row| row.written_at_us < lower.granted_at_us)
                    .collect();
                if !early.is_empty() {
                    let mut events = events.clone();
                    events.push(lower.first_event);
                    violations.push((
                        Invariant::FencedWrites,
                        scope.clone(),
                        events,
                        seqs(&early),
                        format!(
                            "{owner} wrote cycle {cycle_id} (token {token}) at {} before token {} was granted at {} (server us)",
                            early[0].written_at_us, lower.token, lower.granted_at_us
                        ),
                    ));
                }
            }
            if let Some(upper) = upper {
                let late: Vec<&GuardedRow> = rows
                    .iter()
                    .copied()
                    .filter(|row| row.written_at_us >= upper.granted_at_us)
                    .collect();
                if !late.is_empty() {
                    let mut events = events.clone();
                    events.push(upper.first_event);
                    violations.push((
                        Invariant::FencedWrites,
                        scope.clone(),
                        events,
                        seqs(&late),
                        format!(
                            "stale write: {owner} wrote cycle {cycle_id} under token {token} at {}, after {} got token {} at {} (server us)",
                            late[0].written_at_us, upper.owner, upper.token, upper.granted_at_us
                        ),
                    ));
                }
            }
        }

        // Seq order within each scope: tokens never decrease, cycles never interleave.
        let mut by_scope: BTreeMap<&str, Vec<&GuardedRow>> = BTreeMap::new();
        for row in &self.history.guarded_rows {
            by_scope.entry(&row.scope).or_default().push(row);
        }
        for (scope, mut rows) in by_scope {
            rows.sort_by_key(|row| row.seq);
            let mut highest: Option<&GuardedRow> = None;
            let mut reported_backwards = BTreeSet::new();
            let mut closed_cycles = BTreeSet::new();
            let mut reported_interleaved = BTreeSet::new();
            let mut previous: Option<&GuardedRow> = None;
            for row in rows {
                let cycle = (row.owner.as_str(), row.cycle_id);
                if let Some(highest) = highest {
                    if row.token < highest.token && reported_backwards.insert(cycle) {
                        violations.push((
                            Invariant::FencedWrites,
                            scope.to_string(),
                            vec![],
                            vec![highest.seq, row.seq],
                            format!(
                                "token went backwards in commit order: seq {} has token {} ({}), seq {} has token {} ({})",
                                highest.seq, highest.token, highest.owner, row.seq, row.token, row.owner
                            ),
                        ));
                    }
                }
                if highest.is_none_or(|highest| row.token > highest.token) {
                    highest = Some(row);
                }
                if let Some(previous) = previous {
                    let previous_cycle = (previous.owner.as_str(), previous.cycle_id);
                    if previous_cycle != cycle {
                        closed_cycles.insert(previous_cycle);
                        if closed_cycles.contains(&cycle) && reported_interleaved.insert(cycle) {
                            violations.push((
                                Invariant::FencedWrites,
                                scope.to_string(),
                                vec![],
                                vec![previous.seq, row.seq],
                                format!(
                                    "cycles interleave: cycle {} of {} resumes at seq {} after cycle {} of {} at seq {}",
                                    row.cycle_id, row.owner, row.seq, previous.cycle_id, previous.owner, previous.seq
                                ),
                            ));
                        }
                    }
                }
                previous = Some(row);
            }
        }
        violations.extend(commit_order_violations(&self.history.guarded_rows));
        for (invariant, scope, events, rows, message) in violations {
            self.violation(invariant, &scope, events, rows, message);
        }
    }

    fn commits_by_cycle(&self) -> BTreeMap<(&'h str, u64), &OpRecord<'h>> {
        let mut commits = BTreeMap::new();
        for record in self.ops.values() {
            if let Op::Commit {
                owner, cycle_id, ..
            } = record.op
            {
                commits.entry((owner.as_str(), *cycle_id)).or_insert(record);
            }
        }
        commits
    }

    /// I4: each commit's rows against its outcome.
    fn check_commits(&mut self) {
        let mut violations = Vec::new();
        let cycles = cycles_of(&self.history.guarded_rows);
        let mut seen_cycles: BTreeMap<(&str, u64), u64> = BTreeMap::new();
        for record in self.ops.values() {
            let Op::Commit {
                scope,
                owner,
                token,
                cycle_id,
                items,
            } = record.op
            else {
                continue;
            };
            if let Some(first) =
                seen_cycles.insert((owner.as_str(), *cycle_id), record.invoke_event)
            {
                violations.push((
                    Invariant::WellFormed,
                    scope.clone(),
                    vec![first, record.invoke_event],
                    vec![],
                    format!("{owner} committed cycle {cycle_id} twice"),
                ));
                continue;
            }
            let rows = cycles
                .get(&(owner.clone(), *cycle_id))
                .map_or(&[][..], |rows| &rows[..]);
            let seqs: Vec<u64> = rows.iter().map(|row| row.seq).collect();
            let mut present = BTreeSet::new();
            let mut duplicated = Vec::new();
            let mut out_of_range = Vec::new();
            for row in rows {
                if row.item >= *items {
                    out_of_range.push(row.seq);
                } else if !present.insert(row.item) {
                    duplicated.push(row.seq);
                }
            }
            let events = record.events();
            let cycle = format!("{owner} cycle {cycle_id} (token {token}, {items} items)");
            if !duplicated.is_empty() || !out_of_range.is_empty() {
                violations.push((
                    Invariant::NothingLost,
                    scope.clone(),
                    events.clone(),
                    [duplicated, out_of_range].concat(),
                    format!("{cycle}: items written twice or out of range"),
                ));
            }
            let present_count = present.len() as u64;
            let whole = present_count == u64::from(*items);
            let outcome = match record.completion {
                Some((_, Outcome::Ok { .. })) => "ok",
                Some((_, Outcome::Fail { .. })) => "failed",
                None | Some((_, Outcome::Unknown { .. })) => "unknown",
            };
            let message = if present_count > 0 && !whole {
                Some(format!("{cycle} reported {outcome} is partial: {present_count} of {items} items in the table"))
            } else if outcome == "ok" && !whole {
                Some(format!(
                    "{cycle} reported committed is missing from the table"
                ))
            } else if outcome == "failed" && present_count > 0 {
                Some(format!("{cycle} reported failed is in the table"))
            } else {
                None
            };
            if let Some(message) = message {
                violations.push((Invariant::NothingLost, scope.clone(), events, seqs, message));
            }
        }
        for (invariant, scope, events, rows, message) in violations {
            self.violation(invariant, &scope, events, rows, message);
        }
    }

    /// Belief overlaps, in true time, between different worker incarnations.
    fn check_beliefs(&mut self) {
        struct Belief<'a> {
            worker: &'a str,
            incarnation: u64,
            token: u64,
            start_us: i64,
            end_us: i64,
            start_event: u64,
        }
        let events = &self.history.events;
        let history_end_us = events
            .iter()
            .map(|event| event.true_time_us)
            .max()
            .unwrap_or(0);
        // First true time of each (worker, incarnation): a later incarnation's
        // start ends the beliefs its predecessor never closed (it crashed).
        let mut incarnation_start: BTreeMap<(&str, u64), i64> = BTreeMap::new();
        for event in events {
            incarnation_start
                .entry((&event.worker, event.incarnation))
                .or_insert(event.true_time_us);
        }
        let mut open: BTreeMap<(&str, u64, &str), Belief<'_>> = BTreeMap::new();
        let mut beliefs: BTreeMap<&str, Vec<Belief<'_>>> = BTreeMap::new();
        for event in events {
            match &event.kind {
                EventKind::BeliefStart { scope, token } => {
                    open.entry((&event.worker, event.incarnation, scope))
                        .or_insert(Belief {
                            worker: &event.worker,
                            incarnation: event.incarnation,
                            token: *token,
                            start_us: event.true_time_us,
                            end_us: i64::MAX,
                            start_event: event.index,
                        });
                }
                EventKind::BeliefEnd { scope, .. } => {
                    if let Some(mut belief) =
                        open.remove(&(event.worker.as_str(), event.incarnation, scope.as_str()))
                    {
                        belief.end_us = event.true_time_us;
                        beliefs.entry(scope).or_default().push(belief);
                    }
                }
                EventKind::Invoke { .. } | EventKind::Complete { .. } => {}
            }
        }
        for ((worker, incarnation, scope), mut belief) in open {
            let successor_start = incarnation_start
                .range((worker, incarnation + 1)..)
                .take_while(|((other, _), _)| *other == worker)
                .map(|(_, start_us)| *start_us)
                .min();
            belief.end_us = successor_start.unwrap_or(history_end_us.saturating_add(1));
            beliefs.entry(scope).or_default().push(belief);
        }

        let mut violations = Vec::new();
        for (scope, mut scope_beliefs) in beliefs {
            scope_beliefs.sort_by_key(|belief| (belief.start_us, belief.start_event));
            let mut active: Vec<&Belief<'_>> = Vec::new();
            for belief in &scope_beliefs {
                active.retain(|other| other.end_us > belief.start_us);
                for other in &active {
                    if (other.worker, other.incarnation) == (belief.worker, belief.incarnation) {
                        continue;
                    }
                    if belief.start_us >= belief.end_us {
                        continue;
                    }
                    self.report.stats.belief_overlaps += 1;
                    let unfenced = [other.worker, belief.worker]
                        .iter()
                        .any(|worker| self.config.unfenced_workers.contains(*worker));
                    if unfenced {
                        violations.push((
                            scope.to_string(),
                            vec![other.start_event, belief.start_event],
                            format!(
                                "{} (token {}) and {} (token {}) both believed they held it from true time {} us",
                                other.worker, other.token, belief.worker, belief.token, belief.start_us
                            ),
                        ));
                    }
                }
                active.push(belief);
            }
        }
        for (scope, events, message) in violations {
            self.violation(Invariant::BeliefOverlap, &scope, events, vec![], message);
        }
    }

    /// I5's bounded part: dead holders' grants against the next grant of their scope.
    fn check_takeovers(&mut self, bound: Option<&TakeoverBound>) {
        type Incarnation<'a> = (&'a str, u64);
        let events = &self.history.events;
        let event_at = |index: u64| events.get(index as usize);
        // Which incarnation each owner is, from the events that invoked its ops.
        let mut incarnation_of: BTreeMap<&str, Incarnation<'_>> = BTreeMap::new();
        for record in self.ops.values() {
            if let Some(event) = event_at(record.invoke_event) {
                incarnation_of
                    .entry(record.op.owner())
                    .or_insert((&event.worker, event.incarnation));
            }
        }
        // Each incarnation's events in order, and each worker's last incarnation.
        let mut events_of: BTreeMap<Incarnation<'_>, Vec<u64>> = BTreeMap::new();
        let mut incarnation_max: BTreeMap<&str, u64> = BTreeMap::new();
        for event in events {
            events_of
                .entry((&event.worker, event.incarnation))
                .or_default()
                .push(event.index);
            let highest = incarnation_max.entry(&event.worker).or_insert(0);
            *highest = (*highest).max(event.incarnation);
        }
        // Who may have extended a grant no ok outcome shows (as in I3).
        let mut extendable: BTreeSet<(&str, &str, Option<u64>)> = BTreeSet::new();
        for record in self.ops.values().filter(|record| record.is_unknown()) {
            match record.op {
                Op::Acquire { scope, owner, .. } => {
                    extendable.insert((scope, owner, None));
                }
                Op::Renew {
                    scope,
                    owner,
                    token,
                    ..
                } => {
                    extendable.insert((scope, owner, Some(*token)));
                }
                Op::Release { .. } | Op::Commit { .. } => {}
            }
        }
        let ops = &self.ops;
        // An event that leaves its worker in the acquisition loop for `scope`:
        // an acquisition invoked, or one that completed without a grant.
        let acquiring = |index: u64, scope: &str| -> bool {
            let Some(event) = event_at(index) else {
                return false;
            };
            let op_id = match &event.kind {
                EventKind::Invoke { op_id, .. } => op_id,
                EventKind::Complete { op_id, outcome } => {
                    if matches!(outcome, Outcome::Ok { .. }) {
                        return false;
                    }
                    op_id
                }
                EventKind::BeliefStart { .. } | EventKind::BeliefEnd { .. } => return false,
            };
            ops.get(op_id).is_some_and(
                |record| matches!(record.op, Op::Acquire { scope: wanted, .. } if wanted == scope),
            )
        };

        let mut delays_us = Vec::new();
        let mut violations = Vec::new();
        for (scope, scope_grants) in &self.grants {
            for grant in scope_grants.values() {
                if grant.released.is_some()
                    || extendable.contains(&(scope, &grant.owner, None))
                    || extendable.contains(&(scope, &grant.owner, Some(grant.token)))
                {
                    continue;
                }
                let Some(&holder) = incarnation_of.get(grant.owner.as_str()) else {
                    continue;
                };
                let holder_events = &events_of[&holder];
                let last_event = *holder_events.last().expect("an owner has events");
                let restarted = incarnation_max[holder.0] > holder.1;
                let died_mid_operation = event_at(last_event).is_some_and(|event| {
                    matches!(&event.kind, EventKind::Invoke { op_id, .. }
                        if ops.get(op_id).is_some_and(|record| record.completion.is_none()))
                });
                let silent_after_grant = last_event <= grant.expires_event;
                if !(restarted || died_mid_operation || silent_after_grant) {
                    continue;
                }
                // The next grant must be the next token: a gap is a grant no ok
                // outcome reported, which may have held the scope meanwhile.
                let Some(next) = scope_grants.get(&(grant.token + 1)) else {
                    continue;
                };
                let expired_at_us = grant.expires_at_us_max;
                let delay_us = next.granted_at_us - expired_at_us;
                if delay_us < 0 {
                    // An overlap: I1's business.
                    continue;
                }
                delays_us.push(delay_us);
                let Some(bound) = bound else {
                    continue;
                };
                if delay_us <= bound.slack_us {
                    continue;
                }
                let window_end_us = expired_at_us + bound.slack_us;
                let server_us = |index: u64| {
                    event_at(index).map_or(i64::MAX, |event| {
                        event.true_time_us + bound.server_minus_true_us
                    })
                };
                let waiting_rival = events_of.iter().find_map(|(rival, rival_events)| {
                    if *rival == holder {
                        return None;
                    }
                    let split =
                        rival_events.partition_point(|index| server_us(*index) <= expired_at_us);
                    let at_expiry = *rival_events.get(split.checked_sub(1)?)?;
                    let window_split =
                        rival_events.partition_point(|index| server_us(*index) <= window_end_us);
                    let alive_after = *rival_events.get(window_split)?;
                    let waited = std::iter::once(at_expiry)
                        .chain(rival_events[split..window_split].iter().copied())
                        .all(|index| acquiring(index, scope));
                    waited.then_some((*rival, at_expiry, alive_after))
                });
                if let Some(((rival_worker, rival_incarnation), at_expiry, alive_after)) =
                    waiting_rival
                {
                    violations.push((
                        scope.clone(),
                        vec![grant.expires_event, next.first_event, at_expiry, alive_after],
                        format!(
                            "{} (token {}) died holding a grant that expired at {}; the next grant (token {} to {}) came at {}, {} us later, \
                             beyond the bound of {} us, while {rival_worker}#{rival_incarnation} was waiting for the scope (server us)",
                            grant.owner, grant.token, expired_at_us, next.token, next.owner, next.granted_at_us,
                            delay_us, bound.slack_us
                        ),
                    ));
                }
            }
        }
        delays_us.sort_unstable();
        self.report.stats.dead_holder_takeover_delays_us = delays_us;
        for (scope, events, message) in violations {
            self.violation(Invariant::BoundedTakeover, &scope, events, vec![], message);
        }
    }

    /// I1 and I2 for locks without server times ([`OpResult::Lock`]), in
    /// real time: see `certain_holds`.
    fn check_certain_holds(&mut self) {
        for (invariant, scope, events, rows, message) in
            certain_holds::violations(self.history, &self.ops)
        {
            self.violation(invariant, &scope, events, rows, message);
        }
    }

    fn count_operations(&mut self) {
        let stats = &mut self.report.stats;
        for record in self.ops.values() {
            if record.is_unknown() {
                stats.unknown_ops += 1;
            }
            match (record.op, record.completion) {
                // Lock grants (no server times) count here; lease grants
                // are counted from the grants they report.
                (
                    Op::Acquire { .. },
                    Some((
                        _,
                        Outcome::Ok {
                            result: OpResult::Lock { .. },
                        },
                    )),
                ) => stats.grants += 1,
                (Op::Release { .. }, Some((_, Outcome::Ok { .. }))) => stats.releases += 1,
                (Op::Commit { .. }, Some((_, Outcome::Ok { .. }))) => stats.commits += 1,
                (
                    Op::Commit { .. },
                    Some((
                        _,
                        Outcome::Fail {
                            reason: FailReason::Stale,
                        },
                    )),
                ) => stats.refused_stale_commits += 1,
                _ => {}
            }
        }
    }
}

/// One scope's grants in token order, indexed so that the grant window of any
/// token is found in logarithmic time (a long run has tens of thousands).
struct GrantBounds<'g> {
    by_token: Vec<&'g Grant>,
    /// `prefix_latest[i]`: the latest-granted of `by_token[..=i]`.
    prefix_latest: Vec<&'g Grant>,
    /// `suffix_earliest[i]`: the earliest-granted of `by_token[i..]`.
    suffix_earliest: Vec<&'g Grant>,
}

impl<'g> GrantBounds<'g> {
    fn new(grants: &'g BTreeMap<u64, Grant>) -> GrantBounds<'g> {
        let by_token: Vec<&Grant> = grants.values().collect();
        let mut prefix_latest: Vec<&Grant> = Vec::with_capacity(by_token.len());
        for grant in &by_token {
            let latest = match prefix_latest.last() {
                Some(latest) if latest.granted_at_us >= grant.granted_at_us => latest,
                _ => grant,
            };
            prefix_latest.push(latest);
        }
        let mut suffix_earliest: Vec<&Grant> = Vec::with_capacity(by_token.len());
        for grant in by_token.iter().rev() {
            let earliest = match suffix_earliest.last() {
                Some(earliest) if earliest.granted_at_us <= grant.granted_at_us => earliest,
                _ => grant,
            };
            suffix_earliest.push(earliest);
        }
        suffix_earliest.reverse();
        GrantBounds {
            by_token,
            prefix_latest,
            suffix_earliest,
        }
    }

    /// The latest grant with a token `<= token` and the earliest with a larger one.
    fn around(&self, token: u64) -> (Option<&'g Grant>, Option<&'g Grant>) {
        let split = self.by_token.partition_point(|grant| grant.token <= token);
        let lower = split.checked_sub(1).map(|index| self.prefix_latest[index]);
        let upper = self.suffix_earliest.get(split).copied();
        (lower, upper)
    }
}

/// Guarded rows grouped by cycle (owner, cycle id), each group in `seq` order.
fn cycles_of(rows: &[GuardedRow]) -> BTreeMap<(String, u64), Vec<&GuardedRow>> {
    let mut cycles: BTreeMap<(String, u64), Vec<&GuardedRow>> = BTreeMap::new();
    for row in rows {
        cycles
            .entry((row.owner.clone(), row.cycle_id))
            .or_default()
            .push(row);
    }
    for rows in cycles.values_mut() {
        rows.sort_by_key(|row| row.seq);
    }
    cycles
}

/// A committed cycle's commit time, token and first `seq`.
type CycleCommit = (i64, u64, u64);

/// I3 in commit order, where rows carry their transaction's commit time:
/// committed cycles appear in token order. A cycle under token `t` that
/// committed strictly after a cycle under a larger token landed under a
/// rival's grant — whatever its `seq` and `written_at` say (a cycle that
/// wrote before a takeover and committed after it keeps its early `seq`).
/// Sound for any fence that keeps the lease row locked until commit (the
/// takeover must wait for the commit) and for any token check at the store
/// (it refuses the older token); it assumes commit times come from one clock
/// that does not step back during the run. Equal commit times prove nothing
/// and are not compared; rows without a commit time are not judged here.
fn commit_order_violations(rows: &[GuardedRow]) -> Vec<PendingViolation> {
    // scope -> (owner, cycle_id) -> (committed_at, token, first seq).
    let mut by_scope: BTreeMap<&str, BTreeMap<(&str, u64), CycleCommit>> = BTreeMap::new();
    for row in rows {
        let Some(committed_at_us) = row.committed_at_us else {
            continue;
        };
        by_scope
            .entry(&row.scope)
            .or_default()
            .entry((&row.owner, row.cycle_id))
            .and_modify(|cycle| cycle.2 = cycle.2.min(row.seq))
            .or_insert((committed_at_us, row.token, row.seq));
    }
    let mut violations = Vec::new();
    for (scope, cycles) in by_scope {
        let mut ordered: Vec<(i64, u64, &str, u64, u64)> = cycles
            .into_iter()
            .map(|((owner, cycle_id), (committed_at_us, token, seq))| {
                (committed_at_us, token, owner, cycle_id, seq)
            })
            .collect();
        ordered.sort_unstable();
        // The highest-token cycle among those committed strictly earlier:
        // cycles committed at one instant are judged against earlier
        // instants only.
        let mut highest_before: Option<(i64, u64, &str, u64, u64)> = None;
        for instant in ordered.chunk_by(|a, b| a.0 == b.0) {
            for &(committed_at_us, token, owner, cycle_id, seq) in instant {
                let Some(highest) = highest_before else {
                    break;
                };
                if token < highest.1 {
                    violations.push((
                        Invariant::FencedWrites,
                        scope.to_string(),
                        vec![],
                        vec![highest.4, seq],
                        format!(
                            "committed out of token order: cycle {cycle_id} of {owner} (token {token}) committed at {committed_at_us}, \
                             after cycle {} of {} (token {}) committed at {} (server us)",
                            highest.3, highest.2, highest.1, highest.0
                        ),
                    ));
                }
            }
            for &cycle in instant {
                if highest_before.is_none_or(|highest| cycle.1 > highest.1) {
                    highest_before = Some(cycle);
                }
            }
        }
    }
    violations
}
