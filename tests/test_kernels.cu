/* ============================================================================
 * tests/test_kernels.cu — every GPU kernel against its CPU function, one at
 * a time (as llm.c's dev/cuda files do); make test-gpu runs it first.
 *
 *   mpirun -np 1 tests/test_kernels     (one GPU; built by make tests/test_kernels)
 *
 * The kernels: LayerNorm (a warp a row), the column sums of the parameter
 * gradients, the embeddings' gradients grouped by token, the Linear layers on
 * cuBLAS in fp32 and on the tensor cores in bf16, gelu_new, AdamW, the
 * loss's softmax (a warp a row) and causal attention (batched GEMMs around
 * a warp-a-row softmax, both directions, in fp32 and in bf16; fused, as
 * FlashAttention-2, on the tensor cores, after the fragment layouts its
 * PTX instructions are written to).
 *
 * For each kernel: the same random inputs go through the GPU build's
 * function (a CUDA kernel, cuBLAS, or FOR_EACH over an FSDP_HD function)
 * and through the CPU build's arithmetic on the host (the FSDP_HD row and
 * column functions the CPU program runs, or a plain loop), and the largest
 * difference is held to a tolerance derived from what the two may do
 * differently. Two fp32 sums of the same K terms in another order differ by
 * at most about 2 K u times the sum of the terms' magnitudes (u = 2^-24,
 * Higham's gamma_K), so a kernel whose outputs are sums of K terms gets
 * tol = 2 K u * max over outputs of sum |term|; element-wise functions
 * whose only difference is CUDA's expf/erff (2 ulp) and fused
 * multiply-adds get 16 u (|value| + 1), or 32 u where an expf feeds a
 * product of several terms (gelu_new). The kernel's time on the GPU (mean
 * of TIME_REPS launches, CUDA events) is printed beside it.
 *
 * Prints one line a kernel and "N passed, N failed"; exits 1 on a failure.
 * Compiled in CI (make gpu's check); on one H100 (2026-11-27) every check
 * of the day passed. The flash kernels were rewritten after (kernels/flash.h),
 * and they, the fragment-layout checks and GELU in cuBLASLt's epilogues
 * have run only on the emulator.
 * ========================================================================== */
#include "../core.h"
#include "../kernels/backend.h"
#include "../kernels/layers.h"
#include "../kernels/transformer.h"
#include "../optim/adamw.h"
#include "../run/cli.h" /* config_parse */

static const double U = 1.0 / 16777216.0; /* fp32's unit roundoff, 2^-24 */
static int passed, failed;

static float *host_random(long n, uint64_t stream, float scale) {
    float *x = (float *)host_malloc((size_t)n * sizeof(float), "hold inputs");
    for (long i = 0; i < n; i++) x[i] = scale * rng_normal(7, stream, 0, (uint64_t)i);
    return x;
}
/* Device buffers, all given back to the pool by gpu_free_all */
static struct {
    void *p;
    size_t bytes;
} lent[64];
static int n_lent;
static float *gpu(long n) {
    if (n_lent == 64) FATAL("raise lent's size", "too many test buffers");
    float *d = (float *)dev_alloc((size_t)n * sizeof(float));
    if (!d) FATAL("use a GPU with more memory", "cannot allocate %ld floats", n);
    lent[n_lent].p = d, lent[n_lent++].bytes = (size_t)n * sizeof(float);
    return d;
}
static void gpu_free_all(void) {
    dev_synchronize();
    while (n_lent > 0) n_lent--, dev_free(lent[n_lent].p, lent[n_lent].bytes);
}
static float *device_copy(const float *x, long n) {
    float *d = gpu(n);
    dev_from_host(d, x, (size_t)n * sizeof(float));
    return d;
}
/* n values held in 16 bits (format d) on the device, as a matmul's input
 * is with bf16 parameters (kernels/layers.h), unpacked there for expect */
static float *unpacked(const void *dev, long n, Dtype d) {
    float *out = gpu(n);
    FOR_EACH(n, unpack_one, out, (const uint16_t *)dev, d);
    return out;
}
/* ... and the other way: n values (fp32) packed into a new buffer in format d */
static float *packed(const float *dev, long n, Dtype d) {
    float *out = gpu(n);
    FOR_EACH(n, pack_one, (uint16_t *)out, dev, d, 1.0f);
    return out;
}
static float *host_copy(const float *d, long n) {
    float *x = (float *)host_malloc((size_t)n * sizeof(float), "read a result back");
    dev_to_host(x, d, (size_t)n * sizeof(float));
    return x;
}

/* The GPU's result dev (n values) against the CPU's ref, within tol: the
 * largest difference, or with `relative` the largest relative to ref */
static void expect_as(const char *kernel, const char *what, const float *dev, const float *ref,
                      long n, double tol, double us, int relative) {
    float *got = host_copy(dev, n);
    double worst = 0.0;
    long at = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (relative) d /= fmax(fabs((double)ref[i]), 1e-30);
        if (isnan(d)) { /* a NaN is the worst there is: stop at the first */
            worst = INFINITY, at = i;
            break;
        }
        if (d > worst) worst = d, at = i;
    }
    int ok = worst <= tol;
    printf("%s %-46s %-8s max |gpu - cpu|%s %9.3g  tol %9.3g  %9.1f us\n", ok ? "ok  " : "FAIL",
           kernel, what, relative ? " / |cpu|" : "", worst, tol, us);
    if (!ok) printf("      at %ld: gpu %.9g, cpu %.9g\n", at, (double)got[at], (double)ref[at]);
    ok ? passed++ : failed++;
    free(got);
}
static void expect(const char *kernel, const char *what, const float *dev, const float *ref, long n,
                   double tol, double us) {
    expect_as(kernel, what, dev, ref, n, tol, us, 0);
}
/* That linear_forward's product since `before` went to cuBLASLt with the
 * bias epilogue (kernels/layers.h): on a GPU whose cuBLASLt has no
 * algorithm for it, the bias is written first instead, and this says so */
static void expect_epilogue(const char *kernel, long before) {
    int ok = backend.lt_products > before;
    printf("%s %-46s the bias added by cuBLASLt's epilogue%s\n", ok ? "ok  " : "FAIL", kernel,
           ok ? "" : ": its heuristic found no algorithm (the bias was written first)");
    ok ? passed++ : failed++;
}
/* ... relative to the CPU's value (probabilities, whose errors are
 * relative: an absolute bound at the largest would pass almost any small one) */
static void expect_relative(const char *kernel, const char *what, const float *dev,
                            const float *ref, long n, double tol, double us) {
    expect_as(kernel, what, dev, ref, n, tol, us, 1);
}

/* The mean time of TIME_REPS runs of `call` on the compute stream, in
 * microseconds: 20 on a GPU; two under the emulator (make test-gpu-emu),
 * whose time for a kernel says nothing of a GPU's, and two runs still tell
 * a kernel that adds into its output from one that overwrites it. The attention checks
 * run GPT-2's sequence of ATTENTION_T = 1024 on a GPU, and a quarter of it
 * under the emulator, where a T^2 kernel runs a CPU thread per CUDA thread;
 * LayerNorm and GELU GPT-2 124M's ROWS = 8 x 1024 tokens, and a quarter of
 * them there (still many blocks: what the emulator checks is each block's
 * threads, not their number). */
#ifdef FSDP_EMU
enum { TIME_REPS = 2, ATTENTION_T = 256, ROWS = 2048 };
#else
enum { TIME_REPS = 20, ATTENTION_T = 1024, ROWS = 8192 };
#endif
#define TIME_US(out, ...) TIME_RUNS(out, TIME_REPS, __VA_ARGS__)
/* ... of `reps` runs (one: where a second would add into the first's result).
 * The call is variadic: a kernel launch, expanded, has commas outside parentheses. */
#define TIME_RUNS(out, reps, ...)                                                                  \
    do {                                                                                           \
        cudaEvent_t t0_ = event_record(backend.compute, 1);                                        \
        for (int rep_ = 0; rep_ < (reps); rep_++) __VA_ARGS__;                                     \
        cudaEvent_t t1_ = event_record(backend.compute, 1);                                        \
        cudaCheck(cudaEventSynchronize(t1_));                                                      \
        float ms_ = 0.0f;                                                                          \
        cudaCheck(cudaEventElapsedTime(&ms_, t0_, t1_));                                           \
        (out) = 1e3 * ms_ / (reps);                                                                \
        cudaEventDestroy(t0_);                                                                     \
        cudaEventDestroy(t1_);                                                                     \
    } while (0)

