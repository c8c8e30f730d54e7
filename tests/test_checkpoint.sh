#!/usr/bin/env bash
# Checkpoints, end to end, on the tiny model (batch 420 divides by 1..7):
#   resume on the same N          bitwise identical to an uninterrupted run
#   reshard N=4 -> M=1,3,5,7      the same result within fp32 reduction order
#   reshard N=3 -> M=2            likewise
#   SIGKILL in the middle of a save: the previous checkpoint still loads and
#                                 resuming reaches the uninterrupted result
#   one run per --save-dir        a second run on it, or a --resume of it,
#                                 beside a live run: exit 2 at once, naming
#                                 the live run; a killed run's lock blocks no one
# Results are compared through --export files with tests/st_diff: bitwise
# where the arithmetic is the same, within 1e-5 where the world size (and so
# the order of fp32 additions) changed; see tests/test_distributed.c for why
# 1e-5 is the right scale.
source "$(dirname "$0")/lib.sh"
ARGS="--model tiny --batch 420 --log-every 1"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
losses() { grep -o '^step *[0-9]*/[0-9]* | loss [0-9.]*' "$1" | awk '$2+0 > 5' | tr -s ' '; }

run_fsdp 4 "$d/a.log" --steps 10 --save-dir "$d/ck4" --save-every 5 --export "$d/a.st"
[ -f "$d/ck4/step-00000005/meta.txt" ] && [ -f "$d/ck4/step-00000010/meta.txt" ] && [ "$(ls "$d/ck4/step-00000005" | wc -l)" -eq 5 ] \
  && ok "N=4 wrote step-5 and step-10, each meta.txt + 4 shard files" || bad "checkpoint layout: $(ls -R "$d/ck4")"

run_fsdp 4 "$d/r.log" --steps 10 --resume "$d/ck4/step-00000005" --export "$d/r.st"
tests/st_diff "$d/a.st" "$d/r.st" && ok "resume on N=4 is bitwise identical to the uninterrupted run" || bad "resume N=4 differs"
[ -n "$(losses "$d/a.log")" ] && [ "$(losses "$d/a.log")" = "$(losses "$d/r.log")" ] && ok "losses of steps 6-10 identical" || bad "losses differ: $(losses "$d/r.log")"

run_fsdp 1 "$d/x.log" --steps 10 --resume "$d/ck4" --export "$d/x.st"
grep -q "nothing to train" "$d/x.log" && tests/st_diff "$d/a.st" "$d/x.st" >/dev/null && ok "export from a checkpoint (1 rank, no training): bitwise the run's own export" || bad "export from checkpoint"

for m in 1 3 5 7; do
  run_fsdp $m "$d/m$m.log" --steps 10 --resume "$d/ck4/step-00000005" --export "$d/m$m.st"
  tests/st_diff "$d/a.st" "$d/m$m.st" 1e-5 >"$d/diff" && ok "reshard N=4 -> M=$m: $(cat "$d/diff")" || bad "reshard 4 -> $m: $(cat "$d/diff")"
done

run_fsdp 3 "$d/b.log" --steps 10 --save-dir "$d/ck3" --save-every 5 --export "$d/b.st"
run_fsdp 2 "$d/b2.log" --steps 10 --resume "$d/ck3" --export "$d/b2.st"
grep -q "resumed from $d/ck3/step-00000010" "$d/b2.log" && ok "--resume DIR picks the newest complete checkpoint (step 10)" || bad "newest not picked"
run_fsdp 2 "$d/b2.log" --steps 10 --resume "$d/ck3/step-00000005" --export "$d/b2.st"
tests/st_diff "$d/b.st" "$d/b2.st" 1e-5 >"$d/diff" && ok "reshard N=3 -> M=2: $(cat "$d/diff")" || bad "reshard 3 -> 2: $(cat "$d/diff")"

# a crash in the middle of the step-10 save
run_fsdp 4 "$d/c.log" --steps 15 --export "$d/c.st"
FSDP_FAULT=killsave:1:10 timeout 300 $MPIRUN -np 4 ./fsdp $ARGS --steps 15 --save-dir "$d/ckk" --save-every 5 >"$d/k.log" 2>&1; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "killed in the middle of saving step 10" "$d/k.log" && ok "rank 1 killed (SIGKILL) while saving step 10: job exit $rc" || bad "kill: rc $rc"
[ -d "$d/ckk/.tmp-step-00000010" ] && [ ! -e "$d/ckk/step-00000010" ] && [ -f "$d/ckk/step-00000005/meta.txt" ] \
  && ok "the half-written save stayed in .tmp-step-00000010; step-00000005 is intact" || bad "after the kill: $(ls -a "$d/ckk")"
