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
close_stage() {
    stage_times+=("$(printf '%6d s  %s' $(( SECONDS - stage_started )) "${stage_name}")")
}
stage() {
    close_stage
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

logs="$(mktemp -d)"
beside_pid=""
lint_pid=""
# On the way out, stop what runs beside the stages if it still runs: its own
# process group (set -m below), by id.
finish() {
    for pid in "${beside_pid}" "${lint_pid}"; do
        if [ -n "${pid}" ]; then
            kill -- "-${pid}" 2>/dev/null || true
        fi
    done
    rm -rf "$logs"
}
trap finish EXIT


stage "cargo fmt --check"
cargo fmt --all -- --check

# Clippy lints the workspace's own crates as the test build compiles them:
# clippy-driver wraps rustc for them (as `cargo clippy` does for its check),
# and `-D warnings` above denies its lints too. One compilation, not a check
# of the whole workspace and its dependencies and then a build.
lint=(env RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver")

# The README's test command, built once, then run in two lanes: the
# real-process races (mostly waiting on their clients, servers and faults;
# their timing is what they test) beside every other test binary.
stage "cargo test: the build (the README's test command), linted by clippy"
# Every test binary of the workspace, built once with the whole workspace's
# features; each lane runs its binaries itself (a `cargo test -p` of a part
# would resolve other features and build much of it again).
"${lint[@]}" cargo test --workspace --locked --no-run --message-format=json-render-diagnostics \
    | python3 -c '
import json, os, sys
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable") \
            and message["profile"]["test"]:
        print(os.path.dirname(message["manifest_path"]) + "\t" + message["executable"])
' > "$logs/binaries"
if [ ! -s "$logs/binaries" ]; then
    echo "cargo test built no test binary" >&2
    exit 1
fi
# The benches, linted as they compile in the test profile (criterion's
# harness is not run: `leaseproof bench` and `cargo bench` measure).
"${lint[@]}" cargo test --workspace --locked --benches --no-run
# Runs test binaries as cargo would (from their package's directory), one
# after another; stops at the first that fails.
run_binaries() {
    local dir binary
    while IFS=$'\t' read -r dir binary; do
        echo "     Running ${binary#"${PWD}/"}"
        (cd "$dir" && "$binary") || return
    done
}

stage "cargo test: the races beside the rest"
# Job control on: a background job of a shell without it ignores SIGINT,
# and so would every process it starts (tests send it to theirs).
races="$(printf '%s/crates/harness/leaseproof-races' "$PWD")"
if ! grep -qF "${races}"$'\t' "$logs/binaries"; then
    echo "no test binary of leaseproof-races was built" >&2
    exit 1
fi
# The races' lane also takes the throwaway clusters' own tests (they wait on
# initdb and pg_ctl): the two lanes then take about as long (measured: the
# races ~345 s, the clusters' ~50 s; the rest ~430 s before).
waiting_lane=(-e "${races}"$'\t' -e "$PWD/crates/servers/leaseproof-pgcluster"$'\t')
set -m
grep -F "${waiting_lane[@]}" "$logs/binaries" | run_binaries > "$logs/races" 2>&1 &
races_pid=$!
{ "${lint[@]}" cargo test --workspace --locked --doc && grep -vF "${waiting_lane[@]}" "$logs/binaries" | run_binaries; } \
    > "$logs/rest" 2>&1 &
rest_pid=$!
set +m
# Beside the test lanes, at the lowest priority, so it takes only the CPU
# they leave (the races mostly wait): the published crates' docs, their
# packages. The docs share the test build's directory: the doc-tests come
# first in their lane, before the docs begin. No release build: `verify`
# and the Python package run the binary the test build made (below).
beside_stage() {
    local name="$1" started=$SECONDS
    shift
    echo "== (beside) ${name}"
    "$@" || return
    echo "$(printf '%6d s  (beside) %s' $(( SECONDS - started )) "${name}")" >> "$logs/beside-times"
}
published=(-p leaseproof-protocol -p leaseproof-postgres -p leaseproof-locks -p leaseproof-history)
set -m
(
    set -e
    beside_stage "cargo doc (the published crates: no broken link, no undocumented public item)" \
        env RUSTDOCFLAGS="-D warnings -D missing_docs" nice -n 19 cargo doc --no-deps --locked \
        "${published[@]}" --features leaseproof-locks/conformance
    beside_stage "cargo package (the published crates, each built from its .crate as crates.io would)" \
        nice -n 19 cargo package --locked "${published[@]}"
) > "$logs/beside" 2>&1 &
beside_pid=$!
set +m
races_status=0
wait "$races_pid" || races_status=$?
rest_status=0
wait "$rest_pid" || rest_status=$?
cat "$logs/rest" "$logs/races"
if [ "$races_status" -ne 0 ] || [ "$rest_status" -ne 0 ]; then
    echo "cargo test failed: the races exit ${races_status}, the rest exit ${rest_status}" >&2
    exit 1
fi
# One closing line for the whole suite (cargo prints one per test binary, and
# the last of those is usually an empty doc-test run).
count() {
    awk -v word="$1" '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ "^" word) sum += $i } END { print sum + 0 }' "$logs/rest" "$logs/races"
}
tests_passed=$(count passed)
tests_failed=$(count failed)
if [ "$tests_passed" -eq 0 ]; then
    echo "cargo test ran no test" >&2
    exit 1
fi

stage "what runs beside the stages: its rest"
beside_status=0
wait "$beside_pid" || beside_status=$?
beside_pid=""
cat "$logs/beside"
if [ "$beside_status" -ne 0 ]; then
    exit "$beside_status"
fi

# `verify` and the Python package's suite share nothing but the binary:
# each starts its own servers. Both run a `leaseproof` of the test build's
# profile (its dependencies and the simulation, history and model crates are
# optimised there too), built once more for the package's own features —
# without dev-dependencies some thirty crates differ, ~77 s:
# a release build of its own took ~9 min beside the lanes and outlasted
# them, for a verify ~20 % faster (measured: 171 s against ~145 s).
#
# Beside them, at the lowest priority, the code behind the `testcontainers`
# feature (no Docker engine here: linted, not run), in the two crates that
# have it: beside the lanes it ended ~3 min after them, starved; here the
# two mostly wait on their servers and clients. It shares the build
# directory (the proc macros and build scripts are the test build's), so it
# starts once the wheel is built: its lock would keep maturin's cargo
# waiting. `verify` runs the binary itself, without cargo; maturin's cargo
# then finds the build below fresh.
stage "leaseproof verify beside the Python package (pip install ./python in a fresh virtualenv, its pytest suite), and the testcontainers lint"
"${lint[@]}" cargo build --locked -p leaseproof --bin leaseproof
set -m
"${CARGO_TARGET_DIR:-target}/debug/leaseproof" verify > "$logs/verify" 2>&1 &
verify_pid=$!
set +m
python_status=0
"${lint[@]}" MATURIN_PEP517_ARGS="--profile dev" bash ci/python-package.sh install > "$logs/python" 2>&1 \
    || python_status=$?
set -m
beside_stage "cargo clippy (the testcontainers feature on)" \
    nice -n 19 cargo clippy --locked --all-targets \
    -p leaseproof-pgcluster -p leaseproof-redis-server \
    --features leaseproof-pgcluster/testcontainers,leaseproof-redis-server/testcontainers \
    -- -D warnings > "$logs/lint-testcontainers" 2>&1 &
lint_pid=$!
set +m
if [ "$python_status" -eq 0 ]; then
    bash ci/python-package.sh test >> "$logs/python" 2>&1 || python_status=$?
fi
verify_status=0
wait "$verify_pid" || verify_status=$?
lint_status=0
wait "$lint_pid" || lint_status=$?
lint_pid=""
cat "$logs/verify" "$logs/python" "$logs/lint-testcontainers"
if [ "$verify_status" -ne 0 ] || [ "$python_status" -ne 0 ] || [ "$lint_status" -ne 0 ]; then
    echo "verify exit ${verify_status}, the Python package exit ${python_status}," \
        "the testcontainers lint exit ${lint_status}" >&2
    exit 1
fi
python_passed=$(grep -Eo '([0-9]+) passed' "$logs/python" | tail -1 | grep -Eo '[0-9]+' || echo 0)

close_stage
echo
echo "stage times (total $(( SECONDS / 60 )) min $(( SECONDS % 60 )) s):"
printf '%s\n' "${stage_times[@]}"
cat "$logs/beside-times"
echo "tests: $(( tests_passed + python_passed )) passed (${tests_passed} cargo, ${python_passed} pytest), ${tests_failed} failed"
