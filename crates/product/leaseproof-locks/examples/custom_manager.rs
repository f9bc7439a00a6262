//! A lock manager of your own behind `LockManager`, checked by the
//! conformance suite: here locks in this process's memory, the smallest
//! thing that keeps the contract (a ZooKeeper or etcd manager has the same
//! shape: take the lock or say `Held` at once, hand out a guard whose
//! release frees it and whose *lost* signal fires when the lock is gone).
//!
//! ```sh
//! cargo run -p leaseproof-locks --example custom_manager
//! ```

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use leaseproof_locks::{watch, BoxFuture, LockError, LockGuard, LockManager, TableName};

/// Locks held by this process, one per table.
#[derive(Debug, Default)]
pub struct MemoryLocks {
    held: Arc<Mutex<BTreeSet<String>>>,
}

impl LockManager for MemoryLocks {
    fn acquire_lock<'a>(
        &'a self,
        table: &'a TableName,
    ) -> BoxFuture<'a, Result<LockGuard, LockError>> {
        Box::pin(async move {
            // Validates the table name: bad input is a typed error.
            let scope = table.scope("memory")?;
            let key = scope.as_str().to_string();
            if !self.held.lock().unwrap().insert(key.clone()) {
                // Never queue: a collision is refused at once.
                return Err(LockError::Held {
                    scope,
                    holder: None,
                });
            }
            // The lock lives as long as this process: *lost* never fires,
            // but the sender must live until the release.
            let (lost_sender, lost) = watch::channel(false);
            let held = Arc::clone(&self.held);
            Ok(LockGuard::custom(scope, None, lost, move || {
                Box::pin(async move {
                    drop(lost_sender);
                    held.lock().unwrap().remove(&key);
                    Ok(())
                })
            }))
        })
    }

    fn is_locked<'a>(&'a self, table: &'a TableName) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let scope = table.scope("memory")?;
            Ok(self.held.lock().unwrap().contains(scope.as_str()))
        })
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

/// Runs the whole conformance suite on [`MemoryLocks`].
pub async fn check_memory_locks() -> Result<String, leaseproof_locks::conformance::ConformanceError>
{
    let manager: Arc<dyn LockManager> = Arc::new(MemoryLocks::default());
    // `None`: the lock lives until released (no TTL to promise).
    let report = leaseproof_locks::conformance::run_suite(manager, "example", None).await?;
    Ok(report.to_string())
}

#[tokio::main(flavor = "current_thread")]
#[allow(
    dead_code,
    reason = "the test includes this file and calls the check itself"
)]
async fn main() {
    match check_memory_locks().await {
        Ok(report) => println!("PASS memory: {report}"),
        Err(error) => {
            eprintln!("FAIL {error}");
            std::process::exit(1);
        }
    }
}
