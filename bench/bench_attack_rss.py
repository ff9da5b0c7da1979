#!/usr/bin/env python3
"""The agent's memory under the control-channel attacks of issue 19 (docs/SECURITY.md).

Starts a real MPI job (trainscope-testjob, 2 ranks, one job listening on the Unix socket and
one on TCP), attacks rank 0's agent from this process, and samples that rank's RSS from
/proc/<pid>/status every 10 ms: the baseline before, the peak during and the RSS 3 s after each
attack. The attacker speaks the wire protocol itself (struct), so nothing here trusts the
client library. Also counts how many bytes the job's log grew during the connection flood.

    bench/bench_attack_rss.py [--build build] [--json out.json]

Attacks (issue 19, item 3):
  tcp-frames      64 connections each announce a 16 MiB frame before authenticating and send it
  unix-frames     64 connections complete the handshake, then each send a 16 MiB frame
  idle            64 unauthenticated + 64 handshaken-but-silent connections, a new client at once
                  and after 3 s
  flood           connect/close as fast as possible for 8 s (log growth measured)
  knob-value      200 SetKnob with a 60 KiB refused value, then one with a 16 MiB value
  nonce-flood     20,000 successful TCP handshakes with fresh client nonces

Issue 40, item 2 (cost per client):
  sub-pairs       one client sends 600 Subscribe(history)/Unsubscribe pairs (19,200 bytes) and
                  never reads; the agent should hold its input back and cut it off
  knoblist        one client sends 3.6 MB of KnobList requests and never reads
  gap-fills       5,000 consecutive gap-fill SetKnobs to rank 0; then `set` through the CLI
  flood-steps     the job's step rate (rank 1's Stats.currentStep) alone, under a connection
                  flood at a dummy Unix socket (the control: what the flood itself costs the
                  machine) and under the same flood at rank 0's agent
"""
import argparse
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

MAGIC = 0x50575354
VERSION = 2
HELLO, CHALLENGE, AUTH, WELCOME, ERROR, SETKNOB, KNOBACK = 1, 2, 3, 4, 5, 10, 11
SUBSCRIBE, KNOBLISTREQ, STATSREQ, STATS, UNSUBSCRIBE = 6, 8, 14, 15, 17
FLAG_MAC = 2


def frame(mtype, payload, flags=0):
    return struct.pack("<IHHII", MAGIC, VERSION, mtype, len(payload), flags) + payload


def sstr(b):
    return struct.pack("<I", len(b)) + b


def hello():
    return frame(HELLO, struct.pack("<HH", VERSION, VERSION) + sstr(b"bench-attacker"))


def set_knob(seq, name, value):
    return frame(SETKNOB, struct.pack("<Q", seq) + sstr(name) + sstr(value))


def recv_frame(s, timeout=5.0):
    s.settimeout(timeout)
    head = b""
    while len(head) < 16:
        chunk = s.recv(16 - len(head))
        if not chunk:
            return None, None
        head += chunk
    _, _, mtype, length, flags = struct.unpack("<IHHII", head)
    body = b""
    want = length + (32 if flags & FLAG_MAC else 0)
    while len(body) < want:
        chunk = s.recv(want - len(body))
        if not chunk:
            return None, None
        body += chunk
    return mtype, body[:length]


def connect(ep):
    if ep.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(ep[5:])
    else:
        host, port = ep[4:].rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.connect((host, int(port)))
    return s


def handshake(ep, secret=None, nonce=None):
    """Hello/Challenge/(Auth)/Welcome; returns the socket, open."""
    s = connect(ep)
    s.sendall(hello())
    mtype, body = recv_frame(s)
    assert mtype == CHALLENGE, mtype
    agent_nonce, auth_required = body[:32], body[32]
    if auth_required:
        nonce = nonce or os.urandom(32)
        label = b"trainscope-auth-v%d" % VERSION
        mac = hmac.new(secret, label + agent_nonce + nonce, hashlib.sha256).digest()
        s.sendall(frame(AUTH, nonce + mac))
    mtype, _ = recv_frame(s)
    assert mtype == WELCOME, mtype
    return s


