"""The client side of leaseproof's client protocol (leaseproof-client/1).

A lock client is a program leaseproof starts once per incarnation; it reads
one JSON request per line on stdin and prints one JSON answer per line on
stdout (docs/client-protocol.md). This module does the talking, so a client
is its lock calls and little else:

    import leaseproof_client as lp

    class MyLock:
        async def acquire(self, request): ...   # raise lp.Held if taken
        async def write(self, request): ...     # lp.write_rows(...) under the lock
        async def release(self, request): ...
        async def is_locked(self, request): ...  # return {"locked": bool}

    lp.main(MyLock(), name="my lock")

A handler returns a dict of answer fields (or None) for `ok`; raises `Held`,
`Stale` or `Failed` for a definite failure; anything else it raises is
answered `unknown` (it may or may not have taken effect). `notify_lost`
tells leaseproof that the lock told its holder the lock is gone.
Standard library only.
"""

import asyncio
import json
import os
import sys
import traceback

PROTOCOL = "leaseproof-client/1"

# The environment leaseproof gives every client.
DATABASE_URL = os.environ.get("LEASEPROOF_DATABASE_URL", "")
REDIS_URL = os.environ.get("LEASEPROOF_REDIS_URL", "")
ROWS_TABLE = os.environ.get("LEASEPROOF_ROWS_TABLE", "leaseproof_client_rows")
WORKER = os.environ.get("LEASEPROOF_WORKER", "w0")


class Held(Exception):
    """Acquire: another holder has the lock."""


class Stale(Exception):
    """Renew, write or release: the lock is no longer ours."""


class Failed(Exception):
    """Certainly did not take effect, for another reason."""


def _send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def notify_lost(table, text=None):
    """The lock told us it is lost (a belief end)."""
    _send({"type": "lost", "table": table, "text": text})


def insert_rows_sql():
    """The maintenance insert: one row per item, in one transaction."""
    return (
        f"INSERT INTO {ROWS_TABLE} (scope, owner, token, cycle_id, item) "
        "VALUES ($1, $2, $3, $4, $5)"
    )


def rows_of(request):
    """The rows a write request asks for, as insert_rows_sql's arguments."""
    return [
        (request["table"], request["owner"], request.get("token"), request["cycle_id"], item)
        for item in range(request["items"])
    ]


async def write_rows(connection, request):
    """Inserts a write request's rows on an asyncpg connection, in one transaction."""
    async with connection.transaction():
        await connection.executemany(insert_rows_sql(), rows_of(request))


async def _serve(lock, hello):
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    _send(hello)
    while True:
        line = await reader.readline()
        if not line:
            return  # stdin closed: leaseproof is done with us
        request = json.loads(line)
        msg_id = request["msg_id"]
        handler = getattr(lock, request["type"], None)
        if handler is None:
            _send({"type": "fail", "in_reply_to": msg_id, "reason": "error",
                   "text": f"{request['type']} is not supported"})
            continue
        try:
            fields = await handler(request) or {}
            _send({"type": "ok", "in_reply_to": msg_id, **fields})
        except Held as error:
            _send({"type": "fail", "in_reply_to": msg_id, "reason": "held", "text": str(error)})
        except Stale as error:
            _send({"type": "fail", "in_reply_to": msg_id, "reason": "stale", "text": str(error)})
        except Failed as error:
            _send({"type": "fail", "in_reply_to": msg_id, "reason": "error", "text": str(error)})
        except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001 - any other outcome is unknown
            traceback.print_exc(file=sys.stderr)
            _send({"type": "unknown", "in_reply_to": msg_id,
                   "text": f"{type(error).__name__}: {error}"[:300]})


def main(lock, name, renew=False, grant_stamps=None):
    """Runs the protocol loop for `lock` until stdin closes."""
    hello = {"type": "hello", "protocol": PROTOCOL, "name": name, "renew": renew}
    if grant_stamps is not None:
        hello["grant_stamps"] = grant_stamps
    asyncio.run(_serve(lock, hello))


