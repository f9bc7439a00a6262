//! The worker that drives one client: acquire, a few writes, renewals,
//! release — each request stamped on leaseproof's clock and recorded, each
//! answer read as the protocol says, the belief kept as the answers prove it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use leaseproof_history::{EventKind, FailReason, Op, OpResult, Outcome};
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use super::child::NoAnswer;
use super::moments::until_onset;
use super::plan::Moment;
use super::processes::{replace, start_client};
use super::report::WorkerTally;
use super::run::LOCKED_TABLE;
use super::state::{end_belief, lock, micros, millis, stamp, Arrival, Run};
use super::wire::{FailKind, Message, Request};

/// How long a worker held at its grant waits for the strike that took the
/// moment to begin (a signal or a query: milliseconds, unless the machine
/// stalls).
pub(super) const ONSET_PATIENCE: Duration = Duration::from_secs(5);

/// What a request came back with, as the history records it.
pub(super) enum Answer {
    Message(Message),
    /// No answer: recorded unknown; the process is replaced.
    Lost(String),
}

/// A request's answer once its failure or unknown outcome is recorded.
pub(super) enum Reply {
    /// `ok`, with its fields; the caller records the result it implies.
    Ok(Message),
    /// `fail`, recorded.
    Failed(FailReason),
    /// No definite answer, recorded unknown: the process must be replaced
    /// (a client that cannot tell whether it holds the lock starts clean).
    Replace,
}

/// How one round of a worker ended.
pub(super) enum Round {
    /// Go on with the same process.
    Again,
    /// Replace the process: a new incarnation.
    Replace,
}

/// One worker's state across its incarnations.
pub(super) struct Worker {
    pub(super) run: Arc<Run>,
    pub(super) index: usize,
    pub(super) incarnation: u64,
    pub(super) msg_id: u64,
    pub(super) cycle_id: u64,
    pub(super) renews: bool,
    pub(super) rng: ChaCha8Rng,
    pub(super) tally: WorkerTally,
}

/// The result an `ok` to an acquisition or renewal reports: a lease when it
/// carries a token and both server times, else a lock.
pub(super) fn grant_result(owner: &str, answer: &Message) -> OpResult {
    let Message::Ok {
        token,
        lifetime_ms,
        granted_at_us,
        expires_at_us,
        ..
    } = answer
    else {
        unreachable!("only ok answers report grants");
    };
    match (token, granted_at_us, expires_at_us) {
        (Some(token), Some(granted_at_us), Some(expires_at_us)) => OpResult::Lease {
            token: *token,
            owner: owner.to_string(),
            granted_at_us: *granted_at_us,
            expires_at_us: *expires_at_us,
        },
        _ => OpResult::Lock {
            token: *token,
            lifetime_us: lifetime_ms.map(|ms| micros(Duration::from_millis(ms))),
        },
    }
}

impl Worker {
    pub(super) fn owner(&self) -> String {
        format!("w{}.{}", self.index, self.incarnation)
    }

    pub(super) fn next_msg_id(&mut self) -> u64 {
        self.msg_id += 1;
        self.msg_id
    }

    /// Sends `request`, records `op`'s invoke, and its outcome unless `ok`.
    pub(super) async fn ask(&mut self, request: &Request, op: Op) -> (Reply, u64) {
        let timeout = self.run.config.request_timeout();
        let (answer, op_id) = exchange(
            &self.run,
            self.index,
            self.incarnation,
            request,
            op,
            timeout,
        )
        .await;
        let reply = match answer {
            Answer::Message(message @ Message::Ok { .. }) => Reply::Ok(message),
            Answer::Message(Message::Fail { reason, text, .. }) => {
                let reason = fail_reason(reason, text);
                self.complete(
                    op_id,
                    Outcome::Fail {
                        reason: reason.clone(),
                    },
                    None,
                );
                Reply::Failed(reason)
            }
            Answer::Message(message) => {
                unknown_or_misfit(
                    &self.run,
                    self.index,
                    self.incarnation,
                    op_id,
                    message,
                    &mut self.tally,
                );
                Reply::Replace
            }
            Answer::Lost(reason) => {
                record_unknown(
                    &self.run,
                    self.index,
                    self.incarnation,
                    op_id,
                    reason,
                    &mut self.tally,
                );
                Reply::Replace
            }
        };
        (reply, op_id)
    }

