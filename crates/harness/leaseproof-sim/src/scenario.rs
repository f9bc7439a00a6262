//! Scenarios as data: what a simulation runs, read from `scenarios/*.toml`.
//!
//! Goal: a scenario names its workers, TTL, duration and fault *ranges*; the
//! seed picks values inside the ranges (see [`crate::FaultPlan`]), so one run is
//! a pure function of (scenario, seed). Method: serde with
//! `deny_unknown_fields`, so a misspelt key is an error rather than a silently
//! default fault. The default scenarios are embedded with `include_str!` so
//! `leaseproof verify` works from any directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// An inclusive range `[min, max]` as written in TOML.
pub type Span<T> = [T; 2];

/// One simulation scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The scenario's name (the file's stem).
    pub name: String,
    /// One line saying what it exercises.
    pub description: String,
    /// Worker hosts contending for the one scope.
    pub workers: u32,
    /// TTL of every grant and renewal.
    pub ttl_ms: i64,
    /// Simulated duration after which workers start no new operation.
    pub duration_s: u64,
    /// Simulated time per turmoil step (see the crate docs for the choice).
    #[serde(default = "defaults::tick_ms")]
    pub tick_ms: u64,
    /// Cycles committed under one grant (renewing in between), then released.
    #[serde(default = "defaults::cycles_per_grant")]
    pub cycles_per_grant: u32,
    /// Rows per guarded cycle.
    #[serde(default = "defaults::items_per_cycle")]
    pub items_per_cycle: u32,
    /// Work before each commit, drawn per worker.
    #[serde(default = "defaults::work_ms")]
    pub work_ms: Span<u64>,
    /// Wait after a refused acquisition or an unavailable database.
    #[serde(default = "defaults::retry_interval_ms")]
    pub retry_interval_ms: u64,
    /// Margin subtracted from the worker's local belief deadline.
    #[serde(default)]
    pub deadline_margin_ms: u64,
    /// How long the port waits for a connection or a reply.
    #[serde(default = "defaults::request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// The server aborts a transaction idle this long (PostgreSQL's
    /// `idle_in_transaction_session_timeout`), freeing its row locks.
    #[serde(default = "defaults::idle_in_transaction_timeout_ms")]
    pub idle_in_transaction_timeout_ms: u64,
    /// One-way message latency range (turmoil draws each message's latency).
    #[serde(default = "defaults::latency_ms")]
    pub latency_ms: Span<u64>,
    /// Whether the port retries `ensure_schema` once (the reference does);
    /// `false` shows the concurrent-schema race is caught.
    #[serde(default = "defaults::yes")]
    pub schema_retry: bool,
    /// I5's bound: how long after a dead holder's `expires_at` (server time)
    /// the next grant may come while a rival waits for the scope. `None`
    /// (the default) only measures the delays. Set it only where the faults
    /// are worker crashes alone: partitions, pauses, lost replies and
    /// database crashes stall rivals legitimately.
    #[serde(default)]
    pub takeover_bound_ms: Option<u64>,
    /// The fault ranges.
    #[serde(default)]
    pub faults: Faults,
    /// The lock under test when it is not the lease: a manager of
    /// `leaseproof-locks`, run by its own code (absent: the lease).
    #[serde(default)]
    pub lock: Option<LockUnderTest>,
}

/// A lock manager a scenario runs instead of the lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockUnderTest {
    /// Which manager.
    pub manager: LockManagerName,
    /// The manager's keep-alive (extend every TTL / 3); without it the
    /// guard's *lost* fires when the TTL runs out.
    #[serde(default = "defaults::yes")]
    pub keep_alive: bool,
    /// Restarts of the lock's store keep its data (Redis with
    /// `appendfsync always`); `false`: a restart forgets keys and counters.
    #[serde(default = "defaults::yes")]
    pub persistent: bool,
    /// Invariants this design is known to break under these faults (codes:
    /// `["I3"]`): a seed breaking only these shows a finding about the
    /// design and passes; breaking any other fails. Every entry is a claim
    /// the scenario's tests hold it to (some seed must show it).
    #[serde(default, with = "leaseproof_history::invariant_codes")]
    pub breaks: Vec<leaseproof_history::Invariant>,
    /// How often the advisory manager probes its lock session: the delay
    /// before a dead session fires *lost* (the manager's default, 1 s).
    #[serde(default = "defaults::probe_interval_ms")]
    pub probe_interval_ms: u64,
}

