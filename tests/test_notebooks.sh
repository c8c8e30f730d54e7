#!/usr/bin/env bash
# tests/test_notebooks.sh — every notebook in notebooks/ runs top to bottom
# (tests/run_notebooks.py: nbclient, a fresh python3 kernel each, one per
# core at once, the repository root as working directory). First the runner
# itself is shown to fail a notebook whose assert fails, so a PASS below
# means something.
# Without the Python packages: exit 77 (skipped, never a pass), with the reason;
# `make test` installs them first (make notebook-deps).
#
#   bash tests/test_notebooks.sh          every notebook but those needing PyTorch
#   bash tests/test_notebooks.sh --torch  those (notebooks/*pytorch*), which
#                                         need .venv-torch/ (make torch-deps):
#                                         without it exit 77, saying so
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
export MPIRUN MPLBACKEND=Agg
TORCH_NOTEBOOKS=(notebooks/*pytorch*.ipynb)
if ! err=$(python3 -c "import nbclient, nbformat, ipykernel, matplotlib, numpy" 2>&1); then
  echo "cannot execute notebooks: ${err##*$'\n'}"
  echo "install them with: make notebook-deps (python3 -m pip install nbclient nbformat ipykernel matplotlib numpy)"
  exit 77
fi
[ -x ./fsdp ] || make -s fsdp || exit 1
if [ "${1:-}" = --torch ]; then
  torch_or_skip "${TORCH_NOTEBOOKS[*]}"
  python3 tests/run_notebooks.py "${TORCH_NOTEBOOKS[@]}" || bad "a notebook failed (above); its executed copy is in out/notebooks/"
  exit $fail
fi

d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
python3 - "$d/fails.ipynb" <<'PY'
import sys, nbformat
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1 + 1"),
                                     nbformat.v4.new_code_cell("assert x == 3, 'the runner must catch this'")])
nbformat.write(nb, sys.argv[1])
PY
python3 tests/run_notebooks.py --out "" "$d/fails.ipynb" >"$d/log" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "^FAIL" "$d/log" && grep -q "cell 1 .*AssertionError\|AssertionError: the runner must catch this" "$d/log"; then
  ok "the runner fails a notebook whose assert fails (exit 1, cell 1, AssertionError)"
else
  bad "the runner did not fail a failing notebook (exit $rc):"; cat "$d/log"
fi

others=()
for nb in notebooks/*.ipynb; do [[ " ${TORCH_NOTEBOOKS[*]} " == *" $nb "* ]] || others+=("$nb"); done
python3 tests/run_notebooks.py --jobs "$(nproc 2>/dev/null || echo 2)" "${others[@]}" || bad "a notebook failed (above); its executed copy is in out/notebooks/"
exit $fail
