//! The bench table and its goals: every measured row beside its baselines,
//! then each goal as a line of text and an entry of the document.
//!
//! Goal: one reading of a run's measurements, built section by section
//! (rows, losers, fences, losers against peers), so each goal is stated
//! once. Invariant: a goal is written to the text and to the document by
//! the same call ([`Goals::goal`]), with the same value and verdict.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use leaseproof_history::Document as _;

use crate::document::{
    finite, verdict, BenchDocument, BenchGoal, BenchPlan, BenchRow, TransactionCounts,
};
use crate::measure::{Measurement, Round};
use crate::workload::Workload;

/// The run's measurements by (contenders, workload).
struct Figures<'m> {
    by_key: BTreeMap<(usize, &'static str), &'m Measurement>,
}

impl<'m> Figures<'m> {
    fn new(measurements: &'m [Measurement]) -> Figures<'m> {
        Figures {
            by_key: measurements
                .iter()
                .map(|m| ((m.contenders, m.workload.name()), m))
                .collect(),
        }
    }

    fn throughput(&self, workload: Workload, contenders: usize) -> Option<f64> {
        self.by_key
            .get(&(contenders, workload.name()))
            .map(|m| m.throughput_per_second)
    }

    fn p50(&self, workload: Workload, contenders: usize) -> Option<f64> {
        self.by_key
            .get(&(contenders, workload.name()))
            .map(|m| m.p50.as_secs_f64())
    }

    /// `workload`'s throughput / `baseline`'s, at the same contenders.
    fn throughput_ratio(
        &self,
        workload: Workload,
        baseline: Workload,
        contenders: usize,
    ) -> Option<f64> {
        self.throughput(workload, contenders)
            .zip(self.throughput(baseline, contenders))
            .map(|(value, baseline)| value / baseline)
    }

    /// `workload`'s p50 / `baseline`'s, at the same contenders.
    fn p50_ratio(&self, workload: Workload, baseline: Workload, contenders: usize) -> Option<f64> {
        self.p50(workload, contenders)
            .zip(self.p50(baseline, contenders))
            .map(|(value, baseline)| value / baseline)
    }

    fn rounds(&self, workload: Workload, contenders: usize) -> &[Round] {
        self.by_key
            .get(&(contenders, workload.name()))
            .map_or(&[], |m| m.rounds.as_slice())
    }

    /// `workload`'s `figure` over `baseline`'s at `contenders`, round by
    /// round: each slice against the baseline's slice of the same round,
    /// measured minutes apart at most.
    fn ratio_rounds(
        &self,
        figure: fn(&Round) -> f64,
        workload: Workload,
        baseline: Workload,
        contenders: usize,
    ) -> Vec<f64> {
        self.rounds(workload, contenders)
            .iter()
            .zip(self.rounds(baseline, contenders))
            .map(|(value, baseline)| figure(value) / figure(baseline))
            .collect()
    }
}

/// What a goal's ratio must be.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    /// NaN (a ratio that could not be computed) meets nothing.
    fn meets(self, value: f64) -> bool {
        match self {
            Target::AtLeast(bound) => value >= bound,
            Target::AtMost(bound) => value <= bound,
        }
    }

    fn text(self) -> String {
        match self {
            Target::AtLeast(bound) => format!(">= {bound:.2}"),
            Target::AtMost(bound) => format!("<= {bound:.2}"),
        }
    }
}

/// Each round's worse of two costs (a p50 ratio and a throughput ratio).
fn worse_of(costs: &[f64], others: &[f64]) -> Vec<f64> {
    costs
        .iter()
        .zip(others)
        .map(|(cost, other)| {
            if cost.is_nan() || other.is_nan() {
                f64::NAN
            } else {
                cost.max(*other)
            }
        })
        .collect()
}

/// The goals section as it is written: text lines and the document's goals.
struct Goals {
    out: String,
    goals: Vec<BenchGoal>,
}

impl Goals {
    /// A line that states no goal.
    fn line(&mut self, line: &str) {
        let _ = writeln!(self.out, "{line}");
    }

