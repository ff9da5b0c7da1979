#!/usr/bin/env python3
"""Score what-if again on a grid recording kept by `tune_bench.py --grid-only --keep`, with the
trainscope-cli at hand: a model change is compared on the same measurements in seconds instead
of a new 20-minute grid. Also scores the grids of `tune_bench.py --repeats N` (every cell visited
N times, the passes in alternating order), which it does itself.

Cells come from the recording's knob_changes (rank 0; the knobs before the first change from
its metadata); a visit runs from the step its change applied at to the step before the next
change. The base is the first visit's cell.
  measured   per cell: the mean step time over ranks and the steps of all its visits, from
             --warmup steps after each change (what `whatif --json` reports as measured for a
             window, pooled over the visits)
  predicted  per cell: one `whatif --json --from-step --to-step --grid K=v1,v2,...` call on each
             visit of the base over every value each knob took; the mean of the predictions
             from every base visit, or with --paired the mean over the cell's visits of the
             prediction from the base visit right before each (tune_bench.py --paired)
Prints the cells within +-10 %, Kendall tau-b and the misses; with two or more visits per cell
also how far one cell's visits lie apart and tau-b between the first and the second pass of the
measurements themselves (what the machine's noise leaves for any prediction to match).

    /usr/bin/python3 bench/whatif_rescore.py /tmp/tune-bench-XXXX/grid.tsdb [--cli build/bin/trainscope-cli] [--warmup 3] [--all] [--paired]

(/usr/bin/python3, as for tune_bench.py, whose Kendall tau-b it imports and which needs numpy.)
"""
import argparse
import collections
import json
import sqlite3
import subprocess
import sys

from tune_bench import kendall  # the same tau-b as the bench's own table


def score(tsdb, cli="build/bin/trainscope-cli", warmup=3, paired=False, env=None):
    """The grid's cells scored: {'knobs', 'rows': [{'cell', 'visits', 'steps', 'measured_ms',
    'visit_ms', 'predicted_ms'}] in first-visit order (the base first), 'tau', 'pass_tau'}."""
    db = sqlite3.connect(tsdb)
    changes = collections.OrderedDict()
    for step, knob, value in db.execute("select step, knob, value from knob_changes where rank = 0 "
                                        "order by step, event_id"):
        changes.setdefault(step, {})[knob] = value
    knobs = sorted({k for c in changes.values() for k in c})
    cur = {k[5:]: v for k, v in db.execute("select key, value from meta where key like 'knob.%'")}
    steps = list(changes)
    visits = []  # (first step, last step or None, values)
    for i, s in enumerate(steps):
        cur = dict(cur, **changes[s])
        visits.append((s, steps[i + 1] - 1 if i + 1 < len(steps) else None, tuple(cur[k] for k in knobs)))
    durations = collections.defaultdict(list)
    for args, d in db.execute("select args, dur_ns from event_view where kind = 'step'"):
        durations[json.loads(args)["step"]].append(d / 1e6)
    db.close()
    last = max(durations)
    kept = []  # visits with steps: (first, end, cell, [durations])
    for first, end, c in visits:
        v = [x for s in range(first + warmup, (end if end is not None else last) + 1) for x in durations.get(s, [])]
        if v:  # a visit whose steps the recording does not hold (before its flight-recorder history) is left out
            kept.append((first, end, c, v))
    if len({c for _, _, c, _ in kept}) < 2:
        sys.exit("fewer than two cells with steps in the recording")
    base = kept[0][2]
    grid = []
    for i, k in enumerate(knobs):
        grid += ["--grid", k + "=" + ",".join(sorted({c[i] for _, _, c, _ in kept}))]
    from_base = {}  # base visit index -> {cell: predicted ms}
    for i, (first, end, c, _) in enumerate(kept):
        if c != base or end is None:
            continue
        out = subprocess.run([cli, "whatif", tsdb, "--json", "--from-step", str(first + warmup), "--to-step",
                              str(end), *grid], capture_output=True, text=True, env=env)
        if out.returncode:
            sys.exit(out.stderr)
        from_base[i] = {tuple(p["set"].get(k, "") for k in knobs): p["step_time_ms"]
                        for p in json.loads(out.stdout)["predictions"] if "error" not in p}
    if not from_base:
        sys.exit("the base cell has no complete visit")
    pooled, visit_ms, preds, order = collections.defaultdict(list), collections.defaultdict(list), \
        collections.defaultdict(list), []
    # Paired: each visit and its prediction as ratios to the base visit right before it (the
    # window the prediction came from), which the machine's drift over the grid leaves alone.
    ratio_m, ratio_p = collections.defaultdict(list), collections.defaultdict(list)
    prev_base = None
    for i, (first, end, c, v) in enumerate(kept):
        if c not in visit_ms:
            order.append(c)
        pooled[c] += v
        visit_ms[c].append(sum(v) / len(v))
        if c == base and i in from_base:
            prev_base = i
        if paired and c != base and prev_base is not None:
            preds[c].append(from_base[prev_base][c])
            b = kept[prev_base][3]
            b = sum(b) / len(b)
            ratio_m[c].append(visit_ms[c][-1] / b)
            ratio_p[c].append(preds[c][-1] / b)
    rows = []
    for c in order:
        p = preds[c] if paired and c != base else [f[c] for f in from_base.values()]
        rows.append({"cell": c, "visits": len(visit_ms[c]), "steps": len(pooled[c]),
                     "measured_ms": sum(pooled[c]) / len(pooled[c]), "visit_ms": visit_ms[c],
                     "predicted_ms": sum(p) / len(p), "ratio_measured": ratio_m.get(c), "ratio_predicted": ratio_p.get(c)})
    twice = [r for r in rows if r["visits"] >= 2]
    res = {"knobs": knobs, "rows": rows,
           "tau": kendall([r["predicted_ms"] for r in rows], [r["measured_ms"] for r in rows]),
           "pass_tau": kendall([r["visit_ms"][0] for r in twice], [r["visit_ms"][1] for r in twice])
           if len(twice) >= 2 else None,
           "base_visits": len(from_base)}
    rated = [r for r in rows if r["ratio_measured"]]
    if paired and len(rated) >= 2:
        mean = lambda x: sum(x) / len(x)
        res["ratio_tau"] = kendall([mean(r["ratio_predicted"]) for r in rated], [mean(r["ratio_measured"]) for r in rated])
        two = [r for r in rated if len(r["ratio_measured"]) >= 2]
        res["ratio_pass_tau"] = kendall([r["ratio_measured"][0] for r in two], [r["ratio_measured"][1] for r in two]) \
            if len(two) >= 2 else None
    return res


