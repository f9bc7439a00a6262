//! A benchmark run: every workload beside its baselines, in one table, and
//! the document `bench --json` writes.
//!
//! Goal: one command that answers "what does acquisition under contention
//! cost here?" as ratios to `SELECT 1` (the round-trip limit) and to
//! `pg_try_advisory_xact_lock`, both measured in the same run at the same
//! contention, and says where the project's goals stand.
//! Method: rows are measured grouped by contention level, baselines first, so
//! a row and its baselines are taken close together in time; the transaction
//! count per attempt comes from `pg_stat_database`.
//! Invariant: the goals are reported as measured — "met" or "NOT met" — and a
//! run with a wrong outcome (a loser granted, a fence lost) fails the command.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use leaseproof_history::Document as _;

use crate::measure::{measure, transactions_per_operation, Measurement};
use crate::report_waiting::{BenchHandOff, BenchObserved};
use crate::workload::Workload;
use crate::BenchError;
use crate::{hand_offs, overhead, HandOffs, Overhead};

/// What one run measures.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    seconds_per_row: f64,
    /// Slices each row is measured in, interleaved with the other rows'.
    rounds: usize,
    contention_levels: Vec<usize>,
    lifecycle_levels: Vec<usize>,
    /// Waiters on one scope, per hand-off run.
    waiting_levels: Vec<usize>,
    /// Contenders of the observed and quiet loops.
    observed_levels: Vec<usize>,
}

impl BenchPlan {
    /// The plan of a run: `quick` (0.5 s per row in 3 slices, 1 and 8
    /// contenders) or full (3 s in 5 slices, 1, 2, 8 and 32), each overridden
    /// by `seconds` per row and `rounds` (slices) when given.
    pub fn new(quick: bool, seconds: Option<f64>, rounds: Option<u32>) -> BenchPlan {
        let seconds_per_row = seconds.unwrap_or(if quick { 0.5 } else { 3.0 }).max(0.05);
        let contention_levels = if quick { vec![1, 8] } else { vec![1, 2, 8, 32] };
        let rounds = rounds.unwrap_or(if quick { 3 } else { 5 });
        BenchPlan {
            seconds_per_row,
            rounds: usize::try_from(rounds).expect("rounds fit in usize"),
            contention_levels,
            lifecycle_levels: vec![1, 4, 8],
            waiting_levels: if quick { vec![2, 8] } else { vec![2, 4, 8, 16] },
            observed_levels: vec![1, 8],
        }
    }

    /// (workload, contenders) in measuring order, baselines first per level.
    fn rows(&self) -> Vec<(Workload, usize)> {
        let mut rows = Vec::new();
        for &contenders in &self.contention_levels {
            for workload in [
                Workload::SelectOne,
                Workload::AdvisoryXactLock,
                Workload::SelectOneViaPool,
                Workload::PeerPkRead,
                Workload::PeerUpdateWhereExpired,
                Workload::PeerUpsertAlwaysWriting,
                Workload::AcquireHeld,
                Workload::AcquireHeldUnguarded,
                Workload::AcquireHeldViaLibrary,
                Workload::AcquireHeldViaLibraryNoPing,
                Workload::AcquireHeldViaLibraryNoReuse,
                Workload::AcquireHeldViaLibraryOnConnection,
                Workload::AcquireHeldCandidateUpdateFirst,
                Workload::AcquireHeldCandidateFunction,
                Workload::AcquireHeldReadFirst,
                Workload::AcquireTakeover,
                Workload::AcquireUncontended,
                Workload::AcquireUncontendedReadFirst,
                Workload::AcquireUncontendedViaLibrary,
            ] {
                rows.push((workload, contenders));
            }
        }
        for &writers in &self.lifecycle_levels {
            if !self.contention_levels.contains(&writers) {
                // The table's ratio columns need the baselines at this level.
                rows.push((Workload::SelectOne, writers));
                rows.push((Workload::AdvisoryXactLock, writers));
            }
            for workload in [
                Workload::Renew,
                Workload::ReleaseReacquire,
                Workload::UnfencedWrite,
                Workload::FencedCommit,
                Workload::FencedCommitShared,
                Workload::GuardedInsertOneStatement,
            ] {
                rows.push((workload, writers));
            }
        }
        rows.push((Workload::TakeoverLatency, 8));
        rows
    }
}

