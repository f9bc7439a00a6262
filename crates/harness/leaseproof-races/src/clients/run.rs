//! One run of lock clients in any language under a seeded fault plan.
//!
//! Goal: answer the question users bring — is my lock, in my language, safe
//! under pauses, crashes, partitions, restarts and skewed clocks? — with a
//! verdict of the one checker. Method: a fresh PostgreSQL database (the
//! maintenance table, and the store of PostgreSQL locks) and a throwaway
//! Redis; a [`FaultProxy`] per client and store; N client processes
//! ([`ClientProcess`]) each driven by a worker loop — acquire, a few writes
//! of rows through the client's own connection, release, with seeded pauses
//! between — while an injector strikes the seeded [`FaultPlan`]. leaseproof
//! stamps every invoke and completion on its own monotonic clock and records
//! the history; a client only answers. After the run the rows are read back
//! with their commit timestamps and [`leaseproof_history::check`] judges.
//! Invariant: the fault plan is a pure function of the seed and the shape;
//! the interleaving of real processes is not, and the report says so. Every
//! process, proxy, server and file the run started is gone when it returns.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leaseproof_history::{check, CheckConfig, EventKind, GrantStamps, History, Recorder};

use super::child::StartError;
use super::drive::drive;
use super::effects::ProcessEffects;
use super::evidence::read_rows;
use super::moments::Moments;
use super::net::{FaultProxy, ProxyEffects};
use super::plan::{FaultKind, FaultPlan, PlanShape};
use super::processes::{spawn_watchdog, AbortOnDrop};
use super::report::{ClientRunReport, WorkerTally};
use super::state::{lock, HeldStart, Run, Slot};
use super::strike::inject;
use super::wire::WireError;
use crate::clock::RunClock;

/// Whether libfaketime is installed (the clock-skew strike needs it).
pub use super::processes::libfaketime;

/// The table every client writes its maintenance rows into.
pub const ROWS_TABLE: &str = "leaseproof_client_rows";

/// The lock every client contends for (its table name).
pub const LOCKED_TABLE: &str = "orders";

const ROWS_DDL: &str = "CREATE TABLE leaseproof_client_rows (
    seq bigserial PRIMARY KEY,
    scope text NOT NULL,
    owner text NOT NULL,
    token bigint,
    cycle_id bigint NOT NULL,
    item integer NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
)";

/// What a client run is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRunConfig {
    /// The client's command line, run by `sh -c` once per incarnation.
    pub command: String,
    /// How many client processes contend.
    pub clients: usize,
    /// The seed of the fault plan and of the workers' choices.
    pub seed: u64,
    /// How long workers start new acquisitions.
    pub duration: Duration,
    /// The TTL asked of locks that have one.
    pub ttl: Duration,
    /// The fault kinds a seed may turn on.
    pub faults: Vec<FaultKind>,
    /// How long a starting client may take to print its hello.
    pub hello_timeout: Duration,
}

impl ClientRunConfig {
    /// A run of `command` with the defaults: 3 clients, 12 s, TTL 3 s, every fault.
    pub fn new(command: impl Into<String>, seed: u64) -> ClientRunConfig {
        ClientRunConfig {
            command: command.into(),
            clients: 3,
            seed,
            duration: Duration::from_secs(12),
            ttl: Duration::from_secs(3),
            faults: FaultKind::ALL.to_vec(),
            hello_timeout: Duration::from_secs(30),
        }
    }

    /// The plan this configuration draws.
    pub fn plan(&self) -> FaultPlan {
        FaultPlan::draw(
            self.seed,
            &PlanShape {
                clients: self.clients,
                duration: self.duration,
                ttl: self.ttl,
                allowed: self.faults.clone(),
            },
        )
    }

    /// How long a request may go unanswered before the client is taken for
    /// hung (then it is killed and restarted): past every pause or partition
    /// the plan can draw.
    pub(super) fn request_timeout(&self) -> Duration {
        self.ttl * 4 + Duration::from_secs(5)
    }
}

