#!/usr/bin/env bash
# --check-collectives: the test-only fault switch FSDP_FAULT makes one rank
# skip a collective (without the checker the others would wait forever) or
# call it with a different size. The checker must catch both on every rank:
# each rank names itself and what it was about to call, rank 0 prints the
# table of all ranks, and all exit with code 4 well before the timeout.
# A run without a fault must pass the checker untouched. Without the
# checker, the watchdog (--collective-timeout) must end the skipped
# collective's hang: exit 4 on every rank, the collective named.
set -u
source "$(dirname "$0")/lib.sh"

out=$(timeout 60 $MPIRUN -np 4 ./fsdp --model tiny --steps 3 --batch 8 --check-collectives 2>&1); rc=$?
[ $rc -eq 0 ] && ! echo "$out" | grep -q mismatch && ok "no fault: the checker lets a correct run through" || bad "clean run: rc $rc"

run_fault() { # FAULT NP EXPECT_IN_TABLE
  local out rc
  out=$(FSDP_FAULT=$1 timeout 60 $MPIRUN -np "$2" ./fsdp --model tiny --steps 3 --batch 12 --check-collectives 2>&1); rc=$?
  [ $rc -eq 4 ] && ok "FSDP_FAULT=$1 on $2 ranks: exit 4, no hang" || bad "FSDP_FAULT=$1: exit $rc (124 = hang)"
  for r in $(seq 0 $(($2 - 1))); do
    echo "$out" | grep -q "^\[rank $r\] collective mismatch: rank $r is about to call #" || bad "rank $r did not report the mismatch"
  done
  echo "$out" | grep -q "^\[rank $(($2 - 1))\] collective mismatch" && ok "every one of the $2 ranks reported it"
  echo "$out" | grep -q "$3" && ok "rank 0's table shows: $3" || { bad "table lacks '$3'"; echo "$out" | tail -8; }
}
run_fault skip:1:5 4 "rank 1: #6 .*<- differs from rank 0"
run_fault alter:2:14 3 "rank 2: #14 all_gather unit 2 (blocks.1), 2163 elements   <- differs"

start=$(date +%s)
out=$(FSDP_FAULT=skip:1:5 timeout 60 $MPIRUN -np 3 ./fsdp --model tiny --steps 3 --batch 12 --collective-timeout 3 2>&1); rc=$?
took=$(($(date +%s) - start))
if [ $rc -eq 4 ] && [ $took -lt 30 ] && echo "$out" | grep -qE "error: the (all_gather|reduce_scatter) of unit [0-9]+ at step 1 over 3 ranks did not finish in 3 s"; then
  ok "no checker, a rank skips a collective: --collective-timeout 3 stops every rank with exit 4 in $took s, naming it: $(echo "$out" | grep -m1 'did not finish' | cut -c1-90)..."
else bad "the watchdog: exit $rc after $took s (124 = a hang):"; echo "$out" | grep -v '^ ' | tail -5; fi
exit $fail
