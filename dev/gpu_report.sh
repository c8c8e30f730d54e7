#!/usr/bin/env bash
# dev/gpu_report.sh — what a GPU machine should be asked, in one command,
# its answers in one folder: `make gpu-report` (DIR=gpu-report by default).
#
# For the first run on a GPU, or a GPU lent for a few minutes: it writes
# down the machine (nvidia-smi, the driver, nvcc, MPI), builds for this
# GPU's architecture alone (make gpu builds three: sm_80, sm_90 and PTX,
# so nvcc's device passes take a third of the time), then runs
#   1. make test-gpu                          every kernel, then whole runs, against ./fsdp
#   2. BENCH_PARAM_DTYPE=bf16 make bench-gpu  tokens/s and MFU in bf16 (GPT-2: --attention flash)
#   3. kernels: where a bf16 step's time goes CUPTI's times (dev/profile/kernel_times.so) of a
#                                             step of bench-gpu's two models, one GPU,
#                                             kernel by kernel, beside the roofline
#                                             (dev/profile/kernel_times.py)
#   4. phases: the same, by phase and unit    fsdp-gpu --trace, 3 steps of each, tabled by
#                                             sim/report.py --phases
#   5. make bench-gpu                         the same as 2 in fp32, if time is left
# within REPORT_SECONDS in all (540 unless set; each part gets what is
# left), and writes DIR/summary.txt: each part's verdict and its figures,
# beside each part's whole log. Please send the folder back with an issue.
# No GPU: says why and exits 77, having written DIR/machine.txt.
set -u
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh

out=${DIR:-gpu-report} budget=${REPORT_SECONDS:-540} start=$SECONDS
case $budget in
  '' | *[!0-9]*) echo "error: REPORT_SECONDS=$budget: give a whole number of seconds (540 unless set)"; exit 2 ;;
esac
mkdir -p "$out" 2>/dev/null || { echo "error: DIR=$out: cannot make that folder; name another (DIR=...)"; exit 2; }
command -v "${NVCC:-nvcc}" >/dev/null 2>&1 || PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
{
  echo "fsdp.c $(git rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)'), $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv 2>&1
  "${NVCC:-nvcc}" --version 2>&1 | tail -2
  $MPIRUN --version 2>&1 | head -1
  echo "cores: $(nproc)"
} >"$out/machine.txt"
summary=$out/summary.txt
cp "$out/machine.txt" "$summary"
(find_gpus gpu-report) >>"$summary" || { tail -1 "$summary"; exit 77; }

# This GPU's compute capability (9.0: sm_90), unless GPU_ARCH says otherwise
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
[ -n "${GPU_ARCH:-}" ] || [ -z "$cc" ] || export GPU_ARCH="-gencode arch=compute_$cc,code=sm_$cc"
echo "build: GPU_ARCH=${GPU_ARCH:-(the Makefile default)}" >>"$summary"

left() { echo $((budget - (SECONDS - start))); }
# part NAME PATTERN COMMAND...: COMMAND's output in DIR/NAME.log, within
# the time left; the summary gets its verdict and the lines matching PATTERN
status=0
part() {
  local name=$1 pattern=$2 t rc; shift 2
  t=$(left)
  if [ "$t" -lt 30 ]; then
    echo "== $name: not run (the ${budget} s were spent)" >>"$summary"; return
  fi
  timeout "$t" "$@" >"$out/$name.log" 2>&1; rc=$?
  case $rc in
    0) echo "== $name: passed ($((SECONDS - start)) s in all)" ;;
    124) echo "== $name: stopped after $t s (REPORT_SECONDS)"; status=1 ;;
    *) echo "== $name: exit $rc"; status=1 ;;
  esac >>"$summary"
  grep -E "$pattern" "$out/$name.log" | sed 's/^/  /' >>"$summary"
}
part build 'error|FAIL' make -s -j"$(nproc)" fsdp fsdp-gpu tests/st_diff tests/test_kernels dev/bench/bench_gpu
part test-gpu '^FAIL|^[0-9]+ passed, [0-9]+ failed' make -s test-gpu
part bench-bf16 '^==|per step|tokens/s|MFU|cuBLAS|NCCL|FAIL|skipped|gemm mean|lm_head|^GELU|^    (forward|dinp|dweight|all three)' env BENCH_PARAM_DTYPE=bf16 make -s bench-gpu
# Each kernel's time in a bf16 step of both models, as CUPTI saw it on the
# GPU's clock (dev/profile/kernel_times.so): a 5-step run less a 3-step run, so
# no start-up, beside the roofline of this GPU (dev/profile/kernel_times.py)
roof=$(roofline_gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)")
kernel_table() { # NAME FLAGS...
  local name=$1 s; shift
  for s in 3 5; do
    CUDA_INJECTION64_PATH=$PWD/dev/profile/kernel_times.so KERNEL_TIMES=$out/$name.$s timeout 180 $MPIRUN -np 1 \
      ./fsdp-gpu --steps "$s" --param-dtype bf16 --collectives nccl "$@" >"$out/$name.$s.log" 2>&1 ||
      { echo "FAIL: ./fsdp-gpu --steps $s $* under dev/profile/kernel_times.so: exit $?"; tail -5 "$out/$name.$s.log"; return 1; }
  done
  ./fsdp --plan --param-dtype bf16 "$@" --roofline "$roof" >"$out/$name.roofline.txt" 2>&1 || return 1
  echo "== $name: ./fsdp-gpu --param-dtype bf16 $*, one GPU, a step kernel by kernel"
  python3 dev/profile/kernel_times.py "$out/$name.5.rank0.txt" --minus "$out/$name.3.rank0.txt" --steps 2 \
    --roofline "$out/$name.roofline.txt" --top 25
}
export -f kernel_table; export out roof MPIRUN
part kernels . bash -c "make -s dev/profile/kernel_times.so && kernel_table 1b --width 3840 --depth 9 --context 16 \
  --embed-dim 16 --batch 4096 && kernel_table gpt2 --model gpt2 --batch 8 --context 1024 --attention flash"
# fsdp-gpu's flags for bench-gpu's two models (dev/bench/bench_gpu.sh), in bf16 on one GPU, traced
one="$MPIRUN -np 1 ./fsdp-gpu --steps 3 --param-dtype bf16 --collectives nccl --trace $out"
part phases . bash -c "$one/1b.json --width 3840 --depth 9 --context 16 --embed-dim 16 \
  --batch 4096 >$out/1b.log 2>&1 && $one/gpt2.json --model gpt2 --batch 8 --context 1024 \
  --attention flash >$out/gpt2.log 2>&1 && python3 sim/report.py --phases $out/1b.json $out/gpt2.json"
part bench-fp32 '^==|per step|MFU|cuBLAS|FAIL' make -s bench-gpu
cat "$summary"
echo "the logs: $out/"
exit $status
