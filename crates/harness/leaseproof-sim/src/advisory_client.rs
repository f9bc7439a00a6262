//! The sessions the advisory manager holds its locks on in the simulation:
//! one connection to the simulated database each, as a `PgConnection` is one
//! PostgreSQL session.
//!
//! Goal: run `PostgresAdvisoryLockManager` — its session per lock, probe,
//! idle cache, release and *lost* signal — unchanged against the simulated
//! database's session locks; only the transport is the simulation's.
//! Method: [`SimAdvisorySessions`] implements the manager's
//! `AdvisorySessions` seam; each session keeps its connection, so a lock
//! lives exactly as long as the connection does on the server's side (a
//! terminated backend, a crashed server, a lost reply's reset), and the
//! client learns it only at its next exchange. Invariant: every wait is on
//! turmoil's clock (the port's timeouts).

use leaseproof_locks::{AdvisorySession, AdvisorySessions, BoxFuture, LockError};
use leaseproof_protocol::BackendError;

use crate::port::{Broken, Connection, SimPort};
use crate::wire::{Request, Response};

/// Opens sessions to the simulated database for one client.
#[derive(Clone, Debug)]
pub struct SimAdvisorySessions {
    port: SimPort,
}

impl SimAdvisorySessions {
    /// Sessions speaking for `port.client`, with its request timeout.
    pub fn new(port: SimPort) -> SimAdvisorySessions {
        SimAdvisorySessions { port }
    }
}

/// One session: one connection to the simulated database.
pub struct SimAdvisorySession {
    port: SimPort,
    connection: Connection,
}

impl std::fmt::Debug for SimAdvisorySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimAdvisorySession")
            .field("client", &self.port.client)
            .finish_non_exhaustive()
    }
}

fn broken(broken: Broken) -> BackendError {
    format!("{broken:?}").into()
}

impl SimAdvisorySession {
    /// One statement with a boolean answer; any other answer is an error.
    fn ask(&mut self, request: Request) -> BoxFuture<'_, Result<bool, BackendError>> {
        Box::pin(async move {
            match self.port.exchange(&mut self.connection, request).await {
                Ok(Response::Answer(answer)) => Ok(answer),
                Ok(other) => Err(format!("unexpected answer {other:?}").into()),
                Err(error) => Err(broken(error)),
            }
        })
    }
}

impl AdvisorySession for SimAdvisorySession {
    fn try_lock(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>> {
        self.ask(Request::AdvisoryTryLock { key })
    }

    fn unlock(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>> {
        self.ask(Request::AdvisoryUnlock { key })
    }

    fn is_held(&mut self, key: i64) -> BoxFuture<'_, Result<bool, BackendError>> {
        self.ask(Request::AdvisoryHeld { key })
    }

    fn probe(&mut self) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move { self.ask(Request::Ping).await.map(drop) })
    }

    fn close(self) -> BoxFuture<'static, ()> {
        // Dropping the connection closes it: the server ends the session.
        Box::pin(async move { drop(self) })
    }
}

impl AdvisorySessions for SimAdvisorySessions {
    type Session = SimAdvisorySession;

    fn open(&self) -> BoxFuture<'_, Result<SimAdvisorySession, LockError>> {
        Box::pin(async move {
            let connection = self
                .port
                .connect()
                .await
                .map_err(|error| LockError::Unavailable {
                    source: broken(error),
                })?;
            Ok(SimAdvisorySession {
                port: self.port.clone(),
                connection,
            })
        })
    }
}
