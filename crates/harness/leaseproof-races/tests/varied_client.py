"""varied_client: correct lock clients, varied by a seed, for `leaseproof clients`.

`leaseproof clients` promises to judge a lock written outside the project
soundly: a correct one is never convicted, whatever legal shape its answers
take, under every fault. This program is many correct clients in one: a
PostgreSQL lease with a fencing token whose maintenance write fences itself
with a row lock on the lease in the write's own transaction (correct under
pauses, kills, partitions, lost replies, restarts and skewed client clocks,
because every time comparison is the server's). What the seed in
`VARIED_SEED` varies is everything the protocol leaves to the client:

* the grant's form: a lease (token, `granted_at_us`, `expires_at_us` on the
  server's clock) or a lock (a token or none, and a `lifetime_ms` no longer
  than the TTL asked);
* whether it answers `renew` (and whether a renewal reports its grant's start
  or its own time), which row lock the fence takes (`FOR UPDATE`, `FOR NO KEY
  UPDATE`, `FOR SHARE`), a fence as its own statement or inside the insert,
  work done while the fence holds the row, `committed_at_us` reported or not,
  `released_at_us` reported or not, and the `grant_stamps` its hello
  declares: none, `statement-start`, or `decision` — true of this lease,
  whose statements decide with the very `now()` they stamp, so the checker
  may judge its server times as they stand;
* answers delayed after the effect, `unknown` answered for operations that
  took effect (or certainly did not), `lost` notices sent when a write finds
  the lease gone or for no reason at all, a release of an expired lease
  answered `ok` or `fail`.

`VARIED_FORM=session` makes it a session lock instead (pg_try_advisory_lock
on the process's one connection, the rows written on that same session, no
token, no lifetime; its release answers `ok` only when `pg_advisory_unlock`
on that session says it held): correct under every fault, those that end a
session behind a stopped holder's back included — a write through a dead
session cannot land.

`VARIED_PLANT` names one bug to plant instead (each breaks an invariant the
checker documents, under the fault named):

* `fence-outside` — the fence runs in a transaction of its own, then the
  rows in another (I3, holder paused between the two);
* `client-clock` — acquisition compares expiry with the client's clock, not
  the server's (I1, a skewed client);
* `fence-ignores-expiry` — the fence checks owner and token, not expiry, and
  reports its time as `committed_at_us` (I3 when its commit lands after its
  expiry with nobody having taken over — rarely: rivals take over within a
  retry interval, and the token check then refuses the stale write);
* `overpromise` — a lock form promising twice the TTL (I1, a pause);
* `ok-for-refused` — a write the fence refused is answered `ok` (I4);
* `release-any` — release expires the lease whoever holds it (I1: proven
  under declared decision stamps, possible under statement-start ones).

Run it with the virtualenv `ci/install-python-clients.sh` makes (asyncpg):

    leaseproof clients --client 'VARIED_SEED=7 target/leaseproof-clients-venv/bin/python3 crates/harness/leaseproof-races/tests/varied_client.py' --seeds 0..5

`VARIED_WORK_INSIDE_MS` and `VARIED_GRANT_STAMPS` pin those knobs of the
drawn design. `VARIED_SEED` fixes the design for every process of a run; what each
process does at random (which answers it delays, which it calls unknown)
is drawn from the seed, its worker and its incarnation.
"""

import asyncio
import os
import random
import sys
import time

import asyncpg

sys.path.insert(
    0,
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../python/src"),
)
from leaseproof import client as lp  # noqa: E402 - found through the path above

PLANTS = (
    "fence-outside",
    "client-clock",
    "fence-ignores-expiry",
    "overpromise",
    "ok-for-refused",
    "release-any",
)

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS varied_leases (
        scope text PRIMARY KEY,
        owner text NOT NULL,
        token bigint NOT NULL,
        granted_at timestamptz NOT NULL,
        expires_at timestamptz NOT NULL)""",
    "CREATE SEQUENCE IF NOT EXISTS varied_tokens",
)

# One statement decides, on the server's clock; a held lease costs no write
# beyond the conflict check. `nextval` is drawn even when the lease is held:
# tokens have gaps, never repeats.
ACQUIRE = """
INSERT INTO varied_leases AS l (scope, owner, token, granted_at, expires_at)
VALUES ($1, $2, nextval('varied_tokens'), now(), now() + $3 * interval '1 millisecond')
ON CONFLICT (scope) DO UPDATE
SET owner = EXCLUDED.owner, token = EXCLUDED.token,
    granted_at = EXCLUDED.granted_at, expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= now()
