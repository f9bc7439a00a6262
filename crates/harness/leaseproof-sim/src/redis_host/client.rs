//! The connection a Redis lock uses in the simulation: redis-rs's own
//! multiplexed connection over a turmoil TCP stream, reconnecting after a
//! broken exchange the way redis-rs's `ConnectionManager` does.
//!
//! Goal: run `RedisDistributedLockManager` — its scripts, tokens, keep-alive
//! and *lost* signal — unchanged against the simulated Redis; only the
//! transport is the simulation's. Method: a `redis::aio::ConnectionLike`
//! holding at most one `MultiplexedConnection`; the command that meets a
//! dead or silent connection fails (and is reported to the manager), the
//! next one connects again. Invariant: every wait is on turmoil's clock.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Value};
use tokio::sync::Mutex;

use super::{REDIS_HOST, REDIS_PORT};
use crate::trace::Trace;

/// A reconnecting connection to the simulated Redis; clones share it.
#[derive(Clone)]
pub struct SimRedisConnection {
    current: Arc<Mutex<Option<MultiplexedConnection>>>,
    /// How long a connect or a reply may take before the exchange is broken.
    timeout: Duration,
    /// The run's trace and the client's name, for the broken exchanges.
    trace: Trace,
    client: String,
}

impl std::fmt::Debug for SimRedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimRedisConnection")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl SimRedisConnection {
    /// A connection for `client` that connects at its first command.
    pub fn new(timeout: Duration, trace: Trace, client: String) -> SimRedisConnection {
        SimRedisConnection {
            current: Arc::new(Mutex::new(None)),
            timeout,
            trace,
            client,
        }
    }

    async fn connected(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut current = self.current.lock().await;
        if let Some(connection) = current.as_ref() {
            return Ok(connection.clone());
        }
        // The connect and redis-rs's set-up exchange, within one timeout: a
        // connection half made when a partition fell must not hold the
        // lock (and every command of this client) forever.
        let info = redis::RedisConnectionInfo::default();
        let connect = async {
            let stream = turmoil::net::TcpStream::connect((REDIS_HOST, REDIS_PORT))
                .await
                .map_err(RedisError::from)?;
            let config = AsyncConnectionConfig::new().set_response_timeout(Some(self.timeout));
            MultiplexedConnection::new_with_config(&info, stream, config).await
        };
        let (connection, driver) = tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| io_error(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        tokio::spawn(driver);
        *current = Some(connection.clone());
        Ok(connection)
    }

    /// After a broken exchange the next command connects again.
    async fn forget(&self, error: &RedisError) {
        self.trace.line(Some(&self.client), || {
            format!(
                "{}: redis exchange broken ({error}); the next command reconnects",
                self.client
            )
        });
        *self.current.lock().await = None;
    }

    /// Passes `result` on; a broken exchange makes the next command reconnect.
    async fn after<T>(&self, result: Result<T, RedisError>) -> Result<T, RedisError> {
        if let Err(error) = &result {
            if Self::broken(error) {
                self.forget(error).await;
            }
        }
        result
    }

    fn broken(error: &RedisError) -> bool {
        error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_unrecoverable_error()
    }
}

fn io_error(kind: std::io::ErrorKind, text: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(kind, text))
}

impl ConnectionLike for SimRedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut connection = self.connected().await.inspect_err(|error| {
                self.trace.line(Some(&self.client), || {
                    format!("{}: cannot connect to redis: {error}", self.client)
                });
            })?;
            let result = connection.req_packed_command(cmd).await;
            self.after(result).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut connection = self.connected().await?;
            let result = connection
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.after(result).await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
