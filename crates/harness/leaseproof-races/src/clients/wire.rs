//! The client protocol's messages, version 1 (`docs/client-protocol.md`).
//!
//! Goal: a lock written in any language talks to leaseproof through JSON
//! lines on stdin/stdout, and whatever it prints is either understood exactly
//! or refused with the line and the field. Method: serde types with
//! `deny_unknown_fields`, one enum per direction, tagged by `"type"`;
//! requests carry Maelstrom's `msg_id`, answers its `in_reply_to`.
//! Invariant: nothing a client says is guessed at — an unknown field, type or
//! reason is an error naming the client and the line, never ignored.

use serde::{Deserialize, Serialize};

/// The protocol's name and version, as the client's `hello` must state it.
pub const PROTOCOL: &str = "leaseproof-client/1";

/// A request leaseproof sends to a client (one line on its stdin).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Take the lock of `table`, non-blocking: `fail`/`held` when another holds it.
    Acquire {
        /// Pairs the answer (`in_reply_to`).
        msg_id: u64,
        /// The table whose lock is taken (the lock's scope).
        table: String,
        /// The owner leaseproof names this incarnation by (for the rows).
        owner: String,
        /// The lock's time to live, for locks that have one.
        ttl_ms: u64,
    },
    /// Extend the lock (only sent to clients whose `hello` says `renew`).
    Renew {
        /// Pairs the answer.
        msg_id: u64,
        /// The table.
        table: String,
        /// The owner.
        owner: String,
        /// The time to live.
        ttl_ms: u64,
    },
    /// The maintenance: insert `items` rows into `leaseproof_client_rows`
    /// through the client's own connection, under the lock it holds.
    Write {
        /// Pairs the answer.
        msg_id: u64,
        /// The table whose lock guards the write.
        table: String,
        /// The owner (the rows' `owner` column).
        owner: String,
        /// The token the lock gave, if any (the rows' `token` column).
        token: Option<u64>,
        /// The write's id (the rows' `cycle_id` column), unique per owner.
        cycle_id: u64,
        /// How many rows, `item` 0..items.
        items: u32,
    },
    /// Give the lock up.
    Release {
        /// Pairs the answer.
        msg_id: u64,
        /// The table.
        table: String,
        /// The owner.
        owner: String,
    },
    /// Whether anyone holds the lock of `table` (answered `ok` with `locked`).
    IsLocked {
        /// Pairs the answer.
        msg_id: u64,
        /// The table.
        table: String,
    },
}

impl Request {
    /// The request's `msg_id`.
    pub fn msg_id(&self) -> u64 {
        match self {
            Request::Acquire { msg_id, .. }
            | Request::Renew { msg_id, .. }
            | Request::Write { msg_id, .. }
            | Request::Release { msg_id, .. }
            | Request::IsLocked { msg_id, .. } => *msg_id,
        }
    }

    /// The table the request is about.
    pub fn table(&self) -> &str {
        match self {
            Request::Acquire { table, .. }
            | Request::Renew { table, .. }
            | Request::Write { table, .. }
            | Request::Release { table, .. }
            | Request::IsLocked { table, .. } => table,
        }
    }

    /// The request's type as it appears on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Acquire { .. } => "acquire",
            Request::Renew { .. } => "renew",
            Request::Write { .. } => "write",
            Request::Release { .. } => "release",
            Request::IsLocked { .. } => "is_locked",
        }
    }
}

