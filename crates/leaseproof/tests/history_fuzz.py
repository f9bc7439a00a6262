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

Run from the repository (`cargo test` runs seeds 0..200 both ways;
`ci/nightly.sh` sweeps wider), and replay a finding:

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

INF = float("inf")
GUARDED, WORK = "guarded_row", "work_row"


# --------------------------------------------------------------------------
# Configuration: everything a seed varies, drawn in a fixed order.
# Durations are in ticks of the simulated world; the recorder's clock reads
# whole microseconds of `ticks_per_us` ticks each.
# --------------------------------------------------------------------------


class Config:
    """One seed's world. Only choices a correct service and an honest
    recorder can make are here: no switch models a broken store."""

    def __init__(self, rng):
        pick = rng.choice
        self.form = pick(["lease", "lease", "lock"])
        self.workers = rng.randint(2, 5)
        self.scopes = pick([["job"], ["job"], ["job", "other"], ["a", "b", "c"]])
        self.horizon = pick([4000, 10000, 20000, 40000, 80000])
        # The recorder floors the world's time to whole microseconds, as the
        # reference recorder floors nanoseconds: events closer than
        # `ticks_per_us` ticks tie. Every lifetime and TTL is a whole number
        # of microseconds, so flooring never makes a promise look longer.
        self.ticks_per_us = pick([1, 1, 1, 10, 100])
        self.ttl_ticks = pick([300, 800, 2000, 5000])
        self.ttl_us = max(1, self.ttl_ticks // self.ticks_per_us)
        # network: (minimum, mean of the exponential part); heavy tails make
        # requests land long after their caller timed out
        self.net = pick([(1, 20), (1, 50), (5, 200)])
        self.p_heavy = pick([0.0, 0.02, 0.1])
        self.p_drop = pick([0.0, 0.02, 0.1])  # request never arrives
        self.p_lost = pick([0.0, 0.02, 0.1])  # reply never arrives
        self.timeout = self.net[0] + self.net[1] * pick([3, 8, 30])
        self.p_retry = pick([0.0, 0.5])  # retry an unknown outcome at once
        self.p_crash = pick([0.0, 0.0005, 0.002])  # per tick and worker
        self.p_pause = pick([0.0, 0.05, 0.2])  # a GC pause while holding
        self.pause_len = pick([500, 3000, 10000])
        self.owner_per_incarnation = rng.random() < 0.2
        self.beliefs = rng.random() < 0.7
        self.reacquire = rng.random() < 0.1  # a holder asks for its scope again
        self.items_max = pick([1, 3, 5])
        self.items_zero = rng.random() < 0.1
        self.p_db_error = pick([0.0, 0.05])
        self.commit_len = pick([5, 100, 1000])  # ticks a commit's transaction runs
        self.revive = rng.random() < 0.3  # a late renewal revives a lease nobody took
        self.p_short_renewal = pick([0.0, 0.3])  # renewals asking half the TTL
        # lease store
        self.stamps = pick(["decision", "statement-start"])
        self.declare = pick(["truth", "none", "sound"])
        self.server_rate = pick([(1, 1), (1, 1), (1, 2), (3, 1)])  # server us per recorder us
        self.server_base = pick([0, 1700000000000000, 5])
        self.server_quantum = pick([1, 1, 10, 1000])  # a coarse server clock
        self.token_counter = pick(["scope", "global"])
        self.p_token_gap = pick([0.0, 0.1])
        self.renew_granted_at = pick(["grant", "own", "mix"])
        self.p_statement_delay = pick([0.0, 0.2, 0.5])  # start, then wait for the row
        self.statement_delay = pick([50, 500, 3000])
        self.p_row_hold = pick([0.0, 0.3])  # an exclusive statement holds the row a while
        self.row_hold = pick([20, 300])
        self.commit_recheck = rng.random() < 0.5  # else the fence's row lock alone
        self.release_bypasses_commit = rng.random() < 0.2  # FOR KEY SHARE fences
        self.written_at = pick(["insert", "fence"])
        # lock store
        self.lock_session = rng.random() < 0.3
        self.lock_tokens = rng.random() < 0.6
        self.lifetime_margin_us = pick([0, 0, 1, 5])
        self.commit_time_lock = rng.random() < 0.5
        self.p_write_refused_error = pick([0.0, 0.5])  # else a refused write is lost
        self.unfenced = rng.random() < 0.2  # careful workers, some declared unfenced
        # the recorder and the file
        self.read = {GUARDED: rng.random() < 0.8, WORK: rng.random() < 0.8}
        self.table_read_line = pick(["always", "when-empty"])
        self.row_commit_times = {GUARDED: pick(["all", "all", "none", "mixed"]),
                                 WORK: pick(["all", "none", "mixed"])}
        self.shuffle_rows = rng.random() < 0.3
        self.db_base = pick([0, 1700000000000000])
        self.db_quantum = pick([1, 1, 1000])
        self.local_skew = rng.random() < 0.5
        self.names = pick(["w", "w", "worker-", "wörker-"])
        self.blank_lines = rng.random() < 0.1
        self.shuffle_keys = rng.random() < 0.2
        self.compact = rng.random() < 0.5
        if self.form == "lease":
            self.unfenced = False  # a lease worker is fenced by its commits
        if self.unfenced:
            # Careful workers: they never pause, never renew and record when
            # they stop believing, before their promise ends.
            self.p_pause = 0.0
            self.beliefs = True

    def server_ttl_ticks(self):
        num, den = self.server_rate
        return self.ttl_us * self.ticks_per_us * den // num


# --------------------------------------------------------------------------
# The world: a discrete-event simulation on integer ticks.
# --------------------------------------------------------------------------


class Sim:
    def __init__(self):
        self.now = 0
        self._queue = []
        self._n = 0  # ties run in scheduling order: deterministic

    def at(self, t, fn):
        heapq.heappush(self._queue, (t, self._n, fn))
        self._n += 1

    def after(self, dt, fn):
        self.at(self.now + dt, fn)

    def run(self, until):
        while self._queue and self._queue[0][0] <= until:
            self.now, _, fn = heapq.heappop(self._queue)
            fn()


class Request:
    """One operation on its way: what the store sees of it."""

    def __init__(self, op, op_id, session, grant):
        self.op = op
        self.op_id = op_id
        self.session = session
        self.grant = grant  # op id of the acquisition it acts under (lock form)
        self.stamp0 = None


class Recorder:
    """An honest recorder: one clock for every worker, invoke stamped before
    sending, completion after receiving."""

    def __init__(self, sim, cfg):
        self.sim, self.cfg = sim, cfg
        self.events = []
        self.next_op_id = 0

    def record(self, worker, kind):
        stamp = self.sim.now // self.cfg.ticks_per_us
        self.events.append({
            "record": "event", "index": len(self.events), "worker": worker.name,
            "incarnation": worker.incarnation, "true_time_us": stamp,
            "local_time_us": worker.local_clock(stamp), "kind": kind,
        })


def fail(kind, rng, detail=None):
    reason = {"kind": kind}
    if kind == "error":
        reason["detail"] = detail or "error"
    elif rng.random() < 0.3:
        reason["detail"] = "note: " + kind  # optional for held and stale
    return {"outcome": "fail", "reason": reason}


class Database:
    """Rows as written; `seq` is drawn at the insert (bigserial), so rolled
    back inserts leave gaps. Rows keep their commit time for the file."""

    def __init__(self, rng):
        self.rng = rng
        self.seq = 0
        self.rows = {GUARDED: [], WORK: []}

    def next_seq(self):
        self.seq += 1 + (self.rng.random() < 0.1)
        return self.seq


class LeaseStore:
    """The reference lease: one row per scope. acquire/renew/release are
    exclusive statements; a commit's fence takes the row FOR SHARE, checks
    holder, token and expiry, and keeps the row until its transaction ends,
    so no takeover can happen while a fenced commit runs."""

    def __init__(self, world):
        self.world = world
        self.sim, self.cfg, self.rng, self.db = world.sim, world.cfg, world.rng, world.db
        self.scopes = {}
        self.tokens = {}
        self.global_token = 0

    def clock(self):
        cfg = self.cfg
        num, den = cfg.server_rate
        us = cfg.server_base + self.sim.now * num // (den * cfg.ticks_per_us)
        return us // cfg.server_quantum * cfg.server_quantum

    def scope(self, name):
        if name not in self.scopes:
            self.scopes[name] = {"holder": None, "shared": 0, "exclusive": False, "queue": []}
        return self.scopes[name]

    def next_token(self, scope):
        gap = 1 + (self.rng.random() < self.cfg.p_token_gap)
        if self.cfg.token_counter == "global":
            self.global_token += gap
            return self.global_token
        self.tokens[scope] = self.tokens.get(scope, 0) + gap
        return self.tokens[scope]

    def stamp(self, req):
        # statement-start: now() is the statement's start, used both to
        # decide and to stamp, however long the statement waited since
        return req.stamp0 if self.cfg.stamps == "statement-start" else self.clock()

    def submit(self, req, reply):
        req.stamp0 = self.clock()
        wait = 0
        if self.rng.random() < self.cfg.p_statement_delay:
            wait = self.rng.randint(1, self.cfg.statement_delay)
        self.sim.after(wait, lambda: self.wait_for_row(req, reply))

    def wait_for_row(self, req, reply):
        sc = self.scope(req.op["scope"])
        sc["queue"].append((req, reply))
        self.pump(sc)

    def may_start(self, sc, req):
        kind = req.op["op"]
        if kind == "commit" or sc["shared"] == 0:
            return True
        return kind == "release" and self.cfg.release_bypasses_commit

    def pump(self, sc):
        # Lock queues are not fair: any statement that may take the row does.
        while not sc["exclusive"]:
            ready = [i for i, (req, _) in enumerate(sc["queue"]) if self.may_start(sc, req)]
            if not ready:
                return
            req, reply = sc["queue"].pop(self.rng.choice(ready))
            if req.op["op"] == "commit":
                self.commit(sc, req, reply)
            else:
                sc["exclusive"] = True
                hold = self.rng.randint(1, self.cfg.row_hold) if self.rng.random() < self.cfg.p_row_hold else 0
                self.sim.after(hold, lambda req=req, reply=reply: self.exclusive(sc, req, reply))

    def exclusive(self, sc, req, reply):
        op, rng = req.op, self.rng
        s = self.stamp(req)
        h = sc["holder"]
        mine = op["op"] != "acquire" and h is not None and h["owner"] == op["owner"] and h["token"] == op["token"]
        if op["op"] == "acquire":
            if h is None or h["expires"] <= s:
                token = self.next_token(op["scope"])
                sc["holder"] = {"owner": op["owner"], "token": token, "granted": s, "expires": s + op["ttl_us"]}
                reply({"outcome": "ok", "result": {"result": "lease", "token": token, "owner": op["owner"],
                                                   "granted_at_us": s, "expires_at_us": s + op["ttl_us"]}})
            else:
                reply(fail("held", rng))
        elif op["op"] == "renew":
            if mine and (h["expires"] > s or self.cfg.revive):
                # Never shortens a lease; the TTL it applied is what it
                # reports (the doc reads expires - ttl as a live time).
                expires = max(h["expires"], s + op["ttl_us"]) if h["expires"] > s else s + op["ttl_us"]
                op["ttl_us"] = expires - s  # the recorder writes the applied TTL
                h["expires"] = expires
                granted = h["granted"]
                if self.cfg.renew_granted_at == "own" or (self.cfg.renew_granted_at == "mix" and rng.random() < 0.5):
                    granted = s
                reply({"outcome": "ok", "result": {"result": "lease", "token": h["token"], "owner": h["owner"],
                                                   "granted_at_us": granted, "expires_at_us": expires}})
            else:
                reply(fail("stale", rng))
        else:  # release
            if mine:
                sc["holder"] = None
                reply({"outcome": "ok", "result": {"result": "released", "released_at_us": s}})
            else:
                reply(fail("stale", rng))
        sc["exclusive"] = False
        self.pump(sc)

    def commit(self, sc, req, reply):
        op, rng, sim = req.op, self.rng, self.sim
        s = self.stamp(req)
        h = sc["holder"]
        if not (h is not None and h["owner"] == op["owner"] and h["token"] == op["token"] and h["expires"] > s):
            reply(fail("stale", rng))
            return
        sc["shared"] += 1
        duration = rng.randint(1, self.cfg.commit_len)
        rows = []
        error = rng.random() < self.cfg.p_db_error

        def insert(item):
            written = self.clock() if self.cfg.written_at == "insert" else s
            rows.append({"record": GUARDED, "seq": self.db.next_seq(), "scope": op["scope"], "owner": op["owner"],
                         "token": op["token"], "cycle_id": op["cycle_id"], "item": item, "written_at_us": written})

        for item in range(op["items"]):
            sim.after(duration * item // op["items"], lambda item=item: insert(item))

        def end():
            sc["shared"] -= 1
            if self.cfg.commit_recheck and not (sc["holder"] is h and h["expires"] > self.clock()):
                reply(fail("stale", rng))  # rolled back
            elif error:
                reply(fail("error", rng, "serialization failure, rolled back"))
            else:
                for row in rows:
                    row["_committed"] = self.clock()
                self.db.rows[GUARDED].extend(rows)
                reply({"outcome": "ok", "result": {"result": "committed", "committed_at_us": s}})
            self.pump(sc)

        sim.after(duration, end)


class LockStore:
    """A lock without server times: a TTL lock (it expires on the world's
    clock, never before the lifetime it promised) or a session lock (freed by release or when its
    session closes). Writes and commits go to a database that, standing in
    for a correct system, only lets them land while their grant is current;
    a commit is refused `stale` otherwise."""

    def __init__(self, world):
        self.world = world
        self.sim, self.cfg, self.rng, self.db = world.sim, world.cfg, world.rng, world.db
        self.holders = {}
        self.tokens = {}
        self.closed = set()

    def db_clock(self):
        cfg = self.cfg
        us = cfg.db_base + self.sim.now // cfg.ticks_per_us
        return us // cfg.db_quantum * cfg.db_quantum

    def live(self, h):
        return h is not None and (h["expiry"] is None or h["expiry"] > self.sim.now)

    def lifetime(self, ttl_us):
        return max(1, ttl_us - self.cfg.lifetime_margin_us)

    def submit(self, req, reply):
        op, rng, cfg = req.op, self.rng, self.cfg
        if op["op"] in ("write", "commit"):
            return self.database(req, reply)
        if req.session in self.closed:
            return  # its connection is gone: never processed
        scope = op["scope"]
        h = self.holders.get(scope)
        mine = h is not None and h["grant"] == req.grant
        q = cfg.ticks_per_us
        if op["op"] == "acquire":
            if self.live(h):
                return reply(fail("held", rng))
            token = None
            if cfg.lock_tokens:
                self.tokens[scope] = self.tokens.get(scope, 0) + 1 + (rng.random() < cfg.p_token_gap)
                token = self.tokens[scope]
            ttl = op["ttl_us"]
            self.holders[scope] = {"owner": op["owner"], "token": token, "grant": req.op_id, "session": req.session,
                                   "expiry": self.sim.now + ttl * q if ttl else None}
            result = {"result": "lock"}
            if token is not None:
                result["token"] = token
            if ttl:
                result["lifetime_us"] = self.lifetime(ttl)  # from the invocation: sent before we got it
            reply({"outcome": "ok", "result": result})
        elif op["op"] == "renew":
            # A late renewal of a lapsed lock nobody took revives it; the
            # history shows it invoked after its promise and bridges nothing.
            if mine and h["expiry"] is not None and (self.live(h) or cfg.revive):
                end = self.sim.now + op["ttl_us"] * q
                h["expiry"] = max(h["expiry"], end) if self.live(h) else end
                result = {"result": "lock"}
                if h["token"] is not None:
                    result["token"] = h["token"]
                result["lifetime_us"] = self.lifetime(op["ttl_us"])
                reply({"outcome": "ok", "result": result})
            else:
                reply(fail("stale", rng))
        else:  # release
            if mine:
                self.holders[scope] = None
                reply({"outcome": "ok", "result": {"result": "unlocked"}})
            else:
                reply(fail("stale", rng))

    def close_session(self, session):
        self.closed.add(session)
        for scope, h in self.holders.items():
            if h is not None and h["session"] == session:
                self.holders[scope] = None

    def database(self, req, reply):
        op, rng, cfg = req.op, self.rng, self.cfg
        if rng.random() < cfg.p_db_error:
            self.db.next_seq()  # a failed insert still drew its seq
            return reply(fail("error", rng, "database error, rolled back"))
        h = self.holders.get(op["scope"])
        current = self.live(h) and h["grant"] == req.grant
        now = self.db_clock()
        if op["op"] == "write":
            if not current:
                if rng.random() < cfg.p_write_refused_error:
                    return reply(fail("error", rng, "lock no longer held"))
                return  # a correct system never lands it; the caller times out
            for item in range(op["items"]):
                self.db.rows[WORK].append({"record": WORK, "seq": self.db.next_seq(), "scope": op["scope"],
                                           "owner": op["owner"], "cycle_id": op["cycle_id"], "item": item,
                                           "_committed": now})
            return reply({"outcome": "ok", "result": {"result": "written"}})
        if not (current and h["token"] == op["token"]):
            return reply(fail("stale", rng))
        for item in range(op["items"]):
            self.db.rows[GUARDED].append({"record": GUARDED, "seq": self.db.next_seq(), "scope": op["scope"],
                                          "owner": op["owner"], "token": op["token"], "cycle_id": op["cycle_id"],
                                          "item": item, "written_at_us": now, "_committed": now})
        result = {"result": "committed"}
        if cfg.commit_time_lock:
            result["committed_at_us"] = now
        reply({"outcome": "ok", "result": result})


# --------------------------------------------------------------------------
# Workers: each is a coroutine of commands ("call", op), ("note", kind),
# ("sleep", ticks); a crash abandons it (nothing more of that incarnation is
# recorded) and a restart begins a new incarnation.
# --------------------------------------------------------------------------


class Worker:
    def __init__(self, world, index):
        self.world = world
        self.name = f"{world.cfg.names}{index}"
        self.incarnation = 0
        self.epoch = 0  # bumped on crash and at the end: stale callbacks see it
        self.cycle = 0  # cycle ids name one operation of an owner: never reused
        self.session = 0
        self.belief = None
        self.down = False
        self.last_op_id = None
        rng = world.rng
        self.skew = (rng.randint(-5000, 5000), rng.choice([1, 1, 2])) if world.cfg.local_skew else (0, 1)

    @property
    def owner(self):
        return f"{self.name}.{self.incarnation}" if self.world.cfg.owner_per_incarnation else self.name

    def session_id(self):
        return (self.name, self.incarnation, self.session)

    def local_clock(self, stamp):
        return stamp * self.skew[1] + self.skew[0]

    def next_cycle(self):
        self.cycle += 1
        return self.cycle

    def start(self):
        self.epoch += 1
        self.belief = None
        self.session += 1
        self.coroutine = self.world.behaviour(self)
        epoch = self.epoch
        self.world.sim.after(0, lambda: self.step(epoch, None))

    def note(self, kind):
        self.world.rec.record(self, kind)

    def step(self, epoch, value):
        if epoch != self.epoch:
            return
        while True:
            command = self.coroutine.send(value)
            value = None
            if command[0] == "note":
                self.note(command[1])
            elif command[0] == "sleep":
                self.world.sim.after(max(1, command[1]), lambda: self.step(epoch, None))
                return
            else:
                self.call(epoch, command[1])
                return

    def call(self, epoch, op):
        world = self.world
        sim, rng, cfg = world.sim, world.rng, world.cfg
        op_id = world.rec.next_op_id
        world.rec.next_op_id += 1
        self.last_op_id = op_id
        grant = self.belief["grant"] if self.belief is not None else None
        req = Request(op, op_id, self.session_id(), grant if op["op"] != "acquire" else None)
        self.note({"type": "invoke", "op_id": op_id, "op": op})  # before sending
        done = []

        def complete(outcome):
            if epoch != self.epoch or done:
                return
            done.append(outcome)
            self.note({"type": "complete", "op_id": op_id, "outcome": outcome})  # after receiving
            self.step(epoch, outcome)

        def reply(outcome):
            if rng.random() >= cfg.p_lost:
                sim.after(world.delay(), lambda: complete(outcome))

        if rng.random() >= cfg.p_drop:
            sim.after(world.delay(), lambda: world.store.submit(req, reply))
        sim.after(cfg.timeout, lambda: complete({"outcome": "unknown", "reason": "timeout"}))

    def crash(self):
        world = self.world
        if self.down:
            return
        self.down = True
        self.epoch += 1
        if world.cfg.form == "lock" and world.cfg.lock_session:
            # the store notices the dead connection a little later
            session = self.session_id()
            world.sim.after(world.rng.randint(1, 200), lambda: world.store.close_session(session))

        def restart():
            self.incarnation += 1
            self.down = False
            self.start()

        world.sim.after(world.rng.randint(100, 3000), restart)


class World:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.cfg = Config(self.rng)
        self.sim = Sim()
        self.rec = Recorder(self.sim, self.cfg)
        self.db = Database(self.rng)
        self.store = LeaseStore(self) if self.cfg.form == "lease" else LockStore(self)
        self.workers = [Worker(self, i) for i in range(self.cfg.workers)]

    def delay(self):
        lo, mean = self.cfg.net
        d = lo + int(self.rng.expovariate(1.0 / mean))
        if self.rng.random() < self.cfg.p_heavy:
            d += self.rng.randint(0, 5 * self.cfg.timeout)  # lands after its caller gave up
        return d

    def behaviour(self, w):
        return self.lease_worker(w) if self.cfg.form == "lease" else self.lock_worker(w)

    def pause(self):
        if self.rng.random() < self.cfg.p_pause:
            return self.rng.randint(1, self.cfg.pause_len)
        return 0

    def renewal_ttl(self):
        ttl = self.cfg.ttl_us
        return max(1, ttl // 2) if self.rng.random() < self.cfg.p_short_renewal else ttl

    # ---------------------------------------------------------------- lease
    def lease_worker(self, w):
        rng, cfg, sim = self.rng, self.cfg, self.sim

        def end_belief(reason):
            if cfg.beliefs:
                yield ("note", {"type": "belief_end", "scope": w.belief["scope"], "token": w.belief["token"], "reason": reason})
            w.belief = None

        while True:
            if w.belief is None:
                scope = rng.choice(cfg.scopes)
                while True:
                    invoked = sim.now
                    out = yield ("call", {"op": "acquire", "scope": scope, "owner": w.owner, "ttl_us": cfg.ttl_us})
                    if out["outcome"] != "unknown" or rng.random() >= cfg.p_retry:
                        break
                if out["outcome"] == "ok":
                    token = out["result"]["token"]
                    w.belief = {"scope": scope, "token": token, "grant": None,
                                "deadline": invoked + cfg.server_ttl_ticks()}
                    if cfg.beliefs:
                        yield ("note", {"type": "belief_start", "scope": scope, "token": token})
                else:
                    yield ("sleep", rng.randint(1, cfg.ttl_ticks // 4 + 1))
                continue
            b = w.belief
            pause = self.pause()
            if pause:
                yield ("sleep", pause)  # and carries on as if nothing happened
            if sim.now >= b["deadline"] and rng.random() < 0.5:
                yield from end_belief("expired")
                continue
            x = rng.random()
            if x < 0.45:
                while True:
                    out = yield ("call", {"op": "commit", "scope": b["scope"], "owner": w.owner, "token": b["token"],
                                          "cycle_id": w.next_cycle(),
                                          "items": rng.randint(0 if cfg.items_zero else 1, cfg.items_max)})
                    # a retry is a new cycle
                    if out["outcome"] == "ok" or out["outcome"] == "fail" and out["reason"]["kind"] == "stale":
                        break
                    if rng.random() >= cfg.p_retry:
                        break
                if out["outcome"] == "fail" and out["reason"]["kind"] == "stale":
                    yield from end_belief("stale")
            elif x < 0.7:
                invoked = sim.now
                out = yield ("call", {"op": "renew", "scope": b["scope"], "owner": w.owner, "token": b["token"],
                                      "ttl_us": self.renewal_ttl()})
                if out["outcome"] == "ok":
                    b["deadline"] = invoked + cfg.server_ttl_ticks()
                elif out["outcome"] == "fail":
                    yield from end_belief("lost")
            elif x < 0.85:
                yield from end_belief("released")
                yield ("call", {"op": "release", "scope": b["scope"], "owner": w.owner, "token": b["token"]})
                yield ("sleep", rng.randint(1, 300))
            elif x < 0.9 and cfg.reacquire:
                out = yield ("call", {"op": "acquire", "scope": b["scope"], "owner": w.owner, "ttl_us": cfg.ttl_us})
                if out["outcome"] == "ok":
                    yield from end_belief("reacquired")
                    w.belief = {"scope": b["scope"], "token": out["result"]["token"], "grant": None,
                                "deadline": sim.now + cfg.server_ttl_ticks()}
                    if cfg.beliefs:
                        yield ("note", {"type": "belief_start", "scope": b["scope"], "token": w.belief["token"]})
            else:
                yield ("sleep", rng.randint(1, 200))

    # ----------------------------------------------------------------- lock
    def lock_worker(self, w):
        rng, cfg, sim = self.rng, self.cfg, self.sim
        ttl = 0 if cfg.lock_session else cfg.ttl_us
        q = cfg.ticks_per_us

        def end_belief(reason):
            b = w.belief
            if cfg.beliefs and not b.get("ended"):
                b["ended"] = True
                yield ("note", {"type": "belief_end", "scope": b["scope"], "token": b["token"], "reason": reason})

        def release(reason):
            # the hold ends when the release is invoked (or at the belief's end)
            b = w.belief
            yield from end_belief(reason)
            out = yield ("call", {"op": "release", "scope": b["scope"], "owner": w.owner, "token": b["token"]})
            w.belief = None
            return out

        def reconnect():
            # A session lock lives with its connection: drop it (after
            # letting go of the lock) and open a new one.
            if w.belief is not None:
                yield from release("session dropped")
            old = w.session_id()
            w.session += 1
            sim.after(1 + rng.randint(0, 100), lambda: self.store.close_session(old))

        while True:
            if w.belief is None:
                scope = rng.choice(cfg.scopes)
                invoked = sim.now
                out = yield ("call", {"op": "acquire", "scope": scope, "owner": w.owner, "ttl_us": ttl})
                if out["outcome"] == "ok":
                    lifetime = out["result"].get("lifetime_us")
                    w.belief = {"scope": scope, "token": out["result"].get("token", 0), "grant": w.last_op_id,
                                "deadline": invoked + lifetime * q if lifetime else INF}
                    # a careful worker believes only with time left, and stops in time
                    if cfg.unfenced and sim.now + q >= w.belief["deadline"]:
                        w.belief["ended"] = True  # never believed
                        yield from release("no time left")
                        continue
                    if cfg.beliefs:
                        yield ("note", {"type": "belief_start", "scope": scope, "token": w.belief["token"]})
                    if cfg.unfenced and lifetime:
                        self.end_belief_in_time(w, w.belief)
                else:
                    if out["outcome"] == "unknown" and cfg.lock_session:
                        yield from reconnect()  # it may hold the lock on this session
                    yield ("sleep", rng.randint(1, cfg.ttl_ticks // 4 + 1))
                continue
            b = w.belief
            pause = self.pause()
            if pause:
                yield ("sleep", pause)
            if cfg.unfenced and sim.now + 2 * cfg.timeout >= b["deadline"]:
                yield from release("expiring")
                continue
            x = rng.random()
            if x < 0.3:
                items = rng.randint(0 if cfg.items_zero else 1, cfg.items_max)
                while True:
                    out = yield ("call", {"op": "write", "scope": b["scope"], "owner": w.owner,
                                          "cycle_id": w.next_cycle(), "items": items})
                    if out["outcome"] != "unknown" or rng.random() >= cfg.p_retry:
                        break
            elif x < 0.45 and cfg.lock_tokens:
                out = yield ("call", {"op": "commit", "scope": b["scope"], "owner": w.owner, "token": b["token"],
                                      "cycle_id": w.next_cycle(),
                                      "items": rng.randint(0 if cfg.items_zero else 1, cfg.items_max)})
                if out["outcome"] == "fail" and out["reason"]["kind"] == "stale":
                    yield from end_belief("stale")
                    w.belief = None
            elif x < 0.65 and not cfg.lock_session and not cfg.unfenced:
                invoked = sim.now
                out = yield ("call", {"op": "renew", "scope": b["scope"], "owner": w.owner, "token": b["token"],
                                      "ttl_us": self.renewal_ttl()})
                if out["outcome"] == "ok":
                    b["deadline"] = max(b["deadline"], invoked + out["result"]["lifetime_us"] * q)
                elif out["outcome"] == "fail":
                    yield from end_belief("lost")
                    w.belief = None
            elif x < 0.8:
                out = yield from release("released")
                if out["outcome"] == "unknown" and cfg.lock_session:
                    yield from reconnect()
                yield ("sleep", rng.randint(1, 300))
            elif x < 0.85 and cfg.lock_session:
                yield from reconnect()
            else:
                yield ("sleep", rng.randint(1, 200))

    def end_belief_in_time(self, w, b):
        # A careful (unfenced) worker's timer ends its belief before the
        # promise can end, at least a microsecond early.
        epoch = w.epoch
        guard = self.cfg.ticks_per_us * self.rng.randint(1, 3)

        def fire():
            if epoch == w.epoch and not b.get("ended"):
                b["ended"] = True
                w.note({"type": "belief_end", "scope": b["scope"], "token": b["token"], "reason": "deadline"})

        self.sim.at(max(self.sim.now, b["deadline"] - guard), fire)

    # ------------------------------------------------------------------ run
    def run(self):
        cfg, sim, rng = self.cfg, self.sim, self.rng
        for w in self.workers:
            t = rng.randint(0, 50)
            sim.at(t, w.start)
            if cfg.p_crash:
                while True:
                    t += int(rng.expovariate(cfg.p_crash)) + 1
                    if t >= cfg.horizon:
                        break
                    sim.at(t, w.crash)
        sim.run(cfg.horizon)
        # The recording stops; requests in flight still land (their rows are
        # read back) but no completion is recorded: unknown outcomes.
        for w in self.workers:
            w.epoch += 1
        sim.run(cfg.horizon * 10 + 100000)
        return self.history()

    def history(self):
        cfg, rng = self.cfg, self.rng
        design = None
        if cfg.form == "lease" and cfg.declare != "none":
            # the truth, or the sound rule (true of any store)
            design = {"record": "design", "grant_stamps": cfg.stamps if cfg.declare == "truth" else "statement-start"}
        if cfg.unfenced:
            design = design or {"record": "design"}
            chosen = [w.name for w in self.workers if rng.random() < 0.7] or [self.workers[0].name]
            design["unfenced_workers"] = chosen
        elif cfg.form == "lock" and rng.random() < 0.1:
            design = {"record": "design"}  # both fields are optional
        tables = {}
        for table in (GUARDED, WORK):
            rows = []
            for row in sorted(self.db.rows[table], key=lambda r: r["seq"]):
                row = dict(row)
                committed = row.pop("_committed")
                mode = cfg.row_commit_times[table]
                coin = rng.random() < 0.5  # drawn for every row: the stream does not depend on the mode
                if mode == "all" or mode == "mixed" and coin:
                    row["committed_at_us"] = committed
                rows.append(row)
            tables[table] = {"read": cfg.read[table], "rows": rows}
        return History(cfg, design, self.rec.events, tables)


# --------------------------------------------------------------------------
# The file: a history as data, plants, and rendering.
# --------------------------------------------------------------------------


class History:
    def __init__(self, cfg, design, events, tables):
        self.cfg = cfg
        self.design = design
        self.events = events
        self.tables = tables  # table -> {"read": bool, "rows": [...]}; unread tables are not written

    def event(self, worker, t, kind):
        self.events.append({"record": "event", "index": len(self.events), "worker": worker, "incarnation": 0,
                            "true_time_us": t, "local_time_us": t, "kind": kind})

    def lines(self):
        out = [self.design] if self.design else []
        out.extend(self.events)
        for table in (GUARDED, WORK):
            t = self.tables[table]
            if t["read"] and (self.cfg.table_read_line == "always" or not t["rows"]):
                out.append({"record": "table_read", "table": table})
        rows = [row for t in self.tables.values() if t["read"] for row in t["rows"]]
        return out, rows

    def render(self, rng):
        cfg = self.cfg
        head, rows = self.lines()
        if cfg.shuffle_rows:
            rng.shuffle(rows)  # `seq`, not the line order, is the order of writing
        text = []
        separators = (",", ":") if cfg.compact else (", ", ": ")
        for rec in head + rows:
            if cfg.shuffle_keys:
                rec = shuffled(rec, rng)
            text.append(json.dumps(rec, ensure_ascii=False, separators=separators) + "\n")
            if cfg.blank_lines and rng.random() < 0.05:
                text.append("\n")
        return "".join(text), len(head) + len(rows)


def shuffled(value, rng):
    if isinstance(value, dict):
        items = [(k, shuffled(v, rng)) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)
    return value


# Plants: each appends an episode in one of the history's scopes between two
# fresh workers, after everything else has settled (later on the common
# clock than any promise, later on the server's clock than any grant), with
# tokens above any in the file, so that exactly the planted violation is in
# the file, and the document's rule that convicts it needs nothing else.


def server_times(history):
    values = [0]
    for ev in history.events:
        k = ev["kind"]
        if k["type"] == "complete" and k["outcome"]["outcome"] == "ok":
            values += [v for key, v in k["outcome"]["result"].items() if key.endswith("_us") and key != "lifetime_us"]
    for t in history.tables.values():
        for row in t["rows"]:
            values += [row.get("written_at_us", 0), row.get("committed_at_us", 0)]
    return max(values)


def plant(history, rng):
    """Plant one violation in `history`; return the invariant it breaks."""
    cfg = history.cfg
    events = history.events
    scope = rng.choice(cfg.scopes)
    tokens = [0] + [ev["kind"]["outcome"]["result"].get("token", 0) for ev in events
                    if ev["kind"]["type"] == "complete" and ev["kind"]["outcome"]["outcome"] == "ok"]
    k = max(tokens) + 10
    lifetimes = [ev["kind"]["outcome"]["result"].get("lifetime_us", 0) for ev in events
                 if ev["kind"]["type"] == "complete" and ev["kind"]["outcome"]["outcome"] == "ok"]
    t = max([0] + [ev["true_time_us"] for ev in events]) + max([cfg.ttl_us] + lifetimes) + 1000
    s0 = server_times(history) + 10 * cfg.ttl_us + 10**6
    seqs = iter(range(max([0] + [row["seq"] for tb in history.tables.values() for row in tb["rows"]]) + 1, 10**18))
    op_ids = iter(range(max([-1] + [ev["kind"].get("op_id", -1) for ev in events]) + 1, 10**9))
    lease = cfg.form == "lease"
    tokens_given = lease or cfg.lock_tokens
    session = cfg.form == "lock" and cfg.lock_session
    a, b = "planted-a", "planted-b"
    ttl = 1000
    kinds = ["I1", "I3", "I4"] + (["I2"] if tokens_given else [])
    kind = rng.choice(kinds)

    def call(worker, at, op, outcome):
        op_id = next(op_ids)
        history.event(worker, at, {"type": "invoke", "op_id": op_id, "op": op})
        history.event(worker, at + 5, {"type": "complete", "op_id": op_id, "outcome": outcome})

    def ok(result):
        return {"outcome": "ok", "result": result}

    def acquire(worker, at, token, granted=None, lifetime=ttl):
        op = {"op": "acquire", "scope": scope, "owner": worker, "ttl_us": 0 if session else ttl}
        if lease:
            result = {"result": "lease", "token": token, "owner": worker, "granted_at_us": granted,
                      "expires_at_us": granted + ttl}
        else:
            result = {"result": "lock"}
            if cfg.lock_tokens:
                result["token"] = token
            if not session:
                result["lifetime_us"] = lifetime
        call(worker, at, op, ok(result))

    def release(worker, at, token, released=None):
        result = {"result": "released", "released_at_us": released} if lease else {"result": "unlocked"}
        call(worker, at, {"op": "release", "scope": scope, "owner": worker, "token": token if tokens_given else 0},
             ok(result))

    def commit_rows(owner, token, cycle, items, written, present):
        tb = history.tables[GUARDED]
        tb["read"] = True
        for item in range(present):
            tb["rows"].append({"record": GUARDED, "seq": next(seqs), "scope": scope, "owner": owner,
                               "token": token, "cycle_id": cycle, "item": item, "written_at_us": written,
                               "committed_at_us": written})

    if kind == "I1":
        if lease:
            # b is granted inside a's grant; a's renewal, invoked after b's
            # grant was acknowledged, finds a's grant live: a proven overlap.
            acquire(a, t, k, s0)
            acquire(b, t + 20, k + 1, s0 + ttl // 2)
            call(a, t + 40, {"op": "renew", "scope": scope, "owner": a, "token": k, "ttl_us": ttl},
                 ok({"result": "lease", "token": k, "owner": a, "granted_at_us": s0,
                     "expires_at_us": s0 + ttl * 3 // 4 + ttl}))
        else:
            acquire(a, t, k)
            acquire(b, t + 100, k + 1)  # inside a's promise
            if session:
                release(a, t + 200, k)
                release(b, t + 300, k + 1)
    elif kind == "I2":
        acquire(a, t, k + 5, s0)
        release(a, t + 20, k + 5, s0 + 100)
        acquire(b, t + 40, k + 3, s0 + 200)  # after a's release, a smaller token
    elif kind == "I3":
        if lease:
            # a's commit, fenced in its grant, lands after b took over and
            # wrote under a larger token: a smaller token after a larger one
            acquire(a, t, k, s0)
            commit_a = next(op_ids)
            history.event(a, t + 10, {"type": "invoke", "op_id": commit_a, "op": {
                "op": "commit", "scope": scope, "owner": a, "token": k, "cycle_id": 1, "items": 1}})
            acquire(b, t + 20, k + 1, s0 + ttl + 10)  # after a's grant expired
            call(b, t + 40, {"op": "commit", "scope": scope, "owner": b, "token": k + 1, "cycle_id": 1, "items": 1},
                 ok({"result": "committed", "committed_at_us": s0 + ttl + 20}))
            history.event(a, t + 60, {"type": "complete", "op_id": commit_a,
                                      "outcome": ok({"result": "committed", "committed_at_us": s0 + 100})})
            commit_rows(b, k + 1, 1, 1, s0 + ttl + 20, 1)
            commit_rows(a, k, 1, 1, s0 + ttl + 30, 1)
        else:
            # a writes while b certainly holds the lock
            acquire(a, t, k, lifetime=100)
            if session:
                release(a, t + 50, k)
            acquire(b, t + 200, k + 1)
            call(a, t + 300, {"op": "write", "scope": scope, "owner": a, "cycle_id": 1, "items": 1},
                 ok({"result": "written"}))
            if session:
                release(b, t + 400, k + 1)
            tb = history.tables[WORK]
            if tb["read"]:
                tb["rows"].append({"record": WORK, "seq": next(seqs), "scope": scope, "owner": a, "cycle_id": 1,
                                   "item": 0})
    else:  # I4: an ok commit (or write) whose row is missing from a table that was read
        victim = pick_committed(history, rng)
        if victim is not None:
            table, rows = victim
            history.tables[table]["read"] = True
            history.tables[table]["rows"].remove(rng.choice(rows))
        elif tokens_given:
            acquire(a, t, k, s0)
            result = {"result": "committed"}
            if lease:
                result["committed_at_us"] = s0 + 10
            call(a, t + 20, {"op": "commit", "scope": scope, "owner": a, "token": k, "cycle_id": 1, "items": 2},
                 ok(result))
            commit_rows(a, k, 1, 2, s0 + 10, 1)
        else:
            acquire(a, t, k)
            call(a, t + 20, {"op": "write", "scope": scope, "owner": a, "cycle_id": 1, "items": 2},
                 ok({"result": "written"}))
            history.tables[WORK]["read"] = True
            history.tables[WORK]["rows"].append(
                {"record": WORK, "seq": next(seqs), "scope": scope, "owner": a, "cycle_id": 1, "item": 0})
    return kind


def pick_committed(history, rng):
    """Rows of one commit or write the file reports ok, if any."""
    ops, found = {}, []
    for ev in history.events:
        k = ev["kind"]
        if k["type"] == "invoke" and k["op"]["op"] in ("commit", "write"):
            ops[k["op_id"]] = k["op"]
        elif k["type"] == "complete" and k["op_id"] in ops and k["outcome"]["outcome"] == "ok":
            op = ops[k["op_id"]]
            table = GUARDED if op["op"] == "commit" else WORK
            rows = [r for r in history.tables[table]["rows"]
                    if r["owner"] == op["owner"] and r["cycle_id"] == op["cycle_id"]]
            if rows:
                found.append((table, rows))
    return rng.choice(found) if found else None


def generate(seed, planted=False):
    """The file for one seed: (text, number of lines, planted invariant or None)."""
    world = World(seed)
    history = world.run()
    kind = plant(history, world.rng) if planted else None
    text, n = history.render(world.rng)
    return text, n, kind


# --------------------------------------------------------------------------
# The sweep.
# --------------------------------------------------------------------------

VIOLATION = re.compile(r"^\s+(I\d|B|H)\b.*$", re.M)


def judge(binary, path):
    try:
        r = subprocess.run([binary, "check", path], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "timeout", "", "(no answer in 600 s)"
    return r.returncode, r.stdout, r.stderr


def first_line(stdout, stderr):
    m = VIOLATION.search(stdout)
    if m:
        return m.group(0).strip()
    for line in (stderr + "\n" + stdout).splitlines():
        if line.strip():
            return line.strip()
    return "(no output)"


def parse_seeds(text):
    a, _, b = text.partition("..")
    return range(int(a), int(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", help="the leaseproof executable")
    ap.add_argument("--seeds", default="0..200", help="A..B: seeds A (inclusive) to B (exclusive)")
    ap.add_argument("--keep", help="where to keep failing files (default: a new temp dir)")
    ap.add_argument("--plant", action="store_true", help="plant one real violation per seed; require conviction")
    ap.add_argument("--emit", type=int, metavar="SEED", help="write one seed's history to stdout and stop")
    args = ap.parse_args()

    if args.emit is not None:
        sys.stdout.write(generate(args.emit, args.plant)[0])
        return 0
    if not args.binary:
        ap.error("--binary is required (or --emit SEED)")

    work = tempfile.mkdtemp(prefix="history-fuzz-")
    keep = args.keep
    histories = lines = bad = 0
    started = time.time()
    try:
        for seed in parse_seeds(args.seeds):
            text, n, kind = generate(seed, args.plant)
            path = os.path.join(work, f"seed-{seed}.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            code, out, err = judge(args.binary, path)
            histories += 1
            lines += n
            if kind is None:
                clean = code == 0
            else:  # the plant must be convicted, of what was planted
                clean = code == 1 and any(m.group(1) == kind for m in VIOLATION.finditer(out))
            if not clean:
                bad += 1
                if keep is None:
                    keep = tempfile.mkdtemp(prefix="history-fuzz-keep-")
                    print(f"keeping failing files in {keep}", flush=True)
                os.makedirs(keep, exist_ok=True)
                shutil.copy(path, os.path.join(keep, f"seed-{seed}.jsonl"))
                what = f" (planted {kind})" if kind else ""
                print(f"seed {seed}: exit {code}{what}: {first_line(out, err)}", flush=True)
            os.remove(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if bad:
        print(f"kept in {keep}; replay one with --emit SEED" + (" --plant" if args.plant else ""))
    print(f"{time.time() - started:.1f} s")
    # In --plant mode "not clean" counts plants not convicted as planted.
    print(f"{histories} histories, {lines} lines, {bad} not clean")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
