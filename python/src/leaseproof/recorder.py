"""Record a history in leaseproof's format from a Python program.

`leaseproof check FILE` judges what this writes (docs/history-format.md).
Stamp every operation as it happens, on one clock common to all workers
(this module's monotonic clock, or pass your own): the invoke *before* you
send, the completion *after* the answer arrived. Then add the rows your
lock protected, read back after the run, with their commit times on the
store's clock where it can tell.

    from leaseproof.recorder import Recorder
    history = Recorder(design={"grant_stamps": "statement-start"})
    op = history.invoke("w1", history.acquire("job", "w1", ttl_us=2_000_000))
    ... take the lock ...
    history.ok("w1", op, history.lock(token=7, lifetime_us=2_000_000))
    history.save("run.jsonl")

Standard library only; thread-safe.
"""

import json
import threading
import time


class Recorder:
    """A history being recorded: events in the order they happened."""

    def __init__(self, design=None, clock_us=None):
        # `design`: what the design says about itself (grant_stamps,
        # unfenced_workers; for the model judge, stamp_rounding_us and
        # restamps); written as the file's first line.
        self._design = design
        # Nanoseconds rounded down to microseconds, completions too: rounding
        # one way never reverses two events (events of one microsecond share
        # a stamp, which proves no order), and a promise of whole
        # microseconds from a rounded invoke still ends no later than the
        # rounded moment it really ended. (A clock coarser than a microsecond
        # cannot keep a worker's order: give one of microseconds or finer.)
        self._clock_us = clock_us or (lambda: time.monotonic_ns() // 1_000)
        self._mutex = threading.Lock()
        self._events = []
        self._rows = []
        self._tables_read = []
        self._next_op_id = 0
        # What `check` refuses, refused here as it is recorded, where the
        # mistake can still be found: each open op's invoker, and each
        # worker's latest incarnation.
        self._open_ops = {}
        self._incarnations = {}
        # The token each (scope, owner) was granted with: a renewal or
        # release of that grant names it (0 is for locks without tokens).
        self._tokens = {}

    # -- events ---------------------------------------------------------

    def _event(self, worker, kind, incarnation, check=None):
        # Clock read and append under one lock: each worker's events stay in
        # time order even when threads record at once.
        with self._mutex:
            latest = self._incarnations.get(worker, incarnation)
            if incarnation < latest:
                raise ValueError(
                    f"worker {worker!r}: incarnation {incarnation} after {latest} "
                    "(a restarted process is a new, higher incarnation)"
                )
            if check is not None:
                check()
            self._incarnations[worker] = incarnation
            now = self._clock_us()
            self._events.append(
                {
                    "record": "event",
                    "index": len(self._events),
                    "worker": worker,
                    "incarnation": incarnation,
                    "true_time_us": now,
                    "local_time_us": now,
                    "kind": kind,
                }
            )

    def invoke(self, worker, op, incarnation=0):
        """Records that `worker` sent `op`; returns its op id."""
        with self._mutex:
            op_id = self._next_op_id
            self._next_op_id += 1

        def check():
            # Called under the lock.
            carried = self._tokens.get((op.get("scope"), op.get("owner")))
            if op.get("op") in ("renew", "release") and op.get("token") == 0 and carried:
                raise ValueError(
                    f"{op['op']} names token 0, but owner {op['owner']!r} was granted "
                    f"scope {op['scope']!r} with token {carried}: name the token it holds"
                )
            self._open_ops.setdefault(op_id, (worker, incarnation, op))

        self._event(worker, {"type": "invoke", "op_id": op_id, "op": op}, incarnation, check=check)
        return op_id

    def ok(self, worker, op_id, result, incarnation=0):
        """The operation took effect; `result` as the helpers below build it."""
        self._complete(worker, op_id, {"outcome": "ok", "result": result}, incarnation)

    def fail(self, worker, op_id, kind, detail=None, incarnation=0):
        """It certainly did not take effect: kind `held`, `stale` or `error`
        (an `error` says what failed in `detail`)."""
        if kind not in ("held", "stale", "error"):
            raise ValueError(f"fail kind {kind!r}: one of 'held', 'stale', 'error'")
        if kind == "error" and detail is None:
            raise ValueError("fail kind 'error' needs a detail: say what failed")
        reason = {"kind": kind}
        if detail is not None:
            reason["detail"] = detail
        self._complete(worker, op_id, {"outcome": "fail", "reason": reason}, incarnation)

    def unknown(self, worker, op_id, reason, incarnation=0):
        """The worker cannot tell (a timeout, a lost connection)."""
        self._complete(
            worker, op_id, {"outcome": "unknown", "reason": str(reason)}, incarnation
        )

    def _complete(self, worker, op_id, outcome, incarnation):
        def close():
            # Called under the lock: one completion per invoke, by its invoker.
            invoker = self._open_ops.get(op_id)
            if invoker is None:
                raise ValueError(f"op {op_id}: not invoked, or completed already")
            if invoker[:2] != (worker, incarnation):
                raise ValueError(
                    f"op {op_id}: invoked by {invoker[0]!r} incarnation {invoker[1]}, "
                    f"completed by {worker!r} incarnation {incarnation} "
                    "(an operation completes in the process that sent it)"
                )
            op = invoker[2]
            result = outcome.get("result") or {}
            token = result.get("token")
            if op.get("token") == 0 and (token or result.get("result") == "released"):
                raise ValueError(
                    f"op {op_id}: a {result.get('result')!r} answer carries a grant's token, "
                    f"but the {op['op']} named token 0 (a lock without tokens)"
                )
            if op.get("op") in ("acquire", "renew") and token:
                self._tokens[(op["scope"], op["owner"])] = token
            del self._open_ops[op_id]

        self._event(
            worker,
            {"type": "complete", "op_id": op_id, "outcome": outcome},
            incarnation,
            check=close,
        )

    def belief_start(self, worker, scope, token=0, incarnation=0):
        self._event(worker, {"type": "belief_start", "scope": scope, "token": token}, incarnation)

    def belief_end(self, worker, scope, reason, token=0, incarnation=0):
        self._event(
            worker,
            {"type": "belief_end", "scope": scope, "token": token, "reason": reason},
            incarnation,
        )

    # -- operations and results ----------------------------------------

    @staticmethod
    def acquire(scope, owner, ttl_us):
        return {"op": "acquire", "scope": scope, "owner": owner, "ttl_us": ttl_us}

    @staticmethod
    def renew(scope, owner, token, ttl_us):
        return {"op": "renew", "scope": scope, "owner": owner, "token": token, "ttl_us": ttl_us}

    @staticmethod
    def release(scope, owner, token=0):
        return {"op": "release", "scope": scope, "owner": owner, "token": token}

    @staticmethod
    def commit(scope, owner, token, cycle_id, items):
        """A guarded write under a lease's fence (its rows are `guarded_row`s)."""
        return {
            "op": "commit",
            "scope": scope,
            "owner": owner,
            "token": token,
            "cycle_id": cycle_id,
            "items": items,
        }

    @staticmethod
    def write(scope, owner, cycle_id, items):
        return {
            "op": "write",
            "scope": scope,
            "owner": owner,
            "cycle_id": cycle_id,
            "items": items,
        }

    @staticmethod
    def lock(token=None, lifetime_us=None):
        """A grant of a lock that reports no server times: its token (if
        any) and the lifetime it promises from the acquisition's invoke (its
        TTL; None for a lock that lives with its session)."""
        result = {"result": "lock"}
        if token is not None:
            result["token"] = token
        if lifetime_us is not None:
            result["lifetime_us"] = lifetime_us
        return result

    @staticmethod
    def lease(token, owner, granted_at_us, expires_at_us):
        """A grant (acquire, renew) of a lease that reports its server
        times: microseconds on the store's clock."""
        return {
            "result": "lease",
            "token": token,
            "owner": owner,
            "granted_at_us": granted_at_us,
            "expires_at_us": expires_at_us,
        }

    @staticmethod
    def released(released_at_us):
        """A lease's release, at this server time."""
        return {"result": "released", "released_at_us": released_at_us}

    @staticmethod
    def committed(committed_at_us=None):
        """A fenced commit; the fence's server time where the design has one."""
        result = {"result": "committed"}
        if committed_at_us is not None:
            result["committed_at_us"] = committed_at_us
        return result

    UNLOCKED = {"result": "unlocked"}
    WRITTEN = {"result": "written"}

    # -- rows -----------------------------------------------------------

    def table_read(self, table):
        """Says the table (`"guarded_row"` or `"work_row"`) was read back after
        the run, so a write missing from it is evidence even when the table
        is empty; leave it out and missing writes are not judged."""
        if table not in ("guarded_row", "work_row"):
            raise ValueError(f"table_read: {table!r} is not guarded_row or work_row")
        with self._mutex:
            if table not in self._tables_read:
                self._tables_read.append(table)

    def work_row(self, seq, scope, owner, cycle_id, item, committed_at_us=None):
        """A row a `write` left in the store, read back after the run."""
        self._row(
            committed_at_us,
            record="work_row", seq=seq, scope=scope, owner=owner, cycle_id=cycle_id, item=item,
        )

    def guarded_row(
        self, seq, scope, owner, token, cycle_id, item, written_at_us, committed_at_us=None
    ):
        """A row a `commit` left in the guarded table, read back after the
        run (server times in microseconds; on PostgreSQL the commit time is
        `pg_xact_commit_timestamp(xmin)`)."""
        self._row(
            committed_at_us,
            record="guarded_row", seq=seq, scope=scope, owner=owner, token=token,
            cycle_id=cycle_id, item=item, written_at_us=written_at_us,
        )

    def _row(self, committed_at_us, **row):
        # The commit time is optional: left out, not null, when unknown.
        if committed_at_us is not None:
            row["committed_at_us"] = committed_at_us
        with self._mutex:
            self._rows.append(row)

    # -- the file -------------------------------------------------------

    def save(self, path):
        with self._mutex:
            # Guarded rows, then work rows, each in `seq` order.
            tables = [{"record": "table_read", "table": table} for table in self._tables_read]
            records = (
                list(self._events)
                + tables
                + sorted(self._rows, key=lambda row: (row["record"] != "guarded_row", row["seq"]))
            )
            design = self._design
            workers = {event["worker"] for event in self._events}
        unknown = sorted(set((design or {}).get("unfenced_workers") or []) - workers)
        if unknown:
            # `check` refuses such a file: a typo would judge the worker it
            # meant as fenced.
            raise ValueError(
                f"unfenced_workers names {unknown[0]!r}, a worker with no event "
                f"(workers: {sorted(workers)})"
            )
        with open(path, "w", encoding="utf-8") as out:
            if design is not None:
                out.write(json.dumps({"record": "design", **design}) + "\n")
            for record in records:
                out.write(json.dumps(record) + "\n")