/// A line a client prints on its stdout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// The client's first line: who it is and what it speaks.
    Hello {
        /// Must be [`PROTOCOL`].
        protocol: String,
        /// The design's name, for reports.
        name: String,
        /// Whether it answers `renew` (a lock with a keep-alive of its own
        /// does not need it).
        #[serde(default)]
        renew: bool,
        /// For a lease that reports server times: what `granted_at_us`
        /// means — `"decision"` (the statement decides at the time it
        /// stamps) or `"statement-start"` (the default: sound for any design).
        #[serde(default)]
        grant_stamps: Option<String>,
    },
    /// The request took effect.
    Ok {
        /// The request's `msg_id`.
        in_reply_to: u64,
        /// The fencing token of the grant, where the lock has one.
        #[serde(default)]
        token: Option<u64>,
        /// How long the lock promises to live from the acquisition (its TTL);
        /// absent for a lock that lives as long as its session.
        #[serde(default)]
        lifetime_ms: Option<u64>,
        /// A lease's grant time on the store's clock (µs since the epoch).
        #[serde(default)]
        granted_at_us: Option<i64>,
        /// A lease's expiry on the store's clock.
        #[serde(default)]
        expires_at_us: Option<i64>,
        /// A lease's release: when its grant ended, on the store's clock.
        #[serde(default)]
        released_at_us: Option<i64>,
        /// A write's commit time on the store's clock, where it knows it.
        #[serde(default)]
        committed_at_us: Option<i64>,
        /// The answer to `is_locked`.
        #[serde(default)]
        locked: Option<bool>,
    },
    /// The request certainly did not take effect.
    Fail {
        /// The request's `msg_id`.
        in_reply_to: u64,
        /// Why.
        #[serde(deserialize_with = "leaseproof_history::by_name")]
        reason: FailKind,
        /// Free text for the report.
        #[serde(default)]
        text: Option<String>,
    },
    /// The client cannot tell whether the request took effect.
    Unknown {
        /// The request's `msg_id`.
        in_reply_to: u64,
        /// Free text for the report.
        #[serde(default)]
        text: Option<String>,
    },
    /// Unsolicited: the lock told its holder the lock of `table` is lost.
    Lost {
        /// The table.
        table: String,
        /// Free text for the report.
        #[serde(default)]
        text: Option<String>,
    },
}

/// Why a request certainly failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// Acquire: someone else holds the lock.
    Held,
    /// Renew, write, release: the lock is no longer ours (a refused stale write).
    Stale,
    /// Anything else that certainly did not take effect.
    Error,
}

/// A line that is not a message of this protocol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{client}, {}", self.located())]
pub struct WireError {
    /// Which client printed it (`w1 (incarnation 0)`).
    pub client: String,
    /// 1-based line number on that process's stdout.
    pub line_number: u64,
    /// What is wrong, naming the field where serde can.
    pub problem: String,
    /// The line, shortened.
    pub line: String,
}

/// The field a message's error is about, where serde's own error does not
/// say (inside an internally tagged enum it loses the path).
fn culprit(line: &str, problem: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    let field = leaseproof_history::field_in_error::<Message>(&value, ".", problem);
    (field != ".").then_some(field)
}

impl WireError {
    /// The error without the client's name, for a message that names it already.
    pub fn located(&self) -> String {
        format!(
            "stdout line {}: {}\n  the line: {}",
            self.line_number, self.problem, self.line
        )
    }
}

/// Whether an `ok` carries only the fields that apply to the request of
/// `kind` it answers (a `token` on a write's ok, a `locked` on an
/// acquisition's: a client that says more than it was asked is mistaken
/// about the protocol, and what it said would not be read). For a grant,
/// also its form: `Some(true)` for a lease (a token and both server times),
/// `Some(false)` for a lock; `None` for other requests.
pub fn ok_fits(kind: &str, message: &Message) -> Result<Option<bool>, String> {
    let Message::Ok {
        token,
        lifetime_ms,
        granted_at_us,
        expires_at_us,
        released_at_us,
        committed_at_us,
        locked,
        ..
    } = message
    else {
        return Ok(None);
    };
    let present = [
        ("token", token.is_some()),
        ("lifetime_ms", lifetime_ms.is_some()),
        ("granted_at_us", granted_at_us.is_some()),
        ("expires_at_us", expires_at_us.is_some()),
        ("released_at_us", released_at_us.is_some()),
        ("committed_at_us", committed_at_us.is_some()),
        ("locked", locked.is_some()),
    ];
    let applies: &[&str] = match kind {
        "acquire" | "renew" => &["token", "lifetime_ms", "granted_at_us", "expires_at_us"],
        "write" => &["committed_at_us"],
        "release" => &["released_at_us"],
        _ => &["locked"],
    };
    if let Some((field, _)) = present
        .iter()
        .find(|(field, present)| *present && !applies.contains(field))
    {
        return Err(format!(
            "field `{field}`: does not apply to the ok of a `{kind}` (it may carry {})",
            applies.join(", ")
        ));
    }
    match kind {
        "is_locked" if locked.is_none() => {
            Err("field `locked`: missing: the ok of an `is_locked` says true or false".to_string())
        }
        "acquire" | "renew" => match (token, granted_at_us, expires_at_us) {
            (Some(_), Some(_), Some(_)) => Ok(Some(true)),
            (_, None, None) => Ok(Some(false)),
            (None, _, _) => Err(
                "field `token`: missing: a lease's grant (server times) has a fencing token"
                    .to_string(),
            ),
            (_, None, _) => {
                Err("field `granted_at_us`: missing beside `expires_at_us`".to_string())
            }
            (_, _, None) => {
                Err("field `expires_at_us`: missing beside `granted_at_us`".to_string())
            }
        },
        _ => Ok(None),
    }
}

