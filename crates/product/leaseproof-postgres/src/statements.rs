//! How the lease's statements reach the server: prepared, or inline for a
//! connection pooler in transaction mode.
//!
//! Goal: the lease works behind PgBouncer's transaction pooling, where a
//! client's consecutive messages may reach different server connections.
//! sqlx sends a statement with parameters as Parse + Describe + Sync, then
//! Bind + Execute + Sync: two round trips, each its own "transaction" to the
//! pooler, so the Bind can land on a server that never saw the Parse — and a
//! named prepared statement (`sqlx_s_1`) collides with another client's of
//! the same name on a shared server connection. Method: in
//! [`Statements::Inline`] every library statement is sent as one simple
//! query (`sqlx::raw_sql`: the simple protocol, not even an unnamed
//! prepared statement) with its values written in as literals: text in dollar quotes with
//! a tag the value does not contain (immune to `standard_conforming_strings`
//! and to any quote in the value), integers as decimals. One round trip, no
//! prepared statement, the same SQL text as the prepared form.
//! Invariant: the rendered statement is the prepared one with each `$n`
//! replaced by its value's literal, and nothing else (a test holds the two
//! forms to the same results on the server).

use sqlx::postgres::{PgArguments, PgRow, Postgres};
use sqlx::query::Query;
use sqlx::{Executor as _, FromRow, PgConnection};

/// How the lease's statements are sent.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Statements {
    /// Prepared statements with bound parameters (sqlx's default): the
    /// fastest, for a direct connection or a pooler in session mode.
    #[default]
    Prepared,
    /// Simple queries with the values written in as literals: one round
    /// trip and no prepared statement, for a pooler in transaction mode
    /// (PgBouncer before 1.21, or without `max_prepared_statements`).
    Inline,
}

/// A value a statement takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    Int8(i64),
    /// Only the harness's guarded writes send one.
    #[cfg_attr(not(feature = "harness"), allow(dead_code))]
    Int4(i32),
}

