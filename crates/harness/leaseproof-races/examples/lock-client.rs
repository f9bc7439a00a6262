//! leaseproof's own lease and lock managers behind the client protocol
//! (`leaseproof_races::clients::lock_client`), as an example program the
//! crate's tests start: `lock-client lease|redis|advisory`. Users run the same
//! code as `leaseproof lock-client …`; an example rather than a second binary
//! keeps `cargo run -- …` at the workspace root unambiguous.

use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let kind = std::env::args().nth(1).unwrap_or_default();
    leaseproof_races::clients::lock_client::serve(&kind).await
}
