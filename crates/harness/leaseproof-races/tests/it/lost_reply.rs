//! Ambiguous outcome: the reply to an acquisition is lost after the server committed it.
//!
//! Goal: show the worker treats a lost reply as unknown (not as a failure), that
//! its retry with the same owner is idempotent, and that the history stays
//! valid. Method: a loopback TCP proxy ([`LostReplyProxy`]) between the
//! worker's pool and the server; armed just before the worker's first
//! acquisition, it forwards the statement, drops the server's reply once the
//! statement completed and closes the connection. Before the retry the test
//! reads the lease row directly: the lost acquisition did commit. A rival on
//! its own pool races for the same scope meanwhile. Invariant: the acquisition
//! is recorded unknown; the retry returns the same token (1), not the next;
//! the checker finds no violation.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leaseproof_history::{EventKind, FailReason, Invariant, OpResult, Outcome, Recorder};
use leaseproof_postgres::{HarnessPort, PostgresLeases};
use leaseproof_protocol::semantics::LeaseRow;
use leaseproof_protocol::{LeasePort as _, Owner, Scope};
use leaseproof_races::clock::RunClock;
use leaseproof_races::hooks::PauseOnce;
use leaseproof_races::proxy::LostReplyProxy;
use leaseproof_races::race::{connect_pool_with, harness_port, judge, unique_scope};
use leaseproof_races::RaceConfig;
use leaseproof_worker::{run_worker, Hooks, Step};

const RIVAL_DELAY_MS: u64 = 150;

/// Arms the proxy before the first acquisition; before the second, reads the
/// lease row on a direct connection to see what the lost one did.
struct LoseFirstAcquisitionReply {
    proxy: Arc<LostReplyProxy>,
    direct: PostgresLeases,
    scope: Scope,
    acquisitions: AtomicU32,
    row_before_retry: Mutex<Option<LeaseRow>>,
}

impl Hooks for LoseFirstAcquisitionReply {
    async fn before(&self, step: Step) {
        if step != Step::Acquire {
            return;
        }
        match self.acquisitions.fetch_add(1, Ordering::SeqCst) {
            0 => self.proxy.arm(),
            1 => {
                let row = self.direct.row(&self.scope).await.unwrap();
                *self.row_before_retry.lock().unwrap() = row;
            }
            _ => {}
        }
    }
}

