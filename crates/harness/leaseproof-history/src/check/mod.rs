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
//!   tokens never go backwards in `seq` (write) order and cycles of two
//!   owners never interleave. A
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
//!
//! One file per invariant, matching `tests/it/`: `token_order.rs` (collects
//! the grants), `mutual_exclusion.rs`, `fenced_writes.rs`, `nothing_lost.rs`,
//! `beliefs.rs`, `takeover.rs`, and `certain_holds.rs` (I1/I2 for locks that
//! report no server times). This file holds the vocabulary, the report, the
//! op pairing and the order the checks run in.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::event::{EventKind, FailReason, GuardedRow, Op, OpResult, Outcome};
use crate::history::History;

mod beliefs;
mod certain_holds;
mod fenced_writes;
mod lock_writes;
mod mutual_exclusion;
mod nothing_lost;
mod server_clock;
mod takeover;
mod token_order;

pub use crate::design::{CheckConfig, GrantStamps};

/// Which rule a [`Violation`] breaks. In JSON, its [`Invariant::slug`].
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Invariant {
    /// I1: two grants of one scope were live at once.
    #[serde(rename = "i1-mutual-exclusion")]
    MutualExclusion,
    /// I2: tokens out of order, shared, or changed by a renewal.
    #[serde(rename = "i2-token-order")]
    TokenOrder,
    /// I3: a guarded write outside its grant, under an ungranted token, out of
    /// token order, or interleaved with another owner's cycle.
    #[serde(rename = "i3-fenced-writes")]
    FencedWrites,
    /// I4: a commit's rows missing, present after a failure, or partial.
    #[serde(rename = "i4-nothing-lost")]
    NothingLost,
    /// Two workers believed they held one scope at once, one of them unfenced.
    #[serde(rename = "b-belief-overlap")]
    BeliefOverlap,
    /// I5: a dead holder's scope was taken over later than the bound allows
    /// although a live rival was waiting for it.
    #[serde(rename = "i5-bounded-takeover")]
    BoundedTakeover,
    /// The history itself is inconsistent (a completion without invoke, a
    /// duplicated op id, a result of the wrong kind).
    #[serde(rename = "h-well-formed")]
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

    /// The invariant whose [`Invariant::code`] is `code` (`I1`, `B`, …).
    pub fn from_code(code: &str) -> Option<Invariant> {
        Invariant::ALL
            .into_iter()
            .find(|invariant| invariant.code() == code)
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

/// Invariants (de)serialised as their codes, `["B", "I3"]`: the form
/// regression files and sweep documents carry (`#[serde(with =
/// "invariant_codes")]`). An unknown code is refused, naming the known ones.
pub mod invariant_codes {
    use serde::de::Error as _;
    use serde::{Deserialize as _, Deserializer, Serializer};

    use super::Invariant;

    /// Writes each invariant's code.
    pub fn serialize<S: Serializer>(
        invariants: &[Invariant],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(invariants.iter().map(|invariant| invariant.code()))
    }

    /// Reads codes back; an unknown one is an error.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Invariant>, D::Error> {
        Vec::<String>::deserialize(deserializer)?
            .into_iter()
            .map(|code| {
                Invariant::from_code(&code).ok_or_else(|| {
                    D::Error::custom(format!(
                        "unknown invariant code {code:?}: expected one of I1, I2, I3, I4, I5, B, H"
                    ))
                })
            })
            .collect()
    }
}

/// One broken rule, with the evidence.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    /// Distinct grants (scope, token) seen in ok acquire or renew results
    /// of leases; for locks without server times, ok acquisitions.
    pub grants: u64,
    /// Ok renewals, including idempotent re-acquires of a grant already seen.
    pub renewals: u64,
    /// Ok releases.
    pub releases: u64,
    /// Grants of a token > 1 whose previous known grant had another owner;
    /// for locks without server times, certain holds an acquisition began
    /// whose previous certain hold of the scope (by start) was another
    /// owner's.
    pub takeovers: u64,
    /// Ok commits, and ok writes of locks.
    pub commits: u64,
    /// Commits that failed because the lease was lost ([`FailReason::Stale`]).
    pub refused_stale_commits: u64,
    /// Operations whose outcome is unknown (including never completed).
    pub unknown_ops: u64,
    /// Pairs of belief intervals of different workers overlapping on a scope.
    pub belief_overlaps: u64,
    /// Distinct owners that were granted a lease or a lock.
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

/// The checker's verdict; in JSON (`check --json`, `race --json`) an object
/// of these four fields (docs/json.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// Every broken rule; empty means the history passed.
    pub violations: Vec<Violation>,
    /// What the evidence cannot decide (e.g. a server-time overlap of grants
    /// stamped at their statement's start with no real-time proof): not a
    /// violation, and not a pass of that rule either — "could not judge".
    pub possible: Vec<Violation>,
    /// Rules the evidence did not allow to judge at all, each with the
    /// missing evidence (rows without commit times, say): not a pass either.
    pub not_judged: Vec<String>,
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

impl CheckReport {
    /// The report as its `Display` writes it, with at most `limit` findings
    /// of each kind (violations, possible, not judged); a line counts the rest.
    pub fn shown(&self, limit: usize) -> ShownReport<'_> {
        ShownReport {
            report: self,
            limit,
        }
    }
}