class HeldContext:
    """Holds a lock that is an async context manager (`async with lock(table)`)
    in a task of its own, and runs the work inside that task — as the lock's
    user does, so a lock that cancels its holder on loss cancels the work.

    `lost_errors`: exceptions by which the context tells its holder the lock
    is gone (they become a `lost` notice); `held_errors`: exceptions by which
    entering tells that another holds the lock.
    """

    def __init__(self, table, make_context, held_errors=(), lost_errors=()):
        self.table = table
        self._make_context = make_context
        self._held_errors = held_errors
        self._lost_errors = lost_errors
        self._inbox = asyncio.Queue()
        self._task = None

    async def enter(self):
        entered = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(entered))
        await entered

    async def _hold(self, entered):
        job_future = None
        notified = False
        try:
            async with self._make_context():
                entered.set_result(None)
                try:
                    while True:
                        job, job_future = await self._inbox.get()
                        if job is None:
                            job_future.set_result(None)
                            job_future = None
                            return  # leaving the context releases the lock
                        # A failed write is answered, and the lock stays held:
                        # an exception leaving the context would release the
                        # lock before leaseproof heard of it, and a rival
                        # taking it in that moment would look like two holders.
                        try:
                            result = await job()
                        except Exception as error:  # noqa: BLE001 - handed to the request
                            job_future.set_exception(error)
                        else:
                            job_future.set_result(result)
                        job_future = None
                except asyncio.CancelledError:
                    # The lock cancels its holder when it is lost (pg_partsmith's
                    # watchdog): say so now, while the work has stopped and
                    # before the context's exit releases anything.
                    notify_lost(self.table, "the holder was cancelled by its lock")
                    notified = True
                    raise
        except self._held_errors as error:
            if not entered.done():
                entered.set_exception(Held(str(error)))
        except self._lost_errors as error:
            if not notified:
                notify_lost(self.table, f"{type(error).__name__}: {error}")
            if job_future is not None and not job_future.done():
                job_future.set_exception(error)
        except BaseException as error:  # noqa: BLE001 - handed to whoever waits
            if not entered.done():
                entered.set_exception(error)
            else:
                # The context ended without being asked to: the lock is gone.
                if not notified:
                    notify_lost(self.table, f"the lock's context ended: {type(error).__name__}: {error}")
                if job_future is not None and not job_future.done():
                    job_future.set_exception(error)
            if isinstance(error, asyncio.CancelledError):
                raise

    async def run(self, job):
        """Runs `job` (an async callable) inside the held context."""
        if self._task is None or self._task.done():
            raise Stale("the lock is not held any more")
        future = asyncio.get_running_loop().create_future()
        await self._inbox.put((job, future))
        return await future

    async def exit(self):
        """Leaves the context (releases the lock) and waits for it."""
        if self._task is None or self._task.done():
            raise Stale("the lock is not held any more")
        future = asyncio.get_running_loop().create_future()
        await self._inbox.put((None, future))
        await future
        await self._task


class ContextLock:
    """A base for locks that are `async with` contexts: keeps one
    `HeldContext` per table, runs writes inside it, and answers `release` by
    leaving it."""

    def __init__(self):
        self._held = {}

    async def hold(self, table, make_context, held_errors=(), lost_errors=()):
        """Enters the context for `table` (raises `Held` if another holds it)."""
        held = HeldContext(table, make_context, held_errors, lost_errors)
        await held.enter()
        self._held[table] = held

    async def run_held(self, table, job):
        """Runs `job` inside the context held for `table`."""
        held = self._held.get(table)
        if held is None:
            raise Stale("not holding the lock")
        return await held.run(job)

    async def release(self, request):
        held = self._held.pop(request["table"], None)
        if held is None:
            raise Stale("not holding the lock")
        await held.exit()
