//! A `clients` run whose findings the evidence cannot decide says so.
//!
//! Goal: "could not judge" is an honest answer, and a visible one: a run
//! with possible violations prints how many beside its verdict and names
//! its seed in the summary (exit 0), and `--fail-on-possible` fails it
//! (exit 1), as `check --fail-on-possible` does. Method: the varied client
//! with expiry decided on a skewed client clock (statement-start stamps: its
//! early takeovers are overlaps no real-time order proves) under the
//! clock-skew fault, through the built binary. Needs PostgreSQL, the
//! clients' virtualenv and libfaketime (a loud skip without them; a failure
//! under `LEASEPROOF_REQUIRE_CLIENTS=1`). Invariant: a possible finding never
//! changes the exit status unless asked, and is never silent.

use std::process::Command;

use super::{leaseproof, repository};

/// The virtualenv's python (made by `ci/install-python-clients.sh`), or a skip.
fn clients_python() -> Option<String> {
    let output = Command::new("bash")
        .arg(repository().join("ci/install-python-clients.sh"))
        .current_dir(repository())
        .output()
        .ok()
        .filter(|output| output.status.success());
    match output {
        Some(output) => Some(String::from_utf8_lossy(&output.stdout).trim().to_string()),
        None => {
            assert!(
                std::env::var("LEASEPROOF_REQUIRE_CLIENTS").as_deref() != Ok("1"),
                "LEASEPROOF_REQUIRE_CLIENTS=1 but ci/install-python-clients.sh failed"
            );
            eprintln!("LEASEPROOF SKIP: no Python clients' virtualenv");
            None
        }
    }
}

fn clients(extra: &[&str], client: &str) -> (i32, String) {
    let arguments = [
        "clients",
        "--client",
        client,
        "--seed",
        "0",
        "--duration-ms",
        "4000",
        "--ttl-ms",
        "1500",
        "--faults",
        "clock-skew",
    ];
    let ran = leaseproof(&[&arguments[..], extra].concat());
    (ran.code, ran.text())
}

#[tokio::test]
async fn a_clients_run_with_undecided_findings_says_so_and_fails_only_when_asked() {
    let Some(_database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let Some(python) = clients_python() else {
        return;
    };
    if leaseproof_races::clients::run::libfaketime().is_none() {
        assert!(
            std::env::var("LEASEPROOF_REQUIRE_CLIENTS").as_deref() != Ok("1"),
            "LEASEPROOF_REQUIRE_CLIENTS=1 but there is no libfaketime (Debian: faketime)"
        );
        eprintln!("LEASEPROOF SKIP: no libfaketime for the clock-skew strike");
        return;
    }
    let client = format!(
        "VARIED_SEED=0 VARIED_PLANT=client-clock {python} crates/harness/leaseproof-races/tests/varied_client.py"
    );
    let directory = tempfile::tempdir().unwrap();
    let json = directory.path().join("clients.jsonl");
    let (code, text) = tokio::task::spawn_blocking({
        let client = client.clone();
        let json = json.display().to_string();
        move || clients(&["--json", &json], &client)
    })
    .await
    .unwrap();
    assert_eq!(
        code, 0,
        "possible findings alone do not fail a run:\n{text}"
    );
    assert!(text.contains("possible (could not judge): I1"), "{text}");
    assert!(
        text.contains("VERDICT: no violation (")
            && text.contains("possible the evidence cannot decide, listed above)"),
        "{text}"
    );
    assert!(
        text.contains("0 with a violation, 1 with possible violations only (seeds [0])"),
        "{text}"
    );
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&json).unwrap().trim_end()).unwrap();
    assert!(line["possible"].as_u64().unwrap() >= 1, "{line}");
    assert_eq!(line["passed"], true, "{line}");

    let out = directory.path().join("out");
    let (code, text) = tokio::task::spawn_blocking({
        // The failing seed's evidence goes into the test's own directory.
        let out = out.display().to_string();
        move || clients(&["--fail-on-possible", "--out", &out], &client)
    })
    .await
    .unwrap();
    assert_eq!(code, 1, "--fail-on-possible:\n{text}");
    assert!(text.contains("(--fail-on-possible): exit 1"), "{text}");
    assert!(
        text.contains("replay: "),
        "a failing seed names its replay:\n{text}"
    );
    // The evidence is named by the design and the seed (two designs swept
    // over the same seeds keep theirs apart), and `check` judges the saved
    // history as the run did: the same possible finding, the same exits.
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let design = line["design"].as_str().unwrap().to_lowercase();
    let first_word: String = design
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    for (name, extension) in names.iter().zip(["html", "jsonl"]) {
        assert!(
            name.starts_with(&format!("clients-{first_word}"))
                && name.ends_with(&format!("-seed-0.{extension}")),
            "{name} names the design ({design}) and the seed"
        );
    }
    let history = out.join(&names[1]).display().to_string();
    let judged = leaseproof(&["check", &history]);
    assert_eq!(judged.code, 0, "{}", judged.text());
    assert!(
        judged.text().contains("possible (could not judge): I1"),
        "{}",
        judged.text()
    );
    let judged = leaseproof(&["check", &history, "--fail-on-possible"]);
    assert_eq!(judged.code, 1, "{}", judged.text());
}
