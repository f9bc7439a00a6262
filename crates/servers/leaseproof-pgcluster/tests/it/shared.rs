//! The shared per-process server: fresh databases are distinct and concurrent.
//!
//! Goal: many tests (each on its own runtime) can take databases at once.
//! Method: 16 concurrent `fresh_database` calls, a table written in each, and a
//! check that no database sees another's rows.
//! Invariant: database names never repeat within a process.

use std::collections::BTreeSet;
use std::time::Instant;

use leaseproof_pgcluster::{shared_server, test_database, PgSource};
use sqlx::Connection as _;

#[tokio::test]
async fn shared_server_runs_from_system_binaries_when_database_url_is_unset() {
    let Some(_database) = test_database().await else {
        return;
    };
    let server = shared_server().await.expect("test_database returned Some");
    if std::env::var("DATABASE_URL").is_ok_and(|url| !url.is_empty()) {
        assert_eq!(server.source(), PgSource::DatabaseUrl);
        assert!(server.dir().is_none());
        return;
    }
    assert_eq!(server.source(), PgSource::Throwaway);
    let dir = server.dir().expect("throwaway cluster has a dir");
    assert!(dir.join("data").join("PG_VERSION").is_file());
    let pid = server.postmaster_pid().expect("server is running");
    assert!(leaseproof_pgcluster::process_is_running(pid));
    assert!(server.admin_url().starts_with("postgres://postgres:"));
    assert!(server.admin_url().contains("@127.0.0.1:"));
    // As root the server must run as the `postgres` user, never as root.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let server_uid: u32 = uid_line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_ne!(server_uid, 0, "postgres must not run as root");
}

#[tokio::test]
async fn fresh_databases_are_distinct_and_usable_concurrently() {
    let Some(_first) = test_database().await else {
        return;
    };
    let started = Instant::now();
    // One OS thread and one runtime per caller, as `#[tokio::test]`s have: the
    // shared server must serve them all at once.
    let threads: Vec<_> = (0..16)
        .map(|i| {
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let server = shared_server().await.unwrap();
                    let database = server.fresh_database().await.unwrap();
                    let mut connection = database.connect().await.unwrap();
                    let sql =
                        format!("CREATE TABLE marker (i int); INSERT INTO marker VALUES ({i})");
                    sqlx::raw_sql(&sql).execute(&mut connection).await.unwrap();
                    let seen: Vec<i32> = sqlx::query_scalar("SELECT i FROM marker")
                        .fetch_all(&mut connection)
                        .await
                        .unwrap();
                    assert_eq!(seen, [i], "each database sees only its own rows");
                    connection.close().await.unwrap();
                    database
                })
            })
        })
        .collect();
    let mut names = BTreeSet::new();
    for thread in threads {
        let database = thread.join().unwrap();
        assert!(database
            .name
            .starts_with(&format!("lp_{}_", std::process::id())));
        assert!(database.url.ends_with(&format!("/{}", database.name)));
        assert!(
            names.insert(database.name.clone()),
            "duplicate {}",
            database.name
        );
    }
    assert_eq!(names.len(), 16);
    eprintln!(
        "MEASURE: 16 concurrent fresh databases (create + table + query) in {} ms",
        started.elapsed().as_millis()
    );
}

#[tokio::test]
async fn one_fresh_database_takes_little_time() {
    let Some(_warm) = test_database().await else {
        return;
    };
    let server = shared_server().await.unwrap();
    let started = Instant::now();
    let rounds = 5u32;
    for _ in 0..rounds {
        let database = server.fresh_database().await.unwrap();
        drop(database);
    }
    let per_database_ms = started.elapsed().as_secs_f64() * 1000.0 / f64::from(rounds);
    eprintln!("MEASURE: fresh_database {per_database_ms:.1} ms each (sequential)");
    assert!(per_database_ms < 5_000.0);
}

/// The admin URL with its password removed, or replaced by `password`.
fn with_password(admin_url: &str, password: Option<&str>) -> String {
    let (scheme_user, rest) = admin_url
        .split_once(':')
        .and_then(|(scheme, rest)| Some((scheme, rest.split_once('@')?)))
        .map(|(scheme, (user_password, host))| {
            let user = user_password.split(':').next().unwrap_or(user_password);
            (format!("{scheme}:{user}"), host.to_string())
        })
        .expect("a URL with user and host");
    match password {
        Some(password) => format!("{scheme_user}:{password}@{rest}"),
        None => format!("{scheme_user}@{rest}"),
    }
}

#[tokio::test]
async fn a_throwaway_cluster_admits_only_the_holder_of_its_password() {
    let Some(database) = test_database().await else {
        return;
    };
    let server = shared_server().await.expect("test_database returned Some");
    if server.source() != PgSource::Throwaway {
        return; // DATABASE_URL: its credentials are the user's business.
    }
    // The owner, with the URL it was given, gets in.
    let mut owner = database
        .connect()
        .await
        .expect("the URL's credential admits");
    let who: String = sqlx::query_scalar("SELECT current_user::text")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert_eq!(who, "postgres");
    // Another local process without it does not: no `trust`, over TCP.
    let admin_url = server.admin_url();
    for (what, url) in [
        ("no password", with_password(admin_url, None)),
        (
            "a wrong password",
            with_password(admin_url, Some("guessed")),
        ),
    ] {
        let refused = sqlx::PgConnection::connect(&url).await;
        let error = refused.expect_err(&format!("{what}: the cluster let a stranger in"));
        let text = error.to_string();
        assert!(
            text.contains("password") || text.contains("28P01"),
            "{what}: refused for the wrong reason: {text}"
        );
    }
    // The password is nowhere in the cluster's directory.
    let dir = server.dir().expect("a throwaway cluster has a dir");
    assert!(!dir.join("password").exists());
}
