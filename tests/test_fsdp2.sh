#!/usr/bin/env bash
# tests/test_fsdp2.sh — FSDP2 (--fsdp2, fsdp.c section 14) beside FSDP1:
#   layout      each parameter cut on its rows as torch.chunk cuts them: a
#               unit's shard per rank is the sum of ceil(rows / N) * cols
#               over its parameters, worked out here from the exported
#               shapes, not asked of fsdp.c
#   numbers     N ranks == 1 rank (tests/test_distributed's checks, whose
#               reference is FSDP1's DDP on one rank): odd N, N larger than
#               a parameter's rows, shard_grad_op, the hybrid strategies,
#               accumulation in no_sync, bf16 and fp16, clipping, prefetch,
#               GPT-2 with the transformer policy
#   memory      --plan for both designs: FSDP2 books its copies' second
#               buffer under comm buffers, the rest as FSDP1
#   trace       the two copies are in it, beside the collectives
#   checkpoints an FSDP2 checkpoint resumes bitwise on the same N, reshards
#               to other N and to FSDP1; an FSDP1 one loads into FSDP2;
#               loaded and exported at once, bitwise both ways
cd "$(dirname "$0")/.."
source tests/lib.sh
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
TINY="--model tiny --steps 8 --batch 12"

# ---- layout: the shards' sizes from the parameters' shapes --------------------
# the tiny model's parameters and their units, from an export and --plan
timeout 60 $MPIRUN -np 1 ./fsdp --model tiny --steps 1 --batch 12 --export "$d/shapes.st" >/dev/null 2>&1 ||
  bad "could not export the tiny model's shapes"
for n in 3 5; do
  plan1=$($MPIRUN -np "$n" ./fsdp --model tiny --batch 60 --plan 2>&1)
  plan2=$($MPIRUN -np "$n" ./fsdp --model tiny --batch 60 --plan --fsdp2 2>&1)
  # expected FSDP2 shard per unit: a unit holds the parameters under its
  # root module (--plan's second column) that no deeper unit holds; rows
  # are a parameter's shape[0], cols the rest
  echo "$plan1" >"$d/plan1"
  want=$(python3 - "$d/shapes.st" "$n" "$d/plan1" <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
shapes = {k: v["shape"] for k, v in head.items() if k != "__metadata__"}
n = int(sys.argv[2])
roots = [f[1].rstrip(":") for f in (line.split() for line in open(sys.argv[3]))
         if len(f) >= 6 and f[0].isdigit() and f[1].endswith(":")]
shard = [0] * len(roots)
for name, s in shapes.items():
    owners = [i for i, r in enumerate(roots) if i > 0 and name.startswith(r + ".")]
    unit = max(owners, key=lambda i: len(roots[i])) if owners else 0
    rows, cols = s[0], (s[1] if len(s) > 1 else 1)
    shard[unit] += -(-rows // n) * cols
print(" ".join(map(str, shard)))
EOF
)
  got=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print $(NF-1)}' <<<"$plan2" | tr '\n' ' ' | sed 's/ $//')
  [ -n "$want" ] && [ "$got" = "$want" ] &&
    ok "N=$n: each unit's FSDP2 shard is the sum of ceil(rows/$n) x cols over its parameters: $got" ||
    bad "N=$n: FSDP2 shards per unit '$got', want '$want' (from the shapes)"
  got1=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print $(NF-1)}' <<<"$plan1" | tr '\n' ' ')
  [ -n "$got1" ] && [ "$got1" != "$got " ] && ok "... where FSDP1's flat shards are ceil(numel/$n): $got1" ||
    bad "N=$n: FSDP1 and FSDP2 shards alike ($got1): the layout did not change"
done

