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

# Lock clients in other languages: CLIENT_SEEDS seeds (default 200) of every
# shipped client under the whole swarm of faults, each run ~8 s of real time
# (about 30 minutes per client on 2 cores). The broken client must be caught;
# the reference lease must never be.
client_seeds="${CLIENT_SEEDS:-200}"
python="$(bash ci/install-python-clients.sh)"
out=target/nightly-clients
mkdir -p "${out}"
for client in \
    "${python} examples/clients/python/partsmith_redis.py" \
    "${python} examples/clients/python/partsmith_advisory.py" \
    "${python} examples/clients/python/symfonic_leases.py" \
    "node examples/clients/node/redis_lock.js" \
    "target/release/leaseproof lock-client redis" \
    "target/release/leaseproof lock-client advisory"; do
    echo "== leaseproof clients --client '${client}' --seeds 0..${client_seeds} (findings, not failures)"
    ./target/release/leaseproof clients --client "${client}" --seeds "0..${client_seeds}" \
        --duration-ms 8000 --out "${out}" | tail -1 || true
done
echo "== the reference lease through the client protocol must stay clean"
./target/release/leaseproof clients --client "target/release/leaseproof lock-client lease" \
    --seeds "0..${client_seeds}" --duration-ms 8000 --out "${out}" | tail -1
echo "== the broken plain-DEL client must be caught under long pauses"
if ./target/release/leaseproof clients --client "${python} examples/clients/python/broken_plain_del.py" \
    --faults pause-long --seeds 0..20 --duration-ms 8000 --out "${out}" | tail -1; then
    echo "the broken client was never caught: the harness lost its teeth" >&2
    exit 1
fi
# Correct clients in every shape the protocol allows (VARIED_SEEDS designs,
# one run each under the whole swarm, ~8 s a run) are never convicted.
varied_seeds="${VARIED_SEEDS:-100}"
varied=crates/harness/leaseproof-races/tests/varied_client.py
echo "== ${varied_seeds} designs of varied_client.py under every fault: never convicted"
for seed in $(seq 0 $((varied_seeds - 1))); do
    ./target/release/leaseproof clients --client "VARIED_SEED=${seed} ${python} ${varied}" \
        --seed "${seed}" --duration-ms 6000 --ttl-ms 1500 --out "${out}" > "${out}/varied-${seed}.txt" \
        || { status=$?; if [ "${status}" -ne 3 ]; then
            echo "varied_client design ${seed} convicted or refused (exit ${status}):" >&2
            tail -20 "${out}/varied-${seed}.txt" >&2; exit 1; fi; }
done
echo "== ${varied_seeds} designs of its session lock under the faults that spare a session: never convicted"
for seed in $(seq 0 $((varied_seeds - 1))); do
    ./target/release/leaseproof clients --client "VARIED_FORM=session VARIED_SEED=${seed} ${python} ${varied}" \
        --seed "${seed}" --duration-ms 6000 --ttl-ms 1500 --faults pause-short,pause-long,kill,partition,latency,clock-skew \
        --out "${out}" > "${out}/varied-session-${seed}.txt" \
        || { status=$?; if [ "${status}" -ne 3 ]; then
            echo "varied_client session design ${seed} convicted or refused (exit ${status}):" >&2
            tail -20 "${out}/varied-session-${seed}.txt" >&2; exit 1; fi; }
done
# The checker's soundness: histories of correct services (FUZZ_SEEDS, about
# 15 s per 200 seeds) are never convicted; one violation planted in each is.
fuzz_seeds="${FUZZ_SEEDS:-0..20000}"
echo "== history_fuzz --seeds ${fuzz_seeds}: correct services, never convicted; planted, always"
python3 crates/leaseproof/tests/history_fuzz.py --binary target/release/leaseproof --seeds "${fuzz_seeds}"
python3 crates/leaseproof/tests/history_fuzz.py --binary target/release/leaseproof --seeds "${fuzz_seeds}" --plant
echo "nightly sweep clean: ${seeds} per scenario, ${client_seeds} per client, ${varied_seeds} client designs, histories ${fuzz_seeds}"
