"""Trainscope for Python jobs: the agent's C API through ctypes (no compiled extension).

    import trainscope
    trainscope.init()                 # starts the agent; step agreement over torch.distributed
    trainscope.attach_ddp(model)      # DDP: bucket collectives as events, dp.compression live
    for i, batch in enumerate(loader):
        with trainscope.step(i):      # knob changes agreed at step i's end apply before step i+1
            loss = ...
            trainscope.counter("loss", loss.item())

Everything is a no-op (and init() returns a negative code with the reason on stderr) when the
agent library cannot be found or TRAINSCOPE_DISABLE is set: the job runs on, unobserved.
See docs/PYTHON.md.
"""

import ctypes
import os
import sys
import threading
import time

from . import _lib as _L

__all__ = [
    "init", "shutdown", "is_active", "library_path", "step", "step_begin", "step_end", "hook_optimizer",
    "range", "range_push", "range_pop", "marker", "counter", "phase", "microbatch", "comm",
    "knob_int", "knob_float", "knob_bool", "knob_enum", "Knob", "set_agree_group", "agree_every",
    "dropped_events",
    "attach_ddp", "ddp_hook", "DdpState", "attach_pipeline",
]

_lib, _lib_path, _lib_why = _L.load()
_names = {}
_names_lock = threading.Lock()
_keep = []  # ctypes callbacks that must outlive their registration
_agree_group = None
_agree_cb = None
_agree_t = None
_agree_every = 1
_warned = False
_step = -1  # the step last opened on this process (for messages)


def _warn(msg):
    sys.stderr.write("trainscope: %s\n" % msg)
    sys.stderr.flush()


def library_path():
    """Path of the agent library in use, or None."""
    return _lib_path


def _name(s):
    """The agent's id for a string (interned once, cached)."""
    i = _names.get(s)
    if i is None:
        if _lib is None:
            return 0
        with _names_lock:
            i = _names.get(s)
            if i is None:
                i = int(_lib.ts_name(s.encode()))
                _names[s] = i
    return i


# ---- step agreement -------------------------------------------------------------------------

# agree_every="auto": the agreement's own cost is kept near AUTO_BUDGET of the step time. Each rank
# proposes a period from its measured agreement time and step time; the collective carries the
# proposals next to the change numbers ([seq, -proposal], one allreduce-MIN gives the lowest seq
# and the highest proposal), so every rank adopts the same period after the same collective.
AUTO_BUDGET = 0.005
AUTO_MAX_EVERY = 64
AUTO_MAX_DELAY_S = 0.1  # and a change waits at most ~this long for the next agreement
_auto = False
_agree_cost = None  # EMA of one agreement (s), this rank
_step_cost = None   # EMA of one step (s), from the interval between agreements
_last_agree = None  # (perf_counter, step) at the end of the last agreement


def _proposal():
    if _agree_cost is None or _step_cost is None or _step_cost <= 0:
        return 1
    k = 1
    while (k < AUTO_MAX_EVERY and _agree_cost > AUTO_BUDGET * _step_cost * k and
           2 * k * _step_cost <= AUTO_MAX_DELAY_S):
        k *= 2
    return k


AGREE_SYNC_FIRST = 4  # the first agreements block: they set the group up and measure the cost
_end_serial = 0       # counts step ends (incremented before ts_step_end)
_agree_serial = -1    # the step end whose first agreement call has run
_agree_work = None    # the pipelined agreement in flight (a torch.distributed work on _agree_t)
_agree_n = 0          # agreements (first calls of a step end) so far
_sync_t = None        # the agent's digest checks


def _agree_tensor(n):
    import torch
    # One tensor for the life of the job: a gloo worker thread then never drops the last
    # reference to a Python-owned tensor (torch 1.13 needs the GIL for that, which deadlocks
    # against the main thread joining that worker at interpreter exit). NCCL reduces device
    # tensors only: without the CPU group init() made for an NCCL job (see _cpu_group_for_nccl),
    # the tensor lives on the current CUDA device.
    dev = "cpu"
    if _agree_group is None and _nccl_only(None) and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return torch.zeros(n, dtype=torch.int64, device=dev)


