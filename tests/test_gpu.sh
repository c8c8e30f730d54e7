#!/usr/bin/env bash
# tests/test_gpu.sh — the GPU build (./fsdp-gpu) against the CPU build (./fsdp),
# on this machine's NVIDIA GPUs; `make test-gpu` runs it. With FSDP_EMU=1
# (`make test-gpu-emu`, and `make test`) the same checks run the GPU build on
# the emulator (dev/emu/: ./fsdp-emu, the CUDA path compiled by g++ and run by
# the CPU), on 4 emulated GPUs, after checking the emulator itself (0e.).
#
#   0. every kernel alone against the CPU's arithmetic (tests/test_kernels.cu):
#      LayerNorm, the column sums, cuBLAS's Linear, gelu_new, AdamW, attention,
#      each within a tolerance it derives, with its time
#   a. 1 GPU rank == 1 CPU rank within rounding (tiny, small, gpt2-tiny and
#      gpt2-mini: cuBLAS attention against the CPU's rows; fp32 and --tf32)
#   b. a GPU run repeats bitwise (on the emulator, with its threads reversed)
#   c. 2 and 4 ranks sharing ONE GPU (--collectives mpi and ring) == 1 GPU rank
#   d. NCCL on every GPU here == 1 GPU rank
#   e. checkpoints move CPU -> GPU -> CPU and land where an uninterrupted run does
#   f. --vram: out of memory exits 3 and says so
#   g. bad input exits 2 on every rank
#   h. more ranks than GPUs under NCCL stops with a HINT towards --collectives mpi
#   i. --trace writes JSON
#   j. the course's options: zero1 and hybrid_shard == 1 GPU rank, --cpu-offload
#      and bf16 (the MLP on 1 and 4 ranks, gpt2-tiny) within rounding, --attention flash
#      (gpt2-mini in bf16 on the tensor cores, gpt2-tiny in fp32), --plan the
#      CPU build's plan
#   k. (the emulator only) a NCCL collective that never finishes: the watchdog
#      ends every rank, exit 4, naming it
#   l. (the emulator only) what a step asks of the GPU, counted: no cudaMalloc,
#      4 waits of the host, the forward's all-gathers not behind its compute;
#      and under all of them the emulator's stream-order
#      checker (dev/emu/runtime.cpp, section 7) stops any run with a race between
#      the compute and the communication streams
#   m. (the emulator only) a bf16 step's passes over the gradient shard,
#      counted kernel by kernel: each reduce-scatter's mean taken in one
#      (unpack_mean_one), none multiplied by 1; AdamW writing the 16-bit
#      shard; no GELU kernel (GPT-2's GELU in cuBLASLt's epilogues)
#
# One line per check (ok/FAIL), then "N passed, N failed"; exit 1 if any failed.
# No GPU: says why and exits 77 (skipped, never a pass). Every run is under
# `timeout`; temporary files live in one mktemp -d, removed at exit.
set -u
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh

# ---- is there a GPU? ----------------------------------------------------------
# nvidia-smi lists the machine's GPUs; CUDA_VISIBLE_DEVICES, when set, is what
# the ranks will see of them (its first entry is "one GPU" for section c).
# FSDP_EMU=1 (make test-gpu-emu): the same checks on the emulator's GPUs
# (dev/emu/: the GPU build on this CPU), FSDP_EMU_GPUS of them (4 unless set).
if [ -n "${FSDP_EMU:-}" ]; then
  CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
  # NCCL's header: the toolkit's, the system's, NCCL_HOME's, or pip's (as make gpu finds it)
  nccl_h=$(ls "$CUDA_INC/nccl.h" /usr/include/nccl.h "${NCCL_HOME:-/nonexistent}/include/nccl.h" 2>/dev/null | head -1)
  [ -n "$nccl_h" ] || python3 -c 'import nvidia.nccl' 2>/dev/null && nccl_h=pip
  if [ ! -f "$CUDA_INC/cuda_runtime.h" ] || [ ! -f "$CUDA_INC/cublas_v2.h" ] || [ -z "$nccl_h" ]; then
    echo "skip: the emulator compiles the GPU build against the CUDA toolkit's headers (cuda_runtime.h, cublas_v2.h in $CUDA_INC) and NCCL's (nccl.h), and some are missing: install the CUDA toolkit and NCCL (or set CUDA_HOME, NCCL_HOME)"
    exit 77
  fi
  GPU_BIN=fsdp-emu KERNELS=tests/test_kernels-emu EMU_TEST=tests/test_emu-emu
  export FSDP_EMU_GPUS=${FSDP_EMU_GPUS:-4}
  VISIBLE=(); [ -n "${CUDA_VISIBLE_DEVICES+set}" ] && IFS=, read -ra VISIBLE <<<"$CUDA_VISIBLE_DEVICES"
  GPUS=${#VISIBLE[@]}; [ "$GPUS" -gt 0 ] || GPUS=$FSDP_EMU_GPUS
  GPU_LIST=$(for ((g = 0; g < FSDP_EMU_GPUS; g++)); do echo "GPU $g: fsdp.c's CPU emulator (dev/emu/)"; done)
else
  find_gpus test-gpu
  GPU_BIN=fsdp-gpu KERNELS=tests/test_kernels EMU_TEST=
fi
ONE_GPU=${VISIBLE[0]:-0}
echo "GPUs the ranks see: $GPUS; nvidia-smi -L:"
sed 's/ (UUID.*//; s/^/  /' <<<"$GPU_LIST"

d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
# nvcc where the CUDA toolkit puts it, if it is not on PATH already
command -v "${NVCC:-nvcc}" >/dev/null 2>&1 || PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
make -s -j"$(nproc)" fsdp "$GPU_BIN" tests/st_diff "$KERNELS" $EMU_TEST >"$d/build.log" 2>&1 || { cat "$d/build.log"; echo "FAIL: make fsdp $GPU_BIN tests/st_diff $KERNELS $EMU_TEST"; echo "0 passed, 1 failed"; exit 1; }

# ---- helpers --------------------------------------------------------------------
n_ok=0 n_bad=0
pass() { ok "$@"; n_ok=$((n_ok + 1)); }
flunk() { bad "$@"; n_bad=$((n_bad + 1)); }

# ---- 0e. the emulator itself ----------------------------------------------------------
# Only on the emulator: a pass below means something only if the emulator
# keeps CUDA's promises (barriers, shuffles, cp.async, NCCL) and refuses what a
# GPU refuses; and what would hang or fault on a GPU must stop the job.
if [ -n "$EMU_TEST" ]; then
  echo "0e. the emulator against what CUDA promises"
  # stderr apart: the refusals it provokes say so there, as they should
  if timeout 120 $MPIRUN -np 3 "$EMU_TEST" >"$d/emu.log" 2>"$d/emu.err"; then
    sed 's/^/   /' "$d/emu.log"
    pass "0e. $EMU_TEST on 3 ranks: $(tail -1 "$d/emu.log")"
  else
    sed 's/^/   /' "$d/emu.log" "$d/emu.err"
    flunk "0e. $EMU_TEST on 3 ranks: $(tail -1 "$d/emu.log")"
  fi
  for case in "host-pointer|argument 1 (0x" "deadlock|is stuck: 1 thread(s) wait at __syncthreads and 31" \
              "misaligned|an ldmatrix row address off 16 bytes" \
              "stream-race|sum_into on stream 2 uses it after touch on stream 1, and nothing orders the two"; do
    IFS='|' read -r arg frag <<<"$case"
    out=$(timeout 60 $MPIRUN -np 1 "$EMU_TEST" "$arg" 2>&1); rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "$frag" <<<"$out" \
      && pass "0e. $EMU_TEST $arg stops the job (exit $rc): '$frag'" \
      || { flunk "0e. $arg: exit $rc$([ $rc -eq 124 ] && echo ' (hung)'), want non-zero and '$frag'"; tail -4 <<<"$out" | sed 's/^/      /'; }
  done
  # the emulator's settings refuse what they cannot mean, on every rank
  for bad in FSDP_EMU_GPUS=0 FSDP_EMU_GPUS=abc FSDP_EMU_NCCL_HANG=-1 FSDP_EMU_ORDER=backwards \
             FSDP_EMU_STATS=/nonexistent/counts; do
    codes=$(env "$bad" timeout 60 $MPIRUN -np 2 bash -c '"$@" >/dev/null 2>&1; echo $?' _ \
      "./$GPU_BIN" --model tiny --batch 8 --steps 1 --collectives nccl 2>/dev/null | sort | paste -sd' ')
    [ "$codes" = "2 2" ] && pass "0e. $bad: exit 2 on both ranks" || flunk "0e. $bad: exits '$codes' (want '2 2')"
  done
fi

# ---- 0. each kernel alone ----------------------------------------------------------
# Before the end-to-end runs: a kernel that is wrong is named here, not
# found later as a loss that drifts. One GPU, one rank.
# (On the emulator the pass in reverse order below runs beside this one:
# each is one thread.)
if [ -n "$EMU_TEST" ]; then
  mkdir -p "$d/ompi.kernels_r" # its own Open MPI session directory (train_start says why)
  OMPI_MCA_orte_tmpdir_base="$d/ompi.kernels_r" FSDP_EMU_ORDER=reverse \
    timeout 300 $MPIRUN -np 1 "$KERNELS" >"$d/kernels_r.log" 2>&1 &
  reversed=$!
fi
echo "0. each kernel against the CPU's arithmetic"
if CUDA_VISIBLE_DEVICES=$ONE_GPU timeout 300 $MPIRUN -np 1 "$KERNELS" >"$d/kernels.log" 2>&1; then
  sed 's/^/   /' "$d/kernels.log"
  pass "0. $(tail -1 "$d/kernels.log") kernel checks"
else
  sed 's/^/   /' "$d/kernels.log"
  flunk "0. $KERNELS: $(tail -1 "$d/kernels.log")"
fi

# ... and on the emulator once more with each block's threads in reverse
# order: a missing barrier shows only where a thread runs before the one
# whose write it reads, and the two orders put every pair both ways round.
if [ -n "$EMU_TEST" ]; then
  echo "0r. each kernel again, threads in reverse order (FSDP_EMU_ORDER=reverse)"
  if wait $reversed; then
    pass "0r. threads in reverse order: $(tail -1 "$d/kernels_r.log") kernel checks"
  else
    grep -E '^FAIL' "$d/kernels_r.log" | sed 's/^/   /'
    flunk "0r. threads in reverse order: $(tail -1 "$d/kernels_r.log")"
  fi
fi

# train NAME BINARY NP ARGS...: one run of ./BINARY on NP ranks, output in
# $d/NAME.log, parameters exported to $d/NAME.st. A failed run is a FAIL.
train() { train_start "$@" && train_end "$1"; }
# train_start NAME BINARY NP ARGS...: the same run in the background;
# train_end NAME waits for it and reports as train does. A check's runs of
# one rank each (the CPU build's, the GPU build's) take a core each this way,
# not one after the other. Each has its own Open MPI session directory, as
# in tests/test_cli.sh (an mpirun ending removes the shared one).
declare -A RUN_PID RUN_CMD
train_start() {
  local name=$1 bin=$2 np=$3; shift 3
  RUN_CMD[$name]="./$bin on $np rank(s) $*"
  mkdir -p "$d/ompi.$name"
  OMPI_MCA_orte_tmpdir_base="$d/ompi.$name" timeout 300 $MPIRUN -np "$np" "./$bin" "$@" \
    --export "$d/$name.st" >"$d/$name.log" 2>&1 &
  RUN_PID[$name]=$!
}
train_end() {
  local name=$1 rc
  wait "${RUN_PID[$name]}"
  rc=$?
  [ $rc -eq 0 ] && return 0
  flunk "$name: ${RUN_CMD[$name]}: exit $rc$([ $rc -eq 124 ] && echo ' (timed out)')"
  tail -6 "$d/$name.log" | sed 's/^/      /'
  return 1
}
# train_both NAME ARGS...: NAME_cpu on ./fsdp and NAME_gpu on the GPU
# build, one rank each, at once; 0 when both ran to their end
train_both() {
  local name=$1 rc=0
  shift
  train_start "${name}_cpu" fsdp 1 "$@"
  train_start "${name}_gpu" "$GPU_BIN" 1 "$@"
  train_end "${name}_cpu" || rc=1
  train_end "${name}_gpu" || rc=1
  return $rc
}
# The loss of every printed step (--log-every 1), one per line, as printed (4 decimals).
losses() { grep -o '^step *[0-9]*/[0-9]* | loss [0-9.]*' "$1" | awk '{print $NF}'; }
# The last step's loss from a --trace file, to 6 decimals (the step lines print 4).
final_loss() { grep -o '"final_loss":[^,]*' "$1" | head -1 | cut -d: -f2; }
# The first step's loss from a --json file, to 9 digits.
first_loss() { grep -o '{"step": 1, "loss": [^,]*' "$1" | head -1 | cut -d: -f3 | tr -d ' '; }

# check_losses WHAT TOL LOG_A LOG_B: the printed losses, step by step, within TOL.
check_losses() {
  local what=$1 tol=$2 r
  r=$(paste <(losses "$3") <(losses "$4") | awk -v t="$tol" '
      NF != 2 { odd = 1 } { x = $1 - $2; if (x < 0) x = -x; if (x > m) m = x; n++ }
      END { printf "max |dloss| %.1e over %d steps (tol %s)", m, n, t; exit odd || n == 0 || m > t + 1e-9 }')
  [ $? -eq 0 ] && pass "$what: $r" \
    || flunk "$what: $r; losses $(losses "$3" | paste -sd' ') vs $(losses "$4" | paste -sd' ')"
}
# check_norms WHAT RELTOL LOG_A LOG_B: the gradient's norm of every step
# (printed under --clip-grad-norm), within RELTOL of each other. AdamW's
# step, m / sqrt(v), hides a gradient's scale, so the losses cannot see a
# reduce-scatter that skipped its predivide (2x) or divided by N twice; the
# norm does.
norms() { grep -o 'grad norm [0-9.]*' "$1" | awk '{print $3}'; }
check_norms() {
  local r
  r=$(paste <(norms "$3") <(norms "$4") | awk -v t="$2" '
      NF != 2 { odd = 1 } { x = ($1 - $2) / $2; if (x < 0) x = -x; if (x > m) m = x; n++ }
      END { printf "max relative difference %.1e over %d steps (tol %s)", m, n, t; exit odd || n == 0 || m > t }')
  [ $? -eq 0 ] && pass "$1: $r" || flunk "$1: $r; norms $(norms "$3" | paste -sd' ') vs $(norms "$4" | paste -sd' ')"
}
# check_final_loss WHAT TOL JSON_A JSON_B: the last step's loss, to 6
# decimals, from two --trace files; with LOSS=first_loss, the first
# step's, from two --json files.
check_final_loss() {
  local a b
  a=$(${LOSS:-final_loss} "$3") b=$(${LOSS:-final_loss} "$4")
  awk -v a="$a" -v b="$b" -v t="$2" 'BEGIN { x = a - b; if (x < 0) x = -x; exit !(a != "" && b != "" && x <= t + 1e-9) }' \
    && pass "$1: $a vs $b (tol $2)" || flunk "$1: $a vs $b (tol $2)"
}
# check_params WHAT TOL A.st B.st: every exported parameter within TOL.
check_params() {
  local r
  r=$(tests/st_diff "$3" "$4" "$2" 2>&1) && pass "$1: $r" || flunk "$1: $r"
}
# A loose parameter bound (a.) passes a wrong learning rate or a slightly
# wrong gradient too; the losses catch those. Where the worst element is
# beyond 1e-4 this says so, for a person to look at (not counted).
note_params() {
  tests/st_diff "$2" "$3" 1e-4 >/dev/null 2>&1 ||
    echo "note: $1: some parameter differs by more than 1e-4 (an Adam step the other way on a noise-level gradient, or a bug the losses should show)"
}

LR=0.003

# ---- a. one GPU rank == one CPU rank -------------------------------------------
# Same flags, same seed: the same mathematics, summed in a different order
# (cuBLAS picks its own blocking; the CPU sums each dot product in a fixed
# increasing order) and with CUDA's expf/tanhf/logf instead of glibc's (both
# within 2 ulp). Tolerances, fp32:
#  - the first step's loss (no update yet), from --json (9 digits): 1e-5.
#    A dot product of K terms differs by ~sqrt(K) * 2^-24 relative (K <= 512
#    here: ~1.4e-6), a few such layers deep; the loss (~5.5, ulp 4.8e-7) is a
#    mean over the batch, so ~1e-6 is expected; 1e-5 is 20 ulps. A wrong
#    kernel (transposed weight, wrong GELU or norm) is off by > 1e-3.
#  - parameters after K steps: 2 * lr * K. Adam's step is lr * m / sqrt(v),
#    normalised: an element whose gradient is rounding noise (mathematically
#    ~0) steps +lr on one build and -lr on the other, whatever the size of
#    the noise, so one such element can differ by 2 * lr per step. Most
#    elements agree to ~1e-6 (st_diff prints the worst); a scrambled layout
#    (weights and biases are U(+-1/sqrt(fan_in)) at init, up to 0.04-0.25
#    here) lands outside.
#  - the printed losses of every step: 2e-4 (two units of the 4th decimal,
#    one of them for the rounding of the print). The elements that step the
#    other way are, by the same token, those the loss does not depend on, so
#    the loss keeps the tight agreement; a wrong gradient or update changes
#    the fall of the loss (~0.03-0.06 per step here) by far more.
# --tf32: cuBLAS rounds the GEMM inputs to TF32 (10-bit mantissa: 2^-11 =
# 4.9e-4 relative per operand), so a dot product is off by ~1e-3 of its size
# and, a few layers deep, a logit (|logit| < 1 at init) by ~1e-3; the loss,
# a mean over the batch, by a few 1e-4: the first loss within 2e-3, the
# printed losses within 5e-3. The parameters keep the 2 * lr * K bound
# (Adam's normalised step bounds them whatever the gradient error).
STEPS=4
PTOL=$(awk -v lr=$LR -v k=$STEPS 'BEGIN { print 2 * lr * k }')
# On the emulator gpt2-mini's fp32 runs would add 20 s to what gpt2-tiny
# checks of the same code (the kernels at GPT-2's own shapes are section 0's;
# gpt2-mini's shapes reach the GPU's code in bf16, section j's flash run).
for m in tiny small gpt2-tiny gpt2-mini; do
  if [ -n "${FSDP_EMU:-}" ] && [ "$m" = gpt2-mini ]; then
    echo "note: a. gpt2-mini in fp32 runs on a GPU only (the emulator checks fp32 and TF32 on tiny, small and gpt2-tiny)"
    continue
  fi
  A=(--model "$m" --batch 32 --log-every 1 --lr "$LR" --steps "$STEPS")
  train_start "c_$m" fsdp 1 "${A[@]}" --json "$d/c_$m.json"
  train_start "g_$m" "$GPU_BIN" 1 "${A[@]}" --json "$d/g_$m.json"
  train_start "t_$m" "$GPU_BIN" 1 "${A[@]}" --tf32 --json "$d/t_$m.json"
  train_end "c_$m"; c=$?
  train_end "g_$m"; g=$?
  train_end "t_$m"; t=$?
  if [ $c -eq 0 ] && [ $g -eq 0 ]; then
    LOSS=first_loss check_final_loss "a. $m, first step's loss, GPU vs CPU (fp32)" 1e-5 "$d/c_$m.json" "$d/g_$m.json"
    check_losses "a. $m, losses of $STEPS steps, GPU vs CPU (fp32)" 2e-4 "$d/c_$m.log" "$d/g_$m.log"
    check_params "a. $m, parameters after $STEPS steps, GPU vs CPU (fp32; tol 2*lr*steps)" "$PTOL" "$d/c_$m.st" "$d/g_$m.st"
    note_params "a. $m, fp32" "$d/c_$m.st" "$d/g_$m.st"
  fi
  if [ $t -eq 0 ] && [ $c -eq 0 ]; then
    LOSS=first_loss check_final_loss "a. $m, first step's loss, GPU --tf32 vs CPU" 2e-3 "$d/c_$m.json" "$d/t_$m.json"
    check_losses "a. $m, losses of $STEPS steps, GPU --tf32 vs CPU" 5e-3 "$d/c_$m.log" "$d/t_$m.log"
    check_params "a. $m, parameters after $STEPS steps, GPU --tf32 vs CPU (tol 2*lr*steps)" "$PTOL" "$d/c_$m.st" "$d/t_$m.st"
    tests/st_diff "$d/g_$m.st" "$d/t_$m.st" >/dev/null 2>&1 &&
      echo "note: a. $m: --tf32 gave the same bits as fp32 (cuBLAS chose no TF32 kernel at these shapes)"
  fi
done

# ---- b. a GPU run repeats bitwise ---------------------------------------------------
# The kernels use no float atomics whose order varies, and cuBLAS is
# deterministic for a given GPU, shapes and stream, so the same run twice
# gives the same bits: exports bitwise equal, every printed loss identical.
# The emulator runs a block's threads in one fixed order, so there the
# second run starts them from the last (FSDP_EMU_ORDER=reverse): the same
# bits then say too that no kernel's result depends on its threads' order.
AGAIN_ORDER=index AGAIN=""
[ -n "${FSDP_EMU:-}" ] && AGAIN_ORDER=reverse AGAIN=" (the second with threads in reverse order)"
if [ -f "$d/g_small.st" ] && FSDP_EMU_ORDER=$AGAIN_ORDER train g_small_again "$GPU_BIN" 1 --model small --batch 32 --log-every 1 --lr "$LR" --steps $STEPS; then
  r=$(tests/st_diff "$d/g_small.st" "$d/g_small_again.st" 2>&1) && pass "b. small, the same GPU run twice$AGAIN: $r" || flunk "b. repeat: $r"
  [ -n "$(losses "$d/g_small.log")" ] && [ "$(losses "$d/g_small.log")" = "$(losses "$d/g_small_again.log")" ] \
    && pass "b. the same GPU run twice$AGAIN: every printed loss identical" || flunk "b. losses differ: $(losses "$d/g_small.log" | paste -sd' ') vs $(losses "$d/g_small_again.log" | paste -sd' ')"
fi

# ---- c. N ranks on ONE GPU == 1 GPU rank -------------------------------------------
# With --collectives mpi or ring the collectives go through host memory, so
# ranks can share a GPU (CUDA_VISIBLE_DEVICES shows them one). N ranks and 1
# rank differ only in the order the batch's gradient contributions are summed
# (and, on a GPU, cuBLAS may block a smaller batch differently), so the CPU
# suite's N-vs-1 tolerance holds (tests/test_distributed.c, test_equivalence:
# fp32 reduction order is ~1e-7 relative, 1e-5 leaves two orders of margin;
# a real bug moves parameters by ~lr = 3e-3 per step): parameters and the
# final loss (from --trace, 6 decimals) within 1e-5; the printed losses,
# which have 4 decimals, within one unit of the last (1e-4).
EQB=840                                   # divides by 1..8 ranks
[ $((EQB % GPUS)) -eq 0 ] || EQB=$((840 * GPUS))
# --clip-grad-norm 1000 never clips here (the norms are near 1) but prints
# each step's gradient norm, which AdamW's step hides (m / sqrt(v)): a
# reduction that forgot to divide by N moves the parameters only through
# AdamW's eps (4e-4 on 4 ranks, seen by mutation), and the norm N times.
# Printed to 4 decimals of norms near 1, within 1e-3 relative (the fp32
# orders differ by ~1e-7; the print's rounding is 5e-5).
EQ=(--model tiny --steps 8 --batch "$EQB" --log-every 1 --lr "$LR" --clip-grad-norm 1000)
# equivalent NAME: parameters, printed losses, gradient norms and final loss of run NAME against eq1
equivalent() {
  check_params "$2: parameters after 8 steps (tol 1e-5)" 1e-5 "$d/eq1.st" "$d/$1.st"
  check_losses "$2: printed losses" 1e-4 "$d/eq1.log" "$d/$1.log"
  check_norms "$2: gradient norms" 1e-3 "$d/eq1.log" "$d/$1.log"
  check_final_loss "$2: final loss" 1e-5 "$d/eq1.json" "$d/$1.json"
}
train eq1 "$GPU_BIN" 1 "${EQ[@]}" --trace "$d/eq1.json"
if [ -f "$d/eq1.st" ]; then
  for impl in mpi ring; do
    for n in 2 4; do
      CUDA_VISIBLE_DEVICES=$ONE_GPU train "eq_${impl}_$n" "$GPU_BIN" $n "${EQ[@]}" --collectives $impl --trace "$d/eq_${impl}_$n.json" &&
        equivalent "eq_${impl}_$n" "c. $n ranks on one GPU, --collectives $impl, vs 1 GPU rank"
    done
  done
  # FSDP2 (fsdp.c section 14): its copy-out and chunk_cat as GPU kernels, and
  # the post-forward groups' all-gathers
  CUDA_VISIBLE_DEVICES=$ONE_GPU train eq_fsdp2_4 "$GPU_BIN" 4 "${EQ[@]}" --collectives mpi --fsdp2 \
    --reshard-after-forward 2 --trace "$d/eq_fsdp2_4.json" &&
    equivalent eq_fsdp2_4 "c. FSDP2 (--fsdp2 --reshard-after-forward 2), 4 ranks on one GPU, vs 1 GPU rank"
fi

# ---- d. NCCL on every GPU here == 1 GPU rank ------------------------------------------
# One rank per GPU, collectives on the GPUs (NCCL): the same tolerance as c.
# With one GPU there is nothing to compare across GPUs: -np 1 with nccl named
# explicitly must be the default run, bit for bit.
if [ -f "$d/eq1.st" ] && [ "$GPUS" -ge 2 ]; then
  train "eq_nccl_$GPUS" "$GPU_BIN" "$GPUS" "${EQ[@]}" --collectives nccl --trace "$d/eq_nccl_$GPUS.json" &&
    equivalent "eq_nccl_$GPUS" "d. $GPUS ranks on $GPUS GPUs, --collectives nccl, vs 1 GPU rank"
elif [ -f "$d/eq1.st" ]; then
  if train eq_nccl_1 "$GPU_BIN" 1 "${EQ[@]}" --collectives nccl; then
    r=$(tests/st_diff "$d/eq1.st" "$d/eq_nccl_1.st" 2>&1) && pass "d. -np 1 --collectives nccl: $r" || flunk "d. -np 1 nccl: $r"
  fi
  echo "note: d. one GPU here: the multi-GPU NCCL comparison (N ranks on N GPUs vs 1) needs >= 2 GPUs"
fi

# ---- e. checkpoints: CPU -> GPU -> CPU -----------------------------------------------
# A checkpoint is the same file on both builds, resharded on load: 2 CPU ranks
# train steps 1-4, GPU ranks (1; and 2 with --collectives mpi) resume to 8,
# 3 CPU ranks resume to 12. The result must be an uninterrupted 12-step CPU
# run's within a.'s tolerances: the builds first differ at step 5, so the
# parameters within 2 * lr * 8 (8 steps from there), every printed loss of
# steps 1-12 within 2e-4. A lost optimizer state or a misplaced shard shows
# in the losses right after the resume.
CK=(--model tiny --batch 60 --log-every 1 --lr "$LR")
CKTOL=$(awk -v lr=$LR 'BEGIN { print 2 * lr * 8 }')
if train ck_full fsdp 2 "${CK[@]}" --steps 12 && train ck_cpu fsdp 2 "${CK[@]}" --steps 4 --save-dir "$d/ck_cpu"; then
  for g in 1 2; do
    coll=""; [ $g -eq 2 ] && coll="--collectives mpi"   # 2 ranks may share one GPU
    # shellcheck disable=SC2086  # $coll is empty or two words
    train "ck_gpu$g" "$GPU_BIN" $g "${CK[@]}" $coll --steps 8 --resume "$d/ck_cpu" --save-dir "$d/ck_gpu$g" &&
      train "ck_end$g" fsdp 3 "${CK[@]}" --steps 12 --resume "$d/ck_gpu$g" || continue
    grep -q "resumed from $d/ck_cpu/step-00000004" "$d/ck_gpu$g.log" && grep -q "resumed from $d/ck_gpu$g/step-00000008" "$d/ck_end$g.log" \
      && pass "e. $g GPU rank(s)${coll:+ $coll} resumed the CPU's step 4 and saved step 8; 3 CPU ranks resumed that" \
      || flunk "e. resume lines missing: $(grep -h 'resumed' "$d/ck_gpu$g.log" "$d/ck_end$g.log")"
    check_params "e. CPU(2) -> GPU($g) -> CPU(3) vs 12 uninterrupted CPU steps: parameters (tol 2*lr*8)" "$CKTOL" "$d/ck_full.st" "$d/ck_end$g.st"
    note_params "e. CPU(2) -> GPU($g) -> CPU(3)" "$d/ck_full.st" "$d/ck_end$g.st"
    cat "$d/ck_cpu.log" "$d/ck_gpu$g.log" "$d/ck_end$g.log" >"$d/ck_chain$g.log"
    check_losses "e. CPU(2) -> GPU($g) -> CPU(3): losses of steps 1-12" 2e-4 "$d/ck_full.log" "$d/ck_chain$g.log"
  done
fi

# ---- f. out of memory under --vram ---------------------------------------------------
# The small model's shard state alone (16 bytes per parameter) is ~9 MiB:
# 1 MiB cannot hold it, and the GPU build must fail like the simulator does.
out=$(timeout 120 $MPIRUN -np 1 "./$GPU_BIN" --model small --batch 32 --steps 2 --vram 1M 2>&1); rc=$?
[ $rc -eq 3 ] && grep -q "out of memory" <<<"$out" && pass "f. --vram 1M: exit 3, 'out of memory' reported" \
  || { flunk "f. --vram 1M: exit $rc (want 3 and 'out of memory')"; tail -8 <<<"$out" | sed 's/^/      /'; }

# ---- g. bad input: exit 2 on every rank ---------------------------------------------------
# Each rank runs under a shell that writes down the rank's own exit code and
# then exits 0, so mpirun never kills a rank before it has finished on its
# own; the error is printed once (rank 0). --collectives mpi lets 2 ranks
# share a GPU, so the bad option is the only thing wrong.
per_rank_exits() { # TAG NP ARGS...: prints each rank's exit code, by rank
  local tag=$1 np=$2; shift 2
  # bash -c SCRIPT $0 ARGS: $0 is the file prefix, "$@" the command
  timeout 60 $MPIRUN -np "$np" bash -c 'r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}
    "$@" >"$0.out.$r" 2>&1; echo $? >"$0.rc.$r"' "$d/$tag" "./$GPU_BIN" "$@" >/dev/null 2>&1
  local rc=$? r
  [ $rc -eq 124 ] && { echo "timeout"; return; }
  for ((r = 0; r < np; r++)); do cat "$d/$tag.rc.$r" 2>/dev/null || echo "none"; done | paste -sd' ' -
}
for case in "batch7|--model tiny --batch 7 --collectives mpi|does not divide by 2 ranks" \
            "strategy|--strategy nope --collectives mpi|unknown strategy 'nope'"; do
  IFS='|' read -r tag args frag <<<"$case"
  # shellcheck disable=SC2086  # $args is a list of options
  codes=$(per_rank_exits "$tag" 2 $args)
  errors=$(cat "$d/$tag".out.* 2>/dev/null | grep -c '^error:')
  [ "$codes" = "2 2" ] && [ "$errors" -eq 1 ] && cat "$d/$tag".out.* | grep -qF "$frag" \
    && pass "g. $args on 2 ranks: exit 2 on each rank, one error line ('$frag')" \
    || { flunk "g. $args: exits per rank '$codes' (want '2 2'), $errors error line(s)"; cat "$d/$tag".out.* 2>/dev/null | head -5 | sed 's/^/      /'; }
done

# ---- h. more ranks than GPUs under NCCL ----------------------------------------------
# NCCL needs a GPU per rank: one more rank than GPUs must stop (not hang, not
# share a GPU silently) and point to the host-staged collectives.
n=$((GPUS + 1))
out=$(timeout 60 $MPIRUN -np $n "./$GPU_BIN" --model tiny --batch $((12 * n)) --steps 2 --collectives nccl 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "HINT" <<<"$out" && grep -qF -- "--collectives mpi" <<<"$out" \
  && pass "h. $n ranks on $GPUS GPU(s) with nccl: exit $rc, HINT names --collectives mpi" \
  || { flunk "h. $n ranks on $GPUS GPU(s) with nccl: exit $rc$([ $rc -eq 124 ] && echo ' (hung: timed out)'), want non-zero with a HINT naming --collectives mpi"; tail -6 <<<"$out" | sed 's/^/      /'; }

# ---- i. --trace writes JSON ----------------------------------------------------------
# The traces written above: 1 GPU rank (NCCL) and 2 ranks sharing a GPU (host-staged).
if command -v python3 >/dev/null 2>&1; then
  for t in eq1 eq_mpi_2; do
    [ -f "$d/$t.json" ] || continue
    r=$(python3 -m json.tool "$d/$t.json" 2>&1 >/dev/null) && grep -q '"traceEvents"' "$d/$t.json" \
      && pass "i. --trace from run $t: python3 -m json.tool parses it, it has traceEvents" || flunk "i. --trace $t: $r"
  done
else
  echo "note: i. python3 not found: the trace JSON was not checked (not counted)"
fi

# ---- j. the course's options (lectures 10-16) on a GPU -------------------------------
# The options change where state lives and how it is rounded, not the
# mathematics, so each is held to the tolerances above:
#  - zero1, and hybrid_shard as 2 nodes of 2 (4 ranks sharing one GPU over
#    --collectives mpi, or NCCL across 4 GPUs when there are 4), against
#    eq1 (1 GPU rank): c.'s N-vs-1 tolerances;
#  - --cpu-offload on 1 GPU rank against the same run without it (fp32,
#    and bf16 with the bf16 tolerances below): AdamW
#    runs on the CPU instead of the GPU, and nvcc contracts its a*b+c into
#    fused multiply-adds where the host compiler does not, so not bitwise:
#    a.'s GPU-vs-CPU tolerances (the same kernels otherwise);
#  - bf16 on 1 GPU rank against bf16 on 1 CPU rank: both round every stored
#    value to bf16 the same way (one FSDP_HD function), so they part only
#    where cuBLAS's and the CPU's fp32 sums, differing by ~1e-6 relative
#    (a.), round to different bf16 neighbours: one bf16 ulp (2^-8) on a few
#    values. On the CPU suite the like comparison (N ranks vs 1 in bf16)
#    stays within 5e-4 relative over 8 steps; the losses are held to 1e-2
#    (abs, losses ~5), the parameters to a.'s 2 * lr * K;
#  - --plan: the GPU build plans exactly what the CPU build plans (the same
#    ledger; nothing runs), text for text, with the same collectives (NCCL,
#    the GPU build's default, needs no ring buffer: its comm buffers differ).
if [ -f "$d/eq1.st" ]; then
  for st in zero1 "hybrid_shard --ranks-per-node 2"; do
    name="j_$(echo "$st" | cut -d' ' -f1)"
    if [ "$GPUS" -ge 4 ]; then
      train "$name" "$GPU_BIN" 4 "${EQ[@]}" --strategy $st --collectives nccl --trace "$d/$name.json"
    else
      CUDA_VISIBLE_DEVICES=$ONE_GPU train "$name" "$GPU_BIN" 4 "${EQ[@]}" --strategy $st --collectives mpi --trace "$d/$name.json"
    fi && equivalent "$name" "j. --strategy $st on 4 ranks vs 1 GPU rank"
  done
fi
J=(--model small --batch 32 --log-every 1 --lr "$LR" --steps "$STEPS")
if [ -f "$d/g_small.st" ] && train j_offload "$GPU_BIN" 1 "${J[@]}" --cpu-offload; then
  check_losses "j. --cpu-offload on 1 GPU rank vs without it" 2e-4 "$d/g_small.log" "$d/j_offload.log"
  check_params "j. --cpu-offload: parameters after $STEPS steps (tol 2*lr*steps)" "$PTOL" "$d/g_small.st" "$d/j_offload.st"
fi
if train_both j_bf16 "${J[@]}" --param-dtype bf16; then
  check_losses "j. bf16, 1 GPU rank vs 1 CPU rank" 1e-2 "$d/j_bf16_cpu.log" "$d/j_bf16_gpu.log"
  check_params "j. bf16: parameters after $STEPS steps (tol 2*lr*steps)" "$PTOL" "$d/j_bf16_cpu.st" "$d/j_bf16_gpu.st"
  # ... and with --cpu-offload: the host's shard in 16 bits, as AdamW on
  # the CPU writes it, copied to the GPU and gathered as it is
  if train j_offload16 "$GPU_BIN" 1 "${J[@]}" --param-dtype bf16 --cpu-offload; then
    check_losses "j. bf16 --cpu-offload on 1 GPU rank vs without it" 1e-2 "$d/j_bf16_gpu.log" "$d/j_offload16.log"
    check_params "j. bf16 --cpu-offload: parameters after $STEPS steps (tol 2*lr*steps)" "$PTOL" "$d/j_bf16_gpu.st" "$d/j_offload16.st"
  fi
fi
# ... and bf16 on 4 ranks: each unit's full state gathered straight into 16
# bits, each rank's shard into its own slice of it, and its full gradient
# reduce-scattered from 16 bits (nccl_pack with NCCL on 4 GPUs, NCCL's
# PreMulSum predividing it: nccl_sum; the host stage with mpi on one
# shared GPU), against the CPU build's bf16 on 4
# ranks: the same argument and tolerances; and the gradient's norm of each
# step (--clip-grad-norm 1000 prints it and never clips here) within 1%:
# bf16 gradients summed in another order differ by a few bf16 ulps (2^-8)
# an element, and the norm of some 10^5 of them by far less (1e-3 at most;
# 5e-4 seen), where a lost predivide is 100% off
train_4() { # on 4 GPUs with NCCL, else 4 ranks sharing one through host staging
  if [ "$GPUS" -ge 4 ]; then train "$@" --collectives nccl
  else CUDA_VISIBLE_DEVICES=$ONE_GPU train "$@" --collectives mpi; fi
}
for st in full_shard "hybrid_shard --ranks-per-node 2"; do
  name="j_bf16_4_$(echo "$st" | cut -d' ' -f1)" impl=mpi
  [ "$GPUS" -ge 4 ] && impl=nccl
  if train "${name}_cpu" fsdp 4 "${J[@]}" --param-dtype bf16 --strategy $st --clip-grad-norm 1000 &&
     train_4 "${name}_gpu" "$GPU_BIN" 4 "${J[@]}" --param-dtype bf16 --strategy $st --clip-grad-norm 1000; then
    check_losses "j. bf16 --strategy $st on 4 ranks ($impl), GPU vs CPU" 1e-2 "$d/${name}_cpu.log" "$d/${name}_gpu.log"
    check_norms "j. bf16 --strategy $st on 4 ranks: the gradient's norms" 1e-2 "$d/${name}_cpu.log" "$d/${name}_gpu.log"
    check_params "j. bf16 $st on 4 ranks: parameters after $STEPS steps (tol 2*lr*steps)" "$PTOL" "$d/${name}_cpu.st" "$d/${name}_gpu.st"
  fi
done
# ... and GPT-2 in bf16: attention's P and dS stored in bf16, its products on
# the tensor cores (attention_forward_gemm), the CPU's rows rounding where
# the GPU stores: the same argument and tolerances as the MLP's above, but
# for GELU, which cuBLASLt's epilogues apply to c_fc's fp32 sum (and its
# derivative to c_proj's) where the CPU rounds first: every GELU output
# and c_fc gradient may differ by an ulp, not a few. On the emulator the
# losses stay within 1e-3 of the CPU's over 4 steps; the 1e-2 holds.
G=(--model gpt2-tiny --batch 32 --log-every 1 --lr "$LR" --steps "$STEPS" --param-dtype bf16)
if train_both j_gpt2_bf16 "${G[@]}"; then
  check_losses "j. gpt2-tiny in bf16, 1 GPU rank vs 1 CPU rank" 1e-2 "$d/j_gpt2_bf16_cpu.log" "$d/j_gpt2_bf16_gpu.log"
  check_params "j. gpt2-tiny in bf16: parameters after $STEPS steps (tol 2*lr*steps)" "$PTOL" "$d/j_gpt2_bf16_cpu.st" "$d/j_gpt2_bf16_gpu.st"
fi
# ... and --attention flash: on the tensor cores (flash_forward_tc and the
# backward kernels) for gpt2-mini in bf16 (heads of 32, T 128: two query
# blocks, four key tiles), the rows a thread each in fp32 (gpt2-tiny):
# each against the CPU's rows, with the same tolerances
F=(--model gpt2-mini --batch 8 --log-every 1 --lr "$LR" --steps "$STEPS" --param-dtype bf16 --attention flash)
# ... and the flash kernels sum in a fixed order (no atomics): the same
# run twice (on the emulator, its threads reversed), the same bits
FSDP_EMU_ORDER=$AGAIN_ORDER train_start j_flash_again "$GPU_BIN" 1 "${F[@]}"
if train_both j_flash "${F[@]}"; then
  check_losses "j. gpt2-mini, bf16 --attention flash, 1 GPU rank vs 1 CPU rank" 1e-2 "$d/j_flash_cpu.log" "$d/j_flash_gpu.log"
  check_params "j. gpt2-mini flash bf16: parameters after $STEPS steps (tol 2*lr*steps)" "$PTOL" "$d/j_flash_cpu.st" "$d/j_flash_gpu.st"
fi
if train_end j_flash_again && [ -f "$d/j_flash_gpu.st" ]; then
  r=$(tests/st_diff "$d/j_flash_gpu.st" "$d/j_flash_again.st" 2>&1) && pass "j. gpt2-mini flash bf16, the same GPU run twice$AGAIN: $r" || flunk "j. flash repeat: $r"
fi
F=(--model gpt2-tiny --batch 32 --log-every 1 --lr "$LR" --steps "$STEPS" --attention flash)
if train_both j_flash32 "${F[@]}"; then
  check_losses "j. gpt2-tiny, fp32 --attention flash (rows on the GPU) vs the CPU" 2e-4 "$d/j_flash32_cpu.log" "$d/j_flash32_gpu.log"
fi
P=(--plan --width 1024 --depth 8 --param-dtype bf16 --cpu-offload --strategy hybrid_shard --ranks-per-node 2 --collectives ring)
timeout 120 $MPIRUN -np 4 ./fsdp "${P[@]}" 2>&1 | grep -E 'bytes|calls' >"$d/plan_cpu.txt"
timeout 120 $MPIRUN -np 4 "./$GPU_BIN" "${P[@]}" 2>&1 | grep -E 'bytes|calls' >"$d/plan_gpu.txt"
[ -s "$d/plan_cpu.txt" ] && cmp -s "$d/plan_cpu.txt" "$d/plan_gpu.txt" \
  && pass "j. --plan: the GPU build's plan is the CPU build's, line for line ($(wc -l <"$d/plan_cpu.txt") lines)" \
  || flunk "j. --plan differs: $(diff "$d/plan_cpu.txt" "$d/plan_gpu.txt" | head -4)"

# ---- k. NCCL's watchdog: a collective that never finishes (the emulator only) ----------
# A GPU cannot be told to hang on cue; the emulator can: FSDP_EMU_NCCL_HANG=N
# makes each rank's Nth NCCL collective never finish, as when a peer dies,
# and the host then blocks at its next synchronisation. The watchdog
# (comm/device.h) must end every rank within --collective-timeout (2 s
# here; 60 s is the test's own limit): exit 4, naming the collective, its
# unit and its step, as PyTorch's NCCL watchdog does.
if [ -n "${FSDP_EMU:-}" ]; then
  start=$SECONDS
  out=$(FSDP_EMU_NCCL_HANG=5 timeout 60 $MPIRUN -np 2 "./$GPU_BIN" --model tiny --batch 24 --steps 4 --collectives nccl --collective-timeout 2 2>&1); rc=$?
  [ $rc -eq 4 ] && grep -qE 'error: the all_gather of unit [0-9]+ at step 1 over 2 ranks did not finish in 2 s' <<<"$out" \
    && pass "k. a NCCL collective that never finishes: the watchdog ends the job in $((SECONDS - start)) s, exit 4: $(grep -o 'the all_gather of unit [0-9]* at step 1' <<<"$out" | head -1)" \
    || { flunk "k. NCCL watchdog: exit $rc$([ $rc -eq 124 ] && echo ' (hung: the watchdog never fired)'), want 4 and the collective named"; tail -4 <<<"$out" | sed 's/^/      /'; }
fi

# ---- l. what a step asks of the GPU, counted (the emulator only) -------------------------
# FSDP_EMU_STATS=FILE: each process counts what it asks of the GPU (dev/emu/runtime.cpp,
# section 6). These are the GPU build's choices, the same on a GPU, and no
# GPU's speed can make up for them. A step's share is the difference between
# a 4-step and a 2-step run, halved (start-up and shutdown drop out):
#  - cudaMalloc: none. The pool (kernels/backend.h) hands each buffer of a
#    step back to the next; a cudaMalloc in the loop also synchronizes the
#    device.
#  - the main thread's waits for the GPU: 4. 1 for the loss
#    (crossentropy_forward reads it) and 2 for the loss's all-gather (one
#    float in, N out: global_mean_loss), each draining the queue, so the
#    GPU idles until the host queues more; and 1 before the next batch is
#    drawn into the batch's stage (kernels/backend.h), for the copies that
#    read the last one, done long before (the loss came after them): no
#    drain. The batch's 5 copies were synchronous, from pageable memory: 8
#    waits. A change in this number is a change in the GPU's idle time: say
#    why here.
#  - collectives queued behind everything the compute stream had queued
#    (serialized: they overlap none of it): 10 of 15. GPT-2 with 4 layers
#    is 5 units (the root kept from forward to backward): 10 all-gathers
#    (5 forward, 4 backward, the loss) and 5 reduce-scatters. Serialized:
#    the reduce-scatters and the loss's all-gather, which read what was just
#    computed; the forward's first all-gather (nothing queued since the
#    shards were settled, comm/device.h); the backward's first (the loss's
#    read drained the queue); and 2 backward prefetches, queued behind a
#    reduce-scatter on the one communication stream (they overlap the
#    compute queued after them, which this count does not see). The other
#    forward all-gathers wait for no compute at all, only for their block's
#    last readers (kernels/backend.h): 15 of 15 when every collective waited
#    for all that was queued. 4 layers, not 2: the pool then lends a unit's
#    block again within one forward, so a missing wait for its `freed`
#    event is a race that stops the run.
# Launches, GEMMs and bytes zeroed are printed: at a few microseconds each
# the host must queue a step's launches faster than the GPU runs them.
if [ -n "${FSDP_EMU:-}" ]; then
  ok_runs=1
  for s in 2 4; do
    FSDP_EMU_STATS=$d/count$s timeout 120 $MPIRUN -np 2 "./$GPU_BIN" --model gpt2-tiny --n-layer 4 \
      --batch 8 --steps $s --collectives nccl >"$d/count$s.log" 2>&1 || { ok_runs=0; tail -3 "$d/count$s.log"; }
  done
  # count FILE NAME: rank 0's figure
  count() { grep '^rank 0:' "$1" | grep -oE "$2 [0-9]+" | awk '{ print $2 }'; }
  per_step() { echo $((($(count "$d/count4" "$1") - $(count "$d/count2" "$1")) / 2)); }
  if [ $ok_runs = 1 ] && [ -n "$(count "$d/count4" launches)" ] && [ -n "$(count "$d/count2" launches)" ]; then
    a=$(per_step device_allocs) w=$(per_step host_waits) q=$(per_step serialized)
    [ "$a" -eq 0 ] && pass "l. gpt2-tiny, 2 ranks: a step calls cudaMalloc 0 times (the pool serves it)" \
      || flunk "l. a step calls cudaMalloc $a times: a buffer the pool does not find again"
    [ "$w" -eq 4 ] && pass "l. gpt2-tiny, 2 ranks: the host waits for the GPU 4 times a step (the loss, its all-gather, the batch's stage)" \
      || flunk "l. the host waits for the GPU $w times a step, not 4: a wait added or removed (say why in test_gpu.sh l.)"
    [ "$q" -eq 10 ] && pass "l. gpt2-tiny, 2 ranks: 10 of $(per_step collectives) collectives wait for all the compute queued before them; the forward's all-gathers after the first do not" \
      || flunk "l. $q of $(per_step collectives) collectives wait for all the compute queued before them, not 10 (say why in test_gpu.sh l.)"
    out=$(timeout 120 $MPIRUN -np 2 "./$GPU_BIN" --model gpt2-tiny --n-layer 4 --batch 8 --steps 2 \
      --collectives nccl --cpu-offload 2>&1) \
      && pass "l. --cpu-offload on 2 ranks: each all-gather waits for its shard's copy to the device (no race)" \
      || { flunk "l. --cpu-offload on 2 ranks over NCCL failed"; grep -m1 -E 'race|rror' <<<"$out" | sed 's/^/      /'; }
    echo "note: l. a step of gpt2-tiny (4 layers) on 2 ranks: $(per_step launches) kernel launches, $(per_step gemms) GEMMs, $(per_step collectives) NCCL collectives, $(per_step memset_bytes) bytes zeroed, $(per_step copies) copies between host and device"
  else
    flunk "l. FSDP_EMU_STATS: the runs failed or wrote no counts ($(cat "$d/count4" 2>/dev/null | head -1))"
  fi
  # m. A bf16 step on one rank: each 16-bit reduce-scatter's sum becomes
  # its mean as it is unpacked from the wire (unpack_mean_one, one pass over
  # the shard), not by an unpack, a scale and a rounding (three: 16 bytes an
  # element more, about 5 ms of the 1.06B model's step on an H100); and a
  # gradient is not multiplied by a predivide of 1 (one or two ranks); and
  # AdamW writes each shard's 16-bit copy as it updates the master
  # (adamw_mixed_one), with no pass of pack_one reading the master back;
  # and GPT-2's GELU runs in no kernel of its own.
  ok_runs=1
  for s in 2 4; do
    FSDP_EMU_STATS=$d/bf16_$s timeout 120 $MPIRUN -np 1 "./$GPU_BIN" --model gpt2-tiny --n-layer 4 \
      --batch 8 --steps $s --param-dtype bf16 >"$d/bf16_$s.log" 2>&1 || { ok_runs=0; tail -3 "$d/bf16_$s.log"; }
  done
  # kernel_in FILE NAME: rank 0's launches of kernel NAME; kernel_step NAME: in a step
  kernel_in() { awk -v k="$2" '$1 == "rank" && $2 == "0" && $3 == "kernel" && $4 == k { n = $5 } END { print n + 0 }' "$1"; }
  kernel_step() { echo $((($(kernel_in "$d/bf16_4" "$1") - $(kernel_in "$d/bf16_2" "$1")) / 2)); }
  if [ $ok_runs = 1 ] && [ "$(kernel_in "$d/bf16_4" "for_each_kernel<adamw_mixed_one>")" -gt 0 ]; then
    units=$(kernel_step "for_each_kernel<adamw_mixed_one>")
    means=$(kernel_step "for_each_kernel<unpack_mean_one>")
    extra=$(($(kernel_step "for_each_kernel<scale_one>") + $(kernel_step "for_each_kernel<round_one>") + $(kernel_step "for_each_kernel<scale_half_one>") + $(kernel_step "for_each_kernel<unpack_one>") + $(kernel_step "for_each_kernel<pack_one>")))
    [ "$means" -eq "$units" ] && [ "$extra" -eq 0 ] \
      && pass "m. bf16, 1 rank: each of the $units reduce-scatters a step takes its mean as it unpacks (one pass over the shard, none multiplies by 1), and AdamW writes the 16-bit shard in its own pass" \
      || flunk "m. bf16, 1 rank, a step: $means unpack_mean_one for $units units, and $extra passes of scale_one, round_one, scale_half_one, unpack_one or pack_one (should be 0)"
    # GPT-2's GELU inside cuBLASLt's products (kernels/transformer.h), and
    # with FSDP_GELU_FUSION=0 in its kernels: 2 a layer, the same losses
    gelus=$(($(kernel_step "for_each_kernel<gelu_tanh_forward_one>") + $(kernel_step "for_each_kernel<gelu_tanh_backward_one>")))
    [ "$gelus" -eq 0 ] \
      && pass "m. bf16, 1 rank: gelu_new is applied in cuBLASLt's epilogues (c_fc's product, mlp.c_proj's input gradient): no GELU kernel a step" \
      || flunk "m. bf16, 1 rank, a step: $gelus GELU kernels (0 where cuBLASLt's epilogues apply gelu_new)"
    rm -f "$d/apart"
    FSDP_GELU_FUSION=0 FSDP_EMU_STATS=$d/apart timeout 120 $MPIRUN -np 1 "./$GPU_BIN" --model gpt2-tiny \
      --n-layer 4 --batch 8 --steps 4 --param-dtype bf16 >"$d/apart.log" 2>&1
    apart=$(($(kernel_in "$d/apart" "for_each_kernel<gelu_tanh_forward_one>") + $(kernel_in "$d/apart" "for_each_kernel<gelu_tanh_backward_one>")))
    l1=$(sed -n 's/^step *4\/4 | loss \([0-9.]*\).*/\1/p' "$d/bf16_4.log")
    l0=$(sed -n 's/^step *4\/4 | loss \([0-9.]*\).*/\1/p' "$d/apart.log")
    if [ "$apart" -eq 32 ] && awk -v a="$l0" -v b="$l1" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d < 1e-2 && d > -1e-2) }'; then
      pass "m. FSDP_GELU_FUSION=0: GELU in its own kernels (2 a layer a step), loss $l0 beside $l1 fused (1e-2)"
    else
      flunk "m. FSDP_GELU_FUSION=0: $apart GELU kernels in 4 steps of 4 layers (32 expected), loss '$l0' beside '$l1' fused"; tail -3 "$d/apart.log"
    fi
  else
    flunk "m. FSDP_EMU_STATS: the bf16 runs failed or counted no kernels"
  fi
fi

echo
echo "$n_ok passed, $n_bad failed"
[ $n_bad -eq 0 ]
