/* ============================================================================
 * dev/bench/bench_matmul.c — how fast are fsdp.c's Linear layers?
 *
 *   dev/bench/bench_matmul          (one process; no mpirun needed)
 *
 * Almost all of a training step's arithmetic is in linear_forward and
 * linear_backward (kernels/layers.h). This program times them on the exact
 * shapes the `small` model runs, at the local batch of 4 ranks (16 samples
 * each, the demo) and of 1 rank (64), and on GPT-2's as the recipe trains
 * gpt2-mini on 1 and 2 ranks (768 and 384 rows), and prints GFLOP/s:
 *
 *   forward   out = inp @ W^T + b                    2*B*I*O flops
 *   backward  dinp += dout @ W, dW += dout^T @ inp   4*B*I*O flops
 *             (dbias's B*O additions are left out, as is customary)
 *
 * Next to them, on the same shapes and in the same run, a reference: the
 * textbook matmul, C = A @ B with three loops in i-j-k order, written below.
 * It is what "a matmul in C" is before anyone thinks about the memory
 * hierarchy or SIMD, so the ratio says what fsdp.c's packing and register
 * blocking (see accumulate, kernels/layers.h) buy on this machine. Both sum
 * each element in the same order, so forward and the textbook agree bit
 * for bit.
 *
 * fsdp.c is included, not linked, so the very code the trainer runs is timed
 * with the same compiler flags. It is an MPI program, so MPI is initialised
 * for MPI_Wtime, although nothing is sent.
 * ========================================================================== */

/* The layers alone (kernels/), not fsdp.c: the headers' helpers this bench
 * does not call are unused, not worth a warning. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/layers.h" /* linear_forward, linear_backward */
#pragma GCC diagnostic pop

/* `make bench` builds this file a second time with FSDP_BENCH_OPENBLAS and
 * OpenBLAS (installed on demand; fsdp itself never links it), to print a
 * tuned library's GFLOP/s on the same shapes, single-threaded, beside ours. */
#ifdef FSDP_BENCH_OPENBLAS
#include <cblas.h>
#undef I /* <complex.h>, which cblas.h includes, defines I */
#endif

typedef struct {
    const char *name;
    int I, O; /* in_features, out_features */
} Shape;

/* A group of shapes, each timed at each of the group's batches (rows). */
typedef struct {
    const char *title;
    const Shape *shapes;
    int n_shapes;
    const int *batches;
    int n_batches;
} Group;

/* The Linear layers of the `small` preset: T*C = 16*16 = 256, D = 128,
 * 4D = 512, V = 256, at the local batch of 4 ranks (16) and of 1 (64). */
static const Shape SMALL[] = {
    {"proj_in", 256, 128},
    {"fc1", 128, 512},
    {"fc2", 512, 128},
    {"head", 128, 256},
};
static const int SMALL_BATCHES[] = {16, 64};

/* GPT-2's, as the recipe trains it on CPU ranks (gpt2-mini, --n-layer 4
 * --n-head 4 --n-embd 128 --context 64 --batch 12): C = 128, vocab 256;
 * rows are tokens, 12*64 = 768 on 1 rank and 384 on each of 2. (lm_head
 * has no bias there; here it is timed as a Linear with one, B*O adds.) */
static const Shape RECIPE[] = {
    {"c_attn", 128, 384},
    {"attnproj", 128, 128},
    {"c_fc", 128, 512},
    {"mlpproj", 512, 128},
    {"lm_head", 128, 256},
};
static const int RECIPE_BATCHES[] = {384, 768};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const Group GROUPS[] = {
    {"the `small` byte MLP", SMALL, COUNT(SMALL), SMALL_BATCHES, COUNT(SMALL_BATCHES)},
    {"GPT-2, the recipe's gpt2-mini", RECIPE, COUNT(RECIPE), RECIPE_BATCHES, COUNT(RECIPE_BATCHES)},
};

/* The reference: C (M, N) = A (M, K) @ B (K, N), all row-major, simplest
 * i-j-k order. The inner loop walks B down a column, N floats apart, and
 * one running sum cannot be vectorised without reordering the additions,
 * which C compilers do not do on floats unless told to (-ffast-math). */
