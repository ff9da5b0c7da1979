#!/usr/bin/env python3
"""The breakdown and data-parallel numbers of CPU (gloo) torch.profiler traces, by interval
arithmetic on the raw JSON, written independently of trainscope's analysis (tst_torch_traces
compares `trainscope-cli analyze --json` with it).

Usage: trace_truth.py RANK0.json RANK1.json ...  -> JSON on stdout:
  {"per_rank": [{"rank", "steps", "step_ms", "compute_ms", "overlapped_comm_ms",
                 "exposed_comm_ms", "idle_ms", "grad_comm_ms", "grad_hidden_ms"}],
   "overlap_ratio": mean over ranks of sum(grad hidden) / sum(grad comm)}

Rules (docs/ANALYSIS.md, docs/FORMATS.md "PyTorch traces"), per rank and ProfilerStep#N window W:
  communication M = events named gloo:*, c10d::* or record_param_comms, on any thread;
  compute C = the main thread's (the one with the ProfilerStep#N events) other host ops (Kineto
    category cpu_op; the legacy profiler's events have none), minus the time that thread spends
    inside a collective call (a gloo:*/c10d::*/record_param_comms op on that thread whose name
    is not a send or receive): a thread blocked in a collective is not computing;
  gradient communication G = gloo ops of an all-reduce or reduce-scatter (DDP's buckets, FSDP's
    gradients; gloo runs reduce-scatter as all_reduce);
  compute_ms = |C \\ M|, overlapped = |C & M|, exposed = |M \\ C|, idle = |W| - |C | M|, means over
  the steps; overlap ratio per rank = sum |G & C| / sum |G|, then the mean over ranks.
"""
import json
import sys


def unite(iv):
    out = []
    for a, b in sorted(x for x in iv if x[1] > x[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(iv):
    return sum(b - a for a, b in iv)


def clip(iv, w):
    return unite([(max(a, w[0]), min(b, w[1])) for a, b in iv])


def intersect(x, y):
    return unite([(max(a, c), min(b, d)) for a, b in x for c, d in y])


def minus(x, y):
    out = []
    for a, b in unite(x):
        cur = a
        for c, d in unite(y):
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return unite(out)


def is_comm(n):
    return n.startswith("gloo:") or n.startswith("c10d::") or n == "record_param_comms"


def is_collective(n):
    low = n.lower()
    return is_comm(n) and not ("send" in low or "recv" in low)


def is_grad(n):
    k = n.lower().replace("_", "")
    return n.startswith("gloo:") and ("allreduce" in k or "reducescatter" in k)


def ns(e):
    ts = round(float(e["ts"]) * 1000)
    return (ts, ts + round(float(e.get("dur", 0)) * 1000))


def rank_truth(path, rank):
    with open(path) as f:
        doc = json.load(f)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    main = [e["tid"] for e in xs if e["name"].startswith("ProfilerStep#")][-1]
    steps, ops, coll, comm, grad = [], [], [], [], []
    for e in xs:
        n, cat = e["name"], e.get("cat", "")
        if n.startswith("ProfilerStep#"):
            steps.append(ns(e))
        elif is_comm(n):
            comm.append(ns(e))
            if is_grad(n):
                grad.append(ns(e))
            if e["tid"] == main and is_collective(n):
                coll.append(ns(e))
        elif e["tid"] == main and cat in ("", "cpu_op"):
            ops.append(ns(e))
    compute = minus(ops, coll)
    t = dict(rank=rank, steps=len(steps), step_ms=0.0, compute_ms=0.0, overlapped_comm_ms=0.0,
             exposed_comm_ms=0.0, idle_ms=0.0, grad_comm_ms=0.0, grad_hidden_ms=0.0)
    for w in sorted(steps):
        c, m, g = clip(compute, w), clip(comm, w), clip(grad, w)
        cm = length(intersect(c, m))
        t["step_ms"] += w[1] - w[0]
        t["compute_ms"] += length(c) - cm
        t["overlapped_comm_ms"] += cm
        t["exposed_comm_ms"] += length(m) - cm
        t["idle_ms"] += (w[1] - w[0]) - (length(c) + length(m) - cm)
        t["grad_comm_ms"] += length(g)
        t["grad_hidden_ms"] += length(intersect(g, c))
    for k in ("step_ms", "compute_ms", "overlapped_comm_ms", "exposed_comm_ms", "idle_ms",
              "grad_comm_ms", "grad_hidden_ms"):
        t[k] /= len(steps) * 1e6  # ns -> ms, mean per step
    return t


def main():
    per = [rank_truth(p, r) for r, p in enumerate(sys.argv[1:])]
    ratios = [t["grad_hidden_ms"] / t["grad_comm_ms"] for t in per if t["grad_comm_ms"] > 0]
    json.dump({"per_rank": per, "overlap_ratio": sum(ratios) / len(ratios) if ratios else None},
              sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