    /// `line` with the spread of its rounds and its verdict, and the same
    /// goal in the document. Met means met by the whole run *and* by every
    /// round: a goal one round misses is not met.
    fn goal(&mut self, line: &str, name: &str, value: f64, target: Target, rounds: &[f64]) {
        let met = target.meets(value) && rounds.iter().all(|round| target.meets(*round));
        let spread = match (
            rounds.iter().copied().reduce(f64::min),
            rounds.iter().copied().reduce(f64::max),
        ) {
            (Some(min), Some(max)) if rounds.len() > 1 => {
                format!(", rounds {min:.2}-{max:.2}")
            }
            _ => String::new(),
        };
        let _ = writeln!(self.out, "{line}{spread} {}", verdict(met));
        self.goals
            .push(BenchGoal::new(name, value, &target.text(), met).with_rounds(rounds));
    }

    /// A goal that is a yes or no of the whole run (no rounds to spread).
    fn flag(&mut self, line: &str, name: &str, value: f64, target: &str, met: bool) {
        let _ = writeln!(self.out, "{line} {}", verdict(met));
        self.goals.push(BenchGoal::new(name, value, target, met));
    }
}

fn format_duration(duration: Duration) -> String {
    let micros = duration.as_secs_f64() * 1e6;
    if micros >= 10_000.0 {
        format!("{:.1} ms", micros / 1000.0)
    } else {
        format!("{micros:.0} µs")
    }
}

fn ratio(value: f64, baseline: Option<f64>) -> String {
    match baseline {
        Some(baseline) if baseline > 0.0 => format!("{:.2}x", value / baseline),
        _ => "-".to_string(),
    }
}

/// The table as text and the same figures as a document.
pub(crate) fn report(
    plan: &BenchPlan,
    measurements: &[Measurement],
    counts: TransactionCounts,
) -> (String, BenchDocument) {
    let figures = Figures::new(measurements);
    let mut goals = Goals {
        out: rows_table(plan, &figures, measurements, counts),
        goals: Vec::new(),
    };
    goals.line("goals:");
    loser_goals(&figures, counts, &mut goals);
    let fences = [
        (Workload::FencedCommit, ("fenced commit", "fenced commit")),
        (
            Workload::FencedCommitShared,
            ("shared fence (FOR SHARE)", "shared fence"),
        ),
    ];
    for (workload, labels) in fences {
        for &writers in &plan.lifecycle_levels {
            fence_goal(&figures, workload, labels, writers, &mut goals);
        }
    }
    single_statement_goal(&figures, &mut goals);
    for contenders in [8, 1] {
        library_loser_goals(&figures, contenders, &mut goals);
    }
    let rows = measurements
        .iter()
        .map(|m| BenchRow {
            operation: m.workload.name().to_string(),
            contenders: m.contenders,
            operations: m.operations,
            granted: m.granted,
            per_second: m.throughput_per_second,
            p50_us: m.p50.as_secs_f64() * 1e6,
            p99_us: m.p99.as_secs_f64() * 1e6,
            ratio_to_select_one: figures
                .throughput(Workload::SelectOne, m.contenders)
                .and_then(|baseline| finite(m.throughput_per_second / baseline)),
            ratio_to_advisory: figures
                .throughput(Workload::AdvisoryXactLock, m.contenders)
                .and_then(|baseline| finite(m.throughput_per_second / baseline)),
        })
        .collect();
    let document = BenchDocument {
        format: BenchDocument::FORMAT.to_string(),
        version: BenchDocument::VERSION,
        passed: goals.goals.iter().all(|goal| goal.met),
        seconds_per_row: plan.seconds_per_row,
        rows,
        transactions_per_attempt_loser: counts.loser,
        transactions_per_attempt_takeover: counts.takeover,
        goals: goals.goals,
        hand_offs: Vec::new(),
        observed: Vec::new(),
    };
    (goals.out, document)
}

