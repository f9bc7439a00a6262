//! Every broken variant is refuted by a short counterexample.
//!
//! Goal: show the harness has teeth: each deliberate mistake breaks the
//! property it is named for, with a pinned shortest counterexample.
//! Method: BFS that stops at the expected property's first violation.
//! Invariant: `report.as_expected()` for every variant.
