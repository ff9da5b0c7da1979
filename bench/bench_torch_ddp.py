#!/usr/bin/env python3
"""Overhead of the trainscope Python package + DDP hook on the torch-ddp demo's step time.

Rotates runs of the same 2-rank DDP job (python/trainscope/demo_ddp.py, gloo, CPU) over the
configurations of --configs (CONFIGS below; the first is the baseline): plain DDP, DDP with
PyTorch's own Python allreduce hook (the anchor), the package with our hook (agent, step
agreement, dp.compression=none, measured TCP counters, loss counters; no client attached), the
package with hook="on-demand". Each run's rank-0 step times after --warmup steps give one
median; the result is the median of those medians per configuration, with the range of run
medians and a 95 % bootstrap interval of each ratio.

    python3 bench/bench_torch_ddp.py --build build --configs plain,torch-hook,trainscope --runs 6 --steps 250
    python3 bench/bench_torch_ddp.py --build build --wire [--ranks 3]   # bytes: measured vs recorded

Needs Debian's python3-torch (run with /usr/bin/python3 or --python).
"""

import argparse
import os
import socket
import random
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


# Configurations: what each run starts (--configs picks and orders them).
CONFIGS = {
    "plain": ["--no-trainscope"],                     # DDP's built-in C++ allreduce, no package
    "torch-hook": ["--no-trainscope", "--torch-hook"],  # the anchor: PyTorch's own Python allreduce_hook
    "trainscope": [],                                 # package, agent, agreement, our hook (compression none)
    "ts-no-hook": ["--no-hook"],                      # package, agent, agreement; DDP's own allreduce
    "ts-on-demand": ["--hook", "on-demand"],          # attach_ddp(hook="on-demand") under none
    "ts-agree1": ["--agree-every", "1"],              # trainscope with the agreement at every step
    "ts-no-hook-blocking": ["--no-hook", "--agree-blocking"],  # ts-no-hook, every agreement blocking (before 2026-11-24 17:30)
    # trainscope with every capture call releasing the GIL (ctypes.CDLL), as before 2026-11-25
    "ts-gil-release": [],
}
# Environment per configuration (beside the arguments above).
CONFIG_ENV = {"ts-gil-release": {"TRAINSCOPE_CTYPES_GIL": "release"}}


