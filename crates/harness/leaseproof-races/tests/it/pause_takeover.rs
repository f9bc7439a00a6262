//! Takeover under a pause: the holder stalls past expiry, a rival takes over.
//!
//! Goal: show the fence is what keeps a stalled holder's writes out, and that
//! the checker catches the damage when it is missing. Method: the library's
//! scene (`leaseproof_races::scenes::pause_takeover`, the shared worker loop)
//! with a 150 ms TTL; the holder pauses 450 ms between its belief check
//! and its commit (the GC pause), the rival starts as that pause begins,
//! waits out the expiry and commits. Fenced, the stale commit is refused; through the
//! test-only unfenced path (`Fencing::Unfenced`) the same scene writes the stale
//! rows after the rival's, and the checker must flag it. A hand-driven scene
//! shows the refused holder's writes, already sent inside its transaction, are
//! rolled back. Invariant: I3 fenced writes (a write lies inside its grant,
//! tokens never go backwards in the table) and I4 (refused writes are absent).

use std::collections::BTreeSet;
use std::time::Duration;

use leaseproof_history::{FailReason, Invariant, Outcome};
use leaseproof_postgres::{sql, HarnessPort};
use leaseproof_protocol::{CyclePoint, Fencing, GuardedCycle, LeasePort as _, NoCycleFaults};
use leaseproof_races::hooks::PauseOnce;
use leaseproof_races::race::{harness_port, judge};
use leaseproof_races::scenes::{pause_takeover, PauseTakeover};
use leaseproof_races::RaceConfig;
use leaseproof_worker::Step;

use crate::support::{commit_op, HeldScene, SceneWorker};

/// The scene's TTL (`PauseTakeover::default()`'s) and the holder's pause.
const TTL_MS: i64 = 150;
const HOLDER_PAUSE_MS: u64 = 450;

struct Scene {
    report: leaseproof_history::CheckReport,
    history: leaseproof_history::History,
    holder_owner: String,
    holder_refused: u32,
    holder_commits: u32,
}

async fn paused_holder_scene(port: &HarnessPort, unfenced: bool) -> Scene {
    let pause = PauseOnce::at(Step::Commit, Duration::from_millis(HOLDER_PAUSE_MS));
    holder_scene(port, unfenced, pause).await
}

