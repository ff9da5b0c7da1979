#!/usr/bin/env python3
"""What trainscope-train's calibration costs per change of the gradient sync (docs/TUNING.md,
"calibration"; docs/BENCHMARKS.md, "Every knob family").

A `trainscope-cli demo --ranks N` job (the reference trainer, data parallel) is recorded while
dp.compression is set to each of --values in turn; every change makes each rank run the
calibration, traced as `calibrate`, `calibrate work` and `calibrate codec` collectives. Per rank
and change: how many collectives and the time from the first one's start to the last one's end,
read from the recording's SQLite; and per rank and change the backward's compute calibration
(the `calibrate dp` range).

--mode disco: the DISCO demo (4 layers of 256, batch 128) while disco.sparsity is set to each of
--values; per rank and change the length of the calibration's range `calibrate disco (what-if)`
(25 training passes, TRAINER.md), and their median.

--mode pp: the pipeline demo (8 layers of 256, batch 128) while pp.microbatches is set to each of
--values; per rank and change the length of the range `calibrate pp` (the stage's layers at five
micro-batch sizes, and the deferred W), and their median.

--codecs (dp): also each codec's time alone per payload size (`calibrate codec`), the fastest of
each calibration, median over ranks, calibration by calibration (the first at the job's first
step, on constant data while the job has no gradients yet, if the recording reaches back to it).

  bench/calibration_cost.py [--build build] [--ranks 2] [--values fp16,none,int8,none] [--job-args "..."]
  bench/calibration_cost.py --mode disco [--values 0.25,0.5,0.75,0.5,...]
  bench/calibration_cost.py --mode pp [--values 2,4,8,4]
"""
import argparse
import collections
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import tempfile
import time


def print_ranges(db, name):
    """Per rank the lengths of the ranges called `name` (one per calibration) and their median."""
    rows = db.execute("select rank, (end_ns - start_ns) / 1e6 from event_view "
                      "where name = ? order by rank, start_ns", (name,)).fetchall()
    for r in sorted({x[0] for x in rows}):
        ms = [x[1] for x in rows if x[0] == r]
        print(f"rank {r}: {len(ms)} calibrations ({name}), " + ", ".join(f"{x:.1f}" for x in ms) +
              f" ms; median {statistics.median(ms):.1f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mode", choices=("dp", "disco", "pp"), default="dp")
    ap.add_argument("--codecs", action="store_true", help="dp: each codec alone per size and calibration")
    ap.add_argument("--values", default=None, help="dp: dp.compression values; disco: disco.sparsity values")
    ap.add_argument("--gap-ms", type=float, default=5.0, help="a pause this long starts a new calibration")
    ap.add_argument("--job-args", default="", help="dp: trainscope-train's options for the demo, e.g. "
                    "\"--layers 48 --width 64 --step-delay-ms 0\" (the what-if grids' job)")
    args = ap.parse_args()
    disco, pp = args.mode == "disco", args.mode == "pp"
    knob = {"disco": "disco.sparsity", "pp": "pp.microbatches"}.get(args.mode, "dp.compression")
    if args.values is None:
        args.values = {"disco": "0.25,0.5,0.75,0.5,0.25,0.5,0.75,0.5", "pp": "2,4,8,4,2,4,8,4"}.get(
            args.mode, "fp16,none,int8,none")
    cli = os.path.join(args.build, "bin", "trainscope-cli")
    rt = tempfile.mkdtemp(prefix="calib-cost-")
    os.chmod(rt, 0o700)
    env = dict(os.environ, TRAINSCOPE_RUNTIME_DIR=rt, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    run = lambda *a: subprocess.run([cli, *a], env=env, capture_output=True, text=True, check=True)
    demo = run("demo", "--ranks", str(args.ranks), "--steps", "1000000",
               *(["--mode", "disco", "--", "--layers", "4", "--width", "256", "--batch", "128"] if disco
                 else ["--mode", "pp", "--", "--layers", "8", "--width", "256", "--batch", "128"] if pp
                 else (["--", *args.job_args.split()] if args.job_args else [])))
    job = re.search(r"job (\S+)", demo.stdout).group(1)
    launcher = int(re.search(r"launcher pid (\d+)", demo.stderr).group(1))
    out = os.path.join(rt, "calib.tsdb")
    try:
        time.sleep(2)
        values = args.values.split(",")
        rec = subprocess.Popen([cli, "record", "--job", job, "--seconds", str(2 + 1.5 * len(values)), "--out", out],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        for v in values:
            run("set", "--job", job, f"{knob}={v}")
            time.sleep(1.2)
        rec.wait(timeout=120)
    finally:
        try:
            os.killpg(launcher, signal.SIGTERM)
        except ProcessLookupError:
            pass
    db = sqlite3.connect(out)
    if disco or pp:
        print_ranges(db, "calibrate disco (what-if)" if disco else "calibrate pp")
        return
    rows = db.execute("select rank, start_ns, end_ns, name, args from event_view where kind = 'collective' and "
                      "name in ('calibrate', 'calibrate work', 'calibrate codec') order by rank, start_ns").fetchall()
    codec = collections.defaultdict(dict)  # (codec, bytes) -> {calibration index: [fastest us per rank]}
    for r in sorted({x[0] for x in rows}):
        groups, cur = [], []
        for _, a, b, name, a_ in (x for x in rows if x[0] == r):
            if cur and a - cur[-1][1] > args.gap_ms * 1e6:
                groups.append(cur)
                cur = []
            cur.append((a, b, name, a_))
        if cur:
            groups.append(cur)
        print(f"rank {r}: " + ", ".join(f"{len(g)} collectives in {(g[-1][1] - g[0][0]) / 1e6:.1f} ms" for g in groups))
        for i, g in enumerate(groups):
            fastest = {}
            for a, b, name, a_ in g:
                if name == "calibrate codec":
                    x = json.loads(a_)
                    k = (x["algorithm"], x["bytes"])
                    fastest[k] = min(fastest.get(k, float("inf")), (b - a) / 1e3)
            for k, us in fastest.items():
                codec[k].setdefault(i, []).append(us)
    if args.codecs:
        for (name, nbytes), per in sorted(codec.items()):
            print(f"codec {name} {nbytes} B: " + ", ".join(f"{statistics.median(v):.1f}" for _, v in sorted(per.items()))
                  + " us (each calibration's fastest, median over ranks)")
    # The backward's compute calibration after the collectives (range "calibrate dp": a forward
    # and the backward, three times).
    print_ranges(db, "calibrate dp")


if __name__ == "__main__":
    main()
