//! Lock clients in other languages, driven over the client protocol under
//! seeded faults on real servers, and judged by the one checker.
//!
//! Goal: the harness judges locks as they ship — pg_partsmith 1.10.0's two
//! managers from PyPI, a reproduction of symfonic's PostgresLeases, a Node.js
//! client written from the docs — catches a broken one under the fault that
//! breaks it, calls a correct one clean under every fault, and refuses a
//! client that does not speak the protocol before judging anything.
//! Method: `run_clients` with real processes (a virtualenv under target/
//! with pinned packages, made once by `ci/install-python-clients.sh`; a loud
//! skip without it, a failure under `LEASEPROOF_REQUIRE_CLIENTS=1`), one run
//! at a time (the machine has two cores). Real time: a fault plan is exact,
//! the interleaving is not, so a finding that depends on where a strike lands
//! is given a bounded number of seeds whose plans contain the fault.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use leaseproof_history::Invariant;
use leaseproof_races::clients::effects::ProcessEffects;
use leaseproof_races::clients::net::ProxyEffects;
use leaseproof_races::clients::{
    run_clients, ClientRunConfig, ClientRunError, ClientRunReport, FaultKind, FaultPlan, Moment,
};

/// One client run at a time across this binary's tests.
static ONE_RUN_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(super) fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn require_clients() -> bool {
    std::env::var("LEASEPROOF_REQUIRE_CLIENTS").is_ok_and(|value| value == "1")
}

fn skip_or_panic(what: &str) {
    assert!(
        !require_clients(),
        "LEASEPROOF_REQUIRE_CLIENTS=1 but {what}"
    );
    eprintln!("LEASEPROOF SKIP: {what}");
}

