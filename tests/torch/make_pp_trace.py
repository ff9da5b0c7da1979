#!/usr/bin/env python3
"""Runs a small pipeline-parallel job (torch.distributed.pipelining, gloo, CPU; PyTorch >= 2.4)
under torch.profiler and writes one Kineto trace per rank (one stage per rank).

Usage: make_pp_trace.py OUT_DIR [--ranks P] [--microbatches M] [--schedule gpipe|1f1b] [--steps S]

As make_ddp_trace.py: ranks started with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE on 127.0.0.1,
each in its own process group; every rank's group is killed if one fails or on timeout.
Writes OUT_DIR/rank{r}.json.
"""
import argparse
import os
import sys

from torch_ranks import run_ranks


def worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from torch.profiler import ProfilerActivity, profile, schedule

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    width, batch = 512, 64
    # One stage per rank; the last stage is heavier, so the others wait (a visible bubble).
    layers = [nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()]
    if rank == world - 1:
        layers += [nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)]
    stage_mod = nn.Sequential(*layers)
    stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
    loss_fn = nn.CrossEntropyLoss()
    cls = ScheduleGPipe if a.schedule == "gpipe" else Schedule1F1B
    sched = cls(stage, n_microbatches=a.microbatches, loss_fn=loss_fn)
    opt = torch.optim.SGD(stage_mod.parameters(), lr=0.01)
    x = torch.randn(batch, width)
    y = torch.randint(0, 10, (batch,))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=a.steps)) as prof:
        for _ in range(a.steps + 2):
            opt.zero_grad()
            if rank == 0:
                sched.step(x)
            elif rank == world - 1:
                sched.step(target=y)
            else:
                sched.step()
            opt.step()
            prof.step()
    prof.export_chrome_trace(os.path.join(a.out_dir, f"rank{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--schedule", default="gpipe", choices=["gpipe", "1f1b"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    return run_ranks("make_pp_trace", a.ranks,
                     [sys.executable, __file__, a.out_dir, "--worker", "--microbatches", str(a.microbatches),
                      "--schedule", a.schedule, "--steps", str(a.steps)], a.timeout)

if __name__ == "__main__":
    sys.exit(main())
