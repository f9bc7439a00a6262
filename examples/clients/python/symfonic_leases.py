"""symfonic's PostgresLeases, reproduced from its published description: one
row per scope, taken in ONE statement on the database's clock; expiry is the
crash recovery; no fencing token. The write's transaction first calls
`hold_for_update`, a `SELECT ... FOR UPDATE` on a pool connection of its own,
given back at once, as the published source does. Release (not described)
expires the caller's own row."""

import asyncpg

from leaseproof import client as lp

DDL = """CREATE TABLE IF NOT EXISTS symfonic_leases (scope_path text PRIMARY KEY, owner text NOT NULL,
    acquired_at timestamptz NOT NULL, expires_at timestamptz NOT NULL)"""
ACQUIRE = """INSERT INTO symfonic_leases AS l VALUES ($1, $2, now(), now() + $3 * interval '1 ms')
ON CONFLICT (scope_path) DO UPDATE SET owner = EXCLUDED.owner, acquired_at = EXCLUDED.acquired_at,
    expires_at = EXCLUDED.expires_at WHERE l.expires_at <= now() RETURNING owner"""
HOLD_FOR_UPDATE = """SELECT 1 FROM symfonic_leases
WHERE scope_path = $1 AND owner = $2 AND expires_at > now() FOR UPDATE"""
RELEASE = """UPDATE symfonic_leases SET expires_at = now()
WHERE scope_path = $1 AND owner = $2 AND expires_at > now() RETURNING owner"""


class Symfonic:
    def __init__(self):
        self._pool = None

    async def pool(self):
        if self._pool is None:
            self._pool = await asyncpg.create_pool(lp.DATABASE_URL, min_size=1, max_size=4)
            for attempt in (1, 2):  # ensure_schema: concurrent creation collides on pg_type
                try:
                    await self._pool.execute(DDL)
                    break
                except asyncpg.PostgresError:
                    if attempt == 2:
                        raise
        return self._pool

    async def acquire(self, request):
        if await (await self.pool()).fetchval(ACQUIRE, request["table"], request["owner"], request["ttl_ms"]) is None:
            raise lp.Held("the lease is held")
        return {"lifetime_ms": request["ttl_ms"]}

    async def write(self, request):
        pool = await self.pool()
        async with pool.acquire() as connection, connection.transaction():
            # hold_for_update: on a pool connection of its own, given back at once.
            if await pool.fetchval(HOLD_FOR_UPDATE, request["table"], request["owner"]) is None:
                raise lp.Stale("hold_for_update: the lease is not ours")
            await connection.executemany(lp.insert_rows_sql(), lp.rows_of(request))

    async def release(self, request):
        if await (await self.pool()).fetchval(RELEASE, request["table"], request["owner"]) is None:
            raise lp.Stale("the lease had expired")


if __name__ == "__main__":
    lp.main(Symfonic(), name="symfonic PostgresLeases (reproduction)")
