//! The crate's only wall clock: measuring how fast sweeps run.
//!
//! Goal: report simulated seconds per wall second. Method: `std::time::Instant`,
//! read only here and only around whole runs; nothing it returns reaches a
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