static void naive_matmul(float *C, const float *A, const float *B, int M, int K, int N) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += A[(long)i * K + k] * B[(long)k * N + j];
            C[(long)i * N + j] = s;
        }
}

/* Deterministic values in [-1, 1): the same generator fsdp.c uses. */
static void fill(float *x, long n, uint64_t stream) {
    for (long i = 0; i < n; i++) x[i] = 2.0f * rng_uniform(42, stream, 0, (uint64_t)i) - 1.0f;
}

static float *alloc_floats(long n) {
    float *p = (float *)calloc((size_t)n, sizeof(float));
    if (!p) FATAL("the machine is out of host memory", "cannot allocate %ld floats", n);
    return p;
}

typedef enum { K_FORWARD, K_BACKWARD, K_NAIVE, K_BLAS_FORWARD, K_BLAS_BACKWARD } Kernel;

typedef struct {
    int B, I, O;
    float *inp, *w, *wt, *bias, *out, *dout, *dinp, *dw, *db, *ref;
} Case;

static void run_kernel(Case *c, Kernel k) {
    Dtype f = DTYPE_FP32;
    Linear l = {buf(c->w, f), buf(c->bias, f), buf(c->dw, f), buf(c->db, f), c->I, c->O};
    switch (k) {
    case K_FORWARD: linear_forward(&l, buf(c->out, f), c->inp, c->B); break;
    case K_BACKWARD: linear_backward(&l, buf(c->dinp, f), buf(c->dout, f), c->inp, c->B); break;
    case K_NAIVE: naive_matmul(c->ref, c->inp, c->wt, c->B, c->I, c->O); break;
#ifdef FSDP_BENCH_OPENBLAS
    case K_BLAS_FORWARD: /* out = inp @ W^T (+ bias, as the layer does: B*O adds) */
        for (int b = 0; b < c->B; b++) memcpy(c->out + (long)b * c->O, c->bias, (size_t)c->O * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->B, c->O, c->I, 1.0f, c->inp, c->I, c->w,
                    c->I, 1.0f, c->out, c->O);
        break;
    case K_BLAS_BACKWARD: /* dinp += dout @ W; dW += dout^T @ inp */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->B, c->I, c->O, 1.0f, c->dout, c->O, c->w,
                    c->I, 1.0f, c->dinp, c->I);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c->O, c->I, c->B, 1.0f, c->dout, c->O, c->inp,
                    c->I, 1.0f, c->dw, c->I);
        break;
#endif
    default: break;
    }
}

/* Seconds per call: repeats the call until ~0.1 s has passed (so the clock's
 * resolution and one-off stalls do not matter), after one warm-up call that
 * brings the operands into cache, as they are in a training step. */
static double seconds_per_call(Case *c, Kernel k) {
    run_kernel(c, k);
    long calls = 0;
    double t0 = now_seconds(), t = 0.0;
    do {
        for (int r = 0; r < 8; r++) run_kernel(c, k);
        calls += 8;
        t = now_seconds() - t0;
    } while (t < 0.1);
    return t / (double)calls;
}

/* Times one layer, (B, I) -> (B, O), and prints its line; returns how far
 * forward is from the naive matmul (summation order only). */
