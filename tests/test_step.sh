#!/usr/bin/env bash
# --step: (1) --step=auto on a 2-rank tiny run pictures every collective, in
# the order rank 0 really called them (checked against the run's own trace);
# --step=ring pictures each ring step, whichever way the ring turns, and
# flags a chunk its neighbour did not send;
# (2) --step with no terminal to read keys from is refused with exit 2;
# (3) in a real terminal (tmux), a 4-rank session stops before each
# collective, shows the all-gather picture, follows n / c / q.
set -u
source "$(dirname "$0")/lib.sh"
dir=$(mktemp -d); trap 'rm -rf "$dir"; tmux kill-session -t fsdp-step-test 2>/dev/null' EXIT

# (1) every collective, in order
timeout 120 $MPIRUN -np 2 ./fsdp --model tiny --steps 2 --batch 4 --step=auto --trace "$dir/t.json" >"$dir/auto.txt" 2>&1 || bad "--step=auto run failed"
grep -o 'collective #[0-9]*: [a-z_]* of .* ----' "$dir/auto.txt" | sed 's/ ----$//; s/collective #[0-9]*: //' >"$dir/pictured.txt"
python3 -c "
import json, sys
ev = sorted((e for e in json.load(open('$dir/t.json'))['traceEvents'] if e.get('cat') == 'comm' and e['pid'] == 0), key=lambda e: e['ts'])
for e in ev: print(e['name'].replace(' ', ' of ', 1))
" >"$dir/called.txt"
n=$(wc -l <"$dir/called.txt")
if [ "$n" -gt 10 ] && cmp -s "$dir/pictured.txt" "$dir/called.txt"; then ok "--step=auto pictured all $n collectives in the order rank 0 called them"
else bad "pictured vs called:"; diff "$dir/pictured.txt" "$dir/called.txt" | head; fi
grep -q '\[0 \.\] *->  \[0 1\]' "$dir/auto.txt" && grep -q '\[+ +\] *->  \[S \.\]' "$dir/auto.txt" \
  && ok "all-gather and reduce-scatter pictures show who holds which slice" || bad "slice pictures missing"

# (1b) --step=ring: the ring itself, after each of its N-1 steps. The schedule
# is the textbook one: in step s rank r sends the chunk it received in step
# s-1 (its own first); after N-1 steps every rank holds every chunk, and in a
# reduce-scatter rank r holds the finished sum (S) of chunk r.
out=$(timeout 60 $MPIRUN -np 4 ./fsdp --model tiny --steps 1 --batch 4 --step=ring 2>&1)
ag=$(echo "$out" | sed -n '/collective #1: all_gather/,/collective #2/p')
[ "$(echo "$ag" | grep -c '^  ring all-gather, step')" = 3 ] \
  && echo "$ag" | grep -q "step 1 of 3:  0 -\[0\]-> 1  1 -\[1\]-> 2  2 -\[2\]-> 3  3 -\[3\]-> 0" \
  && echo "$ag" | grep -q "step 2 of 3:  0 -\[3\]-> 1  1 -\[0\]-> 2" \
  && echo "$ag" | grep -q "rank 1 holds \[0 1 \. \.\]" \
  && [ "$(echo "$ag" | sed -n '/step 3 of 3/,$p' | grep -c 'holds \[0 1 2 3\]')" = 4 ] \
  && ok "--step=ring: 3 all-gather steps on 4 ranks, each passing on what it received; all hold [0 1 2 3]" \
  || { bad "--step=ring all-gather pictures"; echo "$ag" | head -20; }
rs=$(echo "$out" | sed -n '/reduce_scatter of unit 3/,/collective #/p')
echo "$rs" | sed -n '/reduce-scatter, step 3 of 3/,$p' | grep -q "rank 2 holds \[[0-9] [0-9] S [0-9]\]" \
  && [ "$(echo "$rs" | grep -c '^  ring reduce-scatter, step')" = 3 ] \
  && ! echo "$out" | grep -q "received chunk" \
  && ok "--step=ring: reduce-scatter: after 3 steps rank 2's chunk 2 has all 4 contributions (S)" \
  || { bad "--step=ring reduce-scatter pictures"; echo "$rs" | head -24; }