    pub(super) fn complete(&self, op_id: u64, outcome: Outcome, believe: Option<(String, u64)>) {
        complete(
            &self.run,
            self.index,
            self.incarnation,
            op_id,
            outcome,
            believe,
        );
    }

    pub(super) async fn pause_ms(&mut self, range: std::ops::Range<u64>) {
        tokio::time::sleep(Duration::from_millis(self.rng.gen_range(range))).await;
    }

    /// One round: acquire; if granted, a few writes (renewing after each when
    /// the client renews) and a release.
    pub(super) async fn round(&mut self) -> Round {
        let (owner, table) = (self.owner(), LOCKED_TABLE.to_string());
        let msg_id = self.next_msg_id();
        let request = Request::Acquire {
            msg_id,
            table: table.clone(),
            owner: owner.clone(),
            ttl_ms: millis(self.run.config.ttl),
        };
        let op = Op::Acquire {
            scope: table.clone(),
            owner: owner.clone(),
            ttl_us: micros(self.run.config.ttl),
        };
        let (granted, is_lease) = match self.ask(&request, op).await {
            (Reply::Ok(answer), op_id) => {
                let result = grant_result(&owner, &answer);
                let token = match &result {
                    OpResult::Lease { token, .. } => Some(*token),
                    OpResult::Lock { token, .. } => *token,
                    _ => None,
                };
                let is_lease = matches!(result, OpResult::Lease { .. });
                self.complete(
                    op_id,
                    Outcome::Ok { result },
                    Some((table.clone(), token.unwrap_or(0))),
                );
                self.tally.grants += 1;
                // A strike aimed at this grant begins before the next request.
                if let Some(onset) = self.run.moments.reached(Moment::Granted, self.index) {
                    until_onset(onset, ONSET_PATIENCE).await;
                }
                (token, is_lease)
            }
            (Reply::Failed(reason), _) => {
                if reason == FailReason::Held {
                    self.tally.refusals += 1;
                }
                // Refused: back off a little, seeded.
                self.pause_ms(20..200).await;
                return Round::Again;
            }
            (Reply::Replace, _) => return Round::Replace,
        };
        if let Round::Replace = self.writes(&owner, granted, is_lease).await {
            return Round::Replace;
        }
        let round = self.release(&owner, granted, is_lease).await;
        self.pause_ms(20..300).await;
        round
    }

