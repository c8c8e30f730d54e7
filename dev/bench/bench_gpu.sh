#!/usr/bin/env bash
# dev/bench/bench_gpu.sh — fsdp-gpu on a 1B-parameter model; `make bench-gpu` runs it.
#
# Trains --width 3840 --depth 9 (1,063,907,072 parameters) under full_shard,
# one rank per GPU, NCCL collectives, 4096 tokens a GPU (the global batch
# grows with the GPUs, as GPT-2's below and as torchtitan's local batch),
# and prints
#   - tokens/s and the achieved TFLOP/s, counting the model's FLOPs per step as
#     6 x parameters x tokens (2 forward, 4 backward per parameter per token:
#     the usual estimate; here >99.7% of the parameters are in GEMMs);
#   - MFU: that against the GPU's peak (fp32, or TF32 with TF32=1);
#   - beside it, cuBLAS alone at the same GEMM shapes on the same GPUs in the
#     same run (dev/bench/bench_gpu), and the ratio (target >= 50%);
#   - the NCCL bus bandwidth beside the collectives' share of a step (a
#     short --trace run, where CUDA events time them);
#   - MFU against the dense bf16 peak too (what PyTorch and llm.c report),
#     with the goal: >= 40% on one GPU, >= 30% per GPU on 8;
#   - GPT-2 124M (8 x 1024 tokens a GPU), the same; in 16 bits also at
#     llm.c's micro-batch (64 x 1024 a GPU), with a step's fixed cost and
#     its cost per sequence, from the two.
# Without a GPU it prints the roofline of both (./fsdp --plan --roofline
# h100: the best an H100 could do, counted) and exits 77.
# Why 3840 x 9 and not 4096 x 8: the latter is 1,076,084,992 parameters, over
# the 2^30 that config_parse accepts. Under full_shard on one 80 GB GPU it
# needs ~17 GB of sharded state (16 bytes per parameter), a few gathered
# blocks (~0.5 GB each) and ~6 GB of activations at batch 4096.
# A step's time is the difference of two runs (3 steps and BENCH_STEPS), so
# the first steps' warm-up (cuBLAS heuristics, NCCL connections) drops out.
#
# Why 4096 tokens a GPU and not 4096 in all: a step's collectives move 3 x
# the parameters whatever the batch (5.6 GB a GPU in bf16 on 8), which
# takes 12.4 ms at NVLink 4's 450 GB/s a direction at the least, and 512
# tokens a GPU take 4.9 ms of kernels at their roofline: communication-
# bound, 26.6% MFU at most, short of the goal whatever the kernels do.
# At 4096 a GPU the kernels take 31 ms and prefetch hides the collectives
# behind them (./fsdp --plan --roofline h100 on 8 ranks says both; below).
# Environment: BENCH_WIDTH, BENCH_DEPTH, BENCH_BATCH (a GPU's), BENCH_STEPS,
# BENCH_GPT2_STEPS, BENCH_GPT2_BATCH (sequences a GPU in GPT-2's second
# run, in 16 bits only: 64 unless set),
# TF32=1 (fsdp-gpu --tf32, bench_gpu --tf32, MFU against the TF32 peak),
# BENCH_PARAM_DTYPE=bf16 (fsdp-gpu --param-dtype bf16: the Linear GEMMs on
# the tensor cores; MFU against the bf16 peak), BENCH_ATTENTION=math|flash
# (GPT-2: default flash with 16-bit parameters, else math).
# No GPU: exit 77 with the reason.
set -u
cd "$(dirname "$0")/../.." || exit 1
source tests/lib.sh
case ${BENCH_BATCH:-4096} in
  '' | *[!0-9]* | 0*) echo "error: BENCH_BATCH=$BENCH_BATCH: give the tokens a GPU, a whole number from 1 (4096 unless set)"; exit 2 ;;
esac
case ${BENCH_GPT2_STEPS:-8} in
  '' | *[!0-9]* | 0* | [0-3]) echo "error: BENCH_GPT2_STEPS=$BENCH_GPT2_STEPS: give GPT-2's steps, a whole number from 4 (a 3-step run is taken from it; 8 unless set)"; exit 2 ;;
esac
case ${BENCH_GPT2_BATCH:-64} in
  '' | *[!0-9]* | 0*) echo "error: BENCH_GPT2_BATCH=$BENCH_GPT2_BATCH: give GPT-2's sequences a GPU, a whole number from 1 (64 unless set)"; exit 2 ;;
