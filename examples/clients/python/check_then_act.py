"""A deliberately broken lease that checks its lease, then acts. The lease is sound (one row per scope taken in one statement
on the database's clock, a growing token, a release that expires the row);
the write is not: a `SELECT` asks whether the lease is still ours, the rows go
in by a second statement; a holder delayed in that gap lands its rows after a
rival took over (`stall-after-reply` finds it).
"""

import asyncpg

from leaseproof import client as lp

SCHEMA = """CREATE TABLE IF NOT EXISTS check_then_act_leases (scope text PRIMARY KEY,
    owner text NOT NULL, token bigint NOT NULL, granted_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL)"""
ACQUIRE = """INSERT INTO check_then_act_leases AS lease VALUES ($1, $2, 1, now(), now() + $3 * interval '1 ms')
ON CONFLICT (scope) DO UPDATE SET owner = EXCLUDED.owner, token = lease.token + 1,
    granted_at = EXCLUDED.granted_at, expires_at = EXCLUDED.expires_at
WHERE lease.expires_at <= now() RETURNING token, granted_at, expires_at"""
STILL_OURS = """SELECT 1 FROM check_then_act_leases
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()"""
RELEASE = """UPDATE check_then_act_leases SET expires_at = now()
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now() RETURNING now()"""


class CheckThenAct:
    def __init__(self):
        self._connection, self._tokens = None, {}

    async def connection(self):
        if self._connection is None or self._connection.is_closed():
            self._connection = await asyncpg.connect(lp.DATABASE_URL)
            await lp.create_once(self._connection, SCHEMA)
        return self._connection

    async def acquire(self, request):
        row = await (await self.connection()).fetchrow(ACQUIRE, request["table"], request["owner"], request["ttl_ms"])
        if row is None:
            raise lp.Held("the lease is live")
        self._tokens[request["table"]] = row["token"]
        return {"token": row["token"], "granted_at_us": lp.micros(row["granted_at"]),
                "expires_at_us": lp.micros(row["expires_at"])}

    async def write(self, request):
        connection = await self.connection()
        if await connection.fetchval(STILL_OURS, request["table"], request["owner"], request["token"]) is None:
            raise lp.Stale("the lease is no longer ours")  # the check ...
        await lp.write_rows(connection, request)  # ... and, in a statement of its own, the act: the bug

    async def release(self, request):
        token = self._tokens.pop(request["table"], None)
        released_at = await (await self.connection()).fetchval(RELEASE, request["table"], request["owner"], token)
        if released_at is None:
            raise lp.Stale("the lease is no longer ours")
        return {"released_at_us": lp.micros(released_at)}


if __name__ == "__main__":
    lp.main(CheckThenAct(), name="broken: a lease checked, then written in a second statement",
            grant_stamps="decision")