/// A lossy proxy in front of the server at `url` and a lease port (pool of
/// `connections`) whose traffic goes through it; `None` (after the skip line,
/// or a panic under `LEASEPROOF_REQUIRE_PG`) for a server that is not on
/// loopback — the proxy relays loopback traffic only.
async fn proxied_port(url: &str, connections: u32) -> Option<(Arc<LostReplyProxy>, HarnessPort)> {
    let (proxy, through_proxy) = match LostReplyProxy::in_front_of(url).await {
        Ok(proxy) => proxy,
        Err(error) if std::env::var_os("DATABASE_URL").is_some() => {
            let reason = format!("lost-reply proxy needs a loopback server: {error}");
            leaseproof_pgcluster::skip_or_panic(
                &leaseproof_pgcluster::PgUnavailable { reason },
                leaseproof_pgcluster::require_pg(),
            );
            return None;
        }
        Err(error) => panic!("starting the proxy: {error}"),
    };
    let pool = connect_pool_with(through_proxy, connections, Duration::from_secs(5))
        .await
        .unwrap();
    Some((Arc::new(proxy), HarnessPort::new(PostgresLeases::new(pool))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acquisition_reply_is_unknown_and_the_retry_is_idempotent() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let race = RaceConfig {
        ttl_ms: 300,
        ..RaceConfig::default()
    };
    let direct = harness_port(&database.url, &race).await.unwrap();
    direct.ensure_schema().await.unwrap();
    let Some((proxy, proxied)) = proxied_port(&database.url, 1).await else {
        return;
    };

    let scope_name = unique_scope("lost-reply");
    let scope = Scope::new(scope_name.clone()).unwrap();
    let owner = Owner::generate();
    let mut worker = race
        .worker_config("proxied".into(), owner.clone(), scope.clone(), 10_000_000)
        .unwrap();
    worker.cycles = 3;
    worker.cycles_per_grant = 3;
    let mut rival = race
        .worker_config("rival".into(), Owner::generate(), scope.clone(), 10_000_000)
        .unwrap();
    rival.cycles = 2;
    let hooks = LoseFirstAcquisitionReply {
        proxy: Arc::clone(&proxy),
        direct: direct.leases.clone(),
        scope: scope.clone(),
        acquisitions: AtomicU32::new(0),
        row_before_retry: Mutex::new(None),
    };
    // The rival starts once the proxied worker holds the scope: a refusal's
    // reply lost instead would prove nothing about a committed acquisition.
    let rival_hooks = PauseOnce::at(Step::Acquire, Duration::from_millis(RIVAL_DELAY_MS));
    let recorder = Recorder::new();
    let clock = RunClock::start();
    let (summary, rival_summary) = tokio::join!(
        run_worker(&proxied, &worker, &clock, &hooks, &recorder),
        run_worker(&direct, &rival, &clock, &rival_hooks, &recorder),
    );

    assert_eq!(proxy.replies_dropped(), 1, "exactly one reply was lost");
    assert_eq!(summary.unknown, 1, "the lost reply is an unknown outcome");
    assert_eq!(summary.commits, 3);
    assert_eq!(rival_summary.commits, 2);
    // The lost acquisition committed: the row was ours before we retried.
    let row = hooks
        .row_before_retry
        .lock()
        .unwrap()
        .clone()
        .expect("the lost acquisition created the row");
    assert_eq!(row.owner, owner);
    assert_eq!(row.token.0, 1);

    let (history, report) = judge(&direct, &scope_name, &recorder, Default::default())
        .await
        .unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.unknown_ops, 1);
    assert!(report.stats.takeovers >= 1, "the rival raced for real");
    // The retry right after the unknown outcome got the same token and grant.
    let proxied_outcomes: Vec<&Outcome> = history
        .events
        .iter()
        .filter(|event| event.worker == "proxied")
        .filter_map(|event| match &event.kind {
            EventKind::Complete { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect();
    assert!(
        matches!(proxied_outcomes[0], Outcome::Unknown { .. }),
        "{proxied_outcomes:?}"
    );
    let Outcome::Ok {
        result:
            OpResult::Lease {
                token,
                granted_at_us,
                ..
            },
    } = proxied_outcomes[1]
    else {
        panic!("the retry succeeded: {proxied_outcomes:?}");
    };
    assert_eq!(*token, 1, "idempotent: same token, not the next");
    assert_eq!(
        *granted_at_us, row.granted_at.micros,
        "idempotent: same grant"
    );
}

/// Loses the reply of the first guarded transaction's `COMMIT`.
struct LoseFirstCommitReply {
    proxy: Arc<LostReplyProxy>,
    commits: AtomicU32,
}

impl Hooks for LoseFirstCommitReply {
    async fn before(&self, step: Step) {
        if step == Step::Commit && self.commits.fetch_add(1, Ordering::SeqCst) == 0 {
            self.proxy.arm_commit();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_commit_reply_is_unknown_and_the_committed_rows_are_allowed() {
    // The library's commit cycle sends COMMIT, the server commits, the reply
    // is lost: the cycle's outcome is unknown (Jepsen's `info`), its rows are
    // in the table, and the checker accepts either. Had the library called
    // it a failure — the same history with the outcome turned into `Fail` —
    // the rows would convict it (I4).
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let race = RaceConfig::default();
    let direct = harness_port(&database.url, &race).await.unwrap();
    direct.ensure_schema().await.unwrap();
    let Some((proxy, proxied)) = proxied_port(&database.url, 2).await else {
        return;
    };
    let scope_name = unique_scope("lost-commit");
    let scope = Scope::new(scope_name.clone()).unwrap();
    let mut worker = race
        .worker_config("proxied".into(), Owner::generate(), scope, 10_000_000)
        .unwrap();
    worker.cycles = 2;
    worker.cycles_per_grant = 3;
    let hooks = LoseFirstCommitReply {
        proxy: Arc::clone(&proxy),
        commits: AtomicU32::new(0),
    };
    let recorder = Recorder::new();
    let summary = run_worker(&proxied, &worker, &RunClock::start(), &hooks, &recorder).await;

    assert_eq!(proxy.replies_dropped(), 1, "exactly one reply was lost");
    assert_eq!(
        summary.unknown, 1,
        "the lost COMMIT reply is unknown: {summary:?}"
    );
    assert_eq!(summary.errors, 0, "{summary:?}");
    assert_eq!(summary.commits, 2, "{summary:?}");
    let (history, report) = judge(&direct, &scope_name, &recorder, Default::default())
        .await
        .unwrap();
    assert!(report.is_ok(), "{report}");
    // The unknown cycle committed: three cycles' rows are in the table.
    let cycles: std::collections::BTreeSet<u64> = history
        .guarded_rows
        .iter()
        .map(|row| row.cycle_id)
        .collect();
    assert_eq!(cycles.len(), 3, "{:?}", history.guarded_rows);

    // Negative control: the library reporting the lost COMMIT as a failure.
    let mut misreported = history.clone();
    let mut turned = 0;
    for event in &mut misreported.events {
        if let EventKind::Complete { outcome, .. } = &mut event.kind {
            if matches!(outcome, Outcome::Unknown { .. }) {
                *outcome = Outcome::Fail {
                    reason: FailReason::Error("commit failed".into()),
                };
                turned += 1;
            }
        }
    }
    assert_eq!(turned, 1);
    let misjudged = leaseproof_history::check(&misreported, &Default::default());
    assert!(
        !misjudged.violations_of(Invariant::NothingLost).is_empty(),
        "{misjudged}"
    );
}
