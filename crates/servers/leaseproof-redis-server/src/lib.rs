//! Redis for the tests: `REDIS_URL`, else a throwaway `redis-server`.
//!
//! Goal: real Redis in `cargo test` with nothing to set up, like the
//! PostgreSQL cluster of `leaseproof-pgcluster`. Method: find `redis-server`
//! (on `PATH`, or `/usr/bin`, `/usr/local/bin`), start it on a free loopback
//! port in a temporary directory with persistence off, a random password
//! (`requirepass`: another local user cannot connect) and `bind 127.0.0.1`,
//! and wait until it answers `PING`. A detached `sh` watchdog polls this
//! process and, once it is gone — exit, panic or SIGKILL — kills the server
//! and removes the directory. With neither a URL nor the binary, tests print
//! `LEASEPROOF SKIP: no Redis …`; with `LEASEPROOF_REQUIRE_REDIS=1` (CI) they
//! fail instead.
//! Invariant: a started server always has a watchdog; the process that
//! started it is the only one that knows its password.
#![deny(missing_docs)]

#[cfg(feature = "testcontainers")]
mod container;
mod serve;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rand::Rng as _;

pub use crate::serve::serve_throwaway_until_stdin_closes;

/// The variable that makes a missing Redis a test failure.
pub const REQUIRE_REDIS_ENV: &str = "LEASEPROOF_REQUIRE_REDIS";

/// A Redis server the tests may use.
#[derive(Debug)]
pub struct RedisServer {
    /// `redis://` URL, with the password when the server has one.
    pub url: String,
    /// The server's process and data directory, when we started it.
    throwaway: Option<Throwaway>,
    /// The container, when the shared server is one (feature `testcontainers`).
    #[cfg(feature = "testcontainers")]
    #[allow(
        dead_code,
        reason = "held so the container lives as long as the handle"
    )]
    container: Option<container::RedisContainer>,
}

#[derive(Debug)]
struct Throwaway {
    child: Child,
    port: u16,
    password: String,
    persistent: bool,
    _dir: OwnedDir,
}

/// The server's directory, removed when dropped (and by the watchdog when
/// this process dies first).
#[derive(Debug)]
struct OwnedDir(PathBuf);

impl OwnedDir {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for OwnedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl RedisServer {
    /// The server's port, when it is a throwaway.
    pub fn port(&self) -> Option<u16> {
        self.throwaway.as_ref().map(|throwaway| throwaway.port)
    }

    /// The throwaway server's password (the credential the URL carries).
    pub fn password(&self) -> Option<&str> {
        self.throwaway
            .as_ref()
            .map(|throwaway| throwaway.password.as_str())
    }

    /// Starts a dedicated throwaway server (a test that restarts or kills one
    /// uses its own). Dropping it stops the server and removes its directory.
    pub fn start_throwaway() -> Result<RedisServer, String> {
        RedisServer::start_throwaway_with(false)
    }

    /// [`Self::start_throwaway`]; with `persistent`, every write is logged and
    /// fsynced (`appendonly yes`, `appendfsync always`), so a restart keeps
    /// the keys (and their absolute expiry times).
    pub fn start_throwaway_with(persistent: bool) -> Result<RedisServer, String> {
        let binary = redis_binary().ok_or("redis-server not found on PATH")?;
        let mut rng = rand::thread_rng();
        let mut letters = |count: usize| -> String {
            (0..count)
                .map(|_| char::from(b'a' + rng.gen_range(0..26)))
                .collect()
        };
        let password = letters(32);
        let port = free_port().map_err(|error| format!("free port: {error}"))?;
        // The watchdog is armed for the directory's path before the
        // directory exists, and the server is spawned after both: a SIGKILL
        // at any moment (before the directory is made, while the server
        // starts, during a restart) leaves neither behind.
        let path = std::env::temp_dir().join(format!("leaseproof-redis-{}", letters(12)));
        spawn_watchdog(port, &path)?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        let dir = OwnedDir(path);
        let child = spawn_server(&binary, port, &password, persistent, dir.path())?;
        let mut throwaway = Throwaway {
            child,
            port,
            password: password.clone(),
            persistent,
            _dir: dir,
        };
        if let Err(error) = wait_until_ready(port, &password, Duration::from_secs(10)) {
            let _ = throwaway.child.kill();
            let _ = throwaway.child.wait();
            return Err(format!(
                "redis-server did not start on port {port}: {error}"
            ));
        }
        Ok(RedisServer {
            url: format!("redis://:{password}@127.0.0.1:{port}/"),
            throwaway: Some(throwaway),
            #[cfg(feature = "testcontainers")]
            container: None,
        })
    }

