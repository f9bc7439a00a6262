//! Goal: scenarios are data that load, validate, and draw faults within
//! their ranges. Method: load every default scenario, reject bad files, and
//! check the drawn plan against the ranges.

use leaseproof_sim::{FaultEvent, FaultPlan, Scenario};

#[test]
fn every_default_scenario_loads_from_file_and_embedded_alike() {
    let names: Vec<&str> = leaseproof_sim::EMBEDDED
        .iter()
        .map(|(name, _)| *name)
        .collect();
    for required in [
        "skewed-clocks",
        "crash-mid-cycle",
        "gc-pause",
        "cycle-pause",
        "partition",
        "lost-replies",
        "concurrent-schema",
        "chaos",
        "leader-churn",
        "redis-pause",
        "redis-restart",
        "redis-crash",
        "redis-chaos",
        "advisory-pause",
        "advisory-crash",
        "advisory-session-kill",
        "advisory-restart",
        "advisory-chaos",
    ] {
        assert!(names.contains(&required), "{required} missing");
        let from_file = Scenario::load(required).expect("loads");
        let embedded = Scenario::embedded(required).expect("embedded");
        assert_eq!(from_file, embedded);
        assert_eq!(from_file.name, required);
    }
}

#[test]
fn misspelt_or_inverted_fields_are_rejected() {
    let base = leaseproof_sim::EMBEDDED[0].1;
    let misspelt = format!("{base}\nworkerz = 3\n");
    assert!(Scenario::parse(&misspelt, "test").is_err());
    let inverted = base.replace("work_ms = [1200, 2600]", "work_ms = [2600, 1200]");
    assert_ne!(inverted, base);
    assert!(Scenario::parse(&inverted, "test").is_err());
    assert!(Scenario::load("no-such-scenario").is_err());
}

#[test]
fn a_zero_count_is_refused_and_the_error_points_at_its_key() {
    let base = leaseproof_sim::EMBEDDED[0].1;
    let inserted_line = base
        .lines()
        .position(|line| line == "[faults]")
        .expect("a [faults] table")
        + 1;
    // Each count alone at zero, indented: the error names the field, and where
    // the message's first word is a key of the file, its line and the column
    // where the key starts (after two spaces: column 3).
    for (key, positioned) in [
        ("cycles_per_grant", true),
        ("items_per_cycle", false),
        ("tick_ms", true),
        ("request_timeout_ms", true),
    ] {
        let text = base.replacen("[faults]", &format!("  {key} = 0\n[faults]"), 1);
        let error = Scenario::parse(&text, "test").expect_err(key).to_string();
        assert!(error.contains(key), "{key}: {error}");
        if positioned {
            let position = format!("test: line {inserted_line}, column 3: ");
            assert!(error.starts_with(&position), "{key}: {error}");
        } else {
            assert!(!error.contains("column"), "{key}: {error}");
        }
    }
}

#[test]
fn drawn_faults_stay_within_the_scenario_ranges() {
    let scenario = Scenario::load("chaos").expect("chaos loads");
    let faults = &scenario.faults;
    for seed in 0..50 {
        let plan = FaultPlan::draw(&scenario, seed);
        assert_eq!(
            plan,
            FaultPlan::draw(&scenario, seed),
            "drawing is deterministic"
        );
        assert_eq!(plan.workers.len() as u32, scenario.workers);
        for worker in &plan.workers {
            let offset_ms = worker.clock_offset_us / 1_000;
            assert!((faults.clock_offset_ms[0]..=faults.clock_offset_ms[1]).contains(&offset_ms));
            assert!((faults.clock_drift_ppm[0]..=faults.clock_drift_ppm[1])
                .contains(&worker.clock_drift_ppm));
        }
        let crashes = plan
            .schedule
            .iter()
            .filter(|(_, event)| matches!(event, FaultEvent::CrashDb))
            .count() as u32;
        assert!(crashes <= faults.db_crashes[1]);
        assert!(plan.schedule.windows(2).all(|pair| pair[0].0 <= pair[1].0));
        let header = plan.header(&scenario, false);
        assert!(header[0].starts_with(&format!("SEED={seed} scenario=chaos")));
    }
}

#[test]
fn takeover_bound_is_refused_where_faults_may_stall_a_waiting_rival() {
    let crash_only = "name = \"t\"\ndescription = \"d\"\nworkers = 2\nttl_ms = 2000\n\
                      duration_s = 5\ntakeover_bound_ms = 400\n";
    assert!(Scenario::parse(crash_only, "test").is_ok());
    for stalling in [
        "partitions = [1, 1]",
        "db_crashes = [0, 1]",
        "pause_probability = 0.1",
        "lost_reply_probability = [0.0, 0.1]",
    ] {
        let text = format!("{crash_only}[faults]\n{stalling}\n");
        let error = Scenario::parse(&text, "test").expect_err(stalling);
        assert!(error.to_string().contains("takeover_bound_ms"), "{error}");
    }
    let scenario = Scenario::load("crash-mid-cycle").expect("the scenario loads");
    assert_eq!(scenario.takeover_bound_ms, Some(400));
}