static double bench_one(const char *name, int B, int I, int O) {
    Case c;
    c.B = B;
    c.I = I;
    c.O = O;
    long BI = (long)c.B * c.I, BO = (long)c.B * c.O, OI = (long)c.O * c.I;
    c.inp = alloc_floats(BI);
    c.w = alloc_floats(OI);
    c.wt = alloc_floats(OI);
    c.bias = alloc_floats(c.O);
    c.out = alloc_floats(BO);
    c.dout = alloc_floats(BO);
    c.dinp = alloc_floats(BI);
    c.dw = alloc_floats(OI);
    c.db = alloc_floats(c.O);
    c.ref = alloc_floats(BO);
    fill(c.inp, BI, 1);
    fill(c.w, OI, 2);
    fill(c.dout, BO, 3);
    /* The naive matmul takes the weight as (I, O), the textbook
     * layout; nn.Linear stores (O, I). Same numbers, transposed. */
    for (int o = 0; o < c.O; o++)
        for (int i = 0; i < c.I; i++) c.wt[(long)i * c.O + o] = c.w[(long)o * c.I + i];

    /* Check before timing: forward with a zero bias must match the
     * reference up to rounding (the two sum in different orders). */
    run_kernel(&c, K_FORWARD);
    run_kernel(&c, K_NAIVE);
    double err = 0.0;
    for (long j = 0; j < BO; j++) {
        double e = fabs((double)c.out[j] - c.ref[j]) / (1.0 + fabs(c.ref[j]));
        if (e > err) err = e;
    }

    double flops = 2.0 * c.B * c.I * c.O;
    double t_fwd = seconds_per_call(&c, K_FORWARD);
    double t_naive = seconds_per_call(&c, K_NAIVE);
    /* Backward accumulates (+=) into dinp, dW and db, as in the
     * trainer, so repeated calls just keep adding: fine for timing. */
    double t_bwd = seconds_per_call(&c, K_BACKWARD);
    double gf_fwd = flops / t_fwd / 1e9, gf_naive = flops / t_naive / 1e9, gf_bwd = 2.0 * flops / t_bwd / 1e9;
    printf("%-8s %3d %4d %4d | %8.1f %8.2f | %8.1f %8.2f | %10.2f | %9.2f %9.2f | %s\n", name, c.B, c.I, c.O,
           1e6 * t_fwd, gf_fwd, 1e6 * t_bwd, gf_bwd, gf_naive, gf_fwd / gf_naive, gf_bwd / gf_naive,
           err < 1e-4 ? "ok" : "MISMATCH");
#ifdef FSDP_BENCH_OPENBLAS
    double gb_fwd = flops / seconds_per_call(&c, K_BLAS_FORWARD) / 1e9;
    double gb_bwd = 2.0 * flops / seconds_per_call(&c, K_BLAS_BACKWARD) / 1e9;
    printf("%-8s %3s %4s %4s   OpenBLAS fwd %7.2f GF/s, bwd %7.2f GF/s | ours/BLAS fwd %.2f bwd %.2f%s\n", "", "",
           "", "", gb_fwd, gb_bwd, gf_fwd / gb_fwd, gf_bwd / gb_bwd,
           gf_fwd / gb_fwd < 0.8 || gf_bwd / gb_bwd < 0.8 ? "  <- below 0.80" : "");
#endif

    free(c.inp); free(c.w); free(c.wt); free(c.bias); free(c.out);
    free(c.dout); free(c.dinp); free(c.dw); free(c.db); free(c.ref);
    return err;
}

int main(int argc, char **argv) {
    int provided = 0; /* fsdp.c's communication thread needs MPI_THREAD_MULTIPLE */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    printf("linear layers, one core, fp32 (GFLOP/s = 1e9 flop/s)\n"
           "  forward 2*B*I*O flops, backward 4*B*I*O; naive = textbook i-j-k matmul (B,I)@(I,O) = 2*B*I*O\n\n");
#ifdef FSDP_BENCH_OPENBLAS
    openblas_set_num_threads(1); /* one core, like fsdp's kernels */
    printf("  OpenBLAS: the same matmuls through cblas_sgemm, one thread; ours/BLAS should be >= 0.80\n\n");
#endif
    printf("%-8s %3s %4s %4s | %8s %8s | %8s %8s | %10s | %9s %9s | %s\n", "layer", "B", "I", "O", "fwd us", "GFLOP/s",
           "bwd us", "GFLOP/s", "naive GF/s", "fwd/naive", "bwd/naive", "check");
    double max_err = 0.0;
    for (int gi = 0; gi < COUNT(GROUPS); gi++) {
        const Group *g = &GROUPS[gi];
        printf("-- %s\n", g->title);
        for (int bi = 0; bi < g->n_batches; bi++)
            for (int si = 0; si < g->n_shapes; si++) {
                const Shape *sh = &g->shapes[si];
                double err = bench_one(sh->name, g->batches[bi], sh->I, sh->O);
                if (err > max_err) max_err = err;
            }
    }
    printf("\nforward vs naive: largest relative difference %.2e (summation order only)\n", max_err);
    MPI_Finalize();
    return max_err < 1e-4 ? 0 : 1;
}