run_fsdp 4 "$d/k2.log" --steps 15 --resume "$d/ckk" --export "$d/k2.st"
grep -q "resumed from $d/ckk/step-00000005" "$d/k2.log" && ok "--resume skipped the incomplete save and took step 5" || bad "wrong checkpoint resumed"
tests/st_diff "$d/c.st" "$d/k2.st" && ok "resumed after the crash: bitwise the uninterrupted 15-step run" || bad "after-crash run differs"
cp -r "$d/ckk/step-00000005" "$d/ckk/step-00000005.bak"
run_fsdp 4 "$d/k3.log" --steps 15 --resume "$d/ckk" --save-dir "$d/ckk" --save-every 5
[ "$(ls -A "$d/ckk" | tr '\n' ' ')" = "step-00000005.bak step-00000010 step-00000015 " ] \
  && ok "saving on: the two newest kept, step 5 pruned, the crashed .tmp swept, a look-alike name left alone" || bad "after pruning: $(ls -A "$d/ckk")"

# the exported file seeds a run: --init-from gives back exactly those parameters, on any N
for n in 1 3; do
  timeout 120 $MPIRUN -np $n tests/test_distributed init-from "$d/a.st" $ARGS | tail -2 | sed 's/^/   /'
  [ "${PIPESTATUS[0]}" -eq 0 ] && ok "--init-from on N=$n reads back every parameter bitwise" || bad "--init-from N=$n"
done

# --steps 0 --export: the initial model, the same on every world size, and
# training from it (--init-from, fresh AdamW) is training from scratch
run_fsdp 1 "$d/i1.log" --steps 0 --export "$d/i1.st"
run_fsdp 3 "$d/i3.log" --steps 0 --export "$d/i3.st"
grep -q "^--steps 0: nothing to train" "$d/i3.log" && tests/st_diff "$d/i1.st" "$d/i3.st" >/dev/null \
  && ok "--steps 0 --export: the initial model, bitwise the same on 1 and 3 ranks" || bad "--steps 0 --export"
run_fsdp 4 "$d/s.log" --steps 3 --export "$d/s.st"
run_fsdp 4 "$d/si.log" --steps 3 --init-from "$d/i3.st" --export "$d/si.st"
tests/st_diff "$d/s.st" "$d/si.st" >/dev/null && ok "3 steps from the exported initial model == 3 steps from scratch, bitwise" \
  || bad "training from --steps 0's export differs from training from scratch"
# a learning-rate schedule continues across a resume: the checkpoint records
# it (meta.txt's lr_schedule line), a resume mid-schedule is bitwise the
# uninterrupted run, and a resume with another schedule is refused
SCHED="--lr-schedule step --step-size 3 --gamma 0.5 --warmup 2"
run_fsdp 4 "$d/ls.log" --steps 10 $SCHED --export "$d/ls.st"
run_fsdp 4 "$d/ls1.log" --steps 10 $SCHED --save-dir "$d/cks" --save-every 5
run_fsdp 3 "$d/ls2.log" --steps 10 $SCHED --resume "$d/cks/step-00000005" --export "$d/ls2.st"
tests/st_diff "$d/ls.st" "$d/ls2.st" 1e-5 >/dev/null && grep -q "lr_schedule step lr 3b449ba6 warmup 2 step_size 3 gamma 3f000000 steps 0" "$d/cks/step-00000005/meta.txt" \
  && ok "StepLR with warmup: resumed at step 5 on 3 ranks == the uninterrupted 4-rank run (1e-5); meta.txt records it" || bad "a resume mid-schedule differs"
run_fsdp 4 "$d/ls3.log" --steps 10 $SCHED --resume "$d/cks/step-00000005" --export "$d/ls3.st"
tests/st_diff "$d/ls.st" "$d/ls3.st" >/dev/null && ok "... and on the same 4 ranks, bitwise" || bad "same-N resume mid-schedule not bitwise"
timeout 120 $MPIRUN -np 4 ./fsdp $ARGS --steps 10 --lr-schedule cosine --resume "$d/cks" >"$d/ls4.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "the learning rate would jump" "$d/ls4.log" && ok "a resume with another schedule: exit 2, the learning rate would jump" || bad "another schedule on resume: exit $rc"

