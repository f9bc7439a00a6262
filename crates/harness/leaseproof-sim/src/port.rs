//! The `LeasePort` client of the simulated database host.
//!
//! Goal: the worker loop drives the simulation through the same trait it
//! drives PostgreSQL through. Method: each operation opens a connection,
//! sends its statement(s) as JSON lines and waits for the replies with a
//! timeout. What failed decides the error, as in the PostgreSQL backend:
//! - nothing sent (connect refused or timed out) → `Unavailable`;
//! - a one-shot statement sent, reply lost (reset, timeout) → `OutcomeUnknown`;
//! - a transaction broken before `COMMIT` was sent → `Database` (it certainly
//!   rolled back); broken after `COMMIT` was sent → `OutcomeUnknown`.
//!
//! The rules themselves are not written here: `ensure_schema` retries through
//! `leaseproof_protocol::client::ensure_schema_with_retry` (the function
//! `PostgresLeases::ensure_schema` calls, retrying only the
//! concurrent-creation SQLSTATEs) unless the scenario turns the retry off, and
//! every broken exchange is classified by `client::broken_exchange`. What is
//! the port's own: it waits out an unreachable database at start-up (workers
//! may start before it), which PostgreSQL clients leave to their pool.

use std::time::Duration;

use leaseproof_protocol::client::{self, Broke, SqlStateError};
use leaseproof_protocol::semantics::Acquisition;
use leaseproof_protocol::{
    BackendError, CommitReceipt, CycleFaults, CyclePoint, Fencing, GuardedCycle, Holder, Lease,
    LeaseError, LeasePort, Owner, Scope, ServerTime, Ttl,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use turmoil::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::db;
use crate::trace::Trace;
use crate::wire::{ClientMessage, Request, Response};

/// A worker incarnation's connection settings to the simulated database.
#[derive(Clone, Debug)]
pub struct SimPort {
    /// The owner id the port speaks for (labels messages and trace lines).
    pub client: String,
    /// How long to wait for a connection or a reply.
    pub request_timeout: Duration,
    /// Retry `ensure_schema` once after the concurrent-creation error.
    pub schema_retry: bool,
    /// Pause between attempts while the database is unreachable at start-up.
    pub unavailable_retry: Duration,
    /// Give up on an unreachable database at start-up after this many attempts.
    pub unavailable_attempts_max: u32,
    /// The run's trace.
    pub trace: Trace,
}

/// Why an exchange broke, before classification into a [`LeaseError`].
#[derive(Debug)]
pub(crate) enum Broken {
    /// Nothing was sent.
    NotSent(String),
    /// The request was sent; the reply never came.
    NoReply(String),
}

fn sql_error(code: String, message: String) -> BackendError {
    Box::new(SqlStateError { code, message })
}

fn boxed(message: String) -> leaseproof_protocol::LeaseError {
    LeaseError::Database {
        source: message.into(),
    }
}

/// One connection to the database host: one session there.
pub(crate) struct Connection {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl SimPort {
    fn line(&self, text: impl FnOnce() -> String) {
        self.trace.line(Some(&self.client), text);
    }

    pub(crate) async fn connect(&self) -> Result<Connection, Broken> {
        match tokio::time::timeout(self.request_timeout, db::connect()).await {
            Ok(Ok(stream)) => {
                let (read, write) = stream.into_split();
                Ok(Connection {
                    lines: BufReader::new(read).lines(),
                    write,
                })
            }
            Ok(Err(error)) => Err(Broken::NotSent(format!("connect: {error}"))),
            Err(_) => Err(Broken::NotSent("connect timed out".to_string())),
        }
    }

    pub(crate) async fn exchange(
        &self,
        connection: &mut Connection,
        request: Request,
    ) -> Result<Response, Broken> {
        let name = request.name();
        let message = ClientMessage {
            client: self.client.clone(),
            request,
        };
        self.line(|| format!("{} -> db: {}", self.client, describe(&message.request)));
        let mut text = serde_json::to_string(&message).expect("requests serialise");
        text.push('\n');
        if let Err(error) = connection.write.write_all(text.as_bytes()).await {
            // turmoil hands the bytes to the network in one go: a failed
            // write sent nothing.
            return Err(Broken::NotSent(format!("{name}: {error}")));
        }
        let reply = tokio::time::timeout(self.request_timeout, connection.lines.next_line()).await;
        let broken = match reply {
            Ok(Ok(Some(line))) => {
                let response: Response =
                    serde_json::from_str(&line).expect("the server sends well-formed replies");
                self.line(|| format!("{} <- db: {}", self.client, describe_response(&response)));
                return Ok(response);
            }
            Ok(Ok(None)) => format!("{name}: connection closed before the reply"),
            Ok(Err(error)) => format!("{name}: {error}"),
            Err(_) => format!("{name}: no reply within {:?}", self.request_timeout),
        };
        self.line(|| format!("{} <- db: NO REPLY ({broken})", self.client));
        Err(Broken::NoReply(broken))
    }

    /// One statement on a fresh connection.
    async fn one_shot(
        &self,
        operation: &'static str,
        request: Request,
    ) -> Result<Response, LeaseError> {
        let result = match self.connect().await {
            Ok(mut connection) => self.exchange(&mut connection, request).await,
            Err(broken) => Err(broken),
        };
        match result {
            Ok(Response::Error { code, message }) if operation == "ensure_schema" => {
                Err(LeaseError::Schema {
                    source: sql_error(code, message),
                })
            }
            Ok(Response::Error { code, message }) => Err(LeaseError::Database {
                source: sql_error(code, message),
            }),
            Ok(response) => Ok(response),
            Err(Broken::NotSent(reason)) => {
                self.line(|| format!("{}: {operation} not sent ({reason})", self.client));
                Err(client::broken_exchange(
                    operation,
                    Broke::BeforeSend,
                    reason.into(),
                ))
            }
            Err(Broken::NoReply(reason)) => Err(client::broken_exchange(
                operation,
                Broke::AwaitingReply,
                reason.into(),
            )),
        }
    }

    /// One attempt at `CREATE TABLE IF NOT EXISTS`, waiting out an
    /// unreachable database (a connection problem is not the race).
    async fn create_schema_once(&self) -> Result<(), LeaseError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.one_shot("ensure_schema", Request::EnsureSchema).await {
                Ok(Response::SchemaReady) => return Ok(()),
                Ok(other) => return Err(boxed(format!("unexpected reply {other:?}"))),
                Err(error @ LeaseError::Schema { .. }) => return Err(error),
                Err(error) if attempts >= self.unavailable_attempts_max => {
                    return Err(LeaseError::Schema {
                        source: Box::new(error),
                    })
                }
                Err(_) => tokio::time::sleep(self.unavailable_retry).await,
            }
        }
    }

    async fn transaction(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        fenced: bool,
        faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        let mut connection = self.connect().await.map_err(|broken| {
            let reason = match broken {
                Broken::NotSent(reason) | Broken::NoReply(reason) => reason,
            };
            client::broken_exchange("commit", Broke::BeforeSend, reason.into())
        })?;
        // Until COMMIT is sent, any break means the transaction rolled back.
        let rolled_back = |broken: Broken| match broken {
            Broken::NotSent(reason) | Broken::NoReply(reason) => client::broken_exchange(
                "commit",
                Broke::BeforeCommit,
                format!("transaction rolled back before commit: {reason}").into(),
            ),
        };
        match self.exchange(&mut connection, Request::Begin).await {
            Ok(Response::Begun(_)) => {}
            Ok(other) => return Err(boxed(format!("begin: unexpected reply {other:?}"))),
            Err(broken) => return Err(rolled_back(broken)),
        }
        if fenced {
            let request = Request::Fence {
                lease: lease.clone(),
            };
            match self.exchange(&mut connection, request).await {
                Ok(Response::Fenced(Some(_))) => {}
                Ok(Response::Fenced(None)) => {
                    // Dropping the connection rolls the transaction back.
                    return Err(LeaseError::lost(lease));
                }
                Ok(other) => return Err(boxed(format!("fence: unexpected reply {other:?}"))),
                Err(broken) => return Err(rolled_back(broken)),
            }
        }
        faults.at(CyclePoint::Fenced).await;
        let write = Request::Write {
            lease: lease.clone(),
            cycle_id: cycle.cycle_id,
            items: cycle.items,
        };
        match self.exchange(&mut connection, write).await {
            Ok(Response::Written) => {}
            Ok(other) => return Err(boxed(format!("write: unexpected reply {other:?}"))),
            Err(broken) => return Err(rolled_back(broken)),
        }
        faults.at(CyclePoint::Written).await;
        match self.exchange(&mut connection, Request::Commit).await {
            Ok(Response::Committed {
                seq_first,
                fenced_at,
            }) => Ok(CommitReceipt {
                seq_first,
                fenced_at: Some(fenced_at),
            }),
            Ok(other) => Err(boxed(format!("commit: unexpected reply {other:?}"))),
            Err(Broken::NotSent(reason)) => Err(client::broken_exchange(
                "commit",
                Broke::BeforeCommit,
                format!("transaction rolled back, commit not sent: {reason}").into(),
            )),
            Err(Broken::NoReply(reason)) => Err(client::broken_exchange(
                "commit",
                Broke::AwaitingCommitReply,
                reason.into(),
            )),
        }
    }
}

