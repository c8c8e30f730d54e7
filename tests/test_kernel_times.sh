#!/usr/bin/env bash
# dev/profile/kernel_times.so and dev/profile/kernel_times.py, make gpu-report's table of
# a GPU step kernel by kernel. Without a GPU, CUPTI records nothing, so:
#  - the library builds against CUPTI, loads (its symbols and libcupti.so
#    resolve), and at exit writes its file, here empty, saying so;
#  - the reader, on hand-written files of known answer
#    (tests/fixtures/kernel_times/: a start-up copy, then steps of 10 ms on
#    the GPU's clock, each a GEMM of 4 ms and another of 1 within it on the
#    same stream, an all-gather of 3 overlapping the first by 1 on another,
#    AdamW 1, a LayerNorm, a memset and a kernel it does not know, 0.5
#    each): busy 7.5 of 10 ms, every kind's time, the roofline's rows read
#    from ./fsdp --plan --roofline's own output, and bad input refused;
#  - real cuBLAS, cuBLASLt and NCCL kernels' names, each in its kind;
#  - every kernel fsdp-gpu can launch (the source's, and the emulator's
#    runs') falls in a kind of work, not in "other".
source "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
fx=tests/fixtures/kernel_times
kt() { python3 dev/profile/kernel_times.py "$@"; }

# ---- the library ----------------------------------------------------------------------
if [ ! -e "${CUDA_HOME:-/usr/local/cuda}/include/cupti.h" ]; then
  echo "note: no CUPTI here (${CUDA_HOME:-/usr/local/cuda}/include/cupti.h): the library is not built; the reader is checked below"
elif ! make -s dev/profile/kernel_times.so >"$d/build" 2>&1; then
  bad "make dev/profile/kernel_times.so: $(tail -3 "$d/build")"
elif ! KERNEL_TIMES=$d/k python3 -c 'import ctypes; assert ctypes.CDLL("dev/profile/kernel_times.so").InitializeInjection() == 1' 2>"$d/load"; then
  bad "dev/profile/kernel_times.so does not load, or InitializeInjection failed: $(tail -2 "$d/load")"
elif ! head -1 "$d"/k.pid*.txt 2>/dev/null | grep -q "^# dev/profile/kernel_times.so (CUPTI): 0 operations"; then
  bad "dev/profile/kernel_times.so wrote no $d/k.pidP.txt at exit (a process no launcher numbered): $(ls "$d"; cat "$d/load")"
else
  ok "dev/profile/kernel_times.so builds against CUPTI, loads, and writes KERNEL_TIMES.pidP.txt at exit (here 0 operations: $(head -1 "$d/load"))"
fi

# ---- the reader ------------------------------------------------------------------------
./fsdp --plan --width 3840 --depth 9 --batch 4096 --param-dtype bf16 --roofline h100 >"$d/plan" 2>&1 || bad "./fsdp --plan --roofline: exit $?"
kt "$fx/long.rank0.txt" --minus "$fx/short.rank0.txt" --steps 2 --roofline "$d/plan" >"$d/out" 2>&1 || bad "the reader: exit $?"
has() { grep -qF -- "$1" "$d/out" && ok "$2: $1" || { bad "$2: want '$1' in:"; sed 's/^/    /' "$d/out"; }; }
has "a step on the GPU's clock: 10.00 ms, busy 7.50 ms (75%), idle 2.50 ms" "the step and its idle time (3 steps less 1)"
has "stream 13: busy 3.00 ms, most of it collectives (3.00 ms)" "a stream's busy time"
has "stream 7: busy 6.50 ms, most of it matmuls (5.00 ms)" "the compute stream: the GEMM within the other counted once in its busy time"
matmul_bound=$(awk '/^  matmuls/ { print $7 }' "$d/plan")
[ -n "$matmul_bound" ] && grep -qE "^  matmuls \(Linear, Conv1D\) +5\.00 +$matmul_bound +" "$d/out" \
  && ok "matmuls: 5.00 ms a step (each kernel's own time), beside the roofline's $matmul_bound (read from ./fsdp --plan --roofline h100's bf16 GEMM column)" \
  || bad "the matmuls row, want 5.00 and $matmul_bound: $(grep matmuls "$d/out")"
total=$(awk '/^roofline/ { r = 1 } r && /^  total/ { print $NF }' "$d/plan")
grep -qE "^  the step, on the GPU clock +10\.00 +$total +0\.3$" "$d/out" \
  && ok "the step, 10.00 ms, beside the roofline's total $total ms" || bad "the step's row, want 10.00 and $total: $(grep 'the step' "$d/out")"
