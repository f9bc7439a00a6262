//! The reference lease on PostgreSQL.
//!
//! One row per scope is the lock and PostgreSQL serialises the writers:
//!
//! - **acquire** is one statement and one round trip — `INSERT … SELECT … WHERE
//!   NOT EXISTS (live row of another owner) ON CONFLICT (scope) DO UPDATE … WHERE
//!   expired OR same owner RETURNING …` — and the caller learns from the returned
//!   row whether it won. The `NOT EXISTS` guard makes a losing attempt on a held
//!   lease a plain read: no row lock, no WAL (the bare upsert locks the row and
//!   writes WAL even when its `WHERE` refuses, ~14× slower under contention);
//!   a client that saw a scope refused reads first there (a polling loser
//!   costs a primary-key read; the statement still decides every grant —
//!   [`ReadFirst`]);
//! - every time comparison uses the server's clock; clients never send a timestamp;
//! - tokens grow on every grant and never restart: release expires the row, it
//!   never deletes it; renew, release and the fence match owner AND token;
//! - the commit-time fence (`hold_for_update`) is `SELECT … FOR UPDATE` inside the
//!   guarded transaction, so a rival's takeover queues behind the commit;
//!   `commit_cycle` sends it with `BEGIN`, one round trip more than the same
//!   writes unfenced (its aborted-transaction probe);
//! - `ensure_schema` survives workers that all start at once.
//!
//! [`PostgresLeases`] is the library API. With the feature `harness` (the
//! verification harness's, never a user's), `HarnessPort` adapts it to the
//! harness's `LeasePort` with a guarded table, and `conformance` holds the
//! checks the tests and `leaseproof verify` share.
//!
//! # Using the lease
//!
//! The README's sample, run as a doc-test against a throwaway cluster (the
//! hidden lines start it; a test keeps the README's copy identical to the
//! visible lines):
//!
//! ```rust
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let Some(database) = leaseproof_pgcluster::test_database().await else { return Ok(()) };
//! # let database_url = database.url.clone();
//! use std::time::Duration;
//! use leaseproof_postgres::PostgresLeases;
//! use leaseproof_protocol::{Owner, Scope, Ttl};
//!
//! let leases = PostgresLeases::connect(&database_url, 8).await?; // or ::new(pool) with PostgresLeases::pool_options()
//! leases.ensure_schema().await?;                       // safe when many workers start at once
//! sqlx::query("CREATE TABLE IF NOT EXISTS results (job text)").execute(leases.pool()).await?; // your table
//! let owner = Owner::generate();                       // host:pid:random — one per incarnation
//! let scope = Scope::for_table("myapp", "public", "events")?;
//! let ttl = Ttl::from_millis(30_000)?;
//! let lease = leases.acquire_wait(&scope, &owner, ttl, Duration::from_secs(10)).await? // Err(Held) at 10 s
//!     .with_keep_alive();                              // renews every ttl/3, keeping the token
//! let work = lease.commit_cycle(|connection| Box::pin(async move {
//!     sqlx::query("INSERT INTO results (job) VALUES ('events')").execute(connection).await // under the fence
//! }));
//! tokio::select! {
//!     committed = work => drop(committed?),            // Err(Lease(Lost)) if a rival took over
//!     reason = lease.lost() => return Err(format!("lease lost: {reason:?}").into()), // stop early
//! }
//! lease.release().await?;                              // expires the row; never deletes it
//! # let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM results").fetch_one(leases.pool()).await?;
//! # assert_eq!(rows, 1);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

// What the harness drives and checks the lease with (feature `harness`):
// built for the harness and the crate's own tests, never for a user's build.
#[cfg(feature = "harness")]
pub mod conformance;
mod election;
pub mod errors;
mod guard;
mod guarded_write;
pub mod keep_alive;
mod leases;
mod observe;
#[cfg(feature = "harness")]
mod port;
mod read_first;
mod reuse;
pub mod sql;
mod statements;
mod wake;

pub use election::{Election, Leadership};
pub use guard::LeaseGuard;
pub use guarded_write::{GuardedInsert, GuardedWrite};
pub use keep_alive::LostReason;
pub use leases::{CycleError, FenceMode, LeaseTransaction, PostgresLeases, SchemaMismatch};
#[cfg(feature = "harness")]
pub use port::{CommitPath, GuardedTable, HarnessPort};
pub use read_first::ReadFirst;
pub use statements::Statements;
