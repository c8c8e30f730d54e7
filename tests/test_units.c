/* tests/test_units.c — the pieces of fsdp.c, one at a time, on one process.
 *
 *   gradients   every layer's backward against central finite differences,
 *               and the whole model's backward the same way
 *   matmul      the CPU's packed, tiled matmuls against the naive loop that
 *               defines them, bit for bit, with every tile this CPU runs
 *   adamw       three steps against values computed by hand
 *   autowrap    unit assignment for several thresholds, edge cases included
 *   shards      padding and shard ranges for N = 1..64, and that the shards
 *               of all ranks put together are the 1-rank flat parameter
 *   data        --data is mapped, not copied (ranks share the pages), and a
 *               mapping that fails says so
 *   errors      FATAL's message leaves in one write (before MPI_Init)
 *
 * Every check prints what it compared; the exit code is the number of
 * failed checks (0 = all passed). Run: ./tests/test_units
 */
#define FSDP_NO_MAIN
#include "main.c"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

static int failures = 0;

static void check(int ok, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  %s %-44s ", ok ? "ok  " : "FAIL", what);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!ok) failures++;
}

/* ---- finite differences ------------------------------------------------------ */

/* Deterministic test inputs in [-1, 1). */
static void fill(float *x, long n, uint64_t key) {
    for (long i = 0; i < n; i++) x[i] = 2.0f * rng_uniform(99, key, 0, (uint64_t)i) - 1.0f;
}

/* A layer under test: reads the inputs, writes the output. The scalar we
 * differentiate is L = sum(out * r) for a fixed random r, so dL/dout = r. */
typedef struct {
    float *in[4];    /* tensors we perturb (inputs and parameters)       */
    float *grad[4];  /* analytic gradients of L w.r.t. each               */
    long n[4];
    const char *name[4];
    int n_in;
    float *out, *r;
    long n_out;
    void (*forward)(void *ctx);
    void *ctx;
} GradCase;

static double loss_of(GradCase *g) {
    g->forward(g->ctx);
    double L = 0.0;
    for (long i = 0; i < g->n_out; i++) L += (double)g->out[i] * g->r[i];
    return L;
}

/* Compares analytic and numeric gradients on every element: the worst
 * |analytic - numeric| / (|numeric| + 1e-2). With h = 1e-3 in fp32 the
 * numeric side is good to a few 1e-4 on O(1) values, so 1e-2 leaves a wide
 * margin while a wrong formula (a sign, a missing term) is off by O(1). */
static void gradcheck(GradCase *g, const char *layer) {
    const float h = 1e-3f;
    for (int k = 0; k < g->n_in; k++) {
        double worst = 0.0;
        for (long i = 0; i < g->n[k]; i++) {
            float keep = g->in[k][i];
            g->in[k][i] = keep + h;
            double lp = loss_of(g);
            g->in[k][i] = keep - h;
            double lm = loss_of(g);
            g->in[k][i] = keep;
            double numeric = (lp - lm) / (2.0 * h);
            double err = fabs(g->grad[k][i] - numeric) / (fabs(numeric) + 1e-2);
            if (err > worst) worst = err;
        }
        char what[96];
        snprintf(what, sizeof(what), "%s d%s", layer, g->name[k]);
        check(worst < 1e-2, what, "max rel err %.2e over %ld elements (tol 1e-2)", worst, g->n[k]);
    }
}

enum { GB = 3, GI = 5, GO = 4 };

static Buf fp32_buf(const void *x) { return buf(x, DTYPE_FP32); }

typedef struct { float *out, *in, *w, *b; } LinearCtx;
static void linear_case(void *c) {
    LinearCtx *x = (LinearCtx *)c;
    Linear l = linear_view(x->w, x->b, DTYPE_FP32, NULL, NULL, DTYPE_FP32, GI, GO);
    linear_forward(&l, fp32_buf(x->out), x->in, GB);
}

static void test_linear(void) {
    float in[GB * GI], w[GO * GI], b[GO], out[GB * GO], r[GB * GO];
    float din[GB * GI] = {0}, dw[GO * GI] = {0}, db[GO] = {0};
    fill(in, GB * GI, 1); fill(w, GO * GI, 2); fill(b, GO, 3); fill(r, GB * GO, 4);
    Linear l = linear_view(w, b, DTYPE_FP32, dw, db, DTYPE_FP32, GI, GO);
    linear_backward(&l, fp32_buf(din), fp32_buf(r), in, GB);
    LinearCtx ctx = {out, in, w, b};
    GradCase g = {{in, w, b}, {din, dw, db}, {GB * GI, GO * GI, GO}, {"input", "weight", "bias"}, 3, out, r, GB * GO, linear_case, &ctx};
    gradcheck(&g, "linear");
}

typedef struct { float *out, *mean, *rstd, *in, *w, *b; } NormCtx;
static void norm_case(void *c) {
    NormCtx *x = (NormCtx *)c;
    LayerNorm ln = norm_view(x->w, x->b, DTYPE_FP32, NULL, NULL, DTYPE_FP32, GI);
    layernorm_forward(&ln, x->out, x->mean, x->rstd, x->in, GB, DTYPE_FP32);
}

static void test_layernorm(void) {
    float in[GB * GI], w[GI], b[GI], out[GB * GI], r[GB * GI], mean[GB], rstd[GB];
    float din[GB * GI] = {0}, dw[GI] = {0}, db[GI] = {0};
    fill(in, GB * GI, 5); fill(w, GI, 6); fill(b, GI, 7); fill(r, GB * GI, 8);
    NormCtx ctx = {out, mean, rstd, in, w, b};
    norm_case(&ctx); /* saves mean and rstd for the backward */
    LayerNorm ln = norm_view(w, b, DTYPE_FP32, dw, db, DTYPE_FP32, GI);
    layernorm_backward(&ln, din, r, in, mean, rstd, GB, DTYPE_FP32);
    GradCase g = {{in, w, b}, {din, dw, db}, {GB * GI, GI, GI}, {"input", "weight", "bias"}, 3, out, r, GB * GI, norm_case, &ctx};
    gradcheck(&g, "layernorm");
}

typedef struct { float *out, *in; } GeluCtx;
static void gelu_case(void *c) { GeluCtx *x = (GeluCtx *)c; gelu_forward(x->out, x->in, GB * GI, DTYPE_FP32); }

static void test_gelu(void) {
    float in[GB * GI], out[GB * GI], r[GB * GI] = {0}, din[GB * GI] = {0};
    fill(in, GB * GI, 9); fill(r, GB * GI, 10);
    for (int i = 0; i < GB * GI; i++) in[i] *= 3.0f; /* cover the curved part */
    gelu_backward(din, r, in, GB * GI, DTYPE_FP32);
    GeluCtx ctx = {out, in};
    GradCase g = {{in}, {din}, {GB * GI}, {"input"}, 1, out, r, GB * GI, gelu_case, &ctx};
    gradcheck(&g, "gelu");
}

enum { EV = 6, ET = 3, EC = 2 };
typedef struct { float *out, *w; const unsigned char *tok; } EmbCtx;
static void emb_case(void *c) { EmbCtx *x = (EmbCtx *)c; embedding_forward(x->out, x->tok, fp32_buf(x->w), GB, ET, EC); }

/* A batch's rows grouped by token (TokenRows) in the arrays given: the
 * CPU build's device memory is the host's. */
enum { MAX_ROWS = 4096 };
typedef struct {
    int rows[MAX_ROWS], end[MAX_ROWS], token[MAX_ROWS], stage[3 * MAX_ROWS];
    TokenRows g;
} Grouped;
static TokenRows *group_by_token(Grouped *x, const int *tok, long BT, int V) {
    x->g = (TokenRows){x->rows, x->end, x->token, 0};
    token_rows_load(&x->g, tok, BT, V, x->stage);
    return &x->g;
}

/* The grouped gradient adds each token's rows in the order of the plain
 * loop (row n to row tokens[n], n = 0, 1, ...), so the two agree to the
 * bit: 4096 rows of 50 tokens, 8 channels, into a nonzero gradient. */
static void test_embedding_grouped(void) {
    enum { N = MAX_ROWS, V = 50, C = 8 };
    static int tok[N];
    static float dout[N * C], dw[V * C], ref[V * C];
    static Grouped x;
    for (int n = 0; n < N; n++) tok[n] = (int)(rng_u64(99, 30, 0, (uint64_t)n) % (V - 3)); /* 3 unused */
    fill(dout, N * C, 31); fill(dw, V * C, 32);
    memcpy(ref, dw, sizeof(dw));
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) ref[tok[n] * C + c] += dout[n * C + c];
    TokenRows *g = group_by_token(&x, tok, N, V);
    embedding_backward(fp32_buf(dw), dout, g, C);
    int ok = g->distinct == V - 3 && memcmp(dw, ref, sizeof(dw)) == 0;
    check(ok, "embedding gradient grouped by token", "%d distinct tokens (want %d), %s", g->distinct,
          V - 3, memcmp(dw, ref, sizeof(dw)) == 0 ? "bitwise equal to the plain loop" : "differs");
}

static void test_embedding(void) {
    const unsigned char tok[GB * ET] = {0, 5, 2, 2, 2, 1, 4, 0, 5}; /* repeats: gradients must add */
    int ids[GB * ET];
    static Grouped x;
    for (int n = 0; n < GB * ET; n++) ids[n] = tok[n];
    float w[EV * EC], out[GB * ET * EC], r[GB * ET * EC], dw[EV * EC] = {0};
    fill(w, EV * EC, 11); fill(r, GB * ET * EC, 12);
    embedding_backward(fp32_buf(dw), r, group_by_token(&x, ids, GB * ET, EV), EC);
    EmbCtx ctx = {out, w, tok};
    GradCase g = {{w}, {dw}, {EV * EC}, {"weight"}, 1, out, r, GB * ET * EC, emb_case, &ctx};
    gradcheck(&g, "embedding");
}

/* Cross-entropy's output is the loss itself: r = 1 on a one-element output.
 * Its backward writes the gradient over the logits it is given, so it runs
 * on a copy: the gradient check needs the logits. */
typedef struct { float *loss, *lse, *rows, *logits; const int *targets; } CeCtx;
static void ce_case(void *c) { CeCtx *x = (CeCtx *)c; x->loss[0] = crossentropy_forward(x->lse, x->rows, x->logits, GO, x->targets, GB, GO); }