/// The virtualenv's python, made on first use.
pub(super) fn python() -> Option<PathBuf> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let python = PYTHON.get_or_init(|| {
        let output = std::process::Command::new("bash")
            .arg(workspace().join("ci/install-python-clients.sh"))
            .current_dir(workspace())
            .output()
            .map_err(|error| format!("ci/install-python-clients.sh: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "ci/install-python-clients.sh failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
        Ok(workspace().join(path))
    });
    match python {
        Ok(python) => Some(python.clone()),
        Err(error) => {
            skip_or_panic(&format!("no Python clients ({error})"));
            None
        }
    }
}

pub(super) async fn servers() -> bool {
    match leaseproof_pgcluster::shared_server().await {
        Ok(_) => true,
        Err(unavailable) => {
            leaseproof_pgcluster::skip_or_panic(&unavailable, leaseproof_pgcluster::require_pg());
            false
        }
    }
}

fn python_client(python: &std::path::Path, script: &str) -> String {
    format!(
        "{} {}",
        python.display(),
        workspace()
            .join("examples/clients/python")
            .join(script)
            .display()
    )
}

pub(super) fn config(
    command: String,
    seed: u64,
    faults: &[FaultKind],
    duration_ms: u64,
    ttl_ms: u64,
) -> ClientRunConfig {
    let mut config = ClientRunConfig::new(command, seed);
    config.faults = faults.to_vec();
    config.duration = Duration::from_millis(duration_ms);
    config.ttl = Duration::from_millis(ttl_ms);
    config
}

pub(super) async fn judged(config: ClientRunConfig) -> ClientRunReport {
    let _one = ONE_RUN_AT_A_TIME.lock().await;
    let plan = config.plan();
    run_clients(config)
        .await
        .unwrap_or_else(|error| panic!("the run could not be judged: {error}\n{plan}"))
}

pub(super) fn describe(outcome: &ClientRunReport) -> String {
    format!(
        "{}\n{}struck: {:?}\nskipped: {:?}\n{:?}\n{}",
        outcome.design,
        outcome.plan,
        outcome.strikes,
        outcome.strikes_skipped,
        outcome.tally,
        outcome.report
    )
}

/// Seeds (from 0) whose plan turns `kind` on with at least `strikes`
/// holder-first strikes of it.
fn seeds_striking_holders(
    kind: FaultKind,
    strikes: usize,
    faults: &[FaultKind],
    duration_ms: u64,
    ttl_ms: u64,
) -> impl Iterator<Item = u64> {
    let faults = faults.to_vec();
    (0..).filter(move |seed| {
        let plan: FaultPlan = config(String::new(), *seed, &faults, duration_ms, ttl_ms).plan();
        plan.strikes
            .iter()
            .filter(|strike| strike.kind == kind && strike.holder_first)
            .count()
            >= strikes
    })
}

/// Runs seeds whose plans strike holders with `kind`, one of them aimed at
/// a grant, until one shows a violation (at most `tries`); returns it, or
/// panics with every run.
pub(super) async fn caught_within(
    command: &str,
    kind: FaultKind,
    tries: usize,
    duration_ms: u64,
    ttl_ms: u64,
) -> ClientRunReport {
    let mut runs = Vec::new();
    let aimed_at_a_grant = |seed: &u64| {
        let plan = config(String::new(), *seed, &[kind], duration_ms, ttl_ms).plan();
        plan.strikes
            .iter()
            .any(|strike| strike.kind == kind && strike.moment == Moment::Granted)
    };
    let seeds =
        seeds_striking_holders(kind, 2, &[kind], duration_ms, ttl_ms).filter(aimed_at_a_grant);
    for seed in seeds.take(tries) {
        let outcome = judged(config(
            command.to_string(),
            seed,
            &[kind],
            duration_ms,
            ttl_ms,
        ))
        .await;
        if !outcome.report.is_ok() {
            return outcome;
        }
        runs.push(describe(&outcome));
    }
    panic!(
        "no violation in {tries} seeds striking holders with {kind:?}:\n{}",
        runs.join("\n---\n")
    );
}

/// The run of the first seed whose plan aims two strikes of `kind` at the
/// holder, allowed nothing else: an aimed fault's finding shows on it, and
/// it must show `invariant` broken.
async fn aimed_conviction(
    command: String,
    kind: FaultKind,
    (duration_ms, ttl_ms): (u64, u64),
    invariant: Invariant,
) -> ClientRunReport {
    let seed = seeds_striking_holders(kind, 2, &[kind], duration_ms, ttl_ms)
        .next()
        .expect("a seed");
    let outcome = judged(config(command, seed, &[kind], duration_ms, ttl_ms)).await;
    assert!(
        !outcome.report.violations_of(invariant).is_empty(),
        "{invariant:?} not shown:\n{}",
        describe(&outcome)
    );
    outcome
}

/// The crate's `lock-client` example: built beside the test binary by
/// `cargo test` (examples are), else built here once.
fn lock_client(kind: &str) -> String {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    let program = PROGRAM.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let program = exe
            .parent()
            .and_then(std::path::Path::parent)
            .expect("target/<profile>/deps")
            .join("examples/lock-client");
        if !program.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
            let status = std::process::Command::new(cargo)
                .args([
                    "build",
                    "-p",
                    "leaseproof-races",
                    "--example",
                    "lock-client",
                ])
                .current_dir(workspace())
                .status()
                .expect("cargo build --example lock-client");
            assert!(status.success(), "cargo build --example lock-client failed");
        }
        program
    });
    format!("{} {kind}", program.display())
}

/// Whether libfaketime is there for the clock-skew strike (a skip line
/// without it, a failure under `LEASEPROOF_REQUIRE_CLIENTS=1`).
pub(super) fn faketime_installed() -> bool {
    let installed = leaseproof_races::clients::run::libfaketime().is_some();
    if !installed {
        skip_or_panic("libfaketime (Debian: faketime) for the clock-skew strike");
    }
    installed
}

/// Runs each `(command, seed)` under `faults`; asserts no violation and that
/// the client is the `design` expected. Returns how many runs were judged
/// for real (not vacuous).
pub(super) async fn clean_runs(
    runs: impl IntoIterator<Item = (String, u64)>,
    faults: &[FaultKind],
    design: &str,
) -> usize {
    let mut judged_for_real = 0;
    for (command, seed) in runs {
        let outcome = judged(config(command, seed, faults, 6_000, 1_500)).await;
        assert!(
            outcome.report.is_ok(),
            "a false alarm on {design} (seed {seed}):\n{}",
            describe(&outcome)
        );
        assert!(outcome.design.contains(design), "{}", outcome.design);
        if outcome.vacuity().is_none() {
            judged_for_real += 1;
        }
    }
    judged_for_real
}

