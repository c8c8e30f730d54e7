/* ============================================================================
 * comm/host.h — one collective on host buffers, run to completion: our
 * ring (comm/ring.h, comm/wire16.h) or Open MPI's own.
 *
 * defines: collective_run_host
 *
 * May include core.h, kernels/backend.h and the comm/ files below it (ring.h,
 * wire16.h); nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_COMM_HOST_H
#define FSDP_COMM_HOST_H
#include "../core.h"
#include "../kernels/backend.h"
#include "ring.h"
#include "wire16.h"

/* Runs one collective on host buffers to completion, on whichever thread
 * the stream uses: our ring, or Open MPI's own (blocking: the stream is
 * what runs it in the background). In fp32, sums only: comm_wait turns
 * them into means (16-bit sums are, as they are unpacked: comm/wire16.h).
 * An all-gather may be in place: its input is then its own chunk of the
 * output, as MPI_IN_PLACE and NCCL allow. */
static void collective_run_host(Comm *c, const CommTask *k) {
    if (backend.dry) return; /* --plan: counted, not sent */
    if (k->wire != DTYPE_FP32) {
        collective_run_host_16(c, k);
        return;
    }
    int mpi = c->impl == COLLECTIVES_MPI;
    long S = k->S;
    int in_place = k->shard == k->full + (long)c->rank * S;
    switch (k->kind) {
    case COMM_ALL_GATHER:
        if (mpi)
            mpiCheck(MPI_Allgather(in_place ? MPI_IN_PLACE : k->shard, (int)S, MPI_FLOAT, k->full,
                                   (int)S, MPI_FLOAT, c->stream_comm));
        else {
            if (!in_place) memcpy(k->full + (long)c->rank * S, k->shard, (size_t)S * sizeof(float));
            ring_all_gather(c, k->full, S);
        }
        break;
    case COMM_REDUCE_SCATTER: /* out may be full's own chunk (zero1): in place */
        if (mpi && k->out == k->full + (long)c->rank * S) { /* MPI wants MPI_IN_PLACE then */
            mpiCheck(MPI_Reduce_scatter_block(MPI_IN_PLACE, k->full, (int)S, MPI_FLOAT, MPI_SUM,
                                              c->stream_comm));
            memmove(k->out, k->full, (size_t)S * sizeof(float)); /* it left the sum at 0 */
        } else if (mpi) {
            mpiCheck(MPI_Reduce_scatter_block(k->full, k->out, (int)S, MPI_FLOAT, MPI_SUM,
                                              c->stream_comm));
        } else {
            ring_reduce_scatter(c, k->full, S, k->tmp);
            if (k->out != k->full + (long)c->rank * S)
                memcpy(k->out, k->full + (long)c->rank * S, (size_t)S * sizeof(float));
        }
        break;
    default: /* all-reduce: literally a reduce-scatter, then an all-gather */
        if (mpi)
            mpiCheck(MPI_Allreduce(MPI_IN_PLACE, k->full, (int)(S * c->world), MPI_FLOAT, MPI_SUM,
                                   c->stream_comm));
        else {
            ring_reduce_scatter(c, k->full, S, k->tmp);
            ring_all_gather(c, k->full, S);
        }
        break;
    }
}


#endif /* FSDP_COMM_HOST_H */
