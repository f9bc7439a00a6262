//! The conformance suite judged the way it judges others: every check of it
//! must pass a correct lock and fail a lock broken in the way it exists for.
//!
//! Goal: no check of `leaseproof_locks::conformance` can pass vacuously, and
//! none cries wolf. Method: one in-memory lock (no server: these run in
//! milliseconds), correct by default, with one defect switched on per test —
//! `is_locked` that always says no, one lock for every table, no input
//! validation, a refusal that takes seconds, a release that keeps the lock.
//! Each test asserts the sentence the suite fails with, so a check that fails
//! for another reason (a later step tripping over the defect) does not count.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::future::BoxFuture;
use leaseproof_locks::conformance::{
    a_waiter_gets_the_lock_after_its_release, bad_input_is_a_typed_error,
    collision_is_refused_at_once, tables_are_independent_and_is_locked_agrees,
    tasks_never_hold_one_table_at_once, ConformanceError, COLLISION_REFUSED_WITHIN,
};
use leaseproof_locks::{LockError, LockGuard, LockManager, TableName};
use leaseproof_protocol::Scope;
use tokio::sync::watch;

/// What is wrong with the in-memory lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Defect {
    /// Nothing: a correct lock.
    None,
    /// `is_locked` always answers `false`.
    IsLockedAlwaysFalse,
    /// Every table shares one lock.
    OneLockForAllTables,
    /// Tables are not validated: an empty or NUL-bearing name is locked.
    NoValidation,
    /// A collision is refused, but only after this long.
    SlowRefusal(Duration),
    /// Release reports success and keeps the lock.
    ReleaseKeepsLock,
    /// The waiting form gives up at once, whatever its timeout.
    WaitGivesUpAtOnce,
    /// The waiting form grants a held lock.
    WaitGrantsAHeldLock,
}

#[derive(Debug)]
struct InMemoryLocks {
    defect: Defect,
    held: Arc<Mutex<BTreeSet<String>>>,
}

impl InMemoryLocks {
    fn new(defect: Defect) -> Arc<InMemoryLocks> {
        Arc::new(InMemoryLocks {
            defect,
            held: Arc::new(Mutex::new(BTreeSet::new())),
        })
    }

    /// The key a table is locked under, and the scope its guard names.
    fn key(&self, table: &TableName) -> Result<(String, Scope), LockError> {
        let scope = match table.scope("memory") {
            Ok(scope) => scope,
            Err(_) if self.defect == Defect::NoValidation => {
                Scope::new("memory:unvalidated").expect("a valid scope")
            }
            Err(invalid) => return Err(LockError::Invalid(invalid)),
        };
        let key = match self.defect {
            Defect::OneLockForAllTables => "the one lock".to_string(),
            Defect::NoValidation => table.to_string(),
            _ => scope.as_str().to_string(),
        };
        Ok((key, scope))
    }
}

impl LockManager for InMemoryLocks {
    fn acquire_lock<'a>(
        &'a self,
        table: &'a TableName,
    ) -> BoxFuture<'a, Result<LockGuard, LockError>> {
        Box::pin(async move {
            let (key, scope) = self.key(table)?;
            let taken = self.held.lock().unwrap().insert(key.clone());
            if !taken {
                if let Defect::SlowRefusal(delay) = self.defect {
                    tokio::time::sleep(delay).await;
                }
                return Err(LockError::Held {
                    scope,
                    holder: None,
                });
            }
            let (lost_sender, lost) = watch::channel(false);
            let (held, keeps) = (
                Arc::clone(&self.held),
                self.defect == Defect::ReleaseKeepsLock,
            );
            Ok(LockGuard::custom(scope, None, lost, move || {
                Box::pin(async move {
                    drop(lost_sender);
                    if !keeps {
                        held.lock().unwrap().remove(&key);
                    }
                    Ok(())
                })
            }))
        })
    }

    fn is_locked<'a>(&'a self, table: &'a TableName) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let (key, _) = self.key(table)?;
            Ok(self.defect != Defect::IsLockedAlwaysFalse
                && self.held.lock().unwrap().contains(&key))
        })
    }

    fn acquire_lock_wait<'a>(
        &'a self,
        table: &'a TableName,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<LockGuard, LockError>> {
        Box::pin(async move {
            match self.defect {
                Defect::WaitGivesUpAtOnce => self.acquire_lock(table).await,
                Defect::WaitGrantsAHeldLock => {
                    let scope = table.scope("memory")?;
                    let (sender, lost) = watch::channel(false);
                    Ok(LockGuard::custom(scope, None, lost, move || {
                        Box::pin(async move {
                            drop(sender);
                            Ok(())
                        })
                    }))
                }
                _ => {
                    // The trait's own waiting form, as a manager without an
                    // override gets it.
                    let deadline = tokio::time::Instant::now() + timeout;
                    loop {
                        match self.acquire_lock(table).await {
                            Err(LockError::Held { .. })
                                if tokio::time::Instant::now() < deadline =>
                            {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            other => return other,
                        }
                    }
                }
            }
        })
    }

    fn name(&self) -> &'static str {
        "in-memory"
    }
}

