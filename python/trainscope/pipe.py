"""torch.distributed.pipelining (PyTorch >= 2.4): every stage's F / B / W per micro-batch and its
sends and receives as Trainscope events, and the knobs pp.schedule / pp.microbatches applied live
by rebuilding the schedule object at a step every rank agreed on.

    stage = PipelineStage(module, rank, world, device)                # as the script had it
    pp = trainscope.attach_pipeline(stage, loss_fn, schedule="1f1b", microbatches=4, batch_size=32)
    for i in range(steps):
        with trainscope.step(i):
            pp.step(x, target=y, losses=losses)                       # instead of schedule.step(...)
            opt.step(); opt.zero_grad()

Events (the names and attributes the reference trainer emits, docs/TRACE_CONVENTIONS.md):
MicroBatchF / MicroBatchB / MicroBatchW with MicroBatch, Stage (the rank's position in the
pipeline) and Chunk (the index of the stage among the rank's stages, by stage index); B is the
whole backward when the schedule does not split it, the input gradient when it does (W then
follows); `pp send` (P2PSend, from posting to posted) and `pp recv` (P2PRecv, the wait for the
data) with Bytes and Peer (global rank). Receives are waited on outside F/B/W, so waiting is never
counted as compute.

Schedules (knob pp.schedule; the stages each needs per rank):

| choice | PyTorch class | stages per rank |
|---|---|---|
| gpipe | ScheduleGPipe | 1 |
| 1f1b | Schedule1F1B | 1 |
| interleaved-1f1b | ScheduleInterleaved1F1B | v (loop placement: virtual stage s on rank s % p) |
| interleaved-zb | ScheduleInterleavedZeroBubble (ZB1P) | v (loop placement) |
| zbv | ScheduleZBVZeroBubble | 2 (V placement: stages r and 2p-1-r on rank r) |

Without a `restage` function only the choices whose stage layout is the one the job has are
offered; with one (`restage(layout, n)` -> the rank's new stages, layout "single", "loop" or "v"),
all are, and a change that needs another layout calls it at the agreed step (the job moves its
parameters; trainscope.demo_pp shows how). A change is validated at the agreed step on every rank
alike (micro-batches must divide the batch; the schedule class must accept the combination); a
refused one is reported (stdout, a marker `refused ...`), the knobs are put back and the old
schedule runs on.
"""

import sys

import torch
import torch.distributed as dist

import trainscope as _ts

try:
    from torch.distributed.pipelining import schedules as _sched
except ImportError as e:  # PyTorch < 2.4
    raise ImportError("trainscope.pipe needs torch.distributed.pipelining (PyTorch >= 2.4; "
                      "`make torch2-venv` makes one in build/torch2-venv): %s" % e)

SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "interleaved-zb", "zbv"]
# choice -> (class name, stage layout, stages per rank (None: v))
_SPEC = {
    "gpipe": ("ScheduleGPipe", "single", 1),
    "1f1b": ("Schedule1F1B", "single", 1),
    "interleaved-1f1b": ("ScheduleInterleaved1F1B", "loop", None),
    "interleaved-zb": ("ScheduleInterleavedZeroBubble", "loop", None),
    "zbv": ("ScheduleZBVZeroBubble", "v", 2),
}
_MB = {"F": 0, "B": 1, "W": 2}


def available_schedules():
    """The choices this PyTorch has a class for."""
    return [s for s in SCHEDULES if hasattr(_sched, _SPEC[s][0])]


def layout_of(stages, world):
    """("single", 1), ("loop", n) or ("v", 2) for a rank's stages (sorted by stage index)."""
    if len(stages) == 1:
        return "single", 1
    idx = [s.stage_index for s in stages]
    r = stages[0].group_rank
    if len(idx) == 2 and idx == [r, 2 * world - 1 - r]:
        return "v", 2
    return "loop", len(stages)


# ---- P2P events: the schedules call these module functions through their globals -----------------

_recv_waits = {}  # id(works) -> (bytes, peer): receives posted, waited on later
_in_batch = [False]
_patched = [False]
_n_send = _n_recv = 0


def _is_recv(op):
    f = getattr(op, "op", None)
    return f is dist.irecv or getattr(f, "__name__", "") == "irecv"


def _nbytes(op):
    t = op.tensor
    return t.numel() * t.element_size()


