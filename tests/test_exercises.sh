#!/usr/bin/env bash
# tests/test_exercises.sh — the graded exercises grade what they should:
# each starting stub compiles and FAILS its grader, and the reference
# function (cut out of fsdp.c, built through the same #include path a
# student's file takes) PASSES it. `make exercise EX=NAME` is the grader.
# Then wrong student files (tests/fixtures/exercises/), several of which
# once fooled it, FAIL it, each with the hint that names its mistake.
#
# Gradings run EXERCISE_JOBS at a time (default 3): a grading is mostly
# mpirun starting and stopping, asleep, so on 2 cores three at once take
# half the time of one after another.
cd "$(dirname "$0")/.."
source tests/lib.sh
JOBS=${EXERCISE_JOBS:-3}
out=$(mktemp -d) keep=$(mktemp)
# every grading of one exercise compares with the same reference results:
# computed once, by the first (the stub's), and reused; the overwrite case
# below computes its own, as a student's grading does
export GRADE_REFERENCE_CACHE
GRADE_REFERENCE_CACHE=$(mktemp -d)
trap 'rm -rf "$out" "$keep"; chmod -R u+w "$GRADE_REFERENCE_CACHE"; rm -rf "$GRADE_REFERENCE_CACHE"' EXIT

n_cases=0
spawn() { # spawn FUNCTION ARGS...: in the background, its report kept in order
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  n_cases=$((n_cases + 1))
  local log=$out/$n_cases.log
  # its own Open MPI session directory (tests/test_cli.sh's run_case says why)
  mkdir -p "$out/ompi.$n_cases"
  (log=$log; export OMPI_MCA_orte_tmpdir_base=$out/ompi.$n_cases; "$@") >"$out/$n_cases.report" 2>&1 &
}

# stub_and_reference EX: the stub fails its grader, the reference passes it
stub_and_reference() {
  local ex=$1
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
}

# wrong EX FIXTURE [OPTIONS] -- CHECK HINT [CHECK HINT ...]: grades
# tests/fixtures/exercises/FIXTURE.c as exercise EX; it must fail, and fail
# each CHECK with a verdict that says its HINT (a HINT !TEXT: a verdict
# that does not say TEXT, a hint that does not apply there)
wrong() {
  local ex=$1 fixture=$2 options=()
  shift 2
  while [ "$1" != -- ]; do options+=("$1"); shift; done
  shift
  if bash exercises/grade.sh "$ex" "tests/fixtures/exercises/$fixture.c" "${options[@]}" >"$log" 2>&1; then
    bad "$fixture passed its grader: $(tail -1 "$log")"
    return
  fi
  while [ $# -ge 2 ]; do
    local verdicts
    verdicts=$(grep '^FAIL ' "$log" | grep -F -- "$1")
    case $2 in
      !*) if [ -n "$verdicts" ] && ! grep -qF -- "${2#!}" <<<"$verdicts"; then ok "$fixture fails '$1', not saying '${2#!}'"
          else bad "$fixture: no FAIL verdict on '$1', or one that says '${2#!}':"; grep -E '^(FAIL|error)' "$log" | head -6 | sed 's/^/    /'; fi ;;
      *) if grep -qF -- "$2" <<<"$verdicts"; then ok "$fixture fails '$1', saying '$2'"
         else bad "$fixture: no FAIL verdict on '$1' that says '$2':"; grep -E '^(FAIL|error)' "$log" | head -6 | sed 's/^/    /'; fi ;;
    esac
    shift 2
  done
}

# A student's program that copies itself over ./fsdp must not become the
# reference: the grader runs a private copy made before, elsewhere. (If it
# ever did overwrite ./fsdp, the test says so and puts it back.)
overwrite() {
  cp ./fsdp "$keep"
  GRADE_REFERENCE_CACHE="" wrong adamw adamw_overwrite --fail-fast -- "full_shard on 2 rank(s)" "parameters differ"
  if cmp -s ./fsdp "$keep"; then ok "adamw_overwrite: ./fsdp is untouched (its copy went to its own directory)"
  else bad "adamw_overwrite replaced ./fsdp (put back)"; cp "$keep" ./fsdp; fi
}

# A run that does not end when its time is up, nor on SIGTERM (an mpirun
# once held a grading 17 minutes so): the grader sends SIGKILL 10 s after
# the SIGTERM, and grades it "hung". The stand-in mpirun ignores SIGTERM
# for 90 s; the grading must be over long before.
deaf() {
  local start=$SECONDS
  GRADE_TIMEOUT=2 MPIRUN="bash $PWD/tests/fixtures/exercises/mpirun_deaf.sh" \
    wrong adamw adamw_cfg_lr --fail-fast -- "full_shard on 1 rank(s)" "hung (no end after 2 s)"
  if [ $((SECONDS - start)) -le 45 ]; then ok "a run deaf to SIGTERM ends in $((SECONDS - start)) s (SIGKILL)"
  else bad "a run deaf to SIGTERM held the grader $((SECONDS - start)) s: is it sent SIGKILL (timeout -k)?"; fi
}

for ex in ring_all_gather ring_reduce_scatter post_backward adamw auto_wrap fsdp2_layout; do
  spawn stub_and_reference "$ex"
done
wait # the reference results are cached now

# A run that stops early with exit status 0 (MPI_Abort(comm, 0), or
# MPI_Finalize and exit(0)) is graded on what it wrote: nothing. It must
# not be graded on an older run's result, nor a test program that ran none
# of its checks pass.
spawn wrong ring_all_gather ring_all_gather_abort -- \
  "full_shard on 2 rank(s)" "stopped before its end" "bytes your ring sends" "0 check(s) ran"
