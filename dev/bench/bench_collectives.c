/* ============================================================================
 * dev/bench/bench_collectives.c — our ring collectives against Open MPI's
 *
 *   mpirun -np N dev/bench/bench_collectives        (make bench runs N = 2 and 4)
 *
 * FSDP spends its communication in two collectives: the all-gather before a
 * unit computes and the reduce-scatter after its backward. fsdp.c implements
 * both twice (--collectives ring | mpi, comm/). This program times, on
 * the same buffers and in the same run:
 *
 *   ours      comm_all_gather_start / comm_reduce_scatter_start + comm_wait,
 *             with impl COLLECTIVES_RING: the code the trainer runs
 *   Open MPI  the blocking built-ins MPI_Allgather, MPI_Reduce_scatter_block,
 *             which pick a tuned algorithm per message size
 *   (mpi)     the same fsdp.c calls with impl COLLECTIVES_MPI: the very
 *             blocking built-ins above, run as `--collectives mpi` trains
 *             with them (through fsdp.c's Comm, counted and recorded), so
 *             this column shows what that bookkeeping costs
 *
 * and a memcpy of the same size on rank 0 alone, as a ceiling: on one host
 * every byte a collective moves is copied by a CPU, through shared memory.
 *
 * The figures follow nccl-tests (its doc/PERFORMANCE.md), so they read the
 * same way as GPU numbers do:
 *   algbw = bytes of the full buffer / time
 *   busbw = algbw * (N-1)/N
 * busbw is what each rank's link carries for a ring algorithm, so it does
 * not depend on N and can be held against the hardware's bandwidth.
 *
 * Time is the slowest rank's (a collective is finished only when it is
 * finished everywhere), per iteration, after a barrier, and we report the
 * median over the iterations: with more ranks than cores the OS scheduler
 * adds large, random stalls that the median filters out.
 * ========================================================================== */

/* The collectives alone (comm/, and the ledger they book in), not fsdp.c: the
 * headers' helpers this bench does not call are unused, not worth a warning. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "comm/stream.h" /* comm_init, comm_*_start, comm_wait, comm_release */
#include "sim/ledger.h"  /* ledger_release_all */
#pragma GCC diagnostic pop

#include <time.h>   /* nanosleep */
#include <unistd.h> /* sysconf: the core count for the header */

/* Full-buffer sizes, from latency-bound to bandwidth-bound. For scale, one
 * block's flat parameter is 0.5 MiB in `small`, 2 MiB in `medium` and 8 MiB
 * in `large`; 32 MiB is past every cache. */
static const long SIZES_BYTES[] = {64L << 10, 1L << 20, 8L << 20, 32L << 20};
enum { N_SIZES = sizeof(SIZES_BYTES) / sizeof(SIZES_BYTES[0]) };

/* What we time. Each op reads and writes the same three buffers. */
typedef enum {
    OP_AG_RING, OP_AG_OMPI, OP_AG_NB, /* all-gather: ours, MPI_Allgather, Comm(mpi) */
    OP_RS_RING, OP_RS_OMPI, OP_RS_NB, /* reduce-scatter: the same three             */
    N_OPS
} Op;

typedef struct {
    Comm ring, nb;   /* fsdp.c's Comm, impl RING and impl MPI                    */
    Ledger ledger;   /* the ring reduce-scatter books its temp buffer here       */
    MPI_Comm world;
    int rank, N;
    long S;          /* elements per rank (chunk); the full buffer holds N*S     */
    float *full;     /* N*S: all-gather output, reduce-scatter input             */
    float *shard;    /* S:   all-gather input, reduce-scatter output             */
    float *rs_input; /* N*S: pristine reduce-scatter input, copied into `full`   */
} Bench;

static int is_reduce_scatter(Op op) { return op >= OP_RS_RING; }

/* Small integers, so every sum below is exact in fp32 and results can be
 * checked with ==, whatever order a ring or a tree adds them in. */
static float ag_value(int rank, long i) { return (float)(rank * 8 + i % 8); }
static float rs_value(int rank, long j) { return (float)(rank + j % 8); }

/* The ring reduce-scatter accumulates in place in `full` (it is the gradient
 * buffer in training, dead afterwards), so before each call the input is
 * restored, outside the timed region. MPI's are refilled too, so all three
 * start from the same cache state. */
static void prepare(Bench *b, Op op) {
    if (is_reduce_scatter(op)) memcpy(b->full, b->rs_input, (size_t)(b->N * b->S) * sizeof(float));
}

