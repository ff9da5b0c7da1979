#!/usr/bin/env python3
"""trainscope-train measured from its own recorded traces (docs/BENCHMARKS.md, "Reference training job").

Every traced run: `trainscope-cli launch --ranks N -- trainscope-train ...` (agent preloaded), then
`trainscope-cli record` until the job ends (flight-recorder history first, so every step is in
the session), then `bench_train_trace` computes per rank, inside step windows, from step --warmup on:
  overlap ratio  |comm ∩ compute| / |comm|  (design.md; comm = bucket collectives, compute =
                 Kernel events and forward/backward/optimizer phases), mean over ranks
  exposed comm   |comm \\ compute| per step
  wire bytes     sum of the bucket collectives' Bytes attribute per step (bytes this rank sent)

  overlap      --bucket-bytes B (several buckets, comm starts while backward runs) vs one bucket
  compression  none, fp16, int8, onebit-ef, topk-ef (--topk-ratio 0.01): wire bytes per step
  overhead     rank 0's step times (--steps-file) with TRAINSCOPE_DISABLE=1, the agent alone, and
               the agent with `record` attached, the order rotated round by round

  bench/bench_train.py [--build build] [--np 4] [--steps 300] [--rounds 3] [--buckets 65536,...]
                       [--algorithm allreduce] [what ...]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MODEL = ["--model", "mlp", "--layers", "6", "--width", "256", "--batch", "64", "--eval-every", "50",
         "--log-every", "0"]


def env_for(rt):
    env = dict(os.environ)
    env.update({"TRAINSCOPE_RUNTIME_DIR": rt, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_btl": "self,vader", "OMPI_MCA_oob_tcp_if_include": "lo",
                "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    for k in ("TRAINSCOPE_DISABLE", "TRAINSCOPE_JOB_ID"):
        env.pop(k, None)
    return env


def wait_ranks(rt, job, n, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len([f for f in os.listdir(rt) if f.startswith(job + ".") and f.endswith(".agent")]) >= n:
            return True
        time.sleep(0.05)
    return False


def finish_recorder(rec):
    """Waits for a `record` attached to a job that ended (it saves and exits); one still
    running a minute later is told to stop (SIGINT: it saves what arrived)."""
    try:
        rec.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        rec.send_signal(signal.SIGINT)
        rec.communicate()


def traced_run(a, rt, tag, extra, steps_file=None, disable=False, record=True):
    """Runs the job; returns (trace metrics or None, step times in us or None)."""
    b = os.path.join(a.build, "bin")
    job = f"bench-train-{os.getpid()}-{tag}"
    env = env_for(rt)
    cmd = [os.path.join(b, "trainscope-cli"), "launch", "--ranks", str(a.np), "--job-id", job, "--",
           os.path.join(b, "trainscope-train"), "--steps", str(a.steps)] + MODEL + extra
    if steps_file:
        cmd += ["--steps-file", steps_file]
    if disable:
        env["TRAINSCOPE_DISABLE"] = "1"
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rec, out_file = None, os.path.join(rt, job + ".tsdb")
    if not disable and record:
        if not wait_ranks(rt, job, a.np):
            p.kill()
            sys.exit(f"{tag}: ranks never showed up: {p.communicate()[1][-2000:]}")
        rec = subprocess.Popen([os.path.join(b, "trainscope-cli"), "record", "--job", job, "--out", out_file],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=600)
    if p.returncode != 0:
        sys.exit(f"{tag}: job exited {p.returncode}: {err[-2000:]}")
    metrics = None
    if rec:
        finish_recorder(rec)
        r = subprocess.run([os.path.join(b, "bench_train_trace"), out_file, "--from-step", str(a.warmup)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{tag}: bench_train_trace: {r.stderr}")
        metrics = json.loads(r.stdout)
        os.remove(out_file)
    times = None
    if steps_file:
        with open(steps_file) as f:
            times = [int(l.split()[2]) for l in f if l.startswith("steptime")][a.warmup:]
        os.remove(steps_file)
    return metrics, times


def overlap(a, rt):
    print(f"\n### overlap ({a.np} ranks, {a.steps} steps, from step {a.warmup}, {a.algorithm})\n")
    print("| buckets | overlap ratio (mean over ranks) | per rank | exposed comm ms/step | step ms |")
    print("|---|---:|---|---:|---:|")
    for bb in [int(x) for x in a.buckets.split(",")] + [1 << 30]:
        name = "one bucket" if bb == 1 << 30 else f"{bb // 1024} KiB buckets"
        m, _ = traced_run(a, rt, f"ov{bb}", ["--bucket-bytes", str(bb), "--algorithm", a.algorithm])
        per = ", ".join(f"{r['overlap_ratio']:.2f}" for r in m["per_rank"])
        print(f"| {name} | {m['overlap_ratio']:.3f} | {per} | {m['exposed_comm_ms']:.3f} | {m['step_time_ms']:.2f} |",
              flush=True)


def compression(a, rt):
    print(f"\n### wire bytes per step ({a.np} ranks, algorithm allreduce / scatter-reduce)\n")
    print("| dp.compression | wire bytes / step / rank | reduction vs none | expected |")
    print("|---|---:|---:|---|")
    base = None
    for c, expect in (("none", "1x"), ("fp16", "2x"), ("int8", "~4x"), ("onebit-ef", "~32x"),
                      ("topk-ef", "1/(2 ratio) = 50x at ratio 0.01 (index + value)")):
        m, _ = traced_run(a, rt, f"c{c}", ["--compression", c, "--topk-ratio", "0.01"])
        base = base or m["wire_bytes_per_step"]
        print(f"| {c} | {m['wire_bytes_per_step']:.0f} | {base / m['wire_bytes_per_step']:.2f}x | {expect} |", flush=True)


def overhead(a, rt):
    print(f"\n### agent overhead ({a.np} ranks, {a.steps} steps, {a.rounds} rounds, rank 0 step times)\n")
    per = {"off": [], "agent": [], "agent+record": []}
    rounds = {k: [] for k in per}
    for r in range(a.rounds):
        order = list(per)[r % 3:] + list(per)[:r % 3]
        for i, cfg in enumerate(order):
            _, t = traced_run(a, rt, f"oh{r}{i}", [], steps_file=os.path.join(rt, f"steps{r}{i}"),
                              disable=(cfg == "off"), record=(cfg == "agent+record"))
            per[cfg] += t
            rounds[cfg].append(statistics.median(t))
            print(f"  round {r} {cfg}: median {statistics.median(t) / 1000:.3f} ms (n={len(t)})", flush=True)
    m0 = statistics.median(per["off"])
    print("\n| configuration | median step ms | overhead vs off | per-round ratios |")
    print("|---|---:|---:|---|")
    for cfg in per:
        m = statistics.median(per[cfg])
        rr = ", ".join(f"{(rounds[cfg][i] / rounds['off'][i] - 1) * 100:+.2f} %" for i in range(a.rounds))
        print(f"| {cfg} | {m / 1000:.3f} | {(m / m0 - 1) * 100:+.2f} % | {rr} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--buckets", default="65536", help="bucket sizes to compare with one bucket (comma list)")
    ap.add_argument("--algorithm", default="allreduce")
    ap.add_argument("--width", type=int, default=256, help="MLP width (larger: longer steps, less timing noise)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("what", nargs="*", default=["overlap", "compression", "overhead"])
    a = ap.parse_args()
    MODEL[MODEL.index("--width") + 1] = str(a.width)
    MODEL[MODEL.index("--batch") + 1] = str(a.batch)
    rt = tempfile.mkdtemp(prefix="ts-bench-train-")
    os.chmod(rt, 0o700)
    print(f"# load before: {open('/proc/loadavg').read().split()[:3]}; model: {' '.join(MODEL)}")
    for w in a.what:
        {"overlap": overlap, "compression": compression, "overhead": overhead}[w](a, rt)
    print(f"\n# load after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
