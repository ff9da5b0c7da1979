#!/usr/bin/env python3
"""Makes a large Kineto trace for import benchmarks from a real one: its traceEvents repeated K
times, each copy shifted by the trace's span (so the copies follow each other in time, like more
profiled steps). Usage: replicate_trace.py IN.json[.gz] K OUT.json[.gz]"""
import gzip
import json
import sys


def opener(p, mode):
    return gzip.open(p, mode + "t") if p.endswith(".gz") else open(p, mode)


def main():
    src, k, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with opener(src, "r") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = (max(ts) - min(ts)) + 1000
    out = []
    for i in range(k):
        for e in events:
            c = dict(e)
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