    /// One to three writes under the grant — more, while its lock store is
    /// cut off and the holder is asked to work on; stops at the first
    /// refusal.
    pub(super) async fn writes(
        &mut self,
        owner: &str,
        token: Option<u64>,
        is_lease: bool,
    ) -> Round {
        let table = LOCKED_TABLE.to_string();
        let drawn = self.rng.gen_range(1..=3);
        let (run, index) = (Arc::clone(&self.run), self.index);
        let working_on =
            || run.clock.elapsed_us() < run.slots[index].work_until_us.load(Ordering::SeqCst);
        let mut done = 0;
        while done < drawn || working_on() {
            done += 1;
            self.pause_ms(50..400).await;
            self.cycle_id += 1;
            let (cycle_id, items) = (self.cycle_id, self.rng.gen_range(1..=3));
            let msg_id = self.next_msg_id();
            let request = Request::Write {
                msg_id,
                table: table.clone(),
                owner: owner.to_string(),
                token,
                cycle_id,
                items,
            };
            let op = match (is_lease, token) {
                (true, Some(token)) => Op::Commit {
                    scope: table.clone(),
                    owner: owner.to_string(),
                    token,
                    cycle_id,
                    items,
                },
                _ => Op::Write {
                    scope: table.clone(),
                    owner: owner.to_string(),
                    cycle_id,
                    items,
                },
            };
            match self.ask(&request, op).await {
                (
                    Reply::Ok(Message::Ok {
                        committed_at_us, ..
                    }),
                    op_id,
                ) => {
                    let result = if is_lease {
                        // The client may not know it: the rows' commit times
                        // stand in (`fill_commit_times`).
                        OpResult::Committed { committed_at_us }
                    } else {
                        OpResult::Written {}
                    };
                    self.complete(op_id, Outcome::Ok { result }, None);
                    self.tally.writes += 1;
                }
                (Reply::Ok(_), _) => unreachable!("ask returns ok answers as ok"),
                (Reply::Failed(_), _) => {
                    self.tally.writes_refused += 1;
                    return Round::Again;
                }
                (Reply::Replace, _) => return Round::Replace,
            }
            if self.renews {
                match self.renew(owner, token).await {
                    Some(Round::Again) => {}
                    Some(Round::Replace) => return Round::Replace,
                    None => return Round::Again, // refused: the lock is lost
                }
            }
        }
        Round::Again
    }

    /// Renews the grant; `None` when the renewal was refused.
    pub(super) async fn renew(&mut self, owner: &str, token: Option<u64>) -> Option<Round> {
        let msg_id = self.next_msg_id();
        let request = Request::Renew {
            msg_id,
            table: LOCKED_TABLE.to_string(),
            owner: owner.to_string(),
            ttl_ms: millis(self.run.config.ttl),
        };
        let op = Op::Renew {
            scope: LOCKED_TABLE.to_string(),
            owner: owner.to_string(),
            token: token.unwrap_or(0),
            ttl_us: micros(self.run.config.ttl),
        };
        match self.ask(&request, op).await {
            (Reply::Ok(answer), op_id) => {
                let result = grant_result(owner, &answer);
                self.complete(op_id, Outcome::Ok { result }, None);
                Some(Round::Again)
            }
            (Reply::Failed(_), _) => {
                end_belief(&self.run, self.index, "renewal refused");
                None
            }
            (Reply::Replace, _) => Some(Round::Replace),
        }
    }

    /// Releases the grant; the belief ends as the release is sent.
    pub(super) async fn release(
        &mut self,
        owner: &str,
        token: Option<u64>,
        is_lease: bool,
    ) -> Round {
        let msg_id = self.next_msg_id();
        let request = Request::Release {
            msg_id,
            table: LOCKED_TABLE.to_string(),
            owner: owner.to_string(),
        };
        end_belief(&self.run, self.index, "released");
        let op = Op::Release {
            scope: LOCKED_TABLE.to_string(),
            owner: owner.to_string(),
            token: token.unwrap_or(0),
        };
        match self.ask(&request, op).await {
            (Reply::Ok(Message::Ok { released_at_us, .. }), op_id) => {
                let outcome = match (is_lease, released_at_us) {
                    (true, Some(released_at_us)) => Outcome::Ok {
                        result: OpResult::Released { released_at_us },
                    },
                    // A lease's release without its time cannot say where
                    // the grant ended: judged as if its outcome were unknown.
                    (true, None) => Outcome::Unknown {
                        reason: "release answered ok without released_at_us".to_string(),
                    },
                    (false, _) => Outcome::Ok {
                        result: OpResult::Unlocked {},
                    },
                };
                self.complete(op_id, outcome, None);
                Round::Again
            }
            (Reply::Ok(_), _) => unreachable!("ask returns ok answers as ok"),
            (Reply::Failed(_), _) => Round::Again,
            (Reply::Replace, _) => Round::Replace,
        }
    }
}