def _agree(local, _ctx):
    """The agent's agreement: allreduce-MIN of `local` over every rank of the job's process group
    (what agents/train does with MPI_Allreduce(MPI_MIN) on MPI_COMM_WORLD). Called by every rank
    inside every ts_step_end, on the thread that ends the step. Any failure agrees on 0, which
    applies nothing new (the agent keeps its previous agreement).

    Pipelined: the first call of a step end (the change numbers) starts its collective and answers
    with the result of the one the previous agreement started, so no rank waits at the step end
    for the slowest one (the job's next collective waits for it anyway; an extra blocking
    collective per step cost ~2 % of a 40 ms step on 2 ranks, docs/BENCHMARKS.md). Every rank gets
    the same answer at the same step: changes apply one agreement later than a blocking
    collective would apply them. The first AGREE_SYNC_FIRST agreements block (they set the group
    up and measure the collective's CPU cost for agree_every="auto"). Further calls in the same
    step end (the agent's digest check after a newly agreed number, AGENT.md "Consensus") block:
    the agent needs their answer at once; all ranks make them at the same step."""
    global _agree_t, _agree_every, _agree_cost, _step_cost, _last_agree
    global _agree_serial, _agree_work, _agree_n, _sync_t
    try:
        first = _agree_serial != _end_serial
        _agree_serial = _end_serial
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            return 0
        if not first:
            t = _sync_t
            if t is None:
                t = _sync_t = _agree_tensor(1)
            t.fill_(int(local))
            dist.all_reduce(t, op=dist.ReduceOp.MIN, group=_agree_group)
            return int(t.item())
        if _agree_every > 1 and _step % _agree_every != 0:
            return 0  # every rank skips the same steps (step numbers are the job's, equal on all ranks)
        t = _agree_t
        if t is None:
            t = _agree_t = _agree_tensor(2 if _auto else 1)
        _agree_n += 1
        t0, c0 = time.perf_counter(), time.process_time()
        if _auto and _last_agree is not None and _step > _last_agree[1]:
            per = (t0 - _last_agree[0]) / (_step - _last_agree[1])
            _step_cost = per if _step_cost is None else 0.8 * _step_cost + 0.2 * per
        if _agree_n <= AGREE_SYNC_FIRST:
            t[0] = int(local)
            if _auto:
                t[1] = -_proposal()
            dist.all_reduce(t, op=dist.ReduceOp.MIN, group=_agree_group)
            got = t.tolist()
            # The cost is the process's CPU time for the collective, not its wall time: the wall
            # time includes waiting for the slowest rank, which the job's next collective would
            # wait for anyway. The first collective also sets the group up: not a sample.
            if _agree_n > 1:
                cost = time.process_time() - c0
                _agree_cost = cost if _agree_cost is None else 0.8 * _agree_cost + 0.2 * cost
        else:
            w, _agree_work = _agree_work, None
            got = None
            if w is not None:
                w.wait()
                got = t.tolist()
            t[0] = int(local)
            if _auto:
                t[1] = -_proposal()
            _agree_work = dist.all_reduce(t, op=dist.ReduceOp.MIN, group=_agree_group, async_op=True)
            if got is None:
                return 0  # the first pipelined agreement: its answer comes with the next one
        _last_agree = (time.perf_counter(), _step)
        if _auto:
            _agree_every = max(1, min(AUTO_MAX_EVERY, -int(got[1])))  # the same on every rank
        return int(got[0])
    except BaseException as e:  # never into the agent (a C caller)
        _agree_work = None
        _warn("step agreement failed: %s" % e)
        return 0


def agree_every():
    """The agreement's current period in steps (changes with agree_every="auto")."""
    return _agree_every


def _nccl_only(group):
    import torch.distributed as dist
    backend = str(dist.get_backend(group)).lower()
    return "nccl" in backend and "gloo" not in backend


