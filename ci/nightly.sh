#!/usr/bin/env bash
# The wide sweep: 10^5 seeds per scenario (or NIGHTLY_SEEDS), fenced, every
# scenario, in release mode on every core. Not run by .ci/run (it takes hours
# on 2 cores: ~90 runs/s, so 7 x 10^5 runs is ~2 h); run it nightly or before
# a release. `cargo test` sweeps 200 fixed seeds plus a moving window of 100
# per scenario; this looks much wider. A failure prints its seed and the one
# line that replays it; save it under scenarios/regressions/.
#
#   bash ci/nightly.sh                  # seeds 0..100000
#   NIGHTLY_SEEDS=200..20200 bash ci/nightly.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seeds="${NIGHTLY_SEEDS:-0..100000}"
export CARGO_TERM_COLOR=never

cargo build --release --locked
echo "== leaseproof sim all --seeds ${seeds} (fenced reference)"
./target/release/leaseproof sim all --seeds "${seeds}" --quiet
echo "== unfenced gc-pause sweep must find violations (teeth)"
if ./target/release/leaseproof sim gc-pause --seeds 0..2000 --unfenced --quiet > /dev/null; then
    echo "unfenced gc-pause sweep found no violation: the harness lost its teeth" >&2
    exit 1
fi
echo "nightly sweep clean: ${seeds} per scenario"
