//! Variant names and trace rendering, as the CLI uses them.
//!
//! Goal: keep the command-line vocabulary stable.
//! Method: round-trip every name through `FromStr`.
//! Invariant: names are kebab-case and unique.

use leaseproof_models::Variant;

#[test]
fn every_variant_name_parses_back_to_itself() {
    for variant in Variant::ALL {
        assert_eq!(variant.name().parse::<Variant>(), Ok(variant));
    }
    assert!("no-such-variant".parse::<Variant>().is_err());
}

use leaseproof_models::{check, CheckConfig, LeaseModel};

#[test]
fn counterexample_renders_one_line_per_step() {
    let report = check(&CheckConfig::new(LeaseModel::new(
        2,
        Variant::UnfencedCommit,
    )));
    let trace = report.counterexample.expect("a counterexample");
    let rendered = trace.to_string();
    let step_lines: Vec<&str> = rendered
        .lines()
        .filter(|line| line.contains("server="))
        .collect();
    assert_eq!(step_lines.len(), trace.steps.len());
    for (index, step) in trace.steps.iter().enumerate() {
        assert_eq!(step.number, index + 1);
        assert!(step_lines[index]
            .trim_start()
            .starts_with(&format!("{}.", step.number)));
    }
    // The last step is the guarded write that committed without a current grant.
    assert!(trace.last_state.ghost.stale_write_committed);
    assert!(step_lines.last().expect("a step").contains("Commit"));
    assert!(step_lines.iter().all(|line| line.contains("row:")));
}

#[test]
fn every_variant_but_the_reference_names_a_property_it_breaks() {
    let names: Vec<&str> = all_properties()
        .iter()
        .map(|property| property.name)
        .collect();
    for variant in Variant::ALL {
        match variant.expected_violation() {
            None => assert_eq!(variant, Variant::Reference),
            Some(name) => assert!(names.contains(&name), "{name}"),
        }
    }
}

#[test]
fn report_renders_every_property_and_the_counterexample() {
    let report = check(&CheckConfig::new(LeaseModel::new(
        2,
        Variant::SchemaNoRetry,
    )));
    let rendered = report.to_string();
    for property in all_properties() {
        assert!(rendered.contains(property.name), "{}", property.name);
    }
    assert!(rendered.contains("schema-no-retry"));
    assert!(rendered.contains("counterexample: 4 steps to decide every-worker-starts"));
    assert!(rendered.contains("SchemaUnblocked -> Failed"));
}

#[test]
fn the_models_invariants_carry_the_checkers_names() {
    // One vocabulary: a model counterexample and a checker violation of the
    // same rule name it the same way.
    use leaseproof_history::Invariant;
    let names: Vec<&str> = all_properties()
        .iter()
        .map(|property| property.name)
        .collect();
    for invariant in [
        Invariant::MutualExclusion,
        Invariant::TokenOrder,
        Invariant::FencedWrites,
        Invariant::BoundedTakeover,
    ] {
        assert!(names.contains(&invariant.slug()), "{invariant}");
        assert!(
            invariant
                .slug()
                .starts_with(&invariant.code().to_ascii_lowercase()),
            "{invariant}"
        );
    }
    // The checker's names are unique.
    let slugs: std::collections::BTreeSet<&str> = Invariant::ALL
        .iter()
        .map(|invariant| invariant.slug())
        .collect();
    assert_eq!(slugs.len(), Invariant::ALL.len());
}

/// Every property the model is checked against.
fn all_properties() -> Vec<stateright::Property<LeaseModel>> {
    use stateright::Model as _;
    LeaseModel::new(2, Variant::Reference).properties()
}
