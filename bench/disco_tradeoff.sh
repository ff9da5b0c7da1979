#!/bin/sh
# DISCO's distributed-inference trade-off (BENCHMARKS.md, docs/TRAINER.md "Inference benchmark"):
# for N = 2 and 4 ranks and each WIDTH:BATCH configuration, `trainscope-train --mode disco
# --disco-bench` trains the dense split MLP (4 layers, 3 split), prunes + fine-tunes level by
# level, and writes the table (bytes, latency pipelined / wait per inference of BATCH samples,
# accuracy per sparsity, independent branches last). Then, per N, a live `demo --mode disco`
# job (width 256, batch BATCH_TRAIN) recorded at sparsity 0 and 0.5 gives `analyze`'s per-layer
# measured A and equilibrium sparsity.
# Usage: [RANKS="2 4"] [CONFIGS="256:1 256:256 16:1"] [REPS=7] bench/disco_tradeoff.sh [BUILD_DIR]
set -eu
B=${1:-build}/bin
OUT=${OUT:-$(mktemp -d)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
       OMPI_MCA_oob_tcp_if_include=lo TRAINSCOPE_RUNTIME_DIR=$(mktemp -d)
MODEL="--layers 4 --input-dim 32 --classes 8 --batch ${BATCH_TRAIN:-64}"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in ${RANKS:-2 4}; do
  for c in ${CONFIGS:-256:1 256:256 16:1}; do
    w=${c%%:*} b=${c##*:}
    echo "## N=$n width $w"
    mpirun --oversubscribe -np "$n" "$B/trainscope-train" --no-agent --mode disco $MODEL --width "$w" --steps 400 \
      --finetune-steps 40 --held-out 1024 --bench-batch "$b" --bench-reps "${REPS:-7}" --log-every 0 \
      --eval-every 0 --disco-bench "$OUT/disco_n${n}_w${w}_b$b.csv" | grep -v 'disco bytes'
  done
done
echo "# load after the tables: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in ${RANKS:-2 4}; do
  log=$("$B/trainscope-cli" demo --ranks "$n" --mode disco --steps 100000 -- $MODEL --width 256 --eval-every 0 2>&1)
  job=$(echo "$log" | sed -n 's/^job \(\S*\)$/\1/p')
  pid=$(echo "$log" | sed -n 's/.*launcher pid \([0-9]*\).*/\1/p')
  sleep 2
  "$B/trainscope-cli" record --job "$job" --seconds 6 --out "$OUT/live_n$n.tsdb" >/dev/null &
  rec=$!
  sleep 3
  "$B/trainscope-cli" set --job "$job" disco.sparsity=0.5 >/dev/null
  wait $rec
  kill "$pid"
  sleep 1
  "$B/trainscope-cli" analyze "$OUT/live_n$n.tsdb" --json | python3 -c "
import json,sys
f=lambda x: 'n/a' if x is None else '%.3f' % x
for l in json.load(sys.stdin)['disco']['layers']:
  pts='; '.join('S=%g: comm %s comp %s ms' % (p['sparsity'], f(p['l_comm_ms']), f(p['l_comp_ms'])) for p in l['by_sparsity'])
  print('N=$n layer %d: %s; A=%s S_eql=%s B=%s GB/s' % (l['layer'], pts, f(l['ratio_a']), f(l['equilibrium_sparsity']), f(l['bandwidth_gbps'])))"
done
echo "# tables in $OUT"