esac

# ---- is there a GPU? (as tests/test_gpu.sh decides) ---------------------------
# Without one, what can be said without measuring: the roofline of both
# models' steps on an H100 (./fsdp --plan --roofline, lecture 8), then the
# skip.
if ! nogpu=$( (find_gpus bench-gpu) ); then
  make -s fsdp >/dev/null 2>&1 || { echo "FAIL: make fsdp"; exit 1; }
  echo "No GPU here, so nothing is measured. What the roofline says one H100 could do at best"
  echo "(every kernel at the GPU's peak or its memory's bandwidth: ./fsdp --plan --roofline h100):"
  for model in "--width ${BENCH_WIDTH:-3840} --depth ${BENCH_DEPTH:-9} --batch ${BENCH_BATCH:-4096}" \
               "--model gpt2 --batch 8 --context 1024" \
               "--model gpt2 --batch 8 --context 1024 --attention flash" \
               "--model gpt2 --batch 64 --context 1024 --attention flash"; do
    echo
    echo "  ./fsdp --plan $model --roofline h100"
    # shellcheck disable=SC2086  # the flags are a word list
    ./fsdp --plan $model --roofline h100 | sed -n '/^roofline/,$p' | sed 's/^/  /'
  done
  # On 8 GPUs, the collectives beside the kernels: why the batch grows with the GPUs
  for b in 4096 $((8 * ${BENCH_BATCH:-4096})); do
    echo
    echo "  mpirun -np 8 ./fsdp --plan --width ${BENCH_WIDTH:-3840} --depth ${BENCH_DEPTH:-9} --batch $b --param-dtype bf16 --roofline h100"
    $MPIRUN -np 8 ./fsdp --plan --width "${BENCH_WIDTH:-3840}" --depth "${BENCH_DEPTH:-9}" --batch "$b" --param-dtype bf16 \
      --roofline h100 2>&1 | sed -n '/^  model FLOPs/,$p' | grep -v '^    fp32' | sed 's/^/  /'
  done
  echo
  echo "$nogpu"
  exit 77
fi
find_gpus bench-gpu

d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
command -v "${NVCC:-nvcc}" >/dev/null 2>&1 || PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
make -s -j"$(nproc)" fsdp fsdp-gpu dev/bench/bench_gpu >"$d/build.log" 2>&1 || { cat "$d/build.log"; echo "FAIL: make fsdp fsdp-gpu dev/bench/bench_gpu"; exit 1; }

# ---- the configuration and its parameter count -----------------------------------
W=${BENCH_WIDTH:-3840} L=${BENCH_DEPTH:-9} S=${BENCH_STEPS:-13}
B=$((${BENCH_BATCH:-4096} * GPUS)) # global: BENCH_BATCH tokens a GPU
V=256 C=16 T=16   # vocabulary (bytes), --embed-dim, --context (the small preset's)
# fsdp.c's config_total_numel: embed + proj_in + L blocks (norm, fc1, fc2) + norm_f + head
P=$((V * C + (T * C * W + W) + L * (2 * W + (4 * W * W + 4 * W) + (4 * W * W + W)) + 2 * W + (V * W + V)))
BLOCK_MIB=$(awk -v w="$W" 'BEGIN { printf "%.0f", (8 * w * w + 7 * w) * 4 / 1048576 }')
tf=""; prec=fp32; pd=""
[ "${TF32:-0}" = 1 ] && tf="--tf32" prec=tf32
[ "${BENCH_PARAM_DTYPE:-fp32}" != fp32 ] && pd="--param-dtype $BENCH_PARAM_DTYPE" prec="$BENCH_PARAM_DTYPE"
S0=3; [ "$S" -gt "$S0" ] || S0=0   # BENCH_STEPS <= 3: one run, the mean of all its steps

