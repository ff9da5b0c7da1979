"""DDP communication hook: every bucket's collective as a Trainscope event, and live gradient
compression (knob dp.compression, dp.topk_ratio) switched at a step all ranks agreed on.

    state = trainscope.attach_ddp(model)            # or:
    model.register_comm_hook(trainscope.DdpState(model.process_group), trainscope.ddp_hook)

Per bucket and step: a Collective event `bucket allreduce` on the comm track (Bucket = DDP's
bucket index, Bytes = the bytes this rank sends for it, Algorithm = what ran, e.g.
`allreduce+fp16`), from the collective's start to its completion; a counter `bucket <k> params`
(scalar parameters in the bucket; recorded when it changes, i.e. at step 0 and after DDP's
rebuild of its buckets). Per step, at the last bucket: counters `dp_wire_bytes`
(sent) and `dp_recv_bytes` (received). Bytes follow gloo's algorithms: ring allreduce sends and
receives 2(n-1)/n of the buffer, ring allgather (n-1) times this rank's buffer.

| dp.compression | collective | bytes sent per rank (N values) |
|---|---|---|
| none    | allreduce fp32                          | 2(n-1)/n * 4N |
| fp16    | allreduce fp16 (scaled by 1/n first)     | 2(n-1)/n * 2N |
| bf16    | allgather of bf16 (gloo cannot reduce bf16), summed in rank order | (n-1) * 2N |
| int8    | allgather of int8 + one fp32 scale per rank, dequantized and summed in rank order | (n-1) * (N+4) |
| topk-ef | allgather of k = ceil(ratio N) values + int32 indices, error feedback per bucket | (n-1) * 8k |

Every rank decompresses the same data in the same order, so replicas stay bitwise identical.
DDP fixes its buckets at construction (and rebuilds them once after the first iteration), so
dp.bucket_bytes is not offered for PyTorch jobs (docs/PYTHON.md).
"""

import math
import sys

import torch
import torch.distributed as dist

import trainscope as _ts

COMPRESSIONS = ["none", "fp16", "bf16", "int8", "topk-ef"]
_ALGO = ["allreduce", "allreduce+fp16", "allgather+bf16", "allgather+int8", "allgather+topk-ef"]
NONE, FP16, BF16, INT8, TOPK = 0, 1, 2, 3, 4


class DdpState(object):
    """State of the hook: the process group, the knobs, error-feedback residuals per bucket and
    the bytes of the current step."""

    def __init__(self, process_group=None, compression="none", topk_ratio=0.01, verbose=True):
        self.group = process_group
        self.world = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        self.verbose = verbose
        self.compression = _ts.knob_enum(
            "dp.compression", COMPRESSIONS, compression,
            "gradient compression of every DDP bucket (applied at an agreed step)", changes_math=True)
        self.topk_ratio = _ts.knob_float(
            "dp.topk_ratio", 1e-6, 1.0, topk_ratio,
            "fraction of a bucket's values topk-ef sends (acts with dp.compression=topk-ef)", changes_math=True)
        self.mode = self.compression.index
        self.ratio = self.topk_ratio.value
        self.residual = {}  # bucket index -> error-feedback residual (topk-ef)
        self.sent = 0
        self.recv = 0
        self.step_sent = 0  # bytes the last complete step sent / received (all buckets)
        self.step_recv = 0
        self._lib = _ts._lib
        self._algo_ids = [_ts._name(a) for a in _ALGO]
        self._param_names = {}
        self._param_counts = {}  # bucket index -> the parameter count last recorded
        # The process group object itself: its allreduce/allgather skip torch.distributed's
        # Python wrappers (argument checks, group look-ups), a few microseconds per bucket.
        self._pg = process_group if process_group is not None else dist.distributed_c10d._get_default_group()
        self._n_sent = _ts._name("dp_wire_bytes")
        self._n_recv = _ts._name("dp_recv_bytes")
        self.compression.on_change(self._on_compression)
        self.topk_ratio.on_change(self._on_ratio)

    # On the thread of step_begin, every rank at the same step.
    def _on_compression(self, knob):
        self.mode = knob.index
        if self.mode != TOPK:
            self.residual.clear()  # error feedback starts afresh the next time topk-ef is chosen
        if self.verbose:
            sys.stdout.write("rank %d applied dp.compression=%s at step %d\n" % (self.rank, knob.value, _ts._step))
            sys.stdout.flush()

    def _on_ratio(self, knob):
        self.ratio = knob.value
        if self.verbose:
            sys.stdout.write("rank %d applied dp.topk_ratio=%g at step %d\n" % (self.rank, knob.value, _ts._step))
            sys.stdout.flush()

    def _params_counter(self, idx):
        n = self._param_names.get(idx)
        if n is None:
            n = self._param_names[idx] = _ts._name("bucket %d params" % idx)
        return n