static double max_abs(const float *x, long n) {
    double m = 0.0;
    for (long i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}
/* One ulp of 16-bit format d at magnitude m (bf16 keeps 8 significant
 * bits, fp16 11): by this much two roundings of values m or smaller may
 * differ when the fp32 values differ by less and straddle a rounding
 * boundary. (m / 256 is short of it by up to twice in bf16.) */
static double ulp16(double m, Dtype d) {
    return m > 0.0 ? ldexp(1.0, ilogb(m) - (d == DTYPE_BF16 ? 7 : 10)) : 0.0;
}

/* LayerNorm's parameter gradients held in bf16 (a sharded unit's full
 * gradient on a GPU with --param-dtype bf16: fsdp.c's grad_dtype), added
 * into one already there (an earlier micro-batch's; here the sum itself,
 * rounded): the stage-2 column sums add in fp32 and round once as they
 * write. dw and db are the CPU's sums TIME_REPS times over; tw and tb the
 * bounds of one. The reference: the gradient there plus one sum, rounded;
 * the bound: the sum's own and one bf16 ulp. */
static void check_layernorm_grads16(const float *dw, const float *db, double tw, double tb,
                                    void *gdx16, const float *gdy16, const float *gx16,
                                    const float *gw16, const float *gmean, const float *grstd,
                                    int B, int D) {
    float *ref = (float *)host_malloc((size_t)2 * D * 4, "ref"), *ref_b = ref + D;
    for (int i = 0; i < D; i++)
        ref[i] = round_to(dw[i] / TIME_REPS, DTYPE_BF16),
        ref_b[i] = round_to(db[i] / TIME_REPS, DTYPE_BF16);
    float *g = device_copy(ref, 2L * D), *gdw16 = packed(g, D, DTYPE_BF16),
          *gdb16 = packed(g + D, D, DTYPE_BF16);
    backend.gemm_dtype = DTYPE_BF16;
    double us;
    LayerNorm ln16 = norm_view(gw16, NULL, DTYPE_BF16, gdw16, gdb16, DTYPE_BF16, D);
    TIME_RUNS(us, 1, layernorm_backward(&ln16, gdx16, gdy16, gx16, gmean, grstd, B, DTYPE_BF16));
    backend.gemm_dtype = DTYPE_FP32;
    for (int i = 0; i < D; i++)
        ref[i] = round_to(ref[i] + dw[i] / TIME_REPS, DTYPE_BF16),
        ref_b[i] = round_to(ref_b[i] + db[i] / TIME_REPS, DTYPE_BF16);
    const char *name = "layernorm backward, its gradients held in bf16 (added into)";
    expect(name, "dweight", unpacked(gdw16, D, DTYPE_BF16), ref, D,
           tw + ulp16(max_abs(ref, D), DTYPE_BF16), us);
    expect(name, "dbias", unpacked(gdb16, D, DTYPE_BF16), ref_b, D,
           tb + ulp16(max_abs(ref_b, D), DTYPE_BF16), us);
    free(ref);
}

/* LayerNorm over GPT-2 124M's rows: 8 x 1024 tokens of 768 (ROWS) */
static void check_layernorm(void) {
    const int B = ROWS, D = 768;
    char fwd[64], bwd[64];
    snprintf(fwd, sizeof(fwd), "layernorm forward (%d x %d)", B, D);
    snprintf(bwd, sizeof(bwd), "layernorm backward (%d x %d)", B, D);
    long n = (long)B * D;
    float *x = host_random(n, 1, 1.0f), *w = host_random(D, 2, 0.2f), *b = host_random(D, 3, 0.2f),
          *dy = host_random(n, 4, 1.0f);
    for (int i = 0; i < D; i++) /* bf16 values, for the held runs */
        w[i] = round_to(w[i] + 1.0f, DTYPE_BF16), b[i] = round_to(b[i], DTYPE_BF16);
    for (long i = 0; i < n; i++)
        x[i] = round_to(x[i], DTYPE_BF16), dy[i] = round_to(dy[i], DTYPE_BF16);
    float *out = (float *)host_calloc((size_t)n, sizeof(float), "ref"),
          *mean = (float *)host_calloc(B, sizeof(float), "ref"),
          *rstd = (float *)host_calloc(B, sizeof(float), "ref"),
          *dx = (float *)host_calloc((size_t)n, sizeof(float), "ref"),
          *dw = (float *)host_calloc(D, sizeof(float), "ref"),
          *db = (float *)host_calloc(D, sizeof(float), "ref");
    for (long r = 0; r < B; r++)
        layernorm_forward_row(r, out, mean, rstd, x, w, b, DTYPE_FP32, D, DTYPE_FP32, DTYPE_FP32);
    for (long r = 0; r < B; r++)
        layernorm_backward_row(r, dx, dy, x, w, DTYPE_FP32, mean, rstd, D, DTYPE_FP32, DTYPE_FP32);
    for (long c = 0; c < D; c++)
        layernorm_backward_col(c, dw, db, dy, x, mean, rstd, B, D, DTYPE_FP32, DTYPE_FP32);
    float *gx = device_copy(x, n), *gw = device_copy(w, D), *gb = device_copy(b, D),
          *gdy = device_copy(dy, n), *gout = gpu(n), *gmean = gpu(B), *grstd = gpu(B),
          *gdx = gpu(n), *gdw = gpu(D), *gdb = gpu(D);
    double us;
    LayerNorm ln = norm_view(gw, gb, DTYPE_FP32, gdw, gdb, DTYPE_FP32, D);
    TIME_US(us, layernorm_forward(&ln, gout, gmean, grstd, gx, B, DTYPE_FP32));
    /* a row's mean and variance are sums of D terms; the output carries their error */
    double bound = 4.0 * D * U * max_abs(out, n);
    expect(fwd, "out", gout, out, n, bound, us);
    /* With bf16 parameters the input is the residual stream, held in bf16,
     * the weight and bias are read from the unit's full state in bf16, and
     * the output is c_attn's input, written in bf16 (held as the matmul
     * reads it): the CPU's value rounded, give or take the one bf16 ulp a
     * value on a rounding boundary may round the other way by */
    float *out16 = (float *)host_malloc((size_t)n * 4, "ref");
    for (long i = 0; i < n; i++) out16[i] = round_to(out[i], DTYPE_BF16);
    float *gx16 = gpu(n), *gw16 = gpu(D), *gb16 = gpu(D);
    FOR_EACH(n, pack_one, (uint16_t *)gx16, gx, DTYPE_BF16, 1.0f);
    FOR_EACH(D, pack_one, (uint16_t *)gw16, gw, DTYPE_BF16, 1.0f);
    FOR_EACH(D, pack_one, (uint16_t *)gb16, gb, DTYPE_BF16, 1.0f);
    backend.gemm_dtype = DTYPE_BF16;
    LayerNorm ln16 = norm_view(gw16, gb16, DTYPE_BF16, gdw, gdb, DTYPE_FP32, D);
    TIME_US(us, layernorm_forward(&ln16, gout, gmean, grstd, gx16, B, DTYPE_BF16));
    backend.gemm_dtype = DTYPE_FP32;
    expect("layernorm forward, held in bf16", "out", unpacked(gout, n, DTYPE_BF16), out16, n,
           bound + ulp16(max_abs(out, n), DTYPE_BF16), us);
    free(out16);
    expect(fwd, "rstd", grstd, rstd, B, 4.0 * D * U * max_abs(rstd, B),
           us);
    TIME_US(us, layernorm_backward(&ln, gdx, gdy, gx, gmean, grstd, B, DTYPE_FP32));
    /* the GPU ran it TIME_REPS times, adding: the CPU's once, times that (dx1: once) */
    float *dx1 = (float *)host_malloc((size_t)n * 4, "ref");
    memcpy(dx1, dx, (size_t)n * 4);
    for (long i = 0; i < n; i++) dx[i] *= TIME_REPS;
    for (int i = 0; i < D; i++) dw[i] *= TIME_REPS, db[i] *= TIME_REPS;
    /* dinp_i = rstd (g_i - mean(g) - n_i mean(g n)), g = dy w: the two
     * means are sums of D terms, off by 2 D u times their terms' sums */
    double row = 0.0, col = 0.0, nmax = 0.0;
    for (int r = 0; r < B; r++) {
        double sg = 0.0, sgn = 0.0;
        for (int i = 0; i < D; i++) {
            double nn = (x[(long)r * D + i] - mean[r]) * rstd[r], g = dy[(long)r * D + i] * w[i];
            sg += fabs(g), sgn += fabs(g * nn), nmax = fmax(nmax, fabs(nn));
        }
        row = fmax(row, rstd[r] * (sg + nmax * sgn) / D);
    }
    /* dweight_c, dbias_c: sums over the B rows of dy n and dy (n itself
     * off by about 4 D u, through mean and rstd) */
    for (int c = 0; c < D; c++) {
        double sum = 0.0;
        for (int r = 0; r < B; r++)
            sum +=
                fabs(dy[(long)r * D + c]) * (1.0 + fabs((x[(long)r * D + c] - mean[r]) * rstd[r]));
        col = fmax(col, sum);
    }
    /* the runs add up: TIME_REPS times each bound, and TIME_REPS u of the total */
    double tdx = TIME_REPS * 2.0 * D * U * row + TIME_REPS * U * max_abs(dx, n),
           tdw = TIME_REPS * (2.0 * B + 4.0 * D) * U * col + TIME_REPS * U * max_abs(dw, D),
           tdb = TIME_REPS * 2.0 * B * U * col + TIME_REPS * U * max_abs(db, D);
    expect(bwd, "dinp", gdx, dx, n, tdx, us);
    expect(bwd, "dweight", gdw, dw, D, tdw, us);
    expect(bwd, "dbias", gdb, db, D, tdb, us);
    /* ... with bf16 parameters: dy as c_attn's backward writes it, the
     * input (the residual stream) and dinp (its gradient) held in bf16.
     * The same values (x and dy are bf16 here), so the same bounds for the
     * parameters' gradients; dinp, whose adds are rounded to bf16 one by
     * one, from one run added into dy's values (a gradient already there,
     * as the other branch's): dy + the CPU's once, rounded, within its
     * bound and one bf16 ulp */
    float *gdy16 = gpu(n), *gdx16 = gpu(n);
    FOR_EACH(n, pack_one, (uint16_t *)gdy16, gdy, DTYPE_BF16, 1.0f);
    dev_zero(gdw, (size_t)D * 4), dev_zero(gdb, (size_t)D * 4);
    backend.gemm_dtype = DTYPE_BF16;
    TIME_US(us, layernorm_backward(&ln16, gdx16, gdy16, gx16, gmean, grstd, B, DTYPE_BF16));
    expect("layernorm backward, held in bf16", "dweight", gdw, dw, D, tdw, us);
    expect("layernorm backward, held in bf16", "dbias", gdb, db, D, tdb, us);
    FOR_EACH(n, pack_one, (uint16_t *)gdx16, gdy, DTYPE_BF16, 1.0f);
    layernorm_backward(&ln16, gdx16, gdy16, gx16, gmean, grstd, B, DTYPE_BF16);
    backend.gemm_dtype = DTYPE_FP32;
    for (long i = 0; i < n; i++) dx1[i] += dy[i];
    double m1 = max_abs(dx1, n);
    for (long i = 0; i < n; i++) dx1[i] = round_to(dx1[i], DTYPE_BF16);
    expect("layernorm backward, held in bf16", "dinp", unpacked(gdx16, n, DTYPE_BF16), dx1, n,
           tdx / TIME_REPS + ulp16(m1, DTYPE_BF16), us);
    check_layernorm_grads16(dw, db, tdw / TIME_REPS, tdb / TIME_REPS, gdx16, gdy16, gx16, gw16,
                            gmean, grstd, B, D);
    float *frees[] = {x, w, b, dy, out, mean, rstd, dx, dx1, dw, db};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    gpu_free_all();
}

/* a (R, C) -> (C, R), so that a sum over a column reads memory in order */
static float *transposed(const float *a, int R, int C) {
    float *t = (float *)host_malloc((size_t)R * C * 4, "ref");
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) t[(long)c * R + r] = a[(long)r * C + c];
    return t;
}