/// The transaction counts per attempt, for the goals.
#[derive(Debug, Clone, Copy)]
struct TransactionCounts {
    loser: f64,
    takeover: f64,
}

/// Measures `plan` on the database at `url`: the table's text and the
/// document `--json` writes. `progress` hears a line per stage (where the
/// run is, for a long one).
pub async fn run_plan(
    url: &str,
    plan: &BenchPlan,
    progress: &(dyn Fn(String) + Sync),
) -> Result<(String, BenchDocument), BenchError> {
    let rows = plan.rows();
    progress(format!(
        "leaseproof bench: {} rows x {:.2} s in {} interleaved slices, contenders {:?}",
        rows.len(),
        plan.seconds_per_row,
        plan.rounds,
        plan.contention_levels
    ));
    // Rows measured one after another see whatever the machine did meanwhile
    // (another process, the CPU's clock); in slices taken in turn, forward
    // then backward, a drift lands on every row alike. The takeover-latency
    // row pairs grants of one scope, so it is measured in one piece.
    let slice = Duration::from_secs_f64(plan.seconds_per_row / plan.rounds as f64);
    let mut slices: Vec<Vec<Measurement>> = vec![Vec::new(); rows.len()];
    for round in 0..plan.rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..rows.len()).collect()
        } else {
            (0..rows.len()).rev().collect()
        };
        for index in order {
            let (workload, contenders) = rows[index];
            if workload == Workload::TakeoverLatency && round > 0 {
                continue;
            }
            let duration = if workload == Workload::TakeoverLatency {
                Duration::from_secs_f64(plan.seconds_per_row)
            } else {
                slice
            };
            slices[index].push(measure(url, workload, contenders, duration).await?);
        }
        progress(format!("  round {} of {} measured", round + 1, plan.rounds));
    }
    let mut measurements = Vec::with_capacity(rows.len());
    for ((workload, contenders), parts) in rows.iter().zip(slices) {
        let measurement = Measurement::combined(parts);
        progress(format!(
            "  {:<28} x{:<3} {:>10.0}/s",
            workload.name(),
            contenders,
            measurement.throughput_per_second
        ));
        measurements.push(measurement);
    }
    let contenders = 8;
    let counts = TransactionCounts {
        loser: transactions_per_operation(url, Workload::AcquireHeld, contenders, 100, 600).await?,
        takeover: transactions_per_operation(url, Workload::AcquireTakeover, contenders, 100, 600)
            .await?,
    };
    let (mut text, mut document) = report(plan, &measurements, counts);
    let waiting = measure_waiting(url, plan, progress).await?;
    let select_one_p50 = measurements
        .iter()
        .find(|m| m.workload == Workload::SelectOne && m.contenders == 1)
        .map(|m| m.p50);
    let section = crate::report_waiting::section(&waiting.0, &waiting.1, select_one_p50);
    text.push_str(&section.text);
    document.goals.extend(section.goals);
    document.passed = document.goals.iter().all(|goal| goal.met);
    document.hand_offs = section.hand_offs;
    document.observed = section.observed;
    Ok((text, document))
}

/// Hand-offs between waiters at each waiter count, then the observed and
/// quiet loops: after the table, on the same server.
async fn measure_waiting(
    url: &str,
    plan: &BenchPlan,
    progress: &(dyn Fn(String) + Sync),
) -> Result<(Vec<HandOffs>, Vec<Overhead>), BenchError> {
    // Long enough for a few hundred hand-offs, so the p99 is a hand-off's.
    let duration = Duration::from_secs_f64(plan.seconds_per_row.max(1.0));
    let (hold, think) = (Duration::from_millis(5), Duration::from_millis(5));
    let mut runs = Vec::new();
    for &waiters in &plan.waiting_levels {
        let run = hand_offs(url, waiters, duration, hold, think).await?;
        progress(format!(
            "  hand-offs x{waiters:<3} {:>6} grants, p50 {:?}",
            run.grants, run.p50
        ));
        runs.push(run);
    }
    let slice = Duration::from_secs_f64(plan.seconds_per_row / plan.rounds as f64);
    let mut overheads = Vec::new();
    for &contenders in &plan.observed_levels {
        overheads.push(overhead(url, contenders, slice, plan.rounds).await?);
    }
    Ok((runs, overheads))
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

/// How the table marks a missed goal (`--check` counts the document's).
const NOT_MET: &str = "NOT met";

pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        NOT_MET
    }
}