class Rss:
    """Samples VmRSS of pid every 10 ms while running."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, False
        self.t = threading.Thread(target=self.run, daemon=True)

    @staticmethod
    def read(pid):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def run(self):
        while not self.stop:
            try:
                self.peak = max(self.peak, self.read(self.pid))
            except OSError:
                return
            time.sleep(0.01)

    def __enter__(self):
        self.peak = self.read(self.pid)
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop = True
        self.t.join()


def send_big(ep, handshake_first, n=64, size=16 << 20):
    """n connections each announcing and sending a `size` payload; returns how many the agent
    closed (it should close every one: the frame is over its limit)."""
    socks = []
    for _ in range(n):
        s = handshake(ep) if handshake_first else connect(ep)
        socks.append(s)
    head = struct.pack("<IHHII", MAGIC, VERSION, SETKNOB if handshake_first else HELLO, size, 0)
    chunk = b"\0" * (1 << 20)
    closed = 0
    for s in socks:
        s.settimeout(2.0)
        try:
            s.sendall(head)
            for _ in range(size // len(chunk)):
                s.sendall(chunk)
        except OSError:
            closed += 1  # reset or timed out: the agent stopped reading / closed
    for s in socks:
        s.close()
    return closed


def wait_closed(s, seconds):
    """Seconds until the agent closes s (this side never reads what it sent), or None."""
    t0 = time.time()
    s.setblocking(True)
    while time.time() - t0 < seconds:
        # Peek at the close without taking the queued output: a zero-length peek means EOF only
        # once everything before it was read, so poll for an error/hang-up instead.
        import select
        p = select.poll()
        p.register(s, select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0x2000))
        ev = p.poll(100)
        if ev and ev[0][1] & (select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0x2000)):
            s.close()
            return round(time.time() - t0, 1)
    s.close()
    return None


BUILD = "build"
FLOOD_PROCS = 1
PID = 0
RT = ""


def attack(name, ep, secret, log_path):
    info = {}
    if name == "tcp-frames":
        info["closed"] = send_big(ep, handshake_first=False)
    elif name == "unix-frames":
        info["closed"] = send_big(ep, handshake_first=True)
    elif name == "idle":
        held = [connect(ep) for _ in range(64)] + [handshake(ep, secret) for _ in range(64)]
        # A real client: admitted at once while only unauthenticated connections crowd the table;
        # once 64 authenticated clients hold every slot, admitted when the idlest has been
        # silent for 2 s (the agent's idle limit under a full table) and gives way.
        def admitted():
            try:
                handshake(ep, secret).close()
                return True
            except (OSError, AssertionError):
                return False
        info["admitted_at_once"] = admitted()
        time.sleep(3)
        info["admitted_after_3s"] = admitted()
        for s in held:
            s.close()
    elif name == "flood":
        before = os.path.getsize(log_path)
        t0, n = time.time(), 0
        while time.time() - t0 < 8:
            try:
                connect(ep).close()
                n += 1
            except OSError:
                pass
        time.sleep(0.5)
        info["connections"] = n
        info["log_bytes"] = os.path.getsize(log_path) - before
    elif name == "knob-value":
        s = handshake(ep)
        for i in range(200):
            s.sendall(set_knob(10 + i, b"test.mode", b"v" * (60 << 10)))
            mtype, body = recv_frame(s)
            assert mtype == KNOBACK
            info["reply_bytes"] = len(body)
        try:
            s.sendall(set_knob(999, b"test.mode", b"v" * (16 << 20)))
        except OSError:
            pass
        s.close()
    elif name == "sub-pairs":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(ep[5:])
        s.sendall(hello())
        recv_frame(s)
        recv_frame(s)
        pairs = (frame(SUBSCRIBE, b"\x01") + frame(UNSUBSCRIBE, b"")) * 600
        s.setblocking(False)
        sent, t0 = 0, time.time()
        while sent < len(pairs) and time.time() - t0 < 3:
            try:
                sent += s.send(pairs[sent:])
            except BlockingIOError:
                time.sleep(0.01)
        info["bytes_sent"], info["bytes_offered"] = sent, len(pairs)
        info["cut_off_s"] = wait_closed(s, 30)
    elif name == "knoblist":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(ep[5:])
        s.sendall(hello())
        recv_frame(s)
        recv_frame(s)
        reqs = frame(KNOBLISTREQ, b"") * (3_600_000 // 16)
        s.setblocking(False)
        sent, t0 = 0, time.time()
        while sent < len(reqs) and time.time() - t0 < 3:
            try:
                sent += s.send(reqs[sent:])
            except BlockingIOError:
                time.sleep(0.01)
        info["bytes_sent"], info["bytes_offered"] = sent, len(reqs)
        info["cut_off_s"] = wait_closed(s, 30)
    elif name == "gap-fills":
        s = handshake(ep)
        s.sendall(frame(KNOBLISTREQ, b""))
        mtype, body = recv_frame(s)
        while mtype != 9:  # KnobList
            mtype, body = recv_frame(s)
        last = struct.unpack_from("<Q", body, 0)[0]
        fills = b"".join(set_knob(last + k, b"", b"") for k in range(1, 5001))
        s.setblocking(False)
        sent, t0 = 0, time.time()
        while sent < len(fills) and time.time() - t0 < 3:
            try:
                sent += s.send(fills[sent:])
            except BlockingIOError:
                time.sleep(0.01)
        s.setblocking(True)
        counted = 0
        try:
            while True:
                mtype, body = recv_frame(s, timeout=3)
                if mtype is None:
                    break
                if mtype == KNOBACK and b"gap filled" in body:
                    counted += 1
        except OSError:
            pass
        s.close()
        info["fills_counted"] = counted
        cli = os.path.join(BUILD, "bin", "trainscope-cli")
        env = dict(os.environ, TRAINSCOPE_RUNTIME_DIR=RT)
        r = subprocess.run([cli, "set", "--job", "attack-unix", "test.work_us=321"], env=env,
                           capture_output=True, text=True, timeout=120)
        info["set_rc"] = r.returncode
        info["set_output"] = (r.stdout + r.stderr).strip()[-200:]
    elif name == "flood-steps":
        ep1 = ep.replace(".0.sock", ".1.sock")
        alone, _ = step_rate(ep1, 6)
        import multiprocessing as mp
        info.update(steps_per_s_alone=round(alone, 1))
        for kind in ("listen-only", "accepting"):
            dummy = os.path.join(os.path.dirname(ep[5:]), "dummy-%s.sock" % kind)
            stop = mp.Event()
            d = mp.Process(target=dummy_listener, args=(dummy, stop, kind == "accepting"))
            d.start()
            time.sleep(0.3)
            rate, (tries, ok) = step_rate(ep1, 6, lambda: connections_flood("unix:" + dummy, 6, FLOOD_PROCS))
            stop.set()
            d.join()
            info.update({"steps_per_s_flood_at_dummy_" + kind: round(rate, 1),
                         "dummy_%s_attempts_per_s" % kind: round(tries / 6),
                         "dummy_%s_connected_per_s" % kind: round(ok / 6)})
            time.sleep(1)
        cpu0, t0 = server_cpu_s(PID), time.time()
        at_agent, (tries_a, ok_a) = step_rate(ep1, 6, lambda: connections_flood(ep, 6, FLOOD_PROCS))
        info["agent_server_thread_cpu_pct"] = round(100 * (server_cpu_s(PID) - cpu0) / (time.time() - t0), 1)
        info.update(steps_per_s_flood_at_agent=round(at_agent, 1),
                    agent_attempts_per_s=round(tries_a / 6), agent_connected_per_s=round(ok_a / 6))
    elif name == "nonce-flood":
        t0 = time.time()
        for i in range(20000):
            handshake(ep, secret).close()
        info["handshakes_per_s"] = round(20000 / (time.time() - t0))
    return info


def connections_flood(ep, seconds, procs=2):
    """connect/send garbage/close from `procs` processes for `seconds`; returns attempts, connects."""
    import multiprocessing as mp

    def worker(q):
        end, tries, ok = time.time() + seconds, 0, 0
        while time.time() < end:
            tries += 1
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(ep[5:])
                s.send(b"\xff" * 16)
                ok += 1
            except OSError:
                pass
            s.close()
        q.put((tries, ok))

    q = mp.Queue()
    ps = [mp.Process(target=worker, args=(q,)) for _ in range(procs)]
    for p in ps:
        p.start()
    res = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return sum(r[0] for r in res), sum(r[1] for r in res)


def dummy_listener(path, stop, accept=True):
    """A Unix socket that accepts and closes (as cheaply as Python can), or only listens (its
    backlog fills and connects fail): the flood's own cost, without an agent's work."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    srv.settimeout(0.2)
    while not stop.is_set():
        if not accept:
            time.sleep(0.1)
            continue
        try:
            c, _ = srv.accept()
            c.close()
        except OSError:
            pass
    srv.close()