# ---- fsdp-gpu ---------------------------------------------------------------------------
# train STEPS LOG [MORE FLAGS]
train() {
  # shellcheck disable=SC2086  # $MPIRUN and $tf are word lists
  timeout 600 $MPIRUN -np "$GPUS" ./fsdp-gpu --width "$W" --depth "$L" --context $T --embed-dim $C \
    --batch "$B" --steps "$1" --log-every 1 --strategy full_shard --collectives nccl $tf $pd "${@:3}" >"$2" 2>&1
  local rc=$?
  [ $rc -eq 0 ] && return 0
  echo "FAIL: fsdp-gpu --steps $1 on $GPUS GPU(s): exit $rc$([ $rc -eq 124 ] && echo ' (timed out)')"
  tail -15 "$2"
  exit 1
}
# The run's totals: "STEPS TOTAL_MS"
totals() {
  sed -n 's/^\([0-9]*\) steps in .*: \([0-9.]*\) ms\/step.*/\1 \2/p' "$1" |
    awk 'NF == 2 { print $1, $1 * $2 }'
}
echo "fsdp-gpu: --width $W --depth $L --context $T --embed-dim $C, global batch $B (BENCH_BATCH=${BENCH_BATCH:-4096} tokens a GPU) on $GPUS GPU(s), full_shard, nccl, $prec"
train "$S" "$d/long.log"
{ head -2 "$d/long.log"; grep '^step ' "$d/long.log" | sed -n '1p; $p'; } | sed 's/^/  /'
grep -E '^[0-9]+ steps in|^per step on rank 0|total \(peak' "$d/long.log" | sed 's/^/  /'
read -r n2 t2 <<<"$(totals "$d/long.log")"
if [ -z "${n2:-}" ]; then echo "FAIL: no 'N steps in' line in fsdp-gpu's output"; exit 1; fi
if [ "$S0" -gt 0 ]; then
  train "$S0" "$d/short.log"
  read -r n1 t1 <<<"$(totals "$d/short.log")"
  what="steps $((S0 + 1))-$S (the difference of a $S0-step and a $S-step run: warm-up left out)"
else
  n1=0 t1=0 what="the mean of all $S steps (warm-up included)"
fi
step_ms=$(awk -v n1="$n1" -v n2="$n2" -v t1="$t1" -v t2="$t2" 'BEGIN { printf "%.3f", (t2 - t1) / (n2 - n1) }')
# With NCCL the host never waits for a collective, so only a traced run
# times them (CUDA events; the host then waits at unit boundaries, so this
# run is slower and is not used for the speed figures).
train 3 "$d/traced.log" --trace "$d/trace.json"
busy_ms=$(sed -n 's/^per step on rank 0: collectives busy \([0-9.]*\) ms.*/\1/p' "$d/traced.log")
traced_ms=$(sed -n 's/^[0-9]* steps in .*: \([0-9.]*\) ms\/step.*/\1/p' "$d/traced.log")
header_p=$(sed -n 's/.*| \([0-9]*\) parameters$/\1/p' "$d/long.log" | head -1)
[ "$header_p" = "$P" ] || echo "note: config_total_numel's formula gives $P parameters, fsdp-gpu's header ${header_p:-nothing}; using the header's" >&2
P=${header_p:-$P}

# ---- cuBLAS and NCCL alone, on the same GPUs ---------------------------------------
# One rank's GEMMs see its share of the batch.
# shellcheck disable=SC2086
timeout 600 $MPIRUN -np "$GPUS" dev/bench/bench_gpu --batch $((B / GPUS)) --width "$W" $tf ${pd:+--bf16} >"$d/bench.log" 2>&1 \
  || { echo "FAIL: dev/bench/bench_gpu: exit $?"; tail -15 "$d/bench.log"; exit 1; }
echo
echo "dev/bench/bench_gpu --batch $((B / GPUS)) --width $W${tf:+ $tf}${pd:+ --bf16} on $GPUS GPU(s):"
sed 's/^/  /' "$d/bench.log"
gemm=$(sed -n 's/^gemm mean.*: \([0-9.]*\) GFLOP\/s$/\1/p' "$d/bench.log")
# the all-gather / reduce-scatter size nearest one block (a unit) of the model
nccl=$(awk -v u="$BLOCK_MIB" '$1 == "nccl" { x = log($2 / u); if (x < 0) x = -x;
       if (best == "" || x < best) { best = x; s = $2 " MiB: all_gather " $5 " GB/s, reduce_scatter " $8 " GB/s" } }
       END { print s }' "$d/bench.log")

