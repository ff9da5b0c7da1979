#!/usr/bin/env python3
"""A cluster of K "machines" on one Linux host, for tests and demos (docs/RELAY.md).

Each machine is a network namespace with its own address, its own runtime directory and its own
trainscope-relay; the machines are joined by veth pairs to a bridge that lives in a namespace of
its own, and the root namespace gets one veth onto that bridge, so a front end in the root
namespace reaches the job through one address. A real job runs across the machines under mpirun
(TCP between the namespaces: OpenMPI's rsh launcher is an `ip netns exec` script).

Addresses come from 198.18.0.0/15 (RFC 2544 benchmarking space): 198.18.N.0/24 with N chosen
free here; machine i is 198.18.N.i, the root namespace 198.18.N.254. Traffic goes only between
these namespaces and loopback. Everything is removed by down() -- also when the caller fails
(the context manager, and atexit/SIGTERM for the command line).

Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN for `ip netns`).

    sudo scripts/netns_cluster.py demo --machines 4 --ranks-per-machine 8   # start, print, wait
"""
import argparse
import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PORT = 7070


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def check(cond, what, cluster=None):
    """A test step: prints ok, or FAIL with the cluster's logs and exits 1 (the caller's
    `with Cluster(...)` removes the namespaces on the way out)."""
    if not cond:
        print("FAIL:", what)
        if cluster:
            print(cluster.logs())
        sys.exit(1)
    print("ok:", what)


def cannot_make_namespaces():
    """Why network namespaces cannot be made here ("" when they can)."""
    name = f"tsprobe{os.getpid()}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return probe.stderr.strip() or "ip netns add failed"
    subprocess.run(["ip", "netns", "del", name], check=False)
    return ""


def free_subnet():
    used = sh("ip", "-4", "route", "show").stdout
    for n in list(range((os.getpid() % 200) + 20, 250)) + list(range(20, 250)):
        if f"198.18.{n}." not in used:
            return n
    raise RuntimeError("no free 198.18.N.0/24 subnet")


