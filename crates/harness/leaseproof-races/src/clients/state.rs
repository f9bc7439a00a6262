//! What a run's parts share: each client's slot (its process, proxies and
//! belief), the run itself, the held start, and the belief's bookkeeping.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leaseproof_history::{Annotation, EventKind, Recorder, Stamp};

use super::child::{ClientProcess, StartError};
use super::effects::ProcessEffects;
use super::moments::Moments;
use super::net::FaultProxy;
use super::processes::RUN_MARKER_ENV;
use super::run::{with_address, ClientRunConfig, ROWS_TABLE};
use super::wire::WireError;
use crate::clock::RunClock;

/// Per worker: its current process and what it believes.
pub(super) struct Slot {
    pub(super) process: tokio::sync::Mutex<Option<ClientProcess>>,
    /// The process group of the current incarnation, for the injector's
    /// signals without waiting on a request in flight.
    pub(super) pgid: AtomicU64,
    /// The process group paused now and how many pauses hold it stopped:
    /// overlapping pauses make one, which ends (SIGCONT) only when the last
    /// of them does. A new incarnation starts unpaused.
    pub(super) pauses: Mutex<(u32, u64)>,
    pub(super) belief: Arc<Mutex<Belief>>,
    pub(super) proxies: Vec<FaultProxy>,
    /// How many replies completing a statement the client's last write
    /// answered `ok` took on the work store (0: none seen yet): where a
    /// stall can split a write.
    pub(super) write_statements: AtomicU64,
    /// How many of those completed a read (a `SELECT`: a check to split the
    /// write after).
    pub(super) write_reads: AtomicU64,
    /// Until when (the run's clock, µs) a client cut off from its lock
    /// store is asked to work on: under any grant it holds before then (a
    /// later incarnation's too) it writes until then, unless refused.
    pub(super) work_until_us: AtomicI64,
}

#[derive(Debug, Default)]
pub(super) struct Belief {
    pub(super) incarnation: u64,
    /// (scope, token) believed held.
    pub(super) held: Option<(String, u64)>,
    /// The incarnation was killed or its process ended: an answer read
    /// after that (it was in the pipe) starts no belief that outlives it.
    pub(super) ended: bool,
    pub(super) lost_notices: u64,
}

pub(super) struct Run {
    pub(super) config: ClientRunConfig,
    pub(super) clock: RunClock,
    pub(super) recorder: Recorder,
    pub(super) slots: Vec<Slot>,
    pub(super) database_url: String,
    pub(super) redis: Option<Arc<Mutex<leaseproof_redis_server::RedisServer>>>,
    pub(super) dir: tempfile::TempDir,
    pub(super) protocol_error: Mutex<Option<WireError>>,
    pub(super) start_error: Mutex<Option<StartError>>,
    pub(super) hello: Mutex<Option<super::child::Hello>>,
    pub(super) process_effects: Mutex<ProcessEffects>,
    /// Clients that exited by themselves mid-request (no strike's signal).
    pub(super) own_exits: Mutex<Vec<String>>,
    /// Requests left unanswered until the run's patience ran out.
    pub(super) unanswered: Mutex<Vec<String>>,
    /// The strikes that acted, where they landed on the history's clock.
    pub(super) marks: Mutex<Vec<Annotation>>,
    /// When the plan's clock starts.
    pub(super) start: HeldStart,
    /// Each recorded operation's request, by op id: its `msg_id` and type,
    /// so a refusal names what the client was answering.
    pub(super) requests: Mutex<BTreeMap<u64, (u64, &'static str)>>,
    /// The strikes waiting for a protocol moment.
    pub(super) moments: Moments,
    /// The strike aimed at a protocol moment that has the run to itself,
    /// and until when (the run's clock, µs).
    pub(super) aimed: Mutex<Option<AimedWindow>>,
    /// Lasting faults (pauses, partitions, latency, stalls) under way now.
    pub(super) faults_under_way: AtomicUsize,
}

/// A strike aimed at a protocol moment that acted, playing out: until its
/// fault and one TTL after are over, no other strike lands (a rival paused,
/// a holder killed as well, a server restarted would hide what it exposes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct AimedWindow {
    /// How the strike was reported.
    pub(super) what: String,
    /// Until when, on the run's clock (µs).
    pub(super) until_us: i64,
}

impl AimedWindow {
    /// Its end on the plan's clock (from the held start), in ms.
    pub(super) async fn until_ms(&self, run: &Run) -> i64 {
        (self.until_us - run.start.at_us().await) / 1_000
    }
}

impl Run {
    /// The client that believes it holds the lock now, if any.
    pub(super) fn holder_now(&self) -> Option<usize> {
        (0..self.slots.len()).find(|&index| lock(&self.slots[index].belief).held.is_some())
    }

    /// Whether a strike aimed at a design's mechanism may take the run at
    /// `now_us`: no other has it, and no lasting fault is under way (a
    /// paused rival takes no lock, a paused holder writes nothing).
    pub(super) fn is_free(&self, now_us: i64) -> bool {
        self.aimed_at(now_us).is_none() && self.faults_under_way.load(Ordering::SeqCst) == 0
    }

    /// The aimed strike that has the run to itself at `now_us`, if any.
    pub(super) fn aimed_at(&self, now_us: i64) -> Option<AimedWindow> {
        lock(&self.aimed)
            .clone()
            .filter(|window| now_us < window.until_us)
    }
}

