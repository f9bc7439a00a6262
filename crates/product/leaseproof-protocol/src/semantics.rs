//! An executable model of every lease statement, with the server clock passed in.
//!
//! This is the specification. The SQL in the PostgreSQL backend is held to it by
//! a differential test on a real server (the same cases through both must decide
//! identically), and the simulated database serves exactly this state, so a
//! simulation tests the protocol the SQL implements, not a second copy of it.
//!
//! Each method is one statement and is atomic: in PostgreSQL the row lock taken
//! by `INSERT … ON CONFLICT DO UPDATE` / `UPDATE` serialises them, here `&mut self`
//! does. `now` is the server's clock at the moment the statement decides.

use std::collections::BTreeMap;

use crate::{FencingToken, Lease, Owner, Scope, ServerTime, Ttl};

/// One row of the lease table: the lock for its scope.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct LeaseRow {
    /// The last owner granted the scope (still there after expiry or release).
    pub owner: Owner,
    /// The last grant's token; never decreases, never restarts.
    pub token: FencingToken,
    /// When the last grant was made.
    pub granted_at: ServerTime,
    /// When the last grant stops (stopped) being valid.
    pub expires_at: ServerTime,
}

impl LeaseRow {
    /// True while the grant is valid at server time `now`: `expires_at > now`.
    /// Expiry is exclusive — at `expires_at` exactly, the scope is free.
    pub fn is_live(&self, now: ServerTime) -> bool {
        self.expires_at > now
    }

    /// True when `lease` is this row's current, live grant: owner AND token
    /// match and it has not expired. The fence, renew and release all require it.
    pub fn is_held_by(&self, lease: &Lease, now: ServerTime) -> bool {
        self.owner == *lease.owner() && self.token == lease.token() && self.is_live(now)
    }

    fn to_lease(&self, scope: &Scope) -> Lease {
        Lease::from_server_reply(
            scope.clone(),
            self.owner.clone(),
            self.token,
            self.granted_at,
            self.expires_at,
        )
    }
}

/// How an acquisition was decided.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum Acquisition {
    /// The lease was granted (or re-granted to the same owner).
    Granted {
        /// The grant, as `RETURNING` reports it.
        lease: Lease,
        /// Which path granted it.
        kind: GrantKind,
    },
    /// Another owner holds a live grant; nothing was written.
    Held {
        /// The current holder.
        holder: Owner,
        /// The holder's fencing token.
        token: FencingToken,
        /// When the holder's grant expires.
        expires_at: ServerTime,
    },
}

/// The three ways an acquisition succeeds.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum GrantKind {
    /// No row existed: token 1.
    First,
    /// The row had expired: the token advances, whoever the previous owner was.
    Takeover,
    /// The same owner's grant was still live: an idempotent retry (after a lost
    /// reply). The token and `granted_at` are kept and `expires_at` becomes
    /// `greatest(expires_at, now + ttl)` — it is a renewal of the grant the lost
    /// reply carried, and like every renewal it never shortens the grant.
    Reacquired,
}

/// How an extension of a live grant by its own holder (a renewal, an
/// idempotent re-acquire) sets `expires_at`.
///
/// A statement's `now()` is taken when it starts, and a statement can land
/// late: it queued on the row lock, or its request sat in the network while
/// the client timed out and sent a newer one. If the late one then sets
/// `expires_at = now + ttl` from its stale `now()`, the grant's end moves
/// *backwards*, below what the holder was already told, and a rival is granted
/// inside the promised interval (I1). Found by the chaos sweep, seeds 345 and
/// 1171.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub enum ExtensionRule {
    /// `expires_at = greatest(expires_at, now + ttl)`: a grant's end moves
    /// back only by release or takeover. The protocol.
    #[default]
    NeverShorten,
    /// `expires_at = now + ttl`: the rule before the fix. A broken variant, kept
    /// only so the harness can show it catches it (like
    /// [`GuardedLog::append_unfenced`]); nothing in the library uses it.
    LatestStatementWins,
}

impl ExtensionRule {
    /// The new `expires_at` of a live grant ending at `current` that a
    /// statement asks to extend to `requested`.
    pub fn extend(self, current: ServerTime, requested: ServerTime) -> ServerTime {
        match self {
            ExtensionRule::NeverShorten => current.max(requested),
            ExtensionRule::LatestStatementWins => requested,
        }
    }
}

