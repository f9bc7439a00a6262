//! Histories a correct lease store produces, generated from the
//! specification, judged explained; and their planted-bug twins, one edit
//! each that provably breaks one invariant, judged violated with it.
//!
//! The store is simulated in real time: each operation takes effect at one
//! instant inside its window (or, its request dropped, never), replies are
//! lost, workers crash; the store's clock is real time plus an offset.
//! Designs vary per seed: decision or statement-start stamps, TTLs that
//! shrink (so `greatest` matters), releases answered with or without their
//! time, re-acquisitions that restamp `granted_at` or not.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use leaseproof_history::model::Verdict;
use leaseproof_history::{GrantStamps, Invariant, Op, OpResult};

use super::story::{acquire, judged, release, renew, verdict, End, Story, Told};

/// SplitMix64: the seed is the whole of a history.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A generated design's choices.
#[derive(Clone, Copy, Debug)]
struct Design {
    stamps: GrantStamps,
    unlocked: bool,
    restamps: bool,
}

const SERVER_OFFSET_US: i64 = 1_000_000;

/// Times are drawn in milliseconds and written in microseconds (a stamp
/// may be rounded by up to a millisecond, so the stories are told slower).
const MS: i64 = 1_000;

#[derive(Default)]
struct Row {
    holder: Option<(usize, u64)>,
    granted_at: i64,
    expires_at: i64,
    max_token: u64,
}

/// What the simulated store did with one operation, for the twins.
#[derive(Clone, Debug)]
struct Effect {
    told: usize,
    /// A grant that replaced a live-or-ended holder: the token before.
    new_grant: bool,
    /// The row's expiry before the effect.
    expires_before: i64,
}

struct Worker {
    token: Option<u64>,
    crashed: bool,
}

struct Sim {
    rng: Rng,
    design: Design,
    row: Row,
    workers: Vec<Worker>,
    story: Story,
    effects: Vec<Effect>,
    /// Per told operation: its stamp, and whether its request was dropped
    /// or its reply lost.
    stamps: Vec<i64>,
    queue: BinaryHeap<Reverse<(i64, u64, usize, u8)>>,
    sequence: u64,
    results: Vec<Option<End>>,
}

fn owner(worker: usize) -> String {
    format!("w{worker}")
}

impl Sim {
    fn schedule(&mut self, at: i64, told: usize, kind: u8) {
        self.sequence += 1;
        self.queue.push(Reverse((at, self.sequence, told, kind)));
    }

    /// Worker `worker` sends its next call at `at`.
    fn send(&mut self, worker: usize, at: i64) {
        let ttl = [40, 80, 160][self.rng.below(3) as usize] * MS;
        let name = owner(worker);
        let op = match self.workers[worker].token {
            None => acquire(&name, ttl),
            Some(token) => match self.rng.below(10) {
                0..=4 => renew(&name, token, ttl),
                5..=7 => release(&name, token),
                _ => acquire(&name, ttl),
            },
        };
        let told = self.story.told.len();
        self.story.told.push(Told {
            owner: name,
            op,
            invoke_us: at,
            complete_us: 0,
            end: End::Never,
        });
        self.stamps.push(0);
        self.results.push(None);
        let dropped = self.rng.chance(5);
        let effect_at = at + (1 + self.rng.below(30) as i64) * MS;
        if !dropped {
            self.schedule(effect_at, told, 1);
        }
        let answered_at = effect_at + (1 + self.rng.below(30) as i64) * MS;
        self.schedule(answered_at, told, 2);
    }

    fn run(mut self, operations: usize) -> (Story, Vec<Effect>, Vec<i64>, Design) {
        for worker in 0..self.workers.len() {
            let at = self.rng.below(20) as i64 * MS;
            self.send(worker, at);
        }
        while let Some(Reverse((at, _, told, kind))) = self.queue.pop() {
            match kind {
                1 => self.effect(told, at),
                _ => self.complete(told, at, operations),
            }
        }
        (self.story, self.effects, self.stamps, self.design)
    }

    fn worker_of(&self, told: usize) -> usize {
        self.story.told[told].owner[1..]
            .parse()
            .expect("a worker name")
    }

