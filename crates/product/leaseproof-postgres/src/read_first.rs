//! Read before writing when the scope is known to be held: what a polling
//! loser costs.
//!
//! Goal: a worker that polls a held lease should cost the server what a
//! primary-key read costs — the physical limit for a loser that must consult
//! the row — without giving up the one-statement decision. The acquisition
//! statement ([`sql::ACQUIRE`](crate::sql::ACQUIRE)) refuses a loser with a
//! read too (its `NOT EXISTS`), but it is still an `INSERT`: a write
//! statement's executor, locks and commit for a row it never produces.
//!
//! Method: test-and-test-and-set, as spin locks do. A read-only check
//! ([`sql::SELECT_RIVAL`](crate::sql::SELECT_RIVAL)) goes first; a live grant
//! of another owner refuses at once (and names the holder, for free); only a
//! free, expired or own row goes on to the acquisition statement, whose
//! `ON CONFLICT … WHERE` decides again under the row lock. The read never
//! grants, so there is no read-then-write window: it can only refuse, on the
//! server's clock, from a snapshot in which another owner held the lease —
//! exactly what the statement's own `NOT EXISTS` does.
//!
//! The price is a second round trip for a winner. [`ReadFirst::AfterRefusal`]
//! (the default) pays it only where it pays off: this client reads first on a
//! scope only after it saw that scope refused, until it wins it again. A
//! first attempt, a holder re-acquiring its own lease and a worker taking a
//! free scope send one statement.
//!
//! Invariant: which path runs changes the cost, never the decision; the
//! conformance differential holds the read to the executable semantics
//! (`Held` with the same holder, token and end) at the same `now()`.

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use leaseproof_protocol::Scope;

/// When an acquisition reads the scope's row before it sends the acquisition
/// statement (see the module documentation for why).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadFirst {
    /// Always the one statement: one round trip for winners and losers alike.
    Never,
    /// Read first on a scope this client saw refused, until it wins it: a
    /// polling loser costs a primary-key read, everyone else one statement.
    #[default]
    AfterRefusal,
    /// Always read first: a loser costs a read, a winner two round trips.
    Always,
}

/// The scopes whose last acquisition by this client was refused, shared by a
/// `PostgresLeases` and its clones. Bounded: past [`REFUSED_SCOPES_MAX`]
/// scopes it forgets them all (the next attempt on each is one statement
/// again, which only costs, never decides).
///
/// Read-mostly: every poll of a held scope asks, and only the first refusal
/// and the grant write, so the pollers sharing one client read side by side
/// and a repeated refusal allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct RefusedScopes {
    scopes: RwLock<HashSet<Scope>>,
}

/// How many refused scopes a client remembers before it starts over.
pub(crate) const REFUSED_SCOPES_MAX: usize = 4096;

impl RefusedScopes {
    /// Whether an acquisition of `scope` under `mode` reads first.
    pub(crate) fn reads_first(&self, mode: ReadFirst, scope: &Scope) -> bool {
        match mode {
            ReadFirst::Never => false,
            ReadFirst::Always => true,
            ReadFirst::AfterRefusal => self.read().contains(scope),
        }
    }

    /// `scope` was refused: read first next time.
    pub(crate) fn refused(&self, scope: &Scope) {
        if self.read().contains(scope) {
            return;
        }
        let mut scopes = self.write();
        if scopes.len() >= REFUSED_SCOPES_MAX && !scopes.contains(scope) {
            scopes.clear();
        }
        scopes.insert(scope.clone());
        assert!(scopes.len() <= REFUSED_SCOPES_MAX);
    }

    /// `scope` was granted: one statement next time.
    pub(crate) fn granted(&self, scope: &Scope) {
        if self.read().contains(scope) {
            self.write().remove(scope);
        }
    }

    /// How many scopes are remembered.
    pub(crate) fn count(&self) -> usize {
        self.read().len()
    }

    // A panic while holding the lock cannot leave the set inconsistent (every
    // operation is one call on it): recover the guard.
    fn read(&self) -> RwLockReadGuard<'_, HashSet<Scope>> {
        self.scopes.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashSet<Scope>> {
        self.scopes.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(name: &str) -> Scope {
        Scope::new(name).expect("valid scope")
    }

    #[test]
    fn after_refusal_reads_first_only_between_a_refusal_and_a_grant() {
        let refused = RefusedScopes::default();
        let (a, b) = (scope("a"), scope("b"));
        assert!(!refused.reads_first(ReadFirst::AfterRefusal, &a));
        refused.refused(&a);
        assert!(refused.reads_first(ReadFirst::AfterRefusal, &a));
        assert!(!refused.reads_first(ReadFirst::AfterRefusal, &b));
        refused.refused(&a);
        assert_eq!(refused.count(), 1);
        refused.granted(&a);
        assert!(!refused.reads_first(ReadFirst::AfterRefusal, &a));
        assert_eq!(refused.count(), 0);
    }

    #[test]
    fn never_and_always_ignore_what_was_refused() {
        let refused = RefusedScopes::default();
        let a = scope("a");
        assert!(refused.reads_first(ReadFirst::Always, &a));
        refused.refused(&a);
        assert!(!refused.reads_first(ReadFirst::Never, &a));
        refused.granted(&a);
        assert!(refused.reads_first(ReadFirst::Always, &a));
    }

    #[test]
    fn the_memory_is_bounded_and_starts_over_when_full() {
        let refused = RefusedScopes::default();
        for index in 0..REFUSED_SCOPES_MAX {
            refused.refused(&scope(&format!("s{index}")));
        }
        assert_eq!(refused.count(), REFUSED_SCOPES_MAX);
        // A scope already remembered does not make room.
        refused.refused(&scope("s0"));
        assert_eq!(refused.count(), REFUSED_SCOPES_MAX);
        refused.refused(&scope("one more"));
        assert_eq!(refused.count(), 1);
        assert!(refused.reads_first(ReadFirst::AfterRefusal, &scope("one more")));
        assert!(!refused.reads_first(ReadFirst::AfterRefusal, &scope("s0")));
    }
}
