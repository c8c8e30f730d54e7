/* ============================================================================
 * kernels/transformer.h — the layers GPT-2 adds to
 * kernels/layers.h: GELU's tanh form, token and position embeddings, and
 * causal multi-head attention, each forward beside its backward, as
 * element functions that the CPU loops over and a GPU runs one thread per
 * element (FOR_EACH). fsdp.c includes it in place; model/gpt2.h uses it.
 *
 * May include core.h and the other kernels/ headers; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_KERNELS_TRANSFORMER_H
#define FSDP_KERNELS_TRANSFORMER_H
#include "../core.h"
#include "backend.h"
#include "layers.h"
#include "flash.h" /* the same, a tile at a time on the tensor cores (GPU) */

/* GPT-2's GELU, Hugging Face's "gelu_new": the tanh approximation
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), not nn.GELU()'s erf. */
#define GELU_TANH_K 0.7978845608f /* sqrt(2 / pi) */
/* tanh u = 1 - 2 / (e^(2u) + 1): one expf, which compilers vectorise, where
 * libm's tanhf is a call per element (a sixth of a gpt2-mini step on the
 * CPU); exact at both ends (e^(2u) = inf gives 1, 0 gives -1), and within
 * 2e-7 of tanh everywhere (measured over [-20, 20]) */
FSDP_HD static inline float tanh_of_exp(float e) { return 1.0f - 2.0f / (e + 1.0f); }
FSDP_HD static inline float fast_tanh(float u) { return tanh_of_exp(expf(2.0f * u)); }
/* GELU's tanh's argument; GELU and its derivative given th = tanh of it */
FSDP_HD static inline float gelu_tanh_arg(float x) {
    return GELU_TANH_K * (x + 0.044715f * x * x * x);
}
FSDP_HD static inline float gelu_tanh_of(float x, float th) { return 0.5f * x * (1.0f + th); }
FSDP_HD static inline float gelu_tanh_grad_of(float x, float th) {
    float du = GELU_TANH_K * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}
FSDP_HD static inline float gelu_tanh(float x) {
    return gelu_tanh_of(x, fast_tanh(gelu_tanh_arg(x)));
}
FSDP_HD static inline float gelu_tanh_grad(float x) {
    return gelu_tanh_grad_of(x, fast_tanh(gelu_tanh_arg(x)));
}
/* from c_fc's output to mlp.c_proj's input, both held */
FSDP_HD static inline void gelu_tanh_forward_one(long i, void *out, const void *inp, Dtype d,
                                                 Dtype held) {
    store_matmul_input(out, i, gelu_tanh(load_as(inp, i, held)), d, held);
}
/* ... written, not added: c_fc's output gradient, from mlp.c_proj's input
 * gradient (all three held as a matmul's input) */
FSDP_HD static inline void gelu_tanh_backward_one(long i, void *dinp, const void *dout,
                                                  const void *inp, Dtype d, Dtype held) {
    float g = load_as(dout, i, held) * gelu_tanh_grad(load_as(inp, i, held));
    store_matmul_input(dinp, i, g, d, held);
}

/* element i of out (B*T, D), the residual stream (held: kernels/layers.h):
 * channel i % D of token i / D's embedding (a parameter's value, held in
 * wh: of param_dtype already, so held exactly) */
FSDP_HD static inline void token_embedding_forward_one(long i, void *out, const int *tokens,
                                                       const void *wte, Dtype wh, int D,
                                                       Dtype held) {
    store_as(out, i, load_as(wte, (long)tokens[i / D] * D + i % D, wh), held);
}
/* ... plus its position's: row b*T + t gets wpe row t, the sum rounded to d */
FSDP_HD static inline void position_embedding_forward_one(long i, void *out, const void *wpe,
                                                          Dtype wh, int T, int D, Dtype d,
                                                          Dtype held) {
    float x = load_as(out, i, held) + load_as(wpe, ((i / D) % T) * D + i % D, wh);
    store_as(out, i, round_to(x, d), held);
}
/* element i = t*D + c of wpe's gradient (held in gh): the sum over the B
 * sequences of the residual stream's gradient (held) */
FSDP_HD static inline void position_embedding_backward_one(long i, void *dwpe, const void *dout,
                                                           int B, int T, int D, Dtype held,
                                                           Dtype gh) {
    float g = 0.0f;
    for (int b = 0; b < B; b++) g += load_as(dout, (long)b * T * D + i, held);
    store_as(dwpe, i, load_as(dwpe, i, gh) + g, gh);
}

/* ---- causal multi-head attention --------------------------------------------
 * qkv (B, T, 3D) is c_attn's output: q, k and v side by side, and head h
 * their columns [h*hd, (h+1)*hd) with hd = D / H. Row r = (b*H + h)*T + t
 * of the attention is position t of head h of sequence b: its query q_t
 * meets the keys k_s of positions s <= t (causal: nothing from the future)
 *   score_s = q_t . k_s / sqrt(hd)       p = softmax(score)     y_t = sum_s p_s v_s
 * and y (B, T, D) puts the heads side by side again for c_proj. att
 * (B, H, T, T) keeps every p for backward: B*H*T^2 numbers, the term of
 * the activation memory that grows with T squared, and the first thing
 * activation checkpointing saves. (--attention flash, at the end of
 * this file, recomputes p in backward instead of keeping it.) */

/* the index of element 0 of q (part 0), k (1) or v (2) of position t, head h, sequence b */
FSDP_HD static inline const float *attention_vec(const float *qkv, long b, int t, int part,
                                                 int h, int T, int D, int hd) {
    return qkv + qkv_index(b, t, part, h, T, D, hd);
}

/* The causal softmax of row t, in place: p[0..t] holds the scaled scores,
 * and then P, rounded to format d, 0 past t. (Its own function because the
 * CPU's blocked path below computes the scores another way, then calls
 * this: the same operations in the same order, so the same bits.) */
FSDP_HD static inline void attention_softmax(float *p, int t, int T, Dtype d) {
    float zmax = -INFINITY, sum = 0.0f;
    for (int s = 0; s <= t; s++) zmax = p[s] > zmax ? p[s] : zmax;
    for (int s = 0; s <= t; s++) {
        p[s] = expf(p[s] - zmax);
        sum += p[s];
    }
    for (int s = 0; s < T; s++) p[s] = s <= t ? round_to(p[s] / sum, d) : 0.0f;
}
/* ... and its backward, in place: ds[0..t] holds dp, then dscore (format d;
 * past t untouched). attention_backward_query says why. */
FSDP_HD static inline void attention_softmax_backward(float *ds, const float *p, int t, Dtype d) {
    float pdp = 0.0f;
    for (int s = 0; s <= t; s++) pdp += p[s] * ds[s];
    for (int s = 0; s <= t; s++) ds[s] = round_to(p[s] * (ds[s] - pdp), d);
}

/* With 16-bit parameters (d = bf16 or fp16) P is kept in that format, as
 * PyTorch's autocast keeps it: rounded as stored, and used rounded. */
FSDP_HD static inline void attention_forward_row(long r, float *y, float *att, const float *qkv,
                                                 int T, int D, int H, Dtype d) {
    int hd = D / H, t = (int)(r % T), h = (int)((r / T) % H);
    long b = r / ((long)T * H);
    float scale = 1.0f / sqrtf((float)hd);
    const float *q = attention_vec(qkv, b, t, 0, h, T, D, hd);
    float *p = att + r * T;
    for (int s = 0; s <= t; s++) {
        const float *k = attention_vec(qkv, b, s, 1, h, T, D, hd);
        float z = 0.0f;
        for (int j = 0; j < hd; j++) z += q[j] * k[j];
        p[s] = z * scale;
    }
    attention_softmax(p, t, T, d);
    float *out = y + (b * T + t) * D + (long)h * hd;
    for (int j = 0; j < hd; j++) out[j] = 0.0f;
    for (int s = 0; s <= t; s++) {
        const float *v = attention_vec(qkv, b, s, 2, h, T, D, hd);
        for (int j = 0; j < hd; j++) out[j] += p[s] * v[j];
    }
    for (int j = 0; j < hd; j++) out[j] = round_to(out[j], d); /* c_proj's input */
}

