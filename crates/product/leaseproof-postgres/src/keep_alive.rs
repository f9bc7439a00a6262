//! The keep-alive rule every TTL lock shares: when to extend, and the moment
//! the holder must stop believing it holds.
//!
//! The store measures a TTL from the moment *it* runs the extension, on its
//! own clock. The holder cannot read that clock, but it knows a bound: the
//! statement ran no earlier than it was sent. So after an extension of `ttl`
//! confirmed by the store, the lock is certainly still held until
//! `sent + ttl` on the holder's monotonic clock (rates of the two clocks
//! agree; their *offset* does not matter). Measured from the reply instead, a
//! slow round trip would stretch the holder's belief past the store's expiry.
//!
//! Past that deadline with no confirmation the lock may have expired unseen,
//! so the engine fires *lost* exactly then — also while an extension is still
//! in flight (a partitioned store may take minutes to answer, or never).
//! An extension that finds the lock gone fires *lost* at once; one that could
//! not reach the store is retried until the deadline (a transient blip must
//! not abandon work the lock still covers).
//!
//! Used by [`LeaseGuard`](crate::LeaseGuard) and by `leaseproof-locks`'
//! Redis manager, so both keep-alives follow one rule. Public for the same
//! reason a user needs it: a lock manager written outside this crate (etcd,
//! ZooKeeper, a table of its own) keeps its lock alive by [`run`] and its
//! [`Schedule`] and inherits the rule rather than re-deriving it.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// What one extension found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extension {
    /// The store extended the lock by the TTL, measured from the statement.
    Extended,
    /// The lock is gone or someone else's: it is lost.
    Gone,
    /// The store did not answer, or failed; the lock may still be ours.
    Unreachable,
}

/// Why a keep-alive stopped believing the lock is held.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// An extension found the lock expired, released or taken over.
    Gone,
    /// No extension was confirmed before the TTL since the last confirmed
    /// one ran out: the lock may have expired unseen.
    Unconfirmed,
}

/// The schedule: extend every `interval`; after a failed extension retry every
/// `retry_interval`; the TTL bounds how long a confirmation lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The lock's TTL (what each extension sets).
    pub ttl: Duration,
    /// Time between the sending of one extension and the next.
    pub interval: Duration,
    /// Time between attempts after an extension could not reach the store.
    pub retry_interval: Duration,
}

impl Schedule {
    /// The default: extend every `ttl / 3`, retry every `ttl / 12` — three
    /// chances to reach the store before the deadline.
    pub fn for_ttl(ttl: Duration) -> Schedule {
        Schedule::every(ttl, ttl / 3)
    }

    /// Extend every `interval`, retry four times as often (at least every
    /// millisecond apart) after a failed extension.
    pub fn every(ttl: Duration, interval: Duration) -> Schedule {
        Schedule {
            ttl,
            interval,
            retry_interval: (interval / 4).max(Duration::from_millis(1)),
        }
    }
}

