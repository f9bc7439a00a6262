//! The fault plan of a client run: drawn from its seed, printed, replayable.
//!
//! Goal: swarm testing (Groce et al.): each seed turns on a different subset
//! of fault kinds at different rates, so a sweep of seeds meets faults alone
//! and in combination. Method: a ChaCha8 stream from the seed draws, per
//! kind, whether it is on and how many times it strikes, then each strike's
//! moment, target client and length; the clock skew of each client process
//! is drawn the same way. Everything is relative to the run's start and its
//! TTL, so the plan is a pure function of (seed, clients, duration, TTL,
//! kinds allowed).
//!
//! A strike meant for the holder may also be aimed at a protocol moment
//! ([`Moment`]): from its planned time on, it waits for the next grant
//! answered ok (and the holder waits for it before its next request), the
//! next write sent, or the next renewal sent, so the fault lands where a
//! design is exposed instead of wherever the clock put it. The moments and
//! the kinds added after the first ten are drawn from streams of their own:
//! every seed's clock-timed plan of the first ten kinds stays what it was.
//! The kinds aimed at a design's mechanism (a lock session, a lock store, a
//! write's statements) are on for every seed that allows them, and their
//! strikes are dealt the plan's times in that order: where a kind does not
//! apply it is not struck at once, and the first that applies has the run
//! to itself while it plays out.
//! Invariant: the plan is exact and printed; the interleaving of real
//! processes is not, and the run says so.

use std::fmt;
use std::time::Duration;

use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// SIGSTOP, then SIGCONT within the TTL.
    PauseShort,
    /// SIGSTOP, then SIGCONT after more than the TTL: the classic.
    PauseLong,
    /// SIGKILL; the worker comes back as a new incarnation.
    Kill,
    /// The client's network to its stores stops, then heals.
    Partition,
    /// The next reply of a store to the client is lost, its connection reset.
    LoseReply,
    /// Every connection of the client is reset (the store sees them end).
    Reset,
    /// Every chunk between the client and its stores waits.
    Latency,
    /// PostgreSQL terminates the client's backends (`pg_terminate_backend`).
    TerminateBackends,
    /// The Redis server is killed and restarted (its persistence is drawn
    /// once per run: with it keys survive, without it they are forgotten).
    RedisRestart,
    /// The client process runs with a skewed clock (libfaketime): an offset
    /// and a rate, for wall and monotonic time.
    ClockSkew,
    /// PostgreSQL terminates only the backend that holds the client's
    /// advisory lock (from `pg_locks`), while it holds the lock, which is asked
    /// to work on for a TTL: the
    /// client's other connections live on, so a design whose work does not
    /// go through its lock session writes on, unaware.
    TerminateLockSession,
    /// While a write is in flight, the store's next reply to the client
    /// passes and then whatever the client sends waits past the TTL: a
    /// write of two statements (check, then act) is split between them.
    StallAfterReply,
    /// While the client holds the lock, its connections to its lock store (its
    /// Redis) stop forwarding past the TTL while its work store stays
    /// reachable, and the holder is asked to work on until they heal: a
    /// lock kept alive from a store it cannot reach must stop its holder
    /// before its TTL runs out.
    PartitionLockStore,
}

/// When in the protocol a strike lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Moment {
    /// At its planned time on the run's clock (exploration).
    Clock,
    /// At the first grant answered ok from its planned time on, before the
    /// holder's next request (the holder waits until the fault began).
    Granted,
    /// Right after the first write request sent from its planned time on,
    /// while the write is in flight (a check-then-act design's gap).
    WriteInFlight,
    /// Right after the first renewal request sent from its planned time on.
    RenewalSent,
    /// On whoever holds the lock from its planned time on (at once, or at
    /// the next grant answered ok): a lock session or a lock store matters
    /// while a lock is held.
    Holding,
}

impl Moment {
    /// How the plan names it (nothing for [`Moment::Clock`]).
    pub fn describe(self) -> &'static str {
        match self {
            Moment::Clock => "",
            Moment::Granted => "at the next grant",
            Moment::WriteInFlight => "on the next write in flight",
            Moment::RenewalSent => "on the next renewal sent",
            Moment::Holding => "while it holds the lock",
        }
    }
}

