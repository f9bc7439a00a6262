//! A throwaway server in a child process, for tests that must kill its owner or
//! point `DATABASE_URL` at a server they do not own.
//!
//! Goal: the crate has no binary (the workspace keeps one, `leaseproof`, so
//! `cargo run` works), yet the watchdog and `DATABASE_URL` tests need a separate
//! process that owns a cluster.
//! Method: this test binary re-executes itself, running only
//! [`throwaway_server_process_entry`] with [`ENTRY_ENV`] set; that entry runs
//! [`serve_throwaway_until_stdin_closes`], whose three lines the parent reads
//! from the child's stdout (after libtest's own `test … ... ` prefix).
//! Invariant: without [`ENTRY_ENV`] the entry does nothing, so a plain
//! `cargo test` never starts a server that nobody stops.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

use leaseproof_pgcluster::serve_throwaway_until_stdin_closes;

/// Set (to `1`) only in the child process that serves the throwaway cluster.
const ENTRY_ENV: &str = "LEASEPROOF_PG_THROWAWAY_ENTRY";

/// The entry's full name for `--exact` (module path inside the `it` binary).
const ENTRY_TEST: &str = "throwaway_child::throwaway_server_process_entry";

/// Entry point of the child process, not a test: with [`ENTRY_ENV`] set it
/// serves a throwaway cluster until stdin closes; unset (every ordinary
/// `cargo test` run) it returns at once, on purpose.
#[test]
fn throwaway_server_process_entry() {
    if std::env::var_os(ENTRY_ENV).is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let exit_code = runtime.block_on(serve_throwaway_until_stdin_closes());
    // The parent tells failure apart by the missing `DATABASE_URL=` line and the
    // exit status, as it did with the former standalone binary.
    if exit_code != std::process::ExitCode::SUCCESS {
        std::process::exit(1);
    }
}

/// A child process serving a throwaway cluster, and where that cluster is.
pub struct ThrowawayChild {
    /// The child; kill it to test the watchdog, or call [`Self::finish`].
    pub process: Child,
    /// The child's stdout after the three lines; kept open (and drained by
    /// [`Self::finish`]) so libtest's closing lines do not hit a broken pipe.
    stdout: BufReader<ChildStdout>,
    /// `DATABASE_URL=` value: superuser URL of the cluster.
    pub url: String,
    /// `PID=` value: the postmaster's pid.
    pub postmaster_pid: u32,
    /// `DIR=` value: the cluster's temp dir.
    pub dir: PathBuf,
}

impl ThrowawayChild {
    /// Closes the child's stdin (its signal to stop the cluster), drains its
    /// stdout and returns its exit status.
    pub fn finish(mut self) -> ExitStatus {
        drop(self.process.stdin.take());
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        self.process.wait().unwrap()
    }
}

/// Starts this test binary again as a throwaway server and reads its three
/// lines. `None` after the skip line (or a panic under `LEASEPROOF_REQUIRE_PG=1`)
/// when the child could not start a cluster; a child that failed for any other
/// reason (entry not found, panic) fails the calling test.
pub fn spawn_throwaway_child() -> Option<ThrowawayChild> {
    let mut process = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", ENTRY_TEST, "--nocapture", "--test-threads=1"])
        .env(ENTRY_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(process.stdout.take().unwrap());
    let mut printed = String::new();
    let mut url = None;
    let mut postmaster_pid = None;
    // libtest writes "running 1 test" and, single-threaded, "test <name> ... "
    // without a newline before the entry's first line: strip that prefix.
    let libtest_prefix = format!("test {ENTRY_TEST} ... ");
    let mut line = String::new();
    while stdout.read_line(&mut line).unwrap() > 0 {
        printed.push_str(&line);
        let field = line.trim_end_matches('\n');
        let field = field.strip_prefix(&libtest_prefix).unwrap_or(field);
        if let Some(value) = field.strip_prefix("DATABASE_URL=") {
            url = Some(value.to_string());
        } else if let Some(value) = field.strip_prefix("PID=") {
            postmaster_pid = Some(value.parse().unwrap());
        } else if let Some(value) = field.strip_prefix("DIR=") {
            // The last of the three lines; the child now waits on its stdin.
            return Some(ThrowawayChild {
                process,
                stdout,
                url: url.expect("DATABASE_URL= before DIR="),
                postmaster_pid: postmaster_pid.expect("PID= before DIR="),
                dir: PathBuf::from(value),
            });
        }
        line.clear();
    }
    // EOF without the three lines: only the entry's own "no cluster" exit (1,
    // after the skip line on stderr) is a skip. A wrong entry name would run
    // zero tests and exit 0; a panic exits 101.
    let status = process.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "throwaway child failed without its skip line; stdout:\n{printed}"
    );
    assert!(printed.contains("running 1 test"), "{printed}");
    leaseproof_pgcluster::skip_or_panic(
        &leaseproof_pgcluster::PgUnavailable {
            reason: "the throwaway child process could not start a cluster".into(),
        },
        leaseproof_pgcluster::require_pg(),
    );
    None
}
