//! The executable semantics, exercised on its own: every statement's rule,
//! and a property test that random operation sequences keep the invariants
//! (one live holder per scope, tokens strictly increasing per grant, never
//! restarting) that the SQL and the simulated database inherit from it.

mod semantics;
mod types;
