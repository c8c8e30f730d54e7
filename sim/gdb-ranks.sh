#!/usr/bin/env bash
# sim/gdb-ranks.sh — one gdb per rank, side by side in tmux, stopped at every
# collective. The recipe behind `fsdp --wait-for-debugger`:
#
#   1. start the ranks with --wait-for-debugger: each prints its PID and spins
#      in debugger_wait() until a debugger sets its local `attached`;
#   2. attach one gdb per PID, set a breakpoint on comm_record (the one
#      function every collective passes through), release the rank, continue;
#   3. step the ranks one pane at a time: a rank stopped in comm_record is
#      about to enter a collective; the others cannot finish it without it.
#
# usage: sim/gdb-ranks.sh NP [fsdp options...]     e.g.  sim/gdb-ranks.sh 2 --model tiny
# Inside each pane: `continue` to the next collective, `print kind`, `print unit`,
# `bt` for where it came from; C-b o moves between panes; `tmux kill-session -t fsdp-gdb` ends it.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:?usage: sim/gdb-ranks.sh NP [fsdp options...]}
shift
command -v tmux >/dev/null || { echo "error: tmux is needed (apt-get install tmux)"; exit 2; }
command -v gdb >/dev/null || { echo "error: gdb is needed (apt-get install gdb)"; exit 2; }
make -s fsdp-debug
. sim/mpi-env.sh
log=$(mktemp)
$MPIRUN -np "$np" ./fsdp-debug --wait-for-debugger "$@" >"$log" 2>&1 &
for _ in $(seq 1 100); do # up to 10 s for every rank to report its PID
  [ "$(grep -c 'waiting for a debugger' "$log")" -ge "$np" ] && break
  sleep 0.1
done
mapfile -t pids < <(grep 'waiting for a debugger' "$log" | sort -n -k2 | awk '{print $4}')
[ "${#pids[@]}" -eq "$np" ] || { echo "error: only ${#pids[@]} of $np ranks reported a PID:"; cat "$log"; exit 1; }
gdb_cmd() { echo "gdb -q -p $1 -ex 'break comm_record' -ex 'frame function debugger_wait' -ex 'set var attached = 1' -ex continue"; }
tmux new-session -d -s fsdp-gdb "$(gdb_cmd "${pids[0]}")"
for ((r = 1; r < np; r++)); do
  tmux split-window -t fsdp-gdb -h "$(gdb_cmd "${pids[$r]}")"
  tmux select-layout -t fsdp-gdb even-horizontal
done
echo "rank output goes to $log"
[ -n "${TMUX:-}" ] && tmux switch-client -t fsdp-gdb || tmux attach -t fsdp-gdb