for want in "AdamW \(this rank's shards\) +1\.00" "layernorm +0\.50" "FSDP's passes .* +0\.50" "other +0\.50" "all \(stream by stream.* +10\.50"; do
  grep -qE "^  $want" "$d/out" || bad "want a row '$want' in: $(cat "$d/out")"
done
has "for_each_kernel<adamw_one> (AdamW)" "for_each_kernel's names by their function"
has "ncclDevKernel_AllGather_RING_LL (collectives)" "a kernel's parameter list left out"
grep -q "memcpy HtoD" "$d/out" && bad "the start-up copy is in both runs, so --minus cancels it: $(grep memcpy "$d/out")"
kt "$fx/long.rank0.txt" --steps 3 >"$d/out3" && grep -qE "^ +0\.333 +0\.3 +1000\.0  memcpy HtoD \(copies between host and GPU\)" "$d/out3" &&
  grep -q "a step on the GPU's clock: 10.50 ms, busy 7.83 ms" "$d/out3" \
  && ok "without --minus: a run's totals over its steps, the start-up copy included" || bad "--steps 3 alone: $(cat "$d/out3")"
# the roofline's columns, and the math path's two attention rows summed
kt "$fx/long.rank0.txt" --minus "$fx/short.rank0.txt" --steps 2 --roofline "$d/plan" --precision fp32 >"$d/fp32"
grep -qE "^  matmuls.* $(awk '/^  matmuls/ { print $6 }' "$d/plan") " "$d/fp32" \
  && ok "--precision fp32 reads the roofline's fp32 column" || bad "--precision fp32"
./fsdp --plan --model gpt2 --batch 8 --context 1024 --roofline h100 >"$d/plan2" 2>&1
att=$(awk '/^  attention/ { s += $(NF - 1) } END { printf "%.3f", s }' <(grep -v memory "$d/plan2"; grep memory "$d/plan2" | sed 's/ *(memory)$//'))
kt "$fx/long.rank0.txt" --minus "$fx/short.rank0.txt" --steps 2 --roofline "$d/plan2" >"$d/math"
grep -qE "^  attention +0\.00 +$att " "$d/math" \
  && grep -q "note: the math path's attention GEMMs are cuBLAS kernels" "$d/math" \
  && ok "the math path's two attention rows are one kind: $att ms, with a note on where its GEMMs went" || bad "attention's rows, want $att: $(grep attention "$d/math")"

# ---- real kernels' names, each in its kind --------------------------------------------------
# cuBLAS's and cuBLASLt's (Hopper's nvjet and xmma, CUTLASS, split-K's
# reduction, the bias epilogue's helper), NCCL's, and ours as nvcc
# mangles them, demangled as dev/profile/kernel_times.so writes them
if python3 - >"$d/names" 2>&1 <<'PY'; then ok "$(tail -1 "$d/names")"; else bad "names in the wrong kind:"; cat "$d/names"; fi
import importlib.util
spec = importlib.util.spec_from_file_location("kt", "dev/profile/kernel_times.py")  # not the .so beside it
kt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kt)
want = {
    "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_TNT": "matmuls",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas": "matmuls",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)": "matmuls",
    "void cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized_cooperative_epi_tma(cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized_cooperative_epi_tma::Params)": "matmuls",
    "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>(cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*)": "matmuls",
    "void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, __nv_bfloat16, true, false, false>(int, int, long, float*, long, float*, long, __nv_bfloat16 const*, long)": "matmuls",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)": "matmuls",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "collectives",
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "collectives",
    "void for_each_kernel<&(adamw_one(long, float*, float*, float*, float const*, AdamWStep)), float*, float*, float*, float*, AdamWStep>(long, float*, float*, float*, float*, AdamWStep)": "AdamW",
    "void for_each_kernel<&(unpack_mean_one(long, float*, unsigned short const*, Dtype, float)), float*, unsigned short*, Dtype, float>(long, float*, unsigned short*, Dtype, float)": "FSDP's",
    "void flash_backward_key_tc<__nv_bfloat16>(unsigned short*, unsigned short const*, unsigned short const*, float const*, float const*, int, int, int)": "attention",
    "layernorm_forward_warp(void*, float*, float*, void const*, void const*, void const*, int, int, Dtype, Dtype, Dtype)": "layernorm",
    "void (anonymous namespace)::for_each_kernel<&((anonymous namespace)::residual_add_one(long, float*)), float*>(long, float*)": "residual",
    "memcpy DtoH": "copies",
    "memset": "FSDP's",
}
wrong = [(n, kt.kind_of(kt.short_name(n)), k) for n, k in want.items()
         if not kt.kind_of(kt.short_name(n)).startswith(k)]
