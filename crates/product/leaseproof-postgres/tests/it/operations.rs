//! Each operation's rule on the real server: grants, refusals, expiry,
//! takeover, renew and release checks, token monotonicity, idempotent retry.

use std::time::Duration;

use leaseproof_protocol::{FencingToken, Lease, LeaseError, Owner, Scope, Ttl};

use crate::fresh;

fn ttl_ms(millis: i64) -> Ttl {
    Ttl::from_millis(millis).unwrap()
}

#[tokio::test]
async fn held_lease_refuses_rival_until_expiry_then_rival_takes_over_with_next_token() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("nightly-consolidation").unwrap();
    let (a, b) = (Owner::generate(), Owner::generate());
    // A second's TTL: the rival's refusal and the holder's read must come
    // before it runs out, on a loaded machine too.
    let first = leases.acquire(&scope, &a, ttl_ms(1_000)).await.unwrap();
    assert_eq!(first.token(), FencingToken::FIRST);
    assert_eq!(*first.owner(), a);
    assert_eq!(
        first.expires_at().micros - first.granted_at().micros,
        1_000_000,
        "expires_at = now + ttl, exactly"
    );
    assert!(matches!(
        leases.acquire(&scope, &b, ttl_ms(1_000)).await,
        Err(LeaseError::Held { .. })
    ));
    assert!(leases.holds(&first).await.unwrap());

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(
        !leases.holds(&first).await.unwrap(),
        "expired by the server's clock"
    );
    let second = leases.acquire(&scope, &b, ttl_ms(1_000)).await.unwrap();
    assert_eq!(second.token(), FencingToken(2));
    assert!(
        second.granted_at() >= first.expires_at(),
        "takeover only after expiry (server time)"
    );
    assert!(matches!(
        leases.renew(&first, ttl_ms(1_000)).await,
        Err(LeaseError::Lost { .. })
    ));
    assert_eq!(
        leases.release(&first).await.unwrap(),
        None,
        "the old holder cannot release the new grant"
    );
    assert!(leases.holds(&second).await.unwrap());
}

#[tokio::test]
async fn token_never_restarts_across_release_force_expire_and_takeover() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("job").unwrap();
    let mut token_last = FencingToken(0);
    for round in 0..12 {
        let owner = Owner::generate();
        let lease = leases
            .acquire(&scope, &owner, ttl_ms(60_000))
            .await
            .unwrap();
        assert!(
            lease.token() > token_last,
            "round {round}: {} after {}",
            lease.token(),
            token_last
        );
        token_last = lease.token();
        match round % 3 {
            0 => assert!(leases.release(&lease).await.unwrap().is_some()),
            1 => assert!(leases.force_expire(&scope).await.unwrap()),
            _ => {
                // Released then re-released: the second finds nothing to do.
                assert!(leases.release(&lease).await.unwrap().is_some());
                assert_eq!(leases.release(&lease).await.unwrap(), None);
            }
        }
        let row = leases
            .row(&scope)
            .await
            .unwrap()
            .expect("release never deletes the row");
        assert_eq!(row.token, lease.token());
    }
    assert_eq!(token_last, FencingToken(12));
}

#[tokio::test]
async fn renew_and_release_refuse_wrong_owner_and_stale_token() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("job").unwrap();
    let owner = Owner::generate();
    let lease = leases
        .acquire(&scope, &owner, ttl_ms(60_000))
        .await
        .unwrap();
    // Forged from the grant's own values: the statements compare owner and
    // token with the row, so neither forgery renews or releases anything.
    let forged = |owner: Owner, token: FencingToken| {
        Lease::from_server_reply(
            lease.scope().clone(),
            owner,
            token,
            lease.granted_at(),
            lease.expires_at(),
        )
    };
    let wrong_owner = forged(Owner::generate(), lease.token());
    let stale_token = forged(lease.owner().clone(), FencingToken(lease.token().0 + 1));
    for impostor in [&wrong_owner, &stale_token] {
        assert!(matches!(
            leases.renew(impostor, ttl_ms(1_000)).await,
            Err(LeaseError::Lost { .. })
        ));
        assert_eq!(leases.release(impostor).await.unwrap(), None);
        assert!(!leases.holds(impostor).await.unwrap());
    }
    let row = leases.row(&scope).await.unwrap().unwrap();
    assert_eq!(
        row.expires_at,
        lease.expires_at(),
        "refused operations changed nothing"
    );

    let renewed = leases.renew(&lease, ttl_ms(120_000)).await.unwrap();
    assert_eq!(renewed.token(), lease.token(), "renewal keeps the token");
    assert_eq!(renewed.granted_at(), lease.granted_at());
    assert!(renewed.expires_at() > lease.expires_at());
    let released_at = leases.release(&renewed).await.unwrap().expect("released");
    assert!(released_at < renewed.expires_at());
    assert!(!leases.holds(&renewed).await.unwrap());
}

