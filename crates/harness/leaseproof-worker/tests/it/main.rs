//! The worker loop on its own, against a stub port with scripted replies and
//! tokio's paused clock, so every instant is exact.
//!
//! Goal: pin the local rules the simulation and the races rely on but cannot
//! see directly — above all the belief deadline, which must be measured from
//! the moment the acquisition was *sent*, on the worker's own clock. A longer
//! belief is invisible to fenced runs (the fence saves them) and only
//! statistically visible to unfenced ones, so it gets an exact test here —
//! and the whole record of scripted runs (`script.rs`), snapshot as data.

mod deadline;
mod script;

use leaseproof_worker::Clocks;

/// True and local time are both tokio's (paused) clock since the start.
#[derive(Debug)]
pub struct PausedClocks {
    pub start: tokio::time::Instant,
}

impl Clocks for PausedClocks {
    fn true_now_us(&self) -> i64 {
        self.start.elapsed().as_micros() as i64
    }
    fn local_now_us(&self) -> i64 {
        self.true_now_us()
    }
}
