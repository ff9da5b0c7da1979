#!/usr/bin/env python3
"""Overhead of the trainscope Python package + DDP hook on the torch-ddp demo's step time.

Alternates runs of the same 2-rank DDP job (python/trainscope/demo_ddp.py, gloo, CPU) without
the package (--no-trainscope: DDP's built-in allreduce, no step markers) and with it (agent
started, step agreement over torch.distributed every step, the comm hook with
dp.compression=none, loss counters; no client attached). Each run's rank-0 step times after
--warmup steps give one median; the result is the median of those medians per configuration.

    python3 bench/bench_torch_ddp.py --build build --runs 6 --steps 300

Needs Debian's python3-torch (run with /usr/bin/python3 or --python).
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
                "TRAINSCOPE_RUNTIME_DIR": os.path.join(tmp, "run"), "TRAINSCOPE_JOB_ID": "bench-%d" % idx})
    cmd = [a.python, "-m", "trainscope.demo_ddp", "--steps", str(a.steps), "--log-every", "0", "--eval-every", "0",
           "--time-out", out]
    if not with_ts:
        cmd.append("--no-trainscope")
    procs = []
    for r in range(a.ranks):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL))
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit("run failed: %s" % codes)
    with open(out) as f:
        t = [float(x) for x in f.read().split()]
    return statistics.median(t[a.warmup:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--runs", type=int, default=6, help="runs per configuration (alternating)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=50)
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "run"), 0o700)
        base, ts = [], []
        for i in range(a.runs):
            # alternate the order too, so that drift in the machine's load hits both alike
            for with_ts in ((False, True) if i % 2 == 0 else (True, False)):
                m = run_once(a, with_ts, tmp, i)
                (ts if with_ts else base).append(m)
                print("run %d %-9s median step %.3f ms" % (i, "trainscope" if with_ts else "baseline", m), flush=True)
        mb, mt = statistics.median(base), statistics.median(ts)
        print("baseline   median of medians %.3f ms  (runs: %s)" % (mb, " ".join("%.3f" % x for x in base)))
        print("trainscope median of medians %.3f ms  (runs: %s)" % (mt, " ".join("%.3f" % x for x in ts)))
        print("overhead %.2f %%" % ((mt / mb - 1.0) * 100.0))


if __name__ == "__main__":
    main()
