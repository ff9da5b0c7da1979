#!/usr/bin/env python3
"""Checks on a recording made on a GPU machine (docs/GPU.md), with Python's sqlite3 only (the GPU
machines have no sqlite3 shell). Prints what it finds and exits 1 when a check fails.

    python3 bench/gpu/inspect_tsdb.py rec.tsdb [--knob dp.compression]
"""
import argparse
import json
import sqlite3
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsdb")
    ap.add_argument("--knob", default="", help="compare bucket bytes per step before/after this knob's change")
    a = ap.parse_args()
    db = sqlite3.connect("file:%s?mode=ro" % a.tsdb, uri=True)
    q = lambda sql, *p: db.execute(sql, p).fetchall()
    bad = []

    print("== tracks (kind, count)")
    for k, n in q("select kind, count(*) from track_view group by kind order by 2 desc"):
        print("  %-14s %d" % (k, n))
    for r in q("select rank, kind, name, external_id from track_view where kind not in ('counter') order by rank, kind, id limit 40"):
        print("   ", r)
    print("== events (kind, count, mean duration us)")
    for k, n, d in q("select kind, count(*), avg(dur_ns) / 1e3 from event_view group by kind order by 2 desc"):
        print("  %-14s %8d %12.1f" % (k, n, d or 0))
    neg = q("select kind, name, count(*) from event_view where dur_ns < 0 group by 1, 2")
    if neg:
        bad.append("negative durations: %s" % neg)

    print("== top kernels (CUPTI)")
    for name, n, d in q("select name, count(*), avg(dur_ns) from event_view where kind = 'kernel' and track in "
                        "(select id from track_view where kind = 'cuda_stream') group by name order by 2 desc limit 12"):
        print("  %6d x %9.1f us  %s" % (n, d / 1e3, name[:110]))
    print("== memcpy / memset")
    for name, n, d, b in q("select name, count(*), avg(dur_ns), avg(json_extract(args, '$.bytes')) from event_view "
                           "where kind in ('memcpy', 'memset') group by name"):
        print("  %-14s %6d x %9.1f us  %.0f bytes" % (name, n, d / 1e3, b or 0))
    print("== CUPTI / agent markers")
    for name, n in q("select name, count(*) from event_view where kind = 'marker' group by name limit 20"):
        print("  %5d  %s" % (n, name[:160]))

    print("== NCCL collectives from the profiler plugin (first 12)")
    rows = q("select e.name, e.dur_ns, e.args from event_view e join track_view t on t.id = e.track "
             "where e.kind = 'collective' and t.name like 'nccl %' order by e.start_ns")
    for name, d, args in rows[:12]:
        print("  %-10s %9.1f us  %s" % (name, d / 1e3, args))
    seqs = {}
    for _, _, args in rows:
        j = json.loads(args or "{}")
        if "seq" in j:
            seqs.setdefault(j.get("comm_hash"), []).append(j["seq"])
    for comm, s in seqs.items():
        gaps = sum(1 for x, y in zip(s, s[1:]) if y != x + 1)
        print("  comm %s: %d collectives, seq %d..%d, %d gaps" % (comm, len(s), s[0], s[-1], gaps))
    algos = q("select json_extract(e.args, '$.algorithm'), json_extract(e.args, '$.protocol'), "
              "json_extract(e.args, '$.channels'), count(*) from event_view e join track_view t on t.id = e.track "
              "where e.kind = 'collective' and t.name like 'nccl %' group by 1, 2, 3")
    print("  algorithm/protocol/channels:", algos)

    print("== runtime launch -> kernel flows")
    launches = {}
    for fid, st in q("select json_extract(args, '$.flow_id'), start_ns from event_view "
                     "where kind = 'range' and args like '%flow_id%'"):
        launches[fid] = st
    pairs = after = 0
    for fid, st in q("select json_extract(args, '$.flow_id'), start_ns from event_view "
                     "where kind = 'kernel' and args like '%flow_id%'"):
        if fid in launches:
            pairs += 1
            after += st >= launches[fid]
    print("  pairs %d, kernel after its launch %d" % (pairs, after))
    if pairs != after:
        bad.append("kernels before their launch: %d of %d" % (pairs - after, pairs))
    span = q("select min(start_ns), max(end_ns) from event_view where kind = 'step'")[0]
    kspan = q("select min(start_ns), max(end_ns) from event_view where kind = 'kernel'")[0]
    print("  steps span %s, kernels span %s" % (span, kspan))

    print("== ranks (dropped events)")
    for r in q("select rank, host, pid, device, dropped_events from ranks"):
        print("  ", r)

    print("== knob changes")
    changes = q("select step, rank, knob, value from knob_changes order by ts_ns")
    for c in changes:
        print("  ", c)
    print("== DDP hook buckets")
    buckets = q("select count(*), min(dur_ns), avg(dur_ns), max(dur_ns) from event_view "
                "where name = 'bucket allreduce'")[0]
    print("  bucket allreduce events %s, duration min/mean/max ns %s/%s/%s" % buckets)
    if a.knob:
        ch = [c for c in changes if c[2] == a.knob]
        if not ch:
            bad.append("no change of %s recorded" % a.knob)
        else:
            step = ch[0][0]
            steps = q("select start_ns, end_ns, json_extract(args, '$.step') from event_view "
                      "where kind = 'step' and rank = 0 order by start_ns")
            per = {}
            ev = q("select start_ns, json_extract(args, '$.bytes'), json_extract(args, '$.algorithm') "
                   "from event_view where name = 'bucket allreduce' and rank = 0 order by start_ns")
            i = 0
            for s0, s1, sn in steps:
                while i < len(ev) and ev[i][0] < s0:
                    i += 1
                j = i
                tot, alg = 0, set()
                while j < len(ev) and ev[j][0] < s1:
                    tot += ev[j][1] or 0
                    alg.add(ev[j][2])
                    j += 1
                per[sn] = (tot, j - i, alg)
            before = [v for k, v in per.items() if k < step and v[1]]
            after = [v for k, v in per.items() if k >= step and v[1]]
            print("  %s changed at step %d: %d steps before, %d after" % (a.knob, step, len(before), len(after)))
            if before and after:
                print("  before: bytes/step median %s, buckets %s, algorithms %s" % (
                    statistics.median(b[0] for b in before), before[-1][1], before[-1][2]))
                print("  after:  bytes/step median %s, buckets %s, algorithms %s" % (
                    statistics.median(b[0] for b in after), after[0][1], after[0][2]))
            st = q("select json_extract(args, '$.step'), dur_ns from event_view where kind = 'step' and rank = 0")
            pre = [d for s, d in st if s < step]
            post = [d for s, d in st if s >= step]
            if pre and post:
                print("  step time median before %.3f ms, after %.3f ms" % (
                    statistics.median(pre) / 1e6, statistics.median(post) / 1e6))
    loss = q("select json_extract(args, '$.value') from event_view where kind = 'counter' and name = 'loss' "
             "order by start_ns")
    if loss:
        print("== loss: first %.4f, last %.4f (%d values)" % (loss[0][0], loss[-1][0], len(loss)))
    for b in bad:
        print("FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
