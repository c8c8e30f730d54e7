#!/usr/bin/env bash
# Checkpoints of zero1, the hybrid strategies, CPU offload and mixed precision, end to end
# on the tiny model, compared through --export files with tests/st_diff:
#   resume on the same ranks     bitwise identical to an uninterrupted run
#   resume under another strategy and world size: the same within 1e-5
#   (fp32 reduction order; see tests/test_distributed.c)
# A hybrid checkpoint holds one copy of the shards: the first node's.
# --cpu-offload's shards are saved from (and loaded into) the host.
source "$(dirname "$0")/lib.sh"
ARGS="--model tiny --batch 24 --log-every 1"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT

case_of() { # NAME NP ARGS... : save at 5 of 10, resume bitwise on the same ranks
  local name=$1 np=$2; shift 2
  run_fsdp "$np" "$d/$name.log" --steps 10 --save-dir "$d/$name" --save-every 5 --export "$d/$name.st" "$@"
  run_fsdp "$np" "$d/$name-r.log" --steps 10 --resume "$d/$name/step-00000005" --export "$d/$name-r.st" "$@"
  tests/st_diff "$d/$name.st" "$d/$name-r.st" && ok "$name on $np ranks: resume bitwise" || bad "$name: resume differs"
}

case_of zero1 4 --strategy zero1
[ "$(ls "$d/zero1/step-00000005" | grep -c '^shard')" -eq 4 ] && ok "zero1 writes a shard file per rank (its optimizer state)" || bad "zero1 files: $(ls "$d/zero1/step-00000005")"
run_fsdp 3 "$d/z3.log" --steps 10 --resume "$d/zero1/step-00000005" --export "$d/z3.st"
tests/st_diff "$d/zero1.st" "$d/z3.st" 1e-5 >"$d/diff" && ok "zero1 on 4 -> full_shard on 3: $(cat "$d/diff")" || bad "zero1 -> full_shard: $(cat "$d/diff")"

case_of hybrid 4 --strategy hybrid_shard --ranks-per-node 2
[ "$(ls "$d/hybrid/step-00000005" | grep -c '^shard')" -eq 2 ] && grep -q "^world 2" "$d/hybrid/step-00000005/meta.txt" \
  && ok "hybrid_shard on 2 nodes of 2: one copy of the shards (2 files, world 2)" || bad "hybrid files: $(ls "$d/hybrid/step-00000005")"
run_fsdp 2 "$d/h2.log" --steps 10 --resume "$d/hybrid/step-00000005" --export "$d/h2.st"
tests/st_diff "$d/hybrid.st" "$d/h2.st" 1e-5 >"$d/diff" && ok "hybrid_shard on 4 -> full_shard on 2: $(cat "$d/diff")" || bad "hybrid -> full_shard: $(cat "$d/diff")"
run_fsdp 4 "$d/h4.log" --steps 10 --resume "$d/zero1/step-00000005" --export "$d/h4.st" --strategy hybrid_shard_zero2 --ranks-per-node 2
tests/st_diff "$d/zero1.st" "$d/h4.st" 1e-5 >"$d/diff" && ok "zero1 -> hybrid_shard_zero2 on 2 nodes of 2: $(cat "$d/diff")" || bad "zero1 -> hybrid zero2: $(cat "$d/diff")"

case_of offload 2 --cpu-offload --strategy shard_grad_op
case_of fp16 2 --param-dtype fp16 --grad-scaler --init-scale 1e6
grep -q "^grad_scaler scale " "$d/fp16/step-00000005/meta.txt" && grep -q "step skipped" "$d/fp16.log" \
  && ok "fp16: the loss scaler's state is in meta.txt, and the resumed run skipped the same steps" || bad "fp16 scaler state: $(grep grad_scaler "$d/fp16/step-00000005/meta.txt")"
[ "$(grep -o 'loss scale [0-9]*.*' "$d/fp16.log" | tail -5)" = "$(grep -o 'loss scale [0-9]*.*' "$d/fp16-r.log" | tail -5)" ] \
  && ok "fp16: steps 6-10 used the same loss scales after the resume" || bad "scales differ after resume"
case_of bf16 3 --param-dtype bf16
grep -q "mixed precision: param_dtype bf16" "$d/bf16.log" && ok "bf16: the checkpoint keeps the fp32 master parameters" || bad "bf16 run"
exit $fail