# One run per --save-dir (io/lock.h). Run A takes the lock of ckl; its rank
# 0 is then stopped (SIGSTOP), so that A is surely alive however loaded the
# machine, while a second run on ckl and a --resume of ckl (with --save-dir
# ckl, and saving elsewhere) are refused: exit 2 within seconds, naming A's
# pid, host and command. A then goes on, finishes, and its checkpoints
# load. Every run here is bounded by `timeout -k`.
L="--model tiny --batch 12 --log-every 1000"
lock_pid() { # lock_pid DIR: the pid DIR's lock file names, once it is whole (30 s at most)
  local i
  for i in $(seq 150); do
    grep -qx end "$1/.fsdp.lock" 2>/dev/null && { sed -n 's/^pid: //p' "$1/.fsdp.lock"; return 0; }
    sleep 0.2
  done
  return 1
}
# refused_beside WHAT PID ARGS_OF_THE_LIVE_RUN -- ARGS...: exit 2 in under
# 30 s, one error line naming the live run's pid, host and command
refused_beside() {
  local what=$1 pid=$2 live=$3 t0=$SECONDS rc; shift 4
  timeout -k 5 30 $MPIRUN -np 2 ./fsdp $L "$@" >"$d/beside.log" 2>&1; rc=$?
  if [ $rc -eq 2 ] && [ "$(grep -c '^error:' "$d/beside.log")" -eq 1 ] \
    && grep -qF "pid $pid on host $(uname -n)" "$d/beside.log" && grep -qF "running: ./fsdp $L $live" "$d/beside.log"; then
    ok "$what: exit 2 in $((SECONDS - t0)) s, naming it: $(grep '^error:' "$d/beside.log" | cut -c1-100)..."
  else
    bad "$what: exit $rc (124 = hang), wanted 2 and a message naming pid $pid on $(uname -n), running ./fsdp $L $live:"
    tail -4 "$d/beside.log"
  fi
}
A="--steps 3000 --save-every 1000 --save-dir $d/ckl"
timeout -k 5 300 $MPIRUN -np 2 ./fsdp $L $A >"$d/lockA.log" 2>&1 &
amp=$!
if apid=$(lock_pid "$d/ckl") && kill -STOP "$apid"; then
  refused_beside "a second run on a live run's --save-dir" "$apid" "$A" -- --steps 3000 --save-every 1000 --save-dir "$d/ckl"
  refused_beside "--resume DIR --save-dir DIR beside the live run saving in DIR" "$apid" "$A" -- --steps 3000 --resume "$d/ckl" --save-dir "$d/ckl"
  refused_beside "--resume DIR beside it, saving elsewhere" "$apid" "$A" -- --steps 3000 --resume "$d/ckl" --save-dir "$d/ckl2"
  [ -z "$(ls -A "$d/ckl2" 2>/dev/null)" ] && ok "... the refused runs wrote nothing" || bad "a refused run wrote: $(ls -A "$d/ckl2")"
  kill -CONT "$apid"
else
  bad "run A's lock file $d/ckl/.fsdp.lock never named its pid: $(ls -A "$d/ckl")"
fi
wait $amp; rc=$?
[ $rc -eq 0 ] && [ "$(ls -A "$d/ckl" | tr '\n' ' ')" = "step-00002000 step-00003000 " ] \
  && ok "the live run finished (exit 0) with its two newest checkpoints, and removed its lock file" \
  || { bad "the live run: exit $rc, left $(ls -A "$d/ckl" | tr '\n' ' ')"; tail -3 "$d/lockA.log"; }
timeout -k 5 60 $MPIRUN -np 3 ./fsdp $L --steps 3000 --resume "$d/ckl" >"$d/lockA2.log" 2>&1 && grep -q "nothing to train" "$d/lockA2.log" \
  && ok "... and its step-3000 checkpoint loads (every shard's checksum verified)" || { bad "its checkpoint does not load"; tail -3 "$d/lockA2.log"; }
timeout -k 5 60 $MPIRUN -np 2 ./fsdp $L --steps 10 --save-dir "$d/ckl" >"$d/lockA3.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "already holds a checkpoint at step 3000" "$d/lockA3.log" && [ ! -e "$d/ckl/.fsdp.lock" ] \
  && ok "a run refused after taking the lock (exit 2 on every rank) leaves no lock file" || bad "refused after the lock: exit $rc, left $(ls -A "$d/ckl" | tr '\n' ' ')"

