#!/bin/sh
# Measured pipeline bubble fraction per schedule against the schedule's formula (BENCHMARKS.md):
# a 4-stage pipeline of equal stages (8 equal 512x512 layers of the MLP: 2 per stage; interleaved:
# 1 per chunk), started with `demo --mode pp`, recorded for a few seconds, `analyze --json`.
# Usage: [RANKS=4] [BATCH=128] bench/pp_bubble.sh [BUILD_DIR]
# Prints: schedule, measured, simulated (the schedule with the measured op times, no
# communication: imbalance included), theory (the formula).
set -eu
B=${1:-build}/bin
export TRAINSCOPE_RUNTIME_DIR=$(mktemp -d)
OUT=$(mktemp -d)
for args in "gpipe" "1f1b" "interleaved-1f1b --virtual-stages 2" "zb-h1" "seq1f1b --segments 2"; do
  sched=${args%% *}
  log=$("$B/trainscope-cli" demo --ranks "${RANKS:-4}" --mode pp --steps 100000 -- --layers 7 --input-dim 512 --width 512 \
        --classes 512 --batch "${BATCH:-128}" --microbatches 8 --eval-every 0 --schedule $args 2>&1)
  job=$(echo "$log" | sed -n 's/^job \(\S*\)$/\1/p')
  pid=$(echo "$log" | sed -n 's/.*launcher pid \([0-9]*\).*/\1/p')
  sleep 2
  "$B/trainscope-cli" record --job "$job" --seconds 4 --out "$OUT/$sched.tsdb" >/dev/null
  kill "$pid"
  sleep 1
  "$B/trainscope-cli" analyze "$OUT/$sched.tsdb" --json | python3 -c "
import json,sys; p=json.load(sys.stdin)['pipeline']
r=lambda k: round(p[k],3) if p.get(k) is not None else None
print('$sched', 'measured', r('bubble_fraction'), 'simulated', r('bubble_fraction_simulated'), 'theory', r('bubble_fraction_theory'))"
done
