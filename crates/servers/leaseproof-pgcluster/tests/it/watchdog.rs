//! The watchdog: a cluster whose owner is SIGKILLed still goes away.
//!
//! Goal: statics are never dropped and aborts skip `Drop`, so cleanup must not
//! depend on our process running any code at exit.
//! Method: start a throwaway server in a child process (this test binary,
//! re-executed: see `throwaway_child`), read its postmaster pid and dir, SIGKILL
//! the child, then wait for the watchdog to stop the server and remove the dir.
//! Invariant: within a few seconds of the owner's death, no postmaster and no dir.

use leaseproof_pgcluster::process_is_running;

use crate::eventually;
use crate::throwaway_child::spawn_throwaway_child;

#[test]
fn killed_owner_leaves_no_server_and_no_dir() {
    let Some(mut owner) = spawn_throwaway_child() else {
        return;
    };
    let pid = owner.postmaster_pid;
    let dir = owner.dir.clone();
    assert!(process_is_running(pid));
    assert!(dir.is_dir());

    owner.process.kill().unwrap(); // SIGKILL: no Drop, no atexit.
    owner.process.wait().unwrap();

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
