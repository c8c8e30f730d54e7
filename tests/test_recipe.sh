#!/usr/bin/env bash
# tests/test_recipe.sh — nanoGPT's CPU recipe (bridge/gpt2_recipe.py, make
# shakespeare-gpt2), shortened to 120 steps: fsdp.c on 2 ranks and the same
# model and recipe in PyTorch, on the same Shakespeare batches from the same
# initial weights, must agree on every step's training loss and on the
# validation losses within 1e-4 (120 steps of float rounding leave them
# 1e-6 apart; a recipe flag that does not do what PyTorch does, as a bias
# decayed or a schedule without its floor, moves them 1e-3 or more); the
# export, in transformers, continues a text greedily exactly as fsdp.c's
# --sample --temperature 0. A recipe flag left out of fsdp.c's run must
# fail it. Needs .venv-torch (make torch-deps) and make shakespeare's
# text; without PyTorch: exit 77, saying how to get it.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
PY=.venv-torch/bin/python
if ! $PY -c "import torch, transformers" 2>/dev/null; then
  echo "skip: the recipe's comparison needs PyTorch and transformers in .venv-torch/ (make torch-deps installs them from PyPI)"
  exit 77
fi
timeout 300 make -s shakespeare >/dev/null || { bad "make shakespeare failed"; exit 1; }
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
short=(--steps 120 --val-every 60 --log-every 60 --tolerance 1e-4)
if $PY bridge/gpt2_recipe.py "${short[@]}" --sample 100 --generate 40 --out "$D/ok" >"$D/out" 2>&1; then
  grep -E '^(ok|ms a step)' "$D/out"
  grep -A3 '^sample (' "$D/out" | head -3 | sed 's/^/    /'
else bad "the recipe's comparison failed:"; grep -E '^(ok|FAIL|error)' "$D/out" || tail -8 "$D/out"; fi
# the comparison can fail: fsdp.c without --no-decay-bias-norm (its biases
# and LayerNorms decay), and without --min-lr (its cosine ends at 0), each
# against the PyTorch losses of the run above (torch.json)
for broken in groups min-lr; do
  if $PY bridge/gpt2_recipe.py "${short[@]}" --sample 0 --generate 0 --break-recipe "$broken" \
      --torch-json "$D/ok/torch.json" --out "$D/$broken" >"$D/out" 2>&1; then
    bad "--break-recipe $broken passed: the comparison cannot tell"
  else ok "self-test: fsdp.c's run without its $broken fails: $(grep -m1 '^FAIL' "$D/out" | cut -c1-110)"; fi
done
exit $fail
