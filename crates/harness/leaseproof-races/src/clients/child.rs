//! One client process: started, spoken to, paused, killed — touched by pid.
//!
//! Goal: a lock client in any language is a process leaseproof starts from a
//! command line and talks to over its stdin/stdout, and every fault acts on
//! that real process. Method: `sh -c COMMAND` in a process group of its own
//! (so SIGSTOP, SIGCONT and SIGKILL reach the interpreter and whatever it
//! started), stdin and stdout piped, stderr to a file of the run; a reader
//! task parses each stdout line ([`super::wire`]) and hands answers to the
//! request that waits for them, and `lost` notices to a callback at once,
//! stamped when they were read.
//! Invariant: signals go to this process group only, by id; dropping the
//! handle kills the group.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::wire::{self, Message, Request, WireError};

/// What a client said about itself in its `hello`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The design's name.
    pub name: String,
    /// It answers `renew`.
    pub renew: bool,
    /// What its lease's server times mean (`decision` / `statement-start`).
    pub grant_stamps: Option<String>,
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAnswer {
    /// The process ended (killed, crashed, exited) before answering.
    Died,
    /// It did not answer in time.
    TimedOut,
    /// It printed something that is not the protocol (the run ends: bad input).
    Protocol(WireError),
}

/// Requests waiting for their answers; `None` once the reader has stopped
/// (stdout closed, or a line refused), so no request waits for nothing.
/// Each is keyed by its `msg_id` and knows its request's kind, so an
/// answer is read against what it answers.
type Pending = Arc<Mutex<Option<BTreeMap<u64, (&'static str, oneshot::Sender<Message>)>>>>;

/// The tables this process has been asked about: a `lost` notice names one.
type AskedTables = Arc<Mutex<std::collections::BTreeSet<String>>>;

/// A `lost` notice as it was read: the table and the text.
pub type LostCallback = Box<dyn Fn(&str, Option<&str>) + Send + Sync>;

/// The process's stdout closed: it ended (killed, crashed or done), and a
/// session lock it held ended with it — now, not when a request finds out.
pub type ExitCallback = Box<dyn Fn() + Send + Sync>;

/// What the reader tells the run as it happens.
struct Notices {
    on_lost: LostCallback,
    on_exit: ExitCallback,
}

/// A running client process.
#[derive(Debug)]
pub struct ClientProcess {
    label: String,
    child: Child,
    pgid: u32,
    stdin: Option<ChildStdin>,
    pending: Pending,
    asked_tables: AskedTables,
    protocol_error: Arc<Mutex<Option<WireError>>>,
    reader: JoinHandle<()>,
    /// The client's `hello`.
    pub hello: Hello,
    /// Where its stderr goes.
    pub stderr_path: PathBuf,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A client that could not be started or greeted.
#[derive(Debug, thiserror::Error)]
#[error("{label}: {problem}{stderr}")]
pub struct StartError {
    /// Which client.
    pub label: String,
    /// What went wrong.
    pub problem: String,
    /// The tail of its stderr, if any (with a leading newline).
    pub stderr: String,
}

/// The last `lines` lines of a file, indented, after a newline; empty if none.
pub fn stderr_tail(path: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(lines).collect();
    if tail.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n  its stderr ends:");
    for line in tail.into_iter().rev() {
        out.push_str("\n    ");
        out.push_str(line);
    }
    out
}

impl ClientProcess {
    /// Starts `command` (run by `sh -c`) with `env`, waits for its `hello`
    /// (at most `hello_timeout`).
    pub async fn start(
        label: String,
        command: &str,
        env: &[(String, String)],
        stderr_path: PathBuf,
        hello_timeout: Duration,
        on_lost: LostCallback,
        on_exit: ExitCallback,
    ) -> Result<ClientProcess, StartError> {
        let fail = |problem: String, stderr_path: &std::path::Path| StartError {
            label: label.clone(),
            problem,
            stderr: stderr_tail(stderr_path, 12),
        };
        let stderr = std::fs::File::create(&stderr_path).map_err(|error| {
            fail(
                format!("stderr file {}: {error}", stderr_path.display()),
                &stderr_path,
            )
        })?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .envs(
                env.iter()
                    .map(|(key, value)| (key.as_str(), value.as_str())),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| {
                fail(
                    format!("cannot start `sh -c {command}`: {error}"),
                    &stderr_path,
                )
            })?;
        let pgid = child
            .id()
            .ok_or_else(|| fail("exited at once".to_string(), &stderr_path))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let pending: Pending = Arc::new(Mutex::new(Some(BTreeMap::new())));
        let protocol_error: Arc<Mutex<Option<WireError>>> = Arc::default();
        let asked_tables: AskedTables = Arc::default();
        let (hello_tx, hello_rx) = oneshot::channel();
        let reader = tokio::spawn(read_stdout(
            label.clone(),
            BufReader::new(stdout),
            Arc::clone(&pending),
            Arc::clone(&asked_tables),
            Arc::clone(&protocol_error),
            hello_tx,
            Notices { on_lost, on_exit },
        ));
        let mut process = ClientProcess {
            label: label.clone(),
            child,
            pgid,
            stdin,
            pending,
            asked_tables,
            protocol_error,
            reader,
            hello: Hello {
                name: String::new(),
                renew: false,
                grant_stamps: None,
            },
            stderr_path,
        };
        match tokio::time::timeout(hello_timeout, hello_rx).await {
            Ok(Ok(Ok(hello))) => {
                process.hello = hello;
                Ok(process)
            }
            Ok(Ok(Err(error))) => {
                process.kill().await;
                Err(fail(error.located(), &process.stderr_path))
            }
            Ok(Err(_)) => {
                let status = process.kill().await;
                Err(fail(
                    format!("ended before its hello ({status})"),
                    &process.stderr_path,
                ))
            }
            Err(_) => {
                process.kill().await;
                Err(fail(
                    format!("no hello within {} ms", hello_timeout.as_millis()),
                    &process.stderr_path,
                ))
            }
        }
    }

    /// Which client this is (`w1 (incarnation 2)`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The process group id (the shell's pid).
    pub fn pgid(&self) -> u32 {
        self.pgid
    }

    /// Sends `request` and waits for its answer, at most `timeout`.
    ///
    /// `on_sent` runs once the request is written and flushed, before its
    /// answer is awaited: a strike aimed at a request in flight lands then.
    pub async fn ask(
        &mut self,
        request: &Request,
        timeout: Duration,
        on_sent: impl FnOnce(),
    ) -> Result<Message, NoAnswer> {
        let (answer_tx, answer_rx) = oneshot::channel();
        lock(&self.asked_tables).insert(request.table().to_string());
        match lock(&self.pending).as_mut() {
            Some(pending) => pending.insert(request.msg_id(), (request.kind(), answer_tx)),
            None => return Err(self.why_no_answer()),
        };
        let mut line = serde_json::to_string(request).expect("requests serialise");
        line.push('\n');
        let sent = match self.stdin.as_mut() {
            Some(stdin) => {
                stdin.write_all(line.as_bytes()).await.is_ok() && stdin.flush().await.is_ok()
            }
            None => false,
        };
        if !sent {
            if let Some(pending) = lock(&self.pending).as_mut() {
                pending.remove(&request.msg_id());
            }
            return Err(self.why_no_answer());
        }
        on_sent();
        match tokio::time::timeout(timeout, answer_rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(self.why_no_answer()),
            // The entry stays: a late answer is then no protocol error, and
            // goes nowhere.
            Err(_) => Err(NoAnswer::TimedOut),
        }
    }

    fn why_no_answer(&self) -> NoAnswer {
        match lock(&self.protocol_error).clone() {
            Some(error) => NoAnswer::Protocol(error),
            None => NoAnswer::Died,
        }
    }

    /// How the client ended, if it ended by itself: its exit status once it
    /// is reaped (within `within`), `None` while it runs or when a signal
    /// ended it (the harness's strikes are signals).
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .ok()?
            .ok()?;
        status.code()
    }

    /// Sends a signal to the whole process group.
    pub fn signal(&self, signal: &str) -> bool {
        std::process::Command::new("kill")
            .args([&format!("-{signal}"), "--", &format!("-{}", self.pgid)])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// SIGKILLs the group and reaps the shell; returns how it ended.
    pub async fn kill(&mut self) -> String {
        self.signal("KILL");
        self.signal("CONT");
        self.stdin = None;
        let status = match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(error)) => error.to_string(),
            Err(_) => "did not die within 5 s".to_string(),
        };
        self.reader.abort();
        status
    }

    /// Closes stdin (a well-behaved client exits), waits up to `grace`, then kills.
    pub async fn stop(mut self, grace: Duration) {
        self.signal("CONT");
        self.stdin = None;
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            self.kill().await;
        } else {
            // The shell is gone; anything it left in the group goes too.
            self.signal("KILL");
        }
        self.reader.abort();
    }
}

