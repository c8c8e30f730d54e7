/* ============================================================================
 * comm/ring.h — the ring algorithm over point-to-point messages: NCCL's for
 * large messages, N-1 steps each moving one chunk to the right neighbour.
 *
 * defines: ring_right, ring_left, ring_all_gather, ring_reduce_scatter
 *          (graded exercises: make exercise EX=ring_all_gather, ...)
 *
 * May include core.h, fsdp.h and sim/; nothing of fsdp.c's. A ring exercise
 * (exercises/grade.sh) replaces a ring's body below by the student's file.
 * ========================================================================== */
#ifndef FSDP_COMM_RING_H
#define FSDP_COMM_RING_H
#include "../core.h"
#include "../fsdp.h"
#include "../sim/sim.h"

static int ring_right(const Comm *c) { return (c->rank + 1) % c->world; }
static int ring_left(const Comm *c) { return (c->rank - 1 + c->world) % c->world; }

/* Ring all-gather, in place in `full` (N chunks of S). At step s, rank r
 * passes on the chunk it received in the previous step (its own at s = 0),
 * chunk (r - s) mod N, and receives chunk (r - s - 1) mod N from the left.
 * After N-1 steps every chunk has travelled around the ring. */
#ifdef EXERCISE_RING_ALL_GATHER /* graded exercise: make exercise EX=ring_all_gather */
#include EXERCISE_FILE
#else
static void ring_all_gather(Comm *c, float *full, long S) {
    int N = c->world;
    for (int s = 0; s < N - 1; s++) {
        int send_chunk = (c->rank - s + N) % N;
        int recv_chunk = (c->rank - s - 1 + N) % N;
        mpiCheck(MPI_Sendrecv(full + send_chunk * S, (int)S, MPI_FLOAT, ring_right(c),
                              COMM_ALL_GATHER, full + recv_chunk * S, (int)S, MPI_FLOAT,
                              ring_left(c), COMM_ALL_GATHER, c->stream_comm, MPI_STATUS_IGNORE));
        sim_on_ring_step(c->sim, c, COMM_ALL_GATHER, s, send_chunk, recv_chunk); /* --step=ring */
    }
}
#endif /* EXERCISE_RING_ALL_GATHER */

/* Ring reduce-scatter (sum), accumulating in place in `full`. At step s,
 * rank r sends its partial sum of chunk (r - s - 1) mod N to the right and
 * adds the left neighbour's partial sum of chunk (r - s - 2) mod N into its
 * own. Each chunk picks up one rank's contribution per step, and after N-1
 * steps rank r holds the complete sum of chunk r. `tmp` holds S elements. */
#ifdef EXERCISE_RING_REDUCE_SCATTER /* graded exercise: make exercise EX=ring_reduce_scatter */
#include EXERCISE_FILE
#else
static void ring_reduce_scatter(Comm *c, float *full, long S, float *tmp) {
    int N = c->world;
    for (int s = 0; s < N - 1; s++) {
        int send_chunk = (c->rank - s - 1 + 2 * N) % N;
        int recv_chunk = (c->rank - s - 2 + 2 * N) % N;
        mpiCheck(MPI_Sendrecv(full + send_chunk * S, (int)S, MPI_FLOAT, ring_right(c),
                              COMM_REDUCE_SCATTER, tmp, (int)S, MPI_FLOAT, ring_left(c),
                              COMM_REDUCE_SCATTER, c->stream_comm, MPI_STATUS_IGNORE));
        float *acc = full + recv_chunk * S;
        for (long i = 0; i < S; i++) acc[i] += tmp[i];
        sim_on_ring_step(c->sim, c, COMM_REDUCE_SCATTER, s, send_chunk, recv_chunk);
    }
}
#endif /* EXERCISE_RING_REDUCE_SCATTER */

#endif /* FSDP_COMM_RING_H */
