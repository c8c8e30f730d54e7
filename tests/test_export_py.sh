#!/usr/bin/env bash
# --export writes a file Hugging Face's own safetensors reader loads: the
# names, shapes (PyTorch's: (out, in) matrices, 1-D vectors) and dtype of
# every parameter, as listed independently in the run's checkpoint
# meta.txt, and values that round-trip through numpy unchanged.
source "$(dirname "$0")/lib.sh"
python3 -c "import safetensors.numpy, numpy" 2>/dev/null || { echo "python3 with the safetensors and numpy packages is not installed (pip install safetensors numpy): cannot run the reference reader"; exit 77; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
timeout 120 $MPIRUN -np 3 ./fsdp --model tiny --steps 3 --batch 12 --save-dir "$d/ck" --export "$d/model.safetensors" >/dev/null 2>&1 || { echo "FAIL: run"; exit 1; }
python3 - "$d/model.safetensors" "$d/ck/step-00000003/meta.txt" <<'PY'
import sys, numpy as np
from safetensors.numpy import load_file
from safetensors import safe_open
tensors = load_file(sys.argv[1])
want = {}
for line in open(sys.argv[2]):
    f = line.split()
    if f and f[0] == "param":
        rows, cols = int(f[7]), int(f[8])
        want[f[1]] = (rows,) if cols == 1 else (rows, cols)
bad = 0
got = {k: v.shape for k, v in tensors.items()}
print(("ok: " if got == want else "FAIL: ") + f"{len(got)} tensors with the names and shapes of meta.txt (e.g. blocks.0.fc1.weight {got.get('blocks.0.fc1.weight')})")
bad += got != want
dtypes = {str(v.dtype) for v in tensors.values()}
print(("ok: " if dtypes == {"float32"} else "FAIL: ") + f"dtypes {dtypes}")
bad += dtypes != {"float32"}
with safe_open(sys.argv[1], framework="np") as f:
    meta = f.metadata()
print(("ok: " if meta.get("format") == "pt" else "FAIL: ") + f"__metadata__ {meta}")
bad += meta.get("format") != "pt"
finite = all(np.isfinite(v).all() for v in tensors.values())
ln = tensors["norm_f.weight"]
print(("ok: " if finite and not np.allclose(ln, 1.0) else "FAIL: ") + "values finite and trained (norm_f.weight moved away from its initial 1.0)")
bad += not (finite and not np.allclose(ln, 1.0))
sys.exit(1 if bad else 0)
PY
