#!/usr/bin/env bash
# tests/test_headers.sh: every header compiles on its own.
#
# DESIGN's rule is that dependencies point one way (core.h <- kernels/, comm/,
# sim/, data/ <- fsdp.c <- model/, io/ <- main.c, run/) and that every header
# includes what it uses. A header that leans on what its includer happened to
# define first compiles only in place: this builds each one alone,
#   printf '#include "H"' | mpicc -fsyntax-only -std=c11 -x c -
# with implicit declarations an error, so a header that calls a function it
# does not declare fails here, not in the next person's translation unit.
#
# Until the include cycle of issue 45 is broken, only the headers in ALONE
# below are held to it; the others are listed as "not yet" and not counted.
# bash tests/test_headers.sh --all checks every header (what ALONE grows to).
#
# Prints one line per header; exits 0 only if every checked header compiles.
set -u
cd "$(dirname "$0")/.."
command -v mpicc >/dev/null 2>&1 || { echo "SKIP: no mpicc (make mpi installs Open MPI)"; exit 77; }
# the headers that compile alone now; the rest follow as issue 45 moves code down
ALONE="core.h fsdp.h files.h formats.h comm/comm.h comm/device.h comm/groups.h comm/host.h comm/ring.h
  comm/stream.h comm/task.h comm/wire16.h kernels/backend.h sim/events.h sim/ledger.h sim/oom.h
  sim/sim.h kernels/flash.h kernels/layers.h kernels/transformer.h model/activations.h data/corpus.h data/sampler.h
  trainer.h model/tree.h model/gpt2_tree.h model/mlp.h model/gpt2.h
  optim/lr_schedule.h io/checkpoint.h io/lock.h run/cli.h run/generate.h run/report.h run/roofline.h optim/adamw.h"
ALONE=$(echo $ALONE) # one space between names
all=0; [ "${1:-}" = --all ] && all=1
headers=$(ls *.h kernels/*.h comm/*.h sim/*.h data/*.h optim/*.h model/*.h io/*.h run/*.h 2>/dev/null)
ok=0 bad=0 later=0
log=$(mktemp); trap 'rm -f "$log"' EXIT
for h in $headers; do
  if [ $all = 0 ] && ! [[ " $ALONE " == *" $h "* ]]; then
    later=$((later + 1)); echo "not yet  $h"; continue
  fi
  if printf '#include "%s"\n' "$h" | mpicc -fsyntax-only -std=c11 -Wall \
       -Werror=implicit-function-declaration -I. -x c - >"$log" 2>&1; then
    ok=$((ok + 1)); echo "ok       $h"
  else
    bad=$((bad + 1)); echo "FAIL     $h: $(grep -m1 'error' "$log" | cut -c1-160)"
  fi
done
echo "$ok headers compile alone, $bad do not$([ $later -gt 0 ] && echo ", $later not checked yet")"
[ $bad = 0 ] && [ $ok -gt 0 ]
