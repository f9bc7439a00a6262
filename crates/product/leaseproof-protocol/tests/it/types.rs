//! The validated types as users and the harness see them: exact bounds,
//! conversions and renderings (reports and traces print them), and the one
//! classification the worker loop branches on.
//!
//! Goal: pin the absolute values a boundary test relative to the constants
//! cannot (a changed `Ttl::MAX` keeps `from_micros(MAX)` valid). Method:
//! plain assertions, found wanting by mutation testing (`ci/mutants.sh`).

use std::time::Duration;

use leaseproof_protocol::semantics::LeaseTable;
use leaseproof_protocol::{
    FencingToken, InvalidInput, Lease, LeaseError, Owner, Scope, ServerTime, Ttl,
};

#[test]
fn ttl_bounds_are_one_millisecond_and_seven_days() {
    const SEVEN_DAYS_US: i64 = 7 * 24 * 60 * 60 * 1_000 * 1_000;
    assert_eq!(Ttl::MAX.as_micros(), 604_800_000_000);
    assert_eq!(SEVEN_DAYS_US, 604_800_000_000);
    assert_eq!(
        Ttl::from_micros(SEVEN_DAYS_US).unwrap().as_micros(),
        SEVEN_DAYS_US
    );
    assert!(matches!(
        Ttl::from_micros(SEVEN_DAYS_US + 1),
        Err(InvalidInput::TtlTooLong { .. })
    ));
    assert_eq!(Ttl::MIN.as_micros(), 1_000);
    assert!(Ttl::from_micros(1_000).is_ok());
    assert!(matches!(
        Ttl::from_micros(999),
        Err(InvalidInput::TtlTooShort { .. })
    ));
    assert!(matches!(Ttl::from_micros(0), Err(InvalidInput::TtlZero)));
    assert!(matches!(
        Ttl::from_micros(-1),
        Err(InvalidInput::TtlNegative { micros: -1 })
    ));
}

#[test]
fn a_ttl_converts_to_its_microseconds_and_duration() {
    let ttl = Ttl::from_millis(1_500).unwrap();
    assert_eq!(i64::from(ttl), 1_500_000);
    assert_eq!(ttl.as_duration(), Duration::from_millis(1_500));
    assert_eq!(Ttl::try_from(2_000_i64).unwrap().as_micros(), 2_000);
}

#[test]
fn scopes_owners_tokens_and_times_render_as_reports_print_them() {
    let scope = Scope::new("myapp:public.events").unwrap();
    assert_eq!(scope.to_string(), "myapp:public.events");
    assert_eq!(format!("{scope:?}"), "Scope(\"myapp:public.events\")");
    assert_eq!(String::from(scope), "myapp:public.events");
    let owner = Owner::new("host:42:00ff").unwrap();
    assert_eq!(owner.to_string(), "host:42:00ff");
    assert_eq!(format!("{owner:?}"), "Owner(\"host:42:00ff\")");
    assert_eq!(String::from(owner), "host:42:00ff");
    assert_eq!(FencingToken(7).to_string(), "#7");
    assert_eq!(
        ServerTime::from_micros(1_500_000).to_string(),
        "1970-01-01T00:00:01.500000Z"
    );
    assert_eq!(
        ServerTime::from_micros(-1).to_string(),
        "1969-12-31T23:59:59.999999Z"
    );
    // A leap day, the turn of a century that is a leap year, and today.
    assert_eq!(
        ServerTime::from_micros(951_782_400_000_000).to_string(),
        "2000-02-29T00:00:00.000000Z"
    );
    assert_eq!(
        ServerTime::from_micros(4_107_542_399_000_001).to_string(),
        "2100-02-28T23:59:59.000001Z"
    );
    assert_eq!(
        ServerTime::from_micros(1_796_254_511_123_456).to_string(),
        "2026-12-02T23:35:11.123456Z"
    );
}

#[test]
fn a_generated_owner_names_this_host_and_process() {
    let owner = Owner::generate().to_string();
    // The id keeps at most 64 characters of the host name.
    let host: String = gethostname().chars().take(64).collect();
    assert!(
        owner.starts_with(&format!("{host}:{}:", std::process::id())),
        "{owner}"
    );
    assert!(!owner.contains('\0'));
}

fn gethostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_default()
}

#[test]
fn only_an_unknown_outcome_is_unknown() {
    let unknown = LeaseError::OutcomeUnknown {
        operation: "commit",
        source: "reply lost".into(),
    };
    assert!(unknown.is_outcome_unknown());
    let held = LeaseError::Held {
        scope: Scope::new("s").unwrap(),
        holder: None,
    };
    assert!(!held.is_outcome_unknown());
}

#[test]
fn expire_now_ends_a_live_grant_only() {
    let scope = Scope::new("s").unwrap();
    let owner = Owner::new("a").unwrap();
    let at = ServerTime::from_micros;
    let mut table = LeaseTable::new();
    assert!(!table.expire_now(&scope, at(0)), "no row yet");
    table.acquire(&scope, &owner, Ttl::from_millis(10).unwrap(), at(0));
    assert_eq!(table.rows().count(), 1);
    assert!(table.expire_now(&scope, at(5_000)));
    assert_eq!(table.row(&scope).unwrap().expires_at, at(5_000));
    assert!(!table.expire_now(&scope, at(6_000)), "already expired");
}

#[test]
fn errors_say_whether_the_same_call_may_succeed_again() {
    use leaseproof_protocol::{FencingToken, LeaseError, Scope};
    let scope = Scope::new("s").unwrap();
    let source = || -> leaseproof_protocol::BackendError { "x".into() };
    let retryable = [
        LeaseError::Held {
            scope: scope.clone(),
            holder: None,
        },
        LeaseError::Unavailable { source: source() },
        LeaseError::OutcomeUnknown {
            operation: "acquire",
            source: source(),
        },
    ];
    for error in &retryable {
        assert!(error.is_retryable(), "{error}");
    }
    let final_ = [
        LeaseError::Lost {
            scope,
            token: FencingToken(1),
        },
        LeaseError::Invalid(Scope::new("").unwrap_err()),
        LeaseError::Schema { source: source() },
        LeaseError::TransactionDomain {
            reason: "another pool",
        },
        LeaseError::Database { source: source() },
    ];
    for error in &final_ {
        assert!(!error.is_retryable(), "{error}");
    }
}

fn grant(token: i64, expires_at_us: i64) -> Lease {
    Lease::from_server_reply(
        Scope::new("s").unwrap(),
        Owner::new("w").unwrap(),
        FencingToken(token),
        ServerTime::from_micros(0),
        ServerTime::from_micros(expires_at_us),
    )
}

#[test]
fn a_renewal_keeps_its_grant_and_moves_its_end_only_forward() {
    grant(3, 1_000).assert_renewed_as(&grant(3, 1_000));
    grant(3, 1_000).assert_renewed_as(&grant(3, 5_000));
    let token_changed =
        std::panic::catch_unwind(|| grant(3, 1_000).assert_renewed_as(&grant(4, 5_000)));
    assert!(token_changed.is_err(), "a new token is not a renewal");
    let shortened =
        std::panic::catch_unwind(|| grant(3, 5_000).assert_renewed_as(&grant(3, 1_000)));
    assert!(shortened.is_err(), "a renewal never shortens");
}
