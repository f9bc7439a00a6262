//! `leaseproof`: the command line on top of every layer.
//!
//! `verify` is the product's main job: it runs every stage of the harness on
//! an embedded default (no arguments, no setup beyond PostgreSQL's binaries)
//! and says what it checked. The other subcommands run one stage with its
//! knobs exposed, or replay a failure.

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
    /// Start a throwaway PostgreSQL cluster, print its DATABASE_URL, and keep it
    /// until standard input closes (for running the tests against one server).
    Pg,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Verify(args) => verify::run(args),
        Command::Pg => {
            runtime().block_on(leaseproof_pgcluster::serve_throwaway_until_stdin_closes())
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}
