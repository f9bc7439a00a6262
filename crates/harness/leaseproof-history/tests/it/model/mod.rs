//! The model judge (`leaseproof_history::model`): stories each explained
//! or not as `docs/model.md` says, and correct histories generated from the
//! specification beside their planted-bug twins.

mod cases;
mod generated;
mod outside;
mod story;
