#!/usr/bin/env bash
# dev/bench/bench.sh — speed figures side by side with references (make bench)
#
#   (a) training throughput: 1 rank, DDP and FSDP on 2 and 4 ranks
#   (a2) overlap: with and without the communication thread and prefetch,
#        here and on modelled links
#   (a3) the course's options: time and memory of each, beside fp32 full_shard
#   (b) collectives: our ring against Open MPI's built-ins, on 2 and 4 ranks
#   (c) the Linear layers against a textbook matmul and OpenBLAS, on one core
#   (d) GPT-2 on one rank beside transformers + PyTorch on one thread, and
#       --attention flash beside the math path
#   (e) --cpu-offload's AdamW in host memory: every core against one thread
#   (f) nanoGPT's CPU recipe (make shakespeare-gpt2): fsdp.c on every core
#       beside PyTorch on the same cores, one process and FSDP
#
# Every figure is printed next to the one it should be read against, from the
# same run on the same machine: absolute numbers from a laptop say little,
# ratios say a lot. `make bench` builds the binaries first; run from anywhere.
set -euo pipefail

cd "$(dirname "$0")/../.."

# The Makefile exports these; sim/mpi-env.sh sets them when run by hand.
. sim/mpi-env.sh
# MPIRUN is a command with options; split it into words once.
read -r -a MPIRUN_CMD <<< "$MPIRUN"

for bin in ./fsdp dev/bench/bench_collectives dev/bench/bench_matmul dev/bench/bench_adamw; do
    if [[ ! -x $bin ]]; then
        echo "error: $bin is not built." >&2
        echo "HINT: run 'make bench', which builds it and then runs this script." >&2
        exit 1
    fi
done

cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo "?")
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || true)
ompi=$(mpirun --version 2>/dev/null | head -n1 || true)

echo "=================================================================="
echo "fsdp.c benchmarks"
echo "=================================================================="
echo "machine: ${cores} cores${cpu:+, $cpu}${ompi:+; $ompi}"
if [[ $cores =~ ^[0-9]+$ ]] && (( cores < 4 )); then
    echo "NOTE: $cores cores, so 4 ranks are oversubscribed: ranks take turns on the cores,"
    echo "      and a rank waiting in a collective competes with those computing. On this"
    echo "      machine more ranks cannot mean more speed; the figures show what communication"
    echo "      and sharding cost, not how FSDP scales on N real GPUs."
fi
echo "Other programs running at the same time make any of these numbers noisier."

# ---- (a) training throughput ------------------------------------------------
# One fixed job for every configuration: the same model, global batch and
# steps, so ms/step and tok/s compare directly. tok/s is for the global
# batch (all ranks together). The timing fsdp prints covers every step,
# the slower first one included.
TRAIN_ARGS=(--model small --steps 30 --log-every 1000)
REPEATS=3 # best of 3 runs: the fastest is the one least disturbed by the OS

# Runs fsdp REPEATS times; prints "ms_per_step tok_per_s" of the fastest run.
train() {
    local np=$1; shift
    local best_ms="" best_tok="" out line ms tok
    for ((r = 0; r < REPEATS; r++)); do
        if ! out=$("${MPIRUN_CMD[@]}" -np "$np" ./fsdp "${TRAIN_ARGS[@]}" "$@" 2>&1); then
            echo "error: mpirun -np $np ./fsdp ${TRAIN_ARGS[*]} $* failed:" >&2
            echo "$out" | tail -n 20 >&2
            exit 1
        fi
        # the line: "30 steps in 0.89 s: 29.71 ms/step, 2154 tok/s (...)"
        line=$(echo "$out" | grep -E '^[0-9]+ steps in [0-9.]+ s: ' | tail -n1 || true)
        if [[ -z $line ]]; then
            echo "error: no 'N steps in X s: Y ms/step, Z tok/s' line in fsdp's output:" >&2
            echo "$out" | tail -n 20 >&2
            exit 1
        fi
        ms=$(echo "$line" | sed -E 's/.*: ([0-9.]+) ms\/step.*/\1/')
        tok=$(echo "$line" | sed -E 's/.*, ([0-9.]+) tok\/s.*/\1/')
        if [[ -z $best_ms ]] || awk -v a="$ms" -v b="$best_ms" 'BEGIN { exit !(a < b) }'; then
            best_ms=$ms
            best_tok=$tok
        fi
    done
    echo "$best_ms $best_tok"
}

