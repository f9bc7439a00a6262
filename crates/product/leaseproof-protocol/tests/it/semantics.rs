use leaseproof_protocol::semantics::{
    Acquisition, ExtensionRule, GrantKind, GuardedLog, LeaseTable,
};
use leaseproof_protocol::{FencingToken, Lease, Owner, Scope, ServerTime, Ttl};
use proptest::prelude::*;

fn t(micros: i64) -> ServerTime {
    ServerTime::from_micros(micros)
}

fn granted(acquisition: Acquisition) -> (Lease, GrantKind) {
    match acquisition {
        Acquisition::Granted { lease, kind } => (lease, kind),
        Acquisition::Held { .. } => panic!("expected a grant, got {acquisition:?}"),
    }
}

#[test]
fn held_lease_is_refused_until_it_expires_then_taken_over_with_next_token() {
    let mut table = LeaseTable::new();
    let scope = Scope::new("job").unwrap();
    let (a, b) = (Owner::new("a").unwrap(), Owner::new("b").unwrap());
    let ttl = Ttl::from_millis(10).unwrap();
    let (lease_a, kind) = granted(table.acquire(&scope, &a, ttl, t(0)));
    assert_eq!(kind, GrantKind::First);
    assert_eq!(lease_a.token(), FencingToken::FIRST);
    assert_eq!(lease_a.expires_at(), t(10_000));
    assert_eq!(
        table.acquire(&scope, &b, ttl, t(9_999)),
        Acquisition::Held {
            holder: a.clone(),
            token: FencingToken::FIRST,
            expires_at: t(10_000)
        }
    );
    // Expiry is exclusive: at expires_at exactly the scope is free.
    let (lease_b, kind) = granted(table.acquire(&scope, &b, ttl, t(10_000)));
    assert_eq!(kind, GrantKind::Takeover);
    assert_eq!(lease_b.token(), FencingToken(2));
    assert_eq!(lease_b.granted_at(), t(10_000));
    assert!(!table.holds(&lease_a, t(10_000)));
    assert!(table.holds(&lease_b, t(10_000)));
}

#[test]
fn reacquire_by_same_owner_keeps_token_and_extends_expiry() {
    let mut table = LeaseTable::new();
    let scope = Scope::new("job").unwrap();
    let a = Owner::new("a").unwrap();
    let ttl = Ttl::from_millis(10).unwrap();
    let (first, _) = granted(table.acquire(&scope, &a, ttl, t(0)));
    let (again, kind) = granted(table.acquire(&scope, &a, ttl, t(4_000)));
    assert_eq!(kind, GrantKind::Reacquired);
    assert_eq!(again.token(), first.token());
    assert_eq!(again.granted_at(), first.granted_at());
    assert_eq!(again.expires_at(), t(14_000));
    // After expiry the same owner gets a *new* grant: its old token is dead.
    let (later, kind) = granted(table.acquire(&scope, &a, ttl, t(14_000)));
    assert_eq!(kind, GrantKind::Takeover);
    assert_eq!(later.token(), FencingToken(2));
}