def _cpu_group_for_nccl():
    """A job on NCCL alone (init_process_group("nccl")) gets a gloo group of the same ranks for
    the agreement: its one int64 allreduce per step then stays on the CPU. On NCCL it would be a
    kernel plus a device-to-host copy that waits for all work queued so far, which stops the CPU
    from running ahead of the GPU (measured on an H100, docs/GPU.md). Called from init() on every
    rank (new_group is collective). None when not applicable or when gloo is unavailable."""
    try:
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()) or not _nccl_only(None):
            return None
        if not dist.is_gloo_available():
            return None
        return dist.new_group(backend="gloo")
    except Exception as e:  # the agreement then runs on NCCL with a device tensor
        _warn("no gloo group for the step agreement (%s); it runs on NCCL" % e)
        return None


def set_agree_group(group):
    """Process group the agreement runs on (default: torch.distributed's default group). Must
    contain every rank of the job."""
    global _agree_group
    _agree_group = group


# ---- life cycle -----------------------------------------------------------------------------

def init(job_id=None, rank=None, world_size=None, local_rank=None, group=None, agree_every="auto"):
    """Starts the agent in this process (a no-op returning 1 when `trainscope-cli launch` already
    started it at load time) and registers the step agreement over torch.distributed. Rank and
    world size: the arguments, else torch.distributed's when it is initialized, else the
    environment (RANK/WORLD_SIZE, OMPI_*, SLURM_*). Returns the agent's code: 0 started,
    1 already running, 2 disabled, < 0 failed (the job runs on either way).

    agree_every=K runs the agreement's collective only at the end of steps whose number is a
    multiple of K (the agent then applies changes at the step after the next such step): one small
    allreduce per K steps instead of per step. "auto" (the default) starts at 1 and lets the ranks
    agree on the smallest power of two K <= 64 that keeps the agreement under 0.5 % of the step
    time, from their measurements, as long as K steps take at most 0.1 s (docs/PYTHON.md)."""
    global _agree_cb, _warned, _agree_every, _auto, _agree_t, _agree_work, _agree_n
    if agree_every == "auto":
        _auto, _agree_every = True, 1
    else:
        _auto, _agree_every = False, max(1, int(agree_every))
    _agree_t = None  # its length depends on the mode
    _agree_work, _agree_n = None, 0
    if group is not None:
        set_agree_group(group)
    elif _agree_group is None and _lib is not None:
        set_agree_group(_cpu_group_for_nccl())
    if _lib is None:
        if not _warned:
            _warn(_lib_why + "; tracing and knobs are off")
            _warned = True
        return _L.TS_ERR_INTERNAL
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            if rank is None:
                rank = dist.get_rank()
            if world_size is None:
                world_size = dist.get_world_size()
    except ImportError:
        pass
    if _agree_cb is None:
        _agree_cb = _L.AGREE_FN(_agree)
        _lib.ts_set_agree_fn(_agree_cb, None)
    p = _L.InitParams(ctypes.sizeof(_L.InitParams), job_id.encode() if job_id else None,
                      -1 if rank is None else int(rank), 0 if world_size is None else int(world_size),
                      -1 if local_rank is None else int(local_rank), None)
    rc = int(_lib.ts_init(ctypes.byref(p)))
    if rc < 0:
        _warn("agent start returned %d (training goes on)" % rc)
    return rc


def shutdown():
    if _lib is not None:
        _lib.ts_shutdown()


def is_active():
    return bool(_lib is not None and _lib.ts_is_active())


def dropped_events():
    return int(_lib.ts_dropped_events()) if _lib is not None else 0


# ---- steps ----------------------------------------------------------------------------------

def step_begin(i):
    """Opens step i; knob changes agreed at the previous step's end are applied here (on-change
    callbacks run on this thread)."""
    global _step
    _step = int(i)
    if _lib is not None:
        _lib.ts_step_begin(_step)


# Called with the step number at every step end, before the agent's (e.g. the DDP hook's
# measured bytes of the step). Each must not raise.
_step_end_hooks = []


