"""A deliberately broken lease: it checks its lease, then acts — the harness
must catch it.

The lease itself is sound: one row per scope, taken in one statement on the
database's clock (`INSERT … ON CONFLICT … DO UPDATE … WHERE expires_at <=
now()`), a fencing token that grows, a release that expires the row. The
bug is the write: a `SELECT` asks whether the lease is still ours, and the
rows go in by a second statement in a transaction of its own. Nothing holds
the lease between the two, so a holder delayed in that gap — a pause, a slow
network, a long garbage collection — lands its rows after a rival took the
lease over. The gap is a millisecond on loopback: only a fault aimed at a
write in flight (`stall-after-reply`) finds it reliably.
"""

import asyncpg

import leaseproof_client as lp

LEASES = "check_then_act_leases"

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {LEASES} (
    scope text PRIMARY KEY,
    owner text NOT NULL,
    token bigint NOT NULL,
    granted_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
)"""

ACQUIRE = f"""
INSERT INTO {LEASES} AS lease (scope, owner, token, granted_at, expires_at)
VALUES ($1, $2, 1, now(), now() + $3 * interval '1 millisecond')
ON CONFLICT (scope) DO UPDATE
    SET owner = EXCLUDED.owner, token = lease.token + 1,
        granted_at = EXCLUDED.granted_at, expires_at = EXCLUDED.expires_at
    WHERE lease.expires_at <= now()
RETURNING token, granted_at, expires_at"""

STILL_OURS = f"""
SELECT 1 FROM {LEASES}
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()"""

RELEASE = f"""
UPDATE {LEASES} SET expires_at = now()
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()
RETURNING now()"""


def micros(moment):
    """A timestamptz as µs since the epoch."""
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


class CheckThenAct:
    def __init__(self):
        self._connection = None
        self._tokens = {}

    async def connection(self):
        if self._connection is None or self._connection.is_closed():
            self._connection = await asyncpg.connect(lp.DATABASE_URL)
            try:
                await self._connection.execute(SCHEMA)
            except asyncpg.UniqueViolationError:
                pass  # another client created it at the same moment
        return self._connection

    async def acquire(self, request):
        connection = await self.connection()
        row = await connection.fetchrow(ACQUIRE, request["table"], request["owner"], request["ttl_ms"])
        if row is None:
            raise lp.Held("the lease is live")
        self._tokens[request["table"]] = row["token"]
        return {
            "token": row["token"],
            "granted_at_us": micros(row["granted_at"]),
            "expires_at_us": micros(row["expires_at"]),
        }

    async def write(self, request):
        connection = await self.connection()
        # The check ...
        if await connection.fetchval(STILL_OURS, request["table"], request["owner"], request["token"]) is None:
            raise lp.Stale("the lease is no longer ours")
        # ... and, in a statement of its own, the act: the bug.
        await lp.write_rows(connection, request)

    async def release(self, request):
        connection = await self.connection()
        token = self._tokens.pop(request["table"], None)
        released_at = await connection.fetchval(RELEASE, request["table"], request["owner"], token)
        if released_at is None:
            raise lp.Stale("the lease is no longer ours")
        return {"released_at_us": micros(released_at)}

    async def is_locked(self, request):
        connection = await self.connection()
        live = await connection.fetchval(
            f"SELECT expires_at > now() FROM {LEASES} WHERE scope = $1", request["table"]
        )
        return {"locked": bool(live)}


if __name__ == "__main__":
    lp.main(CheckThenAct(), name="broken: a lease checked, then written in a second statement",
            grant_stamps="decision")