/// Parses one stdout line of `client`.
pub fn parse_line(client: &str, line_number: u64, line: &str) -> Result<Message, WireError> {
    let error = |problem: String| WireError {
        client: client.to_string(),
        line_number,
        problem,
        line: line.chars().take(200).collect(),
    };
    if let Some(path) = leaseproof_history::duplicate_key(line) {
        return Err(error(format!(
            "field `{path}`: appears twice in one object: which one counts is a guess"
        )));
    }
    if let Some((field, number)) = integer_beyond_64_bits(line) {
        return Err(error(format!(
            "field `{field}`: {number} (as JSON reads it): an integer beyond 64 bits, which no \
             field of {PROTOCOL} takes"
        )));
    }
    let message: Message = serde_json::from_str(line).map_err(|source| {
        let field = culprit(line, &source.to_string())
            .map_or_else(String::new, |key| format!("field `{key}`: "));
        error(format!(
            "{field}not a message of {PROTOCOL}: {source} (expected a JSON object with \"type\": \
             hello, ok, fail, unknown or lost)"
        ))
    })?;
    if let Message::Hello {
        protocol,
        grant_stamps,
        ..
    } = &message
    {
        if protocol != PROTOCOL {
            return Err(error(format!(
                "field `protocol`: {protocol:?} is not spoken here (expected {PROTOCOL:?})"
            )));
        }
        if let Some(stamps) = grant_stamps {
            if stamps != "decision" && stamps != "statement-start" {
                return Err(error(format!(
                    "field `grant_stamps`: {stamps:?} (expected \"decision\" or \"statement-start\")"
                )));
            }
        }
    }
    if let Message::Ok { .. } = &message {
        if let Some(problem) = ok_out_of_range(&message) {
            return Err(error(problem));
        }
    }
    Ok(message)
}

/// A top-level field holding a whole number beyond 64 bits (`2^64`, `1e20`),
/// which JSON reads as a float: serde would call it "floating point", and
/// the client sent an integer.
fn integer_beyond_64_bits(line: &str) -> Option<(String, serde_json::Number)> {
    let serde_json::Value::Object(object) = serde_json::from_str(line).ok()? else {
        return None;
    };
    object.into_iter().find_map(|(key, value)| match value {
        serde_json::Value::Number(number)
            if number.is_f64()
                && number
                    .as_f64()
                    .is_some_and(|value| value.fract() == 0.0 && value.abs() >= 2f64.powi(63)) =>
        {
            Some((key, number))
        }
        _ => None,
    })
}