/// A finite ratio, `None` for NaN or infinity (JSON has no NaN).
pub(crate) fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

/// The table as text and the same figures as a document.
fn report(
    plan: &BenchPlan,
    measurements: &[Measurement],
    counts: TransactionCounts,
) -> (String, BenchDocument) {
    let mut goals: Vec<BenchGoal> = Vec::new();
    let by_key: BTreeMap<(usize, &'static str), &Measurement> = measurements
        .iter()
        .map(|m| ((m.contenders, m.workload.name()), m))
        .collect();
    let throughput = |workload: Workload, contenders: usize| {
        by_key
            .get(&(contenders, workload.name()))
            .map(|m| m.throughput_per_second)
    };
    let p50 = |workload: Workload, contenders: usize| {
        by_key
            .get(&(contenders, workload.name()))
            .map(|m| m.p50.as_secs_f64())
    };

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
        let mut note = String::new();
        if m.workload.is_acquisition() {
            note = format!("granted {}", m.granted);
        }
        if m.workload == Workload::FencedCommit {
            if let Some(unfenced) = throughput(Workload::UnfencedWrite, m.contenders) {
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
                throughput(Workload::SelectOne, m.contenders)
            ),
            ratio(
                m.throughput_per_second,
                throughput(Workload::AdvisoryXactLock, m.contenders)
            ),
            note
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

    let _ = writeln!(out, "goals:");
    let loser = throughput(Workload::AcquireHeld, 8);
    let select_one = throughput(Workload::SelectOne, 8);
    let advisory = throughput(Workload::AdvisoryXactLock, 8);
    if let (Some(loser), Some(select_one), Some(advisory)) = (loser, select_one, advisory) {
        let to_select = loser / select_one;
        let to_advisory = loser / advisory;
        let _ = writeln!(
            out,
            "  losing acquisitions, 8-way, / SELECT 1:         {to_select:.2}x  (goal >= 0.80x) {}",
            verdict(to_select >= 0.80)
        );
        goals.push(BenchGoal::new(
            "losing acquisitions, 8-way, / SELECT 1",
            to_select,
            ">= 0.80",
            to_select >= 0.80,
        ));
        let _ = writeln!(
            out,
            "  losing acquisitions, 8-way, / advisory lock:    {to_advisory:.2}x  (goal >= 0.90x) {}",
            verdict(to_advisory >= 0.90)
        );
        goals.push(BenchGoal::new(
            "losing acquisitions, 8-way, / advisory lock",
            to_advisory,
            ">= 0.90",
            to_advisory >= 0.90,
        ));
        if let Some(unguarded) = throughput(Workload::AcquireHeldUnguarded, 8) {
            let _ = writeln!(
                out,
                "  (the seed's bare upsert, 8-way, / SELECT 1:     {:.2}x)",
                unguarded / select_one
            );
        }
    }
    let one_transaction = (counts.loser - 1.0).abs() < 0.05 && (counts.takeover - 1.0).abs() < 0.05;
    let p50_ratio = |workload: Workload| match (p50(workload, 1), p50(Workload::SelectOne, 1)) {
        (Some(value), Some(select_one)) => value / select_one,
        _ => f64::NAN,
    };
    let _ = writeln!(
        out,
        "  one round trip per attempt: {:.2} / {:.2} server transactions per losing / takeover \
         attempt, one statement each  {}",
        counts.loser,
        counts.takeover,
        verdict(one_transaction)
    );
    goals.push(BenchGoal::new(
        "server transactions per losing / takeover attempt",
        counts.loser.max(counts.takeover),
        "== 1",
        one_transaction,
    ));
    let _ = writeln!(
        out,
        "    p50 at 1 contender / SELECT 1: {:.2}x on its own connection (server work, not round \
         trips); through PostgresLeases {:.2}x on a default sqlx pool, {:.2}x with \
         test_before_acquire(false): the default pool pings once per checkout, a second round trip",
        p50_ratio(Workload::AcquireHeld),
        p50_ratio(Workload::AcquireHeldViaLibrary),
        p50_ratio(Workload::AcquireHeldViaLibraryNoPing),
    );
    for writers in &plan.lifecycle_levels {
        if let (Some(fenced), Some(unfenced)) = (
            p50(Workload::FencedCommit, *writers),
            p50(Workload::UnfencedWrite, *writers),
        ) {
            let cost = fenced / unfenced;
            let throughput_cost = throughput(Workload::UnfencedWrite, *writers)
                .zip(throughput(Workload::FencedCommit, *writers))
                .map_or(f64::NAN, |(unfenced, fenced)| unfenced / fenced);
            let _ = writeln!(
                out,
                "  fenced commit, {writers} writer(s) on one lease: p50 {cost:.2}x, throughput cost \
                 {throughput_cost:.2}x the unfenced write  (goal <= 1.30x) {}",
                verdict(cost <= 1.30 && throughput_cost <= 1.30)
            );
            goals.push(BenchGoal::new(
                &format!("fenced commit, {writers} writer(s), p50 and throughput / unfenced"),
                cost.max(throughput_cost),
                "<= 1.30",
                cost <= 1.30 && throughput_cost <= 1.30,
            ));
        }
    }
    for writers in &plan.lifecycle_levels {
        let shared = p50(Workload::FencedCommitShared, *writers)
            .zip(p50(Workload::UnfencedWrite, *writers))
            .map(|(shared, unfenced)| shared / unfenced);
        let shared_throughput = throughput(Workload::UnfencedWrite, *writers)
            .zip(throughput(Workload::FencedCommitShared, *writers))
            .map(|(unfenced, shared)| unfenced / shared);
        if let (Some(cost), Some(throughput_cost)) = (shared, shared_throughput) {
            let met = cost <= 1.30 && throughput_cost <= 1.30;
            let _ = writeln!(
                out,
                "  shared fence (FOR SHARE), {writers} writer(s) on one lease: p50 {cost:.2}x, \
                 throughput cost {throughput_cost:.2}x the unfenced write  (goal <= 1.30x) {}",
                verdict(met)
            );
            goals.push(BenchGoal::new(
                &format!("shared fence, {writers} writer(s), p50 and throughput / unfenced"),
                cost.max(throughput_cost),
                "<= 1.30",
                met,
            ));
        }
    }
    if let (Some(single), Some(unfenced)) = (
        p50(Workload::GuardedInsertOneStatement, 1),
        p50(Workload::UnfencedWrite, 1),
    ) {
        let cost = single / unfenced;
        let _ = writeln!(
            out,
            "  single-statement guarded insert, 1 writer: p50 {cost:.2}x the unfenced \
             BEGIN/INSERT/COMMIT  (goal <= 1.00x) {}",
            verdict(cost <= 1.00)
        );
        goals.push(BenchGoal::new(
            "single-statement guarded insert, 1 writer, p50 / unfenced",
            cost,
            "<= 1.00",
            cost <= 1.00,
        ));
    }
    let peers = [
        Workload::PeerUpdateWhereExpired,
        Workload::PeerUpsertAlwaysWriting,
        Workload::PeerPkRead,
    ];
    let to_peers = |rate: f64, contenders: usize| {
        peers
            .iter()
            .filter_map(|peer| {
                throughput(*peer, contenders)
                    .map(|peer_rate| format!("{} {:.2}x", peer.name(), rate / peer_rate))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    for contenders in [8, 1] {
        // The library's loser on a dedicated connection, as the peers run:
        // after its first refusal it sends only the read-only check
        // (`ReadFirst::AfterRefusal`, the default).
        let Some(loser) = throughput(Workload::AcquireHeldViaLibraryOnConnection, contenders)
        else {
            continue;
        };
        let mut beaten = Vec::new();
        let mut fastest_peer: f64 = 0.0;
        for peer in [
            Workload::PeerUpdateWhereExpired,
            Workload::PeerUpsertAlwaysWriting,
        ] {
            if let Some(rate) = throughput(peer, contenders) {
                fastest_peer = fastest_peer.max(rate);
                if rate > loser {
                    beaten.push(peer.name());
                }
            }
        }
        let _ = writeln!(
            out,
            "  losing acquisition (PostgresLeases::acquire_on, read first after a refusal), \
             {contenders}-way, / peers: {}",
            to_peers(loser, contenders)
        );
        if let Some(statement) = throughput(Workload::AcquireHeld, contenders) {
            let _ = writeln!(
                out,
                "    (the acquisition statement alone, {contenders}-way, / peers: {})",
                to_peers(statement, contenders)
            );
        }
        let met = beaten.is_empty();
        let _ = writeln!(
            out,
            "  losing acquisition, {contenders}-way, at least as fast as every peer statement  {}{}",
            verdict(met),
            if met { String::new() } else { format!(" (slower than {})", beaten.join(", ")) }
        );
        goals.push(BenchGoal::new(
            &format!("losing acquisition, {contenders}-way, / fastest peer loser"),
            if fastest_peer > 0.0 {
                loser / fastest_peer
            } else {
                f64::NAN
            },
            ">= 1.00",
            met,
        ));
        if let Some(read) = throughput(Workload::PeerPkRead, contenders) {
            let to_read = loser / read;
            let _ = writeln!(
                out,
                "  losing acquisition, {contenders}-way, / primary-key read: {to_read:.2}x  \
                 (goal >= 0.90x) {}",
                verdict(to_read >= 0.90)
            );
            goals.push(BenchGoal::new(
                &format!("losing acquisition, {contenders}-way, / primary-key read"),
                to_read,
                ">= 0.90",
                to_read >= 0.90,
            ));
        }
        // The library against the same statements sent raw: what its own
        // code and its pool cost.
        let Some(raw) = throughput(Workload::AcquireHeldReadFirst, contenders) else {
            continue;
        };
        if let Some(library) = throughput(Workload::AcquireHeldViaLibraryNoPing, contenders) {
            let to_raw = library / raw;
            let pool = throughput(Workload::SelectOneViaPool, contenders)
                .zip(throughput(Workload::SelectOne, contenders))
                .map_or(f64::NAN, |(pooled, raw)| pooled / raw);
            let no_reuse = throughput(Workload::AcquireHeldViaLibraryNoReuse, contenders)
                .map_or(f64::NAN, |no_reuse| no_reuse / raw);
            let _ = writeln!(
                out,
                "  PostgresLeases::acquire (pool_options), {contenders}-way losers, / the same \
                 statements raw: {to_raw:.2}x  (goal >= 0.90x) {}; without connection reuse \
                 {no_reuse:.2}x; SELECT 1 through the same pool / raw: {pool:.2}x",
                verdict(to_raw >= 0.90)
            );
            goals.push(BenchGoal::new(
                &format!("PostgresLeases::acquire, {contenders}-way, / raw statements"),
                to_raw,
                ">= 0.90",
                to_raw >= 0.90,
            ));
        }
        let to_raw = loser / raw;
        let _ = writeln!(
            out,
            "  PostgresLeases::acquire_on (a dedicated connection), {contenders}-way losers, / the \
             same statements raw: {to_raw:.2}x  (goal >= 0.90x) {}",
            verdict(to_raw >= 0.90)
        );
        goals.push(BenchGoal::new(
            &format!("PostgresLeases::acquire_on, {contenders}-way, / raw statements"),
            to_raw,
            ">= 0.90",
            to_raw >= 0.90,
        ));
        if let Some((winner, statement)) =
            throughput(Workload::AcquireUncontendedViaLibrary, contenders)
                .zip(throughput(Workload::AcquireUncontended, contenders))
        {
            let to_statement = winner / statement;
            let _ = writeln!(
                out,
                "  winners through the library (acquire_on, own scopes), {contenders}-way, / the \
                 one statement raw: {to_statement:.2}x  (goal >= 0.90x: one round trip) {}",
                verdict(to_statement >= 0.90)
            );
            goals.push(BenchGoal::new(
                &format!("winning acquire_on, {contenders}-way, / raw statement"),
                to_statement,
                ">= 0.90",
                to_statement >= 0.90,
            ));
        }
        if let Some(always) = throughput(Workload::AcquireUncontendedReadFirst, contenders)
            .zip(throughput(Workload::AcquireUncontended, contenders))
            .map(|(read_first, statement)| read_first / statement)
        {
            let _ = writeln!(
                out,
                "    reading first every time (ReadFirst::Always), {contenders}-way winners on \
                 their own scopes: {always:.2}x the one statement (two round trips instead of one)"
            );
        }
        let statement = throughput(Workload::AcquireHeld, contenders).unwrap_or(f64::NAN);
        let read = throughput(Workload::PeerPkRead, contenders).unwrap_or(f64::NAN);
        for (workload, name) in [
            (Workload::AcquireHeldCandidateUpdateFirst, "update first"),
            (Workload::AcquireHeldCandidateFunction, "plpgsql function"),
        ] {
            let Some(candidate) = throughput(workload, contenders) else {
                continue;
            };
            let _ = writeln!(
                out,
                "    candidate acquisition ({name}), {contenders}-way losers: {:.2}x the \
                 acquisition statement, {:.2}x the primary-key read (measured, not adopted)",
                candidate / statement,
                candidate / read
            );
        }
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
            ratio_to_select_one: throughput(Workload::SelectOne, m.contenders)
                .and_then(|baseline| finite(m.throughput_per_second / baseline)),
            ratio_to_advisory: throughput(Workload::AdvisoryXactLock, m.contenders)
                .and_then(|baseline| finite(m.throughput_per_second / baseline)),
        })
        .collect();
    let document = BenchDocument {
        format: BenchDocument::FORMAT.to_string(),
        version: BenchDocument::VERSION,
        passed: goals.iter().all(|goal| goal.met),
        seconds_per_row: plan.seconds_per_row,
        rows,
        transactions_per_attempt_loser: counts.loser,
        transactions_per_attempt_takeover: counts.takeover,
        goals,
        hand_offs: Vec::new(),
        observed: Vec::new(),
    };
    (out, document)
}

/// `bench --json`: every row and goal of one run (docs/json.md). `passed`
/// says whether every goal was met, as `--check` would judge.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchDocument {
    /// Always `leaseproof-bench`.
    pub format: String,
    /// Always 2 (1 had no `hand_offs` and `observed`).
    pub version: u32,
    /// Every goal met.
    pub passed: bool,
    /// Seconds each row was measured for.
    pub seconds_per_row: f64,
    /// Every row, in measuring order.
    pub rows: Vec<BenchRow>,
    /// Server transactions per losing attempt (`pg_stat_database`, 8-way).
    pub transactions_per_attempt_loser: f64,
    /// Server transactions per takeover attempt (8-way).
    pub transactions_per_attempt_takeover: f64,
    /// Each goal with its measured value.
    pub goals: Vec<BenchGoal>,
    /// Waiters on one scope: hand-off latency, writes, fairness.
    pub hand_offs: Vec<BenchHandOff>,
    /// The acquire + release loop with and without a subscriber and recorder.
    pub observed: Vec<BenchObserved>,
}

/// One measured row.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchRow {
    /// The workload's name (`select 1`, `acquire held`, …).
    pub operation: String,
    /// Concurrent contenders.
    pub contenders: usize,
    /// Operations completed.
    pub operations: u64,
    /// Operations that were granted a lease.
    pub granted: u64,
    /// Operations per second, all contenders together.
    pub per_second: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th-percentile latency, µs.
    pub p99_us: f64,
    /// Throughput / `SELECT 1`'s at the same contenders, this run.
    pub ratio_to_select_one: Option<f64>,
    /// Throughput / the advisory lock's at the same contenders, this run.
    pub ratio_to_advisory: Option<f64>,
}

/// One goal and where it stands.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchGoal {
    /// What is measured.
    pub name: String,
    /// The measured value (a ratio or a count); `None` when it could not be computed.
    pub value: Option<f64>,
    /// The goal, e.g. `>= 0.80`.
    pub goal: String,
    /// Whether the value meets it.
    pub met: bool,
}

impl BenchGoal {
    pub(crate) fn new(name: &str, value: f64, goal: &str, met: bool) -> BenchGoal {
        BenchGoal {
            name: name.to_string(),
            value: finite(value),
            goal: goal.to_string(),
            met,
        }
    }
}

impl leaseproof_history::Document for BenchDocument {
    const FORMAT: &'static str = "leaseproof-bench";
    const VERSION: u32 = 2;
}
