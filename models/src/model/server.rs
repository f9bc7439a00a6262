//! The server's side of the model: each statement as the database runs it,
//! and the ghost's bookkeeping of what really happened.
//!
//! Goal: the statements of docs/protocol.md (acquire, renew, the fence, the
//! fenced commit) in the model's terms, each variant's mistake at exactly the
//! point where it differs. Method: one method per statement over a mutable
//! state; the ghost is updated where the fact is produced. Invariant: a
//! statement is one atomic step (PostgreSQL serialises them on the row lock);
//! the monitors of I1, I2 and I3 are set here and nowhere else.

use super::{GhostGrant, LeaseModel, LeaseRow, LeaseState, Owner};
use crate::variant::Variant;

impl LeaseModel {
    /// A new grant (not a renewal) of `token` to the real incarnation `holder`,
    /// starting at `granted_at_ticks` (its statement's `now()`, which a late
    /// statement took before the present).
    pub(super) fn record_new_grant(
        state: &mut LeaseState,
        holder: Owner,
        token: u8,
        granted_at_ticks: u8,
        end_server_ticks: u8,
    ) {
        let ghost = &mut state.ghost;
        if let Some(previous) = ghost.grant {
            if previous.end_server_ticks > granted_at_ticks {
                ghost.grants_overlapped = true;
            } else if previous.holder != holder && !previous.released {
                ghost.takeover_after_expiry = true;
            }
        }
        if ghost.token_max_granted > 0 && token <= ghost.token_max_granted {
            ghost.tokens_not_increasing = true;
        }
        ghost.token_max_granted = ghost.token_max_granted.max(token);
        ghost.grants += 1;
        ghost.grant = Some(GhostGrant {
            holder,
            token,
            end_server_ticks,
            released: false,
        });
        ghost.holder_crashed_at_ticks = None;
    }

    /// The server accepted an extension of `token` for `holder` (renew, or a
    /// re-acquire the protocol saw as the same owner).
    pub(super) fn record_extension(
        state: &mut LeaseState,
        holder: Owner,
        token: u8,
        end_server_ticks: u8,
        same_owner_id: bool,
    ) {
        let Some(grant) = state.ghost.grant.as_mut() else {
            return;
        };
        if grant.token != token {
            return;
        }
        // The promise only grows: an extension that shortens the row (the
        // pre-fix rule) leaves the ghost at the end the holder was told, so
        // a rival granted before it shows as an overlap.
        if grant.holder == holder {
            grant.end_server_ticks = grant.end_server_ticks.max(end_server_ticks);
        } else if same_owner_id {
            // A restarted process inherited its predecessor's grant (owner ids
            // reused): the protocol sees one grant continuing.
            grant.holder = holder;
            grant.end_server_ticks = grant.end_server_ticks.max(end_server_ticks);
            state.ghost.holder_crashed_at_ticks = None;
        }
    }

    /// A guarded write by the real incarnation `writer` under `token` committed.
    pub(super) fn record_commit(state: &mut LeaseState, writer: Owner, token: u8) {
        let now = state.now_ticks;
        let ghost = &mut state.ghost;
        let current = match ghost.grant {
            Some(grant) => {
                grant.holder == writer && grant.token == token && now < grant.end_server_ticks
            }
            None => false,
        };
        if !current || token < ghost.commit_token_last {
            ghost.stale_write_committed = true;
        }
        ghost.commit_token_last = token;
    }

    /// The fence: the row lock is taken and owner (and token) must match and
    /// the grant must not have expired.
    pub(crate) fn fence_passes(
        &self,
        state: &LeaseState,
        worker: usize,
        owner: Owner,
        token: u8,
    ) -> bool {
        let Some(row) = state.row else {
            return false;
        };
        let owner_matches = row.owner == owner;
        let token_matches = self.variant == Variant::FenceOwnerOnly || row.token == token;
        let unexpired = row.expires_at_ticks > self.judging_time_ticks(state, worker);
        owner_matches && token_matches && unexpired
    }