impl FaultKind {
    /// Every kind, in the plan's order.
    pub const ALL: [FaultKind; 13] = [
        FaultKind::PauseShort,
        FaultKind::PauseLong,
        FaultKind::Kill,
        FaultKind::Partition,
        FaultKind::LoseReply,
        FaultKind::Reset,
        FaultKind::Latency,
        FaultKind::TerminateBackends,
        FaultKind::RedisRestart,
        FaultKind::ClockSkew,
        FaultKind::TerminateLockSession,
        FaultKind::StallAfterReply,
        FaultKind::PartitionLockStore,
    ];

    /// The kinds whose on/off the plan's first stream draws: the first ten,
    /// in that order, so a seed's plan of them never changes as kinds are
    /// added after them.
    const FIRST_STREAM: &'static [FaultKind] = FaultKind::ALL.split_at(10).0;

    /// The kinds the aimed stream draws, after the first ten; those after
    /// them have a stream of their own ([`late_stream`]), so a seed's plan
    /// of these never changes either.
    const AIM_STREAM: &'static [FaultKind] = FaultKind::ALL.split_at(12).0.split_at(10).1;

    /// The name used on the command line and in the plan.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::PauseShort => "pause-short",
            FaultKind::PauseLong => "pause-long",
            FaultKind::Kill => "kill",
            FaultKind::Partition => "partition",
            FaultKind::LoseReply => "lose-reply",
            FaultKind::Reset => "reset",
            FaultKind::Latency => "latency",
            FaultKind::TerminateBackends => "terminate-backends",
            FaultKind::RedisRestart => "redis-restart",
            FaultKind::ClockSkew => "clock-skew",
            FaultKind::TerminateLockSession => "terminate-lock-session",
            FaultKind::StallAfterReply => "stall-after-reply",
            FaultKind::PartitionLockStore => "partition-lock-store",
        }
    }

    /// Parses [`FaultKind::name`].
    pub fn parse(name: &str) -> Result<FaultKind, String> {
        FaultKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultKind::ALL.iter().map(|kind| kind.name()).collect();
                format!(
                    "unknown fault {name:?}: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Every strike is over by this share of the run, so its consequences — a
/// paused holder waking to write over its successor — play out while the
/// others still work.
pub const STRIKES_OVER_BY_PERCENT: u64 = 85;

/// One strike of a fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strike {
    /// When, from the run's held start (every client's first process
    /// greeted).
    pub at: Duration,
    /// What.
    pub kind: FaultKind,
    /// Which client (index), for the kinds that target one.
    pub client: usize,
    /// Strike whoever holds the lock at that moment — or, when nobody does,
    /// the first holder within a TTL (no later than the strike can still
    /// end by [`STRIKES_OVER_BY_PERCENT`] of the run) — instead of `client`
    /// (Jepsen's "pause the primary"): who that is depends on the
    /// interleaving, so the run reports whom it struck and how long it
    /// waited.
    pub holder_first: bool,
    /// How long it lasts (pauses, partitions, latency); zero for instant kinds.
    pub lasting: Duration,
    /// When in the protocol it lands, from `at` on.
    pub moment: Moment,
    /// For a stall after a reply to a write whose statements read nothing
    /// (no check to split it after): which gap between them it splits (1 to
    /// 3, counted modulo the gaps the client's writes were seen to have: a
    /// check may come after a `BEGIN`, a fence after both); zero for the
    /// other kinds.
    pub replies_before_stall: u32,
}

/// A client process's clock under libfaketime.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockSkew {
    /// Milliseconds added to the wall clock (negative: behind).
    pub offset_ms: i64,
    /// How fast its clocks run (1.0: real speed).
    pub rate: f64,
}

impl ClockSkew {
    /// Draws a skew: an offset of 0.1 s to 120 s either way, log-uniform
    /// (a second or two past a TTL is as telling as two minutes, and subtler
    /// designs only fall to the small ones), and half the time a rate near
    /// real speed, else anything from a quarter to 1.6 times it.
    fn draw(rng: &mut ChaCha8Rng) -> ClockSkew {
        let magnitude_ms = 10_f64.powf(rng.gen_range(2.0..5.08)).round() as i64;
        let offset_ms = if rng.gen_bool(0.5) {
            magnitude_ms
        } else {
            -magnitude_ms
        };
        let rate = if rng.gen_bool(0.5) {
            rng.gen_range(0.97..1.03)
        } else {
            rng.gen_range(0.25..1.6)
        };
        ClockSkew { offset_ms, rate }
    }

