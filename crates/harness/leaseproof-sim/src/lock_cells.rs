//! The real-server manager × fault matrix's advisory and Redis cells, by
//! seed: the same lock and fault, run as simulation scenarios under many
//! seeds.
//!
//! Goal: put beside each scripted real-server scene what a sweep of seeds
//! finds for the same lock and fault, so a verdict that rests on one
//! timing is checked against every timing a seed range draws. Method: each
//! cell names a scenario and the run options that make it the matrix's
//! cell (`redis`: the work written without the token; `server restart`: a
//! Redis without persistence); the cell's verdict is every invariant any
//! of its seeds broke. Invariant: a cell is judged by the one checker only;
//! the column names are the real matrix's, so the two can be joined.

use std::ops::Range;

use leaseproof_history::Invariant;

use crate::run::{run, RunOptions};
use crate::scenario::Scenario;

/// One cell, judged over a range of seeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeededCell {
    /// The lock, as the real matrix names it (`advisory`, `redis`, `redis-fenced`).
    pub lock: &'static str,
    /// The fault, as the real matrix's column is named.
    pub fault: &'static str,
    /// The scenario that runs it, and its replay flags.
    pub scenario: &'static str,
    /// Its run options (the replay line's flags).
    pub options: RunOptions,
    /// Seeds run.
    pub seeds_run: u64,
    /// Every invariant some seed broke, sorted, once each.
    pub broken: Vec<Invariant>,
    /// What the cell is pinned to show (`broken` must equal it).
    pub expected: Vec<Invariant>,
    /// Seeds that broke something.
    pub seeds_breaking: u64,
    /// The first of them.
    pub first_seed: Option<u64>,
}

impl SeededCell {
    /// `holds`, or the invariants' codes as the real matrix writes them (`I1+I2`).
    pub fn short(&self) -> String {
        if self.broken.is_empty() {
            "holds".to_string()
        } else {
            self.broken
                .iter()
                .map(|invariant| invariant.code())
                .collect::<Vec<_>>()
                .join("+")
        }
    }

    /// The replay line of the first seed that broke something.
    pub fn replay(&self) -> Option<String> {
        self.first_seed.map(|seed| {
            format!(
                "{} replay {} --seed {seed}{}",
                crate::invocation(),
                self.scenario,
                self.options.flag_arguments()
            )
        })
    }
}

use Invariant::{FencedWrites as I3, MutualExclusion as I1, TokenOrder as I2};

/// One cell's definition.
struct CellDefinition {
    lock: &'static str,
    fault: &'static str,
    scenario: &'static str,
    /// The work written without the token (the matrix's `redis` row; the
    /// advisory lock has none to write with).
    unfenced: bool,
    /// A Redis without persistence (the matrix's `server restart`).
    forgetful_restarts: bool,
    expected: &'static [Invariant],
}

/// A cell of `lock` under `fault`, run by `scenario`, pinned to show
/// `expected`; its work fenced by the token, its Redis persistent.
const fn cell(
    lock: &'static str,
    fault: &'static str,
    scenario: &'static str,
    expected: &'static [Invariant],
) -> CellDefinition {
    CellDefinition {
        lock,
        fault,
        scenario,
        unfenced: false,
        forgetful_restarts: false,
        expected,
    }
}

impl CellDefinition {
    /// The work written without the token.
    const fn unfenced(self) -> CellDefinition {
        CellDefinition {
            unfenced: true,
            ..self
        }
    }

    /// A Redis that restarts without persistence.
    const fn forgetful(self) -> CellDefinition {
        CellDefinition {
            forgetful_restarts: true,
            ..self
        }
    }
}

/// The cells, with what each is pinned to show. All but one agree with the
/// real-server scenes; `redis-fenced` paused shows I3 by seed (a stale
/// write between a takeover and the new holder's first write, which no
/// fence at the store can refuse), where the scripted scene lets the rival
/// write first.
const CELLS: [CellDefinition; 12] = [
    cell("advisory", "holder paused > TTL", "advisory-pause", &[]),
    cell(
        "advisory",
        "lock connection killed",
        "advisory-session-kill",
        &[I3],
    ),
    cell("advisory", "holder killed", "advisory-crash", &[]),
    cell("advisory", "server restart", "advisory-restart", &[I3]),
    cell("redis", "holder paused > TTL", "redis-pause", &[I3]).unfenced(),
    cell("redis-fenced", "holder paused > TTL", "redis-pause", &[I3]),
    cell("redis", "holder killed", "redis-crash", &[]).unfenced(),
    cell("redis-fenced", "holder killed", "redis-crash", &[]),
    cell("redis", "server restart", "redis-restart", &[I1, I2, I3])
        .unfenced()
        .forgetful(),
    cell(
        "redis-fenced",
        "server restart",
        "redis-restart",
        &[I1, I2, I3],
    )
    .forgetful(),
    cell("redis", "restart, persistent", "redis-restart", &[]).unfenced(),
    cell("redis-fenced", "restart, persistent", "redis-restart", &[]),
];

/// Every cell over `seeds`.
pub fn seeded_cells(seeds: Range<u64>) -> Result<Vec<SeededCell>, String> {
    CELLS
        .iter()
        .map(|definition| {
            let scenario =
                Scenario::load(definition.scenario).map_err(|error| error.to_string())?;
            let options = RunOptions {
                unfenced: definition.unfenced,
                forgetful_restarts: definition.forgetful_restarts,
                ..RunOptions::default()
            };
            let mut cell = SeededCell {
                lock: definition.lock,
                fault: definition.fault,
                scenario: definition.scenario,
                expected: definition.expected.to_vec(),
                options,
                seeds_run: 0,
                broken: Vec::new(),
                seeds_breaking: 0,
                first_seed: None,
            };
            for seed in seeds.clone() {
                let outcome = run(&scenario, seed, options);
                cell.seeds_run += 1;
                let broken = outcome.invariants_broken();
                if !broken.is_empty() || !outcome.findings.is_empty() {
                    cell.seeds_breaking += 1;
                    cell.first_seed.get_or_insert(seed);
                }
                cell.broken.extend(broken);
            }
            cell.broken.sort();
            cell.broken.dedup();
            Ok(cell)
        })
        .collect()
}