/// The managers a scenario can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockManagerName {
    /// `RedisDistributedLockManager` against the simulated Redis.
    Redis,
    /// `PostgresAdvisoryLockManager` against the simulated database's
    /// session locks.
    Advisory,
}

/// Fault ranges; every value of a run is drawn inside them from the seed.
/// The defaults inject nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Faults {
    /// Per-worker clock offset from true time.
    pub clock_offset_ms: Span<i64>,
    /// Per-worker clock drift in parts per million (100000 = 10 % fast).
    pub clock_drift_ppm: Span<i64>,
    /// The database server's clock offset from simulated time.
    pub server_offset_ms: Span<i64>,
    /// Probability that a worker pauses before a commit.
    pub pause_probability: f64,
    /// Length of such a pause (longer than the TTL to matter), and of a
    /// pause inside the commit cycle.
    pub pause_ms: Span<u64>,
    /// Probability that a worker pauses inside a commit cycle, drawn at each
    /// of its two points: after the fence (its row lock held) and after the
    /// writes, before `COMMIT`. The stretch a fence must cover until commit.
    /// Drawn from a stream of its own, so other scenarios' seeds keep theirs.
    pub cycle_pause_probability: f64,
    /// How many worker crashes a run has.
    pub worker_crashes: Span<u32>,
    /// How long a crashed worker stays down before its new incarnation starts.
    pub worker_downtime_ms: Span<u64>,
    /// How many database crashes a run has.
    pub db_crashes: Span<u32>,
    /// How long the database stays down.
    pub db_downtime_ms: Span<u64>,
    /// How many partitions (one worker, or all, cut from the database).
    pub partitions: Span<u32>,
    /// How long a partition lasts before it is repaired.
    pub partition_ms: Span<u64>,
    /// Fraction of replies the database drops after the statement took effect.
    pub lost_reply_probability: Span<f64>,
    /// How long `CREATE TABLE IF NOT EXISTS` takes in the server.
    pub schema_create_ms: Span<u64>,
    /// Each worker starts after a delay drawn here (0 = all at the same instant).
    pub start_spread_ms: Span<u64>,
    /// How many times the sessions holding advisory locks are terminated
    /// (`pg_terminate_backend`) while their holders carry on; advisory lock
    /// scenarios only.
    pub lock_session_kills: Span<u32>,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            clock_offset_ms: [0, 0],
            clock_drift_ppm: [0, 0],
            server_offset_ms: [0, 0],
            pause_probability: 0.0,
            pause_ms: [0, 0],
            cycle_pause_probability: 0.0,
            worker_crashes: [0, 0],
            worker_downtime_ms: [0, 0],
            db_crashes: [0, 0],
            db_downtime_ms: [0, 0],
            partitions: [0, 0],
            partition_ms: [0, 0],
            lost_reply_probability: [0.0, 0.0],
            schema_create_ms: [5, 20],
            start_spread_ms: [0, 0],
            lock_session_kills: [0, 0],
        }
    }
}

