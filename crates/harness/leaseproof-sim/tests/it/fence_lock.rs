//! Goal: the simulated database's fence really locks the lease row, as
//! `SELECT … FOR UPDATE` does in PostgreSQL. Method: the simulation twin of
//! the PostgreSQL conformance check `takeover_finishes_before_commit` — a
//! holder fences in an open transaction, its lease expires, a rival's acquire
//! must wait for the holder's `COMMIT` and only then be granted the next token.
//! Invariant: a takeover never completes while a fenced transaction is open.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use leaseproof_protocol::semantics::Acquisition;
use leaseproof_protocol::{Lease, Owner, Scope, Ttl};
use leaseproof_sim::db::{self, DbConfig, Durable, DB_HOST};
use leaseproof_sim::wire::{ClientMessage, Request, Response};
use leaseproof_sim::{FaultPlan, Scenario, Trace};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use turmoil::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

struct Session {
    client: String,
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl Session {
    async fn open(client: &str) -> Session {
        let (read, write) = db::connect().await.expect("the db accepts").into_split();
        Session {
            client: client.to_string(),
            lines: BufReader::new(read).lines(),
            write,
        }
    }

    async fn send(&mut self, request: Request) {
        let message = ClientMessage {
            client: self.client.clone(),
            request,
        };
        let mut text = serde_json::to_string(&message).expect("requests serialise");
        text.push('\n');
        self.write
            .write_all(text.as_bytes())
            .await
            .expect("the send succeeds");
    }

    async fn receive(&mut self) -> Response {
        let line = self
            .lines
            .next_line()
            .await
            .expect("the read succeeds")
            .expect("the db replies");
        serde_json::from_str(&line).expect("well-formed reply")
    }

    async fn call(&mut self, request: Request) -> Response {
        self.send(request).await;
        self.receive().await
    }
}

/// Hosts the simulated database (no lost replies, fast schema creation, a
/// minute before an idle transaction is ended) on `sim`; returns its trace.
fn host_db(sim: &mut turmoil::Sim<'_>, seed: u64, server_offset_us: i64, traced: bool) -> Trace {
    let scenario = Scenario::load("gc-pause").expect("the scenario loads");
    let trace = Trace::new(traced, &FaultPlan::draw(&scenario, seed));
    let server_trace = trace.clone();
    let durable = Rc::new(RefCell::new(Durable::new(seed)));
    let config = DbConfig {
        server_offset_us,
        lost_reply_probability: 0.0,
        schema_create: Duration::from_millis(1),
        idle_in_transaction_timeout: Duration::from_secs(60),
        fence_without_lock: false,
        clock_follows_client: false,
        advisory_shared: false,
        terminations: None,
    };
    sim.host(DB_HOST, move || {
        db::serve(Rc::clone(&durable), config.clone(), server_trace.clone())
    });
    trace
}

fn granted(response: Response) -> Lease {
    match response {
        Response::Acquired(Acquisition::Granted { lease, .. }) => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// What the client observed, in server time (µs).
#[derive(Debug, Default)]
struct Observed {
    holder: Option<Lease>,
    rival_sent_at_us: i64,
    rival_replied_before_commit: bool,
    committed_at_us: i64,
    rival: Option<Lease>,
}

#[test]
fn fence_makes_rival_takeover_wait_for_the_commit() {
    let server_offset_us: i64 = 0;
    let mut sim = turmoil::Builder::new()
        .rng_seed(7)
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .simulation_duration(Duration::from_secs(30))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(2))
        .build();
    let trace = host_db(&mut sim, 7, server_offset_us, true);

    let observed = Rc::new(RefCell::new(Observed::default()));
    let record = Rc::clone(&observed);
    sim.client("client", async move {
        let server_now_us = || {
            turmoil::sim_elapsed().expect("in a simulation").as_micros() as i64 + server_offset_us
        };
        let scope = Scope::new("job").expect("valid");
        let mut holder_session = Session::open("a").await;
        assert!(matches!(
            holder_session.call(Request::EnsureSchema).await,
            Response::SchemaReady
        ));
        let holder = granted(
            holder_session
                .call(Request::Acquire {
                    scope: scope.clone(),
                    owner: Owner::new("a").expect("valid"),
                    ttl: Ttl::from_millis(300).expect("valid"),
                })
                .await,
        );
        assert!(matches!(
            holder_session.call(Request::Begin).await,
            Response::Begun(_)
        ));
        let fenced = holder_session
            .call(Request::Fence {
                lease: holder.clone(),
            })
            .await;
        assert!(
            matches!(fenced, Response::Fenced(Some(_))),
            "the fence refused a live lease: {fenced:?}"
        );
        // Past expiry, the transaction still open.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(server_now_us() > holder.expires_at().micros);

        let mut rival_session = Session::open("b").await;
        let rival_sent_at_us = server_now_us();
        rival_session
            .send(Request::Acquire {
                scope: scope.clone(),
                owner: Owner::new("b").expect("valid"),
                ttl: Ttl::from_millis(60_000).expect("valid"),
            })
            .await;
        // `Lines::next_line` is cancel-safe: the reply, if any, is not lost.
        let early =
            tokio::time::timeout(Duration::from_millis(500), rival_session.lines.next_line()).await;
        let rival_replied_before_commit = early.is_ok();

        let committed = holder_session.call(Request::Commit).await;
        assert!(
            matches!(committed, Response::Committed { .. }),
            "{committed:?}"
        );
        let committed_at_us = server_now_us();
        let rival = if rival_replied_before_commit {
            None
        } else {
            Some(granted(rival_session.receive().await))
        };
        *record.borrow_mut() = Observed {
            holder: Some(holder),
            rival_sent_at_us,
            rival_replied_before_commit,
            committed_at_us,
            rival,
        };
        Ok(())
    });
    sim.run().expect("the simulation runs");

    let observed = observed.borrow();
    assert!(
        !observed.rival_replied_before_commit,
        "the rival's takeover finished while the fenced transaction was open: {observed:?}"
    );
    let holder = observed.holder.as_ref().expect("recorded");
    let rival = observed.rival.as_ref().expect("granted after the commit");
    assert_eq!(rival.token(), holder.token().next(), "{observed:?}");
    assert!(rival.granted_at() >= holder.expires_at(), "{observed:?}");
    // Like PostgreSQL's `now()`, the waiting statement keeps its start time:
    // the grant is dated when the acquire arrived, not when the lock freed.
    assert!(
        rival.granted_at().micros >= observed.rival_sent_at_us,
        "{observed:?}"
    );
    assert!(
        rival.granted_at().micros < observed.committed_at_us,
        "{observed:?}"
    );
    // The trace says why the rival's reply came late, once.
    let lines = trace.take_lines();
    let waits: Vec<&String> = lines
        .iter()
        .map(|(_, line)| line)
        .filter(|line| line.contains("waits for the row lock of job held by"))
        .collect();
    assert_eq!(waits.len(), 1, "{waits:?}");
}

/// A session that holds the row lock may change its own row, as PostgreSQL
/// lets a transaction update a row it locked: the holder renews inside its
/// fenced transaction and is answered at once, not queued behind itself.
#[test]
fn a_fence_holder_renews_its_own_row_inside_its_transaction() {
    let mut sim = turmoil::Builder::new()
        .rng_seed(8)
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .simulation_duration(Duration::from_secs(30))
        .tick_duration(Duration::from_millis(1))
        .build();
    host_db(&mut sim, 8, 0, false);
    sim.client("client", async move {
        let scope = Scope::new("job").expect("valid");
        let mut session = Session::open("a").await;
        assert!(matches!(
            session.call(Request::EnsureSchema).await,
            Response::SchemaReady
        ));
        let lease = granted(
            session
                .call(Request::Acquire {
                    scope,
                    owner: Owner::new("a").expect("valid"),
                    ttl: Ttl::from_millis(300).expect("valid"),
                })
                .await,
        );
        assert!(matches!(
            session.call(Request::Begin).await,
            Response::Begun(_)
        ));
        assert!(matches!(
            session
                .call(Request::Fence {
                    lease: lease.clone()
                })
                .await,
            Response::Fenced(Some(_))
        ));
        let renew = session.call(Request::Renew {
            lease: lease.clone(),
            ttl: Ttl::from_millis(600).expect("valid"),
        });
        let renewed = tokio::time::timeout(Duration::from_secs(5), renew)
            .await
            .expect("the lock holder is not queued behind its own lock");
        let Response::Renewed(Some(renewed)) = renewed else {
            panic!("the holder's renewal was refused: {renewed:?}");
        };
        assert_eq!(renewed.token(), lease.token());
        assert!(matches!(
            session.call(Request::Commit).await,
            Response::Committed { .. }
        ));
        Ok(())
    });
    sim.run().expect("the simulation runs");
}
