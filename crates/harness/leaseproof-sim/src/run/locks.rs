//! A lock manager's run: `RedisDistributedLockManager`'s or
//! `PostgresAdvisoryLockManager`'s own code on every worker host, against
//! the simulated Redis or the simulated database's session locks, under the
//! seed's faults.
//!
//! Goal: judge a manager of `leaseproof-locks` the way the lease is judged —
//! by seed, replayable — not by its scripted real-server scenes alone.
//! Method: each worker incarnation builds the manager — Redis over
//! [`SimRedisConnection`] (redis-rs's multiplexed connection on turmoil TCP)
//! with holders named after the incarnation and secrets drawn from its seed;
//! advisory over [`SimAdvisorySessions`] (a connection to the simulated
//! database per session) — then loops: take the lock (never queueing), and while it holds, work,
//! check the guard's *lost* signal, maybe freeze (the drawn pause: the
//! worker stops and its traffic to the lock's store is held, keep-alive and
//! probe included, as a stopped process's would be) and write one row to the work store — with
//! the token for the fence, or without it when the run is unfenced — then
//! release. Every step is recorded on turmoil's clock; the work store's
//! rows join the history and the one checker judges it.
//! Invariant: no wall clock, no OS entropy: the manager's holder values
//! come from the worker's seed, its clock is turmoil's.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leaseproof_history::{
    check, CheckConfig, CheckReport, EventKind, FailReason, History, Op, OpResult, Outcome,
    Recorder, Stamp,
};
use leaseproof_locks::{
    LockError, LockGuard, LockManager, PostgresAdvisoryLockManager, RedisDistributedLockManager,
    RedisLockOptions, TableName,
};
use leaseproof_protocol::Owner;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::workers::{next_incarnation, WorkerSlot};
use super::{RunOptions, Setup};
use crate::advisory_client::SimAdvisorySessions;
use crate::db::{self, DbConfig, Durable, Terminations, DB_HOST};
use crate::faults::{FaultPlan, WorkerPlan};
use crate::port::SimPort;
use crate::redis_host::client::SimRedisConnection;
use crate::redis_host::{self, RedisConfig, RedisData, REDIS_HOST};
use crate::scenario::{LockManagerName, LockUnderTest, Scenario};
use crate::trace::{sim_now_us, Trace};
use crate::work_store::{self, WorkData, WorkWrite, Written, WORK_HOST};

/// The table every worker maintains, and so the lock's scope in the history.
pub const LOCK_TABLE: (&str, &str) = ("public", "sim");

/// Mixed into a worker's seed for the holder secrets' stream.
const SECRET_STREAM: u64 = 0x5EC2_E75E_ED00_0001;

/// The stores of a lock run, read after it.
pub(super) struct LockStores {
    /// The rows the workers wrote.
    pub(super) work: Rc<RefCell<WorkData>>,
    /// The lock's store: the Redis host, or the database host.
    pub(super) host: &'static str,
    /// The database's advisory lock sessions' terminations (advisory runs).
    pub(super) terminations: Option<Terminations>,
}

/// Adds the lock's store (Redis, or the database for advisory locks), the
/// work store and one host per worker of a lock scenario (`scenario.lock`
/// set) to `sim`.
pub(super) fn spawn(
    sim: &mut turmoil::Sim<'_>,
    setup: Setup<'_>,
) -> (Rc<RefCell<Vec<WorkerSlot>>>, LockStores) {
    let Setup {
        scenario,
        plan,
        options,
        bounds,
        recorder,
        trace,
    } = setup;

    let lock: &LockUnderTest = scenario.lock.as_ref().expect("a lock scenario");
    let stores = match lock.manager {
        LockManagerName::Redis => host_redis(sim, lock, plan, options, trace),
        LockManagerName::Advisory => host_database(sim, scenario, plan, options, trace),
    };
    {
        let (data, trace) = (Rc::clone(&stores.work), trace.clone());
        sim.host(WORK_HOST, move || {
            work_store::serve(Rc::clone(&data), trace.clone())
        });
    }
    let slots: Rc<RefCell<Vec<WorkerSlot>>> = Rc::new(RefCell::new(
        plan.workers.iter().map(|_| WorkerSlot::default()).collect(),
    ));
    for (index, worker) in plan.workers.iter().enumerate() {
        let settings = Settings {
            index,
            manager: lock.manager,
            store_host: stores.host,
            probe_interval: Duration::from_millis(lock.probe_interval_ms),
            worker: worker.clone(),
            ttl: bounds.ttl.as_duration(),
            keep_alive: lock.keep_alive,
            fenced: !options.unfenced,
            stop_at_us: bounds.duration.as_micros() as i64,
            cycles_per_grant: scenario.cycles_per_grant,
            retry_interval: Duration::from_millis(scenario.retry_interval_ms),
            request_timeout: Duration::from_millis(scenario.request_timeout_ms),
            pause_probability: scenario.faults.pause_probability,
            pause_ms: scenario.faults.pause_ms,
        };
        let (slots, recorder, trace) = (Rc::clone(&slots), recorder.clone(), trace.clone());
        sim.host(worker.name.as_str(), move || {
            let incarnation = next_incarnation(&slots, index);
            let (settings, slots) = (settings.clone(), Rc::clone(&slots));
            let (recorder, trace) = (recorder.clone(), trace.clone());
            async move {
                if incarnation == 1 && settings.worker.start_delay_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(settings.worker.start_delay_ms)).await;
                }
                let index = settings.index;
                lock_worker(settings, incarnation, recorder, trace).await;
                slots.borrow_mut()[index].finished = true;
                Ok(())
            }
        });
    }
    (slots, stores)
}