fn describe(request: &Request) -> String {
    match request {
        Request::EnsureSchema => "CREATE TABLE IF NOT EXISTS".to_string(),
        Request::Acquire { scope, owner, ttl } => {
            format!(
                "acquire {scope} for {owner} ttl {}ms",
                ttl.as_micros() / 1_000
            )
        }
        Request::Renew { lease, ttl } => format!(
            "renew {} token {} ttl {}ms",
            lease.scope(),
            lease.token(),
            ttl.as_micros() / 1_000
        ),
        Request::Release { lease } => format!("release {} token {}", lease.scope(), lease.token()),
        Request::Holds { lease } => format!("holds {} token {}", lease.scope(), lease.token()),
        Request::Begin => "BEGIN".to_string(),
        Request::Fence { lease } => format!("FENCE {} token {}", lease.scope(), lease.token()),
        Request::Write {
            lease,
            cycle_id,
            items,
        } => format!(
            "WRITE cycle {cycle_id} ({items} rows) under token {}",
            lease.token()
        ),
        Request::Commit => "COMMIT".to_string(),
        Request::AdvisoryTryLock { key } => format!("pg_try_advisory_lock({key})"),
        Request::AdvisoryUnlock { key } => format!("pg_advisory_unlock({key})"),
        Request::AdvisoryHeld { key } => format!("advisory lock {key} held?"),
        Request::Ping => "SELECT 1".to_string(),
    }
}