RETURNING token, granted_at, expires_at, now() AS decided_at"""

# The planted `client-clock` bug: the client's clock decides expiry.
ACQUIRE_ON_CLIENT_CLOCK = ACQUIRE.replace(
    "WHERE l.expires_at <= now()", "WHERE l.expires_at <= to_timestamp($4)"
)

RENEW = """
UPDATE varied_leases
SET expires_at = greatest(expires_at, now() + $4 * interval '1 millisecond')
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()
RETURNING token, granted_at, expires_at, now() AS decided_at"""

RELEASE = """
UPDATE varied_leases SET expires_at = now()
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()
RETURNING now() AS released_at"""

RELEASE_ANY = """
UPDATE varied_leases SET expires_at = now()
WHERE scope = $1 AND expires_at > now()
RETURNING now() AS released_at"""

# The session lock: one advisory lock per scope, held by the connection.
SESSION_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended('varied:' || $1, 0))"
SESSION_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('varied:' || $1, 0))"
SESSION_IS_LOCKED = """
SELECT EXISTS (SELECT 1 FROM pg_locks
               WHERE locktype = 'advisory' AND granted
                 AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('varied:' || $1, 0))"""

IS_LOCKED = "SELECT EXISTS (SELECT 1 FROM varied_leases WHERE scope = $1 AND expires_at > now())"

FENCE = """
SELECT now() AS fenced_at FROM varied_leases
WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()
{lock}"""

FENCE_IGNORING_EXPIRY = """
SELECT now() AS fenced_at FROM varied_leases
WHERE scope = $1 AND owner = $2 AND token = $3
{lock}"""

# The fence inside the insert: rows go in only while the lease is ours.
FENCED_INSERT = """
INSERT INTO {rows} (scope, owner, token, cycle_id, item)
SELECT $1, $2, $5::bigint, $4, item
FROM (SELECT 1 FROM varied_leases
      WHERE scope = $1 AND owner = $2 AND token = $3 AND expires_at > now()
      {lock}) AS fence,
     generate_series(0, $6 - 1) AS item"""


def epoch_microseconds(timestamp):
    """A timestamptz as µs since the epoch."""
    return int(timestamp.timestamp() * 1_000_000)


class Design:
    """What the seed fixed for every process of the run."""

    def __init__(self, seed, plant, form=None):
        draw = random.Random(seed)
        self.plant = plant
        self.form = draw.choice(["lease", "lease", "lock"])
        if form is not None:
            self.form = form
        self.lock_token = self.form == "lease" or draw.random() < 0.7
        self.lifetime_share = 1.0 if draw.random() < 0.5 else draw.uniform(0.5, 1.0)
        self.renew = draw.random() < 0.5
        self.renewal_reports_own_time = draw.random() < 0.5
        self.fence_lock = draw.choice(["FOR UPDATE", "FOR NO KEY UPDATE", "FOR SHARE"])
        self.fence_in_insert = draw.random() < 0.3
        # Work inside the fenced transaction; the longest outlives a 1.5-s
        # lease, and rivals must queue behind the fence's row lock.
        self.work_inside_ms = draw.choice([0, 0, 50, 200, 1800])
        self.report_committed_at = draw.random() < 0.5
        self.report_released_at = draw.random() < 0.7
        self.expired_release_ok = draw.random() < 0.5
        self.answer_delay_chance = draw.choice([0.0, 0.2])
        self.answer_delay_ms_max = draw.choice([50, 400])
        self.spurious_unknown_chance = draw.choice([0.0, 0.0, 0.03])
        self.lost_on_stale = draw.random() < 0.5
        self.spurious_lost_chance = draw.choice([0.0, 0.0, 0.05])
        # Drawn last: the draws above keep the designs they gave before.
        self.grant_stamps = draw.choice([None, "statement-start", "decision"])
        if self.form == "session":
            self.lock_token = False
            self.renew = False
        if plant in ("fence-outside", "fence-ignores-expiry"):
            self.form = "lease"
            self.lock_token = True
            self.fence_in_insert = False
            # A wide window between the fence and the rows, so a pause lands in it.
            self.work_inside_ms = 600
        if plant == "fence-ignores-expiry":
            self.report_committed_at = True
            self.renew = False
        if plant == "client-clock":
            # Statement-start stamps (the default): the early takeovers are
            # then overlaps nothing proves, reported as possible.
            self.grant_stamps = None
        if plant == "overpromise":
            self.form = "lock"
            self.renew = False
        if plant == "ok-for-refused":
            self.renew = False
        # Last, once the plant has fixed the form.
        if self.form != "lease":
            self.grant_stamps = None  # a lock's grants carry no server times

    def describe(self):
        return ", ".join(f"{key}={value}" for key, value in sorted(vars(self).items()))


class VariedLease:
    """A correct PostgreSQL lease answering the protocol in the design's shapes."""

    def __init__(self, design, draw):
        self.design = design
        self.draw = draw
        self.lock_connection = None
        self.write_connection = None
        self.held = {}  # table -> token this process was granted
        self.schema_ready = False

    async def connection(self, which):
        current = getattr(self, which)
        if current is None or current.is_closed():
            try:
                current = await asyncpg.connect(lp.DATABASE_URL, timeout=10)
            except Exception as error:  # noqa: BLE001 - nothing was sent: a certain failure
                raise lp.Failed(f"connect: {error}") from error
            setattr(self, which, current)
        return current

    async def ensure_schema(self, connection):
        # Processes start together: concurrent `IF NOT EXISTS` collides on
        # pg_type; the retry finds what the other created.
        if self.schema_ready:
            return
        for attempt in range(5):
            try:
                for statement in SCHEMA:
                    await connection.execute(statement)
                self.schema_ready = True
                return
            except asyncpg.PostgresError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.05)

    async def answer(self, fields, took_effect=True):
        """Delays and disguises an answer the way the design allows."""
        design = self.design
        if self.draw.random() < design.answer_delay_chance:
            await asyncio.sleep(self.draw.uniform(0, design.answer_delay_ms_max) / 1000)
        if self.draw.random() < design.spurious_unknown_chance:
            raise RuntimeError(
                "answered unknown on purpose (the effect " + ("happened)" if took_effect else "did not happen)")
            )
        return fields

    def grant_fields(self, request, row, renewal=False):
        design = self.design
        ttl_ms = request["ttl_ms"]
        if design.form == "lease":
            granted_at = row["decided_at"] if renewal and design.renewal_reports_own_time else row["granted_at"]
            return {
                "token": row["token"],
                "granted_at_us": epoch_microseconds(granted_at),
                "expires_at_us": epoch_microseconds(row["expires_at"]),
            }
        fields = {}
        if design.lock_token:
            fields["token"] = row["token"]
        share = 2.0 if design.plant == "overpromise" else design.lifetime_share
        fields["lifetime_ms"] = max(1, int(ttl_ms * share))
        return fields

    async def acquire(self, request):
        connection = await self.connection("lock_connection")
        if self.design.form == "session":
            if not await connection.fetchval(SESSION_TRY_LOCK, request["table"]):
                raise lp.Held("the advisory lock is held")
            self.held[request["table"]] = None
            return await self.answer({})
        await self.ensure_schema(connection)
        if self.design.plant == "client-clock":
            row = await connection.fetchrow(
                ACQUIRE_ON_CLIENT_CLOCK, request["table"], request["owner"], request["ttl_ms"], time.time()
            )
        else:
            row = await connection.fetchrow(ACQUIRE, request["table"], request["owner"], request["ttl_ms"])
        if row is None:
            raise lp.Held("the lease is held")
        self.held[request["table"]] = row["token"]
        return await self.answer(self.grant_fields(request, row))

    async def renew(self, request):
        token = self.held.get(request["table"])
        if token is None:
            raise lp.Stale("not holding it")
        connection = await self.connection("lock_connection")
        row = await connection.fetchrow(RENEW, request["table"], request["owner"], token, request["ttl_ms"])
        if row is None:
            await self.maybe_lost(request["table"], "renewal found the lease gone")
            raise lp.Stale("the lease is gone")
        return await self.answer(self.grant_fields(request, row, renewal=True))

    async def maybe_lost(self, table, text):
        if self.design.lost_on_stale:
            lp.notify_lost(table, text)

    async def write(self, request):
        design = self.design
        table = request["table"]
        if table not in self.held:
            raise lp.Stale("not holding it")
        token = self.held[table]
        if self.draw.random() < design.spurious_lost_chance:
            lp.notify_lost(table, "a belief ended early, for no reason")
        if design.form == "session":
            # The rows go through the session that holds the lock: if it is
            # gone, so is the write. A closed connection sent nothing.
            if self.lock_connection is None or self.lock_connection.is_closed():
                raise lp.Stale("the lock's session is gone")
            await lp.write_rows(self.lock_connection, request)
            await asyncio.sleep(design.work_inside_ms / 1000)
            return await self.answer({})
        connection = await self.connection("write_connection")
        row_token = request.get("token")
        fenced_at = await self.fenced_write(connection, request, token, row_token)
        if fenced_at is None:
            if design.plant == "ok-for-refused":
                return {}
            await self.maybe_lost(table, "the fence found the lease gone")
            raise lp.Stale("the fence found the lease gone")
        fields = {}
        if design.form == "lease" and design.report_committed_at:
            fields["committed_at_us"] = epoch_microseconds(fenced_at)
        return await self.answer(fields)

    async def fenced_write(self, connection, request, token, row_token):
        """The rows under the fence; the fence's time, or None when refused."""
        design = self.design
        table, owner = request["table"], request["owner"]
        if design.plant == "fence-outside":
            fenced_at = await connection.fetchval(FENCE.format(lock=""), table, owner, token)
            if fenced_at is None:
                return None
            await asyncio.sleep(design.work_inside_ms / 1000)
            await lp.write_rows(connection, request)
            return fenced_at
        fence = FENCE_IGNORING_EXPIRY if design.plant == "fence-ignores-expiry" else FENCE
        async with connection.transaction():
            if design.fence_in_insert:
                fenced_at = await connection.fetchval("SELECT now()")
                inserted = await connection.execute(
                    FENCED_INSERT.format(rows=lp.ROWS_TABLE, lock=design.fence_lock),
                    table, owner, token, request["cycle_id"], row_token, request["items"],
                )
                if inserted != f"INSERT 0 {request['items']}":
                    return None
                await asyncio.sleep(design.work_inside_ms / 1000)
                return fenced_at
            fenced_at = await connection.fetchval(fence.format(lock=design.fence_lock), table, owner, token)
            if fenced_at is None:
                return None
            await asyncio.sleep(design.work_inside_ms / 1000)
            await connection.executemany(lp.insert_rows_sql(), lp.rows_of(request))
            return fenced_at

    async def release(self, request):
        design = self.design
        table = request["table"]
        if table not in self.held:
            raise lp.Stale("not holding it")
        token = self.held.pop(table)
        if design.form == "session":
            if self.lock_connection is None or self.lock_connection.is_closed():
                raise lp.Stale("the lock's session is gone")
            if not await self.lock_connection.fetchval(SESSION_UNLOCK, table):
                raise lp.Stale("the advisory lock was not held")
            return await self.answer({})
        connection = await self.connection("lock_connection")
        if design.plant == "release-any":
            released_at = await connection.fetchval(RELEASE_ANY, table)
        else:
            released_at = await connection.fetchval(RELEASE, table, request["owner"], token)
        if released_at is None:
            if not design.expired_release_ok:
                raise lp.Stale("the lease had expired")
            return await self.answer({}, took_effect=False)
        fields = {}
        if design.form == "lease" and design.report_released_at:
            fields["released_at_us"] = epoch_microseconds(released_at)
        return await self.answer(fields)

    async def is_locked(self, request):
        connection = await self.connection("lock_connection")
        if self.design.form == "session":
            return {"locked": await connection.fetchval(SESSION_IS_LOCKED, request["table"])}
        return {"locked": await connection.fetchval(IS_LOCKED, request["table"])}


