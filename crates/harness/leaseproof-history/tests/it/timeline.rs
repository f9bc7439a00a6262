//! The timeline picture of a history: every piece of evidence has a mark,
//! nothing a history says can break the page, and the same history draws
//! the same bytes.
//!
//! (The page is opened in a real browser by `leaseproof-sim`'s timeline test.)

use leaseproof_history::{check, timeline_html, Annotation, CheckConfig, Invariant};

use crate::builder::{Builder, TTL_US};

#[test]
fn every_event_and_row_a_violation_names_has_a_mark_on_the_page() {
    let mut builder = Builder::new();
    builder.belief_start("a", "s", 1);
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_050);
    builder.belief_start("b", "s", 2);
    builder.commit("a", "s", 1, 7, 2, crate::builder::CommitEnd::Ok, 1_070);
    builder.rows("a", "s", 1, 7, 0..2, 0, 1_060);
    let history = builder.build();
    let report = check(&history, &CheckConfig::default());
    assert!(!report.violations_of(Invariant::MutualExclusion).is_empty());
    let html = timeline_html("overlap", &history, &report, &[]);
    for violation in &report.violations {
        for event in &violation.events {
            assert!(
                html.contains(&format!("id=\"ev-{event}\"")),
                "event {event}"
            );
            assert!(
                html.contains(&format!("href=\"#ev-{event}\"")),
                "link to {event}"
            );
        }
        for row in &violation.rows {
            assert!(html.contains(&format!("id=\"row-{row}\"")), "row {row}");
        }
    }
    assert!(html.contains("class=\"verdict fail\""));
    assert!(html.contains("<b>I1</b>"));
    // Same history, same bytes.
    assert_eq!(html, timeline_html("overlap", &history, &report, &[]));
}

#[test]
fn a_clean_history_draws_its_grants_and_marks_nothing() {
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.acquire_ok("b", "s", 2, 1_000 + TTL_US);
    let history = builder.build();
    let report = check(&history, &CheckConfig::default());
    assert!(report.is_ok());
    let notes = [Annotation {
        true_time_us: 5,
        worker: Some("a".to_string()),
        text: "PAUSE 300 ms".to_string(),
    }];
    let html = timeline_html("clean", &history, &report, &notes);
    assert!(html.contains("class=\"verdict pass\""));
    assert!(!html.contains(" violation\""));
    assert!(
        html.contains(">t1<") && html.contains(">t2<"),
        "each grant with its token"
    );
    assert!(html.contains("class=\"fault\""), "the annotation is drawn");
    assert!(html.contains("PAUSE 300 ms"));
}

#[test]
fn names_from_the_history_cannot_inject_markup() {
    let mut builder = Builder::new();
    builder.acquire_ok("<script>alert(1)</script>", "s\"><img src=x>", 1, 1_000);
    let history = builder.build();
    let report = check(&history, &CheckConfig::default());
    let html = timeline_html("</title><script>", &history, &report, &[]);
    assert!(
        !html.contains("<script>alert"),
        "a worker name became markup"
    );
    assert!(!html.contains("<img"), "a scope became markup");
    assert_eq!(
        html.matches("<script>").count(),
        1,
        "only the page's own script"
    );
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[test]
fn a_history_spanning_millennia_draws_about_ten_ticks() {
    // Times that span 2^62 µs: the axis steps by powers of ten of hours,
    // not by the hour (a billion ticks).
    let mut builder = Builder::new();
    builder.acquire_ok("a", "s", 1, 1_000);
    builder.at((1 << 62) - 10);
    builder.acquire_ok("b", "s", 2, (1 << 62) - 10);
    let history = builder.build();
    let report = check(&history, &CheckConfig::default());
    let html = timeline_html("long", &history, &report, &[]);
    let ticks = html.matches("class=\"tick\"").count();
    assert!((1..=13).contains(&ticks), "{ticks} ticks");
    assert!(html.len() < 100_000, "{} bytes", html.len());
}
