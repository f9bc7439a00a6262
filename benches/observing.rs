//! What the lease's own reporting costs: a grant-and-release loop with a
//! `tracing` subscriber and a `metrics` recorder listening, and without.
//!
//! Goal: the figure a team asks before turning the lease's meters on — the
//! throughput of acquire + release through the library with its events
//! formatted and its meters recorded, as a ratio to the same loop with
//! nobody listening, measured in one run.
//! Method: a recorder with an on/off switch is installed once for the
//! process (the `metrics` facade takes one global recorder, for good); off,
//! it hands out no-op handles, as the facade's own no-op recorder does. On,
//! it keeps every counter and histogram in `metrics-util`'s atomic registry,
//! the storage exporters use; and each contender runs under a `tracing`
//! subscriber that formats the lease's debug events (its target only, not
//! sqlx's) into a sink. Slices alternate off/on, on/off, so drift lands on
//! both alike.
//! Invariant: every acquisition is granted (each contender has its own
//! scope) and every meter the loop should move did move, checked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::{Owner, Scope, Ttl};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use tracing::instrument::WithSubscriber as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

use crate::BenchError;

/// A recorder that can be switched off: the one the process installs.
struct Meters {
    on: AtomicBool,
    registry: Registry<Key, AtomicStorage>,
}

impl Recorder for Meters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if !self.on.load(Ordering::Relaxed) {
            return Counter::noop();
        }
        self.registry
            .get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        if !self.on.load(Ordering::Relaxed) {
            return Gauge::noop();
        }
        self.registry
            .get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        if !self.on.load(Ordering::Relaxed) {
            return Histogram::noop();
        }
        self.registry
            .get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

/// The process's recorder, installed on first use.
fn meters() -> Result<&'static Meters, BenchError> {
    static METERS: OnceLock<Option<&'static Meters>> = OnceLock::new();
    let installed = METERS.get_or_init(|| {
        let meters: &'static Meters = Box::leak(Box::new(Meters {
            on: AtomicBool::new(false),
            registry: Registry::atomic(),
        }));
        metrics::set_global_recorder(meters).ok().map(|()| meters)
    });
    installed.ok_or_else(|| {
        BenchError::Setup("another metrics recorder is installed in this process".to_string())
    })
}

/// The grants counted by the recorder so far.
fn grants_recorded(meters: &Meters) -> u64 {
    let mut grants = 0;
    meters.registry.visit_counters(|key, counter| {
        let granted = key
            .labels()
            .any(|label| label.key() == "outcome" && label.value() == "granted");
        if key.name() == "leaseproof_acquisitions_total" && granted {
            grants += counter.load(Ordering::Relaxed);
        }
    });
    grants
}

/// The loop measured with and without listeners.
#[derive(Debug, Clone, PartialEq)]
pub struct Overhead {
    /// Concurrent contenders, each on its own scope.
    pub contenders: usize,
    /// Acquire + release cycles per second with nobody listening.
    pub cycles_per_second_quiet: f64,
    /// The same with the subscriber and the recorder.
    pub cycles_per_second_observed: f64,
    /// Median cycle, nobody listening.
    pub p50_quiet: Duration,
    /// Median cycle, observed.
    pub p50_observed: Duration,
}

impl Overhead {
    /// Observed throughput / quiet throughput: 1.0 is free.
    pub fn ratio(&self) -> f64 {
        self.cycles_per_second_observed / self.cycles_per_second_quiet.max(1e-9)
    }
}

/// Measures `contenders` acquire + release loops for `rounds` slices of
/// `slice` each, quiet and observed in turn.
pub async fn overhead(
    url: &str,
    contenders: usize,
    slice: Duration,
    rounds: usize,
) -> Result<Overhead, BenchError> {
    let meters = meters()?;
    let pool_size = u32::try_from(contenders).expect("contenders fit in u32");
    let leases = PostgresLeases::connect(url, pool_size).await?;
    leases.ensure_schema().await?;
    let scopes = (0..contenders)
        .map(|contender| {
            Scope::new(format!(
                "bench-observed-{}-{contender}-{}",
                std::process::id(),
                crate::rig::wall_time_us()
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let subscriber = tracing::Dispatch::new(
        tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(
                    tracing_subscriber::filter::Targets::new()
                        .with_target("leaseproof_postgres", tracing::Level::DEBUG),
                ),
        ),
    );
    let (mut quiet, mut observed) = (Loops::default(), Loops::default());
    for round in 0..rounds {
        for observe in if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        } {
            meters.on.store(observe, Ordering::Relaxed);
            let grants_before = grants_recorded(meters);
            let loops = run_loops(&leases, &scopes, slice, observe.then(|| subscriber.clone()));
            let loops = loops.await?;
            let grants_counted = grants_recorded(meters) - grants_before;
            let expected = if observe { loops.cycles } else { 0 };
            if grants_counted != expected {
                return Err(BenchError::Outcome(format!(
                    "the recorder counted {grants_counted} grants of {} cycles, observing: {observe}",
                    loops.cycles
                )));
            }
            if observe {
                observed.absorb(loops);
            } else {
                quiet.absorb(loops);
            }
        }
    }
    meters.on.store(false, Ordering::Relaxed);
    leases.close().await;
    Ok(Overhead {
        contenders,
        cycles_per_second_quiet: quiet.per_second(),
        cycles_per_second_observed: observed.per_second(),
        p50_quiet: quiet.p50(),
        p50_observed: observed.p50(),
    })
}

/// Cycles and their latencies over one or more slices.
#[derive(Debug, Default)]
struct Loops {
    cycles: u64,
    elapsed: Duration,
    latencies_ns: Vec<u64>,
}

impl Loops {
    fn absorb(&mut self, other: Loops) {
        self.cycles += other.cycles;
        self.elapsed += other.elapsed;
        self.latencies_ns.extend(other.latencies_ns);
    }

    fn per_second(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn p50(&mut self) -> Duration {
        self.latencies_ns.sort_unstable();
        crate::measure::quantile(&self.latencies_ns, 0.50)
    }
}

/// One slice: every contender loops acquire + release on its own scope.
async fn run_loops(
    leases: &PostgresLeases,
    scopes: &[Scope],
    slice: Duration,
    subscriber: Option<tracing::Dispatch>,
) -> Result<Loops, BenchError> {
    let ttl = Ttl::from_millis(60_000)?;
    let started = Instant::now();
    let deadline = started + slice;
    let mut tasks = tokio::task::JoinSet::new();
    for scope in scopes {
        let (leases, scope) = (leases.clone(), scope.clone());
        let contender = async move {
            let owner = Owner::generate();
            let mut loops = Loops::default();
            while Instant::now() < deadline {
                let cycle_started = Instant::now();
                let guard = leases.acquire(&scope, &owner, ttl).await?;
                guard.release().await?;
                let latency = cycle_started.elapsed();
                loops.cycles += 1;
                loops
                    .latencies_ns
                    .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
            }
            Ok::<_, BenchError>(loops)
        };
        match &subscriber {
            Some(dispatch) => tasks.spawn(contender.with_subscriber(dispatch.clone())),
            None => tasks.spawn(contender),
        };
    }
    let mut loops = Loops::default();
    while let Some(joined) = tasks.join_next().await {
        loops.absorb(joined.expect("a contender panicked")?);
    }
    loops.elapsed = started.elapsed();
    Ok(loops)
}
