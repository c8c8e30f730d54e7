#!/usr/bin/env bash
# tests/test_gpt2_hf.sh: fsdp.c's GPT-2 against Hugging Face's transformers
# (tests/gpt2_hf.py says what and why the tolerances): a small GPT-2 made
# by transformers from a GPT2Config (no download) is read with --init-from,
# trained 4 steps on N ranks, and every loss must equal transformers' under
# torch.optim.AdamW within 1e-5; the export must load with from_pretrained
# with no missing or unexpected keys, lm_head tied, and hold AdamW's
# parameters; with --attention flash too (fsdp.c's FlashAttention against
# transformers' default attention, sdpa on the CPU). A gradient dropped on
# the transformers side must fail it.
# Needs PyTorch and transformers in .venv-torch/ (make torch-deps);
# without them: exit 77, a skip that says how to get them.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
PY=.venv-torch/bin/python
if ! $PY -c "import torch, transformers" 2>/dev/null; then
  echo "skip: the GPT-2 interop test needs PyTorch and transformers in .venv-torch/ (make torch-deps installs them from PyPI)"
  exit 77
fi
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
# four cases in one process (torch and transformers import once): 3
# ranks full_shard; shard_grad_op with transformer auto-wrap, activation
# checkpointing and accumulation; 2 ranks with --attention flash; 3 ranks
# of FSDP2 (--fsdp2), a unit per block
if $PY tests/gpt2_hf.py --mpirun "$MPIRUN" --case 3 \
    --case "3:--strategy shard_grad_op --auto-wrap transformer --activation-checkpointing --grad-accum 2" \
    --case "2:--attention flash" --case "3:--fsdp2 --auto-wrap transformer" >"$D/out" 2>&1; then
  grep '^ok' "$D/out"
else bad "the comparison failed:"; grep -E '^(ok|FAIL)' "$D/out" || tail -5 "$D/out"; fi
if $PY tests/gpt2_hf.py --mpirun "$MPIRUN" --case 2 --break-grad >"$D/out" 2>&1; then
  bad "a gradient dropped on transformers' side passed: the comparison cannot fail"
else ok "self-test: a gradient dropped on transformers' side fails it: $(grep -m1 '^FAIL' "$D/out" | cut -c1-120)"; fi
exit $fail