#[test]
fn renew_and_release_require_owner_and_token_and_release_keeps_the_row() {
    let mut table = LeaseTable::new();
    let scope = Scope::new("job").unwrap();
    let (a, b) = (Owner::new("a").unwrap(), Owner::new("b").unwrap());
    let ttl = Ttl::from_millis(10).unwrap();
    let (lease, _) = granted(table.acquire(&scope, &a, ttl, t(0)));
    let forged = |owner: Owner, token: FencingToken| {
        Lease::from_server_reply(
            lease.scope().clone(),
            owner,
            token,
            lease.granted_at(),
            lease.expires_at(),
        )
    };
    let wrong_owner = forged(b.clone(), lease.token());
    let stale_token = forged(lease.owner().clone(), FencingToken(7));
    assert_eq!(table.renew(&wrong_owner, ttl, t(1)), None);
    assert_eq!(table.renew(&stale_token, ttl, t(1)), None);
    assert_eq!(table.release(&wrong_owner, t(1)), None);
    assert_eq!(table.release(&stale_token, t(1)), None);
    let renewed = table.renew(&lease, ttl, t(5_000)).unwrap();
    assert_eq!(renewed.token(), lease.token());
    assert_eq!(renewed.expires_at(), t(15_000));
    let released = table.release(&lease, t(6_000)).unwrap();
    assert_eq!(released.expires_at(), t(6_000));
    assert_eq!(
        table.release(&lease, t(6_000)),
        None,
        "a second release finds nothing to release"
    );
    assert_eq!(
        table.renew(&lease, ttl, t(6_000)),
        None,
        "a released lease cannot be renewed"
    );
    let (next, _) = granted(table.acquire(&scope, &b, ttl, t(6_000)));
    assert_eq!(
        next.token(),
        FencingToken(2),
        "release must not restart the token"
    );
}

#[test]
fn fenced_commit_writes_all_items_or_none() {
    let mut table = LeaseTable::new();
    let mut log = GuardedLog::new();
    let scope = Scope::new("job").unwrap();
    let (a, b) = (Owner::new("a").unwrap(), Owner::new("b").unwrap());
    let ttl = Ttl::from_millis(10).unwrap();
    let (lease_a, _) = granted(table.acquire(&scope, &a, ttl, t(0)));
    assert_eq!(log.commit(&table, &lease_a, 1, 3, t(1)), Ok(1..4));
    let (_lease_b, _) = granted(table.acquire(&scope, &b, ttl, t(10_000)));
    assert!(log.commit(&table, &lease_a, 2, 3, t(10_001)).is_err());
    assert_eq!(log.rows().len(), 3);
    assert!(log
        .rows()
        .iter()
        .all(|row| row.cycle_id == 1 && row.token == FencingToken(1)));
}

#[derive(Clone, Debug)]
enum Step {
    Acquire { owner: usize, ttl_ms: i64 },
    Renew { owner: usize, ttl_ms: i64 },
    Release { owner: usize },
    Advance { micros: i64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize, 1..20i64).prop_map(|(owner, ttl_ms)| Step::Acquire { owner, ttl_ms }),
        (0..3usize, 1..20i64).prop_map(|(owner, ttl_ms)| Step::Renew { owner, ttl_ms }),
        (0..3usize).prop_map(|owner| Step::Release { owner }),
        (0..15_000i64).prop_map(|micros| Step::Advance { micros }),
    ]
}

proptest! {
    /// Whatever the interleaving, at most one owner's grant is live at any
    /// server time, and each new grant's token exceeds every earlier one.
    #[test]
    fn random_operations_keep_one_live_holder_and_increasing_tokens(steps in proptest::collection::vec(step(), 1..80)) {
        let scope = Scope::new("job").unwrap();
        let owners: Vec<Owner> = (0..3).map(|i| Owner::new(format!("w{i}")).unwrap()).collect();
        let mut table = LeaseTable::new();
        let mut held: Vec<Option<Lease>> = vec![None; 3];
        let mut now = t(0);
        let mut token_max = FencingToken(0);
        for step in steps {
            match step {
                Step::Acquire { owner, ttl_ms } => {
                    if let Acquisition::Granted { lease, kind } = table.acquire(&scope, &owners[owner], Ttl::from_millis(ttl_ms).unwrap(), now) {
                        match kind {
                            GrantKind::Reacquired => prop_assert_eq!(lease.token(), token_max),
                            _ => { prop_assert!(lease.token() > token_max); token_max = lease.token(); }
                        }
                        held[owner] = Some(lease);
                    }
                }
                Step::Renew { owner, ttl_ms } => {
                    if let Some(lease) = held[owner].clone() {
                        if let Some(renewed) = table.renew(&lease, Ttl::from_millis(ttl_ms).unwrap(), now) {
                            prop_assert_eq!(renewed.token(), lease.token());
                            held[owner] = Some(renewed);
                        }
                    }
                }
                Step::Release { owner } => {
                    if let Some(lease) = held[owner].take() {
                        let _ = table.release(&lease, now);
                    }
                }
                Step::Advance { micros } => now = t(now.micros + micros),
            }
            let live_holders = held.iter().flatten().filter(|lease| table.holds(lease, now)).count();
            prop_assert!(live_holders <= 1, "{} live holders at {}", live_holders, now);
        }
    }
}

