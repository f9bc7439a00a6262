//! The model judged beside the rules, to find where they disagree.
//!
//! With `LEASEPROOF_MODEL_BESIDE=DIR` in the environment, every history the
//! rules judge is judged by the model too, and each one whose lease scopes
//! the two judge differently (a violation of I1, I2 or the server clock on
//! one side only) is saved to `DIR` with both verdicts, for the model to
//! settle. Nothing changes in the rules' report. The programs that judge
//! histories so record PostgreSQL's or a simulation's microseconds (no
//! rounding) of a lease that keeps `granted_at` (no restamps).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

use crate::check::{CheckReport, Invariant};
use crate::design::CheckConfig;
use crate::history::History;
use crate::model::{judge, Assumptions, Verdict};

/// Saves `history` to `directory` when the model and `rules` disagree.
pub(crate) fn compare(
    history: &History,
    config: &CheckConfig,
    rules: &CheckReport,
    directory: &Path,
) {
    let model = judge(
        history,
        config,
        Assumptions {
            states: 200_000,
            stamp_rounding_us: 0,
            restamps: false,
        },
    );
    let mut disagreements = Vec::new();
    for scope in &model.scopes {
        let by_rules = rules.violations.iter().any(|violation| {
            violation.scope == scope.scope
                && match violation.invariant {
                    Invariant::MutualExclusion | Invariant::TokenOrder => true,
                    Invariant::WellFormed => violation.message.starts_with("server times go back"),
                    _ => false,
                }
        });
        let by_model = match &scope.verdict {
            Verdict::Violated(_) => true,
            Verdict::Explained(_) | Verdict::Possible(_) => false,
            Verdict::CouldNotJudge(_) | Verdict::NotModelled(_) => continue,
        };
        if by_rules != by_model {
            disagreements.push(format!(
                "scope {:?}: rules {}, model {scope}",
                scope.scope,
                if by_rules { "violated" } else { "passed" }
            ));
        }
    }
    if disagreements.is_empty() {
        return;
    }
    let text = history.to_json_lines();
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    let name = format!("{:016x}", hasher.finish());
    let _ = std::fs::create_dir_all(directory);
    let _ = std::fs::write(directory.join(format!("{name}.jsonl")), text);
    let rules_text = format!("{}", rules.shown(50));
    let _ = std::fs::write(
        directory.join(format!("{name}.txt")),
        format!("{}\n--- rules:\n{rules_text}", disagreements.join("\n")),
    );
}
