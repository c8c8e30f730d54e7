/* exercises/ring_guard.h — the grader's guard around a student's ring.
 *
 * exercises/grade.sh compiles fsdp.c with this file in place of a ring
 * exercise's (EXERCISE_FILE), and this file includes the student's
 * (EXERCISE_STUDENT_FILE). It catches the ring's most common mistake where
 * it happens. In C, (-1) % N is -1, not N - 1, so a rank computes a
 * negative neighbour (-1 is MPI_ANY_SOURCE in Open MPI: a receive from
 * anyone) or a negative chunk (a read or a write before `full`). Unguarded,
 * that hangs a run on one machine, crashes it or corrupts its parameters on
 * another, depending on what lies before the buffer. Guarded, it is named:
 *   - the student's ring runs on a copy of `full` with N chunks of guard on
 *     each side, which belong to the grader: a buffer that points into them
 *     is a chunk out of range, and a guard that changed by the ring's end
 *     (a local acc[i] += tmp[i] into chunk -1) is one too;
 *   - every MPI_Sendrecv, MPI_Send, MPI_Recv, MPI_Isend and MPI_Irecv of
 *     the student's file has its neighbour checked (0 .. N-1) and its
 *     buffer;
 * and the run ends with "[rank R] error at exercises/ring_guard.h: ...":
 * "a negative chunk index" or "a negative neighbour" where the (-1) % N hint
 * applies (the grader adds it then), "past the N chunks" or "outside
 * 0..N-1" where it does not. Pointers elsewhere (a buffer of the student's
 * own, `tmp`) are not judged. The copy costs a run twice the ring's buffer
 * and a memcpy each way: nothing, at the grader's sizes.
 */
#include <stdint.h>

/* A guard's every float: a signalling NaN. A sum into it, even of 0, gives
 * a quiet NaN, other bits; a quiet NaN plus anything keeps its bits. */
#define RING_GUARD_FILL 0x7fa0dead
#define RING_GUARD_HINT                                                                            \
    "In C, (-1) % N is -1, not N - 1: add N before taking % (as ring_left does)."

typedef struct {
    const char *ring;       /* "ring_all_gather" or "ring_reduce_scatter" */
    int world;              /* N: the ring's ranks (c->world) */
    long S;                 /* floats in a chunk */
    const float *lo, *full; /* the guard before the N chunks, the chunks */
} RingGuard;
/* the ring running on this thread (the stream's, or the main one inline) */
static _Thread_local RingGuard ring_guard;

/* Where buf lies in chunks of S floats from `full`: -N .. -1 before it,
 * N .. 2N-1 after it, 0 inside (or elsewhere: not the grader's business). */
static long ring_guard_chunk(const void *buf) {
    const RingGuard *g = &ring_guard;
    uintptr_t p = (uintptr_t)buf, lo = (uintptr_t)g->lo, full = (uintptr_t)g->full;
    uintptr_t chunk_bytes = (uintptr_t)g->S * sizeof(float);
    uintptr_t n_bytes = (uintptr_t)g->world * chunk_bytes;
    if (g->ring == NULL || chunk_bytes == 0 || p < lo || p >= full + 2 * n_bytes) return 0;
    if (p < full) return -(long)((full - p + chunk_bytes - 1) / chunk_bytes);
    if (p >= full + n_bytes) return (long)((p - full) / chunk_bytes);
    return 0;
}

static void ring_guard_buffer(const void *buf, const char *verb) {
    long k = ring_guard_chunk(buf);
    if (k < 0)
        FATAL(RING_GUARD_HINT, "%s %s chunk %ld, before `full`: a negative chunk index",
              ring_guard.ring, verb, k);
    if (k > 0)
        FATAL("a chunk index is in 0 .. N-1: take it mod N",
              "%s %s chunk %ld, past the N = %d chunks of `full`", ring_guard.ring, verb, k,
              ring_guard.world);
}

static void ring_guard_peer(int peer, const char *verb) {
    if (ring_guard.ring == NULL || (peer >= 0 && peer < ring_guard.world)) return;
    if (peer < 0)
        FATAL(RING_GUARD_HINT, "%s %s rank %d: a negative neighbour%s", ring_guard.ring, verb, peer,
              peer == MPI_ANY_SOURCE ? " (MPI_ANY_SOURCE in this MPI: a receive from anyone)" : "");
    FATAL("a neighbour is in 0 .. N-1: take it mod N (ring_right, ring_left)",
          "%s %s rank %d, outside 0..%d", ring_guard.ring, verb, peer, ring_guard.world - 1);
}

