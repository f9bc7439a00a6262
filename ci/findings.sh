#!/usr/bin/env bash
# The findings matrix: every shipped lock client under each fault kind alone,
# SEEDS seeds each (default 3), judged by the one checker. Prints a markdown
# table (design x fault -> seeds with a violation / seeds run, the exact
# one-sided 95 % lower bound of that hit rate as `leaseproof clients` prints
# it, the invariants and the first seed that showed them) and keeps the per-seed JSON lines and the evidence of every
# violating seed under target/findings/. Not run by .ci/run: ~8 designs x 9
# faults x SEEDS runs of ~8 s each (about 10 minutes per seed on 2 cores).
# Real processes: the fault plans replay by seed, the interleavings do not.
#
#   SEEDS=3 bash ci/findings.sh > docs/findings-table.md
set -euo pipefail
cd "$(dirname "$0")/.."

seeds="${SEEDS:-3}"
python="$(bash ci/install-python-clients.sh)"
cargo build --release --locked --bin leaseproof >&2
out=target/findings
rm -rf "${out}"
mkdir -p "${out}"

designs=(
    "partsmith-redis|${python} examples/clients/python/partsmith_redis.py|3000"
    "partsmith-advisory|${python} examples/clients/python/partsmith_advisory.py|3000"
    "check-then-act|${python} examples/clients/python/check_then_act.py|3000"
    "symfonic-reproduction|${python} examples/clients/python/symfonic_leases.py|3000"
    "broken-plain-del|${python} examples/clients/python/broken_plain_del.py|3000"
    "node-redis|node examples/clients/node/redis_lock.js|3000"
    "leaseproof-lease|target/release/leaseproof lock-client lease|3000"
    "leaseproof-redis|target/release/leaseproof lock-client redis|3000"
    "leaseproof-advisory|target/release/leaseproof lock-client advisory|3000"
)
faults=(pause-short pause-long kill partition lose-reply reset latency terminate-backends redis-restart clock-skew terminate-lock-session stall-after-reply partition-lock-store all)

for design in "${designs[@]}"; do
    IFS='|' read -r name command ttl <<< "${design}"
    for fault in "${faults[@]}"; do
        echo "== ${name} x ${fault}" >&2
        target/release/leaseproof clients --client "${command}" --faults "${fault}" \
            --seeds "0..${seeds}" --duration-ms 8000 --ttl-ms "${ttl}" \
            --json "${out}/${name}.${fault}.jsonl" --out "${out}/evidence-${name}-${fault}" \
            > "${out}/${name}.${fault}.log" 2>&1 || true
    done
done

python3 - "${out}" "${seeds}" <<'PY'
import json, pathlib, re, sys
out, seeds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
faults = ["pause-short", "pause-long", "kill", "partition", "lose-reply", "reset", "latency",
          "terminate-backends", "redis-restart", "clock-skew", "terminate-lock-session",
          "stall-after-reply", "partition-lock-store", "all"]
names = []
for path in sorted(out.glob("*.jsonl")):
    name = path.name.split(".")[0]
    if name not in names:
        names.append(name)
print("| design | " + " | ".join(faults) + " |")
print("|---|" + "---|" * len(faults))
for name in names:
    cells = []
    for fault in faults:
        path = out / f"{name}.{fault}.jsonl"
        runs = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        if not runs:
            cells.append("not run")
            continue
        bad = [run for run in runs if run["violations"]]
        invariants = sorted({code for run in bad for code in run["invariants"]})
        cell = f"{len(bad)}/{len(runs)}"
        log = out / f"{name}.{fault}.log"
        rate = re.search(r"\(>= ([0-9.]+) at 95 %\)", log.read_text()) if log.exists() else None
        if rate and bad:
            cell += f" (>= {rate.group(1)})"
        if invariants:
            cell += " " + ",".join(invariants) + f" (seed {bad[0]['seed']})"
        cells.append(cell)
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