mod defaults {
    pub fn tick_ms() -> u64 {
        20
    }
    pub fn cycles_per_grant() -> u32 {
        3
    }
    pub fn items_per_cycle() -> u32 {
        2
    }
    pub fn work_ms() -> [u64; 2] {
        [50, 400]
    }
    pub fn retry_interval_ms() -> u64 {
        250
    }
    pub fn request_timeout_ms() -> u64 {
        400
    }
    pub fn idle_in_transaction_timeout_ms() -> u64 {
        1500
    }
    pub fn latency_ms() -> [u64; 2] {
        [1, 15]
    }
    pub fn yes() -> bool {
        true
    }
    pub fn probe_interval_ms() -> u64 {
        1000
    }
}

/// Why a scenario could not be loaded.
#[derive(Debug)]
pub enum ScenarioError {
    /// No file and no embedded scenario of that name.
    Unknown {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        error: std::io::Error,
    },
    /// The TOML is malformed or breaks a rule.
    Invalid {
        /// Where it came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScenarioError::Unknown { name, known } => {
                write!(
                    f,
                    "no scenario named {name:?} (known: {})",
                    known.join(", ")
                )
            }
            ScenarioError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            ScenarioError::Invalid { origin, message } => write!(f, "{origin}: {message}"),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// The default scenarios, embedded: (name, TOML text).
pub const EMBEDDED: [(&str, &str); 18] = [
    (
        "skewed-clocks",
        include_str!("../../../../scenarios/skewed-clocks.toml"),
    ),
    (
        "crash-mid-cycle",
        include_str!("../../../../scenarios/crash-mid-cycle.toml"),
    ),
    (
        "gc-pause",
        include_str!("../../../../scenarios/gc-pause.toml"),
    ),
    (
        "cycle-pause",
        include_str!("../../../../scenarios/cycle-pause.toml"),
    ),
    (
        "partition",
        include_str!("../../../../scenarios/partition.toml"),
    ),
    (
        "lost-replies",
        include_str!("../../../../scenarios/lost-replies.toml"),
    ),
    (
        "concurrent-schema",
        include_str!("../../../../scenarios/concurrent-schema.toml"),
    ),
    ("chaos", include_str!("../../../../scenarios/chaos.toml")),
    (
        "leader-churn",
        include_str!("../../../../scenarios/leader-churn.toml"),
    ),
    (
        "redis-pause",
        include_str!("../../../../scenarios/redis-pause.toml"),
    ),
    (
        "redis-restart",
        include_str!("../../../../scenarios/redis-restart.toml"),
    ),
    (
        "redis-crash",
        include_str!("../../../../scenarios/redis-crash.toml"),
    ),
    (
        "redis-chaos",
        include_str!("../../../../scenarios/redis-chaos.toml"),
    ),
    (
        "advisory-pause",
        include_str!("../../../../scenarios/advisory-pause.toml"),
    ),
    (
        "advisory-crash",
        include_str!("../../../../scenarios/advisory-crash.toml"),
    ),
    (
        "advisory-session-kill",
        include_str!("../../../../scenarios/advisory-session-kill.toml"),
    ),
    (
        "advisory-restart",
        include_str!("../../../../scenarios/advisory-restart.toml"),
    ),
    (
        "advisory-chaos",
        include_str!("../../../../scenarios/advisory-chaos.toml"),
    ),
];

/// Where the key a validation message starts with (`work_ms: min …`) is set
/// in `text`: 1-based line and column of the key, if the file sets it.
fn key_position(text: &str, message: &str) -> Option<(usize, usize)> {
    let key: String = message
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if key.is_empty() {
        return None;
    }
    text.lines().enumerate().find_map(|(index, line)| {
        let trimmed = line.trim_start();
        let rest = trimmed.strip_prefix(key.as_str())?;
        rest.trim_start()
            .starts_with('=')
            .then(|| (index + 1, line.len() - trimmed.len() + 1))
    })
}

/// The workspace's `scenarios/` directory (where `cargo run` finds edited files).
pub fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../scenarios")
}