/// The header and one line per measured row, with its ratios and notes.
fn rows_table(
    plan: &BenchPlan,
    figures: &Figures<'_>,
    measurements: &[Measurement],
    counts: TransactionCounts,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "leaseproof bench: {:.2} s per row; ratios are throughput / the baseline's at the same contenders, this run",
        plan.seconds_per_row
    );
    let _ = writeln!(
        out,
        "{:<28} {:>4} {:>11} {:>9} {:>9} {:>9} {:>9}  note",
        "operation", "n", "ops/s", "p50", "p99", "/select1", "/advisory"
    );
    for m in measurements {
        let _ = writeln!(
            out,
            "{:<28} {:>4} {:>11.0} {:>9} {:>9} {:>9} {:>9}  {}",
            m.workload.name(),
            m.contenders,
            m.throughput_per_second,
            format_duration(m.p50),
            format_duration(m.p99),
            ratio(
                m.throughput_per_second,
                figures.throughput(Workload::SelectOne, m.contenders)
            ),
            ratio(
                m.throughput_per_second,
                figures.throughput(Workload::AdvisoryXactLock, m.contenders)
            ),
            row_note(figures, m)
        );
    }
    let _ = writeln!(
        out,
        "{:<28} {:>4} {:>11}  (pg_stat_database; loser {:.2}, takeover workload {:.2})",
        "transactions per attempt",
        8,
        format!("{:.2}", counts.loser.max(counts.takeover)),
        counts.loser,
        counts.takeover
    );
    out
}

/// A row's note: grants of an acquisition, the fence's cost, takeover times.
fn row_note(figures: &Figures<'_>, m: &Measurement) -> String {
    let mut note = String::new();
    if m.workload.is_acquisition() {
        note = format!("granted {}", m.granted);
    }
    if matches!(
        m.workload,
        Workload::FencedCommit | Workload::FencedCommitShared | Workload::FencedCommitInPieces
    ) {
        if let Some(unfenced) = figures.throughput(Workload::UnfencedWrite, m.contenders) {
            note = format!(
                "fence costs {:.2}x unfenced",
                unfenced / m.throughput_per_second
            );
        }
    }
    if let Some(takeover) = m.takeover {
        note = format!(
            "{note}; takeover after expiry p50/p99: server {}/{}, client {}/{}",
            format_duration(takeover.server_p50),
            format_duration(takeover.server_p99),
            format_duration(takeover.client_p50),
            format_duration(takeover.client_p99),
        );
    }
    note
}

/// The acquisition statement's losers against `SELECT 1` and the advisory
/// lock, and its transactions per attempt.
fn loser_goals(figures: &Figures<'_>, counts: TransactionCounts, goals: &mut Goals) {
    let loser = figures.throughput(Workload::AcquireHeld, 8);
    let select_one = figures.throughput(Workload::SelectOne, 8);
    let advisory = figures.throughput(Workload::AdvisoryXactLock, 8);
    if let (Some(loser), Some(select_one), Some(advisory)) = (loser, select_one, advisory) {
        let to_select = loser / select_one;
        let to_advisory = loser / advisory;
        goals.goal(
            &format!("  losing acquisitions, 8-way, / SELECT 1:         {to_select:.2}x  (goal >= 0.80x)"),
            "losing acquisitions, 8-way, / SELECT 1",
            to_select,
            Target::AtLeast(0.80),
            &figures.ratio_rounds(round_throughput, Workload::AcquireHeld, Workload::SelectOne, 8),
        );
        goals.goal(
            &format!("  losing acquisitions, 8-way, / advisory lock:    {to_advisory:.2}x  (goal >= 0.90x)"),
            "losing acquisitions, 8-way, / advisory lock",
            to_advisory,
            Target::AtLeast(0.90),
            &figures.ratio_rounds(round_throughput, Workload::AcquireHeld, Workload::AdvisoryXactLock, 8),
        );
        if let Some(unguarded) = figures.throughput(Workload::AcquireHeldUnguarded, 8) {
            goals.line(&format!(
                "  (the seed's bare upsert, 8-way, / SELECT 1:     {:.2}x)",
                unguarded / select_one
            ));
        }
    }
    let one_transaction = (counts.loser - 1.0).abs() < 0.05 && (counts.takeover - 1.0).abs() < 0.05;
    goals.flag(
        &format!(
            "  one round trip per attempt: {:.2} / {:.2} server transactions per losing / takeover \
             attempt, one statement each ",
            counts.loser, counts.takeover,
        ),
        "server transactions per losing / takeover attempt",
        counts.loser.max(counts.takeover),
        "== 1",
        one_transaction,
    );
    let p50_ratio = |workload: Workload| {
        figures
            .p50_ratio(workload, Workload::SelectOne, 1)
            .unwrap_or(f64::NAN)
    };
    goals.line(&format!(
        "    p50 at 1 contender / SELECT 1: {:.2}x on its own connection (server work, not round \
         trips); through PostgresLeases {:.2}x on a default sqlx pool, {:.2}x with \
         test_before_acquire(false): the default pool pings once per checkout, a second round trip",
        p50_ratio(Workload::AcquireHeld),
        p50_ratio(Workload::AcquireHeldViaLibrary),
        p50_ratio(Workload::AcquireHeldViaLibraryNoPing),
    ));
}