def current_step(ep):
    s = handshake(ep)
    s.sendall(frame(STATSREQ, b""))
    while True:
        mtype, body = recv_frame(s)
        if mtype == STATS:
            s.close()
            # eventsRecorded .. batchesDroppedForSlowClients (6 u64, u32, u64), then currentStep
            return struct.unpack_from("<q", body, 6 * 8 + 4 + 8)[0]


def server_cpu_s(pid):
    """CPU seconds (user + system) of the rank's control-server thread (named ts-server)."""
    hz = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if open(f"/proc/{pid}/task/{tid}/comm").read().strip() == "ts-server":
                f = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                return (int(f[11]) + int(f[12])) / hz
        except OSError:
            pass
    return 0.0


def step_rate(ep1, seconds, during=None):
    a = current_step(ep1)
    t0 = time.time()
    info = during() if during else (time.sleep(seconds) or None)
    b = current_step(ep1)
    return (b - a) / (time.time() - t0), info


def start_job(build, listen, rt, log, step_ms=5):
    env = dict(os.environ, TRAINSCOPE_RUNTIME_DIR=rt, TRAINSCOPE_LISTEN=listen,
               TRAINSCOPE_JOB_ID="attack-" + listen, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader", OMPI_MCA_oob_tcp_if_include="lo",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", os.path.join(build, "bin", "trainscope-testjob"),
           "--steps", "1000000", "--step-ms", str(step_ms)]
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    entry = os.path.join(rt, f"attack-{listen}.0.agent")
    for _ in range(300):
        if os.path.exists(entry):
            break
        time.sleep(0.1)
    fields = dict(line.split("=", 1) for line in open(entry).read().split("\n") if "=" in line)
    secret = open(fields["secret_file"], "rb").read() if fields.get("secret_file") else None
    return p, fields["endpoint"], int(fields["pid"]), secret