/// The delayed-retry bug, the shape the chaos sweep found (seeds 345 and 1171): a retry
/// lands first and the holder is told "until 15 ms"; the older attempt it
/// replaced lands later with its own stale `now()` (2 ms). The grant's end
/// must not move back, or a rival is granted inside the promised interval.
fn stale_reacquire_after_a_newer_one(rule: ExtensionRule) -> (LeaseTable, Lease) {
    let mut table = LeaseTable::with_extension_rule(rule);
    let scope = Scope::new("job").unwrap();
    let a = Owner::new("a").unwrap();
    let ttl = Ttl::from_millis(10).unwrap();
    let (first, _) = granted(table.acquire(&scope, &a, ttl, t(0)));
    let (told, kind) = granted(table.acquire(&scope, &a, ttl, t(5_000)));
    assert_eq!(kind, GrantKind::Reacquired);
    assert_eq!(told.expires_at(), t(15_000));
    let (stale, kind) = granted(table.acquire(&scope, &a, ttl, t(2_000)));
    assert_eq!(kind, GrantKind::Reacquired);
    assert_eq!(stale.token(), first.token());
    assert_eq!(stale.granted_at(), first.granted_at());
    (table, told)
}

#[test]
fn a_late_same_owner_reacquire_never_shortens_the_grant() {
    let (mut table, told) = stale_reacquire_after_a_newer_one(ExtensionRule::NeverShorten);
    let row = table.row(told.scope()).unwrap().clone();
    assert_eq!(row.expires_at, told.expires_at(), "the promised end stands");
    let b = Owner::new("b").unwrap();
    let ttl = Ttl::from_millis(10).unwrap();
    assert!(matches!(
        table.acquire(told.scope(), &b, ttl, t(12_000)),
        Acquisition::Held { .. }
    ));
    assert!(table.holds(&told, t(14_999)));
}

#[test]
fn the_pre_fix_rule_lets_a_late_reacquire_shorten_the_grant() {
    // Negative control: the same statements under the old rule open the
    // window the checker reports as I1.
    let (mut table, told) = stale_reacquire_after_a_newer_one(ExtensionRule::LatestStatementWins);
    assert_eq!(table.row(told.scope()).unwrap().expires_at, t(12_000));
    let b = Owner::new("b").unwrap();
    let ttl = Ttl::from_millis(10).unwrap();
    let (rival, kind) = granted(table.acquire(told.scope(), &b, ttl, t(12_000)));
    assert_eq!(kind, GrantKind::Takeover);
    assert!(rival.granted_at() < told.expires_at(), "inside the promise");
}

#[test]
fn a_late_renewal_never_shortens_the_grant() {
    for (rule, expires_at_us) in [
        (ExtensionRule::NeverShorten, 18_000),
        (ExtensionRule::LatestStatementWins, 13_000),
    ] {
        let mut table = LeaseTable::with_extension_rule(rule);
        let scope = Scope::new("job").unwrap();
        let a = Owner::new("a").unwrap();
        let ttl = Ttl::from_millis(10).unwrap();
        let (lease, _) = granted(table.acquire(&scope, &a, ttl, t(0)));
        let fresh = table.renew(&lease, ttl, t(8_000)).unwrap();
        assert_eq!(fresh.expires_at(), t(18_000));
        let stale = table.renew(&lease, ttl, t(3_000)).unwrap();
        assert_eq!(stale.token(), lease.token());
        assert_eq!(stale.granted_at(), lease.granted_at());
        assert_eq!(stale.expires_at(), t(expires_at_us), "{rule:?}");
    }
}

