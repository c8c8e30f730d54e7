/* ============================================================================
 * dev/bench/bench_adamw.c — --cpu-offload's AdamW on the host's threads
 *
 *   dev/bench/bench_adamw [ELEMENTS]     (one process; no mpirun needed)
 *
 * With --cpu-offload the shards and AdamW's moments live in host memory and
 * the optimizer step runs on the CPU: at 1B parameters that is 16 GB read
 * and 12 GB written a step, seconds on one thread. HOST_FOR_EACH (kernels/
 * backend.h) splits the loop over backend.host_threads threads (OpenMP), as
 * DeepSpeed's CPU Adam does. This times optim/adamw.h's adamw_one over ELEMENTS
 * (default 2^24, 256 MiB of state) on 1 thread, the reference, and on every
 * core, in the same run, and checks that both leave the same bits.
 *
 * optim/adamw.h is included, not linked, so the very loop the trainer runs
 * is timed with the same compiler flags (and make's -fopenmp).
 * ========================================================================== */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/backend.h" /* HOST_FOR_EACH, host_threads */
#include "optim/adamw.h"     /* AdamWStep, adamw_one */
#pragma GCC diagnostic pop

typedef struct {
    float *p, *m, *v, *g;
} State;

static State state_new(long n) {
    State s;
    s.p = (float *)host_malloc((size_t)n * sizeof(float), "hold the parameters");
    s.m = (float *)host_calloc((size_t)n, sizeof(float), "hold exp_avg");
    s.v = (float *)host_calloc((size_t)n, sizeof(float), "hold exp_avg_sq");
    s.g = (float *)host_malloc((size_t)n * sizeof(float), "hold the gradient");
    for (long i = 0; i < n; i++) {
        s.p[i] = rng_normal(1, STREAM_INIT, 0, (uint64_t)i);
        s.g[i] = 1e-3f * rng_normal(1, STREAM_INIT, 1, (uint64_t)i);
    }
    return s;
}

/* The best of 5 steps, in seconds, on `threads` threads. */
static double time_steps(State *s, long n, int threads) {
    backend.host_threads = threads;
    AdamWStep step = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.0316f, 0};
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        double t0 = now_seconds();
        HOST_FOR_EACH(n, adamw_one, s->p, s->m, s->v, s->g, step);
        best = fmin(best, now_seconds() - t0);
    }
    return best;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long n = argc > 1 ? atol(argv[1]) : 1L << 24;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
#ifndef _OPENMP
    printf("note: built without OpenMP (make OPENMP=): every figure is one thread\n");
#endif
    State one = state_new(n), all = state_new(n);
    double t1 = time_steps(&one, n, 1), tn = time_steps(&all, n, cores);
    int same = !memcmp(one.p, all.p, (size_t)n * sizeof(float)) &&
               !memcmp(one.m, all.m, (size_t)n * sizeof(float)) &&
               !memcmp(one.v, all.v, (size_t)n * sizeof(float));
    double gb = 28.0 * (double)n / 1e9; /* p, m, v, g read; p, m, v written */
    printf("%-28s %10s %10s %8s\n", "AdamW, fp32, host memory", "ms/step", "GB/s", "speedup");
    printf("%-28s %10.2f %10.2f %8s\n", "1 thread (the reference)", 1e3 * t1, gb / t1, "1.00x");
    char name[64];
    snprintf(name, sizeof(name), "%d threads (every core)", cores);
    printf("%-28s %10.2f %10.2f %7.2fx\n", name, 1e3 * tn, gb / tn, t1 / tn);
    printf("%ld elements; after 5 steps the two are %s\n", n,
           same ? "bitwise identical" : "DIFFERENT (a bug: each element is computed alone)");
    MPI_Finalize();
    return same ? 0 : 1;
}
