#!/usr/bin/env python3
"""The reference job's step time on its own, per configuration (docs/BENCHMARKS.md, "Subnormal
floats, the forward-to-backward gap, and the grids on a fresh VM"):

  denormals  `trainscope-train --denormals keep` against `flush` (the default), --no-agent:
             medians of each block of --block steps, so a drift with the job's age shows;
  record     2 KiB against 1 MiB buckets, each alone and recorded by `trainscope-cli record` on
             the same cores: the mean step after --skip steps (evaluation steps included, as the
             what-if grid's measurement includes them) and the median.

Each run: `mpirun -np RANKS` of the 48-layer, 64-wide CPU job (`--step-delay-ms 0`), rank 0's
`--steps-file`. Configurations alternate within each of --rounds rounds.

    /usr/bin/python3 bench/steps_alone.py --build build denormals [--steps 2500]
    /usr/bin/python3 bench/steps_alone.py --build build record [--steps 1500 --rounds 2]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

JOB = ["--layers", "48", "--width", "64", "--step-delay-ms", "0", "--log-every", "0"]


def run(a, tmp, tag, extra, record):
    rt = os.path.join(tmp, "run")
    os.makedirs(rt, mode=0o700, exist_ok=True)
    job = "alone-" + tag
    env = dict(os.environ, TRAINSCOPE_RUNTIME_DIR=rt, TRAINSCOPE_JOB_ID=job, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader", OMPI_MCA_oob_tcp_if_include="lo")
    steps_file = os.path.join(tmp, tag + ".steps")
    cli = os.path.join(a.build, "bin", "trainscope-cli")
    cmd = ["mpirun", "-np", str(a.ranks), "--oversubscribe", os.path.join(a.build, "bin", "trainscope-train")] + \
        JOB + ["--steps", str(a.steps), "--steps-file", steps_file] + extra
    job_p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    rec = None
    try:
        if record:
            for _ in range(100):  # until every rank is listed
                out = subprocess.run([cli, "jobs"], env=env, capture_output=True, text=True).stdout
                if job in out:
                    break
                time.sleep(0.1)
            rec = subprocess.Popen([cli, "record", "--job", job, "--out", os.path.join(tmp, tag + ".tsdb")], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if job_p.wait(timeout=900) != 0:
            raise SystemExit("run %s failed" % tag)
    finally:
        if job_p.poll() is None:
            os.killpg(job_p.pid, 9)
        if rec is not None:
            try:
                rec.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rec.kill()
    with open(steps_file) as f:
        us = [float(line.split()[2]) for line in f if line.startswith("steptime")]
    for p in os.listdir(tmp):
        if p.endswith(".tsdb"):
            os.remove(os.path.join(tmp, p))
    return [u / 1000.0 for u in us]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["denormals", "record"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="default: 2500 (denormals), 1500 (record)")
    ap.add_argument("--block", type=int, default=250)
    ap.add_argument("--skip", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if not shutil.which("mpirun"):
        raise SystemExit("mpirun not found")
    a.steps = a.steps or (2500 if a.what == "denormals" else 1500)
    if a.what == "denormals":
        configs = [("keep", ["--no-agent", "--denormals", "keep"], False),
                   ("flush", ["--no-agent", "--denormals", "flush"], False)]
    else:
        configs = [("2KiB alone", ["--bucket-bytes", "2048"], False),
                   ("1MiB alone", ["--bucket-bytes", "1048576"], False),
                   ("2KiB recorded", ["--bucket-bytes", "2048"], True),
                   ("1MiB recorded", ["--bucket-bytes", "1048576"], True)]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name, extra, record in configs:
                ms = run(a, tmp, "%d-%s" % (r, name.replace(" ", "-")), extra, record)
                if a.what == "denormals":
                    blocks = [statistics.median(ms[i:i + a.block]) for i in range(0, len(ms), a.block)]
                    print("round %d %-6s medians of %d steps: %s ms" % (r, name, a.block,
                                                                        " ".join("%.3f" % b for b in blocks)))
                else:
                    rest = ms[a.skip:]
                    print("round %d %-14s mean %.3f ms, median %.3f ms (steps %d..%d)" % (
                        r, name, statistics.mean(rest), statistics.median(rest), a.skip, len(ms) - 1))


if __name__ == "__main__":
    main()
