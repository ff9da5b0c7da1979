"""DDP communication hook: every bucket's collective as a Trainscope event, and live gradient
compression (knob dp.compression, dp.topk_ratio) switched at a step all ranks agreed on.

    state = trainscope.attach_ddp(model)            # or:
    model.register_comm_hook(trainscope.DdpState(model.process_group), trainscope.ddp_hook)

Per bucket and step: a Collective event `bucket allreduce` on the comm track (Bucket = DDP's
bucket index, Bytes = the bytes this rank sends for it, Algorithm = what ran, e.g.
`allreduce+fp16`), from the collective's start to its completion; a counter `bucket <k> params`
(scalar parameters in the bucket; recorded when it changes, i.e. at step 0 and after DDP's
rebuild of its buckets). Per step, at the last bucket: counters `dp_wire_bytes`
(sent) and `dp_recv_bytes` (received). These Bytes are computed from gloo's algorithms (ring
allreduce sends and receives 2(n-1)/n of the buffer, ring allgather (n-1) times this rank's
buffer): gloo shares one connection per peer among all collectives and runs them on its own
threads, so no socket counter separates one bucket's bytes. What is measured, per step, is the
kernel's count on the process's TCP sockets: counters `tcp_sent_bytes` / `tcp_recv_bytes`
(attach_ddp(measure_wire=True), TcpBytes below).

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

import ctypes
import math
import os
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
        self._inv_world = 1.0 / self.world
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
        self.sent = 0  # bytes of the current step so far (received = sent, see _step_done)
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
        # The none fast path: bucket index -> (values, bytes sent, future callback); the bound
        # ctypes function and the algorithm's name id looked up once.
        self._fast = {}
        self._model = None  # set by attach_ddp; register_comm_hook callers register themselves
        self._registered = False
        self._begin = self._lib.ts_bucket_comm_begin2 if self._lib is not None else None
        self._algo_none = self._algo_ids[NONE]

    def _fast_entry(self, idx, buf):
        n = buf.numel()
        if self._lib is not None and self._param_counts.get(idx) != n:
            self._param_counts[idx] = n
            self._lib.ts_counter(self._params_counter(idx), float(n))
        w = self.world
        entry = (n, 2 * (w - 1) * buf.element_size() * n // w, _bucket_end_fn(self._lib, idx))
        self._fast[idx] = entry
        return entry

    def _step_done(self):
        """At the step's last bucket: the step's bytes as counters (sent = received for every
        algorithm here: ring allreduce and ring allgather are symmetric)."""
        if self._lib is not None:
            self._lib.ts_counter(self._n_sent, float(self.sent))
            self._lib.ts_counter(self._n_recv, float(self.sent))
        self.step_sent = self.step_recv = self.sent
        self.sent = 0

    def _start_wire(self):
        try:
            tcp = TcpBytes()
        except (OSError, AttributeError) as e:
            sys.stderr.write("trainscope: no TCP byte counts (%s)\n" % e)
            return
        lib, n_sent, n_recv = self._lib, _ts._name("tcp_sent_bytes"), _ts._name("tcp_recv_bytes")

        def at_step_end(_step):
            try:
                d = tcp.read()
            except Exception:  # never into the step
                return
            if d is not None:
                lib.ts_counter(n_sent, float(d[0]))
                lib.ts_counter(n_recv, float(d[1]))
                self.tcp_step = d

        self.tcp_step = None
        _ts._step_end_hooks.append(at_step_end)

    def _register(self):
        if not self._registered and self._model is not None:
            self._model.register_comm_hook(self, ddp_hook)
            self._registered = True

    # On the thread of step_begin, every rank at the same step.
    def _on_compression(self, knob):
        self.mode = knob.index
        if self.mode != NONE and not self._registered and self._model is not None:
            try:  # attach_ddp(hook="on-demand"): the hook from this step on, on every rank alike
                self._register()
            except Exception as e:  # never into the agent; every rank fails alike (same DDP state)
                sys.stderr.write("rank %d: dp.compression=%s: cannot register the DDP hook: %s\n"
                                 % (self.rank, knob.value, e))
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


class TcpBytes(object):
    """Bytes this process's TCP sockets moved, from the kernel: tcp_info's tcpi_bytes_sent and
    tcpi_bytes_received (Linux >= 4.19), one getsockopt per socket through libc (no Python socket
    objects, no dup). The sockets are found in /proc/self/fd (a Unix socket fails TCP_INFO and is
    left out) at the start and again every `rescan` reads or when one fails, so a process group
    created later is picked up. read() -> (sent, received) since the previous read, or None when
    it cannot tell (no TCP_INFO, a socket went away, a counter went backwards: an fd reused)."""

    _TCP_INFO = 11
    _SENT, _RECV, _SIZE = 200, 128, 232  # struct tcp_info offsets (linux/tcp.h)

    def __init__(self, rescan=100):
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._getsockopt = self._libc.getsockopt
        self._getsockopt.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_uint32)]
        self._getsockopt.restype = ctypes.c_int
        self._buf = ctypes.create_string_buffer(self._SIZE)
        self._len = ctypes.c_uint32(self._SIZE)
        self._rescan = rescan
        self._reads = 0
        self._fds = []
        self._last = {}  # fd -> (sent, received) at the previous read
        self._scan()

    def _info(self, fd):
        self._len.value = self._SIZE
        if self._getsockopt(fd, 6, self._TCP_INFO, self._buf, ctypes.byref(self._len)) != 0:
            return None
        if self._len.value < self._SENT + 8:
            return None  # a kernel without tcpi_bytes_sent
        raw = self._buf.raw
        return (int.from_bytes(raw[self._SENT:self._SENT + 8], sys.byteorder),
                int.from_bytes(raw[self._RECV:self._RECV + 8], sys.byteorder))

    def _scan(self):
        fds, last = [], {}
        try:
            names = os.listdir("/proc/self/fd")
        except OSError:
            names = []
        for name in names:
            try:
                fd = int(name)
                if not os.readlink("/proc/self/fd/" + name).startswith("socket:"):
                    continue
            except (OSError, ValueError):
                continue
            info = self._info(fd)
            if info is not None:
                fds.append(fd)
                last[fd] = self._last.get(fd, info)
        self._fds, self._last = fds, last

    def read(self):
        self._reads += 1
        if self._reads % self._rescan == 0:
            self._scan()
        sent = recv = 0
        ok = True
        for fd in self._fds:
            info = self._info(fd)
            if info is None:
                ok = False
                continue
            prev = self._last[fd]
            if info[0] < prev[0] or info[1] < prev[1]:
                ok = False  # the fd now names another socket
            else:
                sent += info[0] - prev[0]
                recv += info[1] - prev[1]
            self._last[fd] = info
        if not ok:
            self._scan()
            return None
        return sent, recv


def _allgather(state, t):
    outs = [torch.empty_like(t) for _ in range(state.world)]
    fut = state._pg.allgather([outs], [t]).get_future()
    return fut, outs


def _bucket_end_fn(lib, idx):
    """The future callback of bucket idx under dp.compression=none, built once per bucket: it
    records the collective's end (gloo's thread) and hands DDP the reduced buffer."""
    end = lib.ts_bucket_comm_end if lib is not None else None

    if end is None:
        def done(f):
            return f.value()[0]
    else:
        def done(f, end=end, idx=idx):
            end(idx)
            return f.value()[0]
    return done


def ddp_hook(state, bucket):
    """The communication hook (register with model.register_comm_hook(state, ddp_hook))."""
    buf = bucket.buffer()
    idx = bucket.index()
    mode = state.mode
    if mode == NONE:
        # The fast path (the default, and what a job runs most of the time): per bucket one cached
        # entry (values, bytes sent, the prebuilt future callback), one ctypes call before the
        # allreduce, one in the callback. Measured in docs/BENCHMARKS.md.
        n = buf.numel()
        c = state._fast.get(idx)
        if c is None or c[0] != n:  # first step, and after DDP's one rebuild of its buckets
            c = state._fast_entry(idx, buf)
        if state._begin is not None:
            state._begin(idx, c[1], state._algo_none)
        # DDP's own path multiplies by 1/world while copying gradients into the bucket; with a
        # hook the bucket holds the plain sum, and mul_ by the same double is the same arithmetic
        # (div_ is ~1.7x the time of mul_ here: 0.18 against 0.11 ms on 9.5 MB).
        buf.mul_(state._inv_world)
        fut = state._pg.allreduce([buf]).get_future()
        state.sent += c[1]
        if bucket.is_last():
            state._step_done()
        return fut.then(c[2])
    n = buf.numel()
    w = state.world
    lib = state._lib
    if lib is not None and state._param_counts.get(idx) != n:  # DDP's buckets change once, after step 0
        state._param_counts[idx] = n
        lib.ts_counter(state._params_counter(idx), float(n))
    if mode == FP16:
        t = buf.to(torch.float16).div_(w)
        nbytes = t.numel() * t.element_size()
        sent = 2 * (w - 1) * nbytes // w  # = received (ring allreduce)
        if lib is not None:
            lib.ts_bucket_comm_begin2(idx, sent, state._algo_ids[mode])
        fut = state._pg.allreduce([t]).get_future()

        def done(f, buf=buf, idx=idx):
            r = f.value()[0]
            if lib is not None:
                lib.ts_bucket_comm_end(idx)
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
            payload = torch.cat([q, torch.tensor([scale], dtype=torch.float32, device=buf.device).view(torch.int8)])
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
        sent = (w - 1) * nbytes  # = received (ring allgather)
        if lib is not None:
            lib.ts_bucket_comm_begin2(idx, sent, state._algo_ids[mode])
        fut, outs = _allgather(state, payload)

        def done(f, buf=buf, idx=idx, mode=mode, outs=outs, n=n, k=k):
            if lib is not None:
                lib.ts_bucket_comm_end(idx)
            total = torch.zeros(n, dtype=torch.float32, device=buf.device)
            for o in outs:  # rank order on every rank: identical sums everywhere
                if mode == BF16:
                    total.add_(o.view(torch.bfloat16).float())
                elif mode == INT8:
                    total.add_(o[:n].float() * o[n:].clone().view(torch.float32))  # no host sync on a GPU
                else:
                    total.index_add_(0, o[k:].view(torch.int32).long(), o[:k])
            total.div_(w)
            buf.copy_(total)
            return buf
    state.sent += sent
    if bucket.is_last():
        state._step_done()
    return fut.then(done)


HOOK_MODES = ("always", "on-demand")


def attach_ddp(model, compression="none", topk_ratio=0.01, verbose=True, hook="always", measure_wire=True):
    """Registers ddp_hook on a DistributedDataParallel model (its own process group) and declares
    dp.compression and dp.topk_ratio. Returns the DdpState.

    hook="always" (default): the hook runs from the first step: every bucket's collective is an
    event, also under dp.compression=none. hook="on-demand": while the compression is none, DDP
    runs its own C++ allreduce (no Python per bucket, no bucket events, no byte counters); the
    first agreed change to another compression registers the hook at that step on every rank
    (DDP accepts one registration, also after the first iteration), and from then on it stays,
    with bucket events under every compression, none included.

    measure_wire=True: at every step end the counters `tcp_sent_bytes` / `tcp_recv_bytes` carry
    what the kernel counted on this process's TCP sockets during the step (TcpBytes): the
    transport's own number next to the bucket events' Bytes, which follow gloo's algorithms
    (docs/PYTHON.md says why a bucket's bytes cannot be measured on its own)."""
    if hook not in HOOK_MODES:
        raise ValueError("attach_ddp: hook must be one of %s, not %r" % (", ".join(HOOK_MODES), hook))
    state = DdpState(getattr(model, "process_group", None), compression, topk_ratio, verbose)
    state._model = model
    if hook == "always" or state.mode != NONE:
        state._register()
    if measure_wire and _ts._lib is not None:
        state._start_wire()
    return state
