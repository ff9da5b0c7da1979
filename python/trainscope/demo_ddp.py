"""The torch-ddp demo job (`trainscope-cli demo --mode torch-ddp`), also a template for attaching
Trainscope to a DDP script. One process per rank; rendezvous from RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT (what `trainscope-cli launch` sets for Python commands); gloo on the CPU.

    python3 -m trainscope.demo_ddp --steps 200

The model is an MLP (about 0.9 M parameters) trained on a synthetic classification task (labels
from a fixed random teacher network, a different shard per rank) with small DDP buckets, so a
step has several bucket collectives. --no-trainscope runs the same job without the package
(the baseline of bench/bench_torch_ddp.py).
"""

import argparse
import datetime
import os
import signal
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def tcp_bytes():
    """(sent, received) over every TCP socket of this process, from the kernel's tcp_info
    (tcpi_bytes_sent, tcpi_bytes_received): what gloo (and the rendezvous store) really moved."""
    sent = recv = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink("/proc/self/fd/" + fd).startswith("socket:"):
                continue
            s = socket.fromfd(int(fd), socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
            if len(info) >= 208:
                recv += struct.unpack_from("Q", info, 128)[0]
                sent += struct.unpack_from("Q", info, 200)[0]
        except OSError:
            pass  # not TCP (the agent's Unix socket)
        finally:
            s.close()
    return sent, recv


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m trainscope.demo_ddp")
    p.add_argument("--steps", type=int, default=1000000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--inputs", type=int, default=256)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--bucket-cap-mb", type=float, default=1.0)
    p.add_argument("--compression", default="none")
    p.add_argument("--topk-ratio", type=float, default=0.01)
    p.add_argument("--step-delay-ms", type=float, default=0.0, help="sleep per step (slows the demo down)")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=10, help="held-out loss (counter eval_loss) every N steps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: NCCL, the model and batches on GPU LOCAL_RANK %% device count (docs/GPU.md)")
    p.add_argument("--no-trainscope", action="store_true", help="baseline: no package, no hook")
    p.add_argument("--agree-every", default="auto",
                   help="knob agreement every K steps, or auto (trainscope.init(agree_every=...))")
    p.add_argument("--agree-blocking", action="store_true",
                   help="every agreement blocks (the package before the pipelined agreement; for the benchmark)")
    p.add_argument("--torch-hook", action="store_true",
                   help="with --no-trainscope: PyTorch's own Python allreduce_hook (to compare hook costs)")
    p.add_argument("--torch-profiler", action="store_true",
                   help="run under torch.profiler with CUDA activities only (Kineto's CUPTI tracing: the "
                        "anchor for the agent's GPU tracing overhead, docs/GPU.md)")
    p.add_argument("--no-hook", action="store_true", help="package and step markers, but DDP's own allreduce")
    p.add_argument("--hook", default="always", choices=["always", "on-demand"],
                   help="attach_ddp(hook=...): on-demand registers the hook only when a compression is chosen")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--time-out", default="", help="write 'wall_ms cpu_ms' of every step to this file (rank 0; cpu: this process, all threads)")
    p.add_argument("--wire-out", default="",
                   help="rank 0 writes bytes per step sent/received on its TCP sockets (measured) and as the hook "
                        "computes them, over steps --wire-from .. the end")
    p.add_argument("--wire-from", type=int, default=20)
    p.add_argument("--inject", action="append", default=[], metavar="SPEC",
                   help="a fault, as trainscope-train's --inject: straggler:rank=R,ms=X[,every=N], "
                        "slow-loader:rank=R,ms=X[,every=N] or hang:rank=R,step=S (repeatable)")
    a = p.parse_args(argv)
    try:
        a.inject = [parse_injection(x) for x in a.inject]
    except ValueError as e:
        p.error(str(e))
    return a


