//! A throwaway PostgreSQL cluster run from the system's binaries.
//!
//! Goal: initdb + start a server in a temp dir on a free loopback port, tuned for
//! speed (no fsync), and make sure it never outlives the process that made it.
//! Method: `initdb`/`pg_ctl` run directly, or through `runuser -u postgres` (`su`
//! as fallback) when we are root, because initdb refuses to run as root. Right
//! the moment the temp dir exists — before `initdb` runs — a detached `sh`
//! watchdog polls our pid and, once we are gone (exit, panic, abort, SIGINT,
//! SIGKILL), stops the server if one runs and removes the dir.
//! Only the owner gets in: `initdb` sets a random superuser password and
//! SCRAM-SHA-256 authentication for every connection (TCP and the socket),
//! never `trust`; the admin URL carries the password, which exists nowhere
//! else once `initdb` has read it.
//! Invariant: a cluster always has a watchdog; the temp dir holds the data
//! dir, the unix socket dir and the server log, so removing it removes everything.

use std::path::{Path, PathBuf};

use leaseproof_watchdog::shell_quote;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::{Connection as _, PgConnection};

use crate::source::{effective_uid, program_on_path, user_ids, user_switch_available, Binaries};
use crate::Error;

/// User the server runs as when this process is root.
pub(crate) const SERVER_USER_WHEN_ROOT: &str = "postgres";
/// How long `pg_ctl start`/`restart` may wait for the server.
const START_TIMEOUT_S: u64 = 60;
/// How long we poll with a real connection after `pg_ctl` says it is up.
const CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Attempts at finding a free port when another process takes ours first.
const PORT_ATTEMPTS_MAX: u32 = 5;

static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// One initialised cluster: its dirs, port and how to run its programs.
#[derive(Debug)]
pub(crate) struct Cluster {
    binaries: Binaries,
    root_dir: PathBuf,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    admin_url: String,
    /// `Some(user)` when the programs must run as another user (we are root).
    run_as: Option<String>,
    /// `synchronous_commit = on`: a commit survives a server crash. Off for the
    /// shared cluster (speed); on for dedicated ones, whose tests crash the server.
    /// `fsync = off` stays either way: it only matters if the machine crashes.
    commits_survive_crash: bool,
    /// The superuser's password (SCRAM-SHA-256), carried by `admin_url`.
    password: String,
    /// The cleanup watchdog, spawned with the temp dir; handed to the owner
    /// by [`Cluster::start_first_time`].
    watchdog: Option<std::process::Child>,
}

