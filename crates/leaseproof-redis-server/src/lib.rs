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
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rand::Rng as _;

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
    _dir: tempfile::TempDir,
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
        let dir = tempfile::Builder::new()
            .prefix("leaseproof-redis-")
            .tempdir()
            .map_err(|error| format!("temp dir: {error}"))?;
        let password: String = {
            let mut rng = rand::thread_rng();
            (0..32)
                .map(|_| char::from(b'a' + rng.gen_range(0..26)))
                .collect()
        };
        let port = free_port().map_err(|error| format!("free port: {error}"))?;
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
        spawn_watchdog(throwaway.child.id(), throwaway._dir.path())?;
        Ok(RedisServer {
            url: format!("redis://:{password}@127.0.0.1:{port}/"),
            throwaway: Some(throwaway),
            #[cfg(feature = "testcontainers")]
            container: None,
        })
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
        wait_until_ready(port, &password, Duration::from_secs(10))?;
        spawn_watchdog(child.id(), _dir.path())?;
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
    Command::new(binary)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--requirepass", password])
        .args(["--save", ""])
        .args(["--appendonly", appendonly])
        .args(["--appendfsync", appendfsync])
        .args(["--dir", &dir.display().to_string()])
        .args(["--daemonize", "no"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| format!("spawn {}: {error}", binary.display()))
}

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

/// Kills `pid` and removes `dir` once this process is gone. The server's
/// children (a background save forked from it) die with it, the removal
/// waits (bounded: an unreaped zombie still answers `kill -0`) until the
/// server is gone, and runs twice, so a file a dying writer left after the
/// first removal goes too.
fn spawn_watchdog(pid: u32, dir: &Path) -> Result<(), String> {
    use std::os::unix::process::CommandExt as _;
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; \
         pkill -9 -P {pid} 2>/dev/null; kill -9 {pid} 2>/dev/null; \
         i=0; while kill -0 {pid} 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; \
         rm -rf '{dir}'; sleep 1; rm -rf '{dir}'",
        me = std::process::id(),
        dir = dir.display().to_string().replace('\'', "'\\''"),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
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
}
