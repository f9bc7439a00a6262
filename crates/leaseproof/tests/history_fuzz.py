#!/usr/bin/env python3
"""history_fuzz: a soundness sweep for `leaseproof check`.

`check` promises soundness: every violation it reports must be provable from
the file. This program generates histories that are correct by construction
and requires `check` to pass them. Each history is recorded, honestly and in
the format of docs/history-format.md, from a simulated world in which a
CORRECT lock or lease service is used by a few workers over a bad network:

* lease form: one store that stamps grants with its own clock (decision or
  statement-start stamps; the `design` line declares the truth, the sound
  rule, or is absent) and fences commits in the same database under a shared
  row lock that holds takeovers out until the commit ends;
* lock form: a store without server times (a TTL lock that promises a
  lifetime, or a session lock that lives with its connection; with or
  without fencing tokens), maintenance `write`s and token-fenced `commit`s to
  a database, and optionally careful workers declared unfenced.

What one seed varies (all drawn from `random.Random(seed)`, so one seed is
one byte-identical file): the form; workers, scopes and horizon; network
delays with heavy tails, lost requests, lost replies and timeouts (unknown
outcomes, some of which take effect after the caller gave up); retries,
pauses, crashes and restarts (new incarnations, owners named per worker or
per incarnation); how coarse the recorder's clock is (events closer than a
microsecond tie); the store's clock (rate, offset, coarseness); statements
that start, then queue behind row locks; commits that re-check the lease or
rely on the row lock alone; releases that bypass a commit's row lock;
renewals that report their grant's start or their own time, that clamp
their TTL, or that revive an expired lease nobody took; token counters per
scope or global; belief events; which tables are read back, `table_read`
lines, rows with and without commit times; and the file's cosmetics (key
order, blank lines, worker names).

In --plant mode each seed's correct history gets one real violation the
document promises `check` detects (two certain holders at once, a token going
backwards, a stale write landing after a rival's grant with proof, a
committed cycle whose row is missing from a table that was read), and
`check` must convict it of that invariant.

Run from the repository (`cargo test` runs seeds 0..200, and 0..100 with
a plant; `ci/nightly.sh` sweeps wider), and replay a finding:

    python3 crates/leaseproof/tests/history_fuzz.py --binary target/release/leaseproof --seeds 0..200
    python3 crates/leaseproof/tests/history_fuzz.py --binary target/release/leaseproof --seeds 0..200 --plant
    python3 crates/leaseproof/tests/history_fuzz.py --emit 17 > seed-17.jsonl   # add --plant for the planted one
    leaseproof check seed-17.jsonl

Standard library only; no state besides the seed.
"""

import argparse
import heapq
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

INFINITY = float("inf")
# The two tables' names, as their rows' `record` field spells them.
GUARDED_TABLE, WORK_TABLE = "guarded_row", "work_row"


# --------------------------------------------------------------------------
# Configuration: everything a seed varies, drawn in a fixed order.
# Durations are in ticks of the simulated world; the recorder's clock reads
# whole microseconds of `ticks_per_us` ticks each.
# --------------------------------------------------------------------------


