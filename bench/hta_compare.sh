#!/usr/bin/env bash
# HTA 0.5 vs trainscope on directories of per-rank traces: the five hta numbers per rank from both,
# and the time and peak memory each took (docs/ANALYSIS.md, "HTA"). Usage:
#   bench/hta_compare.sh HTA_PYTHON BUILD DIR...
# HTA_PYTHON: a python with holistictraceanalysis==0.5.0 (make hta-venv: build/hta-venv/bin/python).
set -euo pipefail
py=$1; build=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "| traces | rank | tool | comp_comm_overlap_pctg | idle_time_us | compute_time_us | non_compute_time_us | kernel_time_us | time s (wall / CPU) | peak RSS MB |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for dir in "$@"; do
  name=$(basename "$dir")
  /usr/bin/time -f "%e %U %S %M" -o "$tmp/hta.time" "$py" "$here/hta_reference.py" "$dir" > "$tmp/hta.json" 2>/dev/null
  /usr/bin/time -f "%e %U %S %M" -o "$tmp/imp.time" "$build/bin/trainscope-cli" import "$dir" --out "$tmp/s.tsdb" > /dev/null
  /usr/bin/time -f "%e %U %S %M" -o "$tmp/an.time" "$build/bin/trainscope-cli" analyze "$tmp/s.tsdb" --json > "$tmp/ours.json"
  python3 - "$tmp" "$name" <<'PY'
import json, sys
tmp, name = sys.argv[1], sys.argv[2]
def t(f):
    w, u, s, m = open(f"{tmp}/{f}").read().split()[-4:]
    return float(w), float(u) + float(s), int(m) / 1024
hta = json.load(open(f"{tmp}/hta.json"))
ours = {r["rank"]: r for r in json.load(open(f"{tmp}/ours.json"))["hta"]["per_rank"]}
hw, hc, hm = t("hta.time"); hm = max(hm, hta["peak_rss_mb"])
iw, ic, im = t("imp.time"); aw, ac, am = t("an.time")
keys = ["comp_comm_overlap_pctg", "idle_time_us", "compute_time_us", "non_compute_time_us", "kernel_time_us"]
fmt = lambda v: "–" if v is None else (f"{v:.2f}" if isinstance(v, float) and v != int(v) else f"{int(v)}")
for i, (r, h) in enumerate(sorted(hta["per_rank"].items(), key=lambda x: int(x[0]))):
    o = ours[int(r)]
    same = all((h.get(k) is None and o[k] is None) or (h.get(k) is not None and o[k] is not None and abs(h[k] - o[k]) < 1e-9) for k in keys)
    tm_h = f"{hw:.1f} / {hc:.1f}" if i == 0 else ""
    tm_o = f"{iw + aw:.1f} / {ic + ac:.1f}" if i == 0 else ""
    print(f"| {name if i == 0 else ''} | {r} | HTA 0.5.0 | " + " | ".join(fmt(h.get(k)) for k in keys) + f" | {tm_h} | {hm:.0f} |" if i == 0 else
          f"| | {r} | HTA 0.5.0 | " + " | ".join(fmt(h.get(k)) for k in keys) + " | | |")
    print(f"| | {r} | trainscope{' (equal)' if same else ' (DIFFERENT)'} | " + " | ".join(fmt(o[k]) for k in keys) +
          (f" | {tm_o} | {max(im, am):.0f} |" if i == 0 else " | | |"))
PY
done
