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
# Every header of the program is checked: the top level's (core.h, fsdp.h,
# trainer.h, ...) and those of kernels/, comm/, sim/, data/, optim/, model/,
# io/ and run/.
#
# Prints one line per header; exits 0 only if every one compiles alone.
set -u
cd "$(dirname "$0")/.."
command -v mpicc >/dev/null 2>&1 || { echo "SKIP: no mpicc (make mpi installs Open MPI)"; exit 77; }
headers=$(ls *.h kernels/*.h comm/*.h sim/*.h data/*.h optim/*.h model/*.h io/*.h run/*.h 2>/dev/null)
ok=0 bad=0
log=$(mktemp); trap 'rm -f "$log"' EXIT
for h in $headers; do
  if printf '#include "%s"\n' "$h" | mpicc -fsyntax-only -std=c11 -Wall \
       -Werror=implicit-function-declaration -I. -x c - >"$log" 2>&1; then
    ok=$((ok + 1)); echo "ok    $h"
  else
    bad=$((bad + 1)); echo "FAIL  $h: $(grep -m1 'error' "$log" | cut -c1-160)"
  fi
done
echo "$ok headers compile alone, $bad do not"
[ $bad = 0 ] && [ $ok -gt 0 ]
