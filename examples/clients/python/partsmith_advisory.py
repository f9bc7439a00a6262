"""pg_partsmith 1.10.0's PostgresAdvisoryLockManager, as it ships, behind
leaseproof's client protocol.

The lock is pg_partsmith's own: `pg_try_advisory_lock` on a dedicated
AUTOCOMMIT connection from a SQLAlchemy async engine, held while the
`async with` body runs, no probe of that session meanwhile. The maintenance
writes its rows on another connection of the same engine, as pg_partsmith's
maintenance does.
"""

from pg_partsmith.aio.lock import PostgresAdvisoryLockManager
from pg_partsmith.exceptions import LockAcquisitionError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from leaseproof import client as lp

INSERT = (f"INSERT INTO {lp.ROWS_TABLE} (scope, owner, token, cycle_id, item) "
          "VALUES (:scope, :owner, :token, :cycle_id, :item)")


class PartsmithAdvisory(lp.ContextLock):
    def __init__(self):
        super().__init__()
        self._engine = create_async_engine("postgresql+asyncpg://" + lp.DATABASE_URL.split("://", 1)[1])
        self._manager = PostgresAdvisoryLockManager(self._engine)

    async def acquire(self, request):
        await self.hold(
            request["table"],
            lambda: self._manager.acquire_lock(request["table"]),
            held_errors=(LockAcquisitionError,),
        )
        return {}  # a session lock: no lifetime, no token

    async def write(self, request):
        async def work():
            async with self._engine.begin() as connection:
                await connection.execute(text(INSERT), lp.rows_as_dicts(request))

        await self.run_held(request["table"], work)

    async def is_locked(self, request):
        return {"locked": await self._manager.is_locked(request["table"])}


if __name__ == "__main__":
    lp.main(PartsmithAdvisory(), name="pg_partsmith 1.10.0 PostgresAdvisoryLockManager")
