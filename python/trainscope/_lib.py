"""Finding and binding libtrainscope_agent.so through ctypes.

Search order: $TRAINSCOPE_AGENT_LIB, the build tree's lib/ directory (the package used from
build/python/ or from the source tree's python/ next to build/), then a library already loaded
into this process (LD_PRELOAD by `trainscope-cli launch`, found in /proc/self/maps). When none is
found the package stays usable: every call becomes a no-op and `trainscope.init()` says why.
"""

import ctypes
import os

LIB_NAME = "libtrainscope_agent.so"

# ts_init return codes (agent.h)
TS_OK = 0
TS_ALREADY_INITIALIZED = 1
TS_DISABLED = 2
TS_ERR_INTERNAL = -1
TS_ERR_LISTEN = -2

TS_KNOB_CHANGES_MATH = 1

AGREE_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
KNOB_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class InitParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("job_id", ctypes.c_char_p),
        ("rank", ctypes.c_int32),
        ("world_size", ctypes.c_int32),
        ("local_rank", ctypes.c_int32),
        ("hostname", ctypes.c_char_p),
    ]


def _candidates():
    env = os.environ.get("TRAINSCOPE_AGENT_LIB")
    if env:
        yield env, "TRAINSCOPE_AGENT_LIB"
    here = os.path.dirname(os.path.abspath(__file__))
    pkg_parent = os.path.dirname(here)  # build/python or <source>/python
    # build/python/trainscope -> build/lib
    yield os.path.join(os.path.dirname(pkg_parent), "lib", LIB_NAME), "build tree"
    # <source>/python/trainscope -> <source>/build/lib
    yield os.path.join(os.path.dirname(pkg_parent), "build", "lib", LIB_NAME), "build tree"
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(" ")[-1]
                if path.endswith("/" + LIB_NAME):
                    yield path, "already loaded"
                    break
    except OSError:
        pass


def _bind(lib):
    c = ctypes
    sig = {
        "ts_agent_abi_version": (c.c_int, []),
        "ts_init": (c.c_int, [c.POINTER(InitParams)]),
        "ts_init_from_env": (c.c_int, []),
        "ts_shutdown": (None, []),
        "ts_is_active": (c.c_int, []),
        "ts_name": (c.c_uint32, [c.c_char_p]),
        "ts_range_push": (None, [c.c_uint32]),
        "ts_range_pop": (None, []),
        "ts_range_begin": (c.c_uint64, [c.c_uint32]),
        "ts_range_end": (None, [c.c_uint64]),
        "ts_marker": (None, [c.c_uint32]),
        "ts_counter": (None, [c.c_uint32, c.c_double]),
        "ts_step_begin": (None, [c.c_int64]),
        "ts_step_end": (None, [c.c_int64]),
        "ts_phase_begin": (None, [c.c_int]),
        "ts_phase_end": (None, [c.c_int]),
        "ts_mb_begin": (None, [c.c_int, c.c_int32, c.c_int32, c.c_int32]),
        "ts_mb_end": (None, []),
        "ts_bucket_ready": (None, [c.c_int32, c.c_uint64]),
        "ts_bucket_comm_begin": (None, [c.c_int32, c.c_uint64]),
        "ts_bucket_comm_begin2": (None, [c.c_int32, c.c_uint64, c.c_uint32]),
        "ts_bucket_comm_end": (None, [c.c_int32]),
        "ts_comm_begin": (None, [c.c_int, c.c_uint32, c.c_uint64, c.c_int32, c.c_uint32]),
        "ts_comm_end": (None, []),
        "ts_dropped_events": (c.c_uint64, []),
        "ts_knob_int": (c.c_void_p, [c.c_char_p, c.c_int64, c.c_int64, c.c_int64, c.c_char_p, c.c_uint]),
        "ts_knob_float": (c.c_void_p, [c.c_char_p, c.c_double, c.c_double, c.c_double, c.c_char_p, c.c_uint]),
        "ts_knob_bool": (c.c_void_p, [c.c_char_p, c.c_int, c.c_char_p, c.c_uint]),
        "ts_knob_enum": (c.c_void_p, [c.c_char_p, c.POINTER(c.c_char_p), c.c_int, c.c_int, c.c_char_p, c.c_uint]),
        "ts_knob_get_int": (c.c_int64, [c.c_void_p]),
        "ts_knob_get_float": (c.c_double, [c.c_void_p]),
        "ts_knob_get_bool": (c.c_int, [c.c_void_p]),
        "ts_knob_get_enum": (c.c_int, [c.c_void_p]),
        "ts_knob_name": (c.c_char_p, [c.c_void_p]),
        "ts_knob_restore": (c.c_int, [c.c_void_p, c.c_char_p]),
        "ts_knob_on_change": (c.c_int, [c.c_void_p, KNOB_CB, c.c_void_p]),
        "ts_set_agree_fn": (None, [AGREE_FN, c.c_void_p]),
        "ts_knob_error": (c.c_char_p, []),
        "ts_names_refused": (c.c_uint64, []),
    }
    optional = ("ts_knob_error", "ts_names_refused")  # newer than some agents this package may load

    def bind(handle, name):
        fn = getattr(handle, name)
        fn.restype, fn.argtypes = sig[name]
        return fn

    for name in sig:
        if name in optional and not hasattr(lib, name):
            continue
        bind(lib, name)
    # The capture calls through a PyDLL handle of the same library: ctypes keeps the GIL across
    # them instead of releasing and taking it again. They only write the calling thread's ring
    # buffer (agent.h: lock-free, never block, never call back), so holding the GIL costs no
    # one anything; releasing it hands it to a waiting thread, e.g. a DDP future callback on
    # gloo's thread or the autograd thread with the next bucket, and the caller then waits for
    # it back (a futex round trip, on shared cores a scheduling delay). Measured: BENCHMARKS.md,
    # "Paired by round, and the GIL across the capture calls". Calls that may block or call
    # back (ts_init, ts_step_end's agreement, knob registration) keep releasing it.
    # TRAINSCOPE_CTYPES_GIL=release binds them as before (the benchmark's side-by-side anchor).
    if os.environ.get("TRAINSCOPE_CTYPES_GIL") == "release":
        return lib
    try:
        fast = ctypes.PyDLL(lib._name, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return lib
    for name in NO_GIL_RELEASE:
        setattr(lib, name, bind(fast, name))
    return lib


# Capture entries (agent.h) that only push a record or read a value.
NO_GIL_RELEASE = (
    "ts_is_active", "ts_range_push", "ts_range_pop", "ts_range_begin", "ts_range_end", "ts_marker",
    "ts_counter", "ts_phase_begin", "ts_phase_end", "ts_mb_begin", "ts_mb_end", "ts_bucket_ready",
    "ts_bucket_comm_begin", "ts_bucket_comm_begin2", "ts_bucket_comm_end", "ts_comm_begin",
    "ts_comm_end", "ts_dropped_events", "ts_knob_get_int", "ts_knob_get_float", "ts_knob_get_bool",
    "ts_knob_get_enum")


def load():
    """(library or None, path, why). Never raises."""
    tried = []
    for path, how in _candidates():
        if not path or not os.path.exists(path):
            tried.append(path)
            continue
        try:
            # RTLD_GLOBAL: the same copy a preload or another loader uses (dlopen of a path already
            # loaded returns that handle).
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return _bind(lib), path, how
        except (OSError, AttributeError) as e:
            tried.append("%s (%s)" % (path, e))
    return None, None, "libtrainscope_agent.so not found (tried: %s); set TRAINSCOPE_AGENT_LIB" % ", ".join(
        t for t in tried if t)