class Cluster:
    def __init__(self, machines, build_dir, tag=None):
        self.k = machines
        self.build = Path(build_dir).resolve()
        self.tag = tag or f"ts{os.getpid() % 100000}"
        self.net = free_subnet()
        self.ns = [f"{self.tag}-m{i}" for i in range(1, machines + 1)]
        self.switch = f"{self.tag}-sw"
        self.dir = Path(tempfile.mkdtemp(prefix=f"trainscope-{self.tag}-"))
        self.secret = self.dir / "job.secret"
        self.procs = []  # (Popen, what)
        self.up_done = False
        self.job_id = None

    # -- addresses ---------------------------------------------------------------------------
    def addr(self, i):  # machine i, 1-based
        return f"198.18.{self.net}.{i}"

    @property
    def root_addr(self):
        return f"198.18.{self.net}.254"

    @property
    def coordinator(self):
        return f"{self.addr(1)}:{PORT}"

    def runtime_dir(self, i):
        return self.dir / f"m{i}"

    # -- network -----------------------------------------------------------------------------
    def up(self):
        self.secret.write_text(secrets.token_hex(32))
        os.chmod(self.secret, 0o600)
        try:
            sh("ip", "netns", "add", self.switch)
            sh("ip", "netns", "exec", self.switch, "ip", "link", "add", "br0", "type", "bridge")
            sh("ip", "netns", "exec", self.switch, "ip", "link", "set", "br0", "up")
            sh("ip", "netns", "exec", self.switch, "ip", "link", "set", "lo", "up")
            for i, ns in enumerate(self.ns, start=1):
                sh("ip", "netns", "add", ns)
                a, b = f"{self.tag}m{i}a", f"{self.tag}m{i}b"
                sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
                sh("ip", "link", "set", a, "netns", ns)
                sh("ip", "link", "set", b, "netns", self.switch)
                sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.addr(i)}/24", "dev", a)
                sh("ip", "netns", "exec", ns, "ip", "link", "set", a, "up")
                sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
                sh("ip", "netns", "exec", self.switch, "ip", "link", "set", b, "master", "br0")
                sh("ip", "netns", "exec", self.switch, "ip", "link", "set", b, "up")
                d = self.runtime_dir(i)
                d.mkdir(mode=0o700)
            # The root namespace's one way in: a veth onto the bridge, one /24 route on it.
            a, b = f"{self.tag}ra", f"{self.tag}rb"
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            sh("ip", "link", "set", b, "netns", self.switch)
            sh("ip", "addr", "add", f"{self.root_addr}/24", "dev", a)
            sh("ip", "link", "set", a, "up")
            sh("ip", "netns", "exec", self.switch, "ip", "link", "set", b, "master", "br0")
            sh("ip", "netns", "exec", self.switch, "ip", "link", "set", b, "up")
            self.up_done = True
        except BaseException:
            self.down()
            raise
        return self

    def down(self):
        for p, _ in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 10
        for p, _ in self.procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.procs = []
        # Anything still running inside our namespaces (orted, ranks) goes with them.
        for ns in self.ns + [self.switch]:
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        sh("ip", "link", "del", f"{self.tag}ra", check=False)
        for ns in self.ns + [self.switch]:
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
        return False

    # -- processes ---------------------------------------------------------------------------
    def spawn(self, argv, ns=None, env=None, log=None, what=""):
        full = (["ip", "netns", "exec", ns] if ns else []) + [str(a) for a in argv]
        out = open(log, "wb") if log else subprocess.DEVNULL
        p = subprocess.Popen(full, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((p, what))
        return p

    def env_for(self, i):
        e = dict(os.environ)
        e["TRAINSCOPE_RUNTIME_DIR"] = str(self.runtime_dir(i))
        e["TRAINSCOPE_SECRET_FILE"] = str(self.secret)
        e.pop("TRAINSCOPE_LISTEN", None)
        e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        return e

    def start_relays(self, job_id):
        relay = self.build / "bin" / "trainscope-relay"
        for i, ns in enumerate(self.ns, start=1):
            ready = self.dir / f"relay{i}.ready"
            self.spawn([relay, "--job", job_id, "--listen", f"{self.addr(i)}:{PORT}", "--coordinator", self.coordinator,
                        "--machine", f"m{i}", "--secret-file", self.secret, "--ready-file", ready],
                       ns=ns, env=self.env_for(i), log=self.dir / f"relay{i}.log", what=f"relay m{i}")
        deadline = time.time() + 20
        while time.time() < deadline:
            if all((self.dir / f"relay{i}.ready").exists() for i in range(1, self.k + 1)):
                return
            time.sleep(0.05)
        raise RuntimeError("relays did not start: " + self.logs("relay"))

    def rsh_agent(self):
        """OpenMPI's launcher for the other machines: `agent HOST CMD...` runs CMD in HOST's
        namespace with that machine's runtime directory."""
        p = self.dir / "netns-rsh"
        cases = "\n".join(
            f'  {self.addr(i)}) ns={ns}; rt={self.runtime_dir(i)} ;;' for i, ns in enumerate(self.ns, start=1))
        p.write_text(f"""#!/bin/sh
# mpirun's rsh agent for the namespaces of {self.tag}: $1 is the host, the rest the command.
host="$1"; shift
case "$host" in
{cases}
  *) echo "netns-rsh: unknown host $host" >&2; exit 1 ;;
esac
# Each machine has its own host name too (a UTS namespace): MPI tells nodes apart by it.
exec ip netns exec "$ns" unshare --uts env TRAINSCOPE_RUNTIME_DIR="$rt" sh -c "hostname ${{ns#*-}} && exec $*"
""")
        p.chmod(0o755)
        return p

    def start_mpi_job(self, ranks_per_machine, trainer_args, job_id=None):
        """Real trainscope-train ranks under mpirun across the machines (mpirun in machine 1)."""
        self.job_id = job_id or f"cluster-{self.tag}"
        hostfile = self.dir / "hosts"
        hostfile.write_text("".join(f"{self.addr(i)} slots={ranks_per_machine}\n" for i in range(1, self.k + 1)))
        agent = self.build / "lib" / "libtrainscope_agent.so"
        subnet = f"198.18.{self.net}.0/24"
        argv = ["mpirun", "--allow-run-as-root", "-np", str(self.k * ranks_per_machine), "--hostfile", hostfile,
                "--map-by", "slot", "--mca", "plm_rsh_agent", self.rsh_agent(), "--mca", "plm_rsh_no_tree_spawn", "1",
                "--mca", "oob_tcp_if_include", subnet, "--mca", "btl", "self,tcp",
                "--mca", "btl_tcp_if_include", subnet, "--mca", "orte_keep_fqdn_hostnames", "1",
                # Many ranks on few cores: waiting ranks yield instead of spinning, and the job
                # runs at nice 10 so that relays and front ends on the same cores keep up.
                "--mca", "mpi_yield_when_idle", "1",
                "-x", f"LD_PRELOAD={agent}", "-x", f"TRAINSCOPE_JOB_ID={self.job_id}",
                "-x", "TRAINSCOPE_SECRET_FILE", "-x", "OMPI_ALLOW_RUN_AS_ROOT", "-x", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                self.build / "bin" / "trainscope-train"] + list(trainer_args)
        env = self.env_for(1)
        argv = ["unshare", "--uts", "sh", "-c", 'hostname m1 && exec nice -n 10 "$@"', "mpirun-in-m1"] + argv
        self.spawn(argv, ns=self.ns[0], env=env, log=self.dir / "job.log", what="mpirun")
        return self.job_id

    def start_torch_ddp(self, demo_args=(), python="python3", job_id=None):
        """A real PyTorch DDP job (gloo over TCP): one rank per machine, started torch-style
        (RANK, WORLD_SIZE, MASTER_ADDR of machine 1), the trainscope package loading the agent."""
        self.job_id = job_id or f"torch-{self.tag}"
        port = 29500 + os.getpid() % 1000
        for i, ns in enumerate(self.ns, start=1):
            env = self.env_for(i)
            env.update({"RANK": str(i - 1), "LOCAL_RANK": "0", "WORLD_SIZE": str(self.k), "LOCAL_WORLD_SIZE": "1",
                        "MASTER_ADDR": self.addr(1), "MASTER_PORT": str(port), "TRAINSCOPE_JOB_ID": self.job_id,
                        "TRAINSCOPE_AGENT_LIB": str(self.build / "lib" / "libtrainscope_agent.so"),
                        "PYTHONPATH": str(self.build / "python"), "GLOO_SOCKET_IFNAME": f"{self.tag}m{i}a",
                        "OMP_NUM_THREADS": "1"})
            self.spawn(["unshare", "--uts", "sh", "-c", f'hostname m{i} && exec nice -n 10 "$@"', "torch-rank",
                        python, "-m", "trainscope.demo_ddp"] + list(demo_args),
                       ns=ns, env=env, log=self.dir / f"torch{i}.log", what=f"torch rank {i - 1}")
        return self.job_id

    def wait_listed(self, ranks, seconds=180):
        """`jobs --host` through the coordinator until it lists `ranks` ranks (or the time is up);
        the last listing (a dict of `jobs --json`'s job), None when none answered."""
        listing = None
        deadline = time.time() + seconds
        while time.time() < deadline:
            r = self.cli("jobs", "--host", self.coordinator, "--json")
            if r.returncode == 0:
                listing = json.loads(r.stdout)["jobs"][0]
                if listing["ranks_found"] == ranks:
                    break
            time.sleep(1)
        return listing

    def logs(self, prefix=""):
        out = []
        for f in sorted(self.dir.glob(f"{prefix}*.log")):
            out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def cli(self, *args, timeout=120):
        """trainscope-cli in the root namespace, through the coordinator relay."""
        return subprocess.run([str(self.build / "bin" / "trainscope-cli")] + [str(a) for a in args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout,
                              env={**os.environ, "TRAINSCOPE_SECRET_FILE": str(self.secret)})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["demo"])
    ap.add_argument("--machines", type=int, default=4)
    ap.add_argument("--ranks-per-machine", type=int, default=2)
    ap.add_argument("--build", default=str(Path(__file__).resolve().parent.parent / "build"))
    ap.add_argument("trainer_args", nargs="*", default=[])
    a = ap.parse_args()
    c = Cluster(a.machines, a.build).up()
    atexit.register(c.down)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    job = c.start_mpi_job(a.ranks_per_machine, a.trainer_args or ["--mode", "dp", "--steps", "1000000"])
    c.start_relays(job)
    print(f"job {job}: {a.machines} machines x {a.ranks_per_machine} ranks")
    print(f"attach from here through one address:\n"
          f"  TRAINSCOPE_SECRET_FILE={c.secret} trainscope-cli jobs --host {c.coordinator}\n"
          f"  trainscope --attach {job}@{c.coordinator} --secret-file {c.secret}\n"
          f"  curl http://{c.coordinator}/metrics\n"
          f"Ctrl-C removes the namespaces.")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