/// The library's pause-takeover scene (the rival starts as the holder's
/// pause begins and takes over), the holder paused per `holder_pause`.
async fn holder_scene(port: &HarnessPort, unfenced: bool, holder_pause: PauseOnce) -> Scene {
    let outcome = pause_takeover(
        port,
        PauseTakeover {
            ttl_ms: TTL_MS,
            holder_pause,
            holder_unfenced: unfenced,
            ..PauseTakeover::default()
        },
    )
    .await
    .unwrap();
    assert!(outcome.holder_paused, "the holder was paused");
    eprint!("{}", outcome.report);
    Scene {
        report: outcome.report,
        history: outcome.history,
        holder_owner: outcome.holder_owner.to_string(),
        holder_refused: outcome.holder.commits_refused,
        holder_commits: outcome.holder.commits,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_holder_commit_is_refused_after_takeover() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let port = harness_port(&database.url, &RaceConfig::default())
        .await
        .unwrap();
    let scene = paused_holder_scene(&port, false).await;
    assert!(scene.report.is_ok(), "{}", scene.report);
    assert_eq!(scene.holder_refused, 1, "the stale commit was refused");
    assert_eq!(scene.report.stats.refused_stale_commits, 1);
    assert!(scene.report.stats.takeovers >= 1, "the rival took over");
    // The holder believed it held while the rival did: the fence was needed.
    assert!(scene.report.stats.belief_overlaps >= 1);
    // Negative space: no row carries the holder's first (stale) token.
    let holder_rows: Vec<_> = scene
        .history
        .guarded_rows
        .iter()
        .filter(|row| row.owner == scene.holder_owner)
        .collect();
    assert!(
        holder_rows.iter().all(|row| row.token > 1),
        "{holder_rows:?}"
    );
    // Tokens never go backwards in commit order.
    let tokens: Vec<u64> = scene
        .history
        .guarded_rows
        .iter()
        .map(|row| row.token)
        .collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] <= pair[1]),
        "{tokens:?}"
    );
    assert!(scene
        .history
        .guarded_rows
        .iter()
        .any(|row| row.owner != scene.holder_owner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfenced_stale_holder_corrupts_the_table_and_the_checker_flags_it() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let port = harness_port(&database.url, &RaceConfig::default())
        .await
        .unwrap();
    let scene = paused_holder_scene(&port, true).await;
    assert_eq!(
        scene.holder_refused, 0,
        "nothing refuses an unfenced commit"
    );
    assert_eq!(scene.holder_commits, 1);
    // The table is corrupted: the stale token-1 rows follow the rival's token-2 rows.
    let tokens: Vec<u64> = scene
        .history
        .guarded_rows
        .iter()
        .map(|row| row.token)
        .collect();
    assert!(
        tokens.windows(2).any(|pair| pair[0] > pair[1]),
        "the stale rows come after the rival's: {tokens:?}"
    );
    assert!(!scene.report.is_ok());
    assert!(
        !scene
            .report
            .violations_of(Invariant::FencedWrites)
            .is_empty(),
        "{}",
        scene.report
    );
    assert!(
        !scene
            .report
            .violations_of(Invariant::BeliefOverlap)
            .is_empty(),
        "{}",
        scene.report
    );
    // Nothing else is wrong: grants stayed exclusive and ordered.
    assert!(scene
        .report
        .violations_of(Invariant::MutualExclusion)
        .is_empty());
    assert!(scene.report.violations_of(Invariant::TokenOrder).is_empty());
}

/// Tokens of the guarded rows in commit order.
fn row_tokens(scene: &Scene) -> Vec<u64> {
    scene
        .history
        .guarded_rows
        .iter()
        .map(|row| row.token)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_inside_the_cycle_is_covered_by_the_fence_until_commit() {
    // The holder pauses past its expiry at each point inside the library's
    // `commit_cycle` in turn — after the fence, after the writes — with its
    // row lock held. The rival's takeover must queue behind the commit: the
    // stale-looking commit is legitimate (nobody else held), and the rival's
    // rows follow it in token order.
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let port = harness_port(&database.url, &RaceConfig::default())
        .await
        .unwrap();
    for point in [CyclePoint::Fenced, CyclePoint::Written] {
        let pause = PauseOnce::inside_cycle(point, Duration::from_millis(HOLDER_PAUSE_MS));
        let scene = holder_scene(&port, false, pause).await;
        assert!(scene.report.is_ok(), "{point:?}: {}", scene.report);
        assert_eq!(
            scene.holder_commits, 1,
            "{point:?}: the paused cycle committed"
        );
        assert_eq!(scene.holder_refused, 0, "{point:?}");
        assert!(
            scene.report.stats.takeovers >= 1,
            "{point:?}: the rival took over"
        );
        let tokens = row_tokens(&scene);
        assert!(
            tokens.windows(2).all(|pair| pair[0] <= pair[1]),
            "{point:?}: {tokens:?}"
        );
        assert!(
            tokens.first() < tokens.last(),
            "{point:?}: the holder's rows, then the rival's: {tokens:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_pause_inside_the_cycle_lands_stale_rows_and_is_flagged() {
    // The negative control of the test above: without the fence nothing
    // holds the row during the pause, the rival takes over and commits, and
    // the holder's rows land after the rival's. Paused after its writes, the
    // holder's rows keep their early `seq` and `written_at`: only their
    // commit time (`track_commit_timestamp`, on in the throwaway cluster)
    // convicts them.
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let port = harness_port(&database.url, &RaceConfig::default())
        .await
        .unwrap();
    for point in [CyclePoint::Fenced, CyclePoint::Written] {
        let pause = PauseOnce::inside_cycle(point, Duration::from_millis(HOLDER_PAUSE_MS));
        let scene = holder_scene(&port, true, pause).await;
        let rows = &scene.history.guarded_rows;
        assert!(
            rows.iter().all(|row| row.committed_at_us.is_some()),
            "{point:?}: the throwaway cluster tracks commit timestamps"
        );
        let stale_committed_last = rows
            .iter()
            .max_by_key(|row| (row.committed_at_us, row.seq))
            .is_some_and(|row| row.owner == scene.holder_owner);
        assert!(
            stale_committed_last,
            "{point:?}: the stale rows commit after the rival's: {rows:?}"
        );
        assert!(
            !scene
                .report
                .violations_of(Invariant::FencedWrites)
                .is_empty(),
            "{point:?}: {}",
            scene.report
        );
        assert!(scene
            .report
            .violations_of(Invariant::MutualExclusion)
            .is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_holder_writes_inside_its_transaction_are_rolled_back() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let HeldScene {
        port,
        scope_name,
        scope,
        ttl,
        recorder,
        clock,
        holder_owner,
        rival_owner,
        lease: stale,
    } = HeldScene::start(&database.url, "rollback", TTL_MS).await;
    let leases = &port.leases;
    let (holder, rival) = SceneWorker::pair(&recorder, clock);

    // The holder writes first and fences last, inside one transaction.
    let commit = holder.invoke(commit_op(&stale, 1, 3));
    let mut transaction = leases.begin().await.unwrap();
    let written: Vec<i64> = sqlx::query_scalar(sql::INSERT_GUARDED)
        .bind(scope.as_str())
        .bind(holder_owner.as_str())
        .bind(stale.token().0)
        .bind(1_i64)
        .bind(3_i32)
        .fetch_all(transaction.connection())
        .await
        .unwrap();
    assert_eq!(written.len(), 3);

    // The stall: the grant expires, the rival takes over and commits.
    tokio::time::sleep(Duration::from_millis(u64::try_from(TTL_MS).unwrap() + 100)).await;
    let op = rival.invoke(SceneWorker::acquire_op(
        &scope_name,
        rival_owner.as_str(),
        ttl.as_micros(),
    ));
    let taken = leases.acquire_lease(&scope, &rival_owner, ttl).await;
    rival.complete_acquire(op, &taken);
    let current = taken.unwrap();
    assert_eq!(
        current.token(),
        stale.token().next(),
        "a takeover gets the next token"
    );
    rival.belief(&current, true);
    let op = rival.invoke(commit_op(&current, 1, 2));
    let receipt = port
        .commit(
            &current,
            GuardedCycle {
                cycle_id: 1,
                items: 2,
            },
            Fencing::Fenced,
            &NoCycleFaults,
        )
        .await
        .unwrap();
    rival.complete(
        op,
        Outcome::Ok {
            result: leaseproof_history::OpResult::Committed {
                committed_at_us: receipt.fenced_at.map(|fenced_at| fenced_at.micros),
            },
        },
    );

    // The holder wakes, fences: refused; its writes roll back with the transaction.
    let fenced = leases.fence(&mut transaction, &stale).await.unwrap();
    assert_eq!(fenced, None, "the fence refuses the stale token");
    transaction.rollback().await.unwrap();
    holder.complete(
        commit,
        Outcome::Fail {
            reason: FailReason::Stale,
        },
    );
    holder.belief(&stale, false);

    let (history, report) = judge(&port, &scope_name, &recorder, BTreeSet::new())
        .await
        .unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.stats.refused_stale_commits, 1);
    assert_eq!(report.stats.takeovers, 1);
    assert_eq!(history.guarded_rows.len(), 2, "only the rival's rows exist");
    assert!(history
        .guarded_rows
        .iter()
        .all(|row| row.owner == rival_owner.as_str() && row.token == 2));
}