static void test_crossentropy(void) {
    const int targets[GB] = {1, 3, 0};
    float logits[GB * GO], lse[GB], rows[GB], dlogits[GB * GO], loss[1], r[1] = {1.0f};
    fill(logits, GB * GO, 13);
    CeCtx ctx = {loss, lse, rows, logits, targets};
    ce_case(&ctx);
    memcpy(dlogits, logits, sizeof(logits));
    crossentropy_backward(dlogits, GO, lse, targets, 1.0f / GB, GB, GO, DTYPE_FP32);
    GradCase g = {{logits}, {dlogits}, {GB * GO}, {"logits"}, 1, loss, r, 1, ce_case, &ctx};
    gradcheck(&g, "crossentropy");
    /* The online softmax subtracts its running maximum before exp: logits
     * near 100 (exp(100) overflows fp32) give the loss they give 100 lower,
     * but for rounding at 100 (the shifted logits, lse, their differences:
     * a few ulp there, 2^-17 each): within 16 of those. Without the
     * maximum, exp overflows and the loss is not a number. */
    float shifted[GB * GO], loss_shift;
    for (int i = 0; i < GB * GO; i++) shifted[i] = logits[i] + 100.0f;
    loss_shift = crossentropy_forward(lse, rows, shifted, GO, targets, GB, GO);
    check(fabsf(loss_shift - loss[0]) < 16.0f * ldexpf(1.0f, -17), "crossentropy at logits + 100",
          "loss %.7f, unshifted %.7f", loss_shift, loss[0]);
    /* A logit of -inf (fp16's overflow downwards) has probability 0, first in
     * its row too: logits (-inf, 1, 2), target 2, lose log(e + e^2) - 2 =
     * log(1 + 1/e), as PyTorch's cross_entropy gives; a NaN stays a NaN */
    float row[3] = {-INFINITY, 1.0f, 2.0f}, row_lse, row_loss;
    const int target2[1] = {2};
    crossentropy_forward(&row_lse, &row_loss, row, 3, target2, 1, 3);
    check(fabsf(row_loss - log1pf(expf(-1.0f))) < 1e-6f, "crossentropy: a -inf logit first",
          "loss %.7f, log(1 + 1/e) %.7f", row_loss, log1pf(expf(-1.0f)));
    row[1] = NAN;
    crossentropy_forward(&row_lse, &row_loss, row, 3, target2, 1, 3);
    check(isnan(row_loss), "crossentropy: a NaN logit gives a NaN loss", "loss %f", row_loss);
}

/* One parameter tensor's gradient (p->grad, from a backward just run)
 * against central differences of the loss that `forward` returns, at the
 * elements idx[0..n): the probed vector as a whole, |g_num - g| / |g|. */
static void probe_param(Trainer *t, Param *p, const long *idx, int n, float (*forward)(Trainer *),
                        const char *model, double tol) {
    const float h = 1e-2f;
    double diff2 = 0.0, norm2 = 0.0;
    for (int k = 0; k < n; k++) {
        float *data = (float *)p->data; /* fp32 slots: the CPU's full_dtype */
        float keep = data[idx[k]];
        data[idx[k]] = keep + h;
        double lp = forward(t);
        data[idx[k]] = keep - h;
        double lm = forward(t);
        data[idx[k]] = keep;
        double numeric = (lp - lm) / (2.0 * h), g = ((const float *)p->grad)[idx[k]];
        diff2 += (numeric - g) * (numeric - g);
        norm2 += g * g;
    }
    double rel = sqrt(diff2) / (sqrt(norm2) + 1e-6);
    char what[96];
    snprintf(what, sizeof(what), "%s d%s", model, p->name);
    check(rel < tol, what, "rel err %.2e over %d probes, |g| %.2e (tol %.0e)", rel, n, sqrt(norm2), tol);
}

/* ---- GPT-2's layers (kernels/transformer.h) ---------------------------------------- */

typedef struct { float *out, *in; } GeluTanhCtx;
static void gelu_tanh_case(void *c) { GeluTanhCtx *x = (GeluTanhCtx *)c; gelu_tanh_forward(x->out, x->in, GB * GI, DTYPE_FP32); }

static void test_gelu_tanh(void) {
    float in[GB * GI], out[GB * GI], r[GB * GI] = {0}, din[GB * GI] = {0};
    fill(in, GB * GI, 20); fill(r, GB * GI, 21);
    for (int i = 0; i < GB * GI; i++) in[i] *= 3.0f;
    gelu_tanh_backward(din, r, in, GB * GI, DTYPE_FP32);
    GeluTanhCtx ctx = {out, in};
    GradCase g = {{in}, {din}, {GB * GI}, {"input"}, 1, out, r, GB * GI, gelu_tanh_case, &ctx};
    gradcheck(&g, "gelu_tanh");
}

/* The CPU's GELU a block at a time (gelu_tanh_blocks) against its
 * definition, an element at a time (gelu_tanh_forward_one, _backward_one):
 * bit for bit, on 1,300 values (two full blocks and a part) from -12 to
 * 12, where e^(2u) runs from 0 to infinity, and on 0, -0, inf and -inf. */
static void test_gelu_tanh_blocks(void) {
    enum { N = 1300 };
    static float x[N], g[N], fast[N], slow[N];
    fill(g, N, 22);
    for (int i = 0; i < N; i++) x[i] = -12.0f + 24.0f * (float)i / (N - 5);
    x[N - 4] = 0.0f, x[N - 3] = -0.0f, x[N - 2] = INFINITY, x[N - 1] = -INFINITY;
    for (int backward = 0; backward < 2; backward++) {
        int ran = gelu_tanh_blocks(fast, backward ? g : NULL, x, N, DTYPE_FP32), same = 0;
        for (long i = 0; i < N; i++) {
            if (backward) gelu_tanh_backward_one(i, slow, g, x, DTYPE_FP32, DTYPE_FP32);
            else gelu_tanh_forward_one(i, slow, x, DTYPE_FP32, DTYPE_FP32);
            same += !memcmp(&fast[i], &slow[i], sizeof(float));
        }
        check(ran && same == N, backward ? "gelu_tanh backward in blocks" : "gelu_tanh forward in blocks",
              "%d of %d values bit for bit with the element's", same, N);
    }
    check(!gelu_tanh_blocks(fast, NULL, x, N, DTYPE_BF16), "gelu_tanh in blocks: not in bf16",
          "left to the elements, which round");
}

/* B sequences of T positions, width D in H heads: the attention of
 * kernels/transformer.h, by rows (the CPU's) and as GEMMs (the GPU's) */
enum { AB = 2, AT = 5, AD = 6, AH = 3 };
typedef struct { float *y, *att, *qkv; } AttCtx;
static void att_case(void *c) { AttCtx *x = (AttCtx *)c; attention_forward(x->y, x->att, x->qkv, AB, AT, AD, AH, DTYPE_FP32); }

static void test_attention(void) {
    enum { NQ = AB * AT * 3 * AD, NY = AB * AT * AD, NA = AB * AH * AT * AT };
    static float qkv[NQ], y[NY], att[NA], r[NY], dqkv[NQ], datt[NA];
    static float y2[NY], att2[NA], dqkv2[NQ], datt2[NA];
    fill(qkv, NQ, 22); fill(r, NY, 23);
    for (int i = 0; i < NQ; i++) qkv[i] *= 2.0f; /* scores of O(1): a softmax far from uniform */
    AttCtx ctx = {y, att, qkv};
    att_case(&ctx);
    attention_backward(dqkv, datt, r, qkv, att, AB, AT, AD, AH, DTYPE_FP32);
    GradCase g = {{qkv}, {dqkv}, {NQ}, {"qkv"}, 1, y, r, NY, att_case, &ctx};
    gradcheck(&g, "attention (causal, 3 heads)");
    /* the GPU's formulation, on the CPU: the same numbers up to the order
     * of fp32 sums (values O(1), 5 terms: 1e-5 is rounding's scale x 100) */
    att_case(&ctx);
    memset(dqkv, 0, sizeof(dqkv));
    attention_backward(dqkv, datt, r, qkv, att, AB, AT, AD, AH, DTYPE_FP32);
    attention_forward_gemm(y2, att2, qkv, AB, AT, AD, AH, DTYPE_FP32);
    attention_backward_gemm(dqkv2, datt2, r, qkv, att2, AB, AT, AD, AH, DTYPE_FP32);
    double wy = 0, wa = 0, wd = 0;
    for (int i = 0; i < NY; i++) wy = fmax(wy, fabs(y[i] - y2[i]));
    for (int i = 0; i < NA; i++) wa = fmax(wa, fabs(att[i] - att2[i]));
    for (int i = 0; i < NQ; i++) wd = fmax(wd, fabs(dqkv[i] - dqkv2[i]));
    check(wy < 1e-5 && wa < 1e-5, "attention as GEMMs == by rows: forward",
          "max |dy| %.1e, |dp| %.1e (tol 1e-5)", wy, wa);
    check(wd < 1e-5, "attention as GEMMs == by rows: backward", "max |d dqkv| %.1e (tol 1e-5)", wd);
}

/* The GPU's 16-bit formulation (P and dS stored in bf16, all six products
 * from bf16 inputs: attention_forward_gemm with d = bf16) against the rows rounding P
 * and dS where it stores them, on bf16 inputs. Both sum in fp32 in other
 * orders, so a P or dS on a rounding boundary may round the other way: one
 * bf16 ulp, 2^-8 of it, moving y or dqkv by at most that times the |v| or
 * |k|, |q| it multiplies (|values| < 2, 5 terms): tolerances 2^-7 for P
 * and dS's effects on y, 2^-5 on dqkv. A wrong index or stride is off by
 * O(1). */
static void test_attention16(void) {
    enum { NQ = AB * AT * 3 * AD, NY = AB * AT * AD, NA = AB * AH * AT * AT };
    static float qkv[NQ], y[NY], att[NA], r[NY], dqkv[NQ], datt[NA];
    static float y2[NY], att2[NA], dqkv2[NQ], datt2[NA];
    const Dtype d = DTYPE_BF16;
    fill(qkv, NQ, 22); fill(r, NY, 23);
    for (int i = 0; i < NQ; i++) qkv[i] = round_to(2.0f * qkv[i], d);
    for (int i = 0; i < NY; i++) r[i] = round_to(r[i], d);
    attention_forward(y, att, qkv, AB, AT, AD, AH, d);
    attention_backward(dqkv, datt, r, qkv, att, AB, AT, AD, AH, d);
    uint16_t *att16 = (uint16_t *)att2; /* as the GPU stores P in the float slots */
    attention_forward_gemm(y2, att16, qkv, AB, AT, AD, AH, d);
    attention_backward_gemm(dqkv2, datt2, r, qkv, att16, AB, AT, AD, AH, d);
    double wy = 0, wa = 0, wd = 0, rounded = 0;
    for (int i = 0; i < NY; i++) wy = fmax(wy, fabs(y[i] - y2[i]));
    for (int i = 0; i < NA; i++) {
        wa = fmax(wa, fabs(att[i] - float_from_bf16(att16[i])));
        rounded = fmax(rounded, fabs(att[i] - round_to(att[i], d))); /* 0 if the rows rounded P */
    }
    for (int i = 0; i < NQ; i++) wd = fmax(wd, fabs(dqkv[i] - dqkv2[i]));
    check(wy < 1.0 / 128 && wa < 1.0 / 128 && rounded == 0.0,
          "attention in bf16, GEMMs == rows: forward",
          "max |dy| %.1e, |dP| %.1e (tol 2^-7), rows' P in bf16: %s", wy, wa,
          rounded == 0.0 ? "yes" : "NO");
    check(wd < 1.0 / 32, "attention in bf16, GEMMs == rows: backward",
          "max |d dqkv| %.1e (tol 2^-5)", wd);
}

