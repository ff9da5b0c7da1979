#!/usr/bin/env python3
"""CPU use of running processes over time, from /proc: waits for a process whose command line
contains each given pattern, then every --period seconds prints one line: the seconds since
the start and, per process, the share of a core it used since the previous line (utime + stime).
Used beside a what-if grid to see whether the recorder's CPU rises when the ranks slow down
(docs/BENCHMARKS.md, "The backward's compute calibrated…").

    /usr/bin/python3 bench/proc_cpu.py "trainscope-cli record" --seconds 40 > rec_cpu.txt &
    /usr/bin/python3 bench/tune_bench.py ...
"""
import argparse
import os
import sys
import time


def find(patterns):
    got = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for p in patterns:
            if p in cmd:
                got[pid] = p
    return got


def ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])  # utime, stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("patterns", nargs="+")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--period", type=float, default=0.1)
    a = ap.parse_args()
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.time()
    procs = {}
    while time.time() - t0 < a.seconds and len(set(procs.values())) < len(a.patterns):
        procs = find(a.patterns)
        time.sleep(0.2)
    last, t1 = {}, time.time()
    while time.time() - t1 < a.seconds and procs:
        row = [f"{time.time() - t1:.1f}"]
        for pid, p in sorted(procs.items()):
            try:
                t = ticks(pid)
            except OSError:
                t = last.get(pid, 0)
            row.append(f"{p}={100 * (t - last.get(pid, t)) / hz / a.period:.0f}%")
            last[pid] = t
        print(" ".join(row), flush=True)
        time.sleep(a.period)


if __name__ == "__main__":
    sys.exit(main())