impl Drop for ClientProcess {
    fn drop(&mut self) {
        // Only this group, by id: a paused or orphaned interpreter must not
        // outlive the run.
        self.signal("CONT");
        self.signal("KILL");
        self.reader.abort();
    }
}

async fn read_stdout(
    label: String,
    mut stdout: BufReader<tokio::process::ChildStdout>,
    pending: Pending,
    asked_tables: AskedTables,
    protocol_error: Arc<Mutex<Option<WireError>>>,
    hello_tx: oneshot::Sender<Result<Hello, WireError>>,
    notices: Notices,
) {
    let Notices { on_lost, on_exit } = notices;
    let mut hello_tx = Some(hello_tx);
    // Whether this process's first grant came as a lease (`Some(true)`).
    let mut grant_form: Option<bool> = None;
    let mut line = String::new();
    let mut line_number = 0_u64;
    let refuse =
        |error: WireError, hello_tx: &mut Option<oneshot::Sender<Result<Hello, WireError>>>| {
            *lock(&protocol_error) = Some(error.clone());
            if let Some(hello_tx) = hello_tx.take() {
                let _ = hello_tx.send(Err(error));
            }
            // Waiters learn of it when their channel closes.
            lock(&pending).take();
        };
    loop {
        line.clear();
        match stdout.read_line(&mut line).await {
            Ok(0) | Err(_) => {
                on_exit();
                lock(&pending).take();
                return;
            }
            Ok(_) => {}
        }
        line_number += 1;
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let message = match wire::parse_line(&label, line_number, text) {
            Ok(message) => message,
            Err(error) => {
                refuse(error, &mut hello_tx);
                return;
            }
        };
        let misplaced = |problem: &str| WireError {
            client: label.clone(),
            line_number,
            problem: problem.to_string(),
            line: text.chars().take(200).collect(),
        };
        match message {
            Message::Hello {
                name,
                renew,
                grant_stamps,
                ..
            } => match hello_tx.take() {
                Some(hello_tx) => {
                    let _ = hello_tx.send(Ok(Hello {
                        name,
                        renew,
                        grant_stamps,
                    }));
                }
                None => {
                    refuse(misplaced("a second hello"), &mut hello_tx);
                    return;
                }
            },
            _ if hello_tx.is_some() => {
                refuse(misplaced("expected the hello first"), &mut hello_tx);
                return;
            }
            Message::Lost { table, .. } if !lock(&asked_tables).contains(&table) => {
                let problem =
                    format!("field `table`: {table:?} is no table this process was asked about");
                refuse(misplaced(&problem), &mut hello_tx);
                return;
            }
            Message::Lost { table, text } => on_lost(&table, text.as_deref()),
            Message::Ok { in_reply_to, .. }
            | Message::Fail { in_reply_to, .. }
            | Message::Unknown { in_reply_to, .. } => {
                let waiter = lock(&pending)
                    .as_mut()
                    .and_then(|pending| pending.remove(&in_reply_to));
                match waiter {
                    Some((kind, waiter)) => {
                        if let Err(problem) = answers_in_form(kind, &message, &mut grant_form) {
                            refuse(misplaced(&problem), &mut hello_tx);
                            return;
                        }
                        let _ = waiter.send(message);
                    }
                    None => {
                        refuse(
                            misplaced(&format!(
                                "field `in_reply_to`: {in_reply_to} answers no request in flight"
                            )),
                            &mut hello_tx,
                        );
                        return;
                    }
                }
            }
        }
    }
}