/// A fenced commit (`workload`) against the unfenced write, in p50 and
/// throughput: the default fence (`FOR UPDATE`) and the shared one.
fn fence_goal(
    figures: &Figures<'_>,
    workload: Workload,
    (line, key): (&str, &str),
    writers: usize,
    goals: &mut Goals,
) {
    let p50 = figures.p50_ratio(workload, Workload::UnfencedWrite, writers);
    let throughput = figures.throughput_ratio(Workload::UnfencedWrite, workload, writers);
    let (Some(cost), Some(throughput_cost)) = (p50, throughput) else {
        return;
    };
    goals.goal(
        &format!(
            "  {line}, {writers} writer(s) on one lease: p50 {cost:.2}x, throughput cost \
             {throughput_cost:.2}x the unfenced write  (goal <= 1.30x)"
        ),
        &format!("{key}, {writers} writer(s), p50 and throughput / unfenced"),
        cost.max(throughput_cost),
        Target::AtMost(1.30),
        &worse_of(
            &figures.ratio_rounds(round_p50, workload, Workload::UnfencedWrite, writers),
            &figures.ratio_rounds(round_throughput, Workload::UnfencedWrite, workload, writers),
        ),
    );
}

/// The guarded insert in one statement against the unfenced transaction.
fn single_statement_goal(figures: &Figures<'_>, goals: &mut Goals) {
    let Some(cost) = figures.p50_ratio(
        Workload::GuardedInsertOneStatement,
        Workload::UnfencedWrite,
        1,
    ) else {
        return;
    };
    goals.goal(
        &format!(
            "  single-statement guarded insert, 1 writer: p50 {cost:.2}x the unfenced \
             BEGIN/INSERT/COMMIT  (goal <= 1.00x)"
        ),
        "single-statement guarded insert, 1 writer, p50 / unfenced",
        cost,
        Target::AtMost(1.00),
        &figures.ratio_rounds(
            round_p50,
            Workload::GuardedInsertOneStatement,
            Workload::UnfencedWrite,
            1,
        ),
    );
}

