#!/usr/bin/env python3
"""Pipeline hand-off latency from a recorded 2-rank session (.tsdb).

Pairs rank a's p2p_send events to rank b with rank b's p2p_recv events from rank a, in order
(MPI keeps the order per pair here), and where the receiver was already waiting reports the time
from the send's start to the receive's end: what one micro-batch hand-off costs beyond the
schedule (BENCHMARKS.md, pipeline bubble). Usage: bench/pp_handoff.py FILE.tsdb
"""
import json
import sqlite3
import statistics
import sys

db = sqlite3.connect(sys.argv[1])
kinds = dict(db.execute("select id, name from kinds"))
rows = db.execute("select rank, kind, start_ns, end_ns, args from events order by start_ns").fetchall()
for a, b in ((0, 1), (1, 0)):
    sends = [r for r in rows if r[0] == a and kinds[r[1]] == "p2p_send" and json.loads(r[4])["peer"] == b]
    recvs = [r for r in rows if r[0] == b and kinds[r[1]] == "p2p_recv" and json.loads(r[4])["peer"] == a]
    lat = sorted((r[3] - s[2]) / 1e3 for s, r in zip(sends, recvs) if r[2] < s[2])
    if not lat:
        print(f"{a}->{b}: no waited hand-offs")
        continue
    print(f"{a}->{b}: {len(lat)} waited hand-offs; send start -> receive end, us: "
          f"median {statistics.median(lat):.0f}, p90 {lat[int(len(lat) * 0.9)]:.0f}, max {lat[-1]:.0f}")
