//! Every `--json` document round-trips through its type: the schema of
//! docs/json.md is the code's, not a description beside it.
//!
//! Goal: a CI system or a script reading leaseproof's documents reads what
//! the docs say. Method: run each command with `--json` as a user does, read
//! the file back through the document's type (which refuses unknown fields
//! and other versions), write it again and compare the two JSON values; the
//! envelope's `passed` must agree with the exit status. Invariant: a field
//! the type does not know, or one it knows but the command did not write, fails.

use std::path::Path;

use leaseproof_benches::BenchDocument;
use leaseproof_history::{CheckDocument, Document, Envelope, EventKind, History, Invariant};
use leaseproof_models::ModelDocument;
use leaseproof_races::{LockRaceDocument, RaceDocument};
use leaseproof_sim::shards::ShardReport;
use serde::Serialize;

use super::{leaseproof, repository};

/// Runs the binary; returns its exit code and the document it wrote.
fn run_with_json(args: &[&str], json: &Path) -> (i32, String) {
    let json_path = json.to_str().expect("a UTF-8 temp path");
    let ran = leaseproof(&[args, &["--json", json_path]].concat());
    let text = std::fs::read_to_string(json).unwrap_or_else(|error| {
        panic!(
            "{args:?} wrote no document ({error}); exit {}:\n{}",
            ran.code,
            ran.text()
        )
    });
    (ran.code, text)
}

/// [`run_with_json`] from a tokio test: the binary blocks, so it runs off
/// the runtime that keeps the test's database.
async fn run_off_the_runtime(args: &[&str], json: &Path) -> (i32, String) {
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let json = json.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_with_json(&args, &json)
    })
    .await
    .unwrap()
}

/// The document read through its type and written again is the same JSON.
fn assert_round_trips<T: Serialize>(text: &str, document: &T) {
    let written: serde_json::Value = serde_json::from_str(text).unwrap();
    let again = serde_json::to_value(document).unwrap();
    assert_eq!(written, again, "the type lost or added a field");
}

/// `text` read through its document type, checked to round-trip.
fn read_back<T: Document>(text: &str) -> T {
    let document = T::from_json(text).unwrap();
    assert_round_trips(text, &document);
    document
}

