#!/usr/bin/env bash
# tests/test_cli.sh: the command line rejects bad input cleanly.
#
# Every bad input must, under `$MPIRUN -np 2 ./fsdp ...`:
#   - exit with code 2 (not 0, not 1, not a signal, not a hang: each run is
#     under `timeout`, so a hang is a FAIL, not a stuck suite);
#   - print a clear message: a fragment we name must appear (grep -F) in the
#     combined stdout+stderr;
#   - print it once: "error:" occurs exactly once (only rank 0 prints);
#   - leave no fsdp process behind (pgrep -x fsdp).
# Positive controls (--help, -h, tiny runs) must exit 0 with no "error:", so
# a broken binary that rejects everything cannot pass.
#
# Prints one line per case (PASS/FAIL, the args, what it saw); exits 0 only
# if every case passes. Cases run CLI_JOBS at a time (default 4): even with
# the Makefile's sigkill timeout of 0 a run is mostly mpirun starting and
# stopping, asleep, so running them in parallel takes a quarter of the time.
#
# Usage: bash tests/test_cli.sh        (after `make fsdp`; make exports MPIRUN)

set -u
cd "$(dirname "$0")/.." || exit 1

FSDP=./fsdp
NP=2
CASE_TIMEOUT=60     # seconds per run
FIFO_TIMEOUT=15     # the named-pipe case: an error exit takes ~2 s; more is a hang
JOBS="${CLI_JOBS:-4}"
. sim/mpi-env.sh # make exports MPIRUN and the rest; so the script also runs on its own

if [ ! -x "$FSDP" ]; then
    echo "FAIL  $FSDP is not built; run: make fsdp"
    exit 1
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/fsdp_cli.XXXXXX")" || exit 1
cleanup() {
    # A rank stuck opening the named pipe is released by opening it here.
    if [ -p "$TMP/fifo" ]; then exec 9<>"$TMP/fifo"; exec 9>&-; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- data files ----------------------------------------------------------------
: >"$TMP/empty"
printf '01234567' >"$TMP/short8"        # tiny has --context 8: one sample needs 9 bytes
printf '012345678' >"$TMP/ok9"          # exactly --context + 1 bytes: accepted
mkdir "$TMP/dir"
mkfifo "$TMP/fifo"
MISSING="$TMP/no_such_file"

# ---- leftover processes -------------------------------------------------------
# Other jobs (make test, a demo in another shell) may run ./fsdp at the same
# time, so `pgrep -x fsdp` alone would blame them on us. Each case launches
# mpirun with FSDP_CLI_CASE=<this shell's pid>-<case number> in its
# environment; the ranks inherit it, and we count only fsdp processes
# carrying our tag (zombies have no environ and are not running).
TAG="$$"
our_fsdp() { # $1: exact tag, or a prefix ending in '-' (any of our cases)
    local p e
    for p in $(pgrep -x fsdp); do
        e="$( { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null)" || continue
        case "$1" in
            *-) grep -q "^FSDP_CLI_CASE=$1" <<<"$e" && printf '%s ' "$p" ;;
            *)  grep -qx "FSDP_CLI_CASE=$1" <<<"$e" && printf '%s ' "$p" ;;
        esac
    done
}
# our_fsdp_after TAG: the same, after giving the ranks of a finished (or
# killed) mpirun up to 3 s to exit.
our_fsdp_after() {
    local left i
    for i in $(seq 1 15); do
        left="$(our_fsdp "$1")"
        [ -n "$left" ] || return 0
        sleep 0.2
    done
    printf '%s' "$left"
}