    /// The `FAKETIME` value libfaketime reads (seconds, fractions allowed).
    pub fn faketime(&self) -> String {
        let sign = if self.offset_ms < 0 { '-' } else { '+' };
        let magnitude_ms = self.offset_ms.unsigned_abs();
        format!(
            "{sign}{}.{:03} x{:.2}",
            magnitude_ms / 1_000,
            magnitude_ms % 1_000,
            self.rate
        )
    }
}

/// The faults of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The kinds this seed turned on.
    pub kinds: Vec<FaultKind>,
    /// The strikes, by time.
    pub strikes: Vec<Strike>,
    /// Each client's clock (index = client); `None` runs at real time.
    pub clocks: Vec<Option<ClockSkew>>,
    /// Whether the run's Redis server persists its keys across a restart.
    pub redis_persistent: bool,
}

/// What a plan is drawn for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanShape {
    /// Client processes.
    pub clients: usize,
    /// The run's length.
    pub duration: Duration,
    /// The lock's TTL (pauses are drawn around it).
    pub ttl: Duration,
    /// The kinds a seed may turn on.
    pub allowed: Vec<FaultKind>,
}

fn scaled(ttl: Duration, low: f64, high: f64, rng: &mut ChaCha8Rng) -> Duration {
    ttl.mul_f64(rng.gen_range(low..high))
}

/// The stream the moments and the later kinds are drawn from.
fn aim_stream(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed ^ 0xa1_3ed5_7121_e500)
}

/// The stream the kinds after the twelfth and their strikes are drawn from.
fn late_stream(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed ^ 0x1a7e_5742_1fe5_0013)
}

/// The kinds a seed turns on: swarm, each allowed kind of the first ten on
/// for half the seeds, and at least one when any is allowed (a run asked for
/// `--faults kill` that killed nothing would say nothing).
fn draw_kinds(
    rng: &mut ChaCha8Rng,
    aim_rng: &mut ChaCha8Rng,
    late_rng: &mut ChaCha8Rng,
    shape: &PlanShape,
) -> Vec<FaultKind> {
    let allowed = |kind: &FaultKind| shape.allowed.contains(kind);
    let mut kinds: Vec<FaultKind> = FaultKind::FIRST_STREAM
        .iter()
        .copied()
        .filter(|kind| rng.gen_bool(0.5) && allowed(kind))
        .collect();
    let first_allowed: Vec<FaultKind> = FaultKind::FIRST_STREAM
        .iter()
        .copied()
        .filter(allowed)
        .collect();
    if kinds.is_empty() && !first_allowed.is_empty() {
        kinds.push(first_allowed[rng.gen_range(0..first_allowed.len())]);
    }
    let later: Vec<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|kind| !FaultKind::FIRST_STREAM.contains(kind) && allowed(kind))
        .collect();
    // The later kinds are aimed at the moments a design is exposed: on for
    // every seed that allows them, so a default plan never goes without
    // them (each acts only where it applies). Their coin is still tossed:
    // the draws after it keep their meaning.
    for &kind in &later {
        let stream = if FaultKind::AIM_STREAM.contains(&kind) {
            &mut *aim_rng
        } else {
            &mut *late_rng
        };
        let _swarm_coin = stream.gen_bool(0.75);
        kinds.push(kind);
    }
    kinds
}

/// How long a strike of `kind` lasts.
fn draw_lasting(kind: FaultKind, ttl: Duration, rng: &mut ChaCha8Rng) -> Duration {
    match kind {
        FaultKind::PauseShort => scaled(ttl, 0.2, 0.7, rng),
        FaultKind::PauseLong | FaultKind::StallAfterReply | FaultKind::PartitionLockStore => {
            scaled(ttl, 1.3, 2.0, rng)
        }
        FaultKind::Partition => scaled(ttl, 0.3, 1.6, rng),
        FaultKind::Latency => scaled(ttl, 0.5, 1.5, rng),
        FaultKind::Kill
        | FaultKind::LoseReply
        | FaultKind::Reset
        | FaultKind::TerminateBackends
        | FaultKind::RedisRestart
        | FaultKind::ClockSkew
        | FaultKind::TerminateLockSession => Duration::ZERO,
    }
}

