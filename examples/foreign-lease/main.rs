//! Point leaseproof at a lock written elsewhere: race the foreign lease of
//! `design.rs` on a real server and let the one checker judge it.
//!
//! ```sh
//! cargo run -p leaseproof-races --example foreign-lease                # the correct fence
//! cargo run -p leaseproof-races --example foreign-lease -- check-only  # the broken one
//! cargo run -p leaseproof-races --example foreign-lease -- app-clock   # ShedLock style, clocks in step
//! cargo run -p leaseproof-races --example foreign-lease -- app-clock-skewed  # clocks 1 s apart: I1
//! ```
//!
//! Uses `DATABASE_URL`, else a throwaway cluster from the system's binaries.
//! One worker pauses after its writes, before `COMMIT`, for three TTLs; the
//! others race on. With `FOR UPDATE` the verdict is clean; with a check that
//! takes no lock the paused worker's rows commit under a rival's grant and
//! the checker says so (I3, from the rows' commit times).

mod app_clock;
mod common;
mod design;

use std::process::ExitCode;
use std::time::Duration;

use design::{Fence, ForeignLease};
use leaseproof_protocol::CyclePoint;
use leaseproof_races::hooks::{PauseOnce, Signal};
use leaseproof_races::race::{connect_pool, task_race_on, RaceSubject};
use leaseproof_races::RaceConfig;
use sqlx::PgPool;

#[tokio::main]
async fn main() -> ExitCode {
    let mode = std::env::args().nth(1);
    let fence = match mode.as_deref() {
        None | Some("for-update") => Some(Fence::ForUpdate),
        Some("check-only") => Some(Fence::CheckOnly),
        Some("app-clock" | "app-clock-skewed") => None,
        Some(other) => {
            eprintln!(
                "unknown mode {other:?}: for-update, check-only, app-clock or app-clock-skewed"
            );
            return ExitCode::from(2);
        }
    };
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        eprintln!("no PostgreSQL: set DATABASE_URL or install its binaries");
        return ExitCode::from(2);
    };
    let Some(fence) = fence else {
        let skewed = mode.as_deref() == Some("app-clock-skewed");
        return app_clock_race(&database.url, skewed).await;
    };
    let config = RaceConfig::default();
    let ttl = Duration::from_millis(u64::try_from(config.ttl_ms).unwrap_or(150));
    let worker_0_paused = Signal::new();
    race(
        &database.url,
        &config,
        |pool| ForeignLease::new(pool, fence),
        // Worker 0 acquires alone; the others start as its pause begins, so
        // one of them takes over while it is paused.
        |worker| match worker {
            0 => PauseOnce::inside_cycle(CyclePoint::Written, ttl * 3).giving(&worker_0_paused),
            _ => PauseOnce::until(
                leaseproof_worker::Step::Acquire,
                &worker_0_paused,
                Duration::from_secs(5),
            ),
        },
    )
    .await
}

/// The ShedLock-style lock: no fence (the workers run unfenced), times from
/// each worker's own clock; `skewed` puts the clocks up to a second apart.
async fn app_clock_race(url: &str, skewed: bool) -> ExitCode {
    let config = RaceConfig {
        ttl_ms: 500,
        work_ms: 50,
        rounds: 4,
        unfenced: true,
        clock_offset_ms_max: if skewed { 1_000 } else { 0 },
        ..RaceConfig::default()
    };
    let workers = config.workers;
    race(url, &config, app_clock::AppClockLock::new, |worker| {
        if worker >= workers / 2 {
            PauseOnce::at(leaseproof_worker::Step::Acquire, Duration::from_millis(300))
        } else {
            PauseOnce::never()
        }
    })
    .await
}

/// Races `subject` over a pool of its own and prints the checker's report:
/// success only when the report is clean.
async fn race<S: RaceSubject>(
    url: &str,
    config: &RaceConfig,
    subject: impl FnOnce(PgPool) -> S,
    pause: impl Fn(usize) -> PauseOnce,
) -> ExitCode {
    let pool = connect_pool(
        url,
        config.pool_size(),
        Duration::from_millis(config.acquire_timeout_ms),
    )
    .await
    .expect("a pool");
    let outcome = task_race_on(&subject(pool), config, pause)
        .await
        .expect("the race runs");
    print!("{}", outcome.report);
    if outcome.report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
