"""The `leaseproof` binary, called from Python, its verdicts as typed objects.

`run_clients` runs `leaseproof clients` (docs/client-protocol.md) and reads
back its `--json` lines, one per seed; `check` runs `leaseproof check` and
reads its `--json` document (docs/json.md). Exit 2 — input leaseproof
refuses: a client that does not start or speaks no protocol, a bad seed
range, a malformed history — raises `BadInput` with leaseproof's own
message (the line and the field), never a traceback of this wrapper.
Standard library only.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence, Union

# The JSON versions this module reads (a newer binary's are refused, as
# leaseproof's own readers refuse what they do not know).
CLIENTS_SEED_VERSION = 6
CHECK_VERSION = 2

Seeds = Union[int, range, str]


class BadInput(Exception):
    """leaseproof refused its input (exit 2); the message is its own."""


def binary() -> str:
    """The `leaseproof` binary: `$LEASEPROOF_BINARY`, else the one this
    package installed beside its interpreter, else the first on `PATH`."""
    named = os.environ.get("LEASEPROOF_BINARY")
    if named:
        return named
    beside = Path(sysconfig.get_path("scripts")) / "leaseproof"
    if beside.is_file():
        return str(beside)
    on_path = shutil.which("leaseproof")
    if on_path:
        return on_path
    raise FileNotFoundError(
        "no leaseproof binary: install this package with pip (it builds one), "
        "put one on PATH, or set LEASEPROOF_BINARY"
    )


@dataclasses.dataclass(frozen=True)
class SeedRun:
    """One seed of `leaseproof clients`."""

    seed: int
    design: str
    passed: bool
    faults: List[str]
    invariants: List[str]
    violations: List[str]
    possible: int
    vacuous: Optional[str]
    replay: str
    history: Optional[Path]
    timeline: Optional[Path]
    line: dict

    @classmethod
    def from_line(cls, line: dict) -> "SeedRun":
        if line.get("format") != "leaseproof-clients-seed" or line.get("version") != CLIENTS_SEED_VERSION:
            raise ValueError(
                f"not a leaseproof-clients-seed line of version {CLIENTS_SEED_VERSION}: "
                f"{line.get('format')!r} version {line.get('version')!r}"
            )
        evidence = line.get("evidence") or {}
        return cls(
            seed=line["seed"],
            design=line["design"],
            passed=line["passed"],
            faults=line["faults"],
            invariants=line["invariants"],
            violations=line["violation_messages"],
            possible=line["possible"],
            vacuous=line["vacuous"],
            replay=line["replay"],
            history=Path(evidence["history"]) if "history" in evidence else None,
            timeline=Path(evidence["timeline"]) if "timeline" in evidence else None,
            line=line,
        )


@dataclasses.dataclass(frozen=True)
class ClientsResult:
    """A `leaseproof clients` run: its exit status, each seed, its output."""

    exit_code: int
    runs: List[SeedRun]
    output: str
    log: Path

    @property
    def passed(self) -> bool:
        """No violation, and not every run vacuous (exit 0)."""
        return self.exit_code == 0

    @property
    def could_not_judge(self) -> bool:
        """No violation, but every run proved little (exit 3)."""
        return self.exit_code == 3

    @property
    def convicted(self) -> List[SeedRun]:
        """The seeds with a violation."""
        return [run for run in self.runs if run.violations]

    def hit_rate(self) -> str:
        """leaseproof's own hit-rate line, when more than one seed ran."""
        return next((line for line in self.output.splitlines() if line.startswith("hit rate:")), "")

    def describe(self, show: int = 3) -> str:
        """What a failed run found: per convicted seed its violations, the
        line that replays it and its evidence; else the run's closing lines."""
        if not self.convicted:
            closing = [line for line in self.output.splitlines() if line.startswith("clients:")]
            return "\n".join(closing) + f"\n(output: {self.log})"
        design = self.convicted[0].design
        lines = [f"leaseproof convicted {design} on {len(self.convicted)} of {len(self.runs)} seeds"]
        if self.hit_rate():
            lines.append(self.hit_rate())
        for run in self.convicted[:show]:
            lines.append(f"seed {run.seed} (faults: {', '.join(run.faults) or 'none'}):")
            lines.extend(f"  {violation}" for violation in run.violations[:show])
            if len(run.violations) > show:
                lines.append(f"  ... and {len(run.violations) - show} more")
            lines.append(f"  replay: {run.replay}")
            if run.timeline:
                lines.append(f"  timeline: {run.timeline}")
                lines.append(f"  history: {run.history}")
        lines.append(f"(output: {self.log})")
        return "\n".join(lines)


