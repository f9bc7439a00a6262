//! Fault injection for races: a pause at one step of the worker loop, or at
//! one point inside the commit cycle.
//!
//! Goal: stall a holder between its belief check and its commit (the GC pause),
//! inside its commit cycle (after the fence, or before `COMMIT`: the stretch
//! the fence's row lock must cover), or hold a rival back so the scene starts
//! in a known order. Method: a [`leaseproof_worker::Hooks`] that sleeps once,
//! the first time its place comes — or waits there, at most so long, for a
//! [`Signal`] another racer gives as its own pause begins (a fixed head start
//! is a guess about how long a connection takes on a loaded machine).
//! Invariant: it pauses at most once per worker, and every wait is bounded,
//! so a run still ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leaseproof_protocol::{CycleFault, CyclePoint};
use leaseproof_worker::{Hooks, Step};
use tokio::sync::watch;

/// Given once by one racer, awaited by others: "I have reached my pause".
#[derive(Clone, Debug)]
pub struct Signal(Arc<watch::Sender<bool>>);

impl Signal {
    /// A signal not given yet.
    pub fn new() -> Signal {
        Signal(Arc::new(watch::channel(false).0))
    }

    /// Whether it was given.
    pub fn given(&self) -> bool {
        *self.0.borrow()
    }

    fn give(&self) {
        self.0.send_replace(true);
    }

    /// Waits until it is given, at most `patience`.
    async fn wait(&self, patience: Duration) {
        let mut given = self.0.subscribe();
        let _ = tokio::time::timeout(patience, given.wait_for(|given| *given)).await;
    }
}

impl Default for Signal {
    fn default() -> Signal {
        Signal::new()
    }
}

/// Where a [`PauseOnce`] pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Loop(Step),
    Cycle(CyclePoint),
}

/// Sleeps `pause` (or waits for a signal, at most `pause`) the first time the
/// worker reaches its place; nothing otherwise.
#[derive(Debug)]
pub struct PauseOnce {
    place: Option<Place>,
    /// How long the pause lasts, or, with `awaits`, how long it may last.
    pause: Duration,
    /// The pause ends when this signal is given (or `pause` has passed).
    awaits: Option<Signal>,
    /// Given as the pause begins.
    gives: Option<Signal>,
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

    /// Waits once at `step` until `signal` is given, at most `patience`.
    pub fn until(step: Step, signal: &Signal, patience: Duration) -> PauseOnce {
        PauseOnce {
            awaits: Some(signal.clone()),
            ..PauseOnce::new(Some(Place::Loop(step)), patience)
        }
    }

    /// Never pauses.
    pub fn never() -> PauseOnce {
        PauseOnce::new(None, Duration::ZERO)
    }

    /// The same pause, giving `signal` as it begins (in place of any signal
    /// it gave before: a pause gives one).
    pub fn giving(self, signal: &Signal) -> PauseOnce {
        PauseOnce {
            gives: Some(signal.clone()),
            ..self
        }
    }

    fn new(place: Option<Place>, pause: Duration) -> PauseOnce {
        PauseOnce {
            place,
            pause,
            awaits: None,
            gives: None,
            drawn: AtomicBool::new(false),
            slept: Arc::new(AtomicBool::new(false)),
        }
    }

    fn fires_at(&self, place: Place) -> bool {
        self.place == Some(place) && !self.drawn.swap(true, Ordering::SeqCst)
    }

    /// True once the pause has run to its end: the worker really stalled
    /// that long, or until the signal it awaited (a cycle dropped mid-pause
    /// does not count).
    pub fn fired(&self) -> bool {
        self.slept.load(Ordering::SeqCst)
    }

    /// True once the worker reached the place and claimed the pause, whether
    /// or not the pause then ran to its end.
    pub fn drawn(&self) -> bool {
        self.drawn.load(Ordering::SeqCst)
    }
}

/// The pause itself: gives its signal, waits (for a signal, or the time),
/// and says so once it has run to its end.
async fn pause(
    pause: Duration,
    awaits: Option<Signal>,
    gives: Option<Signal>,
    slept: Arc<AtomicBool>,
) {
    if let Some(gives) = gives {
        gives.give();
    }
    match awaits {
        Some(signal) => signal.wait(pause).await,
        None => tokio::time::sleep(pause).await,
    }
    slept.store(true, Ordering::SeqCst);
}

impl Hooks for PauseOnce {
    async fn before(&self, step: Step) {
        if self.fires_at(Place::Loop(step)) {
            let slept = Arc::clone(&self.slept);
            pause(self.pause, self.awaits.clone(), self.gives.clone(), slept).await;
        }
    }

    fn inside_cycle(&self, point: CyclePoint) -> CycleFault {
        let fires = self.fires_at(Place::Cycle(point));
        let (duration, awaits, gives) = (self.pause, self.awaits.clone(), self.gives.clone());
        let slept = Arc::clone(&self.slept);
        Box::pin(async move {
            if fires {
                pause(duration, awaits, gives, slept).await;
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

    #[tokio::test(start_paused = true)]
    async fn a_waiter_starts_when_the_pause_it_awaits_begins_and_not_before() {
        let signal = Signal::new();
        let holder =
            PauseOnce::inside_cycle(CyclePoint::Written, Duration::from_secs(5)).giving(&signal);
        let rival = PauseOnce::until(Step::Acquire, &signal, Duration::from_secs(60));
        let started = tokio::time::Instant::now();
        let rival_waits = tokio::spawn(async move {
            rival.before(Step::Acquire).await;
            started.elapsed()
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!signal.given());
        // Another place does not give it; the holder's pause does, at its start.
        holder.inside_cycle(CyclePoint::Fenced).await;
        assert!(!signal.given());
        let holder_pause = tokio::spawn(holder.inside_cycle(CyclePoint::Written));
        assert_eq!(rival_waits.await.unwrap(), Duration::from_secs(2));
        assert!(signal.given());
        holder_pause.await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(7));

        // A signal given before the waiter came: no wait at all.
        let late = PauseOnce::until(Step::Acquire, &signal, Duration::from_secs(60));
        let started = tokio::time::Instant::now();
        late.before(Step::Acquire).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert!(late.fired());

        // A signal never given: the wait ends at its patience.
        let never = PauseOnce::until(Step::Acquire, &Signal::new(), Duration::from_secs(3));
        let started = tokio::time::Instant::now();
        never.before(Step::Acquire).await;
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert!(never.fired());
    }
}