# ---- the GPU's peak (NVIDIA datasheets, dense, per GPU) --------------------------------
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$name" in
  *H100*PCIe*) fp32=51 tf32=378 bf16=756 spec="H100 PCIe" ;;
  *H100*NVL* | *H200*NVL*) fp32=60 tf32=418 bf16=835 spec="H100/H200 NVL" ;;
  *H100* | *H200*) fp32=67 tf32=495 bf16=989 spec="H100/H200 SXM" ;;
  *A100*) fp32=19.5 tf32=156 bf16=312 spec="A100" ;;
  *) fp32="" tf32="" bf16="" spec="" ;;
esac
peak=$fp32; [ "$prec" = tf32 ] && peak=$tf32
[ -n "$pd" ] && peak=$bf16   # bf16/fp16 tensor cores: the same dense peak
# The ceiling of a step on this GPU, every kernel at its roofline (./fsdp
# --plan --roofline: computed, not measured), to read the MFU beside:
# at_best FLAGS... prints the line for this run's precision
roof=$(roofline_gpu "$name")
at_best() {
  local line
  [ -z "$tf" ] || return 0 # the roofline has fp32 and 16-bit lines, no TF32 one
  # shellcheck disable=SC2086  # $MPIRUN and $pd are word lists
  line=$($MPIRUN -np "$GPUS" ./fsdp --plan "$@" $pd --roofline "$roof" 2>&1 |
    grep -E "^ +$([ -n "$pd" ] && echo 'bf16 GEMM' || echo fp32) " | tr -s ' ')
  echo "at best, every kernel at its roofline (./fsdp --plan $* $pd --roofline $roof):${line:- no roofline line}"
}

# ---- the figures ------------------------------------------------------------------------
echo
echo "== fsdp-gpu on $GPUS x ${name:-unknown GPU}, $prec: $P parameters, global batch $B"
awk -v P="$P" -v B="$B" -v G="$GPUS" -v ms="$step_ms" -v busy="${busy_ms:-}" -v traced="${traced_ms:-}" \
    -v what="$what" -v peak="$peak" -v fp32="$fp32" -v tf32="$tf32" -v bf16="$bf16" -v prec="$prec" -v gemm="$gemm" -v nccl="$nccl" -v blk="$BLOCK_MIB" -v spec="$spec" 'BEGIN {
  s = ms / 1e3; flop = 6 * P * B; tf = flop / s / 1e12; per = tf / G
  printf "per step: %.1f ms over %s\n", ms, what
  printf "tokens/s: %.0f (one token = one predicted byte; %.0f per step)\n", B / s, B
  printf "model FLOPs per step = 6 x parameters x tokens = 6 x %.0f x %.0f = %.2f TFLOP\n", P, B, flop / 1e12
  printf "achieved: %.1f TFLOP/s in all, %.1f TFLOP/s per GPU\n", tf, per
  if (peak != "") printf "MFU: %.1f%% of the %s peak (%s TFLOP/s per GPU: %s, NVIDIA datasheet, dense)\n", 100 * per / peak, prec, peak, spec
  else printf "MFU: unknown peak for this GPU (fill in its %s TFLOP/s in dev/bench/bench_gpu.sh)\n", prec
  if (bf16 != "") printf "against each dense peak: %.1f%% of fp32 (%s), %.1f%% of TF32 (%s), %.1f%% of bf16 (%s TFLOP/s)\n", 100 * per / fp32, fp32, 100 * per / tf32, tf32, 100 * per / bf16, bf16
  if (bf16 != "") printf "MFU against the dense bf16 peak, the figure PyTorch and llm.c report: %.1f%% (goal: >= 40%% on one GPU, >= 30%% per GPU on 8)\n", 100 * per / bf16
  if (gemm != "") {
    g = gemm / 1e3
    printf "cuBLAS alone at the same shapes (dev/bench/bench_gpu, this run): %.1f TFLOP/s per GPU\n", g
    printf "fsdp-gpu / cuBLAS: %.1f%% (target >= 50%%: %s)\n", 100 * per / g, (per >= 0.5 * g ? "met" : "NOT met")
  } else print "cuBLAS alone: no figure (dev/bench/bench_gpu printed no gemm mean line)"
  if (nccl != "") printf "NCCL bus bandwidth at %s (one block unit is %.0f MiB)\n", nccl, blk
  else printf "NCCL bus bandwidth: none with one GPU (nothing to send between GPUs)\n"
  if (busy != "" && traced > 0)
    printf "  beside: the collectives keep the communication stream busy %.1f ms of a %.1f ms traced step (%.0f%%; rank 0, CUDA events)\n", busy, traced, 100 * busy / traced
  else print "  beside: no collective timing (the traced run printed no \"collectives busy\" line)"
}'
at_best --width "$W" --depth "$L" --context "$T" --embed-dim "$C" --batch "$B"