/// What `leaseproof check` would refuse in an `ok`'s numbers, said of the
/// answer's own field: a token of 0 or beyond a signed 64-bit integer, a
/// lifetime of 0 or one whose microseconds overflow the checker's
/// arithmetic, a time beyond ±2^62 µs.
fn ok_out_of_range(message: &Message) -> Option<String> {
    const TIME_LIMIT_US: i64 = 1 << 62;
    let Message::Ok {
        token,
        lifetime_ms,
        granted_at_us,
        expires_at_us,
        released_at_us,
        committed_at_us,
        ..
    } = message
    else {
        return None;
    };
    match (token, lifetime_ms) {
        (Some(0), _) => {
            return Some("field `token`: 0 (fencing tokens are integers >= 1)".to_string())
        }
        (Some(token), _) if *token > i64::MAX as u64 => {
            return Some(format!(
                "field `token`: {token}: a token is at most 2^63 - 1 (a signed 64-bit \
                 integer, as PostgreSQL's bigint and Redis's INCR give)"
            ))
        }
        (_, Some(0)) => {
            return Some(
                "field `lifetime_ms`: 0: a promised lifetime is > 0 (leave the field out for \
                 a lock that lives as long as its session)"
                    .to_string(),
            )
        }
        (_, Some(lifetime_ms)) if *lifetime_ms > (TIME_LIMIT_US / 1_000) as u64 => {
            return Some(format!(
                "field `lifetime_ms`: {lifetime_ms}: lifetimes lie within 2^62 µs \
                 (146,000 years)"
            ))
        }
        _ => {}
    }
    [
        ("granted_at_us", granted_at_us),
        ("expires_at_us", expires_at_us),
        ("released_at_us", released_at_us),
        ("committed_at_us", committed_at_us),
    ]
    .into_iter()
    .find_map(|(field, time)| {
        let time = (*time)?;
        (!(-TIME_LIMIT_US..=TIME_LIMIT_US).contains(&time)).then(|| {
            format!("field `{field}`: {time}: server times lie within ±2^62 µs (146,000 years)")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_an_answer_and_a_notice_parse() {
        let hello = parse_line(
            "w0",
            1,
            r#"{"type":"hello","protocol":"leaseproof-client/1","name":"x"}"#,
        )
        .unwrap();
        assert!(matches!(hello, Message::Hello { renew: false, .. }));
        let ok = parse_line(
            "w0",
            2,
            r#"{"type":"ok","in_reply_to":3,"lifetime_ms":3000}"#,
        )
        .unwrap();
        assert!(matches!(
            ok,
            Message::Ok {
                in_reply_to: 3,
                lifetime_ms: Some(3000),
                token: None,
                ..
            }
        ));
        let lost = parse_line("w0", 3, r#"{"type":"lost","table":"t"}"#).unwrap();
        assert!(matches!(lost, Message::Lost { .. }));
    }

    #[test]
    fn garbage_unknown_fields_and_bad_values_are_refused_with_the_line() {
        for (line, expected) in [
            ("hello", "not a message"),
            (r#"{"type":"okay","in_reply_to":1}"#, "unknown variant"),
            (
                r#"{"type":"ok","in_reply_to":1,"tokn":3}"#,
                "unknown field `tokn`",
            ),
            (r#"{"type":"ok"}"#, "missing field `in_reply_to`"),
            (
                r#"{"type":"fail","type":"ok","in_reply_to":1}"#,
                "field `type`: appears twice",
            ),
            (
                r#"{"type":"fail","in_reply_to":1,"reason":"busy"}"#,
                "unknown variant `busy`",
            ),
            (
                r#"{"type":"ok","in_reply_to":1,"token":0}"#,
                "field `token`: 0",
            ),
            (
                r#"{"type":"ok","in_reply_to":1,"token":9223372036854775808}"#,
                "field `token`: 9223372036854775808: a token is at most 2^63 - 1",
            ),
            (
                r#"{"type":"ok","in_reply_to":1,"token":18446744073709551616}"#,
                "field `token`: 1.8446744073709552e+19 (as JSON reads it): an integer beyond 64 bits",
            ),
            (
                r#"{"type":"ok","in_reply_to":1,"lifetime_ms":0}"#,
                "field `lifetime_ms`: 0: a promised lifetime is > 0",
            ),
            (
                r#"{"type":"ok","in_reply_to":1,"lifetime_ms":4611686018427388}"#,
                "field `lifetime_ms`: 4611686018427388: lifetimes lie within",
            ),
            (
                r#"{"type":"ok","in_reply_to":1,"token":1,"granted_at_us":-4611686018427387905,"expires_at_us":1}"#,
                "field `granted_at_us`: -4611686018427387905: server times lie within",
            ),
            // Type errors, which serde reports without the field here.
            (
                r#"{"type":"ok","in_reply_to":1,"token":"7"}"#,
                "field `token`: not a message",
            ),
            (
                r#"{"type":"ok","in_reply_to":"1"}"#,
                "field `in_reply_to`: not a message",
            ),
            (
                r#"{"type":"ok","in_reply_to":1,"lifetime_ms":-5}"#,
                "field `lifetime_ms`: not a message",
            ),
            (
                r#"{"type":"hello","protocol":"leaseproof-client/1","name":"x","renew":"yes"}"#,
                "field `renew`: not a message",
            ),
            (
                r#"{"type":"hello","protocol":"leaseproof-client/9","name":"x"}"#,
                "field `protocol`",
            ),
            (
                r#"{"type":"hello","protocol":"leaseproof-client/1","name":"x","grant_stamps":"now"}"#,
                "field `grant_stamps`",
            ),
        ] {
            let error = parse_line("w2 (incarnation 1)", 7, line).unwrap_err();
            let text = error.to_string();
            assert!(text.contains(expected), "{line}: {text}");
            assert!(
                text.starts_with("w2 (incarnation 1), stdout line 7:"),
                "{text}"
            );
        }
    }

    #[test]
    fn an_ok_carries_only_what_applies_to_its_request() {
        let ok = |fields: &str| {
            parse_line(
                "w0",
                1,
                &format!(r#"{{"type":"ok","in_reply_to":1{fields}}}"#),
            )
            .unwrap()
        };
        let lease = r#","token":2,"granted_at_us":5,"expires_at_us":9"#;
        assert_eq!(ok_fits("acquire", &ok(lease)), Ok(Some(true)));
        assert_eq!(
            ok_fits("renew", &ok(r#","lifetime_ms":3000"#)),
            Ok(Some(false))
        );
        assert_eq!(ok_fits("acquire", &ok("")), Ok(Some(false)));
        assert_eq!(ok_fits("write", &ok(r#","committed_at_us":7"#)), Ok(None));
        assert_eq!(ok_fits("release", &ok("")), Ok(None));
        assert_eq!(ok_fits("is_locked", &ok(r#","locked":false"#)), Ok(None));
        for (kind, fields, expected) in [
            (
                "write",
                r#","token":3"#,
                "field `token`: does not apply to the ok of a `write`",
            ),
            (
                "acquire",
                r#","locked":true"#,
                "field `locked`: does not apply",
            ),
            (
                "release",
                r#","expires_at_us":4"#,
                "field `expires_at_us`: does not apply",
            ),
            ("is_locked", "", "field `locked`: missing"),
            (
                "acquire",
                r#","granted_at_us":5,"expires_at_us":9"#,
                "field `token`: missing",
            ),
            (
                "renew",
                r#","token":2,"expires_at_us":9"#,
                "field `granted_at_us`: missing",
            ),
            (
                "acquire",
                r#","token":2,"granted_at_us":5"#,
                "field `expires_at_us`: missing",
            ),
        ] {
            let error = ok_fits(kind, &ok(fields)).unwrap_err();
            assert!(error.starts_with(expected), "{kind} {fields}: {error}");
        }
    }

    #[test]
    fn requests_serialise_as_documented() {
        let request = Request::Write {
            msg_id: 4,
            table: "orders".to_string(),
            owner: "w1.0".to_string(),
            token: None,
            cycle_id: 2,
            items: 3,
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"type":"write","msg_id":4,"table":"orders","owner":"w1.0","token":null,"cycle_id":2,"items":3}"#
        );
        assert_eq!(request.kind(), "write");
        assert_eq!(request.msg_id(), 4);
    }
}
