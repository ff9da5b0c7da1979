#!/usr/bin/env python3
"""HolisticTraceAnalysis's own numbers for a directory of per-rank traces, as JSON.

Usage: hta_reference.py TRACE_DIR   (run with a Python that has holistictraceanalysis==0.5.0)

Prints {"hta_version", "load_s", "peak_rss_mb", "per_rank": {rank: {comp_comm_overlap_pctg,
idle_time_us, compute_time_us, non_compute_time_us, kernel_time_us}}}: what
TraceAnalysis.get_comm_comp_overlap() and get_temporal_breakdown() return. Used for the HTA
columns of docs/ANALYSIS.md and the expected values in tests/tst_hta.cpp.
"""
import json
import resource
import sys
import time
import warnings

warnings.filterwarnings("ignore")


def main():
    from hta.trace_analysis import TraceAnalysis
    import hta
    t0 = time.perf_counter()
    ta = TraceAnalysis(trace_dir=sys.argv[1])
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    ov = ta.get_comm_comp_overlap(visualize=False)
    tb = ta.get_temporal_breakdown(visualize=False)
    analyse_s = time.perf_counter() - t1
    per = {}
    for _, row in tb.iterrows():
        per[int(row["rank"])] = {
            "idle_time_us": float(row["idle_time(us)"]),
            "compute_time_us": float(row["compute_time(us)"]),
            "non_compute_time_us": float(row["non_compute_time(us)"]),
            "kernel_time_us": float(row["kernel_time(us)"]),
        }
    for _, row in ov.iterrows():
        v = row["comp_comm_overlap_pctg"]
        per.setdefault(int(row["rank"]), {})["comp_comm_overlap_pctg"] = None if v != v else float(v)
    # HTA parses ranks in worker processes: the larger of this process and its children.
    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024.0
    print(json.dumps({"hta_version": getattr(hta, "__version__", "?"), "load_s": load_s,
                      "analyse_s": analyse_s, "peak_rss_mb": rss, "per_rank": per}, indent=1))


if __name__ == "__main__":
    main()