/* The CPU's attention in fp32 slots, a head at a time through the blocked
 * kernels (attention_forward_heads, _backward_heads), against the rows it
 * reorganises: every bit of y, P, dqkv and the dS it leaves in datt equal,
 * P and dS rounded to bf16 too (--param-dtype bf16 on the CPU). Shapes
 * that reach every edge: T = 1, T not a multiple of the key blocks
 * (ATT_COLS) or of the row blocks (ATT_ROWS), T past one key block, one
 * head and three, heads of 2, 8, 16 and 20 channels (narrower than the
 * kernels' blocks: the transposed path), 32 (their full width) and 36,
 * B = 2. Exact equality, not a tolerance: the fast path adds
 * the rows' terms in the rows' order. */
static int attention_heads_case(int B, int T, int D, int H, Dtype d) {
    long nq = (long)B * T * 3 * D, ny = (long)B * T * D, na = (long)B * H * T * T;
    float *qkv = calloc(nq, 4), *r = calloc(ny, 4), *y[2], *att[2], *dqkv[2], *datt[2];
    fill(qkv, nq, 30 + T), fill(r, ny, 31 + T);
    for (long i = 0; i < nq; i++) qkv[i] *= 3.0f; /* scores of O(1) and more */
    for (int k = 0; k < 2; k++) {
        y[k] = calloc(ny, 4), att[k] = calloc(na, 4), dqkv[k] = calloc(nq, 4);
        datt[k] = malloc(na * 4);
        for (long i = 0; i < na; i++) datt[k][i] = NAN; /* what neither writes stays NaN */
    }
    attention_forward_rows(y[0], att[0], qkv, B, T, D, H, d);
    attention_backward_rows(dqkv[0], datt[0], r, qkv, att[0], B, T, D, H, d);
    attention_forward_heads(y[1], att[1], qkv, B, T, D, H, d);
    attention_backward_heads(dqkv[1], datt[1], r, qkv, att[1], B, T, D, H, d);
    int same = !memcmp(y[0], y[1], ny * 4) && !memcmp(att[0], att[1], na * 4) &&
               !memcmp(dqkv[0], dqkv[1], nq * 4) && !memcmp(datt[0], datt[1], na * 4);
    free(qkv), free(r);
    for (int k = 0; k < 2; k++) free(y[k]), free(att[k]), free(dqkv[k]), free(datt[k]);
    return same;
}
static void test_attention_heads(void) {
    static const int shapes[][4] = {{2, 7, 6, 3},  {1, 1, 20, 1},  {2, 37, 60, 3}, {1, 70, 36, 1},
                                    {2, 64, 64, 2}, {1, 9, 96, 3}, {2, 70, 32, 2}, {1, 33, 24, 3}};
    int n = (int)(sizeof(shapes) / sizeof(shapes[0]));
    for (int k = 0; k < 2; k++) {
        Dtype d = k ? DTYPE_BF16 : DTYPE_FP32;
        int ok = 0;
        char which[256] = "";
        for (int i = 0; i < n; i++) {
            const int *c = shapes[i];
            int same = attention_heads_case(c[0], c[1], c[2], c[3], d);
            ok += same;
            if (!same)
                snprintf(which + strlen(which), sizeof(which) - strlen(which),
                         " B%d T%d D%d H%d differs;", c[0], c[1], c[2], c[3]);
        }
        char what[96];
        snprintf(what, sizeof(what), "attention by heads == rows, bits, P %s", DTYPE_NAMES[d]);
        check(ok == n, what, "y, P, dqkv, dS: %d of %d shapes identical%s", ok, n, which);
    }
}

/* --attention flash (kernels/transformer.h): T = 70 positions walk three
 * key tiles of FLASH_TILE (32), the last one partial, so the online
 * softmax rescales o and l whenever a tile raises a row's maximum. */
enum { FB = 2, FT = 70, FD = 8, FH = 2 };

/* The same numbers as the math path's rows, which keep P (and which
 * test_attention checks by finite differences): in fp32 up to the order
 * of sums (values O(1), sums of 70 terms: 1e-5 is rounding's scale x
 * 100), and each p_ts = exp(score - lse) equal to P's. In bf16 (unit
 * roundoff 2^-8) the two round different things: flash each exp(score -
 * m) before the division by l, math P after it; each moves y (a mean of
 * |v| < 2) by at most 2^-7, and each path rounds y itself (2^-8 at
 * |y| < 2): |dy| < 3 * 2^-7 < 2^-5; lse's p against the rounded P 2^-8
 * relative, 2^-7 allowed. dqkv, sums of 70 such terms of either sign:
 * 2^-5 too (a wrong index or rescaling is off by O(1)). */
static void flash_against_math(Dtype d, double tol_y, double tol_d, double tol_p) {
    enum { NQ = FB * FT * 3 * FD, NY = FB * FT * FD, NA = FB * FH * FT * FT, NR = FB * FH * FT };
    static float qkv[NQ], y[NY], r[NY], dqkv[NQ], lse[NR], delta[NR];
    static float y2[NY], att[NA], datt[NA], dqkv2[NQ];
    fill(qkv, NQ, 24); fill(r, NY, 25);
    for (int i = 0; i < NQ; i++) qkv[i] = round_to(2.0f * qkv[i], d);
    for (int i = 0; i < NY; i++) r[i] = round_to(r[i], d);
    flash_attention_forward(y, lse, qkv, FB, FT, FD, FH, d);
    flash_attention_backward(dqkv, delta, r, y, qkv, lse, FB, FT, FD, FH, d);
    attention_forward(y2, att, qkv, FB, FT, FD, FH, d);
    attention_backward(dqkv2, datt, r, qkv, att, FB, FT, FD, FH, d);
    double wy = 0, wd = 0, wl = 0;
    for (int i = 0; i < NY; i++) wy = fmax(wy, fabs(y[i] - y2[i]));
    for (int i = 0; i < NQ; i++) wd = fmax(wd, fabs(dqkv[i] - dqkv2[i]));
    for (long row = 0; row < NR; row++) { /* lse against P: p_ts = exp(score - lse) */
        int t = (int)(row % FT), h = (int)((row / FT) % FH);
        long b = row / (FT * FH);
        float z = flash_score(qkv, b, t, 0, h, FT, FD, FD / FH, 1.0f / sqrtf(FD / FH), DTYPE_FP32);
        wl = fmax(wl, fabs(expf(z - lse[row]) - att[row * FT]) / fmax(att[row * FT], 1e-30));
    }
    char what[96];
    snprintf(what, sizeof(what), "--attention flash == math, %s: y, lse and dqkv", DTYPE_NAMES[d]);
    check(wy < tol_y && wd < tol_d && wl < tol_p, what,
          "max |dy| %.1e, |d dqkv| %.1e, p from lse rel %.1e (tol %.1e, %.1e, %.1e)", wy, wd, wl,
          tol_y, tol_d, tol_p);
}

static void test_flash_attention(void) {
    flash_against_math(DTYPE_FP32, 1e-5, 1e-5, 1e-5);
    flash_against_math(DTYPE_BF16, 1.0 / 32, 1.0 / 32, 1.0 / 128);
}

/* Activations held in 16 bits (kernels/layers.h): with backend.gemm_dtype
 * bf16, as on a GPU with bf16 parameters, each layer that writes one
 * (LayerNorm from the held residual stream, GELU, gelu_new, the byte
 * embedding, attention's y from a held qkv, GELU from a held fc; in
 * backward, from held inputs and output gradients, GELU's, gelu_new's and
 * attention's input gradients, a Linear's output gradient) writes packed
 * bf16, and it must be, bit for bit, the CPU's fp32 slots (gemm_dtype
 * fp32) rounded to bf16; gemm_input packs a float-slot operand and passes
 * a held one through, and a bias gradient reads a held one as the same
 * numbers. A producer that wrote floats into the packed buffer, or forgot
 * to round, fails. test_stream16 below does the residual stream's other
 * kernels. */
