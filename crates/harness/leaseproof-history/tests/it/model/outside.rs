//! Histories written from `docs/model.md` and `docs/history-format.md`
//! alone, by someone who never read the judge: each with the verdict the
//! model gives it (`tests/cases/model/MANIFEST.tsv`: file, expected, story).
//! `pass` is no violation (a statement-start file may be *possible*); a
//! code is a violation blamed on exactly that part of the specification.

use std::path::Path;

use leaseproof_history::model::Verdict;
use leaseproof_history::{CheckConfig, History};

use super::story::{judged, verdict};

#[test]
fn every_outside_written_history_gets_the_verdict_the_model_gives_it() {
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/model");
    let manifest = std::fs::read_to_string(cases.join("MANIFEST.tsv")).expect("the manifest");
    let mut wrong = Vec::new();
    for line in manifest.lines() {
        let [file, expected, story] = line.split('\t').collect::<Vec<_>>()[..] else {
            panic!("a manifest line is file, expected, story: {line:?}")
        };
        let history = History::load(&cases.join(file)).expect("a well-formed history");
        let stamps = CheckConfig::declared_by(&history).grant_stamps;
        let report = judged(&history, stamps);
        let got = match verdict(&report) {
            Verdict::Explained(_) | Verdict::Possible(_) => "pass".to_string(),
            Verdict::Violated(certificate) => {
                let codes: Vec<&str> = certificate.invariants.iter().map(|i| i.code()).collect();
                codes.join("+")
            }
            other => format!("{other:?}"),
        };
        if got != expected {
            wrong.push(format!(
                "{file}: expected {expected}, judged {got} ({story})\n{report}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} wrong:\n{}",
        wrong.len(),
        manifest.lines().count(),
        wrong.join("\n")
    );
}
