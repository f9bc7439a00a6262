//! What a run of lock clients reports: each worker's tally, what the
//! strikes did, the checker's verdict, and whether the run proved anything.

use leaseproof_history::{Annotation, CheckReport, History};

use super::effects::ProcessEffects;
use super::net::ProxyEffects;
use super::plan::FaultPlan;

/// What one worker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerTally {
    /// Ok acquisitions.
    pub grants: u64,
    /// Acquisitions refused as held.
    pub refusals: u64,
    /// Writes answered ok.
    pub writes: u64,
    /// Writes refused (stale or error).
    pub writes_refused: u64,
    /// Requests without a definite answer.
    pub unknowns: u64,
    /// Lost notices received.
    pub lost_notices: u64,
    /// Processes started (1 + restarts).
    pub incarnations: u64,
    /// The longest a process took from its start to its hello, ms.
    pub start_up_ms_max: u64,
    /// Processes whose hello came only after the run's duration was over.
    pub greeted_after_end: u64,
}

impl WorkerTally {
    pub(super) fn absorb(&mut self, other: &WorkerTally) {
        self.grants += other.grants;
        self.refusals += other.refusals;
        self.writes += other.writes;
        self.writes_refused += other.writes_refused;
        self.unknowns += other.unknowns;
        self.lost_notices += other.lost_notices;
        self.incarnations += other.incarnations;
        self.start_up_ms_max = self.start_up_ms_max.max(other.start_up_ms_max);
        self.greeted_after_end += other.greeted_after_end;
    }
}

/// The judged run.
#[derive(Debug)]
pub struct ClientRunReport {
    /// The design's name from its hello.
    pub design: String,
    /// The plan that struck.
    pub plan: FaultPlan,
    /// What struck whom (holder-first strikes name whom they found).
    pub strikes: Vec<String>,
    /// Strikes that could not act (no Redis, no process at that moment).
    pub strikes_skipped: Vec<String>,
    /// Totals over the workers.
    pub tally: WorkerTally,
    /// Distinct incarnations that were granted the lock.
    pub distinct_winners: usize,
    /// What the proxies between the clients and their stores did: replies
    /// dropped, traffic a partition held back, chunks delayed, connections
    /// reset (a strike that found nothing to act on counts nothing).
    pub proxy_effects: ProxyEffects,
    /// What the process strikes did, seen from outside: processes seen
    /// stopped and gone, backends terminated, Redis processes replaced,
    /// clients running on libfaketime.
    pub process_effects: ProcessEffects,
    /// Clients that exited by themselves while a request waited on them —
    /// a crash of the client's own, not a strike: who, the status, the
    /// end of its stderr.
    pub own_exits: Vec<String>,
    /// Requests a client left unanswered past the run's patience (4 × TTL
    /// plus 5 s, beyond every pause and partition): a hang of the client's
    /// own, recorded unknown like a lost reply, the process replaced.
    pub unanswered: Vec<String>,
    /// The recorded history, rows included.
    pub history: History,
    /// The checker's verdict.
    pub report: CheckReport,
    /// When every client's first process had greeted, on the run's clock
    /// (ms): the held start, from which the plan's times and the duration count.
    pub started_after_ms: u64,
    /// The strikes that acted, each where it landed on the history's clock
    /// and on its victim's lanes: the timeline draws them beside the
    /// evidence (the history file does not carry them).
    pub marks: Vec<Annotation>,
}

impl ClientRunReport {
    /// Why the run proved little: no contention, no writes, or a plan whose
    /// every strike found nothing to act on.
    pub fn vacuity(&self) -> Option<String> {
        let reason = if self.distinct_winners < 2 {
            format!(
                "vacuous: {} distinct winner(s), need 2",
                self.distinct_winners
            )
        } else if self.tally.writes == 0 {
            "vacuous: no write was answered ok".to_string()
        } else if self.strikes.is_empty() && !self.plan.strikes.is_empty() {
            format!(
                "vacuous: none of the plan's {} strike(s) acted (first: {})",
                self.plan.strikes.len(),
                self.strikes_skipped
                    .first()
                    .map_or("no reason given", String::as_str)
            )
        } else {
            return None;
        };
        // The duration counts from the held start, when every first process
        // had greeted; a process restarted after a strike starts up inside
        // it, and a slow one may have had little or no time to contend.
        let start_up = match (self.tally.greeted_after_end, self.own_exits.len()) {
            (0, _) => String::new(),
            // Restarted because the client exited by itself: a longer run
            // would only restart it more often.
            (late, exits @ 1..) => format!(
                " ({late} restarted client process(es) said hello only after the run's duration \
                 was over, after {exits} exit(s) of the client's own: see the crash lines)"
            ),
            (late, 0) => format!(
                " ({late} restarted client process(es) said hello only after the run's duration \
                 was over; the slowest start-up of any process took {} ms: give a longer \
                 --duration-ms)",
                self.tally.start_up_ms_max
            ),
        };
        Some(format!("{reason}{start_up}"))
    }

    /// No violation and not vacuous.
    pub fn passed(&self) -> bool {
        self.report.is_ok() && self.vacuity().is_none()
    }
}