def _allgather(state, t):
    outs = [torch.empty_like(t) for _ in range(state.world)]
    fut = state._pg.allgather([outs], [t]).get_future()
    return fut, outs


def ddp_hook(state, bucket):
    """The communication hook (register with model.register_comm_hook(state, ddp_hook))."""
    buf = bucket.buffer()
    idx = bucket.index()
    n = buf.numel()
    w = state.world
    mode = state.mode
    lib = state._lib
    if lib is not None and state._param_counts.get(idx) != n:  # DDP's buckets change once, after step 0
        state._param_counts[idx] = n
        lib.ts_counter(state._params_counter(idx), float(n))
    if mode == NONE or mode == FP16:
        t = buf.div_(w) if mode == NONE else buf.to(torch.float16).div_(w)
        nbytes = t.numel() * t.element_size()
        sent = recv = 2 * (w - 1) * nbytes // w
        if lib is not None:
            lib.ts_bucket_comm_begin2(idx, sent, state._algo_ids[mode])
        fut = state._pg.allreduce([t]).get_future()

        def done(f, buf=buf, idx=idx, mode=mode):
            r = f.value()[0]
            if lib is not None:
                lib.ts_bucket_comm_end(idx)
            if mode == NONE:
                return r
            buf.copy_(r)
            return buf
    else:
        k = 0
        if mode == BF16:
            payload = buf.to(torch.bfloat16).view(torch.int8)  # gloo moves the bits, we add
        elif mode == INT8:
            scale = float(buf.abs().max()) / 127.0
            if not scale > 0.0 or math.isinf(scale):
                scale = 1.0
            q = (buf / scale).round_().clamp_(-127, 127).to(torch.int8)
            payload = torch.cat([q, torch.tensor([scale], dtype=torch.float32).view(torch.int8)])
        else:  # topk-ef
            res = state.residual.get(idx)
            acc = buf + res if res is not None and res.numel() == n else buf.clone()
            k = max(1, min(n, int(math.ceil(state.ratio * n))))
            _, ind = acc.abs().topk(k, sorted=False)
            vals = acc[ind]
            acc[ind] = 0.0
            state.residual[idx] = acc  # what was not sent this step
            payload = torch.cat([vals, ind.to(torch.int32).view(torch.float32)])
        nbytes = payload.numel() * payload.element_size()
        sent = recv = (w - 1) * nbytes
        if lib is not None:
            lib.ts_bucket_comm_begin2(idx, sent, state._algo_ids[mode])
        fut, outs = _allgather(state, payload)

        def done(f, buf=buf, idx=idx, mode=mode, outs=outs, n=n, k=k):
            if lib is not None:
                lib.ts_bucket_comm_end(idx)
            total = torch.zeros(n, dtype=torch.float32)
            for o in outs:  # rank order on every rank: identical sums everywhere
                if mode == BF16:
                    total.add_(o.view(torch.bfloat16).float())
                elif mode == INT8:
                    total.add_(o[:n].float() * float(o[n:].clone().view(torch.float32)[0]))
                else:
                    total.index_add_(0, o[k:].view(torch.int32).long(), o[:k])
            total.div_(w)
            buf.copy_(total)
            return buf
    state.sent += sent
    state.recv += recv
    if bucket.is_last():
        if lib is not None:
            lib.ts_counter(state._n_sent, float(state.sent))
            lib.ts_counter(state._n_recv, float(state.recv))
        state.step_sent, state.step_recv = state.sent, state.recv
        state.sent = state.recv = 0
    return fut.then(done)


def attach_ddp(model, compression="none", topk_ratio=0.01, verbose=True):
    """Registers ddp_hook on a DistributedDataParallel model (its own process group) and declares
    dp.compression and dp.topk_ratio. Returns the DdpState."""
    state = DdpState(getattr(model, "process_group", None), compression, topk_ratio, verbose)
    model.register_comm_hook(state, ddp_hook)
    return state
