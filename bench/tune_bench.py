#!/usr/bin/env python3
"""What-if accuracy and autotune vs exhaustive grid on the reference job (docs/BENCHMARKS.md,
"What-if and autotune"; docs/TUNING.md).

One 4-rank `trainscope-cli demo` job (mlp, --layers 48 --width 16 --step-delay-ms 1: the
job of tst_tune_live) is recorded while it is set to
every cell of a grid of dp.bucket_bytes x dp.algorithm in turn (--seconds-per-cell each). Per cell:
  measured   `whatif --from-step S+warmup --to-step next S-1` -> measured.step_time_ms (mean over
             the cell's steps of the mean over ranks of the step window)
  replay     the same command's replay (the model built from that cell, at that cell's setting)
  predicted  the model built from the BASE cell (--base) predicting the cell (`whatif --from-step
             ... --set ...`), i.e. a changed setting vs its measurement
Kendall tau-b between the predicted and the measured step times over the grid.
Then `tune` on the same job from the base cell over the same values, against the exhaustive
grid's best: the setting found, its measured time, steps used (the grid: cells x (warmup +
measured steps)). Then a Bayesian-optimisation baseline as Horovod's autotuner runs by default
(HOROVOD_AUTOTUNE: a Gaussian process with expected improvement, 20 samples of 10 measured steps
each, the first 3 at random; bayes_opt in horovod/common/optim): each sample `set`s the
candidate and measures it live (`tune` over that one value: 10 steps after 2 warm-up steps).

  bench/tune_bench.py [--build build] [--seconds-per-cell 3] [--warmup 3] [--bo-samples 20]
"""
import argparse
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import random
import tempfile
import time

import numpy as np


