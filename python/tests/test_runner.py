"""`leaseproof.run_clients` and `leaseproof.check` over the binary the wheel
carries: verdicts as typed objects, refusals in leaseproof's own words."""

import sys
import sysconfig
from pathlib import Path

import pytest

import leaseproof
from conftest import CLIENTS, HISTORIES


def test_the_binary_is_the_one_the_package_installed():
    assert Path(leaseproof.binary()).parent == Path(sysconfig.get_path("scripts"))


def test_a_correct_lock_passes_with_every_seed_read_back(tmp_path):
    # Kills with a short TTL: each seed sees takeovers (10 of 10 seeds were
    # not vacuous with these settings), so a pass here proved something.
    result = leaseproof.run_clients(f"{leaseproof.binary()} lock-client lease", seeds=range(0, 2),
                                    faults="kill", ttl_ms=1000, duration_ms=4000, out=tmp_path)
    assert result.passed, result.describe()
    assert [run.seed for run in result.runs] == [0, 1]
    assert all(run.passed and not run.violations and run.history is None for run in result.runs)
    assert all("--seed" in run.replay for run in result.runs)


def test_a_broken_lock_is_convicted_with_its_replay_and_evidence(tmp_path):
    client = f"{sys.executable} {CLIENTS / 'broken_plain_del.py'}"
    result = leaseproof.run_clients(client, seeds="0..3", faults="pause-long", duration_ms=8000,
                                    out=tmp_path)
    assert result.exit_code == 1
    convicted = result.convicted[0]
    assert {"I1", "I3"} & set(convicted.invariants), convicted.invariants
    assert convicted.timeline.is_file() and convicted.history.is_file()
    described = result.describe()
    assert "replay:" in described and str(convicted.timeline) in described
    # The replay line is the one leaseproof prints, and names the seed.
    assert f"--seed {convicted.seed}" in convicted.replay and convicted.replay in result.output


@pytest.mark.parametrize("arguments, said", [
    ({"command": "/nonexistent/lock-client"}, "client"),
    ({"command": "true", "seeds": "5..2"}, "seeds"),
])
def test_bad_input_is_refused_in_leaseproofs_words(tmp_path, arguments, said):
    with pytest.raises(leaseproof.BadInput) as refused:
        leaseproof.run_clients(duration_ms=1000, out=tmp_path, **arguments)
    assert said in str(refused.value)


def test_check_reads_the_verdict_of_a_history():
    clean = leaseproof.check(HISTORIES / "clean.jsonl")
    assert clean.passed and clean.violations == []
    broken = leaseproof.check(HISTORIES / "broken.jsonl")
    assert not broken.passed and broken.violations
    assert broken.violations[0]["invariant"] in broken.describe()


def test_a_malformed_history_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "an event"}\n')
    with pytest.raises(leaseproof.BadInput) as refused:
        leaseproof.check(bad)
    assert "bad.jsonl:1: field `record`" in str(refused.value)
