//! Clocks for real-server races.
//!
//! Goal: give every worker of a run one common time axis for ordering the
//! history. Method: in one process, µs since the run's start `Instant`
//! (monotonic); across processes, µs since an agreed Unix-epoch instant read
//! from the system clock (the only clock processes share), which only orders
//! events and never enters a verdict — verdicts use the server's times.
//! Invariant: true time equals local time here; no skew is injected (the
//! simulation does that).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use leaseproof_worker::Clocks;

/// Monotonic µs since the run started; true = local.
#[derive(Clone, Copy, Debug)]
pub struct RunClock {
    start: Instant,
}

impl RunClock {
    /// A clock whose zero is now.
    pub fn start() -> RunClock {
        RunClock {
            start: Instant::now(),
        }
    }

    /// µs since the run started.
    pub fn elapsed_us(&self) -> i64 {
        i64::try_from(self.start.elapsed().as_micros()).expect("a run lasts less than 292k years")
    }
}

impl Clocks for RunClock {
    fn true_now_us(&self) -> i64 {
        self.elapsed_us()
    }

    fn local_now_us(&self) -> i64 {
        self.elapsed_us()
    }
}

/// µs since an agreed instant of the system clock, for workers in several
/// processes; true = local.
#[derive(Clone, Copy, Debug)]
pub struct EpochClock {
    /// The run's zero, in µs since the Unix epoch.
    pub epoch_unix_us: i64,
}

/// The system clock in µs since the Unix epoch.
pub fn unix_now_us() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the system clock is after 1970");
    i64::try_from(since_epoch.as_micros()).expect("µs since 1970 fit i64")
}

impl Clocks for EpochClock {
    fn true_now_us(&self) -> i64 {
        unix_now_us() - self.epoch_unix_us
    }

    fn local_now_us(&self) -> i64 {
        unix_now_us() - self.epoch_unix_us
    }
}
