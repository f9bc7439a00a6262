//! Fault injection for races: a pause at one step of the worker loop.
//!
//! Goal: stall a holder between its belief check and its commit (the GC pause),
//! or hold a rival back so the scene starts in a known order. Method: a
//! [`leaseproof_worker::Hooks`] that sleeps once, the first time its step comes.
//! Invariant: it pauses at most once per worker, so a run still ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leaseproof_worker::{Hooks, Step};

/// Sleeps `pause` the first time the worker reaches `step`; nothing otherwise.
#[derive(Debug)]
pub struct PauseOnce {
    step: Option<Step>,
    pause: Duration,
    fired: AtomicBool,
}

impl PauseOnce {
    /// Pauses once at `step` for `pause`.
    pub fn at(step: Step, pause: Duration) -> PauseOnce {
        PauseOnce {
            step: Some(step),
            pause,
            fired: AtomicBool::new(false),
        }
    }

    /// Never pauses.
    pub fn never() -> PauseOnce {
        PauseOnce {
            step: None,
            pause: Duration::ZERO,
            fired: AtomicBool::new(false),
        }
    }

    /// True once the pause has happened.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Hooks for PauseOnce {
    async fn before(&self, step: Step) {
        if self.step == Some(step) && !self.fired.swap(true, Ordering::SeqCst) {
            tokio::time::sleep(self.pause).await;
        }
    }
}