def step_end(i):
    """Closes step i; every rank takes part in the knob agreement here (call it on all ranks)."""
    global _end_serial
    if _lib is not None:
        for h in _step_end_hooks:
            h(int(i))
        _end_serial += 1
        _lib.ts_step_end(int(i))


class step(object):
    """`with trainscope.step(i):` -- step i's window (begin at entry, end at exit)."""
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = int(i)

    def __enter__(self):
        global _step
        _step = self.i
        if _lib is not None:
            _lib.ts_step_begin(self.i)
        return self

    def __exit__(self, *exc):
        global _end_serial
        if _lib is not None:
            for h in _step_end_hooks:
                h(self.i)
            _end_serial += 1
            _lib.ts_step_end(self.i)
        return False


def hook_optimizer(optimizer, first_step=0):
    """Step markers from the optimizer: step `first_step` opens now, and every
    `optimizer.step()` closes the current step and opens the next one (so a step runs from one
    optimizer update to the next, data loading included). Returns a function that removes the
    hook (closing the open step)."""
    state = {"i": int(first_step), "open": True}
    orig = optimizer.step
    step_begin(state["i"])

    def stepped(*args, **kwargs):
        out = orig(*args, **kwargs)
        if state["open"]:
            step_end(state["i"])
            state["i"] += 1
            step_begin(state["i"])
        return out

    optimizer.step = stepped

    def remove():
        if state["open"]:
            state["open"] = False
            step_end(state["i"])
            optimizer.step = orig

    return remove


# ---- ranges, markers, counters --------------------------------------------------------------

class range(object):  # noqa: A001 (mirrors the C API's ts_range)
    """`with trainscope.range("name"):` -- a nested range on this thread."""
    __slots__ = ("id",)

    def __init__(self, name):
        self.id = _name(name)

    def __enter__(self):
        if _lib is not None:
            _lib.ts_range_push(self.id)
        return self

    def __exit__(self, *exc):
        if _lib is not None:
            _lib.ts_range_pop()
        return False


def range_push(name):
    if _lib is not None:
        _lib.ts_range_push(_name(name))


def range_pop():
    if _lib is not None:
        _lib.ts_range_pop()


def marker(name):
    if _lib is not None:
        _lib.ts_marker(_name(name))


def counter(name, value):
    """An instant value (loss, accuracy, ...) on the counter track of that name."""
    if _lib is not None:
        _lib.ts_counter(_name(name), float(value))


_PHASES = {"forward": 0, "backward": 1, "optimizer": 2}


class phase(object):
    """`with trainscope.phase("forward"|"backward"|"optimizer"):`"""
    __slots__ = ("p",)

    def __init__(self, name):
        self.p = _PHASES[name]

    def __enter__(self):
        if _lib is not None:
            _lib.ts_phase_begin(self.p)
        return self

    def __exit__(self, *exc):
        if _lib is not None:
            _lib.ts_phase_end(self.p)
        return False


_MB_OPS = {"F": 0, "B": 1, "W": 2}


class microbatch(object):
    """`with trainscope.microbatch("F"|"B"|"W", mb, stage, chunk=0):` -- a pipeline operation."""
    __slots__ = ("args",)

    def __init__(self, op, mb, stage, chunk=0):
        self.args = (_MB_OPS[op], int(mb), int(stage), int(chunk))

    def __enter__(self):
        if _lib is not None:
            _lib.ts_mb_begin(*self.args)
        return self

    def __exit__(self, *exc):
        if _lib is not None:
            _lib.ts_mb_end()
        return False


_COMM_KINDS = {"collective": 0, "send": 1, "recv": 2}


