//! Every interrupt cleans up: no server, no worker process, no temp dir
//! survives a run that was stopped.
//!
//! Goal: Ctrl-C (SIGINT to the process group, as a terminal sends it),
//! SIGTERM to the process (as a supervisor sends it) and SIGKILL leave
//! nothing behind, at any point of a run: while the throwaway cluster is
//! being created (initdb), while it starts, once it serves; in the middle of
//! a race of worker processes. Method: run the built binary with `TMPDIR`
//! set to a directory of the test's own, signal it at several moments, then
//! wait (bounded) until no process mentions that directory and it is empty.
//! Invariant: the assertions hold whichever moment a signal lands — the
//! moments vary what is tested, never whether it passes.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::repository;

/// A directory for the child's `TMPDIR`, traversable by the `postgres` user
/// (the throwaway cluster runs as it when we are root).
fn child_temp_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix("leaseproof-interrupt-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn leaseproof(args: &[&str], temp_dir: &Path) -> Command {
    use std::os::unix::process::CommandExt as _;
    let mut command = Command::new(env!("CARGO_BIN_EXE_leaseproof"));
    command
        .args(args)
        .current_dir(repository())
        .env("TMPDIR", temp_dir)
        .env_remove("DATABASE_URL")
        // Its own process group, as a shell gives a foreground job: a signal
        // to the group reaches every child it started, like Ctrl-C does.
        .process_group(0);
    command
}

/// Sends `signal` (`INT`, `TERM`, `KILL`) to `pid`, or to its process group.
fn send(signal: &str, pid: u32, whole_group: bool) {
    let target = if whole_group {
        format!("-{pid}")
    } else {
        pid.to_string()
    };
    let status = Command::new("kill")
        .args([format!("-{signal}"), "--".to_string(), target])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Pids of running processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        // A zombie has an empty command line: it runs nothing.
        let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&bytes).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// The children of `parent` (from `/proc/<pid>/stat`'s ppid field).
