//! Measurements: throughput and latency percentiles of one run, takeover
//! latency from the grants it saw, and the server's transaction count.
//!
//! Goal: the numbers of one (workload, contenders) run, computed one way for
//! the CLI table, the criterion benches and the test.
//! Method: every operation's latency goes into a per-contender `Vec`; the run
//! sorts the union once (a run of a few seconds is at most a few hundred
//! thousand samples). Takeover latency pairs consecutive tokens of one scope.
//! Invariant: grants of one scope never overlap (I1), asserted on every run:
//! the benchmark is also a race test that happens to time itself. Knows
//! nothing of rigs or servers: `drive.rs` runs those.

use std::time::Duration;

use crate::workload::Workload;

/// One grant observed by a contender: the server's times and when the reply
/// reached the client (wall clock of this host, µs since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The grant's fencing token.
    pub token: i64,
    /// Server time of the grant, µs since the epoch.
    pub granted_at_us: i64,
    /// Server time the grant expires, µs since the epoch.
    pub expires_at_us: i64,
    /// Client wall time when the granting reply arrived, µs since the epoch.
    pub received_at_us: i64,
}

/// One contender's counts and latencies.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) operations: u64,
    pub(crate) granted: u64,
    pub(crate) latencies_ns: Vec<u64>,
}

impl Tally {
    pub(crate) fn record(&mut self, latency: Duration, granted: bool) {
        self.operations += 1;
        self.granted += u64::from(granted);
        self.latencies_ns
            .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }
}

/// Delay from a grant's `expires_at` to the next grant of the same scope.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TakeoverLatency {
    /// Consecutive grant pairs measured.
    pub takeovers: u64,
    /// Median of `next.granted_at − previous.expires_at`, server time.
    pub server_p50: Duration,
    /// 99th percentile of the same.
    pub server_p99: Duration,
    /// Mean of the same.
    pub server_mean: Duration,
    /// Median of (reply received, client wall clock) − `previous.expires_at`:
    /// what a waiting worker observes. Client and server share this host's
    /// clock when the server is local; against a remote server it includes
    /// the clocks' offset.
    pub client_p50: Duration,
    /// 99th percentile of the same.
    pub client_p99: Duration,
}

/// The result of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// What ran.
    pub workload: Workload,
    /// How many contenders ran it concurrently.
    pub contenders: usize,
    /// Operations completed, all contenders together.
    pub operations: u64,
    /// Operations that were granted a lease.
    pub granted: u64,
    /// Wall time of the run, from the first start to the last contender's end.
    pub elapsed: Duration,
    /// `operations / elapsed`.
    pub throughput_per_second: f64,
    /// Median latency of one operation.
    pub p50: Duration,
    /// 99th-percentile latency of one operation.
    pub p99: Duration,
    /// For runs that saw consecutive grants of one scope: the takeover delays.
    pub takeover: Option<TakeoverLatency>,
    /// Every operation's latency, sorted: what [`Measurement::combined`]
    /// takes its percentiles from.
    pub(crate) latencies_ns: Vec<u64>,
    /// Each slice's own figures, in measuring order (one for a single
    /// run): a goal is judged round by round against the baseline's slice
    /// of the same round.
    pub rounds: Vec<Round>,
}

/// One slice of a measurement: its throughput and median.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Round {
    /// `operations / elapsed` of the slice.
    pub throughput_per_second: f64,
    /// The slice's median latency.
    pub p50: Duration,
}

/// The `q`-quantile (0..=1) of sorted nanoseconds, nearest rank.
pub(crate) fn quantile(sorted_ns: &[u64], q: f64) -> Duration {
    if sorted_ns.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted_ns.len() as f64) * q).ceil() as usize;
    let index = rank.clamp(1, sorted_ns.len()) - 1;
    Duration::from_nanos(sorted_ns[index])
}

/// Takeover delays from the grants of one scope; asserts I1 on the way.
fn takeover_latency(mut grants: Vec<Grant>) -> Option<TakeoverLatency> {
    grants.sort_by_key(|grant| grant.token);
    grants.dedup_by_key(|grant| grant.token);
    let mut server_us = Vec::new();
    let mut client_us = Vec::new();
    for pair in grants.windows(2) {
        let (previous, next) = (pair[0], pair[1]);
        assert!(next.token > previous.token);
        // I1: grant intervals of one scope never overlap.
        assert!(
            next.granted_at_us >= previous.expires_at_us,
            "grant {} at {} overlaps grant {} expiring at {}",
            next.token,
            next.granted_at_us,
            previous.token,
            previous.expires_at_us
        );
        if next.token != previous.token + 1 {
            continue; // a grant in between was not seen (warm-up): not a pair
        }
        server_us.push(next.granted_at_us - previous.expires_at_us);
        client_us.push((next.received_at_us - previous.expires_at_us).max(0));
    }
    if server_us.is_empty() {
        return None;
    }
    let to_sorted_ns = |values: Vec<i64>| {
        let mut ns: Vec<u64> = values
            .into_iter()
            .map(|us| u64::try_from(us).unwrap_or(0) * 1_000)
            .collect();
        ns.sort_unstable();
        ns
    };
    let (server, client) = (to_sorted_ns(server_us), to_sorted_ns(client_us));
    let server_mean_ns = server.iter().sum::<u64>() / server.len() as u64;
    Some(TakeoverLatency {
        takeovers: server.len() as u64,
        server_p50: quantile(&server, 0.50),
        server_p99: quantile(&server, 0.99),
        server_mean: Duration::from_nanos(server_mean_ns),
        client_p50: quantile(&client, 0.50),
        client_p99: quantile(&client, 0.99),
    })
}