fn describe_response(response: &Response) -> String {
    match response {
        Response::Acquired(Acquisition::Granted { lease, kind }) => format!(
            "granted {kind:?} token {} [{}, {})",
            lease.token(),
            crate::trace::format_us(lease.granted_at().micros),
            crate::trace::format_us(lease.expires_at().micros)
        ),
        Response::Acquired(Acquisition::Held { holder, .. }) => format!("held by {holder}"),
        other => format!("{other:?}"),
    }
}

impl LeasePort for SimPort {
    async fn ensure_schema(&self) -> Result<(), LeaseError> {
        let result = client::ensure_schema_with_retry(
            self.schema_retry,
            client::sqlstate_of,
            |error| {
                self.line(|| {
                    format!(
                        "{}: ensure_schema failed ({error}); retrying once",
                        self.client
                    )
                });
            },
            || self.create_schema_once(),
        )
        .await;
        if let Err(error) = &result {
            self.line(|| format!("{}: ensure_schema failed ({error})", self.client));
        }
        result
    }

    async fn acquire(&self, scope: &Scope, owner: &Owner, ttl: Ttl) -> Result<Lease, LeaseError> {
        let request = Request::Acquire {
            scope: scope.clone(),
            owner: owner.clone(),
            ttl,
        };
        match self.one_shot("acquire", request).await? {
            Response::Acquired(Acquisition::Granted { lease, .. }) => Ok(lease),
            // The simulated server has the row at hand: the holder is free.
            Response::Acquired(Acquisition::Held {
                holder,
                token,
                expires_at,
            }) => Err(LeaseError::Held {
                scope: scope.clone(),
                holder: Some(Holder {
                    owner: holder,
                    token,
                    expires_at,
                }),
            }),
            other => Err(boxed(format!("acquire: unexpected reply {other:?}"))),
        }
    }

    async fn renew(&self, lease: &Lease, ttl: Ttl) -> Result<Lease, LeaseError> {
        let request = Request::Renew {
            lease: lease.clone(),
            ttl,
        };
        match self.one_shot("renew", request).await? {
            Response::Renewed(Some(renewed)) => Ok(renewed),
            Response::Renewed(None) => Err(LeaseError::lost(lease)),
            other => Err(boxed(format!("renew: unexpected reply {other:?}"))),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        let request = Request::Release {
            lease: lease.clone(),
        };
        match self.one_shot("release", request).await? {
            Response::Released(released) => Ok(released.map(|released| released.expires_at())),
            other => Err(boxed(format!("release: unexpected reply {other:?}"))),
        }
    }

    async fn holds(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let request = Request::Holds {
            lease: lease.clone(),
        };
        match self.one_shot("holds", request).await? {
            Response::Holds(holds) => Ok(holds),
            other => Err(boxed(format!("holds: unexpected reply {other:?}"))),
        }
    }

    async fn commit(
        &self,
        lease: &Lease,
        cycle: GuardedCycle,
        fencing: Fencing,
        faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        self.transaction(lease, cycle, fencing == Fencing::Fenced, faults)
            .await
    }
}
