"""The torch-pp demo job (`trainscope-cli demo --mode torch-pp`), also a template for attaching
Trainscope to a torch.distributed.pipelining script (PyTorch >= 2.4). One process per rank (one
pipeline over all ranks); rendezvous from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; gloo on the
CPU.

    python -m trainscope.demo_pp --steps 200 --schedule 1f1b --microbatches 4

The model is an MLP of 2p blocks (p = ranks) trained on a synthetic teacher task (the same batch on
every rank: the first stage uses the inputs, the last the labels). pp.schedule and pp.microbatches
change live: gpipe / 1f1b put blocks 2r, 2r+1 on rank r (one stage), interleaved-1f1b /
interleaved-zb blocks r and r+p (loop placement, two stages), zbv blocks r and 2p-1-r (V). A change
of placement moves the blocks' parameters at the agreed step: every rank keeps every block's
module and each block's last owner broadcasts its parameters (the whole model once, about 0.2 M
parameters here). Plain SGD (no optimizer state to move).
"""

import argparse
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m trainscope.demo_pp")
    p.add_argument("--steps", type=int, default=1000000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--step-delay-ms", type=float, default=0.0, help="sleep per step (slows the demo down)")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-trainscope", action="store_true", help="baseline: the plain PyTorch schedule")
    p.add_argument("--time-out", default="", help="rank 0 writes 'wall_ms cpu_ms' of every step to this file")
    return p.parse_args(argv)


def block(i, n, width, classes):
    if i == n - 1:
        return nn.Linear(width, classes)
    return nn.Sequential(nn.Linear(width, width), nn.Tanh())


def main(argv=None):
    a = parse(argv)
    torch.set_num_threads(a.threads)
    ts = None
    if not a.no_trainscope:
        import trainscope as ts
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as sched

    def stop(*_):
        if ts is not None:
            ts.shutdown()
        sys.stdout.flush()
        os._exit(143)

    signal.signal(signal.SIGTERM, stop)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    if ts is not None:
        ts.init()
    nblocks = 2 * world
    torch.manual_seed(a.seed)  # the same initial blocks and teacher on every rank
    blocks = [block(i, nblocks, a.width, a.classes) for i in range(nblocks)]
    teacher = nn.Sequential(nn.Linear(a.width, 32), nn.Tanh(), nn.Linear(32, a.classes))
    owner = {}  # block -> rank whose copy is trained
    dev = torch.device("cpu")
    state = {"opt": None}

    def placement(layout):
        if layout == "single":
            return {r: [2 * r, 2 * r + 1] for r in range(world)}
        if layout == "v":
            return {r: [r, nblocks - 1 - r] for r in range(world)}
        return {r: [r, r + world] for r in range(world)}  # loop

    def make_stages(layout, n=None):
        """The rank's stages for `layout`; blocks whose owner changes are broadcast from it first."""
        mine = placement(layout)
        new_owner = {b: r for r, bs in mine.items() for b in bs}
        if owner:
            for b in range(nblocks):  # the same order on every rank
                if owner[b] != new_owner[b]:
                    for prm in blocks[b].parameters():
                        dist.broadcast(prm.data, src=owner[b])
        owner.clear()
        owner.update(new_owner)
        if layout == "single":
            stages = [PipelineStage(nn.Sequential(*[blocks[b] for b in mine[rank]]), rank, world, dev)]
        else:
            stages = [PipelineStage(blocks[b], b, nblocks, dev) for b in sorted(mine[rank])]
        params = [prm for s in stages for prm in s.submod.parameters()]
        state["opt"] = torch.optim.SGD(params, lr=a.lr)
        return stages

    loss_fn = nn.CrossEntropyLoss()
    first_layout = {"gpipe": "single", "1f1b": "single", "zbv": "v"}.get(a.schedule, "loop")
    stages = make_stages(first_layout)
    if ts is not None:
        pp = ts.attach_pipeline(stages, loss_fn, schedule=a.schedule, microbatches=a.microbatches,
                                batch_size=a.batch, restage=make_stages)
        run = pp.step
    else:
        cls = {"gpipe": sched.ScheduleGPipe, "1f1b": sched.Schedule1F1B,
               "interleaved-1f1b": sched.ScheduleInterleaved1F1B,
               "interleaved-zb": sched.ScheduleInterleavedZeroBubble,
               "zbv": sched.ScheduleZBVZeroBubble}[a.schedule]
        plain = cls(stages[0] if first_layout == "single" else stages, n_microbatches=a.microbatches, loss_fn=loss_fn)
        firsts = any(st.is_first for st in stages)
        lasts = any(st.is_last for st in stages)

        def run(x, target=None, losses=None):
            return plain.step(*((x,) if firsts else ()), target=target if lasts else None,
                          losses=losses if lasts else None)

    gen = torch.Generator().manual_seed(a.seed * 1000 + 7)  # the same batches on every rank
    if rank == 0:
        print("torch-pp demo: %d rank(s), %d blocks, %d parameters, torch %s, gloo, %s x %d micro-batches" % (
            world, nblocks, sum(p.numel() for b in blocks for p in b.parameters()), torch.__version__, a.schedule,
            a.microbatches), flush=True)
    lv = float("nan")
    times = []
    for s in range(a.steps):
        t0 = time.perf_counter()
        c0 = time.process_time()
        if ts is not None:
            ts.step_begin(s)
        x = torch.randn(a.batch, a.width, generator=gen)
        with torch.no_grad():
            y = teacher(x).argmax(dim=1)
        losses = []
        run(x, target=y, losses=losses)
        if ts is not None:
            with ts.phase("optimizer"):
                state["opt"].step()
        else:
            state["opt"].step()
        state["opt"].zero_grad(set_to_none=True)
        if losses:
            lv = float(sum(float(l.detach()) for l in losses) / len(losses))
            if ts is not None:
                ts.counter("loss", lv)
        if ts is not None:
            ts.step_end(s)
        times.append(((time.perf_counter() - t0) * 1000.0, (time.process_time() - c0) * 1000.0))
        if a.step_delay_ms > 0:
            time.sleep(a.step_delay_ms / 1000.0)
        if a.log_every > 0 and (s % a.log_every == 0 or s == a.steps - 1) and losses:
            print("rank %d step %d loss %.5f" % (rank, s, lv), flush=True)
    if a.time_out and rank == 0:
        with open(a.time_out, "w") as f:
            f.write("\n".join("%.4f %.4f" % t for t in times) + "\n")
    print("rank %d done steps=%d loss=%.5f" % (rank, a.steps, lv), flush=True)
    dist.barrier()
    if ts is not None:
        ts.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