# ---- numbers: N ranks == 1 rank -----------------------------------------------------------
td() { # td NP MODE ARGS...: tests/test_distributed with --fsdp2
  local np=$1 log; shift
  log=$(timeout 300 $MPIRUN -np "$np" tests/test_distributed "$@" --fsdp2 2>&1)
  if [ $? -eq 0 ]; then ok "N=$np $*: $(tail -1 <<<"$log")"
  else bad "N=$np $* --fsdp2:"; grep -E "FAIL|error" <<<"$log" | head -5; fi
}
td 2 equivalence full_shard ring $TINY
td 3 equivalence full_shard ring $TINY
td 5 equivalence full_shard mpi --model tiny --steps 8 --batch 20
# width 1: LayerNorm weights and biases of 1 row, blocks of 1 + 4 + 4 rows:
# on 3 and 4 ranks most ranks hold no row of them, only padding
td 3 equivalence full_shard ring $TINY --width 1 --min-params 1
td 4 equivalence full_shard ring $TINY --width 1 --min-params 1
td 3 equivalence shard_grad_op ring $TINY
td 4 equivalence hybrid_shard ring --model tiny --steps 8 --batch 16 --ranks-per-node 2
td 6 equivalence hybrid_shard_zero2 mpi $TINY --ranks-per-node 3
td 3 accum full_shard 4 no-sync --model tiny --steps 4 --batch 24
td 2 accum shard_grad_op 2 no-sync $TINY
td 4 precision full_shard $TINY --param-dtype bf16
td 4 precision full_shard $TINY --param-dtype fp16 --grad-scaler --init-scale 1024
td 3 clip full_shard $TINY
td 3 prefetch full_shard $TINY
td 3 held16 full_shard $TINY --param-dtype bf16 --forward-prefetch
td 4 held16 hybrid_shard --model gpt2-tiny --steps 2 --batch 8 --param-dtype bf16 --ranks-per-node 2
td 3 equivalence full_shard ring --model gpt2-tiny --steps 4 --batch 6 --auto-wrap transformer

# ---- --reshard-after-forward K: 1/K kept after forward, gathered within K ranks ----------------
# The same values gathered by fewer ranks: the parameters bitwise those of
# plain FSDP2; each rank's all-gather bytes exactly what the rings move,
# worked out from the units (forward over N ranks, backward over K, the
# loss's one float), and more full-params memory between the two passes.
for spec in "4 2" "6 3" "8 2"; do
  set -- $spec
  n=$1 k=$2
  K="--model tiny --steps 3 --batch 48 --fsdp2"
  run_fsdp "$n" "$d/k0.log" $K --export "$d/k0.st" --json "$d/k0.json"
  run_fsdp "$n" "$d/k.log" $K --reshard-after-forward "$k" --export "$d/k.st" --json "$d/k.json"
  tests/st_diff "$d/k0.st" "$d/k.st" >/dev/null && ok "N=$n, reshard_after_forward=$k: bitwise plain FSDP2's parameters" ||
    bad "N=$n, reshard_after_forward=$k: the parameters differ from plain FSDP2's"
  python3 - "$d/k0.json" "$d/k.json" "$n" "$k" <<'EOF' && ok "... all-gather bytes per rank and the full-params peak as worked out from the units" || bad "N=$n K=$k: traffic or memory not as worked out"
