#!/usr/bin/env python3
"""Agent overhead on a real MPI step loop (docs/BENCHMARKS.md, "Agent overhead on an MPI step loop").

trainscope-testjob under `mpirun -np 2` (loopback, vader), --work-us of busy compute per step split
into --ranges traced ranges, its traced MPI_Allreduce, and rank 0's per-step times (--steps-file).
Three configurations, alternated round by round (the order rotates) to cancel drift:
  off     TRAINSCOPE_DISABLE=1: ts_init returns TS_DISABLED, every capture call is a no-op
  agent   the agent running (capture, drain thread, control server), nobody attached
  record  the agent plus `trainscope-cli record` attached for the whole run (history + live,
          straight into a .tsdb)
The first --warmup steps of each run are dropped. Reports median / p90 step time per
configuration (all rounds pooled), the overhead of the medians against `off`, and the per-round
median ratios (their spread is the confidence note).

  bench/bench_overhead.py [--build build-bench] [--rounds 3] [--steps 250] [--work-us 10000]
                          [--ranges 300] [--np 2]
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def pct(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_one(a, cfg, rt, tag):
    env = dict(os.environ)
    env.update({
        "TRAINSCOPE_RUNTIME_DIR": rt,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_btl": "self,vader",
        "OMPI_MCA_oob_tcp_if_include": "lo",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
    })
    env.pop("TRAINSCOPE_DISABLE", None)
    job = f"bench-ovh-{os.getpid()}-{tag}"
    env["TRAINSCOPE_JOB_ID"] = job
    if cfg == "off":
        env["TRAINSCOPE_DISABLE"] = "1"
    testjob = os.path.join(a.build, "bin", "trainscope-testjob")
    cli = os.path.join(a.build, "bin", "trainscope-cli")
    cmd = ["mpirun", "-np", str(a.np), "--oversubscribe", testjob, "--steps", str(a.steps), "--work-us",
           str(a.work_us), "--ranges", str(a.ranges), "--start-delay-ms", str(a.start_delay_ms), "--steps-file", os.path.join(rt, job + ".steps")]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rec = None
    rec_out = None
    if cfg == "record":
        deadline = time.time() + 20
        while time.time() < deadline:
            n = len([f for f in os.listdir(rt) if f.startswith(job + ".") and f.endswith(".agent")])
            if n >= a.np:
                break
            time.sleep(0.05)
        rec_out = os.path.join(rt, job + ".tsdb")
        # trainscope-cli links the agent: with TRAINSCOPE_JOB_ID in its environment it would start
        # one inside itself at load time and pose as rank 0 of the job (docs/BENCHMARKS.md).
        cli_env = {k: v for k, v in env.items() if k != "TRAINSCOPE_JOB_ID"}
        rec = subprocess.Popen([cli, "record", "--job", job, "--out", rec_out], env=cli_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    rec_msg = ""
    if rec:
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            ro, re_ = rec.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            rec.kill()
            ro, re_ = rec.communicate()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        rec_msg = f"[record exit {rec.returncode}, {cpu:.2f} CPU s] " + (ro.strip() + " " + re_.strip().replace("\n", " | "))[:400]
        if rec_out and os.path.exists(rec_out):
            os.remove(rec_out)
    if p.returncode != 0:
        sys.exit(f"{cfg}: mpirun exited {p.returncode}\n{err[-2000:]}")
    with open(os.path.join(rt, job + ".steps")) as f:
        steps = [int(m.group(3)) for m in (re.match(r"^steptime (\d+) (\d+) (\d+)$", l) for l in f) if m]
    os.remove(os.path.join(rt, job + ".steps"))
    if len(steps) != a.steps:
        sys.exit(f"{cfg}: {len(steps)} step times, expected {a.steps}")
    dropped = [l for l in out.splitlines() if " done steps=" in l]
    return steps[a.warmup:], rec_msg, dropped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--work-us", type=int, default=10000)
    ap.add_argument("--ranges", type=int, default=300)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--start-delay-ms", type=int, default=1200, help="lets `record` attach before step 0")
    a = ap.parse_args()
    rt = tempfile.mkdtemp(prefix="ts-bench-ovh-")
    os.chmod(rt, 0o700)
    cfgs = ["off", "agent", "record"]
    per = {c: [] for c in cfgs}
    rounds = {c: [] for c in cfgs}
    print(f"# {a.np} ranks, {a.steps} steps/run ({a.warmup} warm-up dropped), {a.work_us} us compute in "
          f"{a.ranges} ranges/step + MPI_Allreduce (4 KiB), {a.rounds} rounds; load before: "
          f"{open('/proc/loadavg').read().split()[:3]}")
    for r in range(a.rounds):
        order = cfgs[r % 3:] + cfgs[:r % 3]
        for c in order:
            s, rec_msg, dropped = run_one(a, c, rt, f"{r}{c}")
            per[c] += s
            rounds[c].append(statistics.median(s))
            print(f"  round {r} {c:6s}: median {statistics.median(s)/1000:.3f} ms, p90 {pct(s, 0.9)/1000:.3f} ms, "
                  f"n={len(s)} {'; '.join(d.strip() for d in dropped)} {rec_msg}", flush=True)
    shutil.rmtree(rt, ignore_errors=True)
    print(f"# load after: {open('/proc/loadavg').read().split()[:3]}")
    print()
    print("| configuration | steps | median step (ms) | p90 step (ms) | overhead of the pooled median vs off | "
          "per-round median ratio vs off | median of the per-round ratios |")
    print("|---|---:|---:|---:|---:|---|---:|")
    m0 = statistics.median(per["off"])
    for c in cfgs:
        m = statistics.median(per[c])
        rr = [(rounds[c][i] / rounds['off'][i] - 1) * 100 for i in range(a.rounds)]
        ratios = ", ".join(f"{x:+.2f} %" for x in rr)
        print(f"| {c} | {len(per[c])} | {m/1000:.3f} | {pct(per[c], 0.9)/1000:.3f} | "
              f"{(m / m0 - 1) * 100:+.2f} % | {ratios} | {statistics.median(rr):+.2f} % |")


if __name__ == "__main__":
    main()
