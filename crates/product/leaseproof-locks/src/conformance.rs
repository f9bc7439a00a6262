//! The conformance suite any [`LockManager`] runs from its own tests — the
//! three managers here run it, and so can a ZooKeeper or etcd manager.
//!
//! Goal: check the contract, not an implementation: a collision is refused at
//! once, locks of different tables are independent, release frees the lock,
//! `is_locked` agrees, bad input is a typed error, and N tasks × rounds never
//! hold one table at once.
//! Method: the race is recorded as a history and judged by the one checker
//! (`leaseproof_history::check`, its rule for locks without server times).
//! Mutual exclusion is judged in real time on one monotonic clock, as
//! Jepsen's checkers do, and only from what is *certain*: a task certainly
//! held the lock from the moment its acquisition returned until it invoked
//! the release — and, for a lock that lives `lifetime_min` at least, no
//! longer than that after it invoked the acquisition. Two such intervals that
//! overlap are a real double hold, whatever the store's timestamps say; so
//! the check never cries wolf on a correct lock, and a task stalled past the
//! lifetime is simply not judged beyond it. Where the guard has tokens, a
//! hold that certainly ended before another began must have the smaller one.
//! Invariant: every function fails with a sentence saying what broke.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseproof_history::{
    check, CheckConfig, EventKind, FailReason, Op, OpResult, Outcome, Recorder, Stamp,
};

use crate::{LockError, LockManager, TableName};

/// What broke, in one sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{manager}: {what}")]
pub struct ConformanceError {
    /// The manager's [`LockManager::name`].
    pub manager: &'static str,
    /// What broke.
    pub what: String,
    /// The recorded history, for a check that recorded one (the race): save
    /// it (`History::save`) or draw it (`leaseproof_history::timeline_html`);
    /// the event numbers in `what` point into it.
    pub history: Option<leaseproof_history::History>,
}

fn fail(manager: &dyn LockManager, what: impl Into<String>) -> ConformanceError {
    ConformanceError {
        manager: manager.name(),
        what: what.into(),
        history: None,
    }
}

/// How long a collision may take to be refused: a round trip, plus a
/// connection setup for managers that open one per lock, on a loaded machine.
pub const COLLISION_REFUSED_WITHIN: Duration = Duration::from_secs(2);

/// A second acquisition of a held table is `Held` at once (well inside
/// [`COLLISION_REFUSED_WITHIN`], never after the holder releases), and the
/// table is free again after the release. Returns how long the refusal took.
pub async fn collision_is_refused_at_once(
    manager: &dyn LockManager,
    table: &TableName,
) -> Result<Duration, ConformanceError> {
    let guard = manager
        .acquire_lock(table)
        .await
        .map_err(|error| fail(manager, format!("first acquisition: {error}")))?;
    let started = Instant::now();
    let second =
        tokio::time::timeout(COLLISION_REFUSED_WITHIN * 5, manager.acquire_lock(table)).await;
    let refused_after = started.elapsed();
    match second {
        Err(_) => {
            return Err(fail(
                manager,
                "a collision queued instead of failing at once",
            ))
        }
        Ok(Ok(_)) => return Err(fail(manager, "a held table was granted twice")),
        Ok(Err(LockError::Held { .. })) => {}
        Ok(Err(error)) => {
            return Err(fail(
                manager,
                format!("a collision failed with {error}, not Held"),
            ))
        }
    }
    if refused_after > COLLISION_REFUSED_WITHIN {
        return Err(fail(
            manager,
            format!("a collision took {refused_after:?} to be refused"),
        ));
    }
    guard
        .release()
        .await
        .map_err(|error| fail(manager, format!("release: {error}")))?;
    let again = manager
        .acquire_lock(table)
        .await
        .map_err(|error| fail(manager, format!("re-acquire after release: {error}")))?;
    again
        .release()
        .await
        .map_err(|error| fail(manager, format!("second release: {error}")))?;
    Ok(refused_after)
}

