"""A reproduction of symfonic's PostgresLeases (symfonic.memory.backends.
postgres_leases), written from its published description — the package is
not published, so this is a reproduction, not the shipped code.

As described:
- one table, one row per scope; `ensure_schema` runs `CREATE TABLE IF NOT
  EXISTS` and retries once (concurrent creation collides on pg_type);
- acquisition is ONE statement, `INSERT ... ON CONFLICT DO UPDATE ... WHERE
  expires_at <= now() RETURNING ...`, on the database's clock;
- expiry is the crash recovery;
- `hold_for_update(lease)` runs `SELECT ... FOR UPDATE` matching scope and
  owner — on a connection it acquires from the pool and releases at once, as
  the published source does.
The description names no fencing token and no release; this reproduction
has none of the former, and releases by expiring its own row (matching
owner). The maintenance write runs in a transaction that first calls
`hold_for_update`, as symfonic's commit cycle does.
"""

import asyncpg

import leaseproof_client as lp

LEASES_DDL = """
CREATE TABLE IF NOT EXISTS symfonic_leases (
    scope_path text PRIMARY KEY,
    owner text NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
)"""

ACQUIRE = """
INSERT INTO symfonic_leases AS l (scope_path, owner, acquired_at, expires_at)
VALUES ($1, $2, now(), now() + $3 * interval '1 millisecond')
ON CONFLICT (scope_path) DO UPDATE
SET owner = EXCLUDED.owner, acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= now()
RETURNING owner"""

HOLDS_FOR_UPDATE = """
SELECT 1 FROM symfonic_leases
WHERE scope_path = $1 AND owner = $2 AND expires_at > now()
FOR UPDATE"""

RELEASE = """
UPDATE symfonic_leases SET expires_at = now()
WHERE scope_path = $1 AND owner = $2 AND expires_at > now()
RETURNING owner"""

IS_LOCKED = "SELECT EXISTS (SELECT 1 FROM symfonic_leases WHERE scope_path = $1 AND expires_at > now())"


class PostgresLeases:
    """The port, over an asyncpg pool."""

    def __init__(self, pool):
        self._pool = pool

    async def ensure_schema(self):
        for attempt in (1, 2):
            conn = await self._pool.acquire()
            try:
                await conn.execute(LEASES_DDL)
                return
            except Exception:
                if attempt == 2:
                    raise
            finally:
                await self._pool.release(conn)

    async def acquire(self, scope_path, owner, ttl_ms):
        async with self._pool.acquire() as conn:
            return await conn.fetchval(ACQUIRE, scope_path, owner, ttl_ms) is not None

    async def hold_for_update(self, scope_path, owner):
        conn = await self._pool.acquire()
        try:
            row = await conn.fetchval(HOLDS_FOR_UPDATE, scope_path, owner)
        finally:
            await self._pool.release(conn)
        return row is not None

    async def release(self, scope_path, owner):
        async with self._pool.acquire() as conn:
            return await conn.fetchval(RELEASE, scope_path, owner) is not None

    async def is_locked(self, scope_path):
        async with self._pool.acquire() as conn:
            return await conn.fetchval(IS_LOCKED, scope_path)


class SymfonicClient:
    def __init__(self):
        self._leases = None

    async def leases(self):
        if self._leases is None:
            pool = await asyncpg.create_pool(lp.DATABASE_URL, min_size=1, max_size=4)
            leases = PostgresLeases(pool)
            await leases.ensure_schema()
            self._leases = leases
        return self._leases

    async def acquire(self, request):
        leases = await self.leases()
        if not await leases.acquire(request["table"], request["owner"], request["ttl_ms"]):
            raise lp.Held("the lease is held")
        return {"lifetime_ms": request["ttl_ms"]}

    async def write(self, request):
        leases = await self.leases()
        async with leases._pool.acquire() as conn:
            async with conn.transaction():
                if not await leases.hold_for_update(request["table"], request["owner"]):
                    raise lp.Stale("hold_for_update: the lease is not ours")
                await conn.executemany(lp.insert_rows_sql(), lp.rows_of(request))

    async def release(self, request):
        leases = await self.leases()
        if not await leases.release(request["table"], request["owner"]):
            raise lp.Stale("the lease had expired")

    async def is_locked(self, request):
        leases = await self.leases()
        return {"locked": await leases.is_locked(request["table"])}


if __name__ == "__main__":
    lp.main(SymfonicClient(), name="symfonic PostgresLeases (reproduction)")