/// One worker: its client's incarnations, driven until the run's end.
pub(super) async fn drive(run: Arc<Run>, index: usize) -> WorkerTally {
    let seed = run.config.seed ^ 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(index as u64 + 1);
    let clock_skew = run.config.plan().clocks[index];
    // Set at the held start: the run's end on its clock, µs.
    let mut deadline_us: Option<i64> = None;
    let before_end = |deadline_us: Option<i64>| {
        deadline_us.is_none_or(|deadline_us| run.clock.elapsed_us() < deadline_us)
    };
    let mut arrival = Arrival {
        run: &run,
        arrived: false,
    };
    let mut worker = Worker {
        run: Arc::clone(&run),
        index,
        incarnation: 0,
        msg_id: 0,
        cycle_id: 0,
        renews: false,
        rng: ChaCha8Rng::seed_from_u64(seed),
        tally: WorkerTally::default(),
    };
    let slot = &run.slots[index];
    'incarnations: while before_end(deadline_us) {
        if lock(&run.protocol_error).is_some() || lock(&run.start_error).is_some() {
            break;
        }
        {
            let mut belief = lock(&slot.belief);
            belief.incarnation = worker.incarnation;
            belief.ended = false;
        }
        let started_us = run.clock.elapsed_us();
        let process = match start_client(&run, index, worker.incarnation, clock_skew).await {
            Ok(process) => process,
            Err(error) => {
                lock(&run.start_error).get_or_insert(error);
                break;
            }
        };
        let greeted_us = run.clock.elapsed_us();
        let start_up_ms = u64::try_from((greeted_us - started_us) / 1_000).unwrap_or(0);
        worker.tally.start_up_ms_max = worker.tally.start_up_ms_max.max(start_up_ms);
        if deadline_us.is_some_and(|deadline_us| greeted_us >= deadline_us) {
            worker.tally.greeted_after_end += 1;
        }
        worker.tally.incarnations += 1;
        worker.renews = process.hello.renew;
        *slot.process.lock().await = Some(process);
        if deadline_us.is_none() {
            let start_us = arrival.arrive_and_wait().await;
            deadline_us = Some(start_us.saturating_add(micros(run.config.duration)));
            // Another client could not start or spoke garbage: the run is
            // refused, so nothing is asked of this one.
            if lock(&run.protocol_error).is_some() || lock(&run.start_error).is_some() {
                break;
            }
        }
        while before_end(deadline_us) {
            if let Round::Replace = worker.round().await {
                replace(&run, index).await;
                worker.incarnation += 1;
                continue 'incarnations;
            }
        }
        break;
    }
    drop(arrival);
    end_belief(&run, index, "run ended");
    let mut tally = worker.tally;
    tally.lost_notices = lock(&slot.belief).lost_notices;
    tally
}

pub(super) fn fail_reason(kind: FailKind, text: Option<String>) -> FailReason {
    match kind {
        FailKind::Held => FailReason::Held,
        FailKind::Stale => FailReason::Stale,
        FailKind::Error => FailReason::Error(text.unwrap_or_default()),
    }
}