impl Statements {
    /// The first row of `sql` with `args`, if any.
    pub(crate) async fn fetch_optional<O>(
        self,
        connection: &mut PgConnection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Option<O>, sqlx::Error>
    where
        O: for<'r> FromRow<'r, PgRow> + Send + Unpin,
    {
        let row = match self {
            Statements::Prepared => {
                let query = bind_all(sqlx::query(sql), args);
                connection.fetch_optional(query).await?
            }
            Statements::Inline => {
                let text = inline(sql, args);
                // Not `RawSql::fetch_optional`: in sqlx 0.8 it is
                // `fetch_one`, and "no row" would be an error.
                connection.fetch_optional(sqlx::raw_sql(&text)).await?
            }
        };
        row.map(|row| O::from_row(&row)).transpose()
    }

    /// The one row of `sql` with `args`.
    pub(crate) async fn fetch_one<O>(
        self,
        connection: &mut PgConnection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<O, sqlx::Error>
    where
        O: for<'r> FromRow<'r, PgRow> + Send + Unpin,
    {
        self.fetch_optional(connection, sql, args)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    /// Every row of `sql` with `args`.
    pub(crate) async fn fetch_all<O>(
        self,
        connection: &mut PgConnection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<Vec<O>, sqlx::Error>
    where
        O: for<'r> FromRow<'r, PgRow> + Send + Unpin,
    {
        let rows = match self {
            Statements::Prepared => {
                let query = bind_all(sqlx::query(sql), args);
                connection.fetch_all(query).await?
            }
            Statements::Inline => {
                let text = inline(sql, args);
                connection.fetch_all(sqlx::raw_sql(&text)).await?
            }
        };
        rows.iter().map(O::from_row).collect()
    }

    /// Runs `sql` with `args`; the rows it affected.
    pub(crate) async fn execute(
        self,
        connection: &mut PgConnection,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<u64, sqlx::Error> {
        let done = match self {
            Statements::Prepared => {
                let query = bind_all(sqlx::query(sql), args);
                connection.execute(query).await?
            }
            Statements::Inline => {
                let text = inline(sql, args);
                connection.execute(sqlx::raw_sql(&text)).await?
            }
        };
        Ok(done.rows_affected())
    }
}

/// `BEGIN` and `sql` with `args` as one simple query: one round trip that
/// opens a transaction and runs its first statement. Prepared statements
/// cannot ride with `BEGIN` in sqlx (it sends each exchange and waits), so
/// this is the inline form whatever the [`Statements`] setting.
pub(crate) fn begin_with_inline(sql: &str, args: &[Arg<'_>]) -> String {
    format!("BEGIN; {}", inline(sql, args))
}

/// Every row of `text`, a simple query of one or more statements.
pub(crate) async fn simple_query(
    connection: &mut PgConnection,
    text: &str,
) -> Result<Vec<PgRow>, sqlx::Error> {
    connection.fetch_all(sqlx::raw_sql(text)).await
}

/// `query` with `args` bound in order.
fn bind_all<'q>(
    mut query: Query<'q, Postgres, PgArguments>,
    args: &[Arg<'q>],
) -> Query<'q, Postgres, PgArguments> {
    for arg in args {
        query = match *arg {
            Arg::Text(value) => query.bind(value),
            Arg::Int8(value) => query.bind(value),
            Arg::Int4(value) => query.bind(value),
        };
    }
    query
}

/// `sql` with each `$n` replaced by the literal of `args[n - 1]`.
///
/// Panics on a `$` that is not a parameter of `args`: the statements are
/// the library's own constants, and a test renders every one of them.
fn inline(sql: &str, args: &[Arg<'_>]) -> String {
    let mut rendered = String::with_capacity(sql.len() + 64);
    let mut rest = sql;
    while let Some(dollar) = rest.find('$') {
        rendered.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let index: usize = after[..digits]
            .parse()
            .unwrap_or_else(|_| panic!("a `$` that is not a parameter in {sql:?}"));
        let arg = args
            .get(index.wrapping_sub(1))
            .unwrap_or_else(|| panic!("${index} has no value in {sql:?}"));
        match *arg {
            Arg::Text(value) => rendered.push_str(&text_literal(value)),
            Arg::Int8(value) => rendered.push_str(&value.to_string()),
            Arg::Int4(value) => rendered.push_str(&value.to_string()),
        }
        rest = &after[digits..];
    }
    rendered.push_str(rest);
    rendered
}

/// `value` as a dollar-quoted literal whose tag it does not contain.
fn text_literal(value: &str) -> String {
    assert!(!value.contains('\0'), "text values never hold NUL");
    let mut tag = "lp".to_string();
    let mut attempt = 0_u32;
    while value.contains(&format!("${tag}$")) || value.ends_with(&format!("${tag}")) {
        attempt += 1;
        tag = format!("lp{attempt}");
    }
    format!("${tag}${value}${tag}$")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_become_literals_and_nothing_else_changes() {
        let sql = "SELECT $1, $2::int8 * interval '1 microsecond', $3, $10";
        let args = [
            Arg::Text("o'wner"),
            Arg::Int8(-5),
            Arg::Int4(7),
            Arg::Text("a"),
            Arg::Text("b"),
            Arg::Text("c"),
            Arg::Text("d"),
            Arg::Text("e"),
            Arg::Text("f"),
            Arg::Text("ten"),
        ];
        assert_eq!(
            inline(sql, &args),
            "SELECT $lp$o'wner$lp$, -5::int8 * interval '1 microsecond', 7, $lp$ten$lp$"
        );
    }

    #[test]
    fn a_value_holding_the_quote_tag_gets_another() {
        assert_eq!(text_literal("plain"), "$lp$plain$lp$");
        assert_eq!(text_literal("x$lp$y"), "$lp1$x$lp$y$lp1$");
        assert_eq!(text_literal("ends in $lp"), "$lp1$ends in $lp$lp1$");
        assert_eq!(text_literal(r"back\slash"), r"$lp$back\slash$lp$");
    }

    #[test]
    #[should_panic(expected = "has no value")]
    fn a_parameter_without_a_value_is_a_bug_caught_at_once() {
        inline("SELECT $2", &[Arg::Int8(1)]);
    }
}
