#!/usr/bin/env bash
# exercises/grade.sh — grades one exercise; `make exercise EX=NAME` runs it.
#
#   bash exercises/grade.sh NAME [FILE] [--fail-fast]
#
# Compiles fsdp.c with FILE (default exercises/NAME.c) in place of the
# reference function, then checks what matters for it, one verdict per
# check, against the reference build (fsdp.c's own function). FILE may be
# `reference`: the reference function, cut out of fsdp.c, graded through the
# same path (the test suite does this to prove the grader passes it).
# Exit 0 when every check passes, 1 otherwise.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
EX=${1:-}
FILE=${2:-exercises/$EX.c}
FAIL_FAST=0
[ "${3:-}" = --fail-fast ] && FAIL_FAST=1

case $EX in
  ring_all_gather) MACRO=EXERCISE_RING_ALL_GATHER ;;
  ring_reduce_scatter) MACRO=EXERCISE_RING_REDUCE_SCATTER ;;
  post_backward) MACRO=EXERCISE_POST_BACKWARD ;;
  adamw) MACRO=EXERCISE_ADAMW ;;
  auto_wrap) MACRO=EXERCISE_AUTO_WRAP ;;
  *) echo "usage: make exercise EX=NAME [FILE=path]; NAME is one of ring_all_gather," \
          "ring_reduce_scatter, post_backward, adamw, auto_wrap (see exercises/README.md)"; exit 2 ;;
esac

B=$(mktemp -d)
trap 'rm -rf "$B"' EXIT
passed=0 failed=0
verdict() { # verdict OK NAME DETAIL
  if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "PASS  $2: $3"
  else
    failed=$((failed + 1)); echo "FAIL  $2: $3"
    if [ $FAIL_FAST = 1 ]; then echo; echo "$EX: $passed passed, $failed failed (stopped at the first failure)"; exit 1; fi
  fi
}

# The reference function, cut out of fsdp.c between "#else" and its "#endif".
if [ "$FILE" = reference ]; then
  FILE=$B/reference.c
  awk -v m="$MACRO" '$0 ~ "^#ifdef " m "( |$)" { on = 1; next }
                     on == 1 && /^#else/ { on = 2; next }
                     on == 2 && $0 ~ "^#endif /\\* " m { exit }
                     on == 2 { print }' fsdp.c >"$FILE"
fi
[ -f "$FILE" ] || { echo "error: $FILE does not exist"; exit 2; }
SRC=$(cd "$(dirname "$FILE")" && pwd)/$(basename "$FILE")
SIM_SRC="files.c formats.c sim/net.c sim/sim.c sim/record.c sim/check.c sim/show.c"
echo "grading $EX from $FILE"

# build PROGRAM.c OUTPUT: one program compiled with the student's function
build() {
  # shellcheck disable=SC2086  # SIM_SRC is a list
  mpicc -O1 -g -std=c11 -Wall -Wextra -Wno-unused-function -I. -D"$MACRO" \
    -DEXERCISE_FILE="\"$SRC\"" "$1" $SIM_SRC -o "$2" -lm -lpthread >"$B/cc.log" 2>&1
}
if build fsdp.c "$B/fsdp"; then verdict 0 "compiles" "fsdp.c with your $EX"
else verdict 1 "compiles" "the compiler says:"; sed 's/^/      /' "$B/cc.log" | head -30; exit 1; fi
[ -x ./fsdp ] && [ -x tests/st_diff ] || { echo "error: run make first (./fsdp, tests/st_diff)"; exit 2; }

# run OUT.st BINARY N STRATEGY [FLAGS]: a short tiny-model run that exports its parameters
run() {
  local out=$1 bin=$2 n=$3 st=$4; shift 4
  timeout 60 $MPIRUN -np "$n" "$bin" --model tiny --steps 4 --batch 12 --strategy "$st" \
    --collectives ring --inline-collectives --export "$out" "$@" >"$out.log" 2>&1
}

