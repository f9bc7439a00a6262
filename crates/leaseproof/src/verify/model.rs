//! `verify`'s model stage: the reference model exhausted, every broken
//! variant refuted, and the history checker convicting the variants' paths.

use std::time::Instant;

use super::Report;

/// The variant's shortest path the history checker convicts of the same
/// invariant as the model (a start-up failure leaves no history to judge).
fn judged_by_checker(
    model: &leaseproof_models::LeaseModel,
    variant: leaseproof_models::Variant,
) -> Result<String, String> {
    use leaseproof_models::judged;
    let Some(invariant) = judged::expected_invariant(variant) else {
        return Ok("no history to judge (start-up)".to_string());
    };
    match judged::shortest_convicted_path(model, invariant) {
        Some((path, _)) => Ok(format!(
            "the history checker convicts a {}-step path of {}",
            path.len() - 1,
            invariant.code()
        )),
        None => Err(format!(
            "the history checker convicts no path of variant {variant} of {invariant}"
        )),
    }
}

/// The reference model exhausted (2 workers) and every broken variant refuted.
pub(super) fn model_stage(report: &mut Report) {
    const STAGE: &str = "model";
    for variant in leaseproof_models::Variant::ALL {
        let started = Instant::now();
        let config =
            leaseproof_models::CheckConfig::new(leaseproof_models::LeaseModel::new(2, variant));
        let result = leaseproof_models::check(&config);
        let outcome = match (variant.expected_violation(), result.as_expected()) {
            (None, true) => Ok(format!(
                "every property holds over {} states (exhaustive)",
                result.unique_states
            )),
            (None, false) => Err(format!("the reference model failed a property:\n{result}")),
            (Some(property), true) => {
                let steps = result
                    .counterexample
                    .as_ref()
                    .map_or(0, |trace| trace.steps.len());
                judged_by_checker(&config.model, variant)
                    .map(|judged| format!("refuted: {property} fails in {steps} steps; {judged}"))
            }
            (Some(property), false) => Err(format!(
                "variant {variant} was NOT refuted (expected {property} to fail)"
            )),
        };
        let name = if variant == leaseproof_models::Variant::Reference {
            "reference protocol (2 workers)".to_string()
        } else {
            format!("variant {}", variant.name())
        };
        report.record(STAGE, name, started, outcome);
    }
    // Statements that start now and land later (the delayed-retry bug), and lost replies
    // of renewals and fenced commits: the reference keeps every property
    // under each separately bounded configuration.
    for (model, what, name) in [
        (
            leaseproof_models::LeaseModel::with_late_statements(
                2,
                leaseproof_models::Variant::Reference,
            ),
            "late statements",
            "reference protocol, statements landing late (2 workers)",
        ),
        (
            leaseproof_models::LeaseModel::with_lost_replies(
                2,
                leaseproof_models::Variant::Reference,
            ),
            "lost replies",
            "reference protocol, renew and commit replies lost (2 workers)",
        ),
        (
            leaseproof_models::LeaseModel::with_retry_interval(
                2,
                leaseproof_models::Variant::Reference,
            ),
            "a retry interval",
            "reference protocol, takeover within TTL + one retry interval (2 workers)",
        ),
    ] {
        let started = Instant::now();
        let result = leaseproof_models::check(&leaseproof_models::CheckConfig {
            model,
            search: leaseproof_models::Search::ExhaustiveSymmetric,
        });
        let outcome = if result.as_expected() {
            Ok(format!(
                "every property holds over {} states (exhaustive, symmetric)",
                result.unique_states
            ))
        } else {
            Err(format!(
                "the reference model failed a property with {what}:\n{result}"
            ))
        };
        report.record(STAGE, name, started, outcome);
    }
}
