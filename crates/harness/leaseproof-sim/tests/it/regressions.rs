//! Goal: seeds that once failed keep being checked. Method: every file in
//! `scenarios/regressions/` names a scenario, a seed, its options and what
//! the run must show (clean, or a violation the harness must keep finding,
//! with the invariant codes recorded in the file).

use leaseproof_history::Invariant;

#[test]
fn every_regression_seed_behaves_as_recorded() {
    let regressions = leaseproof_sim::regressions().expect("the regression files parse");
    assert!(!regressions.is_empty(), "no regression files found");
    let mut problems = Vec::new();
    for (path, regression) in &regressions {
        if let Err(problem) = leaseproof_sim::run_regression(regression) {
            problems.push(format!("{}: {problem}", path.display()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_violation_regression_must_show_its_recorded_codes() {
    let regressions = leaseproof_sim::regressions().expect("the regression files parse");
    let (_, gc_pause) = regressions
        .iter()
        .find(|(path, _)| path.ends_with("gc-pause-unfenced-0.toml"))
        .expect("the gc-pause regression exists");
    assert!(gc_pause.codes.contains(&Invariant::FencedWrites));
    // Any failure is not enough: a code the run does not show is refused.
    let mut other = gc_pause.clone();
    other.codes = vec![Invariant::FencedWrites, Invariant::MutualExclusion];
    let problem = leaseproof_sim::run_regression(&other).expect_err("the run shows no I1");
    assert!(problem.contains("[\"I1\"]"), "{problem}");
}

#[test]
fn a_regression_file_with_an_unknown_invariant_code_is_refused() {
    let text = r#"
scenario = "gc-pause"
seed = 0
unfenced = true
expect = "violation"
codes = ["I3", "I9"]
note = "a code no invariant has"
"#;
    let error = toml::from_str::<leaseproof_sim::Regression>(text)
        .expect_err("an unknown code is refused")
        .to_string();
    assert!(error.contains("unknown invariant code \"I9\""), "{error}");
    assert!(error.contains("I1, I2, I3, I4, I5, B, H"), "{error}");
    let known = toml::from_str::<leaseproof_sim::Regression>(&text.replace("\"I9\"", "\"B\""))
        .expect("known codes parse");
    assert_eq!(
        known.codes,
        [Invariant::FencedWrites, Invariant::BeliefOverlap]
    );
}
