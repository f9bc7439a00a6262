//! The worker loop on its own, against a stub port with scripted replies and
//! tokio's paused clock, so every instant is exact.
//!
//! Goal: pin the local rules the simulation and the races rely on but cannot
//! see directly — above all the belief deadline, which must be measured from
//! the moment the acquisition was *sent*, on the worker's own clock. A longer
//! belief is invisible to fenced runs (the fence saves them) and only
//! statistically visible to unfenced ones, so it gets an exact test here —
//! and the whole record of scripted runs (`script.rs`), snapshot as data.

mod deadline;
mod script;
