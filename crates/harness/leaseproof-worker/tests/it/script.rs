//! The worker loop's whole record for scripted replies, snapshot as data.
//!
//! Goal: every branch of the loop leaves exactly the history the checker
//! expects — which outcome a reply becomes (ok / fail held / fail stale /
//! unknown / error), when a belief starts and ends and why, when the loop
//! retries, renews, releases, and what it counts. Method: a port that answers
//! from a script, tokio's paused clock, and the record rendered one line per
//! event with its true time, compared whole (rust-analyzer's snapshot style).
//! Invariant: a change to the loop's record shows up here as a diff.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use leaseproof_history::{EventKind, Op, OpResult, Outcome, Recorder};
use leaseproof_protocol::{
    CommitReceipt, CycleFaults, Fencing, FencingToken, GuardedCycle, Lease, LeaseError, LeasePort,
    Owner, Scope, ServerTime, Ttl,
};
use leaseproof_worker::{run_worker, NoHooks, WorkerConfig, WorkerSummary};

use crate::PausedClocks;

/// One scripted reply.
#[derive(Clone, Copy, Debug)]
enum Reply {
    Ok,
    Held,
    Lost,
    Unknown,
    Down,
    /// A broken design's renewal: granted, under the next token.
    NewToken,
}

/// Answers each kind of operation from its own script (`Ok` when it runs out).
#[derive(Default)]
struct ScriptedPort {
    acquire: Mutex<VecDeque<Reply>>,
    renew: Mutex<VecDeque<Reply>>,
    commit: Mutex<VecDeque<Reply>>,
    release: Mutex<VecDeque<Reply>>,
}

fn next(script: &Mutex<VecDeque<Reply>>) -> Reply {
    script.lock().unwrap().pop_front().unwrap_or(Reply::Ok)
}

fn lease(scope: &Scope, owner: &Owner, token: i64) -> Lease {
    Lease::from_server_reply(
        scope.clone(),
        owner.clone(),
        FencingToken(token),
        ServerTime::from_micros(0),
        ServerTime::from_micros(1_000_000),
    )
}

fn error(reply: Reply, scope: &Scope, token: FencingToken) -> LeaseError {
    match reply {
        Reply::Held => LeaseError::Held {
            scope: scope.clone(),
            holder: None,
        },
        Reply::Lost => LeaseError::Lost {
            scope: scope.clone(),
            token,
        },
        Reply::Unknown => LeaseError::OutcomeUnknown {
            operation: "scripted",
            source: "reply lost".into(),
        },
        Reply::Down => LeaseError::Unavailable {
            source: "server down".into(),
        },
        Reply::Ok | Reply::NewToken => unreachable!("not an error"),
    }
}

const STEP: Duration = Duration::from_millis(10);

impl LeasePort for ScriptedPort {
    async fn ensure_schema(&self) -> Result<(), LeaseError> {
        Ok(())
    }

    async fn acquire(&self, scope: &Scope, owner: &Owner, _ttl: Ttl) -> Result<Lease, LeaseError> {
        tokio::time::sleep(STEP).await;
        match next(&self.acquire) {
            Reply::Ok => Ok(lease(scope, owner, 7)),
            reply => Err(error(reply, scope, FencingToken(7))),
        }
    }