def main():
    global VERSION
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--json")
    ap.add_argument("--protocol", type=int, default=VERSION, help="wire protocol version of the build under test")
    ap.add_argument("--only", help="comma-separated attacks to run (default: all)")
    ap.add_argument("--step-ms", type=int, default=5, help="the test job's step time")
    ap.add_argument("--flood-procs", type=int, default=1, help="processes flooding connections (flood-steps)")
    args = ap.parse_args()
    VERSION = args.protocol
    global BUILD, FLOOD_PROCS
    BUILD = args.build
    FLOOD_PROCS = args.flood_procs
    results = []
    rt = tempfile.mkdtemp(prefix="ts-attack-")
    global RT
    RT = rt
    os.chmod(rt, 0o700)
    plan = {"tcp": ["tcp-frames", "nonce-flood", "idle"],
            "unix": ["unix-frames", "idle", "flood", "knob-value", "sub-pairs", "knoblist", "gap-fills",
                     "flood-steps"]}
    if args.only:
        keep = set(args.only.split(","))
        plan = {k: [a for a in v if a in keep] for k, v in plan.items()}
        plan = {k: v for k, v in plan.items() if v}
    try:
        for listen, attacks in plan.items():
            log_path = os.path.join(rt, f"{listen}.log")
            with open(log_path, "wb") as log:
                p, ep, pid, secret = start_job(args.build, listen, rt, log, args.step_ms)
                global PID
                PID = pid
                try:
                    time.sleep(3)  # warm up: the flight recorder fills for a few seconds
                    for name in attacks:
                        base = Rss.read(pid)
                        with Rss(pid) as r:
                            info = attack(name, ep, secret, log_path)
                        time.sleep(3)
                        after = Rss.read(pid)
                        row = dict(attack=name, transport=listen, baseline_mb=round(base / 2**20, 1),
                                   peak_mb=round(r.peak / 2**20, 1), after_mb=round(after / 2**20, 1),
                                   peak_delta_mb=round((r.peak - base) / 2**20, 1),
                                   after_delta_mb=round((after - base) / 2**20, 1), **info)
                        print(json.dumps(row), flush=True)
                        results.append(row)
                finally:
                    os.killpg(p.pid, signal.SIGTERM)
                    try:
                        p.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
    finally:
        shutil.rmtree(rt, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