/// The simulated Redis, with its data kept across restarts where the
/// scenario (and no planted defect) says so.
fn host_redis(
    sim: &mut turmoil::Sim<'_>,
    lock: &LockUnderTest,
    plan: &FaultPlan,
    options: RunOptions,
    trace: &Trace,
) -> LockStores {
    let config = RedisConfig {
        persistent: lock.persistent && !options.forgetful_restarts,
        compare_always_equal: options.compare_skipped,
        lost_reply_probability: plan.lost_reply_probability,
        rng_seed: plan.db_rng_seed,
    };
    let (data, trace) = (Rc::new(RefCell::new(RedisData::default())), trace.clone());
    sim.host(REDIS_HOST, move || {
        redis_host::serve(Rc::clone(&data), config, trace.clone())
    });
    LockStores {
        work: Rc::new(RefCell::new(WorkData::default())),
        host: REDIS_HOST,
        terminations: None,
    }
}

/// The simulated database, serving the advisory manager's session locks
/// (which live with its sessions and die with a crash), its sessions
/// terminated when the fault plan says.
fn host_database(
    sim: &mut turmoil::Sim<'_>,
    scenario: &Scenario,
    plan: &FaultPlan,
    options: RunOptions,
    trace: &Trace,
) -> LockStores {
    let terminations = Terminations::default();
    let config = DbConfig {
        advisory_shared: options.shared_advisory_locks,
        terminations: Some(terminations.clone()),
        ..DbConfig::drawn(scenario, plan)
    };
    let durable = Rc::new(RefCell::new(Durable::new(plan.db_rng_seed)));
    let trace = trace.clone();
    sim.host(DB_HOST, move || {
        db::serve(Rc::clone(&durable), config.clone(), trace.clone())
    });
    LockStores {
        work: Rc::new(RefCell::new(WorkData::default())),
        host: DB_HOST,
        terminations: Some(terminations),
    }
}

/// One worker's settings, the same for each of its incarnations.
#[derive(Clone, Debug)]
struct Settings {
    index: usize,
    manager: LockManagerName,
    /// The lock's store, whose traffic a pause holds.
    store_host: &'static str,
    probe_interval: Duration,
    worker: WorkerPlan,
    ttl: Duration,
    keep_alive: bool,
    fenced: bool,
    stop_at_us: i64,
    cycles_per_grant: u32,
    retry_interval: Duration,
    request_timeout: Duration,
    pause_probability: f64,
    pause_ms: [u64; 2],
}

/// Records one incarnation's events on turmoil's clock (no clock skew: the
/// managers read no clock but their timers, which are turmoil's).
#[derive(Clone)]
struct Log {
    recorder: Recorder,
    worker: String,
    incarnation: u64,
    owner: String,
    trace: Trace,
}

