//! Read first (test-and-test-and-set) on the real server.
//!
//! Goal: a polling loser costs a primary-key read, while the acquisition
//! statement still decides every grant. Method: a session that may not write
//! at all (`default_transaction_read_only`) proves a refusal sent no write
//! statement; the holder a refusal names proves which path refused (only the
//! read names it without `with_holder_reports`). Invariant: the read never
//! grants and never refuses the owner itself, so takeover after expiry and
//! the idempotent re-acquire behave as with the one statement.

use std::time::Duration;

use leaseproof_postgres::{PostgresLeases, ReadFirst};
use leaseproof_protocol::{FencingToken, LeaseError, Owner, Scope, Ttl};
use sqlx::postgres::PgConnectOptions;

use crate::fresh;

fn ttl_ms(millis: i64) -> Ttl {
    Ttl::from_millis(millis).unwrap()
}

fn holder_named(
    result: Result<impl std::fmt::Debug, LeaseError>,
) -> Option<leaseproof_protocol::Holder> {
    match result {
        Err(LeaseError::Held { holder, .. }) => holder,
        other => panic!("expected Held, got {other:?}"),
    }
}

#[tokio::test]
async fn a_refused_scope_is_read_first_until_won_and_the_read_names_the_holder() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    assert_eq!(leases.read_first(), ReadFirst::AfterRefusal, "the default");
    let (scope, other) = (Scope::new("polled").unwrap(), Scope::new("free").unwrap());
    let (a, b) = (Owner::generate(), Owner::generate());
    let held = leases.acquire_lease(&scope, &a, ttl_ms(300)).await.unwrap();

    // First attempt: the statement refuses; the holder is named by the
    // report's extra read (the default), and by nobody without reports.
    let quiet = leases.clone().without_holder_reports();
    assert_eq!(
        holder_named(quiet.acquire_lease(&scope, &b, ttl_ms(300)).await),
        None
    );
    assert_eq!(
        holder_named(leases.acquire_lease(&scope, &b, ttl_ms(300)).await)
            .map(|holder| holder.owner),
        Some(a.clone())
    );
    assert_eq!(leases.scopes_read_first(), 1);
    // From now on the read refuses, and names the holder for free.
    let holder = holder_named(leases.acquire_lease(&scope, &b, ttl_ms(300)).await)
        .expect("a refusal by the read names the holder");
    assert_eq!(holder.owner, a);
    assert_eq!(holder.token, held.token());
    assert_eq!(holder.expires_at, held.expires_at());
    // Another scope is not read first: its grant is one statement.
    leases.acquire_lease(&other, &b, ttl_ms(300)).await.unwrap();
    assert_eq!(leases.scopes_read_first(), 1);

    // The holder itself is never refused by the read: re-acquiring its own
    // lease (a retry after a lost reply) keeps the token.
    let again = leases.acquire_lease(&scope, &a, ttl_ms(300)).await.unwrap();
    assert_eq!(again.token(), held.token());
    assert_eq!(again.granted_at(), held.granted_at());

    // After expiry the read finds nothing and the statement takes over.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = leases.acquire_lease(&scope, &b, ttl_ms(300)).await.unwrap();
    assert_eq!(taken.token(), FencingToken(held.token().0 + 1));
    assert!(
        taken.granted_at() >= again.expires_at(),
        "takeover only after expiry"
    );
    assert_eq!(leases.scopes_read_first(), 0, "won: one statement again");
}

#[tokio::test]
async fn a_loser_that_reads_first_sends_no_write_statement() {
    let Some((database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("read-only-loser").unwrap();
    let held = leases
        .acquire_lease(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .unwrap();
    // A session in which every transaction is read-only: an INSERT fails
    // there with 25006 even when it would insert nothing.
    let options: PgConnectOptions = database.url.parse().unwrap();
    let read_only = PostgresLeases::pool_options()
        .max_connections(1)
        .connect_with(options.options([("default_transaction_read_only", "on")]))
        .await
        .unwrap();
    let polling = PostgresLeases::new(read_only.clone()).with_read_first(ReadFirst::Always);
    let loser = Owner::generate();
    for _ in 0..3 {
        let holder = holder_named(polling.acquire_lease(&scope, &loser, ttl_ms(1_000)).await)
            .expect("the read refused");
        assert_eq!(holder.token, held.token());
    }
    // Control: the one statement is a write statement, refused by the
    // read-only session before it can even lose.
    let statement = PostgresLeases::new(read_only).with_read_first(ReadFirst::Never);
    let error = statement
        .acquire_lease(&scope, &loser, ttl_ms(1_000))
        .await
        .unwrap_err();
    assert_eq!(
        PostgresLeases::sqlstate(&error).as_deref(),
        Some("25006"),
        "{error}"
    );
}

#[tokio::test]
async fn every_read_first_mode_grants_and_refuses_alike() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    for mode in [ReadFirst::Never, ReadFirst::AfterRefusal, ReadFirst::Always] {
        let leases = leases.clone().with_read_first(mode);
        assert_eq!(leases.read_first(), mode);
        let scope = Scope::new(format!("mode-{mode:?}")).unwrap();
        let (a, b) = (Owner::generate(), Owner::generate());
        let first = leases.acquire_lease(&scope, &a, ttl_ms(200)).await.unwrap();
        assert_eq!(first.token(), FencingToken::FIRST, "{mode:?}");
        for _ in 0..2 {
            assert!(
                matches!(
                    leases.acquire_lease(&scope, &b, ttl_ms(200)).await,
                    Err(LeaseError::Held { .. })
                ),
                "{mode:?}"
            );
        }
        let renewed = leases.acquire_lease(&scope, &a, ttl_ms(200)).await.unwrap();
        assert_eq!(
            renewed.token(),
            first.token(),
            "{mode:?}: own lease, same token"
        );
        leases.release(&renewed).await.unwrap().expect("released");
        let second = leases.acquire_lease(&scope, &b, ttl_ms(200)).await.unwrap();
        assert_eq!(
            second.token(),
            FencingToken(2),
            "{mode:?}: free after release"
        );
    }
}
