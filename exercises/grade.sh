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
# Exit 0 when every check passes, 1 otherwise, 2 when it cannot grade.
# GRADE_TIMEOUT (seconds, default 60): how long a run may take before it is
# graded "hung" (the tests shorten it for their rings that hang on purpose);
# it is then sent SIGTERM, and SIGKILL 10 s later if it is still there (an
# mpirun left waiting on a wrong ring once held a grading 17 minutes).
# GRADE_REFERENCE_CACHE=DIR (for tests/test_exercises.sh, which grades many
# files against one ./fsdp): the reference results are kept in DIR, keyed by
# the exercise and ./fsdp's checksum, and reused by the next grading.
#
# The student's code runs as the grader does, so the grader trusts nothing
# it could have touched:
#   - the reference binaries (./fsdp, tests/st_diff) are copied into a
#     private directory before any of the student's code runs, and every
#     reference result is computed from that copy first, then made
#     read-only and checksummed (a change by the end is an error);
#   - the student's runs have a working directory of their own (a program
#     that writes ./fsdp writes it there);
#   - a check takes only what the run it names wrote: its result files are
#     deleted before the run and must exist after it, and the log must end
#     the way a finished run ends (MPI_Abort(comm, 0), exit(0) or an early
#     MPI_Finalize leave mpirun's exit status 0 too).
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
EX=${1:-}
FILE=${2:-exercises/$EX.c}
FAIL_FAST=0
[ "${3:-}" = --fail-fast ] && FAIL_FAST=1
TIMEOUT=${GRADE_TIMEOUT:-60}

case $EX in
  ring_all_gather) MACRO=EXERCISE_RING_ALL_GATHER ;;
  ring_reduce_scatter) MACRO=EXERCISE_RING_REDUCE_SCATTER ;;
  post_backward) MACRO=EXERCISE_POST_BACKWARD ;;
  adamw) MACRO=EXERCISE_ADAMW ;;
  auto_wrap) MACRO=EXERCISE_AUTO_WRAP ;;
  fsdp2_layout) MACRO=EXERCISE_FSDP2_LAYOUT ;;
  *) echo "usage: make exercise EX=NAME [FILE=path]; NAME is one of ring_all_gather," \
          "ring_reduce_scatter, post_backward, adamw, auto_wrap, fsdp2_layout (see exercises/README.md)"; exit 2 ;;
esac

B=$(mktemp -d)
trap 'chmod -R u+w "$B" 2>/dev/null; rm -rf "$B"' EXIT
REF=$B/ref YOU=$B/you # each side: its binaries, its results, and run/, its working directory
mkdir -p "$REF/bin" "$REF/run" "$YOU/run"
[ -x ./fsdp ] && [ -x tests/st_diff ] || { echo "error: run make first (./fsdp, tests/st_diff)"; exit 2; }
cp ./fsdp tests/st_diff "$REF/bin/" && chmod a-w "$REF/bin/fsdp" "$REF/bin/st_diff"
ST_DIFF=$REF/bin/st_diff

passed=0 failed=0
verdict() { # verdict OK NAME DETAIL
  if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "PASS  $2: $3"
  else
    failed=$((failed + 1)); echo "FAIL  $2: $3"
    if [ $FAIL_FAST = 1 ]; then echo; echo "$EX: $passed passed, $failed failed (stopped at the first failure)"; exit 1; fi
  fi
}

