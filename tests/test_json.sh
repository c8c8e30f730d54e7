#!/usr/bin/env bash
# tests/test_json.sh — --json FILE: the run's figures, machine-readable, equal
# to what the tables print (the notebooks read this file, not the tables).
cd "$(dirname "$0")/.."
source tests/lib.sh
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT

# One run: the JSON against the very tables and lines the run printed.
$MPIRUN -np 3 ./fsdp --model tiny --steps 4 --batch 12 --log-every 1 --net nvlink \
  --json "$d/r.json" >"$d/r.log" 2>&1 || { bad "the run failed"; cat "$d/r.log"; exit 1; }
python3 - "$d/r.json" "$d/r.log" <<'PY' && ok "JSON equals the printed figures" || bad "JSON disagrees with the printed figures"
import json, re, sys
j = json.load(open(sys.argv[1])); log = open(sys.argv[2]).read()
errors = []
def want(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what)
    if not cond: errors.append(what)
want(j["schema"] == "fsdp.c run" and j["version"] == 1, "schema and version")
c = j["config"]
want((c["model"], c["world"], c["batch"], c["local_batch"], c["strategy"]) == ("tiny", 3, 12, 4, "full_shard"), "config: model, world, batch, strategy")
losses = [float(x) for x in re.findall(r"^step +\d+/\d+ \| loss ([0-9.]+)", log, re.M)]
want([round(s["loss"], 4) for s in j["steps"]] == losses and len(losses) == 4, f"per-step losses {losses} == the step lines")
rows = re.findall(r"^ +(\d+) (\S.*?) +(\d+) +(\d+) +(\d+) +\d+$", log, re.M)
want([(u["numel"], u["padded"], u["shard"]) for u in j["units"]] == [(int(a), int(b), int(c)) for _, _, a, b, c in rows], "units: numel, padded, shard == the unit table")
want(j["parameters"] == int(re.search(r"\| (\d+) parameters", log).group(1)), "parameters == the header's")
for name, vals in j["memory_peak_bytes"].items():
    label = "total (peak of the sum)" if name == "total" else name
    m = re.search(r"^  " + re.escape(label) + r" +([0-9. ]+)$", log, re.M)
    table = [float(x) for x in m.group(1).split()]
    want([round(v / 2**20, 3) for v in vals] == table, f"memory peak '{name}' per rank == the table ({table} MiB)")
for kind, v in j["collectives"].items():
    m = re.search(r"^  " + kind + r" \((\d+) calls\) +([0-9. ]+)$", log, re.M)
    want(v["calls"] == int(m.group(1)), f"{kind}: {v['calls']} calls == the table")
    want([round(b / 2**20, 3) for b in v["bytes_sent"]] == [float(x) for x in m.group(2).split()], f"{kind}: bytes sent per rank == the table")
ag = j["collectives"]["all_gather"]["sim_seconds"] / 4 * 1e3
m = re.search(r"collectives take [0-9.]+ ms per step \(all_gather ([0-9.]+)", log)
want(abs(ag - float(m.group(1))) < 0.0005, f"simulated all_gather ms per step {ag:.4f} == the line's {m.group(1)}")
m = re.search(r"per step on rank 0: compute ([0-9.]+) ms, waiting for collectives ([0-9.]+) ms", log)
want(abs(j["rank0_compute_seconds"] / 4 * 1e3 - float(m.group(1))) < 0.006 and abs(j["rank0_wait_seconds"] / 4 * 1e3 - float(m.group(2))) < 0.006, "rank 0's compute and wait == the line's")
m = re.search(r"this schedule there .*: ([0-9.]+) ms per step, ([0-9.]+) ms of the collectives hidden", log)
want(abs(j["sim_step_seconds"] * 1e3 - float(m.group(1))) < 0.006 and abs(j["sim_hidden_seconds"] * 1e3 - float(m.group(2))) < 0.0006, "--net: the schedule's step and hidden time == the line's")
sys.exit(1 if errors else 0)
PY

# --clip-grad-norm: each step's norm before clipping, as the step line says
$MPIRUN -np 2 ./fsdp --model tiny --steps 3 --batch 8 --log-every 1 --clip-grad-norm 0.5 \
  --json "$d/g.json" >"$d/g.log" 2>&1
python3 - "$d/g.json" "$d/g.log" <<'PY' && ok "--clip-grad-norm: grad_norm per step == the step lines' norm" || bad "grad_norm in the JSON"
import json, re, sys
j = json.load(open(sys.argv[1])); log = open(sys.argv[2]).read()
norms = [float(x) for x in re.findall(r"grad norm ([0-9.]+) \(clipped\)", log)]
sys.exit(0 if len(norms) == 3 and [round(s["grad_norm"], 4) for s in j["steps"]] == norms and j["config"]["clip_grad_norm"] == 0.5 else 1)
PY

# the learning rate of every step, as the step lines print it under a schedule
$MPIRUN -np 2 ./fsdp --model tiny --steps 6 --batch 8 --log-every 1 --lr-schedule step --step-size 2 \
  --gamma 0.5 --warmup 1 --json "$d/l.json" >"$d/l.log" 2>&1
python3 - "$d/l.json" "$d/l.log" <<'PY' && ok "lr per step == the step lines' (warmup 1, StepLR(2, 0.5)): 0.003 0.003 0.003 0.0015 0.0015 0.00075" || bad "lr in the JSON"
import json, re, sys
j = json.load(open(sys.argv[1])); log = open(sys.argv[2]).read()
lines = [float(x) for x in re.findall(r"\| lr ([0-9.]+)$", log, re.M)]
got = [round(s["lr"], 6) for s in j["steps"]]
sys.exit(0 if got == lines == [0.003, 0.003, 0.003, 0.0015, 0.0015, 0.00075] and j["config"]["lr_schedule"] == "step" else 1)
PY

# --compare writes one file per strategy, named like --trace's
$MPIRUN -np 2 ./fsdp --model tiny --steps 2 --batch 8 --compare --json "$d/c.json" >"$d/c.log" 2>&1
python3 -c "
import json, sys
a = json.load(open('$d/c.no_shard.json')); b = json.load(open('$d/c.full_shard.json'))
sys.exit(0 if (a['config']['strategy'], b['config']['strategy']) == ('no_shard', 'full_shard') and 'sim_step_seconds' not in a and 'sim_hidden_seconds' not in b else 1)
" && ok "--compare: c.no_shard.json and c.full_shard.json, no simulated time without --net" || bad "--compare JSON files"

# an output like any other: a directory or the --trace path is refused with exit 2
mkdir "$d/dir"
$MPIRUN -np 2 ./fsdp --model tiny --steps 1 --batch 4 --json "$d/dir" >"$d/e.log" 2>&1
[ $? -eq 2 ] && grep -q "json" "$d/e.log" && ok "--json DIR: exit 2: $(head -1 "$d/e.log" | cut -c1-100)" || bad "--json onto a directory"
$MPIRUN -np 2 ./fsdp --model tiny --steps 1 --batch 4 --json "$d/x" --trace "$d/x" >"$d/e.log" 2>&1
[ $? -eq 2 ] && ok "--json and --trace on one path: exit 2" || bad "--json and --trace on one path"
exit $fail