def parse_injection(spec):
    """trainscope-train's --inject grammar (docs/TRAINER.md, "Faults to inject")."""
    kind, _, rest = spec.partition(":")
    if kind not in ("straggler", "slow-loader", "hang"):
        raise ValueError("--inject '%s': the kind must be straggler, hang or slow-loader" % spec)
    allowed = {"straggler": ("rank", "ms", "every", "step"), "slow-loader": ("rank", "ms", "every", "step"),
               "hang": ("rank", "step")}[kind]
    inj = {"kind": kind, "rank": None, "ms": 0, "every": 1, "step": -1}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        if k not in allowed:
            raise ValueError("--inject '%s': unknown key '%s' for %s" % (spec, k, kind))
        try:
            inj[k] = int(v)
        except ValueError:
            raise ValueError("--inject '%s': '%s' must be a whole number" % (spec, k))
    if inj["rank"] is None or inj["rank"] < 0:
        raise ValueError("--inject '%s': rank=R (>= 0) is required" % spec)
    if kind != "hang" and inj["ms"] <= 0:
        raise ValueError("--inject '%s': ms=X (> 0) is required" % spec)
    if kind == "hang" and inj["step"] < 0:
        raise ValueError("--inject '%s': step=S is required" % spec)
    if inj["every"] <= 0:
        raise ValueError("--inject '%s': every=N must be > 0" % spec)
    return inj


def inject_faults(injections, rank, step, ts):
    """Runs the faults due at this rank and step, inside the step (after step_begin), as
    trainscope-train does: a straggler spins the CPU, a slow loader sleeps, a hang sleeps forever;
    each inside a range of its own name, so that traces and `doctor` show it."""
    for inj in injections:
        if inj["rank"] != rank:
            continue
        if inj["kind"] == "hang":
            if step != inj["step"]:
                continue
            if ts is not None:
                ts.range_push("inject hang")
            print("torch-ddp demo: rank %d hangs before step %d (--inject); kill the job to end it" % (rank, step),
                  file=sys.stderr, flush=True)
            while True:
                time.sleep(1)
        if (inj["step"] >= 0 and step != inj["step"]) or (inj["step"] < 0 and step % inj["every"]):
            continue
        name = "inject straggler" if inj["kind"] == "straggler" else "inject slow data loader"
        if ts is not None:
            ts.range_push(name)
        until = time.perf_counter() + inj["ms"] / 1000.0
        if inj["kind"] == "straggler":
            while time.perf_counter() < until:
                pass
        else:
            time.sleep(inj["ms"] / 1000.0)
        if ts is not None:
            ts.range_pop()


