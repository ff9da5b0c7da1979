#!/usr/bin/env python3
"""A small PyTorch job for checking the GPU path on a GPU machine (docs/GPU.md).

World size 1 by default (NCCL refuses two ranks on one GPU): NCCL still launches its kernels and
calls the profiler and tuner plugins. Each iteration is one step: a matmul (cuBLAS kernels), an
NVTX range, and an all_reduce of --mib MiB (NCCL kernels + collective events). When the agent
is preloaded (`trainscope-cli launch -- python3 this.py`) the script marks step boundaries
through the agent's C API with ctypes, so knob changes (nccl.algorithm, nccl.protocol,
nccl.channels, nccl.profile_mask) apply at a step -- the job is otherwise unmodified: CUDA
tracing and the NCCL plugins need no code here.

  trainscope-cli launch --job-id gpu1 -- python3 torch_nccl_allreduce.py --steps 2000
"""
import argparse
import ctypes
import os
import time

import torch
import torch.distributed as dist


def agent():
    """The preloaded agent (None when the job runs without it)."""
    try:
        lib = ctypes.CDLL("libtrainscope_agent.so", mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except OSError:
        return None
    lib.ts_step_begin.argtypes = [ctypes.c_int64]
    lib.ts_step_end.argtypes = [ctypes.c_int64]
    return lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--backend", default="nccl", help="nccl (GPU) or gloo (CPU smoke test)")
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    dev = torch.device("cuda", 0) if args.backend == "nccl" else torch.device("cpu")
    x = torch.ones(args.mib << 18, device=dev)  # float32: 4 bytes each
    a = torch.randn(2048, 2048, device=dev)
    ts = agent()
    t0 = time.time()
    for step in range(args.steps):
        if ts:
            ts.ts_step_begin(step)
        if dev.type == "cuda":
            torch.cuda.nvtx.range_push("compute")
        b = a @ a
        if dev.type == "cuda":
            torch.cuda.nvtx.range_pop()
        dist.all_reduce(x)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if ts:
            ts.ts_step_end(step)
    dt = (time.time() - t0) / args.steps
    print(f"rank {rank}: {args.steps} steps, {dt * 1e3:.3f} ms/step, checksum {float(b[0, 0]):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
