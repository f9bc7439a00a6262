#!/usr/bin/env bash
# Mutation testing of the crates that carry the protocol (not run by .ci/run:
# hours on 2 cores). Each crate is mutated and judged by its own tests first
# (fast: the checker's ~100 tests take a second); MUTANTS_TEST_WORKSPACE=1
# judges every mutant by the whole workspace's tests instead (slow, and needs
# PostgreSQL and Redis like `cargo test`).
#
#   bash ci/mutants.sh                          # history, protocol, worker
#   MUTANTS_PACKAGES="leaseproof-history" bash ci/mutants.sh
#   MUTANTS_PACKAGES=leaseproof-sim MUTANTS_FILE=crates/harness/leaseproof-sim/src/db.rs bash ci/mutants.sh
#   MUTANTS_PACKAGES=leaseproof-races MUTANTS_SHARD=0/100 bash ci/mutants.sh   # a uniform sample
#
# Results land in target/mutants/<package>/mutants.out (missed.txt lists the
# survivors). Every survivor is either killed by a new behavioural test or
# explained as equivalent in docs/testing.md's mutation section.
set -euo pipefail
cd "$(dirname "$0")/.."

packages="${MUTANTS_PACKAGES:-leaseproof-history leaseproof-protocol leaseproof-worker}"
jobs="${MUTANTS_JOBS:-1}"
if ! command -v cargo-mutants > /dev/null; then
    cargo install cargo-mutants --locked
fi
workspace_flag=()
if [ "${MUTANTS_TEST_WORKSPACE:-0}" = "1" ]; then
    workspace_flag=(--test-workspace=true)
fi
# One file of the package only (the simulated database's run takes ~45 min).
file_flag=()
if [ -n "${MUTANTS_FILE:-}" ]; then
    file_flag=(-f "${MUTANTS_FILE}")
fi
# A uniform sample: every n-th mutant (round-robin), for crates whose full run
# takes longer than a night (each mutant of the races runs real servers).
shard_flag=()
if [ -n "${MUTANTS_SHARD:-}" ]; then
    shard_flag=(--shard "${MUTANTS_SHARD}" --sharding round-robin)
fi
status=0
for package in ${packages}; do
    echo "== cargo mutants -p ${package}"
    mkdir -p "target/mutants/${package}"
    cargo mutants -p "${package}" -j "${jobs}" --timeout 300 \
        "${workspace_flag[@]}" "${file_flag[@]}" "${shard_flag[@]}" -o "target/mutants/${package}" || status=$?
    echo "survivors of ${package}:"
    cat "target/mutants/${package}/mutants.out/missed.txt" || true
done
exit "${status}"