static int ring_guard_sendrecv(const void *sb, int sn, MPI_Datatype st, int dest, int stag,
                               void *rb, int rn, MPI_Datatype rt, int src, int rtag, MPI_Comm comm,
                               MPI_Status *status) {
    ring_guard_peer(dest, "sends to");
    ring_guard_buffer(sb, "sends");
    ring_guard_peer(src, "receives from");
    ring_guard_buffer(rb, "receives into");
    return MPI_Sendrecv(sb, sn, st, dest, stag, rb, rn, rt, src, rtag, comm, status);
}
static int ring_guard_send(const void *b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm comm) {
    ring_guard_peer(dest, "sends to");
    ring_guard_buffer(b, "sends");
    return MPI_Send(b, n, t, dest, tag, comm);
}
static int ring_guard_recv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                           MPI_Status *status) {
    ring_guard_peer(src, "receives from");
    ring_guard_buffer(b, "receives into");
    return MPI_Recv(b, n, t, src, tag, comm, status);
}
static int ring_guard_isend(const void *b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm comm,
                            MPI_Request *req) {
    ring_guard_peer(dest, "sends to");
    ring_guard_buffer(b, "sends");
    return MPI_Isend(b, n, t, dest, tag, comm, req);
}
static int ring_guard_irecv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm comm,
                            MPI_Request *req) {
    ring_guard_peer(src, "receives from");
    ring_guard_buffer(b, "receives into");
    return MPI_Irecv(b, n, t, src, tag, comm, req);
}

/* The copy the student's ring runs on: N chunks of guard, `full`'s N
 * chunks, N chunks of guard. */
static float *ring_guard_begin(const char *ring, const Comm *c, const float *full, long S) {
    long n = (long)c->world * S;
    float *lo = (float *)host_malloc((size_t)(3 * n) * sizeof(float), "allocate the ring's guard");
    uint32_t fill = RING_GUARD_FILL;
    for (long i = 0; i < 3 * n; i++) memcpy(&lo[i], &fill, sizeof(fill));
    memcpy(lo + n, full, (size_t)n * sizeof(float));
    ring_guard = (RingGuard){ring, c->world, S, lo, lo + n};
    return lo + n;
}

/* After the ring: the guards as they were, and the chunks back in `full` */
static void ring_guard_end(float *full) {
    RingGuard g = ring_guard;
    long n = (long)g.world * g.S;
    uint32_t fill = RING_GUARD_FILL, v;
    ring_guard.ring = NULL;
    for (long i = 0; i < 3 * n; i++) {
        if (i == n) i = 2 * n; /* the chunks themselves */
        memcpy(&v, &g.lo[i], sizeof(v));
        if (v == fill) continue;
        long k = i / g.S - g.world; /* the chunk it lies in, counted from full */
        if (k < 0)
            FATAL(RING_GUARD_HINT, "%s wrote into chunk %ld, before `full`: a negative chunk index",
                  g.ring, k);
        FATAL("a chunk index is in 0 .. N-1: take it mod N",
              "%s wrote into chunk %ld, past the N = %d chunks of `full`", g.ring, k, g.world);
    }
    memcpy(full, g.full, (size_t)n * sizeof(float));
    free((void *)g.lo);
}

/* The student's file, its ring renamed and its MPI point-to-point calls guarded */
#define MPI_Sendrecv ring_guard_sendrecv
#define MPI_Send ring_guard_send
#define MPI_Recv ring_guard_recv
#define MPI_Isend ring_guard_isend
#define MPI_Irecv ring_guard_irecv
#define ring_all_gather student_ring_all_gather
#define ring_reduce_scatter student_ring_reduce_scatter
#include EXERCISE_STUDENT_FILE
#undef ring_all_gather
#undef ring_reduce_scatter
#undef MPI_Sendrecv
#undef MPI_Send
#undef MPI_Recv
#undef MPI_Isend
#undef MPI_Irecv

#ifdef EXERCISE_RING_ALL_GATHER
static void ring_all_gather(Comm *c, float *full, long S) {
    student_ring_all_gather(c, ring_guard_begin("ring_all_gather", c, full, S), S);
    ring_guard_end(full);
}
#endif
#ifdef EXERCISE_RING_REDUCE_SCATTER
static void ring_reduce_scatter(Comm *c, float *full, long S, float *tmp) {
    student_ring_reduce_scatter(c, ring_guard_begin("ring_reduce_scatter", c, full, S), S, tmp);
    ring_guard_end(full);
}
#endif