/* out (R, O) = init + a (R, K) . bt (K, O) in fp32, each sum in increasing
 * k as the CPU sums it (init NULL: from 0); returns the largest sum of
 * |terms| of an output, which the tolerance of a reordered sum scales
 * with. A row of outputs at a time, k outer: every output still adds its
 * terms in increasing k, and the inner loop over o vectorizes (the
 * reference GEMMs were a third of this program's time). */
static double matmul_reference(float *out, const float *a, const float *bt, const float *init,
                               int R, int K, int O) {
    double worst = 0.0, *terms = (double *)host_malloc((size_t)O * 8, "ref");
    for (int r = 0; r < R; r++) {
        float *acc = out + (long)r * O;
        for (int o = 0; o < O; o++) acc[o] = init ? init[o] : 0.0f, terms[o] = fabs(acc[o]);
        for (int k = 0; k < K; k++) {
            const float ark = a[(long)r * K + k], *row = bt + (long)k * O;
            for (int o = 0; o < O; o++) {
                float p = ark * row[o];
                acc[o] += p;
                terms[o] += fabs(p);
            }
        }
        for (int o = 0; o < O; o++) worst = fmax(worst, terms[o]);
    }
    free(terms);
    return worst;
}

/* out (B, O) = b + x (B, I) . w (O, I)^T: a Linear layer's forward */
static double linear_reference(float *out, const float *x, const float *w, const float *b, int B,
                               int I, int O) {
    float *wt = transposed(w, O, I);
    double worst = matmul_reference(out, x, wt, b, B, I, O);
    free(wt);
    return worst;
}

/* c_attn's forward with bf16 parameters under full_shard: its weight and
 * bias read from the unit's full state, gathered in bf16 (linear_forward's
 * wh), and its output, which only attention's matmuls read, held in bf16
 * (oh): the bias, already 16-bit values, added to the fp32 sum by cuBLASLt's
 * epilogue, which rounds once as it writes. Against the CPU's sum of the same values,
 * rounded: the forward's bound, and the one bf16 ulp (ulp16) a
 * value on a rounding boundary may round the other way by. */
static void check_linear_held_output(const float *xr, const float *wr, const float *b,
                                     const float *gx16, const float *gw16, int B, int I, int O) {
    long n = (long)B * O;
    float *br = (float *)host_malloc((size_t)O * 4, "ref"),
          *ref = (float *)host_malloc((size_t)n * 4, "ref");
    for (int o = 0; o < O; o++) br[o] = round_to(b[o], DTYPE_BF16);
    double terms = linear_reference(ref, xr, wr, br, B, I, O), top = max_abs(ref, n);
    for (long i = 0; i < n; i++) ref[i] = round_to(ref[i], DTYPE_BF16);
    float *gbr = device_copy(br, O), *gb16 = gpu(O), *g16 = gpu(n);
    FOR_EACH(O, pack_one, (uint16_t *)gb16, gbr, DTYPE_BF16, 1.0f);
    double us;
    backend.gemm_dtype = DTYPE_BF16;
    long lt = backend.lt_products;
    Linear l16 = linear_view(gw16, gb16, DTYPE_BF16, NULL, NULL, DTYPE_BF16, I, O);
    TIME_US(us, linear_forward(&l16, buf(g16, DTYPE_BF16), gx16, B));
    backend.gemm_dtype = DTYPE_FP32;
    /* (two ulps: cuBLAS's default math mode may add split-K partial sums
     * in the output's type, bf16, before the last rounding) */
    expect("linear forward, output held in bf16 (c_attn's)", "out", unpacked(g16, n, DTYPE_BF16),
           ref, n, 4.0 * (I + 1) * U * terms + 2.0 * ulp16(top, DTYPE_BF16), us);
    expect_epilogue("linear forward, output held in bf16 (c_attn's)", lt);
    free(br), free(ref);
}

/* ... its weight's and bias's gradients held in bf16 (fsdp.c's grad_dtype,
 * under a sharded strategy with --param-dtype bf16) and holding one
 * already (an earlier micro-batch's; here the sum itself, rounded): one
 * run, cuBLAS adding into it in fp32 (beta 1) and rounding once as it
 * writes, the column sums too. The reference: that gradient plus the
 * CPU's sum, rounded; the bound: the sum's own and one bf16 ulp. */
static void check_linear_grads16(const float *dw, const float *db, double tw, double tb,
                                 const float *gdy16, const float *gx16, const float *gw16, int B,
                                 int I, int O) {
    long nw = (long)O * I;
    float *ref = (float *)host_malloc((size_t)(nw + O) * 4, "ref"), *ref_b = ref + nw;
    for (long i = 0; i < nw; i++) ref[i] = round_to(dw[i], DTYPE_BF16);
    for (int o = 0; o < O; o++) ref_b[o] = round_to(db[o], DTYPE_BF16);
    float *g = device_copy(ref, nw + O), *gdw16 = packed(g, nw, DTYPE_BF16),
          *gdb16 = packed(g + nw, O, DTYPE_BF16), *gdin = gpu((long)B * I);
    backend.gemm_dtype = DTYPE_BF16;
    double us;
    Linear l16 = linear_view(gw16, NULL, DTYPE_BF16, gdw16, gdb16, DTYPE_BF16, I, O);
    Buf din = buf(gdin, DTYPE_FP32), dout = buf(gdy16, DTYPE_BF16);
    TIME_RUNS(us, 1, linear_backward(&l16, din, dout, gx16, B));
    backend.gemm_dtype = DTYPE_FP32;
    for (long i = 0; i < nw; i++) ref[i] = round_to(ref[i] + dw[i], DTYPE_BF16);
    for (int o = 0; o < O; o++) ref_b[o] = round_to(ref_b[o] + db[o], DTYPE_BF16);
    const char *name = "linear backward, its gradients held in bf16 (added into)";
    expect(name, "dweight", unpacked(gdw16, nw, DTYPE_BF16), ref, nw,
           4.0 * (B + 1) * U * tw + ulp16(max_abs(ref, nw), DTYPE_BF16), us);
    expect(name, "dbias", unpacked(gdb16, O, DTYPE_BF16), ref_b, O,
           2.0 * B * U * tb + ulp16(max_abs(ref_b, O), DTYPE_BF16), us);
    free(ref);
}

/* A Linear layer's backward on the tensor cores, as c_attn's runs with
 * bf16 parameters: its output gradient dy and its input x held in bf16
 * (attention and the LayerNorm wrote them so), the weight read from the
 * unit's full state in bf16. The CPU sums the same bf16 values in fp32 in
 * another order: dinp over O terms, dweight and dbias over B; 4 (terms +
 * 1) u of each sum of |terms|, as the forward's bound. The GPU runs it TIME_REPS
 * times, adding into dweight and dbias, writing dinp. */
static void check_linear_backward16(const float *xr, const float *wr, const float *dy,
                                    const float *gx16, const float *gw16, int B, int I, int O) {
    long nd = (long)B * O;
    float *dyr = (float *)host_malloc((size_t)nd * 4, "ref");
    for (long i = 0; i < nd; i++) dyr[i] = round_to(dy[i], DTYPE_BF16);
    float *din = (float *)host_malloc((size_t)B * I * 4, "ref"),
          *dw = (float *)host_malloc((size_t)O * I * 4, "ref"),
          *db = (float *)host_calloc((size_t)O, 4, "ref");
    /* dinp (B, I) = dy (B, O) . w (O, I): a sum over o; dweight (O, I) =
     * dy^T . x (B, I): a sum over r; each in increasing order */
    float *dyt = transposed(dyr, B, O);
    double tin = matmul_reference(din, dyr, wr, NULL, B, O, I);
    double tw = matmul_reference(dw, dyt, xr, NULL, O, B, I), tb = 0.0;
    free(dyt);
    for (int o = 0; o < O; o++) {
        double col = 0.0;
        for (int r = 0; r < B; r++) {
            db[o] += dyr[(long)r * O + o];
            col += fabs(dyr[(long)r * O + o]);
        }
        tb = fmax(tb, col);
    }
    float *gdy = device_copy(dy, nd), *gdy16 = gpu(nd), *gdin = gpu((long)B * I),
          *gdw = gpu((long)O * I), *gdb = gpu(O);
    FOR_EACH(nd, pack_one, (uint16_t *)gdy16, gdy, DTYPE_BF16, 1.0f); /* rounds it: dyr's values */
    backend.gemm_dtype = DTYPE_BF16;
    double us;
    Linear l = linear_view(gw16, NULL, DTYPE_BF16, gdw, gdb, DTYPE_FP32, I, O);
    TIME_US(us, linear_backward(&l, buf(gdin, DTYPE_FP32), buf(gdy16, DTYPE_BF16), gx16, B));
    backend.gemm_dtype = DTYPE_FP32;
    check_linear_grads16(dw, db, tw, tb, gdy16, gx16, gw16, B, I, O);
    for (long i = 0; i < (long)O * I; i++) dw[i] *= TIME_REPS; /* dinp is written, not added */
    for (int o = 0; o < O; o++) db[o] *= TIME_REPS;
    const char *name = "linear backward, bf16 tensor cores, dy and x held in bf16";
    expect(name, "dinp", gdin, din, (long)B * I, 4.0 * (O + 1) * U * tin, us);
    expect(name, "dweight", gdw, dw, (long)O * I,
           TIME_REPS * 4.0 * (B + 1) * U * tw + TIME_REPS * U * max_abs(dw, (long)O * I), us);
    expect(name, "dbias", gdb, db, O, TIME_REPS * 2.0 * B * U * tb + TIME_REPS * U * max_abs(db, O), us);
    free(dyr), free(din), free(dw), free(db);
}

/* The B x O values of rows ld apart, gathered into a new device buffer of
 * rows O apart (for expect); 16-bit values held in d are unpacked */
static float *compacted(const void *dev, int B, int ld, int O, Dtype d) {
    float *all = host_copy(d == DTYPE_FP32 ? (const float *)dev : unpacked(dev, (long)B * ld, d),
                           (long)B * ld);
    for (long r = 0; r < B; r++) memmove(all + r * O, all + r * ld, (size_t)O * 4);
    float *out = device_copy(all, (long)B * O);
    free(all);
    return out;
}

