//! How long a grant lasts without renewal.

use std::time::Duration;

use crate::InvalidInput;

/// A lease's time to live: how long a grant stays valid without renewal.
///
/// Between [`Ttl::MIN`] (1 ms) and [`Ttl::MAX`] (7 days), held in microseconds,
/// PostgreSQL's timestamp resolution. The upper bound is what makes
/// `expires_at = now + ttl` unable to overflow for any server time a real clock
/// shows, and it is far above any sensible lease: a crashed holder blocks its
/// scope for one TTL, so week-long TTLs are configuration mistakes.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "i64", into = "i64")]
pub struct Ttl {
    micros: i64,
}

impl Ttl {
    /// The shortest TTL accepted: 1 ms.
    pub const MIN: Ttl = Ttl { micros: 1_000 };
    /// The longest TTL accepted: 7 days.
    pub const MAX: Ttl = Ttl {
        micros: 7 * 24 * 3_600 * 1_000_000,
    };

    /// A TTL of `micros` microseconds; zero, negative and out-of-range values are errors.
    pub fn from_micros(micros: i64) -> Result<Ttl, InvalidInput> {
        if micros == 0 {
            return Err(InvalidInput::TtlZero);
        }
        if micros < 0 {
            return Err(InvalidInput::TtlNegative { micros });
        }
        if micros < Self::MIN.micros {
            return Err(InvalidInput::TtlTooShort {
                micros,
                micros_min: Self::MIN.micros,
            });
        }
        if micros > Self::MAX.micros {
            return Err(InvalidInput::TtlTooLong {
                micros,
                micros_max: Self::MAX.micros,
            });
        }
        Ok(Ttl { micros })
    }

    /// A TTL of `millis` milliseconds (signed, so a caller's negative value is
    /// reported as negative rather than wrapped).
    pub fn from_millis(millis: i64) -> Result<Ttl, InvalidInput> {
        let micros = millis.checked_mul(1_000).ok_or(InvalidInput::TtlOverflow)?;
        Ttl::from_micros(micros)
    }

    /// A TTL from a [`Duration`]; sub-microsecond parts are truncated first.
    pub fn from_duration(duration: Duration) -> Result<Ttl, InvalidInput> {
        let micros = i64::try_from(duration.as_micros()).map_err(|_| InvalidInput::TtlOverflow)?;
        Ttl::from_micros(micros)
    }

    /// The TTL in microseconds, always within `MIN..=MAX`.
    pub fn as_micros(self) -> i64 {
        self.micros
    }

    /// The TTL as a [`Duration`].
    pub fn as_duration(self) -> Duration {
        Duration::from_micros(self.micros as u64)
    }
}

impl TryFrom<i64> for Ttl {
    type Error = InvalidInput;
    fn try_from(micros: i64) -> Result<Ttl, InvalidInput> {
        Ttl::from_micros(micros)
    }
}

impl From<Ttl> for i64 {
    fn from(ttl: Ttl) -> i64 {
        ttl.micros
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rejects_zero_negative_short_long_and_overflowing() {
        assert_eq!(Ttl::from_millis(0), Err(InvalidInput::TtlZero));
        assert_eq!(
            Ttl::from_millis(-5),
            Err(InvalidInput::TtlNegative { micros: -5_000 })
        );
        assert!(matches!(
            Ttl::from_micros(999),
            Err(InvalidInput::TtlTooShort { .. })
        ));
        assert!(matches!(
            Ttl::from_duration(Duration::from_secs(8 * 24 * 3600)),
            Err(InvalidInput::TtlTooLong { .. })
        ));
        assert_eq!(Ttl::from_millis(i64::MAX), Err(InvalidInput::TtlOverflow));
        assert_eq!(
            Ttl::from_duration(Duration::MAX),
            Err(InvalidInput::TtlOverflow)
        );
        assert_eq!(Ttl::from_millis(1).unwrap(), Ttl::MIN);
        assert_eq!(Ttl::from_micros(Ttl::MAX.as_micros()).unwrap(), Ttl::MAX);
    }
}