# ---- one case ------------------------------------------------------------------
# run_case N EXPECTED_RC FRAGMENT LIMIT ARGS...
# Writes the report line to $TMP/N.line and "ok" to $TMP/N.ok on a pass.
run_case() {
    local n="$1" want="$2" frag="$3" limit="$4"
    shift 4
    local shown out rc t0 t1 errs seen why="" left
    shown="$(printf '%q ' "$@")"
    shown="${shown% }"
    [ -n "$shown" ] || shown="(no args)"
    t0=$(date +%s.%N)
    # Each case's own session directory. The cases run at once, and Open MPI
    # 4's mpiruns share /tmp/ompi.HOST.UID, which one removes as it ends,
    # perhaps while another is starting in it: "ORTE_ERROR_LOG ...
    # session_dir.c", exit 1 (seen once, a case of 60, beside other jobs).
    mkdir -p "$TMP/ompi.$n"
    export OMPI_MCA_orte_tmpdir_base="$TMP/ompi.$n"
    # shellcheck disable=SC2086  # MPIRUN is a command line: split it
    out="$(FSDP_CLI_CASE="$TAG-$n" timeout -k 5 "$limit" $MPIRUN -np "$NP" "$FSDP" "$@" 2>&1)"
    rc=$?
    t1=$(date +%s.%N)
    left="$(our_fsdp_after "$TAG-$n")"

    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then why+="; timed out after ${limit}s (hang), exit $rc"
    elif [ "$rc" != "$want" ]; then
        why+="; exit $rc, expected $want"
        [ "$rc" -gt 128 ] && why+=" (killed by signal $((rc - 128)))"
    fi
    if ! grep -qF -- "$frag" <<<"$out"; then why+="; no '$frag' in the output"; fi
    errs=$(grep -oF 'error:' <<<"$out" | wc -l)
    if [ "$want" = 0 ] && [ "$errs" != 0 ]; then why+="; 'error:' printed $errs times, expected none"; fi
    if [ "$want" != 0 ] && [ "$errs" != 1 ]; then why+="; 'error:' printed $errs times, expected once"; fi
    if [ -n "$left" ]; then
        why+="; fsdp left running: pids ${left% }"
        # shellcheck disable=SC2086  # a list of pids
        kill -9 $left 2>/dev/null # ours (tagged), so the suite leaves nothing behind
    fi

    # what it saw: the error line, else the fragment's line, else the first line
    seen="$(grep -m1 -F 'error:' <<<"$out")"
    [ -n "$seen" ] || seen="$(grep -m1 -F -- "$frag" <<<"$out")"
    [ -n "$seen" ] || seen="$(head -n1 <<<"$out")"
    [ -n "$seen" ] || seen="(no output)"
    [ "${#seen}" -le 160 ] || seen="${seen:0:157}..."
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    if [ -z "$why" ]; then
        printf 'PASS  %s  [exit %s, %ss] %s\n' "$shown" "$rc" "$secs" "$seen" >"$TMP/$n.line"
        echo ok >"$TMP/$n.ok"
    else
        printf 'FAIL  %s  [exit %s, %ss] %s\n      why: %s\n' "$shown" "$rc" "$secs" "$seen" "${why#; }" >"$TMP/$n.line"
    fi
}

N=0
spawn() { # spawn EXPECTED_RC FRAGMENT LIMIT ARGS...
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    N=$((N + 1))
    run_case "$N" "$@" &
}
bad() { spawn 2 "$1" "$CASE_TIMEOUT" "${@:2}"; }  # bad FRAGMENT ARGS...
good() { spawn 0 "$1" "$CASE_TIMEOUT" "${@:2}"; } # good FRAGMENT ARGS...

START=$SECONDS

# The slowest case first: a named pipe is not a regular file; reading it must
# not block (a hang shows up as a timeout here).
spawn 2 "not a regular file" "$FIFO_TIMEOUT" --data "$TMP/fifo"

# ---- positive controls ---------------------------------------------------------
good "usage:" --help
good "usage:" -h
good "2 steps in" --model tiny --steps 2 --batch 4
good "data: $TMP/ok9, 9 bytes" --model=tiny --steps=2 --batch=4 --data="$TMP/ok9"

# ---- unknown flags, stray arguments --------------------------------------------
bad "unknown option '--bogus'" --bogus 3
bad "unknown option '--bogus'" --bogus=3
bad "unknown option '--bogus'" --bogus            # last on the line: not "needs a value"
bad "unexpected argument 'foo'" foo
bad "unexpected argument 'foo'" --model tiny --steps 2 foo
bad "unexpected argument '-x'" -x

# ---- flags missing their value -------------------------------------------------
bad "--steps needs a value" --steps
bad "--data needs a value" --model tiny --data
bad "--lr needs a value" --steps 2 --lr

# ---- --flag=value form ---------------------------------------------------------
bad "--steps: 'abc' is not a whole number" --steps=abc
bad "--steps: '' is not a whole number" --steps=
bad "unknown model 'huge'" --model=huge
bad "--depth: 65 is out of range" --depth=65
bad "--help takes no value" --help=x
bad "--compare takes no value" --compare=yes