# ---- GPT-2 124M, the shape llm.c reports ---------------------------------------------
# 8 sequences of 1024 tokens a GPU, fp32 (as built), the same difference of
# two runs. Its FLOPs count attention too: 6 x parameters + 12 L T D a token.
G2_STEPS=${BENCH_GPT2_STEPS:-8}
# attention fused on the tensor cores where it can be (16-bit parameters),
# else as the math path's cuBLAS GEMMs; BENCH_ATTENTION=math|flash chooses
att=${BENCH_ATTENTION:-$([ -n "$pd" ] && echo flash || echo math)}
g2b=8 # sequences a GPU
g2() { # g2 STEPS LOG
  # shellcheck disable=SC2086  # $MPIRUN and $tf are word lists
  timeout 600 $MPIRUN -np "$GPUS" ./fsdp-gpu --model gpt2 --batch $((g2b * GPUS)) --context 1024 \
    --steps "$1" --log-every 1 --strategy full_shard --collectives nccl $tf $pd --attention "$att" >"$2" 2>&1 ||
    { echo "FAIL: fsdp-gpu --model gpt2 --steps $1: exit $?"; tail -15 "$2"; exit 1; }
}
# g2_ms NAME: sets ms, GPT-2's time a step, from a G2_STEPS-step and a
# 3-step run ($d/NAME_long.log, $d/NAME_short.log): warm-up left out.
# (It sets a variable rather than printing: g2 exits the script on a
# failure, which inside $(...) would only end the subshell.)
g2_ms() {
  local n1 t1 n2 t2
  g2 "$G2_STEPS" "$d/$1_long.log"
  g2 3 "$d/$1_short.log"
  read -r n2 t2 <<<"$(totals "$d/$1_long.log")"
  read -r n1 t1 <<<"$(totals "$d/$1_short.log")"
  ms=$(awk -v n1="$n1" -v n2="$n2" -v t1="$t1" -v t2="$t2" 'BEGIN { printf "%.3f", (t2 - t1) / (n2 - n1) }')
}
# g2_figures SEQUENCES MS: tokens/s, TFLOP/s and MFU of a step of MS with
# SEQUENCES of 1024 a GPU
g2_figures() {
  awk -v P="${P2:-124439808}" -v G="$GPUS" -v seqs="$1" -v ms="$2" -v n2="$G2_STEPS" \
      -v bf16="$bf16" -v peak="$peak" -v prec="$prec" 'BEGIN {
    s = ms / 1e3; tokens = seqs * 1024 * G
    flop = (6 * P + 12 * 12 * 1024 * 768) * tokens; per = flop / s / 1e12 / G
    printf "per step: %.1f ms (steps 4-%d); %.0f tokens/s\n", ms, n2, tokens / s
    printf "model FLOPs per step = (6 x %.0f + 12 L T D) x %d tokens = %.2f TFLOP; %.1f TFLOP/s per GPU\n", P, tokens, flop / 1e12, per
    if (peak != "") printf "MFU: %.1f%% of the %s peak\n", 100 * per / peak, prec
    if (bf16 != "") printf "MFU against the dense bf16 peak: %.1f%% (goal: >= 40%% on one GPU, >= 30%% per GPU on 8)\n", 100 * per / bf16
  }'
}
g2_ms g2
small_ms=$ms
P2=$(sed -n 's/.*| \([0-9]*\) parameters$/\1/p' "$d/g2_long.log" | head -1)
echo
echo "== GPT-2 124M (fsdp-gpu --model gpt2 --attention $att) on $GPUS x ${name:-unknown GPU}, $prec: $g2b x 1024 tokens a GPU"
g2_figures "$g2b" "$small_ms"
at_best --model gpt2 --batch $((g2b * GPUS)) --context 1024 --attention "$att"
# With 16-bit parameters, GPT-2's GELU runs inside cuBLASLt's products by
# default on Hopper and later, in kernels of its own before (llm.c found
# the fused GELU slower on Ampere): the same step timed the other way
if [ -n "$pd" ]; then
  way=$(sed -n 's/.*| \(GELU in [^|]*[^ |]\) *|.*/\1/p' "$d/g2_long.log" | head -1)
  other=$([ "$way" = "GELU in its own kernels" ] && echo 1 || echo 0)
  FSDP_GELU_FUSION=$other g2_ms g2_other
  awk -v a="$small_ms" -v b="$ms" -v way="${way:-GELU: no line}" -v other="$other" 'BEGIN {
    printf "%s: %.2f ms a step; with FSDP_GELU_FUSION=%s: %.2f ms (%+.2f ms)\n", way, a, other, b, b - a
  }'
