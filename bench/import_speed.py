#!/usr/bin/env python3
"""Kineto JSON import speed, side by side in the same minutes (docs/BENCHMARKS.md, "Kineto import
speed", issue 37): our import (bench_import: the fast reader, and the reference reader alone),
Python's json.load on the same files, and optionally HolisticTraceAnalysis 0.5's TraceAnalysis
load of the same directory. CPU seconds (user + sys, children included), not wall time: the
machine this was written on is shared.

Usage: import_speed.py BUILD DIR [--make] [--runs N] [--hta PYTHON] [--hta-timeout S] [--gz]
  DIR: per-rank Kineto traces (*.json); --make writes DIR/rank-{0,1}.json first (~150 MB each:
  tests/data/hta_sampled's two real ranks, each replicated 85x later in time, ids moved on, by
  bench/replicate_trace.py --unique-ids) and, with --gz, their .json.gz in DIR-gz (HTA loads every trace file
  of a directory).
Prints a markdown table: per tool, CPU s per run, MB/s of JSON per CPU second, peak RSS (MB).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


def run(cmd, timeout=None):
    """CPU seconds (user+sys) and peak RSS (MB) of one child process, its stdout; None on timeout."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return None
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {err.strip()[-2000:]}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: run the biggest tools last or
    # read RSS from the tool itself where it reports it (bench_import does).
    return {"cpu": cpu, "wall": time.perf_counter() - t0, "rss": r1.ru_maxrss / 1024.0, "out": out}


JSON_LOAD = ("import gzip, json, resource, sys\n"
             "n = 0\n"
             "for f in sys.argv[1:]:\n"
             "    with (gzip.open(f, 'rb') if f.endswith('.gz') else open(f, 'rb')) as fh:\n"
             "        n += len(json.load(fh)['traceEvents'])\n"
             "print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)\n")

HTA_LOAD = ("import resource, sys, warnings\n"
            "warnings.filterwarnings('ignore')\n"
            "from hta.trace_analysis import TraceAnalysis\n"
            "ta = TraceAnalysis(trace_dir=sys.argv[1])\n"
            "n = len(ta.t.get_ranks())\n"
            "rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,\n"
            "          resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024.0\n"
            "print(n, rss)\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("dir")
    ap.add_argument("--make", action="store_true")
    ap.add_argument("--gz", action="store_true", help="also the .json.gz files")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hta", help="a python with holistictraceanalysis==0.5.0")
    ap.add_argument("--hta-timeout", type=float, default=600)
    a = ap.parse_args()

    def gzpath(f):
        return os.path.join(a.dir.rstrip("/") + "-gz", os.path.basename(f) + ".gz")

    os.makedirs(a.dir, exist_ok=True)
    files = [os.path.join(a.dir, f"rank-{r}.json") for r in (0, 1)]
    if a.make:
        for r, f in enumerate(files):
            src = os.path.join(SRC, f"tests/data/hta_sampled/sampled_rank-{r}.json.gz")
            subprocess.check_call([sys.executable, os.path.join(HERE, "replicate_trace.py"), "--unique-ids",
                                   src, "85", f])
            if a.gz:
                os.makedirs(a.dir.rstrip("/") + "-gz", exist_ok=True)
                with open(gzpath(f), "wb") as out:
                    subprocess.check_call(["gzip", "-c", f], stdout=out)
    mb = sum(os.path.getsize(f) for f in files) / 1e6
    bench = os.path.join(a.build, "bin", "bench_import")
    rows = []

    def ours(mode, gz=False):
        # One process imports both ranks into one session (importChromeTraceFiles), so its peak
        # RSS is the whole import's.
        cpu, rss = [], 0.0
        for _ in range(a.runs):
            j = json.loads(run([bench, mode, a.dir.rstrip("/") + "-gz" if gz else a.dir])["out"])
            cpu.append(float(j["cpu_s"]))
            rss = max(rss, j["peak_rss_mb"])
        rows.append((f"trainscope `bench_import {mode}`{' (.json.gz; MB/s of the JSON inside)' if gz else ''}",
                     cpu, rss, f"{int(j['events']):,} events kept"))

    ours("dir")
    if a.gz:
        ours("dir", gz=True)
    ours("dir-reference")
    cpu, rss = [], 0.0
    for _ in range(a.runs):
        r = run([sys.executable, "-c", JSON_LOAD] + files)
        n, m = r["out"].split()
        cpu.append(r["cpu"])
        rss = max(rss, float(m))
    rows.append((f"Python {sys.version.split()[0]} `json.load` (one file at a time)", cpu, rss,
                 f"{int(n):,} trace events"))
    if a.hta:
        r = run([a.hta, "-c", HTA_LOAD, a.dir], timeout=a.hta_timeout)
        if r is None:
            rows.append(("HTA 0.5.0 `TraceAnalysis(trace_dir)`", None, None,
                         f"did not finish within {a.hta_timeout:.0f} s"))
        else:
            n, m = r["out"].split()
            rows.append(("HTA 0.5.0 `TraceAnalysis(trace_dir)`", [r["cpu"]], float(m),
                         f"{int(n)} ranks loaded; wall {r['wall']:.0f} s"))
    print(f"{len(files)} files, {mb:.1f} MB of JSON; load average {os.getloadavg()[0]:.1f}\n")
    print("| reader | CPU s per run (user+sys) | MB/s of CPU (best) | peak RSS | note |")
    print("|---|---|---:|---:|---|")
    for name, cpu, rss, note in rows:
        if cpu is None:
            print(f"| {name} | – | – | – | {note} |")
            continue
        print(f"| {name} | {' / '.join(f'{c:.2f}' for c in cpu)} | {mb / min(cpu):.0f} | {rss:.0f} MB | {note} |")


if __name__ == "__main__":
    main()