    async fn renew(&self, lease: &Lease, _ttl: Ttl) -> Result<Lease, LeaseError> {
        tokio::time::sleep(STEP).await;
        match next(&self.renew) {
            Reply::Ok => Ok(lease.clone()),
            Reply::NewToken => Ok(Lease::from_server_reply(
                lease.scope().clone(),
                lease.owner().clone(),
                lease.token().next(),
                lease.granted_at(),
                lease.expires_at(),
            )),
            reply => Err(error(reply, lease.scope(), lease.token())),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        tokio::time::sleep(STEP).await;
        match next(&self.release) {
            Reply::Ok => Ok(Some(ServerTime::from_micros(5))),
            Reply::Lost => Ok(None),
            reply => Err(error(reply, lease.scope(), lease.token())),
        }
    }

    async fn holds(&self, _lease: &Lease) -> Result<bool, LeaseError> {
        Ok(true)
    }

    async fn commit(
        &self,
        lease: &Lease,
        _cycle: GuardedCycle,
        _fencing: Fencing,
        _faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        tokio::time::sleep(STEP).await;
        match next(&self.commit) {
            Reply::Ok => Ok(CommitReceipt {
                seq_first: 1,
                fenced_at: Some(ServerTime::from_micros(3)),
            }),
            reply => Err(error(reply, lease.scope(), lease.token())),
        }
    }
}

fn config(cycles: u32, cycles_per_grant: u32) -> WorkerConfig {
    WorkerConfig {
        worker: "w".into(),
        incarnation: 0,
        owner: Owner::new("w#0").unwrap(),
        scope: Scope::new("job").unwrap(),
        ttl: Ttl::from_millis(1_000).unwrap(),
        cycles,
        cycles_per_grant,
        items_per_cycle: 2,
        work: Duration::from_millis(20),
        retry_interval: Duration::from_millis(50),
        deadline_margin: Duration::from_millis(100),
        unfenced: false,
        stop_at_true_us: Some(10_000_000),
        operations_max: 30,
    }
}

/// The record, one line per event: `<ms> <event>`.
fn render(recorder: &Recorder) -> Vec<String> {
    recorder
        .snapshot()
        .events
        .iter()
        .map(|event| {
            let what = match &event.kind {
                EventKind::Invoke { op, .. } => match op {
                    Op::Acquire { ttl_us, .. } => format!("invoke acquire ttl {ttl_us}"),
                    Op::Renew { token, ttl_us, .. } => format!("invoke renew {token} ttl {ttl_us}"),
                    Op::Release { token, .. } => format!("invoke release {token}"),
                    Op::Commit {
                        token,
                        cycle_id,
                        items,
                        ..
                    } => format!("invoke commit {token} cycle {cycle_id} items {items}"),
                    Op::Write {
                        cycle_id, items, ..
                    } => format!("invoke write cycle {cycle_id} items {items}"),
                },
                EventKind::Complete { outcome, .. } => match outcome {
                    Outcome::Ok { result } => match result {
                        OpResult::Lease { token, .. } => format!("ok lease {token}"),
                        OpResult::Released { released_at_us } => {
                            format!("ok released at {released_at_us}")
                        }
                        OpResult::Committed {
                            committed_at_us: Some(committed_at_us),
                        } => {
                            format!("ok committed at {committed_at_us}")
                        }
                        other => format!("ok {other:?}"),
                    },
                    Outcome::Fail { reason } => format!("fail {reason:?}"),
                    Outcome::Unknown { .. } => "unknown".to_string(),
                },
                EventKind::BeliefStart { token, .. } => format!("belief start {token}"),
                EventKind::BeliefEnd { token, reason, .. } => {
                    format!("belief end {token}: {reason}")
                }
            };
            format!("{} {what}", event.true_time_us / 1_000)
        })
        .collect()
}

/// The operations the record invoked, in order, without their times.
fn invoked(record: &[String]) -> Vec<&str> {
    record
        .iter()
        .filter_map(|line| line.split_once(" invoke ").map(|(_, op)| op))
        .collect()
}

async fn run(port: &ScriptedPort, config: &WorkerConfig) -> (Vec<String>, WorkerSummary) {
    let recorder = Recorder::new();
    let clocks = PausedClocks {
        start: tokio::time::Instant::now(),
    };
    let summary = run_worker(port, config, &clocks, &NoHooks, &recorder).await;
    (render(&recorder), summary)
}

fn script(replies: &[Reply]) -> Mutex<VecDeque<Reply>> {
    Mutex::new(replies.iter().copied().collect())
}

#[tokio::test(start_paused = true)]
async fn a_quiet_run_acquires_commits_renews_and_releases() {
    let port = ScriptedPort::default();
    let (record, summary) = run(&port, &config(2, 2)).await;
    assert_eq!(
        record,
        [
            "0 invoke acquire ttl 1000000",
            "10 ok lease 7",
            "10 belief start 7",
            "30 invoke commit 7 cycle 1 items 2",
            "40 ok committed at 3",
            "40 invoke renew 7 ttl 1000000",
            "50 ok lease 7",
            "70 invoke commit 7 cycle 2 items 2",
            "80 ok committed at 3",
            "80 belief end 7: released",
            "80 invoke release 7",
            "90 ok released at 5",
        ]
    );
    assert_eq!(
        summary,
        WorkerSummary {
            grants: 1,
            commits: 2,
            operations: 5,
            ..WorkerSummary::default()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn refusals_unknowns_and_losses_each_leave_their_mark() {
    let port = ScriptedPort {
        // Held (retry after the interval), unknown (retry at once), granted.
        acquire: script(&[Reply::Held, Reply::Unknown, Reply::Ok, Reply::Down]),
        // The first commit's outcome is unknown, the next is refused.
        commit: script(&[Reply::Unknown, Reply::Ok, Reply::Lost]),
        renew: script(&[Reply::Unknown, Reply::Ok]),
        release: script(&[Reply::Lost]),
    };
    let (record, summary) = run(&port, &config(2, 5)).await;
    assert_eq!(
        record,
        [
            "0 invoke acquire ttl 1000000",
            "10 fail Held",
            "60 invoke acquire ttl 1000000",
            "70 unknown",
            "70 invoke acquire ttl 1000000",
            "80 ok lease 7",
            "80 belief start 7",
            "100 invoke commit 7 cycle 1 items 2",
            "110 unknown",
            "110 invoke renew 7 ttl 1000000",
            "120 unknown",
            "140 invoke commit 7 cycle 2 items 2",
            "150 ok committed at 3",
            "150 invoke renew 7 ttl 1000000",
            "160 ok lease 7",
            "180 invoke commit 7 cycle 3 items 2",
            "190 fail Stale",
            "190 belief end 7: fence refused the commit",
            "190 invoke acquire ttl 1000000",
            "200 fail Error(\"database unavailable: server down\")",
            "250 invoke acquire ttl 1000000",
            "260 ok lease 7",
            "260 belief start 7",
            "280 invoke commit 7 cycle 4 items 2",
            "290 ok committed at 3",
            "290 belief end 7: released",
            "290 invoke release 7",
            "300 fail Stale",
        ]
    );
    assert_eq!(
        summary,
        WorkerSummary {
            grants: 2,
            held: 1,
            commits: 2,
            commits_refused: 1,
            unknown: 3,
            errors: 1,
            operations: 12,
            schema_error: None,
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_belief_past_its_local_deadline_ends_before_any_commit() {
    // Work longer than ttl - margin: the deadline passes while working.
    let mut slow = config(1, 1);
    slow.work = Duration::from_millis(950);
    slow.operations_max = 4;
    let port = ScriptedPort::default();
    let (record, _) = run(&port, &slow).await;
    assert_eq!(
        &record[..4],
        [
            "0 invoke acquire ttl 1000000",
            "10 ok lease 7",
            "10 belief start 7",
            "960 belief end 7: local ttl elapsed",
        ]
    );
    assert!(
        !record.iter().any(|line| line.contains("invoke commit")
            && line.split(' ').next().unwrap().parse::<u64>().unwrap() < 1_000),
        "no commit after the deadline passed: {record:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_loop_stops_at_its_bounds_exactly() {
    // Stopping at true 10 ms: the acquisition returns at exactly 10 ms, so
    // nothing new starts; the lease is released.
    let mut stopping = config(5, 5);
    stopping.stop_at_true_us = Some(10_000);
    let (record, summary) = run(&ScriptedPort::default(), &stopping).await;
    assert_eq!(
        record,
        [
            "0 invoke acquire ttl 1000000",
            "10 ok lease 7",
            "10 belief start 7",
            "10 belief end 7: released",
            "10 invoke release 7",
            "20 ok released at 5",
        ]
    );
    assert_eq!(summary.operations, 2);
    // At most three operations: acquire, commit, renew — then only the
    // release of what it holds.
    let mut bounded = config(5, 5);
    bounded.operations_max = 3;
    let (record, summary) = run(&ScriptedPort::default(), &bounded).await;
    let invoked = invoked(&record);
    assert_eq!(
        invoked,
        [
            "acquire ttl 1000000",
            "commit 7 cycle 1 items 2",
            "renew 7 ttl 1000000",
            "release 7"
        ]
    );
    assert_eq!(summary.operations, 4);
}

#[tokio::test(start_paused = true)]
async fn a_grant_is_released_after_its_cycles_unknown_ones_included() {
    // Two cycles per grant; the first commit's outcome is unknown and still
    // counts as a cycle: release after the second, then a new grant.
    let port = ScriptedPort {
        commit: script(&[Reply::Unknown]),
        ..ScriptedPort::default()
    };
    let (record, summary) = run(&port, &config(3, 2)).await;
    let invoked = invoked(&record);
    assert_eq!(
        invoked,
        [
            "acquire ttl 1000000",
            "commit 7 cycle 1 items 2",
            "renew 7 ttl 1000000",
            "commit 7 cycle 2 items 2",
            "release 7",
            "acquire ttl 1000000",
            "commit 7 cycle 3 items 2",
            "renew 7 ttl 1000000",
            "commit 7 cycle 4 items 2",
            "release 7",
        ]
    );
    assert_eq!(summary.commits, 3);
    assert_eq!(summary.unknown, 1);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_changes_its_token_is_recorded_and_convicted_not_asserted() {
    // The loop judges nothing itself: a design under test whose renewal
    // hands out a new token is recorded as it answered, and the checker
    // convicts it (I2), where an assertion would have stopped the run.
    let port = ScriptedPort {
        renew: script(&[Reply::NewToken]),
        ..ScriptedPort::default()
    };
    let recorder = Recorder::new();
    let clocks = PausedClocks {
        start: tokio::time::Instant::now(),
    };
    run_worker(&port, &config(2, 2), &clocks, &NoHooks, &recorder).await;
    let record = render(&recorder);
    assert!(record.contains(&"50 ok lease 8".to_string()), "{record:#?}");
    let report = leaseproof_history::check(&recorder.snapshot(), &Default::default());
    assert!(
        report
            .violations
            .iter()
            .any(|violation| violation.invariant == leaseproof_history::Invariant::TokenOrder),
        "{report}"
    );
}
