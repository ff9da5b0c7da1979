#!/usr/bin/env python3
"""Issue 40: a knob declaration the agent refuses raises in Python, with the agent's reason; a
name declared again with another type is a TypeError (it read the other's bits: 2.5e-323).
Run by ctest (py_knob_limits) with PYTHONPATH=build/python; no torch needed."""
import sys

import trainscope as ts

assert ts.library_path(), "the agent library was not found"


def raises(exc, fn, has):
    try:
        fn()
    except exc as e:
        assert has in str(e), "%s: %r lacks %r" % (exc.__name__, str(e), has)
        return
    raise AssertionError("no %s (%s)" % (exc.__name__, has))


raises(ValueError, lambda: ts.knob_int("py.range", 5, 1, 3), "min 5 > max 1")
raises(ValueError, lambda: ts.knob_float("py.default", 0.0, 1.0, 2.0), "outside")
raises(ValueError, lambda: ts.knob_int("", 0, 1, 0), "non-empty name")
raises(ValueError, lambda: ts.knob_int("n" * 200, 0, 1, 0), "over 128 bytes")
raises(ValueError, lambda: ts.knob_bool("py.desc", False, desc="d" * (20 << 20)), "description over 4096 bytes")
raises(ValueError, lambda: ts.knob_enum("py.enum", ["a", "b"], "c"), "not one of")
raises(ValueError, lambda: ts.knob_enum("py.many", [str(i) for i in range(65)], 0), "1 to 64 choices")
k = ts.knob_int("py.clash", 0, 10, 5)
raises(TypeError, lambda: ts.knob_float("py.clash", 0.0, 1.0, 0.5), "another type")
assert ts.knob_int("py.clash", 0, 10, 5).value == 5 and k.value == 5
print("knob limits: ok")
sys.exit(0)
