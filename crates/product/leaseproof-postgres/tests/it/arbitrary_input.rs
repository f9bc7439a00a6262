//! Arbitrary input against the real server: a typed error or a correct
//! result, never a panic, and nothing written on error.
//!
//! Goal: no scope, owner or TTL a caller can build — any Unicode, NUL bytes,
//! lengths on both sides of the 255-byte limit in multi-byte characters, TTLs
//! from `i64::MIN` to `i64::MAX` with every boundary — makes the lease panic,
//! write on a refusal, or mangle what it stores. Method: proptest draws the
//! three inputs; the rules are restated here independently of the code that
//! enforces them, and every accepted triple runs the whole lifecycle on the
//! real server (acquire, read the row back, holds, renew, release, holds)
//! while the table's row count is watched. A second test stores bytes that
//! are not UTF-8 in the table (a `SQL_ASCII` database lets a foreign writer do
//! that) and shows the reads answer with a typed error.
//! Invariant: `Scope::new`/`Owner::new`/`Ttl::from_micros` accept exactly the
//! documented inputs; an accepted triple round-trips byte for byte through
//! the server with `expires_at − granted_at = ttl`; a refused input writes
//! nothing.

use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::{LeaseError, Owner, Scope, Ttl};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use sqlx::PgPool;

use crate::{fresh, pool};

/// Text of any Unicode (NUL included), around the byte limit in characters
/// of every width, with a NUL planted, or empty.
fn text() -> impl Strategy<Value = String> {
    let widths = prop::sample::select(vec!['a', 'é', '€', '😀']);
    prop_oneof![
        Just(String::new()),
        prop::collection::vec(any::<char>(), 1..40).prop_map(String::from_iter),
        prop::collection::vec(any::<char>(), 200..300).prop_map(String::from_iter),
        (widths, 250usize..=260)
            .prop_map(|(wide, length_bytes)| text_of_length(wide, length_bytes)),
        ("[a-z]{0,10}", "[a-z]{0,10}").prop_map(|(before, after)| format!("{before}\0{after}")),
    ]
}

/// As many `wide` characters as fit in `length_bytes`, padded with `a` to
/// exactly that many bytes.
fn text_of_length(wide: char, length_bytes: usize) -> String {
    let mut text = String::new();
    while text.len() + wide.len_utf8() <= length_bytes {
        text.push(wide);
    }
    while text.len() < length_bytes {
        text.push('a');
    }
    assert_eq!(text.len(), length_bytes);
    text
}

fn ttl_micros() -> impl Strategy<Value = i64> {
    let max = Ttl::MAX.as_micros();
    let min = Ttl::MIN.as_micros();
    prop_oneof![
        prop::sample::select(vec![
            i64::MIN,
            -1,
            0,
            1,
            min - 1,
            min,
            min + 1,
            max - 1,
            max,
            max + 1,
            i64::MAX
        ]),
        any::<i64>(),
        min..=60_000_000,
        max - 1_000..=max + 1_000,
    ]
}

/// The documented rule for scopes and owners, restated: non-empty, at most
/// 255 bytes, no NUL.
fn text_is_valid(text: &str) -> bool {
    !text.is_empty() && text.len() <= 255 && !text.contains('\0')
}

