"""`leaseproof.client`, the protocol speaker, driven over its stdin and stdout
as leaseproof drives a client: each outcome of a handler becomes its answer."""

import json
import subprocess
import sys
import textwrap

import pytest

LOCKS = {
    "plain": """
        class Lock:
            def acquire(self, request):
                if request["table"] == "held":
                    raise lp.Held("taken")
                return {"lifetime_ms": request["ttl_ms"]}
            def write(self, request):
                raise lp.Stale("not ours")
            def release(self, request):
                raise ConnectionError("reply lost")
    """,
    "async": """
        class Lock:
            async def acquire(self, request):
                if request["table"] == "held":
                    raise lp.Held("taken")
                return {"lifetime_ms": request["ttl_ms"]}
            async def write(self, request):
                raise lp.Stale("not ours")
            async def release(self, request):
                raise ConnectionError("reply lost")
    """,
}


def converse(tmp_path, lock_source, requests, **hello):
    script = tmp_path / "client.py"
    script.write_text("from leaseproof import client as lp\n" + textwrap.dedent(lock_source)
                      + f"\nlp.main(Lock(), name='test lock', **{hello!r})\n")
    lines = "".join(json.dumps({"msg_id": i, **request}) + "\n" for i, request in enumerate(requests))
    done = subprocess.run([sys.executable, str(script)], input=lines, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("kind", sorted(LOCKS))
def test_each_outcome_of_a_handler_is_its_answer(tmp_path, kind):
    hello, *answers = converse(tmp_path, LOCKS[kind], [
        {"type": "acquire", "table": "free", "owner": "w1.0", "ttl_ms": 3000},
        {"type": "acquire", "table": "held", "owner": "w1.0", "ttl_ms": 3000},
        {"type": "write", "table": "free", "owner": "w1.0", "token": None, "cycle_id": 1, "items": 2},
        {"type": "release", "table": "free", "owner": "w1.0"},
        {"type": "is_locked", "table": "free"},
    ], renew=False)
    assert hello == {"type": "hello", "protocol": "leaseproof-client/1", "name": "test lock", "renew": False}
    assert answers[0] == {"type": "ok", "in_reply_to": 0, "lifetime_ms": 3000}
    assert answers[1] == {"type": "fail", "in_reply_to": 1, "reason": "held", "text": "taken"}
    assert answers[2] == {"type": "fail", "in_reply_to": 2, "reason": "stale", "text": "not ours"}
    # An exception of no definite meaning: the release may have taken effect.
    assert answers[3] == {"type": "unknown", "in_reply_to": 3, "text": "ConnectionError: reply lost"}
    assert answers[4]["reason"] == "error" and "not supported" in answers[4]["text"]


def test_a_lease_says_what_its_grant_stamps_mean(tmp_path):
    hello, = converse(tmp_path, LOCKS["plain"], [], renew=True, grant_stamps="decision")
    assert hello["renew"] is True and hello["grant_stamps"] == "decision"


def test_a_lock_mixing_plain_and_async_handlers_is_refused(tmp_path):
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent("""
        from leaseproof import client as lp
        class Lock:
            def acquire(self, request): pass
            async def release(self, request): pass
        lp.main(Lock(), name="mixed")
    """))
    done = subprocess.run([sys.executable, str(script)], input="", capture_output=True, text=True)
    assert done.returncode != 0 and "all coroutines or all plain functions" in done.stderr


def test_a_clients_own_timeout_stays_below_a_quarter_of_the_hang_budget():
    from leaseproof import client as lp

    for ttl_ms in (500, 3000, 10000):
        assert lp.own_timeout_s(ttl_ms) * 4 < (4 * ttl_ms + 5000) / 1000
