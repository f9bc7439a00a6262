//! I1 judged in true time, and I3 at the exact commit instant: evidence only
//! the simulation has.
//!
//! Goal: the checker trusts the database's timestamps, so a simulated server
//! whose `now()` is not one clock — one that follows its client's clock, or
//! runs a clock per session — would be invisible to it: every interval it
//! reports could be consistent with itself and still overlap in reality.
//! Method: for every statement the database host notes when it arrived in
//! simulated (true) time and which server time it decided with. A grant's true
//! interval starts at its statement's arrival and ends `expires_at - now`
//! later (extended the same way by renewals and re-acquires, cut by release);
//! a new grant must start no earlier than its predecessor's true end. With one
//! server clock (`now = true + offset`, whatever the offset) this is exactly
//! the server-time rule, so the reference can never fail it; with any other
//! clock the overlap shows here.
//!
//! I3 needs the instant a write commits, which a history cannot give (a
//! cycle's outcome arrives later, and its rows carry `BEGIN`'s `now()`). The
//! host reports every COMMIT with the lease row as it is at that instant: a
//! write whose token is no longer the row's landed under a rival's grant. A
//! fence that keeps its row lock until commit makes that impossible; a fence
//! whose lock ended earlier, or no fence, shows here.
//! Invariant: the monitor lives with the durable tables (it survives a server
//! restart) and reads no clock of its own: the host passes both times in.

use std::collections::BTreeMap;

use leaseproof_history::{Invariant, Violation};
use leaseproof_protocol::semantics::GrantKind;
use leaseproof_protocol::{FencingToken, Lease, Scope, ServerTime};

use crate::trace::format_us;

/// One scope's current grant in true time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TrueGrant {
    token: FencingToken,
    true_end_us: i64,
    released: bool,
}

/// Grants in true time, and the overlaps found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrueTimeMonitor {
    grants: BTreeMap<Scope, TrueGrant>,
    /// Every overlap in true time (I1) and every write that committed under
    /// a rival's grant (I3), with the scope; no history event shows them.
    pub violations: Vec<Violation>,
}

impl TrueTimeMonitor {
    /// A granted acquisition (any kind) that arrived at `arrived_true_us` and
    /// decided with the server time `now`.
    pub fn granted(
        &mut self,
        lease: &Lease,
        kind: GrantKind,
        arrived_true_us: i64,
        now: ServerTime,
    ) {
        let true_end_us = arrived_true_us + (lease.expires_at().micros - now.micros);
        if kind == GrantKind::Reacquired {
            self.extended(lease, arrived_true_us, now);
            return;
        }
        if let Some(previous) = self.grants.get(lease.scope()) {
            if !previous.released && previous.true_end_us > arrived_true_us {
                self.violations.push(in_true_time(
                    Invariant::MutualExclusion,
                    lease.scope(),
                    format!(
                        "in true time, token {} granted at true {} while token {} ran to true {} (the server clock is not one clock)",
                        lease.token(),
                        format_us(arrived_true_us),
                        previous.token,
                        format_us(previous.true_end_us)
                    ),
                ));
            }
        }
        self.grants.insert(
            lease.scope().clone(),
            TrueGrant {
                token: lease.token(),
                true_end_us,
                released: false,
            },
        );
    }

    /// A renewal (or same-owner re-acquire) of `lease` that arrived at
    /// `arrived_true_us` and decided with `now`; `lease` is the row after it.
    pub fn extended(&mut self, lease: &Lease, arrived_true_us: i64, now: ServerTime) {
        let true_end_us = arrived_true_us + (lease.expires_at().micros - now.micros);
        if let Some(grant) = self.grants.get_mut(lease.scope()) {
            if grant.token == lease.token() {
                grant.true_end_us = grant.true_end_us.max(true_end_us);
            }
        }
    }

    /// A guarded write under `lease` committed at `committed_true_us` while
    /// the lease row carried `row_token`.
    pub fn committed(
        &mut self,
        lease: &Lease,
        row_token: Option<FencingToken>,
        committed_true_us: i64,
    ) {
        if row_token == Some(lease.token()) {
            return;
        }
        self.violations.push(in_true_time(
            Invariant::FencedWrites,
            lease.scope(),
            format!(
                "at commit, a write under token {} of {} committed at true {} while the row carried {} (it landed under a rival's grant)",
                lease.token(),
                lease.owner(),
                format_us(committed_true_us),
                row_token.map_or("no grant".to_string(), |token| format!("token {token}"))
            ),
        ));
    }

    /// A release of `token` on `scope` that arrived at `arrived_true_us`.
    pub fn released(&mut self, scope: &Scope, token: FencingToken, arrived_true_us: i64) {
        if let Some(grant) = self.grants.get_mut(scope) {
            if grant.token == token {
                grant.released = true;
                grant.true_end_us = grant.true_end_us.min(arrived_true_us);
            }
        }
    }
}

/// A violation the simulation's ground truth proves: no history event or
/// row shows it, so it names none.
fn in_true_time(invariant: Invariant, scope: &Scope, message: String) -> Violation {
    Violation {
        invariant,
        scope: scope.to_string(),
        events: Vec::new(),
        rows: Vec::new(),
        message,
    }
}

