#!/usr/bin/env bash
# The demo path a student takes first: --compare trains DDP, then FSDP, and
# prints the side-by-side table. Checks that training makes progress (the
# loss falls well below a uniform guess, ln 256 = 5.55) and that the table
# shows FSDP holding 1/N of the parameters, gradients and optimizer state.
set -u
. "$(dirname "$0")/../sim/mpi-env.sh"
out=$(timeout 120 $MPIRUN -np 4 ./fsdp --compare --model tiny --steps 150 --batch 16 --log-every 50 2>&1)
rc=$?
echo "$out" | tail -25
fail=0
[ $rc -eq 0 ] || { echo "FAIL: exit code $rc"; fail=1; }
echo "$out" | grep -q "DDP vs FSDP on 4 ranks" || { echo "FAIL: no comparison table"; fail=1; }
for cat in parameters gradients optimizer; do
  ratio=$(echo "$out" | awk -v c="$cat" '$1 == c && NF == 4 {print $4}')
  [ "$ratio" = "0.25" ] && echo "ok: $cat ratio full_shard/no_shard = $ratio" || { echo "FAIL: $cat ratio '$ratio', expected 0.25"; fail=1; }
done
loss=$(echo "$out" | awk '/^final loss/ {print $4}')
awk -v l="$loss" 'BEGIN {exit !(l != "" && l < 3.5)}' && echo "ok: final FSDP loss $loss < 3.5" || { echo "FAIL: final loss '$loss' not below 3.5"; fail=1; }
exit $fail