def env_for(rt):
    env = dict(os.environ)
    env.update({"TRAINSCOPE_RUNTIME_DIR": rt, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_btl": "self,vader", "OMPI_MCA_oob_tcp_if_include": "lo"})
    return env


def kendall(a, b):
    conc = disc = ta = tb = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            x, y = a[i] - a[j], b[i] - b[j]
            if x == 0 and y == 0:
                continue
            if x == 0:
                ta += 1
            elif y == 0:
                tb += 1
            elif (x > 0) == (y > 0):
                conc += 1
            else:
                disc += 1
    den = ((conc + disc + ta) * (conc + disc + tb)) ** 0.5
    return (conc - disc) / den if den else 0.0


def expected_improvement(xs, ys, cand, noise=1e-3, length=0.5):
    """GP (RBF kernel on [0,1]^d, unit prior variance, ys standardised) EI for minimisation."""
    X, C = np.asarray(xs, float), np.asarray(cand, float)
    y = np.asarray(ys, float)
    mu0, sd0 = y.mean(), (y.std() or 1.0)
    z = (y - mu0) / sd0
    k = lambda A, B: np.exp(-((A[:, None, :] - B[None, :, :]) ** 2).sum(-1) / (2 * length ** 2))
    K = k(X, X) + noise * np.eye(len(X))
    Ks = k(X, C)
    sol = np.linalg.solve(K, Ks)
    mu = sol.T @ z
    var = np.clip(1.0 - (Ks * sol).sum(0), 1e-12, None)
    s = np.sqrt(var)
    best = z.min()
    g = (best - mu) / s
    from math import erf, sqrt, pi, exp
    cdf = np.array([0.5 * (1 + erf(v / sqrt(2))) for v in g])
    pdf = np.array([exp(-v * v / 2) / sqrt(2 * pi) for v in g])
    return (best - mu) * cdf + s * pdf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds-per-cell", type=float, default=3.0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--buckets", default="64,2048,8192,67108864")
    ap.add_argument("--algorithms", default="allreduce,ring")
    ap.add_argument("--base", default="2048,ring")
    ap.add_argument("--budget-steps", type=int, default=120)
    ap.add_argument("--bo-samples", type=int, default=20)
    ap.add_argument("--bo-steps", type=int, default=10)
    ap.add_argument("--bo-only", action="store_true", help="only the Bayesian baseline (no grid, no tune)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job-args", default="--layers 48 --width 16 --step-delay-ms 1",
                    help="trainscope-train options of the job (default: tst_tune_live's job)")
    ap.add_argument("--ranks", type=int, default=4, help="ranks of the job (2 on a 2-core machine: a core each)")
    ap.add_argument("--grid-only", action="store_true", help="only the what-if grid (no tune, no BO)")
    ap.add_argument("--tune-only", action="store_true", help="only the tuner (no grid, no BO), from the base cell")
    ap.add_argument("--paired", action="store_true",
                    help="run the base cell again before every other cell and predict each cell from the base "
                         "window right before it (the machine's load drifts over the grid)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="visit every cell this many times, the passes in alternating order (base first in each), "
                         "and score with whatif_rescore.py: measured pooled over a cell's visits, predicted as the "
                         "mean over the base's visits (with --paired: over the base visit before each)")
    ap.add_argument("--keep", action="store_true", help="print where the recordings are and keep them")
    ap.add_argument("--mode", default="dp", help="the demo's --mode (dp, pp, hybrid, disco)")
    ap.add_argument("--knob", action="append", default=[], metavar="K=v1,v2,...",
                    help="a knob of the grid and its values (repeat; replaces --buckets/--algorithms); "
                         "--base then names the base cell as K=v,K2=v2 or as values in --knob order")
    ap.add_argument("--verify", default="",
                    help="after tune: cells (values in --knob order, cells separated by ';') measured side by side "
                         "with the tuner's pick in the same job, --verify-rounds rounds in rotating order")
    ap.add_argument("--verify-rounds", type=int, default=5)
    ap.add_argument("--verify-steps", type=int, default=20)
    args = ap.parse_args()
    if args.knob:
        knobs = [(k, v.split(",")) for k, v in (x.split("=", 1) for x in args.knob)]
    else:
        knobs = [("dp.bucket_bytes", args.buckets.split(",")), ("dp.algorithm", args.algorithms.split(","))]
    names = [k for k, _ in knobs]
    if "=" in args.base:
        given = dict(x.split("=", 1) for x in args.base.split(","))
        base = tuple(given[k] for k in names)
    else:
        base = tuple(args.base.split(","))
    cli = os.path.join(args.build, "bin", "trainscope-cli")
    rt = tempfile.mkdtemp(prefix="tune-bench-")
    os.chmod(rt, 0o700)
    env = env_for(rt)

    def run(*a, check=True, timeout=600):
        for attempt in range(60):  # a build relinking the program meanwhile: wait for it
            try:
                r = subprocess.run([cli, *a], env=env, capture_output=True, text=True, timeout=timeout)
                break
            except (PermissionError, OSError):
                time.sleep(2)
        if check and r.returncode != 0:
            sys.exit(f"{' '.join(a)} failed: {r.stdout}{r.stderr}")
        return r

    demo = run("demo", "--mode", args.mode, "--ranks", str(args.ranks), "--steps", "1000000", "--",
               *args.job_args.split())
    job = re.search(r"job (\S+)", demo.stdout).group(1)
    launcher = int(re.search(r"launcher pid (\d+)", demo.stderr).group(1))
    try:
        for _ in range(200):
            if names[0] in run("knobs", "--job", job, "--json", check=False).stdout:
                break
            time.sleep(0.1)
        def tune(rows):
            # Autotune from the base cell over the same values.
            run("set", "--job", job, *[f"{k}={v}" for k, v in zip(names, base)], check=False)
            t0 = time.time()
            vals = [y for k, v in knobs for y in ("--values", f"{k}={','.join(v)}")]
            t = run("tune", "--job", job, "--knobs", ",".join(names), *vals,
                    "--budget-steps", str(args.budget_steps), "--out", os.path.join(rt, "tuned.json"), "--json")
            tr = json.loads(t.stdout)
            print(t.stderr)
            found = tr["best"]
            cell = next((r for r in rows if all(str(found.get(k)) == v for k, v in zip(names, r["cell"]))), None)
            if args.verify:
                verify(tuple(str(found[k]) for k in names))
            print(f"tune: best {found} {tr['best_step_time_ms']:.3f} ms (grid measured that cell at "
                  f"{cell['measured_ms'] if cell else float('nan'):.3f} ms), initial {tr['initial_step_time_ms']:.3f} ms, "
                  f"{len(tr['trials'])} trials ({sum(1 for x in tr['trials'] if x['skipped'])} skipped by the simulator), "
                  f"{tr['steps_used']} steps, {sum(x.get('periodic_steps', 0) for x in tr['trials'])} periodic "
                  f"steps left out, {time.time() - t0:.1f} s")
            print(f"tune verdict: {tr.get('verdict', '')}")

        def measure(c, tag, steps):
            # One cell measured live: `set` it, then `tune` over that one value, which measures the
            # incumbent (now the cell) for 2 warm-up + `steps` steps (periodic steps left out) and
            # changes nothing. None when either fails.
            if run("set", "--job", job, *[f"{k}={v}" for k, v in zip(names, c)], "--json", check=False).returncode:
                return None
            m = run("tune", "--job", job, "--knobs", names[0], "--values", f"{names[0]}={c[0]}",
                    "--warmup-steps", "2", "--measure-steps", str(steps), "--budget-steps", str(2 + steps),
                    "--no-simulator", "--out", os.path.join(rt, f"{tag}.json"), "--json", check=False)
            if m.returncode != 0:
                print(f"{tag} {c}: no measurement ({m.stderr.strip()[-200:]})")
                return None
            return json.loads(m.stdout)["initial_step_time_ms"]

        def verify(found):
            # The tuner's pick against the given cells in the same job, side by side: the grid's
            # own measurements drift by up to 12 % between identical cells over its minutes.
            cells = [found] + [c for c in (tuple(x.split(",")) for x in args.verify.split(";")) if c != found]
            got = {c: [] for c in cells}
            for r in range(args.verify_rounds):
                for i in range(len(cells)):
                    c = cells[(i + r) % len(cells)]
                    ms = measure(c, f"verify{r}_{i}", args.verify_steps)
                    if ms is not None:
                        got[c].append(ms)
            med = {c: sorted(v)[len(v) // 2] for c, v in got.items() if v}
            best = min(med, key=med.get)
            for c in cells:
                if c in med:
                    print(f"verify {'/'.join(c)}{' (tuner)' if c == found else ''}: median {med[c]:.3f} ms of "
                          f"{len(got[c])} ({', '.join(f'{x:.3f}' for x in got[c])}), "
                          f"{100 * (med[c] / med[best] - 1):+.1f} % vs the best of these")

        if args.tune_only:
            time.sleep(2)  # past the job's first steps and calibration
            tune([])
            return
        buckets = args.buckets.split(",")
        algos = args.algorithms.split(",")
        cells = list(itertools.product(*[v for _, v in knobs]))
        kv = lambda c: [f"{k}={v}" for k, v in zip(names, c)]
        rows = []
        if not args.bo_only:
            cells.remove(base)
            cells.insert(0, base)
            grid_cells = list(cells)
            passes = []
            for rep in range(args.repeats):  # the passes alternate their order: drift hits the cells alike
                order = grid_cells[1:] if rep % 2 == 0 else grid_cells[:0:-1]
                if args.paired:  # base, c1, base, c2, ...: each cell's model from the base window just before it
                    passes += [y for c in order for y in (base, c)]
                else:
                    passes += [base] + order
            cells = passes
            session = os.path.join(rt, "grid.tsdb")
            total = args.seconds_per_cell * len(cells) + 120  # stopped after the last cell
            rec = subprocess.Popen([cli, "record", "--job", job, "--seconds", str(total), "--out", session], env=env)
            time.sleep(1.0)
            acks = []
            for c in cells:
                r = run("set", "--job", job, *kv(c), "--json")
                acks.append(max(x["step"] for x in json.loads(r.stdout)))
                time.sleep(args.seconds_per_cell)
            rec.send_signal(signal.SIGINT)  # the last cell has had its time: stop and save
            rec.wait(timeout=300)
            ends = acks[1:] + [None]
            rows = []
            if args.repeats > 1:
                from whatif_rescore import score, report  # pooled over the visits
                res = score(session, cli, args.warmup, args.paired, env)
                report(res, every=True)
                rows = [dict(r, cell=tuple(dict(zip(res["knobs"], r["cell"]))[k] for k in names)) for r in res["rows"]]
                if args.keep:
                    print(f"grid recording: {session}; acknowledged steps: {acks}")
                if args.grid_only:
                    return
                tune(rows)
            else:
                base_from, base_to = acks[0] + args.warmup, (acks[1] - 1) if len(acks) > 1 else None
                for idx, (c, s, e) in enumerate(zip(cells, acks, ends)):
                    if args.paired and c == base:
                        base_from, base_to = s + args.warmup, e - 1  # the model for the next cell
                        if idx > 0:
                            continue
                    frm = ["--from-step", str(s + args.warmup)] + (["--to-step", str(e - 1)] if e else [])
                    own = json.loads(run("whatif", session, "--json", *frm).stdout)
                    sets = [y for x in kv(c) for y in ("--set", x)]
                    pred = json.loads(run("whatif", session, "--json", "--from-step", str(base_from), "--to-step",
                                          str(base_to), *sets).stdout)
                    p = pred["predictions"][0]
                    steps = (e - 1 if e else own["to_step"]) - (s + args.warmup) + 1
                    rows.append({"cell": c, "steps": steps,
                                 "measured_ms": own["measured"]["step_time_ms"],
                                 "replay_ms": own["replay"]["step_time_ms"],
                                 "predicted_ms": p["step_time_ms"], "extrapolated": p["extrapolated"],
                                 "measured_overlap": own["measured"]["overlap_ratio"],
                                 "predicted_overlap": p["overlap_ratio"],
                                 "measured_exposed_ms": own["measured"]["exposed_comm_ms"],
                                 "predicted_exposed_ms": p["exposed_comm_ms"],
                                 "measured_bubble": own["measured"].get("bubble_fraction"),
                                 "predicted_bubble": p.get("bubble_fraction")})
                pp = args.mode in ("pp", "hybrid")
                extra = ("bubble meas/pred",) if pp else ("overlap meas/pred", "exposed ms meas/pred")
                head = [*names, "steps", "measured ms", "replay ms (err)", "predicted from base ms (err)", *extra]
                print("| " + " | ".join(head) + " |")
                print("|" + "---|" * len(head))
                num = lambda v: -1.0 if v is None else v
                for r in rows:
                    m = r["measured_ms"]
                    cols = [*r["cell"], str(r["steps"]), f"{m:.3f}",
                            f"{r['replay_ms']:.3f} ({100 * (r['replay_ms'] - m) / m:+.1f} %)",
                            f"{r['predicted_ms']:.3f} ({100 * (r['predicted_ms'] - m) / m:+.1f} %)"
                            + (" *" if r["extrapolated"] else "")]
                    if pp:
                        cols.append(f"{num(r['measured_bubble']):.3f} / {num(r['predicted_bubble']):.3f}")
                    else:
                        cols += [f"{num(r['measured_overlap']):.2f} / {num(r['predicted_overlap']):.2f}",
                                 f"{r['measured_exposed_ms']:.3f} / {r['predicted_exposed_ms']:.3f}"]
                    print("| " + " | ".join(cols) + " |")
                tau = kendall([r["predicted_ms"] for r in rows], [r["measured_ms"] for r in rows])
                print(f"\nKendall tau-b (predicted from base vs measured, {len(rows)} cells): {tau:.3f}")
                best = min(rows, key=lambda r: r["measured_ms"])
                print(f"exhaustive grid best: {' '.join(kv(best['cell']))} "
                      f"{best['measured_ms']:.3f} ms; grid cost {len(rows)} cells x ({args.warmup} + measured) steps")
                errs = [abs(r["predicted_ms"] - r["measured_ms"]) / r["measured_ms"] for r in rows[1:]]
                if errs:
                    print(f"changed settings: {sum(e <= 0.10 for e in errs)} of {len(errs)} within 10 %, "
                          f"largest |error| {100 * max(errs):.1f} %")
                if args.keep:
                    print(f"grid recording: {session}; acknowledged steps: {acks}")
                if args.grid_only:
                    return
                tune(rows)

        # Bayesian-optimisation baseline (Horovod's autotuner defaults): 20 samples x 10 steps.
        # Each knob on [0, 1]: numbers on a log scale when they span more than 8x (bucket bytes),
        # else linear; other values by their index (schedules, algorithms, codecs).
        rng = random.Random(args.seed)

        def axis(vals):
            try:
                x = [float(v) for v in vals]
            except ValueError:
                return lambda v: float(vals.index(v)) / max(1, len(vals) - 1)
            if min(x) > 0 and max(x) / min(x) > 8:
                x = [np.log2(v) for v in x]
            lo, hi = min(x), max(x)
            return lambda v: (x[vals.index(v)] - lo) / ((hi - lo) or 1)

        axes = [axis(v) for _, v in knobs]
        enc = lambda c: [a(v) for a, v in zip(axes, c)]
        grid = list(itertools.product(*[v for _, v in knobs]))
        xs, ys, bo = [], [], []
        t0 = time.time()
        # The GP needs each sample's value before choosing the next. Each sample is measured live
        # (measure(): `set`, then `tune` over that one value; a recording of this job cannot keep
        # up: it emits ~300 k events/s with its history).
        for i in range(args.bo_samples):
            if i < 3:
                c = rng.choice(grid)
            else:
                ei = expected_improvement(xs, ys, [enc(g) for g in grid])
                c = grid[int(np.argmax(ei))]
            ms = measure(c, f"bo{i}", args.bo_steps)
            if ms is None:
                continue
            xs.append(enc(c))
            ys.append(ms)
            bo.append((c, ms))
        bb = min(bo, key=lambda x: x[1])
        cellb = next((r for r in rows if tuple(r["cell"]) == tuple(bb[0])), None)
        print(f"bayesian baseline: {len(bo)} samples x (2 + {args.bo_steps}) steps = {len(bo) * (2 + args.bo_steps)} "
              f"steps, best {bb[0]} {bb[1]:.3f} ms (grid measured that cell at "
              f"{cellb['measured_ms'] if cellb else float('nan'):.3f} ms), {time.time() - t0:.1f} s; samples: "
              + ", ".join(f"{'/'.join(c)}={m:.2f}" for c, m in bo))
    finally:
        try:
            os.killpg(launcher, signal.SIGTERM)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    main()
