#!/usr/bin/env python3
"""Soak: a 4-rank job traced and streamed for a long time (`make soak`, SOAK_MINUTES, default 30).

What runs (all real processes): `trainscope-cli launch --ranks 4 -- trainscope-testjob` (MPI, the
agent preloaded; --step-ms and --ranges set the event rate), `trainscope-cli record` streaming
every rank into a .tsdb (it commits at least every second), and, when the GUI is built and
--gui is given, `trainscope --attach JOB` offscreen as a second client.

Sampled every --interval seconds into soak.csv:
  t_s                    seconds since the recorder started
  rss_rank<r>_kib        each rank's VmRSS (/proc/<pid>/status): the agent's memory plus the job's
  rss_recorder_kib       the recorder's VmRSS
  rss_gui_kib            the GUI's VmRSS (empty without --gui); --gui-window S passes --live-window S
                         to it (events older than S leave its memory; docs/RELIABILITY.md)
  events                 events committed in the .tsdb so far (max(id))
  events_per_s           since the previous sample
  latency_ms             now - the newest committed event's end, both CLOCK_MONOTONIC (the file's
                         clock_domain): how far behind the job the data on disk is (event -> agent
                         ring -> socket -> recorder -> SQLite commit)
At the end the recorder is stopped with SIGINT (it saves and prints the agents' drop count), the
job with SIGTERM; soak_summary.txt gives first/last/max of each series, latency percentiles,
the drops, and per rank the steps recorded and the steps missing (holes) in the file.
"""
import argparse
import csv
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def job_pids(cli, job):
    out = subprocess.run([cli, "jobs", "--json"], capture_output=True, text=True).stdout
    try:
        for j in json.loads(out)["jobs"]:
            if j["job_id"] == job:
                return {r["rank"]: r["pid"] for r in j["ranks"]}
    except (ValueError, KeyError):
        pass
    return {}