def report(res, every=False):
    rows, knobs = res["rows"], res["knobs"]
    errs = [100 * (r["predicted_ms"] - r["measured_ms"]) / r["measured_ms"] for r in rows]
    base = rows[0]
    print(f"{' '.join(knobs)}: base {' '.join(base['cell'])} {base['measured_ms']:.3f} ms "
          f"({res['base_visits']} base windows); "
          f"{sum(abs(e) <= 10 for e in errs[1:])} of {len(errs) - 1} changed cells within 10 %, "
          f"largest |error| {max(abs(e) for e in errs[1:]):.1f} %, "
          f"median |error| {sorted(abs(e) for e in errs[1:])[(len(errs) - 1) // 2]:.1f} %, "
          f"Kendall tau-b {res['tau']:.3f}")
    if res["pass_tau"] is not None:
        spreads = sorted(100 * (max(r["visit_ms"]) - min(r["visit_ms"])) / r["measured_ms"]
                         for r in rows if r["visits"] >= 2)
        print(f"the measurements against themselves: Kendall tau-b {res['pass_tau']:.3f} between the first and "
              f"the second visit of each cell; a cell's visits {spreads[len(spreads) // 2]:.1f} % apart "
              f"(median), {spreads[-1]:.1f} % at most")
    if "ratio_tau" in res:
        print(f"paired, each visit against the base visit before it (the machine's drift left out): Kendall tau-b "
              f"{res['ratio_tau']:.3f} of the predicted against the measured ratios over {len(rows) - 1} cells"
              + (f"; the measured ratios' first against second visits {res['ratio_pass_tau']:.3f}"
                 if res.get("ratio_pass_tau") is not None else ""))
    for e, r in zip(errs, rows):
        if abs(e) > 10 or every:
            visits = " / ".join(f"{x:.3f}" for x in r["visit_ms"])
            print(f"  {'miss' if abs(e) > 10 else 'cell'} {' '.join(r['cell'])}: measured {r['measured_ms']:.3f} ms "
                  f"({r['steps']} rank-steps; visits {visits}), predicted {r['predicted_ms']:.3f} ms ({e:+.1f} %)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsdb")
    ap.add_argument("--cli", default="build/bin/trainscope-cli")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--all", action="store_true", help="print every cell, not only the misses")
    ap.add_argument("--paired", action="store_true",
                    help="predict each visit from the base visit right before it (tune_bench.py --paired)")
    a = ap.parse_args()
    report(score(a.tsdb, a.cli, a.warmup, a.paired), a.all)


if __name__ == "__main__":
    main()
