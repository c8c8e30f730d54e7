# tests/lib.sh — sourced by the shell tests: the mpirun environment (the
# Makefile exports the same; repeated so each test also runs on its own)
# and the two words every check ends in.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN=${MPIRUN:-mpirun -q --oversubscribe}
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
