//! The load generator's own tests: one binary, a module per topic.
//!
//! They measure, and some figures are the server's (transaction counts,
//! transaction ids, which the whole cluster shares), so the tests of this
//! binary take turns: [`alone`] before any work.

mod load;
mod waiting;

/// Held for a whole test: no other test of this binary measures meanwhile.
async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}