/// Two tables lock independently; `is_locked` agrees before, during and after.
pub async fn tables_are_independent_and_is_locked_agrees(
    manager: &dyn LockManager,
    first: &TableName,
    second: &TableName,
) -> Result<(), ConformanceError> {
    let is_locked = |table: &TableName| {
        let table = table.clone();
        async move {
            manager
                .is_locked(&table)
                .await
                .map_err(|error| fail(manager, format!("is_locked({table}): {error}")))
        }
    };
    if is_locked(first).await? || is_locked(second).await? {
        return Err(fail(manager, "a table is locked before anyone took it"));
    }
    let a = manager
        .acquire_lock(first)
        .await
        .map_err(|error| fail(manager, format!("acquire {first}: {error}")))?;
    if !is_locked(first).await? {
        return Err(fail(
            manager,
            format!("is_locked({first}) is false while held"),
        ));
    }
    if is_locked(second).await? {
        return Err(fail(
            manager,
            format!("locking {first} locked {second} too"),
        ));
    }
    let b = manager
        .acquire_lock(second)
        .await
        .map_err(|error| fail(manager, format!("{second} while {first} is held: {error}")))?;
    a.release()
        .await
        .map_err(|error| fail(manager, format!("release {first}: {error}")))?;
    if is_locked(first).await? {
        return Err(fail(
            manager,
            format!("is_locked({first}) is true after release"),
        ));
    }
    if !is_locked(second).await? {
        return Err(fail(
            manager,
            format!("releasing {first} released {second}"),
        ));
    }
    b.release()
        .await
        .map_err(|error| fail(manager, format!("release {second}: {error}")))?;
    Ok(())
}

/// Empty parts and NUL bytes are typed `Invalid` errors, from `acquire_lock`
/// and `is_locked` alike.
pub async fn bad_input_is_a_typed_error(manager: &dyn LockManager) -> Result<(), ConformanceError> {
    let long = "x".repeat(300);
    for table in [
        TableName::new("", "events"),
        TableName::new("public", ""),
        TableName::new("public", "ev\0ents"),
        TableName::new("public", long.as_str()),
    ] {
        let answers = [
            (
                "acquire_lock",
                not_invalid(manager.acquire_lock(&table).await),
            ),
            ("is_locked", not_invalid(manager.is_locked(&table).await)),
        ];
        for (method, answer) in answers {
            if let Some(answer) = answer {
                return Err(fail(
                    manager,
                    format!("{method}({table:?}) gave {answer}, not Invalid"),
                ));
            }
        }
    }
    Ok(())
}

/// The answer, printed, unless it is the `Invalid` error.
fn not_invalid<T: std::fmt::Debug>(answer: Result<T, LockError>) -> Option<String> {
    match answer {
        Err(LockError::Invalid(_)) => None,
        other => Some(format!("{other:?}")),
    }
}

/// What a mutual-exclusion race saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaceSummary {
    /// Holds judged.
    pub holds: usize,
    /// Distinct tasks that held the lock.
    pub winners: usize,
    /// Acquisitions refused with `Held`.
    pub refusals: usize,
    /// The recorded history the checker judged.
    pub history: leaseproof_history::History,
}

