#!/usr/bin/env bash
# The whole test suite, RUNS times (default 5), each while a second load —
# a release-mode simulation sweep on every core — keeps the machine busy, as
# a shared CI runner is. A test that fails only under load is a flaky test;
# this is where it shows. Not run by .ci/run (each run takes the suite's
# time and more). Prints every failing test of every run and a tally; exits
# 1 if any run failed.
#
#   bash ci/flaky.sh              # 5 loaded runs
#   RUNS=2 bash ci/flaky.sh
#
# Only what it started is stopped: the load's process group, by id.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${RUNS:-5}"
export CARGO_TERM_COLOR=never
out="target/flaky"
mkdir -p "${out}"

cargo build --release --locked --bin leaseproof
cargo test --workspace --locked --no-run

load_pid=""
stop_load() {
    if [ -n "${load_pid}" ]; then
        kill -- "-${load_pid}" 2>/dev/null || true
        wait "${load_pid}" 2>/dev/null || true
        load_pid=""
    fi
}
trap stop_load EXIT

failed_runs=0
for run in $(seq 1 "${runs}"); do
    # The load: an endless sweep in its own process group (set -m), so one
    # kill by its id stops it and whatever it started.
    set -m
    ( while true; do
        ./target/release/leaseproof sim chaos --seeds random:100000 --quiet > /dev/null 2>&1 || true
      done ) &
    load_pid=$!
    set +m
    log="${out}/run-${run}.log"
    started=$(date +%s)
    if cargo test --workspace --locked > "${log}" 2>&1; then
        status=passed
    else
        status=FAILED
        failed_runs=$((failed_runs + 1))
    fi
    stop_load
    echo "== run ${run} of ${runs}: ${status} in $(( $(date +%s) - started )) s (log: ${log})"
    grep -E '^test .* FAILED$|^---- ' "${log}" || true
done
echo "flaky: ${failed_runs} of ${runs} loaded runs failed"
[ "${failed_runs}" -eq 0 ]
