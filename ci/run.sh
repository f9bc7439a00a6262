#!/usr/bin/env bash
# What CI runs, and what a developer runs before pushing: install what the
# tests need, then the README's test command with warnings denied and the
# real-PostgreSQL and real-Redis tests required (a skip is a failure here).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's wall time, printed at the end: `stage NAME` closes the stage
# before it and opens NAME.
stage_times=()
stage_name="install what the tests need"
stage_started=$SECONDS
stage() {
    stage_times+=("$(printf '%6d s  %s' $(( SECONDS - stage_started )) "${stage_name}")")
    stage_name="$1"
    stage_started=$SECONDS
    echo "== $1"
}

bash ci/install-postgres.sh
bash ci/install-redis.sh
bash ci/install-chromium.sh
# Lock clients in other languages: pg_partsmith 1.10.0 and the other Python
# clients in a pinned virtualenv under target/, libfaketime for skewed clocks.
bash ci/install-python-clients.sh
if ! command -v pgbouncer >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    bash ci/apt-install.sh pgbouncer nodejs
fi

export LEASEPROOF_REQUIRE_PG=1
export LEASEPROOF_REQUIRE_REDIS=1
# The timeline pictures are opened in headless Chromium by a test.
export LEASEPROOF_REQUIRE_CHROMIUM=1
# The client-protocol tests (Python and Node.js clients) must run, not skip.
export LEASEPROOF_REQUIRE_CLIENTS=1
# The connection-pooler tests run a throwaway PgBouncer.
export LEASEPROOF_REQUIRE_PGBOUNCER=1
export RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
export CARGO_TERM_COLOR=never

stage "cargo fmt --check"
cargo fmt --all -- --check

# One check of every target — the benches and the `testcontainers` feature
# (no Docker engine here: checked, not run) included: neither is built again
# for its own sake (the test build compiles the code without the feature).
stage "cargo clippy (every target, the testcontainers feature on)"
cargo clippy --workspace --all-targets --features leaseproof/testcontainers --locked -- -D warnings

stage "cargo test (the README's test command)"
test_log="$(mktemp)"
trap 'rm -f "$test_log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$test_log"
test_status=${PIPESTATUS[0]}
if [ "$test_status" -ne 0 ]; then
    exit "$test_status"
fi
# One closing line for the whole suite (cargo prints one per test binary, and
# the last of those is usually an empty doc-test run).
tests_passed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^passed/) sum += $i } END { print sum + 0 }' "$test_log")
tests_failed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^failed/) sum += $i } END { print sum + 0 }' "$test_log")
if [ "$tests_passed" -eq 0 ]; then
    echo "cargo test ran no test" >&2
    exit 1
fi

stage "cargo doc (the published crates: no broken link, no undocumented public item)"
published=(-p leaseproof-protocol -p leaseproof-postgres -p leaseproof-locks -p leaseproof-history)
RUSTDOCFLAGS="-D warnings -D missing_docs" cargo doc --no-deps --locked "${published[@]}" \
    --features leaseproof-locks/conformance

stage "cargo package (the published crates, each built from its .crate as crates.io would)"
cargo package --locked "${published[@]}"

stage "leaseproof verify (the product's main job, on its embedded default)"
cargo run --release --locked -- verify

stage "the Python package: pip install ./python in a fresh virtualenv, its pytest suite"
python_log="$(mktemp)"
trap 'rm -f "$test_log" "$python_log"' EXIT
bash ci/python-package.sh 2>&1 | tee "$python_log"
python_status=${PIPESTATUS[0]}
if [ "$python_status" -ne 0 ]; then
    exit "$python_status"
fi
python_passed=$(grep -Eo '([0-9]+) passed' "$python_log" | tail -1 | grep -Eo '[0-9]+' || echo 0)

stage "done"
echo
echo "stage times (total $(( SECONDS / 60 )) min $(( SECONDS % 60 )) s):"
printf '%s\n' "${stage_times[@]}"
echo "tests: $(( tests_passed + python_passed )) passed (${tests_passed} cargo, ${python_passed} pytest), ${tests_failed} failed"
