//! Protocol moments: where a strike aimed by the protocol lands.
//!
//! Goal: a fault that lands where a design is exposed — right after its
//! grant is answered, while its write or renewal is in flight — instead of
//! wherever the clock happened to put it, so a finding shows on nearly every
//! seed. Method: a strike due at a moment registers a waiter; the worker that
//! reaches the moment next hands the first live waiter an [`Offer`] (which
//! client, and a sender the strike drops as its fault begins). At a grant
//! the worker waits for that onset before its next request, so "after the
//! grant and before the next write" holds by construction; in flight it
//! cannot wait (the request is out), and the fault races the client.
//! Invariant: a moment goes to at most one waiter, a waiter gets at most one
//! moment, and a worker never waits for a strike longer than its patience.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use super::plan::Moment;

/// What a worker that reached a moment gives the strike waiting for it.
#[derive(Debug)]
pub(super) struct Offer {
    /// The client (index) at the moment: the strike's victim.
    pub client: usize,
    /// Dropped (or sent) by the strike once its fault has begun; the worker
    /// waits on its receiver at a grant.
    pub onset: oneshot::Sender<()>,
}

/// The strikes waiting for a moment.
#[derive(Debug, Default)]
pub(super) struct Moments {
    waiters: Mutex<Vec<(Moment, oneshot::Sender<Offer>)>>,
}

impl Moments {
    /// Registers a strike waiting for the next `moment`; its offer arrives
    /// on the receiver (dropping the receiver withdraws the wait).
    pub(super) fn wait_for(&self, moment: Moment) -> oneshot::Receiver<Offer> {
        assert_ne!(
            moment,
            Moment::Clock,
            "a clock-timed strike waits for no moment"
        );
        let (offer_tx, offer_rx) = oneshot::channel();
        self.lock().push((moment, offer_tx));
        offer_rx
    }

    /// `client` reached `moment`: the first strike still waiting for it gets
    /// it. Returns the receiver of that strike's onset, if one took it.
    pub(super) fn reached(&self, moment: Moment, client: usize) -> Option<oneshot::Receiver<()>> {
        let mut waiters = self.lock();
        while let Some(position) = waiters.iter().position(|(wanted, _)| *wanted == moment) {
            let (_, offer_tx) = waiters.remove(position);
            let (onset, onset_rx) = oneshot::channel();
            if offer_tx.send(Offer { client, onset }).is_ok() {
                return Some(onset_rx);
            }
            // That strike stopped waiting: the next one may still be there.
        }
        None
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Moment, oneshot::Sender<Offer>)>> {
        self.waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Waits, up to `patience`, for the fault a strike took a moment for to
/// begin: the worker holds its next request until then.
pub(super) async fn until_onset(onset: oneshot::Receiver<()>, patience: Duration) {
    // Sent or dropped, the fault has begun (or the strike gave up).
    let _ = tokio::time::timeout(patience, onset).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_moment_goes_to_the_first_live_waiter_and_only_once() {
        let moments = Moments::default();
        assert!(moments.reached(Moment::Granted, 0).is_none());
        let withdrawn = moments.wait_for(Moment::Granted);
        let in_flight = moments.wait_for(Moment::WriteInFlight);
        let granted = moments.wait_for(Moment::Granted);
        drop(withdrawn);
        let onset = moments
            .reached(Moment::Granted, 2)
            .expect("a waiter took it");
        let offer = granted.await.expect("offered");
        assert_eq!(offer.client, 2);
        assert!(moments.reached(Moment::Granted, 1).is_none(), "taken once");
        drop(offer.onset);
        until_onset(onset, Duration::from_secs(5)).await;
        let offer = {
            assert!(moments.reached(Moment::WriteInFlight, 1).is_some());
            in_flight.await.expect("offered")
        };
        assert_eq!(offer.client, 1);
        assert!(moments.reached(Moment::WriteInFlight, 0).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_waits_no_longer_than_its_patience() {
        let moments = Moments::default();
        let _waiting = moments.wait_for(Moment::Granted);
        let onset = moments.reached(Moment::Granted, 0).expect("taken");
        let before = tokio::time::Instant::now();
        // The offer is never read, its onset never dropped... until patience.
        until_onset(onset, Duration::from_millis(300)).await;
        assert!(before.elapsed() >= Duration::from_millis(300));
    }
}
