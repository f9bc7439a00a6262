//! The SQL against the executable semantics, case by case: see
//! `leaseproof_postgres::conformance::differential` for the method. Both
//! acquisition forms, the read-first check, and every row after every step must agree with
//! `semantics::LeaseTable`, and the script must have exercised every path.

use leaseproof_postgres::conformance::differential;

#[tokio::test]
async fn sql_decides_every_case_like_the_executable_semantics() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let seed: u64 = std::env::var("LEASEPROOF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1ea5e);
    println!("SEED={seed} differential");
    let report = differential(&database.url, seed, 300)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    println!("{report:?}");
    assert!(
        report.grants > 20 && report.refusals > 20 && report.takeovers > 10,
        "{report:?}"
    );
    // Every refusal in the script is one the read-first check makes alone:
    // the read and the statement's NOT EXISTS are the same condition.
    assert_eq!(report.read_refusals, report.refusals, "{report:?}");
}

/// The same script with every library statement sent inline (one simple
/// query, values as literals), as behind a transaction pooler: the inline
/// form must decide every case as the semantics do.
#[tokio::test]
async fn inline_statements_decide_every_case_like_the_executable_semantics() {
    let Some(database) = leaseproof_pgcluster::test_database().await else {
        return;
    };
    let report = leaseproof_postgres::conformance::differential_with(
        &database.url,
        0x1ea5e,
        300,
        leaseproof_postgres::Statements::Inline,
    )
    .await
    .unwrap_or_else(|error| panic!("{error}"));
    assert!(
        report.grants > 20 && report.refusals > 20 && report.takeovers > 10,
        "{report:?}"
    );
    assert_eq!(report.read_refusals, report.refusals, "{report:?}");
}
