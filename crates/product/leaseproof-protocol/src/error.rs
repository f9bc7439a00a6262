//! The one error type every lease backend returns.

use crate::{FencingToken, Holder, Scope};

/// A boxed error from a backend (sqlx, the simulated network, ...), kept as the
/// source so nothing the backend said is lost.
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a lease operation did not succeed.
///
/// The variants separate what a caller must handle differently: `Held` is the
/// normal outcome of losing a race; `Lost` means stop working on the scope;
/// `Invalid` is a bug in the caller, reported before any SQL ran;
/// `Unavailable` means nothing was sent (retry is safe); `OutcomeUnknown` means
/// the request may have taken effect (Jepsen's `info`) and only an idempotent
/// retry with the same owner resolves it.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another owner holds an unexpired lease on the scope.
    #[error("scope {scope} is held by {}", holder.as_ref().map_or_else(|| "another owner".to_string(), ToString::to_string))]
    Held {
        /// The contended scope.
        scope: Scope,
        /// Who holds it, when the backend said (for free, or because it was
        /// asked to: `PostgresLeases::with_holder_reports`); `None` otherwise.
        holder: Option<Holder>,
    },
    /// The lease is no longer ours: expired, released, or taken over (the row's
    /// owner or token no longer match).
    #[error("lease on {scope} under token {token} is lost (expired, released or taken over)")]
    Lost {
        /// The scope whose lease was lost.
        scope: Scope,
        /// The token the caller held.
        token: FencingToken,
    },
    /// The input was rejected before anything was sent to the database.
    #[error("invalid input: {0}")]
    Invalid(#[from] InvalidInput),
    /// The database could not be reached, or no connection was free in time;
    /// the request was not sent, so it had no effect.
    #[error("database unavailable: {source}")]
    Unavailable {
        /// What the backend reported.
        #[source]
        source: BackendError,
    },
    /// The request was sent but its reply was lost: it may or may not have
    /// taken effect.
    #[error("outcome of {operation} unknown: {source}")]
    OutcomeUnknown {
        /// The operation whose outcome is unknown (`acquire`, `commit`, ...).
        operation: &'static str,
        /// What the backend reported.
        #[source]
        source: BackendError,
    },
    /// Creating the lease table failed (after the one retry).
    #[error("lease schema: {source}")]
    Schema {
        /// What the backend reported.
        #[source]
        source: BackendError,
    },
    /// A fenced commit was asked to run where the fence cannot protect it: not
    /// inside a transaction, or inside a transaction of another pool (another
    /// transaction domain), where the row lock and the writes would not commit
    /// together.
    #[error("commit refused: {reason}")]
    TransactionDomain {
        /// Why the domain is wrong.
        reason: &'static str,
    },
    /// The database rejected the statement for a reason that is none of the above.
    #[error("database error: {source}")]
    Database {
        /// What the backend reported.
        #[source]
        source: BackendError,
    },
}

impl LeaseError {
    /// `Lost` for `lease`: its scope and the token the caller held.
    pub fn lost(lease: &crate::Lease) -> LeaseError {
        LeaseError::Lost {
            scope: lease.scope().clone(),
            token: lease.token(),
        }
    }

    /// True when the operation may have taken effect although it reported failure.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, LeaseError::OutcomeUnknown { .. })
    }

    /// Whether making the same call again, unchanged, may succeed: the scope
    /// was held (later it may be free), the database could not be reached,
    /// or the outcome is unknown (acquiring again with the same owner is
    /// idempotent: it finds the grant if the first attempt made it). A lost
    /// lease is not retried — acquire anew, under a new token — and bad
    /// input, a schema mismatch, a commit outside the lease's transaction
    /// domain or an error the database answered will fail the same way.
    pub fn is_retryable(&self) -> bool {
        match self {
            LeaseError::Held { .. }
            | LeaseError::Unavailable { .. }
            | LeaseError::OutcomeUnknown { .. } => true,
            LeaseError::Lost { .. }
            | LeaseError::Invalid(_)
            | LeaseError::Schema { .. }
            | LeaseError::TransactionDomain { .. }
            | LeaseError::Database { .. } => false,
        }
    }
}

/// Input rejected at construction, before any SQL runs.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    /// The scope is the empty string.
    #[error("scope is empty")]
    ScopeEmpty,
    /// The scope is longer than allowed.
    #[error("scope is {length_bytes} bytes long, at most {length_bytes_max} are allowed")]
    ScopeTooLong {
        /// The scope's length in bytes.
        length_bytes: usize,
        /// The limit.
        length_bytes_max: usize,
    },
    /// The scope contains a NUL byte, which PostgreSQL text cannot store.
    #[error("scope contains a NUL byte at byte {position}")]
    ScopeContainsNul {
        /// Byte offset of the first NUL.
        position: usize,
    },
    /// The owner id is empty.
    #[error("owner id is empty")]
    OwnerEmpty,
    /// The owner id is longer than allowed.
    #[error("owner id is {length_bytes} bytes long, at most {length_bytes_max} are allowed")]
    OwnerTooLong {
        /// The id's length in bytes.
        length_bytes: usize,
        /// The limit.
        length_bytes_max: usize,
    },
    /// The owner id contains a NUL byte.
    #[error("owner id contains a NUL byte at byte {position}")]
    OwnerContainsNul {
        /// Byte offset of the first NUL.
        position: usize,
    },
    /// A TTL of zero would grant a lease that is already expired.
    #[error("ttl is zero")]
    TtlZero,
    /// A negative TTL.
    #[error("ttl is negative ({micros} µs)")]
    TtlNegative {
        /// The value given.
        micros: i64,
    },
    /// A TTL below the minimum.
    #[error("ttl of {micros} µs is below the minimum of {micros_min} µs")]
    TtlTooShort {
        /// The value given.
        micros: i64,
        /// The minimum.
        micros_min: i64,
    },
    /// A TTL above the maximum.
    #[error("ttl of {micros} µs is above the maximum of {micros_max} µs")]
    TtlTooLong {
        /// The value given.
        micros: i64,
        /// The maximum.
        micros_max: i64,
    },
    /// The TTL does not fit in 64-bit microseconds.
    #[error("ttl overflows 64-bit microseconds")]
    TtlOverflow,
    /// A keep-alive interval of zero, or not shorter than the TTL: the lease
    /// would lapse between renewals.
    #[error("keep-alive interval of {interval_us} µs must be above zero and below the ttl of {ttl_us} µs")]
    KeepAliveInterval {
        /// The interval asked for.
        interval_us: i64,
        /// The lease's TTL.
        ttl_us: i64,
    },
    /// A connection pool too small to hold a lease's connection and run the
    /// guarded transaction beside it would deadlock; refused instead.
    #[error(
        "pool of {connections_max} connections is too small: at least {connections_min} are needed"
    )]
    PoolTooSmall {
        /// The pool's size.
        connections_max: u32,
        /// The smallest size that works.
        connections_min: u32,
    },
}
