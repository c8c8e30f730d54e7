#!/usr/bin/env bash
# tests/test_exercises.sh — the graded exercises grade what they should:
# each starting stub compiles and FAILS its grader, and the reference
# function (cut out of fsdp.c, built through the same #include path a
# student's file takes) PASSES it. `make exercise EX=NAME` is the grader.
cd "$(dirname "$0")/.."
source tests/lib.sh
for ex in ring_all_gather ring_reduce_scatter post_backward adamw auto_wrap; do
  log=$(mktemp)
  if bash exercises/grade.sh "$ex" "exercises/$ex.c" --fail-fast >"$log" 2>&1; then
    bad "$ex: the starting stub passed its grader"
  elif grep -q '^PASS  compiles' "$log" && grep -q '^FAIL ' "$log"; then
    ok "$ex: the stub compiles and fails: $(grep -m1 '^FAIL ' "$log" | cut -c7-110)"
  else
    bad "$ex: the stub did not compile, or failed without a FAIL verdict"; sed 's/^/    /' "$log" | tail -8
  fi
  if bash exercises/grade.sh "$ex" reference >"$log" 2>&1; then
    ok "$ex: the reference passes: $(tail -1 "$log")"
  else
    bad "$ex: the reference failed its grader"; grep -v '^PASS' "$log" | sed 's/^/    /' | tail -8
  fi
  rm -f "$log"
done
exit $fail
