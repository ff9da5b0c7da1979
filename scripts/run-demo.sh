#!/usr/bin/env bash
# `make run`: starts the reference trainer (trainscope-train, 4 MPI ranks with the agent, via
# `trainscope-cli demo --mode dp`) and opens the GUI attached to it live: timeline, Analysis dock
# (step time, breakdown, bucket overlap, recomputed every 2 s) and Knobs dock. A few seconds in,
# dp.compression is set to int8 so that a knob-change marker shows on the timeline. The job is
# stopped when this script exits (the launcher pid `demo` printed). Without the trainer (no MPI
# or OpenBLAS) it falls back to a synthetic session; without a display it records a few seconds
# and says how to open them.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
SESSION="$BUILD/demo.tsdb"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
HAVE_DISPLAY=0
[[ -n "${DISPLAY:-}" || -n "${WAYLAND_DISPLAY:-}" ]] && HAVE_DISPLAY=1

if [[ -x "$BIN/trainscope-train" ]] && command -v mpirun >/dev/null; then
  LAUNCHER=""
  stop() { [[ -n "$LAUNCHER" ]] && kill "$LAUNCHER" 2>/dev/null || true; }
  trap stop EXIT INT TERM
  # Long enough to explore; stopped on exit. demo returns once every rank lists its knobs.
  "$BIN/trainscope-cli" demo --mode dp --ranks 4 --steps 1000000 -- --step-delay-ms 2 \
    > "$BUILD/demo-job.out" 2> "$BUILD/demo-job.err" || { cat "$BUILD/demo-job.err" >&2; exit 1; }
  JOB=$(sed -n 's/^job \(.*\)$/\1/p' "$BUILD/demo-job.out")
  LAUNCHER=$(sed -n 's/.*launcher pid \([0-9]*\).*/\1/p' "$BUILD/demo-job.err")
  cat "$BUILD/demo-job.err"
  # A knob change a few seconds in, so that its marker shows on the timeline.
  (sleep 4; "$BIN/trainscope-cli" set --job "$JOB" dp.compression=int8 || true) &
  if [[ $HAVE_DISPLAY == 1 ]]; then
    "$BIN/trainscope" --attach "$JOB"
    exit 0
  fi
  "$BIN/trainscope-cli" record --job "$JOB" --seconds 6 --force --out "$SESSION"
  wait
else
  "$BIN/trainscope-cli" synth --ranks 4 --steps 20 --force --out "$SESSION"
fi
"$BIN/trainscope-cli" info "$SESSION" | head -24
echo
echo "No display found (DISPLAY is not set), so the GUI was not started. With a display, \`make run\`"
echo "opens it attached to the live job. The session recorded instead opens with:"
echo "  $BIN/trainscope $SESSION"
echo "or, headless:  xvfb-run -a $BIN/trainscope $SESSION --screenshot shot.png"
