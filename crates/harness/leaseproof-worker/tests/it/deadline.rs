use std::time::Duration;

use leaseproof_history::{EventKind, Recorder};
use leaseproof_protocol::{
    CommitReceipt, CycleFaults, Fencing, FencingToken, GuardedCycle, Lease, LeaseError, LeasePort,
    Owner, Scope, ServerTime, Ttl,
};
use leaseproof_worker::{run_worker, NoHooks, WorkerConfig};

use crate::PausedClocks;

const TTL_MS: u64 = 1_000;
const LATENCY_MS: u64 = 200;
const WORK_MS: u64 = 250;

/// Grants at once (after the latency); renewals come back unknown, so the
/// worker must live on its first deadline; commits succeed.
struct StubPort;

impl LeasePort for StubPort {
    async fn ensure_schema(&self) -> Result<(), LeaseError> {
        Ok(())
    }

    async fn acquire(&self, scope: &Scope, owner: &Owner, ttl: Ttl) -> Result<Lease, LeaseError> {
        tokio::time::sleep(Duration::from_millis(LATENCY_MS)).await;
        Ok(Lease::from_server_reply(
            scope.clone(),
            owner.clone(),
            FencingToken::FIRST,
            ServerTime::from_micros(0),
            ServerTime::from_micros(ttl.as_micros()),
        ))
    }

    async fn renew(&self, _lease: &Lease, _ttl: Ttl) -> Result<Lease, LeaseError> {
        tokio::time::sleep(Duration::from_millis(LATENCY_MS)).await;
        Err(LeaseError::OutcomeUnknown {
            operation: "renew",
            source: "reply lost".into(),
        })
    }

    async fn release(&self, _lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        Ok(None)
    }

    async fn holds(&self, _lease: &Lease) -> Result<bool, LeaseError> {
        Ok(true)
    }

    async fn commit(
        &self,
        _lease: &Lease,
        _cycle: GuardedCycle,
        _fencing: Fencing,
        _faults: &dyn CycleFaults,
    ) -> Result<CommitReceipt, LeaseError> {
        tokio::time::sleep(Duration::from_millis(LATENCY_MS)).await;
        Ok(CommitReceipt {
            seq_first: 1,
            fenced_at: Some(ServerTime::from_micros(0)),
        })
    }
}

#[tokio::test(start_paused = true)]
async fn belief_ends_one_ttl_after_the_acquisition_was_sent_not_after_the_reply() {
    let config = WorkerConfig {
        worker: "w".into(),
        incarnation: 0,
        owner: Owner::new("w#0").unwrap(),
        scope: Scope::new("job").unwrap(),
        ttl: Ttl::from_millis(TTL_MS as i64).unwrap(),
        cycles: 100,
        cycles_per_grant: 100,
        items_per_cycle: 1,
        work: Duration::from_millis(WORK_MS),
        retry_interval: Duration::from_millis(50),
        deadline_margin: Duration::ZERO,
        unfenced: false,
        stop_at_true_us: Some(3_000_000),
        operations_max: 100,
    };
    let recorder = Recorder::new();
    let clocks = PausedClocks {
        start: tokio::time::Instant::now(),
    };
    run_worker(&StubPort, &config, &clocks, &NoHooks, &recorder).await;
    let history = recorder.snapshot();
    let first_end = history
        .events
        .iter()
        .find(|event| matches!(&event.kind, EventKind::BeliefEnd { reason, .. } if reason == "local ttl elapsed"))
        .expect("the belief ran out on the local clock");
    // Sent at 0, granted at 200 (latency), worked to 450, committed by 650,
    // renewal unknown by 850 (deadline kept), worked to 1100: past the
    // deadline of 0 + 1000, so the belief ends there. A deadline measured from
    // the reply (200 + 1000 = 1200) or any longer one would let a second
    // commit through and end it later.
    let ttl_us = (TTL_MS * 1_000) as i64;
    assert!(
        first_end.true_time_us >= ttl_us,
        "belief ended before its deadline: {first_end:?}"
    );
    assert!(
        first_end.true_time_us <= ttl_us + (WORK_MS * 1_000) as i64,
        "belief outlived sent + ttl by more than one work step: {first_end:?}"
    );
    let commits_before_end = history
        .events
        .iter()
        .filter(|event| event.index < first_end.index)
        .filter(|event| {
            matches!(
                &event.kind,
                EventKind::Invoke {
                    op: leaseproof_history::Op::Commit { .. },
                    ..
                }
            )
        })
        .count();
    assert_eq!(
        commits_before_end, 1,
        "exactly one commit fits in the belief"
    );
}