async fn lease_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM leaseproof_leases")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The server's clock now, µs since the epoch (as lease times are).
async fn server_now_us(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn scope_has_row(pool: &PgPool, scope: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM leaseproof_leases WHERE scope = $1)")
        .bind(scope)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// One drawn triple: refused with a typed error (nothing written), or the
/// whole lifecycle done right on the server.
async fn lifecycle(
    leases: &PostgresLeases,
    scope_text: &str,
    owner_text: &str,
    ttl_micros: i64,
) -> Result<(), TestCaseError> {
    let rows_before = lease_rows(leases.pool()).await;
    let scope = Scope::new(scope_text);
    let owner = Owner::new(owner_text);
    let ttl = Ttl::from_micros(ttl_micros);
    prop_assert_eq!(scope.is_ok(), text_is_valid(scope_text));
    prop_assert_eq!(owner.is_ok(), text_is_valid(owner_text));
    prop_assert_eq!(
        ttl.is_ok(),
        (Ttl::MIN.as_micros()..=Ttl::MAX.as_micros()).contains(&ttl_micros)
    );
    let refusals = [
        scope.as_ref().err().cloned(),
        owner.as_ref().err().cloned(),
        ttl.as_ref().err().cloned(),
    ];
    for refusal in refusals.into_iter().flatten() {
        prop_assert!(!refusal.to_string().is_empty());
        prop_assert!(matches!(LeaseError::from(refusal), LeaseError::Invalid(_)));
    }
    let (Ok(scope), Ok(owner), Ok(ttl)) = (scope, owner, ttl) else {
        prop_assert_eq!(lease_rows(leases.pool()).await, rows_before);
        return Ok(());
    };
    let scope_was_known = scope_has_row(leases.pool(), scope_text).await;

    let lease = leases
        .acquire(&scope, &owner, ttl)
        .await
        .map_err(|error| TestCaseError::fail(format!("acquire: {error}")))?
        .into_lease();
    prop_assert_eq!(lease.scope().as_str(), scope_text);
    prop_assert_eq!(lease.owner().as_str(), owner_text);
    prop_assert_eq!(
        lease.expires_at().micros - lease.granted_at().micros,
        ttl_micros
    );
    // What the server stored, read back: the same bytes, the same grant.
    let row = leases
        .row(&scope)
        .await
        .unwrap()
        .expect("a granted scope has a row");
    prop_assert_eq!(row.owner.as_str(), owner_text);
    prop_assert_eq!(row.token, lease.token());
    prop_assert_eq!(row.granted_at, lease.granted_at());
    prop_assert_eq!(row.expires_at, lease.expires_at());
    // A TTL of a few ms may run out between the statements: then "not
    // held" / `Lost` is the correct answer, and the server's clock must show
    // the grant over.
    if !leases.holds(&lease).await.unwrap() {
        prop_assert!(server_now_us(leases.pool()).await >= lease.expires_at().micros);
    }
    let last = match leases.renew(&lease, ttl).await {
        Ok(renewed) => {
            prop_assert_eq!(renewed.token(), lease.token());
            prop_assert_eq!(renewed.granted_at(), lease.granted_at());
            prop_assert!(renewed.expires_at() >= lease.expires_at());
            renewed
        }
        Err(LeaseError::Lost { .. }) => {
            prop_assert!(server_now_us(leases.pool()).await >= lease.expires_at().micros);
            lease
        }
        Err(error) => return Err(TestCaseError::fail(format!("renew: {error}"))),
    };
    if leases.release(&last).await.unwrap().is_none() {
        prop_assert!(server_now_us(leases.pool()).await >= last.expires_at().micros);
    }
    prop_assert!(!leases.holds(&last).await.unwrap());

    let rows_expected = rows_before + i64::from(!scope_was_known);
    prop_assert_eq!(lease_rows(leases.pool()).await, rows_expected);
    Ok(())
}

#[test]
fn arbitrary_scopes_owners_and_ttls_get_a_typed_error_or_a_correct_lease() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some((_database, leases)) = runtime.block_on(fresh(2)) else {
        return;
    };
    let mut runner = TestRunner::new(Config {
        cases: 128,
        // Shrinking replays cases against the server; keep a failure's
        // report prompt.
        max_shrink_iters: 256,
        // The failing triple is printed; nothing is written beside the sources.
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&(text(), text(), ttl_micros()), |(scope, owner, ttl)| {
        runtime.block_on(lifecycle(&leases, &scope, &owner, ttl))
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

#[tokio::test]
async fn bytes_that_are_not_utf8_in_the_table_are_a_typed_error_not_a_panic() {
    let Some((database, _)) = fresh(1).await else {
        return;
    };
    // A SQL_ASCII database stores whatever bytes a writer sends; a foreign
    // program (or a hand-edited row) can leave an owner that is not UTF-8.
    let ascii_name = format!("{}_ascii", database.name);
    let admin = pool(&database, 1).await;
    sqlx::raw_sql(&format!(
        "CREATE DATABASE {ascii_name} ENCODING 'SQL_ASCII' TEMPLATE template0 \
         LC_COLLATE 'C' LC_CTYPE 'C'"
    ))
    .execute(&admin)
    .await
    .unwrap();
    let name_at = database.url.rfind(&format!("/{}", database.name)).unwrap();
    let ascii_url = format!(
        "{}/{ascii_name}{}",
        &database.url[..name_at],
        &database.url[name_at + 1 + database.name.len()..]
    );
    let leases = PostgresLeases::connect(&ascii_url, 2).await.unwrap();
    leases.ensure_schema().await.unwrap();
    let scope = Scope::new("nightly").unwrap();
    let lease = leases
        .acquire(
            &scope,
            &Owner::new("writer").unwrap(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await
        .unwrap();
    // The foreign writer: an owner of bytes 0xff 0xfe, still holding.
    sqlx::raw_sql("UPDATE leaseproof_leases SET owner = E'\\xff\\xfe' WHERE scope = 'nightly'")
        .execute(leases.pool())
        .await
        .unwrap();
    let read = leases.row(&scope).await;
    assert!(matches!(read, Err(LeaseError::Database { .. })), "{read:?}");
    // The lease that no longer matches is answered as lost, not decoded.
    assert!(!leases.holds(&lease).await.unwrap());
    let rival = leases
        .acquire(
            &scope,
            &Owner::new("rival").unwrap(),
            Ttl::from_millis(60_000).unwrap(),
        )
        .await;
    assert!(matches!(rival, Err(LeaseError::Held { .. })), "{rival:?}");
    leases.close().await;
    sqlx::raw_sql(&format!("DROP DATABASE {ascii_name} WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap();
}
