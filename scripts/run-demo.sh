#!/usr/bin/env bash
# `make run`: until the live demo job exists (agent and trainer issues), this writes a synthetic
# 4-rank session, prints its summary and opens it in the GUI.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
SESSION="$BUILD/demo.tsdb"

"$BIN/trainscope-cli" synth --ranks 4 --steps 20 --out "$SESSION"
"$BIN/trainscope-cli" info "$SESSION" | head -20
if [[ -n "${DISPLAY:-}" || -n "${WAYLAND_DISPLAY:-}" ]]; then
  exec "$BIN/trainscope" "$SESSION"
else
  echo
  echo "No display found (DISPLAY is not set), so the GUI was not started. With a display run:"
  echo "  $BIN/trainscope $SESSION"
  echo "or, headless:  xvfb-run -a $BIN/trainscope $SESSION --screenshot shot.png"
fi
