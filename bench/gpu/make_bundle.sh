#!/bin/bash
# Builds the .gpu/ bundle that bench/gpu/gpu_checks.sh and cpu_whatif.sh expect on a lent GPU
# machine (docs/GPU.md, "How the checks ran"): stripped copies of what build/ holds, plus the
# libraries those machines lack. .gpu/ must be ignored by git (.git/info/exclude) and is passed
# to the device tool as `carry: [".gpu"]` (64 MiB in all with the working tree).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
ninja -C "$B" trainscope-cli trainscope_agent trainscope-train >/dev/null
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib .gpu/deps .gpu/cuda .gpu/mpideps
strip -o .gpu/bin/trainscope-cli "$B/bin/trainscope-cli"
strip -o .gpu/bin/trainscope-train "$B/bin/trainscope-train"
strip -o .gpu/lib/libtrainscope_agent.so "$B/lib/libtrainscope_agent.so"
dep() { ldd "$1" | awk -v l="$2" '$1 == l {print $3}'; }
for l in libsqlite3.so.0 libzstd.so.1; do cp -L "$(dep "$B/bin/trainscope-cli" $l)" .gpu/deps/; done
for l in libcupti.so.13 libcudart.so.13; do cp -L "$(dep "$B/bin/trainscope-cli" $l)" .gpu/cuda/; done
for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  cp -L "$(dep "$B/bin/trainscope-train" $l)" .gpu/mpideps/
done
gzip -f .gpu/mpideps/libopenblas.so.0
grep -qx "/.gpu/" "$(git rev-parse --git-path info/exclude)" 2>/dev/null ||
  echo "/.gpu/" >> "$(git rev-parse --git-path info/exclude)"
du -sh .gpu
