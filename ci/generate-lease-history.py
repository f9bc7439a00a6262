#!/usr/bin/env python3
"""A long history of a correct lease, for timing the judges.

Usage: generate-lease-history.py OPERATIONS FILE [SEED]

Four workers on one scope; the store decides with its own clock (decision
stamps, microseconds, granted_at kept on re-acquisition); 3 % of replies
are lost. Judge it with `leaseproof check --model --stamp-rounding-us 0
--no-restamps FILE` (the model) or `leaseproof check FILE` (the rules)."""

import heapq
import json
import random
import sys

random.seed(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
N = int(sys.argv[1]); out = open(sys.argv[2], 'w')
W = 4; OFF = 10**9; TTL = 50_000
row = None; maxtok = 0
events = []  # (time, seq, worker, kind)
seq = 0
def ev(t, w, kind):
    global seq; seq += 1; events.append((t, seq, w, kind))
known = [None]*W; nxt = [random.randrange(1000) for _ in range(W)]
opid = 0
q = [(nxt[w], w) for w in range(W)]; heapq.heapify(q)
while opid < N:
    t, w = heapq.heappop(q)
    owner = f"w{w}"
    if known[w] is None: op = {"op":"acquire","scope":"job","owner":owner,"ttl_us":TTL}
    else:
        r = random.random()
        op = {"op":"renew","scope":"job","owner":owner,"token":known[w],"ttl_us":TTL} if r < .6 else ({"op":"release","scope":"job","owner":owner,"token":known[w]} if r < .8 else {"op":"acquire","scope":"job","owner":owner,"ttl_us":TTL})
    ev(t, w, {"type":"invoke","op_id":opid,"op":op})
    eff = t + random.randrange(1, 300); now = eff + OFF
    live = row is not None and row['exp'] > now
    res = None
    if op['op'] == 'acquire':
        if row is None or not live:
            maxtok += 1; row = {'owner':owner,'tok':maxtok,'gr':now,'exp':now+TTL}; res = row
        elif row['owner'] == owner:
            row['exp'] = max(row['exp'], now+TTL); res = row
    elif op['op'] == 'renew':
        if row and row['owner']==owner and row['tok']==op['token'] and live:
            row['exp'] = max(row['exp'], now+TTL); res = row
    else:
        if row and row['owner']==owner and row['tok']==op['token'] and live:
            row['exp'] = now; res = 'rel'
    comp = eff + random.randrange(1, 300)
    lost = random.random() < 0.03
    if lost: outcome = {"outcome":"unknown","reason":"lost"}
    elif res is None: outcome = {"outcome":"fail","reason":{"kind":"held" if op['op']=='acquire' else "stale"}}
    elif res == 'rel': outcome = {"outcome":"ok","result":{"result":"released","released_at_us":now}}
    else: outcome = {"outcome":"ok","result":{"result":"lease","token":res['tok'],"owner":res['owner'],"granted_at_us":res['gr'],"expires_at_us":res['exp']}}
    ev(comp, w, {"type":"complete","op_id":opid,"outcome":outcome})
    if lost or res is None or res == 'rel': known[w] = None
    else: known[w] = res['tok']
    opid += 1
    heapq.heappush(q, (comp + random.randrange(1, 20_000), w))
events.sort()
out.write(json.dumps({"record":"design","grant_stamps":"decision"})+"\n")
for i,(t,s,w,k) in enumerate(events):
    out.write(json.dumps({"record":"event","index":i,"worker":f"w{w}","incarnation":0,"true_time_us":t,"local_time_us":t,"kind":k})+"\n")