#[test]
fn model_sim_and_check_documents_round_trip_through_their_types() {
    let directory = tempfile::tempdir().unwrap();

    let path = directory.path().join("model.json");
    let (code, text) = run_with_json(&["model", "--variant", "token-not-advanced"], &path);
    let model: ModelDocument = read_back(&text);
    assert_eq!(code, 0);
    assert!(model.passed);
    assert_eq!(model.models.len(), 1);
    let verdict = &model.models[0];
    assert_eq!(verdict.variant, "token-not-advanced");
    assert!(verdict.as_expected);
    let expected = verdict.expected_violation.clone().unwrap();
    assert!(verdict
        .properties
        .iter()
        .any(|property| property.name == expected && property.outcome == "violated"));
    assert!(verdict
        .counterexample
        .as_ref()
        .is_some_and(|trace| !trace.steps.is_empty()));

    let path = directory.path().join("sweep.json");
    let (code, text) = run_with_json(&["sim", "gc-pause", "--seeds", "0..4", "--quiet"], &path);
    let sweep = ShardReport::from_json(&text).unwrap();
    assert_round_trips(&text, &sweep);
    assert_eq!(code, 0);
    assert!(sweep.passed);
    let scenario = &sweep.scenarios[0];
    assert_eq!(scenario.counts.seeds_run, 4);
    let per_core = scenario.seeds_per_second_per_core.unwrap();
    assert!(per_core > 0.0);
    let one_core = scenario.projected_seconds_one_core.unwrap();
    let sharded = scenario.projected_seconds_sharded.unwrap();
    assert!(
        (one_core * per_core - 1e6).abs() < 1.0,
        "{one_core} s at {per_core}/s"
    );
    assert!((one_core / sharded - 100.0).abs() < 1e-6);
    assert!(scenario.run_wall_us > 0);
    // A field the type does not know is refused, beside the flattened counts too.
    let typo = text.replacen("\"takeovers\":", "\"takeoverz\": 0, \"takeovers\":", 1);
    let error = ShardReport::from_json(&typo).unwrap_err();
    assert!(error.contains("unknown field `takeoverz`"), "{error}");

    let path = directory.path().join("check.json");
    let (code, text) = run_with_json(&["check", "examples/histories/broken.jsonl"], &path);
    let check: CheckDocument = read_back(&text);
    assert_eq!(code, 1);
    assert!(!check.passed);
    assert!(!check.report.violations.is_empty());
    assert!(text.contains("\"invariant\": \"i"), "{text}");

    // verify writes its own document; a partial run names what it left out.
    let path = directory.path().join("verify.json");
    let (code, text) = run_with_json(&["verify", "--stages", "model"], &path);
    let envelope = Envelope::expect(&text, "leaseproof-verify", 2).unwrap();
    assert_eq!(envelope.passed, code == 0);
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        value["stages_not_run"],
        serde_json::json!([
            "simulation",
            "teeth",
            "postgres",
            "race",
            "locks",
            "clients"
        ])
    );
    assert!(value["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|check| check["stage"] == "model"));
}

#[tokio::test]
async fn race_lock_race_and_bench_documents_round_trip_through_their_types() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let url = database.url.clone();
    let directory = tempfile::tempdir().unwrap();
    // The binary blocks; run it off the runtime that keeps the database.
    let run = |args: &[&str], name: &str| {
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let path = directory.path().join(name);
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_with_json(&args, &path)
        })
    };

    // The same race leaves its evidence where it is asked to.
    let history = directory.path().join("race.jsonl");
    let html = directory.path().join("race.html");
    let (code, text) = run(
        &[
            "race",
            "--workers",
            "3",
            "--rounds",
            "4",
            "--database-url",
            &url,
            "--history",
            history.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        "race.json",
    )
    .await
    .unwrap();
    let race: RaceDocument = read_back(&text);
    assert_eq!(race.passed, code == 0);
    assert!(race.passed, "{text}");
    let written = leaseproof_history::History::load(&history).unwrap();
    assert!(written.events.len() as u64 > race.summary.report.stats.grants);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("race of 3 workers on "),
        "the timeline's title"
    );
    assert_eq!(race.summary.workers, 3);
    assert!(race.summary.totals.grants > 0);
    assert!(race.summary.report.stats.grants > 0);

    let (code, text) = run(
        &[
            "race",
            "--lock",
            "lease",
            "--workers",
            "3",
            "--rounds",
            "4",
            "--database-url",
            &url,
        ],
        "lock-race.json",
    )
    .await
    .unwrap();
    let lock_race: LockRaceDocument = read_back(&text);
    assert_eq!(code, 0);
    assert_eq!(lock_race.lock, "lease");
    assert!(lock_race.holds > 0);

    let (code, text) = run(
        &[
            "bench",
            "--quick",
            "--seconds",
            "0.05",
            "--database-url",
            &url,
        ],
        "bench.json",
    )
    .await
    .unwrap();
    let bench: BenchDocument = read_back(&text);
    assert_eq!(
        code, 0,
        "without --check a missed goal is reported, not an exit status"
    );
    assert_eq!(bench.passed, bench.goals.iter().all(|goal| goal.met));
    assert!(!bench.goals.is_empty());
    assert!(bench.rows.iter().any(|row| row.operation == "select 1"));
    assert!(bench
        .rows
        .iter()
        .filter(|row| row.operation == "select 1")
        .all(|row| row.ratio_to_select_one == Some(1.0)));
}

