#!/bin/bash
# The GPU checks of docs/GPU.md and issue 16, in one command for a lent GPU machine (one call of
# the device tool: the machine starts bare and keeps nothing). Binaries come built on the
# development machine (glibc 2.36, x86-64) in .gpu/ (see docs/GPU.md "How the checks ran"):
#   .gpu/bin/trainscope-cli  .gpu/lib/libtrainscope_agent.so  .gpu/deps (sqlite, zstd)
#   .gpu/cuda (CUPTI and cudart of our toolkit: used only when the machine has none)
# Everything it prints also goes to $OUT/log.txt; recordings' summaries to $OUT.
#   bash bench/gpu/gpu_checks.sh [parts...]   parts: env ddp nccl flows ddpoverhead overhead
#   (default: env ddp nccl overhead; ddpoverhead: DDP_MODES="base hook hook8 launch nodriver nocupti kineto")
set -u
ROOT=$PWD
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/tsgpu.XXXX)
exec > >(tee -a "$OUT/log.txt") 2>&1
PARTS=${*:-env ddp nccl overhead}
B=$ROOT/.gpu
CLI=$B/bin/trainscope-cli
PY=${PYTHON:-python3}
has() { [[ " $PARTS " == *" $1 "* ]]; }
say() { printf '\n######## %s  (%s)\n' "$*" "$(date +%T)"; }