def seeds_argument(seeds: Seeds) -> List[str]:
    """`--seed N` or `--seeds A..B` for an int, a step-1 range or `"A..B"`."""
    if isinstance(seeds, bool):
        raise TypeError("seeds: an int, a range or 'A..B'")
    if isinstance(seeds, int):
        return ["--seed", str(seeds)]
    if isinstance(seeds, range):
        if seeds.step != 1 or len(seeds) == 0:
            raise ValueError(f"seeds: {seeds} is not a non-empty range of step 1")
        return ["--seeds", f"{seeds.start}..{seeds.stop}"]
    return ["--seeds", str(seeds)]


def _run(arguments: Sequence[str], log: Path, cwd=None, env=None, timeout=None):
    """Runs the binary; its stdout and stderr kept in `log`; exit 2 raised."""
    command = [binary(), *arguments]
    completed = subprocess.run(
        command, cwd=cwd, env=env, timeout=timeout, text=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    log.write_text(completed.stdout + completed.stderr)
    if completed.returncode == 2:
        raise BadInput(completed.stderr.strip() or completed.stdout.strip())
    if completed.returncode not in (0, 1, 3):
        tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"leaseproof exited {completed.returncode} ({log}):\n{tail}")
    return completed


def run_clients(
    command: str,
    seeds: Seeds = 0,
    faults: str = "all",
    clients: int = 3,
    duration_ms: Optional[int] = None,
    ttl_ms: Optional[int] = None,
    out: Union[str, Path, None] = None,
    fail_on_possible: bool = False,
    cwd=None,
    env=None,
    timeout: Optional[float] = None,
) -> ClientsResult:
    """Runs `leaseproof clients --client COMMAND` over `seeds` and judges it.

    `out`: where the output, each seed's JSON line and a failing seed's
    history and timeline go (a new temporary directory when not given)."""
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="leaseproof-"))
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "clients.jsonl"
    if json_path.exists():
        json_path.unlink()
    arguments = ["clients", "--client", command, "--clients", str(clients), "--faults", faults,
                 *seeds_argument(seeds), "--out", str(out.resolve()), "--json", str(json_path)]
    if duration_ms is not None:
        arguments += ["--duration-ms", str(duration_ms)]
    if ttl_ms is not None:
        arguments += ["--ttl-ms", str(ttl_ms)]
    if fail_on_possible:
        arguments.append("--fail-on-possible")
    log = out / "clients.log"
    completed = _run(arguments, log, cwd=cwd, env=env, timeout=timeout)
    lines = json_path.read_text().splitlines() if json_path.exists() else []
    runs = [SeedRun.from_line(json.loads(line)) for line in lines if line.strip()]
    return ClientsResult(exit_code=completed.returncode, runs=runs, output=completed.stdout, log=log)


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """`leaseproof check` of one history."""

    exit_code: int
    passed: bool
    violations: List[dict]
    possible: List[dict]
    document: dict
    output: str

    @property
    def could_not_judge(self) -> bool:
        """The judge gave no verdict (exit 3): its search ran past its budget."""
        return self.exit_code == 3

    def describe(self, show: int = 5) -> str:
        """The violations, one per line, as leaseproof words them."""
        if self.could_not_judge:
            return "could not judge:\n" + self.output.strip()
        lines = [f"{v['invariant']} ({v['scope']}): {v['message']}" for v in self.violations[:show]]
        if len(self.violations) > show:
            lines.append(f"... and {len(self.violations) - show} more")
        return "\n".join(lines) or "no violation"


def check(path: Union[str, Path], model: bool = False, fail_on_possible: bool = False) -> CheckResult:
    """Runs `leaseproof check PATH` (with `--model`, the model judge)."""
    with tempfile.TemporaryDirectory(prefix="leaseproof-check-") as scratch:
        document_path = Path(scratch) / "check.json"
        arguments = ["check", str(path), "--json", str(document_path)]
        if model:
            arguments.append("--model")
        if fail_on_possible:
            arguments.append("--fail-on-possible")
        completed = _run(arguments, Path(scratch) / "check.log")
        if not document_path.exists():
            # Exit 3, the model's search past its budget: no verdict to read.
            return CheckResult(completed.returncode, False, [], [], {}, completed.stdout)
        document = json.loads(document_path.read_text())
    if document.get("format") != "leaseproof-check" or document.get("version") != CHECK_VERSION:
        raise ValueError(f"not a leaseproof-check document of version {CHECK_VERSION}")
    report = document["report"]
    return CheckResult(
        exit_code=completed.returncode,
        passed=document["passed"] and completed.returncode == 0,
        violations=report["violations"],
        possible=report["possible"],
        document=document,
        output=completed.stdout,
    )
