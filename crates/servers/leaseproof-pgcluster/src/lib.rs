//! Throwaway PostgreSQL servers for leaseproof's tests, benches and CLI.
//!
//! Goal: one call gives a test a fresh database on a real PostgreSQL server, in
//! the order docs/protocol.md fixes ("PostgreSQL and Redis in tests"): `DATABASE_URL`, then a
//! throwaway cluster from the system's binaries, and otherwise a loud skip line
//! (or a panic when `LEASEPROOF_REQUIRE_PG=1`). With the `testcontainers` feature
//! a PostgreSQL container comes third, when a Docker engine answers.
//!
//! Method: one cluster per process, shared by all tests ([`shared_server`]). Only
//! the handle (dirs, port, URLs) lives in the static: `#[tokio::test]` gives each
//! test its own runtime, so every SQL call opens a fresh connection on the
//! caller's runtime. Statics are never dropped, so a detached watchdog process
//! stops the shared cluster and removes its dir once the process is gone, also
//! after a panic, an abort or SIGKILL. Tests that restart or crash the server get
//! a [`DedicatedCluster`], which cleans up on `Drop` (and has a watchdog too).
//! [`serve_throwaway_until_stdin_closes`] serves one to a human or a parent
//! process (the CLI's `leaseproof pg`); the crate deliberately has no binary of
//! its own, so the workspace keeps a single one for `cargo run`.
//!
//! Invariant: no sqlx pool or connection is ever stored in a static, and every
//! started server has exactly one watchdog.

#![deny(missing_docs)]

mod cluster;
#[cfg(feature = "testcontainers")]
mod container;
mod pgbouncer;
mod serve;
mod source;
mod url;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::{Connection as _, PgConnection};

use crate::cluster::Cluster;
use crate::source::Plan;

pub use crate::pgbouncer::{pgbouncer_binary, require_pgbouncer, PgBouncer, PoolMode};
pub use crate::serve::serve_throwaway_until_stdin_closes;

/// Environment variable that turns a skip into a panic (CI sets it to `1`).
pub const REQUIRE_PG_ENV: &str = "LEASEPROOF_REQUIRE_PG";

/// Where a server came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgSource {
    /// The server named by the `DATABASE_URL` environment variable.
    DatabaseUrl,
    /// A cluster this process started from the system's PostgreSQL binaries.
    Throwaway,
    /// A container started through testcontainers (feature `testcontainers`).
    Container,
}

/// Why no PostgreSQL server is available; the reason goes into the skip line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct PgUnavailable {
    /// Human-readable reason, naming what was tried.
    pub reason: String,
}

/// Errors from starting, stopping or using a server that exists.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PostgreSQL program (or a helper such as `id`) failed.
    #[error("{what} failed: {detail}")]
    Command {
        /// What was being done.
        what: String,
        /// Exit status and output.
        detail: String,
    },
    /// A file-system or process-spawning error.
    #[error("I/O error while {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The server did not come up (or back up).
    #[error("PostgreSQL did not start: {reason}\n--- server log tail ---\n{log_tail}")]
    Start {
        /// What went wrong.
        reason: String,
        /// The last lines of the server log.
        log_tail: String,
    },
    /// A SQL statement or connection failed.
    #[error("SQL error while {what}: {source}")]
    Sql {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: sqlx::Error,
    },
}

impl Error {
    fn command(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Command {
            what: what.into(),
            detail: detail.into(),
        }
    }

    fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    fn sql(what: impl Into<String>, source: sqlx::Error) -> Self {
        Error::Sql {
            what: what.into(),
            source,
        }
    }
}

/// True when `LEASEPROOF_REQUIRE_PG=1`: a missing server is then a failure.
pub fn require_pg() -> bool {
    require_pg_from(std::env::var(REQUIRE_PG_ENV).ok().as_deref())
}

/// [`require_pg`] for a given value of the variable (`None` when unset).
pub fn require_pg_from(value: Option<&str>) -> bool {
    matches!(value.map(str::trim), Some("1"))
}

/// Whether `DATABASE_URL` is set (and not empty): the user named a server.
fn database_url_is_set() -> bool {
    std::env::var("DATABASE_URL").is_ok_and(|url| !url.trim().is_empty())
}

/// The loud line a skipped test prints to stderr (the CLI prints it when it
/// finds no server); it advises `DATABASE_URL` only while it is unset.
pub fn skip_line(unavailable: &PgUnavailable) -> String {
    if database_url_is_set() {
        format!("LEASEPROOF SKIP: no PostgreSQL ({})", unavailable.reason)
    } else {
        format!(
            "LEASEPROOF SKIP: no PostgreSQL ({}) — set DATABASE_URL or install postgresql",
            unavailable.reason
        )
    }
}