import json, sys
plain, j, N, K = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
steps = len(j["steps"])
shards = [u["shard"] for u in j["units"]]
per_step = sum((N - 1) * s * 4 for s in shards)                   # forward: every unit from N ranks
per_step += sum((K - 1) * (N // K) * s * 4 for s in shards[1:])   # backward: all but the root from K
per_step += (N - 1) * 4                                           # the loss, one float a rank
got = j["collectives"]["all_gather"]["bytes_sent"]
more = j["memory_peak_bytes"]["full params"][0] > plain["memory_peak_bytes"]["full params"][0]
print(f"  all_gather bytes {got[0]}, worked out {steps * per_step}; full params peak "
      f"{j['memory_peak_bytes']['full params'][0]} > {plain['memory_peak_bytes']['full params'][0]}: {more}")
sys.exit(0 if all(b == steps * per_step for b in got) and more else 1)
EOF
done
td 4 equivalence full_shard ring --model tiny --steps 8 --batch 16 --reshard-after-forward 2
td 8 equivalence hybrid_shard ring --model tiny --steps 4 --batch 16 --ranks-per-node 4 --reshard-after-forward 2
for bad_k in "4 3 (does not divide 4)" "4 4 (not fewer than 4)" "2 2 (not fewer than 2)"; do
  set -- $bad_k
  out=$(timeout 30 $MPIRUN -np "$1" ./fsdp $TINY --fsdp2 --reshard-after-forward "$2" 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -q "^error: --reshard-after-forward $2: .*must divide the $1 ranks" <<<"$out" &&
    ok "--reshard-after-forward $2 on $1 ranks ${*:3}: exit 2, saying K must divide them and be fewer" ||
    bad "--reshard-after-forward $2 on $1 ranks: exit $rc"
done
out=$(timeout 30 $MPIRUN -np 4 ./fsdp $TINY --reshard-after-forward 2 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "give it with --fsdp2" <<<"$out" && ok "--reshard-after-forward without --fsdp2: exit 2" ||
  bad "--reshard-after-forward without --fsdp2: exit $rc"

# ---- memory: the copies' second buffer ---------------------------------------------------------
mib() { sed -n "s/^  $1 *\([0-9]*\) bytes.*/\1/p" <<<"$2"; }
p1=$($MPIRUN -np 4 ./fsdp --model tiny --plan 2>&1)
p2=$($MPIRUN -np 4 ./fsdp --model tiny --plan --fsdp2 2>&1)
c1=$(mib "comm buffers" "$p1") c2=$(mib "comm buffers" "$p2")
o1=$(mib "optimizer" "$p1") o2=$(mib "optimizer" "$p2")
[ -n "$c1" ] && [ -n "$c2" ] && [ "$c2" -gt "$c1" ] &&
  ok "--plan: FSDP2's comm buffers ($c2 bytes) hold its copies' second buffer, FSDP1's $c1" ||
  bad "--plan: comm buffers FSDP1 '$c1', FSDP2 '$c2': FSDP2's copies are not booked"
[ -n "$o1" ] && [ "$o1" = "$o2" ] && ok "... and the optimizer state is the same: $o1 bytes a rank" ||
  bad "--plan: optimizer state FSDP1 '$o1', FSDP2 '$o2' (the tiny model's shards hold the same elements)"

# ---- trace: the copies beside the collectives -------------------------------------------------
timeout 60 $MPIRUN -np 2 ./fsdp $TINY --fsdp2 --trace "$d/t.json" >/dev/null 2>&1
python3 - "$d/t.json" <<'EOF' && ok "the trace shows every all-gather's copy-out and every reduce-scatter's copy-in" || bad "the trace lacks FSDP2's copies"
import json, sys
e = json.load(open(sys.argv[1]))
e = e["traceEvents"] if isinstance(e, dict) else e
names = [x.get("name", "") for x in e if x.get("ph") in ("X", "B")]
count = lambda s: sum(1 for n in names if n.startswith(s))
ag, out, rs, cat = count("all_gather unit"), count("all-gather copy-out"), count("reduce_scatter unit"), count("reduce-scatter copy-in")
print(f"  all_gather {ag}, copy-out {out}, reduce_scatter {rs}, copy-in {cat}")
sys.exit(0 if ag and out >= ag and rs and cat == rs else 1)
EOF

# ---- checkpoints -----------------------------------------------------------------------------
A="--model tiny --batch 420 --seed 7"
run_fsdp 4 "$d/a.log" $A --steps 10 --fsdp2 --save-dir "$d/ck2" --save-every 5 --export "$d/a.st"
grep -qx "strategy full_shard layout fsdp2" "$d/ck2/step-00000005/meta.txt" &&
  ok "an FSDP2 checkpoint says so: strategy full_shard layout fsdp2" || bad "meta.txt does not say layout fsdp2"
run_fsdp 4 "$d/r.log" $A --steps 10 --fsdp2 --resume "$d/ck2/step-00000005" --export "$d/r.st"
tests/st_diff "$d/a.st" "$d/r.st" >/dev/null && ok "FSDP2 resumed on the same 4 ranks: bitwise the uninterrupted run" ||
  bad "FSDP2 resume on 4 ranks differs"
for spec in "3 --fsdp2" "7 --fsdp2" "1" "5"; do
  set -- $spec
  n=$1; shift
  run_fsdp "$n" "$d/x.log" $A --steps 10 "$@" --resume "$d/ck2/step-00000005" --export "$d/x.st"
  diff=$(tests/st_diff "$d/a.st" "$d/x.st" 1e-5 2>&1) && ok "FSDP2 4 ranks -> ${*:-FSDP1} on $n: ${diff##*$'\n'}" ||
    { bad "FSDP2 4 ranks -> $n $*:"; echo "$diff" | tail -2; }
done
# saved where every parameter carries padding rows (3 ranks: 16 rows is 6 +
# 6 + 4), resumed on the same 3 bitwise and on 2
run_fsdp 3 "$d/p3.log" $A --steps 10 --fsdp2 --save-dir "$d/ck3" --save-every 5 --export "$d/p3.st"
run_fsdp 3 "$d/p3r.log" $A --steps 10 --fsdp2 --resume "$d/ck3/step-00000005" --export "$d/p3r.st"
tests/st_diff "$d/p3.st" "$d/p3r.st" >/dev/null && ok "FSDP2 on 3 ranks (padding rows in every shard): resumed bitwise" ||
  bad "FSDP2 on 3 ranks: the resume differs"
run_fsdp 2 "$d/p2r.log" $A --steps 10 --fsdp2 --resume "$d/ck3/step-00000005" --export "$d/p2r.st"
diff=$(tests/st_diff "$d/p3.st" "$d/p2r.st" 1e-5 2>&1) && ok "... and resharded 3 -> 2: ${diff##*$'\n'}" ||
  { bad "FSDP2 3 -> 2 ranks:"; echo "$diff" | tail -2; }
# loaded and exported at once: the checkpoint's parameters, moved, not changed
run_fsdp 4 "$d/e5.log" $A --steps 5 --fsdp2 --export "$d/e5.st"
run_fsdp 3 "$d/y.log" $A --steps 5 --resume "$d/ck2/step-00000005" --export "$d/y.st"
tests/st_diff "$d/e5.st" "$d/y.st" >/dev/null && ok "FSDP2's checkpoint loaded by FSDP1 on 3 ranks: bitwise its parameters" ||
  bad "FSDP2 -> FSDP1 load is not bitwise"
run_fsdp 3 "$d/b.log" $A --steps 5 --save-dir "$d/ck1" --export "$d/b.st"
run_fsdp 5 "$d/z.log" $A --steps 5 --fsdp2 --resume "$d/ck1/step-00000005" --export "$d/z.st"
tests/st_diff "$d/b.st" "$d/z.st" >/dev/null && ok "FSDP1's checkpoint loaded by FSDP2 on 5 ranks: bitwise its parameters" ||
  bad "FSDP1 -> FSDP2 load is not bitwise"
run_fsdp 2 "$d/c.log" $A --steps 10 --fsdp2 --resume "$d/ck1/step-00000005" --export "$d/c.st"
run_fsdp 3 "$d/c1.log" $A --steps 10 --resume "$d/ck1/step-00000005" --export "$d/c1.st"
diff=$(tests/st_diff "$d/c1.st" "$d/c.st" 1e-5 2>&1) && ok "... and trains on from it on 2 ranks as FSDP1 does on 3: ${diff##*$'\n'}" ||
  { bad "FSDP1 -> FSDP2 training differs:"; echo "$diff" | tail -2; }

# ---- refused: FSDP2 has no replicated strategy ------------------------------------------------
for st in no_shard zero1; do
  out=$(timeout 30 $MPIRUN -np 2 ./fsdp $TINY --strategy $st --fsdp2 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -q "^error: --fsdp2 shards every parameter, but $st keeps whole replicas" <<<"$out" &&
    ok "--fsdp2 --strategy $st: exit 2, saying FSDP2 has no such strategy" || bad "--fsdp2 --strategy $st: exit $rc"
done
# ---- AdamW's parameter groups (--no-decay-bias-norm): N ranks == 1 rank --------------------
# A shard mixes matrices and vectors (FSDP1: a flat parameter's slice; FSDP2:
# rows of each), and AdamW steps it a parameter's piece at a time. Width 1
# and a unit a module: 5 ranks hold fewer elements than some units (FSDP1)
# and rows of nothing but padding (FSDP2). The groups must also move the
# parameters (the run differs from one that decays every element), or the
# equality would say nothing. 1e-5: N ranks sum gradients in another order
# (6e-8 seen); a vector decayed by mistake moves by lr * 0.5 a step, 5e-3.
G=(--model tiny --steps 6 --batch 60 --width 1 --min-params 1 --weight-decay 0.5 --lr 0.01
   --lr-schedule linear --min-lr 0.001)
timeout 60 $MPIRUN -np 1 ./fsdp "${G[@]}" --no-decay-bias-norm --export "$d/g1.st" >/dev/null 2>&1 &&
  timeout 60 $MPIRUN -np 1 ./fsdp "${G[@]}" --export "$d/g1all.st" >/dev/null 2>&1 ||
  bad "--no-decay-bias-norm on 1 rank did not run"
if tests/st_diff "$d/g1.st" "$d/g1all.st" 1e-5 >/dev/null 2>&1; then
  bad "--no-decay-bias-norm moved nothing: the same parameters as decaying every element"
else ok "--no-decay-bias-norm: the vectors decay no more (parameters differ from decaying all)"; fi
for design in "" --fsdp2; do
  for n in 2 5; do
    timeout 60 $MPIRUN -np $n ./fsdp "${G[@]}" --no-decay-bias-norm $design --export "$d/g.st" >/dev/null 2>&1 ||
      { bad "--no-decay-bias-norm ${design:-FSDP1} on $n ranks did not run"; continue; }
    diff=$(tests/st_diff "$d/g1.st" "$d/g.st" 1e-5 2>&1) &&
      ok "--no-decay-bias-norm ${design:-(FSDP1)} on $n ranks == 1 rank: ${diff##*$'\n'}" ||
      bad "--no-decay-bias-norm ${design:-(FSDP1)} on $n ranks != 1 rank: ${diff##*$'\n'}"
  done
done
exit $fail