/// The library's loser on a dedicated connection, as the peers run (after
/// its first refusal it sends only the read-only check,
/// `ReadFirst::AfterRefusal`, the default): against the peers' statements,
/// the primary-key read and the same statements sent raw.
fn library_loser_goals(figures: &Figures<'_>, contenders: usize, goals: &mut Goals) {
    let Some(loser) = figures.throughput(Workload::AcquireHeldViaLibraryOnConnection, contenders)
    else {
        return;
    };
    peer_goals(figures, contenders, loser, goals);
    // The library against the same statements sent raw: what its own code
    // and its pool cost.
    if let Some(raw) = figures.throughput(Workload::AcquireHeldReadFirst, contenders) {
        raw_statement_goals(figures, contenders, loser, raw, goals);
    }
    winner_goals(figures, contenders, goals);
    let statement = figures
        .throughput(Workload::AcquireHeld, contenders)
        .unwrap_or(f64::NAN);
    let read = figures
        .throughput(Workload::PeerPkRead, contenders)
        .unwrap_or(f64::NAN);
    for (workload, name) in [
        (Workload::AcquireHeldCandidateUpdateFirst, "update first"),
        (Workload::AcquireHeldCandidateFunction, "plpgsql function"),
    ] {
        let Some(candidate) = figures.throughput(workload, contenders) else {
            continue;
        };
        goals.line(&format!(
            "    candidate acquisition ({name}), {contenders}-way losers: {:.2}x the \
             acquisition statement, {:.2}x the primary-key read (measured, not adopted)",
            candidate / statement,
            candidate / read
        ));
    }
}

/// `rate` against each peer's statement, as `name ratio` pairs.
fn to_peers(figures: &Figures<'_>, rate: f64, contenders: usize) -> String {
    [
        Workload::PeerUpdateWhereExpired,
        Workload::PeerUpsertAlwaysWriting,
        Workload::PeerPkRead,
    ]
    .iter()
    .filter_map(|peer| {
        figures
            .throughput(*peer, contenders)
            .map(|peer_rate| format!("{} {:.2}x", peer.name(), rate / peer_rate))
    })
    .collect::<Vec<_>>()
    .join(", ")
}

/// The library's loser at least as fast as every peer's losing statement,
/// and against the primary-key read.
fn peer_goals(figures: &Figures<'_>, contenders: usize, loser: f64, goals: &mut Goals) {
    let mut beaten = Vec::new();
    let mut fastest_peer: f64 = 0.0;
    for peer in [
        Workload::PeerUpdateWhereExpired,
        Workload::PeerUpsertAlwaysWriting,
    ] {
        if let Some(rate) = figures.throughput(peer, contenders) {
            fastest_peer = fastest_peer.max(rate);
            if rate > loser {
                beaten.push(peer.name());
            }
        }
    }
    goals.line(&format!(
        "  losing acquisition (PostgresLeases::acquire_on, read first after a refusal), \
         {contenders}-way, / peers: {}",
        to_peers(figures, loser, contenders)
    ));
    if let Some(statement) = figures.throughput(Workload::AcquireHeld, contenders) {
        goals.line(&format!(
            "    (the acquisition statement alone, {contenders}-way, / peers: {})",
            to_peers(figures, statement, contenders)
        ));
    }
    let met = beaten.is_empty();
    // The verdict is followed by the peers that beat it: written by hand.
    goals.line(&format!(
        "  losing acquisition, {contenders}-way, at least as fast as every peer statement  {}{}",
        verdict(met),
        if met {
            String::new()
        } else {
            format!(" (slower than {})", beaten.join(", "))
        }
    ));
    goals.goals.push(BenchGoal::new(
        &format!("losing acquisition, {contenders}-way, / fastest peer loser"),
        if fastest_peer > 0.0 {
            loser / fastest_peer
        } else {
            f64::NAN
        },
        ">= 1.00",
        met,
    ));
    if let Some(read) = figures.throughput(Workload::PeerPkRead, contenders) {
        let to_read = loser / read;
        goals.goal(
            &format!(
                "  losing acquisition, {contenders}-way, / primary-key read: {to_read:.2}x  \
                 (goal >= 0.90x)"
            ),
            &format!("losing acquisition, {contenders}-way, / primary-key read"),
            to_read,
            Target::AtLeast(0.90),
            &figures.ratio_rounds(
                round_throughput,
                Workload::AcquireHeldViaLibraryOnConnection,
                Workload::PeerPkRead,
                contenders,
            ),
        );
    }
}