def _patch_p2p():
    if _patched[0] or _ts._lib is None:
        return
    _patched[0] = True
    global _n_send, _n_recv
    _n_send = _ts._name("pp send")
    _n_recv = _ts._name("pp recv")
    lib = _ts._lib
    orig_batch = _sched._batch_p2p
    orig_wait = _sched._wait_batch_p2p

    def batch_p2p(p2p_ops, *args, **kwargs):
        if _in_batch[0] or not p2p_ops:  # inner call (one batch per process group): counted outside
            return orig_batch(p2p_ops, *args, **kwargs)
        sends = [op for op in p2p_ops if not _is_recv(op)]
        recvs = [op for op in p2p_ops if _is_recv(op)]
        _in_batch[0] = True
        try:
            for op in sends:  # posting the sends (as the reference trainer: isend inside the event)
                lib.ts_comm_begin(1, _n_send, _nbytes(op), int(op.peer), 0)
            works = orig_batch(p2p_ops, *args, **kwargs)
            for _ in sends:
                lib.ts_comm_end()
        finally:
            _in_batch[0] = False
        if recvs:
            if len(_recv_waits) > 4096:  # batches never waited on (a failed step): keep memory bounded
                _recv_waits.clear()
            _recv_waits[id(works)] = (sum(_nbytes(op) for op in recvs), int(recvs[0].peer), works)
        return works

    def wait_batch_p2p(work, *args, **kwargs):
        r = _recv_waits.pop(id(work), None)
        if r is None:
            return orig_wait(work, *args, **kwargs)
        lib.ts_comm_begin(2, _n_recv, r[0], r[1], 0)
        try:
            return orig_wait(work, *args, **kwargs)
        finally:
            lib.ts_comm_end()

    _sched._batch_p2p = batch_p2p
    _sched._wait_batch_p2p = wait_batch_p2p


# ---- stage instrumentation -------------------------------------------------------------------

def _instrument(stage, pos, chunk):
    """F/B/W events around the stage's per-micro-batch entry points (instance attributes, so the
    class and other stages are untouched)."""
    lib = _ts._lib
    if lib is None or getattr(stage, "_trainscope", None) is not None:
        return
    stage._trainscope = (pos, chunk)
    fwd, bwd, wgt = stage.forward_one_chunk, stage.backward_one_chunk, getattr(stage, "backward_weight_one_chunk", None)

    def forward_one_chunk(fwd_chunk_id, *args, **kwargs):
        lib.ts_mb_begin(0, int(fwd_chunk_id), pos, chunk)
        try:
            return fwd(fwd_chunk_id, *args, **kwargs)
        finally:
            lib.ts_mb_end()

    def backward_one_chunk(bwd_chunk_id, *args, **kwargs):
        lib.ts_mb_begin(1, int(bwd_chunk_id), pos, chunk)
        try:
            return bwd(bwd_chunk_id, *args, **kwargs)
        finally:
            lib.ts_mb_end()

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
    if wgt is not None:
        def backward_weight_one_chunk(bwd_chunk_id, *args, **kwargs):
            lib.ts_mb_begin(2, int(bwd_chunk_id), pos, chunk)
            try:
                return wgt(bwd_chunk_id, *args, **kwargs)
            finally:
                lib.ts_mb_end()

        stage.backward_weight_one_chunk = backward_weight_one_chunk