/* Backward, part 1, row r: the gradient of the scores, then of q_t.
 *   dp_s = dy_t . v_s                       (y_t = sum_s p_s v_s)
 *   dscore_s = p_s (dp_s - sum_u p_u dp_u)  (softmax's Jacobian is
 *       diag(p) - p p^T: a change in one score moves every p of the row,
 *       and the row's p always sum to 1, hence the subtracted mean)
 *   dq_t = sum_s dscore_s k_s / sqrt(hd)
 * datt row r keeps dscore for part 2 (in format d, as P). Each row writes
 * only its own q: written whole and rounded to d, as c_attn's output
 * gradient is held (a matmul's input, kernels/layers.h). */
FSDP_HD static inline void attention_backward_query(long r, float *dqkv, float *datt,
                                                    const float *dy, const float *qkv,
                                                    const float *att, int T, int D, int H,
                                                    Dtype d) {
    int hd = D / H, t = (int)(r % T), h = (int)((r / T) % H);
    long b = r / ((long)T * H);
    float scale = 1.0f / sqrtf((float)hd);
    const float *p = att + r * T, *g = dy + (b * T + t) * D + (long)h * hd;
    float *ds = datt + r * T;
    for (int s = 0; s <= t; s++) {
        const float *v = attention_vec(qkv, b, s, 2, h, T, D, hd);
        float dp = 0.0f;
        for (int j = 0; j < hd; j++) dp += g[j] * v[j];
        ds[s] = dp;
    }
    attention_softmax_backward(ds, p, t, d);
    float *dq = dqkv + (b * T + t) * 3L * D + (long)h * hd;
    for (int j = 0; j < hd; j++) dq[j] = 0.0f;
    for (int s = 0; s <= t; s++) {
        const float *k = attention_vec(qkv, b, s, 1, h, T, D, hd);
        for (int j = 0; j < hd; j++) dq[j] += ds[s] * k[j] * scale;
    }
    for (int j = 0; j < hd; j++) dq[j] = round_to(dq[j], d);
}

/* Backward, part 2, row r = (b*H + h)*T + s: key and value s, which every
 * later query t >= s read, so they gather from the column s of datt and
 * att (a row per thread writing into k_s and v_s of another row would
 * collide on a GPU; a column per thread does not).
 *   dk_s = sum_t dscore_ts q_t / sqrt(hd)     dv_s = sum_t p_ts dy_t
 * (written whole and rounded to d, as dq) */
FSDP_HD static inline void attention_backward_key(long r, float *dqkv, const float *datt,
                                                  const float *dy, const float *qkv,
                                                  const float *att, int T, int D, int H,
                                                  Dtype d) {
    int hd = D / H, s = (int)(r % T), h = (int)((r / T) % H);
    long b = r / ((long)T * H), row0 = r - s; /* row of (b, h, t = 0) */
    float scale = 1.0f / sqrtf((float)hd);
    float *dk = dqkv + (b * T + s) * 3L * D + D + (long)h * hd, *dv = dk + D;
    for (int j = 0; j < hd; j++) dk[j] = dv[j] = 0.0f;
    for (int t = s; t < T; t++) {
        float ds = datt[(row0 + t) * T + s], p = att[(row0 + t) * T + s];
        const float *q = attention_vec(qkv, b, t, 0, h, T, D, hd);
        const float *g = dy + (b * T + t) * D + (long)h * hd;
        for (int j = 0; j < hd; j++) {
            dk[j] += ds * q[j] * scale;
            dv[j] += p * g[j];
        }
    }
    for (int j = 0; j < hd; j++) dk[j] = round_to(dk[j], d), dv[j] = round_to(dv[j], d);
}

/* ---- the layers ------------------------------------------------------------- */

#ifndef __CUDACC__
/* The CPU in fp32: expf is a call an element, and a call in a loop keeps
 * the compiler from vectorising the arithmetic around it (GELU was a
 * quarter of a gpt2-mini step). So a block at a time: e = e^(2u), a call
 * each, then the rest of GELU (or its derivative) 16 lanes at a time. Each
 * element gets gelu_tanh_forward_one's (backward_one's) operations in the
 * same order, the same functions: the same bits (tests/test_units.c).
 * dout NULL: forward, out = gelu(x); else out = dout * gelu'(x).
 * Returns 0, having run nothing, where this does not apply (16 bits). */
enum { GELU_BLOCK = 512 };
static int gelu_tanh_blocks(float *out, const float *dout, const float *x, long n, Dtype d) {
    if (d != DTYPE_FP32 || backend.gemm_dtype != DTYPE_FP32) return 0;
    float e[GELU_BLOCK];
    for (long i0 = 0; i0 < n && !backend.dry; i0 += GELU_BLOCK) {
        long m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        const float *xb = x + i0;
        for (long j = 0; j < m; j++) e[j] = expf(2.0f * gelu_tanh_arg(xb[j]));
        if (dout)
            for (long j = 0; j < m; j++)
                out[i0 + j] = dout[i0 + j] * gelu_tanh_grad_of(xb[j], tanh_of_exp(e[j]));
        else
            for (long j = 0; j < m; j++) out[i0 + j] = gelu_tanh_of(xb[j], tanh_of_exp(e[j]));
    }
    return 1;
}
#else /* a thread an element already runs the arithmetic side by side */
#define gelu_tanh_blocks(...) 0
#endif

/* out = gelu_new(inp), a matmul's input (rounded to d), from c_fc's
 * output; both held in gemm_dtype */
static void gelu_tanh_forward(void *out, const void *inp, long n, Dtype d) {
    if (gelu_tanh_blocks((float *)out, NULL, (const float *)inp, n, d)) return;
    FOR_EACH(n, gelu_tanh_forward_one, out, inp, d, backend.gemm_dtype);
}
/* dinp = dout * gelu_new'(inp), written (not added), held as a matmul's input */
static void gelu_tanh_backward(void *dinp, const void *dout, const void *inp, long n, Dtype d) {
    if (gelu_tanh_blocks((float *)dinp, (const float *)dout, (const float *)inp, n, d)) return;
    FOR_EACH(n, gelu_tanh_backward_one, dinp, dout, inp, d, backend.gemm_dtype);
}

/* ---- GELU inside cuBLASLt's products ----------------------------------------
 * With 16-bit parameters on a GPU, c_fc's product and the GELU after it are
 * one cuBLASLt call: its GELU_AUX_BIAS epilogue adds the bias, writes the
 * sum (GELU's input, which backward reads) and its GELU, both as the tile of
 * sums leaves the tensor cores. Backward, mlp.c_proj's input gradient comes
 * out of its product already multiplied by GELU's derivative (the DGELU
 * epilogue reads GELU's input back). Of the GELU kernels' passes over the
 * (B*T, 4D) activations, three values go: c_fc's output read back
 * (forward); c_proj's input gradient written and read back (backward): 6
 * bytes a value, about 0.5 ms of GPT-2 124M's step at 8 x 1024 tokens on an
 * H100 by the roofline, and 24 launches. llm.c does the same on Hopper; on
 * Ampere and Ada it found cuBLASLt's fused GELU slower, so by default
 * (backend.gelu_fusion) only GPUs of compute capability 9 and later fuse;
 * FSDP_GELU_FUSION=0 or 1 decides instead, and make bench-gpu times both.
 * cuBLASLt's GELU is the tanh form, GPT-2's gelu_new (XLA hands it
 * jax.nn.gelu(approximate=True) alone). It is applied to the fp32 sum, where
 * PyTorch's autocast (and the CPU here) rounds c_fc's output to 16 bits
 * first: outputs may differ in their last bit (tests/test_kernels.cu bounds
 * the difference). Each returns 0, having run nothing, where it does not
 * apply (fp32, --plan, the CPU, fusion off) or cuBLASLt has no algorithm;
 * the caller then runs the product and the GELU kernel apart. */
