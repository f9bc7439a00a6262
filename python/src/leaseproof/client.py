"""The client side of leaseproof's client protocol (leaseproof-client/1).

A lock client is a program leaseproof starts once per incarnation; it reads
one JSON request per line on stdin and prints one JSON answer per line on
stdout (docs/client-protocol.md). This module does the talking, so a client
is its lock calls and little else:

    from leaseproof import client as lp

    class MyLock:
        async def acquire(self, request): ...   # raise lp.Held if taken
        async def write(self, request): ...     # lp.write_rows(...) under the lock
        async def release(self, request): ...
        async def is_locked(self, request): ...  # return {"locked": bool}

    lp.main(MyLock(), name="my lock")

Handlers may be coroutines (served on an asyncio loop) or plain functions
(served by a plain loop, for a blocking driver such as psycopg or redis-py's
synchronous client); one lock uses one kind. A handler returns a dict of
answer fields (or None) for `ok`; raises `Held`, `Stale` or `Failed` for a
definite failure; anything else it raises is answered `unknown` (it may or
may not have taken effect — leaseproof then restarts the process as a new
incarnation, so a handler never has to recover from one). `notify_lost`
tells leaseproof that the lock told its holder the lock is gone.
`own_timeout_s(ttl_ms)` is the longest a client's own timeout (statement,
socket) may be and still turn a lost reply into `unknown` rather than a hang.
Turn off the retries a driver makes by itself (redis-py's `Redis(host=...)`
retries 10 times by default: pass `retry=Retry(NoBackoff(), 0)`): a retried
`SET NX` whose first reply was lost finds its own key and is answered
`held` for a grant that took effect.
Standard library only.
"""

import asyncio
import inspect
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
INCARNATION = int(os.environ.get("LEASEPROOF_INCARNATION", "0"))

# Requests one process may get; a handler for another name is never called.
REQUESTS = ("acquire", "renew", "write", "release", "is_locked")


class Held(Exception):
    """Acquire: another holder has the lock."""


class Stale(Exception):
    """Renew, write or release: the lock is no longer ours."""


class Failed(Exception):
    """Certainly did not take effect, for another reason."""


def own_timeout_s(ttl_ms):
    """The longest timeout of the client's own (statement, socket, pool) in
    seconds: leaseproof calls a request left unanswered for 4 x TTL + 5 s a
    hang, and under `clock-skew` a process's clocks may run at a quarter of
    real speed, so a timeout must stay below a quarter of that."""
    return (4 * ttl_ms + 5_000) / 4 / 1_000 * 0.9


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


def rows_as_dicts(request):
    """The rows a write request asks for, as named parameters (`:scope`,
    `:owner`, `:token`, `:cycle_id`, `:item`: SQLAlchemy's `text()`)."""
    names = ("scope", "owner", "token", "cycle_id", "item")
    return [dict(zip(names, row)) for row in rows_of(request)]


async def write_rows(connection, request):
    """Inserts a write request's rows on an asyncpg connection, in one transaction."""
    async with connection.transaction():
        await connection.executemany(insert_rows_sql(), rows_of(request))


async def create_once(connection, ddl):
    """Runs a `CREATE ... IF NOT EXISTS` on an asyncpg connection. Clients
    start together, and two sessions may both pass the existence check: the
    loser fails on `pg_type`'s unique index (SQLSTATE 23505), and the table
    is there all the same."""
    try:
        await connection.execute(ddl)
    except Exception as error:  # noqa: BLE001 - only a concurrent creation is forgiven
        if getattr(error, "sqlstate", None) != "23505":
            raise


def micros(moment):
    """A `datetime` (a `timestamptz`) as µs since the epoch, as
    `granted_at_us`, `expires_at_us` and `released_at_us` are given."""
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def _handler(lock, request):
    """The lock's method for a request; None, after refusing the request,
    when the lock has none."""
    kind = request["type"]
    handler = getattr(lock, kind, None) if kind in REQUESTS else None
    if handler is None:
        _send({"type": "fail", "in_reply_to": request["msg_id"], "reason": "error",
               "text": f"{kind} is not supported"})
    return handler


def _answer(msg_id, outcome):
    """The answer to a request whose handler returned `outcome` (its fields)
    or raised it (an exception)."""
    if not isinstance(outcome, BaseException):
        return {"type": "ok", "in_reply_to": msg_id, **(outcome or {})}
    for error_type, reason in ((Held, "held"), (Stale, "stale"), (Failed, "error")):
        if isinstance(outcome, error_type):
            return {"type": "fail", "in_reply_to": msg_id, "reason": reason, "text": str(outcome)}
    # Any other outcome is unknown: the lock may or may not have acted.
    traceback.print_exception(type(outcome), outcome, outcome.__traceback__, file=sys.stderr)
    return {"type": "unknown", "in_reply_to": msg_id,
            "text": f"{type(outcome).__name__}: {outcome}"[:300]}


async def _serve_async(lock, hello):
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    _send(hello)
    while True:
        line = await reader.readline()
        if not line:
            return  # stdin closed: leaseproof is done with us
        request = json.loads(line)
        handler = _handler(lock, request)
        if handler is None:
            continue
        try:
            outcome = await handler(request)
        except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001 - judged by _answer
            outcome = error
        _send(_answer(request["msg_id"], outcome))


def _serve_plain(lock, hello):
    _send(hello)
    for line in sys.stdin:
        request = json.loads(line)
        if (handler := _handler(lock, request)) is None:
            continue
        try:
            outcome = handler(request)
        except Exception as error:  # noqa: BLE001 - judged by _answer
            outcome = error
        _send(_answer(request["msg_id"], outcome))


def _is_async(lock):
    """Whether the lock's handlers are coroutines (all of them, or none)."""
    kinds = {inspect.iscoroutinefunction(getattr(lock, kind))
             for kind in REQUESTS if callable(getattr(lock, kind, None))}
    if len(kinds) > 1:
        raise TypeError("a lock's handlers are all coroutines or all plain functions")
    return kinds == {True}


def main(lock, name, renew=False, grant_stamps=None):
    """Says hello and answers requests for `lock` until stdin closes.

    `renew`: the lock answers `renew` requests. `grant_stamps`: for a lease
    reporting server times, `"decision"` or `"statement-start"`."""
    hello = {"type": "hello", "protocol": PROTOCOL, "name": name, "renew": renew}
    if grant_stamps is not None:
        hello["grant_stamps"] = grant_stamps
    if _is_async(lock):
        asyncio.run(_serve_async(lock, hello))
    else:
        _serve_plain(lock, hello)


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