class Pipeline(object):
    """A rank's pipeline schedule, rebuilt live from pp.schedule / pp.microbatches."""

    def __init__(self, stages, loss_fn, schedule="1f1b", microbatches=4, batch_size=None, restage=None,
                 virtual_stages=2, verbose=True, schedule_kwargs=None):
        self.stages = sorted(stages if isinstance(stages, (list, tuple)) else [stages], key=lambda s: s.stage_index)
        self.loss_fn = loss_fn
        self.batch_size = batch_size
        self.restage = restage
        self.v = int(virtual_stages)
        self.verbose = verbose
        self.kwargs = dict(schedule_kwargs or {})
        self.world = self.stages[0].group_size
        self.rank = dist.get_rank()
        self.pos = self.stages[0].group_rank
        have = layout_of(self.stages, self.world)
        offered = []
        for s in available_schedules():
            lay, n = self._layout(s)
            if restage is not None or (lay, n) == have:
                offered.append(s)
        if schedule not in offered:
            raise ValueError("pp.schedule=%s does not fit this job (offered: %s)" % (schedule, ", ".join(offered)))
        self.choices = offered
        self.schedule_name = schedule
        self.microbatches = int(microbatches)
        hi = int(batch_size) if batch_size else 1024
        self.k_schedule = _ts.knob_enum("pp.schedule", offered, schedule,
                                        "pipeline schedule (PyTorch's class rebuilt at an agreed step)")
        self.k_mb = _ts.knob_int("pp.microbatches", 1, hi, self.microbatches,
                                 "micro-batches per step (must divide the batch of %s)" % (batch_size or "?"))
        self._dirty = False
        self.k_schedule.on_change(self._changed)
        self.k_mb.on_change(self._changed)
        self.changes = []  # (step, schedule, microbatches) applied; (step, None, reason) refused
        _patch_p2p()
        why = self._check(schedule, self.microbatches)
        if why:
            raise ValueError(why)
        self._build()

    def _layout(self, name):
        lay, n = _SPEC[name][1], _SPEC[name][2]
        return lay, (self.v if n is None else n)

    def _changed(self, _knob):
        self._dirty = True  # applied in the next step() (all ranks are in the same step then)

    def _check(self, name, m):
        """Why (name, m) cannot run, or ''. The same answer on every rank."""
        if name not in self.choices:
            return "schedule %s is not offered" % name
        if m < 1:
            return "pp.microbatches must be >= 1"
        if self.batch_size and self.batch_size % m != 0:
            return "the batch of %d samples does not split into %d micro-batches" % (self.batch_size, m)
        lay, n = self._layout(name)
        if lay != "single":
            rounds = max(1, m // self.world)
            if m % rounds != 0:
                return "%s needs the micro-batches (%d) to be a multiple of the rounds (%d = max(1, m / %d stages))" % (
                    name, m, rounds, self.world)
        return ""

    def _build(self):
        name, m = self.schedule_name, self.microbatches
        lay, n = self._layout(name)
        if layout_of(self.stages, self.world) != (lay, n):
            self.stages = sorted(self.restage(lay, n), key=lambda s: s.stage_index)
        for c, st in enumerate(self.stages):
            _instrument(st, self.pos, c)
        cls = getattr(_sched, _SPEC[name][0])
        arg = self.stages[0] if lay == "single" else self.stages
        self.schedule = cls(arg, n_microbatches=m, loss_fn=self.loss_fn, **self.kwargs)
        self.has_first = any(s.is_first for s in self.stages)
        self.has_last = any(s.is_last for s in self.stages)

    def _apply(self):
        self._dirty = False
        name, m = self.k_schedule.value, int(self.k_mb.value)
        if name == self.schedule_name and m == self.microbatches:
            return
        step = _ts._step
        why = self._check(name, m)
        old = (self.schedule_name, self.microbatches, self.stages, self.schedule)
        if not why:
            self.schedule_name, self.microbatches = name, m
            try:
                with _ts.range("apply pipeline knobs"):
                    self._build()
            except Exception as e:  # the class refused it: identical on every rank (same p, m)
                why = "%s: %s" % (type(e).__name__, e)
                self.schedule_name, self.microbatches, stages, self.schedule = old
                if stages is not self.stages:  # moved to another layout already: move back
                    self.stages = sorted(self.restage(*layout_of(stages, self.world)), key=lambda s: s.stage_index)
                    self._build()
        if why:
            msg = "refused pp.schedule=%s pp.microbatches=%d: %s; keeping %s/%d" % (
                name, m, why, self.schedule_name, self.microbatches)
            if self.rank == 0:
                sys.stdout.write("step %d: %s\n" % (step, msg))
                sys.stdout.flush()
            _ts.marker(msg)
            self.changes.append((step, None, why))
            if name != self.schedule_name:
                self.k_schedule.restore(self.schedule_name)
            if m != self.microbatches:
                self.k_mb.restore(self.microbatches)
            self._dirty = False
            return
        self.changes.append((step, name, m))
        if self.verbose:
            sys.stdout.write("rank %d applied pp.schedule=%s pp.microbatches=%d at step %d\n" % (
                self.rank, name, m, step))
            sys.stdout.flush()

    def parameters(self):
        """The parameters of the rank's current stages (after a restage: new ones)."""
        for s in self.stages:
            for p in s.submod.parameters():
                yield p

    def step(self, *args, target=None, losses=None, **kwargs):
        """One step of the schedule in force: args go to the first stage, target to the last (pass
        them on every rank; each uses what its stages need)."""
        if self._dirty:
            self._apply()
        a = args if self.has_first else ()
        t = target if self.has_last else None
        return self.schedule.step(*a, target=t, losses=losses if self.has_last else None, **kwargs)


def attach_pipeline(stages, loss_fn, schedule="1f1b", microbatches=4, batch_size=None, restage=None,
                    virtual_stages=2, verbose=True, schedule_kwargs=None):
    """Instruments the rank's PipelineStage(s), declares pp.schedule and pp.microbatches and builds
    the schedule. Call pp.step(...) where the script called schedule.step(...)."""
    return Pipeline(stages, loss_fn, schedule, microbatches, batch_size, restage, virtual_stages, verbose,
                    schedule_kwargs)
