//! `leaseproof-pg-throwaway`: a dedicated throwaway PostgreSQL for humans and tests.
//!
//! Goal: start a cluster, print where it is, keep it until stdin closes.
//! Method: prints `DATABASE_URL=…`, `PID=…` (postmaster) and `DIR=…` (temp dir),
//! one per line, then waits for EOF on stdin and drops the cluster.
//! Invariant: however this process ends (EOF, Ctrl-C, SIGKILL), the server stops
//! and the dir goes away; on a kill it is the watchdog that does it, which is what
//! the crate's watchdog test relies on.

use std::io::{BufRead as _, Write as _};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cluster = match leaseproof_pgcluster::DedicatedCluster::start_dedicated().await {
        Ok(cluster) => cluster,
        Err(unavailable) => {
            eprintln!("{}", leaseproof_pgcluster::skip_line(&unavailable));
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "DATABASE_URL={}", cluster.url());
    let _ = writeln!(stdout, "PID={}", cluster.postmaster_pid().unwrap_or(0));
    let _ = writeln!(stdout, "DIR={}", cluster.dir().display());
    let _ = stdout.flush();
    drop(stdout);
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    drop(cluster);
    std::process::ExitCode::SUCCESS
}