static int packed_equal(const uint16_t *packed, const float *slots, long n) {
    int rounded = 1, equal = 1;
    for (long i = 0; i < n; i++) {
        rounded &= slots[i] == round_to(slots[i], DTYPE_BF16);
        equal &= packed[i] == bf16_from_float(slots[i]);
    }
    return rounded && equal;
}
/* x rounded to bf16 in its float slots, and packed beside them */
static void round_pack(float *x, uint16_t *packed, long n) {
    for (long i = 0; i < n; i++)
        x[i] = round_to(x[i], DTYPE_BF16), packed[i] = bf16_from_float(x[i]);
}
static void test_matmul_inputs16(void) {
    enum { NQ = AB * AT * 3 * AD, NY = AB * AT * AD, NA = AB * AH * AT * AT, N = GB * GI };
    const Dtype d = DTYPE_BF16;
    static float in[N], g[N], w[GI], b[GI], slots[NQ], mean[GB], rstd[GB], qkv[NQ], att[NA],
        dy[NY], datt[NA];
    static uint16_t packed[NQ], qkv16[NQ], in16[N], g16[N], dy16[NY]; /* as held in bf16 */
    static const unsigned char tok[GB * ET] = {1, 5, 0, 2, 2, 4, 3, 0, 5};
    static float emb[EV * EC];
    fill(in, N, 30); fill(w, GI, 31); fill(b, GI, 32); fill(qkv, NQ, 33); fill(emb, EV * EC, 34);
    fill(dy, NY, 35); fill(g, N, 36);
    for (int i = 0; i < EV * EC; i++) emb[i] = round_to(emb[i], d); /* a parameter: bf16 */
    round_pack(qkv, qkv16, NQ);
    for (int i = 0; i < NY; i++) dy[i] = round_to(dy[i], d);
    round_pack(in, in16, N), round_pack(g, g16, N);
    for (int i = 0; i < NY; i++) dy16[i] = bf16_from_float(dy[i]);
    LayerNorm norm = norm_view(w, b, DTYPE_FP32, NULL, NULL, DTYPE_FP32, GI);
    const char *names[] = {"layernorm", "gelu", "gelu_new", "embedding", "attention's y",
                           "gelu backward", "gelu_new backward", "attention's dqkv"};
    long count[] = {N, N, N, GB * ET * EC, NY, N, N, NQ};
    for (int k = 0; k < 8; k++) {
        for (int pass = 0; pass < 2; pass++) {
            backend.gemm_dtype = pass ? d : DTYPE_FP32;
            void *out = pass ? (void *)packed : (void *)slots;
            const void *x = pass ? (const void *)qkv16 : (const void *)qkv,
                       *fc = pass ? (const void *)in16 : (const void *)in,
                       *dfc = pass ? (const void *)g16 : (const void *)g,
                       *dat = pass ? (const void *)dy16 : (const void *)dy;
            if (k == 0) layernorm_forward(&norm, out, mean, rstd, fc, GB, d);
            if (k == 1) gelu_forward(out, fc, N, d);
            if (k == 2) gelu_tanh_forward(out, fc, N, d);
            if (k == 3) embedding_forward(out, tok, fp32_buf(emb), GB, ET, EC);
            if (k == 4) attention_forward_gemm(out, att, x, AB, AT, AD, AH, d); /* P: bf16 */
            if (k == 5) gelu_backward(out, dfc, fc, N, d);
            if (k == 6) gelu_tanh_backward(out, dfc, fc, N, d);
            if (k == 7) attention_backward_gemm(out, datt, dat, x, att, AB, AT, AD, AH, d);
        }
        backend.gemm_dtype = DTYPE_FP32;
        char what[96];
        snprintf(what, sizeof(what), "%s held in bf16 == fp32 slots rounded", names[k]);
        check(packed_equal(packed, slots, count[k]), what, "%ld values, bit for bit", count[k]);
    }
    const void *same = gemm_input(packed, d, NQ, d), *made = gemm_input(slots, DTYPE_FP32, NQ, d);
    int ok = same == (const void *)packed && packed_equal((const uint16_t *)made, slots, NQ);
    gemm_input_free(made, slots, NQ);
    check(ok, "gemm_input: a held operand as it is, a float-slot one packed", "%d values", NQ);
    /* c_attn's bias gradient, from dqkv: held in bf16 (a GPU's grad_dtype), rounded as
     * it is written, against fp32 slots rounded after (module_post_backward) */
    uint16_t db16[3 * AD] = {0};
    float db32[3 * AD] = {0};
    FOR_EACH(3 * AD, bias_backward_one, db16, packed, AB * AT, 3 * AD, d, d);
    FOR_EACH(3 * AD, bias_backward_one, db32, slots, AB * AT, 3 * AD, DTYPE_FP32, DTYPE_FP32);
    FOR_EACH(3 * AD, round_one, db32, d);
    check(packed_equal(db16, db32, 3 * AD), "bias gradient from a held output gradient, into bf16",
          "%d columns of %d rows, bit for bit", 3 * AD, AB * AT);
    /* the loss from held logits (here qkv's values, as AB * AT rows of 3 * AD) */
    static float s16[AB * AT], s32[AB * AT], l16[AB * AT], l32[AB * AT];
    static const int tg[AB * AT] = {0, 5, 17, 3, 3, 9, 12, 1, 16, 8};
    backend.gemm_dtype = d;
    float loss16 = crossentropy_forward(s16, l16, qkv16, 3 * AD, tg, AB * AT, 3 * AD);
    backend.gemm_dtype = DTYPE_FP32;
    float loss32 = crossentropy_forward(s32, l32, qkv, 3 * AD, tg, AB * AT, 3 * AD);
    check(loss16 == loss32 && !memcmp(s16, s32, sizeof(s16)) && !memcmp(l16, l32, sizeof(l16)),
          "the loss from held logits", "loss %.6f == %.6f, each row's lse and loss bit for bit",
          loss16, loss32);
}

/* ---- the CPU matmul: the fast loops against the naive one, bit for bit -------
 * kernels/layers.h's accumulate packs, tiles and picks a tile for the CPU;
 * accumulate_naive is the definition, one sum per element in increasing k.
 * Every fast loop must give the very same bits: the shapes are chosen to
 * reach every edge (fewer rows than a tile, columns not a multiple of the
 * vector, odd K, K = 0), every path (rows alone, one tile's rows with src
 * in place, packed) and both ways of reading coef (along its rows, and
 * down its columns, as dweight reads dout). */
static int same_bits(const float *a, const float *b, long n) {
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}
static float *filled(long n, uint64_t key) {
    float *x = (float *)host_malloc((size_t)(n ? n : 1) * sizeof(float), "a test operand");
    fill(x, n, key);
    return x;
}

static void test_accumulate_bits(void) {
    static const int shapes[][3] = {/* R, K, n */
                                    {1, 1, 1},    {3, 5, 7},    {7, 37, 15}, {16, 16, 16},
                                    {17, 33, 31}, {33, 70, 47}, {5, 0, 9},   {40, 129, 70},
                                    {4, 9, 32},   {2, 11, 48}};
    enum { N_SHAPES = sizeof(shapes) / sizeof(shapes[0]) };
    Tile tiles[3];
    int n_tiles = cpu_tiles(tiles);
    for (int t = 0; t < n_tiles; t++) {
        int equal = 0, cases = 0;
        for (int s = 0; s < N_SHAPES; s++)
            for (int transposed = 0; transposed < 2; transposed++) {
                int R = shapes[s][0], K = shapes[s][1], n = shapes[s][2];
                /* coef (R, K) read along rows 3 floats wider than K, or down
                 * the columns of a (K, R + 2) matrix */
                long row = transposed ? 1 : K + 3, col = transposed ? R + 2 : 1;
                long coef_n = transposed ? (long)K * (R + 2) : (long)R * (K + 3);
                float *coef = filled(coef_n, 40 + s), *src = filled((long)K * n, 50 + s);
                float *fast = filled((long)R * n, 60 + s), *naive = filled((long)R * n, 60 + s);
                accumulate_with(tiles[t], fast, coef, row, col, src, R, K, n);
                accumulate_naive(naive, coef, row, col, src, R, K, n);
                equal += same_bits(fast, naive, (long)R * n);
                cases++;
                free(coef), free(src), free(fast), free(naive);
            }
        char what[96];
        snprintf(what, sizeof(what), "accumulate, %s tile == the naive loop", tiles[t].name);
        check(equal == cases, what, "%d of %d shapes bit for bit (%d rows x %d columns)", equal,
              cases, tiles[t].rows, TILE_COLS);
    }
}

/* The layers' three products, through cpu_linear_forward and
 * matmul_backward, against the naive loop: forward from the bias (and from
 * 0 with its padded rows, matmul_forward's), dinp from 0, dweight from what
 * it held; dout's rows ldd apart. */
static void test_linear_bits(void) {
    enum { B = 19, I = 37, O = 45, LD = 48 };
    float *x = filled(B * I, 70), *w = filled(O * I, 71), *bias = filled(O, 72);
    float *g = filled(B * LD, 73), *dw = filled(O * I, 74), *dw_naive = filled(O * I, 74);
    float *y = filled(B * LD, 75), *dx = filled(B * I, 76);
    float *y_naive = (float *)host_calloc(B * LD, sizeof(float), "a test result");
    float *dx_naive = (float *)host_calloc(B * I, sizeof(float), "a test result");
    float *wt = (float *)host_malloc(I * O * sizeof(float), "a test operand");
    for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) wt[i * O + o] = w[o * I + i];
    Linear l = linear_view(w, bias, DTYPE_FP32, dw, NULL, DTYPE_FP32, I, O);

    linear_forward(&l, fp32_buf(y), x, B); /* (B, O), rows O apart */
    for (int b = 0; b < B; b++) memcpy(y_naive + b * O, bias, O * sizeof(float));
    accumulate_naive(y_naive, x, I, 1, wt, B, I, O);
    check(same_bits(y, y_naive, B * O), "linear forward == the naive loop",
          "(%d, %d) -> %d, bit for bit", B, I, O);

    matmul_forward(&l, fp32_buf(y), LD, x, B); /* no bias; rows LD apart, padding 0 */
    memset(y_naive, 0, B * LD * sizeof(float));
    float *row = (float *)host_calloc(O, sizeof(float), "a test result");
    for (int b = 0; b < B; b++) {
        memset(row, 0, O * sizeof(float));
        accumulate_naive(row, x + b * I, I, 1, wt, 1, I, O);
        memcpy(y_naive + b * LD, row, O * sizeof(float));
    }
    check(same_bits(y, y_naive, B * LD), "matmul forward, padded rows == naive", "rows %d apart",
          LD);

    matmul_backward(&l, fp32_buf(dx), fp32_buf(g), LD, x, B);
    accumulate_naive(dx_naive, g, LD, 1, w, B, O, I);
    accumulate_naive(dw_naive, g, 1, LD, x, O, B, I);
    check(same_bits(dx, dx_naive, B * I), "matmul backward's dinp == the naive loop",
          "bit for bit");
    check(same_bits(dw, dw_naive, O * I), "matmul backward's dweight == the naive loop",
          "dout read down its columns");
    /* dbias: linear_backward sums dout (rows O apart) a row at a time on the
     * CPU; bias_backward_one, a column at a time, is the definition */
    float *db = filled(O, 77), *db_naive = filled(O, 77);
    Linear lb = linear_view(w, bias, DTYPE_FP32, dw, db, DTYPE_FP32, I, O);
    linear_backward(&lb, fp32_buf(dx), fp32_buf(g), x, B);
    FOR_EACH(O, bias_backward_one, db_naive, g, B, O, DTYPE_FP32, DTYPE_FP32);
    check(same_bits(db, db_naive, O), "linear backward's dbias == bias_backward_one", "%d rows", B);
    free(db), free(db_naive);
    free(x), free(w), free(bias), free(g), free(dw), free(dw_naive), free(y), free(dx);
    free(y_naive), free(dx_naive), free(wt), free(row);
}

/* token + position embedding: x[b, t] = wte[token] + wpe[t] */
enum { PV = 7, PT = 3, PD = 2 };
typedef struct { float *out, *wte, *wpe; const int *tok; } PosCtx;
static void pos_case(void *c) {
    PosCtx *x = (PosCtx *)c;
    const Dtype fp32 = DTYPE_FP32;
    FOR_EACH(GB * PT * PD, token_embedding_forward_one, x->out, x->tok, x->wte, fp32, PD, fp32);
    FOR_EACH(GB * PT * PD, position_embedding_forward_one, x->out, x->wpe, fp32, PT, PD, fp32,
             fp32);
}

