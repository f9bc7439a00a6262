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