    /// The store applies operation `told` at real time `at`.
    fn effect(&mut self, told: usize, at: i64) {
        let worker = self.worker_of(told);
        let now = at + SERVER_OFFSET_US;
        let stamp = match self.design.stamps {
            GrantStamps::Decision => now,
            GrantStamps::StatementStart => {
                let invoke = self.story.told[told].invoke_us + SERVER_OFFSET_US;
                invoke + self.rng.below((now - invoke + 1) as u64) as i64
            }
        };
        self.stamps[told] = stamp;
        let row = &mut self.row;
        let live = row.expires_at > now;
        let effect = Effect {
            told,
            new_grant: false,
            expires_before: row.expires_at,
        };
        let op = self.story.told[told].op.clone();
        let (end, new_grant) = match op {
            Op::Acquire { ttl_us, .. } => {
                let own = row.holder.is_some_and(|(w, _)| w == worker);
                if row.holder.is_none() || !live {
                    let token = row.max_token + 1 + self.rng.below(2);
                    *row = Row {
                        holder: Some((worker, token)),
                        granted_at: stamp,
                        expires_at: stamp + ttl_us,
                        max_token: token,
                    };
                    (lease_end(worker, row), true)
                } else if own {
                    row.expires_at = row.expires_at.max(stamp + ttl_us);
                    if self.design.restamps {
                        row.granted_at = stamp;
                    }
                    (lease_end(worker, row), false)
                } else {
                    (End::Refused, false)
                }
            }
            Op::Renew { token, ttl_us, .. } => {
                if row.holder == Some((worker, token)) && live {
                    row.expires_at = row.expires_at.max(stamp + ttl_us);
                    (lease_end(worker, row), false)
                } else {
                    (End::Refused, false)
                }
            }
            Op::Release { token, .. } => {
                if row.holder == Some((worker, token)) && live {
                    row.expires_at = stamp;
                    let end = if self.design.unlocked {
                        End::Ok(OpResult::Unlocked {})
                    } else {
                        End::Ok(OpResult::Released {
                            released_at_us: stamp,
                        })
                    };
                    (end, false)
                } else {
                    (End::Refused, false)
                }
            }
            Op::Commit { .. } | Op::Write { .. } => unreachable!("only lease calls are told"),
        };
        self.effects.push(Effect {
            new_grant,
            ..effect
        });
        self.results[told] = Some(end);
    }

    fn complete(&mut self, told: usize, at: i64, operations: usize) {
        let worker = self.worker_of(told);
        let answered = self.results[told].take();
        let lost = answered.is_none() || self.rng.chance(12);
        let crashed = self.rng.chance(3);
        let end = match (answered, lost, crashed) {
            (_, _, true) => End::Never,
            (Some(end), false, false) => end,
            _ => End::Unknown,
        };
        let entry = &mut self.story.told[told];
        entry.complete_us = at;
        entry.end = end.clone();
        let knows = &mut self.workers[worker];
        knows.crashed = crashed;
        knows.token = match (&end, &entry.op) {
            (End::Ok(OpResult::Lease { token, .. }), _) => Some(*token),
            (End::Ok(_) | End::Refused, _) => None,
            (_, Op::Release { .. }) => None,
            _ => knows.token,
        };
        if !crashed && self.story.told.len() < operations {
            let next = at + (1 + self.rng.below(25) as i64) * MS;
            self.send(worker, next);
        }
    }
}

fn lease_end(worker: usize, row: &Row) -> End {
    let (_, token) = row.holder.expect("a holder");
    End::Ok(OpResult::Lease {
        token,
        owner: owner(worker),
        granted_at_us: row.granted_at,
        expires_at_us: row.expires_at,
    })
}

/// The correct history of `seed`, the store's effects and stamps, and its design.
fn generate(seed: u64) -> (Story, Vec<Effect>, Design) {
    let mut rng = Rng(seed);
    let design = Design {
        stamps: if rng.chance(50) {
            GrantStamps::Decision
        } else {
            GrantStamps::StatementStart
        },
        unlocked: rng.chance(30),
        restamps: rng.chance(50),
    };
    let workers = 2 + rng.below(2) as usize;
    let operations = 6 + rng.below(18) as usize;
    let sim = Sim {
        rng,
        design,
        row: Row::default(),
        workers: (0..workers)
            .map(|_| Worker {
                token: None,
                crashed: false,
            })
            .collect(),
        story: Story::default(),
        effects: Vec::new(),
        stamps: Vec::new(),
        queue: BinaryHeap::new(),
        sequence: 0,
        results: Vec::new(),
    };
    let (story, effects, _, design) = sim.run(operations);
    (story, effects, design)
}

