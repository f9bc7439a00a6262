//! The one place the harness builds the three lock managers it drives.
//!
//! Goal: `race --lock`, the manager × fault matrix, the lock clients and
//! `verify`'s conformance stage build `PostgresAdvisoryLockManager`,
//! `RedisDistributedLockManager` and `LeaseLockManager` the same way, through
//! their public constructors, with only what a caller must choose spelled
//! out in a [`ManagerSpec`].
//! Invariant: every manager is the shipped code, built as a user builds it.

use std::sync::Arc;
use std::time::Duration;

use leaseproof_locks::{
    LeaseLockManager, LeaseLockOptions, LockError, LockManager, PostgresAdvisoryLockManager,
    RedisDistributedLockManager, RedisLockOptions,
};
use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::{InvalidInput, LeaseError, Ttl};

/// Which of the three managers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagerKind {
    /// `PostgresAdvisoryLockManager`: a session lock on a connection of its own.
    Advisory,
    /// `RedisDistributedLockManager`: `SET NX PX` with a token.
    Redis,
    /// `LeaseLockManager`: the lease.
    Lease,
}

impl ManagerKind {
    /// Every kind, by name.
    pub const ALL: [(&'static str, ManagerKind); 3] = [
        ("advisory", ManagerKind::Advisory),
        ("redis", ManagerKind::Redis),
        ("lease", ManagerKind::Lease),
    ];

    /// `advisory`, `redis` or `lease`.
    pub fn name(self) -> &'static str {
        match self {
            ManagerKind::Advisory => "advisory",
            ManagerKind::Redis => "redis",
            ManagerKind::Lease => "lease",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<ManagerKind> {
        ManagerKind::ALL
            .into_iter()
            .find(|(known, _)| *known == name)
            .map(|(_, kind)| kind)
    }
}

/// What a caller chooses when it builds a manager.
#[derive(Clone, Debug)]
pub struct ManagerSpec {
    /// Which manager.
    pub kind: ManagerKind,
    /// The scope prefix (`{prefix}:{schema}.{table}`).
    pub prefix: String,
    /// The PostgreSQL server (the advisory locks'; the lease's when
    /// `leases` is `None`).
    pub database_url: String,
    /// The Redis server (Redis only).
    pub redis_url: Option<String>,
    /// The lock's TTL (Redis and the lease).
    pub ttl: Duration,
    /// Whether the manager keeps its lock alive while held.
    pub keep_alive: bool,
    /// How often the advisory manager probes its lock session (its default
    /// when `None`).
    pub probe_interval: Option<Duration>,
    /// The lease's library to use (the caller fences with the same one);
    /// `None`: one of 16 connections on `database_url`, its schema ensured.
    pub leases: Option<PostgresLeases>,
}

impl ManagerSpec {
    /// A spec of `kind` on `database_url` with the defaults the races use:
    /// a 30 s TTL kept alive, the advisory manager's own probe interval.
    pub fn new(
        kind: ManagerKind,
        prefix: impl Into<String>,
        database_url: impl Into<String>,
    ) -> ManagerSpec {
        ManagerSpec {
            kind,
            prefix: prefix.into(),
            database_url: database_url.into(),
            redis_url: None,
            ttl: Duration::from_secs(30),
            keep_alive: true,
            probe_interval: None,
            leases: None,
        }
    }
}

/// Why a manager could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The manager's constructor refused or could not connect.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The lease's library could not connect or create its table.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The TTL is not one the lease accepts.
    #[error(transparent)]
    Input(#[from] InvalidInput),
    /// No Redis server was given and none could be started.
    #[error("no Redis: {0}")]
    NoRedis(String),
}

/// A manager built from a [`ManagerSpec`].
pub struct BuiltManager {
    /// The manager.
    pub manager: Arc<dyn LockManager>,
    /// The least time a held lock lives without its holder (its TTL), for the
    /// conformance suite; `None` for a session lock.
    pub lifetime_min: Option<Duration>,
    /// The lease's library, for the lease manager.
    pub leases: Option<PostgresLeases>,
}

impl std::fmt::Debug for BuiltManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltManager")
            .field("manager", &self.manager.name())
            .field("lifetime_min", &self.lifetime_min)
            .finish_non_exhaustive()
    }
}

/// Builds the manager `spec` describes through its public constructor.
pub async fn build_manager(spec: ManagerSpec) -> Result<BuiltManager, BuildError> {
    match spec.kind {
        ManagerKind::Advisory => {
            let mut manager = PostgresAdvisoryLockManager::new(&spec.database_url, spec.prefix)?;
            if let Some(interval) = spec.probe_interval {
                manager = manager.with_probe_interval(interval);
            }
            Ok(BuiltManager {
                manager: Arc::new(manager),
                lifetime_min: None,
                leases: None,
            })
        }
        ManagerKind::Redis => {
            let redis_url = match spec.redis_url {
                Some(url) => url,
                None => leaseproof_redis_server::shared_server()
                    .map_err(BuildError::NoRedis)?
                    .url
                    .clone(),
            };
            let options = RedisLockOptions {
                ttl: spec.ttl,
                keep_alive: spec.keep_alive,
            };
            let manager =
                RedisDistributedLockManager::connect(&redis_url, spec.prefix, options).await?;
            Ok(BuiltManager {
                manager: Arc::new(manager),
                lifetime_min: Some(options.promised_lifetime()),
                leases: None,
            })
        }
        ManagerKind::Lease => {
            let leases = match spec.leases {
                Some(leases) => leases,
                None => PostgresLeases::connect(&spec.database_url, 16).await?,
            };
            leases.ensure_schema().await?;
            let ttl_ms = i64::try_from(spec.ttl.as_millis()).unwrap_or(i64::MAX);
            let ttl = Ttl::from_millis(ttl_ms)?;
            let options = LeaseLockOptions {
                ttl,
                keep_alive: spec.keep_alive,
            };
            Ok(BuiltManager {
                manager: Arc::new(LeaseLockManager::new(leases.clone(), spec.prefix, options)),
                lifetime_min: Some(spec.ttl),
                leases: Some(leases),
            })
        }
    }
}
