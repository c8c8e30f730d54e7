#!/usr/bin/env bash
# tests/test_exercises.sh — the graded exercises grade what they should:
# each starting stub compiles and FAILS its grader, and the reference
# function (cut out of fsdp.c, built through the same #include path a
# student's file takes) PASSES it. `make exercise EX=NAME` is the grader.
# Then wrong student files (tests/fixtures/exercises/), several of which
# once fooled it, FAIL it, each with the hint that names its mistake.
cd "$(dirname "$0")/.."
source tests/lib.sh
log=$(mktemp) keep=$(mktemp)
trap 'rm -f "$log" "$keep"' EXIT
for ex in ring_all_gather ring_reduce_scatter post_backward adamw auto_wrap; do
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
done

# wrong EX FIXTURE [OPTIONS]: grades tests/fixtures/exercises/FIXTURE.c as
# exercise EX (its verdicts in $log); a pass is a FAIL of this test
wrong() {
  FIXTURE=$2
  if bash exercises/grade.sh "$1" "tests/fixtures/exercises/$2.c" "${@:3}" >"$log" 2>&1; then
    bad "$2 passed its grader: $(tail -1 "$log")"
  fi
}
# failed_with CHECK HINT: the last grading failed the check named CHECK,
# and its verdict says HINT
failed_with() {
  local line
  line=$(grep '^FAIL ' "$log" | grep -F -- "$1" | grep -F -m1 -- "$2")
  if [ -n "$line" ]; then ok "$FIXTURE fails '$1', saying '$2'"
  else bad "$FIXTURE: no FAIL verdict on '$1' that says '$2':"; grep -E '^(FAIL|error)' "$log" | head -6 | sed 's/^/    /'; fi
}

# A run that stops early with exit status 0 (MPI_Abort(comm, 0), or
# MPI_Finalize and exit(0)) is graded on what it wrote: nothing. It must
# not be graded on an older run's result, nor a test program that ran none
# of its checks pass.
wrong ring_all_gather ring_all_gather_abort
failed_with "full_shard on 2 rank(s)" "stopped before its end"
failed_with "bytes your ring sends" "0 check(s) ran"
wrong ring_all_gather ring_all_gather_finalize --fail-fast
failed_with "full_shard on 2 rank(s)" "MPI_Finalize"

# A ring on MPI_COMM_WORLD instead of its own communicator is right on the
# whole world, and hangs in a hybrid strategy's group. (It hangs on
# purpose: a shorter wait than a student's 60 s.)
GRADE_TIMEOUT=15 wrong ring_all_gather ring_all_gather_world --fail-fast
failed_with "hybrid_shard on 4 rank(s)" "not MPI_COMM_WORLD"

# A student's program that copies itself over ./fsdp must not become the
# reference: the grader runs a private copy made before, elsewhere. (If it
# ever did overwrite ./fsdp, the test says so and puts it back.)
cp ./fsdp "$keep"
wrong adamw adamw_overwrite --fail-fast
failed_with "full_shard on 2 rank(s)" "parameters differ"
if cmp -s ./fsdp "$keep"; then ok "adamw_overwrite: ./fsdp is untouched (its copy went to its own directory)"
else bad "adamw_overwrite replaced ./fsdp (put back)"; cp "$keep" ./fsdp; fi

# adamw: the learning rate of the step, and the step count a checkpoint keeps
wrong adamw adamw_cfg_lr --fail-fast
failed_with "--lr-schedule cosine" "lr_at"
wrong adamw adamw_own_count --fail-fast
failed_with "--resume" "t->adam_step"

# What a failure says: the signal that killed a rank, the negative % a
# hanging ring often has, and a gradient off by the factor N.
wrong ring_all_gather ring_all_gather_unsigned --fail-fast
failed_with "full_shard on 2 rank(s)" "SIGSEGV"
GRADE_TIMEOUT=15 wrong ring_all_gather ring_all_gather_negmod --fail-fast
failed_with "full_shard on 2 rank(s)" "(-1) % N is -1"
wrong ring_reduce_scatter ring_reduce_scatter_twice --fail-fast
failed_with "full_shard on 2 rank(s)" "0.5 times the reference's (1/2: divided by N twice?"
exit $fail