static void test_gpt2_embedding(void) {
    const int tok[GB * PT] = {0, 6, 2, 2, 2, 1, 4, 0, 6};
    float wte[PV * PD], wpe[PT * PD], out[GB * PT * PD], r[GB * PT * PD];
    float dwte[PV * PD] = {0}, dwpe[PT * PD] = {0};
    fill(wte, PV * PD, 24); fill(wpe, PT * PD, 25); fill(r, GB * PT * PD, 26);
    static Grouped x;
    embedding_backward(fp32_buf(dwte), r, group_by_token(&x, tok, GB * PT, PV), PD);
    FOR_EACH(PT * PD, position_embedding_backward_one, dwpe, r, GB, PT, PD, DTYPE_FP32, DTYPE_FP32);
    PosCtx ctx = {out, wte, wpe, tok};
    GradCase g = {{wte, wpe}, {dwte, dwpe}, {PV * PD, PT * PD}, {"wte", "wpe"}, 2, out, r, GB * PT * PD, pos_case, &ctx};
    gradcheck(&g, "gpt2 embedding");
}

/* The residual stream and its gradient held in 16 bits (kernels/layers.h):
 * a residual connection; LayerNorm's forward from the held stream, and its
 * backward adding into the held gradient, its parameter gradients from a
 * held input; GPT-2's token + position embedding written into the held
 * stream, and wte's and wpe's gradients read from the held gradient. The
 * parameters are read from a unit's full state held in 16 bits too (fsdp.c's
 * full_dtype). Each, run with gemm_dtype bf16
 * on packed buffers, must equal bit for bit the same kernel on fp32 slots
 * holding the same values (gemm_dtype fp32, what the CPU runs), and what
 * it writes into the stream must be those slots rounded to bf16. The
 * gradient starts nonzero, so LayerNorm's add into it is checked too. */
static void test_stream16(void) {
    enum { N = GB * GI, BT = GB * PT, NE = BT * PD };
    const Dtype d = DTYPE_BF16, fp32 = DTYPE_FP32;
    static float x[N], y[N], dy[N], w[GI], b[GI], mean[GB], rstd[GB], out[N], dx[N];
    static uint16_t x16[N], y16[N], dy16[N], out16[N], dx16[N], w16[GI], b16[GI];
    fill(x, N, 40); fill(y, N, 41); fill(dy, N, 42); fill(w, GI, 43); fill(b, GI, 44);
    fill(dx, N, 45);
    round_pack(x, x16, N), round_pack(y, y16, N), round_pack(dy, dy16, N), round_pack(dx, dx16, N);
    round_pack(w, w16, GI), round_pack(b, b16, GI); /* a full state held in bf16 */
    FOR_EACH(N, residual_add_one, out, x, y, d, fp32);
    backend.gemm_dtype = d;
    FOR_EACH(N, residual_add_one, out16, x16, y16, d, d);
    backend.gemm_dtype = fp32;
    check(packed_equal(out16, out, N), "a residual connection, the stream held in bf16",
          "%d values == fp32 slots rounded, bit for bit", N);
    float nw[GI] = {0}, nb[GI] = {0};
    uint16_t nw16[GI] = {0}, nb16[GI] = {0}; /* the parameters' gradients held in bf16 too */
    LayerNorm ln = norm_view(w, b, fp32, nw, nb, fp32, GI);
    LayerNorm ln16 = norm_view(w16, b16, d, nw16, nb16, d, GI);
    layernorm_forward(&ln, out, mean, rstd, x, GB, d); /* and the statistics */
    backend.gemm_dtype = d;
    layernorm_forward(&ln16, out16, mean, rstd, x16, GB, d);
    backend.gemm_dtype = fp32;
    check(packed_equal(out16, out, N), "layernorm from the stream and parameters held in bf16",
          "%d values == fp32 slots', bit for bit", N);
    layernorm_backward(&ln, dx, dy, x, mean, rstd, GB, d);
    backend.gemm_dtype = d;
    layernorm_backward(&ln16, dx16, dy16, x16, mean, rstd, GB, d);
    backend.gemm_dtype = fp32;
    FOR_EACH(GI, round_one, nw, d);
    FOR_EACH(GI, round_one, nb, d);
    check(packed_equal(dx16, dx, N) && packed_equal(nw16, nw, GI) && packed_equal(nb16, nb, GI),
          "layernorm backward into the stream's gradient held in bf16",
          "dinp (added into, rounded), dweight, dbias (in bf16) == fp32 slots', bit for bit");
    static const int tok[BT] = {0, 6, 2, 2, 2, 1, 4, 0, 6};
    static float wte[PV * PD], wpe[PT * PD], e[NE], g[NE];
    static uint16_t e16[NE], g16[NE], wte16[PV * PD], wpe16[PT * PD];
    float dwte[PV * PD] = {0}, dwpe[PT * PD] = {0};
    uint16_t dwte16[PV * PD] = {0}, dwpe16[PT * PD] = {0}; /* gradients held in bf16 too */
    fill(wte, PV * PD, 46); fill(wpe, PT * PD, 47); fill(g, NE, 48);
    round_pack(wte, wte16, PV * PD), round_pack(wpe, wpe16, PT * PD), round_pack(g, g16, NE);
    static Grouped grouped;
    TokenRows *rows = group_by_token(&grouped, tok, BT, PV);
    for (int pass = 0; pass < 2; pass++) {
        Dtype held = pass ? d : fp32;
        backend.gemm_dtype = held;
        void *stream = pass ? (void *)e16 : (void *)e;
        const void *grad = pass ? (const void *)g16 : (const void *)g;
        const void *te = pass ? (const void *)wte16 : wte, *pe = pass ? (const void *)wpe16 : wpe;
        FOR_EACH(NE, token_embedding_forward_one, stream, tok, te, held, PD, held);
        FOR_EACH(NE, position_embedding_forward_one, stream, pe, held, PT, PD, d, held);
        void *dte = pass ? (void *)dwte16 : dwte, *dpe = pass ? (void *)dwpe16 : dwpe;
        embedding_backward(buf(dte, held), grad, rows, PD);
        FOR_EACH(PT * PD, position_embedding_backward_one, dpe, grad, GB, PT, PD, held, held);
    }
    backend.gemm_dtype = fp32;
    FOR_EACH(PV * PD, round_one, dwte, d);
    FOR_EACH(PT * PD, round_one, dwpe, d);
    check(packed_equal(e16, e, NE) && packed_equal(dwte16, dwte, PV * PD) &&
              packed_equal(dwpe16, dwpe, PT * PD),
          "gpt2 embeddings into and out of the stream held in bf16",
          "wte + wpe == fp32 slots rounded; dwte, dwpe bit for bit");
}

/* GPT-2 through the trainer, as test_model_gradients below does the MLP:
 * every parameter tensor, tied wte (two shares of its gradient) included.
 * The loss is fp32 (one ulp at 5.5 is 5e-7), so a central difference with
 * h = 1e-2 carries ~2.5e-5 of noise per probe: a few percent of the
 * smallest gradients here (norms ~2e-3 over 6 probes), hence 5e-2; a
 * missing term or a wrong sign is off by O(1). A vocabulary of 300, so
 * the logits' rows are padded (320 apart, logits_stride): a row read at
 * the wrong stride would be off by O(1) too. */
static void test_gpt2_gradients(void) {
    Config cfg;
    char err[256];
    char *argv[] = {(char *)"t", (char *)"--model", (char *)"gpt2-tiny", (char *)"--strategy", (char *)"no_shard", (char *)"--batch", (char *)"2", (char *)"--context", (char *)"8", (char *)"--vocab", (char *)"300"};
    if (config_parse(&cfg, 11, argv, err, sizeof(err)) != 0) { check(0, "gpt2 config", "%s", err); return; }
    Trainer *t = trainer_create(&cfg, MPI_COMM_SELF);
    trainer_load_batch(t, 0, 0); /* step 0 of one rank: its tokens, grouped for the embedding */
    gpt2_forward(t);
    gpt2_backward(t);
    for (int pi = 0; pi < t->model.n_params; pi++) {
        Param *p = &t->model.params[pi];
        long idx[6], rows = p->module == t->model.wpe ? (long)cfg.context * cfg.width : p->numel;
        int n = 0; /* wpe: the rows of the positions used */
        for (long e = 0; e < rows && n < 6; e += 1 + rows / 6) idx[n++] = e;
        probe_param(t, p, idx, n, gpt2_forward, "gpt2", 5e-2);
    }
    trainer_destroy(t);
}

/* A GPU's storage, end to end, on the CPU: with backend.gemm_dtype set to
 * the 16-bit param_dtype before the trainer is made, as backend_init sets
 * it on a GPU, every held activation (model/activations.h) is packed 16
 * bits, as on a GPU, and every kernel reads it as held (the CPU's matmuls
 * unpack it, cpu_operand; attention takes the GPU's GEMM formulation).
 * Under full_shard a unit's gathered full state is held in 16 bits too
 * (fsdp.c's full_dtype), the all-gather's output as it came, and every
 * kernel reads the parameters from it; under no_shard they stay in fp32
 * slots, packed on the way into each matmul (gemm_input). One forward and
 * backward must give the loss and every gradient shard of the CPU's own
 * run (fp32 slots) bit for bit: a buffer read in the wrong format, a slice
 * at the wrong stride, a zeroing of the wrong size or a kernel that forgot
 * to round would not. */
