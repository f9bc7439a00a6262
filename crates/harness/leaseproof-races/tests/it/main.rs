//! Race tests on a real PostgreSQL server: one integration-test binary, one
//! module per topic. Every test gets a fresh database on the shared throwaway
//! cluster (or a dedicated cluster when it restarts the server); without a
//! server they print a loud skip line, and fail instead under
//! `LEASEPROOF_REQUIRE_PG=1`.

mod cli;
mod clients;
mod election;
mod faults;
mod foreign_lease;
mod lock_matrix;
mod lost_reply;
mod pause_takeover;
mod pgbouncer;
mod processes;
mod schema;
mod support;
mod task_races;
mod varied_clients;
mod waiting;
