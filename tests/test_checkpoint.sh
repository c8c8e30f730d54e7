#!/usr/bin/env bash
# Checkpoints, end to end, on the tiny model (batch 420 divides by 1..7):
#   resume on the same N          bitwise identical to an uninterrupted run
#   reshard N=4 -> M=1,3,5,7      the same result within fp32 reduction order
#   reshard N=3 -> M=2            likewise
#   SIGKILL in the middle of a save: the previous checkpoint still loads and
#                                 resuming reaches the uninterrupted result
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
exit $fail