#[tokio::test]
async fn reacquire_with_same_owner_is_idempotent_and_keeps_the_token() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("job").unwrap();
    let owner = Owner::generate();
    // As if the first reply had been lost: the caller retries with the same owner.
    let first = leases
        .acquire(&scope, &owner, ttl_ms(60_000))
        .await
        .unwrap();
    let retry = leases
        .acquire(&scope, &owner, ttl_ms(60_000))
        .await
        .unwrap();
    assert_eq!(retry.token(), first.token());
    assert_eq!(retry.granted_at(), first.granted_at());
    assert!(retry.expires_at() >= first.expires_at());
    // A different incarnation of "the same worker" is a different owner: refused.
    assert!(matches!(
        leases
            .acquire(&scope, &Owner::generate(), ttl_ms(1_000))
            .await,
        Err(LeaseError::Held { .. })
    ));
    // Once expired, the same owner gets a new grant: its old token is dead.
    assert!(leases.force_expire(&scope).await.unwrap());
    let later = leases
        .acquire(&scope, &owner, ttl_ms(60_000))
        .await
        .unwrap();
    assert_eq!(later.token(), first.token().next());
}

#[tokio::test]
async fn scopes_shaped_like_sql_injection_are_stored_verbatim() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let owner = Owner::generate();
    let names = [
        "'; DROP TABLE leaseproof_leases; --",
        "job\" OR 1=1 --",
        "$1",
        "tab\tnew\nline",
        "ünïcödé-スコープ",
        "%_\\",
    ];
    for name in names {
        let scope = Scope::new(name).unwrap();
        let lease = leases
            .acquire(&scope, &owner, ttl_ms(60_000))
            .await
            .unwrap();
        assert_eq!(lease.scope().as_str(), name);
        assert!(leases.row(&scope).await.unwrap().is_some());
    }
    let mut connection = leases.pool().acquire().await.unwrap();
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT scope FROM leaseproof_leases ORDER BY scope")
            .fetch_all(&mut *connection)
            .await
            .unwrap();
    let mut expected: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    expected.sort();
    let mut stored_sorted = stored.clone();
    stored_sorted.sort();
    assert_eq!(stored_sorted, expected);
}

#[tokio::test]
async fn losing_acquisition_writes_nothing_while_the_bare_upsert_does() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("job").unwrap();
    let holder = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .unwrap();
    let loser = Owner::generate();
    let mut connection = leases.pool().acquire().await.unwrap();
    async fn row_xmax(connection: &mut sqlx::PgConnection) -> String {
        sqlx::query_scalar("SELECT xmax::text FROM leaseproof_leases WHERE scope = 'job'")
            .fetch_one(connection)
            .await
            .unwrap()
    }
    let xmax_before = row_xmax(&mut connection).await;
    for _ in 0..5 {
        assert!(matches!(
            leases.acquire(&scope, &loser, ttl_ms(1_000)).await,
            Err(LeaseError::Held { .. })
        ));
    }
    assert_eq!(
        row_xmax(&mut connection).await,
        xmax_before,
        "the guarded loser took no row lock"
    );

    // Teeth: the seed's bare upsert decides the same, but locks the row to do it.
    let refused = leases
        .acquire_with(
            leaseproof_postgres::sql::ACQUIRE_UNGUARDED,
            &scope,
            &loser,
            ttl_ms(1_000),
        )
        .await;
    assert!(matches!(refused, Err(LeaseError::Held { .. })));
    assert_ne!(
        row_xmax(&mut connection).await,
        xmax_before,
        "the bare upsert's loser locked the row"
    );
    assert!(leases.holds(&holder).await.unwrap());
}

