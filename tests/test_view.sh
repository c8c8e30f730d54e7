#!/usr/bin/env bash
# --view: in a terminal (tmux), rank 0 redraws a dashboard in place: memory
# bars per rank by category, what is computing, the collective in flight,
# traffic so far. Without a terminal it falls back to one plain line a step.
set -u
source "$(dirname "$0")/lib.sh"

out=$(setsid timeout 60 $MPIRUN -np 2 ./fsdp --model tiny --steps 3 --batch 4 --view </dev/null 2>&1); rc=$?
lines=$(echo "$out" | grep -c "^view: step [0-9]* | rank 0 sent")
[ $rc -eq 0 ] && [ "$lines" -eq 3 ] && ! echo "$out" | grep -q $'\033' && ok "no terminal: 3 plain lines for 3 steps, no escape codes" || bad "fallback: rc $rc, $lines lines"

command -v tmux >/dev/null || { echo "tmux not installed: cannot check the in-place view"; exit $([ $fail -eq 0 ] && echo 77 || echo 1); }
trap 'tmux kill-session -t fsdp-view-test 2>/dev/null' EXIT
tmux new-session -d -s fsdp-view-test -x 160 -y 40 "$MPIRUN -np 4 ./fsdp --model small --steps 400 --batch 16 --view --vram 64M; sleep 30"
seen=""
for _ in $(seq 1 100); do
  screen=$(tmux capture-pane -p -t fsdp-view-test)
  echo "$screen" | grep -q "fsdp.c live view: full_shard on 4 ranks" && echo "$screen" | grep -q "rank 3 *|[PGOFfac ]*| *[0-9.]* MiB" && { seen=1; break; }
  sleep 0.1
done
[ -n "$seen" ] && ok "dashboard with a memory bar for each of 4 ranks" || { bad "no dashboard"; tmux capture-pane -p -t fsdp-view-test | tail; }
echo "$screen" | grep -q "bar = budget 64.0 MiB" && ok "bars drawn against the --vram budget" || bad "no budget scale"
echo "$screen" | grep -q "^in flight: *\(all_gather\|reduce_scatter\) of " && echo "$screen" | grep -q "^computing: " && echo "$screen" | grep -q "^traffic so far" \
  && ok "shows the collective in flight, the unit computing, traffic so far" || bad "dashboard lines missing"
[ "$(echo "$screen" | grep -c 'fsdp.c live view')" -eq 1 ] && ok "redrawn in place (one dashboard on screen)" || bad "dashboard not in place"
exit $fail
