//! Integration tests of the history format and the checker, one module per topic.
//!
//! Goal: every invariant is shown broken in each way the brief lists, with the
//! exact violation asserted, and valid histories (including unknown outcomes)
//! are shown to pass, so the checker has teeth and no false alarms.

mod beliefs;
mod builder;
mod certain_holds;
mod correct_stores;
mod edges;
mod fenced_writes;
mod format;
mod lines;
mod lock_writes;
mod model;
mod mutual_exclusion;
mod nothing_lost;
mod refused;
mod simulated;
mod takeover;
mod timeline;
mod token_order;
mod well_formed;