#[tokio::test]
async fn leaseproofs_lease_through_the_protocol_stays_clean_under_every_fault() {
    if !servers().await {
        return;
    }
    let runs = [3, 11].map(|seed| (lock_client("lease"), seed));
    let judged_for_real = clean_runs(runs, &FaultKind::ALL, "PostgresLeases").await;
    assert!(judged_for_real >= 1, "every run was vacuous");
}

/// Every strike that acted is marked for the timeline: where it landed on
/// the history's clock (after the held start, before the run's end), on its
/// victim's lanes (a Redis restart on the whole run's), with its line.
fn assert_strikes_marked(outcome: &ClientRunReport) {
    let texts: Vec<String> = outcome.marks.iter().map(|mark| mark.text.clone()).collect();
    let mut struck: Vec<String> = outcome
        .strikes
        .iter()
        .map(|strike| format!("struck {strike}"))
        .collect();
    let mut sorted = texts.clone();
    sorted.sort();
    struck.sort();
    assert_eq!(sorted, struck, "{}", describe(outcome));
    let start_us = outcome.started_after_ms as i64 * 1_000;
    let last_us = outcome
        .history
        .events
        .iter()
        .map(|event| event.true_time_us)
        .max()
        .unwrap_or(i64::MAX);
    for mark in &outcome.marks {
        assert!(
            (start_us..=last_us).contains(&mark.true_time_us),
            "{mark:?} outside [{start_us}, {last_us}]"
        );
        match &mark.worker {
            None => assert!(mark.text.contains("redis-restart"), "{mark:?}"),
            Some(worker) => assert!(
                mark.text.contains(&format!(" {worker}")),
                "{mark:?} names its victim's lane"
            ),
        }
    }
}

#[tokio::test]
async fn every_network_strike_acts_on_a_holders_connections_and_the_reference_stays_clean() {
    // The lease client absorbs what it can (a read retried, an acquisition
    // re-asked idempotently, a statement that waits out a partition), so no
    // verdict need move: the proxies' counts show each strike acted.
    if !servers().await {
        return;
    }
    // Which count a strike of the kind must move.
    type Effect = fn(&ProxyEffects) -> u64;
    let effects: [(FaultKind, Effect); 5] = [
        (FaultKind::LoseReply, |effects| effects.replies_dropped),
        (FaultKind::Partition, |effects| effects.partition_holds),
        (FaultKind::Latency, |effects| effects.delayed_chunks),
        (FaultKind::Reset, |effects| effects.connections_reset),
        (FaultKind::StallAfterReply, |effects| effects.stalled_chunks),
    ];
    for (kind, effect) in effects {
        let mut acted = 0;
        for seed in seeds_striking_holders(kind, 2, &[kind], 4_000, 1_500).take(2) {
            let outcome = judged(config(lock_client("lease"), seed, &[kind], 4_000, 1_500)).await;
            assert!(outcome.report.is_ok(), "{}", describe(&outcome));
            assert_strikes_marked(&outcome);
            acted += effect(&outcome.proxy_effects);
        }
        assert!(acted > 0, "four {kind:?} strikes did nothing");
    }
}