# the issue's case: two runs started at once on one directory; one takes the
# lock, the other is refused naming it, and the winner's checkpoints load.
# Each asks for a million steps, so that the two surely overlap however late
# one mpirun starts on a loaded machine (ten thousand steps take 2 s: a
# late start once let the first finish before the second began, and both
# exit 0). The winner is stopped once the other is refused and it has saved.
T="--steps 1000000 --save-every 100 --save-dir $d/ck2x"
for i in 1 2; do
  timeout -k 5 300 $MPIRUN -np 2 ./fsdp $L $T >"$d/twin$i.log" 2>&1 &
  twin[$i]=$!
done
loser=""
for i in $(seq 600); do # the first to end (60 s at most)
  for j in 1 2; do kill -0 "${twin[$j]}" 2>/dev/null || { loser=$j; break 2; }; done
  sleep 0.1
done
if [ -n "$loser" ]; then
  wait "${twin[$loser]}"; rc=$?
  winner=$((3 - loser))
  if [ $rc -eq 2 ] && grep -q "^error: --save-dir $d/ck2x: another run is saving checkpoints there: pid [0-9]* on host $(uname -n) " "$d/twin$loser.log"; then
    ok "two runs started at once on one --save-dir: one refused (exit 2) naming the other, which trains on"
  else
    bad "two runs started at once on one --save-dir: the first to end exited $rc, wanted 2 and a message naming the other:"; cat "$d/twin$loser.log"
  fi
  for i in $(seq 300); do ls "$d/ck2x" | grep -q '^step-' && break; sleep 0.1; done
  kill -TERM "${twin[$winner]}"; wait "${twin[$winner]}"
  newest=$(ls "$d/ck2x" | grep '^step-' | tail -1); newest=$((10#${newest#step-}))
  timeout -k 5 60 $MPIRUN -np 3 ./fsdp $L --steps "$newest" --resume "$d/ck2x" >"$d/twin3.log" 2>&1 && grep -q "nothing to train" "$d/twin3.log" \
    && ok "... and the winner's newest checkpoint (step $newest) loads" || { bad "the winner's checkpoint does not load"; tail -3 "$d/twin3.log"; }
else
  bad "two runs started at once on one --save-dir: both still running after 60 s (neither refused)"
  kill -TERM "${twin[1]}" "${twin[2]}"; wait
fi

# Run K saves every 50 steps of a million: a --resume of one of its
# checkpoints is refused while it lives (a step-N it may prune any moment).
# Killed with SIGKILL, it leaves its lock file behind, unlocked: the next
# run on the directory takes it over and proceeds.
K="--steps 1000000 --save-every 50 --save-dir $d/ckk2"
timeout -k 5 300 $MPIRUN -np 2 ./fsdp $L $K >"$d/killed.log" 2>&1 &
kmp=$!
if kpid=$(lock_pid "$d/ckk2") && for i in $(seq 150); do [ -d "$d/ckk2/step-00000050" ] || [ -d "$d/ckk2/step-00000100" ] && break; sleep 0.2; done \
  && step=$(ls "$d/ckk2" | grep '^step-' | tail -1) && [ -n "$step" ]; then
  refused_beside "--resume of a checkpoint (DIR/$step) of a live run" "$kpid" "$K" -- --steps 3000 --resume "$d/ckk2/$step"
  kill -KILL "$kpid"
  wait $kmp
  grep -qx "pid: $kpid" "$d/ckk2/.fsdp.lock" && ok "the run killed (SIGKILL) left its lock file, naming pid $kpid" || bad "no lock file left by the killed run"
  newest=$(ls "$d/ckk2" | grep '^step-' | tail -1); newest=$((10#${newest#step-}))
  timeout -k 5 60 $MPIRUN -np 2 ./fsdp $L --steps $((newest + 5)) --resume "$d/ckk2" --save-dir "$d/ckk2" >"$d/afterkill.log" 2>&1; rc=$?
  [ $rc -eq 0 ] && [ -f "$d/ckk2/step-$(printf %08d $((newest + 5)))/meta.txt" ] && [ ! -e "$d/ckk2/.fsdp.lock" ] \
    && ok "... and the next run on the directory proceeds: exit 0, resumed at step $newest and saved, the lock file gone" \
    || { bad "after the killed run: exit $rc, left $(ls -A "$d/ckk2" | tr '\n' ' ')"; tail -3 "$d/afterkill.log"; }
else
  bad "run K never named its pid in $d/ckk2/.fsdp.lock, or saved no checkpoint: $(ls -A "$d/ckk2")"; kill "$kmp" 2>/dev/null; wait $kmp
fi
exit $fail
