#!/usr/bin/env bash
# Final check of the test suite (ctest fixture cleanup "test_processes", see tests/CMakeLists.txt):
# every process a test started carries TRAINSCOPE_TEST_SUITE=<build dir> in its environment
# (ctest sets it for each tst_*). When any is still running after the tests, a test left a job
# behind: name each (pid, command line), end it (SIGCONT, SIGTERM, then SIGKILL) and fail.
# Processes of other build directories, a soak run or a job started by hand are not marked.
set -u
want="TRAINSCOPE_TEST_SUITE=${1:?usage: check_leftovers.sh BUILD_DIR}"
find_marked() {
  local d pid
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] && continue
    { tr '\0' '\n' < "$d/environ"; } 2>/dev/null | grep -qxF "$want" && echo "$pid"
  done
}
left=$(find_marked)
[ -z "$left" ] && { echo "no process started by the tests is left"; exit 0; }
echo "processes started by the tests are still running:"
for p in $left; do
  printf '  %s: %s\n' "$p" "$({ tr '\0' ' ' < /proc/$p/cmdline; } 2>/dev/null | cut -c1-200)"
  kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null
done
sleep 3
for p in $(find_marked); do kill -KILL "$p" 2>/dev/null; done
exit 1
