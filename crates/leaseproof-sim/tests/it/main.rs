//! leaseproof-sim's integration tests: one binary, a module per topic.
//!
//! Seeds: every scenario sweeps `0..200` by default; `LEASEPROOF_SEEDS=n`
//! sweeps `0..n`, `LEASEPROOF_SEED=s` runs the one seed `s`.

mod determinism;
mod fence_lock;
mod regressions;
mod replay;
mod scenarios;
mod sweeps;
mod teeth;
mod tidy;

use std::ops::Range;

/// The seeds the sweeps run, from the environment (see the module docs).
pub fn seeds() -> Range<u64> {
    if let Ok(seed) = std::env::var("LEASEPROOF_SEED") {
        let seed: u64 = seed.parse().expect("LEASEPROOF_SEED is a number");
        return seed..seed + 1;
    }
    let count: u64 = std::env::var("LEASEPROOF_SEEDS").ok().map_or(200, |count| {
        count.parse().expect("LEASEPROOF_SEEDS is a number")
    });
    0..count
}
