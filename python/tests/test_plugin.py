"""The pytest plugin as a user meets it: a test file using the `leaseproof`
fixture, run by pytest (`pytester`), passes on a correct lock and fails on a
broken one with the finding, its replay line and its timeline."""

import sys

from conftest import CLIENTS, HISTORIES

USER_TEST = """
import pytest

@pytest.mark.leaseproof(seeds="{seeds}", faults="{faults}", duration_ms={duration_ms})
def test_the_lock(leaseproof):
    result = leaseproof.clients({command!r})
    assert result.passed
"""


def run_user_test(pytester, command, seeds="0..2", faults="pause-long", duration_ms=3000, *options):
    pytester.makepyfile(USER_TEST.format(command=command, seeds=seeds, faults=faults,
                                         duration_ms=duration_ms))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *options)


def test_a_correct_lock_passes(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.leaseproof(seeds="0..2", faults="kill", ttl_ms=1000, duration_ms=4000)
        def test_the_lease(leaseproof):
            result = leaseproof.clients(f"{leaseproof.binary} lock-client lease")
            assert result.passed and len(result.runs) == 2
    """)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_broken_lock_fails_with_its_finding_replay_and_timeline(pytester):
    result = run_user_test(pytester, f"{sys.executable} {CLIENTS / 'broken_plain_del.py'}",
                           seeds="0..3", duration_ms=8000)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*leaseproof convicted broken: Redis lock released by plain DEL on * of 3 seeds*",
        "*replay: * clients --client * --seed *",
        "*timeline: *.html",
    ])
    # The evidence is under pytest's own temporary directory.
    assert str(pytester.path.parent) in result.stdout.str() or "pytest-" in result.stdout.str()
    assert "Traceback" not in result.stdout.str()


def test_a_client_that_does_not_start_fails_with_leaseprooofs_message(pytester):
    result = run_user_test(pytester, "/nonexistent/lock-client", seeds="0..1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*leaseproof refused the run (exit 2)*"])
    assert "Traceback" not in result.stdout.str()


def test_the_command_line_overrides_the_markers_seeds(pytester):
    result = run_user_test(pytester, "/nonexistent/lock-client", "0..1", "none", 3000,
                           "--leaseproof-seeds", "9..4")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*9..4*"])


def test_throwaway_servers_answer(pytester):
    pytester.makepyfile("""
        import socket
        from urllib.parse import urlparse

        def test_servers(leaseproof_postgres, leaseproof_redis):
            redis = urlparse(leaseproof_redis)
            with socket.create_connection((redis.hostname, redis.port), timeout=10) as s:
                s.sendall(f"AUTH {redis.password}\\r\\nPING\\r\\n".encode())
                answer = b""
                while answer.count(b"\\r\\n") < 2:
                    answer += s.recv(100)
                assert answer == b"+OK\\r\\n+PONG\\r\\n"
            postgres = urlparse(leaseproof_postgres)
            assert postgres.scheme.startswith("postgres")
            socket.create_connection((postgres.hostname, postgres.port), timeout=10).close()
    """)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_run_that_proved_nothing_fails_as_could_not_judge(pytester):
    # A lock that refuses everyone never has a holder: nothing was tested.
    pytester.makepyfile(never_granted="""
        from leaseproof import client as lp

        class NeverGranted:
            def acquire(self, request):
                raise lp.Held("always taken")

        lp.main(NeverGranted(), name="a lock nobody gets")
    """)
    result = run_user_test(pytester, f"{sys.executable} never_granted.py", seeds="0..1",
                           faults="none")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*leaseproof could not judge: every run was vacuous*"])


def test_a_recorded_history_is_judged_by_the_fixture(pytester):
    pytester.makepyfile(f"""
        def test_clean(leaseproof):
            leaseproof.check({str(HISTORIES / "clean.jsonl")!r})

        def test_broken(leaseproof):
            leaseproof.check({str(HISTORIES / "broken.jsonl")!r})
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*leaseproof check *broken.jsonl:*", "i1-mutual-exclusion (job): overlap*"])


def test_the_readmes_test_file_runs_against_the_plugin(pytester):
    # The README's `test_locks.py`, as a user copies it (the clients' path
    # made absolute), run briefly and without faults: what it calls exists
    # and runs; its verdicts at full length are measured in docs/python.md.
    readme = (CLIENTS.parents[2] / "README.md").read_text()
    sample = readme.split("# test_locks.py\n", 1)[1].split("```", 1)[0]
    assert sample.count("\n") <= 20, "the README promises a test of 20 lines at most"
    sample = sample.replace('CLIENTS = "examples/clients/python"', f"CLIENTS = {str(CLIENTS)!r}")
    pytester.makepyfile(test_locks=sample)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--leaseproof-seeds", "0..1", "--leaseproof-faults", "none",
        "--leaseproof-duration-ms", "3000",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2, result.stdout.str()
    assert "Traceback" not in result.stdout.str()
