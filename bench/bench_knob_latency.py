#!/usr/bin/env python3
"""Knob change latency (docs/BENCHMARKS.md, "Knob change latency").

A 4-rank trainscope-testjob (`mpirun -np 4 --oversubscribe`, loopback) with rank 0 reporting the
CLOCK_MONOTONIC begin of every step (--steps-file). While it runs, `trainscope-cli set --json
test.scale=V` is run --sets times (alternating values, --gap seconds apart). For each:
  latency      wall time of the whole `trainscope-cli set` process (exec, discovery, connect to all
               4 ranks, KnobList, SetKnob, until every rank's applied KnobAck), CLOCK_MONOTONIC
               before the spawn to its exit
  issue step   the step rank 0 was in when the process was spawned (from its step begins)
  applied      the step every rank reported in its applied KnobAck (and printed by the job)
  delta        applied - issue step: 1 means applied at the next step begin after the set started
Reports median / max of both.

  bench/bench_knob_latency.py [--build build-bench] [--sets 10] [--np 4] [--steps 1500]
                              [--work-us 2000] [--ranges 100] [--step-ms 5] [--gap 0.7]
"""
import argparse
import bisect
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-bench")
    ap.add_argument("--sets", type=int, default=10)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--work-us", type=int, default=2000)
    ap.add_argument("--ranges", type=int, default=100)
    ap.add_argument("--step-ms", type=int, default=5)
    ap.add_argument("--gap", type=float, default=0.7)
    a = ap.parse_args()
    rt = tempfile.mkdtemp(prefix="ts-bench-knob-")
    os.chmod(rt, 0o700)
    job = f"bench-knob-{os.getpid()}"
    env = dict(os.environ)
    env.pop("TRAINSCOPE_DISABLE", None)
    env.update({
        "TRAINSCOPE_RUNTIME_DIR": rt, "TRAINSCOPE_JOB_ID": job,
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_btl": "self,vader", "OMPI_MCA_oob_tcp_if_include": "lo",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
    })
    testjob = os.path.join(a.build, "bin", "trainscope-testjob")
    cli = os.path.join(a.build, "bin", "trainscope-cli")
    cmd = ["mpirun", "-np", str(a.np), "--oversubscribe", testjob, "--steps", str(a.steps), "--work-us",
           str(a.work_us), "--ranges", str(a.ranges), "--step-ms", str(a.step_ms), "--start-delay-ms", "1000",
           "--steps-file", os.path.join(rt, job + ".steps")]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    print(f"# load before: {open('/proc/loadavg').read().split()[:3]}")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        if len([f for f in os.listdir(rt) if f.startswith(job + ".") and f.endswith(".agent")]) >= a.np:
            break
        time.sleep(0.05)
    time.sleep(1.5)  # past --start-delay-ms: the steps are running
    # trainscope-cli links the agent: with TRAINSCOPE_JOB_ID in its environment it would start one
    # inside itself at load time and pose as rank 0 of the job (docs/BENCHMARKS.md).
    cli_env = {k: v for k, v in env.items() if k != "TRAINSCOPE_JOB_ID"}
    sets = []
    for i in range(a.sets):
        value = "1.5" if i % 2 == 0 else "1"
        t0 = time.monotonic_ns()
        r = subprocess.run([cli, "set", "--job", job, "--json", f"test.scale={value}"], env=cli_env,
                           capture_output=True, text=True)
        t1 = time.monotonic_ns()
        if r.returncode != 0:
            print(f"set {i}: exit {r.returncode}: {r.stderr.strip()}", file=sys.stderr)
            sets.append((t0, t1, None, None))
        else:
            j = json.loads(r.stdout)[0]
            sets.append((t0, t1, j["step"], j["same_step"]))
        time.sleep(a.gap)
    # The same protocol in process, phase by phase (bench/bench_knob_client.cpp).
    kc = subprocess.run([os.path.join(a.build, "bin", "bench_knob_client"), "--job", job, "--sets", str(a.sets),
                         "--gap-ms", str(int(a.gap * 1000))], env=cli_env, capture_output=True, text=True)
    out, err = p.communicate(timeout=300)
    with open(os.path.join(rt, job + ".steps")) as f:
        step_lines = f.read().splitlines()
    shutil.rmtree(rt, ignore_errors=True)
    if p.returncode != 0:
        sys.exit(f"mpirun exited {p.returncode}: {err[-2000:]}")
    begins = []
    durs = []
    for l in step_lines:
        m = re.match(r"^steptime (\d+) (\d+) (\d+)$", l)
        if m:
            begins.append(int(m.group(2)))
            durs.append(int(m.group(3)))
    applied_lines = [l for l in out.splitlines() if " applied test.scale=" in l]
    print(f"# load after: {open('/proc/loadavg').read().split()[:3]}; {a.np} ranks; step time median "
          f"{statistics.median(durs)/1000:.2f} ms (rank 0, {len(durs)} steps); "
          f"{len(applied_lines)} 'applied' lines from the job ({2 * a.np * a.sets} expected: CLI + in-process sets)")
    lat, deltas = [], []
    print("| set | latency (ms) | issue step | applied step | delta | same step on all ranks |")
    print("|---:|---:|---:|---:|---:|---|")
    for i, (t0, t1, step, same) in enumerate(sets):
        if t0 > begins[-1]:
            print(f"| {i} | job finished before the set; increase --steps |")
            continue
        issue = bisect.bisect_right(begins, t0) - 1
        ms = (t1 - t0) / 1e6
        lat.append(ms)
        if step is not None:
            deltas.append(step - issue)
        print(f"| {i} | {ms:.1f} | {issue} | {step} | {None if step is None else step - issue} | {same} |")
    print()
    print("trainscope-cli set " + f"latency: median {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms; "
          f"applied - issue step: median {statistics.median(deltas)}, max {max(deltas)}, all {deltas}")
    print()
    print(kc.stdout.strip())
    if kc.returncode != 0:
        print(f"bench_knob_client exited {kc.returncode}: {kc.stderr.strip()}")


if __name__ == "__main__":
    main()
