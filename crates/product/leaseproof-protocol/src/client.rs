//! Client-side rules every backend's client follows, written once.
//!
//! `PostgresLeases` and the simulated database's port both call these, so the
//! simulation tests the library's own decisions — which failure of schema
//! creation is the concurrent-creation race worth one retry, and where an
//! exchange broke decides between "nothing happened" and "outcome unknown" —
//! not a second copy of them (one path, as FoundationDB runs the same code in
//! production and simulation).

use std::future::Future;

use crate::error::BackendError;
use crate::LeaseError;

/// A database error reduced to what the client rules need: PostgreSQL's
/// SQLSTATE and its message. The simulated database reports its errors this
/// way; the PostgreSQL backend reads the SQLSTATE from sqlx's error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SqlStateError {
    /// The five-character SQLSTATE, e.g. `23505`.
    pub code: String,
    /// The server's message.
    pub message: String,
}

/// SQLSTATEs a `CREATE TABLE IF NOT EXISTS` fails with when another session
/// creates the same table at the same instant — the only failures
/// [`ensure_schema_with_retry`] retries:
///
/// - `23505` unique_violation: both sessions passed the existence check and
///   both inserted the table's row type into `pg_type` (or its relation into
///   `pg_class`); the loser trips the catalog's unique index
///   (`pg_type_typname_nsp_index`, `pg_class_relname_nsp_index`);
/// - `42P07` duplicate_table and `42710` duplicate_object: the other
///   session's creation committed between this one's check and the insert of
///   a dependent object (the primary key's index, a `bigserial`'s sequence);
/// - `40P01` deadlock_detected: two creators of the same table and its
///   dependent objects locked catalog rows in opposite orders, and the server
///   aborted one so the other could finish.
///
/// Everything else — `42501` permission denied, `25006` a read-only server,
/// a lost connection, a table of the same name with other columns — is a
/// real failure: retrying it would only hide it, so it is raised at once.
pub const CONCURRENT_CREATION_SQLSTATES: [&str; 4] = ["23505", "42P07", "42710", "40P01"];

/// Whether a failed schema creation with this SQLSTATE is the
/// concurrent-creation race (see [`CONCURRENT_CREATION_SQLSTATES`]).
pub fn is_concurrent_creation(sqlstate: Option<&str>) -> bool {
    sqlstate.is_some_and(|code| CONCURRENT_CREATION_SQLSTATES.contains(&code))
}

/// Runs one schema-creation `attempt`; when it failed with the
/// concurrent-creation race and `retry` is on, runs it once more — against a
/// table that exists by then — and returns that result. Any other failure is
/// returned at once. `sqlstate` reads the SQLSTATE out of a backend's error;
/// `on_retry` is told before the retry (for logs and traces).
pub async fn ensure_schema_with_retry<A, F>(
    retry: bool,
    sqlstate: impl Fn(&LeaseError) -> Option<String>,
    on_retry: impl FnOnce(&LeaseError),
    mut attempt: A,
) -> Result<(), LeaseError>
where
    A: FnMut() -> F,
    F: Future<Output = Result<(), LeaseError>>,
{
    match attempt().await {
        Ok(()) => Ok(()),
        Err(error) if retry && is_concurrent_creation(sqlstate(&error).as_deref()) => {
            on_retry(&error);
            attempt().await
        }
        Err(error) => Err(error),
    }
}

/// The backend's error behind a `LeaseError`, for the variants that carry one.
pub fn backend_source(error: &LeaseError) -> Option<&BackendError> {
    match error {
        LeaseError::Schema { source }
        | LeaseError::Database { source }
        | LeaseError::Unavailable { source }
        | LeaseError::OutcomeUnknown { source, .. } => Some(source),
        _ => None,
    }
}

/// The SQLSTATE of a [`SqlStateError`] behind a `LeaseError`, if there is one.
pub fn sqlstate_of(error: &LeaseError) -> Option<String> {
    backend_source(error)?
        .downcast_ref::<SqlStateError>()
        .map(|error| error.code.clone())
}