#ifdef __CUDACC__
/* pre = inp @ weight^T + bias (B, O), out = gelu_new(pre), pre held as
 * out is, as linear_forward's product with the bias epilogue
 * (kernels/layers.h) */
static int linear_gelu_tanh_forward(const Linear *l, Buf out, void *pre, const void *inp, int B) {
    int I = l->in, O = l->out;
    /* the bias in out's type; pre's rows a multiple of 8 values, as cuBLASLt asks */
    if (!backend.gelu_fusion || backend.dry || backend.gemm_dtype == DTYPE_FP32 ||
        l->bias.dtype != out.dtype || !l->bias.data || O % 8)
        return 0;
    LtProduct p = {CUBLAS_OP_T, CUBLAS_OP_N, O, B, I, l->weight.data, l->weight.dtype, inp, I, I,
                   out.data, out.dtype, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, l->bias.data, pre};
    return lt_matmul(&p);
}
/* mlp.c_proj's backward from dout (B, O): dpre (B, I) = (dout @ weight) *
 * gelu_new'(pre), written (c_fc's output gradient; pre its output), and
 * the weight's and bias's gradients added, as linear_backward's; all held */
static int linear_backward_dgelu_tanh(const Linear *l, void *dpre, const void *dout,
                                      const void *inp, const void *pre, int B) {
    Dtype held = backend.gemm_dtype;
    int I = l->in, O = l->out;
    if (!backend.gelu_fusion || backend.dry || held == DTYPE_FP32 || I % 8) return 0;
    LtProduct p = {CUBLAS_OP_N, CUBLAS_OP_N, I, B, O, l->weight.data, l->weight.dtype, dout, I, O,
                   dpre, held, CUBLASLT_EPILOGUE_DGELU, NULL, (void *)pre};
    if (!lt_matmul(&p)) return 0;
    matmul_backward_weight(l, held_buf(dout), O, inp, B);
    if (l->dbias.data) bias_backward(l->dbias, held_buf(dout), B, O);
    return 1;
}
#else /* the CPU rounds c_fc's output first, as autocast does: the product, then GELU */
#define linear_gelu_tanh_forward(...) 0
#define linear_backward_dgelu_tanh(...) 0
#endif
/* ---- attention as matmuls: the GPU's formulation ----------------------------
 * On a GPU the products of attention are matmuls, each a batch of H (one
 * per head) for each of the B sequences, which cuBLAS runs as strided
 * batched GEMMs; between them, a warp a row computes the causal softmax
 * and its backward (causal_softmax). The same mathematics as the rows
 * above, the sums in another order. The CPU build trains with the rows'
 * sums (a head at a time, blocked: attention_forward_heads, below); it
 * compiles this formulation too, with heads_gemm as plain loops and the
 * softmaxes a row per FOR_EACH element, so that tests/test_units.c checks
 * its index arithmetic against the rows on any machine (the GPU build
 * swaps in cuBLAS and the warp kernels, which tests/test_kernels.cu checks).
 *
 * In fp32, or in 16 bits with --param-dtype bf16 or fp16: then attention's
 * inputs are values of that format (q, k, v are c_attn's rounded output,
 * dy c_proj's rounded input gradient), packed once, and P and its
 * gradient dS are kept in it too, as PyTorch's autocast keeps them: the
 * B*H*T^2 matrices take half the bytes, and every product runs on the
 * tensor cores. The scores and dP, which the GEMMs accumulate in fp32,
 * stay fp32 either way. The rows round P and dS where this stores them.
 *
 * cuBLAS is column-major. Head h of sequence b: its queries, a row-major
 * (T, hd) matrix with rows 3D apart, are to cuBLAS the column-major (hd, T)
 * matrix Q at qkv + b*T*3D + h*hd with leading dimension 3D; K at +D, V at
 * +2D, the same way. The row-major (T, T) probabilities P[t][s] are the
 * column-major (T, T) matrix P^T with leading dimension T; the heads of
 * one sequence lie hd apart in qkv and y, T*T apart in att. */

/* The softmax of scores row r (fp32, scaled here; causal mask; used as
 * scratch) into P row r, format d, zero past t. In fp32 P may be the
 * scores themselves. */
FSDP_HD static inline void causal_softmax_row(long r, void *p, float *scores, int T, float scale,
                                              Dtype d) {
    int t = (int)(r % T);
    float *z = scores + r * T, zmax = -INFINITY, sum = 0.0f;
    for (int s = 0; s <= t; s++) zmax = fmaxf(zmax, z[s] * scale);
    for (int s = 0; s <= t; s++) {
        z[s] = expf(z[s] * scale - zmax);
        sum += z[s];
    }
    for (int s = 0; s < T; s++) store_as(p, r * T + s, s <= t ? z[s] / sum : 0.0f, d);
}
/* dS = P (dP - sum_u P_u dP_u) of row r (attention_backward_query), P and
 * dS in format d, dP in fp32. In fp32 dS may be written over dP. */
FSDP_HD static inline void causal_softmax_backward_row(long r, void *ds, const float *dp,
                                                       const void *p, int T, Dtype d) {
    int t = (int)(r % T);
    const float *g = dp + r * T;
    float pdp = 0.0f;
    for (int s = 0; s <= t; s++) pdp += load_as(p, r * T + s, d) * g[s];
    for (int s = 0; s < T; s++)
        store_as(ds, r * T + s, s <= t ? load_as(p, r * T + s, d) * (g[s] - pdp) : 0.0f, d);
}

/* The softmaxes over rows of T scores, forward and backward. On a GPU a
 * warp a row, as LayerNorm (kernels/layers.h): thread r would read row r
 * alone, and a warp's threads T floats apart. The same arithmetic as the
 * rows above, the sums in the warp's order. (No __restrict__: in fp32 the
 * output may be the input.) */
