#!/usr/bin/env python3
"""A rank's step phases over a stretch of a recording, in blocks of steps: per block the median
and the mean step, forward, backward, `wait gradients`, optimizer and `evaluate` (ms), and the loss at the
block's first step. Shows a transient inside a what-if grid cell (docs/BENCHMARKS.md, "The
backward's compute calibrated…": the first switch to fp16).

    /usr/bin/python3 bench/step_phases.py /tmp/tune-bench-XXXX/grid.tsdb --from 1040 --to 1400 [--block 20] [--rank 0]
"""
import argparse
import bisect
import collections
import json
import sqlite3
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsdb")
    ap.add_argument("--from", dest="lo", type=int, required=True)
    ap.add_argument("--to", dest="hi", type=int, required=True)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--rank", type=int, default=0)
    a = ap.parse_args()
    db = sqlite3.connect(a.tsdb)
    steps = sorted((s, e, json.loads(x)["step"]) for x, s, e in db.execute(
        "select args, start_ns, end_ns from event_view where kind = 'step' and rank = ?", (a.rank,)))
    steps = [x for x in steps if a.lo <= x[2] < a.hi]
    if not steps:
        raise SystemExit("no steps of that rank in that range")
    starts = [x[0] for x in steps]
    names = ("forward", "backward", "wait gradients", "optimizer", "evaluate")
    blocks = collections.defaultdict(lambda: collections.defaultdict(list))
    loss = {}
    for kind, name, s, d, args in db.execute(
            "select kind, name, start_ns, dur_ns, args from event_view where rank = ? and start_ns between ? and ? "
            "and (kind in ('phase', 'range') or (kind = 'counter' and name = 'loss'))",
            (a.rank, steps[0][0], steps[-1][1])):
        i = bisect.bisect_right(starts, s) - 1
        if i < 0 or s >= steps[i][1]:
            continue
        b = steps[i][2] // a.block * a.block
        if kind == "counter":
            loss.setdefault(b, json.loads(args)["value"])
        elif name in names:
            blocks[b][name].append(d / 1e6)
    per = collections.defaultdict(list)
    for s, e, st in steps:
        per[st // a.block * a.block].append((e - s) / 1e6)
    print("block  step  mean  " + "  ".join(f"{n:>14}" for n in names) + "    loss")
    for b in sorted(per):
        cols = [f"{statistics.median(blocks[b][n]):14.3f}" if blocks[b][n] else f"{'-':>14}" for n in names]
        print(f"{b:5d} {statistics.median(per[b]):6.3f} {statistics.mean(per[b]):6.3f} " + "  ".join(cols) +
              (f"  {loss[b]:.3f}" if b in loss else ""))


if __name__ == "__main__":
    main()