/// The library's losers (pooled and on a dedicated connection) against the
/// same statements sent raw.
fn raw_statement_goals(
    figures: &Figures<'_>,
    contenders: usize,
    loser: f64,
    raw: f64,
    goals: &mut Goals,
) {
    if let Some(library) = figures.throughput(Workload::AcquireHeldViaLibraryNoPing, contenders) {
        let to_raw = library / raw;
        let pool = figures
            .throughput_ratio(Workload::SelectOneViaPool, Workload::SelectOne, contenders)
            .unwrap_or(f64::NAN);
        let no_reuse = figures
            .throughput(Workload::AcquireHeldViaLibraryNoReuse, contenders)
            .map_or(f64::NAN, |no_reuse| no_reuse / raw);
        goals.goal(
            &format!(
                "  PostgresLeases::acquire (pool_options), {contenders}-way losers, / the same \
                 statements raw: {to_raw:.2}x  (goal >= 0.90x)"
            ),
            &format!("PostgresLeases::acquire, {contenders}-way, / raw statements"),
            to_raw,
            Target::AtLeast(0.90),
            &figures.ratio_rounds(
                round_throughput,
                Workload::AcquireHeldViaLibraryNoPing,
                Workload::AcquireHeldReadFirst,
                contenders,
            ),
        );
        goals.line(&format!(
            "    without connection reuse {no_reuse:.2}x; SELECT 1 through the same pool / raw: \
             {pool:.2}x"
        ));
    }
    let to_raw = loser / raw;
    goals.goal(
        &format!(
            "  PostgresLeases::acquire_on (a dedicated connection), {contenders}-way losers, / the \
             same statements raw: {to_raw:.2}x  (goal >= 0.90x)"
        ),
        &format!("PostgresLeases::acquire_on, {contenders}-way, / raw statements"),
        to_raw,
        Target::AtLeast(0.90),
        &figures.ratio_rounds(
            round_throughput,
            Workload::AcquireHeldViaLibraryOnConnection,
            Workload::AcquireHeldReadFirst,
            contenders,
        ),
    );
}

/// Winners through the library on their own scopes against the one
/// statement, and reading first every time.
fn winner_goals(figures: &Figures<'_>, contenders: usize, goals: &mut Goals) {
    if let Some(to_statement) = figures.throughput_ratio(
        Workload::AcquireUncontendedViaLibrary,
        Workload::AcquireUncontended,
        contenders,
    ) {
        goals.goal(
            &format!(
                "  winners through the library (acquire_on, own scopes), {contenders}-way, / the \
                 one statement raw: {to_statement:.2}x  (goal >= 0.90x: one round trip)"
            ),
            &format!("winning acquire_on, {contenders}-way, / raw statement"),
            to_statement,
            Target::AtLeast(0.90),
            &figures.ratio_rounds(
                round_throughput,
                Workload::AcquireUncontendedViaLibrary,
                Workload::AcquireUncontended,
                contenders,
            ),
        );
    }
    if let Some(always) = figures.throughput_ratio(
        Workload::AcquireUncontendedReadFirst,
        Workload::AcquireUncontended,
        contenders,
    ) {
        goals.line(&format!(
            "    reading first every time (ReadFirst::Always), {contenders}-way winners on \
             their own scopes: {always:.2}x the one statement (two round trips instead of one)"
        ));
    }
}

/// Operations a second in a round: a throughput ratio's figure.
fn round_throughput(round: &Round) -> f64 {
    round.throughput_per_second
}

