//! The SQL against the executable semantics, case by case.
//!
//! Method: a seeded random script of acquire / renew / release / holds over a
//! few owners and scopes, short TTLs and sleeps so expiry really happens. Each
//! step runs inside `BEGIN; SELECT now(); …; COMMIT`, so the statement's
//! `now()` is known exactly and the same step is applied to
//! `semantics::LeaseTable` with that time. Both acquisition forms (the guarded
//! single statement and the seed's bare upsert) run under a savepoint on the
//! same state. Every result and the whole row after every step must agree.

use std::time::Duration;

use leaseproof_postgres::sql;
use leaseproof_protocol::semantics::{Acquisition, LeaseRow, LeaseTable};
use leaseproof_protocol::{FencingToken, Lease, Owner, Scope, ServerTime, Ttl};
use rand::{Rng, SeedableRng};
use sqlx::{Connection, PgConnection};

type LeaseTimes = Option<(i64, i64, i64)>;

async fn acquire_sql(
    connection: &mut PgConnection,
    statement: &str,
    scope: &Scope,
    owner: &Owner,
    ttl: Ttl,
) -> LeaseTimes {
    sqlx::query_as(statement)
        .bind(scope.as_str())
        .bind(owner.as_str())
        .bind(ttl.as_micros())
        .fetch_optional(connection)
        .await
        .unwrap()
}

async fn row_sql(connection: &mut PgConnection, scope: &Scope) -> Option<LeaseRow> {
    let row: Option<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT owner, token, (extract(epoch FROM granted_at) * 1000000)::int8, \
         (extract(epoch FROM expires_at) * 1000000)::int8 FROM leaseproof_leases WHERE scope = $1",
    )
    .bind(scope.as_str())
    .fetch_optional(connection)
    .await
    .unwrap();
    row.map(|(owner, token, granted_at, expires_at)| LeaseRow {
        owner: Owner::new(owner).unwrap(),
        token: FencingToken(token),
        granted_at: ServerTime::from_micros(granted_at),
        expires_at: ServerTime::from_micros(expires_at),
    })
}

fn model_times(acquisition: &Acquisition) -> LeaseTimes {
    match acquisition {
        Acquisition::Granted { lease, .. } => Some((
            lease.token.0,
            lease.granted_at.micros,
            lease.expires_at.micros,
        )),
        Acquisition::Held { .. } => None,
    }
}

#[tokio::test]
async fn sql_decides_every_case_like_the_executable_semantics() {
    let Some((database, _leases)) = crate::fresh(1).await else {
        return;
    };
    let mut connection = database.connect().await.unwrap();
    let seed: u64 = std::env::var("LEASEPROOF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1ea5e);
    println!("SEED={seed} differential");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let scopes: Vec<Scope> = (0..2)
        .map(|i| Scope::new(format!("scope-{i}")).unwrap())
        .collect();
    let owners: Vec<Owner> = (0..3)
        .map(|i| Owner::new(format!("owner-{i}")).unwrap())
        .collect();
    let mut model = LeaseTable::new();
    let mut leases_seen: Vec<Lease> = Vec::new();
    let (mut grants, mut refusals, mut takeovers) = (0, 0, 0);

    for step in 0..300 {
        let scope = &scopes[rng.gen_range(0..scopes.len())];
        let owner = &owners[rng.gen_range(0..owners.len())];
        let ttl = Ttl::from_micros(rng.gen_range(1_000..20_000)).unwrap();
        let mut transaction = connection.begin().await.unwrap();
        let now: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000000)::int8")
            .fetch_one(&mut *transaction)
            .await
            .unwrap();
        let now = ServerTime::from_micros(now);
        let choice = rng.gen_range(0..10);
        let context =
            format!("step {step} (seed {seed}), choice {choice}, {scope}, {owner}, now {now}");
        if choice < 5 || leases_seen.is_empty() {
            sqlx::query("SAVEPOINT unguarded")
                .execute(&mut *transaction)
                .await
                .unwrap();
            let unguarded =
                acquire_sql(&mut transaction, sql::ACQUIRE_UNGUARDED, scope, owner, ttl).await;
            sqlx::query("ROLLBACK TO SAVEPOINT unguarded")
                .execute(&mut *transaction)
                .await
                .unwrap();
            let guarded = acquire_sql(&mut transaction, sql::ACQUIRE, scope, owner, ttl).await;
            let token_before = model.row(scope).map(|row| row.token);
            let expected = model.acquire(scope, owner, ttl, now);
            assert_eq!(
                guarded,
                model_times(&expected),
                "guarded acquire, {context}"
            );
            assert_eq!(
                unguarded, guarded,
                "both acquisition forms decide alike, {context}"
            );
            match expected {
                Acquisition::Granted { lease, .. } => {
                    grants += 1;
                    if token_before.is_some_and(|token| token < lease.token) {
                        takeovers += 1;
                    }
                    leases_seen.push(lease);
                }
                Acquisition::Held { .. } => refusals += 1,
            }
        } else {
            let lease = leases_seen[rng.gen_range(0..leases_seen.len())].clone();
            match choice {
                5 | 6 => {
                    let renewed: Option<(i64, i64)> = sqlx::query_as(sql::RENEW)
                        .bind(lease.scope.as_str())
                        .bind(lease.owner.as_str())
                        .bind(lease.token.0)
                        .bind(ttl.as_micros())
                        .fetch_optional(&mut *transaction)
                        .await
                        .unwrap();
                    let expected = model
                        .renew(&lease, ttl, now)
                        .map(|l| (l.granted_at.micros, l.expires_at.micros));
                    assert_eq!(renewed, expected, "renew, {context}");
                }
                7 => {
                    let released: Option<(i64,)> = sqlx::query_as(sql::RELEASE)
                        .bind(lease.scope.as_str())
                        .bind(lease.owner.as_str())
                        .bind(lease.token.0)
                        .fetch_optional(&mut *transaction)
                        .await
                        .unwrap();
                    let expected = model.release(&lease, now).map(|l| (l.expires_at.micros,));
                    assert_eq!(released, expected, "release, {context}");
                }
                _ => {
                    let holds: bool = sqlx::query_scalar(sql::HOLDS)
                        .bind(lease.scope.as_str())
                        .bind(lease.owner.as_str())
                        .bind(lease.token.0)
                        .fetch_one(&mut *transaction)
                        .await
                        .unwrap();
                    assert_eq!(holds, model.holds(&lease, now), "holds, {context}");
                }
            }
        }
        for scope in &scopes {
            assert_eq!(
                row_sql(&mut transaction, scope).await.as_ref(),
                model.row(scope),
                "row of {scope} after {context}"
            );
        }
        transaction.commit().await.unwrap();
        tokio::time::sleep(Duration::from_micros(rng.gen_range(0..3_000))).await;
    }
    // The script must have exercised every path, or agreement proves little.
    println!("grants {grants}, refusals {refusals}, takeovers {takeovers}");
    assert!(
        grants > 20 && refusals > 20 && takeovers > 10,
        "grants {grants}, refusals {refusals}, takeovers {takeovers}"
    );
}