# ---- not numbers ---------------------------------------------------------------
bad "--steps: 'abc' is not a whole number" --steps abc
bad "--steps: '1.5' is not a whole number" --steps 1.5
bad "--seed: 'x' is not a whole number" --seed x
bad "--lr: 'x' is not a number" --lr x
bad "--lr: 'nan' is not a number" --lr nan
bad "--eps: 'inf' is not a number" --eps inf
bad "between 0 and 99999999" --steps 99999999999999999999
# checkpoints are named step-%08d: a step the name cannot hold is refused
bad "--steps: 100000000 is out of range. Give an integer between 0 and 99999999." --steps 100000000

# ---- floats that a double holds but a float does not -------------------------------
# 1e-50 passes "> 0" in double and becomes 0 (or a denormal) in the float the
# optimizer uses: NaN exports, clipping silently off, every step skipped.
bad "--eps: 1e-50 is below the smallest normal 32-bit float" --eps 1e-50
bad "--clip-grad-norm: 1e-50 is below the smallest normal 32-bit float" --clip-grad-norm 1e-50
bad "--init-scale: 1e-40 is below the smallest normal 32-bit float" --grad-scaler --init-scale 1e-40
bad "--lr: 1e-50 is below the smallest normal 32-bit float" --lr 1e-50
bad "--gamma: 1e-50 is below the smallest normal 32-bit float" --lr-schedule step --step-size 2 --gamma 1e-50
bad "--weight-decay: 1e-45 is below the smallest normal 32-bit float (1.17549e-38), the format the program holds it in: it would become 1.4013e-45. Give 0, or" --weight-decay 1e-45
good "2 steps in" --model tiny --steps 2 --batch 4 --weight-decay 0 --eps 1.2e-38
# ... and the sampler's temperature, which no optimizer computes with
bad "--temperature: 1e-45 is below the smallest normal 32-bit float (1.17549e-38), the format the program holds it in: it would become 1.4013e-45. Give 0, or" --model gpt2-tiny --sample 4 --temperature 1e-45

# ---- out of range: zero, negative, too large -----------------------------------
bad "--steps: -1 is out of range" --steps -1
bad "--batch: -4 is out of range" --batch -4
bad "--batch: 0 is out of range" --batch 0
bad "--depth: 0 is out of range" --depth 0
bad "--depth: 65 is out of range" --depth 65
bad "--width: 0 is out of range" --width 0
bad "--width: 8193 is out of range" --width 8193
bad "--context: 0 is out of range" --context 0
bad "--embed-dim: 0 is out of range" --embed-dim 0
bad "--lr: 0 is out of range" --lr 0
bad "--lr: -0.1 is out of range" --lr -0.1
bad "--beta1: 1 is out of range" --beta1 1
bad "--beta2: 1 is out of range" --beta2 1
bad "--eps: 0 is out of range" --eps 0
bad "--weight-decay: -1 is out of range" --weight-decay -1
bad "--log-every: 0 is out of range" --log-every 0
bad "--seed: -1 is out of range" --seed -1
bad "more than this simulator trains" --width 8192 --depth 64

# ---- unknown names -------------------------------------------------------------
bad "--model: unknown model 'huge'" --model huge
bad "--strategy: unknown strategy 'zero3'" --strategy zero3
bad "--collectives nccl needs GPUs: build the GPU binary (make gpu)" --collectives nccl
bad "--optimizer: unknown optimizer 'sgd'" --optimizer sgd
bad "--lr-schedule: unknown schedule 'onecycle'" --lr-schedule onecycle
bad "--lr-schedule step needs --step-size N" --lr-schedule step
bad "--lr-schedule cosine decays over the steps after --warmup" --lr-schedule cosine --warmup 200
bad "--lr-schedule linear decays over the steps after --warmup" --lr-schedule linear --warmup 200
bad "--min-lr is where cosine and linear decay end: add --lr-schedule cosine or linear" --min-lr 1e-4
bad "--min-lr 0.01 is above --lr 0.001" --lr-schedule cosine --lr 1e-3 --min-lr 1e-2
bad "--min-lr: -1 is out of range" --lr-schedule cosine --min-lr -1
bad "--no-decay-bias-norm exempts biases and LayerNorm from weight decay, but --weight-decay is 0 (Adam's default)" --optimizer adam --no-decay-bias-norm
bad "--no-decay-bias-norm takes no value" --no-decay-bias-norm=1
bad "--gamma: 0 is out of range" --gamma 0
bad "--step-size and --gamma are StepLR's: they apply to --lr-schedule step only" --step-size 3
bad "--step-size and --gamma are StepLR's: they apply to --lr-schedule step only" --lr-schedule cosine --warmup 2 --gamma 0.5
bad "--step-size: 0 is out of range" --lr-schedule step --step-size 0
bad "--warmup: -1 is out of range" --warmup -1
bad "--clip-grad-norm: 0 is out of range" --clip-grad-norm 0
bad "--clip-grad-norm: 'x' is not a number" --clip-grad-norm x
bad "--collectives: unknown implementation 'gloo'. Choose ring, mpi (or nccl in the GPU build)." --collectives gloo

