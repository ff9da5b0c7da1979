#!/usr/bin/env bash
# `make run`: starts a small local MPI job with the agent (trainscope-testjob, 4 ranks), records
# a few seconds of it through the agent protocol into a session, changes a knob live while doing
# so, and opens the session in the GUI. (The reference trainer and live attach in the GUI come
# with later issues; without MPI it falls back to a synthetic session.)
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
SESSION="$BUILD/demo.tsdb"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [[ -x "$BIN/trainscope-testjob" ]] && command -v mpirun >/dev/null; then
  JOB="demo-$$"
  "$BIN/trainscope-cli" launch --ranks 4 --job-id "$JOB" -- "$BIN/trainscope-testjob" --steps 2000 --step-ms 1 \
    > "$BUILD/demo-job.log" 2>&1 &
  LAUNCH=$!
  for _ in $(seq 100); do
    "$BIN/trainscope-cli" jobs | grep -q "job $JOB  ranks 4/4" && break
    sleep 0.1
  done
  "$BIN/trainscope-cli" jobs
  "$BIN/trainscope-cli" record --job "$JOB" --seconds 3 --out "$SESSION" &
  RECORD=$!
  sleep 1.5
  "$BIN/trainscope-cli" set --job "$JOB" test.work_us=500 || true
  wait "$RECORD"
  wait "$LAUNCH" || true
else
  "$BIN/trainscope-cli" synth --ranks 4 --steps 20 --out "$SESSION"
fi
"$BIN/trainscope-cli" info "$SESSION" | head -24
if [[ -n "${DISPLAY:-}" || -n "${WAYLAND_DISPLAY:-}" ]]; then
  exec "$BIN/trainscope" "$SESSION"
else
  echo
  echo "No display found (DISPLAY is not set), so the GUI was not started. With a display run:"
  echo "  $BIN/trainscope $SESSION"
  echo "or, headless:  xvfb-run -a $BIN/trainscope $SESSION --screenshot shot.png"
fi
