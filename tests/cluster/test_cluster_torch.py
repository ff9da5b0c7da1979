#!/usr/bin/env python3
"""A real PyTorch DDP job (gloo over TCP) across two "machines" (network namespaces), attached
from the root namespace through one relay address (issue 35, item 6): both ranks listed on their
machines, and a recording holds the events of both. scripts/netns_cluster.py builds the cluster
and removes it afterwards, also when this test fails.

usage: test_cluster_torch.py BUILD_DIR
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

SKIP = 77


def main():
    build = Path(sys.argv[1]).resolve()
    # The interpreter the torch-ddp demo uses: $TRAINSCOPE_PYTHON, Debian's python3-torch, or the
    # build's torch2 venv (`trainscope-cli demo` chooses the same way).
    python = None
    for cand in [os.environ.get("TRAINSCOPE_PYTHON"), "/usr/bin/python3", str(build / "torch2-venv" / "bin" / "python")]:
        if cand and subprocess.run([cand, "-c", "import torch.distributed"], capture_output=True).returncode == 0:
            python = cand
            break
    if not python:
        print("SKIP: no Python here imports torch")
        return SKIP
    why = cannot_make_namespaces()
    if why:
        print("SKIP: cannot create network namespaces here:", why)
        return SKIP
    with Cluster(2, build) as c:
        names = set(c.ns + [c.switch])
        job = c.start_torch_ddp(["--width", "64", "--step-delay-ms", "20", "--log-every", "1000000"], python=python)
        c.start_relays(job)
        host = c.coordinator
        listing = c.wait_listed(2)
        check(listing and listing["ranks_found"] == 2, f"jobs --host lists the 2 DDP ranks: {listing}", c)
        check(sorted(e["machine"] for e in listing["ranks"]) == ["m1", "m2"], "one rank on each machine")
        deadline = time.time() + 180
        # Stepping on both (gloo's rendezvous over TCP, then DDP's first buckets): /metrics says.
        stepping = False
        while time.time() < deadline and not stepping:
            body = urllib.request.urlopen(f"http://{host}/metrics", timeout=10).read().decode()
            steps_now = [int(l.rsplit(" ", 1)[1]) for l in body.splitlines() if l.startswith("trainscope_rank_step{")]
            stepping = len(steps_now) == 2 and min(steps_now) >= 2
            time.sleep(1)
        check(stepping, "both DDP ranks are stepping (/metrics)", c)
        out = c.dir / "torch.tsdb"
        r = c.cli("record", "--job", job, "--host", host, "--seconds", "4", "--out", out, timeout=300)
        check(r.returncode == 0, "record --host: " + r.stdout.strip() + r.stderr[-500:], c)
        db = sqlite3.connect(out)
        ranks = {row[0] for row in db.execute("SELECT DISTINCT rank FROM events")}
        steps = db.execute("SELECT COUNT(*) FROM events e JOIN kinds k ON k.id = e.kind WHERE k.name = 'step'").fetchone()[0]
        hosts = {row[0] for row in db.execute("SELECT DISTINCT host FROM ranks")}
        db.close()
        check(ranks == {0, 1} and steps > 0, f"events of both ranks, {steps} steps", c)
        check(hosts == {"m1", "m2"}, f"the ranks' hosts are the machines: {sorted(hosts)}")
        # The DDP hook's compression, changed live on both machines at one agreed step.
        # A 32-rank job on 2 cores takes many seconds a step: wait as long as the test may run.
        r = c.cli("set", "--job", job, "--host", host, "--json", "--timeout", "400", "dp.compression=fp16", timeout=500)
        check(r.returncode == 0, "set --host on the DDP job: " + r.stderr[-500:], c)
        applied = json.loads(r.stdout)[0]
        check(len(applied["steps_per_rank"]) == 2 and applied["same_step"] and applied["kept"],
              f"dp.compression=fp16 applied at step {applied['step']} on both ranks")
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(not any(n in left for n in names), "the namespaces are gone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