    /// The throwaway server's process id (`None` for a server we did not
    /// start): a restart replaces it.
    pub fn pid(&self) -> Option<u32> {
        self.throwaway
            .as_ref()
            .map(|throwaway| throwaway.child.id())
    }

    /// The throwaway server's directory (`None` for a server we did not start).
    pub fn dir(&self) -> Option<&Path> {
        self.throwaway
            .as_ref()
            .map(|throwaway| throwaway._dir.path())
    }

    /// Kills the throwaway server (SIGKILL, a crash) and starts it again on
    /// the same port with the same password: without persistence it comes
    /// back empty, with it it replays its append-only file.
    pub fn restart(&mut self) -> Result<(), String> {
        let throwaway = self.throwaway.take().ok_or("not a throwaway server")?;
        let Throwaway {
            mut child,
            port,
            password,
            persistent,
            _dir,
        } = throwaway;
        let _ = child.kill();
        let _ = child.wait();
        let binary = redis_binary().ok_or("redis-server not found")?;
        let child = spawn_server(&binary, port, &password, persistent, _dir.path())?;
        // The watchdog armed at the first start follows the new process
        // through the pid files in the directory.
        wait_until_ready(port, &password, Duration::from_secs(10))?;
        self.throwaway = Some(Throwaway {
            child,
            port,
            password,
            persistent,
            _dir,
        });
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(throwaway) = self.throwaway.as_mut() {
            let _ = throwaway.child.kill();
            let _ = throwaway.child.wait();
        }
    }
}

/// The shared server of this test process: `REDIS_URL`, else a throwaway
/// started once (a static: its watchdog cleans up when the process ends).
pub fn shared_server() -> Result<&'static RedisServer, String> {
    static SERVER: OnceLock<Result<RedisServer, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| match std::env::var("REDIS_URL") {
            Ok(url) if !url.trim().is_empty() => Ok(RedisServer {
                url,
                throwaway: None,
                #[cfg(feature = "testcontainers")]
                container: None,
            }),
            // `REDIS_URL`, then a throwaway server, then (feature
            // `testcontainers`, a Docker engine answering) a container.
            _ => RedisServer::start_throwaway().or_else(container_after),
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The third source, after a throwaway server could not start (`reason`): a
/// container when the `testcontainers` feature is built and Docker answers.
#[cfg(feature = "testcontainers")]
fn container_after(reason: String) -> Result<RedisServer, String> {
    container::RedisContainer::start()
        .map(|container| RedisServer {
            url: container.url().to_string(),
            throwaway: None,
            container: Some(container),
        })
        .map_err(|container| format!("{reason}; {container}"))
}

/// Without the `testcontainers` feature there is no third source.
#[cfg(not(feature = "testcontainers"))]
fn container_after(reason: String) -> Result<RedisServer, String> {
    Err(reason)
}

/// True when `LEASEPROOF_REQUIRE_REDIS=1`.
pub fn require_redis() -> bool {
    matches!(
        std::env::var(REQUIRE_REDIS_ENV)
            .ok()
            .as_deref()
            .map(str::trim),
        Some("1")
    )
}

/// The shared server's URL for a test, or `None` after printing the loud skip
/// line; panics instead under `LEASEPROOF_REQUIRE_REDIS=1`.
pub fn test_redis_url() -> Option<String> {
    match shared_server() {
        Ok(server) => Some(server.url.clone()),
        Err(reason) => {
            if require_redis() {
                panic!("{REQUIRE_REDIS_ENV}=1 but no Redis is available: {reason}");
            }
            eprintln!(
                "LEASEPROOF SKIP: no Redis ({reason}) — set REDIS_URL or install redis-server"
            );
            None
        }
    }
}

fn redis_binary() -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("redis-server"))
            .find(|candidate| candidate.is_file())
    });
    from_path.or_else(|| {
        ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .iter()
            .map(PathBuf::from)
            .find(|candidate| candidate.is_file())
    })
}