impl Measurement {
    pub(crate) fn from_run(
        workload: Workload,
        contenders: usize,
        elapsed: Duration,
        tallies: Vec<Tally>,
        grants: Vec<Grant>,
    ) -> Measurement {
        let operations: u64 = tallies.iter().map(|tally| tally.operations).sum();
        let granted: u64 = tallies.iter().map(|tally| tally.granted).sum();
        assert!(granted <= operations);
        assert_eq!(grants.len() as u64, granted, "every grant is recorded once");
        let latencies_ns = tallies
            .into_iter()
            .flat_map(|tally| tally.latencies_ns)
            .collect();
        let takeover = match workload {
            Workload::AcquireTakeover | Workload::TakeoverLatency => takeover_latency(grants),
            _ => None,
        };
        let key = (workload, contenders);
        Measurement {
            takeover,
            ..Measurement::totalled(key, operations, granted, elapsed, latencies_ns)
        }
    }

    /// Throughput and percentiles of `operations` (latencies in any order)
    /// over `elapsed`; no takeover delays.
    fn totalled(
        (workload, contenders): (Workload, usize),
        operations: u64,
        granted: u64,
        elapsed: Duration,
        mut latencies_ns: Vec<u64>,
    ) -> Measurement {
        assert_eq!(latencies_ns.len() as u64, operations);
        latencies_ns.sort_unstable();
        let throughput_per_second = operations as f64 / elapsed.as_secs_f64().max(1e-9);
        let p50 = quantile(&latencies_ns, 0.50);
        Measurement {
            workload,
            contenders,
            operations,
            granted,
            elapsed,
            throughput_per_second,
            p50,
            p99: quantile(&latencies_ns, 0.99),
            takeover: None,
            latencies_ns,
            rounds: vec![Round {
                throughput_per_second,
                p50,
            }],
        }
    }

    /// One measurement of the same (workload, contenders) from runs taken in
    /// slices: operations and time add up, percentiles come from every
    /// operation of every slice. Takeover delays pair grants of one scope, so
    /// they are kept only when there was one slice.
    pub(crate) fn combined(slices: Vec<Measurement>) -> Measurement {
        assert!(!slices.is_empty());
        let (workload, contenders) = (slices[0].workload, slices[0].contenders);
        assert!(slices
            .iter()
            .all(|slice| slice.workload == workload && slice.contenders == contenders));
        if slices.len() == 1 {
            return slices.into_iter().next().expect("one slice");
        }
        let operations: u64 = slices.iter().map(|slice| slice.operations).sum();
        let granted: u64 = slices.iter().map(|slice| slice.granted).sum();
        let elapsed: Duration = slices.iter().map(|slice| slice.elapsed).sum();
        let rounds = slices
            .iter()
            .flat_map(|slice| slice.rounds.iter().copied())
            .collect();
        let latencies_ns = slices
            .into_iter()
            .flat_map(|slice| slice.latencies_ns)
            .collect();
        let key = (workload, contenders);
        Measurement {
            rounds,
            ..Measurement::totalled(key, operations, granted, elapsed, latencies_ns)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(latencies_us: &[u64]) -> Tally {
        let mut tally = Tally::default();
        for &latency in latencies_us {
            tally.record(Duration::from_micros(latency), false);
        }
        tally
    }

    fn slice(elapsed_ms: u64, latencies_us: &[u64]) -> Measurement {
        Measurement::from_run(
            Workload::SelectOne,
            1,
            Duration::from_millis(elapsed_ms),
            vec![tally(latencies_us)],
            Vec::new(),
        )
    }

    #[test]
    fn slices_combine_into_totals_and_percentiles_of_every_operation() {
        // Two slices of unequal speed: throughput is total operations over
        // total time, not the mean of the slices' rates; the median comes
        // from all six operations, not from the slices' medians.
        let combined =
            Measurement::combined(vec![slice(100, &[10, 10, 10, 10]), slice(300, &[90, 80])]);
        assert_eq!(combined.operations, 6);
        assert_eq!(combined.elapsed, Duration::from_millis(400));
        assert!((combined.throughput_per_second - 15.0).abs() < 1e-9);
        assert_eq!(combined.p50, Duration::from_micros(10));
        assert_eq!(combined.p99, Duration::from_micros(90));
        assert_eq!(combined.latencies_ns.len(), 6);
    }

    #[test]
    fn one_slice_is_kept_as_measured() {
        let alone = slice(100, &[5, 7]);
        assert_eq!(Measurement::combined(vec![alone.clone()]), alone);
    }
}