#[tokio::test]
async fn every_process_strike_acts_on_its_target_and_the_reference_stays_clean() {
    // As for the network strikes: the lease client survives a pause, a kill,
    // its backends terminated, Redis restarted and a skewed clock without a
    // verdict moving, so each strike must be seen to act from outside.
    if !servers().await {
        return;
    }
    // Which count a strike of the kind must move.
    type Effect = fn(&ProcessEffects) -> u64;
    let mut effects: Vec<(FaultKind, Effect)> = vec![
        (FaultKind::PauseShort, |effects| effects.processes_stopped),
        (FaultKind::PauseLong, |effects| effects.processes_stopped),
        (FaultKind::Kill, |effects| effects.processes_killed),
        (FaultKind::TerminateBackends, |effects| {
            effects.backends_terminated
        }),
        (FaultKind::RedisRestart, |effects| effects.redis_restarts),
    ];
    if faketime_installed() {
        effects.push((FaultKind::ClockSkew, |effects| effects.clients_skewed));
    }
    for (kind, effect) in effects {
        let mut acted = 0;
        let plans = (0..).map(|seed| config(String::new(), seed, &[kind], 3_000, 1_000).plan());
        let seeds = plans
            .filter(|plan| {
                // Redis restarts strike no client; a skewed clock is no strike.
                plan.strikes.iter().any(|strike| strike.kind == kind)
                    || (kind == FaultKind::ClockSkew && plan.clocks.iter().any(Option::is_some))
            })
            .map(|plan| plan.seed);
        for seed in seeds.take(2) {
            let outcome = judged(config(lock_client("lease"), seed, &[kind], 3_000, 1_000)).await;
            assert!(outcome.report.is_ok(), "{}", describe(&outcome));
            // A strike's signal is no crash of the client's own.
            assert!(outcome.own_exits.is_empty(), "{:?}", outcome.own_exits);
            assert_strikes_marked(&outcome);
            acted += effect(&outcome.process_effects);
        }
        assert!(acted > 0, "two runs of {kind:?} strikes did nothing");
    }
}

#[tokio::test]
async fn overlapping_pauses_of_one_client_make_one_pause_that_lasts_until_the_last_ends() {
    // The plan's second pause strikes a process the first has stopped: it
    // must not be resumed when the first ends, only when the last does.
    if !servers().await {
        return;
    }
    let overlapping = |plan: &leaseproof_races::clients::FaultPlan| {
        let pauses: Vec<_> = plan
            .strikes
            .iter()
            .filter(|strike| strike.kind == FaultKind::PauseLong && !strike.holder_first)
            .collect();
        pauses.iter().any(|first| {
            pauses.iter().any(|second| {
                second.client == first.client
                    && second.at > first.at
                    && second.at < first.at + first.lasting
                    && second.at + second.lasting > first.at + first.lasting
            })
        })
    };
    let seed = (0..5_000)
        .find(|&seed| {
            overlapping(&config(String::new(), seed, &[FaultKind::PauseLong], 4_000, 1_500).plan())
        })
        .expect("a plan with two overlapping pauses of one client");
    let outcome = judged(config(
        lock_client("lease"),
        seed,
        &[FaultKind::PauseLong],
        4_000,
        1_500,
    ))
    .await;
    assert!(outcome.report.is_ok(), "{}", describe(&outcome));
    assert!(
        outcome
            .strikes
            .iter()
            .any(|strike| strike
                .contains("(already paused: the pause lasts until this one ends too)")),
        "{:?}",
        outcome.strikes
    );
}

#[tokio::test]
async fn a_broken_plain_del_lock_is_caught_when_its_holder_is_paused_past_the_ttl() {
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    let outcome = caught_within(
        &python_client(&python, "broken_plain_del.py"),
        FaultKind::PauseLong,
        3,
        7_000,
        1_500,
    )
    .await;
    let violation = &outcome.report.violations[0];
    assert!(
        matches!(
            violation.invariant,
            Invariant::MutualExclusion | Invariant::FencedWrites
        ),
        "{}",
        describe(&outcome)
    );
    assert!(
        !violation.events.is_empty(),
        "a violation names its evidence"
    );
}

#[tokio::test]
async fn pg_partsmiths_redis_manager_runs_as_it_ships_and_is_clean_without_faults() {
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    let outcome = judged(config(
        python_client(&python, "partsmith_redis.py"),
        0,
        &[],
        6_000,
        3_000,
    ))
    .await;
    assert!(
        outcome.design.contains("pg_partsmith 1.10.0"),
        "{}",
        outcome.design
    );
    assert!(
        outcome.report.is_ok(),
        "a false alarm:\n{}",
        describe(&outcome)
    );
    assert_eq!(outcome.vacuity(), None, "{}", describe(&outcome));
}

