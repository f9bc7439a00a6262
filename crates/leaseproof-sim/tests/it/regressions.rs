//! Goal: seeds that once failed keep being checked. Method: every file in
//! `scenarios/regressions/` names a scenario, a seed, its options and what
//! the run must show (clean, or a violation the harness must keep finding).

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