#[test]
fn a_reader_refuses_another_format_another_version_and_unknown_fields() {
    let text =
        std::fs::read_to_string(repository().join("examples/histories/clean.jsonl")).unwrap();
    assert!(
        CheckDocument::from_json(&text).is_err(),
        "a history is not a document"
    );
    let document = r#"{"format": "leaseproof-race", "version": 1, "passed": true}"#;
    let error = CheckDocument::from_json(document).unwrap_err();
    assert!(error.contains("leaseproof-race"), "{error}");
    let document = r#"{"format": "leaseproof-check", "version": 9, "passed": true}"#;
    let error = CheckDocument::from_json(document).unwrap_err();
    assert!(error.contains("version 9"), "{error}");
    let document = r#"{"format": "leaseproof-check", "version": 1, "passed": true, "events": 0,
        "report": {"violations": [], "possible": [], "not_judged": [], "stats": {}}, "extra": 1}"#;
    assert!(CheckDocument::from_json(document).is_err());
}

#[tokio::test]
async fn a_clients_seed_line_says_what_its_strikes_did() {
    // The run starts its own servers; this only asks that PostgreSQL exists.
    let Some(_database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    use leaseproof_races::clients::{ClientRunConfig, FaultKind};
    let client = format!("{} lock-client lease", env!("CARGO_BIN_EXE_leaseproof"));
    // A seed whose plan kills a client at least once.
    let seed = (0..)
        .find(|&seed| {
            let mut config = ClientRunConfig::new(client.clone(), seed);
            config.faults = vec![FaultKind::Kill];
            config.duration = std::time::Duration::from_millis(3_000);
            config.ttl = std::time::Duration::from_millis(1_000);
            config
                .plan()
                .strikes
                .iter()
                .any(|strike| strike.kind == FaultKind::Kill)
        })
        .unwrap();
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("clients.jsonl");
    let seed_arg = seed.to_string();
    let args = [
        "clients",
        "--client",
        &client,
        "--seed",
        &seed_arg,
        "--duration-ms",
        "3000",
        "--ttl-ms",
        "1000",
        "--faults",
        "kill",
    ];
    let (code, text) = run_off_the_runtime(&args, &path).await;
    let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(line["format"], "leaseproof-clients-seed");
    assert_eq!(line["version"], 6);
    assert!(line["possible"].is_u64(), "{text}");
    // The line that runs this seed again, whatever its verdict; evidence
    // only for a seed that failed.
    let replay = line["replay"].as_str().unwrap();
    assert!(replay.contains(&format!("--seed {seed}")), "{text}");
    assert!(replay.contains("--faults kill"), "{text}");
    assert_eq!(line["evidence"].is_null(), code == 0, "{text}");
    assert_eq!(
        line["violation_messages"].as_array().unwrap().len() as u64,
        line["violations"].as_u64().unwrap(),
        "{text}"
    );
    assert!(line["started_after_ms"].is_u64(), "{text}");
    // The lease's client neither crashes nor hangs by itself: every exit
    // and every unanswered request is a strike's.
    assert_eq!(line["own_exits"], 0, "{text}");
    assert_eq!(line["unanswered"], 0, "{text}");
    assert_eq!(line["passed"], code == 0, "{text}");
    assert_eq!(line["seed"], seed);
    assert_eq!(line["faults"], serde_json::json!(["kill"]));
    let process = &line["process"];
    assert!(process["killed"].as_u64().unwrap() >= 1, "{text}");
    for count in [
        "stopped",
        "backends_terminated",
        "redis_restarts",
        "skewed_clients",
    ] {
        assert_eq!(process[count], 0, "only kills were planned: {text}");
    }
    for count in [
        "replies_dropped",
        "partition_holds",
        "delayed_chunks",
        "connections_reset",
        "stalled_chunks",
    ] {
        assert_eq!(
            line["proxy"][count], 0,
            "no network fault was planned: {text}"
        );
    }
}

/// A client that never grants proves nothing: not a pass (exit 0) but
/// "could not judge" (exit 3), its line saying `passed: false` and why.
#[tokio::test]
async fn a_clients_run_that_proves_nothing_exits_3() {
    let Some(_database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let client = r#"echo '{"type":"hello","protocol":"leaseproof-client/1","name":"never grants"}'; while read -r request; do id=${request#*\"msg_id\":}; echo "{\"type\":\"fail\",\"in_reply_to\":${id%%,*},\"reason\":\"held\"}"; done"#;
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("clients.jsonl");
    let args = [
        "clients",
        "--client",
        client,
        "--seed",
        "0",
        "--duration-ms",
        "1500",
        "--faults",
        "none",
    ];
    let (code, text) = run_off_the_runtime(&args, &path).await;
    let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(code, 3, "{text}");
    assert_eq!(line["passed"], false, "{text}");
    assert_eq!(line["grants"], 0, "{text}");
    assert_eq!(
        line["vacuous"], "vacuous: 0 distinct winner(s), need 2",
        "{text}"
    );

    // The run starts once every client said hello, but a process restarted
    // inside it (here after its first one crashed at once) starts up in the
    // duration: one slower than what is left is told so, not only "vacuous".
    let slow = format!(
        "if [ \"$LEASEPROOF_INCARNATION\" = 0 ]; then echo '{{\"type\":\"hello\",\"protocol\":\"leaseproof-client/1\",\"name\":\"crashes\"}}'; exit 0; fi; \
         sleep 2; exec {} lock-client lease",
        env!("CARGO_BIN_EXE_leaseproof")
    );
    let args = [
        "clients",
        "--client",
        &slow,
        "--seed",
        "0",
        "--duration-ms",
        "1000",
        "--faults",
        "none",
    ];
    let (code, text) = run_off_the_runtime(&args, &path).await;
    let line: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(code, 3, "{text}");
    let vacuous = line["vacuous"].as_str().unwrap_or_default();
    assert!(
        vacuous.contains(
            "restarted client process(es) said hello only after the run's duration was over"
        ),
        "{text}"
    );
    // It crashed by itself: a longer run is not the advice.
    assert!(
        vacuous.contains("exit(s) of the client's own: see the crash lines"),
        "{text}"
    );
}

#[test]
fn the_models_verdicts_carry_their_proof_in_the_document() {
    let directory = tempfile::tempdir().unwrap();
    let cases = "crates/harness/leaseproof-history/tests/cases/model";
    let path = directory.path().join("violated.json");
    let file = format!("{cases}/v02-unlocked-release-after-rival.jsonl");
    let (code, text) = run_with_json(&["check", "--model", &file], &path);
    assert_eq!(code, 1, "{text}");
    let document: CheckDocument = read_back(&text);
    let scopes = document.model.expect("judged by the model");
    let [scope] = scopes.as_slice() else {
        panic!("one scope: {scopes:?}")
    };
    assert_eq!(scope.verdict, "violated");
    assert!(
        scope.invariants.contains(&Invariant::MutualExclusion),
        "{scope:?}"
    );
    assert!(scope.states > 0 && scope.explanation.is_none());
    // The certificate: events of the history, and one fact per operation.
    assert!(scope.certificate_events.len() >= 2, "{scope:?}");
    assert!(scope
        .certificate_events
        .iter()
        .all(|&event| event < document.events));
    assert!(!scope.facts.is_empty() && scope.facts.len() <= scope.certificate_events.len());

    let path = directory.path().join("explained.json");
    let file = format!("{cases}/p04-lost-acquire-token-learned.jsonl");
    let (code, text) = run_with_json(&["check", "--model", &file], &path);
    assert_eq!(code, 0, "{text}");
    let document: CheckDocument = read_back(&text);
    let scope = &document.model.expect("judged by the model")[0];
    assert_eq!(scope.verdict, "explained");
    let effects = scope.explanation.as_ref().expect("an explanation drawn");
    let history = History::load(&repository().join(&file)).unwrap();
    for effect in effects {
        let event = &history.events[effect.invoke_event as usize];
        assert!(matches!(event.kind, EventKind::Invoke { .. }), "{effect:?}");
        assert!(effect.stamp_us <= effect.decision_us, "{effect:?}");
    }
    assert!(effects.iter().any(|effect| effect.did == "new-grant"));

    // The rules alone write no model verdicts.
    let path = directory.path().join("rules.json");
    let (_, text) = run_with_json(&["check", &file], &path);
    assert!(!text.contains("\"model\""), "{text}");
    assert!(read_back::<CheckDocument>(&text).model.is_none());
}
