#!/usr/bin/env python3
"""Writes tests/data/torch_pp_orders.txt: the per-rank compute order of PyTorch's own
ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble objects, for tst_schedule's torchOrders
(which compares core's generator with it).

    build/torch2-venv/bin/python tests/data/gen/torch_pp_orders.py > tests/data/torch_pp_orders.txt

Each line: "<schedule> p=<p> m=<m> v=<v> stage=<rank>: <ops>", ops in core's labels (F3, B3c1,
W0c1: micro-batch, then the chunk = the index of the stage among the rank's stages by stage
index; B = PyTorch's input-gradient action "I", W = its weight action). PyTorch's idle slots
(None) are dropped: only the order is compared. The schedule objects are built for rank 0 of a
fake process group (torch.testing's FakeStore, no communication) with PipelineStage objects
around tiny Linear layers; pipeline_order holds every rank's list.
"""

import sys

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S
from torch.testing._internal.distributed.fake_pg import FakeStore


def stage_layout(kind, p, v, rank):
    if kind == "zbv":
        return [rank, 2 * p - 1 - rank]
    return [c * p + rank for c in range(v)]


SKIP = {"REDUCE_GRAD", "WAIT_REDUCE_GRAD", "UNSHARD", "RESHARD"}  # not compute on a micro-batch


def label(action, rank_stages):
    name = getattr(action.computation_type, "value", str(action.computation_type))
    letter = {"F": "F", "I": "B", "W": "W", "B": "B"}.get(name)
    if letter is None:
        raise SystemExit("unexpected action %r" % (action,))
    chunk = sorted(rank_stages).index(action.stage_index)
    return "%s%d%s" % (letter, action.microbatch_index, "c%d" % chunk if chunk else "")


def orders(kind, p, m, v):
    cls = S.ScheduleZBVZeroBubble if kind == "zbv" else S.ScheduleInterleavedZeroBubble
    n = 2 * p if kind == "zbv" else p * v
    stages = [PipelineStage(torch.nn.Linear(4, 4), i, n, torch.device("cpu"))
              for i in stage_layout(kind, p, v, 0)]
    sched = cls(stages, m, loss_fn=lambda a, b: a.sum())
    out = []
    for rank in range(p):
        acts = [a for a in sched.pipeline_order[rank]
                if a is not None and getattr(a.computation_type, "value", "") not in SKIP]
        out.append(" ".join(label(a, stage_layout(kind, p, v, rank)) for a in acts))
    return out


def main():
    lines = ["# torch %s: PyTorch's own schedule objects (tests/data/gen/torch_pp_orders.py)" % torch.__version__]
    for p in (1, 2, 3, 4):
        dist.init_process_group("fake", rank=0, world_size=p, store=FakeStore())
        for kind, vs in (("interleaved-zb", (1, 2, 3)), ("zbv", (2,))):
            for v in vs:
                for m in range(1, 13):
                    if kind == "interleaved-zb" and m % max(1, m // p) != 0:
                        continue
                    try:
                        ranks = orders(kind, p, m, v)
                    except Exception as e:  # a combination PyTorch refuses is not compared
                        lines.append("# %s p=%d m=%d v=%d refused by PyTorch: %s" % (kind, p, m, v, str(e).splitlines()[0]))
                        continue
                    for r, ops in enumerate(ranks):
                        lines.append("%s p=%d m=%d v=%d stage=%d: %s" % (kind, p, m, v, r, ops))
        dist.destroy_process_group()
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