impl Log {
    fn stamp(&self) -> Stamp<'_> {
        let now = sim_now_us();
        Stamp {
            worker: &self.worker,
            incarnation: self.incarnation,
            true_time_us: now,
            local_time_us: now,
        }
    }

    fn invoke(&self, op: Op) -> u64 {
        self.recorder.invoke(self.stamp(), op)
    }

    fn complete(&self, op_id: u64, outcome: Outcome) {
        self.recorder.complete(self.stamp(), op_id, outcome);
    }

    fn record(&self, kind: EventKind) {
        self.recorder.record(self.stamp(), kind);
    }

    fn line(&self, text: impl FnOnce() -> String) {
        self.trace.line(Some(&self.owner), text);
    }
}

fn scope() -> String {
    format!("{}.{}", LOCK_TABLE.0, LOCK_TABLE.1)
}

/// One incarnation: take the lock, hold it through its cycles, release;
/// again until the scenario's end.
async fn lock_worker(settings: Settings, incarnation: u64, recorder: Recorder, trace: Trace) {
    let owner = format!("{}#inc{incarnation}", settings.worker.name);
    let seed = settings
        .worker
        .rng_seed
        .wrapping_add(incarnation.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut pauses = ChaCha8Rng::seed_from_u64(seed);
    let manager = manager(&settings, &owner, seed, &trace);
    let log = Log {
        recorder,
        worker: settings.worker.name.clone(),
        incarnation,
        owner: owner.clone(),
        trace,
    };
    log.line(|| format!("{owner}: incarnation {incarnation} starts"));
    let table = TableName::new(LOCK_TABLE.0, LOCK_TABLE.1);
    let ttl_us = settings.ttl.as_micros() as i64;
    let mut cycle = 0u64;
    while sim_now_us() < settings.stop_at_us {
        let op_id = log.invoke(Op::Acquire {
            scope: scope(),
            owner: owner.clone(),
            ttl_us,
        });
        match manager.acquire_lock(&table).await {
            Ok(guard) => {
                let token = guard
                    .fencing_token()
                    .and_then(|token| u64::try_from(token.0).ok());
                log.complete(
                    op_id,
                    Outcome::Ok {
                        result: OpResult::Lock {
                            token,
                            // A session lock has no lifetime: it lives
                            // with its session.
                            lifetime_us: (settings.manager == LockManagerName::Redis)
                                .then_some(ttl_us),
                        },
                    },
                );
                log.line(|| format!("{owner}: GRANTED token {token:?}"));
                hold(&settings, &log, guard, token, &mut pauses, &mut cycle).await;
            }
            Err(LockError::Held { .. }) => {
                log.complete(
                    op_id,
                    Outcome::Fail {
                        reason: FailReason::Held,
                    },
                );
                tokio::time::sleep(settings.retry_interval).await;
            }
            Err(error) => {
                log.complete(
                    op_id,
                    Outcome::Unknown {
                        reason: error.to_string(),
                    },
                );
                log.line(|| format!("{owner}: acquisition failed: {error}"));
                tokio::time::sleep(settings.retry_interval).await;
            }
        }
    }
    log.line(|| format!("{owner}: finished"));
}

/// The manager under test, its own code, over the simulation's transport:
/// no wall clock, no OS entropy (the Redis holders' secrets come from the
/// incarnation's seed).
fn manager(settings: &Settings, owner: &str, seed: u64, trace: &Trace) -> Box<dyn LockManager> {
    match settings.manager {
        LockManagerName::Redis => {
            let mut secrets = ChaCha8Rng::seed_from_u64(seed ^ SECRET_STREAM);
            Box::new(
                RedisDistributedLockManager::over(
                    SimRedisConnection::new(
                        settings.request_timeout,
                        trace.clone(),
                        owner.to_string(),
                    ),
                    "sim",
                    RedisLockOptions {
                        ttl: settings.ttl,
                        keep_alive: settings.keep_alive,
                    },
                )
                .expect("a validated TTL")
                .with_holders(
                    Owner::new(owner.to_string()).expect("a short owner id"),
                    move || secrets.next_u64(),
                ),
            )
        }
        LockManagerName::Advisory => Box::new(
            PostgresAdvisoryLockManager::over(
                SimAdvisorySessions::new(SimPort {
                    client: owner.to_string(),
                    request_timeout: settings.request_timeout,
                    schema_retry: true,
                    unavailable_retry: settings.retry_interval,
                    unavailable_attempts_max: 1,
                    trace: trace.clone(),
                }),
                "sim",
            )
            .with_probe_interval(settings.probe_interval),
        ),
    }
}

/// Holds `guard` through the scenario's cycles, then releases it.
async fn hold(
    settings: &Settings,
    log: &Log,
    guard: LockGuard,
    token: Option<u64>,
    pauses: &mut ChaCha8Rng,
    cycle: &mut u64,
) {
    let belief_token = token.unwrap_or(0);
    log.record(EventKind::BeliefStart {
        scope: scope(),
        token: belief_token,
    });
    // The belief ends once: at the lost signal, or at the release.
    let ended = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (mut lost, log, ended) = (guard.lost_signal(), log.clone(), Arc::clone(&ended));
        tokio::spawn(async move {
            if lost.wait_for(|lost| *lost).await.is_ok() && !ended.swap(true, Ordering::SeqCst) {
                log.record(EventKind::BeliefEnd {
                    scope: scope(),
                    token: belief_token,
                    reason: "the guard's lost signal fired".to_string(),
                });
                log.line(|| format!("{}: LOST signal", log.owner));
            }
        })
    };
    for _ in 0..settings.cycles_per_grant {
        tokio::time::sleep(Duration::from_millis(settings.worker.work_ms)).await;
        if sim_now_us() >= settings.stop_at_us || *guard.lost_signal().borrow() {
            break;
        }
        // The belief is checked; a pause here is the classic stale writer.
        if settings.pause_probability > 0.0 && pauses.gen_bool(settings.pause_probability) {
            let pause_ms = pauses.gen_range(settings.pause_ms[0]..=settings.pause_ms[1]);
            freeze(log, &settings.worker.name, settings.store_host, pause_ms).await;
        }
        *cycle += 1;
        let cycle_id = ((settings.index as u64 + 1) << 48) | (log.incarnation << 32) | *cycle;
        if !write(settings, log, token, cycle_id).await {
            break;
        }
    }
    watcher.abort();
    if !ended.swap(true, Ordering::SeqCst) {
        log.record(EventKind::BeliefEnd {
            scope: scope(),
            token: belief_token,
            reason: "released".to_string(),
        });
    }
    let op_id = log.invoke(Op::Release {
        scope: scope(),
        owner: log.owner.clone(),
        token: belief_token,
    });
    let outcome = match guard.release().await {
        Ok(()) => Outcome::Ok {
            result: OpResult::Unlocked {},
        },
        Err(LockError::Lost { .. }) => Outcome::Fail {
            reason: FailReason::Stale,
        },
        Err(error) => Outcome::Unknown {
            reason: error.to_string(),
        },
    };
    log.line(|| format!("{}: release => {outcome:?}", log.owner));
    log.complete(op_id, outcome);
}