/* GPT-2's lm_head: its products without a bias (matmul_forward and
 * matmul_backward) on the tensor cores, the logits' rows padded to
 * logits_stride (1000 columns, rows 1024 apart). The output gradient's
 * padding holds 1e30, so a product that read it would be off by about
 * that; the forward is compared column by column within the rows. Bounds
 * as the Linear's below: 4 (terms + 1) u of each sum of |terms|, and two
 * bf16 ulps where the output is held in bf16. */
static void check_matmul_padded(void) {
    const int B = 64, I = 256, O = 1000, ld = logits_stride(O);
    float *x = host_random((long)B * I, 31, 1.0f), *w = host_random((long)O * I, 32, 0.05f),
          *dy = host_random((long)B * O, 33, 1.0f);
    for (long i = 0; i < (long)B * I; i++) x[i] = round_to(x[i], DTYPE_BF16);
    for (long i = 0; i < (long)O * I; i++) w[i] = round_to(w[i], DTYPE_BF16);
    for (long i = 0; i < (long)B * O; i++) dy[i] = round_to(dy[i], DTYPE_BF16);
    float *out = (float *)host_malloc((size_t)B * O * 4, "ref"), *wt = transposed(w, O, I),
          *din = (float *)host_malloc((size_t)B * I * 4, "ref"),
          *dw = (float *)host_malloc((size_t)O * I * 4, "ref"), *dyt = transposed(dy, B, O);
    double tf = matmul_reference(out, x, wt, NULL, B, I, O);
    double tin = matmul_reference(din, dy, w, NULL, B, O, I);
    double tw = matmul_reference(dw, dyt, x, NULL, O, B, I);
    for (long i = 0; i < (long)B * O; i++) out[i] = round_to(out[i], DTYPE_BF16);
    float *dyp = (float *)host_malloc((size_t)B * ld * 4, "a padded gradient");
    for (long i = 0; i < (long)B * ld; i++) dyp[i] = i % ld < O ? dy[i / ld * O + i % ld] : 1e30f;
    float *gx16 = packed(device_copy(x, (long)B * I), (long)B * I, DTYPE_BF16),
          *gw16 = packed(device_copy(w, (long)O * I), (long)O * I, DTYPE_BF16),
          *gdy16 = packed(device_copy(dyp, (long)B * ld), (long)B * ld, DTYPE_BF16),
          *gout16 = gpu((long)B * ld), *gdin = gpu((long)B * I), *gdw = gpu((long)O * I);
    dev_zero(gdw, (size_t)O * I * 4); /* backward adds into the weight's gradient */
    double us;
    const char *name = "lm_head's products, rows padded (1000 of 1024)";
    backend.gemm_dtype = DTYPE_BF16;
    Linear head = linear_view(gw16, NULL, DTYPE_BF16, gdw, NULL, DTYPE_FP32, I, O);
    TIME_US(us, matmul_forward(&head, buf(gout16, DTYPE_BF16), ld, gx16, B));
    backend.gemm_dtype = DTYPE_FP32;
    expect(name, "out", compacted(gout16, B, ld, O, DTYPE_BF16), out, (long)B * O,
           4.0 * (I + 1) * U * tf + 2.0 * ulp16(max_abs(out, (long)B * O), DTYPE_BF16), us);
    backend.gemm_dtype = DTYPE_BF16;
    TIME_RUNS(us, 1, matmul_backward(&head, buf(gdin, DTYPE_FP32), buf(gdy16, DTYPE_BF16), ld,
                                     gx16, B));
    backend.gemm_dtype = DTYPE_FP32;
    expect(name, "dinp", gdin, din, (long)B * I, 4.0 * (O + 1) * U * tin, us);
    expect(name, "dweight", gdw, dw, (long)O * I, 4.0 * (B + 1) * U * tw, us);
    float *frees[] = {x, w, dy, out, wt, din, dw, dyt, dyp};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    gpu_free_all();
}

/* Each value against a bound of its own: the largest |gpu - cpu| / tol[i]
 * (1 or less passes) */
static void expect_each(const char *kernel, const char *what, const float *dev, const float *ref,
                        const double *tol, long n, double us) {
    float *got = host_copy(dev, n);
    double worst = 0.0;
    long at = 0;
    for (long i = 0; i < n; i++) {
        double r = fabs((double)got[i] - (double)ref[i]) / tol[i];
        if (isnan(r)) r = INFINITY;
        if (r > worst) worst = r, at = i;
        if (isinf(worst)) break;
    }
    int ok = worst <= 1.0;
    printf("%s %-46s %-8s max |gpu - cpu| / its bound %9.3g  tol %9.3g  %9.1f us\n",
           ok ? "ok  " : "FAIL", kernel, what, worst, 1.0, us);
    if (!ok)
        printf("      at %ld: gpu %.9g, cpu %.9g, bound %.3g\n", at, (double)got[at],
               (double)ref[at], tol[at]);
    ok ? passed++ : failed++;
    free(got);
}

/* That a fused product ran: where cuBLASLt has no algorithm for the
 * epilogue, fsdp-gpu runs the product and the GELU kernel apart (right,
 * slower), and this says so; the checks of its values are then skipped */
static int expect_fused(const char *kernel, int fused, const char *epilogue) {
    printf("%s %-46s cuBLASLt ran it with its %s epilogue%s\n", fused ? "ok  " : "FAIL", kernel,
           epilogue, fused ? "" : ": its heuristic found no algorithm");
    fused ? passed++ : failed++;
    return fused;
}
/* GPT-2's MLP with bf16 parameters, GELU inside cuBLASLt's products
 * (kernels/transformer.h; tried here whatever this GPU's default, which
 * FSDP_GELU_FUSION and the compute capability set): c_fc and gelu_new in
 * one (pre, GELU's input, and out, both bf16), then mlp.c_proj's backward
 * with its input gradient multiplied by gelu_new' at pre as it is written
 * (dpre), its weight's and bias's gradients added (here in fp32). B 256,
 * 768 -> 3072 -> 768; x, the weights, the bias and dy bf16 values. The
 * CPU: the fp32 sums of the same values in increasing order; pre the sum
 * rounded, out gelu_new of the unrounded sum, rounded (cuBLASLt applies
 * GELU before rounding); dpre the sum dy . W2 times gelu_new' at pre,
 * rounded. Each value's bound: its sum's (4 (K + 1) u of |terms|, times
 * 1.13, gelu_new's steepest slope), two bf16 ulps of the value, and
 * cuBLASLt's tanh, which is its own: a hardware tanh's error e, 2^-11,
 * moves gelu_new by |x| e / 2 and gelu_new' by (1/2 + |x| du/dx) e.
 * Within those a GELU of the rounded sum passes, as does erf's GELU (at
 * most 4.7e-4 from gelu_new); a missing bias, a wrong aux, a GELU where
 * its derivative belongs fail by 30x and more. */
static const double TANH_ERR = 0x1p-11;
static void check_mlp_dgelu_fused(const float *dy, const float *w2, const float *gdy16,
                                  const float *gw2, const float *pre, const float *act, int B,
                                  int D, int H) {
    const Dtype d = DTYPE_BF16;
    long n = (long)B * H;
    float *dh = (float *)host_malloc((size_t)n * 4, "ref"),
          *dpre = (float *)host_malloc((size_t)n * 4, "ref"),
          *dw = (float *)host_malloc((size_t)D * H * 4, "ref"),
          *db = (float *)host_calloc(D, 4, "ref"), *dyt = transposed(dy, B, D);
    double *tol = (double *)host_malloc((size_t)n * 8, "ref");
    double tin = matmul_reference(dh, dy, w2, NULL, B, D, H), tb = 0.0;
    double tw = matmul_reference(dw, dyt, act, NULL, D, B, H);
    for (int o = 0; o < D; o++) {
        double col = 0.0;
        for (int r = 0; r < B; r++) db[o] += dy[(long)r * D + o], col += fabs(dy[(long)r * D + o]);
        tb = fmax(tb, col);
    }
    for (long i = 0; i < n; i++) {
        double x = fabs(pre[i]), du = GELU_TANH_K * (1.0 + 3.0 * 0.044715 * x * x);
        dpre[i] = round_to(dh[i] * gelu_tanh_grad(pre[i]), d);
        tol[i] = 1.13 * 4.0 * (D + 1) * U * tin + 2.0 * ulp16(fabs(dpre[i]), d) +
                 (0.5 + x * du) * TANH_ERR * fabs(dh[i]) + 1e-30;
    }
    /* the CPU's pre and out, in bf16, as forward would have left them */
    float *gpre = packed(device_copy(pre, n), n, d), *gact = packed(device_copy(act, n), n, d);
    float *gdpre = gpu(n), *gdw = gpu((long)D * H), *gdb = gpu(D);
    const char *name = "mlp.c_proj backward and gelu_new', one product";
    double us;
    int fused = 0;
    backend.gemm_dtype = d;
    Linear c_proj = linear_view(gw2, NULL, d, gdw, gdb, DTYPE_FP32, H, D);
    TIME_RUNS(us, 1, /* once: it adds into the weight's and bias's gradients */
              fused = linear_backward_dgelu_tanh(&c_proj, gdpre, gdy16, gact, gpre, B));
    backend.gemm_dtype = DTYPE_FP32;
    if (expect_fused(name, fused, "DGELU")) {
        expect_each(name, "dpre", unpacked(gdpre, n, d), dpre, tol, n, us);
        expect(name, "dweight", gdw, dw, (long)D * H, 4.0 * (B + 1) * U * tw, us);
        expect(name, "dbias", gdb, db, D, 2.0 * B * U * tb + U * max_abs(db, D), us);
    }
    float *frees[] = {dh, dpre, dw, db, dyt};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    free(tol);
}
static void check_mlp_gelu_fused(void) {
    const int B = 256, D = 768, H = 4 * D;
    const Dtype d = DTYPE_BF16;
    float *x = host_random((long)B * D, 41, 1.0f), *w1 = host_random((long)H * D, 42, 0.05f),
          *b1 = host_random(H, 43, 0.1f), *w2 = host_random((long)D * H, 44, 0.02f),
          *dy = host_random((long)B * D, 45, 1.0f);
    float *host[] = {x, w1, b1, w2, dy}, *g16[5];
    long sizes[] = {(long)B * D, (long)H * D, H, (long)D * H, (long)B * D}, n = (long)B * H;
    for (int i = 0; i < 5; i++) { /* bf16 values, and the GPU's bf16 copies */
        for (long j = 0; j < sizes[i]; j++) host[i][j] = round_to(host[i][j], d);
        g16[i] = packed(device_copy(host[i], sizes[i]), sizes[i], d);
    }
    float *sum = (float *)host_malloc((size_t)n * 4, "ref"),
          *pre = (float *)host_malloc((size_t)n * 4, "ref"),
          *out = (float *)host_malloc((size_t)n * 4, "ref");
    double *tol = (double *)host_malloc((size_t)n * 8, "ref");
    double bound = 4.0 * (D + 1) * U * linear_reference(sum, x, w1, b1, B, D, H);
    for (long i = 0; i < n; i++)
        pre[i] = round_to(sum[i], d), out[i] = round_to(gelu_tanh(sum[i]), d);
    float *gpre = gpu(n), *gout = gpu(n);
    const char *name = "c_fc and gelu_new, one cuBLASLt product (bf16)";
    double us;
    int fused = 0, was = backend.gelu_fusion;
    backend.gemm_dtype = d, backend.gelu_fusion = 1;
    Linear c_fc = linear_view(g16[1], g16[2], d, NULL, NULL, d, D, H);
    TIME_US(us, fused = linear_gelu_tanh_forward(&c_fc, buf(gout, d), gpre, g16[0], B));
    backend.gemm_dtype = DTYPE_FP32;
    if (expect_fused(name, fused, "GELU_AUX_BIAS")) {
        for (long i = 0; i < n; i++) tol[i] = bound + 2.0 * ulp16(fabs(pre[i]), d) + 1e-30;
        expect_each(name, "pre", unpacked(gpre, n, d), pre, tol, n, us);
        for (long i = 0; i < n; i++)
            tol[i] = 1.13 * bound + 2.0 * ulp16(fabs(out[i]), d) +
                     0.5 * fabs(sum[i]) * TANH_ERR + 1e-30;
        expect_each(name, "out", unpacked(gout, n, d), out, tol, n, us);
    }
    check_mlp_dgelu_fused(dy, w2, g16[4], g16[3], pre, out, B, D, H);
    backend.gelu_fusion = was;
    float *frees[] = {x, w1, b1, w2, dy, sum, pre, out};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    free(tol);
    gpu_free_all();
}