# Every parameter after 4 steps equals the reference's on N ranks: 1e-5 is
# the tolerance the suite's N-vs-1 checks justify (fp32 sums in another order).
same_training() { # same_training STRATEGY [FLAGS]
  local st=$1; shift
  for n in 1 2 3 4; do
    run "$B/ref.st" ./fsdp "$n" "$st" "$@" || { echo "error: the reference run failed"; cat "$B/ref.st.log"; exit 2; }
    run "$B/you.st" "$B/fsdp" "$n" "$st" "$@"
    local rc=$?
    local what="4 steps of $st on $n rank(s)${*:+ ($*)}"
    if [ $rc -eq 124 ]; then verdict 1 "$what" "hung (timed out after 60 s): do all ranks make the same MPI calls in the same order?"
    elif [ $rc -ne 0 ]; then verdict 1 "$what" "exit $rc: $(grep -m1 -i 'error' "$B/you.st.log")"
    elif diff=$(tests/st_diff "$B/ref.st" "$B/you.st" 1e-5 2>&1); then verdict 0 "$what" "parameters equal the reference's (1e-5)"
    else verdict 1 "$what" "parameters differ from the reference's: $diff"; fi
  done
}

# The suite's own checks, compiled with the student's function.
suite() { # suite NAME PROGRAM [ARGS...]: a test program of tests/, built with the exercise
  local name=$1 prog=$2; shift 2
  if ! build "tests/$prog.c" "$B/$prog"; then verdict 1 "$name" "tests/$prog.c does not compile"; return; fi
  if timeout 120 "$@" >"$B/suite.log" 2>&1; then verdict 0 "$name" "$(grep -c '^ *ok' "$B/suite.log") checks of tests/$prog passed"
  else verdict 1 "$name" "tests/$prog failed:"; grep -E 'FAIL|fail|error' "$B/suite.log" | head -8 | sed 's/^/      /'; fi
}

# The unit table for several thresholds equals the reference's.
same_units() {
  for mp in 1 100 2160 5000 10256; do
    timeout 60 $MPIRUN -np 2 ./fsdp --model tiny --steps 1 --batch 4 --min-params $mp 2>&1 | sed -n '/^unit /,/^\*/p' >"$B/ref.units"
    timeout 60 $MPIRUN -np 2 "$B/fsdp" --model tiny --steps 1 --batch 4 --min-params $mp 2>&1 | sed -n '/^unit /,/^\*/p' >"$B/you.units"
    if [ -s "$B/ref.units" ] && cmp -s "$B/ref.units" "$B/you.units"; then
      verdict 0 "units at --min-params $mp" "$(($(wc -l <"$B/you.units") - 2)) units, as the reference"
    else
      verdict 1 "units at --min-params $mp" "the unit table differs from the reference's:"
      diff "$B/ref.units" "$B/you.units" | head -10 | sed 's/^/      /'
    fi
  done
}

T="--model tiny --steps 8 --batch 12"
case $EX in
  ring_all_gather | ring_reduce_scatter)
    same_training full_shard
    suite "bytes your ring sends == the ring volume counted (3 ranks)" test_distributed \
      $MPIRUN -np 3 "$B/test_distributed" traffic full_shard $T
    suite "N ranks == 1 rank inside one program (4 ranks)" test_distributed \
      $MPIRUN -np 4 "$B/test_distributed" equivalence full_shard ring $T ;;
  post_backward)
    same_training full_shard
    same_training shard_grad_op
    same_training no_shard
    same_training full_shard --backward-prefetch post
    suite "memory: the full-state peaks each prefetch option promises (4 ranks)" test_distributed \
      $MPIRUN -np 4 "$B/test_distributed" memory $T
    suite "traffic: one reduce-scatter per unit per step (3 ranks)" test_distributed \
      $MPIRUN -np 3 "$B/test_distributed" traffic full_shard $T ;;
  adamw)
    same_training full_shard
    same_training no_shard ;;
  auto_wrap)
    same_units
    suite "auto-wrap cases of tests/test_units" test_units "$B/test_units"
    same_training full_shard --min-params 1000 ;;
esac

# The build stays, to run by hand (e.g. to watch a ring with --step=ring).
mkdir -p exercises/build && cp "$B/fsdp" "exercises/build/fsdp-$EX"
echo
echo "your build: exercises/build/fsdp-$EX; e.g. mpirun -np 4 exercises/build/fsdp-$EX --model tiny --steps 1 --batch 4 --step=ring"
echo "$EX: $passed passed, $failed failed"
[ $failed -eq 0 ]
