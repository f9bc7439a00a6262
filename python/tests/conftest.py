"""The package's own tests: pytest's `pytester` runs test files as a user
would write them, with this package's plugin loaded from its entry point."""

from pathlib import Path

pytest_plugins = ["pytester"]

# The repository's example clients (run by the interpreter running the tests,
# which has their packages: ci/python-package.sh installs them beside this one).
CLIENTS = Path(__file__).resolve().parents[2] / "examples" / "clients" / "python"
HISTORIES = Path(__file__).resolve().parents[2] / "examples" / "histories"
