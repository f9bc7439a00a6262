"""Three threads share a lock with a TTL and write rows under it; the run is
recorded with `leaseproof.recorder` and judged by `leaseproof check`.

    pip install ./python      # or PYTHONPATH=python/src, from the repository
    python3 examples/recorders/python/example.py run.jsonl            # a correct lock
    python3 examples/recorders/python/example.py run.jsonl --broken   # check-then-set
    leaseproof check run.jsonl

The lock is a toy kept in memory (its "store" has its own clock and commit
log), so the example needs nothing but the package. `--broken` reads the lock,
pauses, then takes it without looking again — the read-then-write race real
locks get wrong — and `check` proves two holders at once.
"""

import sys
import threading
import time

from leaseproof.recorder import Recorder

TTL_US = 200_000
SCOPE = "nightly-report"


class Store:
    """A lock with a TTL and a table of rows, on the store's own clock."""

    def __init__(self, broken):
        self.broken = broken
        self.mutex = threading.Lock()
        self.holder = None  # (owner, token, expires_at_us)
        self.next_token = 1
        self.rows = []  # (seq, owner, cycle_id, item, committed_at_us)

    @staticmethod
    def now_us():
        return time.monotonic_ns() // 1_000

    def _free(self):
        return self.holder is None or self.holder[2] <= self.now_us()

    def try_lock(self, owner):
        if self.broken:
            with self.mutex:
                free = self._free()
            time.sleep(0.002)  # another thread may look in the meantime
            if not free:
                return None
            with self.mutex:
                return self._take(owner)
        with self.mutex:
            return self._take(owner) if self._free() else None

    def _take(self, owner):
        token = self.next_token
        self.next_token += 1
        self.holder = (owner, token, self.now_us() + TTL_US)
        return token

    def unlock(self, owner, token):
        with self.mutex:
            if self.holder and self.holder[:2] == (owner, token):
                self.holder = None

    def insert(self, owner, cycle_id, items):
        with self.mutex:
            for item in range(items):
                self.rows.append((len(self.rows) + 1, owner, cycle_id, item, self.now_us()))


def worker(name, store, history, rounds):
    cycle = 0
    for _ in range(rounds):
        op = history.invoke(name, Recorder.acquire(SCOPE, name, TTL_US))
        token = store.try_lock(name)
        if token is None:
            history.fail(name, op, "held")
            time.sleep(0.001)
            continue
        history.ok(name, op, Recorder.lock(token=token, lifetime_us=TTL_US))
        history.belief_start(name, SCOPE, token)
        cycle += 1
        op = history.invoke(name, Recorder.write(SCOPE, name, cycle, 2))
        store.insert(name, cycle, 2)
        history.ok(name, op, Recorder.WRITTEN)
        time.sleep(0.003)
        history.belief_end(name, SCOPE, "released", token)
        op = history.invoke(name, Recorder.release(SCOPE, name, token))
        store.unlock(name, token)
        history.ok(name, op, Recorder.UNLOCKED)
        time.sleep(0.002)  # let the others have a turn


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: example.py OUT.jsonl [--broken]")
    path, broken = sys.argv[1], "--broken" in sys.argv[2:]
    store = Store(broken)
    # One clock for the harness stamps and the store: the example's rows'
    # commit times and events share it (in a real program the rows carry the
    # database's commit times, which the checker only orders among rows).
    history = Recorder()
    threads = [
        threading.Thread(target=worker, args=(f"w{index}", store, history, 40))
        for index in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    history.table_read("work_row")
    for seq, owner, cycle_id, item, committed_at_us in store.rows:
        history.work_row(seq, SCOPE, owner, cycle_id, item, committed_at_us)
    history.save(path)
    print(f"wrote {path}: {len(store.rows)} rows")


if __name__ == "__main__":
    main()
