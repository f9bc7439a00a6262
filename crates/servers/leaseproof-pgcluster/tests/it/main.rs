//! Integration tests of leaseproof-pgcluster against real PostgreSQL servers.
//!
//! Goal: show that the shared and dedicated clusters start (as root through the
//! `postgres` user here), hand out distinct usable databases, survive restarts
//! as documented and leave nothing behind.
//! Method: one binary, a module per topic; every test gets its server through the
//! crate's own API, so on a machine without PostgreSQL they print the skip line.
//! Invariant checked: no server process and no temp dir outlive their owner.

mod dedicated;
mod shared;
mod source;
mod throwaway_child;
mod watchdog;

use std::time::{Duration, Instant};

/// Polls `condition` every 50 ms until it holds or `timeout_ms` passes.
pub fn eventually(timeout_ms: u64, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
