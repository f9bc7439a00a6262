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
use std::sync::Arc;
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
    /// The place came and the pause was claimed (it may not have begun).
    drawn: AtomicBool,
    /// The pause was slept to its end (a dropped cycle never finishes it).
    slept: Arc<AtomicBool>,
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
            drawn: AtomicBool::new(false),
            slept: Arc::new(AtomicBool::new(false)),
        }
    }

    fn fires_at(&self, place: Place) -> bool {
        self.place == Some(place) && !self.drawn.swap(true, Ordering::SeqCst)
    }

    /// True once the pause has been slept to its end: the worker really
    /// stalled that long (a cycle dropped mid-pause does not count).
    pub fn fired(&self) -> bool {
        self.slept.load(Ordering::SeqCst)
    }

    /// True once the worker reached the place and claimed the pause, whether
    /// or not the pause then ran to its end.
    pub fn drawn(&self) -> bool {
        self.drawn.load(Ordering::SeqCst)
    }
}

impl Hooks for PauseOnce {
    async fn before(&self, step: Step) {
        if self.fires_at(Place::Loop(step)) {
            tokio::time::sleep(self.pause).await;
            self.slept.store(true, Ordering::SeqCst);
        }
    }

    fn inside_cycle(&self, point: CyclePoint) -> CycleFault {
        let pause = self.fires_at(Place::Cycle(point)).then_some(self.pause);
        let slept = Arc::clone(&self.slept);
        Box::pin(async move {
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
                slept.store(true, Ordering::SeqCst);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn fired_means_slept_to_the_end_not_drawn() {
        let hooks = PauseOnce::inside_cycle(CyclePoint::Written, Duration::from_secs(5));
        let fault = hooks.inside_cycle(CyclePoint::Written);
        assert!(hooks.drawn() && !hooks.fired());
        // The cycle is dropped mid-pause (its transaction died): no stall.
        drop(fault);
        assert!(!hooks.fired());
        // Drawn once only: the next cycle runs without a pause.
        let started = tokio::time::Instant::now();
        hooks.inside_cycle(CyclePoint::Written).await;
        assert_eq!(started.elapsed(), Duration::ZERO);

        let hooks = PauseOnce::at(Step::Commit, Duration::from_secs(5));
        hooks.before(Step::Commit).await;
        assert!(hooks.drawn() && hooks.fired());
    }
}