/// The median latency of a round in seconds: a latency ratio's figure.
fn round_p50(round: &Round) -> f64 {
    round.p50.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measurement whose rounds had these throughputs.
    fn measured(workload: Workload, contenders: usize, rounds: &[f64]) -> Measurement {
        Measurement {
            workload,
            contenders,
            operations: 0,
            granted: 0,
            elapsed: Duration::from_secs(1),
            throughput_per_second: rounds.iter().sum::<f64>() / rounds.len() as f64,
            p50: Duration::from_micros(100),
            p99: Duration::from_micros(200),
            takeover: None,
            latencies_ns: Vec::new(),
            rounds: rounds
                .iter()
                .map(|throughput_per_second| Round {
                    throughput_per_second: *throughput_per_second,
                    p50: Duration::from_micros(100),
                })
                .collect(),
        }
    }

    fn loser_goals_of(loser_rounds: &[f64]) -> Goals {
        let measurements = [
            measured(Workload::SelectOne, 8, &[100.0, 100.0, 100.0]),
            measured(Workload::AdvisoryXactLock, 8, &[100.0, 100.0, 100.0]),
            measured(Workload::AcquireHeld, 8, loser_rounds),
        ];
        let mut goals = Goals {
            out: String::new(),
            goals: Vec::new(),
        };
        let counts = TransactionCounts {
            loser: 1.0,
            takeover: 1.0,
        };
        loser_goals(&Figures::new(&measurements), counts, &mut goals);
        goals
    }

    #[test]
    fn a_goal_met_by_the_whole_run_but_missed_in_one_round_is_not_met() {
        let goals = loser_goals_of(&[95.0, 95.0, 70.0]);
        let to_select = &goals.goals[0];
        assert_eq!(to_select.name, "losing acquisitions, 8-way, / SELECT 1");
        assert!(
            (to_select.value.unwrap() - 0.8667).abs() < 1e-3,
            "the whole run meets 0.80"
        );
        assert_eq!(to_select.rounds, vec![0.95, 0.95, 0.70]);
        assert!(!to_select.met);
        assert!(
            goals
                .out
                .contains("(goal >= 0.80x), rounds 0.70-0.95 NOT met"),
            "{}",
            goals.out
        );
    }

    #[test]
    fn a_goal_met_in_every_round_is_met_and_whole_run_flags_have_no_rounds() {
        let goals = loser_goals_of(&[95.0, 91.0, 99.0]);
        let to_advisory = &goals.goals[1];
        assert_eq!(to_advisory.goal, ">= 0.90");
        assert!(to_advisory.met);
        assert!(goals.out.contains("rounds 0.91-0.99 met"), "{}", goals.out);
        let transactions = &goals.goals[2];
        assert!(transactions.rounds.is_empty());
        assert!(transactions.met);
    }

    #[test]
    fn a_round_that_could_not_be_computed_meets_nothing() {
        assert!(!Target::AtLeast(0.8).meets(f64::NAN));
        assert!(!Target::AtMost(1.3).meets(f64::NAN));
        assert!(Target::AtMost(1.3).meets(1.3));
        assert!(Target::AtLeast(0.8).meets(0.8));
        assert_eq!(worse_of(&[1.0, f64::NAN], &[1.2, 0.5])[0], 1.2);
        assert!(worse_of(&[1.0, f64::NAN], &[1.2, 0.5])[1].is_nan());
    }

    #[test]
    fn a_version_2_document_is_still_read_and_a_version_4_refused() {
        use leaseproof_history::Document as _;
        let goals = loser_goals_of(&[95.0, 91.0, 99.0]);
        let document = BenchDocument {
            format: BenchDocument::FORMAT.to_string(),
            version: BenchDocument::VERSION,
            passed: false,
            seconds_per_row: 0.5,
            rows: Vec::new(),
            transactions_per_attempt_loser: 1.0,
            transactions_per_attempt_takeover: 1.0,
            goals: goals.goals,
            hand_offs: Vec::new(),
            observed: Vec::new(),
        };
        let text = document.to_json();
        assert!(text.contains("\"rounds\""));
        assert_eq!(BenchDocument::from_json(&text).unwrap(), document);
        // Version 2: no goal rounds.
        let mut old = document.clone();
        for goal in &mut old.goals {
            goal.rounds.clear();
        }
        let old_text = old.to_json().replace("\"version\": 3", "\"version\": 2");
        assert!(!old_text.contains("\"rounds\""));
        let read = BenchDocument::from_json(&old_text).unwrap();
        assert_eq!(read.version, 2);
        assert!(read.goals.iter().all(|goal| goal.rounds.is_empty()));
        let future = text.replace("\"version\": 3", "\"version\": 4");
        let error = BenchDocument::from_json(&future).unwrap_err();
        assert!(error.contains("reads versions 2 to 3"), "{error}");
    }
}