/// Seeds each test judges; `LEASEPROOF_MODEL_SEEDS` asks for more.
fn seeds() -> u64 {
    std::env::var("LEASEPROOF_MODEL_SEEDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(3_000)
}

#[test]
fn every_generated_correct_history_is_explained_and_its_explanation_validates() {
    for seed in 0..seeds() {
        let (story, _, design) = generate(seed);
        let report = judged(&story.history(), design.stamps);
        // Statement-start stamps may look like an overlap that only
        // decision stamps would prove: possible, never violated.
        assert!(
            matches!(verdict(&report), Verdict::Explained(_))
                || (design.stamps == GrantStamps::StatementStart
                    && matches!(verdict(&report), Verdict::Possible(_))),
            "seed {seed} ({design:?}): {report}\n{story:#?}"
        );
    }
}

/// The twin of a correct history that removes a release answered `ok`
/// which ended a live grant, when a rival was then granted before that
/// grant's expiry (decision stamps, no other release of that holder of
/// unknown outcome): the rival's grant overlaps the holder's.
/// (The holder's every operation answered, so its expiry is proven; the
/// rival's every one before its grant, so the grant is the one answered.)
fn without_a_release(story: &Story, effects: &[Effect]) -> Option<Story> {
    effects.iter().enumerate().find_map(|(position, effect)| {
        let ended = &story.told[effect.told];
        let Op::Release { owner: holder, .. } = &ended.op else {
            return None;
        };
        if !matches!(ended.end, End::Ok(_)) || effect.expires_before <= 0 {
            return None;
        }
        let rival = effects[position + 1..]
            .iter()
            .find(|later| later.new_grant)?;
        let granted = &story.told[rival.told];
        let End::Ok(OpResult::Lease { granted_at_us, .. }) = granted.end else {
            return None;
        };
        // Neither may have an operation of unknown outcome before: the
        // rival's may have been its grant, restamped earlier by its retry.
        let unknown_release = story.told.iter().any(|other| {
            (other.owner == *holder
                || (other.owner == granted.owner && other.invoke_us < granted.complete_us))
                && !matches!(other.end, End::Ok(_) | End::Refused)
        });
        let before = ended.complete_us < granted.invoke_us;
        (granted_at_us + MS < effect.expires_before
            && !unknown_release
            && before
            && granted.owner != *holder)
            .then(|| {
                let mut twin = story.clone();
                twin.told.remove(effect.told);
                twin
            })
    })
}

/// The twin that gives a rival's new grant, answered after an earlier
/// grant was answered, that earlier grant's token.
fn with_a_reused_token(story: &Story, effects: &[Effect]) -> Option<Story> {
    let grants: Vec<&Effect> = effects.iter().filter(|effect| effect.new_grant).collect();
    grants.windows(2).find_map(|pair| {
        let (first, second) = (&story.told[pair[0].told], &story.told[pair[1].told]);
        let End::Ok(OpResult::Lease { token, .. }) = first.end else {
            return None;
        };
        let End::Ok(OpResult::Lease {
            owner,
            granted_at_us,
            expires_at_us,
            ..
        }) = &second.end
        else {
            return None;
        };
        if first.complete_us >= second.invoke_us || first.owner == second.owner {
            return None;
        }
        let mut twin = story.clone();
        twin.told[pair[1].told].end = End::Ok(OpResult::Lease {
            token,
            owner: owner.clone(),
            granted_at_us: *granted_at_us,
            expires_at_us: *expires_at_us,
        });
        Some(twin)
    })
}

fn assert_convicted(twin: &Story, stamps: GrantStamps, invariant: Invariant, seed: u64) {
    let report = judged(&twin.history(), stamps);
    match verdict(&report) {
        Verdict::Violated(certificate) => assert!(
            certificate.invariants.contains(&invariant),
            "seed {seed}: blamed {:?}, planted {invariant:?}\n{report}",
            certificate.invariants
        ),
        other => {
            panic!("seed {seed}: planted {invariant:?}, judged {other:?}\n{report}\n{twin:#?}")
        }
    }
}

#[test]
fn every_planted_twin_is_convicted_of_what_was_planted() {
    let (mut double_grants, mut reused_tokens) = (0, 0);
    for seed in 0..seeds() {
        let (story, effects, design) = generate(seed);
        if design.stamps == GrantStamps::Decision {
            if let Some(twin) = without_a_release(&story, &effects) {
                assert_convicted(&twin, design.stamps, Invariant::MutualExclusion, seed);
                double_grants += 1;
            }
        }
        if let Some(twin) = with_a_reused_token(&story, &effects) {
            assert_convicted(&twin, design.stamps, Invariant::TokenOrder, seed);
            reused_tokens += 1;
        }
    }
    assert!(
        double_grants * 200 > seeds() as usize,
        "only {double_grants} double grants planted"
    );
    assert!(
        reused_tokens * 5 > seeds() as usize,
        "only {reused_tokens} reused tokens planted"
    );
}
