//! Race tests on a real PostgreSQL server, as a library the tests and the CLI share.
//!
//! Goal: show on a real server that the reference lease keeps the single-holder
//! invariant when it matters — many tasks or OS processes racing for one scope
//! with short TTLs, a holder stalled past expiry, a backend killed mid-cycle,
//! the server restarted mid-race, a reply lost after the server committed — and
//! that the harness has teeth (the unfenced path is caught).
//!
//! Method: every racer runs THE worker loop ([`leaseproof_worker::run_worker`],
//! shared with the simulation) over a [`leaseproof_postgres::HarnessPort`],
//! recording into a [`leaseproof_history::Recorder`] stamped by a monotonic
//! clock ([`clock`]); grants are what `RETURNING` sent back (token and server
//! times), guarded writes go to the real `leaseproof_guarded` table through the
//! fenced commit cycle. After the run the table's rows are read back as ground
//! truth and [`leaseproof_history::check`] judges the history ([`race`]).
//! Process races re-execute a binary per worker and merge the histories
//! ([`process`]); the lost reply comes from a loopback TCP proxy ([`proxy`]).
//!
//! Invariant: a race passes only when the checker finds no violation AND the
//! race was real ([`race::RaceOutcome::realness_problems`]): several distinct
//! winners, takeovers, refused acquisitions and commits — never vacuously.
#![deny(missing_docs)]

pub mod clients;
pub mod clock;
pub mod hooks;
pub mod lock_matrix;
mod lock_race;
pub mod managers;
pub mod process;
pub mod proxy;
pub mod race;
pub mod scenes;

pub use lock_race::{lock_race, race_on, verify_race, LockRace, LockRaceDocument};
pub use managers::{build_manager, BuildError, BuiltManager, ManagerKind, ManagerSpec};
pub use process::{
    process_race, run_worker_process, WorkerLauncher, WORKER_CONFIG_ENV, WORKER_SUBCOMMAND,
};
pub use race::{
    task_race, RaceConfig, RaceDocument, RaceError, RaceFence, RaceOutcome, RaceReadFirst, Summary,
};