/* A Linear layer on cuBLAS against the plain sums, and its bias gradient
 * (column sums) against bias_backward_one: B 512, 768 -> 2304 (c_attn) */
static void check_linear(void) {
    const int B = 512, I = 768, O = 2304;
    float *x = host_random((long)B * I, 5, 1.0f), *w = host_random((long)O * I, 6, 0.03f),
          *b = host_random(O, 7, 0.1f), *dy = host_random((long)B * O, 8, 1.0f);
    float *out = (float *)host_calloc((size_t)B * O, sizeof(float), "ref"),
          *db = (float *)host_calloc(O, sizeof(float), "ref");
    double worst_terms = linear_reference(out, x, w, b, B, I, O);
    for (long o = 0; o < O; o++) bias_backward_one(o, db, dy, B, O, DTYPE_FP32, DTYPE_FP32);
    float *gx = device_copy(x, (long)B * I), *gw = device_copy(w, (long)O * I),
          *gb = device_copy(b, O), *gdy = device_copy(dy, (long)B * O), *gout = gpu((long)B * O),
          *gdb = gpu(O);
    double us;
    Linear l = linear_view(gw, gb, DTYPE_FP32, NULL, NULL, DTYPE_FP32, I, O);
    TIME_US(us, linear_forward(&l, buf(gout, DTYPE_FP32), gx, B));
    expect("linear forward, cuBLAS (512x768 @ 768x2304)", "out", gout, out, (long)B * O,
           2.0 * (I + 1) * U * worst_terms, us);
    /* The same product from bf16 inputs on the tensor cores (what
     * --param-dtype bf16 runs): the CPU multiplies the same bf16 values in
     * fp32. Their products are exact in fp32 (8 + 8 bits of mantissa), so
     * the difference is the sums' order again; tensor cores may truncate
     * where fp32 rounds, so twice the bound: 4 (I + 1) u. Here the weight is
     * in fp32 slots, as no_shard holds it, and packed on the way; below,
     * read from a 16-bit full state, as full_shard's. */
    float *xr = (float *)host_malloc((size_t)B * I * 4, "ref"),
          *wr = (float *)host_malloc((size_t)O * I * 4, "ref");
    for (long i = 0; i < (long)B * I; i++) xr[i] = round_to(x[i], DTYPE_BF16);
    for (long i = 0; i < (long)O * I; i++) wr[i] = round_to(w[i], DTYPE_BF16);
    float *out16 = (float *)host_calloc((size_t)B * O, sizeof(float), "ref");
    double terms16 = linear_reference(out16, xr, wr, b, B, I, O);
    backend.gemm_dtype = DTYPE_BF16;
    float *gx16 = gpu((long)B * I); /* x held in bf16, as a LayerNorm writes it */
    FOR_EACH((long)B * I, pack_one, (uint16_t *)gx16, gx, DTYPE_BF16, 1.0f);
    long lt = backend.lt_products;
    TIME_US(us, linear_forward(&l, buf(gout, DTYPE_FP32), gx16, B));
    backend.gemm_dtype = DTYPE_FP32;
    expect("linear forward, bf16 tensor cores (cuBLASLt)", "out", gout, out16, (long)B * O,
           4.0 * (I + 1) * U * terms16, us);
    expect_epilogue("linear forward, bf16 tensor cores (cuBLASLt)", lt);
    float *gw16 = gpu((long)O * I);
    FOR_EACH((long)O * I, pack_one, (uint16_t *)gw16, gw, DTYPE_BF16, 1.0f); /* wr's values */
    check_linear_held_output(xr, wr, b, gx16, gw16, B, I, O);
    check_linear_backward16(xr, wr, dy, gx16, gw16, B, I, O);
    free(xr), free(wr), free(out16);
    TIME_US(us, bias_backward(buf(gdb, DTYPE_FP32), buf(gdy, DTYPE_FP32), B, O));
    double col = 0.0;
    for (int o = 0; o < O; o++) {
        double s = 0.0;
        for (int r = 0; r < B; r++) s += fabs(dy[(long)r * O + o]);
        col = fmax(col, s);
    }
    for (int o = 0; o < O; o++) db[o] *= TIME_REPS;
    /* the runs add up: TIME_REPS times the bound, and TIME_REPS u of the total */
    expect("bias gradient, column sums (512 x 2304)", "dbias", gdb, db, O,
           TIME_REPS * 2.0 * B * U * col + TIME_REPS * U * max_abs(db, O), us);
    float *frees[] = {x, w, b, dy, out, db};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    gpu_free_all();
}

/* gelu_new with bf16 parameters: c_fc's output in, mlp.c_proj's input out;
 * backward, mlp.c_proj's input gradient in and c_fc's output gradient out;
 * all held in bf16. Against the CPU's
 * function on the same rounded inputs, rounded: the fp32 bound, and the
 * one bf16 ulp (ulp16) a value on a rounding boundary may round
 * the other way by. */
static void check_gelu16(const float *x, const float *dy, long n) {
    const Dtype d = DTYPE_BF16;
    float *xr = (float *)host_malloc((size_t)n * 4, "ref"),
          *dyr = (float *)host_malloc((size_t)n * 4, "ref"),
          *out = (float *)host_malloc((size_t)n * 4, "ref"),
          *dx = (float *)host_malloc((size_t)n * 4, "ref");
    for (long i = 0; i < n; i++) xr[i] = round_to(x[i], d), dyr[i] = round_to(dy[i], d);
    for (long i = 0; i < n; i++) gelu_tanh_forward_one(i, out, xr, d, DTYPE_FP32);
    for (long i = 0; i < n; i++) gelu_tanh_backward_one(i, dx, dyr, xr, d, DTYPE_FP32);
    float *gx = device_copy(xr, n), *gx16 = gpu(n), *gdy = device_copy(dyr, n), *gdy16 = gpu(n),
          *gout = gpu(n), *gdx = gpu(n);
    FOR_EACH(n, pack_one, (uint16_t *)gx16, gx, d, 1.0f);
    FOR_EACH(n, pack_one, (uint16_t *)gdy16, gdy, d, 1.0f);
    double us, mo = max_abs(out, n), md = max_abs(dx, n);
    backend.gemm_dtype = d;
    TIME_US(us, gelu_tanh_forward(gout, gx16, n, d));
    expect("gelu_new forward, held in bf16", "out", unpacked(gout, n, d), out, n,
           32.0 * U * (mo + 1.0) + ulp16(mo, d), us);
    TIME_US(us, gelu_tanh_backward(gdx, gdy16, gx16, n, d));
    backend.gemm_dtype = DTYPE_FP32;
    expect("gelu_new backward, held in bf16", "dinp", unpacked(gdx, n, d), dx, n,
           32.0 * U * (md + 1.0) + ulp16(md, d), us);
    free(xr), free(dyr), free(out), free(dx);
}

