//! `leaseproof bench` without the CLI: the same arguments and table, for
//! running the benchmark from this package alone
//! (`cargo run --release -p leaseproof-benches --example bench -- --quick`).

use std::process::ExitCode;

use clap::Parser;
use leaseproof_benches::{run_bench, BenchArgs};

#[derive(Debug, Parser)]
#[command(
    name = "bench",
    about = "Acquisition under contention beside SELECT 1 and the advisory lock"
)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run_bench(cli.args))
}