echo
echo "------------------------------------------------------------------"
echo "(a) training throughput: ./fsdp ${TRAIN_ARGS[*]}"
echo "    global batch 64 on every row; best of $REPEATS runs"
echo "------------------------------------------------------------------"
printf "%-26s %5s %-11s %9s %9s %10s\n" "config" "ranks" "collectives" "ms/step" "tok/s" "vs 1 rank"

base_tok=""
row() { # label ranks collectives fsdp-args...
    local label=$1 np=$2 coll=$3; shift 3
    local res ms tok
    res=$(train "$np" --collectives "$coll" "$@")
    read -r ms tok <<< "$res"
    [[ -n $base_tok ]] || base_tok=$tok
    printf "%-26s %5s %-11s %9s %9s %9sx\n" "$label" "$np" "$coll" "$ms" "$tok" \
        "$(awk -v a="$tok" -v b="$base_tok" 'BEGIN { printf "%.2f", a / b }')"
}
row "1 rank (no_shard)"         1 ring --strategy no_shard
row "DDP (no_shard)"            2 ring --strategy ddp
row "DDP (no_shard)"            4 ring --strategy ddp
row "FSDP (full_shard)"         2 ring --strategy full_shard
row "FSDP (full_shard)"         4 ring --strategy full_shard
row "FSDP (full_shard)"         4 mpi  --strategy full_shard
echo "(1 rank communicates nothing: with one rank there is nothing to gather or reduce)"

# ---- (a3) the course's options: what each costs in time and saves in memory --------
# 2 ranks, full_shard, the same job; the peak is rank 0's ledger peak (device
# memory). On a CPU, 16-bit numbers are fp32 numbers rounded (core.h's
# 16-bit formats): they save memory and bytes here, not time; recomputation and
# offload copies cost time as they would on a GPU.
options_row() { # label fsdp-args...
    local label=$1; shift
    local best="" r out ms peak
    for ((r = 0; r < REPEATS; r++)); do
        out=$("${MPIRUN_CMD[@]}" -np 2 ./fsdp "${TRAIN_ARGS[@]}" "$@" 2>&1) || {
            echo "error: fsdp $* failed:" >&2; echo "$out" | tail -n 20 >&2; exit 1; }
        ms=$(echo "$out" | grep -E '^[0-9]+ steps in' | sed -E 's/.*: ([0-9.]+) ms\/step.*/\1/')
        if [[ -z $best ]] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$ms; fi
    done
    peak=$(echo "$out" | awk '/total \(peak of the sum\)/ {print $6}')
    [[ -n ${opt_ms:-} ]] || { opt_ms=$best; opt_peak=$peak; }
    printf "%-40s %9s %7.2fx %10s %7.2fx\n" "$label" "$best" "$(awk -v a="$best" -v b="$opt_ms" 'BEGIN { print a / b }')" \
        "$peak" "$(awk -v a="$peak" -v b="$opt_peak" 'BEGIN { print a / b }')"
}
echo
echo "------------------------------------------------------------------"
echo "(a3) the course's options: 2 ranks, full_shard, ./fsdp ${TRAIN_ARGS[*]}"
echo "     ms/step (best of $REPEATS) and rank 0's peak device memory, beside fp32 full_shard"
echo "------------------------------------------------------------------"
printf "%-40s %9s %8s %10s %8s\n" "option" "ms/step" "vs fp32" "peak MiB" "vs fp32"
options_row "fp32 (the reference)"
options_row "--param-dtype bf16" --param-dtype bf16
options_row "--param-dtype fp16 --grad-scaler" --param-dtype fp16 --grad-scaler
options_row "--activation-checkpointing" --activation-checkpointing
options_row "--grad-accum 4" --grad-accum 4
options_row "--grad-accum 4 --no-sync" --grad-accum 4 --no-sync
options_row "--cpu-offload" --cpu-offload
options_row "--strategy zero1" --strategy zero1