# Libraries: the ones PyTorch uses (its nvidia wheels), so that the agent's CUPTI is the job's.
NVLIB=$($PY - <<'EOF'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
dirs = []
for r in roots:
    for lib in ("libcupti.so*", "libcudart.so*", "libnccl.so*"):
        for f in glob.glob(os.path.join(r, "**", lib), recursive=True):
            d = os.path.dirname(f)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
EOF
)
export LD_LIBRARY_PATH="$NVLIB:$B/deps:${LD_LIBRARY_PATH:-}"
CUPTI=$(for d in ${NVLIB//:/ }; do ls "$d"/libcupti.so.* 2>/dev/null; done | head -1)
[ -n "$CUPTI" ] || { CUPTI=$B/cuda/libcupti.so.13; export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$B/cuda"; }
export NVTX_INJECTION64_PATH=$CUPTI   # launch names CUPTI only where the build machine had it
export PYTHONPATH=$ROOT/python TRAINSCOPE_AGENT_LIB=$B/lib/libtrainscope_agent.so PYTHONUNBUFFERED=1

stop_job() {  # stops a launch (it forwards SIGTERM to the job) and waits for it
  local pid=$1
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
}
wait_job() {  # waits until `knobs` shows the job past step 20 (knobs registered, steps running)
  for _ in $(seq 240); do
    if timeout 10 "$CLI" knobs --job "$1" 2>/dev/null | grep -qE "step ([2-9][0-9]|[0-9]{3,})"; then return 0; fi
    sleep 0.5
  done
  echo "job $1 never reached step 20"; return 1
}

if has env; then
  say "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nproc; grep -m1 "model name" /proc/cpuinfo; cat /etc/os-release | head -2; ldd --version | head -1
  $PY -c "import torch, torch.distributed as d; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0))"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; echo "CUPTI=$CUPTI"
  ldd "$CLI" | grep -E "not found|sqlite|zstd|cupti|cudart"
  ldd "$B/lib/libtrainscope_agent.so" | grep -E "not found|cupti|cudart"
  which mpirun nsys 2>&1; ls /usr/lib/x86_64-linux-gnu | grep -iE "libmpi|libnccl" | head
  timeout 60 "$CLI" env
fi

if has ddp; then
  say "issue 16: torch DDP on the GPU, the hook, under launch (CUPTI + NCCL plugins), world size 1"
  DDP="-m trainscope.demo_ddp --device ${DDP_DEVICE:-cuda} --width 4096 --inputs 1024 --batch 512 --bucket-cap-mb 25 --log-every 200"
  "$CLI" launch --job-id ddpgpu -- $PY $DDP --steps 1000000 > "$W/ddp_job.txt" 2>&1 &
  L=$!
  if wait_job ddpgpu; then
    timeout 20 "$CLI" jobs
    timeout 20 "$CLI" knobs --job ddpgpu
    timeout 60 "$CLI" record --job ddpgpu --seconds 8 --out "$W/ddp.tsdb" > "$W/rec.txt" 2>&1 &
    R=$!
    sleep 3
    timeout 30 "$CLI" set --job ddpgpu dp.compression=fp16
    timeout 30 "$CLI" set --job ddpgpu dp.compression=zstd; echo "refused value: exit $?"
    wait $R; cat "$W/rec.txt"
    timeout 60 "$CLI" info "$W/ddp.tsdb"
    timeout 120 "$CLI" analyze "$W/ddp.tsdb" --json > "$OUT/ddp_analyze.json"; echo "analyze exit $?"
    head -c 3000 "$OUT/ddp_analyze.json"; echo
    timeout 120 $PY "$ROOT/bench/gpu/inspect_tsdb.py" "$W/ddp.tsdb" --knob dp.compression
    # Every compression on the GPU, live, one after the other (loss must stay finite).
    for c in bf16 int8 topk-ef none; do
      timeout 30 "$CLI" set --job ddpgpu dp.compression=$c; sleep 2
    done
    timeout 60 "$CLI" record --job ddpgpu --seconds 3 --out "$W/ddp2.tsdb" > /dev/null 2>&1
    timeout 120 $PY "$ROOT/bench/gpu/inspect_tsdb.py" "$W/ddp2.tsdb" | grep -E "==|bucket allreduce|loss|FAIL"
  fi
  stop_job $L
  grep -vE "^rank 0 step [0-9]*[1-9]00 " "$W/ddp_job.txt" | tail -40
  ls -la "$W"/*.tsdb
  gzip -c "$W/ddp.tsdb" > "$OUT/ddp.tsdb.gz"
fi

if has nccl; then
  say "GPU.md 2-4: torch_nccl_allreduce under launch; NCCL plugins and tuner knobs"
  EX="$ROOT/resources/examples/torch_nccl_allreduce.py"
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING timeout 120 "$CLI" launch --job-id ncclinfo -- $PY "$EX" --steps 30 --mib 16 > "$W/nccl_info.txt" 2>&1
  echo "exit $?"; grep -iE "trainscope|plugin|profiler|tuner" "$W/nccl_info.txt" | head -30
  "$CLI" launch --job-id gpu1 -- $PY "$EX" --steps 200000 --mib 64 > "$W/gpu1.txt" 2>&1 &
  L=$!
  if wait_job gpu1; then
    timeout 20 "$CLI" knobs --job gpu1
    timeout 60 "$CLI" record --job gpu1 --seconds 4 --out "$W/gpu1.tsdb"
    timeout 120 $PY "$ROOT/bench/gpu/inspect_tsdb.py" "$W/gpu1.tsdb"
    timeout 30 "$CLI" set --job gpu1 nccl.algorithm=ring nccl.protocol=simple nccl.channels=4
    timeout 30 "$CLI" set --job gpu1 nccl.profile_mask=95
    sleep 1
    timeout 60 "$CLI" record --job gpu1 --seconds 3 --out "$W/gpu1b.tsdb"
    timeout 120 $PY "$ROOT/bench/gpu/inspect_tsdb.py" "$W/gpu1b.tsdb" | sed -n '/NCCL collectives/,/flows/p;/events (kind/,/top kernels/p'
    timeout 60 "$CLI" export "$W/gpu1.tsdb" --format chrome --out "$W/gpu1.json" && ls -la "$W/gpu1.json"
  fi
  stop_job $L
  tail -5 "$W/gpu1.txt"
fi

if has flows; then
  say "launch -> kernel flows in a PyTorch job (cuBLAS launches through the driver API)"
  EX="$ROOT/resources/examples/torch_nccl_allreduce.py"
  "$CLI" launch --job-id flows -- $PY "$EX" --steps 200000 --mib 16 > "$W/flows.txt" 2>&1 &
  L=$!
  if wait_job flows; then
    timeout 60 "$CLI" record --job flows --seconds 2 --out "$W/flows.tsdb"
    timeout 120 $PY "$ROOT/bench/gpu/inspect_tsdb.py" "$W/flows.tsdb" | sed -n '/events (kind/,/memcpy/p;/flows/,/ranks/p'
    $PY - "$W/flows.tsdb" <<'EOF2'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute("select name, count(*) from event_view where kind = 'range' group by name order by 2 desc limit 8").fetchall())
EOF2
  fi
  stop_job $L
fi

if has ddpoverhead; then
  say "overhead: torch DDP demo on the GPU (alternating, 3 runs each)"
  DDP="-m trainscope.demo_ddp --device ${DDP_DEVICE:-cuda} --width 4096 --inputs 1024 --batch 512 --bucket-cap-mb 25 --log-every 0 --eval-every 0 --steps 600"
  E="RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1"
  for i in 1 2 3; do
    for mode in ${DDP_MODES:-base hook hook8 launch}; do
      f=$W/t_${mode}_${i}.txt
      case $mode in
        base) env $E MASTER_PORT=29611 timeout 300 $PY $DDP --no-trainscope --time-out "$f" > /dev/null 2>&1 ;;
        hook) env $E MASTER_PORT=29612 timeout 300 $PY $DDP --time-out "$f" > /dev/null 2>&1 ;;
        hook8) env $E MASTER_PORT=29613 timeout 300 $PY $DDP --agree-every 8 --time-out "$f" > /dev/null 2>&1 ;;
        launch) timeout 300 "$CLI" launch -- $PY $DDP --time-out "$f" > /dev/null 2>&1 ;;
        nodriver) TRAINSCOPE_CUPTI_DRIVER=0 timeout 300 "$CLI" launch -- $PY $DDP --time-out "$f" > /dev/null 2>&1 ;;
        nocupti) TRAINSCOPE_CUPTI=0 timeout 300 "$CLI" launch -- $PY $DDP --time-out "$f" > /dev/null 2>&1 ;;
        kineto) env $E MASTER_PORT=29614 timeout 300 $PY $DDP --no-trainscope --torch-profiler --time-out "$f" > /dev/null 2>&1 ;;
      esac
      $PY - "$f" "$mode" "$i" <<'EOF2'
import statistics, sys
t = [float(l.split()[0]) for l in open(sys.argv[1])][100:]
print("ddp-gpu run %s %-6s median %.3f ms/step  (p10 %.3f p90 %.3f, %d steps)" % (
    sys.argv[3], sys.argv[2], statistics.median(t), sorted(t)[len(t) // 10], sorted(t)[len(t) * 9 // 10], len(t)))
EOF2
    done
  done
fi

if has overhead; then
  say "overhead: ms/step with and without the agent (alternating, 3 runs each)"
  EX="$ROOT/resources/examples/torch_nccl_allreduce.py"
  for i in 1 2 3; do
    for mode in none launch nocupti; do
      case $mode in
        none) r=$(timeout 120 $PY "$EX" --steps 1000 --mib 64 2>&1 | grep -i "ms/step" | tail -1) ;;
        launch) r=$(timeout 120 "$CLI" launch -- $PY "$EX" --steps 1000 --mib 64 2>&1 | grep -i "ms/step" | tail -1) ;;
        nocupti) r=$(TRAINSCOPE_CUPTI=0 timeout 120 "$CLI" launch -- $PY "$EX" --steps 1000 --mib 64 2>&1 | grep -i "ms/step" | tail -1) ;;
      esac
      echo "allreduce-example run $i $mode: $r"
    done
  done
fi
say "done"
rm -rf "$W"
