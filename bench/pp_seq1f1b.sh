#!/bin/sh
# Seq1F1B on the transformer (BENCHMARKS.md): one 2-stage pipeline, `demo --mode pp`, 1f1b and
# seq1f1b with k = 2 and 4 sequence segments at the same micro-batching, 2 s warm-up, `record
# --seconds 4`, `analyze --json`. Prints per schedule: step time p50 (ms), measured / simulated /
# theory bubble; then, for k = 4, the median F and B time per (stage, segment) with the
# segment's length, from the trace's Segment / SegmentLength attributes.
# Usage: bench/pp_seq1f1b.sh [BUILD_DIR]
set -eu
B=${1:-build}/bin
export TRAINSCOPE_RUNTIME_DIR=$(mktemp -d)
OUT=$(mktemp -d)
for k in 1 2 4; do
  if [ "$k" = 1 ]; then sched="1f1b"; else sched="seq1f1b --segments $k"; fi
  log=$("$B/trainscope-cli" demo --ranks 2 --mode pp --steps 100000 -- --model transformer --layers 3 --width 64 \
        --heads 4 --seq-len 64 --batch 32 --microbatches 4 --eval-every 0 --schedule $sched 2>&1)
  job=$(echo "$log" | sed -n 's/^job \(\S*\)$/\1/p')
  pid=$(echo "$log" | sed -n 's/.*launcher pid \([0-9]*\).*/\1/p')
  sleep 2
  "$B/trainscope-cli" record --job "$job" --seconds 4 --out "$OUT/k$k.tsdb" >/dev/null
  kill "$pid"
  sleep 1
  "$B/trainscope-cli" analyze "$OUT/k$k.tsdb" --json | python3 -c "
import json, sys
r = json.load(sys.stdin); p = r['pipeline']
print('k=$k', 'step_ms', round(r['steps']['step_time_ms']['p50'], 2), 'bubble', round(p['bubble_fraction'], 3),
      'simulated', round(p['bubble_fraction_simulated'], 3), 'theory', round(p['bubble_fraction_theory'], 3))"
done
"$B/trainscope-cli" export "$OUT/k4.tsdb" --format chrome --out "$OUT/k4.json" >/dev/null
python3 - "$OUT/k4.json" <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
acc = collections.defaultdict(list)
for e in d['traceEvents'] if isinstance(d, dict) else d:
    a = e.get('args', {})
    if e.get('ph') == 'X' and e.get('name') in ('F', 'B') and 'segment' in a:
        acc[(e['name'], a['stage'], a['segment'], a['segment_length'])].append(e['dur'])
for key in sorted(acc):
    v = sorted(acc[key])
    print('%s stage %d segment %d (%d tokens): median %.0f us' % (key + (v[len(v) // 2],)))
PY