/// Prints [`skip_line`] to stderr, or panics with the reason when `require`
/// is set — or when `DATABASE_URL` is set: a server the user named that
/// cannot be reached is a failure, never a skip.
pub fn skip_or_panic(unavailable: &PgUnavailable, require: bool) {
    if require {
        panic!(
            "{REQUIRE_PG_ENV}=1 but no PostgreSQL is available: {}",
            unavailable.reason
        );
    }
    if database_url_is_set() {
        panic!("DATABASE_URL is set but unusable: {}", unavailable.reason);
    }
    eprintln!("{}", skip_line(unavailable));
}

/// A reachable PostgreSQL server; hands out fresh databases.
#[derive(Debug)]
pub struct PgServer {
    source: PgSource,
    admin_url: String,
    /// The throwaway cluster, when we started one. Never stopped from here: the
    /// shared server lives in a static, its watchdog does the cleanup.
    cluster: Option<Cluster>,
    /// The container, when we started one (removed by its watchdog).
    #[cfg(feature = "testcontainers")]
    #[allow(
        dead_code,
        reason = "held so the container lives as long as the server handle"
    )]
    container: Option<container::PgContainer>,
}

impl PgServer {
    /// URL of the server's admin database (`postgres` for a throwaway cluster).
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// Where this server came from.
    pub fn source(&self) -> PgSource {
        self.source
    }

    /// The throwaway cluster's temp dir (data, socket, log); `None` for `DATABASE_URL`.
    pub fn dir(&self) -> Option<&Path> {
        self.cluster.as_ref().map(Cluster::root_dir)
    }

    /// The throwaway cluster's postmaster pid; `None` for `DATABASE_URL`.
    pub fn postmaster_pid(&self) -> Option<u32> {
        self.cluster.as_ref().and_then(Cluster::postmaster_pid)
    }

    /// Creates a new, empty database with a unique name; safe to call concurrently.
    pub async fn fresh_database(&self) -> Result<TestDatabase, Error> {
        // Databases on someone else's server are dropped again; on our throwaway
        // cluster the whole cluster goes away, so dropping them is wasted time.
        create_database(&self.admin_url, self.source == PgSource::DatabaseUrl).await
    }
}

static SHARED_SERVER: tokio::sync::OnceCell<Result<PgServer, PgUnavailable>> =
    tokio::sync::OnceCell::const_new();

/// The process-wide server, started (or looked up) on first use.
///
/// A failure is cached too, so a machine without PostgreSQL pays for the probe
/// once, not once per test.
pub async fn shared_server() -> Result<&'static PgServer, PgUnavailable> {
    SHARED_SERVER
        .get_or_init(start_server)
        .await
        .as_ref()
        .map_err(Clone::clone)
}

/// A fresh database on the shared server, or `None` after printing the skip line
/// (panics instead when [`require_pg`]). Panics if the server exists but the
/// database cannot be created: that is a failure, not a skip.
pub async fn test_database() -> Option<TestDatabase> {
    match shared_server().await {
        Ok(server) => Some(
            server
                .fresh_database()
                .await
                .unwrap_or_else(|error| panic!("creating a fresh test database: {error}")),
        ),
        Err(unavailable) => {
            skip_or_panic(&unavailable, require_pg());
            None
        }
    }
}

/// A [`DedicatedCluster`], or `None` after printing the skip line (panics
/// instead when [`require_pg`]).
pub async fn test_dedicated_cluster() -> Option<DedicatedCluster> {
    match DedicatedCluster::start_dedicated().await {
        Ok(cluster) => Some(cluster),
        Err(unavailable) => {
            skip_or_panic(&unavailable, require_pg());
            None
        }
    }
}

async fn start_server() -> Result<PgServer, PgUnavailable> {
    match source::plan_from_environment() {
        Plan::DatabaseUrl(url) => match PgConnection::connect(&url).await {
            Ok(connection) => {
                let _ = connection.close().await;
                Ok(PgServer {
                    source: PgSource::DatabaseUrl,
                    admin_url: url,
                    cluster: None,
                    #[cfg(feature = "testcontainers")]
                    container: None,
                })
            }
            Err(error) => Err(PgUnavailable {
                reason: format!("DATABASE_URL is set but connecting to it failed: {error}"),
            }),
        },
        Plan::Throwaway(binaries) => {
            let (cluster, _watchdog) = start_cluster(binaries, false).await?;
            Ok(PgServer {
                source: PgSource::Throwaway,
                admin_url: cluster.admin_url().to_string(),
                cluster: Some(cluster),
                #[cfg(feature = "testcontainers")]
                container: None,
            })
        }
        #[cfg(feature = "testcontainers")]
        Plan::Container => {
            let container = container::PgContainer::start().await?;
            Ok(PgServer {
                source: PgSource::Container,
                admin_url: container.url().to_string(),
                cluster: None,
                container: Some(container),
            })
        }
        #[cfg(not(feature = "testcontainers"))]
        Plan::Container => unreachable!("a container is planned only when the feature is built"),
        Plan::Unavailable(reason) => Err(PgUnavailable { reason }),
    }
}