class comm(object):
    """`with trainscope.comm("collective"|"send"|"recv", name, nbytes, peer=-1, algorithm=None):`"""
    __slots__ = ("args",)

    def __init__(self, kind, name, nbytes, peer=-1, algorithm=None):
        self.args = (_COMM_KINDS[kind], _name(name), int(nbytes), int(peer), _name(algorithm) if algorithm else 0)

    def __enter__(self):
        if _lib is not None:
            _lib.ts_comm_begin(*self.args)
        return self

    def __exit__(self, *exc):
        if _lib is not None:
            _lib.ts_comm_end()
        return False


# ---- knobs ----------------------------------------------------------------------------------

class Knob(object):
    """A knob the job declared. `value` is one atomic load in the agent (the choice's text for an
    enum). Changes arrive at a step boundary agreed by all ranks (inside step_begin)."""

    def __init__(self, handle, name, kind, default, choices=None):
        self._h = handle
        self.name = name
        self.kind = kind
        self.choices = list(choices) if choices else None
        self._default = default
        self._cbs = []

    @property
    def value(self):
        h = self._h
        if not h:
            return self._default
        k = self.kind
        if k == "int":
            return int(_lib.ts_knob_get_int(h))
        if k == "float":
            return float(_lib.ts_knob_get_float(h))
        if k == "bool":
            return bool(_lib.ts_knob_get_bool(h))
        return self.choices[_lib.ts_knob_get_enum(h)]

    @property
    def index(self):
        """Enum knobs: index of the current choice."""
        return int(_lib.ts_knob_get_enum(self._h)) if self._h else self.choices.index(self._default)

    def on_change(self, fn):
        """fn(knob) runs on the thread of step_begin after an agreed change (or a restore).
        Exceptions are reported on stderr, never raised into the agent."""
        if not self._h:
            return fn

        def tramp(_k, _ctx, fn=fn):
            try:
                fn(self)
            except BaseException as e:
                _warn("knob %s: on-change callback failed: %s" % (self.name, e))

        cb = _L.KNOB_CB(tramp)
        self._cbs.append(cb)
        _keep.append(cb)
        _lib.ts_knob_on_change(self._h, cb, None)
        return fn

    def restore(self, value):
        """The job sets its own knob (back to a value it can run); call on every rank alike at the
        step boundary. True on success."""
        if not self._h:
            self._default = value
            return True
        return _lib.ts_knob_restore(self._h, str(value).encode()) == 0

    def __repr__(self):
        return "Knob(%s=%r)" % (self.name, self.value)


def _flags(changes_math):
    return _L.TS_KNOB_CHANGES_MATH if changes_math else 0


def _desc(d):
    return d.encode() if d else None


# What the agent accepts (agent.h, ts_knob_*): a knob list must fit the frames clients accept.
MAX_KNOB_NAME = 128
MAX_KNOB_DESCRIPTION = 4096
MAX_KNOB_CHOICES = 64
MAX_KNOB_CHOICE = 128


def _check_knob(name, desc, lo=None, hi=None, default=None):
    """Raises on a declaration the agent would refuse (issue 40: these were silently ignored)."""
    if not isinstance(name, str) or not name:
        raise ValueError("a knob needs a non-empty name")
    if len(name.encode()) > MAX_KNOB_NAME:
        raise ValueError("knob name %r...: over %d bytes" % (name[:32], MAX_KNOB_NAME))
    if desc and len(desc.encode()) > MAX_KNOB_DESCRIPTION:
        raise ValueError("knob %s: description over %d bytes" % (name, MAX_KNOB_DESCRIPTION))
    if lo is not None:
        if not lo <= hi:
            raise ValueError("knob %s: min %r > max %r" % (name, lo, hi))
        if not lo <= default <= hi:
            raise ValueError("knob %s: default %r outside [%r, %r]" % (name, default, lo, hi))


def _declared(h, name):
    """The agent's handle, or the agent's reason as an exception (a type clash is a TypeError)."""
    if h:
        return h
    why = ""
    if hasattr(_lib, "ts_knob_error"):
        why = (_lib.ts_knob_error() or b"").decode(errors="replace")
    if "another type" in why:
        raise TypeError(why)
    raise ValueError(why or ("knob %s: refused by the agent" % name))