/// The server's stamps held against the clock the run configured, from the
/// history alone: the simulated server's clock is true time plus
/// `server_offset_us`, exactly, and a statement runs between its invoke and
/// its completion. So every ok acquire or renew must show
/// `expires_at - ttl >= invoke + offset` (expiry is never set below the
/// statement's `now + ttl`) and `granted_at <= complete + offset` (a grant is
/// stamped at or before the statement that reports it). A server clock that
/// runs backwards from the configured offset, follows a client, or stamps
/// from the future fails one of the two — the checker, which trusts the
/// stamps, cannot see it. Returns one sentence per stamp off the clock.
pub fn stamps_off_the_server_clock(
    history: &leaseproof_history::History,
    server_offset_us: i64,
) -> Vec<String> {
    use leaseproof_history::{EventKind, Op, OpResult, Outcome};
    let mut invoked: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
    let mut off = Vec::new();
    for event in &history.events {
        match &event.kind {
            EventKind::Invoke {
                op_id,
                op: Op::Acquire { ttl_us, .. } | Op::Renew { ttl_us, .. },
            } => {
                invoked.insert(*op_id, (event.true_time_us, *ttl_us));
            }
            EventKind::Complete {
                op_id,
                outcome:
                    Outcome::Ok {
                        result:
                            OpResult::Lease {
                                token,
                                granted_at_us,
                                expires_at_us,
                                ..
                            },
                    },
            } => {
                let Some(&(invoke_true_us, ttl_us)) = invoked.get(op_id) else {
                    continue;
                };
                let earliest_now_us = invoke_true_us + server_offset_us;
                let latest_now_us = event.true_time_us + server_offset_us;
                if expires_at_us - ttl_us < earliest_now_us {
                    off.push(format!(
                        "op {op_id} (token {token}) expires at {} - ttl, before its statement could run (server time {} at the earliest): the server's clock is not true time {:+} ms",
                        format_us(*expires_at_us),
                        format_us(earliest_now_us),
                        server_offset_us / 1_000
                    ));
                }
                if *granted_at_us > latest_now_us {
                    off.push(format!(
                        "op {op_id} (token {token}) granted at {}, after its reply (server time {} at the latest): the server's clock is not true time {:+} ms",
                        format_us(*granted_at_us),
                        format_us(latest_now_us),
                        server_offset_us / 1_000
                    ));
                }
            }
            _ => {}
        }
    }
    off
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaseproof_protocol::Owner;

    fn lease(token: i64, granted_at_us: i64, expires_at_us: i64) -> Lease {
        Lease::from_server_reply(
            Scope::new("s").unwrap(),
            Owner::new("w").unwrap(),
            FencingToken(token),
            ServerTime::from_micros(granted_at_us),
            ServerTime::from_micros(expires_at_us),
        )
    }

    /// An acquire invoked at true 1 ms, answered at true 1.5 ms, decided at
    /// true 1.2 ms by a server whose clock reads true + `server_minus_true_us`.
    fn acquire_history(server_minus_true_us: i64) -> leaseproof_history::History {
        acquire_history_decided_at(1_200, server_minus_true_us)
    }

    /// The same acquire, decided at true `decided_true_us`.
    fn acquire_history_decided_at(
        decided_true_us: i64,
        server_minus_true_us: i64,
    ) -> leaseproof_history::History {
        use leaseproof_history::{Op, OpResult, Outcome, Recorder, Stamp};
        let recorder = Recorder::new();
        let at = |true_time_us| Stamp {
            worker: "w",
            incarnation: 0,
            true_time_us,
            local_time_us: true_time_us,
        };
        let acquire = Op::Acquire {
            scope: "s".into(),
            owner: "w-0".into(),
            ttl_us: 2_000,
        };
        let op_id = recorder.invoke(at(1_000), acquire);
        let now_us = decided_true_us + server_minus_true_us;
        let lease = OpResult::Lease {
            token: 1,
            owner: "w-0".into(),
            granted_at_us: now_us,
            expires_at_us: now_us + 2_000,
        };
        recorder.complete(at(1_500), op_id, Outcome::Ok { result: lease });
        recorder.snapshot()
    }

    #[test]
    fn stamps_on_the_configured_clock_pass_and_any_other_clock_fails() {
        let offset_us = 3_600_000_000;
        assert_eq!(
            stamps_off_the_server_clock(&acquire_history(offset_us), offset_us),
            Vec::<String>::new()
        );
        assert_eq!(
            stamps_off_the_server_clock(&acquire_history(0), 0),
            Vec::<String>::new()
        );
        // The offset subtracted instead of added: expiry before the statement.
        let backwards = stamps_off_the_server_clock(&acquire_history(-offset_us), offset_us);
        assert_eq!(backwards.len(), 1, "{backwards:?}");
        assert!(
            backwards[0].contains("before its statement could run"),
            "{}",
            backwards[0]
        );
        // A clock 10 ms ahead of the configured one: granted after the reply.
        let ahead = stamps_off_the_server_clock(&acquire_history(offset_us + 10_000), offset_us);
        assert_eq!(ahead.len(), 1, "{ahead:?}");
        assert!(ahead[0].contains("after its reply"), "{}", ahead[0]);
    }

    #[test]
    fn a_statement_decided_at_its_invoke_or_its_reply_is_on_the_clock_and_a_microsecond_out_is_not()
    {
        let offset_us = 3_600_000_000;
        let off = |decided_true_us| {
            stamps_off_the_server_clock(
                &acquire_history_decided_at(decided_true_us, offset_us),
                offset_us,
            )
        };
        assert_eq!(off(1_000), Vec::<String>::new(), "decided as it was sent");
        assert_eq!(off(1_500), Vec::<String>::new(), "decided as it replied");
        let early = off(999);
        assert_eq!(early.len(), 1, "{early:?}");
        assert!(
            early[0].contains("before its statement could run"),
            "{}",
            early[0]
        );
        let late = off(1_501);
        assert_eq!(late.len(), 1, "{late:?}");
        assert!(late[0].contains("after its reply"), "{}", late[0]);
    }

    #[test]
    fn one_server_clock_with_any_offset_never_overlaps() {
        let offset_us = 3_600_000_000;
        let mut monitor = TrueTimeMonitor::default();
        let now = |true_us: i64| ServerTime::from_micros(true_us + offset_us);
        monitor.granted(
            &lease(1, offset_us, offset_us + 2_000),
            GrantKind::First,
            0,
            now(0),
        );
        monitor.extended(&lease(1, offset_us, offset_us + 3_000), 1_000, now(1_000));
        // Taken over exactly at the renewed end.
        monitor.granted(
            &lease(2, offset_us + 3_000, offset_us + 5_000),
            GrantKind::Takeover,
            3_000,
            now(3_000),
        );
        assert_eq!(monitor.violations, Vec::<Violation>::new());
    }

    #[test]
    fn a_server_clock_that_follows_its_client_is_caught() {
        // w1's clock reads true time; w2's runs 1.5 s ahead, and the server
        // decides with the client's clock: it hands w2 the lease at true
        // 0.6 s (its clock says 2.1 s, past w1's expiry) although w1's grant
        // runs to true 2 s. Every timestamp is consistent with the server's
        // own story; only true time shows the overlap.
        let mut monitor = TrueTimeMonitor::default();
        monitor.granted(
            &lease(1, 0, 2_000_000),
            GrantKind::First,
            0,
            ServerTime::from_micros(0),
        );
        let w2_now = ServerTime::from_micros(600_000 + 1_500_000);
        monitor.granted(
            &lease(2, w2_now.micros, w2_now.micros + 2_000_000),
            GrantKind::Takeover,
            600_000,
            w2_now,
        );
        assert_eq!(monitor.violations.len(), 1, "{:?}", monitor.violations);
        assert_eq!(monitor.violations[0].invariant, Invariant::MutualExclusion);
        assert!(
            monitor.violations[0]
                .message
                .contains("token #2 granted at true 0.600000s"),
            "{}",
            monitor.violations[0]
        );
    }

    #[test]
    fn a_takeover_inside_a_renewed_grants_extension_is_caught() {
        // Token 1 runs to true 2 ms, renewed at true 1 ms to true 3 ms; a
        // server whose clock jumped hands token 2 out at true 2.5 ms: before
        // the renewed end, after the original one. Only the renewal's
        // extension shows the overlap.
        let mut monitor = TrueTimeMonitor::default();
        let now = ServerTime::from_micros;
        monitor.granted(&lease(1, 0, 2_000), GrantKind::First, 0, now(0));
        monitor.extended(&lease(1, 0, 3_000), 1_000, now(1_000));
        monitor.granted(
            &lease(2, 9_000, 11_000),
            GrantKind::Takeover,
            2_500,
            now(9_000),
        );
        assert_eq!(monitor.violations.len(), 1, "{:?}", monitor.violations);
        assert_eq!(monitor.violations[0].invariant, Invariant::MutualExclusion);
        assert!(
            monitor.violations[0]
                .message
                .contains("ran to true 0.003000s"),
            "{}",
            monitor.violations[0]
        );
        // A renewal of another token (a stale renewal) extends nothing.
        let mut monitor = TrueTimeMonitor::default();
        monitor.granted(&lease(1, 0, 2_000), GrantKind::First, 0, now(0));
        monitor.extended(&lease(7, 0, 3_000), 1_000, now(1_000));
        monitor.granted(
            &lease(2, 2_500, 4_500),
            GrantKind::Takeover,
            2_500,
            now(2_500),
        );
        assert_eq!(monitor.violations, Vec::<Violation>::new());
    }

    #[test]
    fn a_released_grant_may_be_taken_at_once() {
        let mut monitor = TrueTimeMonitor::default();
        let now = ServerTime::from_micros;
        monitor.granted(&lease(1, 0, 2_000), GrantKind::First, 0, now(0));
        monitor.released(&Scope::new("s").unwrap(), FencingToken(1), 500);
        monitor.granted(&lease(2, 500, 2_500), GrantKind::Takeover, 500, now(500));
        assert!(monitor.violations.is_empty());
    }
}