/// A run that could not be judged.
#[derive(Debug, thiserror::Error)]
pub enum ClientRunError {
    /// A store could not be had.
    #[error("{0}")]
    Store(String),
    /// A client could not be started or did not greet.
    #[error("client did not start: {0}")]
    Start(#[from] StartError),
    /// A client printed something that is not the protocol: bad input, not judged.
    #[error("bad client output (not judged): {0}")]
    Protocol(#[from] WireError),
    /// The clients' answers, each well-formed, make a history the format
    /// refuses (a grant that expires before it starts, say): what
    /// `leaseproof check` would refuse is not judged here either.
    #[error("the clients' answers make a history the format refuses (not judged): {0}")]
    Malformed(String),
}

/// The history as `leaseproof check` reads it, refused where the file
/// would be, the offending event named as the client said it: its worker,
/// the request's `msg_id` and type, and the answer's field in the protocol's
/// words (`lifetime_ms`, not the history's `lifetime_us`).
fn refuse_malformed(
    history: &History,
    requests: &BTreeMap<u64, (u64, &'static str)>,
) -> Result<(), ClientRunError> {
    let Err(error) = History::from_json_lines(&history.to_json_lines()) else {
        return Ok(());
    };
    let mut message = error.to_string();
    if let leaseproof_history::HistoryError::Invalid {
        line_number, field, ..
    } = error
    {
        // The design's line (if any) comes first, then the events, one a line.
        let first_event_line = 1 + usize::from(history.design.is_some());
        let event = line_number
            .checked_sub(first_event_line)
            .and_then(|index| history.events.get(index));
        if let Some(event) = event {
            let request = match &event.kind {
                EventKind::Invoke { op_id, .. } | EventKind::Complete { op_id, .. } => {
                    requests.get(op_id)
                }
                _ => None,
            };
            let answer_field =
                field
                    .strip_prefix("kind.outcome.result.")
                    .map(|field| match field {
                        "lifetime_us" => "lifetime_ms",
                        field => field,
                    });
            message = match (request, answer_field) {
                (Some((msg_id, kind)), Some(answer_field)) => format!(
                    "{message} (field `{answer_field}` of {} incarnation {}'s answer to \
                     msg_id {msg_id}, {kind})",
                    event.worker, event.incarnation
                ),
                (Some((msg_id, kind)), None) => format!(
                    "{message} ({} incarnation {}'s answer to msg_id {msg_id}, {kind})",
                    event.worker, event.incarnation
                ),
                (None, _) => format!(
                    "{message} (an answer to {} incarnation {})",
                    event.worker, event.incarnation
                ),
            };
        }
    }
    Err(ClientRunError::Malformed(message))
}

/// `scheme://[userinfo@]host:port/rest` with host:port replaced by `addr`.
pub fn with_address(url: &str, addr: std::net::SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, ""),
    };
    let userinfo = authority.rsplit_once('@').map(|(userinfo, _)| userinfo);
    match userinfo {
        Some(userinfo) => format!("{scheme}://{userinfo}@{addr}{path}"),
        None => format!("{scheme}://{addr}{path}"),
    }
}

/// The loopback address of a URL's host:port (`localhost` is 127.0.0.1).
fn address_of(url: &str, default_port: u16) -> Result<std::net::SocketAddr, String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) => (
            host,
            port.parse().map_err(|_| format!("bad port in {url}"))?,
        ),
        None => (host_port, default_port),
    };
    let ip: std::net::IpAddr = match host {
        "localhost" | "" => std::net::Ipv4Addr::LOCALHOST.into(),
        host => host
            .parse()
            .map_err(|_| format!("{host}: the client harness needs a loopback address"))?,
    };
    if !ip.is_loopback() {
        return Err(format!("{ip}: the fault proxy forwards to loopback only"));
    }
    Ok(std::net::SocketAddr::new(ip, port))
}

