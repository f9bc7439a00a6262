"""leaseproof's pytest plugin (registered on install, entry point `pytest11`).

    import sys
    import pytest

    @pytest.mark.leaseproof(seeds="0..5", faults="pause-long")
    def test_my_lock_holds(leaseproof):
        leaseproof.clients(f"{sys.executable} my_lock_client.py")

`leaseproof.clients(command)` runs `leaseproof clients` on a lock client
(docs/client-protocol.md) and fails the test with the findings — each
convicted seed's violations, the line that replays it, its timeline — or
with leaseproof's own message when it refuses the input (exit 2), or when
every run proved little (exit 3: could not judge is not a pass). The
evidence goes under the test's `tmp_path`. `leaseproof.check(path)` judges a
history recorded with `leaseproof.recorder` the same way.

How hard it looks: the marker's `seeds`, `faults`, `duration_ms`, `ttl_ms`,
`clients`, `fail_on_possible`, or the same keywords to `.clients(...)`; the
command line's `--leaseproof-seeds`, `--leaseproof-faults` and
`--leaseproof-duration-ms` override them all (a nightly job runs more seeds
of the same tests).

`leaseproof_postgres` and `leaseproof_redis` (session scope) are the URLs
of a throwaway PostgreSQL and Redis (`leaseproof pg`, `leaseproof redis`),
for tests that run a lock of their own against real servers.
"""

import subprocess
import tempfile
from typing import Dict

import pytest

from leaseproof import runner

# The settings a marker may name, with leaseproof's defaults where it has one.
SETTINGS = ("seeds", "faults", "duration_ms", "ttl_ms", "clients", "fail_on_possible")
DEFAULTS = {"seeds": "0..5", "faults": "all", "clients": 3, "fail_on_possible": False}


def pytest_addoption(parser):
    group = parser.getgroup("leaseproof", "judging locks with leaseproof")
    group.addoption("--leaseproof-seeds", default=None, metavar="A..B",
                    help="the seeds of every leaseproof run (over the markers')")
    group.addoption("--leaseproof-faults", default=None, metavar="KINDS",
                    help="the fault kinds of every leaseproof run: all, none or a comma list")
    group.addoption("--leaseproof-duration-ms", default=None, type=int, metavar="MS",
                    help="how long each leaseproof run keeps its clients acquiring")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "leaseproof(seeds='0..5', faults='all', duration_ms=None, ttl_ms=None, clients=3, "
        "fail_on_possible=False): how the leaseproof fixture drives a lock client",
    )


class Leaseproof:
    """The `leaseproof` fixture: judges lock clients and histories, failing
    the test with what it found."""

    def __init__(self, settings: Dict, command_line: Dict, out):
        self.settings = settings
        self.command_line = command_line
        self.out = out
        self._runs = 0

    @property
    def binary(self) -> str:
        """The `leaseproof` binary, for a client command that runs one of its
        own lock clients (`f"{leaseproof.binary} lock-client lease"`)."""
        return runner.binary()

    def clients(self, command: str, **overrides) -> runner.ClientsResult:
        """Runs and judges `command` (a shell command line starting one lock
        client process); returns the result when it passed."""
        unknown = set(overrides) - set(SETTINGS)
        if unknown:
            raise TypeError(f"leaseproof.clients: unknown settings {sorted(unknown)}")
        settings = {**self.settings, **overrides, **self.command_line}
        self._runs += 1
        out = self.out / f"clients-{self._runs}"
        try:
            result = runner.run_clients(command, out=out, **settings)
        except runner.BadInput as refused:
            pytest.fail(f"leaseproof refused the run (exit 2):\n{refused}", pytrace=False)
        if result.exit_code == 1:
            pytest.fail(result.describe(), pytrace=False)
        if result.could_not_judge:
            pytest.fail("leaseproof could not judge: every run was vacuous (no contention "
                        f"or no write answered ok)\n{result.describe()}", pytrace=False)
        return result

    def check(self, path, model: bool = False) -> runner.CheckResult:
        """Judges a history file; returns the result when it passed."""
        try:
            result = runner.check(path, model=model,
                                  fail_on_possible=self.settings["fail_on_possible"])
        except runner.BadInput as refused:
            pytest.fail(f"leaseproof refused {path} (exit 2):\n{refused}", pytrace=False)
        if not result.passed:
            pytest.fail(f"leaseproof check {path}:\n{result.describe()}", pytrace=False)
        return result


def _marked(request) -> Dict:
    """leaseproof's defaults, with the test's marker over them."""
    settings = dict(DEFAULTS)
    marker = request.node.get_closest_marker("leaseproof")
    if marker is not None:
        if marker.args:
            raise TypeError("@pytest.mark.leaseproof takes keywords only")
        unknown = set(marker.kwargs) - set(SETTINGS)
        if unknown:
            raise TypeError(f"@pytest.mark.leaseproof: unknown settings {sorted(unknown)}")
        settings.update(marker.kwargs)
    return settings


def _command_line(config) -> Dict:
    """What the command line says: over the markers and the calls alike."""
    options = (("leaseproof_seeds", "seeds"), ("leaseproof_faults", "faults"),
               ("leaseproof_duration_ms", "duration_ms"))
    return {key: config.getoption(option) for option, key in options
            if config.getoption(option) is not None}


@pytest.fixture
def leaseproof(request, tmp_path):
    """Judges lock clients (`.clients(command)`) and histories (`.check(path)`)."""
    return Leaseproof(_marked(request), _command_line(request.config), tmp_path / "leaseproof")


def _serve(subcommand: str, variable: str):
    """Starts `leaseproof pg|redis`, yields its URL, stops it at the end."""
    said = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(
        [runner.binary(), subcommand], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=said, text=True,
    )
    first = process.stdout.readline().strip()
    if not first.startswith(variable + "="):
        process.kill()
        process.wait()
        said.seek(0)
        said = said.read().strip()
        pytest.fail(f"leaseproof {subcommand} started no server: {said or first}", pytrace=False)
    try:
        yield first[len(variable) + 1:]
    finally:
        process.stdin.close()  # the server stops when its stdin closes
        process.wait(timeout=60)


@pytest.fixture(scope="session")
def leaseproof_postgres():
    """The URL of a throwaway PostgreSQL cluster, for the whole session."""
    yield from _serve("pg", "DATABASE_URL")


@pytest.fixture(scope="session")
def leaseproof_redis():
    """The URL of a throwaway Redis server, for the whole session."""
    yield from _serve("redis", "REDIS_URL")