# The reference function, cut out of its file (fsdp.c, or comm/ring.h for the
# rings) between "#else" and its "#endif".
if [ "$FILE" = reference ]; then
  FILE=$B/reference.c
  HOME_FILE=$(grep -lE "^#ifdef $MACRO( |\$)" fsdp.c comm/*.h | head -1)
  [ -n "$HOME_FILE" ] || { echo "error: no #ifdef $MACRO in fsdp.c or comm/"; exit 2; }
  awk -v m="$MACRO" '$0 ~ "^#ifdef " m "( |$)" { on = 1; next }
                     on == 1 && /^#else/ { on = 2; next }
                     on == 2 && $0 ~ "^#endif /\\* " m { exit }
                     on == 2 { print }' "$HOME_FILE" >"$FILE"
fi
[ -f "$FILE" ] || { echo "error: $FILE does not exist"; exit 2; }
SRC=$(cd "$(dirname "$FILE")" && pwd)/$(basename "$FILE")
SIM_SRC="files.c formats.c sim/net.c sim/sim.c sim/record.c sim/check.c sim/show.c"
echo "grading $EX from $FILE"

# build PROGRAM.c OUTPUT: one program compiled with the student's function.
# -O0: it compiles in a quarter of -O1's time (1.5 s, not 6 s, for main.c),
# the graded runs are tiny, and gdb sees every variable of the build kept.
# A ring is compiled inside exercises/ring_guard.h, which includes it: a
# negative neighbour or chunk index ends the run there, named, rather than
# in whatever it would have led to (a hang, a crash, wrong parameters).
EXFILE=("-DEXERCISE_FILE=\"$SRC\"")
case $EX in ring_*)
  EXFILE=("-DEXERCISE_FILE=\"exercises/ring_guard.h\"" "-DEXERCISE_STUDENT_FILE=\"$SRC\"") ;;
esac
build() {
  # shellcheck disable=SC2086  # SIM_SRC is a list
  mpicc -O0 -g -std=c11 -Wall -Wextra -Wno-unused-function -I. -D"$MACRO" \
    "${EXFILE[@]}" "$1" $SIM_SRC -o "$2" -lm -lpthread >"$B/cc.log" 2>&1
}
# timeout: SIGTERM at the limit, SIGKILL KILL_AFTER s later to what is left
KILL_AFTER=10
limit() { timeout -k "$KILL_AFTER" "$@"; } # limit SECONDS COMMAND...
if build main.c "$YOU/fsdp"; then verdict 0 "compiles" "fsdp.c with your $EX"
else verdict 1 "compiles" "the compiler says:"; sed 's/^/      /' "$B/cc.log" | head -30; exit 1; fi
# The build stays, to run by hand (e.g. to watch a ring with --step=ring).
mkdir -p exercises/build && cp "$YOU/fsdp" "exercises/build/fsdp-$EX"

# ---- runs -------------------------------------------------------------------
# The plan below runs twice: PASS=ref makes every reference result with the
# private copy, PASS=you runs the student's build and grades it. Both passes
# number their runs alike (ID), so result tN of one is tN of the other.
# --clip-grad-norm 1e30 never clips (the norm is ~3), but it has every step
# print the gradient's norm: that tells a gradient off by a factor of N.
COMMON="--model tiny --batch 12 --collectives ring --inline-collectives --log-every 1 --clip-grad-norm 1e30"
side() { # side ref|you: where this pass's binary, results and working directory are
  PASS=$1 ID=0
  if [ "$1" = ref ]; then DIR=$REF BIN=$REF/bin/fsdp; else DIR=$YOU BIN=$YOU/fsdp; fi
}

# run NAME N FLAGS...: a tiny-model run on N ranks of this pass's binary,
# exporting its parameters to DIR/NAME.st, its figures (the collectives'
# calls among them) to DIR/NAME.json, its output in DIR/NAME.log
run() {
  local name=$1 n=$2; shift 2
  rm -rf "${DIR:?}/$name.st" "$DIR/$name.json" "$DIR/$name.log"
  # shellcheck disable=SC2086  # MPIRUN and COMMON are lists
  (cd "$DIR/run" && limit "$TIMEOUT" $MPIRUN -np "$n" "$BIN" $COMMON --export "$DIR/$name.st" \
    --json "$DIR/$name.json" "$@") >"$DIR/$name.log" 2>&1
}
# finished NAME: the run wrote its results and printed its last lines
finished() {
  [ -s "$DIR/$1.st" ] && grep -qF "to $DIR/$1.st (safetensors" "$DIR/$1.log" &&
    [ -s "$DIR/$1.json" ] && grep -qF "figures written to $DIR/$1.json" "$DIR/$1.log"
}

# ref_run NAME N FLAGS...: the reference must run to its end, or nothing can be graded
ref_run() {
  if ! run "$@" || ! finished "$1"; then
    echo "error: the reference run failed (-np $2 ./fsdp $COMMON ${*:3}):"; tail -5 "$DIR/$1.log"; exit 2
  fi
  [ -n "$(calls "$DIR/$1.json")" ] || { echo "error: no collectives in $DIR/$1.json"; exit 2; }
}

# you_run WHAT NAME N FLAGS...: the student's run; when it did not finish,
# the verdict on WHAT says how it ended, and it returns 1
you_run() {
  local what=$1 name=$2; shift 2
  run "$name" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict 1 "$what" "hung (no end after $TIMEOUT s): $(hang_hint "$@")"
  elif [ $rc -ne 0 ]; then verdict 1 "$what" "$(crash_reason "$DIR/$name.log" $rc)${HINT:+ $HINT}"
  elif ! finished "$name"; then verdict 1 "$what" "$(stopped_early "the run" "no result file, no last line")"
  else return 0; fi
  return 1
}

stopped_early() { # stopped_early WHAT DETAIL: WHAT ended with exit status 0 but before its end
  echo "$1 stopped before its end (exit 0; $2): does your code call MPI_Abort, exit or MPI_Finalize?"
}

# The ring's most common mistake: a negative neighbour (-1 is
# MPI_ANY_SOURCE in Open MPI) or a negative chunk index. Given where it
# applies: a ring that hung, or one that exercises/ring_guard.h stopped at
# a negative index (its error says "negative").
NEGMOD_HINT="In C, (-1) % N is -1, not N - 1: add N before taking % (as ring_left does)."

# What a hang says. A ring hangs when two neighbours disagree about a step;
# the causes common enough to name come first.
hang_hint() { # hang_hint FLAGS...
  case $EX in ring_*)
    case " $* " in *" hybrid_shard"*)
      printf "A hybrid strategy runs the ring on a group of the ranks: use the communicator you are given (c->stream_comm), not MPI_COMM_WORLD. " ;;
    esac
    printf "%s " "$NEGMOD_HINT" ;;
  esac
  echo "Do all ranks make the same MPI calls in the same order?"
}

# How a run that failed ended: a signal by name (Open MPI's handler prints
# "Signal: Segmentation fault (11)"; a shell reports 128 + n), else
# fsdp.c's own message ("error: ..." or "[rank R] error at ..."), else the
# first line that says error. The log is read with its NUL bytes taken out:
# Open MPI 5 ends its MPI_Abort banner with one, which makes grep call the
# log binary and print none of its lines, and under load it prints that
# banner (whose "Errorcode: 1" names nothing) before fsdp.c's message.
crash_reason() { # crash_reason LOG RC
  local rc=$2 n="" text log
  log=$(tr -d '\000' <"$1")
  text=$(grep -m1 -o 'Signal: .*([0-9]*)' <<<"$log" | sed 's/^Signal: //; s/ *([0-9]*)$//')
  n=$(grep -m1 -o 'Signal: .*([0-9]*)' <<<"$log" | sed 's/.*(\([0-9]*\))$/\1/')
  [ -z "$n" ] && [ "$rc" -gt 128 ] && [ "$rc" -lt 192 ] && n=$((rc - 128))
  if [ -n "$n" ]; then
    echo "crashed: a rank was killed by SIG$(kill -l "$n" 2>/dev/null || echo "$n")${text:+ ($text)} (exit $rc):" \
      "a chunk index out of range, or a pointer past its buffer?" \
      "Run exercises/build/fsdp-$EX by hand, or under gdb (--wait-for-debugger)"
  else
    local error
    error=$(grep -m1 -E '^(\[rank [0-9]+\] )?error' <<<"$log" ||
      grep -v '\*\*\*' <<<"$log" | grep -m1 -i 'error')
    case $error in
      *"ring_guard.h"*negative*) echo "exit $rc: $error $NEGMOD_HINT" ;;
      *) echo "exit $rc: $error" ;;
    esac
  fi
}

# What the first step's gradient norms say when the parameters differ: a
# ratio of about 1/k (k = 2..N ranks) is a mean taken twice, k a sum where
# a mean belongs. (AdamW hides a gradient's scale from the parameters: its
# first update is about lr * sign(g) whatever the scale.)
scale_hint() { # scale_hint NAME N
  local a b
  a=$(sed -n 's/^step *1\/.*| grad norm \([0-9.eE+-]*\).*/\1/p' "$REF/$1.log" | head -1)
  b=$(sed -n 's/^step *1\/.*| grad norm \([0-9.eE+-]*\).*/\1/p' "$YOU/$1.log" | head -1)
  awk -v a="$a" -v b="$b" -v n="$2" 'BEGIN {
    if (a == "" || b == "" || a + 0 <= 0) exit
    r = b / a
    if (r > 0.99 && r < 1.01) exit
    printf " Your gradient norm at step 1 is %.3g times the reference'"'"'s", r
    for (k = 2; k <= n; k++) {
      if (r > 0.98 / k && r < 1.02 / k)
        printf " (1/%d: divided by N twice? The caller already turns the sum into a mean: comm_wait divides by N)", k
      if (r > 0.98 * k && r < 1.02 * k)
        printf " (%d times: a sum where the mean belongs? comm_wait divides the sum by N once)", k
    }
    printf "."
  }'
}

