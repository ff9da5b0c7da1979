#!/usr/bin/env python3
"""Makes a large Kineto trace for import benchmarks from a real one: its traceEvents repeated K
times, each copy shifted by the trace's span (so the copies follow each other in time, like more
profiled steps). Usage: replicate_trace.py [--unique-ids] IN.json[.gz] K OUT.json[.gz]
--unique-ids: each copy's ids (args "External id", "correlation", "Ev Idx", "Sequence number";
flow "id") are moved past the previous copy's, as in a longer real trace; without it the copies
share them, and tools that join on them (HTA joins kernels to their launches by correlation)
multiply rows."""
import gzip
import json
import sys


def opener(p, mode):
    return gzip.open(p, mode + "t") if p.endswith(".gz") else open(p, mode)


def main():
    argv = sys.argv[1:]
    unique = "--unique-ids" in argv
    if unique:
        argv.remove("--unique-ids")
    src, k, dst = argv[0], int(argv[1]), argv[2]
    with opener(src, "r") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = (max(ts) - min(ts)) + 1000
    id_args = ("External id", "correlation", "Ev Idx", "Sequence number")
    step = {key: 1 + max([e["args"][key] for e in events if isinstance(e.get("args"), dict) and
                          isinstance(e["args"].get(key), int)] or [0]) for key in id_args}
    flow_step = 1 + max([e["id"] for e in events if isinstance(e.get("id"), int)] or [0])
    out = []
    for i in range(k):
        for e in events:
            c = dict(e)
            if unique and i:
                if isinstance(c.get("args"), dict):
                    c["args"] = dict(c["args"])
                    for key in id_args:
                        if isinstance(c["args"].get(key), int) and c["args"][key] >= 0:
                            c["args"][key] += i * step[key]
                if isinstance(c.get("id"), int):
                    c["id"] += i * flow_step
            if isinstance(c.get("ts"), (int, float)) and c.get("ph") != "M":
                c["ts"] = c["ts"] + i * span
            if i and c.get("ph") == "M":
                continue
            out.append(c)
    doc["traceEvents"] = out
    with opener(dst, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