def main():
    seed = int(os.environ.get("VARIED_SEED", "0"))
    plant = os.environ.get("VARIED_PLANT") or None
    if plant is not None and plant not in PLANTS:
        sys.exit(f"VARIED_PLANT={plant}: not one of {', '.join(PLANTS)}")
    form = os.environ.get("VARIED_FORM") or None
    if form not in (None, "session"):
        sys.exit(f"VARIED_FORM={form}: only `session` (or unset)")
    design = Design(seed, plant, form)
    # Overrides, to pin one knob of a drawn design.
    if os.environ.get("VARIED_WORK_INSIDE_MS"):
        design.work_inside_ms = int(os.environ["VARIED_WORK_INSIDE_MS"])
    if os.environ.get("VARIED_GRANT_STAMPS"):
        design.grant_stamps = os.environ["VARIED_GRANT_STAMPS"]
    worker = os.environ.get("LEASEPROOF_WORKER", "w0")
    incarnation = os.environ.get("LEASEPROOF_INCARNATION", "0")
    print(f"varied client: seed {seed}: {design.describe()}", file=sys.stderr)
    draw = random.Random(f"{seed}/{worker}/{incarnation}")
    name = f"varied {design.form} {seed}" + (f" planted {plant}" if plant else "")
    lp.main(VariedLease(design, draw), name=name, renew=design.renew, grant_stamps=design.grant_stamps)


if __name__ == "__main__":
    main()
