//! A granted lease, its fencing token and the server's clock.

use std::fmt;

use crate::{Owner, Scope, Ttl};

/// A point on the *server's* clock, in microseconds since the Unix epoch
/// (or since a simulation's epoch). Clients never produce one: every value comes
/// back from the database, which is the only clock lease decisions consult.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct ServerTime {
    /// Microseconds since the epoch.
    pub micros: i64,
}

impl ServerTime {
    /// A server time from microseconds since the epoch.
    pub const fn from_micros(micros: i64) -> ServerTime {
        ServerTime { micros }
    }

    /// `self + ttl`. The TTL's upper bound keeps this from overflowing for any
    /// time a clock can show; a server time within 7 days of `i64::MAX`
    /// microseconds (year 294,000) is a broken clock and panics.
    pub fn plus(self, ttl: Ttl) -> ServerTime {
        let micros = self.micros.checked_add(ttl.as_micros());
        ServerTime {
            micros: micros.expect("server time + ttl overflowed: the server clock is broken"),
        }
    }
}

/// As a UTC timestamp with microseconds, `2026-12-02T23:35:11.123456Z`:
/// a server time is a wall-clock reading, and people read dates.
impl fmt::Display for ServerTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.micros.div_euclid(1_000_000);
        let micros = self.micros.rem_euclid(1_000_000);
        let days = seconds.div_euclid(86_400);
        let of_day = seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            of_day / 3_600,
            of_day % 3_600 / 60,
            of_day % 60
        )
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`: eras of 400 years, March-based years so the leap day
/// ends one).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A fencing token: every grant of a scope gets one strictly greater than every
/// earlier grant of that scope; renewals keep it. Writes guarded by a lease
/// carry it, so a stale holder's write is recognisable as stale.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct FencingToken(pub i64);

impl FencingToken {
    /// The token of a scope's first grant.
    pub const FIRST: FencingToken = FencingToken(1);

    /// The token of the grant after this one.
    pub fn next(self) -> FencingToken {
        FencingToken(self.0.checked_add(1).expect("fencing token overflowed i64"))
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A grant as the server made it: who holds which scope, under which token,
/// from when until when (server time).
///
/// Holding a `Lease` value proves nothing about *now*: it says what was true
/// when the server answered. Only the fence inside a transaction
/// (`hold_for_update`) makes it true for the writes of that transaction.
///
/// The fields are read through methods and never change after the server's
/// answer: a holder cannot move its own token or expiry. A backend builds a
/// lease from the server's reply with [`Lease::from_server_reply`]; a value
/// built any other way gains nothing, because every renewal, release and
/// fence compares owner *and* token with the row, under the row's lock.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    scope: Scope,
    owner: Owner,
    token: FencingToken,
    granted_at: ServerTime,
    expires_at: ServerTime,
}

impl Lease {
    /// The lease a server's reply granted or renewed: for lease backends (the
    /// PostgreSQL lease, the simulated database, an adapter of a lease
    /// written elsewhere), which read these five values from their store.
    pub fn from_server_reply(
        scope: Scope,
        owner: Owner,
        token: FencingToken,
        granted_at: ServerTime,
        expires_at: ServerTime,
    ) -> Lease {
        Lease {
            scope,
            owner,
            token,
            granted_at,
            expires_at,
        }
    }

    /// Asserts that `renewed` renews this grant: the same scope, owner,
    /// token and grant time, an end no earlier than this one's. For code whose
    /// own store made the renewal (the lease library, the simulated
    /// database), where anything else is a bug of this project; a harness
    /// judging a design it does not own records the reply instead, and the
    /// checker convicts a changed token (I2).
    pub fn assert_renewed_as(&self, renewed: &Lease) {
        assert_eq!(renewed.scope, self.scope, "a renewal keeps its scope");
        assert_eq!(renewed.owner, self.owner, "a renewal keeps its owner");
        assert_eq!(renewed.token, self.token, "a renewal keeps its token");
        assert_eq!(
            renewed.granted_at, self.granted_at,
            "a renewal keeps its grant time"
        );
        assert!(
            renewed.expires_at >= self.expires_at,
            "a renewal moves the end only forward: {} before {}",
            renewed.expires_at,
            self.expires_at
        );
    }

    /// The scope held.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The holder.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The grant's fencing token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Server time the grant was made (kept across renewals).
    pub fn granted_at(&self) -> ServerTime {
        self.granted_at
    }

    /// Server time the grant stops being valid unless renewed.
    pub fn expires_at(&self) -> ServerTime {
        self.expires_at
    }
}

/// Who held a scope when an acquisition was refused: the holder's owner id,
/// its fencing token and the end of its grant (server time), as the server
/// read them. Past tense, like every read: the grant may have ended since.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holder {
    /// The holder's owner id.
    pub owner: Owner,
    /// The holder's fencing token.
    pub token: FencingToken,
    /// When the holder's grant ends unless renewed.
    pub expires_at: ServerTime,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} under token {} until {}",
            self.owner, self.token, self.expires_at
        )
    }
}