static float step_gradients(char **argv, int argc, int held16, float **grads, long *n,
                            long *value_bytes) {
    Config cfg;
    char err[256];
    if (config_parse(&cfg, argc, argv, err, sizeof(err)) != 0) {
        check(0, "held16 config", "%s", err);
        return NAN;
    }
    backend.gemm_dtype = held16 ? cfg.param_dtype : DTYPE_FP32;
    Trainer *t = trainer_create(&cfg, MPI_COMM_SELF);
    trainer_load_batch(t, 0, 0);
    int gpt2 = cfg.arch == ARCH_GPT2;
    float loss = gpt2 ? gpt2_forward(t) : model_forward(t);
    /* the layout itself: the root's unit is still gathered after forward,
     * its last parameter's view that many bytes a value into it */
    const Unit *root = &t->units[0];
    const Param *last = &t->model.params[root->params[root->n_params - 1]];
    long at = ((const char *)last->data - (const char *)root->full_param);
    *value_bytes = last->offset > 0 ? at / last->offset : 0; /* 0: nothing to measure by */
    if (gpt2) gpt2_backward(t);
    else model_backward(t);
    *n = 0; /* one rank: each unit's gradient shard is its whole gradient */
    for (int ui = 0; ui < t->n_units; ui++) *n += t->units[ui].shard;
    *grads = (float *)host_malloc((size_t)*n * sizeof(float), "keep the gradients");
    for (int ui = 0, at = 0; ui < t->n_units; at += (int)t->units[ui++].shard)
        memcpy(*grads + at, t->units[ui].shard_grad, (size_t)t->units[ui].shard * sizeof(float));
    trainer_destroy(t);
    backend.gemm_dtype = DTYPE_FP32;
    return loss;
}
static void test_held16_models(void) {
    const char *cases[][14] = {
        {"--model", "gpt2-tiny", "--param-dtype", "bf16", "--batch", "2", "--context", "8",
         "--vocab", "300"}, /* the logits' rows padded */
        {"--model", "gpt2-tiny", "--param-dtype", "bf16", "--batch", "2", "--n-ctx", "64",
         "--context", "40", "--attention", "flash", "--activation-checkpointing"},
        {"--model", "gpt2-tiny", "--param-dtype", "fp16", "--grad-scaler", "--batch", "2",
         "--context", "8"},
        {"--model", "tiny", "--param-dtype", "bf16", "--batch", "4", "--activation-checkpointing"},
        {"--model", "tiny", "--param-dtype", "fp16", "--grad-scaler", "--batch", "4"},
    };
    for (size_t k = 0; k < 2 * sizeof(cases) / sizeof(cases[0]); k++) {
        const char *strategy = k % 2 ? "full_shard" : "no_shard";
        char *argv[3 + 14] = {(char *)"t", (char *)"--strategy", (char *)strategy};
        int argc = 3;
        char what[200];
        snprintf(what, sizeof(what), "held in 16 bits == fp32 slots, one step: %s", strategy);
        for (int a = 0; a < 14 && cases[k / 2][a]; a++) {
            argv[argc++] = (char *)cases[k / 2][a];
            snprintf(what + strlen(what), sizeof(what) - strlen(what), " %s", cases[k / 2][a]);
        }
        float *g16 = NULL, *g32 = NULL;
        long n16 = 0, n32 = 0, b16 = 0, b32 = 0, want = k % 2 ? 2 : 4; /* full_shard: 16 bits */
        float l16 = step_gradients(argv, argc, 1, &g16, &n16, &b16);
        float l32 = step_gradients(argv, argc, 0, &g32, &n32, &b32);
        long differ = 0;
        for (long i = 0; n16 == n32 && i < n32; i++) differ += memcmp(&g16[i], &g32[i], 4) != 0;
        check(n16 == n32 && n32 > 0 && l16 == l32 && differ == 0 && b16 == want && b32 == 4, what,
              "loss %.7g == %.7g, %ld of %ld gradient values differ; full state %ld bytes a value",
              l16, l32, differ, n32, b16);
        free(g16), free(g32);
    }
}

/* The whole model, through the trainer on one rank with no_shard: the
 * backward pass, with every hook, against finite differences of the loss.
 * A few elements of every parameter tensor are probed. The loss is an
 * average of O(1) terms, so its gradients are small; we compare the probed
 * vector as a whole: |g_num - g| / |g| < 2e-2. */
static void test_model_gradients(void) {
    Config cfg;
    char err[256];
    char *argv[] = {(char *)"t", (char *)"--model", (char *)"tiny", (char *)"--strategy", (char *)"no_shard", (char *)"--batch", (char *)"4"};
    if (config_parse(&cfg, 7, argv, err, sizeof(err)) != 0) { check(0, "model config", "%s", err); return; }
    Trainer *t = trainer_create(&cfg, MPI_COMM_SELF);
    trainer_load_batch(t, 0, 0); /* step 0 of one rank: its bytes, grouped for the embedding */
    model_forward(t);
    model_backward(t);
    for (int pi = 0; pi < t->model.n_params; pi++) {
        Param *p = &t->model.params[pi];
        long idx[6];
        int n = 0;
        for (long e = 0; e < p->numel && n < 6; e += 1 + p->numel / 6, n++)
            /* embedding rows of bytes not in the batch have zero gradient; probe the used ones */
            idx[n] = (p->module == t->model.embed) ? (long)t->act.tokens[n] * cfg.embed_dim + n % cfg.embed_dim : e;
        probe_param(t, p, idx, n, model_forward, "model", 2e-2);
    }
    trainer_destroy(t);
}

/* ---- AdamW ------------------------------------------------------------------------ */

/* lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, p0 = 1, grads
 * 0.5, -0.25, 1.0. By hand, step 1:
 *   p = 1 * (1 - 0.1*0.01) = 0.999;  m = 0.05;  v = 0.00025
 *   bias corrections 0.1 and 0.001: denom = sqrt(0.00025)/sqrt(0.001) + 1e-8
 *   = 0.5 + 1e-8;  p = 0.999 - (0.1/0.1) * 0.05/0.50000001 = 0.899000002
 * step 2: p = 0.898101; m = 0.02; v = 0.00031225; corrections 0.19 and
 *   0.001999: denom = 0.0176706/0.0447102 = 0.395226; p -= 0.526316 *
 *   0.0506040 -> 0.8714673
 * step 3 likewise: m = 0.118, v = 0.00131194 -> 0.8047847 */
static void test_adamw(void) {
    const float grads[3] = {0.5f, -0.25f, 1.0f};
    const double expect[3] = {0.899000002, 0.8714673, 0.8047847};
    float p = 1.0f, m = 0.0f, v = 0.0f;
    for (int t = 1; t <= 3; t++) {
        float bc1 = 1.0f - powf(0.9f, (float)t), bc2_sqrt = sqrtf(1.0f - powf(0.999f, (float)t));
        adamw_update_one(&p, &m, &v, grads[t - 1], 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2_sqrt);
        char what[64];
        snprintf(what, sizeof(what), "adamw step %d", t);
        /* fp32 arithmetic on values near 1: 1e-6 is a few ulps of headroom */
        check(fabs(p - expect[t - 1]) < 1e-6, what, "p = %.7f, by hand %.7f", p, expect[t - 1]);
    }
}

/* torch.optim.Adam (--optimizer adam), through adamw_one as the trainer
 * calls it: weight decay 0.1 is L2, added to the gradient, with no
 * decoupled decay. lr 0.1, betas (0.9, 0.999), eps 1e-8, p0 = 1, grads
 * 0.5, -0.25, 1.0. By hand, step 1: g = 0.5 + 0.1 * 1 = 0.6; m = 0.06;
 * v = 0.00036; corrections 0.1 and 0.001: m_hat / sqrt(v_hat) = 0.6 / 0.6,
 * so p = 1 - 0.1 = 0.9. Step 2: g = -0.25 + 0.09 = -0.16; m = 0.038,
 * v = 0.00038524 -> p = 0.8544414. Step 3: g = 1.0854441 -> p = 0.7815044.
 * (AdamW with the same numbers gives 0.899, 0.871, 0.805: above.) */
static void test_adam(void) {
    const float grads[3] = {0.5f, -0.25f, 1.0f};
    const double expect[3] = {0.9000000, 0.8544414, 0.7815044};
    float p = 1.0f, m = 0.0f, v = 0.0f;
    for (int t = 1; t <= 3; t++) {
        AdamWStep s = {0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f - powf(0.9f, (float)t),
                       sqrtf(1.0f - powf(0.999f, (float)t)), 1};
        adamw_one(0, &p, &m, &v, &grads[t - 1], s);
        char what[64];
        snprintf(what, sizeof(what), "adam (L2 weight decay) step %d", t);
        check(fabs(p - expect[t - 1]) < 1e-6, what, "p = %.7f, by hand %.7f", p, expect[t - 1]);
    }
}

/* ---- learning-rate schedules ------------------------------------------------------
 * lr_at against values worked out by hand, lr 1 (a float, so exact):
 *   warmup 2:  t = 0 -> 1/2, t = 1 -> 1, then the schedule from u = t - 2;
 *   step, step_size 3, gamma 0.5:  u = 0..2 -> 1, u = 3..5 -> 0.5, u = 6 -> 0.25;
 *   cosine over 10 steps, no warmup:  t = 0 -> 1, t = 5 -> 0.5, t = 9 -> (1 + cos(0.9 pi)) / 2
 *   = 0.0244717. */
static void test_lr_schedule(void) {
    Config c;
    memset(&c, 0, sizeof(c));
    c.lr = 1.0f, c.steps = 10, c.warmup = 2, c.step_size = 3, c.gamma = 0.5f, c.lr_schedule = LR_STEP;
    const long ts[] = {0, 1, 2, 4, 5, 8};
    const double step_lr[] = {0.5, 1.0, 1.0, 1.0, 0.5, 0.25};
    for (int i = 0; i < 6; i++) {
        char what[64];
        snprintf(what, sizeof(what), "warmup 2 + StepLR(3, 0.5): t = %ld", ts[i]);
        check(fabs(lr_at(&c, ts[i]) - step_lr[i]) < 1e-7, what, "lr %.7f, by hand %.7f", lr_at(&c, ts[i]), step_lr[i]);
    }
    c.warmup = 0, c.lr_schedule = LR_COSINE;
    const long tc[] = {0, 5, 9};
    const double cos_lr[] = {1.0, 0.5, 0.0244717};
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof(what), "CosineAnnealingLR over 10 steps: t = %ld", tc[i]);
        check(fabs(lr_at(&c, tc[i]) - cos_lr[i]) < 1e-6, what, "lr %.7f, by hand %.7f", lr_at(&c, tc[i]), cos_lr[i]);
    }
    c.min_lr = 0.1f; /* --min-lr: eta_min */
    const double floor_lr[] = {1.0, 0.55, 0.1 + 0.9 * 0.0244717};
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof(what), "cosine to --min-lr 0.1 over 10 steps: t = %ld", tc[i]);
        check(fabs(lr_at(&c, tc[i]) - floor_lr[i]) < 1e-6, what, "lr %.7f, by hand %.7f", lr_at(&c, tc[i]), floor_lr[i]);
    }
    c.lr_schedule = LR_LINEAR, c.warmup = 2; /* transformers' linear schedule, to --min-lr */
    const long tl[] = {0, 2, 6, 9};
    const double linear_lr[] = {0.5, 1.0, 0.1 + 0.9 * 0.5, 0.1 + 0.9 * 0.125};
    for (int i = 0; i < 4; i++) {
        char what[64];
        snprintf(what, sizeof(what), "warmup 2 + linear to --min-lr 0.1: t = %ld", tl[i]);
        check(fabs(lr_at(&c, tl[i]) - linear_lr[i]) < 1e-6, what, "lr %.7f, by hand %.7f", lr_at(&c, tl[i]), linear_lr[i]);
    }
    c.lr_schedule = LR_CONSTANT;
    check(lr_at(&c, 7) == 1.0f, "constant: t = 7", "lr %.7f", lr_at(&c, 7));
}

/* ---- auto-wrap ---------------------------------------------------------------- */

