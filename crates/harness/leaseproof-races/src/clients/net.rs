//! A loopback TCP proxy between one client process and one store, with
//! network faults on command.
//!
//! Goal: the faults a network does to a lock client — a partition, a lost
//! reply, a reset, latency — for any protocol (PostgreSQL, Redis, anything
//! on TCP), without touching the client. Method: each accepted connection
//! gets an upstream connection and two pumps; a pump consults the shared
//! state before forwarding each chunk:
//! - *partition*: forwarding stops in both directions (bytes wait in the
//!   kernel, as packets wait in retransmission) and new connections wait
//!   for the heal; when it heals, everything flows on, nothing is lost;
//! - *lose a reply*: the next chunk from the store is dropped and the
//!   connection is reset — the store did the work, the client never hears;
//! - *reset*: every open connection is closed with a TCP reset, and the
//!   store sees its session end;
//! - *latency*: each chunk waits that long;
//! - *stall after a reply*: the store's next reply passes, then whatever the
//!   client sends waits that long — a request of two statements is split
//!   between them, as a check-then-act design's gap widened past a TTL. In
//!   front of PostgreSQL ([`FaultProxy::start_postgres`]) the reply is the
//!   next one that completed a statement (`CommandComplete`), or the next
//!   one that completed a read (a `SELECT`: the check): a prepare round
//!   (parse, describe) passes without starting the stall.
//!
//! The proxy remembers the local port of each upstream connection, so a
//! PostgreSQL backend can be told apart by `pg_stat_activity.client_port`
//! (backend termination of one client's sessions).
//! Invariant: loopback only; a byte is forwarded unchanged or not at all;
//! every task ends when the proxy is dropped.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often a paused pump looks again.
const POLL: Duration = Duration::from_millis(5);

#[derive(Debug)]
struct State {
    partitioned: AtomicBool,
    lose_next_reply: AtomicBool,
    latency_ms: AtomicU64,
    /// Bumped by a reset: every connection older than the bump closes.
    resets: watch::Sender<u64>,
    /// Local ports of the live upstream connections.
    upstream_ports: Mutex<BTreeSet<u16>>,
    /// Upstream connections ever made.
    connections_made: AtomicU64,
    replies_lost: AtomicU64,
    /// Connections and chunks a partition held back.
    partition_holds: AtomicU64,
    /// Chunks delayed by the latency fault.
    delayed_chunks: AtomicU64,
    /// Connections closed by a reset.
    connections_reset: AtomicU64,
    /// Armed: after which reply the client's chunks wait, and how long.
    stall_armed: Mutex<Option<(StallAt, Duration)>>,
    /// Until when the client's chunks wait (a stall begun by a reply).
    stalled_until: Mutex<Option<tokio::time::Instant>>,
    /// Chunks of the client's a stall held back.
    stalled_chunks: AtomicU64,
    /// Stalls begun.
    stalls_begun: AtomicU64,
    /// Replies that completed a statement (every reply, but in front of
    /// PostgreSQL).
    replies_completing: AtomicU64,
    /// Replies that completed a read (a `SELECT`), in front of PostgreSQL.
    replies_reading: AtomicU64,
    /// The store is PostgreSQL: its messages are followed per connection.
    postgres: bool,
}

/// After which reply an armed stall begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StallAt {
    /// After this many more replies that complete a statement.
    Replies(u32),
    /// After the next reply that completes a read: a check.
    FirstRead,
}

/// What a reply from the store completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Completed {
    /// A statement (every reply, but in front of PostgreSQL).
    statement: bool,
    /// A read: a statement whose tag is `SELECT`.
    read: bool,
}

/// What a proxy's faults did, counted: a strike that acted on nothing
/// leaves its count at zero, so a run can tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyEffects {
    /// Replies dropped (lose-reply).
    pub replies_dropped: u64,
    /// Connections and chunks a partition held back.
    pub partition_holds: u64,
    /// Chunks delayed (latency).
    pub delayed_chunks: u64,
    /// Connections closed by a reset.
    pub connections_reset: u64,
    /// Chunks of the client's held back after a reply (stall-after-reply).
    pub stalled_chunks: u64,
}