# (1c) --step=ring reads a ring's direction from what the ranks report: a
# right ring that turns the other way (sends left) is pictured without a
# complaint, and a wrong one (each rank re-sends its own chunk) is flagged
# from its second step. Both are built as a student's ring is (the
# exercise path: main.c (and so fsdp.c) with the fixture's ring_all_gather in its place).
build_ring() { # build_ring NAME: $dir/NAME from tests/fixtures/exercises/NAME.c
  mpicc -O0 -std=c11 -I. -DEXERCISE_RING_ALL_GATHER \
    -DEXERCISE_FILE="\"$PWD/tests/fixtures/exercises/$1.c\"" main.c files.c formats.c \
    sim/net.c sim/sim.c sim/record.c sim/check.c sim/show.c -o "$dir/$1" -lm -lpthread
}
first_all_gather() { sed -n '/collective #0: all_gather/,/collective #1/p'; }
if build_ring ring_all_gather_reverse; then
  out=$(timeout 60 $MPIRUN -np 4 "$dir/ring_all_gather_reverse" --model tiny --steps 1 --batch 4 --step=ring 2>&1); rc=$?
  ag=$(echo "$out" | first_all_gather)
  [ $rc -eq 0 ] && echo "$ag" | grep -q "step 1 of 3:  0 -\[0\]-> 3  1 -\[1\]-> 0  2 -\[2\]-> 1  3 -\[3\]-> 2" \
    && [ "$(echo "$ag" | sed -n '/step 3 of 3/,$p' | grep -c 'holds \[0 1 2 3\]')" = 4 ] \
    && ! echo "$out" | grep -q "received chunk" \
    && ok "--step=ring: a ring turning the other way (0 -[0]-> 3) is pictured, all hold [0 1 2 3], no complaint" \
    || { bad "--step=ring on a ring turning left (rc $rc)"; echo "$ag" | head -20; }
else bad "tests/fixtures/exercises/ring_all_gather_reverse.c does not build"; fi
if build_ring ring_all_gather_stale; then
  ag=$(timeout 60 $MPIRUN -np 4 "$dir/ring_all_gather_stale" --model tiny --steps 1 --batch 4 --step=ring 2>&1 | first_all_gather)
  echo "$ag" | sed -n '/step 2 of 3/,/step 3 of 3/p' | grep -q "rank 0 received chunk 2, but rank 3, which sends to it, sent chunk 3" \
    && ! echo "$ag" | sed -n '/step 1 of 3/,/step 2 of 3/p' | grep -q "received chunk" \
    && ok "--step=ring: a ring re-sending its own chunk is flagged at step 2 (rank 0 received chunk 2, rank 3 sent 3)" \
    || { bad "--step=ring did not flag a wrong ring"; echo "$ag" | head -20; }
else bad "tests/fixtures/exercises/ring_all_gather_stale.c does not build"; fi

# (2) no terminal: setsid starts it in a new session without one
out=$(setsid timeout 60 $MPIRUN -np 2 ./fsdp --model tiny --steps 1 --batch 4 --step </dev/null 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "use --step=auto" && ok "--step without a terminal: exit 2, points to --step=auto" || bad "--step without terminal: rc $rc: $out"

# (3) a real terminal
if ! command -v tmux >/dev/null; then echo "tmux not installed: cannot drive a terminal session"; exit $([ $fail -eq 0 ] && echo 77 || echo 1); fi
screen() { tmux capture-pane -p -t fsdp-step-test -S -200; }
wait_for() { for _ in $(seq 1 100); do screen | grep -q "$1" && return 0; sleep 0.1; done; return 1; }
tmux new-session -d -s fsdp-step-test -x 200 -y 50 "$MPIRUN -np 4 ./fsdp --model tiny --steps 3 --batch 8 --step; echo EXIT=\$?; sleep 30"
wait_for "collective #0: all_gather of unit 0 (root)" && wait_for "Enter/n: next collective" && ok "stops before collective #0 (all-gather of the root unit) and asks for a key" || { bad "no first stop"; screen | tail -20; }
screen | grep -q "rank 3 *\[\. \. \. 3\] *->  \[0 1 2 3\]" && ok "4-rank all-gather picture" || bad "no 4-rank picture"
tmux send-keys -t fsdp-step-test n Enter
wait_for "collective #1: all_gather of unit 1 (blocks.0)" && ok "n: next collective (#1, all-gather of blocks.0)" || bad "n did not advance"
tmux send-keys -t fsdp-step-test c Enter
wait_for "step 1, collective #12: all_gather of unit 0 (root)" && ok "c: continued to the next step's first collective" || { bad "c did not continue"; screen | tail -5; }
screen | grep -q "step 0, collective #5:" && bad "c still stopped inside step 0" || ok "c skipped the rest of step 0"
tmux send-keys -t fsdp-step-test q Enter
wait_for "EXIT=0" && wait_for "stopped at your request" && ok "q: every rank stopped, exit 0" || { bad "q did not quit cleanly"; screen | tail -5; }
exit $fail