def knob_int(name, min, max, default, desc="", changes_math=False):  # noqa: A002
    _check_knob(name, desc, int(min), int(max), int(default))
    h = _declared(_lib.ts_knob_int(name.encode(), int(min), int(max), int(default), _desc(desc),
                                   _flags(changes_math)), name) if _lib is not None else None
    return Knob(h, name, "int", int(default))


def knob_float(name, min, max, default, desc="", changes_math=False):  # noqa: A002
    _check_knob(name, desc, float(min), float(max), float(default))
    h = _declared(_lib.ts_knob_float(name.encode(), float(min), float(max), float(default), _desc(desc),
                                     _flags(changes_math)), name) if _lib is not None else None
    return Knob(h, name, "float", float(default))


def knob_bool(name, default, desc="", changes_math=False):
    _check_knob(name, desc)
    h = _declared(_lib.ts_knob_bool(name.encode(), 1 if default else 0, _desc(desc), _flags(changes_math)),
                  name) if _lib is not None else None
    return Knob(h, name, "bool", bool(default))


def knob_enum(name, choices, default, desc="", changes_math=False):
    """default: one of choices (text) or its index."""
    choices = list(choices)
    _check_knob(name, desc)
    if not choices or len(choices) > MAX_KNOB_CHOICES:
        raise ValueError("knob %s: 1 to %d choices, not %d" % (name, MAX_KNOB_CHOICES, len(choices)))
    if any(len(str(c).encode()) > MAX_KNOB_CHOICE for c in choices):
        raise ValueError("knob %s: a choice over %d bytes" % (name, MAX_KNOB_CHOICE))
    if isinstance(default, str):
        if default not in choices:
            raise ValueError("knob %s: default %r is not one of %r" % (name, default, choices))
        idx = choices.index(default)
    else:
        idx = int(default)
        if not 0 <= idx < len(choices):
            raise ValueError("knob %s: default index %d outside the %d choices" % (name, idx, len(choices)))
    h = None
    if _lib is not None:
        arr = (ctypes.c_char_p * len(choices))(*[c.encode() for c in choices])
        h = _declared(_lib.ts_knob_enum(name.encode(), arr, len(choices), idx, _desc(desc), _flags(changes_math)),
                      name)
    return Knob(h, name, "enum", choices[idx], choices)


# ---- DDP (imports torch only when used) --------------------------------------------------------

def attach_ddp(model, compression="none", topk_ratio=0.01, verbose=True, hook="always", measure_wire=True):
    """Registers the Trainscope communication hook on a DistributedDataParallel model and declares
    dp.compression / dp.topk_ratio. Returns its DdpState. hook="on-demand" registers the hook only
    from the first agreed compression other than none; measure_wire records the kernel's TCP byte
    counts per step. See trainscope.ddp."""
    from . import ddp
    return ddp.attach_ddp(model, compression, topk_ratio, verbose, hook, measure_wire)


def ddp_hook(state, bucket):
    """model.register_comm_hook(trainscope.DdpState(model.process_group), trainscope.ddp_hook)"""
    from . import ddp
    return ddp.ddp_hook(state, bucket)


# ---- torch.distributed.pipelining (PyTorch >= 2.4; imports torch only when used) ---------------

def attach_pipeline(stages, loss_fn, schedule="1f1b", microbatches=4, batch_size=None, restage=None,
                    virtual_stages=2, verbose=True, schedule_kwargs=None):
    """Instruments the rank's PipelineStage(s) (F/B/W per micro-batch, sends, receives), declares
    pp.schedule and pp.microbatches and builds the schedule; returns a trainscope.pipe.Pipeline
    whose step() replaces schedule.step(). See trainscope.pipe."""
    from . import pipe
    return pipe.attach_pipeline(stages, loss_fn, schedule, microbatches, batch_size, restage, virtual_stages,
                                verbose, schedule_kwargs)


def __getattr__(name):
    if name == "DdpState":
        from . import ddp
        return ddp.DdpState
    raise AttributeError(name)