/// One worker's place at the held start: it arrives once, when its first
/// process greeted, or when it is dropped without (a start error, a panic),
/// so that nobody waits for a worker that will never greet.
pub(super) struct Arrival<'a> {
    pub(super) run: &'a Run,
    pub(super) arrived: bool,
}

impl Arrival<'_> {
    /// Arrives (once) and waits for the others; the start on the run clock, µs.
    pub(super) async fn arrive_and_wait(&mut self) -> i64 {
        if !self.arrived {
            self.arrived = true;
            self.run.start.arrive(self.run.clock);
        }
        self.run.start.at_us().await
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        if !self.arrived {
            self.run.start.arrive(self.run.clock);
        }
    }
}

/// The run's held start: the plan's times and its duration count from the
/// moment every client's first process greeted (or could not start), so a
/// slow start-up eats no strike and no contention, and the clients begin
/// together, as the racing tasks do.
pub(super) struct HeldStart {
    /// First processes yet to greet.
    pub(super) waiting: AtomicUsize,
    /// The run clock's reading at the start, once everyone arrived.
    pub(super) at_us: tokio::sync::watch::Sender<Option<i64>>,
}

impl HeldStart {
    pub(super) fn new(clients: usize) -> HeldStart {
        HeldStart {
            waiting: AtomicUsize::new(clients),
            at_us: tokio::sync::watch::Sender::new(None),
        }
    }

    /// A first process greeted or could not start; the last one starts the run.
    pub(super) fn arrive(&self, clock: RunClock) {
        let before = self.waiting.fetch_sub(1, Ordering::SeqCst);
        assert!(before >= 1, "more arrivals than clients");
        if before == 1 {
            self.at_us.send_replace(Some(clock.elapsed_us()));
        }
    }

    /// The start on the run clock, µs; waits until everyone arrived.
    pub(super) async fn at_us(&self) -> i64 {
        let mut start = self.at_us.subscribe();
        let at_us = *start
            .wait_for(Option::is_some)
            .await
            .expect("the run owns the sender");
        at_us.expect("waited for a start")
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Run {
    pub(super) fn stamp_now(&self, worker: &str, incarnation: u64) -> (i64, String, u64) {
        (self.clock.elapsed_us(), worker.to_string(), incarnation)
    }

    pub(super) fn record(&self, worker: &str, incarnation: u64, kind: EventKind) {
        let now = self.clock.elapsed_us();
        self.recorder.record(stamp(worker, incarnation, now), kind);
    }

    pub(super) fn client_env(&self, index: usize, incarnation: u64) -> Vec<(String, String)> {
        let slot = &self.slots[index];
        let mut env = vec![
            ("LEASEPROOF_WORKER".to_string(), format!("w{index}")),
            (
                "LEASEPROOF_INCARNATION".to_string(),
                incarnation.to_string(),
            ),
            (
                "LEASEPROOF_DATABASE_URL".to_string(),
                with_address(&self.database_url, slot.proxies[0].local_addr()),
            ),
            ("LEASEPROOF_ROWS_TABLE".to_string(), ROWS_TABLE.to_string()),
            ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
            // Marks every process of this run, for the watchdog.
            (
                RUN_MARKER_ENV.to_string(),
                self.dir.path().display().to_string(),
            ),
        ];
        if let (Some(redis), Some(proxy)) = (&self.redis, slot.proxies.get(1)) {
            let url = lock(redis).url.clone();
            env.push((
                "LEASEPROOF_REDIS_URL".to_string(),
                with_address(&url, proxy.local_addr()),
            ));
        }
        env
    }
}

pub(super) fn stamp(worker: &str, incarnation: u64, true_time_us: i64) -> Stamp<'_> {
    Stamp {
        worker,
        incarnation,
        true_time_us,
        local_time_us: true_time_us,
    }
}

pub(super) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn end_belief(run: &Arc<Run>, index: usize, reason: &str) {
    end_belief_of(run, index, None, reason);
}

/// The worker's process is gone (killed, replaced, or ended by itself): its
/// belief ends, and an answer still read from it starts none (`complete`).
/// Only `incarnation`'s, when given: a successor may hold by then.
pub(super) fn end_incarnation(
    run: &Arc<Run>,
    index: usize,
    incarnation: Option<u64>,
    reason: &str,
) {
    {
        let mut belief = lock(&run.slots[index].belief);
        if incarnation.is_some_and(|incarnation| incarnation != belief.incarnation) {
            return;
        }
        belief.ended = true;
    }
    end_belief_of(run, index, incarnation, reason);
}

/// Ends the worker's belief, if it has one — of `incarnation` only, when given.
pub(super) fn end_belief_of(run: &Arc<Run>, index: usize, incarnation: Option<u64>, reason: &str) {
    let worker = format!("w{index}");
    let mut belief = lock(&run.slots[index].belief);
    if incarnation.is_some_and(|incarnation| incarnation != belief.incarnation) {
        return;
    }
    if let Some((scope, token)) = belief.held.take() {
        let incarnation = belief.incarnation;
        run.record(
            &worker,
            incarnation,
            EventKind::BeliefEnd {
                scope,
                token,
                reason: reason.to_string(),
            },
        );
    }
}