/// The lease table: every scope's row.
#[derive(Clone, PartialEq, Eq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LeaseTable {
    rows: BTreeMap<Scope, LeaseRow>,
    extension_rule: ExtensionRule,
}

impl LeaseTable {
    /// An empty table with the protocol's rules.
    pub fn new() -> LeaseTable {
        LeaseTable::default()
    }

    /// An empty table whose extensions follow `extension_rule`: the harness's
    /// way to run the broken pre-fix rule and show the checker catches it.
    pub fn with_extension_rule(extension_rule: ExtensionRule) -> LeaseTable {
        LeaseTable {
            rows: BTreeMap::new(),
            extension_rule,
        }
    }

    /// The row of `scope`, if it was ever granted.
    pub fn row(&self, scope: &Scope) -> Option<&LeaseRow> {
        self.rows.get(scope)
    }

    /// All rows, ordered by scope.
    pub fn rows(&self) -> impl Iterator<Item = (&Scope, &LeaseRow)> {
        self.rows.iter()
    }

    /// `acquire`: the single `INSERT … ON CONFLICT (scope) DO UPDATE … WHERE
    /// expired OR same owner RETURNING …` statement.
    pub fn acquire(
        &mut self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
        now: ServerTime,
    ) -> Acquisition {
        let expires_at = now.plus(ttl);
        let Some(row) = self.rows.get_mut(scope) else {
            let row = LeaseRow {
                owner: owner.clone(),
                token: FencingToken::FIRST,
                granted_at: now,
                expires_at,
            };
            let lease = row.to_lease(scope);
            self.rows.insert(scope.clone(), row);
            return Acquisition::Granted {
                lease,
                kind: GrantKind::First,
            };
        };
        let kind = if !row.is_live(now) {
            let token_before = row.token;
            row.owner = owner.clone();
            row.token = row.token.next();
            row.granted_at = now;
            row.expires_at = expires_at;
            assert!(row.token > token_before);
            GrantKind::Takeover
        } else if row.owner == *owner {
            let (token_before, granted_at_before, expires_at_before) =
                (row.token, row.granted_at, row.expires_at);
            row.expires_at = self.extension_rule.extend(row.expires_at, expires_at);
            assert_eq!(row.token, token_before, "a re-acquire keeps its token");
            assert_eq!(row.granted_at, granted_at_before, "and its grant time");
            if self.extension_rule == ExtensionRule::NeverShorten {
                assert!(row.expires_at >= expires_at_before, "and never shortens");
            }
            GrantKind::Reacquired
        } else {
            return Acquisition::Held {
                holder: row.owner.clone(),
                token: row.token,
                expires_at: row.expires_at,
            };
        };
        assert!(row.is_live(now));
        Acquisition::Granted {
            lease: row.to_lease(scope),
            kind,
        }
    }

    /// `renew`: `UPDATE … SET expires_at = greatest(expires_at, now + ttl) WHERE
    /// scope, owner and token match AND expires_at > now`. Keeps the token and
    /// `granted_at`; never shortens the grant (see [`ExtensionRule`]). `None`
    /// when the lease is lost.
    pub fn renew(&mut self, lease: &Lease, ttl: Ttl, now: ServerTime) -> Option<Lease> {
        let rule = self.extension_rule;
        let row = self.rows.get_mut(lease.scope())?;
        if !row.is_held_by(lease, now) {
            return None;
        }
        let (token_before, granted_at_before, expires_at_before) =
            (row.token, row.granted_at, row.expires_at);
        row.expires_at = rule.extend(row.expires_at, now.plus(ttl));
        assert_eq!(row.token, token_before, "a renewal keeps its token");
        assert_eq!(row.granted_at, granted_at_before, "and its grant time");
        if rule == ExtensionRule::NeverShorten {
            assert!(row.expires_at >= expires_at_before, "and never shortens");
        }
        Some(row.to_lease(lease.scope()))
    }

    /// `release`: `UPDATE … SET expires_at = now WHERE scope, owner and token
    /// match AND expires_at > now`. The row stays, so the token never restarts.
    /// Returns the released lease (with `expires_at = now`), `None` when it was
    /// no longer held (a second release, or a release after takeover).
    pub fn release(&mut self, lease: &Lease, now: ServerTime) -> Option<Lease> {
        let row = self.rows.get_mut(lease.scope())?;
        if !row.is_held_by(lease, now) {
            return None;
        }
        row.expires_at = now;
        assert!(!row.is_live(now));
        Some(row.to_lease(lease.scope()))
    }

