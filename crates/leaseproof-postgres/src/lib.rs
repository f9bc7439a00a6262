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
//! - every time comparison uses the server's clock; clients never send a timestamp;
//! - tokens grow on every grant and never restart: release expires the row, it
//!   never deletes it; renew, release and the fence match owner AND token;
//! - the commit-time fence (`hold_for_update`) is `SELECT … FOR UPDATE` inside the
//!   guarded transaction, so a rival's takeover queues behind the commit;
//! - `ensure_schema` survives workers that all start at once.
//!
//! [`PostgresLeases`] is the library API; [`HarnessPort`] adapts it to the
//! harness's [`LeasePort`](leaseproof_protocol::LeasePort) with a guarded table.
#![deny(missing_docs)]

pub mod conformance;
mod errors;
mod leases;
mod port;
pub mod sql;

pub use leases::{CycleError, LeaseTransaction, PostgresLeases, SchemaMismatch};
pub use port::HarnessPort;