/* The tiny model (C=4, T=8, D=16, L=2) has, by hand:
 *   embed 256*4 = 1024; proj_in 32*16+16 = 528;
 *   per block: norm 2*16 = 32, fc1 16*64+64 = 1088, fc2 64*16+16 = 1040 -> 2160;
 *   norm_f 32; head 16*256+256 = 4352; total 10256. */
typedef struct {
    long min_params;
    int n_units;
    const char *roots[12]; /* unit root modules in pre-order ("" = the root) */
    long numel[12];
} WrapCase;

/* ---- bf16 and fp16 rounding against an independent reference -------------
 * The reference decodes every one of the 65536 patterns of the format with
 * ldexp (not the bit tricks under test), sorts the finite non-negative
 * values, and rounds x by definition: the nearest value, a tie to the
 * pattern with an even last bit, and beyond the largest value plus half an
 * ulp to infinity. Checked on every float in a sweep of 2^16 + edge
 * cases: halfway points, subnormals, overflow thresholds, infinities, NaN,
 * negative values; the conversion back must be exact on every pattern. */
static double decode_half(unsigned h, Dtype d) { /* the value of pattern h, h's sign ignored */
    int ebits = d == DTYPE_BF16 ? 8 : 5, mbits = d == DTYPE_BF16 ? 7 : 10, bias = (1 << (ebits - 1)) - 1;
    unsigned e = (h >> mbits) & ((1u << ebits) - 1), m = h & ((1u << mbits) - 1);
    if (e == (1u << ebits) - 1) return m ? NAN : INFINITY;
    if (e == 0) return ldexp((double)m, 1 - bias - mbits);
    return ldexp((double)((1u << mbits) + m), (int)e - bias - mbits);
}

static unsigned reference_round(float x, Dtype d) {
    int mbits = d == DTYPE_BF16 ? 7 : 10, ebits = d == DTYPE_BF16 ? 8 : 5;
    unsigned sign = signbit(x) ? 0x8000u : 0, inf = ((1u << ebits) - 1) << mbits;
    double a = fabs((double)x);
    if (isnan(x)) return 0xFFFFu; /* any NaN: compared as "is NaN" */
    unsigned lo = 0, hi = inf - 1; /* the largest finite pattern */
    double top = decode_half(hi, d), ulp = top - decode_half(hi - 1, d);
    if (a >= top + ulp / 2) return sign | inf; /* halfway to the next binade: RNE goes up */
    if (a >= top) return sign | hi;
    while (hi - lo > 1) { /* decode is increasing in the pattern: bisect */
        unsigned mid = (lo + hi) / 2;
        if (decode_half(mid, d) <= a) lo = mid;
        else hi = mid;
    }
    double dl = a - decode_half(lo, d), dh = decode_half(hi, d) - a;
    unsigned pick = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    return sign | pick;
}

static void test_dtypes(void) {
    static const Dtype ds[2] = {DTYPE_BF16, DTYPE_FP16};
    for (int k = 0; k < 2; k++) {
        Dtype d = ds[k];
        long bad = 0, n = 0, bad_back = 0;
        for (unsigned h = 0; h < 65536; h++) { /* back to fp32: exact, every pattern */
            double want = decode_half(h & 0x7FFFu, d) * ((h & 0x8000u) ? -1 : 1);
            float got = float_from_half((uint16_t)h, d);
            if (!(isnan(want) ? isnan(got) : (double)got == want)) bad_back++;
        }
        for (long i = 0; i < (1L << 16) + 64; i++) {
            float x;
            if (i < (1L << 16)) { /* spread over every exponent: bits i * 65537, both signs */
                uint32_t u = (uint32_t)(i * 65537u);
                memcpy(&x, &u, sizeof(x));
            } else { /* halfway points and thresholds, from the reference's own table */
                unsigned h = (unsigned)(i * 977) % (d == DTYPE_BF16 ? 0x7F80u : 0x7C00u);
                double v = decode_half(h, d), w = decode_half(h + 1, d);
                x = (float)((v + w) / 2);
                if (i % 4 == 1) x = (float)decode_half(h, d);
                if (i % 4 == 2) x = -x;
            }
            unsigned want = reference_round(x, d), got = half_from_float(x, d);
            int ok = want == 0xFFFFu ? isnan(float_from_half((uint16_t)got, d)) : got == want;
            bad += !ok;
            n++;
        }
        char what[64];
        snprintf(what, sizeof(what), "%s: round to nearest even", DTYPE_NAMES[d]);
        check(bad == 0, what, "%ld of %ld floats differ from the reference", bad, n);
        snprintf(what, sizeof(what), "%s: back to fp32 exactly", DTYPE_NAMES[d]);
        check(bad_back == 0, what, "%ld of 65536 patterns differ", bad_back);
    }
    check(half_from_float(65519.0f, DTYPE_FP16) == 0x7BFF && half_from_float(65520.0f, DTYPE_FP16) == 0x7C00,
          "fp16: 65519 -> 65504, 65520 -> inf", "the overflow threshold");
    check(half_from_float(ldexpf(1.0f, -25), DTYPE_FP16) == 0 && half_from_float(ldexpf(1.5f, -25), DTYPE_FP16) == 1,
          "fp16: 2^-25 -> 0 (tie to even), 1.5 * 2^-25 -> 2^-24", "the underflow threshold");
}

static void test_autowrap(void) {
    const WrapCase cases[] = {
        /* exactly one block: each block and the head (4352 >= 2160) wrap */
        {2160, 4, {"", "blocks.0", "blocks.1", "head"}, {1024 + 528 + 32, 2160, 2160, 4352}},
        /* one above: no block reaches it; blocks is a ModuleList and never wraps */
        {2161, 2, {"", "head"}, {1024 + 528 + 2 * 2160 + 32, 4352}},
        /* exactly the head */
        {4352, 2, {"", "head"}, {5904, 4352}},
        /* 1: every module with parameters wraps; containers are left with
         * 0 and the root with no parameters at all */
        {1, 11, {"", "embed", "proj_in", "blocks.0.norm", "blocks.0.fc1", "blocks.0.fc2", "blocks.1.norm", "blocks.1.fc1", "blocks.1.fc2", "norm_f", "head"},
         {0, 1024, 528, 32, 1088, 1040, 32, 1088, 1040, 32, 4352}},
        /* above the whole model: the root takes everything */
        {10257, 1, {""}, {10256}},
    };
    Config cfg;
    char err[256];
    char *argv[] = {(char *)"t", (char *)"--model", (char *)"tiny"};
    config_parse(&cfg, 3, argv, err, sizeof(err));
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        Model m;
        model_build(&m, &cfg);
        int n_units = autowrap(&m, AUTO_WRAP_SIZE, cases[c].min_params);
        Unit *units = (Unit *)calloc((size_t)n_units, sizeof(Unit));
        units_layout(units, n_units, &m, 1, &cfg);
        int ok = (n_units == cases[c].n_units) && m.total_numel == 10256;
        char got[512] = "";
        size_t used = 0;
        for (int u = 0; u < n_units && used < sizeof(got); u++) {
            const char *name = m.modules[units[u].root_module].name;
            used += (size_t)snprintf(got + used, sizeof(got) - used, "%s%s=%ld", u ? " " : "", u ? name : "(root)", units[u].numel);
            if (u < cases[c].n_units) ok &= !strcmp(name, cases[c].roots[u]) && units[u].numel == cases[c].numel[u];
        }
        char what[64];
        snprintf(what, sizeof(what), "autowrap min_params=%ld", cases[c].min_params);
        check(ok, what, "%d units: %s", n_units, got);
        for (int u = 0; u < n_units; u++) free(units[u].params);
        free(units);
        model_free(&m);
    }
}

/* ---- padding and shards ---------------------------------------------------------- */

/* For each N: padded = ceil(numel/N)*N, shard = padded/N, and the shards of
 * ranks 0..N-1 laid side by side are the 1-rank flat parameter followed by
 * zeros. N = 64 makes the 32-element norm units smaller than N, so ranks
 * 32..63 own nothing but padding. */
static void test_shards(void) {
    Config cfg;
    char err[256];
    char *argv[] = {(char *)"t", (char *)"--model", (char *)"tiny"};
    config_parse(&cfg, 3, argv, err, sizeof(err));
    const int worlds[] = {1, 2, 3, 5, 7, 64};
    Model m;
    model_build(&m, &cfg);
    int n_units = autowrap(&m, AUTO_WRAP_SIZE, 1);
    Unit *ref = (Unit *)calloc((size_t)n_units, sizeof(Unit));
    units_layout(ref, n_units, &m, 1, &cfg);
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++) {
        int N = worlds[w];
        Unit *units = (Unit *)calloc((size_t)n_units, sizeof(Unit));
        units_layout(units, n_units, &m, N, &cfg);
        int ok = 1;
        long all_padding_ranks = 0;
        for (int u = 0; u < n_units; u++) {
            Unit *x = &units[u];
            ok &= x->padded == ceil_div(x->numel, N) * N && x->shard * N == x->padded && x->padded - x->numel < N;
            float *one = (float *)calloc((size_t)ref[u].numel + 1, sizeof(float));
            ref[u].shard_param = one;
            unit_init_shard(&ref[u], &m, 0, cfg.seed, ref[u].shard_param);
            float *joined = (float *)calloc((size_t)x->padded + 1, sizeof(float));
            for (int r = 0; r < N; r++) {
                x->shard_param = joined + (long)r * x->shard;
                unit_init_shard(x, &m, r, cfg.seed, x->shard_param);
                if ((long)r * x->shard >= x->numel) all_padding_ranks++;
            }
            ok &= memcmp(one, joined, (size_t)x->numel * sizeof(float)) == 0;
            for (long i = x->numel; i < x->padded; i++) ok &= joined[i] == 0.0f;
            free(one);
            free(joined);
        }
        char what[64];
        snprintf(what, sizeof(what), "shards N=%d", N);
        check(ok, what, "padding < N, shard*N == padded, shards == 1-rank flat (%ld all-padding shards)", all_padding_ranks);
        for (int u = 0; u < n_units; u++) free(units[u].params);
        free(units);
    }
    for (int u = 0; u < n_units; u++) free(ref[u].params);
    free(ref);
    model_free(&m);
}

/* FSDP2's shards (fsdp.c, section 14), from the rule itself: on N ranks,
 * rank r's shard holds rows [r * c, (r + 1) * c) of every parameter, c =
 * ceil(rows / N), each piece padded with zero rows to c and the pieces one
 * after another in the unit's parameter order; the values are the 1-rank
 * run's. N = 20 and 64 leave 16-row parameters (norms, biases) with ranks
 * that hold only padding of them. */