#[tokio::test]
async fn pg_partsmiths_advisory_lock_is_lost_to_backend_termination_and_the_holder_writes_on() {
    // pg_partsmith's advisory manager never probes its lock session: when
    // the server terminates it, a rival takes the lock at once while the
    // holder, unaware, keeps writing on its other connection — its writes
    // land under the rival's lock (I3), the finding. (No double grant: the
    // session had ended.) The strike is aimed: only the lock session, while
    // its holder holds the lock and works on — so one seed shows it.
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    let command = python_client(&python, "partsmith_advisory.py");
    let kind = FaultKind::TerminateLockSession;
    let outcome = aimed_conviction(command, kind, (6_000, 3_000), Invariant::FencedWrites).await;
    assert!(
        outcome
            .strikes
            .iter()
            .any(|strike| strike.contains("terminate-lock-session w")
                && strike.contains("while it holds the lock")),
        "{}",
        describe(&outcome)
    );
}

#[tokio::test]
async fn pg_partsmiths_redis_manager_writes_on_while_its_watchdog_cannot_reach_redis() {
    // pg_partsmith's watchdog renews with no deadline: cut off from Redis
    // while it holds the lock, its work store still reachable, it neither
    // renews nor cancels the holder, who works on after the key expired and
    // a rival took the lock — its writes land under the rival's (I3). Aimed
    // at a grant, so one seed shows it.
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    let command = python_client(&python, "partsmith_redis.py");
    let kind = FaultKind::PartitionLockStore;
    let outcome = aimed_conviction(command, kind, (8_000, 3_000), Invariant::FencedWrites).await;
    assert!(
        outcome.proxy_effects.partition_holds > 0
            && outcome
                .strikes
                .iter()
                .any(|strike| strike.contains("partition-lock-store w")),
        "{}",
        describe(&outcome)
    );
}

#[tokio::test]
async fn a_lock_kept_in_its_work_store_is_not_cut_off_from_it_and_the_run_says_so() {
    if !servers().await {
        return;
    }
    let kind = FaultKind::PartitionLockStore;
    let seed = seeds_striking_holders(kind, 1, &[kind], 6_000, 1_500)
        .next()
        .expect("a seed");
    let outcome = judged(config(lock_client("lease"), seed, &[kind], 6_000, 1_500)).await;
    assert!(outcome.report.is_ok(), "{}", describe(&outcome));
    assert!(outcome.strikes.is_empty(), "{}", describe(&outcome));
    // A run whose every strike found nothing to act on proved nothing of
    // the fault: it says so rather than pass.
    assert!(
        outcome
            .vacuity()
            .is_some_and(|why| why.contains("none of the plan's")),
        "{}",
        describe(&outcome)
    );
    let skipped = &outcome.strikes_skipped;
    assert!(
        skipped.iter().all(|skipped| skipped.contains("not struck"))
            && skipped
                .iter()
                .any(|skipped| skipped.contains("no connection to a lock store of its own")),
        "{}",
        describe(&outcome)
    );
}

#[tokio::test]
async fn a_check_then_act_lease_is_caught_when_its_write_in_flight_is_split() {
    // The lease checks it is still the holder, then inserts in a second
    // statement: a stall after the check's reply holds the insert past the
    // TTL, a rival takes the lease over and writes, and the stale insert
    // lands under the rival's lease (I3). Aimed at a write in flight, so
    // one seed shows it.
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    let command = python_client(&python, "check_then_act.py");
    let kind = FaultKind::StallAfterReply;
    let outcome = aimed_conviction(command, kind, (8_000, 2_000), Invariant::FencedWrites).await;
    assert!(
        outcome.design.contains("checked, then written"),
        "{}",
        outcome.design
    );
    assert!(
        outcome.proxy_effects.stalled_chunks > 0,
        "{}",
        describe(&outcome)
    );
}