#ifdef __CUDACC__
__global__ static void causal_softmax_warp(void *p, float *scores, long rows, int T, float scale,
                                           Dtype d) {
    long r = (long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = (int)(r % T);
    float *z = scores + r * T, zmax = -INFINITY, sum = 0.0f;
    for (int s = lane; s <= t; s += 32) zmax = fmaxf(zmax, z[s] * scale);
    zmax = warp_max(zmax);
    for (int s = lane; s <= t; s += 32) sum += z[s] = expf(z[s] * scale - zmax);
    sum = warp_sum(sum);
    for (int s = lane; s < T; s += 32) store_as(p, r * T + s, s <= t ? z[s] / sum : 0.0f, d);
}
__global__ static void causal_softmax_backward_warp(void *ds, const float *dp, const void *p,
                                                    long rows, int T, Dtype d) {
    long r = (long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = (int)(r % T);
    const float *g = dp + r * T;
    float pdp = 0.0f;
    for (int s = lane; s <= t; s += 32) pdp += load_as(p, r * T + s, d) * g[s];
    pdp = warp_sum(pdp);
    for (int s = lane; s < T; s += 32)
        store_as(ds, r * T + s, s <= t ? load_as(p, r * T + s, d) * (g[s] - pdp) : 0.0f, d);
}
static void causal_softmax(void *p, float *scores, long rows, int T, float scale, Dtype d) {
    if (backend.dry || rows <= 0) return;
    causal_softmax_warp<<<warp_blocks(rows), 32 * WARPS_PER_BLOCK, 0, backend.compute>>>(
        p, scores, rows, T, scale, d);
    cudaCheck(cudaGetLastError());
}
static void causal_softmax_backward(void *ds, const float *dp, const void *p, long rows, int T,
                                    Dtype d) {
    if (backend.dry || rows <= 0) return;
    causal_softmax_backward_warp<<<warp_blocks(rows), 32 * WARPS_PER_BLOCK, 0,
                                   backend.compute>>>(ds, dp, p, rows, T, d);
    cudaCheck(cudaGetLastError());
}
#else
static void causal_softmax(void *p, float *scores, long rows, int T, float scale, Dtype d) {
    FOR_EACH(rows, causal_softmax_row, p, scores, T, scale, d);
}
static void causal_softmax_backward(void *ds, const float *dp, const void *p, long rows, int T,
                                    Dtype d) {
    FOR_EACH(rows, causal_softmax_backward_row, ds, dp, p, T, d);
}
#endif

#ifdef __CUDACC__
typedef cublasOperation_t GemmOp;
#define GEMM_N CUBLAS_OP_N
#define GEMM_T CUBLAS_OP_T
#else
typedef enum { GEMM_N, GEMM_T } GemmOp;
#endif

/* C (m, n) = alpha op(A) op(B) + beta C, column-major, for H matrices
 * sa, sb, sc apart. A and B hold values of format d: fp32
 * (cublasSgemmStridedBatched) or packed 16-bit ones (cublasGemmStrided-
 * BatchedEx: the tensor cores, fp32 accumulation); C is fp32, or with d
 * 16-bit may be d too (dc: the sum rounded once, as it is written). On
 * the CPU what it computes (beta 0: C is not read, as cuBLAS does not). */
static void heads_gemm(GemmOp ta, GemmOp tb, int m, int n, int k, float alpha, const void *A,
                       int lda, long sa, const void *B, int ldb, long sb, float beta, void *C,
                       Dtype dc, int ldc, long sc, int H, Dtype d) {
#ifdef __CUDACC__
    if (d == DTYPE_FP32) {
        cublasCheck(cublasSgemmStridedBatched(backend.cublas, ta, tb, m, n, k, &alpha,
                                              (const float *)A, lda, sa, (const float *)B, ldb,
                                              sb, &beta, (float *)C, ldc, sc, H));
        return;
    }
    cudaDataType_t t = cuda_type(d), tc = cuda_type(dc);
    cublasCheck(cublasGemmStridedBatchedEx(backend.cublas, ta, tb, m, n, k, &alpha, A, t, lda, sa,
                                           B, t, ldb, sb, &beta, C, tc, ldc, sc, H,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
#else
    for (int h = 0; h < H; h++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float sum = 0.0f;
                for (int p = 0; p < k; p++)
                    sum += load_as(A, h * sa + (ta == GEMM_T ? p + (long)i * lda
                                                             : i + (long)p * lda), d) *
                           load_as(B, h * sb + (tb == GEMM_T ? j + (long)p * ldb
                                                             : p + (long)j * ldb), d);
                long c = h * sc + i + (long)j * ldc;
                float v = beta == 0.0f ? alpha * sum : alpha * sum + beta * load_as(C, c, dc);
                store_as(C, c, v, dc);
            }
#endif
}

/* y (B, T, D), c_proj's input, from qkv (B, T, 3D), c_attn's output (both
 * matmuls' inputs: held in gemm_dtype); P into att (B, H, T, T), format d.
 * (inline: the CPU program trains with the rows' sums; tests/test_units.c
 * calls these) */
static inline void attention_forward_gemm(void *y, void *att, const void *qkv, int B, int T,
                                          int D, int H, Dtype d) {
    if (backend.dry) return; /* --plan */
    int hd = D / H, ld = 3 * D;
    long TT = (long)T * T, n = (long)B * T * ld;
    Dtype held = backend.gemm_dtype;
    const void *in = gemm_input(qkv, held, n, d);
    float *scores = (float *)gpu_scratch((size_t)H * TT * sizeof(float), "hold the scores");
    for (int b = 0; b < B; b++) {
        const void *q = element_at(in, (long)b * T * ld, d), *k = element_at(q, D, d),
                   *v = element_at(q, 2L * D, d);
        void *p = element_at(att, (long)b * H * TT, d);
        /* P^T (s, t) = k_s . q_t: K^T Q, then the softmax */
        heads_gemm(GEMM_T, GEMM_N, T, T, hd, 1.0f, k, ld, hd, q, ld, hd, 0.0f, scores,
                   DTYPE_FP32, T, TT, H, d);
        causal_softmax(p, scores, (long)H * T, T, 1.0f / sqrtf((float)hd), d);
        /* y_t = sum_s p_ts v_s: Y = V P^T, into the head's columns of y */
        heads_gemm(GEMM_N, GEMM_N, hd, T, T, 1.0f, v, ld, hd, p, T, TT, 0.0f,
                   element_at(y, (long)b * T * D, held), held, D, hd, H, d);
    }
    dev_free(scores, (size_t)H * TT * sizeof(float));
    gemm_input_free(in, qkv, n);
    if (held != d) FOR_EACH((long)B * T * D, round_one, (float *)y, d); /* fp32 slots: the CPU */
}
/* dqkv = the gradient of q, k, v, from y's, dy (c_proj's input gradient):
 * both held as a matmul's input (gemm_dtype); datt (B, H, T, T) fp32 holds
 * dP, and in fp32 dS over it (in 16 bits dS goes to scratch, one sequence
 * at a time) */
static inline void attention_backward_gemm(void *dqkv, float *datt, const void *dy,
                                           const void *qkv, const void *att, int B, int T,
                                           int D, int H, Dtype d) {
    if (backend.dry) return; /* --plan */
    int hd = D / H, ld = 3 * D;
    long TT = (long)T * T, n = (long)B * T * ld, ny = (long)B * T * D;
    float scale = 1.0f / sqrtf((float)hd);
    Dtype held = backend.gemm_dtype;
    const void *in = gemm_input(qkv, held, n, d), *gin = gemm_input(dy, held, ny, d);
    void *ds16 = d == DTYPE_FP32 ? NULL : gpu_scratch((size_t)H * TT * sizeof(uint16_t), "hold dS");
    for (int b = 0; b < B; b++) {
        const void *q = element_at(in, (long)b * T * ld, d), *k = element_at(q, D, d),
                   *v = element_at(q, 2L * D, d), *g = element_at(gin, (long)b * T * D, d),
                   *p = element_at(att, (long)b * H * TT, d);
        void *dq = element_at(dqkv, (long)b * T * ld, held), *dk = element_at(dq, D, held),
             *dv = element_at(dq, 2L * D, held);
        float *dp = datt + b * H * TT;
        void *ds = ds16 ? ds16 : (void *)dp;
        /* dP^T (s, t) = v_s . dy_t, then the softmax's backward */
        heads_gemm(GEMM_T, GEMM_N, T, T, hd, 1.0f, v, ld, hd, g, D, hd, 0.0f, dp, DTYPE_FP32, T,
                   TT, H, d);
        causal_softmax_backward(ds, dp, p, (long)H * T, T, d);
        /* dv_s = sum_t p_ts dy_t: dV = dY P */
        heads_gemm(GEMM_N, GEMM_T, hd, T, T, 1.0f, g, D, hd, p, T, TT, 0.0f, dv, held, ld, hd, H,
                   d);
        /* dq_t = scale sum_s dscore_ts k_s: dQ = scale K dS^T */
        heads_gemm(GEMM_N, GEMM_N, hd, T, T, scale, k, ld, hd, ds, T, TT, 0.0f, dq, held, ld, hd, H,
                   d);
        /* dk_s = scale sum_t dscore_ts q_t: dK = scale Q dS */
        heads_gemm(GEMM_N, GEMM_T, hd, T, T, scale, q, ld, hd, ds, T, TT, 0.0f, dk, held, ld, hd, H,
                   d);
    }
    if (ds16) dev_free(ds16, (size_t)H * TT * sizeof(uint16_t));
    gemm_input_free(gin, dy, ny);
    gemm_input_free(in, qkv, n);
    if (held != d) FOR_EACH((long)B * T * ld, round_one, (float *)dqkv, d); /* the CPU's slots */
}

/* attention_forward, attention_backward: the GEMMs on a GPU, the rows'
 * sums on the CPU (a head at a time, blocked). att (B, H, T, T) holds P:
 * in fp32, or with 16-bit parameters (d) rounded to format d on the CPU
 * and packed in 16 bits on a GPU; y is c_proj's input, held so too (a
 * matmul's input, kernels/layers.h). */
#ifdef __CUDACC__
static void attention_forward(void *y, float *att, const void *qkv, int B, int T, int D, int H,
                              Dtype d) {
    attention_forward_gemm(y, att, qkv, B, T, D, H, d);
}
/* dqkv (B, T, 3D) = the gradient of q, k, v, held as a matmul's input;
 * datt (B, H, T, T) is scratch */
static void attention_backward(void *dqkv, float *datt, const void *dy, const void *qkv,
                               const float *att, int B, int T, int D, int H, Dtype d) {
    attention_backward_gemm(dqkv, datt, dy, qkv, att, B, T, D, H, d);
}
#else
/* The rows, a row at a time: the definition, which tests/test_units.c
 * holds the blocked path to, bit for bit */
static inline void attention_forward_rows(float *y, float *att, const float *qkv, int B, int T,
                                          int D, int H, Dtype d) {
    FOR_EACH((long)B * H * T, attention_forward_row, y, att, qkv, T, D, H, d);
}
static inline void attention_backward_rows(float *dqkv, float *datt, const float *dy,
                                           const float *qkv, const float *att, int B, int T,
                                           int D, int H, Dtype d) {
    FOR_EACH((long)B * H * T, attention_backward_query, dqkv, datt, dy, qkv, att, T, D, H, d);
    FOR_EACH((long)B * H * T, attention_backward_key, dqkv, datt, dy, qkv, att, T, D, H, d);
}

/* ---- the rows' sums, blocked: the CPU's fp32 path ---------------------------
 * The rows above are the definition; a row at a time, though, every dot
 * product reloads its operands and runs at a fraction of the CPU's speed.
 * Here each (sequence, head) computes the same six products at once, as
 * small matmuls through accumulate (kernels/layers.h), whose register
 * blocks keep R x n sums on chip:
 *   scores = Q K^T      y = P V      dP = dY V^T
 *   dQ = dS K           dK = dS^T Q  dV = P^T dY
 * and every sum is the rows' sum, term for term in the rows' order, so
 * every bit is the rows' (tests/test_units.c compares them bit for bit):
 *  - a dot product over hd (scores, dP) is one element of accumulate's
 *    dst, summed over j in increasing order from 0, as the rows do;
 *  - a sum over positions (y, dq: s = 0..t; dk, dv: t = s..T-1) would
 *    meet, in a block of rows, terms another row of the block does not
 *    have (the causal triangle). A 0 term is not always harmless (0 x inf
 *    is NaN), so the block's rows share accumulate for the positions they
 *    all have (the rectangle), and the triangle is added a row at a time,
 *    in order: before the rectangle (dk, dv: t from s) or after it (y, dq:
 *    s up to t). accumulate adds to what dst holds, so the sum goes on;
 *  - dq and dk multiply every term by the scale, (dscore k) / sqrt(hd),
 *    which no product c x src gives: accumulate_scaled, below, is
 *    accumulate with that multiply.
 * The causal structure saves about half the work: scores and dP are
 * computed a block of ATT_COLS keys at a time for the queries t that see
 * them, the sums over positions over s <= t only. The softmaxes are the
 * rows' own functions. */
enum { ATT_COLS = 32, ATT_ROWS = 8 };

/* accumulate (kernels/layers.h) with each term (coef x src) x scale, the
 * two products rounded in that order, as the rows' dq and dk: dst (R, n)
 * += sum over k in increasing order. Register blocks of SCALED_ROWS x
 * SCALED_VEC sums, the rest plainly. (32 wide, as accumulate's blocks:
 * 16 wide, GCC 12 vectorised a block across its 4 rows, shuffling, and
 * ran it slower than the rows did.) */
enum { SCALED_ROWS = 4, SCALED_VEC = 32 };
static void accumulate_scaled_block(float *dst, long ldd, const float *coef, long coef_row,
                                    long coef_col, const float *src, long lds, int K, float scale) {
    float acc[SCALED_ROWS][SCALED_VEC];
    for (int r = 0; r < SCALED_ROWS; r++)
        for (int j = 0; j < SCALED_VEC; j++) acc[r][j] = dst[r * ldd + j];
    for (int k = 0; k < K; k++) {
        const float *s = src + (long)k * lds;
        for (int r = 0; r < SCALED_ROWS; r++) {
            float c = coef[r * coef_row + (long)k * coef_col];
            for (int j = 0; j < SCALED_VEC; j++) acc[r][j] += c * s[j] * scale;
        }
    }
    for (int r = 0; r < SCALED_ROWS; r++)
        for (int j = 0; j < SCALED_VEC; j++) dst[r * ldd + j] = acc[r][j];
}
/* rows [r0, r1), columns [i0, n), plainly */
static void accumulate_scaled_rest(float *dst, const float *coef, long coef_row, long coef_col,
                                   const float *src, int K, int n, int r0, int r1, int i0,
                                   float scale) {
    for (int r = r0; r < r1; r++)
        for (int k = 0; k < K; k++) {
            float c = coef[r * coef_row + (long)k * coef_col], *t = dst + (long)r * n;
            const float *s = src + (long)k * n;
            for (int j = i0; j < n; j++) t[j] += c * s[j] * scale;
        }
}
static void accumulate_scaled(float *dst, const float *coef, long coef_row, long coef_col,
                              const float *src, int R, int K, int n, float scale) {
    int r = 0;
    for (; r + SCALED_ROWS <= R; r += SCALED_ROWS) {
        int i = 0;
        for (; i + SCALED_VEC <= n; i += SCALED_VEC)
            accumulate_scaled_block(dst + (long)r * n + i, n, coef + r * coef_row, coef_row,
                                    coef_col, src + i, n, K, scale);
        accumulate_scaled_rest(dst, coef, coef_row, coef_col, src, K, n, r, r + SCALED_ROWS, i,
                               scale);
    }
    accumulate_scaled_rest(dst, coef, coef_row, coef_col, src, K, n, r, R, 0, scale);
}

/* x's T rows of hd values, ld apart (a head's q, k, v or dy), packed
 * (T, hd): the src of a sum over positions */
static void head_pack_rows(float *out, const float *x, long ld, int T, int hd) {
    for (int t = 0; t < T; t++) memcpy(out + (long)t * hd, x + t * ld, (size_t)hd * sizeof(float));
}
/* ... and transposed, a block of ATT_COLS positions at a time: block s0
 * is the (hd, n) matrix at out + s0 hd, n = min(ATT_COLS, T - s0) */
static void head_pack_cols(float *out, const float *x, long ld, int T, int hd) {
    for (int s0 = 0; s0 < T; s0 += ATT_COLS) {
        int n = T - s0 < ATT_COLS ? T - s0 : ATT_COLS;
        for (int j = 0; j < hd; j++)
            for (int w = 0; w < n; w++) out[(long)s0 * hd + j * n + w] = x[(s0 + w) * ld + j];
    }
}
/* out[t][s] (rows T apart) = (x_t . y_s) scale for s <= t, nothing else
 * written: x's rows ld apart, y packed by head_pack_cols; z is scratch
 * for T x ATT_COLS sums. The queries t >= s0 meet block s0's keys. (scale
 * 1 leaves the sum as it is: dP.) */
static void head_dots(float *out, const float *x, long ld, const float *yt, float *z, int T, int hd,
                      float scale) {
    for (int s0 = 0; s0 < T; s0 += ATT_COLS) {
        int n = T - s0 < ATT_COLS ? T - s0 : ATT_COLS, R = T - s0;
        memset(z, 0, (size_t)R * n * sizeof(float));
        accumulate(z, x + s0 * ld, ld, 1, yt + (long)s0 * hd, R, hd, n);
        for (int t = s0; t < T; t++)
            for (int s = s0; s < s0 + n && s <= t; s++)
                out[(long)t * T + s] = z[(long)(t - s0) * n + s - s0] * scale;
    }
}
/* The sums over positions, in the rows' order. o_t += sum_{s = t0..t}
 * c_ts v_s for t in [t0, t1): the triangle of a block of queries, after
 * the rectangle s < t0. c's rows T apart (P or dS), v packed (T, hd);
 * scaled: each term (c_ts v_s) scale, as dq and dk. */
static void head_prefix_triangle(float *o, const float *c, const float *v, int T, int hd, int t0,
                                 int t1, int scaled, float scale) {
    for (int t = t0; t < t1; t++)
        for (int s = t0; s <= t; s++) {
            float cts = c[(long)t * T + s], *out = o + (long)t * hd;
            const float *vs = v + (long)s * hd;
            if (scaled)
                for (int j = 0; j < hd; j++) out[j] += cts * vs[j] * scale;
            else
                for (int j = 0; j < hd; j++) out[j] += cts * vs[j];
        }
}
/* o_s += sum_{t = s..e-1} c_ts x_t for s in [s0, e): the triangle of a
 * block of keys, before the rectangle t >= e */
static void head_suffix_triangle(float *o, const float *c, const float *x, int T, int hd, int s0,
                                 int e, int scaled, float scale) {
    for (int s = s0; s < e; s++)
        for (int t = s; t < e; t++) {
            float cts = c[(long)t * T + s], *out = o + (long)s * hd;
            const float *xt = x + (long)t * hd;
            if (scaled)
                for (int j = 0; j < hd; j++) out[j] += cts * xt[j] * scale;
            else
                for (int j = 0; j < hd; j++) out[j] += cts * xt[j];
        }
}
/* dst (R, n) += coef (R, K) @ src (K, n), each term scaled or not */
static void head_accumulate(float *dst, const float *coef, long coef_row, long coef_col,
                            const float *src, int R, int K, int n, int scaled, float scale) {
    if (K <= 0) return;
    if (scaled) accumulate_scaled(dst, coef, coef_row, coef_col, src, R, K, n, scale);
    else accumulate(dst, coef, coef_row, coef_col, src, R, K, n);
}

/* Heads narrower than ATT_WIDE channels would leave accumulate's blocks
 * (32 sums wide) idle: n = hd. They take the rectangles transposed, o^T
 * (hd, n) = v^T c^T over a block of n = ATT_COLS positions, the block's
 * coefficients packed into cb (T x ATT_COLS) and its sums into ob (hd x
 * ATT_COLS). Each term is v c where the rows have c v: the same product
 * (only two NaN operands, whose payload x86 takes from the first, could
 * tell them apart, and the sum is NaN either way). */
enum { ATT_WIDE = 32 };
/* o's rows [t0, t0 + n) to ob transposed (to = 1), or back (to = 0) */
static void head_block_transpose(float *o, float *ob, int hd, int t0, int n, int to) {
    for (int w = 0; w < n; w++)
        for (int j = 0; j < hd; j++) {
            float *x = o + (long)(t0 + w) * hd + j, *xt = ob + (long)j * n + w;
            if (to) *xt = *x;
            else *x = *xt;
        }
}

/* o_t = sum_{s = 0..t} c_ts v_s (T, hd): c's rows T apart (P or dS), v
 * packed; scaled: each term (c_ts v_s) scale, as dq. Queries a block at a
 * time: the positions they all see (s < t0), then each its triangle. */
static void head_prefix_sums(float *o, const float *c, const float *v, int T, int hd, int scaled,
                             float scale, float *cb, float *ob) {
    memset(o, 0, (size_t)T * hd * sizeof(float));
    int wide = hd >= ATT_WIDE, step = wide ? ATT_ROWS : ATT_COLS;
    for (int t0 = 0; t0 < T; t0 += step) {
        int n = T - t0 < step ? T - t0 : step;
        if (wide) /* s < t0: rows [t0, t0 + n) of c times v */
            head_accumulate(o + (long)t0 * hd, c + (long)t0 * T, T, 1, v, n, t0, hd, scaled,
                            scale);
        else if (t0) { /* the same transposed: v^T times (the rows' first t0 columns)^T */
            for (int s = 0; s < t0; s++)
                for (int w = 0; w < n; w++) cb[(long)s * n + w] = c[(long)(t0 + w) * T + s];
            memset(ob, 0, (size_t)hd * n * sizeof(float));
            head_accumulate(ob, v, 1, hd, cb, hd, t0, n, scaled, scale);
            head_block_transpose(o, ob, hd, t0, n, 0);
        }
        head_prefix_triangle(o, c, v, T, hd, t0, t0 + n, scaled, scale); /* then s = t0..t */
    }
}
/* o_s = sum_{t = s..T-1} c_ts x_t (T, hd), as head_prefix_sums: keys a
 * block at a time, each its triangle, then the queries t >= e that all
 * see them. c read down a column (coef_row 1, as matmul_backward's weight
 * gradient reads its coefficients). */
static void head_suffix_sums(float *o, const float *c, const float *x, int T, int hd, int scaled,
                             float scale, float *cb, float *ob) {
    memset(o, 0, (size_t)T * hd * sizeof(float));
    int wide = hd >= ATT_WIDE, step = wide ? ATT_ROWS : ATT_COLS;
    for (int s0 = 0; s0 < T; s0 += step) {
        int n = T - s0 < step ? T - s0 : step, e = s0 + n;
        head_suffix_triangle(o, c, x, T, hd, s0, e, scaled, scale); /* t = s..e-1 first */
        if (e == T) continue; /* then t >= e, the block's rectangle */
        if (wide) {
            head_accumulate(o + (long)s0 * hd, c + (long)e * T + s0, 1, T, x + (long)e * hd, n,
                            T - e, hd, scaled, scale);
            continue;
        }
        for (int t = e; t < T; t++) /* transposed: x^T times the columns' rows */
            memcpy(cb + (long)(t - e) * n, c + (long)t * T + s0, (size_t)n * sizeof(float));
        head_block_transpose(o, ob, hd, s0, n, 1);
        head_accumulate(ob, x + (long)e * hd, 1, hd, cb, hd, T - e, n, scaled, scale);
        head_block_transpose(o, ob, hd, s0, n, 0);
    }
}
/* o (T, hd) rounded to d into a head's columns of out, rows ld apart */
static void head_store(float *out, long ld, const float *o, int T, int hd, Dtype d) {
    for (int t = 0; t < T; t++)
        for (int j = 0; j < hd; j++) out[t * ld + j] = round_to(o[(long)t * hd + j], d);
}

/* The scratch of one head: three (T, hd) operands packed, a (T, hd) sum,
 * T x ATT_COLS scores (or coefficients) and hd x ATT_COLS sums. In host
 * memory outside the ledger, as cpu_linear_forward's panel
 * (kernels/layers.h). */
static float *head_scratch(int T, int hd, float **a, float **b, float **c, float **o, float **z,
                           float **ob) {
    long n = (long)T * hd, nz = (long)T * ATT_COLS;
    float *w = (float *)host_malloc((size_t)(4 * n + nz + (long)hd * ATT_COLS) * sizeof(float),
                                    "hold a head's packed operands");
    *a = w, *b = w + n, *c = w + 2 * n, *o = w + 3 * n, *z = w + 4 * n, *ob = *z + nz;
    return w;
}

/* attention_forward_row's y and att, a head at a time */
static void attention_forward_heads(float *y, float *att, const float *qkv, int B, int T, int D,
                                    int H, Dtype d) {
    int hd = D / H;
    long ld = 3L * D;
    float scale = 1.0f / sqrtf((float)hd), *kt, *vp, *unused, *o, *z, *ob;
    float *w = head_scratch(T, hd, &kt, &vp, &unused, &o, &z, &ob);
    for (long b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *q = qkv + qkv_index(b, 0, 0, h, T, D, hd);
            float *p = att + (b * H + h) * T * (long)T;
            head_pack_cols(kt, q + D, ld, T, hd);
            head_dots(p, q, ld, kt, z, T, hd, scale); /* p[s] = (q_t . k_s) scale */
            for (int t = 0; t < T; t++) attention_softmax(p + (long)t * T, t, T, d);
            head_pack_rows(vp, q + 2 * D, ld, T, hd);
            head_prefix_sums(o, p, vp, T, hd, 0, 1.0f, z, ob); /* y_t = sum_s p_ts v_s */
            head_store(y + b * T * D + (long)h * hd, D, o, T, hd, d);
        }
    free(w);
}
/* attention_backward_query's and _key's dqkv and datt, a head at a time */
static void attention_backward_heads(float *dqkv, float *datt, const float *dy, const float *qkv,
                                     const float *att, int B, int T, int D, int H, Dtype d) {
    int hd = D / H;
    long ld = 3L * D;
    float scale = 1.0f / sqrtf((float)hd), *x1, *x2, *x3, *o, *z, *ob;
    float *w = head_scratch(T, hd, &x1, &x2, &x3, &o, &z, &ob);
    for (long b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            long r0 = (b * H + h) * T, i = qkv_index(b, 0, 0, h, T, D, hd);
            const float *q = qkv + i, *p = att + r0 * T, *g = dy + b * T * D + (long)h * hd;
            float *ds = datt + r0 * T;
            head_pack_cols(x1, q + 2 * D, ld, T, hd); /* v's, transposed */
            head_dots(ds, g, D, x1, z, T, hd, 1.0f);  /* dp_ts = dy_t . v_s */
            for (long t = 0; t < T; t++) attention_softmax_backward(ds + t * T, p + t * T, t, d);
            head_pack_rows(x1, q + D, ld, T, hd);
            head_prefix_sums(o, ds, x1, T, hd, 1, scale, z, ob); /* dq_t = sum_s ds_ts k_s scale */
            head_store(dqkv + i, ld, o, T, hd, d);
            head_pack_rows(x2, q, ld, T, hd);
            head_suffix_sums(o, ds, x2, T, hd, 1, scale, z, ob); /* dk_s = sum_t ds_ts q_t scale */
            head_store(dqkv + i + D, ld, o, T, hd, d);
            head_pack_rows(x3, g, D, T, hd);
            head_suffix_sums(o, p, x3, T, hd, 0, 1.0f, z, ob); /* dv_s = sum_t p_ts dy_t */
            head_store(dqkv + i + 2 * D, ld, o, T, hd, d);
        }
    free(w);
}

/* The rows' sums (blocked, above) read fp32 slots, the CPU's gemm_dtype;
 * activations held in 16 bits as on a GPU (tests/test_units.c) take the
 * GPU's formulation, which reads them as held and gives the rows' values
 * (test_attention16). */
static void attention_forward(void *y, float *att, const void *qkv, int B, int T, int D, int H,
                              Dtype d) {
    if (backend.dry) return; /* --plan */
    if (backend.gemm_dtype != DTYPE_FP32) {
        attention_forward_gemm(y, att, qkv, B, T, D, H, d);
        return;
    }
    attention_forward_heads((float *)y, att, (const float *)qkv, B, T, D, H, d);
}
/* dqkv (B, T, 3D) = the gradient of q, k, v; datt (B, H, T, T) is scratch */
static void attention_backward(void *dqkv, float *datt, const void *dy, const void *qkv,
                               const float *att, int B, int T, int D, int H, Dtype d) {
    if (backend.dry) return; /* --plan */
    if (backend.gemm_dtype != DTYPE_FP32) {
        attention_backward_gemm(dqkv, datt, dy, qkv, att, B, T, D, H, d);
        return;
    }
    attention_backward_heads((float *)dqkv, datt, (const float *)dy, (const float *)qkv, att, B,
                             T, D, H, d);
}
#endif

/* ---- fused attention: FlashAttention's algorithm -----------------------------
 * --attention flash (PyTorch's SDPBackend.FLASH_ATTENTION) computes the
 * same y without ever storing P. A query row meets the keys a tile of
 * FLASH_TILE at a time, and keeps only a running maximum m, a running sum
 * l of exp(score - m) and the output o, rescaled by exp(m_old - m_new)
 * whenever a tile raises the maximum (the "online softmax"):
 *   o = sum_s exp(score_s - m) v_s,   l = sum_s exp(score_s - m),   y = o / l
 * All it keeps for backward is one number a row, the log of the softmax's
 * denominator, lse = m + log l, from which backward recomputes any
 * p_ts = exp(score_ts - lse_t) it needs. So the B*H*T^2 probabilities
 * (and dS, in backward) never reach memory: B*H*T numbers a block where
 * the math path keeps B*H*T^2, and on a GPU the scores stay on chip
 * (kernels/flash.h). The price is recomputing the scores in backward.
 *
 * Rounded where the tensor cores round (with 16-bit parameters): each
 * exp(score - m) as it multiplies v (the tile's P, 16-bit for the matmul),
 * dS as it multiplies q and k; m, l, o, lse, dP in fp32. Every row below
 * writes only its own outputs, so a GPU can run them one thread a row
 * (FOR_EACH): that is its path where the tensor-core kernels do not
 * apply (fp32, or a head not 16, 32, 48 or 64 channels wide), and the
 * reference they are tested against (tests/test_kernels.cu; their forward
 * meets keys 64 at a time, so its P is rounded against other running
 * maxima: within the bound the test derives). Heads are at most
 * FLASH_MAX_HD channels: a row's o lives in registers. */
enum { FLASH_TILE = 32, FLASH_MAX_HD = 128 };

/* scale * q_t . k_s, from qkv held in format `held` */
FSDP_HD static inline float flash_score(const void *qkv, long b, int t, int s, int h, int T, int D,
                                        int hd, float scale, Dtype held) {
    long q = qkv_index(b, t, 0, h, T, D, hd), k = qkv_index(b, s, 1, h, T, D, hd);
    float z = 0.0f;
    for (int j = 0; j < hd; j++) z += load_as(qkv, q + j, held) * load_as(qkv, k + j, held);
    return z * scale;
}
/* x . v over hd values, x in fp32, v from a held buffer at index v0 */
FSDP_HD static inline float dot_held(const float *x, const void *v, long v0, int hd, Dtype held) {
    float z = 0.0f;
    for (int j = 0; j < hd; j++) z += x[j] * load_as(v, v0 + j, held);
    return z;
}

/* Row r = (b*H + h)*T + t: y_t (c_proj's input, held) and lse[r] */
FSDP_HD static inline void flash_forward_row(long r, void *y, float *lse, const void *qkv, int T,
                                             int D, int H, Dtype d, Dtype held) {
    int hd = D / H, t = (int)(r % T), h = (int)((r / T) % H);
    long b = r / ((long)T * H);
    float scale = 1.0f / sqrtf((float)hd), m = -INFINITY, l = 0.0f;
    float o[FLASH_MAX_HD], z[FLASH_TILE];
    for (int j = 0; j < hd; j++) o[j] = 0.0f;
    for (int s0 = 0; s0 <= t; s0 += FLASH_TILE) {
        int n = t + 1 - s0 < FLASH_TILE ? t + 1 - s0 : FLASH_TILE;
        float mt = m;
        for (int i = 0; i < n; i++) {
            z[i] = flash_score(qkv, b, t, s0 + i, h, T, D, hd, scale, held);
            mt = fmaxf(mt, z[i]);
        }
        float c = expf(m - mt); /* what the earlier terms are rescaled by: 0 at first */
        l *= c;
        for (int j = 0; j < hd; j++) o[j] *= c;
        for (int i = 0; i < n; i++) {
            float p = expf(z[i] - mt), p16 = round_to(p, d); /* P's tile, as the matmul reads it */
            long v = qkv_index(b, s0 + i, 2, h, T, D, hd);
            l += p;
            for (int j = 0; j < hd; j++) o[j] += p16 * load_as(qkv, v + j, held);
        }
        m = mt;
    }
    long yi = (b * T + t) * D + (long)h * hd;
    for (int j = 0; j < hd; j++) store_matmul_input(y, yi + j, o[j] / l, d, held);
    lse[r] = m + logf(l);
}

/* Backward, first: delta[r] = dy_t . y_t, which is sum_s p_ts dp_ts (y_t
 * = sum_s p_ts v_s and dp_ts = dy_t . v_s): the mean that softmax's
 * backward subtracts (attention_backward_query), from y instead of P */
FSDP_HD static inline void flash_backward_dot_row(long r, float *delta, const void *dy,
                                                  const void *y, int T, int D, int H,
                                                  Dtype held) {
    int hd = D / H, t = (int)(r % T), h = (int)((r / T) % H);
    long b = r / ((long)T * H), i0 = (b * T + t) * D + (long)h * hd;
    float z = 0.0f;
    for (int j = 0; j < hd; j++) z += load_as(dy, i0 + j, held) * load_as(y, i0 + j, held);
    delta[r] = z;
}
/* p_ts recomputed, and dscore_ts = p (dy_t . v_s - delta_t), rounded as
 * the matmuls read it; g is dy_t in fp32 */
FSDP_HD static inline float flash_dscore(const void *qkv, const float *g, long b, int t, int s,
                                         int h, int T, int D, int hd, float scale, float lse,
                                         float delta, float *p, Dtype d, Dtype held) {
    *p = expf(flash_score(qkv, b, t, s, h, T, D, hd, scale, held) - lse);
    float dp = dot_held(g, qkv, qkv_index(b, s, 2, h, T, D, hd), hd, held);
    return round_to(*p * (dp - delta), d);
}
/* Backward, part 1, row r: dq_t = scale sum_{s <= t} dscore_ts k_s */
FSDP_HD static inline void flash_backward_query_row(long r, void *dqkv, const void *dy,
                                                    const void *qkv, const float *lse,
                                                    const float *delta, int T, int D, int H,
                                                    Dtype d, Dtype held) {
    int hd = D / H, t = (int)(r % T), h = (int)((r / T) % H);
    long b = r / ((long)T * H), yi = (b * T + t) * D + (long)h * hd;
    float scale = 1.0f / sqrtf((float)hd), g[FLASH_MAX_HD], dq[FLASH_MAX_HD], p;
    for (int j = 0; j < hd; j++) g[j] = load_as(dy, yi + j, held), dq[j] = 0.0f;
    for (int s = 0; s <= t; s++) {
        float ds = flash_dscore(qkv, g, b, t, s, h, T, D, hd, scale, lse[r], delta[r], &p, d, held);
        long k = qkv_index(b, s, 1, h, T, D, hd);
        for (int j = 0; j < hd; j++) dq[j] += ds * load_as(qkv, k + j, held);
    }
    long q = qkv_index(b, t, 0, h, T, D, hd);
    for (int j = 0; j < hd; j++) store_matmul_input(dqkv, q + j, dq[j] * scale, d, held);
}
/* Backward, part 2, row r = (b*H + h)*T + s: key and value s, from every
 * query t >= s (a column, as attention_backward_key):
 *   dk_s = scale sum_t dscore_ts q_t        dv_s = sum_t p_ts dy_t */
FSDP_HD static inline void flash_backward_key_row(long r, void *dqkv, const void *dy,
                                                  const void *qkv, const float *lse,
                                                  const float *delta, int T, int D, int H,
                                                  Dtype d, Dtype held) {
    int hd = D / H, s = (int)(r % T), h = (int)((r / T) % H);
    long b = r / ((long)T * H), row0 = r - s; /* row of (b, h, t = 0) */
    float scale = 1.0f / sqrtf((float)hd), g[FLASH_MAX_HD], dk[FLASH_MAX_HD], dv[FLASH_MAX_HD], p;
    for (int j = 0; j < hd; j++) dk[j] = dv[j] = 0.0f;
    for (int t = s; t < T; t++) {
        long yi = (b * T + t) * D + (long)h * hd, q = qkv_index(b, t, 0, h, T, D, hd);
        for (int j = 0; j < hd; j++) g[j] = load_as(dy, yi + j, held);
        float ds = flash_dscore(qkv, g, b, t, s, h, T, D, hd, scale, lse[row0 + t],
                                delta[row0 + t], &p, d, held);
        float p16 = round_to(p, d);
        for (int j = 0; j < hd; j++) {
            dk[j] += ds * load_as(qkv, q + j, held);
            dv[j] += p16 * g[j];
        }
    }
    long k = qkv_index(b, s, 1, h, T, D, hd);
    for (int j = 0; j < hd; j++) {
        store_matmul_input(dqkv, k + j, dk[j] * scale, d, held);
        store_matmul_input(dqkv, k + D + j, dv[j], d, held);
    }
}


/* --attention flash: y (B, T, D), c_proj's input, and lse (B, H, T) from
 * qkv (B, T, 3D), the first two held as attention_forward's are */
static void flash_attention_forward(void *y, float *lse, const void *qkv, int B, int T, int D,
                                    int H, Dtype d) {
    if (backend.dry) return; /* --plan */
#ifdef __CUDACC__
    if (flash_tensor_cores(d, D / H)) {
        FLASH_LAUNCH(flash_forward_tc, B, H, T, (uint16_t *)y, lse, (const uint16_t *)qkv, T, D, H);
        return;
    }
#endif
    FOR_EACH((long)B * H * T, flash_forward_row, y, lse, qkv, T, D, H, d, backend.gemm_dtype);
}
/* dqkv (B, T, 3D), written whole, from dy (c_proj's input gradient), y,
 * qkv and lse, all held as attention_backward's; delta (B, H, T) is
 * scratch */
static void flash_attention_backward(void *dqkv, float *delta, const void *dy, const void *y,
                                     const void *qkv, const float *lse, int B, int T, int D,
                                     int H, Dtype d) {
    if (backend.dry) return; /* --plan */
    long rows = (long)B * H * T;
    Dtype held = backend.gemm_dtype;
#ifdef __CUDACC__
    if (flash_tensor_cores(d, D / H)) {
        uint16_t *g = (uint16_t *)dqkv;
        const uint16_t *gy = (const uint16_t *)dy, *x = (const uint16_t *)qkv;
        flash_delta_tc<<<warp_blocks(rows), 32 * WARPS_PER_BLOCK, 0, backend.compute>>>(
            delta, gy, (const uint16_t *)y, rows, T, D, H, d);
        cudaCheck(cudaGetLastError());
        FLASH_LAUNCH(flash_backward_key_tc, B, H, T, g, gy, x, lse, delta, T, D, H);
        FLASH_LAUNCH(flash_backward_query_tc, B, H, T, g, gy, x, lse, delta, T, D, H);
        return;
    }
#endif
    FOR_EACH(rows, flash_backward_dot_row, delta, dy, y, T, D, H, held);
    FOR_EACH(rows, flash_backward_query_row, dqkv, dy, qkv, lse, delta, T, D, H, d, held);
    FOR_EACH(rows, flash_backward_key_row, dqkv, dy, qkv, lse, delta, T, D, H, d, held);
}

#endif /* FSDP_KERNELS_TRANSFORMER_H */