# ---- (a2) overlap: the communication thread and prefetch ------------------------
# Real ms/step on this machine (best of REPEATS), and what the same schedule
# takes on a modelled link (the end-of-run "this schedule there" line, which
# replays the run's own dependencies with --net's timings).
schedule_ms() { # net fsdp-args... -> "real_ms sim_ms hidden%"
    local net=$1; shift
    local out
    out=$("${MPIRUN_CMD[@]}" -np 4 ./fsdp "${TRAIN_ARGS[@]}" --net "$net" "$@" 2>&1) || {
        echo "error: fsdp $* --net $net failed:" >&2; echo "$out" | tail -n 20 >&2; exit 1; }
    local ms sim hidden
    ms=$(echo "$out" | grep -E '^[0-9]+ steps in' | sed -E 's/.*: ([0-9.]+) ms\/step.*/\1/')
    sim=$(echo "$out" | grep 'this schedule there' | sed -E 's/.*: ([0-9.]+) ms per step.*/\1/')
    hidden=$(echo "$out" | grep 'this schedule there' | sed -E 's/.*\(([0-9-]+)%\).*/\1/')
    echo "$ms $sim $hidden"
}
echo
echo "------------------------------------------------------------------"
echo "(a2) overlap: 4 ranks, full_shard, ./fsdp ${TRAIN_ARGS[*]}"
echo "     this machine's ms/step (best of $REPEATS) beside the same schedule on a modelled link"
echo "------------------------------------------------------------------"
printf "%-40s %9s %14s %16s\n" "schedule" "ms/step" "nvlink ms (hid)" "ethernet ms (hid)"
overlap_row() { # label fsdp-args...
    local label=$1; shift
    local best="" r ms sim hid nv_sim nv_hid
    for ((r = 0; r < REPEATS; r++)); do
        read -r ms sim hid <<< "$(schedule_ms nvlink "$@")"
        if [[ -z $best ]] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then
            best=$ms; nv_sim=$sim; nv_hid=$hid
        fi
    done
    read -r ms sim hid <<< "$(schedule_ms ethernet "$@")"
    printf "%-40s %9s %9s (%3s%%) %10s (%3s%%)\n" "$label" "$best" "$nv_sim" "$nv_hid" "$sim" "$hid"
}
overlap_row "inline collectives, no prefetch" --inline-collectives --backward-prefetch none
overlap_row "thread, no prefetch"                --backward-prefetch none
overlap_row "thread, backward prefetch pre"      --backward-prefetch pre
overlap_row "thread, pre + forward prefetch"     --backward-prefetch pre --forward-prefetch
echo "(hid: the share of the collectives' modelled time hidden behind compute; on fewer"
echo " cores than ranks x 2 the thread competes with compute, so this machine's ms/step"
echo " can rise while the modelled schedule improves)"

# ---- (b) collectives -----------------------------------------------------------
for np in 2 4; do
    echo
    echo "------------------------------------------------------------------"
    echo "(b) collectives: mpirun -np $np dev/bench/bench_collectives"
    echo "------------------------------------------------------------------"
    "${MPIRUN_CMD[@]}" -np "$np" dev/bench/bench_collectives
done

# ---- (c) the Linear layers -----------------------------------------------------
# ---- (d) GPT-2 against transformers ------------------------------------------
# One rank of fsdp.c (one thread) beside transformers' GPT2LMHeadModel of the
# same shape on one PyTorch thread (dev/bench/bench_gpt2_torch.py): forward,
# backward and AdamW on the same B x T tokens, fp32. PyTorch's matmuls are
# oneDNN's/MKL's, tuned per CPU; fsdp.c's are kernels/layers.h's loops.
echo
echo "------------------------------------------------------------------"
echo "(d) GPT-2: 1 rank of ./fsdp beside transformers + PyTorch on 1 thread (fp32)"
echo "------------------------------------------------------------------"
printf "%-34s %9s %9s %18s\n" "model (batch x context)" "ms/step" "tok/s" "PyTorch ms/step"
gpt2_row() { # gpt2_row PRESET L D H T V B
    local preset=$1 ms tok ref="not installed (make torch-deps)"
    TRAIN_ARGS=(--model "$preset" --batch "$7" --steps 11 --log-every 1000)
    read -r ms tok < <(train 1)
    if .venv-torch/bin/python -c "import torch, transformers" 2>/dev/null; then
        ref=$(.venv-torch/bin/python dev/bench/bench_gpt2_torch.py "$2" "$3" "$4" "$5" "$6" "$7" 10 2>/dev/null |
            awk -v ms="$ms" '{ printf "%.2f (%.2fx)", $1, ms / $1 }')
    fi
    printf "%-34s %9s %9s %18s\n" "$preset ($7 x $5)" "$ms" "$tok" "$ref"
}
gpt2_row gpt2-tiny 2 32 2 16 256 64
gpt2_row gpt2-mini 4 128 4 64 256 16
echo "(x: fsdp.c's time over PyTorch's; fsdp.c's ms/step includes its first step)"

# --attention flash beside the math path, on the CPU: it computes the
# scores again in backward (time) and keeps one number a query row where
# the math path keeps the B*H*T^2 probabilities (activations, from --plan)
echo
printf "%-34s %9s %9s %18s\n" "gpt2-mini, 16 x 128, 1 rank" "ms/step" "tok/s" "activation bytes"
for att in math flash; do
    TRAIN_ARGS=(--model gpt2-mini --batch 16 --steps 11 --log-every 1000 --attention "$att")
    read -r ms tok < <(train 1)
    act=$(./fsdp --plan "${TRAIN_ARGS[@]}" | awk '/^  activations/ { print $2 }')
    printf "%-34s %9s %9s %18s\n" "--attention $att" "$ms" "$tok" "$act"