#[tokio::test]
async fn the_symfonic_reproduction_creates_its_schema_concurrently_and_is_clean_without_faults() {
    if !servers().await {
        return;
    }
    let Some(python) = python() else { return };
    let outcome = judged(config(
        python_client(&python, "symfonic_leases.py"),
        0,
        &[],
        6_000,
        3_000,
    ))
    .await;
    assert!(
        outcome.design.contains("reproduction"),
        "{}",
        outcome.design
    );
    assert!(
        outcome.report.is_ok(),
        "a false alarm:\n{}",
        describe(&outcome)
    );
    assert_eq!(outcome.vacuity(), None, "{}", describe(&outcome));
}

#[tokio::test]
async fn a_node_client_written_from_the_docs_runs() {
    if !servers().await {
        return;
    }
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        skip_or_panic("no node on PATH");
        return;
    }
    let command = format!(
        "node {}",
        workspace()
            .join("examples/clients/node/redis_lock.js")
            .display()
    );
    let outcome = judged(config(command, 0, &[], 5_000, 1_500)).await;
    assert!(outcome.design.contains("Node.js"), "{}", outcome.design);
    assert!(
        outcome.report.is_ok(),
        "a false alarm:\n{}",
        describe(&outcome)
    );
    assert_eq!(outcome.vacuity(), None, "{}", describe(&outcome));
}

/// The run holds its start until every client greeted: a client three
/// seconds slower to start than the other (longer than the run) loses no
/// contention and no strike, and nobody is asked anything before the start.
#[tokio::test]
async fn the_run_starts_when_every_client_has_said_hello() {
    if !servers().await {
        return;
    }
    let command = format!(
        "if [ \"$LEASEPROOF_WORKER\" = w1 ] && [ \"$LEASEPROOF_INCARNATION\" = 0 ]; then sleep 3; fi; exec {}",
        lock_client("lease")
    );
    let shape = |seed| {
        let mut config = config(
            command.clone(),
            seed,
            &[FaultKind::PauseShort],
            2_000,
            1_000,
        );
        config.clients = 2;
        config
    };
    // A strike drawn for the slow client itself, not for whoever holds.
    let seed = (0..)
        .find(|seed| {
            shape(*seed)
                .plan()
                .strikes
                .iter()
                .any(|strike| strike.client == 1 && !strike.holder_first)
        })
        .expect("a plan striking the slow client");
    let outcome = judged(shape(seed)).await;
    let shown = describe(&outcome);
    assert!(outcome.report.is_ok(), "{shown}");
    assert!(
        outcome.started_after_ms >= 3_000,
        "{}: {shown}",
        outcome.started_after_ms
    );
    assert!(outcome.strikes_skipped.is_empty(), "{shown}");
    assert!(
        outcome.strikes.iter().any(|strike| strike.ends_with(" w1")),
        "{shown}"
    );
    assert_eq!(outcome.tally.greeted_after_end, 0, "{shown}");
    let start_us = i64::try_from(outcome.started_after_ms).unwrap() * 1_000;
    let mut asked = std::collections::BTreeSet::new();
    for event in &outcome.history.events {
        if let leaseproof_history::EventKind::Invoke { .. } = event.kind {
            assert!(
                event.true_time_us >= start_us,
                "{event:?} before the start: {shown}"
            );
            asked.insert(event.worker.clone());
        }
    }
    assert_eq!(asked.len(), 2, "both clients were asked: {shown}");
}

async fn refused(command: &str) -> String {
    let mut config = config(command.to_string(), 0, &[], 2_000, 1_000);
    config.clients = 2;
    config.hello_timeout = Duration::from_secs(2);
    let _one = ONE_RUN_AT_A_TIME.lock().await;
    match run_clients(config).await {
        Ok(outcome) => panic!("judged instead of refused:\n{}", describe(&outcome)),
        Err(
            error @ (ClientRunError::Protocol(_)
            | ClientRunError::Start(_)
            | ClientRunError::Malformed(_)),
        ) => error.to_string(),
        Err(error) => panic!("the wrong error: {error}"),
    }
}

const HELLO: &str = r#"{"type":"hello","protocol":"leaseproof-client/1","name":"sh"}"#;

