//! What a design declares about itself: the checker's configuration.
//!
//! A leaf: the history carries it (its `design` record) and the checker
//! reads it, so it depends on neither.

use std::collections::BTreeSet;
use std::fmt;

/// What the checker is told beyond the history: what the design says about
/// itself. A history can carry it (its `design` record, [`crate::History::design`]),
/// so a saved run is judged again as it was judged when recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckConfig {
    /// Workers that write without the fence: their belief overlaps are violations.
    #[serde(
        default,
        skip_serializing_if = "BTreeSet::is_empty",
        deserialize_with = "null_as_none"
    )]
    pub unfenced_workers: BTreeSet<String>,
    /// What a design's server timestamps mean, and so what they can prove.
    /// A declaration that does not say is judged by the sound rule.
    #[serde(
        default = "GrantStamps::undeclared",
        deserialize_with = "stamps_by_name"
    )]
    pub grant_stamps: GrantStamps,
    /// How far (µs) a stamp may lie below a reading of the store's clock
    /// taken before its statement began: 0 for PostgreSQL's microseconds,
    /// 1000 for a store that stamps milliseconds. Read by the model judge
    /// (docs/model.md); absent, it assumes a millisecond.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rounding_in_range"
    )]
    pub stamp_rounding_us: Option<i64>,
    /// Whether the store may restamp a grant's `granted_at` when it is
    /// re-acquired or renewed under the same token (the reference keeps it).
    /// Read by the model judge; absent, it assumes the store may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restamps: Option<bool>,
}

/// The largest rounding a design may declare: a second. A coarser clock
/// cannot order the operations a lease judges.
const STAMP_ROUNDING_US_MAX: i64 = 1_000_000;

/// A declared rounding from 0 to [`STAMP_ROUNDING_US_MAX`]; `null` is absent.
fn rounding_in_range<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    let rounding: Option<i64> = serde::Deserialize::deserialize(deserializer)?;
    match rounding {
        Some(us) if !(0..=STAMP_ROUNDING_US_MAX).contains(&us) => Err(serde::de::Error::custom(
            format!("{us} µs: a rounding is from 0 to {STAMP_ROUNDING_US_MAX} µs"),
        )),
        rounding => Ok(rounding),
    }
}

impl CheckConfig {
    /// What the reference and the simulated store declare of their stamps:
    /// PostgreSQL's microseconds, exact, and `granted_at` kept on renewal
    /// and re-acquisition (a new stamp comes only with a new token).
    pub fn with_exact_stamps(self) -> CheckConfig {
        CheckConfig {
            stamp_rounding_us: Some(0),
            restamps: Some(false),
            ..self
        }
    }
}

/// `null` is read as absent (docs/history-format.md): no workers.
fn null_as_none<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeSet<String>, D::Error> {
    let workers: Option<BTreeSet<String>> = serde::Deserialize::deserialize(deserializer)?;
    Ok(workers.unwrap_or_default())
}

/// By name only; `null` is read as absent: the sound rule.
fn stamps_by_name<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<GrantStamps, D::Error> {
    let name: Option<String> = serde::Deserialize::deserialize(deserializer)?;
    match name {
        None => Ok(GrantStamps::undeclared()),
        Some(name) => serde::Deserialize::deserialize(serde::de::value::StringDeserializer::<
            D::Error,
        >::new(name)),
    }
}

/// What the `granted_at` / `expires_at` a design reports mean.
///
/// The checker never cries wolf: an overlap of two grants in server time is a
/// violation only when the timestamps are the times the grants were decided.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum GrantStamps {
    /// Each statement decides with the very time it stamps (the reference:
    /// its takeover compares `expires_at <= now()` with the `now()` it writes
    /// as `granted_at`, however long it waited on a row lock). A server-time
    /// overlap is then a real double grant.
    #[default]
    Decision,
    /// A grant is stamped with its statement's *start* (PostgreSQL's `now()`)
    /// but may be decided later — it queued on a row lock behind the previous
    /// holder's release, say. A stamp is then only a lower bound of the
    /// decision, and a server-time overlap proves nothing: the checker reports
    /// it as *possible* and calls it a violation only when real-time order
    /// proves it (Jepsen's rule): the earlier grant was acknowledged before
    /// the later one's acquisition was invoked, and the later one was
    /// acknowledged before an operation that then found the earlier grant
    /// still live (a renewal or a release of it that succeeded) was invoked.
    StatementStart,
}

impl GrantStamps {
    /// What a history that does not declare its stamps is judged by:
    /// [`GrantStamps::StatementStart`], which assumes nothing about when a
    /// grant was decided, so a server-time overlap is a violation only where
    /// real-time order proves it. (A program that builds a [`CheckConfig`]
    /// knows its design and says so; its `Default` is `Decision`.)
    pub const fn undeclared() -> GrantStamps {
        GrantStamps::StatementStart
    }
}

impl fmt::Display for GrantStamps {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            GrantStamps::Decision => "decision",
            GrantStamps::StatementStart => "statement-start",
        })
    }
}

impl std::str::FromStr for GrantStamps {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "decision" => Ok(GrantStamps::Decision),
            "statement-start" => Ok(GrantStamps::StatementStart),
            other => Err(format!(
                "unknown grant stamps {other:?}: expected decision or statement-start"
            )),
        }
    }
}
