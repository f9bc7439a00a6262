//! The crate's only wall clock: measuring how fast sweeps run, and the one
//! draw of a random seed base (`sim --seeds random:N`).
//!
//! Goal: report simulated seconds per wall second; pick a fresh place in the
//! seed space to sweep. Method: `std::time::Instant`, read only here and only
//! around whole runs; the base is drawn from the wall clock and the process
//! id, printed before the sweep starts, and from then on the sweep is
//! replayable from it exactly (`--seeds a..b`). Nothing here reaches a
//! simulation, so determinism is unaffected. The tidy test exempts this file
//! alone.

use std::time::{Duration, Instant};

/// A started stopwatch.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    started: Instant,
}

impl Stopwatch {
    /// Starts measuring.
    pub fn start() -> Stopwatch {
        Stopwatch {
            started: Instant::now(),
        }
    }

    /// Wall time since the start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A base seed from the wall clock and the process id, for `--seeds random:N`:
/// different on every call in practice, and printed by the caller so the
/// sweep can be replayed. Kept below 2^48 so `base + N` cannot overflow.
pub fn random_seed_base() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.finish() >> 16
}
