#!/usr/bin/env python3
"""Score what-if again on a grid recording kept by `tune_bench.py --grid-only --keep` (unpaired:
every cell predicted from the first cell's window), with the trainscope-cli at hand: a model
change is compared on the same measurements in seconds instead of a new 20-minute grid.

Cells come from the recording's knob_changes (rank 0; the knobs before the first change from
its metadata); a cell runs from the step its change applied at to the step before the next
change. Measured per cell: the mean step time over ranks and steps from --warmup steps after its
change (what `whatif --json` reports as measured for that window). Predicted: one `whatif
--json --from-step --to-step --grid K=v1,v2,...` call on the first cell's window over every
value each knob took. Prints the cells within +-10 %, Kendall tau-b and the misses.

    /usr/bin/python3 bench/whatif_rescore.py /tmp/tune-bench-XXXX/grid.tsdb [--cli build/bin/trainscope-cli] [--warmup 3] [--all]

(/usr/bin/python3, as for tune_bench.py, whose Kendall tau-b it imports and which needs numpy.)
"""
import argparse
import collections
import json
import sqlite3
import subprocess
import sys

from tune_bench import kendall  # the same tau-b as the bench's own table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsdb")
    ap.add_argument("--cli", default="build/bin/trainscope-cli")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--all", action="store_true", help="print every cell, not only the misses")
    a = ap.parse_args()
    db = sqlite3.connect(a.tsdb)
    changes = collections.OrderedDict()
    for step, knob, value in db.execute("select step, knob, value from knob_changes where rank = 0 "
                                        "order by step, event_id"):
        changes.setdefault(step, {})[knob] = value
    knobs = sorted({k for c in changes.values() for k in c})
    cur = {k[5:]: v for k, v in db.execute("select key, value from meta where key like 'knob.%'")}
    steps = list(changes)
    cells = []  # (first step, last step or None, values)
    for i, s in enumerate(steps):
        cur = dict(cur, **changes[s])
        cells.append((s, steps[i + 1] - 1 if i + 1 < len(steps) else None, tuple(cur[k] for k in knobs)))
    durations = collections.defaultdict(list)
    for args, d in db.execute("select args, dur_ns from event_view where kind = 'step'"):
        durations[json.loads(args)["step"]].append(d / 1e6)
    last = max(durations)
    measured = {}
    for first, end, c in cells:
        v = [x for s in range(first + a.warmup, (end if end is not None else last) + 1) for x in durations.get(s, [])]
        if v:  # a cell whose steps the recording does not hold (before its flight-recorder history) is left out
            measured[c] = sum(v) / len(v)
    cells = [x for x in cells if x[2] in measured]
    if len(cells) < 2:
        sys.exit("fewer than two cells with steps in the recording")
    base = cells[0]
    grid = []
    for i, k in enumerate(knobs):
        grid += ["--grid", k + "=" + ",".join(sorted({c[2][i] for c in cells}))]
    out = subprocess.run([a.cli, "whatif", a.tsdb, "--json", "--from-step", str(base[0] + a.warmup), "--to-step",
                          str(base[1]), *grid], capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr)
    predicted = {tuple(p["set"].get(k, "") for k in knobs): p["step_time_ms"]
                 for p in json.loads(out.stdout)["predictions"]}
    order = [c for _, _, c in cells]
    P = [predicted[c] for c in order]
    M = [measured[c] for c in order]
    errs = [100 * (p - m) / m for p, m in zip(P, M)]
    print(f"{' '.join(knobs)}: base {' '.join(order[0])} {M[0]:.3f} ms; "
          f"{sum(abs(e) <= 10 for e in errs[1:])} of {len(errs) - 1} changed cells within 10 %, "
          f"largest |error| {max(abs(e) for e in errs[1:]):.1f} %, Kendall tau-b {kendall(P, M):.3f}")
    for e, c, m, p in zip(errs, order, M, P):
        if abs(e) > 10 or a.all:
            print(f"  {'miss' if abs(e) > 10 else 'cell'} {' '.join(c)}: measured {m:.3f} ms, predicted {p:.3f} ms ({e:+.1f} %)")


if __name__ == "__main__":
    main()
