//! The cleanup every throwaway server of the test suite shares: a detached
//! `sh` that waits for the process that started the server to be gone and
//! then runs the server's cleanup (stop it, remove its directory or
//! container).
//!
//! Why a second process: the shared servers live in statics, which Rust never
//! drops, and a test binary may die by SIGKILL; only something outside the
//! process sees it end. The watchdog runs in its own process group, so
//! neither the test harness nor a terminal's Ctrl-C reaches it, and nothing
//! waits on its (null) standard streams.
//!
//! **Invariant:** a watchdog touches only what its script names — the paths
//! and pids its caller created — never a process found by name.
#![deny(missing_docs)]

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};

/// Spawns `sh -c` with `cleanup`, to run once this process has exited.
///
/// `cleanup` is shell text; quote every path in it with [`shell_quote`].
/// The child is returned for an owner that stops its server itself and then
/// has nothing left for the watchdog to do (kill it); dropping it leaves the
/// watchdog armed.
pub fn after_this_process(cleanup: &str) -> std::io::Result<Child> {
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; {cleanup}",
        me = std::process::id(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
}

/// Removes the Docker container `id` once this process has exited.
pub fn remove_container_after_this_process(id: &str) -> std::io::Result<()> {
    after_this_process(&format!("docker rm -f {} >/dev/null 2>&1", shell_quote(id))).map(drop)
}

/// Single-quotes `word` for `sh`.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_survives_single_quotes() {
        let output = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", shell_quote("it's a 'dir' $HOME")))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            "it's a 'dir' $HOME"
        );
    }

    #[test]
    fn the_cleanup_waits_for_the_process_and_then_runs() {
        // A child process stands in for "this process": the watchdog it arms
        // must not run while the child lives, and must run once it is gone.
        let dir = std::env::temp_dir().join(format!("leaseproof-watchdog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("cleaned");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::arm_and_linger", "--nocapture"])
            .env("LEASEPROOF_WATCHDOG_MARKER", &marker)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        assert!(!marker.exists(), "the cleanup ran while its process lived");
        child.kill().unwrap();
        child.wait().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !marker.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let cleaned = marker.exists();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            cleaned,
            "the cleanup never ran after its process was killed"
        );
    }

    #[test]
    fn arm_and_linger() {
        let Some(marker) = std::env::var_os("LEASEPROOF_WATCHDOG_MARKER") else {
            return;
        };
        let marker = shell_quote(&std::path::Path::new(&marker).display().to_string());
        drop(after_this_process(&format!("touch {marker}")).unwrap());
        std::thread::sleep(std::time::Duration::from_secs(30));
    }
}
