//! The watchdog: a cluster whose owner is SIGKILLed still goes away.
//!
//! Goal: statics are never dropped and aborts skip `Drop`, so cleanup must not
//! depend on our process running any code at exit.
//! Method: start `leaseproof-pg-throwaway`, read its postmaster pid and dir,
//! SIGKILL it, then wait for the watchdog to stop the server and remove the dir.
//! Invariant: within a few seconds of the owner's death, no postmaster and no dir.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

use leaseproof_pgcluster::process_is_running;

use crate::eventually;

#[test]
fn killed_owner_leaves_no_server_and_no_dir() {
    let mut owner = Command::new(env!("CARGO_BIN_EXE_leaseproof-pg-throwaway"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let lines: Vec<String> = BufReader::new(owner.stdout.take().unwrap())
        .lines()
        .take(3)
        .map(Result::unwrap)
        .collect();
    let field = |key: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(key))
            .map(str::to_string)
    };
    let (Some(pid), Some(dir)) = (field("PID="), field("DIR=")) else {
        let _ = owner.wait();
        leaseproof_pgcluster::skip_or_panic(
            &leaseproof_pgcluster::PgUnavailable {
                reason: "leaseproof-pg-throwaway could not start a cluster".into(),
            },
            leaseproof_pgcluster::require_pg(),
        );
        return;
    };
    let pid: u32 = pid.parse().unwrap();
    let dir = std::path::PathBuf::from(dir);
    assert!(process_is_running(pid));
    assert!(dir.is_dir());

    owner.kill().unwrap(); // SIGKILL: no Drop, no atexit.
    owner.wait().unwrap();

    assert!(
        eventually(10_000, || !process_is_running(pid)),
        "postmaster {pid} outlived its owner"
    );
    assert!(
        eventually(10_000, || !dir.exists()),
        "{} outlived its owner",
        dir.display()
    );
}
