//! A throwaway PostgreSQL served to a human or a parent process until stdin closes.
//!
//! Goal: one call that starts a dedicated cluster, says where it is and keeps it
//! exactly as long as whoever started us wants it; the CLI exposes it as
//! `leaseproof pg`, and the crate's own tests run it in a child process.
//! Method: print `DATABASE_URL=…`, `PID=…` (postmaster) and `DIR=…` (temp dir),
//! one per line, flush, then wait on a blocking thread for EOF on stdin and drop
//! the cluster.
//! Invariant: however the process ends (EOF, Ctrl-C, SIGKILL), the server stops
//! and the dir goes away; on a kill it is the cluster's watchdog that does it.

use std::io::{BufRead as _, Write as _};
use std::process::ExitCode;

use crate::{skip_line, DedicatedCluster};

/// Starts a [`DedicatedCluster`], prints where it is and keeps it until stdin
/// reaches end-of-file (or fails), then stops it and removes its temp dir.
///
/// Prints three lines to stdout, in this order and then nothing else:
/// `DATABASE_URL=<superuser url>`, `PID=<postmaster pid>`, `DIR=<temp dir>`.
/// Closing stdin (Ctrl-D, or a parent dropping its pipe) ends the wait; if the
/// process is killed instead, the cluster's watchdog stops the server and
/// removes the dir.
///
/// Returns [`ExitCode::SUCCESS`] after a clean shutdown, and
/// [`ExitCode::FAILURE`] after printing the [`skip_line`] to stderr when no
/// cluster can be started (`DATABASE_URL` is ignored: a server we do not own is
/// not throwaway). Stdin is read on a blocking thread, so this runs on any
/// tokio runtime, current-thread included.
pub async fn serve_throwaway_until_stdin_closes() -> ExitCode {
    let cluster = match DedicatedCluster::start_dedicated().await {
        Ok(cluster) => cluster,
        Err(unavailable) => {
            eprintln!("{}", skip_line(&unavailable));
            return ExitCode::FAILURE;
        }
    };
    {
        // Written and flushed in one go: a parent reads these lines from a pipe.
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "DATABASE_URL={}", cluster.url());
        let _ = writeln!(stdout, "PID={}", cluster.postmaster_pid().unwrap_or(0));
        let _ = writeln!(stdout, "DIR={}", cluster.dir().display());
        let _ = stdout.flush();
    }
    let stdin_closed = tokio::task::spawn_blocking(|| {
        for line in std::io::stdin().lock().lines() {
            if line.is_err() {
                break;
            }
        }
    });
    // A panic on the reading thread also means nobody can tell us to stop any
    // more: stop now rather than serve forever.
    let _ = stdin_closed.await;
    drop(cluster);
    ExitCode::SUCCESS
}