# calls JSON: "NAME CALLS" a line, each collective the run's --json counts
# (its "collectives" object: "all_gather": {"calls": 20, ...}, ...)
calls() {
  tr -d ' \n' <"$1" | grep -o '"collectives":{.*' | grep -o '"[a-z_0-9]*":{"calls":[0-9]*' |
    sed 's/^"\([a-z_0-9]*\)":{"calls":/\1 /'
}

# compare WHAT NAME N: the student's parameters against the reference's,
# then how many times it called each collective: right numbers can come
# from extra work (a unit gathered again that the strategy keeps)
compare() {
  local diff
  if ! diff=$("$ST_DIFF" "$REF/$2.st" "$YOU/$2.st" 1e-5 2>&1); then
    verdict 1 "$1" "parameters differ from the reference's: $diff.$(scale_hint "$2" "$3")${HINT:+ $HINT}"
    return
  fi
  diff=$(paste -d ' ' <(calls "$REF/$2.json") <(calls "$YOU/$2.json") |
    awk '$1 != $3 || $2 != $4 { printf "%s%s %s calls where the reference makes %s", s, $3, $4, $2; s = ", " }')
  if [ -z "$diff" ]; then verdict 0 "$1" "parameters equal the reference's (1e-5), and so do its collective calls"
  else verdict 1 "$1" "parameters equal the reference's, but not its collectives: $diff.${HINT:+ $HINT}"; fi
}