# ---- auto-wrap threshold -------------------------------------------------------
bad "--min-params: 0 is out of range" --min-params 0
bad "--min-params 10257 is larger than the whole model (10256 parameters)" --model tiny --min-params 10257

# ---- simulated VRAM ---------------------------------------------------------------
bad "--vram: 'abc' is not a size" --vram abc
bad "--vram: '12X' is not a size" --vram 12X
bad "--vram: '0' is out of range" --vram 0
bad "--vram: '-1M' is out of range" --vram -1M
bad "--vram: '1.5' is 1.5 bytes, not a whole number of bytes" --vram 1.5
bad "--vram: '0x10M' is not a size" --vram 0x10M
bad "--vram: '1e3' is not a size" --vram 1e3
good "simulated VRAM: 1.50 MiB per rank" --model tiny --steps 2 --batch 4 --vram 1.5M
bad "--net: unknown network 'infiniband'. Choose nvlink, pcie, ib, ethernet or none, or two joined by +" --net infiniband

# ---- the instruments ----------------------------------------------------------
bad "--trace /nonexistent-dir/run.json: the directory /nonexistent-dir does not exist" --model tiny --trace /nonexistent-dir/run.json
bad "--trace /nonexistent-dir/run.no_shard.json: the directory /nonexistent-dir does not exist" --model tiny --compare --trace /nonexistent-dir/run.json
bad "--trace: the file name is empty" --trace ""
bad "--trace-clock: unknown clock 'wall'" --trace-clock wall
bad "--trace-clock sim times the collectives with a network model, but none is chosen" --trace /tmp/x.json --trace-clock sim
bad "--trace-clock sim times the collectives with a network model, but none is chosen" --trace /tmp/x.json --trace-clock sim --net none+none
bad "--step=slow: the values are auto and ring" --step=slow
bad "--view takes no value" --view=yes
bad "--backward-prefetch: unknown value 'sideways'. Choose pre" --backward-prefetch sideways
bad "--limit-all-gathers: 'maybe'; give on or off." --limit-all-gathers maybe
bad "--forward-prefetch takes no value" --forward-prefetch=yes
bad "--inline-collectives takes no value" --inline-collectives=1
bad "--check-collectives takes no value" --check-collectives=1

# ---- checkpoints -----------------------------------------------------------------
bad "--save-every needs --save-dir" --save-every 5
bad "--save-every: 0 is out of range" --save-every 0 --save-dir /tmp
bad "--export /nonexistent-dir/m.safetensors: the directory /nonexistent-dir does not exist" --export /nonexistent-dir/m.safetensors
bad "--save-dir /nonexistent-dir/x/y: cannot create it" --save-dir /nonexistent-dir/x/y
bad "checkpoint options (--save-dir, --resume, --export, --init-from) apply to single runs only" --compare --export /tmp/m.st
bad "--resume: the path is empty" --resume ''

