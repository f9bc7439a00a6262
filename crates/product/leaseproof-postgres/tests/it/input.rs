//! Bad input is a typed error before any SQL runs: the types cannot be built
//! from it, so no call can reach the database with it. Shown against a pool
//! whose server does not exist: validation answers, the network is never asked.

use std::time::Duration;

use leaseproof_postgres::PostgresLeases;
use leaseproof_protocol::{InvalidInput, LeaseError, Owner, Scope, Ttl};
use sqlx::postgres::PgPoolOptions;

#[tokio::test]
async fn invalid_scopes_and_ttls_are_rejected_before_any_sql() {
    // Port 1 on loopback: nothing listens; any SQL would fail with Unavailable.
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(200))
        .connect_lazy("postgres://nobody@127.0.0.1:1/nothing")
        .unwrap();
    let leases = PostgresLeases::new(pool);
    let cases: Vec<(&str, Result<(), InvalidInput>)> = vec![
        ("empty scope", Scope::new("").map(drop)),
        ("oversized scope", Scope::new("s".repeat(256)).map(drop)),
        ("NUL in scope", Scope::new("job\0x").map(drop)),
        ("zero ttl", Ttl::from_millis(0).map(drop)),
        ("negative ttl", Ttl::from_millis(-1).map(drop)),
        ("huge ttl", Ttl::from_millis(i64::MAX / 1_000).map(drop)),
        ("overflowing ttl", Ttl::from_millis(i64::MAX).map(drop)),
        ("sub-millisecond ttl", Ttl::from_micros(999).map(drop)),
        ("NUL in owner", Owner::new("a\0").map(drop)),
    ];
    for (what, result) in cases {
        let error = result.expect_err(what);
        // Converted into the lease error type callers match on.
        assert!(
            matches!(LeaseError::from(error.clone()), LeaseError::Invalid(_)),
            "{what}: {error}"
        );
        assert!(!error.to_string().is_empty());
    }
    // The control: a valid call does reach for the (absent) server.
    let scope = Scope::new("job").unwrap();
    let result = leases
        .acquire(&scope, &Owner::generate(), Ttl::from_millis(10).unwrap())
        .await;
    assert!(
        matches!(result, Err(LeaseError::Unavailable { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_pool_of_zero_connections_is_refused_before_connecting() {
    // Port 1: were a connection tried, the error would be Unavailable.
    let result = PostgresLeases::connect("postgres://nobody@127.0.0.1:1/nothing", 0).await;
    let Err(LeaseError::Invalid(InvalidInput::PoolTooSmall {
        connections_max,
        connections_min,
    })) = result
    else {
        panic!("{:?}", result.map(|_| ()));
    };
    assert_eq!((connections_max, connections_min), (0, 1));
    // One connection is a pool: it reaches for the (absent) server.
    let result = PostgresLeases::connect("postgres://nobody@127.0.0.1:1/nothing", 1).await;
    assert!(
        matches!(result, Err(LeaseError::Unavailable { .. })),
        "{:?}",
        result.map(|_| ())
    );
}