# ---- checks (each runs in both passes) -------------------------------------
# Every parameter after 4 steps equals the reference's on each N of RANKS:
# 1e-5 is the tolerance the suite's N-vs-1 checks justify (fp32 sums in
# another order). HINT, if set, is added to a difference's verdict.
same_training() { # same_training "RANKS" STRATEGY [FLAGS]
  local ranks=$1 st=$2; shift 2
  for n in $ranks; do
    local name=t$((ID += 1)) what="4 steps of $st on $n rank(s)${*:+ ($*)}"
    if [ "$PASS" = ref ]; then ref_run "$name" "$n" --steps 4 --strategy "$st" "$@"
    elif you_run "$what" "$name" "$n" --steps 4 --strategy "$st" "$@"; then compare "$what" "$name" "$n"; fi
  done
}

# 2 steps saved with --save-dir, then --resume to step 4, equals the same
# done by the reference: what a run keeps across a restart is graded too.
same_resume() { # same_resume N STRATEGY [FLAGS]
  local n=$1 st=$2 name=t$((ID += 1))
  shift 2
  local what="2 steps of $st on $n rank(s)${*:+ ($*)}, saved, then --resume to step 4" ck=$DIR/t$ID.ck
  rm -rf "$ck"
  if [ "$PASS" = ref ]; then
    ref_run "$name.a" "$n" --steps 2 --strategy "$st" --save-dir "$ck" "$@"
    ref_run "$name" "$n" --steps 4 --strategy "$st" --resume "$ck" "$@"
    return
  fi
  you_run "$what" "$name.a" "$n" --steps 2 --strategy "$st" --save-dir "$ck" "$@" || return
  [ -f "$ck/step-00000002/meta.txt" ] || { verdict 1 "$what" "no checkpoint in $ck/step-00000002"; return; }
  you_run "$what" "$name" "$n" --steps 4 --strategy "$st" --resume "$ck" "$@" || return
  if ! grep -qF "resumed from $ck/step-00000002" "$YOU/$name.log"; then verdict 1 "$what" "it did not resume"
  else compare "$what" "$name" "$n"; fi
}

# The unit table for several thresholds equals the reference's.
same_units() {
  for mp in 1 100 2160 5000 10256; do
    local name=t$((ID += 1)) what="units at --min-params $mp"
    if [ "$PASS" = ref ]; then
      ref_run "$name" 2 --steps 1 --min-params $mp
      sed -n '/^unit /,/^\*/p' "$REF/$name.log" >"$REF/$name.units"
      [ -s "$REF/$name.units" ] || { echo "error: no unit table in the reference's output"; exit 2; }
      continue
    fi
    you_run "$what" "$name" 2 --steps 1 --min-params $mp || continue
    sed -n '/^unit /,/^\*/p' "$YOU/$name.log" >"$YOU/$name.units"
    if cmp -s "$REF/$name.units" "$YOU/$name.units"; then
      verdict 0 "$what" "$(($(wc -l <"$YOU/$name.units") - 2)) units, as the reference"
    else
      verdict 1 "$what" "the unit table differs from the reference's:"
      diff "$REF/$name.units" "$YOU/$name.units" | head -10 | sed 's/^/      /'
    fi
  done
}