def run_once(a, config, tmp, idx):
    out = os.path.join(tmp, "times-%d-%s.txt" % (idx, config))
    env = dict(os.environ)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(a.ranks),
                "PYTHONPATH": os.path.join(a.build, "python"),
                "TRAINSCOPE_AGENT_LIB": os.path.join(a.build, "lib", "libtrainscope_agent.so"),
                "TRAINSCOPE_RUNTIME_DIR": os.path.join(tmp, "run"), "TRAINSCOPE_JOB_ID": "bench-%d" % idx})
    env.update(CONFIG_ENV.get(config, {}))
    cmd = [a.python, "-m", "trainscope.demo_ddp", "--steps", str(a.steps), "--log-every", "0", "--eval-every", "0",
           "--time-out", out] + CONFIGS[config]
    if config == "plain":
        cmd += a.baseline_args.split()
    if config.startswith("t") and config != "torch-hook" and "--agree-every" not in CONFIGS[config]:
        cmd += ["--agree-every", str(a.agree_every)]
    cmd += a.demo_args.split()
    procs = []
    for r in range(a.ranks):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL))
    try:
        codes = [p.wait(timeout=600) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        sys.exit("a run did not finish within 600 s")
    if any(codes):
        sys.exit("run failed: %s" % codes)
    with open(out) as f:
        rows = [tuple(float(x) for x in line.split()) for line in f if line.strip()]
    rows = rows[a.warmup:]
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


def interval(base, other, reps=2000, seed=7):
    """95 % bootstrap interval (runs resampled within each configuration) of
    median(other) / median(base) - 1, in percent."""
    rnd = random.Random(seed)
    vals = []
    for _ in range(reps):
        b = statistics.median(rnd.choice(base) for _ in base)
        o = statistics.median(rnd.choice(other) for _ in other)
        vals.append((o / b - 1.0) * 100.0)
    vals.sort()
    return vals[int(0.025 * reps)], vals[int(0.975 * reps) - 1]


def paired(base, other, reps=2000, seed=7):
    """Median over rounds of other / base - 1 (the runs of one round ran back to back), in
    percent, and its 95 % bootstrap interval (rounds resampled): drift of the machine between
    rounds, which the unpaired interval above carries, cancels."""
    ratios = [(o / b - 1.0) * 100.0 for b, o in zip(base, other)]
    rnd = random.Random(seed)
    vals = sorted(statistics.median(rnd.choice(ratios) for _ in ratios) for _ in range(reps))
    return statistics.median(ratios), vals[int(0.025 * reps)], vals[int(0.975 * reps) - 1], \
        sum(1 for r in ratios if r > 0)


def wire(a, tmp):
    """Bytes per step on the wire, measured from the kernel's tcp_info of rank 0's sockets, next to
    what the hook computes and records (the Bytes of the bucket events), per compression."""
    for c in ("none", "fp16", "bf16", "int8", "topk-ef"):
        out = os.path.join(tmp, "wire-%s.txt" % c)
        env = dict(os.environ)
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(a.ranks),
                    "PYTHONPATH": os.path.join(a.build, "python"),
                    "TRAINSCOPE_AGENT_LIB": os.path.join(a.build, "lib", "libtrainscope_agent.so"),
                    "TRAINSCOPE_RUNTIME_DIR": os.path.join(tmp, "run"), "TRAINSCOPE_JOB_ID": "wire-" + c})
        cmd = [a.python, "-m", "trainscope.demo_ddp", "--steps", "120", "--log-every", "0", "--eval-every", "0",
               "--compression", c, "--wire-out", out]
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.DEVNULL)
                 for r in range(a.ranks)]
        if any(p.wait() for p in procs):
            sys.exit("run failed")
        with open(out) as f:
            print(f.read().strip(), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--runs", type=int, default=6, help="runs per configuration (alternating)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--baseline-args", default="", help="more options for the baseline only, e.g. '--torch-hook'")
    p.add_argument("--demo-args", default="", help="more demo_ddp options, e.g. '--batch 512'")
    p.add_argument("--agree-every", default="auto", help="trainscope.init(agree_every=K or auto)")
    p.add_argument("--no-hook", action="store_true", help="the same as --configs plain,ts-no-hook (breakdown)")
    p.add_argument("--configs", default="plain,trainscope",
                   help="comma-separated, the first is the baseline: " + ", ".join(CONFIGS))
    p.add_argument("--wire", action="store_true", help="measure bytes on the wire per compression instead")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "run"), 0o700)
        if a.wire:
            return wire(a, tmp)
        configs = a.configs.split(",")
        if a.no_hook:  # old spelling of --configs plain,ts-no-hook
            configs = ["plain", "ts-no-hook"]
        for c in configs:
            if c not in CONFIGS:
                sys.exit("unknown configuration %r (one of %s)" % (c, ", ".join(CONFIGS)))
        res = {c: [] for c in configs}
        for i in range(a.runs):
            # rotate the order every round, so that drift in the machine's load hits all alike
            k = i % len(configs)
            for c in configs[k:] + configs[:k]:
                m = run_once(a, c, tmp, i)
                res[c].append(m)
                print("run %d %-11s median step %.3f ms wall, %.3f ms cpu" % (i, c, m[0], m[1]), flush=True)
        base = configs[0]
        for j, what in ((0, "wall"), (1, "cpu ")):
            mb = statistics.median(x[j] for x in res[base])
            print("%s %-11s %.3f ms (median of %d run medians; runs %.3f-%.3f)" % (
                what, base, mb, len(res[base]), min(x[j] for x in res[base]), max(x[j] for x in res[base])))
            for c in configs[1:]:
                mt = statistics.median(x[j] for x in res[c])
                lo, hi = interval([x[j] for x in res[base]], [x[j] for x in res[c]])
                print("%s %-11s %.3f ms (runs %.3f-%.3f), vs %s %+.2f %% [95 %% interval %+.2f, %+.2f]" % (
                    what, c, mt, min(x[j] for x in res[c]), max(x[j] for x in res[c]), base,
                    (mt / mb - 1.0) * 100.0, lo, hi))
            if "torch-hook" in configs and "trainscope" in configs and base != "torch-hook":
                mh = statistics.median(x[j] for x in res["torch-hook"])
                mt = statistics.median(x[j] for x in res["trainscope"])
                lo, hi = interval([x[j] for x in res["torch-hook"]], [x[j] for x in res["trainscope"]])
                print("%s trainscope vs torch-hook %+.2f %% [95 %% interval %+.2f, %+.2f]" % (
                    what, (mt / mh - 1.0) * 100.0, lo, hi))
            # Paired by round: each configuration against every other that ran beside it.
            for bi, bc in enumerate(configs):
                for c in configs[bi + 1:]:
                    med, lo, hi, up = paired([x[j] for x in res[bc]], [x[j] for x in res[c]])
                    print("%s paired %s vs %s: median of %d rounds %+.2f %% [95 %% interval %+.2f, %+.2f], "
                          "slower in %d" % (what, c, bc, len(res[bc]), med, lo, hi, up))

if __name__ == "__main__":
    main()