fn children_of(parent: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": comm may hold spaces, so split after ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let ppid = fields.next().and_then(|ppid| ppid.parse::<u32>().ok());
        if ppid == Some(parent) && state != Some("Z") {
            children.push(pid);
        }
    }
    children
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_for_exit(child: &mut Child, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the process did not end within {timeout:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .collect()
}

/// Nothing of the run is left: no process mentions `temp_dir`, it is empty.
fn assert_nothing_left(temp_dir: &Path, moment: &str) {
    let needle = temp_dir.to_string_lossy().into_owned();
    wait_until(
        &format!("{moment}: processes of the run still running"),
        Duration::from_secs(20),
        || processes_mentioning(&needle).is_empty(),
    );
    wait_until(
        &format!("{moment}: temp files left in {needle}"),
        Duration::from_secs(20),
        || entries(temp_dir).is_empty(),
    );
}

/// True when PostgreSQL's binaries are here; otherwise prints the skip line
/// (or fails, under `LEASEPROOF_REQUIRE_PG=1`).
fn postgres_binaries_or_skip(test: &str) -> bool {
    if leaseproof_pgcluster::binaries_available() {
        return true;
    }
    assert!(
        !leaseproof_pgcluster::require_pg(),
        "LEASEPROOF_REQUIRE_PG=1 but there are no PostgreSQL binaries"
    );
    eprintln!("LEASEPROOF SKIP: no PostgreSQL binaries for {test}");
    false
}

#[test]
fn an_interrupted_throwaway_cluster_leaves_no_server_and_no_dir() {
    if !postgres_binaries_or_skip("the cluster interrupt test") {
        return;
    }
    // While initdb runs, while the server starts, and once it serves — by
    // Ctrl-C to the group, SIGTERM to the process, and SIGKILL.
    for (delay_ms, signal, whole_group) in [
        (150, "INT", true),
        (700, "TERM", false),
        (1_500, "INT", true),
        (2_500, "KILL", false),
    ] {
        let temp_dir = child_temp_dir();
        let mut child = leaseproof(&["pg"], temp_dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        send(signal, child.id(), whole_group);
        wait_for_exit(&mut child, Duration::from_secs(30));
        assert_nothing_left(temp_dir.path(), &format!("SIG{signal} after {delay_ms} ms"));
    }
    // Serving: the cluster is up (its URL printed) when the signal comes.
    let temp_dir = child_temp_dir();
    let mut child = leaseproof(&["pg"], temp_dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    assert!(
        url.starts_with("DATABASE_URL=postgres://postgres:"),
        "{url}"
    );
    let pid_line = lines.next().unwrap().unwrap();
    let postmaster: u32 = pid_line.trim_start_matches("PID=").parse().unwrap();
    assert!(leaseproof_pgcluster::process_is_running(postmaster));
    send("INT", child.id(), true);
    wait_for_exit(&mut child, Duration::from_secs(30));
    assert_nothing_left(temp_dir.path(), "SIGINT while serving");
    wait_until("the postmaster is gone", Duration::from_secs(20), || {
        !leaseproof_pgcluster::process_is_running(postmaster)
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_process_race_leaves_no_worker_and_no_temp_dir() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    for (signal, whole_group, exit_expected) in [
        ("INT", false, Some(130)),
        ("TERM", false, Some(130)),
        ("KILL", false, None),
    ] {
        let temp_dir = child_temp_dir();
        let mut child = leaseproof(
            &[
                "race",
                "--processes",
                "2",
                "--rounds",
                "100000",
                "--database-url",
                &database.url,
            ],
            temp_dir.path(),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let parent = child.id();
        let workers = tokio::task::spawn_blocking(move || {
            let mut workers = Vec::new();
            wait_until("two race workers start", Duration::from_secs(30), || {
                workers = children_of(parent);
                workers.len() >= 2
            });
            workers
        })
        .await
        .unwrap();
        // The workers are racing (their history files exist) when it comes.
        tokio::time::sleep(Duration::from_millis(700)).await;
        send(signal, parent, whole_group);
        let code =
            tokio::task::spawn_blocking(move || wait_for_exit(&mut child, Duration::from_secs(30)))
                .await
                .unwrap();
        assert_eq!(code, exit_expected, "SIG{signal}: exit status");
        let path = temp_dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            wait_until(
                &format!("SIG{signal}: the race's workers {workers:?} still run"),
                Duration::from_secs(10),
                || {
                    workers
                        .iter()
                        .all(|&pid| !leaseproof_pgcluster::process_is_running(pid))
                },
            );
            assert_nothing_left(&path, &format!("SIG{signal} mid-race"));
        })
        .await
        .unwrap();
    }
}

/// Runs `verify` over the stages that start servers and signals it at each
/// moment: while its cluster is created, mid-way through the PostgreSQL
/// stage (cluster up), in the locks stage's conformance suite (Redis up),
/// and in the manager × fault matrix (a dedicated cluster, Redis and the
/// cuttable proxies up).
#[test]
fn an_interrupted_verify_leaves_no_server_and_no_temp_dir() {
    if !postgres_binaries_or_skip("the verify interrupt test") {
        return;
    }
    // (the stage whose first verdict line opens the moment, delay after it, signal, to the group)
    for (after_stage, delay_ms, signal, whole_group) in [
        (None, 300, "INT", true),
        (Some("postgres"), 0, "TERM", false),
        (Some("race"), 300, "INT", true),
        (Some("locks"), 1_000, "KILL", false),
    ] {
        let temp_dir = child_temp_dir();
        let mut child = leaseproof(
            &["verify", "--stages", "postgres,race,locks"],
            temp_dir.path(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let moment = match after_stage {
            None => format!("SIG{signal} {delay_ms} ms after start"),
            Some(stage) => format!("SIG{signal} {delay_ms} ms after the first {stage} verdict"),
        };
        let stdout = child.stdout.take().unwrap();
        // Keep draining stdout on a thread, so the run never blocks on a
        // full pipe between the moment and the signal.
        let (seen, seen_receiver) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // Once the moment has passed nobody listens; read on to the end.
                let _ = seen.send(line);
            }
        });
        if let Some(stage) = after_stage {
            let mut printed = Vec::new();
            loop {
                let line = seen_receiver
                    .recv_timeout(Duration::from_secs(240))
                    .unwrap_or_else(|_| {
                        panic!(
                            "{moment}: no {stage} verdict; printed:\n{}",
                            printed.join("\n")
                        )
                    });
                let verdict = line.get(4..).unwrap_or_default().trim_start();
                let is_stage = verdict.starts_with(&format!("{stage} "));
                printed.push(line);
                if is_stage {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        send(signal, child.id(), whole_group);
        wait_for_exit(&mut child, Duration::from_secs(30));
        assert_nothing_left(temp_dir.path(), &moment);
    }
}

/// Pids of running processes whose environment mentions `needle` (every
/// process a run starts inherits its `TMPDIR`, whatever its command line).
fn processes_with_environment_mentioning(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(bytes) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if String::from_utf8_lossy(&bytes).contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// Runs `clients` (leaseproof's own lease behind the client protocol, under
/// the whole swarm of faults, paused clients included) and stops it mid-run
/// by Ctrl-C to the group, SIGTERM and SIGKILL to the process: no client
/// process, paused or not, and no file may outlive it.
#[test]
fn an_interrupted_clients_run_leaves_no_client_and_no_temp_dir() {
    if !postgres_binaries_or_skip("the clients interrupt test") {
        return;
    }
    let client = format!("{} lock-client lease", env!("CARGO_BIN_EXE_leaseproof"));
    for (signal, whole_group, exit_expected) in [
        ("INT", true, Some(130)),
        ("TERM", false, Some(130)),
        ("KILL", false, None),
    ] {
        let temp_dir = child_temp_dir();
        let mut child = leaseproof(
            &[
                "clients",
                "--client",
                &client,
                "--clients",
                "3",
                "--seed",
                "4",
                "--duration-ms",
                "30000",
            ],
            temp_dir.path(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let parent = child.id();
        // The moment: the clients run (three processes carry the run's mark).
        wait_until(
            &format!("SIG{signal}: three clients start"),
            Duration::from_secs(60),
            || {
                processes_with_environment_mentioning("LEASEPROOF_CLIENT_RUN=")
                    .into_iter()
                    .filter(|&pid| pid != parent && is_descendant_of(pid, parent))
                    .count()
                    >= 3
            },
        );
        std::thread::sleep(Duration::from_millis(2_000));
        send(signal, parent, whole_group);
        let code = wait_for_exit(&mut child, Duration::from_secs(30));
        assert_eq!(code, exit_expected, "SIG{signal}: exit status");
        assert_no_process_and_nothing_left(temp_dir.path(), &format!("SIG{signal} mid-run"));
    }
}

/// `clients` starts a throwaway cluster of its own and catches SIGINT and
/// SIGTERM to stop its clients; a signal while that cluster is still being
/// created (initdb) or started must remove it all the same. (It once left
/// the cluster's temp dir behind: the dropped cluster disarmed its watchdog
/// and removed nothing.)
#[test]
fn a_clients_run_interrupted_while_its_cluster_is_created_leaves_no_dir() {
    if !postgres_binaries_or_skip("the clients cluster interrupt test") {
        return;
    }
    let client = format!("{} lock-client lease", env!("CARGO_BIN_EXE_leaseproof"));
    for (delay_ms, signal, whole_group) in [
        (200, "TERM", false),
        (400, "INT", true),
        (600, "TERM", false),
        (1_000, "TERM", false),
    ] {
        let temp_dir = child_temp_dir();
        let mut child = leaseproof(
            &[
                "clients",
                "--client",
                &client,
                "--seed",
                "1",
                "--duration-ms",
                "30000",
            ],
            temp_dir.path(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        send(signal, child.id(), whole_group);
        wait_for_exit(&mut child, Duration::from_secs(30));
        assert_no_process_and_nothing_left(
            temp_dir.path(),
            &format!("clients, SIG{signal} after {delay_ms} ms"),
        );
    }
}

/// [`assert_nothing_left`], after no process carries `temp_dir` in its
/// environment (every process a run starts inherits its `TMPDIR`, a paused
/// or renamed one included).
fn assert_no_process_and_nothing_left(temp_dir: &Path, moment: &str) {
    let needle = temp_dir.to_string_lossy().into_owned();
    wait_until(
        &format!("{moment}: processes of the run still running"),
        Duration::from_secs(20),
        || processes_with_environment_mentioning(&needle).is_empty(),
    );
    assert_nothing_left(temp_dir, moment);
}

/// Whether `pid` descends from `ancestor` (through `/proc/<pid>/stat`).
fn is_descendant_of(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok())
        else {
            return false;
        };
        if ppid == ancestor {
            return true;
        }
        if ppid <= 1 {
            return false;
        }
        pid = ppid;
    }
    false
}