/* Element-wise: GPT-2's gelu_new and AdamW, FOR_EACH over the FSDP_HD function */
static void check_elementwise(void) {
    const long n = (long)ROWS * 3072;
    char fwd[64], bwd[64];
    snprintf(fwd, sizeof(fwd), "gelu_new forward (%d x 3072)", ROWS);
    snprintf(bwd, sizeof(bwd), "gelu_new backward (%d x 3072)", ROWS);
    float *x = host_random(n, 9, 2.0f), *dy = host_random(n, 10, 1.0f);
    float *out = (float *)host_calloc((size_t)n, sizeof(float), "ref"),
          *dx = (float *)host_calloc((size_t)n, sizeof(float), "ref");
    for (long i = 0; i < n; i++) gelu_tanh_forward_one(i, out, x, DTYPE_FP32, DTYPE_FP32);
    for (long i = 0; i < n; i++) gelu_tanh_backward_one(i, dx, dy, x, DTYPE_FP32, DTYPE_FP32);
    float *gx = device_copy(x, n), *gdy = device_copy(dy, n), *gout = gpu(n), *gdx = gpu(n);
    double us, ew = 32.0 * U * (max_abs(out, n) + 1.0);
    TIME_US(us, gelu_tanh_forward(gout, gx, n, DTYPE_FP32));
    expect(fwd, "out", gout, out, n, ew, us);
    TIME_US(us, gelu_tanh_backward(gdx, gdy, gx, n, DTYPE_FP32)); /* written, not added */
    /* (near x = -5, e^2u + 1 rounds differently on the GPU, whose PTX
     * fuses it: gelu' moves by up to 4e-6, times |dy|) */
    expect(bwd, "dinp", gdx, dx, n, 64.0 * U * (max_abs(dx, n) + 1.0),
           us);
    check_gelu16(x, dy, n);
    /* AdamW, one step from zero moments: each element alone, the same
     * function; only expf-free arithmetic and contraction into FMAs differ */
    const long m = 1L << 22;
    float *p = host_random(m, 11, 1.0f), *g = host_random(m, 12, 1e-3f);
    float *mo = (float *)host_calloc((size_t)m, 4, "ref"),
          *v = (float *)host_calloc((size_t)m, 4, "ref");
    float *gp = device_copy(p, m), *gg = device_copy(g, m), *gm = device_copy(mo, m),
          *gv = device_copy(v, m);
    AdamWStep s = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.0316f, 0};
    for (long i = 0; i < m; i++) adamw_one(i, p, mo, v, g, s);
    FOR_EACH(m, adamw_one, gp, gm, gv, gg, s);
    float *tp = device_copy(p, m), *tm = device_copy(mo, m), *tv = device_copy(v, m);
    TIME_US(us, FOR_EACH(m, adamw_one, tp, tm, tv, gg, s)); /* on copies: the check's stay */
    expect("AdamW (4M elements), FOR_EACH", "param", gp, p, m, 16.0 * U * (max_abs(p, m) + 1e-3),
           us);
    float *frees[] = {x, dy, out, dx, p, g, mo, v};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    gpu_free_all();
}

/* An embedding's gradient grouped by token (a thread per distinct token
 * and channel) against the plain loop that adds row n to row tokens[n] for
 * n = 0, 1, ...: each token's rows are added in that same order, so the
 * two agree to the bit (tolerance 0). TIME_US runs it TIME_REPS times into the
 * same gradient, so the loop runs that often too. */
static void check_embedding_at(const char *name, long BT, int V, int C) {
    long n = BT * C;
    float *dy = host_random(n, 17, 1.0f);
    int *tok = (int *)host_malloc((size_t)BT * sizeof(int), "tokens");
    for (long i = 0; i < BT; i++) tok[i] = (int)(rng_u64(7, 18, 0, (uint64_t)i) % V);
    float *dw = (float *)host_calloc((size_t)V * C, 4, "ref");
    for (int rep = 0; rep < TIME_REPS; rep++)
        for (long i = 0; i < BT; i++)
            for (int c = 0; c < C; c++) dw[(long)tok[i] * C + c] += dy[i * C + c];
    TokenRows g;
    g.rows = (int *)gpu(BT), g.end = (int *)gpu(BT), g.token = (int *)gpu(BT);
    int *stage = (int *)host_malloc((size_t)3 * BT * sizeof(int), "group a batch by token");
    token_rows_load(&g, tok, BT, V, stage);
    dev_synchronize(); /* the queued copies have read the stage */
    free(stage);
    float *gdy = device_copy(dy, n), *gdw = gpu((long)V * C);
    double us;
    TIME_US(us, embedding_backward(buf(gdw, DTYPE_FP32), gdy, &g, C));
    expect(name, "dweight", gdw, dw, (long)V * C, 0.0, us);
    free(dy), free(tok), free(dw);
    gpu_free_all();
}
static void check_embedding(void) {
    check_embedding_at("embedding backward, bytes (65536 rows, 256 x 16)", 65536, 256, 16);
    check_embedding_at("embedding backward, GPT-2 wte (8192 x 50257 x 768)", 8192, 50257, 768);
}

/* The loss's forward, a warp a row, against each row's lse and loss in
 * double precision. The GPU's s sums exp(z - m) <= 1 lane by lane (V/32
 * terms), then over the 32 lanes (5 levels) after a rescale, each expf
 * within 2 ulp: a relative error in s, so an absolute one in log s, of at
 * most (V/32 + 32) u; lse rounds once more at its own size (and so does
 * the reference, a float), the loss (lse less the target's logit) once
 * more at its. A row that lost one
 * logit would be off by O(1): each row's largest logit is its last. */
static void check_crossentropy_forward(const float *z, int ld, const int *tg, const int *gt,
                                       int B, int V) {
    long n = (long)B * ld;
    float *lse = (float *)host_malloc((size_t)B * 4, "ref"),
          *ls = (float *)host_malloc((size_t)B * 4, "ref");
    for (long b = 0; b < B; b++) {
        double m = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++) m = fmax(m, z[b * ld + v]);
        for (int v = 0; v < V; v++) sum += exp((double)z[b * ld + v] - m);
        lse[b] = (float)(m + log(sum)), ls[b] = (float)(m + log(sum) - z[b * ld + tg[b]]);
    }
    float *gz = device_copy(z, n), *gs = gpu(B), *gl = gpu(B);
    double us, tol = (V / 32 + 32) * U + 4.0 * U * max_abs(lse, B); /* lse, its reference: 2 u */
    char what[96];
    for (int held16 = 0; held16 < 2; held16++) { /* and held in bf16, as lm_head writes them */
        snprintf(what, sizeof(what), "cross-entropy forward, %d x %d%s", B, V,
                 held16 ? ", held in bf16" : "");
        backend.gemm_dtype = held16 ? DTYPE_BF16 : DTYPE_FP32;
        TIME_US(us, crossentropy_forward(gs, gl, held16 ? packed(gz, n, DTYPE_BF16) : gz, ld, gt,
                                         B, V));
        backend.gemm_dtype = DTYPE_FP32;
        expect(what, "lse", gs, lse, B, tol, us);
        expect(what, "losses", gl, ls, B, tol + 2.0 * U * max_abs(ls, B), us);
    }
    free(lse), free(ls);
}

/* The logits' gradient, a block a row, written over the logits, against
 * crossentropy_backward_row from the same logits and lse: each element
 * (exp(z - lse) - onehot) * dloss, the exps 2 ulp apart (CUDA's expf
 * against the C library's). In fp32 that is a relative error of a few u
 * where p - onehot cancels nothing: everywhere but at a target whose p is
 * near 1, and the targets here are never a row's largest logit (below).
 * In bf16, as a GPU with 16-bit parameters runs it (logits held in 16
 * bits, the gradient rounded and stored so), two values a few u apart can
 * round to neighbours: 2^-7 apart, relative, at most. One run: in place,
 * a second would take the gradient for logits. */
static void check_crossentropy_backward(const char *name, const float *z, int ld, const int *gt,
                                        const int *tg, const float *lse, int B, int V, Dtype d) {
    long n = (long)B * ld;
    float *dl = (float *)host_malloc((size_t)n * 4, "ref");
    memcpy(dl, z, (size_t)n * 4);
    for (long b = 0; b < B; b++)
        crossentropy_backward_row(b, dl, ld, lse, tg, 1.0f / B, V, d, DTYPE_FP32);
    float *gz = device_copy(z, n), *gs = device_copy(lse, B);
    float *gdl = d == DTYPE_BF16 ? packed(gz, n, d) : gz; /* held as lm_head writes them */
    double us;
    backend.gemm_dtype = d;
    TIME_RUNS(us, 1, crossentropy_backward(gdl, ld, gs, gt, 1.0f / B, B, V, d));
    backend.gemm_dtype = DTYPE_FP32;
    char what[128];
    snprintf(what, sizeof(what), "%s, in %s", name, d == DTYPE_BF16 ? "bf16" : "fp32");
    if (d == DTYPE_BF16)
        expect_relative(what, "dlogits", unpacked(gdl, n, DTYPE_BF16), dl, n, 1.0 / 128.0, us);
    else
        expect_relative(what, "dlogits", gdl, dl, n, 8.0 * U, us);
    free(dl);
}

/* B rows of V logits, 3 N(0, 1) rounded to bf16 (values lm_head writes),
 * in rows padded to logits_stride as lm_head writes them. The padding
 * holds 1e30, which a kernel that read it would turn into a loss of about
 * 1e30 or a gradient of inf; the backward checks compare it too, so
 * writing into it fails as well. Each row's last logit is its largest
 * (20); every fourth row's first is -inf (fp16's overflow downwards: it
 * adds nothing to the sum, first in its lane too). No target is a row's
 * first or last logit. */
static void check_crossentropy_at(int B, int V) {
    const int ld = logits_stride(V);
    long n = (long)B * ld;
    float *z = host_random(n, 15, 3.0f);
    int *tg = (int *)host_malloc(B * sizeof(int), "targets");
    for (long i = 0; i < n; i++)
        z[i] = round_to(i % ld < V ? z[i] : 1e30f, DTYPE_BF16);
    for (int b = 0; b < B; b++) {
        z[(long)b * ld + V - 1] = 20.0f;
        if (b % 4 == 0 && V > 2) z[(long)b * ld] = -INFINITY;
        tg[b] = V > 2 ? 1 + (int)(rng_u64(7, 16, 0, (uint64_t)b) % (V - 2)) : 0;
    }
    float *lse = (float *)host_calloc(B, 4, "ref"), *ls = (float *)host_calloc(B, 4, "ref");
    for (long b = 0; b < B; b++) crossentropy_forward_row(b, lse, ls, z, ld, tg, V, DTYPE_FP32);
    int *gt = (int *)gpu(B);
    dev_from_host(gt, tg, B * sizeof(int));
    char name[96];
    snprintf(name, sizeof(name), "cross-entropy backward, %d x %d", B, V);
    check_crossentropy_forward(z, ld, tg, gt, B, V);
    check_crossentropy_backward(name, z, ld, gt, tg, lse, B, V, DTYPE_FP32);
    check_crossentropy_backward(name, z, ld, gt, tg, lse, B, V, DTYPE_BF16);
    free(z), free(tg), free(lse), free(ls);
    gpu_free_all();
}
/* GPT-2's vocabulary, and V that leave lanes with no logit (1, 5, 31), one
 * lane a second (33), and a last chunk of a lane's 8 loads in part (300) */
