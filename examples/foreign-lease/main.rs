//! Point leaseproof at a lock written elsewhere: race the foreign lease of
//! `design.rs` on a real server and let the one checker judge it.
//!
//! ```sh
//! cargo run -p leaseproof-races --example foreign-lease            # the correct fence
//! cargo run -p leaseproof-races --example foreign-lease -- check-only   # the broken one
//! ```
//!
//! Uses `DATABASE_URL`, else a throwaway cluster from the system's binaries.
//! One worker pauses after its writes, before `COMMIT`, for three TTLs; the
//! others race on. With `FOR UPDATE` the verdict is clean; with a check that
//! takes no lock the paused worker's rows commit under a rival's grant and
//! the checker says so (I3, from the rows' commit times).

mod design;

use std::process::ExitCode;
use std::time::Duration;

use design::{Fence, ForeignLease};
use leaseproof_protocol::CyclePoint;
use leaseproof_races::hooks::PauseOnce;
use leaseproof_races::race::{connect_pool, task_race_on};
use leaseproof_races::RaceConfig;

#[tokio::main]
async fn main() -> ExitCode {
    let fence = match std::env::args().nth(1).as_deref() {
        None | Some("for-update") => Fence::ForUpdate,
        Some("check-only") => Fence::CheckOnly,
        Some(other) => {
            eprintln!("unknown fence {other:?}: for-update or check-only");
            return ExitCode::from(2);
        }
    };
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        eprintln!("no PostgreSQL: set DATABASE_URL or install its binaries");
        return ExitCode::from(2);
    };
    let config = RaceConfig::default();
    let pool = connect_pool(
        &database.url,
        config.pool_size(),
        Duration::from_millis(config.acquire_timeout_ms),
    )
    .await
    .expect("a pool");
    let subject = ForeignLease::new(pool, fence);
    let ttl = Duration::from_millis(u64::try_from(config.ttl_ms).unwrap_or(150));
    let outcome = task_race_on(&subject, &config, |worker| match worker {
        0 => PauseOnce::inside_cycle(CyclePoint::Written, ttl * 3),
        _ => PauseOnce::never(),
    })
    .await
    .expect("the race runs");
    print!("{}", outcome.report);
    if outcome.report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
