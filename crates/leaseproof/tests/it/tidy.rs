//! The repository speaks of the project alone: no tracker numbers, no notes
//! about who planned what when, no designs named by a number.
//!
//! Method: every text file under the repository (not `target/`, not `.git`)
//! is scanned line by line for the phrases a lab notebook leaves behind; a
//! hit names the file, the line and the phrase. A negative control proves the
//! scanner sees such a phrase.

use std::path::{Path, PathBuf};

use super::repository;

/// Lower-case phrases that belong in a tracker or a notebook, not here;
/// written with `|` for their spaces (see [`spelt`]) so this file does not
/// match its own scan.
const NOTEBOOK_PHRASES: &[&str] = &[
    "next|session",
    "previous|session",
    "lack|of|time",
    "left for later",
    "left for the next",
    "todo(",
];

/// The word `issue` followed by a number (with a space, `#` or `-`), or
/// `seed` followed by a zero-padded number: a number standing in for
/// a name. Returns the phrase found.
fn numbered_reference(line: &str) -> Option<String> {
    let lower = line.to_ascii_lowercase();
    for word in ["issue", "issues", "seed"] {
        let mut from = 0;
        while let Some(at) = lower[from..].find(word) {
            let start = from + at;
            from = start + word.len();
            let starts_word = start == 0 || !lower.as_bytes()[start - 1].is_ascii_alphanumeric();
            let rest = &lower[from..];
            let digits_at = rest
                .strip_prefix(" #")
                .or_else(|| rest.strip_prefix('#'))
                .or_else(|| rest.strip_prefix(' '))
                .or_else(|| rest.strip_prefix('-'));
            let Some(after) = digits_at else { continue };
            let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
            let ends_word = after[digits.len()..]
                .chars()
                .next()
                .is_none_or(|next| !next.is_ascii_alphanumeric());
            // A seed is named by its number everywhere (`--seed 17`); only a
            // zero-padded one is a document's label.
            let flagged = match word {
                "seed" => digits.len() >= 3 && digits.starts_with('0'),
                _ => !digits.is_empty(),
            };
            if starts_word && ends_word && flagged {
                let end = from + (rest.len() - after.len()) + digits.len();
                return Some(line[start..end].to_string());
            }
        }
    }
    None
}

/// A phrase as this file writes it, `|` for a space and `~` for a hyphen.
fn spelt(phrase: &str) -> String {
    phrase.replace('|', " ").replace('~', "-")
}

fn problems_in(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let lower = line.to_ascii_lowercase();
        for phrase in NOTEBOOK_PHRASES.iter().map(|phrase| spelt(phrase)) {
            if lower.contains(&phrase) {
                found.push((index + 1, phrase));
            }
        }
        if let Some(reference) = numbered_reference(line) {
            found.push((index + 1, reference));
        }
    }
    found
}

fn text_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | ".git" | "node_modules" | "__pycache__"
            ) {
                text_files(&path, files);
            }
        } else if std::fs::read_to_string(&path).is_ok() {
            // Binary files (images) do not read as UTF-8.
            files.push(path);
        }
    }
}

#[test]
fn no_file_reads_like_a_lab_notebook() {
    let root = repository().canonicalize().unwrap();
    let mut files = Vec::new();
    text_files(&root, &mut files);
    assert!(
        files.len() > 50,
        "only {} files found under {}",
        files.len(),
        root.display()
    );
    let this_file = Path::new(file!()).file_name().unwrap();
    let mut report = Vec::new();
    for file in files {
        if file.file_name() == Some(this_file) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (line, phrase) in problems_in(&text) {
            report.push(format!(
                "{}:{line}: {phrase:?}",
                file.strip_prefix(&root).unwrap_or(&file).display()
            ));
        }
    }
    assert!(
        report.is_empty(),
        "notebook phrases:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_scanner_sees_what_it_looks_for() {
    for (text, expected) in [
        ("fixed in issue|15, see there", "issue|15"),
        ("the Issue|#7 extension", "Issue|#7"),
        ("as issue~15 showed", "issue~15"),
        ("the design of seed|003", "seed|003"),
        ("not re-run for lack|of|time", "lack|of|time"),
        ("left for the next|session", "next|session"),
    ] {
        let (text, expected) = (spelt(text), spelt(expected));
        let (text, expected) = (text.as_str(), expected.as_str());
        let found = problems_in(text);
        assert!(
            found
                .iter()
                .any(|(_, phrase)| phrase.eq_ignore_ascii_case(expected) || phrase == expected),
            "{text:?}: expected {expected:?}, found {found:?}"
        );
    }
    for clean in [
        "replay gc-pause --seed 17",
        "SEED=3 scenario chaos",
        "the session holding the advisory lock",
        "issues a statement",
        "seeds 0..200",
    ] {
        assert!(
            problems_in(clean).is_empty(),
            "{clean:?}: {:?}",
            problems_in(clean)
        );
    }
}

/// What a run leaves behind and the repository must not keep: pid files,
/// traces, the evidence `clients`, `sim` and `race` save, virtualenvs, Python
/// caches, wheels.
fn runtime_artefact(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let evidence = (name.starts_with("clients-") || name.starts_with("seed-"))
        && (name.ends_with(".html") || name.ends_with(".jsonl"));
    [".pid", ".trace", ".whl", ".pyc", ".crate"]
        .iter()
        .any(|suffix| name.ends_with(suffix))
        || evidence
        || path.split('/').any(|part| {
            ["__pycache__", "leaseproof-out", ".pytest_cache", "target"].contains(&part)
                || part.ends_with("-venv")
        })
}

#[test]
fn no_runtime_artefact_is_committed() {
    let output = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repository())
        .output()
        .expect("git, to list the repository's files");
    assert!(output.status.success(), "git ls-files: {output:?}");
    let listed = String::from_utf8(output.stdout).unwrap();
    let files: Vec<&str> = listed.split('\0').filter(|path| !path.is_empty()).collect();
    assert!(files.len() > 100, "git listed {} files", files.len());
    let artefacts: Vec<&&str> = files.iter().filter(|path| runtime_artefact(path)).collect();
    assert!(
        artefacts.is_empty(),
        "runtime artefacts committed: {artefacts:?}"
    );
}

#[test]
fn the_artefact_scanner_sees_what_it_looks_for() {
    for artefact in [
        "batch3.pid",
        "crates/x/run.trace",
        "leaseproof-out/clients-lock-seed-3.html",
        "python/src/leaseproof/__pycache__/client.cpython-311.pyc",
        "target/python-package-venv/bin/python3",
        "seed-12.jsonl",
    ] {
        assert!(runtime_artefact(artefact), "{artefact}");
    }
    for kept in [
        "examples/histories/broken.jsonl",
        "docs/timeline.png",
        "ci/run.sh",
    ] {
        assert!(!runtime_artefact(kept), "{kept}");
    }
}
