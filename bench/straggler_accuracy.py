#!/usr/bin/env python3
"""Straggler attribution on a real job (docs/BENCHMARKS.md, "Straggler attribution"; issue #36).

trainscope-train (MPI, --mode dp) on N ranks runs S steps with K one-off stragglers injected at
random (rank, step) -- `--inject straggler:rank=R,ms=X,step=S` (compute) or
`slow-loader:rank=R,ms=X,step=S` (host), X uniform in [--min-ms, --max-ms] -- while
`trainscope-cli record` saves every step; `trainscope-cli analyze --json` then gives the same
last-arrival attribution as `doctor` (stragglers.attribution). Counted:
  named right   the step's latest arrival is the injected rank
  cause right   ... and its cause is compute (straggler) or host (slow loader)
  false         steps named that had no injection (OS noise, the machine's other load)

  bench/straggler_accuracy.py [--build build] [--np 8] [--steps 400] [--inject 100] [--seed 1]
                              [--min-ms 20] [--max-ms 40] [--width 128] [--json]
  A clean run (false reports only): --inject 0.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import env_for, wait_ranks  # noqa: E402 (the same job set-up as the reference benchmarks)

MODEL = ["--mode", "dp", "--model", "mlp", "--layers", "4", "--batch", "32", "--eval-every", "0", "--log-every", "0"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", type=int, default=8)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--inject", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-ms", type=float, default=20)
    ap.add_argument("--max-ms", type=float, default=40)
    ap.add_argument("--width", type=int, default=128, help="the MLP's width (a wider one: longer steps)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    b = os.path.join(a.build, "bin")
    rng = random.Random(a.seed)
    # One injection per step, never in the first 10 steps (warm-up) nor the last 2.
    steps = rng.sample(range(10, a.steps - 2), min(a.inject, a.steps - 12))
    inj = []
    for i, s in enumerate(sorted(steps)):
        kind = "straggler" if i % 2 == 0 else "slow-loader"
        inj.append({"kind": kind, "rank": rng.randrange(a.np), "step": s,
                    "ms": int(rng.uniform(a.min_ms, a.max_ms))})
    rt = tempfile.mkdtemp(prefix="ts-straggler-")
    job = f"straggler-acc-{os.getpid()}"
    env = env_for(rt)
    cmd = [os.path.join(b, "trainscope-cli"), "launch", "--ranks", str(a.np), "--job-id", job, "--",
           os.path.join(b, "trainscope-train"), "--steps", str(a.steps)] + MODEL + ["--width", str(a.width)]
    for x in inj:
        cmd += ["--inject", "%s:rank=%d,ms=%d,step=%d" % (x["kind"], x["rank"], x["ms"], x["step"])]
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    out_file = os.path.join(rt, job + ".tsdb")
    try:
        if not wait_ranks(rt, job, a.np, timeout=120):
            sys.exit("ranks never showed up: " + p.stderr.read()[-2000:])
        rec = subprocess.Popen([os.path.join(b, "trainscope-cli"), "record", "--job", job, "--out", out_file],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            sys.exit(f"job exited {p.returncode}: {err[-2000:]}")
        try:
            rec.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            rec.send_signal(signal.SIGINT)
            rec.communicate()
        job_s = time.time() - t0
        r = subprocess.run([os.path.join(b, "trainscope-cli"), "analyze", out_file, "--json"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.exit("analyze: " + r.stderr)
        at = json.loads(r.stdout)["stragglers"]["attribution"]
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(rt, ignore_errors=True)
    named = {x["step"]: x for x in at["per_step"]}
    right = cause = 0
    for x in inj:
        n = named.get(x["step"])
        if n and n["rank"] == x["rank"]:
            right += 1
            cause += n["cause"] == ("compute" if x["kind"] == "straggler" else "host")
    injected_steps = {x["step"] for x in inj}
    false = [s for s in named if s not in injected_steps]
    false_late = sorted((round(named[s]["late_ms"], 1) for s in false), reverse=True)
    res = {"ranks": a.np, "width": a.width, "steps": a.steps, "steps_matched": at["steps"], "injected": len(inj),
           "named_right": right, "accuracy_pct": round(100.0 * right / max(1, len(inj)), 1), "cause_right": cause,
           "false_reports": len(false), "false_report_steps": false[:20], "false_report_late_ms": false_late[:20], "threshold_ms": at["threshold_ms"],
           "median_step_ms": at["median_step_ms"], "noise_ms": at.get("noise_ms"), "job_s": round(job_s, 1)}
    if a.json:
        print(json.dumps(res))
    else:
        print("%d ranks, %d steps (%d matched), %d stragglers injected (%g-%g ms, half compute, half host)" % (
            a.np, a.steps, at["steps"], len(inj), a.min_ms, a.max_ms))
        print("  named with the right rank and step: %d (%.1f %%), right cause: %d" % (right, res["accuracy_pct"],
                                                                                    cause))
        print("  steps named without an injection: %d %s" % (len(false), false[:20]))
        print("  threshold %.3f ms (noise floor %.3f ms), median step %.3f ms, job %.0f s" % (at["threshold_ms"], at.get("noise_ms") or 0, at["median_step_ms"],
                                                                      job_s))


if __name__ == "__main__":
    main()