impl ProxyEffects {
    /// Adds `other`'s counts to these.
    pub fn absorb(&mut self, other: ProxyEffects) {
        self.replies_dropped += other.replies_dropped;
        self.partition_holds += other.partition_holds;
        self.delayed_chunks += other.delayed_chunks;
        self.connections_reset += other.connections_reset;
        self.stalled_chunks += other.stalled_chunks;
    }
}

/// The proxy; accepting and forwarding stop when it is dropped.
#[derive(Debug)]
pub struct FaultProxy {
    local_addr: SocketAddr,
    state: Arc<State>,
    accept_task: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
        // Pumps watch the reset channel: a final bump closes them all.
        self.state.resets.send_modify(|resets| *resets += 1);
    }
}

impl FaultProxy {
    /// Starts forwarding from a free loopback port to `upstream` (loopback).
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        FaultProxy::start_for(upstream, false).await
    }

    /// [`FaultProxy::start`] in front of PostgreSQL: a stall after a reply
    /// waits for a reply that completed a statement.
    pub async fn start_postgres(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        FaultProxy::start_for(upstream, true).await
    }

    async fn start_for(upstream: SocketAddr, postgres: bool) -> std::io::Result<FaultProxy> {
        assert!(
            upstream.ip().is_loopback(),
            "the proxy only forwards to loopback"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local_addr = listener.local_addr()?;
        let (resets, _) = watch::channel(0);
        let state = Arc::new(State {
            partitioned: AtomicBool::new(false),
            lose_next_reply: AtomicBool::new(false),
            latency_ms: AtomicU64::new(0),
            resets,
            upstream_ports: Mutex::new(BTreeSet::new()),
            connections_made: AtomicU64::new(0),
            replies_lost: AtomicU64::new(0),
            partition_holds: AtomicU64::new(0),
            delayed_chunks: AtomicU64::new(0),
            connections_reset: AtomicU64::new(0),
            stall_armed: Mutex::new(None),
            stalled_until: Mutex::new(None),
            stalled_chunks: AtomicU64::new(0),
            stalls_begun: AtomicU64::new(0),
            replies_completing: AtomicU64::new(0),
            replies_reading: AtomicU64::new(0),
            postgres,
        });
        let accept_state = Arc::clone(&state);
        let accept_task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, upstream, Arc::clone(&accept_state)));
            }
        });
        Ok(FaultProxy {
            local_addr,
            state,
            accept_task,
        })
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Starts or heals a partition.
    pub fn set_partitioned(&self, partitioned: bool) {
        self.state.partitioned.store(partitioned, Ordering::SeqCst);
    }

    /// The next chunk the store sends is dropped and its connection reset.
    pub fn lose_next_reply(&self) {
        self.state.lose_next_reply.store(true, Ordering::SeqCst);
    }

    /// Delays every chunk by `latency` (zero: none).
    pub fn set_latency(&self, latency: Duration) {
        let latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        self.state.latency_ms.store(latency_ms, Ordering::SeqCst);
    }

    /// The store's next `replies` replies pass (each one that completed a
    /// statement, in front of PostgreSQL); then what the client sends waits
    /// `lasting` (on every connection).
    pub fn stall_after_replies(&self, replies: u32, lasting: Duration) {
        assert!(replies >= 1, "a stall begins after a reply");
        *lock(&self.state.stall_armed) = Some((StallAt::Replies(replies), lasting));
    }

    /// The store's replies pass up to the next one that completed a read (a
    /// `SELECT`: a check, in front of PostgreSQL); then what the client
    /// sends waits `lasting` (on every connection).
    pub fn stall_after_first_read(&self, lasting: Duration) {
        *lock(&self.state.stall_armed) = Some((StallAt::FirstRead, lasting));
    }

    /// Takes back an armed stall that has not begun (the request it was
    /// meant to split was answered first).
    pub fn disarm_stall(&self) {
        *lock(&self.state.stall_armed) = None;
    }

    /// Whether a stall is armed and has not begun.
    pub fn stall_armed(&self) -> bool {
        lock(&self.state.stall_armed).is_some()
    }

    /// How many replies completed a statement so far (every reply, but in
    /// front of PostgreSQL).
    pub fn replies_completing(&self) -> u64 {
        self.state.replies_completing.load(Ordering::SeqCst)
    }

    /// How many replies completed a read so far (in front of PostgreSQL).
    pub fn replies_reading(&self) -> u64 {
        self.state.replies_reading.load(Ordering::SeqCst)
    }

    /// How many stalls have begun.
    pub fn stalls_begun(&self) -> u64 {
        self.state.stalls_begun.load(Ordering::SeqCst)
    }

    /// Closes every open connection with a TCP reset.
    pub fn reset_all(&self) {
        self.state.resets.send_modify(|resets| *resets += 1);
    }

    /// Local ports of the open upstream connections.
    pub fn upstream_ports(&self) -> Vec<u16> {
        lock(&self.state.upstream_ports).iter().copied().collect()
    }

    /// Whether a client ever connected to the store through this proxy.
    pub fn ever_connected(&self) -> bool {
        self.state.connections_made.load(Ordering::SeqCst) > 0
    }

    /// What the faults did so far.
    pub fn effects(&self) -> ProxyEffects {
        let state = &self.state;
        ProxyEffects {
            replies_dropped: state.replies_lost.load(Ordering::SeqCst),
            partition_holds: state.partition_holds.load(Ordering::SeqCst),
            delayed_chunks: state.delayed_chunks.load(Ordering::SeqCst),
            connections_reset: state.connections_reset.load(Ordering::SeqCst),
            stalled_chunks: state.stalled_chunks.load(Ordering::SeqCst),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn serve(client: TcpStream, upstream: SocketAddr, state: Arc<State>) {
    // A partition holds new connections too, until it heals.
    wait_out_partition(&state).await;
    let mut resets = state.resets.subscribe();
    resets.mark_unchanged();
    let Ok(server) = TcpStream::connect(upstream).await else {
        return; // the store is down: the client sees its connection close
    };
    state.connections_made.fetch_add(1, Ordering::SeqCst);
    let port = server.local_addr().map(|addr| addr.port()).ok();
    if let Some(port) = port {
        lock(&state.upstream_ports).insert(port);
    }
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let to_server = pump(&mut client_read, &mut server_write, &state, false);
    let to_client = pump(&mut server_read, &mut client_write, &state, true);
    tokio::select! {
        _ = to_server => {}
        _ = to_client => {}
        _ = resets.changed() => {
            state.connections_reset.fetch_add(1, Ordering::SeqCst);
        }
    }
    if let Some(port) = port {
        lock(&state.upstream_ports).remove(&port);
    }
    // Reunite and reset both sides: the store sees its session end at once.
    // A zero linger never blocks: it makes the close a reset.
    #[allow(deprecated)]
    if let (Ok(client), Ok(server)) = (
        client_read.reunite(client_write),
        server_read.reunite(server_write),
    ) {
        let _ = client.set_linger(Some(Duration::ZERO));
        let _ = server.set_linger(Some(Duration::ZERO));
    }
}

/// Holds whatever is passing until the partition heals, counting it.
async fn wait_out_partition(state: &State) {
    if state.partitioned.load(Ordering::SeqCst) {
        state.partition_holds.fetch_add(1, Ordering::SeqCst);
    }
    while state.partitioned.load(Ordering::SeqCst) {
        tokio::time::sleep(POLL).await;
    }
}

/// Forwards chunks until either side closes or a reply is lost.
async fn pump(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    state: &State,
    from_store: bool,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    let mut framing = (from_store && state.postgres).then(Framing::default);
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        wait_out_partition(state).await;
        if from_store && state.lose_next_reply.swap(false, Ordering::SeqCst) {
            state.replies_lost.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let latency_ms = state.latency_ms.load(Ordering::SeqCst);
        if latency_ms > 0 {
            state.delayed_chunks.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(latency_ms)).await;
        }
        if from_store {
            let completed = framing.as_mut().map_or(
                Completed {
                    statement: true,
                    read: false,
                },
                |framing| framing.completed(&buffer[..read]),
            );
            // Begun as the reply leaves: nothing the client sends after
            // reading it can pass first.
            if completed.statement {
                state.replies_completing.fetch_add(1, Ordering::SeqCst);
                if completed.read {
                    state.replies_reading.fetch_add(1, Ordering::SeqCst);
                }
                start_armed_stall(state, completed);
            }
        } else {
            wait_out_stall(state).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// PostgreSQL's backend messages on one connection, followed across chunks
/// (a type byte, then a length that counts itself), to tell a reply that
/// completed a statement from a prepare round. A stream it cannot follow
/// (TLS, or a length no message has) counts every chunk as a completion.
#[derive(Debug, Default)]
struct Framing {
    /// The bytes of a message not whole yet.
    carry: Vec<u8>,
    /// The connection's first byte was seen (an SSL answer, `N`, precedes
    /// the messages when the client asked for TLS and was refused).
    started: bool,
    /// The stream cannot be followed.
    lost: bool,
}

impl Framing {
    /// Takes the next chunk from the server: whether a `CommandComplete`
    /// ended in it, and one of a read.
    fn completed(&mut self, chunk: &[u8]) -> Completed {
        let every = Completed {
            statement: true,
            read: false,
        };
        let mut chunk = chunk;
        if !self.started {
            self.started = true;
            match chunk.first() {
                Some(b'N') => chunk = &chunk[1..],
                Some(b'S') => self.lost = true,
                _ => {}
            }
        }
        if self.lost {
            return every;
        }
        self.carry.extend_from_slice(chunk);
        let (mut position, mut completed) = (0, Completed::default());
        while let Some(header) = self.carry.get(position..position + 5) {
            let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
            if length < 4 {
                self.lost = true;
                self.carry.clear();
                return every;
            }
            let end = position + 1 + length;
            if self.carry.len() < end {
                break;
            }
            if header[0] == b'C' {
                completed.statement = true;
                completed.read |= self.carry[position + 5..end].starts_with(b"SELECT");
            }
            position = end;
        }
        self.carry.drain(..position);
        completed
    }
}

/// A reply passed: an armed stall begins now.
fn start_armed_stall(state: &State, completed: Completed) {
    let mut armed = lock(&state.stall_armed);
    let Some((at, lasting)) = armed.as_mut() else {
        return;
    };
    let begins = match at {
        StallAt::Replies(replies) => {
            *replies -= 1;
            *replies == 0
        }
        StallAt::FirstRead => completed.read,
    };
    if begins {
        let until = tokio::time::Instant::now() + *lasting;
        *armed = None;
        *lock(&state.stalled_until) = Some(until);
        state.stalls_begun.fetch_add(1, Ordering::SeqCst);
    }
}

/// Holds a chunk of the client's until a stall begun by a reply is over.
async fn wait_out_stall(state: &State) {
    let until = *lock(&state.stalled_until);
    if let Some(until) = until.filter(|until| *until > tokio::time::Instant::now()) {
        state.stalled_chunks.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep_until(until).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0_u8; 64];
                    while let Ok(read) = socket.read(&mut buffer).await {
                        if read == 0 || socket.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(socket: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        socket.write_all(text).await?;
        let mut buffer = vec![0_u8; text.len()];
        socket.read_exact(&mut buffer).await?;
        Ok(buffer)
    }

    /// A backend message: its type, its length (counting itself), its body.
    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn framing_tells_a_completed_statement_from_a_prepare_round_across_chunks() {
        let mut framing = Framing::default();
        // The refused SSL answer, authentication, ready.
        let mut start = b"N".to_vec();
        start.extend(message(b'R', &[0, 0, 0, 0]));
        start.extend(message(b'Z', b"I"));
        assert_eq!(framing.completed(&start), Completed::default());
        // A prepare round: parse complete, parameters, rows described, ready.
        let mut prepare = message(b'1', b"");
        prepare.extend(message(b't', &[0, 0]));
        prepare.extend(message(b'T', &[0, 0]));
        prepare.extend(message(b'Z', b"I"));
        assert_eq!(framing.completed(&prepare), Completed::default());
        // An execution, split mid-message: complete only once whole.
        let mut execute = message(b'2', b"");
        execute.extend(message(b'C', b"SELECT 1\0"));
        execute.extend(message(b'Z', b"I"));
        let (first, second) = execute.split_at(8);
        assert_eq!(framing.completed(first), Completed::default());
        let read = Completed {
            statement: true,
            read: true,
        };
        assert_eq!(framing.completed(second), read);
        let mut insert = message(b'C', b"INSERT 0 1\0");
        insert.extend(message(b'Z', b"T"));
        let written = Completed {
            statement: true,
            read: false,
        };
        assert_eq!(framing.completed(&insert), written);
        assert!(framing.carry.is_empty());
        // A stream it cannot follow counts every chunk.
        let mut tls = Framing::default();
        assert!(tls.completed(b"S").statement);
        assert!(tls.completed(&[0x16, 3, 1]).statement);
        let mut garbage = Framing::default();
        assert!(garbage.completed(&[b'X', 0, 0, 0, 1]).statement);
        assert!(garbage.lost);
    }

    #[tokio::test]
    async fn bytes_pass_a_partition_waits_and_heals_a_lost_reply_resets() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut socket = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert_eq!(round_trip(&mut socket, b"ping").await.unwrap(), b"ping");
        assert_eq!(proxy.upstream_ports().len(), 1);

        proxy.set_partitioned(true);
        let waiting =
            tokio::time::timeout(Duration::from_millis(100), round_trip(&mut socket, b"held"))
                .await;
        assert!(waiting.is_err(), "nothing crosses a partition");
        proxy.set_partitioned(false);
        let mut buffer = [0_u8; 4];
        socket.read_exact(&mut buffer).await.unwrap();
        assert_eq!(
            &buffer, b"held",
            "the bytes sent during the partition arrive after the heal"
        );

        proxy.lose_next_reply();
        assert!(
            round_trip(&mut socket, b"lost").await.is_err(),
            "the reply is lost and the connection reset"
        );
        assert_eq!(proxy.effects().replies_dropped, 1);

        let mut second = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert_eq!(round_trip(&mut second, b"next").await.unwrap(), b"next");
        proxy.reset_all();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            round_trip(&mut second, b"gone").await.is_err(),
            "a reset closes open connections"
        );
        let mut stalled = TcpStream::connect(proxy.local_addr()).await.unwrap();
        proxy.stall_after_replies(2, Duration::from_millis(300));
        for text in [b"pas1", b"pas2"] {
            assert_eq!(
                round_trip(&mut stalled, text).await.unwrap(),
                text,
                "the next two replies pass"
            );
        }
        let before = tokio::time::Instant::now();
        assert_eq!(round_trip(&mut stalled, b"late").await.unwrap(), b"late");
        assert!(
            before.elapsed() >= Duration::from_millis(250),
            "what the client sends after that reply waits"
        );
        assert_eq!(proxy.effects().stalled_chunks, 1);
        assert_eq!(proxy.stalls_begun(), 1);
        proxy.stall_after_replies(5, Duration::from_millis(300));
        assert!(proxy.stall_armed());
        proxy.disarm_stall();
        assert!(!proxy.stall_armed());
        assert_eq!(round_trip(&mut stalled, b"free").await.unwrap(), b"free");
        let mut third = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert_eq!(
            round_trip(&mut third, b"new!").await.unwrap(),
            b"new!",
            "new connections pass"
        );
    }
}
