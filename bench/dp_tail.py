#!/usr/bin/env python3
"""What the data-parallel what-if's tail and rest are made of, read from a grid recording kept by
`tune_bench.py --keep` (docs/BENCHMARKS.md, "The ranks' own work per reduction ..." and
"Subnormal floats, the forward-to-backward gap, ..."):

- per cell without a codec (dp.bucket_bytes, dp.algorithm), the skew between the two lowest
  ranks' backward ends per step (|end of rank 0's `backward` phase - rank 1's|), median and mean
  over the cell's steps from --warmup after its change;
- per cell, the tail after the backward (mean over ranks and steps): E = the last bucket
  reduction's end - the rank's backward end, split into the wait for the slowest rank's backward
  and x, what follows the slowest rank's backward end;
- per cell, the parts of the step outside its phases (what-if's rest): before the forward,
  between the forward and the backward, after the optimizer (means over ranks and steps), the
  optimizer phase itself, and the `evaluate` range per call (every --eval-every-th step of
  trainscope-train);
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


def mean(v):
    return sum(v) / len(v)


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
    ranks = sorted(steps)
    step_window = {(r, st): (s0, s1) for r, v in steps.items() for s0, s1, st in v}

    def step_of(r, t):  # the step of rank r whose window holds time t, or None
        v = steps[r]
        i = bisect.bisect_right(v, (t, 1 << 62, 0)) - 1
        return v[i][2] if i >= 0 and v[i][0] <= t <= v[i][1] else None

    phase = collections.defaultdict(dict)  # (rank, step) -> {phase: (start, end)}
    for r, name, s0, s1 in db.execute("select rank, name, start_ns, end_ns from event_view where kind = 'phase'"):
        st = step_of(r, s0)
        if st is not None:
            phase[(r, st)][name] = (s0, s1)
    evaluate = collections.defaultdict(list)  # step -> evaluate range lengths (ns)
    for r, s0, s1 in db.execute("select rank, start_ns, end_ns from event_view where kind = 'range' "
                                "and name = 'evaluate'"):
        st = step_of(r, s0)
        if st is not None:
            evaluate[st].append(s1 - s0)
    comm_end = collections.defaultdict(int)  # (rank, step) -> last bucket reduction's end
    nb = collections.defaultdict(int)
    for r, s0, s1 in db.execute("select rank, start_ns, end_ns from event_view where kind = 'collective' "
                                "and json_extract(args, '$.bucket') is not null"):
        st = step_of(r, s0)
        if st is not None:
            comm_end[(r, st)] = max(comm_end[(r, st)], s1)
            nb[(r, st)] += 1

    # The cells: the knobs in force from each acknowledged change to the step before the next.
    last = max(st for v in steps.values() for _, _, st in v)
    changes = collections.OrderedDict()
    for step, knob, value in db.execute("select step, knob, value from knob_changes where rank = 0 "
                                        "order by step, event_id"):
        changes.setdefault(step, {})[knob] = value
    knobs = {k[5:]: v for k, v in db.execute("select key, value from meta where key like 'knob.%'")}
    first = list(changes)
    cells = []  # (knobs, steps measured)
    for i, s in enumerate(first):
        knobs = dict(knobs, **changes[s])
        end = first[i + 1] - 1 if i + 1 < len(first) else last
        cells.append((knobs, range(s + a.warmup, end + 1)))

    def label(k):
        return f"{k.get('dp.bucket_bytes'):>9} B {k.get('dp.algorithm'):18s} {k.get('dp.compression', 'none'):8s}"

    def complete(r, t):
        return all(p in phase.get((r, t), {}) for p in ("forward", "backward", "optimizer"))

    print("skew of the backward's end between ranks 0 and 1 (cells without a codec):")
    for k, cell in cells:
        sk = sorted(abs(phase[(0, t)]["backward"][1] - phase[(1, t)]["backward"][1]) / 1e3 for t in cell
                    if complete(0, t) and complete(1, t))
        if sk and k.get("dp.compression", "none") == "none":
            print(f"  {k.get('dp.bucket_bytes')} B {k.get('dp.algorithm')}: median {sk[len(sk) // 2]:.0f} us, "
                  f"mean {mean(sk):.0f} us over {len(sk)} steps")
    print("tail after the backward per cell (mean over ranks and steps, us): E = wait for the slowest "
          "rank + x after it")
    for k, cell in cells:
        E, W, X, B = [], [], [], []
        for t in cell:
            if not all(complete(r, t) and (r, t) in comm_end for r in ranks):
                continue
            bwd_end = {r: phase[(r, t)]["backward"][1] for r in ranks}
            slow = max(bwd_end.values())
            for r in ranks:
                E.append((comm_end[(r, t)] - bwd_end[r]) / 1e3)
                W.append((slow - bwd_end[r]) / 1e3)
                X.append((comm_end[(r, t)] - slow) / 1e3)
                B.append(nb[(r, t)])
        if E:
            print(f"  {label(k)} {mean(B):5.1f} buckets: E {mean(E):6.0f}  wait {mean(W):6.0f}  x {mean(X):6.0f}  "
                  f"(x median {sorted(X)[len(X) // 2]:.0f}, {len(E) // len(ranks)} steps)")
    print("the step outside its phases per cell (mean over ranks and steps, us), and evaluate per call (ms):")
    for k, cell in cells:
        before, between, after, opt, ev = [], [], [], [], []
        for t in cell:
            for r in ranks:
                if not complete(r, t):
                    continue
                p, (s0, s1) = phase[(r, t)], step_window[(r, t)]
                before.append((p["forward"][0] - s0) / 1e3)
                between.append(max(0, p["backward"][0] - p["forward"][1]) / 1e3)
                after.append((s1 - p["optimizer"][1]) / 1e3)
                opt.append((p["optimizer"][1] - p["optimizer"][0]) / 1e3)
            ev += evaluate.get(t, [])
        if before:
            print(f"  {label(k)} before forward {mean(before):6.1f}  forward-to-backward {mean(between):5.1f}  "
                  f"after optimizer {mean(after):6.1f}  (optimizer {mean(opt):7.1f})  evaluate {mean(ev) / 1e6 if ev else 0:.2f} ms "
                  f"({len(ev)} calls)")
    print("calibration reductions (span):")
    for name, algo, size, n, fastest, avg in db.execute(
            "select name, json_extract(args, '$.algorithm'), json_extract(args, '$.bytes'), count(*), "
            "min(dur_ns) / 1e3, avg(dur_ns) / 1e3 from event_view where kind = 'collective' and name in "
            "('calibrate', 'calibrate work') and json_extract(args, '$.algorithm') in "
            "('allreduce', 'ring', 'recursive-doubling') group by 1, 2, 3 order by 2, 3, 1"):
        print(f"  {name:15s} {algo:18s} {size:8d} B: {n} times, fastest {fastest:.1f} us, mean {avg:.1f} us")


if __name__ == "__main__":
    main()