fn tables() -> (TableName, TableName) {
    (TableName::new("public", "a"), TableName::new("public", "b"))
}

fn assert_fails_with(result: Result<impl std::fmt::Debug, ConformanceError>, sentence: &str) {
    match result {
        Err(error) => assert!(
            error.what.contains(sentence),
            "failed, but not with {sentence:?}: {error}"
        ),
        Ok(value) => panic!("passed a broken lock ({value:?}); expected {sentence:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_lock_passes_every_check() {
    let locks = InMemoryLocks::new(Defect::None);
    let (a, b) = tables();
    collision_is_refused_at_once(&*locks, &a).await.unwrap();
    tables_are_independent_and_is_locked_agrees(&*locks, &a, &b)
        .await
        .unwrap();
    bad_input_is_a_typed_error(&*locks).await.unwrap();
    // Twelve rounds: an in-memory lock answers at once, so which task wins a
    // round is down to the suite's jitter and the scheduler; fewer rounds
    // were sometimes all won by one task (a vacuous race, correctly refused).
    let summary =
        tasks_never_hold_one_table_at_once(locks, &a, 4, 12, Duration::from_millis(2), None)
            .await
            .unwrap();
    assert!(summary.winners >= 2, "{summary:?}");
}

#[tokio::test]
async fn is_locked_that_always_says_no_is_caught() {
    let locks = InMemoryLocks::new(Defect::IsLockedAlwaysFalse);
    let (a, b) = tables();
    assert_fails_with(
        tables_are_independent_and_is_locked_agrees(&*locks, &a, &b).await,
        "is false while held",
    );
}

#[tokio::test]
async fn one_lock_for_every_table_is_caught() {
    let locks = InMemoryLocks::new(Defect::OneLockForAllTables);
    let (a, b) = tables();
    assert_fails_with(
        tables_are_independent_and_is_locked_agrees(&*locks, &a, &b).await,
        "locked public.b too",
    );
}

#[tokio::test]
async fn a_table_already_locked_before_the_check_is_reported_as_such() {
    // Only the first of the two tables is taken beforehand (a guard leaked
    // elsewhere): the check must say so, not trip over it later.
    let locks = InMemoryLocks::new(Defect::None);
    let (a, b) = tables();
    let leaked = locks.acquire_lock(&a).await.unwrap();
    assert_fails_with(
        tables_are_independent_and_is_locked_agrees(&*locks, &a, &b).await,
        "locked before anyone took it",
    );
    leaked.release().await.unwrap();
    let leaked = locks.acquire_lock(&b).await.unwrap();
    assert_fails_with(
        tables_are_independent_and_is_locked_agrees(&*locks, &a, &b).await,
        "locked before anyone took it",
    );
    leaked.release().await.unwrap();
}

#[tokio::test]
async fn a_release_that_keeps_the_lock_is_caught() {
    let locks = InMemoryLocks::new(Defect::ReleaseKeepsLock);
    let (a, b) = tables();
    assert_fails_with(
        tables_are_independent_and_is_locked_agrees(&*locks, &a, &b).await,
        "is true after release",
    );
    let locks = InMemoryLocks::new(Defect::ReleaseKeepsLock);
    assert_fails_with(
        collision_is_refused_at_once(&*locks, &a).await,
        "re-acquire after release",
    );
}

#[tokio::test]
async fn a_lock_that_takes_bad_input_is_caught() {
    let locks = InMemoryLocks::new(Defect::NoValidation);
    assert_fails_with(bad_input_is_a_typed_error(&*locks).await, "not Invalid");
}

#[tokio::test]
async fn a_refusal_that_takes_seconds_is_reported_as_slow_not_as_a_queue() {
    // Slower than the bound, far faster than the wait for a queue (5×).
    let delay = COLLISION_REFUSED_WITHIN + Duration::from_millis(500);
    let locks = InMemoryLocks::new(Defect::SlowRefusal(delay));
    assert_fails_with(
        collision_is_refused_at_once(&*locks, &tables().0).await,
        "to be refused",
    );
}

#[test]
fn a_table_name_reads_schema_dot_table() {
    let table = TableName::new("public", "events");
    assert_eq!(table.to_string(), "public.events");
    assert_eq!(
        table.scope("myapp").unwrap().as_str(),
        "myapp:public.events"
    );
}

#[tokio::test]
async fn a_guard_shows_its_scope_token_and_lost_signal() {
    let locks = InMemoryLocks::new(Defect::None);
    let guard = locks.acquire_lock(&tables().0).await.unwrap();
    let shown = format!("{guard:?}");
    assert!(shown.starts_with("LockGuard"), "{shown}");
    assert!(shown.contains("memory:public.a"), "{shown}");
    assert!(shown.contains("fencing_token: None"), "{shown}");
    assert!(shown.contains("lost: false"), "{shown}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_race_with_a_single_winner_is_vacuous_not_a_pass() {
    // The first holder's release keeps the lock: everyone else is refused
    // for the rest of the race, so mutual exclusion holds trivially.
    let locks = InMemoryLocks::new(Defect::ReleaseKeepsLock);
    let result = tasks_never_hold_one_table_at_once(
        locks,
        &tables().0,
        4,
        3,
        Duration::from_millis(1),
        None,
    )
    .await;
    let history = result
        .as_ref()
        .err()
        .and_then(|error| error.history.clone())
        .expect("a failed race hands back the history it judged");
    assert!(!history.events.is_empty());
    assert_fails_with(result, "vacuous");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_that_both_won_are_enough_winners() {
    // The least race the suite accepts: two tasks, each winning some round.
    let locks = InMemoryLocks::new(Defect::None);
    let summary = tasks_never_hold_one_table_at_once(
        locks,
        &tables().0,
        2,
        24,
        Duration::from_millis(2),
        None,
    )
    .await
    .unwrap();
    assert_eq!(summary.winners, 2);
    assert!(summary.refusals > 0);
    // The history comes back: the one checker passes it, with every hold.
    let report = leaseproof_history::check(&summary.history, &Default::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.grants, summary.holds as u64);
}

#[tokio::test]
async fn a_correct_wait_passes_and_a_broken_one_is_caught() {
    let (a, _) = tables();
    a_waiter_gets_the_lock_after_its_release(InMemoryLocks::new(Defect::None), &a)
        .await
        .unwrap();
    assert_fails_with(
        a_waiter_gets_the_lock_after_its_release(InMemoryLocks::new(Defect::WaitGivesUpAtOnce), &a)
            .await,
        "gave up after",
    );
    assert_fails_with(
        a_waiter_gets_the_lock_after_its_release(
            InMemoryLocks::new(Defect::WaitGrantsAHeldLock),
            &a,
        )
        .await,
        "granted a held lock",
    );
}

#[test]
fn lock_errors_say_whether_the_same_call_may_succeed_again() {
    use leaseproof_locks::LockError;
    let scope = leaseproof_protocol::Scope::new("s").unwrap();
    assert!(LockError::Held {
        scope: scope.clone(),
        holder: None
    }
    .is_retryable());
    assert!(LockError::Unavailable {
        source: "down".into()
    }
    .is_retryable());
    assert!(!LockError::Lost { scope }.is_retryable());
    assert!(!LockError::Backend {
        source: Box::new(leaseproof_locks::TransactionPooling)
    }
    .is_retryable());
}
