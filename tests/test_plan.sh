#!/usr/bin/env bash
# --plan books two steps in the ledger with nothing allocated or run. Its
# figures must be those of a real run of the same configuration: every
# category's peak (the largest over the ranks), byte for byte, against the
# run's --json, for each strategy and option that changes memory. And a
# model far over the 2^30 parameters the simulator trains is planned
# (the ZeRO paper's 7.5B, lecture 16) without allocating it. And
# --roofline's collectives on more than one rank (at the end).
source "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
i=0
same() { # NP ARGS...: plan and a 2-step run agree on every category
  local np=$1; shift; i=$((i + 1))
  timeout 120 $MPIRUN -np "$np" ./fsdp --model tiny --plan "$@" >"$d/plan$i" 2>&1 || { bad "--plan $*: exit $?"; tail -3 "$d/plan$i"; return; }
  timeout 120 $MPIRUN -np "$np" ./fsdp --model tiny --steps 2 --json "$d/run$i.json" "$@" >"$d/run$i" 2>&1 || { bad "run $*: exit $?"; tail -3 "$d/run$i"; return; }
  if python3 - "$d/plan$i" "$d/run$i.json" <<'PY'
import json, re, sys
plan = {}
for line in open(sys.argv[1]):
    m = re.match(r"  (\S.*?)\s+(\d+) bytes", line)
    if m: plan[m.group(1)] = int(m.group(2))
j = json.load(open(sys.argv[2]))
run = dict(j["memory_peak_bytes"])
names = {k: k for k in run}
names["total"] = "total (peak of the sum)"
for k, v in j.get("host_memory_peak_bytes", {}).items():  # --cpu-offload
    run["host: " + k] = v
    names["host: " + k] = "host: " + k
diff = [(k, plan.get(names[k]), max(v)) for k, v in run.items() if plan.get(names[k]) != max(v)]
if len(plan) < 8 or diff:
    print("    differ:", diff or plan); sys.exit(1)
print("    %d categories equal, total %d bytes" % (len(run), plan["total (peak of the sum)"]))
PY
  then ok "--plan == a real run's ledger: -np $np $*"; else bad "--plan differs from the run: -np $np $*"; fi
}
same 3 --batch 48
same 2 --strategy shard_grad_op --backward-prefetch post
same 2 --model small --forward-prefetch --backward-prefetch none
same 4 --strategy no_shard
same 4 --strategy zero1 --param-dtype bf16
same 4 --strategy hybrid_shard --ranks-per-node 2 --forward-prefetch
same 3 --batch 48 --param-dtype fp16 --grad-scaler --reduce-dtype fp32 --collectives mpi
same 2 --grad-accum 4 --no-sync --batch 32
same 3 --batch 48 --activation-checkpointing --depth 4 --min-params 1
same 1
same 4 --cpu-offload --strategy hybrid_shard --ranks-per-node 2
same 2 --cpu-offload --param-dtype bf16 --grad-accum 2 --batch 16

# the ZeRO paper's model: 7.5B parameters (over the 2^30 the simulator trains)
out=$(timeout 120 $MPIRUN -np 8 ./fsdp --plan --width 8192 --depth 14 --param-dtype fp16 --grad-scaler 2>&1)
echo "$out" | grep -q "7521218816 parameters" && echo "$out" | grep -q "model states (ZeRO's count) *15042437632 bytes" \
  && ok "7.5B parameters planned on 8 ranks: full_shard's model states 16 x 7521218816 / 8 = 15042437632 bytes" || { bad "7.5B plan"; echo "$out" | tail -12; }
