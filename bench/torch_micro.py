#!/usr/bin/env python3
"""Microbenchmarks behind docs/BENCHMARKS.md, "Pipelined agreement and DDP's own scaling
arithmetic" and "Ten runs each" (Debian's /usr/bin/python3 with python3-torch; OMP_NUM_THREADS=1).

  torch_micro.py scale            div_ by the world size against mul_ by its inverse, per call,
                                  on the realistic step's 9.5 MB of gradients and the demo's 2.6 MB
  torch_micro.py agree [--work N] the package's agreement alone: one int64 allreduce-MIN on 2 gloo
                                  ranks (started here on 127.0.0.1), 200 times, with N 512x512
                                  matmuls between calls (0: back to back); per rank the median
                                  wall and CPU time of a call
  torch_micro.py tcp              the DDP hook's per-step TCP counters alone (trainscope.ddp.TcpBytes
                                  .read(), build/python): 2 gloo ranks with a DDP model, rank 0 reads
                                  2000 times; the TCP sockets found and the mean per read
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time


def scale():
    import torch
    torch.set_num_threads(1)
    for n in (2372618, 662026):
        t = torch.randn(n)
        for _ in range(3):
            t.div_(2)
        t0 = time.perf_counter()
        for _ in range(100):
            t.div_(2)
        d = (time.perf_counter() - t0) / 100
        t0 = time.perf_counter()
        for _ in range(100):
            t.mul_(0.5)
        m = (time.perf_counter() - t0) / 100
        print(f"{n} floats: div_ {d * 1e3:.3f} ms, mul_ {m * 1e3:.3f} ms per call")


def tcp_rank():
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))
    from trainscope.ddp import TcpBytes
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 10))  # its sockets, as in a job
    if dist.get_rank() == 0:
        t = TcpBytes()
        n = 2000
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            t.read()
        print(f"{len(t._fds)} TCP sockets: read() {(time.perf_counter() - w0) / n * 1e6:.1f} us wall, "
              f"{(time.process_time() - c0) / n * 1e6:.1f} us cpu per call", flush=True)
    dist.barrier()
    os._exit(0)


def agree_rank(work):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    t = torch.zeros(2, dtype=torch.int64)
    a = torch.randn(512, 512)
    walls, cpus = [], []
    for _ in range(200):
        for _ in range(work):
            a @ a
        w0, c0 = time.perf_counter(), time.process_time()
        t[0], t[1] = 1, -1
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        t.tolist()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    print(f"rank {dist.get_rank()} (work {work}): wall median {statistics.median(walls) * 1e6:.1f} us, "
          f"cpu median {statistics.median(cpus) * 1e6:.1f} us", flush=True)
    dist.barrier()
    os._exit(0)  # torch 1.13's gloo teardown can deadlock (PYTHON.md)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["scale", "agree", "tcp"])
    ap.add_argument("--work", type=int, default=0)
    ap.add_argument("--port", type=int, default=29831)
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.what == "scale":
        return scale()
    if a.rank >= 0:
        return tcp_rank() if a.what == "tcp" else agree_rank(a.work)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port), WORLD_SIZE="2",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, a.what, "--work", str(a.work), "--rank", str(r)],
                              env=dict(env, RANK=str(r)), start_new_session=True) for r in (0, 1)]
    try:
        return max(p.wait(timeout=300) for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)


if __name__ == "__main__":
    sys.exit(main())
