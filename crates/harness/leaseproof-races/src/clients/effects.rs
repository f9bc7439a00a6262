//! What the process strikes did, seen from outside the process.
//!
//! Goal: a strike that reports itself done while it did nothing must show.
//! A lock client absorbs much of what is done to it (the reference lease
//! re-asks, waits, starts a new incarnation), so a verdict need not move when
//! a strike silently fails — the proxies count what their network faults
//! did, and this module counts what the process faults did. Method: each
//! count is an observation of the system, never the strike's own word: the
//! process's state in `/proc` after SIGSTOP (stopped) and SIGKILL (gone),
//! the backends PostgreSQL says it terminated, the Redis server's process
//! replaced by a restart, libfaketime in the memory map of a client started
//! on a skewed clock.
//! Invariant: a count moves only on what was observed; a strike that found
//! nothing to act on counts nothing.

use std::time::{Duration, Instant};

/// What the process strikes did, counted from observations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessEffects {
    /// Pauses whose process was seen stopped after SIGSTOP.
    pub processes_stopped: u64,
    /// Kills whose process was seen gone after SIGKILL.
    pub processes_killed: u64,
    /// Backends of a client's connections PostgreSQL terminated.
    pub backends_terminated: u64,
    /// Restarts after which another Redis server process answered.
    pub redis_restarts: u64,
    /// Client processes started on a skewed clock with libfaketime loaded.
    pub clients_skewed: u64,
}

/// The state letter of `/proc/<pid>/stat`, `None` once the pid is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state is the first field after the parenthesised command name.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// Polls `seen` every 5 ms for at most `within`.
async fn observed_within(within: Duration, seen: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if seen() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `pid` is seen stopped (`T`, or `t` under a tracer) within `within`.
pub(crate) async fn seen_stopped(pid: u32, within: Duration) -> bool {
    observed_within(within, || matches!(state(pid), Some('T' | 't'))).await
}

/// Whether `pid` is seen gone (exited, a zombie, or reaped) within `within`.
pub(crate) async fn seen_gone(pid: u32, within: Duration) -> bool {
    observed_within(within, || matches!(state(pid), None | Some('Z' | 'X'))).await
}

/// Whether libfaketime is mapped into `pid`.
pub(crate) fn loads_libfaketime(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.contains("libfaketime"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stopped_and_then_killed_process_is_seen_as_each() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(!seen_stopped(pid, Duration::from_millis(50)).await);
        assert!(!seen_gone(pid, Duration::from_millis(50)).await);
        let signal = |name: &str| {
            std::process::Command::new("kill")
                .args([&format!("-{name}"), &pid.to_string()])
                .status()
                .unwrap()
        };
        assert!(signal("STOP").success());
        assert!(seen_stopped(pid, Duration::from_secs(2)).await);
        assert!(signal("KILL").success());
        assert!(seen_gone(pid, Duration::from_secs(2)).await);
        child.wait().unwrap();
        assert!(seen_gone(pid, Duration::ZERO).await);
        assert!(!loads_libfaketime(std::process::id()));
    }
}