    /// Single-statement acquire by `worker`'s `incarnation`, deciding with the
    /// `now()` of `started_ticks`; `None` when the lease is held (no write).
    pub(super) fn acquire(
        &self,
        state: &mut LeaseState,
        worker: usize,
        incarnation: u8,
        started_ticks: u8,
    ) -> Option<u8> {
        let me = self.owner_id(worker, incarnation);
        let real = Owner {
            worker: worker as u8,
            incarnation,
        };
        let judging_ticks = self.judging_time_at(state, worker, started_ticks);
        let expires_at_ticks = judging_ticks + self.ttl_ticks;
        let end_server_ticks = self.expiry_in_server_ticks(state, worker, expires_at_ticks);
        let may_grant = state.ghost.grants < self.grants_max;
        match state.row {
            None if may_grant => {
                state.row = Some(LeaseRow {
                    owner: me,
                    token: 1,
                    expires_at_ticks,
                });
                Self::record_new_grant(state, real, 1, started_ticks, end_server_ticks);
                Some(1)
            }
            Some(row) if row.owner == me && row.expires_at_ticks > judging_ticks => {
                // Idempotent re-acquire (e.g. after a lost reply): same token.
                let expires_at_ticks = self.extended_expiry(row.expires_at_ticks, expires_at_ticks);
                state.row = Some(LeaseRow {
                    expires_at_ticks,
                    ..row
                });
                let end_server_ticks = self.expiry_in_server_ticks(state, worker, expires_at_ticks);
                Self::record_extension(state, real, row.token, end_server_ticks, true);
                Some(row.token)
            }
            Some(row) if row.expires_at_ticks <= judging_ticks && may_grant => {
                let token = if self.variant == Variant::TokenNotAdvanced {
                    row.token
                } else {
                    row.token + 1
                };
                state.row = Some(LeaseRow {
                    owner: me,
                    token,
                    expires_at_ticks,
                });
                Self::record_new_grant(state, real, token, started_ticks, end_server_ticks);
                Some(token)
            }
            _ => None,
        }
    }

    /// A renewal of `token` by `worker`'s `incarnation`, deciding with the
    /// `now()` of `started_ticks`. Returns whether the row was extended.
    pub(super) fn renew(
        &self,
        state: &mut LeaseState,
        worker: usize,
        incarnation: u8,
        token: u8,
        started_ticks: u8,
    ) -> bool {
        let owner = self.owner_id(worker, incarnation);
        let real = Owner {
            worker: worker as u8,
            incarnation,
        };
        let judging_ticks = self.judging_time_at(state, worker, started_ticks);
        let Some(row) = state.row else {
            return false;
        };
        let owner_checked = self.variant != Variant::NoOwnerCheck;
        let matches = !owner_checked || (row.owner == owner && row.token == token);
        if !matches || row.expires_at_ticks <= judging_ticks {
            return false;
        }
        let expires_at_ticks =
            self.extended_expiry(row.expires_at_ticks, judging_ticks + self.ttl_ticks);
        state.row = Some(LeaseRow {
            expires_at_ticks,
            ..row
        });
        let end_server_ticks = self.expiry_in_server_ticks(state, worker, expires_at_ticks);
        Self::record_extension(state, real, token, end_server_ticks, false);
        true
    }

    /// A fenced (or, per variant, unfenced) commit attempt by `real` under `token`.
    /// Returns whether the write committed.
    pub(crate) fn commit(
        &self,
        state: &mut LeaseState,
        worker: usize,
        real: Owner,
        token: u8,
    ) -> bool {
        let owner = self.owner_id(worker, real.incarnation);
        if self.variant == Variant::TokenFenceAtStore {
            // The store's fence row moves forward only: it holds the last
            // committed token, which the ghost already keeps.
            if token < state.ghost.commit_token_last {
                state.ghost.stale_commit_refused = true;
                return false;
            }
            Self::record_commit(state, real, token);
            return true;
        }
        let fenced = !matches!(
            self.variant,
            Variant::UnfencedCommit | Variant::SessionLockLearnsLate
        );
        if fenced && !self.fence_passes(state, worker, owner, token) {
            state.ghost.stale_commit_refused = true;
            return false;
        }
        Self::record_commit(state, real, token);
        true
    }
}
