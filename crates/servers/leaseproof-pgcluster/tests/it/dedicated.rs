//! Dedicated clusters: restart keeps data and cuts sessions; drop leaves nothing.
//!
//! Goal: the guarantees lease tests rely on when they restart or crash the server.
//! Method: commit a row, restart, read it back on a new connection and watch the
//! old connection fail; crash + start runs recovery; drop and check pid and dir.
//! Invariant: after `Drop`, the postmaster pid is gone and the temp dir is removed.

use std::time::Instant;

use leaseproof_pgcluster::{process_is_running, test_dedicated_cluster};
use sqlx::{Connection as _, PgConnection};

#[tokio::test]
async fn restart_keeps_committed_data_and_breaks_old_connections() {
    let started = Instant::now();
    let Some(mut cluster) = test_dedicated_cluster().await else {
        return;
    };
    eprintln!(
        "MEASURE: dedicated cluster initdb + start in {} ms",
        started.elapsed().as_millis()
    );
    let port_before = cluster.port();
    let pid_before = cluster.postmaster_pid().expect("running");
    let database = cluster.fresh_database().await.unwrap();
    let mut old_connection = database.connect().await.unwrap();
    sqlx::raw_sql("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('committed')")
        .execute(&mut old_connection)
        .await
        .unwrap();

    let restart_started = Instant::now();
    cluster.restart().await.unwrap();
    eprintln!(
        "MEASURE: restart in {} ms",
        restart_started.elapsed().as_millis()
    );

    assert_eq!(cluster.port(), port_before);
    let pid_after = cluster.postmaster_pid().expect("running again");
    assert_ne!(pid_after, pid_before, "a new postmaster after restart");
    assert_exits(pid_before, "the restarted cluster's old postmaster");
    let old_result = sqlx::query("SELECT 1").execute(&mut old_connection).await;
    assert!(
        old_result.is_err(),
        "the old session must be cut by the restart"
    );

    let mut new_connection = database.connect().await.unwrap();
    let value: String = sqlx::query_scalar("SELECT v FROM kept")
        .fetch_one(&mut new_connection)
        .await
        .unwrap();
    assert_eq!(value, "committed");
    new_connection.close().await.unwrap();
}

#[tokio::test]
async fn crash_then_start_recovers_committed_data_and_stop_refuses_connections() {
    let Some(mut cluster) = test_dedicated_cluster().await else {
        return;
    };
    let mut connection = PgConnection::connect(cluster.url()).await.unwrap();
    sqlx::raw_sql("CREATE TABLE survived (v int); INSERT INTO survived VALUES (7)")
        .execute(&mut connection)
        .await
        .unwrap();
    let pid = cluster.postmaster_pid().unwrap();

    cluster.crash().await.unwrap();
    assert!(cluster.postmaster_pid().is_none());
    assert_exits(pid, "the crashed postmaster");
    assert!(PgConnection::connect(cluster.url()).await.is_err());

    cluster.start().await.unwrap();
    let mut connection = PgConnection::connect(cluster.url()).await.unwrap();
    let value: i32 = sqlx::query_scalar("SELECT v FROM survived")
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert_eq!(value, 7);
    connection.close().await.unwrap();

    cluster.stop().await.unwrap();
    assert!(PgConnection::connect(cluster.url()).await.is_err());
    assert!(cluster
        .log_tail(50)
        .contains("database system is shut down"));
}

#[tokio::test]
async fn drop_stops_the_server_and_removes_the_dir() {
    let Some(cluster) = test_dedicated_cluster().await else {
        return;
    };
    let pid = cluster.postmaster_pid().expect("running");
    let dir = cluster.dir().to_path_buf();
    let url = cluster.url().to_string();
    assert!(process_is_running(pid));
    assert!(dir.is_dir());

    drop(cluster);

    assert_exits(pid, "the dropped cluster's postmaster");
    assert!(!dir.exists(), "{} outlived the drop", dir.display());
    assert!(PgConnection::connect(&url).await.is_err());
}

/// `pg_ctl -w` returns once the pid file is gone; the postmaster may take a
/// moment more to exit (and, unreaped, shows as a zombie, which
/// `process_is_running` does not count). Waits, bounded, instead of racing it.
fn assert_exits(pid: u32, what: &str) {
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while process_is_running(pid) {
        assert!(
            Instant::now() < deadline,
            "{what} {pid} still runs after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