static void test_fsdp2_shards(void) {
    Config cfg;
    char err[256];
    char *argv[] = {(char *)"t", (char *)"--model", (char *)"tiny", (char *)"--fsdp2"};
    config_parse(&cfg, 4, argv, err, sizeof(err));
    const int worlds[] = {1, 2, 3, 5, 7, 20, 64};
    Model m;
    model_build(&m, &cfg);
    long total = m.total_numel;
    float *whole = (float *)calloc((size_t)total + 1, sizeof(float)); /* by hand, 1 rank */
    for (int i = 0, at = 0; i < m.n_params; at += (int)m.params[i].numel, i++)
        for (long e = 0; e < m.params[i].numel; e++)
            whole[at + e] = param_init_value(&m.params[i], i, e, cfg.seed);
    int n_units = autowrap(&m, AUTO_WRAP_SIZE, 1);
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++) {
        int N = worlds[w], ok = 1;
        long padding = 0;
        Unit *units = (Unit *)calloc((size_t)n_units, sizeof(Unit));
        units_layout(units, n_units, &m, N, &cfg);
        for (int u = 0; u < n_units; u++) {
            Unit *x = &units[u];
            long want = 0; /* the shard by the rule: the sum of ceil(rows / N) * cols */
            for (int k = 0; k < x->n_params; k++) {
                const Param *p = &m.params[x->params[k]];
                want += (p->shape[0] + N - 1) / N * (p->numel / p->shape[0]);
            }
            if (x->shard != want || x->padded != (long)N * want) { /* no values to read there */
                ok = 0;
                free(x->params);
                free(x->chunk_at);
                continue;
            }
            float *shards = (float *)calloc((size_t)x->padded + 1, sizeof(float));
            for (int r = 0; r < N; r++) unit_init_shard(x, &m, r, cfg.seed, shards + (long)r * x->shard);
            long at = 0; /* where parameter k's rows start in a shard, by the rule */
            for (int k = 0; k < x->n_params; k++) {
                const Param *p = &m.params[x->params[k]];
                long rows = p->shape[0], cols = p->numel / rows, c = (rows + N - 1) / N;
                long first = 0; /* p's place among all parameters, model order */
                for (int i = 0; i < x->params[k]; i++) first += m.params[i].numel;
                for (int r = 0; r < N; r++)
                    for (long row = 0; row < c; row++)
                        for (long col = 0; col < cols; col++) {
                            float got = shards[(long)r * x->shard + at + row * cols + col];
                            long g = (long)r * c + row; /* the parameter's row */
                            if (g < rows) ok &= got == whole[first + g * cols + col];
                            else { ok &= got == 0.0f; padding++; }
                        }
                at += c * cols;
            }
            ok &= x->shard == at && x->padded == (long)N * at;
            free(shards);
            free(x->params);
            free(x->chunk_at);
        }
        free(units);
        char what[64];
        snprintf(what, sizeof(what), "FSDP2 shards N=%d", N);
        check(ok, what, "rank r holds rows [r*c, (r+1)*c) of each parameter, c = ceil(rows/N); %ld padding elements, all 0", padding);
    }
    free(whole);
    model_free(&m);
}

/* ---- the network cost model (sim/net.c) -------------------------------------
 * By hand, ethernet (alpha 30 us, 3.125 GB/s), 4 ranks, a 1 MiB buffer:
 *   all-gather = 3 * 30 us + 3/4 * 1048576 B / 3.125e9 B/s
 *              = 90 us + 251.66 us = 341.66 us;  all-reduce twice: 683.32 us.
 * nvlink (3 us, 450 GB/s), 8 ranks, 64 MiB: 21 us + 7/8 * 67108864 / 450e9
 *              = 21 us + 130.49 us = 151.49 us. One rank moves nothing. */
static void test_net_model(void) {
    const struct { const char *net; int kind, world; double bytes, expect_us; } cases[] = {
        {"ethernet", COMM_ALL_GATHER, 4, 1048576.0, 341.66},
        {"ethernet", COMM_REDUCE_SCATTER, 4, 1048576.0, 341.66},
        {"ethernet", COMM_ALL_REDUCE, 4, 1048576.0, 683.32},
        {"nvlink", COMM_ALL_GATHER, 8, 67108864.0, 151.49},
        {"nvlink", COMM_ALL_GATHER, 1, 67108864.0, 0.0},
        {"none", COMM_ALL_REDUCE, 4, 1048576.0, 0.0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const NetModel *net = net_model_find(cases[i].net);
        double us = net ? 1e6 * net_collective_seconds(net, cases[i].kind, cases[i].world, cases[i].bytes) : -1.0;
        char what[80];
        snprintf(what, sizeof(what), "net %s %s N=%d", cases[i].net, COMM_KIND_NAMES[cases[i].kind], cases[i].world);
        check(fabs(us - cases[i].expect_us) < 0.01, what, "%.2f us, by hand %.2f us", us, cases[i].expect_us);
    }
    check(net_model_find("carrier-pigeon") == NULL, "net: unknown name is refused", "net_model_find returns NULL");
}

/* ---- --data: mapped, not copied ------------------------------------------------ */

/* A field of /proc/self/status in KiB ("RssAnon", "VmSize"), or -1. */
static long proc_status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, field, n) && line[n] == ':') v = atol(line + n + 1);
    if (f) fclose(f);
    return v;
}

/* Loading a 64 MiB file must not copy it into this process's private
 * memory (RssAnon): a copy per rank is what made a 2 GiB file cost 8 GiB on
 * 4 ranks. The bytes must still be the file's. */
static void test_data_mapped(void) {
    enum { SIZE = 64 << 20 };
    char path[] = "/tmp/fsdp-data-XXXXXX", err[1024] = "";
    int fd = mkstemp(path);
    unsigned char *chunk = (unsigned char *)malloc(1 << 20);
    for (long i = 0; i < (1 << 20); i++) chunk[i] = (unsigned char)(i * 7 % 251);
    int wrote = fd >= 0;
    for (int k = 0; k < SIZE >> 20 && wrote; k++) wrote = write(fd, chunk, 1 << 20) == 1 << 20;
    if (fd >= 0) close(fd);
    long before = proc_status_kib("RssAnon");
    Corpus c;
    memset(&c, 0, sizeof(c));
    Config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.context = 8; /* the byte MLP's */
    int rc = wrote ? corpus_load_file(&c, "--data", path, &cfg, err, sizeof(err)) : -1;
    long grown = proc_status_kib("RssAnon") - before;
    int same = rc == 0 && c.len == SIZE;
    for (long i = 0; same && i < SIZE; i += 4093) same = c.bytes[i] == chunk[i % (1 << 20)];
    check(rc == 0 && same, "data: --data file loaded byte for byte", "rc %d, %ld bytes %s", rc,
          rc == 0 ? c.len : 0L, same ? "equal to the file" : "DIFFER");
    if (before < 0)
        printf("  skip data: no /proc/self/status here, so private memory cannot be measured\n");
    else
        check(rc == 0 && c.mapped && grown < 4096, "data: --data is mapped, not copied",
              "private memory grew %ld KiB for a %d MiB file (limit 4096 KiB)", grown, SIZE >> 20);
    if (rc == 0) corpus_release(&c);
#ifndef __SANITIZE_ADDRESS__ /* AddressSanitizer needs address space of its own */
    /* A mapping that cannot be made is reported as such (it used to say it
     * "could not read all bytes"): leave 16 MiB of address space free. */
    struct rlimit old, tight;
    long vm = proc_status_kib("VmSize");
    if (vm > 0 && getrlimit(RLIMIT_AS, &old) == 0) {
        tight = old;
        tight.rlim_cur = (rlim_t)vm * 1024 + (16 << 20);
        setrlimit(RLIMIT_AS, &tight);
        memset(&c, 0, sizeof(c));
        rc = corpus_load_file(&c, "--data", path, &cfg, err, sizeof(err));
        setrlimit(RLIMIT_AS, &old);
        check(rc == 2 && strstr(err, "cannot map") != NULL, "data: a failed mapping says so",
              "rc %d: %s", rc, err);
        if (rc == 0) corpus_release(&c);
    }
#endif
    unlink(path);
    free(chunk);
}

/* ---- errors ------------------------------------------------------------------ */

/* FATAL's message is one write (core.h says why: mpirun may put a rank's
 * stdout between two writes). A child process calls FATAL with its stderr on
 * a SOCK_SEQPACKET socket, which keeps every write a record of its own: the
 * parent must read one record, holding the whole message. It runs before
 * MPI_Init, so the child exits (1) where it would call MPI_Abort. */
static void test_fatal_one_write(void) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) {
        check(0, "errors: FATAL writes its message once", "socketpair failed");
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        dup2(sv[1], STDERR_FILENO);
        FATAL("the hint", "unit %d (%s) went wrong", 2, "blocks.1");
    }
    close(sv[1]);
    char record[4096];
    int records = 0, whole = 0;
    ssize_t n;
    while ((n = read(sv[0], record, sizeof(record) - 1)) > 0) {
        record[n] = '\0';
        records++;
        whole = strstr(record, "] error at") &&
                strstr(record, "unit 2 (blocks.1) went wrong\nHINT: the hint\n");
    }
    close(sv[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    check(records == 1 && whole && WIFEXITED(status) && WEXITSTATUS(status) == 1,
          "errors: FATAL writes its message once", "%d write(s), the last %s, exit %d", records,
          whole ? "the whole message" : "not it", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int main(int argc, char **argv) {
    printf("errors\n");
    test_fatal_one_write();
    int provided = 0; /* fsdp.c's communication thread needs MPI_THREAD_MULTIPLE */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    printf("layer gradients vs finite differences\n");
    test_linear();
    test_layernorm();
    test_gelu();
    test_embedding();
    test_embedding_grouped();
    test_crossentropy();
    printf("model gradients vs finite differences (tiny, 1 rank)\n");
    test_model_gradients();
    test_gelu_tanh();
    test_gelu_tanh_blocks();
    test_attention();
    test_attention16();
    test_attention_heads();
    test_flash_attention();
    test_matmul_inputs16();
    printf("the CPU matmul against its definition, bit for bit\n");
    test_accumulate_bits();
    test_linear_bits();
    test_stream16();
    test_gpt2_embedding();
    test_gpt2_gradients();
    test_held16_models();
    printf("AdamW\n");
    test_adamw();
    test_adam();
    printf("learning-rate schedules\n");
    test_lr_schedule();
    printf("number formats (mixed precision)\n");
    test_dtypes();
    printf("auto-wrap\n");
    test_autowrap();
    printf("padding and shards\n");
    test_shards();
    test_fsdp2_shards();
    printf("network cost model\n");
    test_net_model();
    printf("data\n");
    test_data_mapped();
    printf("%d check(s) failed\n", failures);
    MPI_Finalize();
    return failures ? 1 : 0;
}
