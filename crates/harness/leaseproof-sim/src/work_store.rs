//! The store a lock holder's maintenance writes to, in the simulation: the
//! user's database as a Redis lock's users have it, rows with commit times,
//! and the token fence where the holder checks its token.
//!
//! Goal: judge I3 and I4 from rows that exist, as the real-server races do
//! (`pg_xact_commit_timestamp`), not from what a worker says. Method: a host
//! that applies one write per request, at its arrival, stamped with
//! simulated time; a fenced write moves the scope's fence token forward
//! only and is refused below it (the same rule as the races' one-statement
//! `INSERT … ON CONFLICT … WHERE fence.token <= EXCLUDED.token`).
//! Invariant: a reply is written only after the row is stored; a refused
//! write stores nothing.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use leaseproof_history::WorkRow;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use turmoil::net::{TcpListener, TcpStream};

use crate::trace::{sim_now_us, Trace};

/// The work store's host name.
pub const WORK_HOST: &str = "work";
/// Its port.
pub const WORK_PORT: u16 = 5433;

/// One write of maintenance: one row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkWrite {
    /// The lock's scope.
    pub scope: String,
    /// The writer (its owner id).
    pub owner: String,
    /// The write's id, unique in the run.
    pub cycle_id: u64,
    /// Check this token against the scope's fence (`None`: write unfenced).
    pub fenced_token: Option<u64>,
}

/// The rows and fences; they outlive nothing but the run.
#[derive(Debug, Default)]
pub struct WorkData {
    rows: Vec<WorkRow>,
    fences: BTreeMap<String, u64>,
}

impl WorkData {
    /// The rows, in insertion order, for the history.
    pub fn rows(&self) -> Vec<WorkRow> {
        self.rows.clone()
    }

    /// Applies `write` now: `true` when stored, `false` when the fence refused it.
    fn apply(&mut self, write: &WorkWrite, now_us: i64) -> bool {
        if let Some(token) = write.fenced_token {
            let fence = self.fences.entry(write.scope.clone()).or_insert(0);
            if token < *fence {
                return false;
            }
            *fence = token;
        }
        self.rows.push(WorkRow {
            seq: self.rows.len() as u64 + 1,
            scope: write.scope.clone(),
            owner: write.owner.clone(),
            cycle_id: write.cycle_id,
            item: 0,
            committed_at_us: Some(now_us),
        });
        true
    }
}

/// The host software: one write per line, `ok` or `refused` back.
pub async fn serve(data: Rc<RefCell<WorkData>>, trace: Trace) -> turmoil::Result {
    let listener = TcpListener::bind(("0.0.0.0", WORK_PORT)).await?;
    loop {
        let (stream, _peer) = listener.accept().await?;
        let (data, trace) = (Rc::clone(&data), trace.clone());
        tokio::task::spawn_local(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(request) = serde_json::from_str::<WorkWrite>(&line) else {
                    return;
                };
                let stored = data.borrow_mut().apply(&request, sim_now_us());
                trace.line(Some(&request.owner), || {
                    format!(
                        "work: {} cycle {} token {:?} => {}",
                        request.owner,
                        request.cycle_id,
                        request.fenced_token,
                        if stored {
                            "stored"
                        } else {
                            "REFUSED by the fence"
                        }
                    )
                });
                let reply = if stored { "ok\n" } else { "refused\n" };
                if write.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// How a write ended, as its writer saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// Stored.
    Stored,
    /// The fence refused it.
    Refused,
    /// No answer: stored or not.
    Unknown(String),
}

/// Sends `write` and waits up to `timeout` for the answer.
pub async fn write(write: &WorkWrite, timeout: Duration) -> Written {
    let exchange = async {
        let stream = TcpStream::connect((WORK_HOST, WORK_PORT)).await?;
        let (read, mut sender) = stream.into_split();
        let mut line = serde_json::to_string(write).expect("a write serialises");
        line.push('\n');
        sender.write_all(line.as_bytes()).await?;
        BufReader::new(read).lines().next_line().await
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(Some(answer))) if answer == "ok" => Written::Stored,
        Ok(Ok(Some(answer))) if answer == "refused" => Written::Refused,
        Ok(Ok(other)) => Written::Unknown(format!("answer {other:?}")),
        Ok(Err(error)) => Written::Unknown(error.to_string()),
        Err(_) => Written::Unknown("no answer in time".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(owner: &str, token: Option<u64>) -> WorkWrite {
        WorkWrite {
            scope: "s".to_string(),
            owner: owner.to_string(),
            cycle_id: 1,
            fenced_token: token,
        }
    }

    #[test]
    fn the_fence_moves_forward_only_and_equal_tokens_pass() {
        let mut data = WorkData::default();
        assert!(data.apply(&write("a", Some(2)), 10));
        assert!(
            data.apply(&write("a", Some(2)), 11),
            "the same holder again"
        );
        assert!(
            !data.apply(&write("b", Some(1)), 12),
            "a lower token is refused"
        );
        assert!(data.apply(&write("c", Some(3)), 13));
        assert!(
            data.apply(&write("d", None), 14),
            "an unfenced write is not checked"
        );
        let rows = data.rows();
        assert_eq!(rows.len(), 4, "the refused write stored nothing");
        assert_eq!(
            rows.iter()
                .map(|row| (row.seq, row.committed_at_us))
                .collect::<Vec<_>>(),
            [(1, Some(10)), (2, Some(11)), (3, Some(13)), (4, Some(14))]
        );
    }
}