def kill_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", "30")))
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--step-ms", type=int, default=20)
    ap.add_argument("--ranges", type=int, default=6)
    ap.add_argument("--out", default=None, help="output folder (default BUILD/soak)")
    ap.add_argument("--gui", action="store_true", help="also attach the GUI (offscreen) as a second client")
    ap.add_argument("--gui-window", type=float, default=None,
                    help="the GUI's --live-window in seconds (default: the GUI's own, 600)")
    a = ap.parse_args()

    bindir = os.path.abspath(os.path.join(a.build, "bin"))
    cli = os.path.join(bindir, "trainscope-cli")
    out = os.path.abspath(a.out or os.path.join(a.build, "soak"))
    os.makedirs(out, exist_ok=True)
    run = os.path.join(out, "run")
    os.makedirs(run, exist_ok=True)
    os.chmod(run, 0o700)
    env = dict(os.environ, TRAINSCOPE_RUNTIME_DIR=run, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", QT_QPA_PLATFORM="offscreen")
    job = f"soak-{os.getpid()}"
    tsdb = os.path.join(out, "soak.tsdb")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(tsdb + suffix):
            os.remove(tsdb + suffix)

    procs = []
    joblog = open(os.path.join(out, "job.log"), "w")
    launcher = subprocess.Popen(
        [cli, "launch", "--ranks", str(a.ranks), "--job-id", job, "--", os.path.join(bindir, "trainscope-testjob"),
         "--steps", "100000000", "--step-ms", str(a.step_ms), "--ranges", str(a.ranges)],
        env=env, stdout=joblog, stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(launcher)
    rec = gui = None
    try:
        os.environ["TRAINSCOPE_RUNTIME_DIR"] = run  # for `jobs`
        pids = {}
        for _ in range(600):
            pids = job_pids(cli, job)
            if len(pids) == a.ranks:
                break
            time.sleep(0.1)
        if len(pids) != a.ranks:
            sys.exit(f"soak: the job's {a.ranks} ranks never registered (see {out}/job.log)")
        reclog = open(os.path.join(out, "record.log"), "w")
        rec = subprocess.Popen([cli, "record", "--job", job, "--out", tsdb], env=env, stdout=reclog,
                               stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(rec)
        gui_bin = os.path.join(bindir, "trainscope")
        if a.gui and not os.path.exists(gui_bin):
            print(f"soak: {gui_bin} not built (make build): running without the GUI", file=sys.stderr)
        if a.gui and os.path.exists(gui_bin):
            gui_args = [gui_bin, "--attach", job]
            if a.gui_window is not None:
                gui_args += ["--live-window", f"{a.gui_window:g}"]
            gui = subprocess.Popen(gui_args, env=env, stdout=subprocess.DEVNULL,
                                   stderr=open(os.path.join(out, "gui.log"), "w"), start_new_session=True)
            procs.append(gui)
        t0 = time.monotonic()
        rows = []
        last_events, last_t = 0, None
        db = None
        while time.monotonic() - t0 < a.minutes * 60:
            time.sleep(a.interval)
            if launcher.poll() is not None or rec.poll() is not None:
                print("soak: the job or the recorder ended early", file=sys.stderr)
                break
            now = time.monotonic()
            row = {"t_s": round(now - t0, 1)}
            for r, pid in sorted(pids.items()):
                row[f"rss_rank{r}_kib"] = rss_kib(pid)
            row["rss_recorder_kib"] = rss_kib(rec.pid)
            row["rss_gui_kib"] = rss_kib(gui.pid) if gui else None
            events, newest = None, None
            try:
                if db is None and os.path.exists(tsdb):
                    db = sqlite3.connect(f"file:{tsdb}?mode=ro", uri=True, timeout=5)
                if db is not None:
                    events = db.execute("SELECT max(id) FROM events").fetchone()[0] or 0
                    # The newest events: the last few thousand ids (the table is append-only).
                    newest = db.execute("SELECT max(end_ns) FROM events WHERE id > ?",
                                        (max(0, events - 5000),)).fetchone()[0]
                    db.rollback()
            except sqlite3.Error as e:
                print(f"soak: reading {tsdb}: {e}", file=sys.stderr)
            read_ns = time.monotonic_ns()
            row["events"] = events
            row["events_per_s"] = (round((events - last_events) / (now - last_t), 1)
                                   if events is not None and last_t else None)
            row["latency_ms"] = round((read_ns - newest) / 1e6, 1) if newest else None
            if events is not None:
                last_events, last_t = events, now
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        if db is not None:
            db.close()
    finally:
        if rec and rec.poll() is None:
            rec.send_signal(signal.SIGINT)  # record saves and reports the agents' drops
            try:
                rec.wait(120)
            except subprocess.TimeoutExpired:
                kill_group(rec, signal.SIGKILL)
        if gui and gui.poll() is None:
            kill_group(gui, signal.SIGTERM)
        kill_group(launcher, signal.SIGTERM)
        try:
            launcher.wait(30)
        except subprocess.TimeoutExpired:
            kill_group(launcher, signal.SIGKILL)
        for p in procs:
            if p.poll() is None:
                kill_group(p, signal.SIGKILL)

    if not rows:
        sys.exit("soak: no samples")
    keys = list(rows[0].keys())
    with open(os.path.join(out, "soak.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)

    lines = [f"soak: {a.ranks} ranks of trainscope-testjob (--step-ms {a.step_ms} --ranges {a.ranges}), "
             + (f"GUI live window {a.gui_window:g} s, " if gui and a.gui_window is not None else "")
             + f"{rows[-1]['t_s'] / 60:.1f} min, {len(rows)} samples every {a.interval:g} s",
             f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load "
             f"{os.getloadavg()[0]:.1f}"]
    for k in keys:
        if not k.startswith("rss_"):
            continue
        v = [r[k] for r in rows if r[k] is not None]
        if v:
            # Growth over the second half: a leak shows here, warm-up does not.
            half = v[len(v) // 2:]
            lines.append(f"{k:20s} first {v[0]:>8} last {v[-1]:>8} max {max(v):>8} KiB; second half "
                         f"{half[0]} -> {half[-1]} ({half[-1] - half[0]:+d} KiB)")
    lat = [r["latency_ms"] for r in rows if r["latency_ms"] is not None]
    if lat:
        q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [lat[0]] * 99
        first = lat[: len(lat) // 2] or lat
        second = lat[len(lat) // 2:]
        lines.append(f"latency_ms           p50 {q[49]:.0f} p99 {q[98]:.0f} max {max(lat):.0f}; median first half "
                     f"{statistics.median(first):.0f}, second half {statistics.median(second):.0f}")
    eps = [r["events_per_s"] for r in rows if r["events_per_s"] is not None]
    if eps:
        lines.append(f"events_per_s         mean {statistics.mean(eps):.0f} min {min(eps):.0f} max {max(eps):.0f}; "
                     f"{rows[-1]['events']} events committed at the last sample")
    with open(os.path.join(out, "record.log")) as f:
        lines += ["record: " + l.strip() for l in f if l.strip()]
    try:
        db = sqlite3.connect(f"file:{tsdb}?mode=ro", uri=True)
        for rank, n, lo, hi in db.execute(
                "SELECT rank, count(*), min(CAST(json_extract(args, '$.step') AS INTEGER)), "
                "max(CAST(json_extract(args, '$.step') AS INTEGER)) FROM events WHERE kind = 7 GROUP BY rank"):
            lines.append(f"rank {rank}: {n} steps recorded ({lo}..{hi}), {hi - lo + 1 - n} missing")
        for k, v in db.execute("SELECT key, value FROM meta WHERE key LIKE 'dropped_events.%' ORDER BY key"):
            lines.append(f"{k} = {v}")
        db.close()
    except sqlite3.Error as e:
        lines.append(f"reading the session: {e}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "soak_summary.txt"), "w") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
