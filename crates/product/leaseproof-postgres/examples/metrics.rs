//! The lease's meters exported: install a recorder, use the lease, print
//! what it counted in Prometheus' text format.
//!
//! ```sh
//! cargo run -p leaseproof-postgres --example metrics   # DATABASE_URL, or a throwaway cluster
//! ```
//!
//! The library reports through the `metrics` facade and never picks an
//! exporter; an application installs the one it runs (here a debugging
//! recorder from `metrics-util`, printed by hand; in production e.g.
//! `metrics-exporter-prometheus`).

use std::time::Duration;

use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::{Owner, Scope, Ttl};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;

    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return Err("no PostgreSQL: set DATABASE_URL or install the server binaries".into());
    };
    let leases = PostgresLeases::connect(&database.url, 4).await?;
    leases.ensure_schema().await?;
    let scope = Scope::new("nightly-rollup")?;
    let ttl = Ttl::from_millis(10_000)?;
    for _ in 0..3 {
        let guard = leases
            .acquire_wait(&scope, &Owner::generate(), ttl, Duration::from_secs(5))
            .await?;
        let _ = leases.acquire(&scope, &Owner::generate(), ttl).await; // a loser
        guard.release().await?;
    }

    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}=\"{}\"", label.key(), label.value()))
            .collect();
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.join(","))
        };
        match value {
            DebugValue::Counter(count) => println!("{}{labels} {count}", key.name()),
            DebugValue::Histogram(values) => {
                let sum: f64 = values.iter().map(|value| value.into_inner()).sum();
                println!("{}_count{labels} {}", key.name(), values.len());
                println!("{}_sum{labels} {sum:.6}", key.name());
            }
            DebugValue::Gauge(value) => println!("{}{labels} {}", key.name(), value.into_inner()),
        }
    }
    Ok(())
}