#[derive(Clone, Debug)]
enum LateStep {
    /// A statement whose `now()` lies `lag` µs before the present (it started
    /// then and landed now), as a delayed retry or a row-lock wait gives.
    Acquire {
        owner: usize,
        lag_us: i64,
    },
    Renew {
        owner: usize,
        lag_us: i64,
    },
    Release {
        owner: usize,
    },
    Advance {
        micros: i64,
    },
}

fn late_step() -> impl Strategy<Value = LateStep> {
    prop_oneof![
        (0..3usize, 0..8_000i64).prop_map(|(owner, lag_us)| LateStep::Acquire { owner, lag_us }),
        (0..3usize, 0..8_000i64).prop_map(|(owner, lag_us)| LateStep::Renew { owner, lag_us }),
        (0..3usize).prop_map(|owner| LateStep::Release { owner }),
        (0..6_000i64).prop_map(|micros| LateStep::Advance { micros }),
    ]
}

proptest! {
    /// With statements landing late (each deciding with the `now()` it started
    /// with), no grant starts before the end its predecessor's holder was
    /// promised (the largest `expires_at` any reply of that grant carried),
    /// unless that holder released it.
    #[test]
    fn late_statements_never_grant_inside_a_promised_interval(steps in proptest::collection::vec(late_step(), 1..80)) {
        let scope = Scope::new("job").unwrap();
        let owners: Vec<Owner> = (0..3).map(|i| Owner::new(format!("w{i}")).unwrap()).collect();
        let ttl = Ttl::from_millis(10).unwrap();
        let mut table = LeaseTable::new();
        let mut held: Vec<Option<Lease>> = vec![None; 3];
        let mut now_us = 10_000i64;
        // Token of the current grant, its promised end, and whether released.
        let mut promise: Option<(FencingToken, ServerTime, bool)> = None;
        let keep = |lease: &Lease, promise: &mut Option<(FencingToken, ServerTime, bool)>| {
            if let Some((token, end, _)) = promise.as_mut() {
                if *token == lease.token() {
                    *end = (*end).max(lease.expires_at());
                }
            }
        };
        for step in steps {
            match step {
                LateStep::Acquire { owner, lag_us } => {
                    let stamp = t(now_us - lag_us);
                    if let Acquisition::Granted { lease, kind } = table.acquire(&scope, &owners[owner], ttl, stamp) {
                        if kind != GrantKind::Reacquired {
                            if let Some((_, end, released)) = promise {
                                prop_assert!(released || lease.granted_at() >= end,
                                    "token {} granted at {} inside the promise ending {}", lease.token(), lease.granted_at(), end);
                            }
                            promise = Some((lease.token(), lease.expires_at(), false));
                        }
                        keep(&lease, &mut promise);
                        held[owner] = Some(lease);
                    }
                }
                LateStep::Renew { owner, lag_us } => {
                    if let Some(lease) = held[owner].clone() {
                        if let Some(renewed) = table.renew(&lease, ttl, t(now_us - lag_us)) {
                            prop_assert!(renewed.expires_at() >= lease.expires_at(), "a renewal shortened the grant");
                            keep(&renewed, &mut promise);
                            held[owner] = Some(renewed);
                        }
                    }
                }
                LateStep::Release { owner } => {
                    if let Some(lease) = held[owner].take() {
                        if table.release(&lease, t(now_us)).is_some() {
                            if let Some((token, _, released)) = promise.as_mut() {
                                if *token == lease.token() {
                                    *released = true;
                                }
                            }
                        }
                    }
                }
                LateStep::Advance { micros } => now_us += micros,
            }
        }
    }
}