async fn start_cluster(
    binaries: source::Binaries,
    commits_survive_crash: bool,
) -> Result<(Cluster, std::process::Child), PgUnavailable> {
    let bin_dir = binaries.bin_dir.display().to_string();
    let unavailable = |error: Error| PgUnavailable {
        reason: format!(
            "found PostgreSQL binaries in {bin_dir}, but the throwaway cluster failed: {error}"
        ),
    };
    let mut cluster = Cluster::create(binaries, commits_survive_crash)
        .await
        .map_err(unavailable)?;
    match cluster.start_first_time().await {
        Ok(watchdog) => Ok((cluster, watchdog)),
        Err(error) => {
            cluster.stop_and_remove_blocking();
            Err(unavailable(error))
        }
    }
}

/// One fresh database. Its URL is all a test needs; connect with [`Self::connect`]
/// or hand [`Self::url`] to a pool on the test's own runtime.
#[derive(Debug)]
pub struct TestDatabase {
    /// Connection URL of this database.
    pub url: String,
    /// The database's name (`lp_<pid>_<counter>`).
    pub name: String,
    admin_url: String,
    drop_on_drop: bool,
}

impl TestDatabase {
    /// Opens a new connection on the caller's runtime.
    pub async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        PgConnection::connect(&self.url).await
    }
}

impl Drop for TestDatabase {
    /// Best effort `DROP DATABASE … WITH (FORCE)` for databases on a server we do
    /// not own. Runs on its own thread and runtime: `Drop` may run inside, outside
    /// or during shutdown of the test's runtime.
    fn drop(&mut self) {
        if !self.drop_on_drop {
            return;
        }
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropper = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut connection) = PgConnection::connect(&admin_url).await {
                    let _ = sqlx::raw_sql(&sql).execute(&mut connection).await;
                    let _ = connection.close().await;
                }
            });
        });
        let _ = dropper.join();
    }
}

static DATABASE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// `CREATE DATABASE lp_<pid>_<counter>`; a name taken by another process sharing
/// the server (same pid in another container) just moves on to the next counter.
async fn create_database(admin_url: &str, drop_on_drop: bool) -> Result<TestDatabase, Error> {
    const NAME_ATTEMPTS_MAX: u32 = 20;
    let mut connection = PgConnection::connect(admin_url)
        .await
        .map_err(|e| Error::sql(format!("connecting to {admin_url}"), e))?;
    for _ in 0..NAME_ATTEMPTS_MAX {
        let name = format!(
            "lp_{}_{}",
            std::process::id(),
            DATABASE_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let sql = format!("CREATE DATABASE {name}");
        // `Executor::execute` on `&mut PgConnection` with a `&str` (simple query
        // protocol, which CREATE DATABASE needs) keeps this future `Send`;
        // `raw_sql(..).execute(..)` does not (higher-ranked `Executor` bound).
        match sqlx::Executor::execute(&mut connection, sql.as_str()).await {
            Ok(_) => {
                let _ = connection.close().await;
                return Ok(TestDatabase {
                    url: url::with_database(admin_url, &name),
                    name,
                    admin_url: admin_url.to_string(),
                    drop_on_drop,
                });
            }
            Err(error) if is_duplicate_database(&error) => continue,
            Err(error) => return Err(Error::sql(format!("CREATE DATABASE {name}"), error)),
        }
    }
    Err(Error::command(
        "choosing a database name",
        format!("{NAME_ATTEMPTS_MAX} names in a row were taken"),
    ))
}

fn is_duplicate_database(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "42P04")
}

/// A cluster of its own, for tests that restart, stop or crash the server.
/// `Drop` stops it (immediate mode) and removes its temp dir.
///
/// Unlike the shared cluster it runs with `synchronous_commit = on`, so a
/// committed transaction survives [`Self::crash`] (with `off`, a commit from the
/// last ~200 ms is lost on a crash, which a lease test would misread as a bug).
#[derive(Debug)]
pub struct DedicatedCluster {
    cluster: Cluster,
    watchdog: std::process::Child,
}

impl DedicatedCluster {
    /// Initialises and starts a new cluster from the system's binaries.
    /// `DATABASE_URL` is ignored: a server we do not own cannot be restarted.
    pub async fn start_dedicated() -> Result<DedicatedCluster, PgUnavailable> {
        let binaries = source::find_binaries().ok_or_else(|| PgUnavailable {
            reason: "a dedicated cluster needs initdb/pg_ctl/postgres on PATH or in \
                     /usr/lib/postgresql/*/bin, and none were found (DATABASE_URL \
                     cannot serve: its server cannot be restarted by us)"
                .to_string(),
        })?;
        let (cluster, watchdog) = start_cluster(binaries, true).await?;
        Ok(DedicatedCluster { cluster, watchdog })
    }

