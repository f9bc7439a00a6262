//! A simulated Redis: the host a Redis lock's own code talks to in the
//! simulation, over turmoil's network, in RESP2.
//!
//! Goal: serve what a Redis lock sends with Redis's semantics — `SET` with
//! `NX`/`XX` and `PX`/`EX`, `GET`, `DEL`, `EXISTS`, `INCR`, `PEXPIRE`,
//! `EXPIRE`, `PING`, `CLIENT SETINFO`, and scripts (`SCRIPT LOAD`, `EVALSHA`,
//! `EVAL`) run by [`lua`] — with keys expiring on the host's clock, and
//! restarts that keep the data (an append-only file, fsync always) or lose
//! it (no persistence: keys *and* counters gone). The script cache is never
//! kept across a restart, as in Redis: clients reload on `NOSCRIPT`.
//! Method: one task per connection on the host; the data lives outside the
//! host's software, in [`RedisData`], so a restart decides what survives.
//! Invariant: time is turmoil's; nothing here reads the wall clock, draws
//! randomness or iterates an unordered map.

pub mod client;
pub mod lua;
pub mod resp;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::{TcpListener, TcpStream};

use crate::trace::{sim_now_us, Trace};
use resp::Reply;

/// The Redis host's name in the simulation.
pub const REDIS_HOST: &str = "redis";
/// Its port.
pub const REDIS_PORT: u16 = 6379;

/// How the simulated Redis behaves.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RedisConfig {
    /// Restarts keep every acknowledged write (`appendfsync always`);
    /// without it a restart starts empty.
    pub persistent: bool,
    /// A planted defect: scripts run with every `==` true and every `~=`
    /// false — the lock's compare-and-delete and compare-and-pexpire as if
    /// written without their compare. The harness must catch it.
    pub compare_always_equal: bool,
    /// Fraction of replies lost after the command took effect: the
    /// connection closes instead of answering (a proxy that loses replies).
    pub lost_reply_probability: f64,
    /// Seed of the host's RNG (lost replies), mixed with its incarnation.
    pub rng_seed: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    value: Vec<u8>,
    /// Simulated µs at which the key expires.
    expires_at_us: Option<i64>,
}

/// What outlives the host's software: the keys, and how often it started.
#[derive(Debug, Default)]
pub struct RedisData {
    entries: BTreeMap<Vec<u8>, Entry>,
    incarnations: u32,
}

impl RedisData {
    /// The keys alive at `now_us`, with their values (tests, traces).
    pub fn live_keys(&self, now_us: i64) -> Vec<(String, String)> {
        self.entries
            .iter()
            .filter(|(_, entry)| entry.expires_at_us.is_none_or(|at| at > now_us))
            .map(|(key, entry)| {
                (
                    String::from_utf8_lossy(key).into_owned(),
                    String::from_utf8_lossy(&entry.value).into_owned(),
                )
            })
            .collect()
    }
}

/// One incarnation of the server: the data, the config, the script cache.
struct Server {
    data: Rc<RefCell<RedisData>>,
    config: RedisConfig,
    trace: Trace,
    /// SHA-1 (hex) → the script, parsed. Lost with the incarnation.
    scripts: RefCell<BTreeMap<String, lua::Script>>,
    rng: RefCell<ChaCha8Rng>,
}

