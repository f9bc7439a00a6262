//! The `sim` and `replay` commands without the `leaseproof` binary (a
//! development aid): `cargo run -p leaseproof-sim --release --example sim -- sim all --seeds 0..50`.
use clap::Parser;

#[derive(Parser)]
enum Command {
    Sim(leaseproof_sim::cli::SimArgs),
    Replay(leaseproof_sim::cli::ReplayArgs),
    Verify,
}

fn main() -> std::process::ExitCode {
    match Command::parse() {
        Command::Sim(args) => leaseproof_sim::cli::run_sim(args),
        Command::Replay(args) => leaseproof_sim::cli::run_replay(args),
        Command::Verify => leaseproof_sim::cli::run_verify(),
    }
}
