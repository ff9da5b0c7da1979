#!/usr/bin/env python3
"""What recording costs a job's steps, and how it grows with the events per step
(docs/BENCHMARKS.md, "The observer's share of the step"; what-if's observer term, docs/TUNING.md).

Per bucket size (--buckets; the what-if grids' 48-layer job by default: 2 KiB is one bucket per
layer, 254 events per rank and step; 1 MiB is one bucket, 158), runs the job with and without
`trainscope-cli record` attached, the order alternating round by round, and reads rank 0's step
times from trainscope-train's --steps-file (steps from --skip on). Prints per run the mean and
median step, then per (bucket size, recorded) the mean over rounds, and the recording's cost per
step next to the recorder's own CPU per step (its `observer_cpu_seconds` / `observer_events`
from the session, times the session's events per step over both ranks), and the events per rank
and step it took in (the recording's flight-recorder history included).

    /usr/bin/python3 bench/recording_cost.py [--build build] [--steps 1500] [--rounds 2] [--buckets 2048,1048576]
                                             [--job-args "--layers 48 --width 64 --step-delay-ms 0"]
"""
import argparse
import os
import shlex
import signal
import sqlite3
import statistics
import subprocess
import tempfile

from bench_train import env_for, finish_recorder, wait_ranks  # the same job environment and recorder handling


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--skip", type=int, default=300, help="steps left out at the start")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--buckets", default="2048,1048576")
    ap.add_argument("--job-args", default="--layers 48 --width 64 --step-delay-ms 0")
    a = ap.parse_args()
    b = os.path.abspath(os.path.join(a.build, "bin"))
    rt = tempfile.mkdtemp(prefix="recording-cost-")
    os.chmod(rt, 0o700)
    env = env_for(rt)
    buckets = [int(x) for x in a.buckets.split(",")]
    means, observer = {}, {}
    print(f"# load before: {open('/proc/loadavg').read().split()[:3]}; job: {a.job_args}")
    for rnd in range(a.rounds):
        for bucket in buckets:
            for rec in ((False, True) if rnd % 2 == 0 else (True, False)):
                job = f"reccost-{os.getpid()}-{rnd}-{bucket}-{int(rec)}"
                sf = os.path.join(rt, job + ".steps")
                p = subprocess.Popen([f"{b}/trainscope-cli", "launch", "--ranks", "2", "--no-gpu", "--job-id", job, "--",
                                      f"{b}/trainscope-train", "--mode", "dp", "--steps", str(a.steps),
                                      "--bucket-bytes", str(bucket), "--steps-file", sf] + shlex.split(a.job_args),
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                r, out = None, os.path.join(rt, job + ".tsdb")
                try:
                    if rec:
                        if not wait_ranks(rt, job, 2):
                            raise SystemExit(f"{job}: the ranks never showed up")
                        r = subprocess.Popen([f"{b}/trainscope-cli", "record", "--job", job, "--out", out], env=env,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    p.wait(timeout=600)
                    if r:
                        finish_recorder(r)
                finally:
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGKILL)
                t = [int(l.split()[2]) / 1000 for l in open(sf) if l.startswith("steptime") and int(l.split()[1]) >= a.skip]
                means.setdefault((bucket, rec), []).append(statistics.mean(t))
                if rec:
                    db = sqlite3.connect(out)
                    md = dict(db.execute("select key, value from meta"))
                    steps = db.execute("select count(*) from event_view where kind = 'step'").fetchone()[0]
                    events = int(md["observer_events"])
                    per_event = float(md["observer_cpu_seconds"]) / events
                    observer.setdefault(bucket, []).append((per_event * 1e6, per_event * events / steps * 2 * 1e3,
                                                            events / steps))
                    db.close()
                    os.unlink(out)
                print(f"round {rnd} bucket {bucket} recorded {rec}: mean {statistics.mean(t):.3f} "
                      f"median {statistics.median(t):.3f} ms (n={len(t)})", flush=True)
    print("\n| bucket bytes | events per rank and step | step ms, not recorded | step ms, recorded | recording's cost "
          "| recorder CPU per event | recorder CPU per step |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for bucket in buckets:
        off, on = statistics.mean(means[(bucket, False)]), statistics.mean(means[(bucket, True)])
        us = statistics.mean(x[0] for x in observer[bucket])
        ms = statistics.mean(x[1] for x in observer[bucket])
        ev = statistics.mean(x[2] for x in observer[bucket])
        print(f"| {bucket} | {ev:.0f} | {off:.3f} | {on:.3f} | {on - off:+.3f} ms | {us:.2f} us | {ms:.3f} ms |")
    print(f"\n# load after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
