//! Source selection through the environment: `DATABASE_URL` wins.
//!
//! Goal: with `DATABASE_URL` set, tests use that server and still get fresh
//! databases (dropped again afterwards, since the server is not ours).
//! Method: a child process (this test binary re-executed as a throwaway server,
//! see `throwaway_child`) provides a server; this test binary re-runs one of its
//! own tests in another subprocess with `DATABASE_URL` pointing at it, so the
//! static shared server is chosen anew.
//! Invariant: the subprocess reports source `DatabaseUrl` and its database is
//! gone after the subprocess ends.

use std::process::Command;

use leaseproof_pgcluster::{shared_server, test_database, PgSource};
use sqlx::Connection as _;

use crate::throwaway_child::spawn_throwaway_child;

const CHILD_ENV: &str = "LEASEPROOF_PGCLUSTER_TEST_CHILD";

/// Runs in the subprocess only (the parent sets `CHILD_ENV`); in a plain
/// `cargo test` run it checks that the shared server's source matches the
/// environment, so it is a real test either way.
#[tokio::test]
async fn database_url_source_is_chosen_when_set() {
    let Some(database) = test_database().await else {
        return;
    };
    let server = shared_server().await.unwrap();
    let url_set = std::env::var("DATABASE_URL").is_ok_and(|url| !url.trim().is_empty());
    let expected = if url_set {
        PgSource::DatabaseUrl
    } else {
        PgSource::Throwaway
    };
    assert_eq!(server.source(), expected);
    if std::env::var(CHILD_ENV).is_ok() {
        println!("CHILD_SOURCE={:?}", server.source());
        println!("CHILD_DATABASE={}", database.name);
    }
}

#[tokio::test]
async fn database_url_in_a_subprocess_uses_that_server_and_drops_its_database() {
    let Some(provider) = spawn_throwaway_child() else {
        return;
    };
    let url = provider.url.clone();

    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "source::database_url_source_is_chosen_when_set",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DATABASE_URL", &url)
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(stdout.contains("CHILD_SOURCE=DatabaseUrl"), "{stdout}");
    let name = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHILD_DATABASE="))
        .expect("child printed its database")
        .to_string();

    let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
    let remaining: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert_eq!(
        remaining, 0,
        "the DATABASE_URL server keeps no test database"
    );
    connection.close().await.unwrap();

    assert!(provider.finish().success());
}