/// The process stops for `pause_ms`: the worker sleeps and everything it
/// sends to the lock's store meanwhile (a keep-alive, a probe) is held
/// until it resumes.
async fn freeze(log: &Log, host: &str, store_host: &str, pause_ms: u64) {
    log.trace.fault(Some(&log.owner), || {
        format!(
            "{}: PAUSE {pause_ms} ms after the lost check, before the write",
            log.owner
        )
    });
    turmoil::hold(host, store_host);
    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    turmoil::release(host, store_host);
}

/// One row of maintenance, recorded; `false` when the holder must stop
/// (the fence refused it).
async fn write(settings: &Settings, log: &Log, token: Option<u64>, cycle_id: u64) -> bool {
    let op_id = log.invoke(Op::Write {
        scope: scope(),
        owner: log.owner.clone(),
        cycle_id,
        items: 1,
    });
    let request = WorkWrite {
        scope: scope(),
        owner: log.owner.clone(),
        cycle_id,
        fenced_token: if settings.fenced { token } else { None },
    };
    match work_store::write(&request, settings.request_timeout).await {
        Written::Stored => {
            log.complete(
                op_id,
                Outcome::Ok {
                    result: OpResult::Written {},
                },
            );
            true
        }
        Written::Refused => {
            log.complete(
                op_id,
                Outcome::Fail {
                    reason: FailReason::Stale,
                },
            );
            false
        }
        Written::Unknown(reason) => {
            log.complete(op_id, Outcome::Unknown { reason });
            true
        }
    }
}

/// The history with the work store's rows, and the checker's report.
pub(super) fn judge(recorder: &Recorder, stores: &LockStores) -> (History, CheckReport) {
    let mut history = recorder.snapshot();
    history.work_rows = stores.work.borrow().rows();
    history.tables_read.work = true;
    let report = check(&history, &CheckConfig::default());
    (history, report)
}
