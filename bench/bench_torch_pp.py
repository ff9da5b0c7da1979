#!/usr/bin/env python3
"""Overhead of the trainscope package on the torch-pp demo's step time (torch.distributed.pipelining).

Alternates runs of the same pipeline job (python -m trainscope.demo_pp: p ranks, gloo, CPU) without
the package (--no-trainscope: PyTorch's schedule object as is) and with it (agent started, step
agreement every step, F/B/W and send/receive events, knobs pp.schedule/pp.microbatches declared; no
client attached). Each run's rank-0 step times after --warmup steps give one median (wall and
process CPU); the result is the median of those medians per configuration.

    build/torch2-venv/bin/python bench/bench_torch_pp.py --build build --runs 6 --steps 200 [--schedule 1f1b]
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_once(a, with_ts, tmp, idx):
    out = os.path.join(tmp, "times-%d-%d.txt" % (idx, with_ts))
    env = dict(os.environ)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(a.ranks),
                "PYTHONPATH": os.path.join(a.build, "python"),
                "TRAINSCOPE_AGENT_LIB": os.path.join(a.build, "lib", "libtrainscope_agent.so"),
                "TRAINSCOPE_RUNTIME_DIR": os.path.join(tmp, "run"), "TRAINSCOPE_JOB_ID": "benchpp-%d" % idx})
    cmd = [a.python, "-m", "trainscope.demo_pp", "--steps", str(a.steps), "--log-every", "0", "--time-out", out,
           "--schedule", a.schedule, "--microbatches", str(a.microbatches)]
    if not with_ts:
        cmd.append("--no-trainscope")
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.DEVNULL)
             for r in range(a.ranks)]
    try:
        codes = [p.wait(timeout=600) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        sys.exit("a run did not finish within 600 s")
    if any(codes):
        sys.exit("run failed: %s" % codes)
    with open(out) as f:
        rows = [tuple(float(x) for x in line.split()) for line in f if line.strip()][a.warmup:]
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--python", default="")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--microbatches", type=int, default=4)
    a = p.parse_args()
    a.python = a.python or os.path.join(a.build, "torch2-venv", "bin", "python")
    res = {0: [], 1: []}
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "run"), mode=0o700)
        for i in range(a.runs):
            for with_ts in ((0, 1) if i % 2 == 0 else (1, 0)):
                w, c = run_once(a, with_ts, tmp, i)
                res[with_ts].append((w, c))
                print("run %d %-10s median step %.3f ms wall, %.3f ms cpu" % (
                    i, "trainscope" if with_ts else "baseline", w, c), flush=True)
    for k, name in ((0, "wall"), (1, "cpu")):
        b = statistics.median(r[k] for r in res[0])
        t = statistics.median(r[k] for r in res[1])
        print("%-4s baseline %.3f ms, trainscope %.3f ms (median of run medians), overhead %+.2f %%" % (
            name, b, t, 100.0 * (t - b) / b), flush=True)


if __name__ == "__main__":
    main()
