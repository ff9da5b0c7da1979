#!/usr/bin/env python3
"""Runs a small 2-rank DDP job (gloo, CPU) under torch.profiler and writes one Kineto trace per rank.

Usage: make_ddp_trace.py OUT_DIR [--ranks N] [--steps S] [--port P] [--mode ddp|nosync|fsdp2]

Modes: ddp (DistributedDataParallel, one backward per step), nosync (DDP with gradient
accumulation: two micro-batches per step, the first under ddp.no_sync()), fsdp2 (PyTorch 2.x's
fully_shard on each Linear and the model, on a CPU device mesh).

The parent starts one process per rank (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE on 127.0.0.1, no
torchrun), each in its own process group; if any rank fails or the deadline passes, every rank's
whole process group is killed. Written files: OUT_DIR/rank{r}.json (the profiler's own
export_chrome_trace output) and, for rank 0, OUT_DIR/rank0.json.gz as well (gzip of the same).
Works with PyTorch 1.13 (Debian) and 2.x.
"""
import argparse
import gzip
import os
import shutil
import sys

from torch_ranks import run_ranks


def worker(out_dir, steps, mode):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    if mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, mesh=mesh)
        ddp = fully_shard(model, mesh=mesh)
    else:
        # Small buckets so that several gradient all-reduces overlap the backward pass.
        ddp = DDP(model, bucket_cap_mb=0.5)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    y = torch.randint(0, 10, (64,))
    loss_fn = nn.CrossEntropyLoss()
    from torch.profiler import ProfilerActivity, profile, schedule
    sched = schedule(wait=1, warmup=1, active=steps)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, record_shapes=False) as prof:
        for _ in range(steps + 2):
            opt.zero_grad()
            if mode == "nosync":  # gradient accumulation: no all-reduce for the first micro-batch
                with ddp.no_sync():
                    loss_fn(ddp(x[:32]), y[:32]).backward()
                loss_fn(ddp(x[32:]), y[32:]).backward()
            else:
                loss = loss_fn(ddp(x), y)
                loss.backward()
            opt.step()
            prof.step()
    path = os.path.join(out_dir, f"rank{rank}.json")
    prof.export_chrome_trace(path)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--mode", choices=("ddp", "nosync", "fsdp2"), default="ddp")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.out_dir, a.steps, a.mode)
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    return run_ranks("make_ddp_trace", a.ranks,
                     [sys.executable, __file__, a.out_dir, "--steps", str(a.steps), "--mode", a.mode, "--worker"],
                     a.timeout, a.port)

if __name__ == "__main__":
    sys.exit(main())
