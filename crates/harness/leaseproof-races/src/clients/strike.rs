//! The injector: each strike of the plan aimed (at the holder, or at a
//! protocol moment), landed on its victim — signals, the proxies, the
//! servers — and reported as it acted, or as not struck with the reason.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use leaseproof_history::Annotation;
use sqlx::Connection as _;

use super::effects::{seen_gone, seen_stopped};
use super::moments::Offer;
use super::net::FaultProxy;
use super::plan::{FaultKind, FaultPlan, Moment, Strike, AIMED_ORDER};
use super::state::{end_incarnation, lock, micros, AimedWindow, Run, Slot};

/// Whoever holds the lock now, or first within `patience`: a strike meant
/// for the holder that lands between two holds (or while clients still
/// start) waits for the next one rather than hit a bystander.
pub(super) async fn holder_within(run: &Arc<Run>, patience: Duration) -> Option<usize> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Some(index) = run.holder_now() {
            return Some(index);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Strikes the plan; returns what struck and what could not act.
pub(super) async fn inject(run: Arc<Run>, plan: FaultPlan) -> (Vec<String>, Vec<String>) {
    let mut struck = Vec::new();
    let mut skipped = Vec::new();
    let mut handles = Vec::new();
    let start_us = run.start.at_us().await;
    for strike in plan.strikes {
        let due = start_us.saturating_add(micros(strike.at));
        let now = run.clock.elapsed_us();
        if due > now {
            tokio::time::sleep(Duration::from_micros(u64::try_from(due - now).unwrap_or(0))).await;
        }
        let run = Arc::clone(&run);
        // Lasting faults run beside the next strikes.
        handles.push(tokio::spawn(
            async move { strike_once(&run, &strike).await },
        ));
    }
    for handle in handles {
        match handle.await {
            Ok(Ok(done)) => struck.push(done),
            Ok(Err(problem)) => skipped.push(problem),
            Err(error) => skipped.push(format!("a strike panicked: {error}")),
        }
    }
    (struck, skipped)
}

/// Whom `strike` hits (the holder, for a holder-first strike that finds
/// one), and the line that says so.
pub(super) async fn aim(run: &Arc<Run>, strike: &Strike) -> (usize, String) {
    let looked_us = run.clock.elapsed_us();
    let holder = if strike.holder_first {
        // No later than the strike can still be over when the plan said.
        let over_by = run.config.duration * super::plan::STRIKES_OVER_BY_PERCENT as u32 / 100;
        let slack = over_by.saturating_sub(strike.at + strike.lasting);
        holder_within(run, run.config.ttl.min(slack)).await
    } else {
        None
    };
    let waited_ms = (run.clock.elapsed_us() - looked_us) / 1_000;
    let client = holder.unwrap_or(strike.client);
    let target = match (strike.kind, holder) {
        (FaultKind::RedisRestart, _) => String::new(),
        (_, Some(_)) => format!(" w{client} (the holder)"),
        (_, None) => format!(" w{client}"),
    };
    let planned_ms = strike.at.as_millis();
    // The time it landed first; the plan's time beside it when it waited.
    let when = if waited_ms > 0 {
        format!(
            "at {} ms (planned {planned_ms} ms; +{waited_ms} ms waiting for a holder)",
            planned_ms + waited_ms.unsigned_abs() as u128
        )
    } else {
        format!("at {planned_ms} ms")
    };
    let what = format!("{when}: {}{target}", strike.kind.name());
    (client, what)
}

/// Whom a strike aimed at a protocol moment hits: the client that reaches
/// the moment first from the strike's planned time on, waited for as long
/// as a strike may still wait (its share of the run, at least two TTLs: an
/// earlier strike may hold every client up that long); a moment that never
/// comes is a strike not struck, with the reason.
pub(super) async fn aim_at_moment(
    run: &Arc<Run>,
    strike: &Strike,
) -> Result<(usize, String, tokio::sync::oneshot::Sender<()>), String> {
    let looked_us = run.clock.elapsed_us();
    let over_by = run.config.duration * super::plan::STRIKES_OVER_BY_PERCENT as u32 / 100;
    let patience = over_by
        .saturating_sub(strike.at + strike.lasting)
        .max(run.config.ttl * 2);
    let planned_ms = strike.at.as_millis();
    let deadline = tokio::time::Instant::now() + patience;
    let Some(offer) = next_free_moment(run, strike.moment, deadline).await else {
        return Err(format!(
            "at {planned_ms} ms: {} the holder, {}: not struck, the moment did not come within {} ms{}",
            strike.kind.name(),
            strike.moment.describe(),
            patience.as_millis(),
            match run.aimed_at(run.clock.elapsed_us()) {
                Some(window) => format!(" ({} had the run to itself)", window.what),
                None => String::new(),
            }
        ));
    };
    let waited_ms = (run.clock.elapsed_us() - looked_us) / 1_000;
    let what = format!(
        "at {} ms (planned {planned_ms} ms; +{waited_ms} ms waiting): {} w{} (the holder, {})",
        planned_ms + waited_ms.unsigned_abs() as u128,
        strike.kind.name(),
        offer.client,
        strike.moment.describe()
    );
    Ok((offer.client, what, offer.onset))
}

/// The first `moment` that comes before `deadline` while the run is free
/// ([`Run::is_free`]: one that comes otherwise is let go); for
/// [`Moment::Holding`], whoever holds the lock as soon as the run is free,
/// else the next grant.
async fn next_free_moment(
    run: &Arc<Run>,
    moment: Moment,
    deadline: tokio::time::Instant,
) -> Option<Offer> {
    let waits_for = match moment {
        Moment::Holding => Moment::Granted,
        other => other,
    };
    let mut waiting = run.moments.wait_for(waits_for);
    loop {
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        if moment == Moment::Holding && run.is_free(run.clock.elapsed_us()) {
            if let Some(client) = run.holder_now() {
                // Nobody waits for the onset of a strike on a hold under way.
                let (onset, _) = tokio::sync::oneshot::channel();
                return Some(Offer { client, onset });
            }
        }
        tokio::select! {
            offer = &mut waiting => {
                if let Ok(offer) = offer {
                    if run.is_free(run.clock.elapsed_us()) {
                        return Some(offer);
                    }
                }
                // Let go (its onset dropped: the worker goes on).
                waiting = run.moments.wait_for(waits_for);
            }
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
}

/// A lasting fault under way, counted on the run while it lasts.
struct UnderWay<'a>(&'a Run);

impl<'a> UnderWay<'a> {
    fn begin(run: &'a Run) -> UnderWay<'a> {
        run.faults_under_way.fetch_add(1, Ordering::SeqCst);
        UnderWay(run)
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.0.faults_under_way.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes in flight a stall lets go by because nothing is known yet of the
/// statements its victim's writes take.
pub(super) const UNCOUNTED_WRITES_LET_GO: usize = 8;

/// The write in flight a stall takes: one of a client whose earlier writes
/// showed how many statements they take and whether they read, so the
/// stall can split it after its check — the others are let go, a few at
/// most.
pub(super) async fn aim_at_a_counted_write(
    run: &Arc<Run>,
    strike: &Strike,
) -> Result<(usize, String, tokio::sync::oneshot::Sender<()>), String> {
    for _ in 0..UNCOUNTED_WRITES_LET_GO {
        let aimed = aim_at_moment(run, strike).await?;
        if run.slots[aimed.0].write_statements.load(Ordering::SeqCst) > 0 {
            return Ok(aimed);
        }
    }
    aim_at_moment(run, strike).await
}

/// Aims `strike`, lands it and marks it on the timeline (on its victim's
/// lanes, at the moment it landed) when it acted.
pub(super) async fn strike_once(run: &Arc<Run>, strike: &Strike) -> Result<String, String> {
    let (client, what, onset) = if strike.moment == Moment::Clock {
        let (client, what) = aim(run, strike).await;
        if let Some(window) = run.aimed_at(run.clock.elapsed_us()) {
            return Err(format!(
                "{what}: not struck, {} has the run to itself until {} ms",
                window.what,
                window.until_ms(run).await
            ));
        }
        (client, what, None)
    } else {
        if strike.kind == FaultKind::PartitionLockStore && !has_a_lock_store(run) {
            return Err(format!(
                "at {} ms: {} the holder, {}: not struck, {NO_LOCK_STORE}",
                strike.at.as_millis(),
                strike.kind.name(),
                strike.moment.describe()
            ));
        }
        let (client, what, onset) = if strike.kind == FaultKind::StallAfterReply {
            aim_at_a_counted_write(run, strike).await?
        } else {
            aim_at_moment(run, strike).await?
        };
        (client, what, Some(onset))
    };
    let landed_us = run.clock.elapsed_us();
    let done = if strike.moment == Moment::Clock {
        land(run, strike, client, what, onset).await?
    } else {
        land_aimed(run, strike, client, what, onset).await?
    };
    lock(&run.marks).push(Annotation {
        true_time_us: landed_us,
        worker: (strike.kind != FaultKind::RedisRestart).then(|| format!("w{client}")),
        text: format!("struck {done}"),
    });
    Ok(done)
}

/// Lands a strike that took a protocol moment; one aimed at a design's
/// mechanism ([`AIMED_ORDER`]) with the run to itself for its fault and one
/// TTL after (a holder cut off, stalled or with its session ended writes
/// on, and a rival takes the lock, within that) — when it acts: a lasting
/// one claims the run as it begins (and gives it back if it could not act,
/// or finds it taken), an instant one once it acted.
async fn land_aimed(
    run: &Arc<Run>,
    strike: &Strike,
    client: usize,
    what: String,
    onset: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<String, String> {
    if !AIMED_ORDER.contains(&strike.kind) {
        return land(run, strike, client, what, onset).await;
    }
    let now_us = run.clock.elapsed_us();
    let window = AimedWindow {
        what: format!("the {} aimed at w{client}", strike.kind.name()),
        until_us: now_us + micros(strike.lasting + run.config.ttl),
    };
    if strike.lasting.is_zero() {
        let done = land(run, strike, client, what, onset).await?;
        // Acted: the run is its own from now on.
        *lock(&run.aimed) = Some(window);
        return Ok(done);
    }
    {
        let mut aimed = lock(&run.aimed);
        if let Some(first) = aimed.as_ref().filter(|first| now_us < first.until_us) {
            return Err(format!(
                "{what}: not struck, {} took the run first",
                first.what
            ));
        }
        *aimed = Some(window.clone());
    }
    let landed = land(run, strike, client, what, onset).await;
    if landed.is_err() {
        let mut aimed = lock(&run.aimed);
        if aimed.as_ref() == Some(&window) {
            *aimed = None;
        }
    }
    landed
}

/// Terminates the session holding `slot`'s advisory lock; its holder is
/// asked to work on for a TTL, as a holder whose session just ended behind
/// its back would: a design that does not notice writes on under the next
/// holder.
async fn terminate_lock_session(run: &Arc<Run>, slot: &Slot, what: &str) -> Result<(), String> {
    slot.work_until_us.fetch_max(
        run.clock.elapsed_us() + micros(run.config.ttl),
        Ordering::SeqCst,
    );
    terminate_backends(run, slot, Backends::HoldingAdvisoryLock, what).await
}

/// Why a lock-store partition cannot act on a design.
const NO_LOCK_STORE: &str =
    "the client has no connection to a lock store of its own (its lock lives in its work store)";

/// Whether any client ever reached a lock store of its own (through a
/// proxy beside the work store's): else a lock-store partition waits for no
/// moment.
fn has_a_lock_store(run: &Run) -> bool {
    run.slots
        .iter()
        .any(|slot| slot.proxies[1..].iter().any(FaultProxy::ever_connected))
}

/// Does what `strike` does to `client`; `what` names it. `onset`, when the
/// strike took a moment, is dropped as soon as the fault has begun (a
/// worker held at its grant goes on then).
pub(super) async fn land(
    run: &Arc<Run>,
    strike: &Strike,
    client: usize,
    what: String,
    mut onset: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<String, String> {
    let _under_way = (!strike.lasting.is_zero()).then(|| UnderWay::begin(run));
    let slot = &run.slots[client];
    let signal = |name: &str| {
        let pgid = slot.pgid.load(Ordering::SeqCst);
        pgid != 0
            && std::process::Command::new("kill")
                .args([&format!("-{name}"), "--", &format!("-{pgid}")])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
    };
    match strike.kind {
        FaultKind::PauseShort | FaultKind::PauseLong => {
            let pgid = slot.pgid.load(Ordering::SeqCst) as u32;
            let already_paused = {
                let mut pauses = lock(&slot.pauses);
                if pauses.0 != pgid {
                    *pauses = (pgid, 0);
                }
                pauses.1 += 1;
                pauses.1 > 1
            };
            let resume = || {
                let mut pauses = lock(&slot.pauses);
                if pauses.0 == pgid {
                    pauses.1 = pauses.1.saturating_sub(1);
                }
                pauses.1 == 0 || pauses.0 != pgid
            };
            if !already_paused && !signal("STOP") {
                resume();
                return Err(format!("{what}: no process"));
            }
            drop(onset.take());
            if !already_paused && seen_stopped(pgid, Duration::from_secs(1)).await {
                lock(&run.process_effects).processes_stopped += 1;
            }
            tokio::time::sleep(strike.lasting).await;
            // The last pause to end resumes the process: an earlier one's
            // end must not cut a longer one short.
            if resume() {
                signal("CONT");
            }
            if already_paused {
                return Ok(format!(
                    "{what} (already paused: the pause lasts until this one ends too)"
                ));
            }
        }
        FaultKind::Kill => {
            // The worker sees its request die, records it unknown and starts
            // the next incarnation; the holder's belief (and a session lock's
            // certain hold) ends now, not when a request finds out.
            let pgid = slot.pgid.load(Ordering::SeqCst) as u32;
            if !signal("KILL") {
                return Err(format!("{what}: no process"));
            }
            drop(onset.take());
            end_incarnation(run, client, None, "killed");
            if seen_gone(pgid, Duration::from_secs(2)).await {
                lock(&run.process_effects).processes_killed += 1;
            }
        }
        FaultKind::Partition => {
            for proxy in &slot.proxies {
                proxy.set_partitioned(true);
            }
            drop(onset.take());
            tokio::time::sleep(strike.lasting).await;
            for proxy in &slot.proxies {
                proxy.set_partitioned(false);
            }
        }
        FaultKind::LoseReply => {
            for proxy in &slot.proxies {
                proxy.lose_next_reply();
            }
        }
        FaultKind::Reset => {
            for proxy in &slot.proxies {
                proxy.reset_all();
            }
        }
        FaultKind::Latency => {
            for proxy in &slot.proxies {
                proxy.set_latency(Duration::from_millis(200));
            }
            drop(onset.take());
            tokio::time::sleep(strike.lasting).await;
            for proxy in &slot.proxies {
                proxy.set_latency(Duration::ZERO);
            }
        }
        FaultKind::TerminateBackends => terminate_backends(run, slot, Backends::All, &what).await?,
        FaultKind::TerminateLockSession => terminate_lock_session(run, slot, &what).await?,
        FaultKind::StallAfterReply => {
            let in_flight = onset.take();
            stall_the_write(run, slot, strike, in_flight, &what).await?
        }
        FaultKind::RedisRestart => restart_redis(run, &what).await?,
        FaultKind::PartitionLockStore => {
            partition_lock_store(run, slot, strike.lasting, onset.take(), &what).await?
        }
        FaultKind::ClockSkew => {}
    }
    Ok(what)
}

/// Cuts `slot`'s client off from its lock store (every proxy but the work
/// store's) for `lasting`, its work store still reachable, and asks its
/// holder to work on until the heal. A client whose lock lives in its work
/// store (no connection through a lock store's proxy) is not struck.
pub(super) async fn partition_lock_store(
    run: &Arc<Run>,
    slot: &Slot,
    lasting: Duration,
    onset: Option<tokio::sync::oneshot::Sender<()>>,
    what: &str,
) -> Result<(), String> {
    let lock_stores = &slot.proxies[1..];
    if lock_stores
        .iter()
        .all(|proxy| proxy.upstream_ports().is_empty())
    {
        return Err(format!("{what}: not struck, {NO_LOCK_STORE}"));
    }
    slot.work_until_us
        .store(run.clock.elapsed_us() + micros(lasting), Ordering::SeqCst);
    for proxy in lock_stores {
        proxy.set_partitioned(true);
    }
    drop(onset);
    tokio::time::sleep(lasting).await;
    for proxy in lock_stores {
        proxy.set_partitioned(false);
    }
    Ok(())
}

/// Arms the work store's proxy (PostgreSQL's, the first: the write in
/// flight goes there, and a lock store's would stall at whatever reply came
/// next) and waits until the stall began — or the write was answered first
/// (fewer completed statements than drawn), which is no strike.
pub(super) async fn stall_the_write(
    run: &Arc<Run>,
    slot: &Slot,
    strike: &Strike,
    in_flight: Option<tokio::sync::oneshot::Sender<()>>,
    what: &str,
) -> Result<(), String> {
    let proxy = &slot.proxies[0];
    let begun_before = proxy.stalls_begun();
    // Split at one of the gaps the client's writes have: after the k-th of
    // their statements but never after the last (that would stall the next
    // request, not this one).
    let statements = slot.write_statements.load(Ordering::SeqCst);
    if statements == 1 {
        return Err(format!(
            "{what}: not struck, the client's writes are one statement each: nothing to split"
        ));
    }
    // Right after the check, when the client's writes read (a check may
    // come after a `BEGIN`, and a fence on a connection of its own gives its
    // row lock back at once); else at the drawn gap.
    // `None`: after the first read.
    let replies = if slot.write_reads.load(Ordering::SeqCst) > 0 {
        proxy.stall_after_first_read(strike.lasting);
        None
    } else {
        let replies = match u32::try_from(statements.saturating_sub(1)).unwrap_or(u32::MAX) {
            0 => strike.replies_before_stall,
            gaps => 1 + (strike.replies_before_stall - 1) % gaps,
        };
        proxy.stall_after_replies(replies, strike.lasting);
        Some(replies)
    };
    // The worker drops the other end once the write is answered.
    let answered = || in_flight.as_ref().is_some_and(|onset| onset.is_closed());
    let begun = || proxy.stalls_begun() != begun_before;
    let deadline = tokio::time::Instant::now() + run.config.request_timeout();
    loop {
        if begun() {
            return Ok(());
        }
        let why = if answered() || !proxy.stall_armed() {
            match replies {
                None => "the write was answered before it read".to_string(),
                Some(replies) => {
                    format!("the write was answered before {replies} completed statement(s)")
                }
            }
        } else if tokio::time::Instant::now() >= deadline {
            "the write never completed a statement".to_string()
        } else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        proxy.disarm_stall();
        // It may have begun in the meantime: then it struck.
        return if begun() {
            Ok(())
        } else {
            Err(format!("{what}: not struck, {why}"))
        };
    }
}

/// Which of a client's PostgreSQL sessions a termination ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Backends {
    /// Every one.
    All,
    /// Only those holding an advisory lock (`pg_locks`): the lock session.
    HoldingAdvisoryLock,
}

/// `pg_terminate_backend` of the client's PostgreSQL sessions (`which`),
/// counted once the server no longer lists them.
pub(super) async fn terminate_backends(
    run: &Arc<Run>,
    slot: &Slot,
    which: Backends,
    what: &str,
) -> Result<(), String> {
    let ports: Vec<i32> = slot.proxies[0]
        .upstream_ports()
        .into_iter()
        .map(i32::from)
        .collect();
    let mut admin = sqlx::PgConnection::connect_with(
        &run.database_url
            .parse::<sqlx::postgres::PgConnectOptions>()
            .map_err(|error| format!("{what}: {error}"))?,
    )
    .await
    .map_err(|error| format!("{what}: {error}"))?;
    let query = match which {
        Backends::All => {
            "SELECT pid FROM pg_stat_activity \
             WHERE client_port = ANY($1) AND pid <> pg_backend_pid()"
        }
        Backends::HoldingAdvisoryLock => {
            "SELECT DISTINCT a.pid FROM pg_stat_activity a \
             JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted \
             WHERE a.client_port = ANY($1) AND a.pid <> pg_backend_pid()"
        }
    };
    let backends: Vec<i32> = sqlx::query_scalar(query)
        .bind(&ports)
        .fetch_all(&mut admin)
        .await
        .map_err(|error| format!("{what}: {error}"))?;
    if backends.is_empty() {
        return Err(match which {
            Backends::All => format!("{what}: no backend of the client"),
            Backends::HoldingAdvisoryLock => format!(
                "{what}: no session of the client holds an advisory lock (its lock lives elsewhere)"
            ),
        });
    }
    sqlx::query("SELECT pg_terminate_backend(pid) FROM unnest($1::int4[]) AS pid")
        .bind(&backends)
        .execute(&mut admin)
        .await
        .map_err(|error| format!("{what}: {error}"))?;
    // Counted once the server no longer lists them: terminated, not
    // merely asked to be (a cancelled query would leave them there).
    for _ in 0..100 {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
                .bind(&backends)
                .fetch_one(&mut admin)
                .await
                .map_err(|error| format!("{what}: {error}"))?;
        if left == 0 {
            lock(&run.process_effects).backends_terminated += backends.len() as u64;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Kills and restarts the run's Redis, counted when another process answers.
pub(super) async fn restart_redis(run: &Arc<Run>, what: &str) -> Result<(), String> {
    let Some(redis) = run.redis.clone() else {
        return Err(format!("{what}: no Redis in this run"));
    };
    let (before, after) = tokio::task::spawn_blocking(move || {
        let mut server = lock(&redis);
        let before = server.pid();
        server.restart().map(|()| (before, server.pid()))
    })
    .await
    .map_err(|error| format!("{what}: {error}"))?
    .map_err(|error| format!("{what}: {error}"))?;
    if after.is_some() && after != before {
        lock(&run.process_effects).redis_restarts += 1;
    }
    Ok(())
}
