# tests/lib.sh — sourced by the shell tests: the mpirun environment
# (sim/mpi-env.sh, so each test also runs on its own) and the two words
# every check ends in.
. "$(dirname "${BASH_SOURCE[0]}")/../sim/mpi-env.sh"
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
# run_fsdp NP LOG ARGS...: ./fsdp $ARGS ARGS... on NP ranks, its output in
# LOG; a run that fails (or takes 5 minutes) is a FAIL, with its last lines.
run_fsdp() {
  local np=$1 log=$2; shift 2
  timeout 300 $MPIRUN -np "$np" ./fsdp $ARGS "$@" >"$log" 2>&1 || { bad "run -np $np $*: exit $?"; tail -5 "$log"; }
}

# roofline_gpu NAME: ./fsdp --roofline's GPU for nvidia-smi's name (the SXM
# parts' peaks: a PCIe or NVL card's are lower, so its ratios read high)
roofline_gpu() {
  case "$1" in *H200*) echo h200 ;; *A100*) echo a100 ;; *) echo h100 ;; esac
}

# find_gpus TARGET: sets GPUS (how many the ranks will see), GPU_LIST
# (nvidia-smi -L) and VISIBLE (CUDA_VISIBLE_DEVICES as an array, if set);
# with no GPU, says why and exits 77: a skip, never a pass.
find_gpus() {
  local why=""
  VISIBLE=()
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    why="nvidia-smi not found (no NVIDIA driver)"
  elif ! GPU_LIST=$(nvidia-smi -L 2>&1); then
    why="nvidia-smi -L failed: $(echo "$GPU_LIST" | head -1)"
  else
    GPUS=$(grep -c '^GPU ' <<<"$GPU_LIST")
    if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
      IFS=, read -ra VISIBLE <<<"$CUDA_VISIBLE_DEVICES"
      [ ${#VISIBLE[@]} -lt "$GPUS" ] && GPUS=${#VISIBLE[@]}
    fi
    [ "$GPUS" -gt 0 ] || why="nvidia-smi -L lists no GPU${CUDA_VISIBLE_DEVICES+ visible through CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES'}"
  fi
  # nvidia-smi answers whenever a driver is loaded; CUDA itself may still
  # refuse (a driver too old for the toolkit): ask it, as fsdp-gpu will
  local probe
  if [ -z "$why" ] && make -s dev/gpu_probe >/dev/null 2>&1 && ! probe=$(dev/gpu_probe); then
    why="CUDA cannot use the GPU: $probe"
  fi
  if [ -n "$why" ]; then
    echo "no GPU here: $why (run make $1 on a machine with an NVIDIA GPU)"
    exit 77
  fi
}

# torch_or_skip WHAT: returns when PyTorch 2.x (FSDP and DCP) is in
# .venv-torch/, where make torch-deps puts it; otherwise says that WHAT
# needs it and exits 77, a skip
torch_or_skip() {
  .venv-torch/bin/python -c "import torch.distributed.fsdp, torch.distributed.checkpoint" 2>/dev/null && return
  echo "skip: $1 needs PyTorch 2.x in .venv-torch/ (make torch-deps installs it from PyPI, about 5 GB)"
  exit 77
}