# The suite's own checks, compiled with the student's function. A pass
# needs the program's closing line, at least one "ok" and no FAIL: a
# program that left early (exit 0) ran none, or not all, of its checks.
suite() { # suite NAME PROGRAM NP ARGS...: a test program of tests/ on NP ranks (0: no mpirun)
  [ "$PASS" = ref ] && return
  local name=$1 prog=$2 np=$3 log=$YOU/$2.log; shift 3
  if ! build "tests/$prog.c" "$YOU/$prog"; then verdict 1 "$name" "tests/$prog.c does not compile"; return; fi
  local launch=""
  [ "$np" -gt 0 ] && launch="$MPIRUN -np $np"
  # shellcheck disable=SC2086  # launch is a list
  (cd "$YOU/run" && limit $((2 * TIMEOUT)) $launch "$YOU/$prog" "$@") >"$log" 2>&1
  local rc=$? oks
  oks=$(grep -c '^ *ok' "$log")
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict 1 "$name" "hung (no end after $((2 * TIMEOUT)) s): $(hang_hint)"
  elif [ $rc -gt 128 ] || grep -q 'Signal: ' "$log"; then verdict 1 "$name" "$(crash_reason "$log" $rc)"
  elif [ $rc -ne 0 ] || grep -q 'FAIL' "$log"; then
    verdict 1 "$name" "tests/$prog failed:"; grep -a -E 'FAIL|fail|error' "$log" | head -8 | sed 's/^/      /'
  elif ! grep -qE '^(all checks passed|0 check\(s\) failed)$' "$log"; then
    verdict 1 "$name" "$(stopped_early "tests/$prog" "no closing line, $oks check(s) ran")"
  elif [ "$oks" -eq 0 ]; then verdict 1 "$name" "tests/$prog ran no check"
  else verdict 0 "$name" "$oks checks of tests/$prog passed"; fi
}

