#!/usr/bin/env bash
# `make run`: starts a local 4-rank MPI demo job with the agent (trainscope-testjob) and opens the
# GUI attached to it live (flight-recorder history first, then events as they happen). Closing
# the GUI detaches; the job is stopped when the GUI exits. Without MPI it falls back to a
# synthetic session; without a display it records a few seconds and says how to open them.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
SESSION="$BUILD/demo.tsdb"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
HAVE_DISPLAY=0
[[ -n "${DISPLAY:-}" || -n "${WAYLAND_DISPLAY:-}" ]] && HAVE_DISPLAY=1

if [[ -x "$BIN/trainscope-testjob" ]] && command -v mpirun >/dev/null; then
  JOB="demo-$$"
  # Long enough to explore; stopped when the GUI exits.
  "$BIN/trainscope-cli" launch --ranks 4 --job-id "$JOB" -- "$BIN/trainscope-testjob" --steps 200000 --step-ms 2 \
    --ranges 4 > "$BUILD/demo-job.log" 2>&1 &
  LAUNCH=$!
  trap 'kill "$LAUNCH" 2>/dev/null || true; wait "$LAUNCH" 2>/dev/null || true' EXIT INT TERM
  for _ in $(seq 100); do
    "$BIN/trainscope-cli" jobs | grep -q "job $JOB  ranks 4/4" && break
    sleep 0.1
  done
  "$BIN/trainscope-cli" jobs
  # A knob change a few seconds in, so that its marker shows on the timeline.
  (sleep 4; "$BIN/trainscope-cli" set --job "$JOB" test.work_us=3000 >/dev/null 2>&1 || true) &
  if [[ $HAVE_DISPLAY == 1 ]]; then
    "$BIN/trainscope" --attach "$JOB"
    exit 0
  fi
  "$BIN/trainscope-cli" record --job "$JOB" --seconds 3 --out "$SESSION"
else
  "$BIN/trainscope-cli" synth --ranks 4 --steps 20 --out "$SESSION"
fi
"$BIN/trainscope-cli" info "$SESSION" | head -24
echo
echo "No display found (DISPLAY is not set), so the GUI was not started. With a display, \`make run\`"
echo "opens it attached to the live job. The session recorded instead opens with:"
echo "  $BIN/trainscope $SESSION"
echo "or, headless:  xvfb-run -a $BIN/trainscope $SESSION --screenshot shot.png"
