#!/usr/bin/env bash
# tests/test_mpi_env.sh — shared memory's one-copy messages (cma) are used
# where, and only where, the machine allows them (sim/cma_probe.py):
#   - the probe says one word, cma or none; without python3, none;
#   - the Makefile and sim/mpi-env.sh export its word, and keep a value set
#     already;
#   - where it says cma, Open MPI's ranks really do copy so: a GPT-2 run on
#     2 ranks, whose all-gathers and reduce-scatters send 100s of KiB a
#     message, trains the same parameters bit for bit with cma as with none
#     (a container that forbids the call fails there, at the first large
#     message: "Read -1, expected ..., errno = 1").
cd "$(dirname "$0")/.."
source tests/lib.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

word=$(python3 sim/cma_probe.py)
case $word in
  cma | none) ok "sim/cma_probe.py says '$word'" ;;
  *) bad "sim/cma_probe.py said '$word', not cma or none" ;;
esac
mkdir "$out/bin" && ln -s "$(command -v dirname)" "$out/bin/" # a PATH with no python3
nopy=$(env -u OMPI_MCA_btl_vader_single_copy_mechanism PATH="$out/bin" /bin/bash -c \
  '. sim/mpi-env.sh 2>/dev/null; echo "$OMPI_MCA_btl_vader_single_copy_mechanism"')
[ "$nopy" = none ] && ok "without python3, sim/mpi-env.sh says none" ||
  bad "without python3, sim/mpi-env.sh says '$nopy', not none"

# what each exports, unset and set (make prints its environment in a recipe)
from_mpi_env() { bash -c '. sim/mpi-env.sh; echo "$OMPI_MCA_btl_vader_single_copy_mechanism"'; }
from_make() { make -s --no-print-directory -f - show <<<$'include Makefile\nshow:\n\t@echo "$$OMPI_MCA_btl_vader_single_copy_mechanism"'; }
for get in from_mpi_env from_make; do
  how="sim/mpi-env.sh"; [ $get = from_make ] && how="the Makefile"
  got=$(unset OMPI_MCA_btl_vader_single_copy_mechanism; $get)
  [ "$got" = "$word" ] && ok "$how exports the probe's word ($got)" || bad "$how exports '$got', the probe says '$word'"
  got=$(OMPI_MCA_btl_vader_single_copy_mechanism=none $get)
  [ "$got" = none ] && ok "$how keeps a value set already (none)" || bad "$how replaced none with '$got'"
done

if [ "$word" != cma ]; then
  echo "skip: this machine forbids cross-memory attach (sim/cma_probe.py says none), so Open MPI's cma is not run here"
else
  ARGS="--model gpt2-mini --n-layer 2 --n-head 4 --n-embd 128 --context 64 --batch 12 --steps 3 --log-every 1"
  for mech in none cma; do
    OMPI_MCA_btl_vader_single_copy_mechanism=$mech run_fsdp 2 "$out/$mech.log" --export "$out/$mech.st"
  done
  if cmp -s "$out/none.st" "$out/cma.st"; then
    ok "2 ranks, GPT-2: the parameters trained with cma equal those with none, bit for bit"
  else
    bad "the parameters trained with cma differ from those with none:"; tail -3 "$out/cma.log"
  fi
fi
exit $fail