for n, got, k in wrong:
    print(f"  {kt.short_name(n)}: {got}, want {k}")
if wrong:
    raise SystemExit(1)
print(f"{len(want)} real names in their kinds: cuBLAS's nvjet, xmma, CUTLASS, split-K and gemv, cuBLASLt's epilogue, NCCL's, ours demangled")
PY

# ---- every kernel fsdp-gpu can launch has a kind ------------------------------------------
# Its kernels as the source declares them (each __global__ function, and
# each function FOR_EACH launches as for_each_kernel<fn>), and those the
# emulator counted in runs that launch most of them (FSDP_EMU_STATS): a
# kernel added without a kind in kernel_times.py's table would go to
# "other", where nobody looks for it.
emu_names=""
if [ -x ./fsdp-emu ]; then
  for r in "1 --model gpt2-tiny --param-dtype bf16 --attention flash --clip-grad-norm 1" \
           "2 --model gpt2-tiny --attention math --collectives mpi --strategy no_shard" \
           "2 --model gpt2-tiny --cpu-offload" \
           "1 --param-dtype fp16 --grad-scaler"; do
    # shellcheck disable=SC2086  # the flags are a word list
    FSDP_EMU_STATS=$d/emu timeout 120 $MPIRUN -np ${r%% *} ./fsdp-emu --steps 1 ${r#* } >"$d/emu.log" 2>&1 ||
      bad "./fsdp-emu --steps 1 ${r#* }: exit $? ($(tail -1 "$d/emu.log"))"
  done
  emu_names=$(awk '$3 == "kernel" { print $4 }' "$d/emu" | sort -u)
else
  echo "note: no ./fsdp-emu (make fsdp-emu needs CUDA's headers): the kernels the source declares are checked alone"
fi
if python3 - $emu_names >"$d/kinds" 2>&1 <<'PY'; then ok "$(tail -1 "$d/kinds")"; else bad "kernels without a kind:"; cat "$d/kinds"; fi
import glob, importlib.util, re, sys
spec = importlib.util.spec_from_file_location("kt", "dev/profile/kernel_times.py")  # not the .so beside it
kt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kt)
declared = set()
for path in ["fsdp.c"] + glob.glob("kernels/*.h") + glob.glob("comm/*.h") + glob.glob("model/*.h"):
    s = open(path).read()
    declared |= set(re.findall(r"__global__\s+(?:static\s+)?void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)", s))
    declared |= {"for_each_kernel<%s>" % m[1] for m in re.findall(
        r"(?<![A-Z_])(?:STATE_)?FOR_EACH\(([^;]*?)\b(\w+_(?:one|row|col|block|query|key))\b", s)}
declared.discard("for_each_kernel")
ran = {n if n.startswith("for_each_kernel<") else n.split("<")[0] for n in sys.argv[1:]}  # flash_forward_tc<__half>
unknown = sorted(n for n in declared | ran if kt.kind_of(kt.short_name(n)) == kt.OTHER)
unseen = sorted(ran - declared)
for n in unknown: print("  no kind:", n)
for n in unseen: print("  launched, but not found in the source by this check:", n)
if unknown or unseen or len(declared) < 40:
    sys.exit(1)
print(f"every kernel has a kind: {len(declared)} declared in the source, {len(ran)} launched by the emulator's runs, all among them")
PY

# ---- bad input: one line, exit 2 ----------------------------------------------------------
refused() { # WHAT WANT ARGS...
  local what=$1 want=$2; shift 2
  kt "$@" >"$d/bad" 2>&1
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$want" "$d/bad" && [ "$(wc -l <"$d/bad")" -eq 1 ] && ok "refused, exit 2: $what" \
    || bad "$what: exit $rc, want 2 and '$want': $(cat "$d/bad")"
}
refused "a missing file" "cannot read $d/none" "$d/none"
: >"$d/empty"; refused "a file with no operations" "no operations recorded" "$d/empty"
echo "kernel 5 x 7 gemm" >"$d/garbled"; refused "a line that is not the library's" "garbled:1: not a line" "$d/garbled"
refused "--minus with the longer run" "nothing left a step" "$fx/short.rank0.txt" --minus "$fx/long.rank0.txt"
refused "--steps 0" "from 1" "$fx/long.rank0.txt" --steps 0
refused "a roofline file without rows" "no roofline rows" "$fx/long.rank0.txt" --roofline "$d/empty"
exit $fail