/// One to three strikes of `kind`, each after a short start and over by
/// [`STRIKES_OVER_BY_PERCENT`] of the run (a pause that outlasted the run
/// showed nothing).
fn draw_strikes(kind: FaultKind, rng: &mut ChaCha8Rng, shape: &PlanShape) -> Vec<Strike> {
    let window_ms = u64::try_from(shape.duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(10);
    let count = rng.gen_range(1..=3);
    (0..count)
        .map(|_| {
            let lasting = draw_lasting(kind, shape.ttl, rng);
            let lasting_ms = u64::try_from(lasting.as_millis()).unwrap_or(u64::MAX);
            let earliest_ms = window_ms / 10;
            let latest_ms = (window_ms * STRIKES_OVER_BY_PERCENT / 100)
                .saturating_sub(lasting_ms)
                .max(earliest_ms + 1);
            let at = Duration::from_millis(rng.gen_range(earliest_ms..latest_ms));
            let client = rng.gen_range(0..shape.clients);
            let holder_first = kind != FaultKind::RedisRestart && rng.gen_bool(0.75);
            Strike {
                at,
                kind,
                client,
                holder_first,
                lasting,
                moment: Moment::Clock,
                replies_before_stall: 0,
            }
        })
        .collect()
}

/// Where a strike meant for the holder lands: half of them on the clock
/// (exploration), the others at a protocol moment. A lock session is
/// terminated, and a lock store cut off, while a lock is held: that is
/// when they hold what they protect.
fn draw_moment(strike: &Strike, aim_rng: &mut ChaCha8Rng) -> Moment {
    match strike.kind {
        FaultKind::TerminateLockSession | FaultKind::PartitionLockStore => Moment::Holding,
        FaultKind::StallAfterReply => Moment::WriteInFlight,
        FaultKind::RedisRestart | FaultKind::ClockSkew => Moment::Clock,
        _ if !strike.holder_first => Moment::Clock,
        _ => match aim_rng.gen_range(0..8) {
            0..=3 => Moment::Clock,
            4 | 5 => Moment::Granted,
            6 => Moment::WriteInFlight,
            _ => Moment::RenewalSent,
        },
    }
}

/// The kinds aimed at a design's mechanism, in the order their strikes
/// take the run: a lock session's end and a lock store cut off act only on
/// designs that have one (and say so at once elsewhere), a stall acts on
/// any design that writes.
pub(super) const AIMED_ORDER: [FaultKind; 3] = [
    FaultKind::TerminateLockSession,
    FaultKind::PartitionLockStore,
    FaultKind::StallAfterReply,
];

/// Deals the planned times of the strikes of the [`AIMED_ORDER`] kinds to
/// them in that order (each no later than it can still be over by
/// [`STRIKES_OVER_BY_PERCENT`] of the run): an aimed strike that acts has
/// the run to itself while it plays out, so the one that comes first is
/// the one a run is sure to show.
fn deal_aimed_times(strikes: &mut [Strike], shape: &PlanShape) {
    let rank = |kind: FaultKind| AIMED_ORDER.iter().position(|aimed| *aimed == kind);
    let mut aimed: Vec<usize> = (0..strikes.len())
        .filter(|&index| rank(strikes[index].kind).is_some())
        .collect();
    let mut times: Vec<Duration> = aimed.iter().map(|&index| strikes[index].at).collect();
    times.sort();
    aimed.sort_by_key(|&index| (rank(strikes[index].kind), strikes[index].at));
    let over_by = shape.duration * STRIKES_OVER_BY_PERCENT as u32 / 100;
    for (index, at) in aimed.into_iter().zip(times) {
        // No later than it can still be over (unless it was drawn later
        // already: a run too short for it).
        let fits = over_by
            .saturating_sub(strikes[index].lasting)
            .max(strikes[index].at);
        strikes[index].at = at.min(fits);
    }
    strikes.sort_by_key(|strike| (strike.at, strike.kind, strike.client));
}

impl FaultPlan {
    /// Draws the plan of `seed` for `shape`.
    pub fn draw(seed: u64, shape: &PlanShape) -> FaultPlan {
        assert!(shape.clients >= 1);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut aim_rng = aim_stream(seed);
        let mut late_rng = late_stream(seed);
        let kinds = draw_kinds(&mut rng, &mut aim_rng, &mut late_rng, shape);
        let mut strikes = Vec::new();
        for &kind in &kinds {
            match kind {
                FaultKind::ClockSkew => {}
                FaultKind::TerminateLockSession | FaultKind::StallAfterReply => {
                    let mut aimed = draw_strikes(kind, &mut aim_rng, shape);
                    for strike in &mut aimed {
                        strike.holder_first = true;
                        if kind == FaultKind::StallAfterReply {
                            strike.replies_before_stall = aim_rng.gen_range(1..=3);
                        }
                    }
                    strikes.extend(aimed);
                }
                FaultKind::PartitionLockStore => {
                    let mut aimed = draw_strikes(kind, &mut late_rng, shape);
                    for strike in &mut aimed {
                        strike.holder_first = true;
                    }
                    strikes.extend(aimed);
                }
                _ => strikes.extend(draw_strikes(kind, &mut rng, shape)),
            }
        }
        strikes.sort_by_key(|strike| (strike.at, strike.kind, strike.client));
        for strike in &mut strikes {
            strike.moment = draw_moment(strike, &mut aim_rng);
        }
        deal_aimed_times(&mut strikes, shape);
        let skewed = kinds.contains(&FaultKind::ClockSkew);
        // The skews come from a stream of their own; the two draws they once
        // took from the plan's stream are still taken, so every draw after
        // them (the Redis persistence of each seed) keeps its meaning.
        let mut clock_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c10c_5ce3_0001);
        let clocks = (0..shape.clients)
            .map(|_| {
                let _offset_s: i64 = rng.gen_range(-120..=120);
                let _rate: f64 = rng.gen_range(0.25..1.6);
                let skew = ClockSkew::draw(&mut clock_rng);
                (skewed && rng.gen_bool(0.7)).then_some(skew)
            })
            .collect();
        let redis_persistent = rng.gen_bool(0.5);
        FaultPlan {
            seed,
            kinds,
            strikes,
            clocks,
            redis_persistent,
        }
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds: Vec<&str> = self.kinds.iter().map(|kind| kind.name()).collect();
        writeln!(
            f,
            "faults on: {} (redis {})",
            if kinds.is_empty() {
                "none".to_string()
            } else {
                kinds.join(", ")
            },
            if self.redis_persistent {
                "persistent"
            } else {
                "without persistence"
            }
        )?;
        for (client, clock) in self.clocks.iter().enumerate() {
            if let Some(clock) = clock {
                writeln!(
                    f,
                    "  w{client}: clock {:+.3} s, rate x{:.2}",
                    clock.offset_ms as f64 / 1_000.0,
                    clock.rate
                )?;
            }
        }
        for strike in &self.strikes {
            write!(
                f,
                "  at {:>6} ms: {}",
                strike.at.as_millis(),
                strike.kind.name()
            )?;
            match strike.kind {
                FaultKind::RedisRestart => {}
                _ if strike.holder_first && strike.moment != Moment::Clock => {
                    write!(f, " the holder")?
                }
                _ if strike.holder_first => write!(f, " the holder (else w{})", strike.client)?,
                _ => write!(f, " w{}", strike.client)?,
            }
            if !strike.lasting.is_zero() {
                write!(f, " for {} ms", strike.lasting.as_millis())?;
            }
            if strike.replies_before_stall > 0 {
                write!(
                    f,
                    " after its first read (else at gap {})",
                    strike.replies_before_stall
                )?;
            }
            if strike.moment != Moment::Clock {
                write!(f, ", {}", strike.moment.describe())?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> PlanShape {
        PlanShape {
            clients: 3,
            duration: Duration::from_secs(12),
            ttl: Duration::from_secs(3),
            allowed: FaultKind::ALL.to_vec(),
        }
    }

    #[test]
    fn a_seed_draws_the_same_plan_every_time_and_seeds_differ() {
        assert_eq!(FaultPlan::draw(7, &shape()), FaultPlan::draw(7, &shape()));
        let plans: Vec<String> = (0..20)
            .map(|seed| FaultPlan::draw(seed, &shape()).to_string())
            .collect();
        let mut distinct = plans.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() >= 18, "{plans:#?}");
    }

    #[test]
    fn swarm_turns_the_first_kinds_on_for_some_seeds_and_the_aimed_ones_for_all() {
        for kind in FaultKind::ALL {
            let on = (0..64)
                .filter(|seed| FaultPlan::draw(*seed, &shape()).kinds.contains(&kind))
                .count();
            if FaultKind::FIRST_STREAM.contains(&kind) {
                assert!((10..=54).contains(&on), "{kind:?} on for {on} of 64 seeds");
            } else {
                assert_eq!(on, 64, "{kind:?}");
            }
        }
    }

    #[test]
    fn aimed_strikes_take_the_run_in_their_order() {
        for seed in 0..64 {
            let plan = FaultPlan::draw(seed, &shape());
            let first = |kind: FaultKind| {
                plan.strikes
                    .iter()
                    .find(|strike| strike.kind == kind)
                    .map(|strike| strike.at)
            };
            let session = first(FaultKind::TerminateLockSession).expect("always on");
            let store = first(FaultKind::PartitionLockStore).expect("always on");
            let stall = first(FaultKind::StallAfterReply).expect("always on");
            assert!(session <= store && session <= stall, "seed {seed}: {plan}");
            // A stall dealt a time too late for it to be over by 85 % of
            // the run takes the latest it can: 10.2 s less two TTLs at most.
            assert!(
                store <= stall || stall >= Duration::from_millis(4_200),
                "seed {seed}: {plan}"
            );
        }
    }

    #[test]
    fn strikes_fit_the_run_and_long_pauses_outlast_the_ttl() {
        for seed in 0..64 {
            let plan = FaultPlan::draw(seed, &shape());
            for strike in &plan.strikes {
                assert!(strike.at >= Duration::from_millis(1_200), "{plan}");
                // 85 % of 12 s, for every strike that can fit (all do here).
                assert!(
                    strike.at + strike.lasting <= Duration::from_millis(10_200),
                    "{plan}"
                );
                assert!(strike.client < 3);
                match strike.kind {
                    FaultKind::PauseLong => assert!(strike.lasting > Duration::from_secs(3)),
                    FaultKind::PauseShort => assert!(strike.lasting < Duration::from_secs(3)),
                    _ => {}
                }
            }
            if plan.clocks.iter().any(Option::is_some) {
                assert!(plan.kinds.contains(&FaultKind::ClockSkew), "{plan}");
            }
        }
    }

    #[test]
    fn a_seed_with_faults_allowed_turns_at_least_one_on() {
        let mut shape = shape();
        shape.allowed = vec![FaultKind::Kill];
        for seed in 0..32 {
            assert_eq!(FaultPlan::draw(seed, &shape).kinds, vec![FaultKind::Kill]);
        }
        shape.allowed = vec![];
        assert!(FaultPlan::draw(0, &shape).kinds.is_empty());
    }

    #[test]
    fn kinds_not_allowed_never_strike() {
        let mut shape = shape();
        shape.allowed = vec![FaultKind::PauseLong];
        for seed in 0..32 {
            let plan = FaultPlan::draw(seed, &shape);
            assert!(
                plan.kinds.iter().all(|kind| *kind == FaultKind::PauseLong),
                "{plan}"
            );
            assert!(plan.clocks.iter().all(Option::is_none));
        }
    }

    #[test]
    fn skews_reach_from_a_tenth_of_a_second_to_minutes_either_way() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let skews: Vec<ClockSkew> = (0..400).map(|_| ClockSkew::draw(&mut rng)).collect();
        let magnitude = |skew: &ClockSkew| skew.offset_ms.unsigned_abs();
        assert!(skews
            .iter()
            .all(|skew| (100..=120_300).contains(&magnitude(skew))));
        assert!(skews
            .iter()
            .any(|skew| magnitude(skew) < 3_000 && skew.offset_ms < 0));
        assert!(skews
            .iter()
            .any(|skew| magnitude(skew) < 3_000 && skew.offset_ms > 0));
        assert!(skews.iter().any(|skew| magnitude(skew) > 60_000));
        assert!(skews.iter().any(|skew| (0.97..1.03).contains(&skew.rate)));
        assert!(skews.iter().any(|skew| skew.rate < 0.5));
        let skew = ClockSkew {
            offset_ms: -1_505,
            rate: 1.0,
        };
        assert_eq!(skew.faketime(), "-1.505 x1.00");
        let skew = ClockSkew {
            offset_ms: 120_000,
            rate: 0.25,
        };
        assert_eq!(skew.faketime(), "+120.000 x0.25");
    }

    #[test]
    fn later_kinds_and_moments_leave_the_first_kinds_plan_as_it_was() {
        let mut first = shape();
        first.allowed = FaultKind::FIRST_STREAM.to_vec();
        for seed in 0..64 {
            let all = FaultPlan::draw(seed, &shape());
            let alone = FaultPlan::draw(seed, &first);
            let clock_timed =
                |plan: &FaultPlan| -> Vec<(Duration, FaultKind, usize, bool, Duration)> {
                    plan.strikes
                        .iter()
                        .filter(|strike| FaultKind::FIRST_STREAM.contains(&strike.kind))
                        .map(|s| (s.at, s.kind, s.client, s.holder_first, s.lasting))
                        .collect()
                };
            assert_eq!(clock_timed(&all), clock_timed(&alone), "seed {seed}");
            assert_eq!(all.clocks, alone.clocks);
            assert_eq!(all.redis_persistent, alone.redis_persistent);
        }
    }

    #[test]
    fn the_latest_kinds_leave_every_earlier_kinds_plan_as_it_was() {
        let mut earlier = shape();
        earlier.allowed = FaultKind::ALL.split_at(12).0.to_vec();
        for seed in 0..64 {
            let mut all = FaultPlan::draw(seed, &shape());
            let mut alone = FaultPlan::draw(seed, &earlier);
            all.kinds.retain(|kind| earlier.allowed.contains(kind));
            all.strikes
                .retain(|strike| earlier.allowed.contains(&strike.kind));
            // Everything but the aimed strikes' times, which are dealt
            // among them all.
            for plan in [&mut all, &mut alone] {
                for strike in &mut plan.strikes {
                    if AIMED_ORDER.contains(&strike.kind) {
                        strike.at = Duration::ZERO;
                    }
                }
                plan.strikes
                    .sort_by_key(|strike| (strike.at, strike.kind, strike.client));
            }
            assert_eq!(all, alone, "seed {seed}");
        }
    }

    #[test]
    fn holders_strikes_are_aimed_at_moments_and_lock_sessions_at_holds() {
        let mut moments = std::collections::BTreeMap::new();
        for seed in 0..64 {
            let plan = FaultPlan::draw(seed, &shape());
            for strike in &plan.strikes {
                *moments.entry(strike.moment).or_insert(0) += 1;
                if strike.kind == FaultKind::PartitionLockStore {
                    assert_eq!(strike.moment, Moment::Holding, "{plan}");
                    assert!(strike.holder_first);
                    assert!(strike.lasting > Duration::from_secs(3), "{plan}");
                }
                if strike.kind == FaultKind::TerminateLockSession {
                    assert_eq!(strike.moment, Moment::Holding, "{plan}");
                    assert!(strike.holder_first);
                    assert!(plan
                        .to_string()
                        .contains("terminate-lock-session the holder, while it holds the lock"));
                }
                if strike.kind == FaultKind::StallAfterReply {
                    assert!((1..=3).contains(&strike.replies_before_stall), "{plan}");
                    assert_eq!(strike.moment, Moment::WriteInFlight, "{plan}");
                    assert!(strike.lasting > Duration::from_secs(3), "{plan}");
                }
                if !strike.holder_first || strike.kind == FaultKind::RedisRestart {
                    assert_eq!(strike.moment, Moment::Clock, "{plan}");
                }
            }
        }
        for moment in [
            Moment::Clock,
            Moment::Granted,
            Moment::WriteInFlight,
            Moment::RenewalSent,
        ] {
            assert!(
                moments.get(&moment).copied().unwrap_or(0) >= 10,
                "{moments:?}"
            );
        }
        let mut alone = shape();
        alone.allowed = vec![FaultKind::TerminateLockSession];
        for seed in 0..16 {
            let plan = FaultPlan::draw(seed, &alone);
            assert_eq!(plan.kinds, vec![FaultKind::TerminateLockSession]);
            assert!(!plan.strikes.is_empty());
        }
    }

    #[test]
    fn names_parse_back() {
        for kind in FaultKind::ALL {
            assert_eq!(FaultKind::parse(kind.name()), Ok(kind));
        }
        assert!(FaultKind::parse("pause")
            .unwrap_err()
            .contains("pause-long"));
    }
}
