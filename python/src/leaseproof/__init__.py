"""leaseproof from Python: judge a lock or a lease.

- `leaseproof.client` — speak the client protocol, so a lock client is its
  lock calls (docs/client-protocol.md);
- `leaseproof.recorder.Recorder` — record a history of your own run
  (docs/history-format.md);
- `run_clients(...)`, `check(path)` — the `leaseproof` binary this package
  carries, its verdicts as typed objects;
- the pytest plugin (`leaseproof` fixture, `@pytest.mark.leaseproof`),
  registered on install.
"""

from leaseproof.runner import (
    BadInput,
    CheckResult,
    ClientsResult,
    SeedRun,
    binary,
    check,
    run_clients,
)

__all__ = [
    "BadInput",
    "CheckResult",
    "ClientsResult",
    "SeedRun",
    "binary",
    "check",
    "run_clients",
]