# ---- what each exercise is graded on -----------------------------------------
T="--model tiny --steps 8 --batch 12"
plan() {
  case $EX in
    ring_all_gather | ring_reduce_scatter)
      same_training "1 2 3 4" full_shard
      # a hybrid strategy runs the rings on groups of 2 of the 4 ranks
      same_training 4 hybrid_shard --ranks-per-node 2
      # 4 ranks: on 3, a rank two steps away is a neighbour the other way round
      suite "bytes your ring sends == the ring volume counted, between neighbours only (4 ranks)" test_distributed 4 \
        traffic full_shard $T
      suite "N ranks == 1 rank inside one program (4 ranks)" test_distributed 4 \
        equivalence full_shard ring $T ;;
    post_backward)
      same_training "1 2 3 4" full_shard
      same_training "1 2 3 4" shard_grad_op
      same_training "1 2 3 4" no_shard
      same_training "1 2 3 4" full_shard --backward-prefetch post
      same_training 4 hybrid_shard --ranks-per-node 2
      HINT="Inside no_sync (t->sync_grads 0) nothing is reduced, and shard_grad_op keeps its full parameters (reshards_after_backward)." \
        same_training 3 shard_grad_op --grad-accum 2 --no-sync
      # hybrid_shard_zero2 keeps its full parameters through no_sync too
      # (on 4 ranks, --batch 16: 2 micro-batches of 2 samples a rank)
      HINT="Inside no_sync hybrid_shard_zero2 keeps its full parameters, as shard_grad_op does: reshard where reshards_after_backward(t) says." \
        same_training 4 hybrid_shard_zero2 --ranks-per-node 2 --batch 16 --grad-accum 2 --no-sync
      HINT="zero1 reduces too: reduce_grad_start whenever t->sync_grads, whatever the strategy." \
        same_training 3 zero1 --grad-accum 2
      same_training 2 full_shard --grad-accum 2 --cpu-offload
      suite "memory: the full-state peaks each prefetch option promises (4 ranks)" test_distributed 4 \
        memory $T
      suite "traffic: one reduce-scatter per unit per step (3 ranks)" test_distributed 3 \
        traffic full_shard $T
      # shard_grad_op keeps its full parameters through no_sync: gathered once a step
      suite "traffic: shard_grad_op inside no_sync gathers once a step (2 ranks)" test_distributed 2 \
        traffic shard_grad_op $T --grad-accum 2 --no-sync ;;
    adamw) # no communication: one N beyond 1..4 shows each option
      same_training "1 2 3 4" full_shard
      same_training 2 no_shard
      HINT="The step's learning rate is lr_at(&t->cfg, step), not t->cfg.lr." \
        same_training 2 full_shard --lr-schedule cosine --warmup 2
      HINT="--optimizer adam adds weight_decay * p to the gradient (adamw_one's l2) and decays nothing else." \
        same_training 2 full_shard --optimizer adam --weight-decay 0.1
      HINT="With mixed precision step the fp32 master (unit_master), then round it again (unit_refresh_low_precision)." \
        same_training 2 full_shard --param-dtype bf16
      HINT="A checkpoint keeps t->adam_step and --resume restores it: count the steps there, once per step." \
        same_resume 2 full_shard
      # the loss scaler skips steps 1 and 3 here (inf/NaN): AdamW's count falls behind the step's
      HINT="A step the loss scaler skips does not step AdamW: bias-correct with t->adam_step, not the training step." \
        same_training 2 full_shard --param-dtype fp16 --grad-scaler --init-scale 262144
      # both at once: the schedule's step is AdamW's count as well, which
      # only a schedule with skipped steps tells from the training step
      HINT="The schedule follows AdamW's count too: lr_at(c, t->adam_step - 1), not the training step (t->comm.step)." \
        same_training 2 full_shard --lr-schedule cosine --warmup 2 --param-dtype fp16 --grad-scaler --init-scale 262144
      HINT="--no-decay-bias-norm: a vector (shape[1] == 1) decays by 0; step each parameter's piece of the shard (shard_piece) with its own weight decay." \
        same_training 3 full_shard --no-decay-bias-norm --weight-decay 0.1 ;;
    fsdp2_layout)
      local rule="A piece is ceil(rows / world) rows (fsdp2_chunk); a parameter's offset is world * chunk_at[k], and its rows start at chunk_at[j] of a shard (fsdp2_piece's at)."
      HINT=$rule same_training "1 2 3 4" full_shard --fsdp2
      # width 1: one-row LayerNorms and biases, so most ranks hold only padding of them
      HINT=$rule same_training "3 4" full_shard --fsdp2 --width 1 --min-params 1
      same_training 3 shard_grad_op --fsdp2
      same_training 4 hybrid_shard --fsdp2 --ranks-per-node 2
      HINT="A checkpoint is read through fsdp2_piece: every rank's rows, first, end and at." \
        same_resume 3 full_shard --fsdp2
      suite "FSDP2's shards against the rule, rank by rank and element by element (tests/test_units)" test_units 0 ;;
    auto_wrap)
      same_units
      suite "auto-wrap cases of tests/test_units" test_units 0
      same_training "1 2 3 4" full_shard --min-params 1000
      # GPT-2: wte is tied to lm_head, so neither it nor transformer may become a unit
      local tied="A module that holds a tied weight (holds_tied) is never wrapped."
      HINT=$tied same_training "1 3" full_shard --model gpt2-tiny --min-params 1
      HINT=$tied same_training 2 full_shard --model gpt2-tiny --min-params 17000 ;;
  esac
}

# The reference pass, or its results from an earlier grading of the same
# exercise by the same ./fsdp (made before any student code of that one ran)
reference_results() {
  local cached=""
  [ -n "${GRADE_REFERENCE_CACHE:-}" ] && cached=$GRADE_REFERENCE_CACHE/$EX-$(cksum <"$REF/bin/fsdp" | tr ' ' -)
  if [ -n "$cached" ] && [ -d "$cached" ]; then cp -r "$cached/." "$REF/"; return; fi
  side ref
  plan
  [ -z "$cached" ] || { mkdir -p "$cached" && cp -r "$REF/." "$cached/"; }
}
reference_results
chmod -R a-w "$REF"
sums() { (cd "$REF" && find . -type f -print0 | sort -z | xargs -0 cksum); }
REF_SUMS=$(sums)
side you
plan
[ "$(sums)" = "$REF_SUMS" ] || { echo "error: the reference's results changed while your code ran: cannot grade"; exit 2; }

echo
echo "your build: exercises/build/fsdp-$EX; e.g. mpirun -np 4 exercises/build/fsdp-$EX --model tiny --steps 1 --batch 4 --step=ring"
echo "$EX: $passed passed, $failed failed"
[ $failed -eq 0 ]
