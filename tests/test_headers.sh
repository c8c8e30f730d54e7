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
# With --nvcc each is compiled as CUDA C++ too (nvcc -x cu, sm_90: what make
# gpu builds), where nvcc exists: 50 s more on two cores, so make test leaves
# it out.
#
# Last, that no source of the product includes a file of dev/ (the workshop).
#
# Prints one line per header; exits 0 only if every one compiles alone.
set -u
cd "$(dirname "$0")/.."
command -v mpicc >/dev/null 2>&1 || { echo "SKIP: no mpicc (make mpi installs Open MPI)"; exit 77; }
nv=0
if [ "${1:-}" = --nvcc ]; then
  if command -v nvcc >/dev/null 2>&1; then nv=1; else echo "no nvcc: the CUDA check is skipped"; fi
fi
headers=$(ls *.h kernels/*.h comm/*.h sim/*.h data/*.h optim/*.h model/*.h io/*.h run/*.h 2>/dev/null)
ok=0 bad=0
log=$(mktemp); cu=$(mktemp -d); trap 'rm -rf "$log" "$cu"' EXIT
alone() { # alone H: compiles H alone as C, and (--nvcc) as CUDA C++
  printf '#include "%s"\n' "$1" | mpicc -fsyntax-only -std=c11 -Wall \
    -Werror=implicit-function-declaration -I. -x c - >"$log" 2>&1 || return 1
  [ $nv = 1 ] || return 0
  printf '#include "%s"\n' "$1" >"$cu/one.cu"
  # shellcheck disable=SC2046  # mpicc's flags are a list
  nvcc -x cu -std=c++17 -arch=sm_90 -DOMPI_SKIP_MPICXX -I. $(mpicc --showme:compile) \
    -c "$cu/one.cu" -o "$cu/one.o" >"$log" 2>&1
}
for h in $headers; do
  if alone "$h"; then
    ok=$((ok + 1)); echo "ok    $h"
  else
    bad=$((bad + 1)); echo "FAIL  $h: $(grep -m1 'error' "$log" | cut -c1-160)"
  fi
done
echo "$ok headers compile alone, $bad do not"
# The workshop (dev/: the emulator, benchmarks, profiler) is not the product:
# no source outside dev/ and tests/ includes a file of it (make fsdp-emu
# adds the emulator from its command line, -include, not from the source).
inc=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(\.\./)*dev/' *.c *.h */*.c */*.h 2>/dev/null | grep -v '^dev/\|^tests/')
if [ -n "$inc" ]; then
  bad=$((bad + 1)); echo "FAIL  the product includes dev/ (the workshop): $inc"
else
  echo "ok    no product source includes dev/ (the workshop)"
fi
[ $bad = 0 ] && [ $ok -gt 0 ]
