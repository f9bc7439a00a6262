//! The lease table: created once by many workers starting together, its
//! columns checked.

use std::fmt;

use leaseproof_protocol::{client, LeaseError};

use crate::sql;
use crate::statements::Arg;

use super::PostgresLeases;

/// A table of the lease's name exists with other columns than the lease needs.
#[derive(Debug)]
pub struct SchemaMismatch {
    /// The table.
    pub table: &'static str,
    /// Its columns as found (`name`, `type`), in order.
    pub found: Vec<(String, String)>,
    /// The columns the lease needs.
    pub expected: Vec<String>,
}

impl fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found: Vec<String> = self
            .found
            .iter()
            .map(|(name, kind)| format!("{name} {kind}"))
            .collect();
        write!(
            f,
            "table {} exists with columns ({}) but the lease needs ({})",
            self.table,
            found.join(", "),
            self.expected.join(", ")
        )
    }
}

impl std::error::Error for SchemaMismatch {}

impl PostgresLeases {
    /// Creates the lease table if it is not there.
    ///
    /// `IF NOT EXISTS` is idempotent across time and not across concurrency: two
    /// sessions running it at the same instant both pass the existence check,
    /// both insert into `pg_type`, and one fails with `23505` on
    /// `pg_type_typname_nsp_index`. Here that is the expected case — the workers
    /// this table coordinates are exactly the ones that start together — so a
    /// failure is retried once against a table that exists by then, and only
    /// then raised.
    ///
    /// Only that race is retried ([`client::CONCURRENT_CREATION_SQLSTATES`]);
    /// any other failure — permission denied, a read-only server, a lost
    /// connection — is a `Schema` error at once. A table of the same name with
    /// other columns (which `IF NOT EXISTS` accepts silently) is a `Schema`
    /// error too: the lease would otherwise fail later, statement by statement.
    pub async fn ensure_schema(&self) -> Result<(), LeaseError> {
        self.ensure_table(sql::CREATE_LEASES, "leaseproof_leases", sql::LEASES_COLUMNS)
            .await
    }

    /// [`Self::ensure_schema`] without the retry: one attempt. Exists so a test
    /// can show the race the retry survives; not for production use.
    // Hidden from the API docs: a harness entry point (the schema-race test,
    // `verify`), public only because those live in other crates.
    #[doc(hidden)]
    pub async fn ensure_schema_once(&self) -> Result<(), LeaseError> {
        self.create_table_once(sql::CREATE_LEASES).await?;
        self.verify_columns("leaseproof_leases", sql::LEASES_COLUMNS)
            .await
    }

    pub(crate) async fn ensure_table(
        &self,
        ddl: &'static str,
        table: &'static str,
        columns: &'static [(&'static str, &'static str)],
    ) -> Result<(), LeaseError> {
        client::ensure_schema_with_retry(
            true,
            PostgresLeases::sqlstate,
            |error| {
                // Somebody else is creating it right now: the retry finds it.
                tracing::debug!(%error, "table creation raced another worker; retrying once");
            },
            || self.create_table_once(ddl),
        )
        .await?;
        self.verify_columns(table, columns).await
    }

    async fn create_table_once(&self, ddl: &'static str) -> Result<(), LeaseError> {
        let mut connection = self.connection().await?;
        self.statements
            .execute(&mut connection, ddl, &[])
            .await
            .map_err(|error| LeaseError::Schema {
                source: Box::new(error),
            })?;
        self.park(connection);
        Ok(())
    }

    /// The table's columns must be exactly `expected`.
    async fn verify_columns(
        &self,
        table: &'static str,
        expected: &[(&str, &str)],
    ) -> Result<(), LeaseError> {
        let mut connection = self.connection().await?;
        let args = [Arg::Text(table)];
        let found: Vec<(String, String)> = self
            .statements
            .fetch_all(&mut connection, sql::TABLE_COLUMNS, &args)
            .await
            .map_err(|error| LeaseError::Schema {
                source: Box::new(error),
            })?;
        self.park(connection);
        let matches = found.len() == expected.len()
            && found
                .iter()
                .zip(expected)
                .all(|((name, kind), (want_name, want_kind))| {
                    name == want_name && kind == want_kind
                });
        if matches {
            return Ok(());
        }
        Err(LeaseError::Schema {
            source: Box::new(SchemaMismatch {
                table,
                found,
                expected: expected
                    .iter()
                    .map(|(name, kind)| format!("{name} {kind}"))
                    .collect(),
            }),
        })
    }
}