/// An answer to a request of `kind` carries what applies to it, and a grant
/// comes in the form of the process's first grant (`grant_form`: a lease
/// or a lock), which the first grant sets.
fn answers_in_form(
    kind: &str,
    message: &Message,
    grant_form: &mut Option<bool>,
) -> Result<(), String> {
    match (wire::ok_fits(kind, message)?, *grant_form) {
        (Some(lease), Some(first)) if lease != first => {
            let (this, that) = if lease {
                ("does", "did not")
            } else {
                ("does not", "did")
            };
            Err(format!(
                "this `{kind}`'s ok {this} carry a lease's token and server times, and this \
                 process's first grant {that}: every grant of one design is answered in one form"
            ))
        }
        (form, _) => {
            *grant_form = grant_form.or(form);
            lease_times_of_a_lock(kind, message, *grant_form)
        }
    }
}

/// A lock's grants carry no server times, so its release and writes have
/// none either: a time there would be dropped, not judged.
fn lease_times_of_a_lock(
    kind: &str,
    message: &Message,
    grant_form: Option<bool>,
) -> Result<(), String> {
    let Message::Ok {
        released_at_us,
        committed_at_us,
        ..
    } = message
    else {
        return Ok(());
    };
    let field = match kind {
        "release" if released_at_us.is_some() => "released_at_us",
        "write" if committed_at_us.is_some() => "committed_at_us",
        _ => return Ok(()),
    };
    match grant_form {
        Some(false) => Err(format!(
            "field `{field}`: this process's grants are a lock's (no server times), so the \
             ok of its `{kind}` carries none either"
        )),
        _ => Ok(()),
    }
}
