#!/usr/bin/env bash
# --trace: the file parses as JSON, has one process per rank with compute and
# communication tracks and memory counters, and its collective events add up,
# rank by rank and kind by kind, to the bytes the final table prints. The
# simulated clock gives every collective exactly its --net duration, and
# --compare writes one trace per strategy.
set -u
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "python3 not installed: no JSON parser to check the trace with"; exit 77; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
timeout 120 $MPIRUN -np 4 ./fsdp --model tiny --steps 3 --batch 8 --trace "$dir/run.json" >"$dir/out.txt" 2>&1 || { echo "FAIL: run"; cat "$dir/out.txt"; exit 1; }
timeout 120 $MPIRUN -np 3 ./fsdp --model tiny --steps 2 --batch 6 --trace "$dir/sim.json" --trace-clock sim --net ethernet >/dev/null 2>&1 || { echo "FAIL: sim-clock run"; fail=1; }
# the --net schedule: inline collectives hide nothing; prefetch on the thread hides some
timeout 120 $MPIRUN -np 2 ./fsdp --model small --steps 10 --batch 32 --net ethernet --inline-collectives --backward-prefetch none >"$dir/inline.txt" 2>&1 || { echo "FAIL: inline schedule run"; fail=1; }
timeout 120 $MPIRUN -np 2 ./fsdp --model small --steps 10 --batch 32 --net ethernet --forward-prefetch >"$dir/prefetch.txt" 2>&1 || { echo "FAIL: prefetch schedule run"; fail=1; }
timeout 120 $MPIRUN -np 2 ./fsdp --model tiny --steps 2 --batch 4 --compare --trace "$dir/cmp.json" >/dev/null 2>&1 || { echo "FAIL: compare run"; fail=1; }
# prefetch on the communication thread: all-gathers travel while another unit
# computes. On 2 cores the 2 ranks' compute threads leave their communication
# threads little time, so only some of the 96 do: a batch of 1024 gives each
# unit over ten milliseconds of compute, long enough for the scheduler to
# run the communication threads meanwhile (about a quarter overlap here;
# with a batch of 256, sometimes none did).
timeout 120 $MPIRUN -np 2 ./fsdp --model small --steps 6 --batch 1024 --forward-prefetch --trace "$dir/overlap.json" >/dev/null 2>&1 || { echo "FAIL: overlap run"; fail=1; }
timeout 120 $MPIRUN -np 2 ./fsdp --model small --steps 6 --batch 1024 --forward-prefetch --inline-collectives --trace "$dir/inline.json" >/dev/null 2>&1 || { echo "FAIL: inline run"; fail=1; }
python3 - "$dir" <<'PY' || fail=1
import json, re, sys
d = sys.argv[1]
bad = 0
def check(ok, what):
    global bad
    print(("ok: " if ok else "FAIL: ") + what)
    bad += not ok

