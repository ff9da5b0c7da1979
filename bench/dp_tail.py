#!/usr/bin/env python3
"""What the data-parallel what-if's tail is made of, read from a grid recording kept by
`tune_bench.py --keep` (docs/BENCHMARKS.md, "The ranks' own work per reduction ..."):

- per cell without a codec (dp.bucket_bytes, dp.algorithm), the skew between the two lowest
  ranks' backward ends per step (|end of rank 0's `backward` phase - rank 1's|), median and mean
  over the cell's steps from --warmup after its change;
- per algorithm and payload, trainscope-train's isolated calibration reductions (`calibrate`
  collectives) and its paced ones (`calibrate work`: their span, not the work counter): how many,
  the fastest and the mean.

    python3 bench/dp_tail.py /tmp/tune-bench-XXXX/grid.tsdb [--warmup 3]
"""
import argparse
import bisect
import collections
import json
import sqlite3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsdb")
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    db = sqlite3.connect(a.tsdb)
    steps = collections.defaultdict(list)  # rank -> [(start, end, step)]
    for r, s0, s1, args in db.execute("select rank, start_ns, end_ns, args from event_view where kind = 'step'"):
        steps[r].append((s0, s1, json.loads(args)["step"]))
    for v in steps.values():
        v.sort()
    bwd_end = {}  # (rank, step) -> end of its backward phase
    for r, s0, s1 in db.execute("select rank, start_ns, end_ns from event_view where kind = 'phase' and name = 'backward'"):
        v = steps[r]
        i = bisect.bisect_right(v, (s0, 1 << 62, 0)) - 1
        if i >= 0 and v[i][0] <= s0 <= v[i][1]:
            bwd_end[(r, v[i][2])] = s1
    last = max(st for v in steps.values() for _, _, st in v)
    changes = collections.OrderedDict()
    for step, knob, value in db.execute("select step, knob, value from knob_changes where rank = 0 "
                                        "order by step, event_id"):
        changes.setdefault(step, {})[knob] = value
    cur = {k[5:]: v for k, v in db.execute("select key, value from meta where key like 'knob.%'")}
    first = list(changes)
    print("skew of the backward's end between ranks 0 and 1 (cells without a codec):")
    for i, s in enumerate(first):
        cur = dict(cur, **changes[s])
        end = first[i + 1] - 1 if i + 1 < len(first) else last
        sk = sorted(abs(bwd_end[(0, t)] - bwd_end[(1, t)]) / 1e3 for t in range(s + a.warmup, end + 1)
                    if (0, t) in bwd_end and (1, t) in bwd_end)
        if sk and cur.get("dp.compression", "none") == "none":
            print(f"  {cur.get('dp.bucket_bytes')} B {cur.get('dp.algorithm')}: median {sk[len(sk) // 2]:.0f} us, "
                  f"mean {sum(sk) / len(sk):.0f} us over {len(sk)} steps")
    # The tail per cell: per (rank, step) E = the last bucket reduction's end - the rank's
    # backward end; of it, the wait for the slowest rank's backward (max over ranks of the
    # backward's end - this rank's) and what follows the slowest rank's backward end (x).
    comm_end = collections.defaultdict(int)  # (rank, step) -> last bucket reduction's end
    nb = collections.defaultdict(int)
    for r, s0, s1 in db.execute("select rank, start_ns, end_ns from event_view where kind = 'collective' "
                                "and json_extract(args, '$.bucket') is not null"):
        v = steps[r]
        i = bisect.bisect_right(v, (s0, 1 << 62, 0)) - 1
        if i >= 0 and v[i][0] <= s0 <= v[i][1]:
            k = (r, v[i][2])
            comm_end[k] = max(comm_end[k], s1)
            nb[k] += 1
    ranks = sorted(steps)
    print("tail after the backward per cell (mean over ranks and steps, us): E = wait for the slowest "
          "rank + x after it")
    cur = {k[5:]: v for k, v in db.execute("select key, value from meta where key like 'knob.%'")}
    for i, s in enumerate(first):
        cur = dict(cur, **changes[s])
        end = first[i + 1] - 1 if i + 1 < len(first) else last
        E, W, X, B = [], [], [], []
        for t in range(s + a.warmup, end + 1):
            if not all((r, t) in bwd_end and (r, t) in comm_end for r in ranks):
                continue
            slow = max(bwd_end[(r, t)] for r in ranks)
            for r in ranks:
                E.append((comm_end[(r, t)] - bwd_end[(r, t)]) / 1e3)
                W.append((slow - bwd_end[(r, t)]) / 1e3)
                X.append((comm_end[(r, t)] - slow) / 1e3)
                B.append(nb[(r, t)])
        if E:
            m = lambda v: sum(v) / len(v)
            print(f"  {cur.get('dp.bucket_bytes'):>9} B {cur.get('dp.algorithm'):18s} {cur.get('dp.compression', 'none'):8s}"
                  f" {m(B):5.1f} buckets: E {m(E):6.0f}  wait {m(W):6.0f}  x {m(X):6.0f}  (x median "
                  f"{sorted(X)[len(X) // 2]:.0f}, {len(E) // len(ranks)} steps)")
    print("calibration reductions (span):")
    for name, algo, size, n, fastest, mean in db.execute(
            "select name, json_extract(args, '$.algorithm'), json_extract(args, '$.bytes'), count(*), "
            "min(dur_ns) / 1e3, avg(dur_ns) / 1e3 from event_view where kind = 'collective' and name in "
            "('calibrate', 'calibrate work') and json_extract(args, '$.algorithm') in "
            "('allreduce', 'ring', 'recursive-doubling') group by 1, 2, 3 order by 2, 3, 1"):
        print(f"  {name:15s} {algo:18s} {size:8d} B: {n} times, fastest {fastest:.1f} us, mean {mean:.1f} us")


if __name__ == "__main__":
    main()
