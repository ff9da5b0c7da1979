"""Starts the ranks of a small torch.distributed job on 127.0.0.1 (MASTER_ADDR/MASTER_PORT/RANK/
WORLD_SIZE, as Debian's broken torchrun would) and waits for them. Each rank runs in its own
process group, which is killed whatever happens: a failing rank, a timeout, or SIGTERM to us."""
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(name, ranks, argv, timeout, port=0):
    """Runs `argv` once per rank; 0 when every rank exited 0, else 1 (with a line on stderr)."""
    port = port or free_port()
    procs = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the cleanup below
    try:
        for r in range(ranks):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                       WORLD_SIZE=str(ranks), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
            procs.append(subprocess.Popen(argv, env=env, start_new_session=True))
        deadline = time.time() + timeout
        while time.time() < deadline:
            codes = [p.poll() for p in procs]
            if any(c not in (None, 0) for c in codes):
                print(f"{name}: a rank failed: exit codes {codes}", file=sys.stderr)
                return 1
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.1)
        print(f"{name}: timed out", file=sys.stderr)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