static void check_crossentropy(void) {
    check_crossentropy_at(512, 50257);
    const int small[] = {1, 5, 31, 33, 300};
    for (int k = 0; k < 5; k++) check_crossentropy_at(64, small[k]);
}

/* Causal attention: cuBLAS's batched GEMMs around the softmax kernel
 * against the CPU's rows (attention_forward_row and the backward rows):
 * B 2, T 256, D 768, 12 heads */
static void check_attention(void) {
    const int B = 2, T = 256, D = 768, H = 12;
    long nq = (long)B * T * 3 * D, ny = (long)B * T * D, na = (long)B * H * T * T;
    float *qkv = host_random(nq, 13, 1.0f), *dy = host_random(ny, 14, 1.0f);
    float *y = (float *)host_calloc((size_t)ny, 4, "ref"),
          *att = (float *)host_calloc((size_t)na, 4, "ref"),
          *dq = (float *)host_calloc((size_t)nq, 4, "ref"),
          *da = (float *)host_calloc((size_t)na, 4, "ref");
    for (long r = 0; r < (long)B * H * T; r++)
        attention_forward_row(r, y, att, qkv, T, D, H, DTYPE_FP32);
    for (long r = 0; r < (long)B * H * T; r++)
        attention_backward_query(r, dq, da, dy, qkv, att, T, D, H, DTYPE_FP32);
    for (long r = 0; r < (long)B * H * T; r++)
        attention_backward_key(r, dq, da, dy, qkv, att, T, D, H, DTYPE_FP32);
    float *gq = device_copy(qkv, nq), *gdy = device_copy(dy, ny), *gy = gpu(ny), *ga = gpu(na),
          *gdq = gpu(nq), *gda = gpu(na);
    double us;
    /* A score is a dot product of hd = 64 terms, scaled by 1/8: two orders
     * differ by dz <= 2 hd u |q||k| / 8 (Cauchy-Schwarz bounds the terms'
     * sum by the norms). Softmax turns dz into a relative error of at most
     * 2 dz in each p, and y = sum of T terms p_s v_s (sum p = 1) adds 2 T u:
     * |dy| <= max|v| (4 dz + 2 T u). */
    double qn = 0.0, kn = 0.0, vmax = 0.0;
    for (long bt = 0; bt < (long)B * T; bt++)
        for (int h = 0; h < H; h++) {
            double sq = 0.0, sk = 0.0;
            for (int j = 0; j < 64; j++) {
                float q = qkv[bt * 3 * D + h * 64 + j], k = qkv[bt * 3 * D + D + h * 64 + j];
                sq += (double)q * q, sk += (double)k * k;
                vmax = fmax(vmax, fabs(qkv[bt * 3 * D + 2 * D + h * 64 + j]));
            }
            qn = fmax(qn, sqrt(sq)), kn = fmax(kn, sqrt(sk));
        }
    double dz = 2.0 * 64 * U * qn * kn / 8.0;
    TIME_US(us, attention_forward(gy, ga, gq, B, T, D, H, DTYPE_FP32));
    expect("attention forward, batched GEMMs (2x256x768)", "y", gy, y, ny,
           vmax * (4.0 * dz + 2.0 * T * U), us);
    /* Backward: dq and dk are sums of T terms ds * k / 8 (or q), dv of T
     * terms p * dy (a column of p sums to at most T): 2 (T + hd) u times
     * the largest sum of |terms|. ds itself inherits p's error (2 dz,
     * relative) and that of dp = dy . v, a dot product of hd terms
     * (dpz, Cauchy-Schwarz again), which reaches dq through sum_s p_s |k_s| / 8. */
    double gn = 0.0;
    for (long bt = 0; bt < (long)B * T; bt++)
        for (int h = 0; h < H; h++) {
            double sg = 0.0;
            for (int j = 0; j < 64; j++)
                sg += (double)dy[bt * D + h * 64 + j] * dy[bt * D + h * 64 + j];
            gn = fmax(gn, sqrt(sg));
        }
    double dpz = 2.0 * 64 * U * gn * sqrt(64.0) * vmax;
    double dsmax = max_abs(da, na), big = max_abs(qkv, nq);
    double terms = fmax(T * dsmax * big / 8.0, T * max_abs(dy, ny));
    double once = 2.0 * (T + 64) * U * terms + 2.0 * dpz * big / 8.0 + 2.0 * dz * max_abs(dq, nq);
    TIME_US(us, attention_backward(gdq, gda, gdy, gq, ga, B, T, D, H, DTYPE_FP32)); /* writes */
    expect("attention backward, batched GEMMs", "dqkv", gdq, dq, nq, once + U * max_abs(dq, nq),
           us);
    float *frees[] = {qkv, dy, y, att, dq, da};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    gpu_free_all();
}

/* Attention in bf16 on the tensor cores (attention_forward_gemm in bf16: P and
 * dS stored in bf16, y written in bf16 as c_proj's input) against the
 * rows rounding P, dS and y where it stores them, on bf16 inputs: GPT-2
 * 124M's 12 heads of 64, T ATTENTION_T (1024 on a GPU), B 2. The two sum in fp32 in other
 * orders, so a P on a rounding boundary may round the other way: at most
 * one bf16 ulp, up to 2^-7 of it, and as the P of a row sum to 1, y moves
 * by at most 2^-7 max|v| (beside the fp32 sums' 2 T u), and y's own
 * rounding may flip by as much again.
 * dS inherits that from P and dP and rounds once more: dqkv is held to
 * 2^-5 of its largest value, as flash's is. A wrong stride is off by O(1). */
static void check_attention16(void) {
    const int B = 2, T = ATTENTION_T, D = 768, H = 12;
    const Dtype d = DTYPE_BF16;
    long nq = (long)B * T * 3 * D, ny = (long)B * T * D, na = (long)B * H * T * T;
    float *qkv = host_random(nq, 19, 1.0f), *dy = host_random(ny, 20, 1.0f);
    for (long i = 0; i < nq; i++) qkv[i] = round_to(qkv[i], d);
    for (long i = 0; i < ny; i++) dy[i] = round_to(dy[i], d);
    float *y = (float *)host_calloc((size_t)ny, 4, "ref"),
          *att = (float *)host_calloc((size_t)na, 4, "ref"),
          *dq = (float *)host_calloc((size_t)nq, 4, "ref"),
          *da = (float *)host_calloc((size_t)na, 4, "ref");
    for (long r = 0; r < (long)B * H * T; r++) attention_forward_row(r, y, att, qkv, T, D, H, d);
    for (long r = 0; r < (long)B * H * T; r++)
        attention_backward_query(r, dq, da, dy, qkv, att, T, D, H, d);
    for (long r = 0; r < (long)B * H * T; r++)
        attention_backward_key(r, dq, da, dy, qkv, att, T, D, H, d);
    float *gq = device_copy(qkv, nq), *gdy = device_copy(dy, ny), *gy = gpu(ny), *ga = gpu(na),
          *gdq = gpu(nq), *gda = gpu(na), *gq16 = gpu(nq), *gdy16 = gpu(ny);
    FOR_EACH(nq, pack_one, (uint16_t *)gq16, gq, d, 1.0f); /* c_attn's output, held in bf16 */
    FOR_EACH(ny, pack_one, (uint16_t *)gdy16, gdy, d, 1.0f); /* c_proj's input gradient, too */
    double us, vmax = max_abs(qkv, nq);
    backend.gemm_dtype = d; /* as with --param-dtype bf16: qkv and y held in bf16 */
    TIME_US(us, attention_forward(gy, ga, gq16, B, T, D, H, d));
    backend.gemm_dtype = DTYPE_FP32;
    char name[64];
    snprintf(name, sizeof(name), "attention forward, bf16 tensor cores (%dx%dx%d)", B, T, D);
    expect(name, "y", unpacked(gy, ny, d), y, ny,
           vmax * (4.0 / 256 + 2.0 * T * U), us);
    backend.gemm_dtype = d; /* dqkv written in bf16: c_attn's output gradient, held */
    TIME_US(us, attention_backward(gdq, gda, gdy16, gq16, ga, B, T, D, H, d));
    backend.gemm_dtype = DTYPE_FP32;
    /* ... bounded as flash's dqkv is, 2^-5 of the largest: a bound from
     * the maxima of its terms (T |dP| |v| / 8, T |dy|) is 20 times the
     * largest |dqkv| here, and would pass a kernel that wrote nothing */
    expect("attention backward, bf16 tensor cores", "dqkv", unpacked(gdq, nq, d), dq, nq,
           max_abs(dq, nq) / 32.0, us);
    float *frees[] = {qkv, dy, y, att, dq, da};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    gpu_free_all();
}

/* The fragment layouts kernels/flash.h is written to (the PTX ISA's, in
 * words above its four instructions), asked of the instructions themselves:
 * on a GPU its tensor cores answer, on the emulator its model of them, so a
 * pass on both says the emulator models what the GPU does. One warp loads
 * a 16 x 16 tile of the distinct values 0..255 (exact in bf16) with
 * ldmatrix_x4 and ldmatrix_x4_trans, each lane giving row l % 16's
 * address, 8 columns on for lanes 16 and up; then multiplies the loaded
 * a by a 16 x 8 b laid out by hand, with mma_16816. */
