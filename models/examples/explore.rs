//! Serves stateright's web explorer on the lease model.
//!
//! Goal: look at the model state by state in a browser
//! (`cargo run --release -p leaseproof-models --example explore -- [variant] [address]`).
//! Method: `leaseproof_models::explore` with 2 workers and default bounds.
//! Invariant: none checked here; this is a viewing tool.

use leaseproof_models::{explore, CheckConfig, LeaseModel, Variant};

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let variant: Variant = arguments
        .first()
        .map_or(Ok(Variant::Reference), |name| name.parse())
        .expect("variant");
    let address = arguments.get(1).map_or("localhost:3000", String::as_str);
    println!("serving the {variant} model on http://{address}");
    explore(&CheckConfig::new(LeaseModel::new(2, variant)), address);
}