/// `tasks` tasks × `rounds` rounds contend for `table`; each winner holds for
/// `hold`, then releases. `lifetime_min` is how long a lock surely lives
/// after its acquisition was invoked (the TTL of an expiring lock; `None`
/// for one that lives with its session). The race is recorded as a history
/// (the lock's grants as [`OpResult::Lock`], on the test's monotonic clock)
/// and judged by the one checker, `leaseproof_history::check`: it fails on a
/// certain double hold, a token order against real time, or a vacuous race.
/// The history comes back with the summary, for a report or a file.
pub async fn tasks_never_hold_one_table_at_once(
    manager: Arc<dyn LockManager>,
    table: &TableName,
    tasks: usize,
    rounds: usize,
    hold: Duration,
    lifetime_min: Option<Duration>,
) -> Result<RaceSummary, ConformanceError> {
    assert!(tasks >= 2, "a race needs two tasks");
    assert!(rounds >= 1);
    // The table names the lock in the history (each manager prefixes it).
    let scope = table.to_string();
    let lifetime_us =
        lifetime_min.map(|lifetime| i64::try_from(lifetime.as_micros()).unwrap_or(i64::MAX));
    let recorder = Arc::new(Recorder::new());
    let start = Instant::now();
    let mut summary = RaceSummary::default();
    // A store that answers in microseconds can let one task win every round
    // of a batch on a busy machine: the race is run again, a bounded number
    // of batches, before it calls itself vacuous (a test that fails when the
    // machine is busy would be ignored).
    for _batch in 0..RACE_BATCHES_MAX {
        let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
        let mut handles = Vec::new();
        for task in 0..tasks {
            let (manager, table, barrier) =
                (Arc::clone(&manager), table.clone(), Arc::clone(&barrier));
            let (recorder, scope) = (Arc::clone(&recorder), scope.clone());
            handles.push(tokio::spawn(async move {
                let worker = format!("task-{task}");
                fn stamp(worker: &str, start: Instant) -> Stamp<'_> {
                    let true_time_us =
                        i64::try_from(start.elapsed().as_micros()).unwrap_or(i64::MAX);
                    Stamp {
                        worker,
                        incarnation: 0,
                        true_time_us,
                        local_time_us: true_time_us,
                    }
                }
                let mut refusals = 0;
                for _ in 0..rounds {
                    barrier.wait().await;
                    // A little jitter, so the same task does not always win a
                    // store that answers in microseconds.
                    let jitter_us = rand::Rng::gen_range(&mut rand::thread_rng(), 0..2_000);
                    tokio::time::sleep(Duration::from_micros(jitter_us)).await;
                    let acquire = recorder.invoke(
                        stamp(&worker, start),
                        Op::Acquire {
                            scope: scope.clone(),
                            owner: worker.clone(),
                            ttl_us: lifetime_us.unwrap_or(0),
                        },
                    );
                    match manager.acquire_lock(&table).await {
                        Ok(guard) => {
                            let token = guard
                                .fencing_token()
                                .map(|token| u64::try_from(token.0).unwrap_or(0));
                            recorder.complete(
                                stamp(&worker, start),
                                acquire,
                                Outcome::Ok {
                                    result: OpResult::Lock { token, lifetime_us },
                                },
                            );
                            tokio::time::sleep(hold).await;
                            let release = recorder.invoke(
                                stamp(&worker, start),
                                Op::Release {
                                    scope: scope.clone(),
                                    owner: worker.clone(),
                                    token: token.unwrap_or(0),
                                },
                            );
                            guard
                                .release()
                                .await
                                .map_err(|error| format!("release: {error}"))?;
                            recorder.complete(
                                stamp(&worker, start),
                                release,
                                Outcome::Ok {
                                    result: OpResult::Unlocked {},
                                },
                            );
                        }
                        Err(LockError::Held { .. }) => {
                            refusals += 1;
                            recorder.complete(
                                stamp(&worker, start),
                                acquire,
                                Outcome::Fail {
                                    reason: FailReason::Held,
                                },
                            );
                        }
                        Err(error) => return Err(format!("acquire: {error}")),
                    }
                }
                Ok::<_, String>(refusals)
            }));
        }
        for handle in handles {
            summary.refusals += handle
                .await
                .map_err(|error| fail(&*manager, format!("a task panicked: {error}")))?
                .map_err(|error| fail(&*manager, error))?;
        }
        let (winners, _) = winners_and_holds(&recorder.snapshot());
        if winners >= 2 && summary.refusals > 0 {
            break;
        }
    }
    let history = recorder.snapshot();
    let report = check(&history, &CheckConfig::default());
    if !report.is_ok() {
        let mut error = fail(&*manager, format!("the checker found {report}"));
        error.history = Some(history);
        return Err(error);
    }
    (summary.winners, summary.holds) = winners_and_holds(&history);
    if summary.winners < 2 || summary.refusals == 0 {
        let mut error = fail(
            &*manager,
            format!(
                "the race was vacuous: {} holds, {} winners, {} refusals (need 2 winners and a refusal)",
                summary.holds, summary.winners, summary.refusals
            ),
        );
        error.history = Some(history);
        return Err(error);
    }
    summary.history = history;
    Ok(summary)
}

/// Batches of rounds a race runs at most before it calls itself vacuous.
const RACE_BATCHES_MAX: usize = 5;

/// Distinct workers that were granted the lock, and the grants.
fn winners_and_holds(history: &leaseproof_history::History) -> (usize, usize) {
    let mut winners = Vec::new();
    for event in &history.events {
        if let EventKind::Complete {
            outcome: Outcome::Ok {
                result: OpResult::Lock { .. },
            },
            ..
        } = &event.kind
        {
            winners.push(event.worker.as_str());
        }
    }
    let holds = winners.len();
    winners.sort_unstable();
    winners.dedup();
    (winners.len(), holds)
}