/// [`CheckReport::shown`]: the report with a limit on the findings listed.
#[derive(Debug)]
pub struct ShownReport<'r> {
    report: &'r CheckReport,
    limit: usize,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shown(usize::MAX).fmt(formatter)
    }
}

impl fmt::Display for ShownReport<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let report = self.report;
        let stats = &report.stats;
        writeln!(
            formatter,
            "{} violation(s); grants={} renewals={} releases={} takeovers={} commits={} \
             refused_stale_commits={} unknown_ops={} belief_overlaps={} distinct_holders={} \
             dead_holder_takeovers={} dead_holder_takeover_delay_us_max={}",
            report.violations.len(),
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
        listed(
            formatter,
            &report.violations,
            self.limit,
            "",
            "violation(s)",
        )?;
        listed(
            formatter,
            &report.possible,
            self.limit,
            "possible (could not judge): ",
            "possible violation(s)",
        )?;
        listed(
            formatter,
            &report.not_judged,
            self.limit,
            "not judged: ",
            "findings not judged",
        )
    }
}

impl ShownReport<'_> {
    /// Whether the limit left some finding out.
    pub fn cut(&self) -> bool {
        let report = self.report;
        [
            report.violations.len(),
            report.possible.len(),
            report.not_judged.len(),
        ]
        .into_iter()
        .any(|count| count > self.limit)
    }
}

/// The first `limit` of `findings`, a line each after `prefix`, then a line
/// counting the rest; only what is shown is formatted.
fn listed(
    formatter: &mut fmt::Formatter<'_>,
    findings: &[impl fmt::Display],
    limit: usize,
    prefix: &str,
    what: &str,
) -> fmt::Result {
    for finding in findings.iter().take(limit) {
        writeln!(formatter, "  {prefix}{finding}")?;
    }
    match findings.len().saturating_sub(limit) {
        0 => Ok(()),
        more => writeln!(formatter, "  … and {more} more {what} not listed"),
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
    /// The latest end a renewal that revived the grant reported (see
    /// `token_order`): the grant's own row may have been live again until
    /// then, `i64::MIN` when nothing revived it.
    revived_until_us: i64,
    /// The earliest server time a reviving renewal was decided (its
    /// `expires_at - ttl`, a lower bound of it): between the grant's own end
    /// and this instant the grant was certainly not current. `i64::MAX`
    /// when nothing revived it.
    revived_from_us: i64,
    /// Largest server `now()` at which the grant was seen live (acquire/renew).
    live_at_us_max: i64,
    /// Earliest true time at which an ok outcome reported the grant: it was
    /// made (in server time, `granted_at`) before then.
    reported_by_true_us: i64,
    /// When `granted_at_us` came from an acquisition's answer (the stamp of
    /// the statement that made the grant): that answer's acknowledgement,
    /// by which the stamp was certainly taken. `None` when a renewal
    /// reported the grant first (it may stamp its own time).
    stamped_by_true_us: Option<i64>,
    released: Option<(i64, u64)>,
    /// The ok release by the grant's owner acknowledged first, in true
    /// time (its invoke, its acknowledgement, its completion event). After
    /// it the grant was over in real time, whatever its stamps mean.
    release_acknowledged: Option<ReleaseAcknowledged>,
    /// The latest acknowledgement (true time) of an ok acquisition or
    /// renewal that reported this grant: one acknowledged after a release
    /// was sent may have been decided after it and made the grant live again.
    reported_live_by_true_us_max: i64,
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
        if let Some((released_at_us, event)) = self.released {
            // A release after the expiry ends nothing: the grant was over.
            if released_at_us < self.expires_at_us_max {
                return (released_at_us, event);
            }
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

/// An ok release of a grant by its owner, in true and server time.
#[derive(Clone, Copy, Debug)]
struct ReleaseAcknowledged {
    invoked_true_us: i64,
    acknowledged_true_us: i64,
    /// Its completion event.
    event: u64,
}

/// A violation before it is stamped: invariant, scope, events, rows, message.
type PendingViolation = (Invariant, String, Vec<u64>, Vec<u64>, String);

type Grants = BTreeMap<String, BTreeMap<u64, Grant>>;

struct Checker<'h> {
    history: &'h History,
    config: &'h CheckConfig,
    ops: BTreeMap<u64, OpRecord<'h>>,
    grants: Grants,
    /// Scopes whose server times contradict real time (`server_clock`):
    /// judged as `statement-start` whatever the file declares.
    clock_contradicted: BTreeSet<String>,
    /// Which acquisitions may have made which grants, once the operations are paired.
    acquisitions: Acquisitions<'h>,
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
        clock_contradicted: BTreeSet::new(),
        acquisitions: Acquisitions::default(),
        report: CheckReport::default(),
    };
    checker.pair_operations();
    checker.acquisitions = checker.collect_acquisitions();
    checker.collect_grants();
    checker.check_server_clock();
    checker.check_grant_intervals();
    checker.check_certain_holds();
    checker.check_guarded_rows();
    checker.check_commits();
    checker.check_lock_writes();
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

/// Per (scope, owner), the earliest invoke of an acquisition whose outcome
/// is not known (any of them may have made any grant of that owner), and per
/// (scope, owner, token) the earliest of one answered with that token. One
/// that failed, or was answered with another token, made it not.
#[derive(Default)]
struct Acquisitions<'h> {
    unknown_invoked_min: BTreeMap<(&'h str, &'h str), i64>,
    returned_invoked_min: BTreeMap<(&'h str, &'h str, u64), i64>,
}

impl Acquisitions<'_> {
    /// The earliest instant (true time) `grant` can have been decided: no
    /// grant is decided before the acquisition that made it was invoked
    /// (`i64::MIN`: no bound, nothing proven).
    fn decided_after_us(&self, scope: &str, grant: &Grant) -> i64 {
        let owner = grant.owner.as_str();
        let unknown = self.unknown_invoked_min.get(&(scope, owner));
        let returned = self.returned_invoked_min.get(&(scope, owner, grant.token));
        unknown
            .into_iter()
            .chain(returned)
            .min()
            .copied()
            .unwrap_or(i64::MIN)
    }
}