    /// `holds`: the read-only check. Past tense — true when it was evaluated.
    pub fn holds(&self, lease: &Lease, now: ServerTime) -> bool {
        self.rows
            .get(lease.scope())
            .is_some_and(|row| row.is_held_by(lease, now))
    }

    /// Test-only helper of the real backend, modelled here too: move the grant's
    /// expiry into the past, as if its TTL had run out.
    pub fn expire_now(&mut self, scope: &Scope, now: ServerTime) -> bool {
        match self.rows.get_mut(scope) {
            Some(row) if row.is_live(now) => {
                row.expires_at = now;
                true
            }
            _ => false,
        }
    }
}

/// A row of the guarded table the harness's workers write through the fence.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct GuardedRow {
    /// The scope whose lease guarded the write.
    pub scope: Scope,
    /// The writer.
    pub owner: Owner,
    /// The token the write was made under.
    pub token: FencingToken,
    /// The cycle (one transaction) the row belongs to.
    pub cycle_id: i64,
    /// Index of the row within its cycle.
    pub item: i32,
    /// Commit-order sequence number (a `bigserial` in PostgreSQL).
    pub seq: i64,
    /// Server time of the write, taken under the lease row's lock.
    pub written_at: ServerTime,
    /// Server time its transaction committed, where the backend can tell
    /// (the simulated database exactly; PostgreSQL with
    /// `track_commit_timestamp = on`).
    pub committed_at: Option<ServerTime>,
}

/// Why a fenced commit was refused.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum CommitRefused {
    /// The fence found the lease no longer ours: nothing was written.
    LeaseLost,
}

/// The guarded table: what a fenced commit cycle writes.
#[derive(Clone, PartialEq, Eq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct GuardedLog {
    rows: Vec<GuardedRow>,
    seq_next: i64,
}

impl GuardedLog {
    /// An empty log.
    pub fn new() -> GuardedLog {
        GuardedLog {
            rows: Vec::new(),
            seq_next: 1,
        }
    }

    /// Every committed row in commit order.
    pub fn rows(&self) -> &[GuardedRow] {
        &self.rows
    }

    /// The fenced commit cycle: fence (owner AND token AND live, under the row
    /// lock) and the writes, as one transaction. All `items` rows or none.
    pub fn commit(
        &mut self,
        leases: &LeaseTable,
        lease: &Lease,
        cycle_id: i64,
        items: u32,
        now: ServerTime,
    ) -> Result<std::ops::Range<i64>, CommitRefused> {
        if !leases.holds(lease, now) {
            return Err(CommitRefused::LeaseLost);
        }
        Ok(self.append_unfenced(lease, cycle_id, items, now))
    }

    /// The same writes without the fence: what an unfenced worker does. Exists
    /// so the harness can show that the checker catches what the fence prevents.
    pub fn append_unfenced(
        &mut self,
        lease: &Lease,
        cycle_id: i64,
        items: u32,
        now: ServerTime,
    ) -> std::ops::Range<i64> {
        self.append_committed(lease, cycle_id, items, now, now)
    }

    /// Rows written at `written_at` (their transaction's `now()`) by a
    /// transaction that committed at `committed_at`, unfenced like
    /// [`Self::append_unfenced`].
    pub fn append_committed(
        &mut self,
        lease: &Lease,
        cycle_id: i64,
        items: u32,
        written_at: ServerTime,
        committed_at: ServerTime,
    ) -> std::ops::Range<i64> {
        assert!(
            committed_at >= written_at,
            "a transaction commits no earlier than its now()"
        );
        let seq_first = self.seq_next;
        for item in 0..items {
            self.rows.push(GuardedRow {
                scope: lease.scope().clone(),
                owner: lease.owner().clone(),
                token: lease.token(),
                cycle_id,
                item: i32::try_from(item).expect("items per cycle fit i32"),
                seq: self.seq_next,
                written_at,
                committed_at: Some(committed_at),
            });
            self.seq_next += 1;
        }
        seq_first..self.seq_next
    }
}