    /// Superuser URL to the `postgres` database; stays valid across restarts.
    pub fn url(&self) -> &str {
        self.cluster.admin_url()
    }

    /// The TCP port on 127.0.0.1; the same after every restart.
    pub fn port(&self) -> u16 {
        self.cluster.port()
    }

    /// The temp dir holding data, unix socket and server log.
    pub fn dir(&self) -> &Path {
        self.cluster.root_dir()
    }

    /// The postmaster's pid, `None` while stopped.
    pub fn postmaster_pid(&self) -> Option<u32> {
        self.cluster.postmaster_pid()
    }

    /// The last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.cluster.log_tail(lines)
    }

    /// A fresh database on this cluster (not dropped: the cluster goes away).
    pub async fn fresh_database(&self) -> Result<TestDatabase, Error> {
        create_database(self.cluster.admin_url(), false).await
    }

    /// `pg_ctl restart -m fast`: committed data survives, every open connection
    /// is cut; returns once the server accepts connections again.
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.cluster.restart().await
    }

    /// Clean shutdown (`pg_ctl stop -m fast`).
    pub async fn stop(&mut self) -> Result<(), Error> {
        self.cluster.stop("fast").await
    }

    /// Crash-like shutdown (`pg_ctl stop -m immediate`): no checkpoint, the next
    /// [`Self::start`] runs crash recovery.
    pub async fn crash(&mut self) -> Result<(), Error> {
        self.cluster.stop("immediate").await
    }

    /// Starts a stopped cluster again on the same port.
    pub async fn start(&mut self) -> Result<(), Error> {
        self.cluster.start_on_current_port().await
    }
}

impl Drop for DedicatedCluster {
    fn drop(&mut self) {
        self.cluster.stop_and_remove_blocking();
        // Cleanup is done; the watchdog would only wait for our exit.
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// Whether PostgreSQL's server binaries (`initdb`, `pg_ctl`, `postgres`) are
/// on `PATH` or under `/usr/lib/postgresql/*/bin`: a throwaway cluster can start.
pub fn binaries_available() -> bool {
    source::find_binaries().is_some()
}

/// True while a process with this pid exists and is not a zombie (Linux `/proc`).
/// Lets tests check that a server they stopped is really gone.
pub fn process_is_running(pid: u32) -> bool {
    cluster::process_is_running(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawnable<F: std::future::Future + Send + 'static>(future: F) -> F {
        future
    }

    /// Compile-time check: callers can `tokio::spawn` these (sqlx futures are
    /// prone to losing `Send` through higher-ranked `Executor` bounds).
    #[test]
    fn futures_are_spawnable_on_a_multi_thread_runtime() {
        let probe = spawnable(async { shared_server().await.map(PgServer::source) });
        drop(probe);
        let probe = spawnable(async {
            let server = shared_server().await.ok()?;
            server
                .fresh_database()
                .await
                .ok()
                .map(|database| database.name.clone())
        });
        drop(probe);
        let probe = spawnable(DedicatedCluster::start_dedicated());
        drop(probe);
        let probe = spawnable(serve_throwaway_until_stdin_closes());
        drop(probe);
    }

    #[test]
    fn require_pg_only_for_exactly_one() {
        assert!(require_pg_from(Some("1")));
        assert!(require_pg_from(Some(" 1\n")));
        assert!(!require_pg_from(None));
        assert!(!require_pg_from(Some("0")));
        assert!(!require_pg_from(Some("")));
        assert!(!require_pg_from(Some("yes")));
    }

    #[test]
    fn skip_line_is_loud_and_names_the_reason() {
        let line = skip_line(&PgUnavailable {
            reason: "no binaries".into(),
        });
        assert_eq!(
            line,
            "LEASEPROOF SKIP: no PostgreSQL (no binaries) — set DATABASE_URL or install postgresql"
        );
    }

    #[test]
    fn skip_or_panic_panics_with_the_reason_only_when_required() {
        let unavailable = PgUnavailable {
            reason: "nothing here".into(),
        };
        skip_or_panic(&unavailable, false);
        let panic = std::panic::catch_unwind(|| skip_or_panic(&unavailable, true))
            .expect_err("required PostgreSQL must panic");
        let message = panic
            .downcast_ref::<String>()
            .expect("formatted panic message");
        assert!(message.contains("nothing here"));
        assert!(message.contains(REQUIRE_PG_ENV));
    }
}