impl Cluster {
    /// Creates the temp dir and runs `initdb`; the server is not started.
    pub(crate) async fn create(
        binaries: Binaries,
        commits_survive_crash: bool,
    ) -> Result<Self, Error> {
        let run_as = match effective_uid() {
            Some(0) => Some(SERVER_USER_WHEN_ROOT.to_string()),
            Some(_) => None,
            None => {
                return Err(Error::command(
                    "finding our uid",
                    "neither /proc/self nor `id -u` answered",
                ))
            }
        };
        let owner_ids = match &run_as {
            Some(user) => {
                if !user_switch_available() {
                    return Err(Error::command(
                        "switching to the server user",
                        format!(
                            "running as root, initdb must run as `{user}`, and neither \
                             `runuser` (util-linux) nor `su` is on PATH"
                        ),
                    ));
                }
                Some(user_ids(user).map_err(|reason| {
                    Error::command(
                        "looking up the server user",
                        format!("running as root, initdb must run as `{user}`: {reason}"),
                    )
                })?)
            }
            None => None,
        };
        // The watchdog is armed for the directory's path before the
        // directory exists: a SIGKILL at any moment leaves nothing behind
        // (between making it and arming the watchdog, it once could).
        let root_dir = unique_dir_path(&base_temp_dir(run_as.is_some()));
        let socket_dir = root_dir.join("socket");
        let mut cluster = Cluster {
            data_dir: root_dir.join("data"),
            log_path: root_dir.join("server.log"),
            socket_dir,
            root_dir,
            binaries,
            port: 0,
            admin_url: String::new(),
            run_as,
            commits_survive_crash,
            password: random_password(),
            watchdog: None,
        };
        match cluster.spawn_watchdog() {
            Ok(watchdog) => cluster.watchdog = Some(watchdog),
            Err(error) => return Err(error),
        }
        if let Err(error) = cluster.make_dirs(owner_ids) {
            cluster.remove_dir();
            return Err(error);
        }
        // initdb reads the password from a file only the server user can read;
        // the file is gone before the server starts.
        let password_file = cluster.root_dir.join("password");
        if let Err(error) = write_private_file(&password_file, &cluster.password, owner_ids) {
            cluster.stop_and_remove_blocking();
            return Err(error);
        }
        let data_dir = path_arg(&cluster.data_dir);
        let password_file_arg = format!("--pwfile={}", path_arg(&password_file));
        let initdb = cluster
            .run(
                "initdb",
                &[
                    "-D",
                    &data_dir,
                    "-U",
                    "postgres",
                    "--auth=scram-sha-256",
                    &password_file_arg,
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
            )
            .await;
        let _ = std::fs::remove_file(&password_file);
        if let Err(error) = initdb {
            cluster.stop_and_remove_blocking();
            return Err(error);
        }
        Ok(cluster)
    }

    /// Starts the server on a fresh free port (retrying if the port is taken),
    /// waits until it accepts connections and hands over the watchdog.
    pub(crate) async fn start_first_time(&mut self) -> Result<std::process::Child, Error> {
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS_MAX {
            self.set_port(free_port()?)?;
            match self.start_on_current_port().await {
                Ok(()) => {
                    let watchdog = self.watchdog.take().expect("the watchdog is armed once");
                    return Ok(watchdog);
                }
                Err(error) if self.log_says_port_taken() => last_error = Some(error),
                Err(error) => return Err(error),
            }
        }
        Err(last_error.expect("at least one attempt was made"))
    }

    /// `pg_ctl start` on the configured port, then a connect poll.
    pub(crate) async fn start_on_current_port(&self) -> Result<(), Error> {
        assert!(
            self.port != 0,
            "a port is configured before the first start"
        );
        self.pg_ctl_until_connectable(&["start"]).await
    }

    /// `pg_ctl restart -m fast`: same port and data, every session is cut.
    pub(crate) async fn restart(&self) -> Result<(), Error> {
        self.pg_ctl_until_connectable(&["restart", "-m", "fast"])
            .await
    }

    /// `pg_ctl <action> -w` with the start timeout, data dir and log, then a
    /// connect poll; a failure carries the server log's tail.
    async fn pg_ctl_until_connectable(&self, action: &[&str]) -> Result<(), Error> {
        let timeout_s = START_TIMEOUT_S.to_string();
        let data_dir = path_arg(&self.data_dir);
        let log_path = path_arg(&self.log_path);
        let mut args: Vec<&str> = action.to_vec();
        args.extend(["-w", "-t", &timeout_s, "-D", &data_dir, "-l", &log_path]);
        if let Err(error) = self.run("pg_ctl", &args).await {
            return Err(self.start_error(error.to_string()));
        }
        self.wait_until_connectable().await
    }

    /// `pg_ctl stop -m <mode>` and wait until the server is gone.
    pub(crate) async fn stop(&self, mode: &str) -> Result<(), Error> {
        self.run(
            "pg_ctl",
            &["stop", "-m", mode, "-w", "-D", &path_arg(&self.data_dir)],
        )
        .await
        .map(drop)
    }

    /// Blocking immediate stop and removal of the temp dir, for `Drop`.
    pub(crate) fn stop_and_remove_blocking(&self) {
        if self.data_dir.join("postmaster.pid").exists() {
            let data_dir = path_arg(&self.data_dir);
            let _ = self
                .command("pg_ctl", &immediate_stop(&data_dir))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        self.remove_dir();
    }

    /// Root of the temp dir (data, socket and log inside).
    pub(crate) fn root_dir(&self) -> &Path {
        &self.root_dir
    }

    /// The TCP port on 127.0.0.1.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Superuser URL to the `postgres` database.
    pub(crate) fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// The postmaster's pid while the server runs (first line of postmaster.pid).
    pub(crate) fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data_dir.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// The last `lines` lines of the server log.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn set_port(&mut self, port: u16) -> Result<(), Error> {
        assert!(port != 0);
        // Appended, not rewritten: in postgresql.conf the last setting wins, so a
        // port retry just appends another `port =` line.
        let settings = format!(
            "\n# leaseproof-pgcluster: fast throwaway settings\n\
             listen_addresses = '127.0.0.1'\n\
             port = {port}\n\
             unix_socket_directories = '{socket}'\n\
             fsync = off\n\
             synchronous_commit = {synchronous_commit}\n\
             full_page_writes = off\n\
             max_connections = 300\n\
             shared_buffers = 128MB\n\
             # Commit-time evidence for I3: pg_xact_commit_timestamp(xmin).\n\
             track_commit_timestamp = on\n",
            synchronous_commit = if self.commits_survive_crash {
                "on"
            } else {
                "off"
            },
            socket = path_arg(&self.socket_dir).replace('\'', "''"),
        );
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .append(true)
            .open(self.data_dir.join("postgresql.conf"))
            .and_then(|mut file| file.write_all(settings.as_bytes()))
            .map_err(|e| Error::io("writing postgresql.conf", e))?;
        self.port = port;
        self.admin_url = format!(
            "postgres://postgres:{password}@127.0.0.1:{port}/postgres",
            password = self.password
        );
        Ok(())
    }

    fn log_says_port_taken(&self) -> bool {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        log.contains("could not bind") || log.contains("Address already in use")
    }

    fn start_error(&self, reason: String) -> Error {
        Error::Start {
            reason,
            log_tail: self.log_tail(20),
        }
    }

    async fn wait_until_connectable(&self) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_millis(CONNECT_TIMEOUT_MS);
        loop {
            match PgConnection::connect(&self.admin_url).await {
                Ok(connection) => {
                    let _ = connection.close().await;
                    return Ok(());
                }
                Err(error) if Instant::now() >= deadline => {
                    return Err(self.start_error(format!(
                        "no connection to {} within {CONNECT_TIMEOUT_MS} ms: {error}",
                        self.admin_url
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Spawns the detached watchdog that cleans up once this process is gone.
    fn spawn_watchdog(&self) -> Result<std::process::Child, Error> {
        let data_dir = path_arg(&self.data_dir);
        let stop = self.shell_line("pg_ctl", &immediate_stop(&data_dir));
        // Once we are gone: stop a server if one runs (and kill its
        // postmaster should the stop fail), remove the dir — three times, a
        // second apart, because an interrupted initdb or `pg_ctl start` may
        // still be writing into it or starting a server.
        let pidfile = shell_quote(&path_arg(&self.data_dir.join("postmaster.pid")));
        let cleanup = format!(
            "for attempt in 1 2 3; do \
               if [ -f {pidfile} ]; then \
                 postmaster=$(head -n 1 {pidfile} 2>/dev/null); \
                 {stop} >/dev/null 2>&1; \
                 [ -n \"$postmaster\" ] && kill -9 \"$postmaster\" 2>/dev/null; \
               fi; \
               rm -rf {root}; sleep 1; \
             done",
            root = shell_quote(&path_arg(&self.root_dir)),
        );
        leaseproof_watchdog::after_this_process(&cleanup)
            .map_err(|e| Error::io("spawning the cleanup watchdog", e))
    }

    fn remove_dir(&self) {
        let _ = std::fs::remove_dir_all(&self.root_dir);
    }

    /// Makes the root and socket directories, handed to the server user
    /// when there is one (`owner_ids`).
    fn make_dirs(&self, owner_ids: Option<(u32, u32)>) -> Result<(), Error> {
        std::fs::create_dir(&self.root_dir).map_err(|e| Error::io("creating the temp dir", e))?;
        std::fs::create_dir(&self.socket_dir)
            .map_err(|e| Error::io("creating the socket dir", e))?;
        if let Some((uid, gid)) = owner_ids {
            for dir in [&self.root_dir, &self.socket_dir] {
                std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                    .map_err(|e| Error::io("handing the temp dir to the server user", e))?;
            }
        }
        Ok(())
    }

    /// Runs one of the PostgreSQL programs and fails with its output if it fails.
    ///
    /// The program runs in a process group of its own, killed whole should
    /// this future be dropped before it ends (an interrupt): `runuser` does
    /// not pass a SIGKILL on, and an `initdb` left running would go on
    /// writing into the directory being removed.
    async fn run(&self, program: &str, args: &[&str]) -> Result<String, Error> {
        use std::os::unix::process::CommandExt as _;
        let mut command = self.command(program, args);
        command.process_group(0);
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command
            .spawn()
            .map_err(|e| Error::io(format!("running {program}"), e))?;
        let group = child.id().map(KillGroupUnlessDone);
        let output = child
            .wait_with_output()
            .await
            .map_err(|e| Error::io(format!("running {program}"), e))?;
        std::mem::forget(group);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() {
            Ok(text)
        } else {
            Err(Error::command(
                format!("{program} {}", args.join(" ")),
                format!("{}: {}", output.status, text.trim()),
            ))
        }
    }

    /// A `Command` for a PostgreSQL program, as the server user when needed.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let program_path = path_arg(&self.binaries.program(program));
        let mut command = match (&self.run_as, runuser_path()) {
            (None, _) => {
                let mut command = Command::new(&program_path);
                command.args(args);
                command
            }
            (Some(user), Some(runuser)) => {
                let mut command = Command::new(runuser);
                command.args(["-u", user, "--", &program_path]).args(args);
                command
            }
            (Some(user), None) => {
                let mut command = Command::new("su");
                command
                    .args([user.as_str(), "-s", "/bin/sh", "-c"])
                    .arg(shell_words(&program_path, args));
                command
            }
        };
        // The server user may not be allowed into our working directory.
        command.current_dir(&self.root_dir);
        command
    }

    /// The same as [`Self::command`], as one shell command line.
    fn shell_line(&self, program: &str, args: &[&str]) -> String {
        let program_path = path_arg(&self.binaries.program(program));
        let words = shell_words(&program_path, args);
        match (&self.run_as, runuser_path()) {
            (None, _) => words,
            (Some(user), Some(runuser)) => format!(
                "{} -u {} -- {words}",
                shell_quote(&path_arg(&runuser)),
                shell_quote(user)
            ),
            (Some(user), None) => format!(
                "su {} -s /bin/sh -c {}",
                shell_quote(user),
                shell_quote(&words)
            ),
        }
    }
}

impl Drop for Cluster {
    /// A cluster that never started hands its watchdog to nobody. It was
    /// dropped after a failed start, or while being created or started (an
    /// interrupt dropped the future): either way nobody else will stop a
    /// server or remove the dir — do it here. Then the watchdog would only
    /// wait for our exit: stop it, unless the dir is still there (a program
    /// killed a moment ago may still have been writing), when it stays armed
    /// to retry once we are gone.
    fn drop(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            self.stop_and_remove_blocking();
            if self.root_dir.exists() {
                return;
            }
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// Kills the process group it names when dropped; forgotten once the
/// group's leader has ended (a group id whose processes are all gone could
/// be reused).
struct KillGroupUnlessDone(u32);

impl Drop for KillGroupUnlessDone {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// 32 random lowercase letters (160 bits): URL-safe, no quoting anywhere.
fn random_password() -> String {
    use rand::Rng as _;
    let mut rng = rand::thread_rng();
    (0..32)
        .map(|_| char::from(b'a' + rng.gen_range(0..26)))
        .collect()
}

/// Writes `text` to a new file readable only by its owner (the server user
/// when `owner_ids` is set).
fn write_private_file(path: &Path, text: &str, owner_ids: Option<(u32, u32)>) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("writing the password file", e))?;
    file.write_all(format!("{text}\n").as_bytes())
        .map_err(|e| Error::io("writing the password file", e))?;
    if let Some((uid, gid)) = owner_ids {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| Error::io("handing the password file to the server user", e))?;
    }
    Ok(())
}

/// Binds 127.0.0.1:0, reads the port the kernel chose and releases it.
pub(crate) fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io("finding a free port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("finding a free port", e))?
        .port();
    assert!(port != 0);
    Ok(port)
}

/// The system temp dir, or `/tmp` when the server user could not traverse it.
pub(crate) fn base_temp_dir(server_runs_as_other_user: bool) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let temp_dir = std::env::temp_dir();
    if !server_runs_as_other_user {
        return temp_dir;
    }
    let traversable = temp_dir.ancestors().all(|dir| {
        std::fs::metadata(dir)
            .map(|meta| meta.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    });
    if traversable {
        temp_dir
    } else {
        PathBuf::from("/tmp")
    }
}

/// A path under `base` no directory has: the process id, a counter of this
/// process and the clock's nanoseconds (made by the caller, after it armed
/// what removes it).
pub(crate) fn unique_dir_path(base: &Path) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    base.join(format!(
        "leaseproof-pg-{}-{}-{nanos}",
        std::process::id(),
        DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

pub(crate) fn create_unique_dir(base: &Path) -> Result<PathBuf, Error> {
    for _ in 0..100 {
        let dir = unique_dir_path(base);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("creating the temp dir", e)),
        }
    }
    Err(Error::command(
        "creating the temp dir",
        "100 name collisions in a row",
    ))
}

pub(crate) fn runuser_path() -> Option<PathBuf> {
    program_on_path("runuser", &["/usr/sbin", "/sbin"])
}

/// `pg_ctl`'s arguments for an immediate stop that waits for the end: the
/// cleanup after a test needs no checkpoint, only the server gone.
fn immediate_stop(data_dir: &str) -> [&str; 6] {
    ["stop", "-m", "immediate", "-w", "-D", data_dir]
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn shell_words(program: &str, args: &[&str]) -> String {
    std::iter::once(program)
        .chain(args.iter().copied())
        .map(shell_quote)
        .collect::<Vec<_>>()
        .join(" ")
}

/// True while a process with this pid exists and is not a zombie.
pub(crate) fn process_is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(true),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_is_running_sees_us_and_not_a_reaped_child() {
        assert!(process_is_running(std::process::id()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_is_running(pid));
    }
}