done

echo
echo "------------------------------------------------------------------"
matmul=dev/bench/bench_matmul
[[ -x dev/bench/bench_matmul_blas ]] && matmul=dev/bench/bench_matmul_blas # beside OpenBLAS
echo "(c) matmul: $matmul"
echo "------------------------------------------------------------------"
"$matmul"

# ---- (e) the offloaded optimizer --------------------------------------------------
# --cpu-offload steps AdamW on the CPU; HOST_FOR_EACH splits it over the
# cores (OpenMP). 2^25 elements, 512 MiB of state: one thread is the
# reference, in the same run, and both must leave the same bits.
echo
echo "------------------------------------------------------------------"
echo "(e) --cpu-offload's AdamW on the host: every core beside one thread"
echo "------------------------------------------------------------------"
dev/bench/bench_adamw $((1 << 25))

# ---- (f) nanoGPT's CPU recipe: fsdp.c beside PyTorch on the same cores -----------
# One step of make shakespeare-gpt2's recipe (bridge/gpt2_recipe.py): 12 x 64
# tokens, fp32, clipping and AdamW's two groups. fsdp.c on N ranks (N =
# cores, a unit a block) beside PyTorch on the same N cores: one process of
# N threads, and FSDP1 and FSDP2 on N ranks of one thread
# (dev/bench/bench_recipe_torch.py). The issue's goal: at most 1.0x the
# one process, at most 0.5x PyTorch's FSDP.
echo
echo "------------------------------------------------------------------"
echo "(f) nanoGPT's CPU recipe, one step of 12 x 64 tokens: fsdp.c beside PyTorch"
echo "------------------------------------------------------------------"
recipe_ranks=$cores
[[ $recipe_ranks =~ ^[0-9]+$ ]] && (( 12 % recipe_ranks == 0 )) || recipe_ranks=2
TRAIN_ARGS=(--model gpt2-mini --n-layer 4 --n-head 4 --n-embd 128 --context 64 --batch 12
            --auto-wrap transformer --lr 1e-3 --min-lr 1e-4 --lr-schedule cosine --warmup 10
            --beta2 0.99 --weight-decay 0.1 --no-decay-bias-norm --clip-grad-norm 1.0
            --steps 40 --log-every 1000)
read -r recipe_ms _ < <(train "$recipe_ranks")
read -r recipe1_ms _ < <(train 1)
printf "%-44s %9s %22s\n" "" "ms/step" "fsdp.c's time over it"
printf "%-44s %9s\n" "fsdp.c, $recipe_ranks ranks (full_shard)" "$recipe_ms"
printf "%-44s %9s\n" "fsdp.c, 1 rank" "$recipe1_ms"
if .venv-torch/bin/python -c "import torch, transformers" 2>/dev/null; then
    torch_row() { # label ms fsdp_ms
        printf "%-44s %9s %21sx\n" "$1" "$2" "$(awk -v a="$3" -v b="$2" 'BEGIN { printf "%.2f", a / b }')"
    }
    quiet_torchrun() { # torchrun's banner about OMP_NUM_THREADS is not a result
        .venv-torch/bin/torchrun --nproc-per-node "$recipe_ranks" dev/bench/bench_recipe_torch.py "$@" 2>/dev/null | tail -n1
    }
    torch_row "PyTorch, 1 process, $recipe_ranks threads" \
        "$(.venv-torch/bin/python dev/bench/bench_recipe_torch.py plain "$recipe_ranks" 20)" "$recipe_ms"
    torch_row "PyTorch, 1 process, 1 thread (beside 1 rank)" \
        "$(.venv-torch/bin/python dev/bench/bench_recipe_torch.py plain 1 20)" "$recipe1_ms"
    torch_row "PyTorch FSDP1, $recipe_ranks ranks (a unit a GPT2Block)" "$(quiet_torchrun fsdp1 20)" "$recipe_ms"
    torch_row "PyTorch FSDP2 (fully_shard), $recipe_ranks ranks" "$(quiet_torchrun fsdp2 20)" "$recipe_ms"
    echo "(x: fsdp.c's ms/step over the row's; the goal: <= 1.00 beside the one process,"
    echo " <= 0.50 beside PyTorch's FSDP. fsdp.c's figure includes its first step)"
else
    echo "PyTorch: not installed (make torch-deps), so no reference row"
fi
