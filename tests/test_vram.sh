#!/usr/bin/env bash
# Simulated VRAM (--vram): at one budget, the `large` model (18M parameters)
# does not fit under DDP, which needs parameters + gradients + two AdamW
# moments = 16 bytes x 18M = 288 MiB per rank, while full_shard on 4 ranks
# needs a quarter of that plus the gathered root and largest unit (~97 MiB).
# DDP must fail like CUDA does (rank, size, category, unit, budget, what is
# allocated by category) with a non-zero exit; FSDP must train.
set -u
source "$(dirname "$0")/lib.sh"
ARGS="--model large --vram 160M --steps 2 --batch 16 --log-every 1"

ddp=$(timeout 120 $MPIRUN -np 4 ./fsdp $ARGS --strategy ddp 2>&1); rc=$?
echo "$ddp" | grep -A9 "out of memory" | head -10
[ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "ok: ddp exits $rc" || { echo "FAIL: ddp exit code $rc"; fail=1; }
for frag in "simulated CUDA out of memory: tried to allocate" "budget 160.00 MiB per rank" "optimizer" "HINT:"; do
  echo "$ddp" | grep -qF "$frag" && echo "ok: ddp says '$frag'" || { echo "FAIL: ddp output lacks '$frag'"; fail=1; }
done

fsdp=$(timeout 300 $MPIRUN -np 4 ./fsdp $ARGS --strategy full_shard 2>&1); rc=$?
[ $rc -eq 0 ] && echo "ok: full_shard on 4 ranks trains at the same budget" || { echo "FAIL: full_shard exit $rc"; echo "$fsdp" | tail -15; fail=1; }
peak=$(echo "$fsdp" | awk '/total \(peak of the sum\)/ {m = $6; for (i = 6; i <= NF; i++) if ($i > m) m = $i; print m}')
awk -v p="$peak" 'BEGIN {exit !(p != "" && p <= 160)}' && echo "ok: full_shard peak $peak MiB <= 160 MiB" || { echo "FAIL: full_shard peak '$peak'"; fail=1; }

# --cpu-offload: the small model on 2 ranks needs 8.4 MiB of device memory
# under full_shard (--plan says 8756992 bytes) and 4.5 MiB with its shards
# and optimizer state on the host (4763648). At 6M full_shard runs out;
# with --cpu-offload it trains, and --vram counts the device alone.
OFF="--model small --vram 6M --steps 2 --log-every 1"
out=$(timeout 120 $MPIRUN -np 2 ./fsdp $OFF 2>&1); rc=$?
[ $rc -eq 3 ] && echo "$out" | grep -qF "budget 6.00 MiB per rank" && echo "ok: full_shard at --vram 6M: out of memory (exit 3)" || { echo "FAIL: full_shard at 6M exit $rc"; fail=1; }
out=$(timeout 120 $MPIRUN -np 2 ./fsdp $OFF --cpu-offload 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "^host memory per rank" && echo "ok: --cpu-offload trains at the same budget, its shards on the host" || { echo "FAIL: offload exit $rc"; echo "$out" | tail -5; fail=1; }
exit $fail
