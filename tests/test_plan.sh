#!/usr/bin/env bash
# --plan books two steps in the ledger with nothing allocated or run. Its
# figures must be those of a real run of the same configuration: every
# category's peak (the largest over the ranks), byte for byte, against the
# run's --json, for each strategy and option that changes memory. And a
# model far over the 2^30 parameters the simulator trains is planned
# (the ZeRO paper's 7.5B, lecture 16) without allocating it.
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
exit $fail
