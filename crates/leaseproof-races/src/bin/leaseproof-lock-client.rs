//! leaseproof's own lease and lock managers behind the client protocol
//! (`leaseproof_races::clients::lock_client`), as a binary of its own for
//! tests and scripts: `leaseproof-lock-client lease|redis|advisory`.

use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let kind = std::env::args().nth(1).unwrap_or_default();
    leaseproof_races::clients::lock_client::serve(&kind).await
}