static void run_op(Bench *b, Op op) {
    CommHandle h;
    int S = (int)b->S;
    switch (op) {
    case OP_AG_RING:
        h = comm_all_gather_start(&b->ring, b->full, DTYPE_FP32, b->shard, b->S, -1, DTYPE_FP32);
        comm_wait(&b->ring, &h);
        break;
    case OP_AG_NB:
        h = comm_all_gather_start(&b->nb, b->full, DTYPE_FP32, b->shard, b->S, -1, DTYPE_FP32);
        comm_wait(&b->nb, &h);
        break;
    case OP_AG_OMPI:
        mpiCheck(MPI_Allgather(b->shard, S, MPI_FLOAT, b->full, S, MPI_FLOAT, b->world));
        break;
    case OP_RS_RING:
        h = comm_reduce_scatter_start(&b->ring, b->shard, b->full, DTYPE_FP32, b->S, -1, &b->ledger);
        comm_wait(&b->ring, &h); /* includes the 1/N scaling to a mean: S more flops */
        break;
    case OP_RS_NB:
        h = comm_reduce_scatter_start(&b->nb, b->shard, b->full, DTYPE_FP32, b->S, -1, &b->ledger);
        comm_wait(&b->nb, &h);
        break;
    case OP_RS_OMPI: /* a plain sum: MPI has no "mean" reduction */
        mpiCheck(MPI_Reduce_scatter_block(b->full, b->shard, S, MPI_FLOAT, MPI_SUM, b->world));
        break;
    case N_OPS: break;
    }
}

/* Checks the result of the op just run; returns the number of wrong elements
 * on this rank. A benchmark of a broken collective would be meaningless. */
static long check_op(const Bench *b, Op op) {
    long bad = 0, N = b->N, S = b->S;
    if (!is_reduce_scatter(op)) {
        for (long j = 0; j < N * S; j++) bad += b->full[j] != ag_value((int)(j / S), j % S);
        return bad;
    }
    for (long i = 0; i < S; i++) {
        long j = (long)b->rank * S + i;
        double sum = (double)N * (j % 8) + (double)N * (N - 1) / 2.0; /* sum over ranks of rs_value */
        double want = op == OP_RS_OMPI ? sum : sum / N;                 /* ours average */
        bad += fabs(b->shard[i] - want) > 1e-6 * (1.0 + fabs(want));
    }
    return bad;
}

/* Waits for every rank without spinning. A rank blocked in MPI_Barrier polls
 * the network at 100% CPU; with 4 ranks on 2 cores, three spinning ranks
 * would steal rank 0's core while it measures memcpy. Sleeping between tests
 * of a non-blocking barrier leaves the core to rank 0. */
static void barrier_sleeping(MPI_Comm comm) {
    MPI_Request req;
    int done = 0;
    mpiCheck(MPI_Ibarrier(comm, &req));
    for (;;) {
        mpiCheck(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) break;
        struct timespec ts = {0, 200 * 1000}; /* 0.2 ms */
        nanosleep(&ts, NULL);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over `iters` iterations of the slowest rank's time, in seconds. */
static double time_op(Bench *b, Op op, int warmup, int iters, long *bad) {
    double *dt = (double *)calloc((size_t)iters, sizeof(double));
    if (!dt) FATAL("the machine is out of host memory", "cannot allocate %d timings", iters);
    for (int it = 0; it < warmup; it++) {
        prepare(b, op);
        run_op(b, op);
    }
    *bad += check_op(b, op);
    for (int it = 0; it < iters; it++) {
        prepare(b, op);
        /* Every rank starts together, so no rank's time includes waiting for
         * a late neighbour that was still in the previous iteration. */
        mpiCheck(MPI_Barrier(b->world));
        double t0 = now_seconds();
        run_op(b, op);
        dt[it] = now_seconds() - t0;
    }
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, dt, iters, MPI_DOUBLE, MPI_MAX, b->world));
    qsort(dt, (size_t)iters, sizeof(double), cmp_double);
    double med = iters % 2 ? dt[iters / 2] : 0.5 * (dt[iters / 2 - 1] + dt[iters / 2]);
    free(dt);
    return med;
}

/* memcpy of `bytes` on rank 0 while the other ranks sleep; GB/s of bytes
 * copied (each byte is read once and written once), valid on rank 0. */
static double memcpy_gbps(Bench *b, long bytes, int iters) {
    double gbps = 0.0;
    barrier_sleeping(b->world);
    if (b->rank == 0) {
        double *dt = (double *)calloc((size_t)iters, sizeof(double));
        if (!dt) FATAL("the machine is out of host memory", "cannot allocate %d timings", iters);
        memcpy(b->full, b->rs_input, (size_t)bytes); /* warm-up: both buffers are touched */
        for (int it = 0; it < iters; it++) {
            double t0 = now_seconds();
            memcpy(b->full, b->rs_input, (size_t)bytes);
            dt[it] = now_seconds() - t0;
        }
        /* Read the copy back, so the compiler cannot drop a copy nobody reads. */
        volatile float sink = b->full[bytes / (long)sizeof(float) - 1];
        (void)sink;
        qsort(dt, (size_t)iters, sizeof(double), cmp_double);
        gbps = (double)bytes / dt[iters / 2] / 1e9;
        free(dt);
    }
    barrier_sleeping(b->world);
    return gbps;
}

/* Enough iterations for a stable median, few enough that the 32 MiB case
 * stays well under a second per op on an oversubscribed laptop. */
static int iterations_for(long bytes) {
    long it = (128L << 20) / bytes;
    return (int)(it < 10 ? 10 : it > 100 ? 100 : it);
}

