//! Lock clients in any language, driven over a documented protocol under
//! seeded faults on real servers, judged by the one checker.
//!
//! - [`wire`]: the protocol's messages (`docs/client-protocol.md`);
//! - [`child`]: a client process, its pipes and its signals;
//! - [`net`]: the fault proxy between a client and a store;
//! - [`effects`]: what the process strikes were seen to do;
//! - [`plan`]: the seeded fault plan (swarm), clock-timed or aimed at moments;
//! - `moments`: where the strikes aimed at protocol moments meet the workers;
//! - [`lock_client`]: leaseproof's own locks behind the protocol;
//! - [`run`]: one run — its configuration, its stores and proxies, its
//!   workers and injector started and awaited, the verdict — in parts:
//!   `state` (what the parts share: each client's slot, the run), `processes`
//!   (the client processes, their environment and watchdog), `drive` (the
//!   worker that drives one client and records what it did), `strike` (the
//!   injector: each strike aimed and landed), `evidence` (the rows read
//!   back with their commit times) and `report` (what a run reports).

pub mod child;
mod drive;
pub mod effects;
mod evidence;
pub mod lock_client;
mod moments;
pub mod net;
pub mod plan;
mod processes;
mod report;
pub mod run;
mod state;
mod strike;
pub mod wire;

pub use plan::{FaultKind, FaultPlan, Moment};
pub use report::{ClientRunReport, WorkerTally};
pub use run::{run_clients, ClientRunConfig, ClientRunError};