/// Runs the keep-alive: `extend` on the schedule, from a lock confirmed held
/// by an acquisition *sent* at `confirmed_sent`; returns why it stopped — the
/// moment the holder must stop believing. The caller signals *lost* (after
/// recording the reason, so a woken waiter finds it).
///
/// Cancel-safe: dropping the future stops the schedule (an extension in
/// flight may still land on the store; it only extends a lock this holder had).
pub async fn run<F, Fut>(schedule: Schedule, confirmed_sent: Instant, mut extend: F) -> LostReason
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Extension>,
{
    assert!(
        schedule.interval < schedule.ttl,
        "extend before the TTL runs out"
    );
    assert!(!schedule.interval.is_zero());
    assert!(!schedule.retry_interval.is_zero());
    let mut deadline = confirmed_sent + schedule.ttl;
    let mut next = confirmed_sent + schedule.interval;
    loop {
        if next >= deadline {
            tokio::time::sleep_until(deadline).await;
            return LostReason::Unconfirmed;
        }
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        match tokio::time::timeout_at(deadline, extend()).await {
            Err(_deadline_passed) => return LostReason::Unconfirmed,
            Ok(Extension::Gone) => return LostReason::Gone,
            Ok(Extension::Extended) => {
                deadline = deadline.max(sent + schedule.ttl);
                next = sent + schedule.interval;
            }
            Ok(Extension::Unreachable) => next = Instant::now() + schedule.retry_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The schedule on tokio's paused clock: every extension's moment and the
    //! moment *lost* fires, to the millisecond, with a scripted store.

    use std::cell::RefCell;

    use super::*;

    const TTL: Duration = Duration::from_millis(1_200);

    /// Runs the engine against `answers` (one per extension, in order; then
    /// `Extension::Extended` forever) until it stops or `horizon` passes;
    /// returns the extensions' moments in ms after the start and the reason.
    async fn scripted(
        schedule: Schedule,
        answers: &[Extension],
        horizon: Duration,
    ) -> (Vec<u128>, Option<LostReason>) {
        let start = Instant::now();
        let calls = RefCell::new(Vec::new());
        let engine = run(schedule, start, || {
            let mut calls = calls.borrow_mut();
            let answer = answers
                .get(calls.len())
                .copied()
                .unwrap_or(Extension::Extended);
            calls.push(start.elapsed().as_millis());
            async move { answer }
        });
        let reason = tokio::time::timeout(horizon, engine).await.ok();
        (calls.into_inner(), reason)
    }

    #[test]
    fn a_schedule_retries_four_times_per_interval_and_at_least_a_millisecond_apart() {
        let schedule = Schedule::every(TTL, Duration::from_millis(200));
        assert_eq!(schedule.ttl, TTL);
        assert_eq!(schedule.interval, Duration::from_millis(200));
        assert_eq!(schedule.retry_interval, Duration::from_millis(50));
        let tiny = Schedule::every(TTL, Duration::from_micros(2));
        assert_eq!(tiny.retry_interval, Duration::from_millis(1));
        assert_eq!(Schedule::for_ttl(TTL), Schedule::every(TTL, TTL / 3));
    }

    #[tokio::test(start_paused = true)]
    async fn extensions_run_every_third_of_the_ttl_and_keep_the_lock() {
        let (calls, reason) =
            scripted(Schedule::for_ttl(TTL), &[], Duration::from_millis(2_500)).await;
        assert_eq!(calls, [400, 800, 1_200, 1_600, 2_000, 2_400]);
        assert_eq!(reason, None, "never lost while every extension lands");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_store_is_retried_every_twelfth_until_one_lands() {
        let unreachable = Extension::Unreachable;
        let (calls, reason) = scripted(
            Schedule::for_ttl(TTL),
            &[unreachable, unreachable],
            Duration::from_millis(1_500),
        )
        .await;
        // 400 fails, retried at 500 and 600; 600 lands, so the next is at 1000.
        assert_eq!(calls, [400, 500, 600, 1_000, 1_400]);
        assert_eq!(reason, None);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_at_sent_plus_ttl_of_the_last_confirmation() {
        let mut answers = vec![Extension::Unreachable; 16];
        answers[0] = Extension::Extended;
        let started = Instant::now();
        let (calls, reason) =
            scripted(Schedule::for_ttl(TTL), &answers, Duration::from_secs(5)).await;
        // Confirmed at 400 (sent then): the deadline is 1600; retries at
        // 800 + 100 k until the next retry would not come before it.
        assert_eq!(
            calls,
            [400, 800, 900, 1_000, 1_100, 1_200, 1_300, 1_400, 1_500]
        );
        assert_eq!(reason, Some(LostReason::Unconfirmed));
        assert_eq!(started.elapsed(), Duration::from_millis(1_600));
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_lock_is_lost_at_once() {
        let started = Instant::now();
        let (calls, reason) = scripted(
            Schedule::for_ttl(TTL),
            &[Extension::Extended, Extension::Gone],
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(calls, [400, 800]);
        assert_eq!(reason, Some(LostReason::Gone));
        assert_eq!(started.elapsed(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn an_extension_hanging_past_the_deadline_is_lost_at_the_deadline() {
        let started = Instant::now();
        let calls = RefCell::new(0_u32);
        let reason = run(Schedule::for_ttl(TTL), started, || {
            *calls.borrow_mut() += 1;
            std::future::pending::<Extension>()
        })
        .await;
        assert_eq!(reason, LostReason::Unconfirmed);
        assert_eq!(
            started.elapsed(),
            TTL,
            "at sent + ttl, not when the store answers"
        );
        assert_eq!(calls.into_inner(), 1);
    }
}
