"""A deliberately broken Redis lock: the harness must catch it.

`SET key owner NX PX ttl` to acquire — and then everything the safe designs
avoid: no keep-alive, no notice when the TTL runs out, maintenance written
whether or not the key is still ours, and release by a plain `DEL`, which
deletes a rival's key when ours had expired. A holder paused past the TTL
wakes up, writes over its successor's work and frees its successor's lock.
"""

import asyncpg
import redis.asyncio as aioredis

from leaseproof import client as lp


class PlainDel:
    def __init__(self):
        self._redis = aioredis.from_url(lp.REDIS_URL)
        self._connection = None

    @staticmethod
    def key(table):
        return f"broken:{table}"

    async def acquire(self, request):
        if not await self._redis.set(self.key(request["table"]), request["owner"], nx=True, px=request["ttl_ms"]):
            raise lp.Held("the key is set")
        return {"lifetime_ms": request["ttl_ms"]}

    async def write(self, request):
        if self._connection is None or self._connection.is_closed():
            self._connection = await asyncpg.connect(lp.DATABASE_URL)
        await lp.write_rows(self._connection, request)

    async def release(self, request):
        await self._redis.delete(self.key(request["table"]))

    async def is_locked(self, request):
        return {"locked": bool(await self._redis.exists(self.key(request["table"])))}


if __name__ == "__main__":
    lp.main(PlainDel(), name="broken: Redis lock released by plain DEL")
