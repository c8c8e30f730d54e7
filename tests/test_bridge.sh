#!/usr/bin/env bash
# tests/test_bridge.sh: PyTorch FSDP, run beside fsdp.c (bridge/fsdp_lab.py,
# lecture 12), computes the same losses, and its DCP checkpoint resumes on
# another world size as fsdp.c's --resume does. The three mistakes of the
# lecture's case studies are caught, and so is a loss off by 0.1 %, so the
# comparison can fail. Needs PyTorch 2.x in .venv-torch/ (make torch-deps);
# without it: exit 77, a skip that says how to get it.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
ARGS=""
TORCHRUN=.venv-torch/bin/torchrun
if ! .venv-torch/bin/python -c "import torch.distributed.fsdp, torch.distributed.checkpoint" 2>/dev/null; then
  echo "skip: PyTorch 2.x is not in .venv-torch/ (make torch-deps installs it from PyPI, about 5 GB)"
  exit 77
fi
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cat fsdp.h fsdp.c >"$D/data.txt" # bytes both programs train on (--data)
BASE="--model tiny --data $D/data.txt"

# fsdp.c's run (its --json: config and losses) and its initial parameters
reference() { # reference NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  run_fsdp "$np" "$D/$name.log" $BASE "$@" --json "$D/$name.json"
  run_fsdp "$np" "$D/$name.init.log" $BASE "$@" --steps 0 --export "$D/$name.st"
}
# bridge NP NAME [ARGS...]: the same run in PyTorch FSDP on NP CPU ranks; its
# output in $D/out, its exit status returned
bridge() {
  local np=$1 name=$2; shift 2
  timeout 300 $TORCHRUN --standalone --nproc-per-node "$np" bridge/fsdp_lab.py \
    --fsdp-run "$D/$name.json" --init "$D/$name.st" --data "$D/data.txt" "$@" >"$D/out" 2>&1
}
verdict() { grep -E '^(FAIL|[0-9]+ ranks)' "$D/out" | tr '\n' ' '; }
agrees() { # agrees WHAT NP NAME [ARGS...]
  local what=$1; shift
  if bridge "$@"; then ok "$what: $(verdict)"; else bad "$what: $(verdict)"; tail -5 "$D/out"; fi
}
fails() { # fails WHAT SAYING NP NAME [ARGS...]: the bridge must exit non-zero, saying SAYING
  local what=$1 saying=$2; shift 2
  if bridge "$@"; then bad "$what passed: $(verdict)"
  elif grep -qF -- "$saying" "$D/out"; then ok "$what fails, saying '$saying'"
  else bad "$what failed without '$saying':"; grep -v Warning "$D/out" | tail -4; fi
}

reference fs 4 --steps 6 --batch 24
agrees "full_shard, 4 ranks, 6 steps" 4 fs --save-dir "$D/dcp" --save-at 3
[ -f "$D/dcp/.metadata" ] && ok "a DCP checkpoint of step 3 (.metadata and $(ls "$D/dcp" | wc -l) shard files)" \
  || bad "no DCP checkpoint in $D/dcp"
agrees "the DCP checkpoint of 4 ranks resumed on 2, steps 4..6" 2 fs --resume "$D/dcp"
# fsdp.c's own resume across world sizes gives the same losses
run_fsdp 4 "$D/a.log" $BASE --steps 3 --batch 24 --save-dir "$D/ck"
run_fsdp 2 "$D/b.log" $BASE --steps 6 --batch 24 --resume "$D/ck" --json "$D/resumed.json"
# (within 1e-5: steps 4..6 on 2 ranks add the gradients in another order)
python3 - "$D/fs.json" "$D/resumed.json" <<'EOF' && ok "fsdp.c resumed 4 -> 2 ranks: steps 4..6 the same losses (1e-5)" || bad "fsdp.c's resume differs"
import json, sys
a = {s["step"]: s["loss"] for s in json.load(open(sys.argv[1]))["steps"]}
b = {s["step"]: s["loss"] for s in json.load(open(sys.argv[2]))["steps"]}
print({k: (a[k], v) for k, v in b.items()})
sys.exit(0 if b and all(abs(a[k] - v) <= 1e-5 * abs(a[k]) for k, v in b.items()) else 1)
EOF

# odd N, the other strategies, accumulation inside no_sync(), clipping
reference sgo 3 --steps 4 --batch 24 --strategy shard_grad_op --grad-accum 2 --no-sync --clip-grad-norm 0.5
agrees "shard_grad_op, 3 ranks, --grad-accum 2 --no-sync --clip-grad-norm 0.5" 3 sgo
reference ddp 2 --steps 4 --batch 24 --strategy no_shard --min-params 1000 --backward-prefetch post
agrees "no_shard, 2 ranks, --min-params 1000 --backward-prefetch post" 2 ddp

# the comparison can fail: the case studies' mistakes, and a doctored loss
reference clip 4 --steps 4 --batch 24 --clip-grad-norm 0.5
fails "torch.nn.utils.clip_grad_norm_ on an FSDP model" "clipped by different gradient norms" 4 clip --mistake clip
reference acc 2 --steps 3 --batch 24 --grad-accum 4
fails "stepping when micro_batch_index % K == 0" "a loss differs from fsdp.c's" 2 acc --mistake accumulation
fails "dist.barrier() inside if rank == 0" "Timed out" 2 acc --mistake barrier --timeout 5
python3 -c "
import json, sys
j = json.load(open(sys.argv[1])); j['steps'][1]['loss'] *= 1.001
json.dump(j, open(sys.argv[1], 'w'))" "$D/ddp.json"
fails "a loss 0.1 % off fsdp.c's" "a loss differs from fsdp.c's" 2 ddp
exit $fail