/// Where an exchange with the database broke. What the caller may conclude
/// follows from it alone, whatever the backend: see [`broken_exchange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broke {
    /// Nothing was sent (no connection, connect refused, pool exhausted).
    BeforeSend,
    /// A one-shot statement was sent and its reply never came.
    AwaitingReply,
    /// A transaction broke before its `COMMIT` was sent: it rolled back.
    BeforeCommit,
    /// `COMMIT` was sent and its reply never came.
    AwaitingCommitReply,
}

/// The `LeaseError` for an exchange of `operation` that broke at `broke`:
/// `Unavailable` when nothing was sent (a retry is safe), `OutcomeUnknown`
/// when the statement or the `COMMIT` may have taken effect (Jepsen's
/// `info`: only an idempotent retry resolves it), `Database` when the
/// transaction certainly rolled back.
pub fn broken_exchange(operation: &'static str, broke: Broke, source: BackendError) -> LeaseError {
    match broke {
        Broke::BeforeSend => LeaseError::Unavailable { source },
        Broke::AwaitingReply => LeaseError::OutcomeUnknown { operation, source },
        Broke::BeforeCommit => LeaseError::Database { source },
        Broke::AwaitingCommitReply => LeaseError::OutcomeUnknown {
            operation: "commit",
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_error(code: &str) -> LeaseError {
        LeaseError::Schema {
            source: Box::new(SqlStateError {
                code: code.to_string(),
                message: "test".to_string(),
            }),
        }
    }

    fn attempts_made(retry: bool, first: &str) -> (usize, Result<(), LeaseError>) {
        let mut attempts = 0;
        let first = first.to_string();
        let result = futures_lite_block_on(ensure_schema_with_retry(
            retry,
            sqlstate_of,
            |_| {},
            || {
                attempts += 1;
                let outcome = if attempts == 1 {
                    Err(schema_error(&first))
                } else {
                    Ok(())
                };
                async move { outcome }
            },
        ));
        (attempts, result)
    }

    /// The futures here never wait, so polling once completes them.
    fn futures_lite_block_on<F: Future>(future: F) -> F::Output {
        use std::task::{Context, Poll, Waker};
        let mut future = std::pin::pin!(future);
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(output) => output,
            Poll::Pending => panic!("the test's attempts never wait"),
        }
    }

    #[test]
    fn only_the_concurrent_creation_race_is_retried() {
        for code in CONCURRENT_CREATION_SQLSTATES {
            let (attempts, result) = attempts_made(true, code);
            assert_eq!(attempts, 2, "{code}");
            assert!(result.is_ok());
        }
        for code in ["42501", "25006", "08006", "57P01", "XX000"] {
            let (attempts, result) = attempts_made(true, code);
            assert_eq!(attempts, 1, "{code} must not be retried");
            assert_eq!(sqlstate_of(&result.unwrap_err()).as_deref(), Some(code));
        }
    }

    #[test]
    fn without_the_retry_the_race_is_raised() {
        let (attempts, result) = attempts_made(false, "23505");
        assert_eq!(attempts, 1);
        assert!(matches!(result, Err(LeaseError::Schema { .. })));
    }

    #[test]
    fn where_an_exchange_broke_decides_what_is_known() {
        let source = || -> BackendError { "gone".into() };
        assert!(matches!(
            broken_exchange("acquire", Broke::BeforeSend, source()),
            LeaseError::Unavailable { .. }
        ));
        assert!(matches!(
            broken_exchange("acquire", Broke::AwaitingReply, source()),
            LeaseError::OutcomeUnknown {
                operation: "acquire",
                ..
            }
        ));
        assert!(matches!(
            broken_exchange("commit", Broke::BeforeCommit, source()),
            LeaseError::Database { .. }
        ));
        assert!(matches!(
            broken_exchange("cycle", Broke::AwaitingCommitReply, source()),
            LeaseError::OutcomeUnknown {
                operation: "commit",
                ..
            }
        ));
    }
}
