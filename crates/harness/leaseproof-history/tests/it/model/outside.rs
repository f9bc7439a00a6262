//! Histories written from `docs/model.md` and `docs/history-format.md`
//! alone, by people who never read the judge — the second set by one
//! hunting for its errors — each with the verdict the model gives it
//! (`tests/cases/model/MANIFEST.tsv` and `adversary/MANIFEST.tsv`: file,
//! expected, the assumptions' flags, story). `pass` is no violation (a
//! statement-start file may be *possible*); `possible` is exactly that; a
//! code is a violation blamed on exactly that part of the specification.

use std::path::Path;

use leaseproof_history::model::{Assumptions, Verdict};
use leaseproof_history::{CheckConfig, History};

use super::story::{judged_assuming, verdict};

/// The assumptions a manifest's flags ask for (as `check --model` reads them).
fn assuming(flags: &str) -> Assumptions {
    let mut assumptions = Assumptions::default();
    let mut words = flags.split_whitespace();
    while let Some(flag) = words.next() {
        match flag {
            "--no-restamps" => assumptions.restamps = false,
            "--stamp-rounding-us" => {
                let value = words.next().expect("a rounding");
                assumptions.stamp_rounding_us = value.parse().expect("microseconds");
            }
            other => panic!("unknown flag {other:?}"),
        }
    }
    assumptions
}

fn wrong_in(directory: &Path) -> (usize, Vec<String>) {
    let manifest = std::fs::read_to_string(directory.join("MANIFEST.tsv")).expect("the manifest");
    let mut wrong = Vec::new();
    for line in manifest.lines() {
        let [file, expected, flags, story] = line.split('\t').collect::<Vec<_>>()[..] else {
            panic!("a manifest line is file, expected, flags, story: {line:?}")
        };
        let history = History::load(&directory.join(file)).expect("a well-formed history");
        let stamps = CheckConfig::declared_by(&history).grant_stamps;
        let report = judged_assuming(&history, stamps, assuming(flags));
        let got = match verdict(&report) {
            Verdict::Explained(_) => "pass".to_string(),
            Verdict::Possible(_) if expected == "pass" => "pass".to_string(),
            Verdict::Possible(_) => "possible".to_string(),
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
    (manifest.lines().count(), wrong)
}

#[test]
fn every_outside_written_history_gets_the_verdict_the_model_gives_it() {
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/model");
    for directory in [cases.clone(), cases.join("adversary")] {
        let (count, wrong) = wrong_in(&directory);
        assert!(
            wrong.is_empty(),
            "{}: {} of {count} wrong:\n{}",
            directory.display(),
            wrong.len(),
            wrong.join("\n")
        );
    }
}
