//! How sqlx's errors become [`LeaseError`]s.
//!
//! The line that matters is between *nothing was sent* (`Unavailable`: a retry
//! is safe) and *sent, reply lost* (`OutcomeUnknown`: the statement may have
//! committed). Each operation first takes a connection from the pool — failing
//! there is `Unavailable` — and only then sends its statement; a broken
//! connection after that point is `OutcomeUnknown` for anything that writes.
//!
//! Public so a lease or lock written outside this crate maps sqlx's errors
//! the same way (its port then reports unknown outcomes as the harness
//! expects): `unavailable` for a failure to get a connection, `after_send`
//! for a statement that writes, `without_effect` for one that cannot have
//! taken effect (a read, or inside a transaction that died with it).

use leaseproof_protocol::LeaseError;

/// Failure to obtain a connection: the statement was never sent.
pub fn unavailable(error: sqlx::Error) -> LeaseError {
    LeaseError::Unavailable {
        source: Box::new(error),
    }
}

/// Failure of a statement that was (possibly) sent on a connection we held.
pub fn after_send(operation: &'static str, error: sqlx::Error) -> LeaseError {
    if connection_lost(&error) {
        LeaseError::OutcomeUnknown {
            operation,
            source: Box::new(error),
        }
    } else {
        LeaseError::Database {
            source: Box::new(error),
        }
    }
}

/// Failure of a statement that cannot have had an effect: a read, or a
/// statement inside a transaction that dies with its connection. A broken
/// connection is then `Unavailable` (the outcome is known: nothing happened),
/// never `OutcomeUnknown`.
pub fn without_effect(error: sqlx::Error) -> LeaseError {
    if connection_lost(&error) {
        unavailable(error)
    } else {
        LeaseError::Database {
            source: Box::new(error),
        }
    }
}

/// True when the connection broke under the statement: an IO error, a protocol
/// desynchronisation, or the server ending the session — `57P01`
/// admin_shutdown (`pg_terminate_backend`, shutdown), `57P02`
/// crash_shutdown, `57P03` cannot_connect_now, and class `08`, connection
/// exception. Whether the statement committed is then unknown.
///
/// Not the rest of class 57: `57014` query_canceled (a `statement_timeout` or
/// a cancel request) leaves the session alive and the statement certainly
/// not committed — a definite failure.
pub fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => database.code().is_some_and(|code| {
            matches!(code.as_ref(), "57P01" | "57P02" | "57P03") || code.starts_with("08")
        }),
        _ => false,
    }
}

/// SQLSTATE of a database error, if it is one.
pub fn sqlstate(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(database) => database.code().map(|code| code.into_owned()),
        _ => None,
    }
}
