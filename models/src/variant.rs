//! The reference protocol and its broken variants, as named configurations.
//!
//! Goal: give every known way of getting a lease wrong a name the CLI and the
//! tests can use, and pin which property each one must break.
//! Method: one enum; the model consults it at exactly the step that differs.
//! Invariant: `Variant::Reference` breaks nothing; every other variant breaks
//! the property `expected_violation()` names (the tests hold both).

use crate::properties;
use std::fmt;
use std::str::FromStr;

/// Which protocol the model runs: the reference or one deliberate mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// The reference protocol of docs/protocol.md.
    Reference,
    /// Expiry judged by the worker's own clock: the worker sends its local time
    /// and the row stores deadlines in that worker's clock.
    WorkerClockExpiry,
    /// Acquisition as a read (is the row free?) followed by a separate,
    /// unconditional write.
    ReadThenWrite,
    /// Commit without the fence: the worker trusts its belief deadline. This
    /// is also pg_partsmith's Redis lock (`SET NX PX`, a TTL on the store's clock)
    /// used without checking its token where the work writes.
    UnfencedCommit,
    /// The fence checked in one step (lock released) and the write done in a later one.
    FenceThenWrite,
    /// Release and renew match the scope only, not owner and token.
    NoOwnerCheck,
    /// A takeover keeps the previous token instead of advancing it.
    TokenNotAdvanced,
    /// Owner ids are reused by a restarted process and the fence matches the
    /// owner but not the token.
    FenceOwnerOnly,
    /// Schema creation without the retry: a worker that loses the
    /// concurrent-creation race fails to start.
    SchemaNoRetry,
    /// A same-owner extension (renewal, idempotent re-acquire) sets
    /// `expires_at = now + ttl` from its own `now()`: a statement that lands
    /// late moves a live grant's end back (the protocol before the delayed-retry fix).
    ShorteningExtension,
    /// pg_partsmith's advisory lock: a session lock with no fence. The server
    /// frees it the moment the holder's session dies, and the holder learns
    /// late (at its next probe): meanwhile it works on, unfenced.
    SessionLockLearnsLate,
    /// A Redis lock's token checked where the work writes (leaseproof's
    /// `redis-fenced`): the store refuses a token below the last one it
    /// committed, and knows nothing of the lock itself — a stale holder's
    /// write lands if it comes before the new holder's first.
    TokenFenceAtStore,
    /// A refused rival backs off a whole TTL beyond its retry interval: safe,
    /// but a crashed holder's scope stays unclaimed longer than TTL plus one
    /// interval (checked with [`crate::LeaseModel::with_retry_interval`]).
    BackoffBeyondInterval,
}

impl Variant {
    /// Every variant, the reference first.
    pub const ALL: [Variant; 13] = [
        Variant::Reference,
        Variant::WorkerClockExpiry,
        Variant::ReadThenWrite,
        Variant::UnfencedCommit,
        Variant::FenceThenWrite,
        Variant::NoOwnerCheck,
        Variant::TokenNotAdvanced,
        Variant::FenceOwnerOnly,
        Variant::SchemaNoRetry,
        Variant::ShorteningExtension,
        Variant::SessionLockLearnsLate,
        Variant::TokenFenceAtStore,
        Variant::BackoffBeyondInterval,
    ];

    /// The kebab-case name used on the command line, e.g. `"unfenced-commit"`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Reference => "reference",
            Variant::WorkerClockExpiry => "worker-clock-expiry",
            Variant::ReadThenWrite => "read-then-write",
            Variant::UnfencedCommit => "unfenced-commit",
            Variant::FenceThenWrite => "fence-then-write",
            Variant::NoOwnerCheck => "no-owner-check",
            Variant::TokenNotAdvanced => "token-not-advanced",
            Variant::FenceOwnerOnly => "fence-owner-only",
            Variant::SchemaNoRetry => "schema-no-retry",
            Variant::ShorteningExtension => "shortening-extension",
            Variant::SessionLockLearnsLate => "session-lock-learns-late",
            Variant::TokenFenceAtStore => "token-fence-at-store",
            Variant::BackoffBeyondInterval => "backoff-beyond-interval",
        }
    }

    /// One sentence saying what the variant does differently.
    pub fn description(self) -> &'static str {
        match self {
            Variant::Reference => "the reference protocol",
            Variant::WorkerClockExpiry => "expiry judged by the worker's own clock",
            Variant::ReadThenWrite => "acquire as a read, then a separate write",
            Variant::UnfencedCommit => "commit without the fence, trusting the belief deadline",
            Variant::FenceThenWrite => "fence checked in one step, write done in another",
            Variant::NoOwnerCheck => "release and renew without the owner check",
            Variant::TokenNotAdvanced => "token not advanced on takeover",
            Variant::FenceOwnerOnly => "fence matches owner but not token; owner ids reused",
            Variant::SchemaNoRetry => "schema creation without the retry",
            Variant::ShorteningExtension => {
                "a late same-owner renewal or re-acquire moves the grant's end back"
            }
            Variant::SessionLockLearnsLate => {
                "a session lock freed when its session dies, the holder learning late, no fence"
            }
            Variant::TokenFenceAtStore => {
                "the token checked at the store only: below the last committed one is refused"
            }
            Variant::BackoffBeyondInterval => {
                "a refused rival backs off a TTL beyond its retry interval"
            }
        }
    }

    /// The property this variant must break, or `None` for the reference.
    pub fn expected_violation(self) -> Option<&'static str> {
        match self {
            Variant::Reference => None,
            Variant::WorkerClockExpiry => Some(properties::MUTUAL_EXCLUSION),
            Variant::ReadThenWrite => Some(properties::MUTUAL_EXCLUSION),
            Variant::UnfencedCommit => Some(properties::FENCED_WRITES),
            Variant::FenceThenWrite => Some(properties::FENCED_WRITES),
            Variant::NoOwnerCheck => Some(properties::MUTUAL_EXCLUSION),
            Variant::TokenNotAdvanced => Some(properties::TOKEN_ORDER),
            Variant::FenceOwnerOnly => Some(properties::FENCED_WRITES),
            Variant::SchemaNoRetry => Some(properties::EVERY_WORKER_STARTS),
            Variant::ShorteningExtension => Some(properties::MUTUAL_EXCLUSION),
            Variant::SessionLockLearnsLate => Some(properties::FENCED_WRITES),
            Variant::TokenFenceAtStore => Some(properties::FENCED_WRITES),
            Variant::BackoffBeyondInterval => Some(properties::CRASHED_HOLDER_TAKEN_OVER),
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// A variant name that is not one of `Variant::ALL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownVariant(pub String);

impl fmt::Display for UnknownVariant {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
        write!(
            formatter,
            "unknown variant {:?}; expected one of: {}",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownVariant {}

impl FromStr for Variant {
    type Err = UnknownVariant;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Variant::ALL
            .into_iter()
            .find(|variant| variant.name() == text)
            .ok_or_else(|| UnknownVariant(text.to_string()))
    }
}