__global__ static void fragments_kernel(uint32_t *got, float *prod, const uint16_t *tile,
                                        const uint16_t *bm) {
    __shared__ __align__(16) uint16_t s[16 * 16];
    int l = threadIdx.x, g = l / 4, q = l % 4;
    for (int i = l; i < 256; i += 32) s[i] = tile[i];
    __syncwarp();
    uint32_t a[4], t[4];
    ldmatrix_x4(a, s + l % 16 * 16 + l / 16 * 8);
    ldmatrix_x4_trans(t, s + l % 16 * 16 + l / 16 * 8);
    for (int j = 0; j < 4; j++) got[l * 8 + j] = a[j], got[l * 8 + 4 + j] = t[j];
    uint32_t b[2]; /* b[0]: column g, rows 2q and 2q + 1; b[1]: rows 2q + 8 and 2q + 9 */
    for (int r = 0; r < 2; r++)
        b[r] = bm[(2 * q + 8 * r) * 8 + g] | (uint32_t)bm[(2 * q + 8 * r + 1) * 8 + g] << 16;
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_16816<__nv_bfloat16>(c, a, b);
    for (int i = 0; i < 4; i++) prod[l * 4 + i] = c[i];
}
static void check_fragments(void) {
    uint16_t tile[256], bm[128];
    for (int i = 0; i < 256; i++) tile[i] = bf16_from_float((float)i);
    for (int i = 0; i < 128; i++) bm[i] = bf16_from_float((float)(i % 5 - 2));
    float *gt = gpu(128), *gb = gpu(64), *got = gpu(256), *prod = gpu(128);
    dev_from_host(gt, tile, sizeof(tile));
    dev_from_host(gb, bm, sizeof(bm));
    fragments_kernel<<<1, 32, 0, backend.compute>>>((uint32_t *)got, prod, (const uint16_t *)gt,
                                                   (const uint16_t *)gb);
    cudaCheck(cudaGetLastError());
    uint32_t h[256];
    float c[128];
    dev_to_host(h, got, sizeof(h));
    dev_to_host(c, prod, sizeof(c));
    int wrong_a = 0, wrong_t = 0, wrong_c = 0;
    for (int l = 0; l < 32; l++) {
        int g = l / 4, q = l % 4;
        for (int j = 0; j < 4; j++) { /* tile j: rows 8 (j % 2).., columns 8 (j / 2).. */
            const uint16_t *m = tile + 8 * (j % 2) * 16 + 8 * (j / 2);
            uint32_t row = m[g * 16 + 2 * q] | (uint32_t)m[g * 16 + 2 * q + 1] << 16;
            uint32_t col = m[2 * q * 16 + g] | (uint32_t)m[(2 * q + 1) * 16 + g] << 16;
            wrong_a += h[l * 8 + j] != row, wrong_t += h[l * 8 + 4 + j] != col;
        }
        for (int i = 0; i < 4; i++) { /* c[i]: row g + 8 (i / 2), column 2q + i % 2 */
            int r = g + 8 * (i / 2), n = 2 * q + i % 2;
            float want = 0.0f; /* integers below 2^24: exact in any order */
            for (int k = 0; k < 16; k++) want += (float)(r * 16 + k) * (float)((k * 8 + n) % 5 - 2);
            wrong_c += c[l * 4 + i] != want;
        }
    }
    const char *what[] = {"ldmatrix_x4: registers against the PTX ISA's layout",
                          "ldmatrix_x4_trans: registers against the PTX ISA's layout",
                          "mma_16816 (bf16): c's layout, and its sums exact"};
    int wrong[] = {wrong_a, wrong_t, wrong_c};
    for (int i = 0; i < 3; i++) {
        printf("%s %-72s %3d of 128 wrong\n", wrong[i] ? "FAIL" : "ok  ", what[i], wrong[i]);
        wrong[i] ? failed++ : passed++;
    }
    gpu_free_all();
}

/* --attention flash on the tensor cores (flash_forward_tc and the two
 * backward kernels, bf16) against its rows on the CPU
 * (flash_forward_row, flash_backward_*_row), which round P's tile, dS
 * and the outputs where the kernels do: T not a multiple of the 64-row
 * blocks, heads of 64 (GPT-2's), 48, 32 and 16. The
 * sums run in other orders, so a value on a rounding boundary may round
 * the other way, by one bf16 ulp (up to 2^-7): a p moves y by at most
 * 2^-7 max|v| and y's own rounding flips by as much, beside the fp32 sums' 2
 * T u (as check_attention16); lse, a log of T positive terms, by 2 T u;
 * dqkv, sums of T products each of a dS that may flip, by 2^-5 of its
 * largest value (tests/test_units.c's bound between two roundings). The
 * line after gives the forward's rate: causal, 2 B H T^2 hd FLOPs. */
static void check_flash16(int B, int T, int D, int H) {
    const Dtype d = DTYPE_BF16;
    long nq = (long)B * T * 3 * D, ny = (long)B * T * D, rows = (long)B * H * T;
    float *qkv = host_random(nq, 22, 1.0f), *dy = host_random(ny, 23, 1.0f);
    for (long i = 0; i < nq; i++) qkv[i] = round_to(qkv[i], d);
    for (long i = 0; i < ny; i++) dy[i] = round_to(dy[i], d);
    float *y = (float *)host_calloc((size_t)ny, 4, "ref"),
          *lse = (float *)host_calloc((size_t)rows, 4, "ref"),
          *delta = (float *)host_calloc((size_t)rows, 4, "ref"),
          *dq = (float *)host_calloc((size_t)nq, 4, "ref");
    Dtype slots = DTYPE_FP32; /* the CPU's rows read and write float slots */
    for (long r = 0; r < rows; r++) flash_forward_row(r, y, lse, qkv, T, D, H, d, slots);
    for (long r = 0; r < rows; r++) flash_backward_dot_row(r, delta, dy, y, T, D, H, slots);
    for (long r = 0; r < rows; r++)
        flash_backward_query_row(r, dq, dy, qkv, lse, delta, T, D, H, d, slots);
    for (long r = 0; r < rows; r++)
        flash_backward_key_row(r, dq, dy, qkv, lse, delta, T, D, H, d, slots);
    float *gq = device_copy(qkv, nq), *gdy = device_copy(dy, ny), *gq16 = gpu(nq),
          *gdy16 = gpu(ny), *gy = gpu(ny), *glse = gpu(rows), *gdelta = gpu(rows), *gdq = gpu(nq);
    FOR_EACH(nq, pack_one, (uint16_t *)gq16, gq, d, 1.0f); /* c_attn's output, held in bf16 */
    FOR_EACH(ny, pack_one, (uint16_t *)gdy16, gdy, d, 1.0f); /* c_proj's input gradient */
    double us, vmax = max_abs(qkv, nq);
    char what[64];
    backend.gemm_dtype = d; /* as with --param-dtype bf16 */
    TIME_US(us, flash_attention_forward(gy, glse, gq16, B, T, D, H, d));
    backend.gemm_dtype = DTYPE_FP32;
    snprintf(what, sizeof(what), "flash forward, bf16 (%dx%dx%d, %d heads)", B, T, D, H);
    expect(what, "y", unpacked(gy, ny, d), y, ny, vmax * (4.0 / 256 + 2.0 * T * U), us);
    expect(what, "lse", glse, lse, rows, 2.0 * T * U * max_abs(lse, rows), us);
    printf("      %.1f TFLOP/s (causal: 2 B H T^2 hd FLOPs)\n",
           2.0 * B * H * (double)T * T * (D / H) / us / 1e6);
    backend.gemm_dtype = d;
    TIME_US(us, flash_attention_backward(gdq, gdelta, gdy16, gy, gq16, glse, B, T, D, H, d));
    backend.gemm_dtype = DTYPE_FP32;
    snprintf(what, sizeof(what), "flash backward, bf16 (%dx%dx%d, %d heads)", B, T, D, H);
    expect(what, "dqkv", unpacked(gdq, nq, d), dq, nq, max_abs(dq, nq) / 32.0, us);
    float *frees[] = {qkv, dy, y, lse, delta, dq};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) free(frees[i]);
    gpu_free_all();
}

/* clip_grad_norm's and the scaler's sum of squares, a warp a block of
 * NORM_BLOCK (sum_squares_blocks) against a thread a block
 * (sum_squares_block), over a shard that ends inside a block. Both sum
 * doubles of exact squares, in two orders: at most NORM_BLOCK double
 * roundings apart, 2^-53 of the block's sum each (all terms >= 0). */
static void check_sum_squares(void) {
    const long n = 31L * 1000 * 1000 + 123, blocks = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    float *x = host_random(n, 21, 1.0f), *gx = device_copy(x, n);
    double *ref = (double *)host_calloc((size_t)blocks, 8, "ref"),
           *got = (double *)host_calloc((size_t)blocks, 8, "ref");
    for (long b = 0; b < blocks; b++) sum_squares_block(b, ref, x, n);
    double *gp = (double *)gpu(2 * blocks), us;
    TIME_US(us, sum_squares_blocks(gp, gx, n));
    dev_to_host(got, gp, (size_t)blocks * 8);
    double worst = 0.0;
    for (long b = 0; b < blocks; b++) worst = fmax(worst, fabs(got[b] - ref[b]) / ref[b]);
    double tol = NORM_BLOCK * 0x1p-53;
    int ok = worst <= tol;
    printf("%s %-46s %-8s max |gpu - cpu| %9.3g  tol %9.3g  %9.1f us\n", ok ? "ok  " : "FAIL",
           "sum of squares, a warp a block (31M floats)", "relative", worst, tol, us);
    ok ? passed++ : failed++;
    free(x), free(ref), free(got);
    gpu_free_all();
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    Config cfg;
    char err[4096];
    char *none[] = {argv[0], NULL};
    if (config_parse(&cfg, 1, none, err, sizeof(err)) || backend_init(&cfg, MPI_COMM_WORLD)) {
        fprintf(stderr, "no GPU to test the kernels on\n");
        MPI_Finalize();
        return 77;
    }
    printf("every GPU kernel against the CPU's arithmetic (tests/test_kernels.cu)\n");
    check_layernorm();
    check_linear();
    check_matmul_padded();
    check_mlp_gelu_fused();
    check_elementwise();
    check_embedding();
    check_crossentropy();
    check_attention();
    check_attention16();
    check_fragments();
    check_flash16(2, ATTENTION_T - 24, 768, 12); /* a last query block in part */
    check_flash16(1, 200, 96, 3);
    check_flash16(1, 97, 48, 1);  /* heads of 48: a last 16-column fragment alone */
    check_flash16(1, 129, 16, 1); /* heads of 16, and one row past two blocks */
    check_sum_squares();
    printf("%d passed, %d failed\n", passed, failed);
    backend_release();
    MPI_Finalize();
    return failed ? 1 : 0;
}