/// The host software. Pass it to
/// `sim.host(REDIS_HOST, || serve(data.clone(), config, trace.clone()))`.
pub async fn serve(
    data: Rc<RefCell<RedisData>>,
    config: RedisConfig,
    trace: Trace,
) -> turmoil::Result {
    let incarnation = {
        let mut data = data.borrow_mut();
        data.incarnations += 1;
        if data.incarnations > 1 && !config.persistent {
            data.entries.clear();
        }
        data.incarnations
    };
    trace.line(None, || {
        format!(
            "redis: server incarnation {incarnation} starts ({})",
            if config.persistent {
                "data kept"
            } else {
                "empty: no persistence"
            }
        )
    });
    let server = Rc::new(Server {
        data,
        config,
        trace,
        scripts: RefCell::new(BTreeMap::new()),
        rng: RefCell::new(ChaCha8Rng::seed_from_u64(
            config.rng_seed ^ u64::from(incarnation).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )),
    });
    let listener = TcpListener::bind(("0.0.0.0", REDIS_PORT)).await?;
    let mut connection = 0u64;
    loop {
        let (stream, _peer) = listener.accept().await?;
        connection += 1;
        tokio::task::spawn_local(Rc::clone(&server).connection(connection, stream));
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn number(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn wrong_arguments(command: &[u8]) -> Reply {
    Reply::Error(format!(
        "ERR wrong number of arguments for '{}' command",
        text(command).to_lowercase()
    ))
}

impl Server {
    async fn connection(self: Rc<Self>, connection: u64, mut stream: TcpStream) {
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            loop {
                let request = match resp::take_request(&mut buffer) {
                    Ok(Some(request)) => request,
                    Ok(None) => break,
                    Err(error) => {
                        let mut out = Vec::new();
                        Reply::Error(format!("ERR Protocol error: {error}")).encode(&mut out);
                        let _ = stream.write_all(&out).await;
                        return;
                    }
                };
                let reply = self.execute(connection, &request);
                if self.config.lost_reply_probability > 0.0
                    && self
                        .rng
                        .borrow_mut()
                        .gen_bool(self.config.lost_reply_probability)
                {
                    self.trace.fault(None, || {
                        format!("redis c{connection}: reply LOST, connection closed")
                    });
                    return;
                }
                let mut out = Vec::new();
                reply.encode(&mut out);
                if stream.write_all(&out).await.is_err() {
                    return;
                }
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            }
        }
    }

    /// Runs one request and traces it with its reply.
    fn execute(&self, connection: u64, request: &[Vec<u8>]) -> Reply {
        let reply = self.command(request);
        self.trace.line(None, || {
            let shown: Vec<String> = request
                .iter()
                .enumerate()
                .map(|(index, part)| {
                    // A script's source is long: its first line says which.
                    let part = text(part);
                    if part.contains('\n') {
                        format!("<script {:?}>", part.trim().lines().next().unwrap_or(""))
                    } else if index == 1
                        && part.len() == 40
                        && request[0].eq_ignore_ascii_case(b"EVALSHA")
                    {
                        format!("{}…", &part[..8])
                    } else {
                        part
                    }
                })
                .collect();
            format!(
                "redis c{connection}: {} => {}",
                shown.join(" "),
                reply.show()
            )
        });
        reply
    }

    fn command(&self, request: &[Vec<u8>]) -> Reply {
        let Some(name) = request.first() else {
            return Reply::Error("ERR empty command".to_string());
        };
        let name = name.to_ascii_uppercase();
        let args = &request[1..];
        match name.as_slice() {
            b"PING" => Reply::Status("PONG".to_string()),
            b"CLIENT" => Reply::Status("OK".to_string()),
            b"SCRIPT" => self.script_load(args),
            b"EVALSHA" | b"EVAL" => self.eval(&name, args),
            _ => self.data_command(&name, args),
        }
    }

    fn script_load(&self, args: &[Vec<u8>]) -> Reply {
        match args {
            [sub, source] if sub.eq_ignore_ascii_case(b"LOAD") => {
                let source = text(source);
                match lua::Script::parse(&source) {
                    Ok(script) => {
                        let sha = sha1_smol::Sha1::from(source.as_bytes())
                            .digest()
                            .to_string();
                        self.scripts.borrow_mut().insert(sha.clone(), script);
                        Reply::Bulk(Some(sha.into_bytes()))
                    }
                    Err(error) => Reply::Error(format!("ERR Error compiling script: {error}")),
                }
            }
            _ => Reply::Error("ERR unknown SCRIPT subcommand".to_string()),
        }
    }

    fn eval(&self, name: &[u8], args: &[Vec<u8>]) -> Reply {
        let [script_or_sha, key_count, rest @ ..] = args else {
            return wrong_arguments(name);
        };
        let Some(key_count) = number(key_count).and_then(|n| usize::try_from(n).ok()) else {
            return Reply::Error("ERR value is not an integer or out of range".to_string());
        };
        if key_count > rest.len() {
            return Reply::Error(
                "ERR Number of keys can't be greater than number of args".to_string(),
            );
        }
        let script = if name == b"EVAL" {
            match lua::Script::parse(&text(script_or_sha)) {
                Ok(script) => script,
                Err(error) => return Reply::Error(format!("ERR Error compiling script: {error}")),
            }
        } else {
            let sha = text(script_or_sha).to_ascii_lowercase();
            match self.scripts.borrow().get(&sha) {
                Some(script) => script.clone(),
                None => {
                    return Reply::Error(
                        "NOSCRIPT No matching script. Please use EVAL.".to_string(),
                    )
                }
            }
        };
        let (keys, argv) = rest.split_at(key_count);
        // A script runs alone: nothing else happens until it returns.
        script.run(
            keys,
            argv,
            self.config.compare_always_equal,
            &mut |command| {
                let name = command[0].to_ascii_uppercase();
                self.data_command(&name, &command[1..])
            },
        )
    }

    /// The commands on keys, at the host's now.
    fn data_command(&self, name: &[u8], args: &[Vec<u8>]) -> Reply {
        let now_us = sim_now_us();
        let mut data = self.data.borrow_mut();
        // Expiry on access: a key past its time is gone for every command.
        for key in args {
            if data
                .entries
                .get(key)
                .is_some_and(|entry| entry.expires_at_us.is_some_and(|at| at <= now_us))
            {
                data.entries.remove(key);
            }
        }
        let entries = &mut data.entries;
        match (name, args) {
            (b"GET", [key]) => Reply::Bulk(entries.get(key).map(|entry| entry.value.clone())),
            (b"SET", [key, value, options @ ..]) => set(entries, key, value, options, now_us),
            (b"DEL", keys) if !keys.is_empty() => Reply::Integer(
                keys.iter()
                    .filter(|key| entries.remove(*key).is_some())
                    .count() as i64,
            ),
            (b"EXISTS", keys) if !keys.is_empty() => {
                Reply::Integer(keys.iter().filter(|key| entries.contains_key(*key)).count() as i64)
            }
            (b"INCR", [key]) => {
                let current = match entries.get(key) {
                    None => 0,
                    Some(entry) => match number(&entry.value) {
                        Some(value) => value,
                        None => {
                            return Reply::Error(
                                "ERR value is not an integer or out of range".to_string(),
                            )
                        }
                    },
                };
                let next = current + 1;
                let expires_at_us = entries.get(key).and_then(|entry| entry.expires_at_us);
                entries.insert(
                    key.clone(),
                    Entry {
                        value: next.to_string().into_bytes(),
                        expires_at_us,
                    },
                );
                Reply::Integer(next)
            }
            (b"PEXPIRE" | b"EXPIRE", [key, amount]) => {
                let Some(amount) = number(amount) else {
                    return Reply::Error("ERR value is not an integer or out of range".to_string());
                };
                let micros = if name == b"PEXPIRE" {
                    amount * 1_000
                } else {
                    amount * 1_000_000
                };
                match entries.get_mut(key) {
                    Some(_) if micros <= 0 => {
                        entries.remove(key);
                        Reply::Integer(1)
                    }
                    Some(entry) => {
                        entry.expires_at_us = Some(now_us + micros);
                        Reply::Integer(1)
                    }
                    None => Reply::Integer(0),
                }
            }
            (b"GET" | b"SET" | b"DEL" | b"EXISTS" | b"INCR" | b"PEXPIRE" | b"EXPIRE", _) => {
                wrong_arguments(name)
            }
            _ => Reply::Error(format!(
                "ERR unknown command '{}'",
                text(name).to_lowercase()
            )),
        }
    }
}

/// `SET key value [NX|XX] [PX ms|EX s]`.
fn set(
    entries: &mut BTreeMap<Vec<u8>, Entry>,
    key: &[u8],
    value: &[u8],
    options: &[Vec<u8>],
    now_us: i64,
) -> Reply {
    let (mut only_new, mut only_existing, mut expires_at_us) = (false, false, None);
    let mut options = options.iter();
    while let Some(option) = options.next() {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" => only_new = true,
            b"XX" => only_existing = true,
            unit @ (b"PX" | b"EX") => {
                let Some(amount) = options.next().and_then(|amount| number(amount)) else {
                    return Reply::Error("ERR value is not an integer or out of range".to_string());
                };
                if amount <= 0 {
                    return Reply::Error("ERR invalid expire time in 'set' command".to_string());
                }
                let micros = if unit == b"PX" {
                    amount * 1_000
                } else {
                    amount * 1_000_000
                };
                expires_at_us = Some(now_us + micros);
            }
            _ => return Reply::Error("ERR syntax error".to_string()),
        }
    }
    if only_new && only_existing {
        return Reply::Error("ERR syntax error".to_string());
    }
    let exists = entries.contains_key(key);
    if (only_new && exists) || (only_existing && !exists) {
        return Reply::Bulk(None);
    }
    entries.insert(
        key.to_vec(),
        Entry {
            value: value.to_vec(),
            expires_at_us,
        },
    );
    Reply::Status("OK".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(parts: &[&str]) -> Vec<Vec<u8>> {
        parts.iter().map(|part| part.as_bytes().to_vec()).collect()
    }

    #[test]
    fn set_follows_redis_nx_xx_and_expiry() {
        let mut entries = BTreeMap::new();
        let ok = Reply::Status("OK".to_string());
        // NX sets a missing key only; XX an existing one only.
        assert_eq!(
            set(&mut entries, b"k", b"a", &bytes(&["NX", "PX", "5"]), 0),
            ok
        );
        assert_eq!(
            set(&mut entries, b"k", b"b", &bytes(&["NX"]), 1),
            Reply::Bulk(None)
        );
        assert_eq!(entries[b"k".as_slice()].value, b"a");
        assert_eq!(entries[b"k".as_slice()].expires_at_us, Some(5_000));
        assert_eq!(
            set(&mut entries, b"k", b"c", &bytes(&["XX", "EX", "2"]), 10),
            ok
        );
        assert_eq!(entries[b"k".as_slice()].expires_at_us, Some(2_000_010));
        assert_eq!(
            set(&mut entries, b"m", b"d", &bytes(&["XX"]), 0),
            Reply::Bulk(None)
        );
        assert!(!entries.contains_key(b"m".as_slice()));
        // A plain SET overwrites and clears the expiry.
        assert_eq!(set(&mut entries, b"k", b"e", &[], 20), ok);
        assert_eq!(entries[b"k".as_slice()].expires_at_us, None);
        for refused in [&["NX", "XX"][..], &["PX", "0"], &["PX", "x"], &["FOO"]] {
            assert!(matches!(
                set(&mut entries, b"k", b"f", &bytes(refused), 0),
                Reply::Error(_)
            ));
        }
        assert_eq!(entries[b"k".as_slice()].value, b"e");
    }
}