class Config:
    """One seed's world. Only choices a correct service and an honest
    recorder can make are here: no switch models a broken store.

    Every attribute is drawn from the seed's random stream in the order
    written: reordering, adding or removing a draw changes every file."""

    def __init__(self, random_stream):
        pick = random_stream.choice

        def chance(probability):
            return random_stream.random() < probability

        self.form = pick(["lease", "lease", "lock"])
        self.worker_count = random_stream.randint(2, 5)
        self.scopes = pick([["job"], ["job"], ["job", "other"], ["a", "b", "c"]])
        self.horizon_ticks = pick([4000, 10000, 20000, 40000, 80000])
        # The recorder floors the world's time to whole microseconds, as the
        # reference recorder floors nanoseconds: events closer than
        # `ticks_per_us` ticks tie. Every lifetime and TTL is a whole number
        # of microseconds, so flooring never makes a promise look longer.
        self.ticks_per_us = pick([1, 1, 1, 10, 100])
        self.ttl_ticks = pick([300, 800, 2000, 5000])
        self.ttl_us = max(1, self.ttl_ticks // self.ticks_per_us)
        # network delay: a minimum plus an exponential part of this mean;
        # heavy tails make requests land long after their caller timed out
        self.network_delay_ticks_min, self.network_delay_ticks_mean = pick([(1, 20), (1, 50), (5, 200)])
        self.heavy_delay_probability = pick([0.0, 0.02, 0.1])
        self.request_drop_probability = pick([0.0, 0.02, 0.1])  # request never arrives
        self.reply_loss_probability = pick([0.0, 0.02, 0.1])  # reply never arrives
        self.timeout_ticks = self.network_delay_ticks_min + self.network_delay_ticks_mean * pick([3, 8, 30])
        self.retry_probability = pick([0.0, 0.5])  # retry an unknown outcome at once
        self.crash_probability_per_tick = pick([0.0, 0.0005, 0.002])  # per tick and worker
        self.pause_probability = pick([0.0, 0.05, 0.2])  # a GC pause while holding
        self.pause_ticks_max = pick([500, 3000, 10000])
        self.owner_per_incarnation = chance(0.2)  # else one owner name per worker
        self.beliefs_recorded = chance(0.7)
        self.reacquire_while_holding = chance(0.1)  # a holder asks for its scope again
        self.items_max = pick([1, 3, 5])  # rows one commit or write inserts
        self.items_zero_allowed = chance(0.1)
        self.database_error_probability = pick([0.0, 0.05])
        self.commit_duration_ticks_max = pick([5, 100, 1000])  # ticks a commit's transaction runs
        self.renewal_revives_expired = chance(0.3)  # a late renewal revives a lease nobody took
        self.renewal_short_probability = pick([0.0, 0.3])  # renewals asking half the TTL
        # lease store
        self.grant_stamps = pick(["decision", "statement-start"])
        self.design_declares = pick(["truth", "none", "sound"])  # what the `design` line says of the stamps
        # (numerator, denominator): server microseconds per recorder microsecond
        self.server_clock_rate = pick([(1, 1), (1, 1), (1, 2), (3, 1)])
        self.server_clock_offset_us = pick([0, 1700000000000000, 5])
        self.server_clock_resolution_us = pick([1, 1, 10, 1000])  # a coarse server clock
        self.token_counter = pick(["scope", "global"])  # one counter per scope, or one for all
        self.token_gap_probability = pick([0.0, 0.1])  # a token skips a value
        # a renewal reports its grant's start, or its own time, or either
        self.renewal_granted_at = pick(["grant", "own", "mix"])
        self.statement_delay_probability = pick([0.0, 0.2, 0.5])  # start, then wait for the row
        self.statement_delay_ticks_max = pick([50, 500, 3000])
        self.row_hold_probability = pick([0.0, 0.3])  # an exclusive statement holds the row a while
        self.row_hold_ticks_max = pick([20, 300])
        self.commit_rechecks_lease = chance(0.5)  # else the fence's row lock alone
        self.release_bypasses_commit = chance(0.2)  # FOR KEY SHARE fences
        self.written_at_source = pick(["insert", "fence"])  # the clock read a row's `written_at_us` takes
        # lock store
        self.session_lock = chance(0.3)  # else a TTL lock
        self.lock_tokens_issued = chance(0.6)
        self.lifetime_margin_us = pick([0, 0, 1, 5])  # a lock promises this much less than its TTL
        self.lock_commit_time_reported = chance(0.5)
        self.refused_write_error_probability = pick([0.0, 0.5])  # else a refused write is lost
        self.careful_unfenced_workers = chance(0.2)  # careful workers, some declared unfenced
        # the recorder and the file
        self.tables_read = {GUARDED_TABLE: chance(0.8), WORK_TABLE: chance(0.8)}
        self.table_read_line = pick(["always", "when-empty"])
        self.row_commit_times = {GUARDED_TABLE: pick(["all", "all", "none", "mixed"]),
                                 WORK_TABLE: pick(["all", "none", "mixed"])}
        self.shuffle_rows = chance(0.3)
        self.database_clock_offset_us = pick([0, 1700000000000000])
        self.database_clock_resolution_us = pick([1, 1, 1000])
        self.local_clocks_skewed = chance(0.5)
        self.worker_name_prefix = pick(["w", "w", "worker-", "wörker-"])
        self.blank_lines = chance(0.1)
        self.shuffle_keys = chance(0.2)
        self.json_compact = chance(0.5)
        if self.form == "lease":
            self.careful_unfenced_workers = False  # a lease worker is fenced by its commits
        if self.careful_unfenced_workers:
            # Careful workers: they never pause, never renew and record when
            # they stop believing, before their promise ends.
            self.pause_probability = 0.0
            self.beliefs_recorded = True

    def server_ttl_ticks(self):
        """How many ticks of the world a TTL of `ttl_us` lasts on the
        server's clock, which runs at its own rate."""
        rate_numerator, rate_denominator = self.server_clock_rate
        return self.ttl_us * self.ticks_per_us * rate_denominator // rate_numerator


# --------------------------------------------------------------------------
# The world: a discrete-event simulation on integer ticks.
# --------------------------------------------------------------------------


class Simulation:
    def __init__(self):
        self.now_ticks = 0
        self._queue = []
        self._scheduled_count = 0  # ties run in scheduling order: deterministic

    def at(self, time_ticks, callback):
        heapq.heappush(self._queue, (time_ticks, self._scheduled_count, callback))
        self._scheduled_count += 1

    def after(self, delay_ticks, callback):
        self.at(self.now_ticks + delay_ticks, callback)

    def run(self, until_ticks):
        while self._queue and self._queue[0][0] <= until_ticks:
            self.now_ticks, _, callback = heapq.heappop(self._queue)
            callback()


class Request:
    """One operation on its way: what the store sees of it."""

    def __init__(self, operation, operation_id, session, grant_operation_id):
        self.operation = operation  # the `op` object of the invoke event, shared with it
        self.operation_id = operation_id
        self.session = session
        self.grant_operation_id = grant_operation_id  # op id of the acquisition it acts under (lock form)
        self.statement_start_us = None  # the server's clock when its statement started (lease form)


class Recorder:
    """An honest recorder: one clock for every worker, invoke stamped before
    sending, completion after receiving."""

    def __init__(self, simulation, config):
        self.simulation, self.config = simulation, config
        self.events = []
        self.operation_id_next = 0

    def record(self, worker, kind):
        true_time_us = self.simulation.now_ticks // self.config.ticks_per_us
        self.events.append({
            "record": "event", "index": len(self.events), "worker": worker.name,
            "incarnation": worker.incarnation, "true_time_us": true_time_us,
            "local_time_us": worker.local_time_us(true_time_us), "kind": kind,
        })


def outcome_fail(reason_kind, random_stream, detail=None):
    reason = {"kind": reason_kind}
    if reason_kind == "error":
        reason["detail"] = detail or "error"
    elif random_stream.random() < 0.3:
        reason["detail"] = "note: " + reason_kind  # optional for held and stale
    return {"outcome": "fail", "reason": reason}


class Database:
    """Rows as written; `seq` is drawn at the insert (bigserial), so rolled
    back inserts leave gaps. Rows keep their commit time for the file."""

    def __init__(self, random_stream):
        self.random_stream = random_stream
        self.seq_last = 0
        self.rows = {GUARDED_TABLE: [], WORK_TABLE: []}

    def next_seq(self):
        self.seq_last += 1 + (self.random_stream.random() < 0.1)
        return self.seq_last


class LeaseStore:
    """The reference lease: one row per scope. acquire/renew/release are
    exclusive statements; a commit's fence takes the row FOR SHARE, checks
    holder, token and expiry, and keeps the row until its transaction ends,
    so no takeover can happen while a fenced commit runs."""

    def __init__(self, world):
        self.world = world
        self.simulation, self.config = world.simulation, world.config
        self.random_stream, self.database = world.random_stream, world.database
        self.scope_states = {}
        self.token_last_by_scope = {}
        self.token_last_global = 0

    def server_clock_us(self):
        config = self.config
        rate_numerator, rate_denominator = config.server_clock_rate
        elapsed_us = self.simulation.now_ticks * rate_numerator // (rate_denominator * config.ticks_per_us)
        time_us = config.server_clock_offset_us + elapsed_us
        return time_us // config.server_clock_resolution_us * config.server_clock_resolution_us

    def scope_state(self, scope):
        """The scope's row: its holder, how many commits hold it FOR SHARE,
        whether an exclusive statement holds it, and the statements waiting."""
        if scope not in self.scope_states:
            self.scope_states[scope] = {"holder": None, "shared_count": 0, "exclusive_held": False, "waiting": []}
        return self.scope_states[scope]

    def next_token(self, scope):
        gap = 1 + (self.random_stream.random() < self.config.token_gap_probability)
        if self.config.token_counter == "global":
            self.token_last_global += gap
            return self.token_last_global
        self.token_last_by_scope[scope] = self.token_last_by_scope.get(scope, 0) + gap
        return self.token_last_by_scope[scope]

    def stamp_us(self, request):
        # statement-start: now() is the statement's start, used both to
        # decide and to stamp, however long the statement waited since
        if self.config.grant_stamps == "statement-start":
            return request.statement_start_us
        return self.server_clock_us()

    def submit(self, request, reply):
        request.statement_start_us = self.server_clock_us()
        wait_ticks = 0
        if self.random_stream.random() < self.config.statement_delay_probability:
            wait_ticks = self.random_stream.randint(1, self.config.statement_delay_ticks_max)
        self.simulation.after(wait_ticks, lambda: self.wait_for_row(request, reply))

    def wait_for_row(self, request, reply):
        scope_state = self.scope_state(request.operation["scope"])
        scope_state["waiting"].append((request, reply))
        self.start_statements(scope_state)

    def may_start(self, scope_state, request):
        kind = request.operation["op"]
        if kind == "commit" or scope_state["shared_count"] == 0:
            return True
        return kind == "release" and self.config.release_bypasses_commit

    def start_statements(self, scope_state):
        # Lock queues are not fair: any statement that may take the row does.
        while not scope_state["exclusive_held"]:
            ready = [index for index, (request, _) in enumerate(scope_state["waiting"])
                     if self.may_start(scope_state, request)]
            if not ready:
                return
            request, reply = scope_state["waiting"].pop(self.random_stream.choice(ready))
            if request.operation["op"] == "commit":
                self.run_commit(scope_state, request, reply)
            else:
                scope_state["exclusive_held"] = True
                hold_ticks = 0
                if self.random_stream.random() < self.config.row_hold_probability:
                    hold_ticks = self.random_stream.randint(1, self.config.row_hold_ticks_max)
                self.simulation.after(hold_ticks, lambda request=request, reply=reply:
                                      self.run_exclusive(scope_state, request, reply))

    def run_exclusive(self, scope_state, request, reply):
        """acquire, renew or release, holding the row alone."""
        operation, random_stream = request.operation, self.random_stream
        stamp_us = self.stamp_us(request)
        holder = scope_state["holder"]
        held_by_caller = (operation["op"] != "acquire" and holder is not None
                          and holder["owner"] == operation["owner"] and holder["token"] == operation["token"])
        if operation["op"] == "acquire":
            if holder is None or holder["expires_at_us"] <= stamp_us:
                token = self.next_token(operation["scope"])
                scope_state["holder"] = {"owner": operation["owner"], "token": token, "granted_at_us": stamp_us,
                                         "expires_at_us": stamp_us + operation["ttl_us"]}
                reply({"outcome": "ok", "result": {"result": "lease", "token": token, "owner": operation["owner"],
                                                   "granted_at_us": stamp_us,
                                                   "expires_at_us": stamp_us + operation["ttl_us"]}})
            else:
                reply(outcome_fail("held", random_stream))
        elif operation["op"] == "renew":
            if held_by_caller and (holder["expires_at_us"] > stamp_us or self.config.renewal_revives_expired):
                # Never shortens a lease; the TTL it applied is what it
                # reports (the doc reads expires - ttl as a live time).
                if holder["expires_at_us"] > stamp_us:
                    expires_at_us = max(holder["expires_at_us"], stamp_us + operation["ttl_us"])
                else:
                    expires_at_us = stamp_us + operation["ttl_us"]
                # The recorder writes the applied TTL: the operation is the
                # invoke event's own `op` object, so this rewrites the event.
                operation["ttl_us"] = expires_at_us - stamp_us
                holder["expires_at_us"] = expires_at_us
                granted_at_us = holder["granted_at_us"]
                if self.config.renewal_granted_at == "own" or (
                        self.config.renewal_granted_at == "mix" and random_stream.random() < 0.5):
                    granted_at_us = stamp_us
                reply({"outcome": "ok", "result": {"result": "lease", "token": holder["token"],
                                                   "owner": holder["owner"], "granted_at_us": granted_at_us,
                                                   "expires_at_us": expires_at_us}})
            else:
                reply(outcome_fail("stale", random_stream))
        else:  # release
            if held_by_caller:
                scope_state["holder"] = None
                reply({"outcome": "ok", "result": {"result": "released", "released_at_us": stamp_us}})
            else:
                reply(outcome_fail("stale", random_stream))
        scope_state["exclusive_held"] = False
        self.start_statements(scope_state)

    def run_commit(self, scope_state, request, reply):
        """A fenced commit: check the lease holding the row FOR SHARE, insert
        its rows over the transaction's run, and keep the row until the end."""
        operation, random_stream, simulation = request.operation, self.random_stream, self.simulation
        stamp_us = self.stamp_us(request)
        holder = scope_state["holder"]
        if not (holder is not None and holder["owner"] == operation["owner"]
                and holder["token"] == operation["token"] and holder["expires_at_us"] > stamp_us):
            reply(outcome_fail("stale", random_stream))
            return
        scope_state["shared_count"] += 1
        duration_ticks = random_stream.randint(1, self.config.commit_duration_ticks_max)
        rows_pending = []
        error_planned = random_stream.random() < self.config.database_error_probability

        def insert_row(item):
            written_at_us = self.server_clock_us() if self.config.written_at_source == "insert" else stamp_us
            rows_pending.append({"record": GUARDED_TABLE, "seq": self.database.next_seq(),
                                 "scope": operation["scope"], "owner": operation["owner"],
                                 "token": operation["token"], "cycle_id": operation["cycle_id"], "item": item,
                                 "written_at_us": written_at_us})

        for item in range(operation["items"]):
            simulation.after(duration_ticks * item // operation["items"], lambda item=item: insert_row(item))

        def end_transaction():
            scope_state["shared_count"] -= 1
            if self.config.commit_rechecks_lease and not (
                    scope_state["holder"] is holder and holder["expires_at_us"] > self.server_clock_us()):
                reply(outcome_fail("stale", random_stream))  # rolled back
            elif error_planned:
                reply(outcome_fail("error", random_stream, "serialization failure, rolled back"))
            else:
                for row in rows_pending:
                    row["_committed_at_us"] = self.server_clock_us()
                self.database.rows[GUARDED_TABLE].extend(rows_pending)
                reply({"outcome": "ok", "result": {"result": "committed", "committed_at_us": stamp_us}})
            self.start_statements(scope_state)

        simulation.after(duration_ticks, end_transaction)


class LockStore:
    """A lock without server times: a TTL lock (it expires on the world's
    clock, never before the lifetime it promised) or a session lock (freed
    by release or when its session closes). Writes and commits go to a
    database that, standing in for a correct system, only lets them land
    while their grant is current; a commit is refused `stale` otherwise."""

    def __init__(self, world):
        self.world = world
        self.simulation, self.config = world.simulation, world.config
        self.random_stream, self.database = world.random_stream, world.database
        self.holder_by_scope = {}
        self.token_last_by_scope = {}
        self.sessions_closed = set()

    def database_clock_us(self):
        config = self.config
        time_us = config.database_clock_offset_us + self.simulation.now_ticks // config.ticks_per_us
        return time_us // config.database_clock_resolution_us * config.database_clock_resolution_us

    def holder_live(self, holder):
        # a session lock (no expiry) lives until released or its session closes
        return holder is not None and (holder["expires_ticks"] is None
                                       or holder["expires_ticks"] > self.simulation.now_ticks)

    def lifetime_promised_us(self, ttl_us):
        return max(1, ttl_us - self.config.lifetime_margin_us)

    def submit(self, request, reply):
        operation, random_stream, config = request.operation, self.random_stream, self.config
        if operation["op"] in ("write", "commit"):
            return self.submit_to_database(request, reply)
        if request.session in self.sessions_closed:
            return  # its connection is gone: never processed
        scope = operation["scope"]
        holder = self.holder_by_scope.get(scope)
        held_by_caller = holder is not None and holder["grant_operation_id"] == request.grant_operation_id
        ticks_per_us = config.ticks_per_us
        if operation["op"] == "acquire":
            if self.holder_live(holder):
                return reply(outcome_fail("held", random_stream))
            token = None
            if config.lock_tokens_issued:
                token_gap = 1 + (random_stream.random() < config.token_gap_probability)
                self.token_last_by_scope[scope] = self.token_last_by_scope.get(scope, 0) + token_gap
                token = self.token_last_by_scope[scope]
            ttl_us = operation["ttl_us"]  # 0 asks for a session lock
            self.holder_by_scope[scope] = {
                "owner": operation["owner"], "token": token, "grant_operation_id": request.operation_id,
                "session": request.session,
                "expires_ticks": self.simulation.now_ticks + ttl_us * ticks_per_us if ttl_us else None}
            result = {"result": "lock"}
            if token is not None:
                result["token"] = token
            if ttl_us:
                # from the invocation: sent before we got it
                result["lifetime_us"] = self.lifetime_promised_us(ttl_us)
            reply({"outcome": "ok", "result": result})
        elif operation["op"] == "renew":
            # A late renewal of a lapsed lock nobody took revives it; the
            # history shows it invoked after its promise and bridges nothing.
            if held_by_caller and holder["expires_ticks"] is not None and (
                    self.holder_live(holder) or config.renewal_revives_expired):
                expires_ticks = self.simulation.now_ticks + operation["ttl_us"] * ticks_per_us
                if self.holder_live(holder):
                    holder["expires_ticks"] = max(holder["expires_ticks"], expires_ticks)
                else:
                    holder["expires_ticks"] = expires_ticks
                result = {"result": "lock"}
                if holder["token"] is not None:
                    result["token"] = holder["token"]
                result["lifetime_us"] = self.lifetime_promised_us(operation["ttl_us"])
                reply({"outcome": "ok", "result": result})
            else:
                reply(outcome_fail("stale", random_stream))
        else:  # release
            if held_by_caller:
                self.holder_by_scope[scope] = None
                reply({"outcome": "ok", "result": {"result": "unlocked"}})
            else:
                reply(outcome_fail("stale", random_stream))

    def close_session(self, session):
        self.sessions_closed.add(session)
        for scope, holder in self.holder_by_scope.items():
            if holder is not None and holder["session"] == session:
                self.holder_by_scope[scope] = None

    def submit_to_database(self, request, reply):
        operation, random_stream, config = request.operation, self.random_stream, self.config
        if random_stream.random() < config.database_error_probability:
            self.database.next_seq()  # a failed insert still drew its seq
            return reply(outcome_fail("error", random_stream, "database error, rolled back"))
        holder = self.holder_by_scope.get(operation["scope"])
        grant_current = self.holder_live(holder) and holder["grant_operation_id"] == request.grant_operation_id
        now_us = self.database_clock_us()
        if operation["op"] == "write":
            if not grant_current:
                if random_stream.random() < config.refused_write_error_probability:
                    return reply(outcome_fail("error", random_stream, "lock no longer held"))
                return  # a correct system never lands it; the caller times out
            for item in range(operation["items"]):
                self.database.rows[WORK_TABLE].append({
                    "record": WORK_TABLE, "seq": self.database.next_seq(), "scope": operation["scope"],
                    "owner": operation["owner"], "cycle_id": operation["cycle_id"], "item": item,
                    "_committed_at_us": now_us})
            return reply({"outcome": "ok", "result": {"result": "written"}})
        if not (grant_current and holder["token"] == operation["token"]):
            return reply(outcome_fail("stale", random_stream))
        for item in range(operation["items"]):
            self.database.rows[GUARDED_TABLE].append({
                "record": GUARDED_TABLE, "seq": self.database.next_seq(), "scope": operation["scope"],
                "owner": operation["owner"], "token": operation["token"], "cycle_id": operation["cycle_id"],
                "item": item, "written_at_us": now_us, "_committed_at_us": now_us})
        result = {"result": "committed"}
        if config.lock_commit_time_reported:
            result["committed_at_us"] = now_us
        reply({"outcome": "ok", "result": result})


# --------------------------------------------------------------------------
# Workers: each is a coroutine of commands ("call", op), ("note", kind),
# ("sleep", ticks); a crash abandons it (nothing more of that incarnation is
# recorded) and a restart begins a new incarnation.
# --------------------------------------------------------------------------


class Worker:
    def __init__(self, world, index):
        self.world = world
        self.name = f"{world.config.worker_name_prefix}{index}"
        self.incarnation = 0
        self.epoch = 0  # bumped on crash and at the end: stale callbacks see it
        self.cycle_id_last = 0  # cycle ids name one operation of an owner: never reused
        self.session_number = 0
        # what the worker believes it holds: scope, token, grant_operation_id,
        # deadline_ticks (and, lock form, whether its belief_end is recorded)
        self.belief = None
        self.crashed = False
        self.operation_id_last = None
        if world.config.local_clocks_skewed:
            self.local_clock_offset_us = world.random_stream.randint(-5000, 5000)
            self.local_clock_rate = world.random_stream.choice([1, 1, 2])
        else:
            self.local_clock_offset_us, self.local_clock_rate = 0, 1

    @property
    def owner(self):
        if self.world.config.owner_per_incarnation:
            return f"{self.name}.{self.incarnation}"
        return self.name

    def session_id(self):
        return (self.name, self.incarnation, self.session_number)

    def local_time_us(self, true_time_us):
        return true_time_us * self.local_clock_rate + self.local_clock_offset_us

    def next_cycle_id(self):
        self.cycle_id_last += 1
        return self.cycle_id_last

    def start(self):
        self.epoch += 1
        self.belief = None
        self.session_number += 1
        self.commands = self.world.behaviour(self)  # the coroutine of its commands
        epoch = self.epoch
        self.world.simulation.after(0, lambda: self.step(epoch, None))

    def note(self, kind):
        self.world.recorder.record(self, kind)

    def step(self, epoch, reply_value):
        """Run the commands until one waits: on a sleep or on a call's outcome."""
        if epoch != self.epoch:
            return
        while True:
            command = self.commands.send(reply_value)
            reply_value = None
            if command[0] == "note":
                self.note(command[1])
            elif command[0] == "sleep":
                self.world.simulation.after(max(1, command[1]), lambda: self.step(epoch, None))
                return
            else:
                self.call(epoch, command[1])
                return

    def call(self, epoch, operation):
        world = self.world
        simulation, random_stream, config = world.simulation, world.random_stream, world.config
        operation_id = world.recorder.operation_id_next
        world.recorder.operation_id_next += 1
        self.operation_id_last = operation_id
        grant_operation_id = self.belief["grant_operation_id"] if self.belief is not None else None
        request = Request(operation, operation_id, self.session_id(),
                          grant_operation_id if operation["op"] != "acquire" else None)
        self.note({"type": "invoke", "op_id": operation_id, "op": operation})  # before sending
        completions = []

        def complete(outcome):
            # the first of the reply and the timeout completes the call
            if epoch != self.epoch or completions:
                return
            completions.append(outcome)
            self.note({"type": "complete", "op_id": operation_id, "outcome": outcome})  # after receiving
            self.step(epoch, outcome)

        def reply(outcome):
            if random_stream.random() >= config.reply_loss_probability:
                simulation.after(world.network_delay_ticks(), lambda: complete(outcome))

        if random_stream.random() >= config.request_drop_probability:
            simulation.after(world.network_delay_ticks(), lambda: world.store.submit(request, reply))
        simulation.after(config.timeout_ticks, lambda: complete({"outcome": "unknown", "reason": "timeout"}))

    def crash(self):
        world = self.world
        if self.crashed:
            return
        self.crashed = True
        self.epoch += 1
        if world.config.form == "lock" and world.config.session_lock:
            # the store notices the dead connection a little later
            session = self.session_id()
            world.simulation.after(world.random_stream.randint(1, 200), lambda: world.store.close_session(session))

        def restart():
            self.incarnation += 1
            self.crashed = False
            self.start()

        world.simulation.after(world.random_stream.randint(100, 3000), restart)


class World:
    def __init__(self, seed):
        # One stream for everything, drawn in simulation order: one seed is
        # one byte-identical file.
        self.random_stream = random.Random(seed)
        self.config = Config(self.random_stream)
        self.simulation = Simulation()
        self.recorder = Recorder(self.simulation, self.config)
        self.database = Database(self.random_stream)
        self.store = LeaseStore(self) if self.config.form == "lease" else LockStore(self)
        self.workers = [Worker(self, index) for index in range(self.config.worker_count)]

    def network_delay_ticks(self):
        config = self.config
        delay_ticks = config.network_delay_ticks_min + int(
            self.random_stream.expovariate(1.0 / config.network_delay_ticks_mean))
        if self.random_stream.random() < config.heavy_delay_probability:
            delay_ticks += self.random_stream.randint(0, 5 * config.timeout_ticks)  # lands after its caller gave up
        return delay_ticks

    def behaviour(self, worker):
        return self.lease_worker(worker) if self.config.form == "lease" else self.lock_worker(worker)

    def pause_ticks(self):
        if self.random_stream.random() < self.config.pause_probability:
            return self.random_stream.randint(1, self.config.pause_ticks_max)
        return 0

    def renewal_ttl_us(self):
        ttl_us = self.config.ttl_us
        return max(1, ttl_us // 2) if self.random_stream.random() < self.config.renewal_short_probability else ttl_us

    # ---------------------------------------------------------------- lease
    def lease_worker(self, worker):
        random_stream, config, simulation = self.random_stream, self.config, self.simulation

        def end_belief(reason):
            if config.beliefs_recorded:
                yield ("note", {"type": "belief_end", "scope": worker.belief["scope"],
                                "token": worker.belief["token"], "reason": reason})
            worker.belief = None

        while True:
            if worker.belief is None:
                scope = random_stream.choice(config.scopes)
                while True:
                    invoked_ticks = simulation.now_ticks
                    outcome = yield ("call", {"op": "acquire", "scope": scope, "owner": worker.owner,
                                              "ttl_us": config.ttl_us})
                    if outcome["outcome"] != "unknown" or random_stream.random() >= config.retry_probability:
                        break
                if outcome["outcome"] == "ok":
                    token = outcome["result"]["token"]
                    # The worker's own deadline: the TTL on the server's
                    # clock, counted from before the request was sent.
                    worker.belief = {"scope": scope, "token": token, "grant_operation_id": None,
                                     "deadline_ticks": invoked_ticks + config.server_ttl_ticks()}
                    if config.beliefs_recorded:
                        yield ("note", {"type": "belief_start", "scope": scope, "token": token})
                else:
                    yield ("sleep", random_stream.randint(1, config.ttl_ticks // 4 + 1))
                continue
            belief = worker.belief
            pause_ticks = self.pause_ticks()
            if pause_ticks:
                yield ("sleep", pause_ticks)  # and carries on as if nothing happened
            if simulation.now_ticks >= belief["deadline_ticks"] and random_stream.random() < 0.5:
                yield from end_belief("expired")
                continue
            # One draw picks the next action, by these cumulative thresholds.
            action_draw = random_stream.random()
            if action_draw < 0.45:
                while True:
                    outcome = yield ("call", {
                        "op": "commit", "scope": belief["scope"], "owner": worker.owner, "token": belief["token"],
                        "cycle_id": worker.next_cycle_id(),
                        "items": random_stream.randint(0 if config.items_zero_allowed else 1, config.items_max)})
                    # a retry is a new cycle
                    refused = outcome["outcome"] == "fail" and outcome["reason"]["kind"] == "stale"
                    if outcome["outcome"] == "ok" or refused:
                        break
                    if random_stream.random() >= config.retry_probability:
                        break
                if outcome["outcome"] == "fail" and outcome["reason"]["kind"] == "stale":
                    yield from end_belief("stale")
            elif action_draw < 0.7:
                invoked_ticks = simulation.now_ticks
                outcome = yield ("call", {"op": "renew", "scope": belief["scope"], "owner": worker.owner,
                                          "token": belief["token"], "ttl_us": self.renewal_ttl_us()})
                if outcome["outcome"] == "ok":
                    belief["deadline_ticks"] = invoked_ticks + config.server_ttl_ticks()
                elif outcome["outcome"] == "fail":
                    yield from end_belief("lost")
            elif action_draw < 0.85:
                yield from end_belief("released")
                yield ("call", {"op": "release", "scope": belief["scope"], "owner": worker.owner,
                                "token": belief["token"]})
                yield ("sleep", random_stream.randint(1, 300))
            elif action_draw < 0.9 and config.reacquire_while_holding:
                outcome = yield ("call", {"op": "acquire", "scope": belief["scope"], "owner": worker.owner,
                                          "ttl_us": config.ttl_us})
                if outcome["outcome"] == "ok":
                    yield from end_belief("reacquired")
                    worker.belief = {"scope": belief["scope"], "token": outcome["result"]["token"],
                                     "grant_operation_id": None,
                                     "deadline_ticks": simulation.now_ticks + config.server_ttl_ticks()}
                    if config.beliefs_recorded:
                        yield ("note", {"type": "belief_start", "scope": belief["scope"],
                                        "token": worker.belief["token"]})
            else:
                yield ("sleep", random_stream.randint(1, 200))

    # ----------------------------------------------------------------- lock
    def lock_worker(self, worker):
        random_stream, config, simulation = self.random_stream, self.config, self.simulation
        acquire_ttl_us = 0 if config.session_lock else config.ttl_us  # 0 asks for a session lock
        ticks_per_us = config.ticks_per_us

        def end_belief(reason):
            belief = worker.belief
            if config.beliefs_recorded and not belief.get("ended"):
                belief["ended"] = True
                yield ("note", {"type": "belief_end", "scope": belief["scope"], "token": belief["token"],
                                "reason": reason})

        def release(reason):
            # the hold ends when the release is invoked (or at the belief's end)
            belief = worker.belief
            yield from end_belief(reason)
            outcome = yield ("call", {"op": "release", "scope": belief["scope"], "owner": worker.owner,
                                      "token": belief["token"]})
            worker.belief = None
            return outcome

        def reconnect():
            # A session lock lives with its connection: drop it (after
            # letting go of the lock) and open a new one.
            if worker.belief is not None:
                yield from release("session dropped")
            session_old = worker.session_id()
            worker.session_number += 1
            simulation.after(1 + random_stream.randint(0, 100), lambda: self.store.close_session(session_old))

        while True:
            if worker.belief is None:
                scope = random_stream.choice(config.scopes)
                invoked_ticks = simulation.now_ticks
                outcome = yield ("call", {"op": "acquire", "scope": scope, "owner": worker.owner,
                                          "ttl_us": acquire_ttl_us})
                if outcome["outcome"] == "ok":
                    lifetime_us = outcome["result"].get("lifetime_us")
                    # the grant is this acquisition: the worker's last call
                    worker.belief = {
                        "scope": scope, "token": outcome["result"].get("token", 0),
                        "grant_operation_id": worker.operation_id_last,
                        "deadline_ticks": invoked_ticks + lifetime_us * ticks_per_us if lifetime_us else INFINITY}
                    # a careful worker believes only with time left, and stops in time
                    deadline_ticks = worker.belief["deadline_ticks"]
                    if config.careful_unfenced_workers and simulation.now_ticks + ticks_per_us >= deadline_ticks:
                        worker.belief["ended"] = True  # never believed
                        yield from release("no time left")
                        continue
                    if config.beliefs_recorded:
                        yield ("note", {"type": "belief_start", "scope": scope, "token": worker.belief["token"]})
                    if config.careful_unfenced_workers and lifetime_us:
                        self.end_belief_in_time(worker, worker.belief)
                else:
                    if outcome["outcome"] == "unknown" and config.session_lock:
                        yield from reconnect()  # it may hold the lock on this session
                    yield ("sleep", random_stream.randint(1, config.ttl_ticks // 4 + 1))
                continue
            belief = worker.belief
            pause_ticks = self.pause_ticks()
            if pause_ticks:
                yield ("sleep", pause_ticks)
            # a careful worker lets go while a release can still arrive in time
            deadline_ticks = belief["deadline_ticks"]
            if config.careful_unfenced_workers and simulation.now_ticks + 2 * config.timeout_ticks >= deadline_ticks:
                yield from release("expiring")
                continue
            # One draw picks the next action, by these cumulative thresholds.
            action_draw = random_stream.random()
            if action_draw < 0.3:
                items = random_stream.randint(0 if config.items_zero_allowed else 1, config.items_max)
                while True:
                    outcome = yield ("call", {"op": "write", "scope": belief["scope"], "owner": worker.owner,
                                              "cycle_id": worker.next_cycle_id(), "items": items})
                    if outcome["outcome"] != "unknown" or random_stream.random() >= config.retry_probability:
                        break
            elif action_draw < 0.45 and config.lock_tokens_issued:
                outcome = yield ("call", {
                    "op": "commit", "scope": belief["scope"], "owner": worker.owner, "token": belief["token"],
                    "cycle_id": worker.next_cycle_id(),
                    "items": random_stream.randint(0 if config.items_zero_allowed else 1, config.items_max)})
                if outcome["outcome"] == "fail" and outcome["reason"]["kind"] == "stale":
                    yield from end_belief("stale")
                    worker.belief = None
            elif action_draw < 0.65 and not config.session_lock and not config.careful_unfenced_workers:
                invoked_ticks = simulation.now_ticks
                outcome = yield ("call", {"op": "renew", "scope": belief["scope"], "owner": worker.owner,
                                          "token": belief["token"], "ttl_us": self.renewal_ttl_us()})
                if outcome["outcome"] == "ok":
                    belief["deadline_ticks"] = max(
                        belief["deadline_ticks"], invoked_ticks + outcome["result"]["lifetime_us"] * ticks_per_us)
                elif outcome["outcome"] == "fail":
                    yield from end_belief("lost")
                    worker.belief = None
            elif action_draw < 0.8:
                outcome = yield from release("released")
                if outcome["outcome"] == "unknown" and config.session_lock:
                    yield from reconnect()
                yield ("sleep", random_stream.randint(1, 300))
            elif action_draw < 0.85 and config.session_lock:
                yield from reconnect()
            else:
                yield ("sleep", random_stream.randint(1, 200))

    def end_belief_in_time(self, worker, belief):
        # A careful (unfenced) worker's timer ends its belief before the
        # promise can end, at least a microsecond early.
        epoch = worker.epoch
        guard_ticks = self.config.ticks_per_us * self.random_stream.randint(1, 3)

        def end_belief():
            if epoch == worker.epoch and not belief.get("ended"):
                belief["ended"] = True
                worker.note({"type": "belief_end", "scope": belief["scope"], "token": belief["token"],
                             "reason": "deadline"})

        self.simulation.at(max(self.simulation.now_ticks, belief["deadline_ticks"] - guard_ticks), end_belief)

    # ------------------------------------------------------------------ run
    def run(self):
        config, simulation, random_stream = self.config, self.simulation, self.random_stream
        for worker in self.workers:
            time_ticks = random_stream.randint(0, 50)
            simulation.at(time_ticks, worker.start)
            if config.crash_probability_per_tick:
                # this worker's crashes, as a Poisson process up to the horizon
                while True:
                    time_ticks += int(random_stream.expovariate(config.crash_probability_per_tick)) + 1
                    if time_ticks >= config.horizon_ticks:
                        break
                    simulation.at(time_ticks, worker.crash)
        simulation.run(config.horizon_ticks)
        # The recording stops; requests in flight still land (their rows are
        # read back) but no completion is recorded: unknown outcomes.
        for worker in self.workers:
            worker.epoch += 1
        simulation.run(config.horizon_ticks * 10 + 100000)
        return self.history()

    def history(self):
        config, random_stream = self.config, self.random_stream
        design = None
        if config.form == "lease" and config.design_declares != "none":
            # the truth, or the sound rule (true of any store)
            design = {"record": "design",
                      "grant_stamps": config.grant_stamps if config.design_declares == "truth" else "statement-start"}
        if config.careful_unfenced_workers:
            design = design or {"record": "design"}
            unfenced_names = ([worker.name for worker in self.workers if random_stream.random() < 0.7]
                              or [self.workers[0].name])
            design["unfenced_workers"] = unfenced_names
        elif config.form == "lock" and random_stream.random() < 0.1:
            design = {"record": "design"}  # both fields are optional
        tables = {}
        for table in (GUARDED_TABLE, WORK_TABLE):
            rows = []
            for row in sorted(self.database.rows[table], key=lambda row: row["seq"]):
                row = dict(row)
                committed_at_us = row.pop("_committed_at_us")
                commit_times = config.row_commit_times[table]
                coin = random_stream.random() < 0.5  # drawn for every row: the stream does not depend on the mode
                if commit_times == "all" or commit_times == "mixed" and coin:
                    row["committed_at_us"] = committed_at_us
                rows.append(row)
            tables[table] = {"read": config.tables_read[table], "rows": rows}
        return History(config, design, self.recorder.events, tables)


# --------------------------------------------------------------------------
# The file: a history as data, plants, and rendering.
# --------------------------------------------------------------------------


class History:
    def __init__(self, config, design, events, tables):
        self.config = config
        self.design = design
        self.events = events
        self.tables = tables  # table -> {"read": bool, "rows": [...]}; unread tables are not written

    def append_event(self, worker, time_us, kind):
        self.events.append({"record": "event", "index": len(self.events), "worker": worker, "incarnation": 0,
                            "true_time_us": time_us, "local_time_us": time_us, "kind": kind})

    def records(self):
        """The file's records: (the design, events and table_read lines; the rows of read tables)."""
        head = [self.design] if self.design else []
        head.extend(self.events)
        for table in (GUARDED_TABLE, WORK_TABLE):
            table_state = self.tables[table]
            if table_state["read"] and (self.config.table_read_line == "always" or not table_state["rows"]):
                head.append({"record": "table_read", "table": table})
        rows = [row for table_state in self.tables.values() if table_state["read"] for row in table_state["rows"]]
        return head, rows

    def render(self, random_stream):
        """The file's text and its number of records."""
        config = self.config
        head, rows = self.records()
        if config.shuffle_rows:
            random_stream.shuffle(rows)  # `seq`, not the line order, is the order of writing
        text = []
        separators = (",", ":") if config.json_compact else (", ", ": ")
        for record in head + rows:
            if config.shuffle_keys:
                record = shuffled(record, random_stream)
            text.append(json.dumps(record, ensure_ascii=False, separators=separators) + "\n")
            if config.blank_lines and random_stream.random() < 0.05:
                text.append("\n")
        return "".join(text), len(head) + len(rows)


def shuffled(value, random_stream):
    """`value` with the keys of every object in it in a random order."""
    if isinstance(value, dict):
        items = [(key, shuffled(item, random_stream)) for key, item in value.items()]
        random_stream.shuffle(items)
        return dict(items)
    return value


# Plants: each appends an episode in one of the history's scopes between two
# fresh workers, after everything else has settled (later on the common
# clock than any promise, later on the server's clock than any grant), with
# tokens above any in the file, so that exactly the planted violation is in
# the file, and the document's rule that convicts it needs nothing else.


def server_time_max_us(history):
    """The latest server or database time anywhere in the file (0 if none)."""
    times_us = [0]
    for event in history.events:
        kind = event["kind"]
        if kind["type"] == "complete" and kind["outcome"]["outcome"] == "ok":
            times_us += [value for key, value in kind["outcome"]["result"].items()
                         if key.endswith("_us") and key != "lifetime_us"]
    for table_state in history.tables.values():
        for row in table_state["rows"]:
            times_us += [row.get("written_at_us", 0), row.get("committed_at_us", 0)]
    return max(times_us)


def plant(history, random_stream):
    """Plant one violation in `history`; return the invariant it breaks."""
    config = history.config
    events = history.events
    scope = random_stream.choice(config.scopes)
    results_ok = [event["kind"]["outcome"]["result"] for event in events
                  if event["kind"]["type"] == "complete" and event["kind"]["outcome"]["outcome"] == "ok"]
    token_base = max([0] + [result.get("token", 0) for result in results_ok]) + 10
    lifetimes_us = [result.get("lifetime_us", 0) for result in results_ok]
    time_base_us = (max([0] + [event["true_time_us"] for event in events])
                    + max([config.ttl_us] + lifetimes_us) + 1000)
    server_time_base_us = server_time_max_us(history) + 10 * config.ttl_us + 10**6
    seq_last = max([0] + [row["seq"] for table_state in history.tables.values() for row in table_state["rows"]])
    seqs_unused = iter(range(seq_last + 1, 10**18))
    operation_id_last = max([-1] + [event["kind"].get("op_id", -1) for event in events])
    operation_ids_unused = iter(range(operation_id_last + 1, 10**9))
    lease_form = config.form == "lease"
    tokens_issued = lease_form or config.lock_tokens_issued
    session_lock = config.form == "lock" and config.session_lock
    worker_a, worker_b = "planted-a", "planted-b"
    ttl_us = 1000
    invariants = ["I1", "I3", "I4"] + (["I2"] if tokens_issued else [])
    invariant = random_stream.choice(invariants)

    def call(worker, invoked_us, operation, outcome):
        operation_id = next(operation_ids_unused)
        history.append_event(worker, invoked_us, {"type": "invoke", "op_id": operation_id, "op": operation})
        history.append_event(worker, invoked_us + 5, {"type": "complete", "op_id": operation_id, "outcome": outcome})

    def outcome_ok(result):
        return {"outcome": "ok", "result": result}

    def acquire(worker, invoked_us, token, granted_at_us=None, lifetime_us=ttl_us):
        operation = {"op": "acquire", "scope": scope, "owner": worker, "ttl_us": 0 if session_lock else ttl_us}
        if lease_form:
            result = {"result": "lease", "token": token, "owner": worker, "granted_at_us": granted_at_us,
                      "expires_at_us": granted_at_us + ttl_us}
        else:
            result = {"result": "lock"}
            if config.lock_tokens_issued:
                result["token"] = token
            if not session_lock:
                result["lifetime_us"] = lifetime_us
        call(worker, invoked_us, operation, outcome_ok(result))

    def release(worker, invoked_us, token, released_at_us=None):
        if lease_form:
            result = {"result": "released", "released_at_us": released_at_us}
        else:
            result = {"result": "unlocked"}
        call(worker, invoked_us, {"op": "release", "scope": scope, "owner": worker,
                                  "token": token if tokens_issued else 0},
             outcome_ok(result))

    def commit_rows(owner, token, cycle_id, items_invoked, written_at_us, rows_present):
        # `items_invoked` only documents the call: rows_present < items_invoked plants I4
        table_state = history.tables[GUARDED_TABLE]
        table_state["read"] = True
        for item in range(rows_present):
            table_state["rows"].append({"record": GUARDED_TABLE, "seq": next(seqs_unused), "scope": scope,
                                        "owner": owner, "token": token, "cycle_id": cycle_id, "item": item,
                                        "written_at_us": written_at_us, "committed_at_us": written_at_us})

    if invariant == "I1":
        if lease_form:
            # b is granted inside a's grant; a's renewal, invoked after b's
            # grant was acknowledged, finds a's grant live: a proven overlap.
            acquire(worker_a, time_base_us, token_base, server_time_base_us)
            acquire(worker_b, time_base_us + 20, token_base + 1, server_time_base_us + ttl_us // 2)
            call(worker_a, time_base_us + 40,
                 {"op": "renew", "scope": scope, "owner": worker_a, "token": token_base, "ttl_us": ttl_us},
                 outcome_ok({"result": "lease", "token": token_base, "owner": worker_a,
                             "granted_at_us": server_time_base_us,
                             "expires_at_us": server_time_base_us + ttl_us * 3 // 4 + ttl_us}))
        else:
            acquire(worker_a, time_base_us, token_base)
            acquire(worker_b, time_base_us + 100, token_base + 1)  # inside a's promise
            if session_lock:
                release(worker_a, time_base_us + 200, token_base)
                release(worker_b, time_base_us + 300, token_base + 1)
    elif invariant == "I2":
        acquire(worker_a, time_base_us, token_base + 5, server_time_base_us)
        release(worker_a, time_base_us + 20, token_base + 5, server_time_base_us + 100)
        # after a's release, a smaller token
        acquire(worker_b, time_base_us + 40, token_base + 3, server_time_base_us + 200)
    elif invariant == "I3":
        if lease_form:
            # a's commit, fenced in its grant, lands after b took over and
            # wrote under a larger token: a smaller token after a larger one
            acquire(worker_a, time_base_us, token_base, server_time_base_us)
            commit_a_operation_id = next(operation_ids_unused)
            history.append_event(worker_a, time_base_us + 10, {
                "type": "invoke", "op_id": commit_a_operation_id, "op": {
                    "op": "commit", "scope": scope, "owner": worker_a, "token": token_base, "cycle_id": 1,
                    "items": 1}})
            # after a's grant expired
            acquire(worker_b, time_base_us + 20, token_base + 1, server_time_base_us + ttl_us + 10)
            call(worker_b, time_base_us + 40,
                 {"op": "commit", "scope": scope, "owner": worker_b, "token": token_base + 1, "cycle_id": 1,
                  "items": 1},
                 outcome_ok({"result": "committed", "committed_at_us": server_time_base_us + ttl_us + 20}))
            history.append_event(worker_a, time_base_us + 60, {
                "type": "complete", "op_id": commit_a_operation_id,
                "outcome": outcome_ok({"result": "committed", "committed_at_us": server_time_base_us + 100})})
            commit_rows(worker_b, token_base + 1, 1, 1, server_time_base_us + ttl_us + 20, 1)
            commit_rows(worker_a, token_base, 1, 1, server_time_base_us + ttl_us + 30, 1)
        else:
            # a writes while b certainly holds the lock
            acquire(worker_a, time_base_us, token_base, lifetime_us=100)
            if session_lock:
                release(worker_a, time_base_us + 50, token_base)
            acquire(worker_b, time_base_us + 200, token_base + 1)
            call(worker_a, time_base_us + 300,
                 {"op": "write", "scope": scope, "owner": worker_a, "cycle_id": 1, "items": 1},
                 outcome_ok({"result": "written"}))
            if session_lock:
                release(worker_b, time_base_us + 400, token_base + 1)
            table_state = history.tables[WORK_TABLE]
            if table_state["read"]:
                table_state["rows"].append({"record": WORK_TABLE, "seq": next(seqs_unused), "scope": scope,
                                            "owner": worker_a, "cycle_id": 1, "item": 0})
    else:  # I4: an ok commit (or write) whose row is missing from a table that was read
        victim = pick_committed_rows(history, random_stream)
        if victim is not None:
            table, rows = victim
            history.tables[table]["read"] = True
            history.tables[table]["rows"].remove(random_stream.choice(rows))
        elif tokens_issued:
            acquire(worker_a, time_base_us, token_base, server_time_base_us)
            result = {"result": "committed"}
            if lease_form:
                result["committed_at_us"] = server_time_base_us + 10
            call(worker_a, time_base_us + 20,
                 {"op": "commit", "scope": scope, "owner": worker_a, "token": token_base, "cycle_id": 1, "items": 2},
                 outcome_ok(result))
            commit_rows(worker_a, token_base, 1, 2, server_time_base_us + 10, 1)
        else:
            acquire(worker_a, time_base_us, token_base)
            call(worker_a, time_base_us + 20,
                 {"op": "write", "scope": scope, "owner": worker_a, "cycle_id": 1, "items": 2},
                 outcome_ok({"result": "written"}))
            history.tables[WORK_TABLE]["read"] = True
            history.tables[WORK_TABLE]["rows"].append(
                {"record": WORK_TABLE, "seq": next(seqs_unused), "scope": scope, "owner": worker_a, "cycle_id": 1,
                 "item": 0})
    return invariant


def pick_committed_rows(history, random_stream):
    """Rows of one commit or write the file reports ok, as (table, rows), if any."""
    operations_by_id, candidates = {}, []
    for event in history.events:
        kind = event["kind"]
        if kind["type"] == "invoke" and kind["op"]["op"] in ("commit", "write"):
            operations_by_id[kind["op_id"]] = kind["op"]
        elif kind["type"] == "complete" and kind["op_id"] in operations_by_id and kind["outcome"]["outcome"] == "ok":
            operation = operations_by_id[kind["op_id"]]
            table = GUARDED_TABLE if operation["op"] == "commit" else WORK_TABLE
            rows = [row for row in history.tables[table]["rows"]
                    if row["owner"] == operation["owner"] and row["cycle_id"] == operation["cycle_id"]]
            if rows:
                candidates.append((table, rows))
    return random_stream.choice(candidates) if candidates else None


def generate(seed, planted=False):
    """The file for one seed: (text, number of lines, planted invariant or None)."""
    world = World(seed)
    history = world.run()
    invariant_planted = plant(history, world.random_stream) if planted else None
    text, line_count = history.render(world.random_stream)
    return text, line_count, invariant_planted


# --------------------------------------------------------------------------
# The sweep.
# --------------------------------------------------------------------------

# A finding in `check`'s report: an indented line naming its invariant.
VIOLATION_LINE = re.compile(r"^\s+(I\d|B|H)\b.*$", re.M)


def judge(binary, path):
    """Run `check` on one file: (exit code, or "timeout"; stdout; stderr)."""
    try:
        completed = subprocess.run([binary, "check", path], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "timeout", "", "(no answer in 600 s)"
    return completed.returncode, completed.stdout, completed.stderr


def first_line(stdout, stderr):
    """The line that best explains a verdict: the first finding, else the first non-blank line."""
    violation = VIOLATION_LINE.search(stdout)
    if violation:
        return violation.group(0).strip()
    for line in (stderr + "\n" + stdout).splitlines():
        if line.strip():
            return line.strip()
    return "(no output)"


def parse_seeds(text):
    seed_first, _, seed_end = text.partition("..")
    return range(int(seed_first), int(seed_end))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", help="the leaseproof executable")
    parser.add_argument("--seeds", default="0..200", help="A..B: seeds A (inclusive) to B (exclusive)")
    parser.add_argument("--keep", help="where to keep failing files (default: a new temp dir)")
    parser.add_argument("--plant", action="store_true",
                        help="plant one real violation per seed; require conviction")
    parser.add_argument("--emit", type=int, metavar="SEED", help="write one seed's history to stdout and stop")
    args = parser.parse_args()

    if args.emit is not None:
        sys.stdout.write(generate(args.emit, args.plant)[0])
        return 0
    if not args.binary:
        parser.error("--binary is required (or --emit SEED)")

    work_directory = tempfile.mkdtemp(prefix="history-fuzz-")
    keep_directory = args.keep
    history_count = line_count_total = not_clean_count = 0
    planted_count_by_invariant = {}
    started_s = time.time()
    try:
        for seed in parse_seeds(args.seeds):
            text, line_count, invariant_planted = generate(seed, args.plant)
            path = os.path.join(work_directory, f"seed-{seed}.jsonl")
            with open(path, "w", encoding="utf-8") as file:
                file.write(text)
            exit_code, stdout, stderr = judge(args.binary, path)
            history_count += 1
            line_count_total += line_count
            if invariant_planted is None:
                clean = exit_code == 0
            else:  # the plant must be convicted, of what was planted
                planted_count_by_invariant[invariant_planted] = (
                    planted_count_by_invariant.get(invariant_planted, 0) + 1)
                clean = exit_code == 1 and any(
                    violation.group(1) == invariant_planted for violation in VIOLATION_LINE.finditer(stdout))
            if not clean:
                not_clean_count += 1
                if keep_directory is None:
                    keep_directory = tempfile.mkdtemp(prefix="history-fuzz-keep-")
                    print(f"keeping failing files in {keep_directory}", flush=True)
                os.makedirs(keep_directory, exist_ok=True)
                shutil.copy(path, os.path.join(keep_directory, f"seed-{seed}.jsonl"))
                planted = f" (planted {invariant_planted})" if invariant_planted else ""
                print(f"seed {seed}: exit {exit_code}{planted}: {first_line(stdout, stderr)}", flush=True)
            os.remove(path)
    finally:
        shutil.rmtree(work_directory, ignore_errors=True)
    if not_clean_count:
        print(f"kept in {keep_directory}; replay one with --emit SEED" + (" --plant" if args.plant else ""))
    print(f"{time.time() - started_s:.1f} s")
    # In --plant mode "not clean" counts plants not convicted as planted;
    # each seed not clean is named above with the invariant planted in it.
    summary = f"{history_count} histories, {line_count_total} lines, {not_clean_count} not clean"
    if planted_count_by_invariant:
        summary += "; planted " + ", ".join(
            f"{invariant} in {count}" for invariant, count in sorted(planted_count_by_invariant.items()))
    print(summary)
    return 1 if not_clean_count else 0


if __name__ == "__main__":
    sys.exit(main())
