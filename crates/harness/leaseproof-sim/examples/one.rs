//! Runs one scenario seed and prints its trace (a development aid):
//! `cargo run -p leaseproof-sim --example one -- <scenario> <seed> [unfenced]`.
fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "skewed-clocks".into());
    let seed: u64 = args.next().map_or(0, |seed| seed.parse().expect("a seed"));
    let unfenced = args.next().is_some_and(|flag| flag == "unfenced");
    let scenario = leaseproof_sim::Scenario::load(&name).expect("a scenario");
    let outcome = leaseproof_sim::run(
        &scenario,
        seed,
        leaseproof_sim::RunOptions {
            unfenced,
            trace: true,
            ..leaseproof_sim::RunOptions::default()
        },
    );
    for line in &outcome.trace {
        println!("{line}");
    }
    println!("simulated {:?}, ok={}", outcome.simulated, outcome.is_ok());
}
