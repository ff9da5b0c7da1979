#!/usr/bin/env python3
"""A job of 32 real ranks over 4 "machines" (network namespaces), seen from the root namespace
through one relay address (issue 35): listed, recorded, tuned (a knob set at one step on every
rank) and scraped (/metrics lists every rank). scripts/netns_cluster.py builds the cluster and
removes it afterwards, also when this test fails.

usage: test_cluster_netns.py BUILD_DIR
"""
import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from netns_cluster import Cluster, cannot_make_namespaces, check  # noqa: E402

MACHINES, PER_MACHINE = 4, 8
RANKS = MACHINES * PER_MACHINE
SKIP = 77


def main():
    build = Path(sys.argv[1]).resolve()
    why = cannot_make_namespaces()
    if why:
        print("SKIP: cannot create network namespaces here:", why)
        return SKIP

    with Cluster(MACHINES, build) as c:
        names = set(c.ns + [c.switch])
        job = c.start_mpi_job(PER_MACHINE, ["--mode", "dp", "--steps", "1000000", "--calibrate", "0",
                                                    "--step-delay-ms", "100"])
        c.start_relays(job)
        host = c.coordinator

        # 1. Listed: every rank, on its own machine, from one address.
        listing = c.wait_listed(RANKS)
        check(listing and listing["ranks_found"] == RANKS and listing["complete"],
              f"jobs --host lists {RANKS} ranks: {listing and listing['ranks_found']}", c)
        machines = {}
        for e in listing["ranks"]:
            machines.setdefault(e["machine"], []).append(e["rank"])
        check(sorted(machines) == [f"m{i}" for i in range(1, MACHINES + 1)], f"ranks on {MACHINES} machines: {sorted(machines)}")
        check(all(len(v) == PER_MACHINE for v in machines.values()), f"{PER_MACHINE} ranks per machine")
        check(all(e["host"] == e["machine"] for e in listing["ranks"]), "each rank reports its machine's host name")

        # 2. /metrics on the coordinator: every rank of the job, once each is stepping (32 ranks
        # connecting all to all over TCP on two cores take a while).
        step_lines = []
        deadline = time.time() + 240
        while time.time() < deadline:
            body = urllib.request.urlopen(f"http://{host}/metrics", timeout=10).read().decode()
            step_lines = [l for l in body.splitlines() if l.startswith("trainscope_rank_step{")]
            if len(step_lines) == RANKS and all(int(l.rsplit(" ", 1)[1]) >= 2 for l in step_lines):
                break
            time.sleep(1)
        check(len(step_lines) == RANKS, f"/metrics lists {len(step_lines)} ranks", c)
        check(all(int(l.rsplit(" ", 1)[1]) >= 2 for l in step_lines), "/metrics shows every rank stepping", c)
        check(f'trainscope_relay_registered_relays{{job="{job}",machine="m1"}} {MACHINES - 1}' in body,
              "the coordinator has the other 3 relays registered")

        # 3. Recorded: events of every rank, through the relays of all four machines.
        out = c.dir / "cluster.tsdb"
        r = c.cli("record", "--job", job, "--host", host, "--seconds", "8", "--out", out, timeout=400)
        check(r.returncode == 0, "record --host: " + r.stdout.strip() + r.stderr[-800:], c)
        db = sqlite3.connect(out)
        ranks_with_events = {row[0] for row in db.execute("SELECT DISTINCT rank FROM events")}
        hosts = {row[0] for row in db.execute("SELECT DISTINCT host FROM ranks")}
        db.close()
        check(ranks_with_events == set(range(RANKS)), f"events from all {RANKS} ranks: {len(ranks_with_events)}", c)
        check(hosts == {f"m{i}" for i in range(1, MACHINES + 1)}, f"ranks' hosts are the machines: {sorted(hosts)}")

        # 4. Tuned: a knob change applied at one step agreed by all 32 ranks.
        # A 32-rank job on 2 cores takes many seconds a step: wait as long as the test may run.
        r = c.cli("set", "--job", job, "--host", host, "--json", "--timeout", "400", "dp.compression=fp16", timeout=500)
        check(r.returncode == 0, "set --host: " + r.stderr[-800:], c)
        applied = json.loads(r.stdout)[0]
        check(len(applied["steps_per_rank"]) == RANKS and applied["same_step"] and applied["kept"],
              f"dp.compression=fp16 applied at step {applied['step']} on all {len(applied['steps_per_rank'])} ranks")
        r = c.cli("knobs", "--job", job, "--host", host, "--json")
        check(r.returncode == 0 and '"fp16"' in r.stdout, "knobs --host reads the new value back")

        # 5. Shown in the GUI (offscreen): --attach JOB@HOST:PORT through the same one address.
        shot = c.dir / "cluster-gui.png"
        gui = subprocess.run([str(build / "bin" / "trainscope"), "--attach", f"{job}@{host}", "--secret-file",
                              str(c.secret), "--screenshot", str(shot), "--live-seconds", "4"],
                             capture_output=True, text=True, timeout=400,
                             env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
        check(gui.returncode == 0 and shot.exists() and shot.stat().st_size > 10000,
              f"the GUI attached through the relay and drew the job (rc {gui.returncode}) " + gui.stderr[-300:], c)
        if os.environ.get("TRAINSCOPE_SCREENSHOT_DIR"):
            import shutil
            shutil.copy(shot, Path(os.environ["TRAINSCOPE_SCREENSHOT_DIR"]) / "screenshot-relay-cluster.png")

        # 6. A wrong secret gets nowhere (and costs the relay nothing it keeps).
        bad = c.dir / "wrong.secret"
        bad.write_text("0" * 64)
        os.chmod(bad, 0o600)
        r = c.cli("jobs", "--host", host, "--secret-file", bad)
        check(r.returncode != 0 and "authentication" in (r.stderr + r.stdout), "a wrong secret is refused: " + r.stderr.strip()[:200])

    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(not any(n in left for n in names), "the namespaces are gone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