/// `redis-server` on loopback `port`, persistence off, password required.
fn spawn_server(
    binary: &Path,
    port: u16,
    password: &str,
    persistent: bool,
    dir: &Path,
) -> Result<Child, String> {
    let (appendonly, appendfsync) = if persistent {
        ("yes", "always")
    } else {
        ("no", "everysec")
    };
    let child = Command::new(binary)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--requirepass", password])
        .args(["--save", ""])
        .args(["--appendonly", appendonly])
        .args(["--appendfsync", appendfsync])
        .args(["--dir", &dir.display().to_string()])
        .args(["--daemonize", "no"])
        // Written by the server itself within moments of starting: the
        // watchdog's way to it should we die before recording its pid.
        .args([
            "--pidfile",
            &dir.join(SERVER_PID_FILE).display().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| format!("spawn {}: {error}", binary.display()))?;
    // Recorded the moment it is spawned, for the watchdog.
    let recorded = dir.join(SPAWNED_PID_FILE);
    std::fs::write(&recorded, child.id().to_string())
        .map_err(|error| format!("write {}: {error}", recorded.display()))?;
    Ok(child)
}

/// The pid the server writes (`--pidfile`).
const SERVER_PID_FILE: &str = "redis-server.pid";
/// The pid we write as soon as the server is spawned.
const SPAWNED_PID_FILE: &str = "spawned.pid";

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Sends `AUTH` and `PING` in RESP until the server answers `+PONG`.
fn wait_until_ready(port: u16, password: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        match ping(port, password) {
            Ok(()) => return Ok(()),
            Err(error) => last = error,
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(last)
}

fn ping(port: u16, password: &str) -> Result<(), String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|error| error.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|error| error.to_string())?;
    let mut writer = stream.try_clone().map_err(|error| error.to_string())?;
    write!(
        writer,
        "*2\r\n$4\r\nAUTH\r\n${}\r\n{password}\r\n*1\r\n$4\r\nPING\r\n",
        password.len()
    )
    .map_err(|error| error.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    for expected in ["+OK", "+PONG"] {
        line.clear();
        reader
            .read_line(&mut line)
            .map_err(|error| error.to_string())?;
        if line.trim_end() != expected {
            return Err(format!("expected {expected}, got {:?}", line.trim_end()));
        }
    }
    Ok(())
}

/// Once this process is gone, kills the server of `dir` and removes `dir`.
///
/// Armed before the first server starts and kept across restarts: it finds
/// the server through the pid files in `dir` (ours, written at spawn, and the
/// server's own `--pidfile`), and kills a pid only while its command line
/// still names `port` (`--port <port>`, then the title Redis gives itself,
/// `redis-server 127.0.0.1:<port>`),
/// so a recycled pid is never touched. A first pass waits a second for a
/// server that was being spawned as we died to write its pid file; the
/// server's children (a background save) die with it; the removal repeats,
/// so a file a dying writer left after the first removal goes too.
fn spawn_watchdog(port: u16, dir: &Path) -> Result<(), String> {
    let dir = dir.display().to_string().replace('\'', "'\\''");
    let cleanup = format!(
        "sleep 1; \
         for attempt in 1 2 3; do \
           for file in '{dir}/{SPAWNED_PID_FILE}' '{dir}/{SERVER_PID_FILE}'; do \
             pid=$(cat \"$file\" 2>/dev/null); \
             case \"$pid\" in ''|*[!0-9]*) continue;; esac; \
             if tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -qw '{port}'; then \
               pkill -9 -P $pid 2>/dev/null; kill -9 $pid 2>/dev/null; \
               i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; \
             fi; \
           done; \
           rm -rf '{dir}'; sleep 1; \
         done",
    );
    leaseproof_watchdog::after_this_process(&cleanup)
        .map(drop)
        .map_err(|error| format!("watchdog: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throwaway_server_answers_only_with_its_password() {
        let Some(url) = test_redis_url() else {
            return;
        };
        let server = shared_server().unwrap();
        let Some(port) = server.port() else {
            return; // REDIS_URL: not ours to probe
        };
        assert!(url.contains(server.password().unwrap()));
        ping(port, server.password().unwrap()).expect("the password opens it");
        let error = ping(port, "not-the-password").expect_err("a wrong password is refused");
        assert!(
            error.contains("WRONGPASS") || error.contains("ERR"),
            "{error}"
        );
    }

    /// Set in the child process of the SIGKILL test: what it does before it
    /// is killed (`start`, or `restart` after starting).
    const CHILD_ENV: &str = "LEASEPROOF_REDIS_SERVER_TEST_CHILD";

    /// The child of [`a_sigkill_at_any_moment_leaves_no_server_and_no_dir`]:
    /// starts a throwaway server (and restarts it), says so, then waits to be
    /// killed. Without the variable it is an ordinary, empty test.
    #[test]
    fn sigkill_child() {
        let Ok(mode) = std::env::var(CHILD_ENV) else {
            return;
        };
        let mut server = RedisServer::start_throwaway().expect("start");
        if mode == "restart" {
            server.restart().expect("restart");
        }
        println!("READY {}", server.port().unwrap());
        std::thread::sleep(Duration::from_secs(60));
    }

    /// Processes whose working directory is under `dir` (`redis-server`
    /// works in its `--dir`, and renames itself, so its command line does
    /// not show the directory).
    fn processes_working_under(dir: &Path) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| {
                let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
                let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
                cwd.starts_with(dir).then_some(pid)
            })
            .collect()
    }

    /// Goal: a process killed with SIGKILL while its throwaway server is
    /// being spawned, while it starts, once it serves, or after a restart,
    /// leaves no server running and no directory behind. Method: this test
    /// binary re-runs itself as the child (`sigkill_child`) with a `TMPDIR`
    /// of its own and is killed at each moment; then, bounded, the directory
    /// must empty and no process may work under it.
    #[test]
    fn a_sigkill_at_any_moment_leaves_no_server_and_no_dir() {
        use std::os::unix::process::CommandExt as _;
        if redis_binary().is_none() {
            assert!(
                !require_redis(),
                "{REQUIRE_REDIS_ENV}=1 but no redis-server"
            );
            eprintln!("LEASEPROOF SKIP: no redis-server for the SIGKILL test");
            return;
        }
        // (mode, milliseconds after spawn; None: once it said READY)
        for (mode, delay_ms) in [
            ("start", Some(5)),
            ("start", Some(20)),
            ("start", Some(40)),
            ("start", Some(60)),
            ("start", Some(120)),
            ("start", None),
            ("restart", None),
        ] {
            let temp_dir = tempfile::tempdir().unwrap();
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "tests::sigkill_child", "--nocapture"])
                .env(CHILD_ENV, mode)
                .env("TMPDIR", temp_dir.path())
                .env_remove("REDIS_URL")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap();
            match delay_ms {
                Some(delay_ms) => std::thread::sleep(Duration::from_millis(delay_ms)),
                None => {
                    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
                    let said_ready = lines
                        .map_while(Result::ok)
                        .any(|line| line.starts_with("READY "));
                    assert!(said_ready, "{mode}: the child never said READY");
                }
            }
            child.kill().unwrap();
            child.wait().unwrap();
            let moment = format!("SIGKILL {mode} {delay_ms:?}");
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let running = processes_working_under(temp_dir.path());
                let left: Vec<_> = std::fs::read_dir(temp_dir.path())
                    .unwrap()
                    .flatten()
                    .map(|entry| entry.path())
                    .collect();
                if running.is_empty() && left.is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{moment}: servers {running:?} still run, files {left:?} left"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
