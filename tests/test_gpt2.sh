#!/usr/bin/env bash
# tests/test_gpt2.sh: GPT-2 under FSDP (model/gpt2.h), without PyTorch:
#   - N ranks compute what 1 rank computes: every strategy family, the
#     transformer auto-wrap policy, activation checkpointing, accumulation,
#     offload, odd N, and N larger than a unit; bf16's losses within
#     2^-8; a checkpoint of 4 ranks resumed on 2; the validation loss and
#     greedy generation too;
#   - the tied wte stays in the root's unit at any threshold;
#   - the export is Hugging Face's layout: lm_head tied (not stored),
#     Conv1D weights (in, out), a config.json beside it;
#   - --plan --model gpt2-xl on 64 ranks gives the ZeRO paper's GPT-2 1.5B
#     model states: 16 psi under DDP, (4 + 12/64) psi, (2 + 14/64) psi and
#     16 psi / 64 for its three stages;
#   - llm.c's token files train (and serve as --val-data), its tokenizer
#     file decodes --sample; bad ones (and bad shapes) are refused with
#     exit 2 and a message;
#   - --init-from reads the config.json beside the file: a different
#     n_head (which shapes cannot show), n_layer, n_embd, n_positions,
#     vocab_size, eps, activation, n_inner or attention scaling is
#     refused naming the field, both values and the flag; dropout is a
#     note; a config.json that is not JSON, or not a file, is refused.
# tests/test_gpt2_hf.sh compares with transformers itself.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
# --lr 1e-3: AdamW moves an element by lr * g / (|g| + eps) at first, so
# where a gradient is near eps its rounding (another order of sums on N
# ranks) shows in the parameters at up to lr's scale; a smaller lr keeps
# that under the 1e-5 every N-vs-1 check allows.
ARGS="--model gpt2-tiny --steps 4 --batch 12 --log-every 1 --lr 1e-3"

# same NAME REF NP FLAGS...: NP ranks' parameters after 4 steps equal the
# reference run REF's within 1e-5 (fp32 sums in another order, as the
# suite's other N-vs-1 checks)
export_run() { # export_run NAME NP FLAGS...: $D/NAME/model.safetensors (and config.json)
  local name=$1 np=$2; shift 2
  mkdir -p "$D/$name"
  run_fsdp "$np" "$D/$name.log" --export "$D/$name/model.safetensors" "$@"
}
same() {
  local name=$1 ref=$2 np=$3; shift 3
  export_run "$name" "$np" "$@"
  if d=$(tests/st_diff "$D/$ref/model.safetensors" "$D/$name/model.safetensors" 1e-5 2>&1); then ok "$np ranks ($*) == $ref's run: $d"
  else bad "$np ranks ($*) differ from $ref's run: $d"; fi
}
export_run ref 1
same fs3 ref 3
same hyb4 ref 4 --strategy hybrid_shard --ranks-per-node 2 --auto-wrap transformer
same sgo2 ref 2 --strategy shard_grad_op --activation-checkpointing --grad-accum 2 --backward-prefetch post
same z1 ref 3 --strategy zero1 --grad-accum 2 --no-sync
same off2 ref 2 --cpu-offload --forward-prefetch
# units of 4 elements (n_embd 2: a LayerNorm's weight and bias) on 6 ranks
export_run small1 1 --n-embd 2 --n-head 1 --min-params 1
same small6 small1 6 --n-embd 2 --n-head 1 --min-params 1

# --attention flash (FlashAttention: P recomputed in backward, never
# stored) computes the math path's numbers in another order: on 3 ranks
# (odd), and with activation checkpointing, which reruns it, against the
# 1-rank math run, within the same 1e-5; gpt2-tiny's T 32 is one key
# tile, so a shape of T 80 (three tiles, one partial) too
same flash3 ref 3 --attention flash
same flashac2 ref 2 --attention flash --activation-checkpointing --strategy hybrid_shard --ranks-per-node 1
export_run long1 1 --context 80 --n-ctx 80
same longflash3 long1 3 --context 80 --n-ctx 80 --attention flash

