//! The machine-readable documents leaseproof writes (`--json`), their shared
//! envelope, and the checker's verdict on a history file as one of them.
//!
//! Every document is one JSON object that opens with the same three fields —
//! `format` (`leaseproof-<what>`), `version` (an integer; a reader refuses
//! versions it does not know) and `passed` (the command's verdict, the same
//! one its exit status gives) — followed by that format's own fields
//! (docs/json.md lists them all). Readers refuse unknown fields: a document
//! they cannot fully read is an error, never a guess.

use serde::{Deserialize, Serialize};

use crate::model::ScopeDocument;
use crate::{CheckReport, History};

/// The three fields every document opens with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// `leaseproof-<what>`: which document this is.
    pub format: String,
    /// The version of that format.
    pub version: u32,
    /// The command's verdict.
    pub passed: bool,
}

impl Envelope {
    /// Reads the envelope of `text` and checks it is `format` at `version`;
    /// the error says what was found instead.
    pub fn expect(text: &str, format: &str, version: u32) -> Result<Envelope, String> {
        Envelope::expect_versions(text, format, version..=version)
    }

    /// [`Envelope::expect`] for a reader of several versions of `format`.
    pub fn expect_versions(
        text: &str,
        format: &str,
        versions: std::ops::RangeInclusive<u32>,
    ) -> Result<Envelope, String> {
        #[derive(Deserialize)]
        struct Opening {
            format: Option<String>,
            version: Option<u32>,
            passed: Option<bool>,
        }
        let opening: Opening =
            serde_json::from_str(text).map_err(|error| format!("not a JSON document: {error}"))?;
        let (Some(found_format), Some(found_version), Some(passed)) =
            (opening.format, opening.version, opening.passed)
        else {
            return Err(format!(
                "not a leaseproof document: `format`, `version` and `passed` are required (expected {format})"
            ));
        };
        if found_format != format {
            return Err(format!("a {found_format} document, expected {format}"));
        }
        if !versions.contains(&found_version) {
            let reads = if versions.start() == versions.end() {
                format!("version {}", versions.start())
            } else {
                format!("versions {} to {}", versions.start(), versions.end())
            };
            return Err(format!(
                "{format} version {found_version}; this leaseproof reads {reads}"
            ));
        }
        Ok(Envelope {
            format: found_format,
            version: found_version,
            passed,
        })
    }
}

/// A `--json` document: its format's name and version, and the one way to
/// write and read it (pretty-printed; read back only when the envelope names
/// this format at this version, and the fields are all known).
pub trait Document: Serialize + serde::de::DeserializeOwned {
    /// The format's name, `leaseproof-<what>`.
    const FORMAT: &'static str;
    /// The format's version.
    const VERSION: u32;
    /// The oldest version this reader still reads: a format grown only by
    /// optional fields reads its older documents too.
    const OLDEST_VERSION_READ: u32 = Self::VERSION;

    /// Pretty-printed, with a final newline.
    fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a document serialises") + "\n"
    }

    /// Reads a document, refusing another format, version or unknown fields.
    fn from_json(text: &str) -> Result<Self, String> {
        Envelope::expect_versions(
            text,
            Self::FORMAT,
            Self::OLDEST_VERSION_READ..=Self::VERSION,
        )?;
        serde_json::from_str(text).map_err(|error| format!("{}: {error}", Self::FORMAT))
    }
}

/// `check --json`: the verdict on one history file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckDocument {
    /// Always `leaseproof-check`.
    pub format: String,
    /// Always 2.
    pub version: u32,
    /// No violation (possible ones, which the evidence cannot decide, do not fail).
    pub passed: bool,
    /// Events in the history.
    pub events: u64,
    /// The checker's report.
    pub report: CheckReport,
    /// Judged by the model (`--model`): each lease scope's verdict and its
    /// proof; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Vec<ScopeDocument>>,
}

impl Document for CheckDocument {
    const FORMAT: &'static str = "leaseproof-check";
    const VERSION: u32 = 2;
    const OLDEST_VERSION_READ: u32 = 1;
}

impl CheckDocument {
    /// The document for `report` on `history`.
    pub fn new(history: &History, report: &CheckReport) -> CheckDocument {
        CheckDocument {
            format: Self::FORMAT.to_string(),
            version: Self::VERSION,
            passed: report.is_ok(),
            events: history.events.len() as u64,
            report: report.clone(),
            model: None,
        }
    }
}
