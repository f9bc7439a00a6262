#!/usr/bin/env bash
# What CI runs, and what a developer runs before pushing: install what the
# tests need, then the README's test command with warnings denied and the
# real-PostgreSQL tests required (a skip is a failure here).
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/install-postgres.sh

export LEASEPROOF_REQUIRE_PG=1
export RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
export CARGO_TERM_COLOR=never

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test (the README's test command)"
cargo test --workspace --locked

echo "== cargo bench --no-run (benches must build, they are not run in CI)"
cargo bench --workspace --no-run --locked

echo "== leaseproof verify (the product's main job, on its embedded default)"
cargo run --release --locked -- verify