/// Why a server-time finding needs real time's proof: its scope's server
/// times contradict real time, or else stamps are statement starts.
fn unproven_because(clock_contradicted: bool) -> &'static str {
    if clock_contradicted {
        "the scope's server times contradict real time"
    } else {
        "stamps are statement starts"
    }
}

impl<'h> Checker<'h> {
    /// How `scope`'s server times are read: as the file declares, unless
    /// they contradict real time.
    fn grant_stamps(&self, scope: &str) -> GrantStamps {
        if self.clock_contradicted.contains(scope) {
            GrantStamps::StatementStart
        } else {
            self.config.grant_stamps
        }
    }

    /// Why a server-time finding in `scope` needs real time's proof.
    fn unproven_because(&self, scope: &str) -> &'static str {
        unproven_because(self.clock_contradicted.contains(scope))
    }

    /// Which acquisitions may have made which grants ([`Acquisitions`]).
    fn collect_acquisitions(&self) -> Acquisitions<'h> {
        let mut acquisitions = Acquisitions::default();
        for record in self.ops.values() {
            let Op::Acquire { scope, owner, .. } = record.op else {
                continue;
            };
            let earliest = match record.completion.map(|(_, outcome)| outcome) {
                Some(Outcome::Fail { .. }) => continue,
                Some(Outcome::Ok {
                    result: OpResult::Lease { token, .. },
                }) => acquisitions
                    .returned_invoked_min
                    .entry((scope.as_str(), owner.as_str(), *token))
                    .or_insert(i64::MAX),
                // Unknown, never completed, or answered in another form.
                _ => acquisitions
                    .unknown_invoked_min
                    .entry((scope.as_str(), owner.as_str()))
                    .or_insert(i64::MAX),
            };
            *earliest = (*earliest).min(record.invoke_true_us);
        }
        acquisitions
    }

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
                            let kind_matches = match outcome {
                                Outcome::Ok { result } => {
                                    result.answers().contains(&record.op.name())
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

    /// I1 and I2 for locks without server times ([`OpResult::Lock`]), in
    /// real time: see `certain_holds`.
    /// Their holders and takeovers count in the stats beside the leases'
    /// so a race of a lock is seen to be real.
    fn check_certain_holds(&mut self) {
        let holds = certain_holds::certain_holds(self.history, &self.ops);
        let (lock_holders, takeovers) = certain_holds::exercised(&holds);
        let lease_holders: BTreeSet<&str> = self
            .grants
            .values()
            .flat_map(|scope_grants| scope_grants.values())
            .map(|grant| grant.owner.as_str())
            .collect();
        self.report.stats.distinct_holders +=
            lock_holders.difference(&lease_holders).count() as u64;
        self.report.stats.takeovers += takeovers;
        for (invariant, scope, events, rows, message) in certain_holds::violations(&holds) {
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
                // Likewise lock renewals; lease renewals are counted with
                // the grants they keep.
                (
                    Op::Renew { .. },
                    Some((
                        _,
                        Outcome::Ok {
                            result: OpResult::Lock { .. },
                        },
                    )),
                ) => stats.renewals += 1,
                (Op::Release { .. }, Some((_, Outcome::Ok { .. }))) => stats.releases += 1,
                (Op::Commit { .. } | Op::Write { .. }, Some((_, Outcome::Ok { .. }))) => {
                    stats.commits += 1;
                }
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
