//! A throwaway PgBouncer in front of a test database.
//!
//! Goal: prove which locks survive a connection pooler, on the pooler teams
//! run (Debian's `pgbouncer`), in session or transaction pooling. Method:
//! a config in a fresh temp dir (plain-text auth with the upstream's own
//! password, a free loopback port), `pgbouncer -d` as the server user when
//! root (it refuses root), readiness by a connection through it. Stopped by
//! the pid it wrote, on `Drop`; a detached watchdog does the same if this
//! process dies first.
//! Invariant: only the PgBouncer this value started is ever signalled.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{
    base_temp_dir, create_unique_dir, free_port, runuser_path, SERVER_USER_WHEN_ROOT,
};
use crate::source::{effective_uid, program_on_path, user_ids};

/// How PgBouncer hands server connections to its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// One server connection per client connection, for its whole session.
    Session,
    /// A server connection per transaction (an autocommit statement is one):
    /// session state — advisory locks, prepared statements, `LISTEN` — does
    /// not follow the client.
    Transaction,
}

impl PoolMode {
    fn name(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// A running PgBouncer; stopped and its dir removed on `Drop`.
#[derive(Debug)]
pub struct PgBouncer {
    dir: PathBuf,
    url: String,
    pid: u32,
}

/// `pgbouncer` on `PATH` or in `/usr/sbin`.
pub fn pgbouncer_binary() -> Option<PathBuf> {
    program_on_path("pgbouncer", &["/usr/sbin", "/usr/bin"])
}

/// `LEASEPROOF_REQUIRE_PGBOUNCER=1`: a missing PgBouncer fails a test
/// instead of skipping it (CI sets it).
pub fn require_pgbouncer() -> bool {
    std::env::var("LEASEPROOF_REQUIRE_PGBOUNCER").as_deref() == Ok("1")
}

impl PgBouncer {
    /// Starts one in front of the database at `upstream_url`
    /// (`postgres://user:password@host:port/database`), pooling in `mode`.
    pub fn start(upstream_url: &str, mode: PoolMode) -> Result<PgBouncer, String> {
        let binary = pgbouncer_binary().ok_or("no pgbouncer on PATH or in /usr/sbin")?;
        let upstream = Upstream::parse(upstream_url)?;
        let run_as = (effective_uid() == Some(0)).then_some(SERVER_USER_WHEN_ROOT);
        let dir = create_unique_dir(&base_temp_dir(run_as.is_some())).map_err(|e| e.to_string())?;
        let started = PgBouncer::start_in(&binary, &dir, &upstream, mode, run_as);
        if started.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        started
    }

    fn start_in(
        binary: &Path,
        dir: &Path,
        upstream: &Upstream,
        mode: PoolMode,
        run_as: Option<&str>,
    ) -> Result<PgBouncer, String> {
        let port = free_port().map_err(|e| e.to_string())?;
        let config = dir.join("pgbouncer.ini");
        let pid_file = dir.join("pgbouncer.pid");
        std::fs::write(
            &config,
            format!(
                "[databases]\n{database} = host={host} port={upstream_port} dbname={database}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 auth_type = plain\nauth_file = {auth}\npool_mode = {mode}\n\
                 unix_socket_dir =\nlogfile = {log}\npidfile = {pid}\n\
                 max_client_conn = 200\ndefault_pool_size = 8\n\
                 ignore_startup_parameters = extra_float_digits\n",
                database = upstream.database,
                host = upstream.host,
                upstream_port = upstream.port,
                auth = dir.join("users.txt").display(),
                mode = mode.name(),
                log = dir.join("pgbouncer.log").display(),
                pid = pid_file.display(),
            ),
        )
        .map_err(|error| format!("writing the PgBouncer config: {error}"))?;
        std::fs::write(
            dir.join("users.txt"),
            format!("\"{}\" \"{}\"\n", upstream.user, upstream.password),
        )
        .map_err(|error| format!("writing the PgBouncer users: {error}"))?;
        let mut command = match run_as {
            Some(user) => {
                let (uid, gid) = user_ids(user)?;
                for path in [dir.to_path_buf(), config.clone(), dir.join("users.txt")] {
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(|error| {
                        format!("handing {} to {user}: {error}", path.display())
                    })?;
                }
                let runuser = runuser_path().ok_or("running as root, pgbouncer needs `runuser`")?;
                let mut command = Command::new(runuser);
                command.args(["-u", user, "--"]).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        let status = command
            .arg("-d")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|error| format!("starting pgbouncer: {error}"))?;
        if !status.success() {
            return Err(format!(
                "pgbouncer -d exited with {status}: {}",
                log_tail(dir)
            ));
        }
        let pid = wait_for_pid(&pid_file)
            .ok_or_else(|| format!("pgbouncer wrote no pid within 10 s: {}", log_tail(dir)))?;
        spawn_watchdog(pid, dir);
        let url = format!(
            "postgres://{}:{}@127.0.0.1:{port}/{}",
            upstream.user, upstream.password, upstream.database
        );
        let bouncer = PgBouncer {
            dir: dir.to_path_buf(),
            url,
            pid,
        };
        bouncer.wait_until_listening(port)?;
        Ok(bouncer)
    }

    /// The URL to connect through it (the upstream's user and database).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The pid of the PgBouncer process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn wait_until_listening(&self, port: u16) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "pgbouncer did not listen within 10 s: {}",
            log_tail(&self.dir)
        ))
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while crate::process_is_running(self.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if crate::process_is_running(self.pid) {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The parts of a `postgres://user:password@host:port/database` URL.
struct Upstream {
    user: String,
    password: String,
    host: String,
    port: u16,
    database: String,
}

impl Upstream {
    fn parse(url: &str) -> Result<Upstream, String> {
        let refuse = || format!("not a postgres://user:password@host:port/database URL: {url:?}");
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(refuse)?;
        let (credentials, rest) = rest.rsplit_once('@').ok_or_else(refuse)?;
        let (user, password) = credentials.split_once(':').ok_or_else(refuse)?;
        let (address, database) = rest.split_once('/').ok_or_else(refuse)?;
        let database = database.split('?').next().unwrap_or(database);
        let (host, port) = address.rsplit_once(':').ok_or_else(refuse)?;
        let port = port.parse().map_err(|_| refuse())?;
        let plain = |part: &str| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        };
        // The config file takes these verbatim: nothing that could quote.
        if ![user, password, host, database].into_iter().all(plain) {
            return Err(refuse());
        }
        Ok(Upstream {
            user: user.to_string(),
            password: password.to_string(),
            host: host.to_string(),
            port,
            database: database.to_string(),
        })
    }
}

fn wait_for_pid(pid_file: &Path) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            return Some(pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn log_tail(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// Stops the PgBouncer and removes its dir once this process is gone.
fn spawn_watchdog(pid: u32, dir: &Path) {
    let cleanup = format!(
        "if grep -q pgbouncer /proc/{pid}/cmdline 2>/dev/null; then kill -9 {pid}; fi; rm -rf {dir}",
        dir = leaseproof_watchdog::shell_quote(&dir.display().to_string()),
    );
    let _ = leaseproof_watchdog::after_this_process(&cleanup);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_are_read_and_anything_that_could_quote_is_refused() {
        let upstream = Upstream::parse("postgres://postgres:secret@127.0.0.1:5432/lp_1_0").unwrap();
        assert_eq!(
            (
                upstream.user.as_str(),
                upstream.password.as_str(),
                upstream.port
            ),
            ("postgres", "secret", 5432)
        );
        assert_eq!(upstream.database, "lp_1_0");
        assert!(Upstream::parse("postgres://u:p w@h:1/d").is_err());
        assert!(Upstream::parse("postgres://u:p\"@h:1/d").is_err());
        assert!(Upstream::parse("mysql://u:p@h:1/d").is_err());
        assert!(Upstream::parse("postgres://u@h:1/d").is_err());
    }
}
