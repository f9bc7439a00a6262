"""pg_partsmith 1.10.0's RedisDistributedLockManager, as it ships, behind
leaseproof's client protocol.

The lock is pg_partsmith's own (`SET key token EX ttl NX`, a watchdog that
renews every ttl//3 and cancels the holder when renewal fails, release by
compare-and-delete). The maintenance writes its rows through a connection
of its own to PostgreSQL, inside the task that holds the lock, as
pg_partsmith's maintenance runs.
"""

import math

import asyncpg
import redis.asyncio as aioredis
from pg_partsmith.aio.lock import RedisDistributedLockManager
from pg_partsmith.exceptions import LockAcquisitionError, LockLostError

from leaseproof import client as lp


class PartsmithRedis(lp.ContextLock):
    def __init__(self):
        super().__init__()
        self._redis = aioredis.from_url(lp.REDIS_URL)
        self._manager = None
        self._ttl_seconds = None
        self._connection = None

    def manager(self, ttl_ms):
        if self._manager is None:
            # pg_partsmith takes whole seconds, at least 3.
            self._ttl_seconds = max(3, math.ceil(ttl_ms / 1000))
            self._manager = RedisDistributedLockManager(self._redis, ttl_seconds=self._ttl_seconds)
        return self._manager

    async def acquire(self, request):
        manager = self.manager(request["ttl_ms"])
        await self.hold(
            request["table"],
            lambda: manager.acquire_lock(request["table"]),
            held_errors=(LockAcquisitionError,),
            lost_errors=(LockLostError,),
        )
        # The key lives its TTL from the SET (longer if the watchdog renews).
        return {"lifetime_ms": self._ttl_seconds * 1000}

    async def write(self, request):
        async def work():
            if self._connection is None or self._connection.is_closed():
                self._connection = await asyncpg.connect(lp.DATABASE_URL)
            await lp.write_rows(self._connection, request)
        await self.run_held(request["table"], work)

    async def is_locked(self, request):
        return {"locked": await self.manager(3000).is_locked(request["table"])}


if __name__ == "__main__":
    lp.main(PartsmithRedis(), name="pg_partsmith 1.10.0 RedisDistributedLockManager")
