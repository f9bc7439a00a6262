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
//! - [`run`]: one run — stores, proxies, processes, workers, the injector,
//!   the rows read back, the verdict.

pub mod child;
pub mod effects;
pub mod lock_client;
mod moments;
pub mod net;
pub mod plan;
pub mod run;
pub mod wire;

pub use plan::{FaultKind, FaultPlan, Moment};
pub use run::{run_clients, ClientRunConfig, ClientRunError, ClientRunReport, WorkerTally};