timeout 60 $MPIRUN -np 2 ./fsdp --width 8192 --depth 14 --steps 1 >"$d/big" 2>&1
[ $? -eq 2 ] && grep -q "or --plan to see its memory without training it" "$d/big" && ok "training it is refused (exit 2), pointing at --plan" || bad "7.5B training not refused: $(tail -2 "$d/big")"
# --roofline on more than one rank: the collectives beside the kernels.
# A rank's bytes sent (the plan's three lines) over NVLink 4's 450 GB/s;
# against the kernels' roofline as built (bf16 GEMM, or fp32), the step's
# bound, and the tokens a GPU from which prefetch can hide them (the
# kernels less AdamW's pass over the shard grow with the tokens: within
# 1%, as the table's figures are rounded).
roof() { # NP BATCH [FLAGS]: the plan's output in $d/roof
  local np=$1 b=$2; shift 2
  timeout 120 $MPIRUN -np "$np" ./fsdp --plan --width 3840 --depth 9 --batch "$b" --roofline h100 "$@" >"$d/roof" 2>&1 || bad "--plan --roofline on $np ranks: exit $?"
}
want() { # the figures the collectives' lines should give, from the table above them
  awk -v col="$1" '
    / bytes sent per rank in a step/ { sent += $(NF - 7) }
    /^roofline/ { r = 1 }
    r && /^  AdamW/ { fixed = $(NF - 3 + col) }
    r && /^  total/ { kernels = $(NF - 2 + col) }
    /^  model FLOPs/ { model = $3 * 1e12 }
    /^  compute / { tokens = $(NF - 1) }
    END { comm = sent / 450e9 * 1e3; printf "%.3f GB sent by this rank a step, over NVLink 4 (450 GB/s a direction): at least %.3f ms|%.3f|%.1f%%|%.0f\n",
          sent / 1e9, comm, kernels, 100 * model / (comm / 1e3 * 989.4e12), tokens * (comm - fixed) / (kernels - fixed) }' "$d/roof"
}
roof 8 4096 --param-dtype bf16
IFS='|' read -r line kernels mfu hide <<<"$(want 1)"
grep -qF "  collectives: $line" "$d/roof" && grep -qF "longer than the kernels' $kernels ms" "$d/roof" &&
  grep -qF "$mfu MFU (of the bf16 peak) at best" "$d/roof" &&
  awk -v want="$hide" 'match($0, /from about [0-9]+ tokens/) { n++; got = substr($0, RSTART + 11, RLENGTH - 18) } END { exit !(n == 1 && got - want <= want / 100 && want - got <= want / 100) }' "$d/roof" \
  && ok "--roofline on 8 ranks, 512 tokens a GPU: collectives $line, past the kernels' $kernels ms: $mfu MFU at best, hidden from $hide tokens a GPU" \
  || { bad "--roofline's collectives on 8 ranks, want '$line', $kernels, $mfu, $hide:"; sed -n '/bytes sent/p; /collectives:/,$p' "$d/roof"; }
roof 8 32768 --param-dtype bf16
IFS='|' read -r line kernels _ _ <<<"$(want 1)"
grep -qF "  collectives: $line" "$d/roof" && grep -qF "the kernels take longer ($kernels ms): prefetch can hide the collectives" "$d/roof" \
  && ok "--roofline on 8 ranks, 4096 tokens a GPU: the kernels' $kernels ms hide the collectives ($line)" \
  || { bad "--roofline at 4096 tokens a GPU, want '$line' and $kernels ms:"; sed -n '/collectives:/,$p' "$d/roof"; }
roof 3 96
IFS='|' read -r line kernels _ _ <<<"$(want 0)"
grep -qF "  collectives: $line" "$d/roof" && grep -qF "longer than the kernels' $kernels ms" "$d/roof" \
  && ok "--roofline in fp32 on 3 ranks: the fp32 column's $kernels ms beside $line" || { bad "fp32 on 3 ranks, want '$line', $kernels:"; sed -n '/collectives:/,$p' "$d/roof"; }
grep -q "as if all" "$d/roof" && bad "8 ranks fit one node's NVLink, yet: $(grep 'as if all' "$d/roof")"
roof 16 65536 --param-dtype bf16
grep -q "as if all 16 GPUs shared one NVLink domain: across nodes each GPU has ~50 GB/s" "$d/roof" \
  && ok "--roofline on 16 ranks says NVLink's figure assumes one domain, and what crosses nodes" || bad "16 ranks: $(sed -n '/collectives:/,$p' "$d/roof")"
roof 1 4096 --param-dtype bf16
grep -q "collectives:" "$d/roof" && bad "one rank sends nothing, yet: $(grep -A2 collectives: "$d/roof")" || ok "--roofline on one rank: no collectives line"
exit $fail
