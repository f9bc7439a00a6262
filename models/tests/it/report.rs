//! The model checker's report: outcomes, completeness, speed, the explorer.
//!
//! Goal: what `leaseproof model` and `verify` print is what the search
//! decided. Method: small searches whose answers are known — a variant's
//! first-violation search stops early, so what it did not reach is
//! undecided, not "holds"; a property outcome is good only when the
//! reference must produce it. Invariant: the report never claims more than
//! the search explored.

use leaseproof_models::{
    check, explore, CheckConfig, LeaseModel, PropertyOutcome, Search, Variant,
};

#[test]
fn only_holding_and_witnessed_outcomes_are_good() {
    assert!(PropertyOutcome::Holds.is_good());
    assert!(PropertyOutcome::Witnessed { steps: 3 }.is_good());
    assert!(!PropertyOutcome::Violated { steps: 3 }.is_good());
    assert!(!PropertyOutcome::NotWitnessed.is_good());
    assert!(!PropertyOutcome::Undecided.is_good());
}

#[test]
fn a_first_violation_search_leaves_the_rest_undecided_and_reports_its_speed() {
    let model = LeaseModel::new(2, Variant::UnfencedCommit);
    let report = check(&CheckConfig::new(model));
    assert_eq!(report.config.search, Search::FirstViolation);
    assert!(report.refuted());
    assert!(report.as_expected());
    assert!(!report.complete, "the search stopped at the violation");
    assert!(
        report
            .properties
            .iter()
            .any(|(_, outcome)| *outcome == PropertyOutcome::Undecided),
        "{:?}",
        report.properties
    );
    assert!(report
        .properties
        .iter()
        .all(|(_, outcome)| *outcome != PropertyOutcome::Holds));
    let expected = report.unique_states as f64 / report.elapsed.as_secs_f64().max(1e-9);
    assert!(
        (report.states_per_second - expected).abs() <= expected * 1e-9,
        "{} vs {expected}",
        report.states_per_second
    );
}

#[test]
fn the_explorer_serves_the_model() {
    use std::io::{Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = CheckConfig::new(LeaseModel::new(1, Variant::Reference));
    // It serves until the process ends: the test's thread is left running.
    std::thread::spawn(move || explore(&config, ("127.0.0.1", port)));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let answer = loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            stream.write_all(b"GET /.status HTTP/1.0\r\n\r\n").unwrap();
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            break answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the explorer never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(answer.starts_with("HTTP/1.0 200 OK"), "{answer}");
    assert!(
        answer.contains("\"done\""),
        "the status of a search: {answer}"
    );
}