# ---- the world size ------------------------------------------------------------
bad "--batch 3 does not divide by 2 ranks" --model tiny --batch 3
bad "--batch 1 does not divide by 2 ranks" --model tiny --batch 1
bad "--grad-accum 3 does not divide the 32 samples each of 2 ranks takes" --model tiny --grad-accum 3
bad "--grad-accum: 0 is out of range" --grad-accum 0
bad "--no-sync keeps the gradients of the first K-1 of --grad-accum K" --model tiny --no-sync
bad "--param-dtype: unknown format 'fp8'. Choose fp32, bf16 or fp16." --param-dtype fp8
bad "--reduce-dtype: unknown format 'half'" --reduce-dtype half
bad "fp16 holds nothing below 2^-24" --param-dtype fp16
bad "fp16 holds nothing below 2^-24" --param-dtype bf16 --reduce-dtype fp16
bad "--init-scale is the first scale of --grad-scaler; add --grad-scaler." --init-scale 1024
bad "--init-scale: 0 is out of range" --grad-scaler --init-scale 0
bad "--strategy: unknown strategy 'zero2'. Choose full_shard, shard_grad_op, no_shard (alias ddp), hybrid_shard, hybrid_shard_zero2 or zero1." --strategy zero2
bad "--ranks-per-node 3 does not divide 2 ranks: every node holds the same number of ranks. Give a divisor of 2 (e.g. 1: 2 nodes of 1)" --model tiny --strategy hybrid_shard --ranks-per-node 3
bad "--ranks-per-node: 0 is out of range" --ranks-per-node 0
bad "--net: unknown network 'nvlink+carrier-pigeon'" --net nvlink+carrier-pigeon
bad "--plan trains nothing and writes nothing: leave out --compare" --plan --compare
bad "--compare --steps 0 has no step to time or measure. Give --steps 1 or more." --model tiny --compare --steps 0
# an option of a part that does not run is refused, not silently ignored
bad "--temperature shapes the text --sample prints, and there is none. Add --sample N" --model gpt2-tiny --temperature 0.5
bad "--tokenizer shapes the text --sample prints" --model gpt2-tiny --tokenizer "$TMP/ok9"
bad "--val-batches is for the validation loss, which only --val-every computes. Add --val-every N" --model gpt2-tiny --val-batches 2
bad "--val-data is for the validation loss" --model gpt2-tiny --val-data "$TMP/ok9"
bad "--min-params is the size policy's threshold, and --auto-wrap transformer makes a unit of each block" --model gpt2-tiny --auto-wrap transformer --min-params 1000
bad "--plan trains nothing and writes nothing" --plan --json /tmp/x.json
bad "--cpu-offload moves the shards to the host, but no_shard keeps whole replicas" --cpu-offload --strategy ddp
bad "--cpu-offload moves the shards to the host, but zero1 keeps whole replicas" --cpu-offload --strategy zero1
# --compare's DDP half is no_shard, which offload does not apply to: it runs without
good "(full_shard with --cpu-offload; no_shard without" --model tiny --steps 2 --batch 4 --compare --cpu-offload
good "(hybrid_shard with --cpu-offload; no_shard without" --model tiny --steps 2 --batch 4 --compare --cpu-offload --strategy hybrid_shard
# ... and so is one of a part that runs after steps there are none of
bad "--val-every computes the validation loss after training steps (every N, and the last), and --steps 0 runs none" --model gpt2-tiny --steps 0 --val-every 2
bad "--sample needs forward passes, and --plan runs none" --plan --model gpt2-tiny --sample 4
bad "--val-every needs forward passes, and --plan runs none" --plan --model gpt2-tiny --val-every 2
good "sample (4 tokens after the corpus's first" --model gpt2-tiny --steps 0 --sample 4

# ---- --data --------------------------------------------------------------------
bad "--data $MISSING: cannot open it" --data "$MISSING"
bad "--data $TMP/empty: has 0 bytes" --data "$TMP/empty"
bad "--data $TMP/dir: is a directory, not a regular file" --data "$TMP/dir"
bad "has 8 bytes, but one sample needs --context + 1 = 9" --model tiny --data "$TMP/short8"
bad "has 9 bytes, but one sample needs --context + 1 = 101" --model tiny --context 100 --data "$TMP/ok9"
bad "--data: the file name is empty" --data ""

# ---- the environment ---------------------------------------------------------------
FSDP_GELU_FUSION=yes bad "FSDP_GELU_FUSION=yes: give 1" --model tiny --steps 1
FSDP_GELU_FUSION=0 good "1 steps in" --model tiny --steps 1 --batch 4

wait

# ---- report --------------------------------------------------------------------
pass=0 fail=0
for i in $(seq 1 "$N"); do
    if [ -f "$TMP/$i.line" ]; then cat "$TMP/$i.line"; else printf 'FAIL  case %s: no result\n' "$i"; fi
    if [ -f "$TMP/$i.ok" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done

left="$(our_fsdp_after "$TAG-")"
if [ -n "$left" ]; then
    echo "FAIL  after all cases: fsdp processes of this suite still running: ${left% }"
    # shellcheck disable=SC2086  # a list of pids
    kill -9 $left 2>/dev/null
    fail=$((fail + 1))
else
    echo "PASS  after all cases: no fsdp process of this suite left running (pgrep -x fsdp)"
    pass=$((pass + 1))
fi

echo "test_cli: $pass passed, $fail failed ($((SECONDS - START)) s, $JOBS at a time)"
[ "$fail" = 0 ]