# mixed precision: bf16 rounds each value to within 2^-8 of itself, so
# the sums of 3 ranks and of 1 differ by that much at most, and AdamW
# turns near-zero gradients' differences into parameter differences up to
# lr: the losses (means over 192 positions) are the sharp test, within 2^-8
losses_close() { # losses_close REF_LOG LOG WHAT: 4 steps' losses within 2^-8
  local r
  if r=$(paste <(grep -o 'loss [0-9.]*' "$1") <(grep -o 'loss [0-9.]*' "$2") |
    awk '{ d = $2 - $4; d = d < 0 ? -d : d; if (d / $2 > w) w = d / $2; n++ }
         END { printf "%d steps, worst %.1e", n, w; exit !(n == 4 && w < 2 ^ -8) }'); then
    ok "$3 within 2^-8 ($r)"
  else bad "$3: not within 2^-8 ($r)"; fi
}
run_fsdp 1 "$D/bf1.log" --param-dtype bf16
run_fsdp 3 "$D/bf3.log" --param-dtype bf16 --strategy shard_grad_op
losses_close "$D/bf1.log" "$D/bf3.log" "--param-dtype bf16: 3 ranks' losses are 1 rank's"
# ... and with --attention flash, the math path's (the two round P at
# different places: unnormalized, or divided by the row's sum)
run_fsdp 3 "$D/bff3.log" --param-dtype bf16 --attention flash
losses_close "$D/bf1.log" "$D/bff3.log" "--param-dtype bf16 --attention flash: 3 ranks' losses are 1 rank's math path's"

# --plan with --attention flash: a block keeps lse (B*H*T fp32) where the
# math path keeps P (B*H*T^2, fp32 here), and backward's scratch is delta
# (B*H*T) for dP: 13 x (B*H*T^2 - B*H*T) x 4 bytes fewer, by hand, for
# gpt2 at batch 8 (12 blocks + the scratch)
am=$(./fsdp --plan --model gpt2 --batch 8 2>&1 | awk '/^  activations/ { print $2 }')
af=$(./fsdp --plan --model gpt2 --batch 8 --attention flash 2>&1 | awk '/^  activations/ { print $2 }')
want=$(awk 'BEGIN { n = 8 * 12 * 1024; printf "%.0f", 13 * (n * 1024 - n) * 4 }')
if [ -n "$am" ] && [ -n "$af" ] && [ $((am - af)) = "$want" ]; then
  ok "--plan --attention flash: activations $af bytes, $want fewer than the math path's (13 x (B H T^2 - B H T) x 4)"
else bad "--plan --attention flash: activations $af vs $am, expected $want fewer"; fi


./fsdp $ARGS --steps 0 --min-params 1 >"$D/wrap.log" 2>&1
if grep -qE '^ +0 \(root\): transformer.wte ' "$D/wrap.log" && ! grep -qE '^ +[1-9][0-9]* transformer.wte' "$D/wrap.log"; then
  ok "--min-params 1 wraps every module but wte, which stays in the root's unit with lm_head"
else bad "wte left the root's unit:"; grep -E '^ +[0-9]+ ' "$D/wrap.log" | head -4; fi

# a checkpoint of 4 ranks, resumed on 2: the same parameters at step 4
run_fsdp 4 "$D/save.log" --steps 2 --save-dir "$D/ck"
same resumed ref 2 --resume "$D/ck"

# the export: Hugging Face's names and layout
python3 - "$D/ref/model.safetensors" "$D/ref" <<'PY' && ok "export: transformer.* names, no lm_head.weight (tied to wte), c_attn (32, 96) as Conv1D, config.json says GPT2LMHeadModel" || bad "export layout (above)"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
problems = []
if "lm_head.weight" in h: problems.append("lm_head.weight stored: it is wte's tensor")
if h.get("transformer.h.0.attn.c_attn.weight", {}).get("shape") != [32, 96]: problems.append("c_attn not (in, out) = (32, 96)")
if h.get("transformer.wte.weight", {}).get("shape") != [256, 32]: problems.append("wte not (256, 32)")
c = json.load(open(sys.argv[2] + "/config.json"))
if c.get("architectures") != ["GPT2LMHeadModel"] or c.get("activation_function") != "gelu_new" or c.get("n_embd") != 32:
    problems.append("config.json: %s" % c)
print("\n".join(problems)); sys.exit(1 if problems else 0)
PY

# the validation loss, and greedy generation, on 1 and 3 ranks
for np in 1 3; do
  run_fsdp $np "$D/gen$np.log" --val-every 2 --sample 24 --temperature 0
done
v1=$(grep 'val loss' "$D/gen1.log" | tail -1 | awk '{print $6}'); v3=$(grep 'val loss' "$D/gen3.log" | tail -1 | awk '{print $6}')
if [ -n "$v1" ] && [ "$v1" = "$v3" ]; then ok "--val-every: the validation loss on 3 ranks is 1 rank's ($v1)"
else bad "--val-every: val loss '$v1' on 1 rank, '$v3' on 3"; fi
s1=$(grep -A1 '^sample' "$D/gen1.log" | tail -1); s3=$(grep -A1 '^sample' "$D/gen3.log" | tail -1)
if [ ${#s1} -ge 25 ] && [ "$s1" = "$s3" ]; then ok "--sample 24 --temperature 0: 3 ranks generate 1 rank's text: '$s1'"
else bad "--sample: '$s1' on 1 rank, '$s3' on 3"; fi
# ... at a vocabulary not a multiple of 64 (GPT-2's 50257 is not either),
# whose logits' rows are padded to 320 (logits_stride): trained on "abab"
# to a loss near 0.03, the greedy text continues it. It once read the
# last position's logits at (T - 1) * V, inside another row: garbage.
printf 'ab%.0s' $(seq 1 5000) >"$D/ab.txt"
timeout 120 $MPIRUN -np 2 ./fsdp --model gpt2-tiny --vocab 300 --data "$D/ab.txt" --steps 100 --batch 8 \
  --log-every 100 --sample 20 --temperature 0 >"$D/ab.log" 2>&1 || bad "--vocab 300 --sample: exit $?"
s=$(grep -A1 '^sample' "$D/ab.log" | tail -1)
if [ "$s" = ababababababababababa ]; then ok "--vocab 300 --sample 20 --temperature 0 after 'abab...': '$s'"
else bad "--vocab 300 --sample 20 --temperature 0 after 'abab...' ($(grep -o 'loss [0-9.]*' "$D/ab.log" | tail -1)): '$s'"; fi

# --plan: the ZeRO paper's GPT-2 1.5B with mixed-precision Adam, on 8
# devices (lecture 18 runs the paper's 64, and its page check holds the
# bytes it shows; here the formulas, on 8: 64 ranks take 3 s to start)
plan() { # plan STRATEGY PSI_FACTOR WHAT
  local out psi got
  out=$($MPIRUN -np 8 ./fsdp --plan --model gpt2-xl --param-dtype bf16 --strategy "$1" 2>&1)
  psi=$(sed -n 's/.*| \([0-9]*\) parameters$/\1/p' <<<"$out")
  got=$(sed -n "s/^  model states (ZeRO's count) *\([0-9]*\) bytes.*/\1/p" <<<"$out")
  if awk -v g="$got" -v p="$psi" -v f="$2" 'BEGIN { exit !(p > 1.5e9 && g > 0 && g / (f * p) > 0.99 && g / (f * p) < 1.02) }'; then
    ok "--plan gpt2-xl, 8 ranks, $1 ($3): $(awk -v g="$got" 'BEGIN { printf "%.2f GB", g / 1e9 }') model states = $2 x $psi parameters"
  else bad "--plan gpt2-xl $1: model states $got bytes, expected $2 x $psi ($3)"; echo "$out" | tail -14; fi
}
plan no_shard 16 "DDP: 2 + 2 + 12 bytes a parameter, the paper's 24 GB"
plan zero1 5.5 "stage 1: 4 + 12/8"
plan shard_grad_op 4 "stage 2: 2 + 14/8, plus the 16-bit shard beside the full parameters, 2/8"
plan full_shard 2 "stage 3: 16/8"

# --plan's compute, llm.c's count, by hand: gpt2 (124,439,808 parameters,
# L 12, T 1024, D 768) on 8 ranks of batch 64, 8 sequences a rank
out=$($MPIRUN -np 8 ./fsdp --plan --model gpt2 --batch 64 2>&1)
want=$(awk 'BEGIN { printf "%.4g", (6 * 124439808 + 12 * 12 * 1024 * 768) * 8 * 1024 / 1e12 }')
if grep -q "^  compute        $want TFLOP a step per rank" <<<"$out"; then
  ok "--plan gpt2 on 8 ranks: $want TFLOP a step per rank, (6 N + 12 L T D) x 8192 tokens; $(grep -o '[0-9.]* ms a step on an H100 SXM' <<<"$out") at 40% of its bf16 peak"
else bad "--plan's compute line, expected $want TFLOP:"; grep -A1 '^  compute' <<<"$out"; fi

# --roofline: the kernels' count, held to two hand counts and to the line
# above. The Linear and Conv1D GEMMs of a token: 24 D^2 a block forward
# (c_attn 3, attn.c_proj 1, c_fc 4, mlp.c_proj 4, 2 flops each), lm_head
# 2 D V, and three times that with backward; GELU reads and writes 4D a
# token a block forward, reads two and writes one backward: 5 x 4D fp32
# values. All kernels together are llm.c's count less the few parameters
# that are not in a GEMM (wpe, LayerNorms, biases): within 1%. Attention's
# GEMMs with --param-dtype bf16 as built are bound by their bytes: a layer
# reads q, k, v (c_attn's output) once forward and once backward and y's
# gradient (c_proj's input gradient) twice backward, all in 16 bits, writes
# y, dq, dk and dv in 16 bits (c_proj's input, c_attn's output gradient)
# and the scores and dP in fp32, and reads P and dS in 16 bits: forward
# 8 B*T*D + 6 B*H*T^2 bytes, backward 16 B*T*D + 10 B*H*T^2, over
# 3.35 TB/s. The Linear layers' GEMMs in bf16 as built: a layer on R
# rows, in -> out, reads its input in 16 bits in forward and for the
# weight's gradient (2 + 2) and writes the input's gradient in 16 bits
# (2); reads its weight twice, from the unit's full state gathered in 16
# bits (2 each), and writes dweight into the unit's 16-bit full gradient
# (2); writes out in 16 bits (2); and reads the output's gradient in 16
# bits twice (2 each): 6 R in + 6 in out + 6 R out bytes, lm_head's
# (D -> V) too (every activation is
# held in 16 bits, the logits' gradient and the residual stream's
# included: model/activations.h). That is 3.2 ms at 3.35 TB/s, less than
# their FLOPs take at 989.4 TFLOP/s, so bound by arithmetic. A sharded
# unit's shard is held in 16 bits, as AdamW writes it, and gathered as it
# is: nothing is packed. zero1 gathers its fp32 replicas once a step:
# each shard packed and the whole result unpacked, a pass each (read 4,
# write 2): the root's unit (wte, wpe, ln_f: 39,383,808 values) and the
# 12 blocks' (85,056,000), 9/8 of them on 8 ranks.
out=$($MPIRUN -np 8 ./fsdp --plan --model gpt2 --batch 64 --roofline h100 2>&1)
att=$(awk 'BEGIN { B = 8; T = 1024; D = 768; H = 12; printf "%.3f", 12 * (24 * B * T * D + 16 * B * H * T * T) / 3.35e12 * 1e3 }')
mm16=$(awk 'BEGIN { R = 8192; D = 768; V = 50257 # in, out, bytes a row an input, an output
  split("768 2304 768 768 768 3072 3072 768", p, " ")
  for (i = 1; i <= 8; i += 2) { b += 6 * R * p[i] + 6 * p[i] * p[i + 1] + 6 * R * p[i + 1] }
  bytes = (12 * b + 6 * R * D + 6 * D * V + 6 * R * V) / 3.35e12
  flops = 3 * (24 * 12 * D * D + 2 * D * V) * R / 989.4e12
  printf "%.3f", (bytes > flops ? bytes : flops) * 1e3 }')
pk=$(awk 'BEGIN { printf "%.3f", 6 * (39383808 + 85056000) * 9 / 8 / 3.35e12 * 1e3 }')
zero1=$($MPIRUN -np 8 ./fsdp --plan --model gpt2 --batch 64 --roofline h100 --strategy zero1 2>&1)
mm=$(awk 'BEGIN { printf "%.1f", (3 * (24 * 12 * 768 * 768 + 2 * 768 * 50257)) * 8192 / 1e9 }')
gelu=$(awk 'BEGIN { printf "%.3f", 5 * 4 * 768 * 12 * 8192 * 4 / 1e9 }')
total=$(awk '/^  total +[0-9]/ { print $2 }' <<<"$out")
if grep -Eq "^  matmuls \(Linear, Conv1D\) +$mm +[0-9.]+ +[0-9.]+ +$mm16 " <<<"$out" &&
   grep -Eq "^  gelu +[0-9.]+ +$gelu " <<<"$out" &&
   ! grep -q "shards packed" <<<"$out" && grep -Eq "^  all-gathers: shards packed +0.0 +0.000 +0.000 +$pk +0.000 " <<<"$zero1" &&
   grep -Eq "^  attention GEMMs \(QK\^T, PV\) +[0-9.]+ +[0-9.]+ +[0-9.]+ +$att " <<<"$out" &&
   awk -v t="$total" -v w="$want" 'BEGIN { d = t / (w * 1000) - 1; exit !(d < 0.01 && d > -0.01) }'; then
  ok "--roofline h100: the GEMMs' $mm GFLOP and bf16 $mm16 ms, GELU's $gelu GB, attention's bf16 GEMMs' $att ms, no shard packed (zero1's packing $pk ms) as counted by hand; all kernels $total GFLOP, llm.c's $want TFLOP within 1%; $(grep 'bf16 GEMM .*tokens' <<<"$out" | xargs)"
else bad "--roofline's table, expected matmuls $mm GFLOP and $mm16 ms in bf16, gelu $gelu GB, attention's bf16 GEMMs $att ms, no packing (zero1's $pk ms), a total near $want TFLOP:"; grep -A17 '^roofline' <<<"$out"; grep packed <<<"$zero1"; fi
# ... and with --attention flash, one fused kernel: causal, half of each
# T x T product, two forward and seven backward (S and dP recomputed by
# both backward kernels), 2 B T^2 D FLOPs a product for 12 layers
out=$($MPIRUN -np 8 ./fsdp --plan --model gpt2 --batch 64 --roofline h100 --attention flash 2>&1)
fa=$(awk 'BEGIN { printf "%.1f", 12 * 9 * 8 * 1024 * 1024 * 768 / 1e9 }')
if grep -Eq "^  attention \(fused: flash\) +$fa " <<<"$out" && ! grep -q "attention GEMMs" <<<"$out"; then
  ok "--roofline --attention flash: one fused kernel of $fa GFLOP by hand; $(grep 'bf16 GEMM .*tokens' <<<"$out" | xargs)"
else bad "--roofline --attention flash: expected a fused line of $fa GFLOP:"; grep -A16 '^roofline' <<<"$out"; fi
for bad_args in "--roofline h100" "--plan --roofline v100"; do
  # shellcheck disable=SC2086  # the flags are a word list
  if ./fsdp $bad_args >"$D/out" 2>"$D/err"; then rc=0; else rc=$?; fi
  if [ $rc -eq 2 ] && grep -q "^error: --roofline" "$D/err"; then ok "$bad_args: exit 2, $(head -1 "$D/err")"
  else bad "$bad_args: exit $rc"; cat "$D/err"; fi
done

# llm.c's token files
tokens() { # tokens FILE MAGIC VERSION COUNT_IN_HEADER MAX_TOKEN N
  python3 -c "import struct, sys
m, v, c, top, n = map(int, sys.argv[2:])
t = [i * 7 % (top + 1) for i in range(n)]; t[-1] = top
open(sys.argv[1], 'wb').write(struct.pack('<256i', m, v, c, *[0] * 253) + struct.pack('<%dH' % n, *t))" "$@"
}
tokens "$D/good.bin" 20240520 1 3000 299 3000
run_fsdp 2 "$D/bin.log" --data "$D/good.bin" --vocab 300
grep -q 'step     4/4' "$D/bin.log" && ok "--data good.bin (llm.c's uint16 tokens) trains with --vocab 300" || bad "token file: $(tail -2 "$D/bin.log")"
# ... and the start-up line counts its tokens, not its bytes (it said bytes)
grep -qx "data: $D/good.bin, 3000 tokens" "$D/bin.log" && ok "the start-up line: $(grep '^data:' "$D/bin.log")" || bad "a token file's start-up line: $(grep '^data:' "$D/bin.log")"
run_fsdp 2 "$D/val.log" --data "$D/good.bin" --vocab 300 --val-data "$D/good.bin" --val-every 2
grep -q "val loss [0-9.]* (4 batches of 12 sequences, $D/good.bin)" "$D/val.log" && ok "--val-data good.bin --val-every 2: $(grep -m1 'val loss' "$D/val.log")" || bad "--val-data: $(tail -2 "$D/val.log")"
# llm.c's tokenizer file: token i decodes as "<i>" here, so the sample shows it was used
python3 -c "import struct, sys
pieces = [('<%d>' % i).encode() for i in range(256)]
open(sys.argv[1], 'wb').write(struct.pack('<256I', 20240328, 1, 256, *[0] * 253) + b''.join(bytes([len(p)]) + p for p in pieces))" "$D/tok.bin"
run_fsdp 1 "$D/tok.log" --sample 8 --tokenizer "$D/tok.bin"
line=$(grep -A1 '^sample' "$D/tok.log" | tail -1)
[[ "$line" =~ ^(\<[0-9]+\>){9}$ ]] && ok "--tokenizer (llm.c's format) decodes the 9 tokens: $line" || bad "--tokenizer: the sample reads '$line'"
printf 'not a tokenizer' >"$D/notok.bin"
refused() { # refused WHAT SAYS NP FLAGS...: exit 2 on every rank, the message once
  local what=$1 says=$2 np=$3; shift 3
  timeout 60 $MPIRUN -np "$np" ./fsdp $ARGS "$@" >"$D/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "^error: .*$says" "$D/bad.log"; then ok "$what: exit 2, '$(grep -m1 '^error' "$D/bad.log" | cut -c8-150)...'"
  else bad "$what: exit $rc, not a message saying '$says':"; tail -3 "$D/bad.log"; fi
}
tokens "$D/magic.bin" 12345 1 3000 299 3000
tokens "$D/version.bin" 20240520 2 3000 299 3000
tokens "$D/short.bin" 20240520 1 4000 299 3000
refused "a .bin with another magic" "not llm.c's token file" 2 --data "$D/magic.bin" --vocab 300
refused "a token file of version 2" "version 2" 2 --data "$D/version.bin" --vocab 300
refused "a token file shorter than its header says" "header says 4000 tokens" 2 --data "$D/short.bin" --vocab 300
refused "a token past the vocabulary: the largest named, and a --vocab above it" "token 257 is 299, its largest, but the model's vocabulary is 256.*Use --vocab 300 or more" 3 --data "$D/good.bin"
printf 'hello, world: a text file whose bytes are its tokens\n' >"$D/text.txt"
refused "a text file's byte past a --vocab below 256: the largest named" "byte 33 is 121, its largest, but the model's vocabulary is 100.*Use --vocab 122 or more" 2 --vocab 100 --data "$D/text.txt"
tokens "$D/t99.bin" 20240520 1 3000 99 3000
refused "... and as --val-data beside a token file within the vocabulary" "--val-data $D/text.txt: byte 33 is 121, its largest" 3 --vocab 100 --data "$D/t99.bin" --val-data "$D/text.txt" --val-every 2
refused "a token file for the byte MLP" "add --model gpt2-tiny\|Add --model gpt2-tiny" 2 --model tiny --data "$D/good.bin"
refused "heads that do not divide n_embd" "does not divide into --n-head 3" 1 --n-head 3
refused "a context longer than n_ctx" "longer than the 32 positions" 1 --context 64
refused "a GPT-2 option with the byte MLP" "is GPT-2's" 1 --model tiny --n-head 2
refused "--attention flash with heads wider than 128" "heads of at most 128 channels" 2 --n-embd 256 --n-head 1 --attention flash
refused "an unknown --attention" "unknown 'sdpa'" 1 --attention sdpa
refused "a tokenizer file that is not llm.c's" "not llm.c's tokenizer file" 2 --sample 4 --tokenizer "$D/notok.bin"
# a tokenizer of another size than --vocab decodes other tokens: refused
# before step 1 (it once printed the sample through it, wrong and silent)
refused "a tokenizer of 256 tokens under --vocab 300" "--tokenizer $D/tok.bin: has 256 tokens, but the model's vocabulary is 300.*Give --vocab 256" 2 --vocab 300 --sample 4 --tokenizer "$D/tok.bin"
grep -q '^step' "$D/bad.log" && bad "... and it trained first: $(grep -m1 '^step' "$D/bad.log")"

# --resume knows its data: all of a token file (a checkpoint once hashed
# only as many bytes as it has tokens), and the last tenth that --val-every
# holds out (training then draws other batches). The run that saves at step
# 2 goes on to step 4: the uninterrupted run a resume on 3 ranks must match.
python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[-2000:-1000] = bytes(1000)
open(sys.argv[2], 'wb').write(b)" "$D/good.bin" "$D/late.bin"
V=(--data "$D/good.bin" --vocab 300 --val-every 2)
export_run valsaved 2 "${V[@]}" --save-dir "$D/ckv" --save-every 2
refused "--resume on a token file that differs in its last third" "other data" 2 --data "$D/late.bin" --vocab 300 --val-every 2 --resume "$D/ckv/step-00000002"
refused "--resume without the --val-every that held out the last tenth" "from 2700 tokens of the data, this run from 3000" 2 --data "$D/good.bin" --vocab 300 --resume "$D/ckv/step-00000002"
refused "--resume of a run on all the embedded corpus, with --val-every" "this run from 117965" 2 --resume "$D/ck" --val-every 2
same valresumed valsaved 3 "${V[@]}" --resume "$D/ckv/step-00000002"
refused "--resume with another --vocab" "(GPT-2, vocab 256 n_head 2 context 16 n_embd 32 n_layer 2); this run has GPT-2, vocab 300" 2 --resume "$D/ck" --vocab 300

# --init-from reads the config.json beside the file, as from_pretrained
# does: the weights of n_head 4 and n_head 2 have the same shapes, and
# loaded into the wrong one they train on without complaint. Any field
# that changes the model, against this run's flags (or GPT2Config's
# default when the file leaves it out), is refused naming the field, both
# values and the flag to give; dropout is a note (fsdp.c has none); a
# config.json that is not JSON, or not a file, is refused by name, on
# every rank, without a hang. No config.json: the shapes alone, as before.
says() { # says WHAT NP FRAGMENT FLAGS...: exit 2, FRAGMENT (fixed text) in the one error line
  local what=$1 np=$2 frag=$3; shift 3
  timeout 60 $MPIRUN -np "$np" ./fsdp $ARGS "$@" >"$D/cfg.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(grep -c '^error:' "$D/cfg.log")" -eq 1 ] && grep -qF -- "$frag" "$D/cfg.log"; then
    ok "$what: exit 2, '$(grep -m1 '^error' "$D/cfg.log" | cut -c8-200)...'"
  else bad "$what: exit $rc (124: a hang), not one error saying '$frag':"; tail -3 "$D/cfg.log"; fi
}
loads() { # loads WHAT NP FRAGMENT FLAGS...: exit 0, FRAGMENT (fixed text; may be "") in the output
  local what=$1 np=$2 frag=$3; shift 3
  timeout 60 $MPIRUN -np "$np" ./fsdp $ARGS "$@" >"$D/cfg.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && grep -qF -- "$frag" "$D/cfg.log" && grep -q '^initialised from' "$D/cfg.log"; then
    ok "$what: exit 0${frag:+, '$(grep -m1 -F -- "$frag" "$D/cfg.log" | cut -c1-160)...'}"
  else bad "$what: exit $rc, or not saying '$frag':"; tail -3 "$D/cfg.log"; fi
}
variant() { # variant NAME PYTHON: $D/cv/NAME/ holds h4's weights and its config.json as PYTHON edits c
  mkdir -p "$D/cv/$1"; cp "$D/h4/model.safetensors" "$D/cv/$1/"
  python3 -c "import json, sys; c = json.load(open(sys.argv[1])); $2
open(sys.argv[2], 'w').write(json.dumps(c, indent=2))" "$D/h4/config.json" "$D/cv/$1/config.json"
}
# try_config NAME says|loads WHAT FRAGMENT: $D/cv/NAME/ loaded with --n-head 4 on 2 ranks
try_config() {
  "$2" "$3" 2 "$4" --n-head 4 --init-from "$D/cv/$1/model.safetensors"
}
# config NAME PYTHON says|loads WHAT FRAGMENT: h4's weights beside its config.json as PYTHON edits c
config() {
  variant "$1" "$2"
  try_config "$1" "$3" "$4" "$5"
}
mkdir -p "$D/h4"
run_fsdp 2 "$D/h4.log" --n-head 4 --export "$D/h4/model.safetensors"
says "an export of --n-head 4 loaded with --n-head 2 (3 ranks)" 3 \
  "its config.json says n_head 4, but this run has --n-head 2: the weights are of another model" \
  --n-head 2 --init-from "$D/h4/model.safetensors"
loads "... with --n-head 4" 2 "" --n-head 4 --init-from "$D/h4/model.safetensors"
config layers 'c["n_layer"] = 3' says "config.json's n_layer 3" \
  "says n_layer 3, but this run has --n-layer 2"
config embd 'c["n_embd"] = 64' says "config.json's n_embd 64" \
  "says n_embd 64, but this run has --n-embd 32"
config pos 'c["n_positions"] = 64' says "config.json's n_positions 64" \
  "says n_positions 64, but this run has --n-ctx 32"
config vocab 'c["vocab_size"] = 300' says "config.json's vocab_size 300" \
  "says vocab_size 300, but this run has --vocab 256"
config noheads 'del c["n_head"]' says "config.json without n_head: GPT2Config's 12" \
  "gives no n_head, which Hugging Face's GPT2Config reads as 12, but this run has --n-head 4"
config fheads 'c["n_head"] = 4.0' says "config.json's n_head 4.0" \
  "says n_head 4.0, which is not a whole number"
config sheads 'c["n_head"] = "4"' says "config.json's n_head \"4\"" \
  "says n_head \"4\", which is not a whole number"
config eps 'c["layer_norm_epsilon"] = 1e-6' says "config.json's layer_norm_epsilon 1e-06" \
  "says layer_norm_epsilon 1e-06, but fsdp.c's LayerNorm adds 1e-05"
config erf 'c["activation_function"] = "gelu"' says "config.json's activation_function gelu (erf)" \
  "says activation_function \"gelu\", but fsdp.c's MLP computes gelu_new"
config tanh 'c["activation_function"] = "gelu_pytorch_tanh"' loads "config.json's gelu_pytorch_tanh (gelu_new's function, PyTorch's kernel)" \
  ""
config inner 'c["n_inner"] = 100' says "config.json's n_inner 100" \
  "says n_inner 100, but fsdp.c's MLP is 4 x n_embd = 128 wide"
config inner128 'c["n_inner"] = 128' loads "config.json's n_inner 128 (4 x n_embd, what null means)" \
  ""
config invidx 'c["scale_attn_by_inverse_layer_idx"] = True' says "config.json's scale_attn_by_inverse_layer_idx true" \
  "says scale_attn_by_inverse_layer_idx true: this model divides layer i's attention scores by i + 1"
config unscaled 'c["scale_attn_weights"] = False' says "config.json's scale_attn_weights false" \
  "says scale_attn_weights false"
config untied 'c["tie_word_embeddings"] = False' says "config.json's tie_word_embeddings false" \
  "says tie_word_embeddings false: this model gives lm_head a matrix of its own"
config reorder 'c["reorder_and_upcast_attn"] = True' loads "config.json's reorder_and_upcast_attn true (the same scores, computed in another order)" \
  ""
config llama 'c["model_type"] = "llama"' says "config.json's model_type llama" \
  "says model_type \"llama\": fsdp.c trains Hugging Face's gpt2 only"
config drop 'c.update(resid_pdrop=0.1, attn_pdrop=0.1)' loads "config.json with dropout 0.1: a note, and it trains" \
  "note: --init-from $D/cv/drop/model.safetensors: its config.json has dropout: resid_pdrop 0.1, attn_pdrop 0.1. fsdp.c trains without dropout"
config nodrop '[c.pop(k) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")]' loads "config.json without the dropout keys: GPT2Config's 0.1, a note" \
  "embd_pdrop 0.1 (absent: GPT2Config's default)"
config sdrop 'c["embd_pdrop"] = "0.1"' says "config.json's embd_pdrop \"0.1\"" \
  "says embd_pdrop \"0.1\", which is not a probability"
# not JSON, or not a file: refused by name, never a crash or a hang
malformed() { # malformed NAME FRAGMENT: config.json is $D/cv/NAME/config.json as the caller left it
  try_config "$1" says "a config.json that is $1" "$2"
}
for name in cut comma twice nan bom empty dir fifo; do mkdir -p "$D/cv/$name"; cp "$D/h4/model.safetensors" "$D/cv/$name/"; done
printf '{"n_head": 4, "n_layer": ' >"$D/cv/cut/config.json"
printf '{"n_head": 4,}' >"$D/cv/comma/config.json"
printf '{"n_head": 2, "n_head": 4}' >"$D/cv/twice/config.json"
printf '{"n_head": 4, "resid_pdrop": NaN}' >"$D/cv/nan/config.json"
printf '\xef\xbb\xbf{"n_head": 4}' >"$D/cv/bom/config.json"
: >"$D/cv/empty/config.json"
mkdir "$D/cv/dir/config.json"
mkfifo "$D/cv/fifo/config.json"
malformed cut "its config.json ($D/cv/cut/config.json) is not valid JSON: line 1, column 26: expected a value (an object, array, string, number, true, false or null), found the end of the file (cut short?)"
malformed comma "is not valid JSON: line 1, column 14: expected a key after ','"
malformed twice "is not valid JSON: the key 'n_head' is given twice"
malformed nan "is not valid JSON: line 1, column 30: NaN and Infinity are not JSON numbers"
malformed bom "is not valid JSON: line 1, column 1: the file starts with a UTF-8 byte-order mark"
malformed empty "is not valid JSON: line 1, column 1: expected '{' (the file is one JSON object), found the end of the file"
malformed dir "the config.json beside it cannot be read: config.json $D/cv/dir/config.json: is a directory"
malformed fifo "the config.json beside it cannot be read: config.json $D/cv/fifo/config.json: is a named pipe (FIFO)"
# the shapes alone without one; and the byte MLP has no config.json (its
# export writes none), so one beside its file is none of its business
mkdir -p "$D/cv/none"; cp "$D/h4/model.safetensors" "$D/cv/none/"
try_config none loads "no config.json beside the file: the shapes alone" ""
timeout 60 $MPIRUN -np 2 ./fsdp --model tiny --steps 0 --export "$D/cv/comma/mlp.safetensors" >/dev/null 2>&1 || bad "could not export the MLP"
loads "the byte MLP beside a broken config.json: not its own, not read" 2 "" --model tiny --init-from "$D/cv/comma/mlp.safetensors"
exit $fail
