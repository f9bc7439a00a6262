//! Histories a correct store can produce, each found by a generator of
//! correct lease and lock services written from `docs/history-format.md`
//! alone, that the checker once convicted: never again (no violation is
//! reported), and beside each, the same story made wrong is still convicted.
//!
//! Method: each history is JSON lines as a recorder writes them, judged as
//! `check` judges a file (its `design` line, else the sound rule).

use leaseproof_history::{check, CheckConfig, CheckReport, History, Invariant};

use crate::lines::{complete, event, invoke};

fn judge(lines: &[String]) -> CheckReport {
    let history = History::from_json_lines(&lines.join("\n")).expect("a well-formed history");
    check(&history, &CheckConfig::declared_by(&history))
}

fn design(grant_stamps: &str) -> String {
    format!(r#"{{"record": "design", "grant_stamps": "{grant_stamps}"}}"#)
}

fn lease(token: u64, granted_at_us: i64, expires_at_us: i64) -> String {
    format!(
        r#"{{"result": "lease", "token": {token}, "owner": "a", "granted_at_us": {granted_at_us}, "expires_at_us": {expires_at_us}}}"#
    )
}

const ACQUIRE_A: &str = r#"{"op": "acquire", "scope": "job", "owner": "a", "ttl_us": 300}"#;
const COMMIT_A: &str =
    r#"{"op": "commit", "scope": "job", "owner": "a", "token": 1, "cycle_id": 1, "items": 1}"#;

fn guarded_row(written_at_us: i64, committed_at_us: i64) -> String {
    format!(
        r#"{{"record": "guarded_row", "seq": 1, "scope": "job", "owner": "a", "token": 1, "cycle_id": 1, "item": 0, "written_at_us": {written_at_us}, "committed_at_us": {committed_at_us}}}"#
    )
}

fn i3_messages(report: &CheckReport) -> Vec<&str> {
    report
        .violations
        .iter()
        .filter(|violation| violation.invariant == Invariant::FencedWrites)
        .map(|violation| violation.message.as_str())
        .collect()
}

/// A lease taken at 1000 for 300 µs, a commit fenced at `fenced_at_us`
/// (inside the grant when correct) whose row is written at 1350, after the
/// expiry, and committed at 1400; `renewal` renews in between.
fn commit_spanning_expiry(fenced_at_us: i64, renewal: Option<&str>) -> Vec<String> {
    let mut lines = vec![
        design("decision"),
        event(0, "a", 10, &invoke(0, ACQUIRE_A)),
        event(1, "a", 20, &complete(0, &lease(1, 1_000, 1_300))),
    ];
    let mut index = 2;
    if let Some(renewed) = renewal {
        let renew = r#"{"op": "renew", "scope": "job", "owner": "a", "token": 1, "ttl_us": 300}"#;
        lines.push(event(2, "a", 30, &invoke(1, renew)));
        lines.push(event(3, "a", 40, &complete(1, renewed)));
        index = 4;
    }
    let committed = format!(r#"{{"result": "committed", "committed_at_us": {fenced_at_us}}}"#);
    lines.push(event(index, "a", 50, &invoke(2, COMMIT_A)));
    lines.push(event(index + 1, "a", 60, &complete(2, &committed)));
    lines
}

#[test]
fn a_commit_fenced_inside_its_grant_may_write_after_the_expiry() {
    // The fence proved the grant current at 1200 and holds its row lock to
    // the commit: no rival can take over however long the work runs.
    let mut lines = commit_spanning_expiry(1_200, None);
    lines.push(guarded_row(1_350, 1_400));
    let report = judge(&lines);
    assert!(report.violations.is_empty(), "{report}");

    let mut late = commit_spanning_expiry(1_350, None);
    late.push(guarded_row(1_350, 1_400));
    let report = judge(&late);
    assert_eq!(
        i3_messages(&report),
        ["a wrote cycle 1 under token 1 at 1350, fenced at 1350, after the grant ended at 1300 (server us)"],
        "{report}"
    );
}

#[test]
fn a_row_written_under_a_revived_lease_is_inside_its_grant() {
    // The renewal was decided at 2000 (2300 - 300), after the expiry at
    // 1300: it revived the row, current again until 2300, and nobody took
    // it in the gap.
    let revived = lease(1, 1_000, 2_300);
    let mut lines = commit_spanning_expiry(2_100, Some(&revived));
    lines.push(guarded_row(2_100, 2_100));
    let report = judge(&lines);
    assert!(report.violations.is_empty(), "{report}");

    // Without the revival the same commit came after the grant's end.
    let mut unrevived = commit_spanning_expiry(2_100, None);
    unrevived.push(guarded_row(2_100, 2_100));
    let report = judge(&unrevived);
    assert_eq!(
        i3_messages(&report),
        ["a wrote cycle 1 under token 1 at 2100, fenced at 2100, after the grant ended at 1300 (server us)"],
        "{report}"
    );
}

/// A lease held to 11000; a commit answered `commit_outcome`; a release
/// answered `released_at_us` 1500; the commit's row written at 1600.
fn release_during_a_commit(grant_stamps: &str, commit_outcome: &str) -> Vec<String> {
    let acquire = r#"{"op": "acquire", "scope": "job", "owner": "a", "ttl_us": 10000}"#;
    let release = r#"{"op": "release", "scope": "job", "owner": "a", "token": 1}"#;
    let commit_completed =
        format!(r#"{{"type": "complete", "op_id": 1, "outcome": {commit_outcome}}}"#);
    vec![
        design(grant_stamps),
        event(0, "a", 10, &invoke(0, acquire)),
        event(1, "a", 20, &complete(0, &lease(1, 1_000, 11_000))),
        event(2, "a", 30, &invoke(1, COMMIT_A)),
        event(3, "a", 40, &commit_completed),
        event(4, "a", 50, &invoke(2, release)),
        event(
            5,
            "a",
            90,
            &complete(2, r#"{"result": "released", "released_at_us": 1500}"#),
        ),
        guarded_row(1_600, 1_700),
    ]
}

const LOST_REPLY: &str = r#"{"outcome": "unknown", "reason": "timeout"}"#;
const FENCED_AT_1600: &str =
    r#"{"outcome": "ok", "result": {"result": "committed", "committed_at_us": 1600}}"#;

#[test]
fn a_release_stamped_at_its_statement_start_may_have_queued_behind_the_commit() {
    // The commit's fence held the row; the release started at 1500, waited
    // and took effect after the commit at 1700.
    let report = judge(&release_during_a_commit("statement-start", LOST_REPLY));
    assert!(report.violations.is_empty(), "{report}");
    // A fence at 1600 may have won the row before the queued release too.
    let report = judge(&release_during_a_commit("statement-start", FENCED_AT_1600));
    assert!(report.violations.is_empty(), "{report}");
    // Decided at 1500, the release ended the grant: a fence decided at 1600
    // found it over, and a correct one refuses.
    let report = judge(&release_during_a_commit("decision", FENCED_AT_1600));
    assert_eq!(
        i3_messages(&report),
        ["a wrote cycle 1 under token 1 at 1600, fenced at 1600, after the grant ended at 1500 (server us)"],
        "{report}"
    );
}

#[test]
fn a_release_decided_mid_commit_proves_nothing_without_the_fence_time() {
    // A fence whose row lock blocks a takeover but not its own holder's
    // release (`FOR KEY SHARE` under an upsert) lets the release through
    // while the commit runs on: its row after the release is no proof.
    let report = judge(&release_during_a_commit("decision", LOST_REPLY));
    assert!(report.violations.is_empty(), "{report}");
}

/// a holds a lock, writes and releases at 100 µs; b acquires the lock and
/// is acknowledged at `b_acknowledged_us`, in the file after a's release
/// when that is 100 µs too (as a recorder of one clock writes a tie).
fn write_then_rival(b_acknowledged_us: i64) -> Vec<String> {
    let lock = r#"{"result": "lock", "lifetime_us": 1000}"#;
    let acquire = |owner: &str| {
        format!(r#"{{"op": "acquire", "scope": "job", "owner": "{owner}", "ttl_us": 1000}}"#)
    };
    let write = r#"{"op": "write", "scope": "job", "owner": "a", "cycle_id": 1, "items": 1}"#;
    let release = r#"{"op": "release", "scope": "job", "owner": "a", "token": 0}"#;
    let mut stories = vec![
        vec![
            ("b", b_acknowledged_us, invoke(3, &acquire("b"))),
            ("b", b_acknowledged_us, complete(3, lock)),
        ],
        vec![
            ("a", 100, invoke(1, write)),
            ("a", 100, complete(1, r#"{"result": "written"}"#)),
            ("a", 100, invoke(2, release)),
            ("a", 100, complete(2, r#"{"result": "unlocked"}"#)),
        ],
    ];
    if b_acknowledged_us >= 100 {
        stories.reverse();
    }
    let mut events = vec![
        ("a", 0, invoke(0, &acquire("a"))),
        ("a", 10, complete(0, lock)),
    ];
    events.extend(stories.into_iter().flatten());
    let mut lines: Vec<String> = (0..)
        .zip(events)
        .map(|(index, (worker, true_time_us, kind))| event(index, worker, true_time_us, &kind))
        .collect();
    lines.push(
        r#"{"record": "work_row", "seq": 1, "scope": "job", "owner": "a", "cycle_id": 1, "item": 0}"#
            .to_owned(),
    );
    lines
}

#[test]
fn a_write_in_the_microsecond_a_rival_hold_begins_is_not_inside_it() {
    // Stamps in one microsecond say nothing of the order of their events.
    let report = judge(&write_then_rival(100));
    assert!(
        i3_messages(&report).is_empty(),
        "a tie is no proof: {report}"
    );

    // b acknowledged at 90: a's write at 100 lies inside b's certain hold.
    let report = judge(&write_then_rival(90));
    assert_eq!(
        i3_messages(&report),
        ["a wrote (cycle 1) in [100, 100] while b certainly held job in [90, 1090) (true us)"],
        "{report}"
    );
}
