//! A loopback TCP proxy that loses one reply after the server committed.
//!
//! Goal: produce the ambiguous outcome for real — the server commits the
//! acquisition, the client never hears so. Method: a tokio proxy on
//! 127.0.0.1 between the pool and the server. Client→server bytes are always
//! forwarded. Server→client bytes are forwarded until the proxy is armed; then
//! the proxy collects the server's messages up to each `ReadyForQuery` (`Z`)
//! and, for the first batch that completed a statement (`CommandComplete`,
//! `C`), drops the batch and closes the connection: the statement ran and
//! committed (an implicit transaction commits before `ReadyForQuery`), the
//! client sees an IO error. Batches without a completed statement (a prepare
//! round, a ping) pass, so arming before an unprepared statement still loses
//! the reply of its execution, not of its preparation. Armed for `COMMIT`
//! ([`LostReplyProxy::arm_commit`]), only a batch whose completion is tagged
//! `COMMIT` is lost: the guarded transaction committed, its client cannot
//! know (a `COMMIT` of an aborted transaction is tagged `ROLLBACK` and passes).
//! A connection's start-up (authentication up to its first `ReadyForQuery`)
//! always passes, armed or not: a password exchange waits for the client's
//! answer with no `ReadyForQuery` in between, so holding it back would stall
//! a pool opening a connection while armed, not lose a reply.
//! Invariant: only loopback traffic; the proxy never alters a byte it forwards,
//! and it loses at most one reply per arming.

use std::net::SocketAddr;
use std::str::FromStr as _;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgSslMode};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Message type of `CommandComplete`.
const COMMAND_COMPLETE: u8 = b'C';
/// Message type of `ReadyForQuery`.
const READY_FOR_QUERY: u8 = b'Z';
/// The command tag of a committed transaction block's `COMMIT`.
const COMMIT_TAG: &[u8] = b"COMMIT\0";

#[derive(Debug, Default)]
struct ProxyState {
    armed: AtomicBool,
    /// While armed: lose only the reply of a `COMMIT`.
    commit_only: AtomicBool,
    replies_dropped: AtomicU32,
}

/// The proxy; stops accepting when dropped.
#[derive(Debug)]
pub struct LostReplyProxy {
    local_addr: SocketAddr,
    upstream: SocketAddr,
    state: Arc<ProxyState>,
    accept_task: JoinHandle<()>,
}