spawn wrong ring_all_gather ring_all_gather_finalize --fail-fast -- "full_shard on 2 rank(s)" "MPI_Finalize"
# A ring on MPI_COMM_WORLD instead of its own communicator is right on the
# whole world, and hangs in a hybrid strategy's group. (It hangs on
# purpose: a shorter wait than a student's 60 s.)
GRADE_TIMEOUT=30 spawn wrong ring_all_gather ring_all_gather_world --fail-fast -- \
  "hybrid_shard on 4 rank(s)" "not MPI_COMM_WORLD"
spawn overwrite
# adamw: the learning rate of the step, and the step count a checkpoint keeps
spawn wrong adamw adamw_cfg_lr --fail-fast -- "--lr-schedule cosine" "lr_at"
spawn wrong adamw adamw_own_count --fail-fast -- "--resume" "t->adam_step"
# What a failure says: the signal that killed a rank, the negative % of a
# ring, and a gradient off by the factor N. The ring's guard
# (exercises/ring_guard.h) names a negative neighbour or chunk where it is
# used, a send's or a receive's or a local sum's, whatever it would have led
# to; the (-1) % N hint is given there (and on a hang), not where it does
# not apply (a crash far past the buffer, a gradient divided twice).
spawn wrong ring_all_gather ring_all_gather_unsigned --fail-fast -- "full_shard on 2 rank(s)" "SIGSEGV" \
  "full_shard on 2 rank(s)" "!(-1) % N"
spawn wrong ring_all_gather ring_all_gather_negmod --fail-fast -- \
  "full_shard on 2 rank(s)" "a negative neighbour" "full_shard on 2 rank(s)" "(-1) % N is -1"
spawn wrong ring_reduce_scatter ring_reduce_scatter_negmod --fail-fast -- \
  "full_shard on 2 rank(s)" "wrote into chunk -1" "full_shard on 2 rank(s)" "(-1) % N is -1"
spawn wrong ring_reduce_scatter ring_reduce_scatter_twice --fail-fast -- \
  "full_shard on 2 rank(s)" "0.5 times the reference's (1/2: divided by N twice?" \
  "full_shard on 2 rank(s)" "!(-1) % N"
spawn deaf
# post_backward: the one pending reduction is finished before the next
# starts, and inside no_sync nothing is reduced.
spawn wrong post_backward post_backward_no_finish --fail-fast -- \
  "full_shard on 1 rank(s)" "still in flight"
spawn wrong post_backward post_backward_always_reduce --fail-fast -- \
  "shard_grad_op on 3 rank(s) (--grad-accum 2 --no-sync)" "Inside no_sync"
# Right numbers, wrong algorithm, found by a probe of the graders: rings
# that talk to ranks beyond their neighbours, shard_grad_op resharding
# inside no_sync (its collective calls, and traffic), a tied weight wrapped
# apart (GPT-2), and AdamW counting training steps where the loss scaler
# skipped some
spawn wrong ring_all_gather ring_all_gather_direct --fail-fast -- \
  "between neighbours only (4 ranks)" "tests/test_distributed failed"
spawn wrong ring_reduce_scatter ring_reduce_scatter_direct --fail-fast -- \
  "between neighbours only (4 ranks)" "tests/test_distributed failed"
spawn wrong post_backward post_backward_reshard_in_no_sync -- \
  "shard_grad_op on 3 rank(s) (--grad-accum 2 --no-sync)" "not its collectives: all_gather" \
  "shard_grad_op inside no_sync gathers once" "tests/test_distributed failed"
spawn wrong auto_wrap auto_wrap_tied --fail-fast -- "(--model gpt2-tiny --min-params 1)" "holds_tied"
spawn wrong adamw adamw_train_step --fail-fast -- "--grad-scaler" "t->adam_step"
# FSDP2's layout: right where every row count divides, wrong on 3 ranks;
# and pieces placed right but read back at the wrong place
spawn wrong fsdp2_layout fsdp2_layout_floor --fail-fast -- "full_shard on 3 rank(s)" "ceil(rows / world)"
spawn wrong fsdp2_layout fsdp2_layout_piece_at --fail-fast -- "full_shard on 1 rank(s)" "fsdp2_piece's at"
# Two the grader passed until it tried their conditions together (issue
# 44): the schedule's rate at the training step, right until the loss
# scaler skips a step under a schedule; the reshard rule written by hand as
# "sharded, but not shard_grad_op inside no_sync", right but for
# hybrid_shard_zero2 inside no_sync, where it gathers every unit again
# (same numbers: only the collective calls tell)
spawn wrong adamw adamw_lr_train_step --fail-fast -- \
  "(--lr-schedule cosine --warmup 2 --param-dtype fp16 --grad-scaler" "lr_at(c, t->adam_step - 1)"
# the parameter groups: one weight decay for the whole shard decays the
# biases and LayerNorms too
spawn wrong adamw adamw_decay_all --fail-fast -- "(--no-decay-bias-norm" "shard_piece"
spawn wrong post_backward post_backward_hand_condition --fail-fast -- \
  "hybrid_shard_zero2 on 4 rank(s)" "not its collectives: all_gather"
wait

for i in $(seq 1 "$n_cases"); do cat "$out/$i.report"; done
! grep -q '^FAIL:' "$out"/*.report