/// The waiting form ([`LockManager::acquire_lock_wait`]): a waiter gets a
/// held table soon after its release (within [`COLLISION_REFUSED_WITHIN`]),
/// and a wait that outlasts its timeout is `Held`, returned at the deadline.
pub async fn a_waiter_gets_the_lock_after_its_release(
    manager: Arc<dyn LockManager>,
    table: &TableName,
) -> Result<(), ConformanceError> {
    let holder = manager
        .acquire_lock(table)
        .await
        .map_err(|error| fail(&*manager, format!("first acquisition: {error}")))?;
    let started = Instant::now();
    match manager
        .acquire_lock_wait(table, Duration::from_millis(300))
        .await
    {
        Err(LockError::Held { .. }) => {}
        Ok(_) => return Err(fail(&*manager, "a wait was granted a held lock")),
        Err(error) => return Err(fail(&*manager, format!("a timed-out wait: {error}"))),
    }
    let waited = started.elapsed();
    if waited < Duration::from_millis(300)
        || waited > Duration::from_millis(300) + COLLISION_REFUSED_WITHIN
    {
        return Err(fail(
            &*manager,
            format!("a wait of 300 ms gave up after {} ms", waited.as_millis()),
        ));
    }
    let waiter = {
        let (manager, table) = (Arc::clone(&manager), table.clone());
        tokio::spawn(async move {
            manager
                .acquire_lock_wait(&table, Duration::from_secs(30))
                .await
                .map(|guard| (guard, Instant::now()))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    holder
        .release()
        .await
        .map_err(|error| fail(&*manager, format!("release: {error}")))?;
    let (guard, granted) = waiter
        .await
        .map_err(|error| fail(&*manager, format!("the waiter panicked: {error}")))?
        .map_err(|error| fail(&*manager, format!("the waiter: {error}")))?;
    let after = granted.saturating_duration_since(released);
    guard
        .release()
        .await
        .map_err(|error| fail(&*manager, format!("the waiter's release: {error}")))?;
    if after > COLLISION_REFUSED_WITHIN {
        return Err(fail(
            &*manager,
            format!(
                "the waiter got the lock {} ms after its release",
                after.as_millis()
            ),
        ));
    }
    Ok(())
}

/// What the whole suite measured, from [`run_suite`].
#[derive(Debug, Clone)]
pub struct SuiteReport {
    /// How long the collision took to be refused.
    pub collision_refused_after: Duration,
    /// The mutual-exclusion race (its history included).
    pub race: RaceSummary,
}

impl std::fmt::Display for SuiteReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "collision refused in {:.1} ms, {} holds by {} tasks, {} refusals",
            self.collision_refused_after.as_secs_f64() * 1_000.0,
            self.race.holds,
            self.race.winners,
            self.race.refusals
        )
    }
}

/// The whole suite, one call: every check above on tables of its own, named
/// `{table_prefix}_collide`, `_a`, `_b`, `_wait` and `_race` in `public` (give each
/// run a fresh prefix), the race with 8 tasks × 6 rounds holding 5 ms each.
/// `lifetime_min` as for [`tasks_never_hold_one_table_at_once`]. The first
/// check that breaks ends it, with its sentence (and, for the race, its
/// history).
///
/// ```no_run
/// # async fn run(manager: std::sync::Arc<dyn leaseproof_locks::LockManager>) {
/// let report = leaseproof_locks::conformance::run_suite(manager, "my_lock_test", None)
///     .await
///     .unwrap_or_else(|error| panic!("{error}"));
/// println!("{report}");
/// # }
/// ```
pub async fn run_suite(
    manager: Arc<dyn LockManager>,
    table_prefix: &str,
    lifetime_min: Option<Duration>,
) -> Result<SuiteReport, ConformanceError> {
    let table = |name: &str| TableName::new("public", format!("{table_prefix}_{name}"));
    let collision_refused_after =
        collision_is_refused_at_once(&*manager, &table("collide")).await?;
    tables_are_independent_and_is_locked_agrees(&*manager, &table("a"), &table("b")).await?;
    bad_input_is_a_typed_error(&*manager).await?;
    a_waiter_gets_the_lock_after_its_release(Arc::clone(&manager), &table("wait")).await?;
    let race = tasks_never_hold_one_table_at_once(
        Arc::clone(&manager),
        &table("race"),
        8,
        6,
        Duration::from_millis(5),
        lifetime_min,
    )
    .await?;
    Ok(SuiteReport {
        collision_refused_after,
        race,
    })
}
