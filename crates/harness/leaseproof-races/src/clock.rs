//! Clocks for real-server races.
//!
//! Goal: give every worker of a run one common time axis for ordering the
//! history. Method: in one process, µs since the run's start `Instant`
//! (monotonic); across processes, µs since an agreed Unix-epoch instant read
//! from the system clock (the only clock processes share), which only orders
//! events and never enters a verdict — verdicts use the server's times.
//! Invariant: true time equals the run's clock; a worker's *local* clock is
//! that time unless a [`SkewedClock`] offsets and drifts it (the simulation's
//! `LocalClock` rule), which moves the worker's belief deadline and any
//! client-side time a lock under test reads from it, never a verdict.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use leaseproof_worker::Clocks;

/// Monotonic µs since the run started; true = local.
#[derive(Clone, Copy, Debug)]
pub struct RunClock {
    start: Instant,
    /// The system clock's reading at `start`, µs since the Unix epoch.
    start_unix_us: i64,
}

impl RunClock {
    /// A clock whose zero is now.
    pub fn start() -> RunClock {
        RunClock {
            start: Instant::now(),
            start_unix_us: unix_now_us(),
        }
    }

    /// µs since the run started.
    pub fn elapsed_us(&self) -> i64 {
        i64::try_from(self.start.elapsed().as_micros()).expect("a run lasts less than 292k years")
    }

    /// The system clock's reading when the run started, µs since the Unix
    /// epoch: the base of a wall-clock reading taken on this clock.
    pub fn start_unix_us(&self) -> i64 {
        self.start_unix_us
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

/// How one worker's local clock departs from the run's: `local = true +
/// offset_us + true * drift_ppm / 10^6` (the simulation's rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClockSkew {
    /// Constant offset, µs.
    pub offset_us: i64,
    /// Rate error, parts per million (100000 = 10 % fast).
    pub drift_ppm: i64,
}

impl ClockSkew {
    /// The local reading at true time `true_us`.
    pub fn local_at(&self, true_us: i64) -> i64 {
        let drift_us = i64::try_from(i128::from(true_us) * i128::from(self.drift_ppm) / 1_000_000)
            .unwrap_or(i64::MAX);
        true_us
            .saturating_add(self.offset_us)
            .saturating_add(drift_us)
    }
}

/// The run's clock as one worker reads it: true time unchanged, local time
/// skewed.
#[derive(Clone, Copy, Debug)]
pub struct SkewedClock {
    /// The run's common clock.
    pub run: RunClock,
    /// This worker's skew.
    pub skew: ClockSkew,
}

impl SkewedClock {
    /// This worker's clock as a wall clock, µs since the Unix epoch: the
    /// run's start on the system clock plus the worker's skewed reading — what
    /// an application that takes time from its host would read (a lock on the
    /// application's clock stamps this).
    pub fn local_unix_us(&self) -> i64 {
        self.run.start_unix_us() + self.local_now_us()
    }
}

impl Clocks for SkewedClock {
    fn true_now_us(&self) -> i64 {
        self.run.elapsed_us()
    }

    fn local_now_us(&self) -> i64 {
        self.skew.local_at(self.run.elapsed_us())
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