/// Runs the clients of `config` and judges their history.
pub async fn run_clients(config: ClientRunConfig) -> Result<ClientRunReport, ClientRunError> {
    assert!(config.clients >= 1);
    let plan = config.plan();
    let database = leaseproof_pgcluster::shared_server()
        .await
        .map_err(|unavailable| {
            ClientRunError::Store(leaseproof_pgcluster::skip_line(&unavailable))
        })?
        .fresh_database()
        .await
        .map_err(|error| ClientRunError::Store(format!("fresh database: {error}")))?;
    let mut admin = database
        .connect()
        .await
        .map_err(|error| ClientRunError::Store(format!("connect: {error}")))?;
    sqlx::query(ROWS_DDL)
        .execute(&mut admin)
        .await
        .map_err(|error| ClientRunError::Store(format!("{ROWS_TABLE}: {error}")))?;
    let redis =
        match leaseproof_redis_server::RedisServer::start_throwaway_with(plan.redis_persistent) {
            Ok(server) => Some(server),
            Err(error) if leaseproof_redis_server::require_redis() => {
                return Err(ClientRunError::Store(format!("redis-server: {error}")));
            }
            Err(_) => None,
        };
    let pg_upstream = address_of(&database.url, 5432).map_err(ClientRunError::Store)?;
    let redis_upstream = match &redis {
        Some(server) => Some(address_of(&server.url, 6379).map_err(ClientRunError::Store)?),
        None => None,
    };
    let mut slots = Vec::new();
    for _ in 0..config.clients {
        let mut proxies = vec![FaultProxy::start_postgres(pg_upstream)
            .await
            .map_err(|error| ClientRunError::Store(format!("proxy: {error}")))?];
        if let Some(upstream) = redis_upstream {
            proxies.push(
                FaultProxy::start(upstream)
                    .await
                    .map_err(|error| ClientRunError::Store(format!("proxy: {error}")))?,
            );
        }
        slots.push(Slot {
            process: tokio::sync::Mutex::new(None),
            pgid: AtomicU64::new(0),
            pauses: Mutex::new((0, 0)),
            belief: Arc::default(),
            proxies,
            write_statements: AtomicU64::new(0),
            write_reads: AtomicU64::new(0),
            work_until_us: AtomicI64::new(0),
        });
    }
    let dir = tempfile::Builder::new()
        .prefix("leaseproof-clients-")
        .tempdir()
        .map_err(|error| ClientRunError::Store(format!("temp dir: {error}")))?;
    // Before any client exists: should this process die without unwinding
    // (SIGKILL), the clients (paused ones included) and the dir still go.
    spawn_watchdog(dir.path()).map_err(ClientRunError::Store)?;
    let run = Arc::new(Run {
        config: config.clone(),
        clock: RunClock::start(),
        recorder: Recorder::new(),
        slots,
        database_url: database.url.clone(),
        redis: redis.map(|server| Arc::new(Mutex::new(server))),
        dir,
        protocol_error: Mutex::new(None),
        start_error: Mutex::new(None),
        hello: Mutex::new(None),
        process_effects: Mutex::new(ProcessEffects::default()),
        own_exits: Mutex::new(Vec::new()),
        requests: Mutex::new(BTreeMap::new()),
        marks: Mutex::new(Vec::new()),
        unanswered: Mutex::new(Vec::new()),
        moments: Moments::default(),
        aimed: Mutex::new(None),
        faults_under_way: AtomicUsize::new(0),
        start: HeldStart::new(config.clients),
    });

    let injector = tokio::spawn(inject(Arc::clone(&run), plan.clone()));
    let mut workers = Vec::new();
    for index in 0..config.clients {
        workers.push(tokio::spawn(drive(Arc::clone(&run), index)));
    }
    // Dropping this run (an interrupt) cancels its tasks: the last `Run`
    // goes, and with it every client process group and the temp dir.
    let _tasks = AbortOnDrop(
        workers
            .iter()
            .map(tokio::task::JoinHandle::abort_handle)
            .chain([injector.abort_handle()])
            .collect(),
    );
    let mut tally = WorkerTally::default();
    for worker in workers {
        if let Ok(worker_tally) = worker.await {
            tally.absorb(&worker_tally);
        }
    }
    let (strikes, strikes_skipped) = injector.await.unwrap_or_default();
    for slot in &run.slots {
        if let Some(process) = slot.process.lock().await.take() {
            process.stop(Duration::from_secs(2)).await;
        }
    }
    if let Some(error) = lock(&run.protocol_error).take() {
        return Err(ClientRunError::Protocol(error));
    }
    if let Some(error) = lock(&run.start_error).take() {
        return Err(ClientRunError::Start(error));
    }

    let mut history = run.recorder.snapshot();
    read_rows(&mut admin, &mut history)
        .await
        .map_err(|error| ClientRunError::Store(format!("reading {ROWS_TABLE}: {error}")))?;
    let hello = lock(&run.hello).clone();
    let grant_stamps = match hello
        .as_ref()
        .and_then(|hello| hello.grant_stamps.as_deref())
    {
        Some("decision") => GrantStamps::Decision,
        _ => GrantStamps::StatementStart,
    };
    let design = CheckConfig {
        grant_stamps,
        ..CheckConfig::default()
    };
    refuse_malformed(&history, &lock(&run.requests))?;
    let report = check(&history, &design);
    // Saved with the history: `leaseproof check` judges it as the run did.
    history.design = Some(design);
    let mut winners: Vec<(&str, u64)> = Vec::new();
    for event in &history.events {
        if let EventKind::BeliefStart { .. } = event.kind {
            winners.push((event.worker.as_str(), event.incarnation));
        }
    }
    winners.sort_unstable();
    winners.dedup();
    let distinct_winners = winners.len();
    let mut proxy_effects = ProxyEffects::default();
    for proxy in run.slots.iter().flat_map(|slot| &slot.proxies) {
        proxy_effects.absorb(proxy.effects());
    }
    let process_effects = *lock(&run.process_effects);
    let own_exits = std::mem::take(&mut *lock(&run.own_exits));
    let unanswered = std::mem::take(&mut *lock(&run.unanswered));
    let mut marks = std::mem::take(&mut *lock(&run.marks));
    marks.sort_by_key(|mark| mark.true_time_us);
    drop(admin);
    drop(database);
    Ok(ClientRunReport {
        design: hello.map_or_else(String::new, |hello| hello.name),
        plan,
        strikes,
        strikes_skipped,
        tally,
        distinct_winners,
        proxy_effects,
        process_effects,
        own_exits,
        unanswered,
        history,
        report,
        started_after_ms: u64::try_from(run.start.at_us().await / 1_000).unwrap_or(0),
        marks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaseproof_history::{Op, OpResult, Outcome};

    #[test]
    fn urls_are_pointed_at_the_proxy_keeping_credentials_and_path() {
        let proxy: std::net::SocketAddr = "127.0.0.1:4242".parse().unwrap();
        assert_eq!(
            with_address("postgres://u:p@127.0.0.1:5432/db?sslmode=disable", proxy),
            "postgres://u:p@127.0.0.1:4242/db?sslmode=disable"
        );
        assert_eq!(
            with_address("redis://:secret@127.0.0.1:6379/", proxy),
            "redis://:secret@127.0.0.1:4242/"
        );
        assert_eq!(
            with_address("redis://localhost", proxy),
            "redis://127.0.0.1:4242"
        );
        assert_eq!(
            address_of("postgres://u:p@localhost:5433/db", 5432).unwrap(),
            "127.0.0.1:5433".parse().unwrap()
        );
        assert!(address_of("postgres://u:p@10.0.0.1:5433/db", 5432).is_err());
    }

    #[test]
    fn a_refused_history_names_the_worker_whose_answer_made_it_with_or_without_a_design_line() {
        let mut history = History::default();
        let acquire = Op::Acquire {
            scope: "t".to_string(),
            owner: "w1.0".to_string(),
            ttl_us: 10,
        };
        history.push(
            "w0",
            0,
            1,
            1,
            EventKind::BeliefEnd {
                scope: "t".to_string(),
                token: 0,
                reason: "x".to_string(),
            },
        );
        history.push(
            "w1",
            2,
            2,
            2,
            EventKind::Invoke {
                op_id: 0,
                op: acquire,
            },
        );
        let backwards = OpResult::Lease {
            token: 1,
            owner: "w1.0".to_string(),
            granted_at_us: 9,
            expires_at_us: 5,
        };
        let outcome = Outcome::Ok { result: backwards };
        history.push("w1", 2, 3, 3, EventKind::Complete { op_id: 0, outcome });
        let unnamed = BTreeMap::new();
        let requests = BTreeMap::from([(0, (7, "acquire"))]);
        for design in [None, Some(CheckConfig::default())] {
            history.design = design;
            let error = refuse_malformed(&history, &unnamed)
                .unwrap_err()
                .to_string();
            assert!(error.contains("(an answer to w1 incarnation 2)"), "{error}");
            let error = refuse_malformed(&history, &requests)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("w1 incarnation 2's answer to msg_id 7, acquire)"),
                "{error}"
            );
        }
    }
}