impl LostReplyProxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream`,
    /// which must be a loopback address.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<LostReplyProxy> {
        assert!(
            upstream.ip().is_loopback(),
            "the proxy only relays loopback traffic"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local_addr = listener.local_addr()?;
        let state = Arc::new(ProxyState::default());
        let accept_state = Arc::clone(&state);
        let accept_task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = Arc::clone(&accept_state);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        relay(client, server, state).await;
                    }
                });
            }
        });
        Ok(LostReplyProxy {
            local_addr,
            upstream,
            state,
            accept_task,
        })
    }

    /// A proxy in front of the server of `url` (loopback only) and the connect
    /// options that lead through it, with TLS off so the proxy can read the
    /// message framing.
    pub async fn in_front_of(url: &str) -> Result<(LostReplyProxy, PgConnectOptions), sqlx::Error> {
        let options = PgConnectOptions::from_str(url)?;
        let host = match options.get_host() {
            "localhost" => "127.0.0.1".to_string(),
            host => host.to_string(),
        };
        let upstream: SocketAddr = format!("{host}:{}", options.get_port())
            .parse()
            .map_err(|error| sqlx::Error::Configuration(Box::new(error)))?;
        let proxy = LostReplyProxy::start(upstream).await?;
        let through_proxy = options
            .host("127.0.0.1")
            .port(proxy.local_addr.port())
            .ssl_mode(PgSslMode::Disable);
        Ok((proxy, through_proxy))
    }

    /// The proxy's address (127.0.0.1).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The server's address.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Loses the reply of the next statement that completes, and closes its connection.
    pub fn arm(&self) {
        self.state.commit_only.store(false, Ordering::SeqCst);
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// Loses the reply of the next `COMMIT` that commits (every other reply
    /// passes), and closes its connection.
    pub fn arm_commit(&self) {
        self.state.commit_only.store(true, Ordering::SeqCst);
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// True while armed and nothing was lost yet.
    pub fn is_armed(&self) -> bool {
        self.state.armed.load(Ordering::SeqCst)
    }

    /// Replies lost so far.
    pub fn replies_dropped(&self) -> u32 {
        self.state.replies_dropped.load(Ordering::SeqCst)
    }
}

impl Drop for LostReplyProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, state: Arc<ProxyState>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    let mut buffer = vec![0_u8; 64 * 1024];
    // Server bytes held back while armed, from a message boundary on.
    let mut pending: Vec<u8> = Vec::new();
    // The start-up's bytes so far, until its first `ReadyForQuery`.
    let mut startup: Option<Vec<u8>> = Some(Vec::new());
    loop {
        let read = match server_read.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if let Some(seen) = startup.as_mut() {
            seen.extend_from_slice(&buffer[..read]);
            // Nothing after the first `ReadyForQuery` can be in this read:
            // the server answers no statement the client has not sent.
            if ready_for_query_seen(seen) {
                startup = None;
            }
            if client_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
            continue;
        }
        if pending.is_empty() && !state.armed.load(Ordering::SeqCst) {
            if client_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
            continue;
        }
        pending.extend_from_slice(&buffer[..read]);
        // Every whole batch in `pending` is decided now: one read may carry
        // a passing batch and the one to lose.
        loop {
            match scan_batches(&pending, state.commit_only.load(Ordering::SeqCst)) {
                Scan::LoseReply => {
                    if state.armed.swap(false, Ordering::SeqCst) {
                        state.replies_dropped.fetch_add(1, Ordering::SeqCst);
                        // Dropping both halves closes the client's connection;
                        // the server sees it go and ends the (idle, committed)
                        // session.
                        upstream.abort();
                        return;
                    }
                    // Disarmed meanwhile: forward as usual.
                    if client_write.write_all(&pending).await.is_err() {
                        upstream.abort();
                        return;
                    }
                    pending.clear();
                    break;
                }
                Scan::Forward(length) => {
                    if client_write.write_all(&pending[..length]).await.is_err() {
                        upstream.abort();
                        return;
                    }
                    pending.drain(..length);
                }
                Scan::NeedMore => break,
            }
        }
    }
    upstream.abort();
}

enum Scan {
    /// A batch ending in `ReadyForQuery` completed a statement.
    LoseReply,
    /// The first `n` bytes are whole batches without a completed statement.
    Forward(usize),
    /// No whole batch yet.
    NeedMore,
}

/// The whole backend messages at the start of `bytes` (type byte +
/// big-endian length that counts itself): each one's type, body and end.
fn whole_messages(bytes: &[u8]) -> impl Iterator<Item = (u8, &[u8], usize)> + '_ {
    let mut position = 0;
    std::iter::from_fn(move || {
        if bytes.len() < position + 5 {
            return None;
        }
        let kind = bytes[position];
        let length_bytes: [u8; 4] = bytes[position + 1..position + 5]
            .try_into()
            .expect("four bytes");
        let length = u32::from_be_bytes(length_bytes) as usize;
        assert!(length >= 4, "a backend message length counts itself");
        let end = position + 1 + length;
        if bytes.len() < end {
            return None;
        }
        let body = &bytes[position + 5..end];
        position = end;
        Some((kind, body, end))
    })
}

/// Walks the backend messages in `bytes` batch by batch, a batch ending with
/// `ReadyForQuery`; with `commit_only`, only a completion tagged `COMMIT`
/// makes a batch lost.
fn scan_batches(bytes: &[u8], commit_only: bool) -> Scan {
    let mut batch_has_completion = false;
    let mut forwardable = 0;
    for (kind, body, end) in whole_messages(bytes) {
        if kind == COMMAND_COMPLETE && (!commit_only || body == COMMIT_TAG) {
            batch_has_completion = true;
        }
        if kind == READY_FOR_QUERY {
            if batch_has_completion {
                // Pass the batches before it first; the next scan loses it.
                return if forwardable > 0 {
                    Scan::Forward(forwardable)
                } else {
                    Scan::LoseReply
                };
            }
            forwardable = end;
        }
    }
    if forwardable > 0 {
        Scan::Forward(forwardable)
    } else {
        Scan::NeedMore
    }
}

/// Whether the backend messages in `bytes` include a whole `ReadyForQuery`.
fn ready_for_query_seen(bytes: &[u8]) -> bool {
    whole_messages(bytes).any(|(kind, _, _)| kind == READY_FOR_QUERY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn a_prepare_round_passes_and_an_execution_round_is_lost() {
        let prepare = [
            message(b'1', b""),
            message(b't', b"\0\0"),
            message(b'Z', b"I"),
        ]
        .concat();
        assert!(matches!(scan_batches(&prepare, false), Scan::Forward(n) if n == prepare.len()));
        let execute = [
            message(b'2', b""),
            message(b'D', b"\0\x01\0\0\0\x011"),
            message(b'C', b"INSERT 0 1\0"),
            message(b'Z', b"I"),
        ]
        .concat();
        assert!(matches!(scan_batches(&execute, false), Scan::LoseReply));
        assert!(matches!(
            scan_batches(&execute[..execute.len() - 2], false),
            Scan::NeedMore
        ));
    }

    #[test]
    fn armed_for_commit_only_a_committing_commit_is_lost() {
        let insert = [message(b'C', b"INSERT 0 1\0"), message(b'Z', b"T")].concat();
        assert!(matches!(scan_batches(&insert, true), Scan::Forward(n) if n == insert.len()));
        let rolled_back = [message(b'C', b"ROLLBACK\0"), message(b'Z', b"I")].concat();
        assert!(matches!(scan_batches(&rolled_back, true), Scan::Forward(_)));
        let commit = [message(b'C', b"COMMIT\0"), message(b'Z', b"I")].concat();
        assert!(matches!(scan_batches(&commit, true), Scan::LoseReply));
        // A batch before the COMMIT passes, the COMMIT's is lost.
        let both = [insert, commit].concat();
        assert!(matches!(scan_batches(&both, true), Scan::Forward(n) if n < both.len()));
    }

    #[test]
    fn the_start_up_ends_at_the_first_whole_ready_for_query() {
        let challenge = message(b'R', b"\0\0\0\x0aSCRAM-SHA-256\0\0");
        assert!(!ready_for_query_seen(&challenge));
        let ready = [
            message(b'R', b"\0\0\0\0"),
            message(b'S', b"client_encoding\0UTF8\0"),
            message(b'K', b"\0\0\0\x01\0\0\0\x02"),
            message(b'Z', b"I"),
        ]
        .concat();
        assert!(ready_for_query_seen(&ready));
        assert!(!ready_for_query_seen(&ready[..ready.len() - 1]));
    }
}