#[tokio::test]
async fn connect_builds_a_working_pool_and_reports_an_absent_server_as_unavailable() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let leases = leaseproof_postgres::PostgresLeases::connect(&database.url, 2)
        .await
        .unwrap();
    leases.ensure_schema().await.unwrap();
    let scope = Scope::new("job").unwrap();
    let lease = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(1_000))
        .await
        .unwrap();
    assert!(leases.holds(&lease).await.unwrap());
    let absent =
        leaseproof_postgres::PostgresLeases::connect("postgres://nobody@127.0.0.1:1/none", 1).await;
    assert!(
        matches!(absent, Err(LeaseError::Unavailable { .. })),
        "{absent:?}"
    );
}

#[tokio::test]
async fn rival_cannot_take_over_shortly_before_expiry() {
    // Expiry is judged exactly on the server's clock: 0.8 s before expires_at
    // the scope is still held, however close.
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("job").unwrap();
    let holder = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(1_500))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let rival = Owner::generate();
    assert!(matches!(
        leases.acquire(&scope, &rival, ttl_ms(1_000)).await,
        Err(LeaseError::Held { .. })
    ));
    // The guard and the ON CONFLICT condition each decide alone in one of the
    // two forms, so both forms are asked: neither layer may hide the other.
    let unguarded = leases
        .acquire_with(
            leaseproof_postgres::sql::ACQUIRE_UNGUARDED,
            &scope,
            &rival,
            ttl_ms(1_000),
        )
        .await;
    assert!(
        matches!(unguarded, Err(LeaseError::Held { .. })),
        "{unguarded:?}"
    );
    assert!(leases.holds(&holder).await.unwrap());
    tokio::time::sleep(Duration::from_millis(900)).await;
    let taken = leases.acquire(&scope, &rival, ttl_ms(1_000)).await.unwrap();
    assert!(taken.granted_at() >= holder.expires_at());
}

#[tokio::test]
async fn renew_after_expiry_is_refused_and_does_not_revive_the_lease() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("job").unwrap();
    let lease = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(matches!(
        leases.renew(&lease, ttl_ms(60_000)).await,
        Err(LeaseError::Lost { .. })
    ));
    assert!(!leases.holds(&lease).await.unwrap());
    let row = leases.row(&scope).await.unwrap().unwrap();
    assert_eq!(
        row.expires_at,
        lease.expires_at(),
        "the refused renewal changed nothing"
    );
}

#[tokio::test]
async fn a_refusal_names_the_holder_by_default_and_costs_nothing_more_when_told_not_to() {
    let Some((_database, leases)) = fresh(2).await else {
        return;
    };
    let scope = Scope::new("who-holds").unwrap();
    let holder = leases
        .acquire(&scope, &Owner::generate(), ttl_ms(60_000))
        .await
        .unwrap();
    let rival = Owner::generate();
    // The statement refuses (never the read-first check, which names the
    // holder by itself).
    let quiet = leases
        .clone()
        .without_holder_reports()
        .with_read_first(leaseproof_postgres::ReadFirst::Never);
    match quiet.acquire(&scope, &rival, ttl_ms(60_000)).await {
        Err(LeaseError::Held { holder: None, .. }) => {}
        other => panic!("told not to, the loser's one statement says no more: {other:?}"),
    }
    // By default the report is the extra read.
    let reporting = leases
        .clone()
        .with_read_first(leaseproof_postgres::ReadFirst::Never);
    let refused = reporting.acquire(&scope, &rival, ttl_ms(60_000)).await;
    let Err(LeaseError::Held {
        scope: refused_scope,
        holder: Some(named),
    }) = refused
    else {
        panic!("the holder is named: {refused:?}");
    };
    assert_eq!(refused_scope, scope);
    assert_eq!(named.owner, *holder.owner());
    assert_eq!(named.token, holder.token());
    assert_eq!(named.expires_at, holder.expires_at());
    let message = LeaseError::Held {
        scope: scope.clone(),
        holder: Some(named),
    }
    .to_string();
    assert!(message.contains(holder.owner().as_str()), "{message}");
    // Nobody holds a released scope.
    holder.release().await.unwrap();
    assert_eq!(reporting.holder(&scope).await.unwrap(), None);
}