def main(argv=None):
    a = parse(argv)
    torch.set_num_threads(a.threads)
    ts = None
    if not a.no_trainscope:
        import trainscope as ts

    # SIGTERM (the launcher forwarding a stop): the agent publishes its last records and removes
    # its socket and discovery file, then the rank exits at once. (Leaving the loop at the next
    # step boundary instead could leave a peer waiting in a collective.)
    def stop(*_):
        if ts is not None:
            ts.shutdown()
        sys.stdout.flush()
        os._exit(143)

    signal.signal(signal.SIGTERM, stop)
    # A peer that died must not leave this rank waiting for gloo's default 30 minutes.
    backend = "nccl" if a.device == "cuda" else "gloo"
    dev = torch.device("cpu")
    if a.device == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))) %
                           torch.cuda.device_count())
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    if ts is not None:
        # After init_process_group: rank and world size from it.
        if a.agree_blocking:
            ts.AGREE_SYNC_FIRST = 1 << 62
        ts.init(agree_every=a.agree_every if a.agree_every == "auto" else int(a.agree_every))

    torch.manual_seed(a.seed)  # same initial weights and teacher on every rank
    teacher = nn.Sequential(nn.Linear(a.inputs, 64), nn.Tanh(), nn.Linear(64, a.classes))
    model = nn.Sequential(nn.Linear(a.inputs, a.width), nn.ReLU(), nn.Linear(a.width, a.width), nn.ReLU(),
                          nn.Linear(a.width, a.width), nn.ReLU(), nn.Linear(a.width, a.classes))
    model.to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb,
                                              device_ids=[dev.index] if dev.type == "cuda" else None)
    state = None
    if ts is not None and not a.no_hook:
        state = ts.attach_ddp(ddp, compression=a.compression, topk_ratio=a.topk_ratio, hook=a.hook)
    if ts is None and a.torch_hook:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator(device=dev).manual_seed(a.seed * 1000 + rank + 1)  # this rank's data shard
    # A fixed held-out set, the same on every rank: its loss has no batch noise and is equal on all
    # ranks while they are replicas.
    eval_gen = torch.Generator().manual_seed(a.seed * 1000 + 999)
    x_eval = torch.randn(1024, a.inputs, generator=eval_gen)
    with torch.no_grad():
        y_eval = teacher(x_eval).argmax(dim=1)
    x_eval, y_eval = x_eval.to(dev), y_eval.to(dev)
    teacher.to(dev)  # batches are drawn on the device (no host work or copies per step)
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print("torch-ddp demo: %d rank(s), %d parameters, torch %s, %s" % (world, nparams, torch.__version__,
                                                                          backend), flush=True)
    times = []
    wire = {"computed_sent": 0, "computed_recv": 0}
    prof = None
    if a.torch_profiler:
        act = torch.profiler.ProfilerActivity
        prof = torch.profiler.profile(activities=[act.CUDA] if dev.type == "cuda" else [act.CPU])
        prof.__enter__()
    for s in range(a.steps):
        if a.wire_out and s == a.wire_from:
            wire["start"] = tcp_bytes()
        t0 = time.perf_counter()
        c0 = time.process_time()
        if ts is not None:
            ts.step_begin(s)
        if a.inject:
            inject_faults(a.inject, rank, s, ts)
        x = torch.randn(a.batch, a.inputs, generator=gen, device=dev)
        with torch.no_grad():
            y = teacher(x).argmax(dim=1)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        lv = float(loss)
        if ts is not None:
            ts.counter("loss", lv)
            if a.eval_every > 0 and s % a.eval_every == 0:
                with torch.no_grad():
                    ts.counter("eval_loss", float(loss_fn(model(x_eval), y_eval)))
            ts.step_end(s)
        if a.step_delay_ms > 0:
            time.sleep(a.step_delay_ms / 1000.0)
        times.append(((time.perf_counter() - t0) * 1000.0, (time.process_time() - c0) * 1000.0))
        if a.wire_out and s >= a.wire_from and state is not None:
            wire["computed_sent"] += state.step_sent
            wire["computed_recv"] += state.step_recv
        if a.log_every > 0 and (s % a.log_every == 0 or s == a.steps - 1):
            print("rank %d step %d loss %.5f" % (rank, s, lv), flush=True)
    if prof is not None:
        prof.__exit__(None, None, None)  # after the timed steps: Kineto's processing is not timed
    if a.wire_out and rank == 0 and "start" in wire:
        end = tcp_bytes()
        n = a.steps - a.wire_from
        with open(a.wire_out, "w") as f:
            f.write("compression=%s ranks=%d steps=%d measured_sent_per_step=%.1f measured_recv_per_step=%.1f "
                    "computed_sent_per_step=%.1f computed_recv_per_step=%.1f\n" % (
                        a.compression, world, n, (end[0] - wire["start"][0]) / n, (end[1] - wire["start"][1]) / n,
                        wire["computed_sent"] / n, wire["computed_recv"] / n))
    if a.time_out and rank == 0:
        with open(a.time_out, "w") as f:
            f.write("\n".join("%.4f %.4f" % t for t in times) + "\n")
    print("rank %d done steps=%d loss=%.5f" % (rank, a.steps, lv), flush=True)
    dist.barrier()
    # Leave without the interpreter's teardown: torch 1.13's ~ProcessGroupGloo can deadlock there
    # (a gloo worker needs the GIL to free a tensor while the main thread, holding it, joins that
    # worker). The agent's exit handler does not run under os._exit, so shut it down first.
    if ts is not None:
        ts.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