impl Scenario {
    /// Parses and validates a scenario.
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = toml::from_str(text).map_err(|error| ScenarioError::Invalid {
            origin: origin.to_string(),
            message: error.to_string(),
        })?;
        scenario
            .validate()
            .map_err(|message| ScenarioError::Invalid {
                origin: origin.to_string(),
                message: match key_position(text, &message) {
                    Some((line, column)) => format!("line {line}, column {column}: {message}"),
                    None => message,
                },
            })?;
        Ok(scenario)
    }

    /// Loads `name`: a path to a `.toml` file, a file `scenarios/<name>.toml`
    /// of the workspace, or an embedded default scenario — in that order.
    pub fn load(name: &str) -> Result<Scenario, ScenarioError> {
        let as_path = Path::new(name);
        if name.ends_with(".toml") {
            let text = std::fs::read_to_string(as_path).map_err(|error| ScenarioError::Io {
                path: as_path.to_path_buf(),
                error,
            })?;
            let scenario = Scenario::parse(&text, name)?;
            // A file named like a built-in would be reported, and replayed,
            // as the built-in: its replay line would run another scenario.
            let workspace_file = scenarios_dir().join(format!("{}.toml", scenario.name));
            let is_workspace_file =
                std::fs::canonicalize(as_path).ok() == std::fs::canonicalize(&workspace_file).ok();
            if !is_workspace_file && EMBEDDED.iter().any(|(known, _)| *known == scenario.name) {
                return Err(ScenarioError::Invalid {
                    origin: name.to_string(),
                    message: format!(
                        "name = {:?} is a built-in scenario's name: its replay line would run \
                         the built-in; give the file a name of its own",
                        scenario.name
                    ),
                });
            }
            return Ok(scenario);
        }
        let path = scenarios_dir().join(format!("{name}.toml"));
        if let Ok(text) = std::fs::read_to_string(&path) {
            return Scenario::parse(&text, &path.display().to_string());
        }
        Scenario::embedded(name)
    }

    /// An embedded default scenario by name.
    pub fn embedded(name: &str) -> Result<Scenario, ScenarioError> {
        let Some((_, text)) = EMBEDDED.iter().find(|(known, _)| *known == name) else {
            return Err(ScenarioError::Unknown {
                name: name.to_string(),
                known: EMBEDDED
                    .iter()
                    .map(|(known, _)| known.to_string())
                    .collect(),
            });
        };
        Scenario::parse(text, &format!("embedded {name}"))
    }

    /// Every embedded default scenario, in a fixed order.
    pub fn all_embedded() -> Vec<Scenario> {
        EMBEDDED
            .iter()
            .map(|(name, _)| Scenario::embedded(name).expect("embedded scenarios parse"))
            .collect()
    }

    /// Every default scenario as `load` finds it (workspace file first).
    pub fn all() -> Result<Vec<Scenario>, ScenarioError> {
        EMBEDDED
            .iter()
            .map(|(name, _)| Scenario::load(name))
            .collect()
    }

    /// What each manager can use: a setting another manager's run would
    /// draw and ignore is refused.
    fn validate_lock(&self) -> Result<(), String> {
        let manager = self.lock.as_ref().map(|lock| lock.manager);
        if self.faults.lock_session_kills != [0, 0] && manager != Some(LockManagerName::Advisory) {
            return Err(
                "lock_session_kills terminates advisory lock sessions: it needs [lock] manager = \"advisory\"".into(),
            );
        }
        if let Some(lock) = &self.lock {
            if lock.probe_interval_ms == 0 {
                return Err("probe_interval_ms must be positive".into());
            }
            if lock.manager == LockManagerName::Advisory && !(lock.keep_alive && lock.persistent) {
                return Err(
                    "keep_alive and persistent do nothing for the advisory manager: its lock lives with its session".into(),
                );
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), String> {
        fn span<T: PartialOrd + std::fmt::Debug>(name: &str, span: &Span<T>) -> Result<(), String> {
            if span[0] > span[1] {
                return Err(format!("{name}: min {:?} > max {:?}", span[0], span[1]));
            }
            Ok(())
        }
        if self.workers == 0 || self.workers > 64 {
            return Err(format!("workers must be 1..=64, not {}", self.workers));
        }
        if self.lock.is_some() {
            // A Redis lock reads no clock but its timers (turmoil's), and
            // has no commit cycle: these faults would be drawn and do nothing.
            let faults = &self.faults;
            for (name, unused) in [
                ("clock_offset_ms", faults.clock_offset_ms != [0, 0]),
                ("clock_drift_ppm", faults.clock_drift_ppm != [0, 0]),
                ("server_offset_ms", faults.server_offset_ms != [0, 0]),
                (
                    "cycle_pause_probability",
                    faults.cycle_pause_probability != 0.0,
                ),
                ("takeover_bound_ms", self.takeover_bound_ms.is_some()),
            ] {
                if unused {
                    return Err(format!(
                        "{name} does nothing in a lock scenario ([lock]): the manager's timers are the simulation's and it has no commit cycle"
                    ));
                }
            }
        }
        self.validate_lock()?;
        leaseproof_protocol::Ttl::from_millis(self.ttl_ms).map_err(|error| error.to_string())?;
        if self.duration_s == 0 || self.duration_s > 24 * 3600 {
            return Err("duration_s must be 1..=86400".into());
        }
        if self.tick_ms == 0 {
            return Err("tick_ms must be positive".into());
        }
        if self.cycles_per_grant == 0 || self.items_per_cycle == 0 {
            return Err("cycles_per_grant and items_per_cycle must be positive".into());
        }
        if self.request_timeout_ms == 0 {
            return Err("request_timeout_ms must be positive".into());
        }
        span("work_ms", &self.work_ms)?;
        span("latency_ms", &self.latency_ms)?;
        let faults = &self.faults;
        span("clock_offset_ms", &faults.clock_offset_ms)?;
        span("clock_drift_ppm", &faults.clock_drift_ppm)?;
        if faults.clock_drift_ppm[0] <= -500_000 || faults.clock_drift_ppm[1] >= 1_000_000 {
            return Err("clock_drift_ppm must stay within (-500000, 1000000)".into());
        }
        span("server_offset_ms", &faults.server_offset_ms)?;
        if !(0.0..=1.0).contains(&faults.pause_probability) {
            return Err("pause_probability must be within [0, 1]".into());
        }
        if !(0.0..=1.0).contains(&faults.cycle_pause_probability) {
            return Err("cycle_pause_probability must be within [0, 1]".into());
        }
        span("pause_ms", &faults.pause_ms)?;
        span("worker_crashes", &faults.worker_crashes)?;
        span("worker_downtime_ms", &faults.worker_downtime_ms)?;
        span("db_crashes", &faults.db_crashes)?;
        span("db_downtime_ms", &faults.db_downtime_ms)?;
        span("partitions", &faults.partitions)?;
        span("partition_ms", &faults.partition_ms)?;
        span("lost_reply_probability", &faults.lost_reply_probability)?;
        if faults.lost_reply_probability[0] < 0.0 || faults.lost_reply_probability[1] > 0.5 {
            return Err("lost_reply_probability must stay within [0, 0.5]".into());
        }
        span("schema_create_ms", &faults.schema_create_ms)?;
        span("start_spread_ms", &faults.start_spread_ms)?;
        // I5's bound is sound only where nothing but worker crashes can keep a
        // waiting rival from the free scope.
        let stalling_faults = faults.partitions[1] > 0
            || faults.db_crashes[1] > 0
            || faults.pause_probability > 0.0
            || faults.cycle_pause_probability > 0.0
            || faults.lost_reply_probability[1] > 0.0;
        if self.takeover_bound_ms.is_some() && stalling_faults {
            return Err("takeover_bound_ms needs faults of worker crashes alone \
                        (no partitions, database crashes, pauses or lost replies)"
                .into());
        }
        Ok(())
    }
}