t = json.load(open(f"{d}/run.json"))
ev, meta = t["traceEvents"], t["otherData"]["fsdp"]
procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
check(procs == {r: f"rank {r}" for r in range(4)}, f"one process per rank: {sorted(procs.values())}")
threads = {(e["pid"], e["args"]["name"]) for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
check(all((r, n) in threads for r in range(4) for n in ("compute", "communication")), "compute and communication tracks on every rank")
comm = [e for e in ev if e.get("cat") == "comm"]
check(all(e["ph"] == "X" and {"kind", "unit", "count", "bytes"} <= e["args"].keys() for e in comm), f"{len(comm)} collectives as complete events with kind, unit, count, bytes")
spans = [e for e in ev if e.get("cat") == "compute"]
phases = {e["args"]["phase"] for e in spans}
check(phases == {"forward", "backward", "optimizer"}, f"compute spans: {sorted(phases)}")
mem = [e for e in ev if e.get("ph") == "C" and e["name"] == "memory"]
check(len(mem) > 0 and set(mem[0]["args"]) == set(meta["categories"]), f"{len(mem)} memory counter samples with every ledger category")
check(any(e.get("ph") == "i" for e in ev), "instant events where a unit's full state is freed")
# bytes per rank and kind: events vs otherData vs the printed table
out = open(f"{d}/out.txt").read()
for kind in ("all_gather", "reduce_scatter", "all_reduce"):
    row = re.search(rf"^\s+{kind} \(\d+ calls\)\s+(.*)$", out, re.M)
    printed = [float(x) for x in row.group(1).split()]
    for r in range(4):
        from_events = sum(e["args"]["bytes"] for e in comm if e["pid"] == r and e["args"]["kind"] == kind)
        ok = from_events == meta["bytes_sent"][kind][r] and abs(from_events / 2**20 - printed[r]) < 0.0005
        if not ok or r == 0:
            check(ok, f"{kind} rank {r}: events {from_events:.0f} B = header {meta['bytes_sent'][kind][r]:.0f} B = table {printed[r]} MiB")

s = json.load(open(f"{d}/sim.json"))
sc = [e for e in s["traceEvents"] if e.get("cat") == "comm"]
worst = max(abs(e["dur"] - e["args"]["sim_us"]) for e in sc)
check(s["otherData"]["fsdp"]["clock"] == "sim" and worst < 0.01, f"sim clock: every collective lasts its --net time (worst diff {worst:.4f} us)")
# on the sim clock the stream runs one collective at a time, in order
by_rank = {}
for e in sc:
    by_rank.setdefault(e["pid"], []).append(e)
serial = all(b["ts"] >= a["ts"] + a["dur"] - 0.001 for evs in by_rank.values()
             for a, b in zip(sorted(evs, key=lambda e: e["ts"]), sorted(evs, key=lambda e: e["ts"])[1:]))
check(serial, "sim clock: the communication stream runs one collective after another")
sim_spans = [e for e in s["traceEvents"] if e.get("cat") == "compute" and e["args"]["unit"] > 0]
hidden = sum(1 for a in sc if a["args"]["kind"] == "all_gather" and a["args"]["unit"] > 0 for sp in sim_spans
             if sp["pid"] == a["pid"] and sp["args"]["unit"] != a["args"]["unit"]
             and a["ts"] < sp["ts"] + sp["dur"] and a["ts"] + a["dur"] > sp["ts"])
check(hidden > 0, f"sim clock: {hidden} prefetched all-gathers run while another unit computes")
def schedule(path):
    m = re.search(r"this schedule there .*: ([0-9.]+) ms per step, ([0-9.-]+) ms of the collectives hidden behind compute \(([0-9-]+)%\)", open(path).read())
    return (float(m.group(1)), float(m.group(2)), int(m.group(3))) if m else None
a, b = schedule(f"{d}/inline.txt"), schedule(f"{d}/prefetch.txt")
check(a is not None and a[1] == 0 and a[2] == 0, f"--net schedule, inline collectives, no prefetch: hides {a and a[1]} ms (nothing runs beside compute)")
check(b is not None and b[2] >= 10, f"--net schedule, prefetch on the communication thread: hides {b and b[2]}% (at least 10%)")
for strat in ("no_shard", "full_shard"):
    c = json.load(open(f"{d}/cmp.{strat}.json"))
    check(c["otherData"]["fsdp"]["strategy"] == strat, f"--compare wrote cmp.{strat}.json")
# An all-gather overlaps compute when it runs while a unit other than its
# own (and other than the root, whose forward encloses everything) computes.
def overlapping(path):
    ev = json.load(open(path))["traceEvents"]
    ags = [e for e in ev if e.get("cat") == "comm" and e["args"]["kind"] == "all_gather" and e["args"]["unit"] > 0]
    spans = [e for e in ev if e.get("cat") == "compute" and e["args"]["unit"] > 0]
    return sum(1 for a in ags for sp in spans if sp["pid"] == a["pid"] and sp["args"]["unit"] != a["args"]["unit"]
               and a["ts"] < sp["ts"] + sp["dur"] and a["ts"] + a["dur"] > sp["ts"])
n = overlapping(f"{d}/overlap.json")
check(n > 0, f"prefetch on the communication thread: {n} all-gathers run while another unit computes")
n = overlapping(f"{d}/inline.json")
check(n == 0, f"(control) --inline-collectives: {n} all-gathers overlap compute")
sys.exit(1 if bad else 0)
PY
exit $fail
