#!/usr/bin/env bash
# --wait-for-debugger and the gdb recipe of sim/gdb-ranks.sh, without the
# tmux panes: every rank prints its PID and waits; one batch gdb per rank
# attaches, breaks in comm_record (every collective passes through it),
# releases the rank, checks it stopped before an all-gather of the root unit,
# and detaches. The run must then finish normally.
set -u
source "$(dirname "$0")/lib.sh"
command -v gdb >/dev/null || { echo "gdb not installed: cannot test the recipe"; exit 77; }
log=$(mktemp); dir=$(mktemp -d)
timeout 120 $MPIRUN -np 2 ./fsdp-debug --model tiny --steps 2 --batch 4 --wait-for-debugger >"$log" 2>&1 &
job=$!
for _ in $(seq 1 100); do [ "$(grep -c 'waiting for a debugger' "$log")" -ge 2 ] && break; sleep 0.1; done
mapfile -t pids < <(grep 'waiting for a debugger' "$log" | awk '{print $4}')
[ "${#pids[@]}" -eq 2 ] && echo "ok: both ranks printed their PID and wait" || { echo "FAIL: PIDs: ${pids[*]}"; cat "$log"; kill $job; exit 1; }
sleep 0.5
grep -q "step" "$log" && { echo "FAIL: ranks trained before the debugger released them"; fail=1; } || echo "ok: no rank trained before the debugger attached"
for p in "${pids[@]}"; do
  timeout 60 gdb -q -p "$p" -batch -ex 'break comm_record' -ex 'frame function debugger_wait' -ex 'set var attached = 1' \
    -ex continue -ex 'print kind' -ex 'print unit' -ex detach >"$dir/$p.gdb" 2>&1 &
done
wait $job; rc=$?
for p in "${pids[@]}"; do
  grep -q "Breakpoint 1, comm_record" "$dir/$p.gdb" && grep -q "= COMM_ALL_GATHER" "$dir/$p.gdb" && grep -q "= 0" "$dir/$p.gdb" \
    && echo "ok: gdb on pid $p stopped in comm_record before the all-gather of unit 0" \
    || { echo "FAIL: gdb on pid $p:"; cat "$dir/$p.gdb"; fail=1; }
done
[ $rc -eq 0 ] && grep -q "steps in" "$log" && echo "ok: the run finished after the debuggers detached" || { echo "FAIL: run exit $rc"; tail "$log"; fail=1; }
rm -rf "$log" "$dir"
exit $fail
