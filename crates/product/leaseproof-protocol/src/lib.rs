//! The lease protocol's pure semantics.
//!
//! Everything the rest of leaseproof agrees on lives here, and nothing here does
//! IO: no tokio, no SQL, no wall clock. The PostgreSQL backend, the simulated
//! database and the model checker all build on these types.
//!
//! - [`Scope`], [`Owner`], [`Ttl`], [`FencingToken`], [`Lease`]: validated at
//!   construction, so bad input is a typed [`InvalidInput`] before any SQL runs.
//! - [`LeaseError`]: the one error type every backend returns.
//! - [`semantics::LeaseTable`]: an executable model of every lease statement with
//!   the server clock passed in. It is the specification the SQL is tested
//!   against and the state the simulated database serves.
//! - `LeasePort` (feature `harness`, for the verification harness): the
//!   operations the worker loop drives, whatever the backend.
//! - [`client`]: the client-side rules (schema retry, error classification)
//!   every backend calls, so the simulation runs the library's own decisions.
#![deny(missing_docs)]

pub mod client;
mod error;
mod lease;
mod owner;
// The port the harness's worker loop drives: built only for the harness.
#[cfg(feature = "harness")]
mod port;
mod scope;
pub mod semantics;
mod ttl;

pub use error::{BackendError, InvalidInput, LeaseError};
pub use lease::{FencingToken, Holder, Lease, ServerTime};
pub use owner::Owner;
#[cfg(feature = "harness")]
pub use port::{
    CommitReceipt, CycleFault, CycleFaults, CyclePoint, Fencing, GuardedCycle, LeasePort,
    NoCycleFaults,
};
pub use scope::Scope;
pub use ttl::Ttl;