/// Sends `request`, recording its invoke and returning the answer and op id.
pub(super) async fn exchange(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    request: &Request,
    op: Op,
    timeout: Duration,
) -> (Answer, u64) {
    let worker = format!("w{index}");
    let slot = &run.slots[index];
    let mut process = slot.process.lock().await;
    let op_id = {
        let _order = lock(&slot.belief);
        let (now, _, _) = run.stamp_now(&worker, incarnation);
        run.recorder.invoke(stamp(&worker, incarnation, now), op)
    };
    lock(&run.requests).insert(op_id, (request.msg_id(), request.kind()));
    let Some(client) = process.as_mut() else {
        return (Answer::Lost("no process".to_string()), op_id);
    };
    let in_flight = match request {
        Request::Write { .. } => Some(Moment::WriteInFlight),
        Request::Renew { .. } => Some(Moment::RenewalSent),
        _ => None,
    };
    // The request is out: the strike races the client, unwaited; the
    // onset's receiver is held while the request is in flight, so the strike
    // can tell that it still is.
    let mut in_flight_onset = None;
    let on_sent =
        || in_flight_onset = in_flight.and_then(|moment| run.moments.reached(moment, index));
    let completing_before = slot.proxies[0].replies_completing();
    let reading_before = slot.proxies[0].replies_reading();
    let answer = client.ask(request, timeout, on_sent).await;
    if in_flight == Some(Moment::WriteInFlight) {
        // A stall meant to split this write that has not begun never will.
        slot.proxies[0].disarm_stall();
        if let Ok(Message::Ok { .. }) = &answer {
            let statements = slot.proxies[0].replies_completing() - completing_before;
            slot.write_statements.store(statements, Ordering::SeqCst);
            let reads = slot.proxies[0].replies_reading() - reading_before;
            slot.write_reads.store(reads, Ordering::SeqCst);
        }
    }
    drop(in_flight_onset);
    let answer = match answer {
        Ok(message) => Answer::Message(message),
        Err(NoAnswer::Died) => {
            if let Some(code) = client.exit_code(Duration::from_millis(500)).await {
                let stderr = super::child::stderr_tail(&client.stderr_path, 6);
                lock(&run.own_exits).push(format!(
                    "{} exited with status {code} by itself, asked {}{stderr}",
                    client.label(),
                    request.kind()
                ));
            }
            Answer::Lost("the client process died".to_string())
        }
        Err(NoAnswer::TimedOut) => {
            lock(&run.unanswered).push(format!(
                "{} left its {} unanswered for {} ms",
                client.label(),
                request.kind(),
                timeout.as_millis()
            ));
            Answer::Lost(format!("no answer within {} ms", timeout.as_millis()))
        }
        Err(NoAnswer::Protocol(error)) => {
            lock(&run.protocol_error).get_or_insert(error);
            Answer::Lost("bad client output".to_string())
        }
    };
    (answer, op_id)
}

/// Records a completion; `believe` starts a belief in the same instant.
pub(super) fn complete(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    op_id: u64,
    outcome: Outcome,
    believe: Option<(String, u64)>,
) {
    let worker = format!("w{index}");
    let mut belief = lock(&run.slots[index].belief);
    let now = run.clock.elapsed_us();
    run.recorder
        .complete(stamp(&worker, incarnation, now), op_id, outcome);
    if let Some((scope, token)) = believe {
        run.recorder.record(
            stamp(&worker, incarnation, now),
            EventKind::BeliefStart {
                scope: scope.clone(),
                token,
            },
        );
        if belief.ended && belief.incarnation == incarnation {
            // The grant's answer was read after its process was killed (or
            // exited): the holder is gone, and a session lock with it. Its
            // belief ends where it began; otherwise it would run on to the
            // next event recorded for this dead incarnation, and a rival
            // granted in between would look like a second certain holder.
            run.recorder.record(
                stamp(&worker, incarnation, now),
                EventKind::BeliefEnd {
                    scope,
                    token,
                    reason: "the process had ended before its answer was read".to_string(),
                },
            );
        } else {
            belief.held = Some((scope, token));
        }
    }
}

pub(super) fn record_unknown(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    op_id: u64,
    reason: String,
    tally: &mut WorkerTally,
) {
    tally.unknowns += 1;
    complete(
        run,
        index,
        incarnation,
        op_id,
        Outcome::Unknown { reason },
        None,
    );
}

/// An `unknown` answer, or an answer that does not fit (e.g. `lost` cannot
/// answer): recorded unknown; true when the process must be replaced.
pub(super) fn unknown_or_misfit(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    op_id: u64,
    message: Message,
    tally: &mut WorkerTally,
) -> bool {
    let reason = match message {
        Message::Unknown { text, .. } => {
            text.unwrap_or_else(|| "the client could not tell".to_string())
        }
        other => format!("unexpected answer {other:?}"),
    };
    record_unknown(run, index, incarnation, op_id, reason, tally);
    true
}
