#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (built in BUILD_DIR by `make fuzz`), each for
# SECONDS, one after the other, and prints one line per target: executions, corpus size, result.
#   scripts/run-fuzz.sh BUILD_DIR SECONDS TARGET...
# Seeds come from tests/fuzz/corpus/<target> (read only); what the fuzzer finds goes to
# BUILD_DIR/fuzz-corpus/<target>, crashing inputs to BUILD_DIR/fuzz-artifacts/. FUZZ_SEED fixes
# libFuzzer's seed. Exits non-zero
# when any target found a crash, leak, timeout or out-of-memory.
set -uo pipefail
build=$1 seconds=$2
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"
failed=()
summary=()
for t in "$@"; do
  work="$build/fuzz-corpus/$t"
  mkdir -p "$work"
  log="$build/fuzz-logs/$t.log"
  extra=()
  [[ -f "$src/tests/fuzz/$t.dict" ]] && extra+=(-dict="$src/tests/fuzz/$t.dict")
  # FUZZ_SEED (CI: 1) makes a brief run explore the same way each time, so CI fails for a code
  # change, not for the luck of a random seed; the long runs (make fuzz) take a random one.
  [[ -n "${FUZZ_SEED:-}" ]] && extra+=(-seed="$FUZZ_SEED")
  echo "== fuzz_$t: ${seconds} s"
  start=$(date +%s)
  "$build/bin/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/$t-" "${extra[@]}" "$work" "$src/tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  corpus=$(ls "$work" | wc -l)
  if [[ $rc -eq 0 ]]; then
    result=ok
  else
    result="FAILED (rc $rc; $(grep -m1 -E '^==[0-9]+==ERROR|^SUMMARY|deadly signal|Test unit written' "$log" | head -c 160))"
    failed+=("$t")
    tail -40 "$log"
  fi
  summary+=("$(printf 'fuzz_%-14s %6s s %12s execs %6s corpus  %s' "$t" "$secs" "${execs:-?}" "$corpus" "$result")")
done
echo "== fuzzing summary (logs in $build/fuzz-logs)"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "crashing inputs: $build/fuzz-artifacts/ (${failed[*]})"
  exit 1
fi