fi

# GPT-2 at llm.c's own micro-batch, 16-bit parameters only: its GPT-2 124M
# reproduction trains 64 sequences of 1024 a GPU (train_gpt2cu -b 64 -t
# 1024). A step costs a part fixed whatever the batch (AdamW over the
# shard, gathering each unit, unpacking its gradient, launching ~300
# kernels) and a part per sequence; two batch sizes give both, and the MFU
# the per-sequence part alone would reach: the ceiling a larger batch
# approaches. It needs 29.5 GB a GPU (./fsdp --plan says so); a GPU with
# less memory skips it, saying so. BENCH_GPT2_BATCH=N sets N sequences
# (N = 8 runs nothing more: one batch size cannot be split in two parts).
big=${BENCH_GPT2_BATCH:-64}
if [ -n "$pd" ] && [ "$big" -ne "$g2b" ]; then
  # shellcheck disable=SC2086  # $pd is a word list
  need=$(./fsdp --plan --model gpt2 --batch "$big" --context 1024 --attention "$att" $pd 2>/dev/null |
    sed -n 's/^  total (peak of the sum) *\([0-9]*\) bytes.*/\1/p')
  have=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | sort -n | head -1)
  echo
  if [ -n "$need" ] && [ -n "$have" ] && [ "$need" -gt $((have * 1048576 * 9 / 10)) ]; then
    echo "GPT-2 at $big x 1024 a GPU: skipped, it needs $((need / 1000000)) MB a GPU (./fsdp --plan) and this GPU has $have MiB (BENCH_GPT2_BATCH=N for fewer)"
  else
    small=$g2b g2b=$big
    g2_ms g2_big
    echo "== GPT-2 124M (fsdp-gpu --model gpt2 --attention $att) on $GPUS x ${name:-unknown GPU}, $prec: $big x 1024 tokens a GPU, llm.c's micro-batch"
    g2_figures "$big" "$ms"
    awk -v P="${P2:-124439808}" -v a="$small_ms" -v b="$ms" -v small="$small" -v big="$big" -v bf16="$bf16" 'BEGIN {
      seq = (b - a) / (big - small); fixed = a - small * seq
      printf "per step, from %d and %d sequences a GPU: %.2f ms fixed + %.3f ms per sequence of 1024\n", small, big, fixed, seq
      if (bf16 != "" && seq > 0) printf "MFU of the per-sequence part alone (a batch large enough): %.1f%%\n", 100 * (6 * P + 12 * 12 * 1024 * 768) * 1024 / (seq / 1e3) / 1e12 / bf16
    }'
    at_best --model gpt2 --batch $((big * GPUS)) --context 1024 --attention "$att"
  fi
fi

# cuBLAS alone at GPT-2's shapes on one GPU: a block's MLP GEMMs (8192 rows,
# width 768), and lm_head's three, a third of the model's matmul FLOPs,
# with the logits' rows 50257 values apart and padded to 50304 as fsdp-gpu
# stores them (logits_stride): what the padding buys, measured.
echo
echo "cuBLAS alone at GPT-2's shapes (dev/bench/bench_gpu --batch 8192 --width 768 --vocab 50257${tf:+ $tf}${pd:+ --bf16}, one GPU):"
# shellcheck disable=SC2086  # $MPIRUN and $tf are word lists
if timeout 300 $MPIRUN -np 1 dev/bench/bench_gpu --batch 8192 --width 768 --vocab 50257 $tf ${pd:+--bf16} \
     >"$d/gpt2_gemms.log" 2>&1; then
  grep -E '^gemm mean|^lm_head|^  (forward|dinp|dweight|all three)' "$d/gpt2_gemms.log" | sed 's/^/  /'
else
  echo "FAIL: dev/bench/bench_gpu --vocab 50257: exit $?"; tail -15 "$d/gpt2_gemms.log"; exit 1
fi