static void print_size(long bytes) {
    if (bytes >= (1L << 20)) printf("%5ld MiB", bytes >> 20);
    else printf("%5ld KiB", bytes >> 10);
}

int main(int argc, char **argv) {
    int provided = 0; /* fsdp.c's communication thread needs MPI_THREAD_MULTIPLE */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    Bench b;
    memset(&b, 0, sizeof(b)); /* a zeroed Ledger is an empty ledger */
    b.world = MPI_COMM_WORLD;
    comm_init(&b.ring, b.world, COLLECTIVES_RING, NULL, 0); /* inline: the collective alone */
    comm_init(&b.nb, b.world, COLLECTIVES_MPI, NULL, 0);
    b.rank = b.ring.rank;
    b.N = b.ring.world;
    if (b.N < 2) {
        if (b.rank == 0) fprintf(stderr, "bench_collectives: needs at least 2 ranks (a collective on 1 rank moves nothing).\n"
                                         "HINT: mpirun --oversubscribe -np 4 dev/bench/bench_collectives\n");
        MPI_Finalize();
        return 2;
    }
    int N = b.N;
    double bus = (double)(N - 1) / N; /* busbw / algbw */

    /* One set of buffers at the largest size; smaller sizes use a prefix. */
    long max_count = SIZES_BYTES[N_SIZES - 1] / (long)sizeof(float);
    b.full = (float *)calloc((size_t)max_count, sizeof(float));
    b.rs_input = (float *)calloc((size_t)max_count, sizeof(float));
    b.shard = (float *)calloc((size_t)(max_count / N + 1), sizeof(float));
    if (!b.full || !b.rs_input || !b.shard) FATAL("the machine is out of host memory; run fewer ranks", "cannot allocate 2 x %ld MiB", max_count * 4 >> 20);

    double sec[N_SIZES][N_OPS], mcpy[N_SIZES];
    long bytes_of[N_SIZES], bad = 0;
    int iters_of[N_SIZES];
    for (int si = 0; si < N_SIZES; si++) {
        /* The full buffer must split into N equal chunks: round down. */
        b.S = SIZES_BYTES[si] / (long)sizeof(float) / N;
        long count = b.S * N;
        bytes_of[si] = count * (long)sizeof(float);
        iters_of[si] = iterations_for(bytes_of[si]);
        for (long i = 0; i < b.S; i++) b.shard[i] = ag_value(b.rank, i);
        for (long j = 0; j < count; j++) b.rs_input[j] = rs_value(b.rank, j);
        for (int op = 0; op < N_OPS; op++) {
            sec[si][op] = time_op(&b, (Op)op, 2, iters_of[si], &bad);
        }
        mcpy[si] = memcpy_gbps(&b, bytes_of[si], iters_of[si]);
    }
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, b.world));

    if (b.rank == 0) {
        int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
        printf("collectives on N=%d ranks", N);
        if (cores > 0) printf(" (%d cores%s)", cores, N > cores ? ": oversubscribed, ranks share cores" : "");
        printf("\n  algbw = full-buffer bytes / time, busbw = algbw * (N-1)/N, GB/s = 1e9 B/s (nccl-tests)\n"
               "  time = median over iterations of the slowest rank; memcpy = same bytes copied on rank 0 alone\n");
        const char *title[2] = {"all-gather    ours: ring (comm_all_gather_start)      Open MPI: MPI_Allgather",
                                "reduce-scatter  ours: ring (comm_reduce_scatter_start)  Open MPI: MPI_Reduce_scatter_block"};
        for (int k = 0; k < 2; k++) {
            Op ours = k ? OP_RS_RING : OP_AG_RING, ompi = k ? OP_RS_OMPI : OP_AG_OMPI, nb = k ? OP_RS_NB : OP_AG_NB;
            printf("\n%s\n", title[k]);
            printf("     size  iters |  ours ms  busbw | ompi ms  busbw | ours/ompi | --collectives mpi busbw | memcpy GB/s\n");
            for (int si = 0; si < N_SIZES; si++) {
                double bw_ours = bytes_of[si] / sec[si][ours] / 1e9 * bus;
                double bw_ompi = bytes_of[si] / sec[si][ompi] / 1e9 * bus;
                double bw_nb = bytes_of[si] / sec[si][nb] / 1e9 * bus;
                print_size(bytes_of[si]);
                printf("  %5d | %8.3f %6.2f | %7.3f %6.2f | %9.2f | %23.2f | %11.2f\n", iters_of[si], 1e3 * sec[si][ours], bw_ours,
                       1e3 * sec[si][ompi], bw_ompi, bw_ours / bw_ompi, bw_nb, mcpy[si]);
            }
        }
        printf("\nresults checked against the expected values: %s\n", bad ? "FAILED" : "all correct");
        if (bad) printf("  %ld wrong elements summed over ranks, sizes and ops\n", bad);
    }

    free(b.full);
    free(b.rs_input);
    free(b.shard);
    comm_release(&b.ring);
    comm_release(&b.nb);
    ledger_release_all(&b.ledger);
    MPI_Finalize();
    return bad ? 1 : 0;
}
