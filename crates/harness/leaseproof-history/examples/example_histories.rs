//! Writes the example history files of `examples/histories/` (the format's
//! documentation points at them; `leaseproof check` judges them in a test):
//!
//! - `clean.jsonl`: a grant, a renewal, a release, a rival's takeover;
//! - `broken.jsonl`: a rival granted inside a live grant (I1);
//! - `queued-rival.jsonl`: a rival stamped at its statement's start behind a
//!   release — a violation only if the stamps were decision times
//!   (`--grant-stamps decision`). It does not declare its stamps, so `check`
//!   applies the sound rule and reports it as *possible*, not as a violation;
//!   the other two declare `decision` in their first line;
//! - `fenced.jsonl`: guarded writes — a holder's fenced commit of two rows,
//!   a rival's takeover after the release, and the old holder's late
//!   commit refused as stale; the guarded table's rows close the file.
//!
//! Run: `cargo run -p leaseproof-history --example example_histories -- examples/histories`

use leaseproof_history::{EventKind, FailReason, GuardedRow, History, Op, OpResult, Outcome};

struct Writer {
    history: History,
    true_us: i64,
    op_id: u64,
}

impl Writer {
    fn new() -> Writer {
        Writer {
            history: History::default(),
            true_us: 0,
            op_id: 0,
        }
    }

    fn invoke(&mut self, worker: &str, op: Op) -> u64 {
        self.true_us += 10;
        let op_id = self.op_id;
        self.op_id += 1;
        self.history.push(
            worker,
            0,
            self.true_us,
            self.true_us,
            EventKind::Invoke { op_id, op },
        );
        op_id
    }

    fn complete(&mut self, worker: &str, op_id: u64, result: OpResult) {
        self.end(worker, op_id, Outcome::Ok { result });
    }

    fn end(&mut self, worker: &str, op_id: u64, outcome: Outcome) {
        self.true_us += 10;
        self.history.push(
            worker,
            0,
            self.true_us,
            self.true_us,
            EventKind::Complete { op_id, outcome },
        );
    }

    fn acquire(&mut self, worker: &str, token: u64, granted_at_us: i64) {
        let op_id = self.invoke(worker, acquire(worker));
        self.complete(worker, op_id, lease(worker, token, granted_at_us));
    }
}

fn acquire(worker: &str) -> Op {
    Op::Acquire {
        scope: "job".to_string(),
        owner: worker.to_string(),
        ttl_us: 1_000_000,
    }
}

fn lease(worker: &str, token: u64, granted_at_us: i64) -> OpResult {
    OpResult::Lease {
        token,
        owner: worker.to_string(),
        granted_at_us,
        expires_at_us: granted_at_us + 1_000_000,
    }
}

fn release(writer: &mut Writer, worker: &str, token: u64, released_at_us: i64) {
    let op_id = writer.invoke(
        worker,
        Op::Release {
            scope: "job".to_string(),
            owner: worker.to_string(),
            token,
        },
    );
    writer.complete(worker, op_id, OpResult::Released { released_at_us });
}

fn commit(worker: &str, token: u64, cycle_id: u64) -> Op {
    Op::Commit {
        scope: "job".to_string(),
        owner: worker.to_string(),
        token,
        cycle_id,
        items: 2,
    }
}

/// The guarded rows of one committed cycle of two items.
fn rows(worker: &str, token: u64, first_seq: u64, committed_at_us: i64) -> Vec<GuardedRow> {
    (0..2)
        .map(|item| GuardedRow {
            seq: first_seq + u64::from(item),
            scope: "job".to_string(),
            owner: worker.to_string(),
            token,
            cycle_id: 0,
            item,
            written_at_us: committed_at_us - 100,
            committed_at_us: Some(committed_at_us),
        })
        .collect()
}

fn fenced(design: leaseproof_history::CheckConfig) -> Writer {
    let mut fenced = Writer::new();
    fenced.history.design = Some(design);
    fenced.acquire("a", 1, 1_700_000_000_000_000);
    let a_commit = fenced.invoke("a", commit("a", 1, 0));
    let committed_at_us = Some(1_700_000_000_100_000);
    fenced.complete("a", a_commit, OpResult::Committed { committed_at_us });
    release(&mut fenced, "a", 1, 1_700_000_000_200_000);
    fenced.acquire("b", 2, 1_700_000_000_300_000);
    let b_commit = fenced.invoke("b", commit("b", 2, 0));
    let committed_at_us = Some(1_700_000_000_400_000);
    fenced.complete("b", b_commit, OpResult::Committed { committed_at_us });
    let late = fenced.invoke("a", commit("a", 1, 1));
    let stale = Outcome::Fail {
        reason: FailReason::Stale,
    };
    fenced.end("a", late, stale);
    fenced.history.tables_read.guarded = true;
    fenced.history.guarded_rows = [
        rows("a", 1, 1, 1_700_000_000_100_000),
        rows("b", 2, 3, 1_700_000_000_400_000),
    ]
    .concat();
    fenced
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/histories".to_string());
    let dir = std::path::Path::new(&dir);

    let mut clean = Writer::new();
    clean.acquire("a", 1, 1_700_000_000_000_000);
    let renew = clean.invoke(
        "a",
        Op::Renew {
            scope: "job".to_string(),
            owner: "a".to_string(),
            token: 1,
            ttl_us: 1_000_000,
        },
    );
    clean.complete(
        "a",
        renew,
        OpResult::Lease {
            token: 1,
            owner: "a".to_string(),
            granted_at_us: 1_700_000_000_000_000,
            expires_at_us: 1_700_000_000_500_000 + 1_000_000,
        },
    );
    release(&mut clean, "a", 1, 1_700_000_000_800_000);
    clean.acquire("b", 2, 1_700_000_000_900_000);

    // These two are a lease that decides with the time it stamps, as the
    // reference does, and say so: server-time overlaps are real.
    let decision = leaseproof_history::CheckConfig {
        grant_stamps: leaseproof_history::GrantStamps::Decision,
        ..Default::default()
    };
    clean.history.design = Some(decision.clone());
    let fenced = fenced(decision.clone());

    let mut broken = Writer::new();
    broken.history.design = Some(decision);
    broken.acquire("a", 1, 1_700_000_000_000_000);
    broken.acquire("b", 2, 1_700_000_000_400_000);

    // Undeclared: judged by the sound rule (statement-start).
    let mut queued = Writer::new();
    queued.acquire("a", 1, 1_700_000_000_000_000);
    let rival = queued.invoke("b", acquire("b"));
    release(&mut queued, "a", 1, 1_700_000_000_300_000);
    queued.complete("b", rival, lease("b", 2, 1_700_000_000_290_000));

    for (name, writer) in [
        ("clean", clean),
        ("broken", broken),
        ("queued-rival", queued),
        ("fenced", fenced),
    ] {
        let path = dir.join(format!("{name}.jsonl"));
        writer.history.save(&path).expect("write the example");
        println!("wrote {}", path.display());
    }
}
