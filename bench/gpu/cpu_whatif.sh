#!/bin/bash
# The what-if accuracy grid (bench/tune_bench.py --paired --grid-only) on the GPU machine's 16
# cores: 4 MPI ranks with a core each, which the 2-core development VM cannot give (docs/
# BENCHMARKS.md, "What-if and autotune"). Binaries built on the development VM, carried in .gpu/
# with trainscope-train's BLAS (gzip) and Fortran runtime; MPI is the machine's OpenMPI 4.1.
set -u
ROOT=$PWD
B=$ROOT/.gpu
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/whatif.txt") 2>&1
[ -f "$B/mpideps/libopenblas.so.0" ] || gunzip -kf "$B/mpideps/libopenblas.so.0.gz"
NVLIB=$(python3 -c "
import glob, os, nvidia
print(':'.join(sorted({os.path.dirname(f) for r in nvidia.__path__ for f in glob.glob(os.path.join(r, '**', 'lib*.so*'), recursive=True)})))")
export LD_LIBRARY_PATH="$NVLIB:$B/deps:$B/mpideps:${LD_LIBRARY_PATH:-}"
nproc; uptime; mpirun --version | head -1
ldd "$B/bin/trainscope-train" | grep -E "not found|mpi|blas" 
for run in 1 2; do
  echo "######## run $run $(date +%T)"
  timeout ${RUN_S:-170} python3 "$ROOT/bench/tune_bench.py" --build "$B" --paired --grid-only ${TB_ARGS:-}
  echo "exit $?"; uptime
done
