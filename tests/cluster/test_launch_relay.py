#!/usr/bin/env python3
"""`launch --relay ADDR:PORT` starts this machine's relay with the job (docs/RELAY.md): the job's
ranks are listed and their knobs read through it, and it is gone when the job is.

usage: test_launch_relay.py BUILD_DIR
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main():
    build = Path(sys.argv[1]).resolve()
    cli = str(build / "bin" / "trainscope-cli")
    rt = tempfile.mkdtemp(prefix="trainscope-launch-relay-")
    os.chmod(rt, 0o700)
    env = {**os.environ, "TRAINSCOPE_RUNTIME_DIR": rt, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    err = open(Path(rt) / "launch.err", "w+")
    p = subprocess.Popen([cli, "launch", "--ranks", "2", "--relay", "127.0.0.1:0", "--",
                          str(build / "bin" / "trainscope-testjob"), "--steps", "100000"],
                         env=env, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    try:
        host = secret = None
        deadline = time.time() + 60
        while time.time() < deadline and not host:
            err.seek(0)
            m = re.search(r"relay tcp:(\S+) \(secret (\S+)\)", err.read())
            if m:
                host, secret = m.group(1), m.group(2)
            time.sleep(0.1)
        assert host, "launch did not print its relay: " + open(Path(rt) / "launch.err").read()
        listing = None
        while time.time() < deadline:
            r = subprocess.run([cli, "jobs", "--host", host, "--secret-file", secret, "--json"], env=env,
                               capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                listing = json.loads(r.stdout)["jobs"][0]
                if listing["ranks_found"] == 2:
                    break
            time.sleep(0.2)
        assert listing and listing["ranks_found"] == 2, f"listed through the relay: {listing}"
        print("ok: 2 ranks listed through launch's relay at", host)
        r = subprocess.run([cli, "knobs", "--job", listing["job_id"], "--host", host, "--secret-file", secret, "--json"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "test.work_us" in r.stdout, r.stderr
        print("ok: knobs read through the relay")
        relay_pids = subprocess.run(["pgrep", "-f", f"trainscope-relay --job {listing['job_id']}"],
                                    capture_output=True, text=True).stdout.split()
        assert relay_pids, "no relay process"
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(60)  # launch reaps its relay (waitpid) before it exits
        alive = [pid for pid in relay_pids if os.path.exists(f"/proc/{pid}")]
        assert not alive, f"the relay outlived the job: {alive}"
        print("ok: the relay is gone with the job")
        return 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        subprocess.run(["rm", "-rf", rt])


if __name__ == "__main__":
    sys.exit(main())
