//! `leaseproof`: the command line on top of every layer.
//!
//! `verify` is the product's main job: it runs every stage of the harness on
//! an embedded default (no arguments, no setup beyond PostgreSQL's binaries)
//! and says what it checked. The other subcommands run one stage with its
//! knobs exposed, or replay a failure.

mod bench;
mod check;
mod clients;
mod evidence;
mod model;
mod race;
mod sim;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "leaseproof",
    version,
    about = "Provably safe database leases: the reference lease and its verification harness"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run every check on the embedded default and report what was verified.
    Verify(verify::VerifyArgs),
    /// Check the stateright model of the protocol and its broken variants.
    Model(model::ModelArgs),
    /// Sweep simulation scenarios over seeds (deterministic, turmoil).
    Sim(sim::SimArgs),
    /// Replay one simulation seed and print (and save) its whole trace.
    Replay(sim::ReplayArgs),
    /// Race workers (tasks or OS processes) on a real PostgreSQL server.
    Race(race::RaceArgs),
    /// Measure acquisition under contention beside SELECT 1 and an advisory lock.
    Bench(bench::BenchArgs),
    /// Judge a history file recorded by any program (docs/history-format.md).
    Check(check::CheckArgs),
    /// Drive lock clients in any language under seeded faults and judge them
    /// (docs/client-protocol.md).
    Clients(clients::ClientsArgs),
    /// Serve leaseproof's own lease or lock manager over the client protocol
    /// on stdin/stdout: the client `clients --client "leaseproof lock-client lease"` drives.
    #[command(name = "lock-client")]
    LockClient {
        /// Which one: the lease, the Redis manager or the advisory-lock manager.
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(
            leaseproof_races::clients::lock_client::KINDS
        ))]
        lock: String,
    },
    /// One worker process of `race --processes` (internal).
    #[command(name = leaseproof_races::WORKER_SUBCOMMAND, hide = true)]
    RaceWorker,
    /// Start a throwaway PostgreSQL cluster, print its DATABASE_URL, and keep it
    /// until standard input closes (for running the tests against one server).
    Pg,
    /// Start a throwaway Redis server, print its REDIS_URL, and keep it until
    /// standard input closes.
    Redis,
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    match cli.command {
        Command::Verify(args) => verify::run(args),
        Command::Model(args) => model::run(args),
        Command::Sim(args) => sim::run_sim(args),
        Command::Replay(args) => sim::run_replay(args),
        Command::Race(args) => runtime().block_on(race::run_race(args)),
        Command::Bench(args) => runtime().block_on(bench::run_bench(args)),
        Command::Check(args) => check::run(args),
        Command::Clients(args) => runtime().block_on(clients::run(args)),
        Command::LockClient { lock } => {
            runtime().block_on(leaseproof_races::clients::lock_client::serve(&lock))
        }
        Command::RaceWorker => match std::env::var(leaseproof_races::WORKER_CONFIG_ENV) {
            Ok(config_json) => {
                runtime().block_on(leaseproof_races::run_worker_process(&config_json))
            }
            Err(_) => {
                eprintln!("leaseproof race-worker: {} is not set; this subcommand is run by `race --processes`", leaseproof_races::WORKER_CONFIG_ENV);
                ExitCode::from(2)
            }
        },
        Command::Pg => {
            runtime().block_on(leaseproof_pgcluster::serve_throwaway_until_stdin_closes())
        }
        Command::Redis => leaseproof_redis_server::serve_throwaway_until_stdin_closes(),
    }
}

/// `leaseproof model | head -1`: once the reader closes the pipe, `println!`
/// panics ("failed printing to stdout: Broken pipe"). End quietly instead,
/// with the status a shell reports for SIGPIPE (128 + 13), as `cat` would.
/// (Restoring SIGPIPE's default action needs `unsafe`, which the workspace
/// forbids.) Every other panic keeps the default report.
fn quiet_on_closed_stdout() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if payload.contains("failed printing to stdout") && payload.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}
