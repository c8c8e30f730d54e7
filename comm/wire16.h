/* ============================================================================
 * comm/wire16.h — mixed precision on the wire: the
 * rings and Open MPI's collectives on 16-bit values, for host buffers.
 * fsdp.c includes it in place, after the fp32 rings it mirrors. The float
 * slots are packed into uint16_t, so the wire carries half the bytes, and
 * each reduce step adds in fp32 and rounds the partial sum back to 16 bits,
 * as NCCL does for bf16 and fp16.
 *
 * May include core.h, kernels/backend.h and comm/ring.h; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_COMM_WIRE16_H
#define FSDP_COMM_WIRE16_H
#include "../core.h"
#include "../kernels/backend.h"
#include "ring.h"

/* ------------------------------------------------------------------------
 * The same two rings on 16-bit values (mixed precision)
 *
 * The schedule is the one above; each chunk is a uint16_t array, so the
 * wire carries half the bytes, and the reduce step adds in fp32 and rounds
 * the partial sum back to 16 bits before passing it on, as NCCL does for
 * bf16 and fp16. Each of the N-1 additions rounds: the sum of N gradients
 * carries up to N-1 roundings of 2^-8 (bf16) or 2^-11 (fp16) relative.
 * --------------------------------------------------------------------- */
static void ring_all_gather_16(Comm *c, uint16_t *full, long S) {
    int N = c->world;
    for (int s = 0; s < N - 1; s++) {
        int send_chunk = (c->rank - s + N) % N, recv_chunk = (c->rank - s - 1 + N) % N;
        mpiCheck(MPI_Sendrecv(full + send_chunk * S, (int)S, MPI_UINT16_T, ring_right(c),
                              COMM_ALL_GATHER, full + recv_chunk * S, (int)S, MPI_UINT16_T,
                              ring_left(c), COMM_ALL_GATHER, c->stream_comm, MPI_STATUS_IGNORE));
        sim_on_ring_step(c->sim, c, COMM_ALL_GATHER, s, send_chunk, recv_chunk);
    }
}

static void ring_reduce_scatter_16(Comm *c, uint16_t *full, long S, uint16_t *tmp, Dtype d) {
    int N = c->world;
    for (int s = 0; s < N - 1; s++) {
        int send_chunk = (c->rank - s - 1 + 2 * N) % N, recv_chunk = (c->rank - s - 2 + 2 * N) % N;
        mpiCheck(MPI_Sendrecv(full + send_chunk * S, (int)S, MPI_UINT16_T, ring_right(c),
                              COMM_REDUCE_SCATTER, tmp, (int)S, MPI_UINT16_T, ring_left(c),
                              COMM_REDUCE_SCATTER, c->stream_comm, MPI_STATUS_IGNORE));
        for (long i = 0; i < S; i++) add_half_one(i, full + recv_chunk * S, tmp, d);
        sim_on_ring_step(c->sim, c, COMM_REDUCE_SCATTER, s, send_chunk, recv_chunk);
    }
}

/* Open MPI's reductions on 16-bit values need the sum as a user operation */
static void mpi_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    for (long i = 0; i < *len; i++) add_half_one(i, (uint16_t *)inout, (uint16_t *)in, DTYPE_BF16);
}
static void mpi_sum_fp16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    for (long i = 0; i < *len; i++) add_half_one(i, (uint16_t *)inout, (uint16_t *)in, DTYPE_FP16);
}

/* A reduction's input held in 16 bits, scaled in place by f (1/predivide)
 * as pack_one scales float slots: the same bits, the value being of
 * format d already */
FSDP_HD static inline void scale_half_one(long i, uint16_t *x, Dtype d, float f) {
    x[i] = half_from_float(float_from_half(x[i], d) * f, d);
}

/* A 16-bit sum unpacked as its mean: times f (predivide/G), rounded to d
 * again. One pass over the result where unpacking, scaling and rounding
 * took three (on a GPU each a read and a write of the shard in fp32). */
FSDP_HD static inline void unpack_mean_one(long i, float *out, const uint16_t *x, Dtype d,
                                           float f) {
    out[i] = round_to(float_from_half(x[i], d) * f, d);
}

/* A collective whose wire format is 16-bit, on host buffers: the float
 * slots are packed into uint16_t, the collective runs on those, and the
 * result is unpacked into the slots. Or full holds the 16 bits already
 * (k->held: a unit's full state or gradient on a GPU) and is the wire's
 * buffer itself: an all-gather's input (the shard, held so too) and output
 * stay packed, a reduce-scatter's input is scaled in place. */
static void collective_run_host_16(Comm *c, const CommTask *k) {
    long S = k->S, N = c->world;
    int mpi = c->impl == COLLECTIVES_MPI, packed = k->held != DTYPE_FP32;
    Dtype d = k->wire;
    /* N slices (unless full holds them) and the ring's tmp; + 2 bytes so
     * that a group holding none of a unit's parameters (S = 0) still asks
     * for some memory. An all-gather into a held full state needs neither. */
    size_t bytes = ((packed ? 0 : (size_t)N) + 1) * (size_t)S * sizeof(uint16_t) + 2;
    uint16_t *buf = packed && k->kind == COMM_ALL_GATHER
                        ? NULL
                        : (uint16_t *)host_malloc(bytes, "pack a 16-bit collective");
    uint16_t *w = packed ? (uint16_t *)k->full : buf;
    uint16_t *tmp = packed ? buf : buf + N * S, *mine = w + c->rank * S;
    if (k->kind == COMM_ALL_GATHER) {
        if (packed) memcpy(mine, k->shard, (size_t)S * sizeof(uint16_t)); /* held so too */
        else
            for (long i = 0; i < S; i++) pack_one(i, mine, k->shard, d, 1.0f);
        if (mpi)
            mpiCheck(MPI_Allgather(MPI_IN_PLACE, (int)S, MPI_UINT16_T, w, (int)S, MPI_UINT16_T,
                                   c->stream_comm));
        else ring_all_gather_16(c, w, S);
        if (!packed)
            for (long i = 0; i < N * S; i++) unpack_one(i, k->full, w, d);
    } else if (k->kind == COMM_REDUCE_SCATTER) {
        for (long i = 0; i < N * S; i++)
            if (!packed) pack_one(i, w, k->full, d, k->prescale);
            else if (k->prescale != 1.0f) scale_half_one(i, w, d, k->prescale);
        if (mpi)
            mpiCheck(MPI_Reduce_scatter_block(w, tmp, (int)S, MPI_UINT16_T, c->half_sum[d],
                                              c->stream_comm));
        else ring_reduce_scatter_16(c, w, S, tmp, d);
        for (long i = 0; i < S; i++) unpack_mean_one(i, k->out, mpi ? tmp : mine, d, k->postscale);
    } else {
        for (long i = 0; i < N * S; i++) pack_one(i, w, k->full, d, k->prescale);
        if (mpi)
            mpiCheck(MPI_Allreduce(MPI_IN_PLACE, w, (int)(N * S), MPI_UINT16_T, c->half_sum[d],
                                   c->stream_comm));
        else {
            ring_reduce_scatter_16(c, w, S, tmp, d);
            ring_all_gather_16(c, w, S);
        }
        for (long i = 0; i < N * S; i++) unpack_mean_one(i, k->full, w, d, k->postscale);
    }
    free(buf);
}

#endif /* FSDP_COMM_WIRE16_H */
