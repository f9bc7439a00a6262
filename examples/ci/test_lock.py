"""Your lock, judged by leaseproof on every push (examples/ci/github-actions.yml).

`my_lock_client.py` is your lock behind leaseproof's client protocol, a few
lines with `leaseproof.client` (docs/client-protocol.md). Each seed starts
three of its processes contending for one lock, strikes them with faults
drawn from the seed, and judges what they did.
"""

import sys

import pytest


@pytest.mark.leaseproof(seeds="0..5", faults="all")
def test_my_lock_keeps_its_promises(leaseproof):
    leaseproof.clients(f"{sys.executable} my_lock_client.py")


@pytest.mark.leaseproof(seeds="0..5", faults="pause-long")
def test_a_holder_paused_past_its_ttl_writes_nothing_stale(leaseproof):
    leaseproof.clients(f"{sys.executable} my_lock_client.py")