#[tokio::test]
async fn clients_that_do_not_speak_the_protocol_are_refused_with_the_line_and_nothing_is_judged() {
    if !servers().await {
        return;
    }
    let garbage = refused("echo 'I am a lock'; sleep 5").await;
    assert!(garbage.contains("stdout line 1"), "{garbage}");
    assert!(
        garbage.contains("not a message of leaseproof-client/1"),
        "{garbage}"
    );

    let typo = refused(&format!(
        "echo '{HELLO}'; read request; echo '{{\"type\":\"ok\",\"in_reply_to\":1,\"tokn\":3}}'; sleep 5"
    ))
    .await;
    assert!(typo.contains("stdout line 2"), "{typo}");
    assert!(typo.contains("unknown field `tokn`"), "{typo}");

    let stray = refused(&format!(
        "echo '{HELLO}'; read request; echo '{{\"type\":\"ok\",\"in_reply_to\":99}}'; sleep 5"
    ))
    .await;
    assert!(
        stray.contains("field `in_reply_to`: 99 answers no request in flight"),
        "{stray}"
    );

    // Well-formed, but not an answer to what was asked.
    let misfit = refused(&format!(
        "echo '{HELLO}'; read request; echo '{{\"type\":\"ok\",\"in_reply_to\":1,\"locked\":true}}'; sleep 5"
    ))
    .await;
    assert!(misfit.contains("stdout line 2"), "{misfit}");
    assert!(
        misfit.contains("field `locked`: does not apply to the ok of a `acquire`"),
        "{misfit}"
    );
    // A grant as a lock, its renewal as a lease: one design, two forms.
    let hello_renews = HELLO.replace(r#""name":"sh""#, r#""name":"sh","renew":true"#);
    let two_forms = refused(&format!(
        "echo '{hello_renews}'; read request; echo '{{\"type\":\"ok\",\"in_reply_to\":1,\"lifetime_ms\":1000}}'; \
         read request; echo '{{\"type\":\"ok\",\"in_reply_to\":2}}'; \
         read request; echo '{{\"type\":\"ok\",\"in_reply_to\":3,\"token\":1,\"granted_at_us\":1,\"expires_at_us\":2}}'; sleep 5"
    ))
    .await;
    assert!(two_forms.contains("stdout line 4"), "{two_forms}");
    assert!(
        two_forms.contains("this `renew`'s ok does carry a lease's token"),
        "{two_forms}"
    );

    // A lost notice for a table nobody asked about.
    let stray_lost = refused(&format!(
        "echo '{HELLO}'; read request; echo '{{\"type\":\"lost\",\"table\":\"no-such-table\"}}'; sleep 5"
    ))
    .await;
    assert!(
        stray_lost
            .contains("field `table`: \"no-such-table\" is no table this process was asked about"),
        "{stray_lost}"
    );

    // A lock (no server times in its grants) whose release reports one.
    let lock_release_time = refused(
        &r#"echo 'HELLO_LINE'; while read -r request; do id=${request#*\"msg_id\":}; id=${id%%,*}; case "$request" in *'"type":"acquire"'*) echo "{\"type\":\"ok\",\"in_reply_to\":$id,\"lifetime_ms\":1000}";; *'"type":"release"'*) echo "{\"type\":\"ok\",\"in_reply_to\":$id,\"released_at_us\":5}";; *) echo "{\"type\":\"ok\",\"in_reply_to\":$id}";; esac; done"#
            .replace("HELLO_LINE", HELLO),
    )
    .await;
    assert!(
        lock_release_time.contains("field `released_at_us`: this process's grants are a lock's"),
        "{lock_release_time}"
    );

    // Each line well-formed, the grant impossible: what `leaseproof check`
    // would refuse in the saved history is not judged here either.
    let backwards = refused(&format!(
        "echo '{HELLO}'; read request; echo '{{\"type\":\"ok\",\"in_reply_to\":1,\"token\":1,\"granted_at_us\":2000,\"expires_at_us\":1000}}'; sleep 3"
    ))
    .await;
    assert!(
        backwards.contains("field `kind.outcome.result.expires_at_us`"),
        "{backwards}"
    );
    assert!(
        backwards.contains("field `expires_at_us` of w")
            && backwards.contains("incarnation 0's answer to msg_id 1, acquire)"),
        "the client's own field and request are named: {backwards}"
    );

    let dies = refused("echo 'cannot import pg_partsmith' >&2; exit 3").await;
    assert!(dies.contains("ended before its hello"), "{dies}");
    assert!(
        dies.contains("cannot import pg_partsmith"),
        "the stderr tail is shown: {dies}"
    );

    let silent = refused("sleep 30").await;
    assert!(silent.contains("no hello within 2000 ms"), "{silent}");
}

#[tokio::test]
async fn a_client_that_crashes_by_itself_is_reported_with_its_status_and_stderr() {
    if !servers().await {
        return;
    }
    // Greets, then dies at its first request: each incarnation the same.
    let command =
        format!("echo '{HELLO}'; read request; echo 'boom: no route to the store' >&2; exit 3");
    let mut config = config(command, 0, &[], 1_500, 1_000);
    config.clients = 2;
    let outcome = judged(config).await;
    assert!(!outcome.own_exits.is_empty(), "{}", describe(&outcome));
    let exit = &outcome.own_exits[0];
    assert!(exit.contains("exited with status 3 by itself"), "{exit}");
    assert!(exit.contains("asked acquire"), "{exit}");
    assert!(exit.contains("boom: no route to the store"), "{exit}");
    assert!(outcome.vacuity().is_some(), "nothing was granted");
}

#[tokio::test]
async fn a_request_left_unanswered_is_named_as_the_clients_hang() {
    if !servers().await {
        return;
    }
    // Greets, then never answers: its first request waits out the run's
    // patience (4 x TTL + 5 s) and is named, not passed off as a lost reply.
    let command = format!("echo '{HELLO}'; sleep 60");
    let mut config = config(command, 0, &[], 1_000, 500);
    config.clients = 1;
    let outcome = judged(config).await;
    assert_eq!(outcome.unanswered.len(), 1, "{}", describe(&outcome));
    assert!(
        outcome.unanswered[0].contains("left its acquire unanswered for 7000 ms"),
        "{:?}",
        outcome.unanswered
    );
}

#[tokio::test]
async fn a_run_leaves_no_process_of_its_clients_behind() {
    if !servers().await {
        return;
    }
    // The client starts a child of its own and is then refused: the whole
    // process group goes, the child too.
    let marker = format!("3{}.{}", std::process::id(), 17);
    let refusal = refused(&format!(
        "sleep {marker} & echo '{HELLO}'; echo garbage; wait"
    ))
    .await;
    assert!(refusal.contains("stdout line 2"), "{refusal}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(&marker))
        .collect();
    assert!(survivors.is_empty(), "left behind: {survivors:?}");
}

#[tokio::test]
async fn a_killed_session_lock_holder_is_not_taken_for_a_second_holder() {
    // SIGKILL ends the holder's session and the server frees its advisory
    // lock at once; a rival then takes it. The killed holder's hold ended
    // with its process — when its stdout closed — not when its worker next
    // found out: no double hold may be reported (once, the harness did).
    if !servers().await {
        return;
    }
    let seed = seeds_striking_holders(FaultKind::Kill, 2, &[FaultKind::Kill], 6_000, 1_500)
        .next()
        .expect("a seed whose plan kills holders");
    let outcome = judged(config(
        lock_client("advisory"),
        seed,
        &[FaultKind::Kill],
        6_000,
        1_500,
    ))
    .await;
    assert!(
        outcome
            .strikes
            .iter()
            .any(|strike| strike.contains("(the holder)")),
        "no holder was killed: {}",
        describe(&outcome)
    );
    assert!(
        outcome.report.is_ok(),
        "a false alarm:\n{}",
        describe(&outcome)
    );
    assert!(
        outcome.tally.incarnations > 3,
        "the killed came back: {}",
        describe(&outcome)
    );
}
