//! Fault injection for races: a pause at one step of the worker loop, or at
//! one point inside the commit cycle.
//!
//! Goal: stall a holder between its belief check and its commit (the GC pause),
//! inside its commit cycle (after the fence, or before `COMMIT`: the stretch
//! the fence's row lock must cover), or hold a rival back so the scene starts
//! in a known order. Method: a [`leaseproof_worker::Hooks`] that sleeps once,
//! the first time its place comes.
//! Invariant: it pauses at most once per worker, so a run still ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leaseproof_protocol::{CycleFault, CyclePoint};
use leaseproof_worker::{Hooks, Step};

/// Where a [`PauseOnce`] pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Loop(Step),
    Cycle(CyclePoint),
}

/// Sleeps `pause` the first time the worker reaches its place; nothing otherwise.
#[derive(Debug)]
pub struct PauseOnce {
    place: Option<Place>,
    pause: Duration,
    fired: AtomicBool,
}

impl PauseOnce {
    /// Pauses once at `step` for `pause`.
    pub fn at(step: Step, pause: Duration) -> PauseOnce {
        PauseOnce::new(Some(Place::Loop(step)), pause)
    }

    /// Pauses once at `point` of a commit cycle for `pause` (the first cycle
    /// that draws it: a port draws its cycle's faults when the cycle starts).
    pub fn inside_cycle(point: CyclePoint, pause: Duration) -> PauseOnce {
        PauseOnce::new(Some(Place::Cycle(point)), pause)
    }

    /// Never pauses.
    pub fn never() -> PauseOnce {
        PauseOnce::new(None, Duration::ZERO)
    }

    fn new(place: Option<Place>, pause: Duration) -> PauseOnce {
        PauseOnce {
            place,
            pause,
            fired: AtomicBool::new(false),
        }
    }

    fn fires_at(&self, place: Place) -> bool {
        self.place == Some(place) && !self.fired.swap(true, Ordering::SeqCst)
    }

    /// True once the pause has happened.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Hooks for PauseOnce {
    async fn before(&self, step: Step) {
        if self.fires_at(Place::Loop(step)) {
            tokio::time::sleep(self.pause).await;
        }
    }

    fn inside_cycle(&self, point: CyclePoint) -> CycleFault {
        let pause = self.fires_at(Place::Cycle(point)).then_some(self.pause);
        Box::pin(async move {
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
        })
    }
}
