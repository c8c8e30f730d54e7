/* ============================================================================
 * kernels/layers.h — the model's layer math: each
 * layer's forward and backward (Linear, LayerNorm, GELU, the embedding,
 * softmax cross-entropy) as element functions shared by CPU and GPU, and
 * the matmuls: register-blocked loops on the CPU, cuBLAS on a GPU, side by
 * side. fsdp.c includes it at its top; model/tree.h says what the model
 * is, and builds its module tree from these layers.
 *
 * May include core.h, fsdp.h and kernels/backend.h; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_KERNELS_LAYERS_H
#define FSDP_KERNELS_LAYERS_H
#include "../core.h"
#include "../fsdp.h"
#include "backend.h"

/* ---- element-wise math, shared by CPU and GPU ------------------------------
 * Each function computes element (or row) i of one layer. The CPU calls it
 * in a loop, a GPU from one thread per i (FOR_EACH, kernels/backend.h), so both
 * compute the same arithmetic in the same order. */

/* Element i of x, x holding fp32 values (d = fp32) or packed 16-bit values
 * of format d; and the address of element i (a slice) */
FSDP_HD static inline float load_as(const void *x, long i, Dtype d) {
    return d == DTYPE_FP32 ? ((const float *)x)[i] : float_from_half(((const uint16_t *)x)[i], d);
}
FSDP_HD static inline void store_as(void *x, long i, float v, Dtype d) {
    if (d == DTYPE_FP32) ((float *)x)[i] = v;
    else ((uint16_t *)x)[i] = half_from_float(v, d);
}
static inline void *element_at(const void *x, long i, Dtype d) {
    return (void *)((const char *)x + i * dtype_bytes(d));
}

/* ---- a buffer and the format its values are stored in ----------------------
 * With mixed precision the same bytes mean different values: a weight is
 * fp32, bf16 or fp16 depending on where it is read (a unit's full state,
 * fsdp.c's full_dtype; float slots with no_shard), and so is its gradient
 * (grad_dtype) and an activation (backend.gemm_dtype, below). A Buf keeps
 * the pointer and its format together, as a torch.Tensor keeps its dtype,
 * so a layer is handed both at once and the two can never disagree. (Like
 * a tensor's, its data is not const: a layer's signature says which it
 * only reads.) */
typedef struct {
    void *data;  /* its values, n of them as the layer's shapes say */
    Dtype dtype; /* how they are stored: fp32, or 16-bit bf16 / fp16 */
} Buf;
static inline Buf buf(const void *data, Dtype dtype) {
    Buf b = {(void *)data, dtype};
    return b;
}
/* An activation held as the matmuls read it (below) */
static inline Buf held_buf(const void *data) { return buf(data, backend.gemm_dtype); }

/* A Linear layer's operands, grouped as nn.Linear groups them: its
 * parameters as its unit's full state holds them and their gradients as
 * its full gradient does (the model builds one from its Trainer for a
 * module: model/mlp.h's linear_of). A LayerNorm's the same, over dim. */
typedef struct {
    Buf weight, bias;   /* (out, in), (out); bias.data NULL with bias=False (GPT-2's lm_head) */
    Buf dweight, dbias; /* their gradients, added into (same shapes) */
    int in, out;        /* in_features, out_features */
} Linear;
typedef struct {
    Buf weight, bias, dweight, dbias; /* (dim) each */
    int dim;                          /* normalized_shape: the last dimension */
} LayerNorm;
/* The two from their buffers: the parameters held in wh, the gradients in
 * gh (a NULL bias: none) */
static inline Linear linear_view(const void *w, const void *b, Dtype wh, void *dw, void *db,
                                 Dtype gh, int in, int out) {
    Linear l = {buf(w, wh), buf(b, wh), buf(dw, gh), buf(db, gh), in, out};
    return l;
}
static inline LayerNorm norm_view(const void *w, const void *b, Dtype wh, void *dw, void *db,
                                  Dtype gh, int dim) {
    LayerNorm ln = {buf(w, wh), buf(b, wh), buf(dw, gh), buf(db, gh), dim};
    return ln;
}

/* ---- activations held as the matmuls read them -----------------------------
 * A Linear layer's input is read by its two matmuls (forward, and the
 * weight's gradient in backward) and by nothing else: LayerNorm's and
 * GELU's backward read their inputs, not their outputs. So it is held in
 * the format the matmuls read, backend.gemm_dtype: with 16-bit parameters
 * on a GPU, 16-bit values of two bytes each, which its producer (a
 * LayerNorm, a GELU, attention, the byte embedding) writes and the tensor
 * cores read as they are: half the bytes kept, and no packing pass in
 * either matmul. Every other activation whose readers all read through
 * load_as is held so too: c_attn's output (attention's matmuls), c_fc's
 * and fc1's (GELU), the c_projs' and fc2's (the residual connection,
 * residual_add_one), a LayerNorm's output gradient (its backward), the
 * logits (the loss, crossentropy_forward), the output gradient a GELU or
 * attention writes (the Linear's two matmuls and its bias's column sum),
 * and the residual stream and its gradient, read by LayerNorm, the
 * residual connections, the c_projs' and fc2's matmuls and the
 * embeddings' backward. The CPU's loops read fp32, so there (gemm_dtype
 * fp32) the same values sit in float slots. Either way the producer
 * rounds what it writes to format d, the parameters' (store_matmul_input),
 * as autocast's bf16 tensors are rounded. One held buffer is added into:
 * the residual stream's gradient, which each branch's LayerNorm backward
 * adds its share to; the sum is rounded as it is written, as adding two
 * bf16 tensors in PyTorch rounds it. */
FSDP_HD static inline void store_matmul_input(void *x, long i, float v, Dtype d, Dtype held) {
    store_as(x, i, round_to(v, d), held);
}

FSDP_HD static inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678f)); }
FSDP_HD static inline float gelu_grad(float x) {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678f));
    float pdf = 0.39894228f * expf(-0.5f * x * x);
    return cdf + x * pdf;
}
/* GELU's input (fc1's output) and output (fc2's input) are both held */
FSDP_HD static inline void gelu_forward_one(long i, void *out, const void *inp, Dtype d,
                                            Dtype held) {
    store_matmul_input(out, i, gelu(load_as(inp, i, held)), d, held);
}
/* ... written, not added: fc1's output gradient, from fc2's input
 * gradient (all three held as a matmul's input) */
FSDP_HD static inline void gelu_backward_one(long i, void *dinp, const void *dout,
                                             const void *inp, Dtype d, Dtype held) {
    float g = load_as(dout, i, held) * gelu_grad(load_as(inp, i, held));
    store_matmul_input(dinp, i, g, d, held);
}
FSDP_HD static inline void add_one(long i, float *x, const float *y) { x[i] += y[i]; }
/* A residual connection: out = x + y, rounded to d; the stream (x, out)
 * and the projection y all held (above). One pass, where a copy, an add
 * and a rounding were three; out may be x or y. */
FSDP_HD static inline void residual_add_one(long i, void *out, const void *x, const void *y,
                                            Dtype d, Dtype held) {
    store_as(out, i, round_to(load_as(x, i, held) + load_as(y, i, held), d), held);
}

/* out row b of (B, O), held in format oh, starts as the bias (held in
 * wh, or 0 with none: GPT-2's lm_head); the matmul then adds to it */
FSDP_HD static inline void bias_broadcast_one(long i, void *out, const void *bias, int O,
                                              Dtype wh, Dtype oh) {
    store_as(out, i, bias ? load_as(bias, i % O, wh) : 0.0f, oh);
}
/* dbias[o] += the sum over the B rows of dout (held in format dh), in
 * increasing b; dbias held in gh (fsdp.c's grad_dtype: a parameter's
 * gradient is rounded to 16 bits as it is written, where it is held so) */
FSDP_HD static inline void bias_backward_one(long o, void *dbias, const void *dout, int B, int O,
                                             Dtype dh, Dtype gh) {
    float db = 0.0f;
    for (int b = 0; b < B; b++) db += load_as(dout, (long)b * O + o, dh);
    store_as(dbias, o, load_as(dbias, o, gh) + db, gh);
}

/* LayerNorm of row b: out = (x - mean) * rstd * weight + bias, a matmul's
 * input, from the residual stream; both held, the parameters in wh (a
 * unit's full state: fsdp.c, section 2). Saves mean, rstd. */
FSDP_HD static inline void layernorm_forward_row(long b, void *out, float *mean, float *rstd,
                                                 const void *inp, const void *weight,
                                                 const void *bias, Dtype wh, int D, Dtype d,
                                                 Dtype held) {
    float m = 0.0f, v = 0.0f;
    for (int i = 0; i < D; i++) m += load_as(inp, b * D + i, held);
    m /= (float)D;
    for (int i = 0; i < D; i++) {
        float x = load_as(inp, b * D + i, held);
        v += (x - m) * (x - m);
    }
    v /= (float)D;
    float s = 1.0f / sqrtf(v + 1e-5f);
    for (int i = 0; i < D; i++) {
        float x = load_as(inp, b * D + i, held);
        float y = (x - m) * s * load_as(weight, i, wh) + load_as(bias, i, wh);
        store_matmul_input(out, b * D + i, y, d, held);
    }
    mean[b] = m;
    rstd[b] = s;
}
/* The input gradient of row b. With n = normalised input, g = dy * weight:
 * dx = rstd * (g - mean(g) - n * mean(g * n)), added into the residual
 * stream's gradient dinp and the sum rounded to d. dinp, dy (the Linear
 * after the norm wrote it; only this and the column sums read it) and the
 * input are held, the weight in wh. */
FSDP_HD static inline void layernorm_backward_row(long b, void *dinp, const void *dout,
                                                  const void *inp, const void *weight, Dtype wh,
                                                  const float *mean, const float *rstd, int D,
                                                  Dtype d, Dtype held) {
    float g_mean = 0.0f, gn_mean = 0.0f;
    for (int i = 0; i < D; i++) {
        float n = (load_as(inp, b * D + i, held) - mean[b]) * rstd[b];
        float g = load_as(dout, b * D + i, held) * load_as(weight, i, wh);
        g_mean += g;
        gn_mean += g * n;
    }
    g_mean /= (float)D;
    gn_mean /= (float)D;
    for (int i = 0; i < D; i++) {
        long at = b * D + i;
        float n = (load_as(inp, at, held) - mean[b]) * rstd[b];
        float w = load_as(weight, i, wh);
        float dx = rstd[b] * (load_as(dout, at, held) * w - g_mean - n * gn_mean);
        store_as(dinp, at, round_to(load_as(dinp, at, held) + dx, d), held);
    }
}
/* The parameter gradients of column i: a sum over the rows, in increasing
 * b, from one thread (a row per thread would need atomics here), added to
 * what they hold (in gh); dout and inp held. */
FSDP_HD static inline void layernorm_backward_col(long i, void *dweight, void *dbias,
                                                  const void *dout, const void *inp,
                                                  const float *mean, const float *rstd, int B,
                                                  int D, Dtype held, Dtype gh) {
    float w = load_as(dweight, i, gh), bias = load_as(dbias, i, gh);
    for (int b = 0; b < B; b++) {
        long at = (long)b * D + i;
        float n = (load_as(inp, at, held) - mean[b]) * rstd[b], dy = load_as(dout, at, held);
        w += dy * n;
        bias += dy;
    }
    store_as(dweight, i, w, gh);
    store_as(dbias, i, bias, gh);
}

/* element i of out (B, T*C), proj_in's input: channel i % C of the
 * embedding of context byte i / C (a parameter's value, held in wh: of
 * param_dtype already, so held exactly) */
FSDP_HD static inline void embedding_forward_one(long i, void *out, const unsigned char *tokens,
                                                 const void *weight, Dtype wh, int C,
                                                 Dtype held) {
    store_as(out, i, load_as(weight, (long)tokens[i / C] * C + i % C, wh), held);
}
/* The batch's rows grouped by token, for an embedding's gradient
 * (embedding_backward_one below): built on the host when a batch is
 * drawn, by a counting sort, which keeps each token's rows in increasing
 * n, and copied to the device beside the batch. */
typedef struct {
    int *rows;    /* (BT) the row numbers n, token by token */
    int *end;     /* (BT) distinct token u's rows: rows[end[u - 1] .. end[u]), from 0 for u 0 */
    int *token;   /* (BT) distinct token u, in increasing order */
    int distinct; /* how many distinct tokens the batch holds (on the host) */
} TokenRows;

/* Groups the BT tokens (each in [0, V)) in `stage` (3 BT ints of host
 * memory: the batch's stage) and queues their copies to the device, which
 * read it when their turn comes (backend.h's batch_stage says when it may
 * be written again) */
static void token_rows_load(TokenRows *g, const int *tokens, long BT, int V, int *stage) {
    int *start = (int *)host_calloc((size_t)V + 1, sizeof(int), "group a batch by token");
    int *rows = stage, *end = stage + BT, *token = stage + 2 * BT;
    for (long n = 0; n < BT; n++) start[tokens[n] + 1]++;
    for (int v = 0; v < V; v++) start[v + 1] += start[v]; /* token v's rows begin at start[v] */
    int u = 0;
    for (int v = 0; v < V; v++)
        if (start[v + 1] > start[v]) {
            token[u] = v;
            end[u++] = start[v + 1];
        }
    for (long n = 0; n < BT; n++) rows[start[tokens[n]]++] = (int)n; /* in increasing n */
    dev_from_host_queued(g->rows, rows, (size_t)BT * sizeof(int));
    dev_from_host_queued(g->end, end, (size_t)u * sizeof(int));
    dev_from_host_queued(g->token, token, (size_t)u * sizeof(int));
    g->distinct = u;
    free(start);
}

/* An embedding's gradient: row token[n] of dweight (V, C) gets row n of
 * dout (BT, C) added, for each of the batch's BT rows n. Two rows with
 * the same token must not add at once, and atomics would add them in
 * whatever order they came, so another order each run. The rows are
 * grouped by token instead (TokenRows above, built on the host with the
 * batch): element i = u*C + c is channel c of the batch's distinct token
 * u, which adds that token's rows in increasing n. So a warp reads 32
 * adjacent channels of one row (coalesced), nothing waits on another
 * thread, and every build and every run adds in the same order. */
FSDP_HD static inline void embedding_backward_one(long i, void *dweight, const void *dout,
                                                  const int *rows, const int *end,
                                                  const int *token, int C, Dtype held, Dtype gh) {
    long u = i / C, c = i % C, at = (long)token[u] * C + c;
    float sum = load_as(dweight, at, gh);
    for (int k = u ? end[u - 1] : 0; k < end[u]; k++)
        sum += load_as(dout, (long)rows[k] * C + c, held);
    store_as(dweight, at, sum, gh);
}

/* The softmax's online form: the running maximum m of the logits seen and
 * the sum s of exp(logit - m), rescaled by exp(m_old - m_new) when the
 * maximum grows (Milakov and Gimelshein's online softmax; kernels/flash.h
 * keeps attention's rows so). One pass over a row gives log sum exp = m +
 * log s, where the plain form takes two, the maximum and then the sum;
 * still one exponential a logit. Start from m = -inf, s = 0. (A NaN makes
 * s NaN; a -inf, an fp16 logit that overflowed downwards, adds nothing.) */
FSDP_HD static inline void online_softmax_add(float *m, float *s, float x) {
    if (x > *m) {
        *s = *s * expf(*m - x) + 1.0f;
        *m = x;
    } else if (x != -INFINITY) { /* a -inf adds exp(-inf) = 0, even while m is -inf */
        *s += expf(x - *m);
    }
}

/* The logits' row stride: V rounded up to a multiple of 64 values. A
 * GPU's GEMMs run at speed on rows whose starts are 16-byte aligned
 * (cuBLAS's tensor-core kernels load 16 bytes at a time; Hopper's TMA
 * copies require it), and GPT-2's 50257 16-bit logits a row would put row
 * b at 100514 b bytes: 2-byte aligned. llm.c pads the vocabulary itself to
 * 50304 for this; here only the activation is padded: wte stays (V, D),
 * lm_head's three GEMMs span V columns of rows ld apart, and nothing reads
 * the padding (the CPU's matmul_forward, below, writes it 0). */
static inline int logits_stride(int V) { return (V + 63) / 64 * 64; }

/* Row b's lse[b] = log sum_v exp(logit_v), the log of its softmax's
 * denominator, and its loss -log p[target] = lse - logit[target]; row b's
 * logits at b * ld (logits_stride), held in format lh (fp32, or 16 bits:
 * only the loss reads them).
 * The probabilities are not written: backward computes each again as
 * exp(logit - lse), as FlashAttention's backward does attention's, so no
 * (B, V) buffer is kept: 1.6 GB in fp32 for GPT-2's 8 x 1024 x 50257. */
FSDP_HD static inline void crossentropy_forward_row(long b, float *lse, float *losses,
                                                    const void *logits, int ld,
                                                    const int *targets, int V, Dtype lh) {
    float m = -INFINITY, s = 0.0f;
    for (int v = 0; v < V; v++) online_softmax_add(&m, &s, load_as(logits, b * ld + v, lh));
    lse[b] = m + logf(s);
    losses[b] = lse[b] - load_as(logits, b * ld + targets[b], lh);
}
/* The logits' gradient (softmax - onehot(target)) * dloss at one logit,
 * the head's output gradient; and row b's, written over its logits (each
 * read, then written), rounded to d and held (a matmul's input). The CPU
 * runs the row function over rows; a GPU's kernel (below) a block a row,
 * by row and column, not by the flat index i: i % V and i / V would be
 * 64-bit divisions, which a GPU runs as a few dozen instructions, more
 * time than the 4 bytes each element moves. */
FSDP_HD static inline float crossentropy_gradient(float logit, float lse, int is_target,
                                                  float dloss) {
    return (expf(logit - lse) - (is_target ? 1.0f : 0.0f)) * dloss;
}
FSDP_HD static inline void crossentropy_backward_row(long b, void *logits, int ld,
                                                     const float *lse, const int *targets,
                                                     float dloss, int V, Dtype d, Dtype held) {
    for (int v = 0; v < V; v++) {
        long i = b * ld + v;
        float g = crossentropy_gradient(load_as(logits, i, held), lse[b], v == targets[b], dloss);
        store_matmul_input(logits, i, g, d, held);
    }
}

/* ---- layers ------------------------------------------------------------------
 * A Linear layer is three matmuls, and the backends differ most here: the
 * CPU's own blocked loops, or cuBLAS. Everything else is a FOR_EACH over
 * the functions above. */

/* Scratch for one kernel's partial results, from the pool and outside the
 * ledger, as cuBLAS's workspace is (the pool's --vram cap leaves room for
 * it, backend_init). Given back with dev_free right after the kernels are
 * queued: the pool lends it again only to work queued after them. (On the
 * CPU, for the formulations tests/test_units.c runs there: NaN until
 * written, so a byte left unwritten shows.) */
static void *gpu_scratch(size_t bytes, const char *what) {
    void *p = dev_alloc_for_overwrite(bytes);
    if (!p) FATAL("the GPU is out of memory; try a smaller --batch", "no room to %s", what);
    return p;
}

/* A matmul's operand of n values held in format `held`, as format d reads
 * it: the operand itself when it is held so already (a matmul's input,
 * above), else its values of format d in float slots packed into 16 bits
 * (exactly) in scratch, for the tensor cores. gemm_input_free gives the
 * scratch back. */
static const void *gemm_input(const void *x, Dtype held, long n, Dtype d) {
    if (held == d) return x;
    uint16_t *p = (uint16_t *)gpu_scratch((size_t)n * sizeof(uint16_t), "pack a matmul");
    FOR_EACH(n, pack_one, p, (const float *)x, d, 1.0f);
    return p;
}
static void gemm_input_free(const void *in, const void *x, long n) {
    if (in != x) dev_free((void *)in, (size_t)n * sizeof(uint16_t));
}

#ifdef __CUDACC__
/* ---- the GPU's own row and column kernels -----------------------------------
 * One thread per row (FOR_EACH over layernorm_forward_row) reads a row of
 * D values alone, and a warp's 32 threads read 32 rows D apart: no load is
 * coalesced. So on a GPU a LayerNorm row is a warp's (llm.c's later
 * kernels): lane j takes elements j, j + 32, ..., and the 32 partial sums
 * meet in a butterfly of shuffles (warp_sum), the same tree on every run,
 * so a GPU run still repeats bit for bit. The sums are in another order
 * than the CPU's one-thread loop, so the two builds agree within fp32
 * rounding here, as they do in cuBLAS's matmuls (tests/test_kernels.cu
 * holds each kernel to its CPU function, within a bound it derives). */
__device__ static inline float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v; /* every lane: a + b == b + a, so partners agree at each stage */
}

enum { WARPS_PER_BLOCK = 8 };
static unsigned warp_blocks(long rows) {
    return (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
}

__global__ static void layernorm_forward_warp(void *__restrict__ out, float *__restrict__ mean,
                                              float *__restrict__ rstd,
                                              const void *__restrict__ inp,
                                              const void *__restrict__ weight,
                                              const void *__restrict__ bias, Dtype wh, int B,
                                              int D, Dtype d, Dtype held) {
    long b = (long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (b >= B) return; /* a whole warp: b is the same on its 32 lanes */
    float m = 0.0f, v = 0.0f;
    for (int i = lane; i < D; i += 32) m += load_as(inp, b * D + i, held);
    m = warp_sum(m) / (float)D;
    for (int i = lane; i < D; i += 32) {
        float x = load_as(inp, b * D + i, held);
        v += (x - m) * (x - m);
    }
    v = warp_sum(v) / (float)D;
    float s = 1.0f / sqrtf(v + 1e-5f);
    for (int i = lane; i < D; i += 32) {
        float x = load_as(inp, b * D + i, held);
        float y = (x - m) * s * load_as(weight, i, wh) + load_as(bias, i, wh);
        store_matmul_input(out, b * D + i, y, d, held);
    }
    if (lane == 0) mean[b] = m, rstd[b] = s;
}

/* dinp, dout and inp held (layernorm_backward_row) */
__global__ static void layernorm_backward_warp(void *__restrict__ dinp,
                                               const void *__restrict__ dout,
                                               const void *__restrict__ inp,
                                               const void *__restrict__ weight, Dtype wh,
                                               const float *__restrict__ mean,
                                               const float *__restrict__ rstd, int B, int D,
                                               Dtype d, Dtype held) {
    long b = (long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (b >= B) return;
    float mb = mean[b], sb = rstd[b], g_mean = 0.0f, gn_mean = 0.0f;
    for (int i = lane; i < D; i += 32) {
        float g = load_as(dout, b * D + i, held) * load_as(weight, i, wh);
        g_mean += g;
        gn_mean += g * ((load_as(inp, b * D + i, held) - mb) * sb);
    }
    g_mean = warp_sum(g_mean) / (float)D;
    gn_mean = warp_sum(gn_mean) / (float)D;
    for (int i = lane; i < D; i += 32) {
        long at = b * D + i;
        float n = (load_as(inp, at, held) - mb) * sb;
        float w = load_as(weight, i, wh);
        float dx = sb * (load_as(dout, at, held) * w - g_mean - n * gn_mean);
        store_as(dinp, at, round_to(load_as(dinp, at, held) + dx, d), held);
    }
}

__device__ static inline float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* A GPU's loss kernels load CE_UNROLL logits a thread before they use
 * any: that many loads are in flight, not one. A load waits about half a
 * microsecond for memory, so an H100's 3.35 TB/s needs ~2 MB in flight
 * (bandwidth x latency); GPT-2's 8192 rows fill its ~8,400 warp slots
 * once, 64 bytes a warp's load of 16-bit logits, 0.5 MB with one load a
 * thread. The stores of backward, over the same logits, would otherwise
 * keep the compiler from issuing the next load before them. */
enum { CE_UNROLL = 8 };

/* The loss's lse and loss, a warp a row of V logits
 * (crossentropy_forward_row's arithmetic): lane j keeps its own online
 * softmax over logits j, j + 32, ..., and the 32 meet at the warp's
 * maximum, each sum rescaled to it, in a fixed order (warp_max, warp_sum).
 * One pass over the logits: 2 bytes a logit held in 16 bits, where three
 * passes and the probabilities written (4 bytes) took 10. */
__global__ static void crossentropy_forward_warp(float *__restrict__ lse,
                                                 float *__restrict__ losses,
                                                 const void *__restrict__ logits, int ld,
                                                 const int *__restrict__ targets, int B, int V,
                                                 Dtype lh) {
    long b = (long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (b >= B) return;
    float m = -INFINITY, s = 0.0f;
    for (int v0 = lane; v0 < V; v0 += 32 * CE_UNROLL) {
        float z[CE_UNROLL];
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++)
            z[u] = v0 + 32 * u < V ? load_as(logits, b * ld + v0 + 32 * u, lh) : 0.0f;
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++)
            if (v0 + 32 * u < V) online_softmax_add(&m, &s, z[u]);
    }
    float row_max = warp_max(m); /* a lane that saw no logit (V < 32): s 0, m -inf */
    s = warp_sum(s * expf(m - row_max));
    if (lane == 0) {
        lse[b] = row_max + logf(s);
        losses[b] = lse[b] - load_as(logits, b * ld + targets[b], lh);
    }
}

/* The logits' gradient over the logits, a block a row, its threads along
 * the row: coalesced, no division (crossentropy_backward_row's), and each
 * thread's CE_UNROLL logits loaded before any is written. */
__global__ static void crossentropy_backward_rows(void *logits, int ld,
                                                  const float *__restrict__ lse,
                                                  const int *__restrict__ targets, float dloss,
                                                  int V, Dtype d, Dtype held) {
    long row = (long)blockIdx.x * ld;
    float row_lse = lse[blockIdx.x];
    int target = targets[blockIdx.x];
    for (int v0 = threadIdx.x; v0 < V; v0 += blockDim.x * CE_UNROLL) {
        float z[CE_UNROLL];
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            int v = v0 + u * (int)blockDim.x;
            z[u] = v < V ? load_as(logits, row + v, held) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            int v = v0 + u * (int)blockDim.x;
            if (v < V)
                store_matmul_input(logits, row + v,
                                   crossentropy_gradient(z[u], row_lse, v == target, dloss), d,
                                   held);
        }
    }
}

/* Column sums over R rows of (R, C) in two stages, with no atomics and a
 * fixed order. Stage 1: a block of 32 x 8 threads owns 32 columns of a
 * chunk of COL_CHUNK rows; the 32 threads of a warp read 32 neighbouring
 * columns of one row (coalesced); each thread sums every 8th row of the
 * chunk, and the 8 partial sums meet in shared memory in row order.
 * Stage 2: one thread per column adds the chunks' sums in chunk order.
 * What is summed is LayerNorm's dweight (dout * normalised input) and
 * dbias (dout), or a Linear's dbias (dout): `mean` NULL for the latter.
 * dout is held in format dh, and so is LayerNorm's input; the gradients
 * added into in gh. */
enum { COL_CHUNK = 256, COL_WARPS = 8 };

__global__ static void column_sums_stage1(float *__restrict__ part_w, float *__restrict__ part_b,
                                          const void *__restrict__ dout, Dtype dh,
                                          const void *__restrict__ inp,
                                          const float *__restrict__ mean,
                                          const float *__restrict__ rstd, int R, int C) {
    __shared__ float sw[COL_WARPS][32], sb[COL_WARPS][32];
    int c = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    float w = 0.0f, b = 0.0f;
    if (c < C)
        for (int r = chunk * COL_CHUNK + threadIdx.y; r < R && r < (chunk + 1) * COL_CHUNK;
             r += COL_WARPS) {
            float d = load_as(dout, (long)r * C + c, dh);
            b += d;
            if (mean) w += d * ((load_as(inp, (long)r * C + c, dh) - mean[r]) * rstd[r]);
        }
    sw[threadIdx.y][threadIdx.x] = w;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    for (int y = 1; y < COL_WARPS; y++) w += sw[y][threadIdx.x], b += sb[y][threadIdx.x];
    if (mean) part_w[(long)chunk * C + c] = w;
    part_b[(long)chunk * C + c] = b;
}

__global__ static void column_sums_stage2(void *__restrict__ dweight, void *__restrict__ dbias,
                                          const float *__restrict__ part_w,
                                          const float *__restrict__ part_b, int chunks, int C,
                                          Dtype gh) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float w = 0.0f, b = 0.0f;
    for (int k = 0; k < chunks; k++) {
        if (dweight) w += part_w[(long)k * C + c];
        b += part_b[(long)k * C + c];
    }
    if (dweight) store_as(dweight, c, load_as(dweight, c, gh) + w, gh);
    store_as(dbias, c, load_as(dbias, c, gh) + b, gh);
}

/* dbias (C) += column sums of dout (R, C), held in format dh; with mean,
 * also dweight (C) += column sums of dout * (inp - mean) * rstd, inp held
 * in dh too: LayerNorm's parameters; their gradients held in gh */
static void column_sums(void *dweight, void *dbias, Dtype gh, const void *dout, Dtype dh,
                        const void *inp, const float *mean, const float *rstd, int R, int C) {
    if (backend.dry || R <= 0 || C <= 0) return;
    int chunks = (R + COL_CHUNK - 1) / COL_CHUNK;
    size_t bytes = (size_t)2 * chunks * C * sizeof(float);
    float *part = (float *)gpu_scratch(bytes, "sum columns"); /* every element written */
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)chunks), block(32, COL_WARPS);
    column_sums_stage1<<<grid, block, 0, backend.compute>>>(part, part + (long)chunks * C, dout,
                                                            dh, inp, mean, rstd, R, C);
    cudaCheck(cudaGetLastError());
    column_sums_stage2<<<blocks_for(C), 256, 0, backend.compute>>>(
        mean ? dweight : NULL, dbias, part, part + (long)chunks * C, chunks, C, gh);
    cudaCheck(cudaGetLastError());
    dev_free(part, bytes);
}

/* out (B, D) = (inp - mean) * rstd * weight + bias, a matmul's input
 * (rounded to d); out and inp held in backend.gemm_dtype; saves mean,
 * rstd (B) */
static void layernorm_forward(const LayerNorm *ln, void *out, float *mean, float *rstd,
                              const void *inp, int B, Dtype d) {
    if (backend.dry || B <= 0) return;
    layernorm_forward_warp<<<warp_blocks(B), 32 * WARPS_PER_BLOCK, 0, backend.compute>>>(
        out, mean, rstd, inp, ln->weight.data, ln->bias.data, ln->weight.dtype, B, ln->dim, d,
        backend.gemm_dtype);
    cudaCheck(cudaGetLastError());
}
/* dinp += LayerNorm's input gradient, rounded to d, from dout (the Linear
 * after the norm wrote it, and only this reads it); dinp, dout and inp
 * held in gemm_dtype; the parameters' gradients added */
static void layernorm_backward(const LayerNorm *ln, void *dinp, const void *dout,
                               const void *inp, const float *mean, const float *rstd, int B,
                               Dtype d) {
    if (backend.dry || B <= 0) return;
    Dtype held = backend.gemm_dtype;
    layernorm_backward_warp<<<warp_blocks(B), 32 * WARPS_PER_BLOCK, 0, backend.compute>>>(
        dinp, dout, inp, ln->weight.data, ln->weight.dtype, mean, rstd, B, ln->dim, d, held);
    cudaCheck(cudaGetLastError());
    column_sums(ln->dweight.data, ln->dbias.data, ln->dweight.dtype, dout, held, inp, mean, rstd,
                B, ln->dim);
}
/* dbias (O) += the column sums of dout (B, O) */
static void bias_backward(Buf dbias, Buf dout, int B, int O) {
    column_sums(NULL, dbias.data, dbias.dtype, dout.data, dout.dtype, NULL, NULL, NULL, B, O);
}

/* ---- the matmul: fp32, or 16-bit on the tensor cores -----------------------
 * C (m, n) = op(A) op(B) + beta C, column-major as cuBLAS sees it, C held
 * in hc (fp32, or 16 bits: the sum rounded once, as it is written; with
 * beta 0, C is not read). In fp32,
 * cublasSgemm on the fp32 units (TF32 tensor cores with --tf32). With
 * 16-bit parameters (--param-dtype bf16 or fp16) on the tensor cores with
 * fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F), as PyTorch's
 * autocast and llm.c multiply: each operand is read as it is
 * held (ha, hb): a Linear's input and output gradient in 16 bits already
 * (above), its weight too where its unit's full state is gathered in 16
 * bits (fsdp.c's full_dtype); an operand in float slots (no_shard's and
 * zero1's weights: 16-bit values, core.h) is packed on the way into
 * scratch from the pool, as cuBLAS's workspace is. cuBLAS's fastest
 * tensor-core kernels want operands on 16-byte boundaries: a weight read
 * from a full state starts on one when the parameters before it in its
 * flat parameter add up to a multiple of 8 values, as in every model the
 * course runs (widths of multiples of 8); another width multiplies right,
 * perhaps slower (PyTorch's FSDP, with use_orig_params, pads each
 * parameter of a flat parameter to that boundary; ours are end to end).
 * (Attention's products: kernels/transformer.h's heads_gemm.) */
/* cuBLAS's name for a format: the tensor cores' inputs, or an fp32 output */
static cudaDataType_t cuda_type(Dtype d) {
    return d == DTYPE_BF16 ? CUDA_R_16BF : d == DTYPE_FP16 ? CUDA_R_16F : CUDA_R_32F;
}
static long gemm_span(cublasOperation_t op, int rows, int cols, int ld) {
    int major = op == CUBLAS_OP_N ? cols : rows, minor = op == CUBLAS_OP_N ? rows : cols;
    return (long)(major - 1) * ld + minor; /* the elements it spans */
}
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A,
                 Dtype ha, int lda, const void *B, Dtype hb, int ldb, float beta, void *C,
                 Dtype hc, int ldc) {
    if (backend.dry) return; /* --plan */
    Dtype d = backend.gemm_dtype;
    const float one = 1.0f;
    if (d == DTYPE_FP32) {
        cublasCheck(cublasSgemm(backend.cublas, ta, tb, m, n, k, &one, (const float *)A, lda,
                                (const float *)B, ldb, &beta, (float *)C, ldc));
        return;
    }
    long na = gemm_span(ta, m, k, lda), nb = gemm_span(tb, k, n, ldb);
    const void *a = gemm_input(A, ha, na, d), *b = gemm_input(B, hb, nb, d);
    cudaDataType_t t = cuda_type(d);
    cublasCheck(cublasGemmEx(backend.cublas, ta, tb, m, n, k, &one, a, t, lda, b, t, ldb, &beta, C,
                             cuda_type(hc), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    gemm_input_free(a, A, na);
    gemm_input_free(b, B, nb);
}

/* ---- a Linear's product and bias in one: cuBLASLt's bias epilogue -------
 * With 16-bit parameters, linear_forward asks cuBLASLt for out = weight @
 * inp + bias with the bias added as the sums are written (the epilogue),
 * as PyTorch's addmm does on a GPU. Without it the bias is first written
 * into every row of out, and the GEMM reads it back (beta 1): two passes
 * over B x O values, about 0.8 ms of GPT-2 124M's step at 8 x 1024 tokens
 * on an H100. The values are the same: the bias is already held in out's
 * 16 bits, and cuBLAS adds it to the fp32 sum before rounding once, either
 * way. cuBLASLt takes the bias in out's type; where the bias is held in
 * another (no_shard's float slots) or its heuristic has no algorithm, the
 * bias is written first, as before. */
static uint32_t address_alignment(const void *p) { /* what the heuristic must assume */
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}
static void lt_prefer(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                      const void *p) {
    uint32_t a = address_alignment(p);
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attr, &a, sizeof(a)));
}
/* One cuBLASLt product, column-major as cuBLAS sees it: d (m, n) =
 * op(a) (m, k) @ op(b) (k, n), a held in ah (a weight: packed to the
 * GEMM's format first where it is not, as gemm does), b in the GEMM's
 * format, d (and aux) in dt, and an epilogue applied as the sums are written:
 * CUBLASLT_EPILOGUE_BIAS adds bias (m values, dt) to every column;
 * GELU_AUX_BIAS adds it, keeps the sum in aux and writes its GELU
 * (kernels/transformer.h); DGELU multiplies the product by the GELU's
 * derivative at aux (GELU's input, saved by forward). aux's columns are m
 * apart. Returns 0 (nothing run) where cuBLASLt has no algorithm for it. */
typedef struct {
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *a;
    Dtype ah;
    const void *b;
    int lda, ldb;
    void *d;
    Dtype dt;
    uint32_t epilogue;
    const void *bias;
    void *aux;
} LtProduct;
static int lt_matmul(const LtProduct *p) {
    cudaDataType_t t = cuda_type(backend.gemm_dtype), to = cuda_type(p->dt);
    long na = gemm_span(p->ta, p->m, p->k, p->lda);
    const void *a = gemm_input(p->a, p->ah, na, backend.gemm_dtype);
    const int32_t ta = p->ta, tb = p->tb;
    const int64_t aux_ld = p->m;
    const uint64_t workspace = backend.lt_workspace_bytes;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld; /* their stored shapes: op(a) is a's transpose with T */
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p->epilogue,
                                               sizeof(p->epilogue)));
    if (p->bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &p->bias, sizeof(p->bias)));
    if (p->aux) {
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                   &p->aux, sizeof(p->aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &aux_ld, sizeof(aux_ld)));
    }
    int ra = p->ta == CUBLAS_OP_N ? p->m : p->k, rb = p->tb == CUBLAS_OP_N ? p->k : p->n;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, t, (uint64_t)ra,
                                           (uint64_t)(p->ta == CUBLAS_OP_N ? p->k : p->m), p->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, t, (uint64_t)rb,
                                           (uint64_t)(p->tb == CUBLAS_OP_N ? p->n : p->k), p->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, to, (uint64_t)p->m, (uint64_t)p->n, p->m));
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &workspace, sizeof(workspace)));
    lt_prefer(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a);
    lt_prefer(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p->b);
    lt_prefer(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p->d);
    lt_prefer(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p->d);
    cublasLtMatmulHeuristicResult_t found;
    int n = 0; /* no algorithm: NOT_SUPPORTED, and n 0 */
    if (cublasLtMatmulAlgoGetHeuristic(backend.cublaslt, op, la, lb, ld, ld, pref, 1, &found, &n) !=
        CUBLAS_STATUS_SUCCESS)
        n = 0;
    if (n > 0) {
        const float one = 1.0f, zero = 0.0f;
        cublasCheck(cublasLtMatmul(backend.cublaslt, op, &one, a, la, p->b, lb, &zero, p->d, ld,
                                   p->d, ld, &found.algo, backend.lt_workspace, workspace,
                                   backend.compute));
        backend.lt_products++;
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatmulDescDestroy(op));
    gemm_input_free(a, p->a, na);
    return n > 0;
}
/* out^T (O, B) = weight (O, I) @ inp^T (I, B) + bias, as linear_forward's
 * product below; 0 (nothing run) where cuBLASLt has no algorithm for it */
static int linear_forward_lt(const Linear *l, Buf out, const void *inp, int B) {
    LtProduct p = {CUBLAS_OP_T, CUBLAS_OP_N, l->out, B, l->in, l->weight.data, l->weight.dtype,
                   inp, l->in, l->in, out.data, out.dtype, CUBLASLT_EPILOGUE_BIAS,
                   l->bias.data, NULL};
    return lt_matmul(&p);
}

/* cuBLAS is column-major: a row-major (R, K) matrix is, to cuBLAS, its
 * (K, R) transpose with leading dimension K. So each product below is
 * written for the transposes, as llm.c does:
 *   out^T (O, B)    = weight (O, I) @ inp^T (I, B)     -> weight transposed
 *   dinp^T (I, B)   = weight^T (I, O) @ dout^T (O, B)
 *   dweight^T (I, O) += inp^T (I, B) @ dout (B, O)     -> dout transposed
 * Forward adds to the bias already in out (with 16-bit parameters,
 * cuBLASLt adds the bias instead: above); backward adds into the
 * parameters' gradients and writes the input's (beta 0: nothing else adds
 * to it, so it needs no zeroing pass first). fp32 unless --tf32
 * (backend_init), or 16-bit inputs on the tensor cores with 16-bit
 * parameters (gemm, above); inp is held in backend.gemm_dtype, and so
 * are out and dinp in the models (every reader of a Linear's output and
 * input gradient reads it as held, above; tests/test_kernels.cu also
 * writes fp32: hence Bufs), and dout; the weight and bias in their unit's
 * full state's format, and their gradients in its full gradient's (the
 * Linear's Bufs). matmul_forward and matmul_backward are the products
 * without the bias (a Linear with bias=False, GPT-2's lm_head: they read
 * no bias), out's and dout's rows ldo and ldd values apart (BLAS's
 * leading dimension; out_features in linear_*): the logits' rows are
 * padded (logits_stride). */
static void matmul_forward(const Linear *l, Buf out, int ldo, const void *inp, int B) {
    if (backend.dry) return; /* --plan */
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, l->out, B, l->in, l->weight.data, l->weight.dtype, l->in, inp,
         backend.gemm_dtype, l->in, 0.0f, out.data, out.dtype, ldo);
}
static void linear_forward(const Linear *l, Buf out, const void *inp, int B) {
    if (backend.dry) return; /* --plan */
    int I = l->in, O = l->out;
    Buf w = l->weight, bias = l->bias;
    if (!bias.data) {
        matmul_forward(l, out, O, inp, B);
        return;
    }
    /* the bias in out's type: cuBLASLt adds it */
    if (backend.gemm_dtype != DTYPE_FP32 && bias.dtype == out.dtype &&
        linear_forward_lt(l, out, inp, B))
        return;
    FOR_EACH((long)B * O, bias_broadcast_one, out.data, bias.data, O, bias.dtype, out.dtype);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, O, B, I, w.data, w.dtype, I, inp, backend.gemm_dtype, I, 1.0f,
         out.data, out.dtype, O);
}

/* dweight^T (I, O) += inp^T (I, B) @ dout (B, O): a Linear's weight gradient */
static void matmul_backward_weight(const Linear *l, Buf dout, int ldd, const void *inp, int B) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, l->in, l->out, B, inp, backend.gemm_dtype, l->in, dout.data,
         dout.dtype, ldd, 1.0f, l->dweight.data, l->dweight.dtype, l->in);
}
static void matmul_backward(const Linear *l, Buf dinp, Buf dout, int ldd, const void *inp, int B) {
    if (backend.dry) return; /* --plan */
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, l->in, B, l->out, l->weight.data, l->weight.dtype, l->in,
         dout.data, dout.dtype, ldd, 0.0f, dinp.data, dinp.dtype, l->in);
    matmul_backward_weight(l, dout, ldd, inp, B);
}
static void linear_backward(const Linear *l, Buf dinp, Buf dout, const void *inp, int B) {
    if (backend.dry) return; /* --plan */
    matmul_backward(l, dinp, dout, l->out, inp, B);
    if (l->dbias.data) bias_backward(l->dbias, dout, B, l->out);
}
#else
/* The Linear layers are three matmuls, and a matmul's time goes to loading
 * operands, not to multiplying them: a plain loop loads one or two numbers
 * per multiply-add. The loops below do what BLIS and llm.c's
 * matmul_forward do, small enough to read:
 *
 * - register blocking: a tile of 16 rows x 16 columns of sums stays in
 *   SIMD registers (sixteen AVX-512 ones) for the whole sum, while one
 *   16-float row of the other operand streams by: one load, 16 multiplies;
 * - packing: that operand is first copied into contiguous panels, 16
 *   columns wide, so the tile reads it front to back whatever its layout
 *   (forward's weight is read as its transpose);
 * - a tile chosen at run time for the CPU it runs on (AVX-512, AVX2, or
 *   plain C), so a binary built without -march=native is fast as well.
 *
 * What they never change is the arithmetic. Every output element is its
 * starting value plus the products in increasing order of the summed
 * index (i in forward, o for dinp, b for dweight), each product rounded
 * and then added: a multiply, then an add, never a fused multiply-add
 * (with -std=c11 GCC does not contract a * b + c). A tile or a packed copy
 * changes where the numbers sit, not which operations run on them. That
 * order is written in the naive loop, accumulate_naive, and
 * tests/test_units.c checks every fast loop against it bit for bit: a
 * sample's forward gives the same bits on every rank and every batch size.
 * Giving up FMA costs little on a CPU with separate add and multiply
 * pipes: on AMD Zen 4 (two FADD pipes, two FMUL/FMA pipes, AVX-512 run on
 * them as two 256-bit halves) a multiply and an add take the two kinds of
 * pipe side by side, in about the time of one FMA. */

/* The definition, and the tests' reference: dst (R, n) += coef (R, K) @
 * src (K, n). coef[r][k] is coef[r * coef_row + k * coef_col] (coef_row 1
 * reads coef down its columns: a transposed operand); src's and dst's
 * rows are n apart. Each element: its old value, then for k = 0, 1, ...,
 * K - 1 the rounded product added, the sum rounded. */
static inline void accumulate_naive(float *dst, const float *coef, long coef_row, long coef_col,
                                    const float *src, int R, int K, int n) {
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            float sum = dst[(long)r * n + j];
            for (int k = 0; k < K; k++) {
                float product = coef[r * coef_row + k * coef_col] * src[(long)k * n + j];
                sum = sum + product;
            }
            dst[(long)r * n + j] = sum;
        }
}

/* A tile is at most TILE_ROWS_MAX rows (the AVX-512 tile's) by TILE_COLS
 * columns: one 16-float vector per row. f32x16 is GCC's and clang's
 * vector type: one AVX-512 register, two AVX2 ones, four SSE ones; its +
 * and * work lane by lane, the same IEEE operations as on single floats. */
enum { TILE_ROWS_MAX = 16, TILE_COLS = 16 };
typedef float f32x16 __attribute__((vector_size(64)));

/* The micro-kernel: c (rows x 16, rows ldc apart) += a (rows, K) @ b (K,
 * 16), a[r][k] at a[r + k * a_col] (a column of a tile's rows of coef
 * after another: pack_coef), b's rows of 16 floats b_row apart (a packed
 * panel's: 16). The sums live in registers from the first k to the last
 * and are stored once, each continued exactly as the naive loop continues
 * it. rows is a constant where this is inlined (below), so
 * the loop over rows unrolls and acc is registers, not memory.
 *
 * Why one vector wide and 16 rows tall, not the 4 x 32 this once was or
 * BLIS's 6 x 64: a coefficient that serves one multiply is loaded and
 * broadcast by that multiply itself (AVX-512's vmulps m32{1to16}, done by
 * the load unit), while one that serves two needs a broadcast instruction
 * of its own, competing with the multiplies and adds for the vector pipes.
 * On Zen 4 this tile runs ~110 GFLOP/s from L1, an 8 x 32 one ~77, 6 x 64
 * ~90. */
static inline __attribute__((always_inline)) void tile_kernel(int rows, float *c, long ldc,
                                                              const float *a, long a_col,
                                                              const float *b, long b_row, int K) {
    f32x16 acc[TILE_ROWS_MAX], row; /* memcpy: a load or store at any float's address */
    for (int r = 0; r < rows; r++) memcpy(&acc[r], c + r * ldc, sizeof(f32x16));
    for (int k = 0; k < K; k++) {
        memcpy(&row, b + k * b_row, sizeof(f32x16));
        for (int r = 0; r < rows; r++) {
            f32x16 product = a[r + k * a_col] * row; /* multiply, then add: two */
            acc[r] += product;                       /* statements, never fused */
        }
    }
    for (int r = 0; r < rows; r++) memcpy(c + r * ldc, &acc[r], sizeof(f32x16));
}

/* One tile per instruction set, each the same source compiled for it,
 * with as many rows as its registers hold (AVX-512: 32 of 512 bits, 16
 * for sums; AVX2: 16 of 256 bits, two per f32x16, 8 for 4 rows' sums). */
typedef void (*TileFn)(float *c, long ldc, const float *a, long a_col, const float *b, long b_row,
                       int K);
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx512f"))) static void
tile_avx512(float *c, long ldc, const float *a, long a_col, const float *b, long b_row, int K) {
    tile_kernel(16, c, ldc, a, a_col, b, b_row, K);
}
__attribute__((target("avx2"))) static void
tile_avx2(float *c, long ldc, const float *a, long a_col, const float *b, long b_row, int K) {
    tile_kernel(4, c, ldc, a, a_col, b, b_row, K);
}
#endif
static void tile_plain(float *c, long ldc, const float *a, long a_col, const float *b, long b_row,
                       int K) {
    tile_kernel(2, c, ldc, a, a_col, b, b_row, K);
}

typedef struct {
    TileFn run;
    int rows; /* its rows, 1..TILE_ROWS_MAX */
    const char *name;
} Tile;

/* The tiles this CPU runs, best first, into tiles[] (3 at most); returns
 * how many. Asked at each call: the answer is a flag the C runtime read
 * at start-up, so it is cheap, and there is no state for threads to share. */
static int cpu_tiles(Tile *tiles) {
    int n = 0;
#if defined(__GNUC__) && defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) tiles[n++] = (Tile){tile_avx512, 16, "avx512"};
    if (__builtin_cpu_supports("avx2")) tiles[n++] = (Tile){tile_avx2, 4, "avx2"};
#endif
    tiles[n++] = (Tile){tile_plain, 2, "plain"};
    return n;
}
static inline Tile cpu_tile(void) {
    Tile tiles[3];
    cpu_tiles(tiles);
    return tiles[0];
}

/* Scratch for the panels, 64-byte aligned (a cache line, an AVX-512
 * vector), so that no vector load straddles two lines. Outside the
 * ledger, as cuBLAS's workspace would be on a GPU. */
static float *panel_alloc(long floats) {
    size_t bytes = ((size_t)floats * sizeof(float) + 63) / 64 * 64;
    if (bytes == 0) bytes = 64;
    return (float *)host_memory_or_die(aligned_alloc(64, bytes), "allocate a matmul panel",
                                       __FILE__, __LINE__);
}

/* out (16, 16), rows 16 apart, = in^T, in's rows ld apart: packing's
 * transpose, a block at a time. Its bounds are constants and its operands
 * cannot overlap (restrict), so the compiler makes it a few vector loads,
 * permutes and stores, not 256 single moves (without restrict, inlined in
 * some callers, it did not: forward at 16 rows ran at half the speed). */
static inline void transpose16(float *restrict out, const float *restrict in, long ld) {
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 16; j++) out[k * 16 + j] = in[j * ld + k];
}

/* src (K, n), element (k, j) at src[k * src_row + j * src_col], packed as
 * column panels: panel p holds columns [16p, 16p + 16) laid out (K, 16),
 * 0 past column n. src_row n, src_col 1 is a plain (K, n) matrix, copied a
 * row of 16 at a time; src_row 1, src_col K reads an (n, K) one as its
 * transpose (forward's weight), 16 x 16 blocks at a time. Returns
 * ceil(n / 16) * K * 16 floats. */
static float *pack_src(const float *src, long src_row, long src_col, int K, int n) {
    int panels = (n + TILE_COLS - 1) / TILE_COLS;
    float *packed = panel_alloc((long)panels * K * TILE_COLS);
    for (int p = 0; p < panels; p++) {
        float *panel = packed + (long)p * K * TILE_COLS;
        const float *from = src + (long)p * TILE_COLS * src_col;
        int cols = n - p * TILE_COLS < TILE_COLS ? n - p * TILE_COLS : TILE_COLS;
        if (cols < TILE_COLS) memset(panel, 0, (size_t)K * TILE_COLS * sizeof(float));
        int k = 0;
        if (src_col == 1 && cols == TILE_COLS) /* a constant size: one vector move */
            for (; k < K; k++)
                memcpy(panel + (long)k * TILE_COLS, from + k * src_row, sizeof(float) * TILE_COLS);
        if (src_row == 1 && cols == TILE_COLS)
            for (; k + 16 <= K; k += 16)
                transpose16(panel + (long)k * TILE_COLS, from + k, src_col);
        for (int j = 0; j < cols; j++) /* what is left, one float at a time */
            for (int kk = k; kk < K; kk++)
                panel[(long)kk * TILE_COLS + j] = from[kk * src_row + j * src_col];
    }
    return packed;
}

/* coef's rows [0, rows) as a tile reads them, a[r + k * tile_rows], and 0
 * for the tile's rows past them. 16 rows read along k (forward's and
 * dinp's coef, for the AVX-512 tile) are transposed 16 x 16 at a time; the
 * rest is copied one float at a time, 16 k at a time, so that the 16 lines
 * of a it writes stay in L1 while they fill. */
static void pack_coef(float *a, const float *coef, long coef_row, long coef_col, int rows,
                      int tile_rows, int K) {
    int k0 = 0;
    if (coef_col == 1 && rows == 16 && tile_rows == 16) /* the AVX-512 tile's */
        for (; k0 + 16 <= K; k0 += 16) transpose16(a + (long)k0 * 16, coef + k0, coef_row);
    for (; k0 < K; k0 += 16)
        for (int r = 0; r < rows; r++)
            for (int k = k0; k < K && k < k0 + 16; k++)
                a[(long)k * tile_rows + r] = coef[r * coef_row + k * coef_col];
    for (int k = 0; k < K; k++)
        for (int r = rows; r < tile_rows; r++) a[(long)k * tile_rows + r] = 0.0f;
}

/* A tile at dst's edge, fewer rows or columns than a tile: run on a full
 * one, c, with dst's part copied in, 0 around it, and copied back. The
 * padding's sums are thrown away; each real element gets the very
 * operations it gets inside. */
static void edge_tile(Tile t, float *dst, long ldd, int rows, int cols, const float *a, long a_col,
                      const float *b, long b_row, int K) {
    float c[TILE_ROWS_MAX * TILE_COLS] = {0};
    for (int r = 0; r < rows; r++) memcpy(c + r * TILE_COLS, dst + r * ldd, cols * sizeof(float));
    t.run(c, TILE_COLS, a, a_col, b, b_row, K);
    for (int r = 0; r < rows; r++) memcpy(dst + r * ldd, c + r * TILE_COLS, cols * sizeof(float));
}

/* dst (R, n), rows ldd apart, += coef (R, K) @ src (K, n), src's columns
 * [j0, j0 + 16) at src + j0 * src_col, rows src_row apart: packed
 * (pack_src: src_col K, src_row 16), or a plain matrix read in place
 * (src_col 1, src_row n; only with n a multiple of 16, or a tile would read
 * past its rows' end). A tile's rows of coef at a time, across every
 * column of tiles. coef read down its columns (coef_row 1: dweight's dout)
 * already has a tile's layout, a[r + k * coef_col], and is read in place;
 * otherwise (and for the last rows, fewer than a tile) the rows are
 * packed, a small copy that stays in L1 while it serves every panel. */
static void accumulate_packed(Tile t, float *dst, long ldd, const float *coef, long coef_row,
                              long coef_col, const float *src, long src_col, long src_row, int R,
                              int K, int n) {
    float *a = panel_alloc((long)K * t.rows);
    for (int r0 = 0; r0 < R; r0 += t.rows) {
        int rows = R - r0 < t.rows ? R - r0 : t.rows;
        const float *rows_of_coef = coef + r0 * coef_row;
        long a_col = coef_col;
        if (coef_row != 1 || rows < t.rows) {
            pack_coef(a, rows_of_coef, coef_row, coef_col, rows, t.rows, K);
            rows_of_coef = a, a_col = t.rows;
        }
        for (int j0 = 0; j0 < n; j0 += TILE_COLS) {
            int cols = n - j0 < TILE_COLS ? n - j0 : TILE_COLS;
            float *c = dst + r0 * ldd + j0;
            const float *b = src + j0 * src_col;
            if (rows == t.rows && cols == TILE_COLS)
                t.run(c, ldd, rows_of_coef, a_col, b, src_row, K);
            else edge_tile(t, c, ldd, rows, cols, rows_of_coef, a_col, b, src_row, K);
        }
    }
    free(a);
}

/* Fewer rows than a tile: too few to repay packing src, so a row at a
 * time, each k's product added across the row (vectorised across j), dst's
 * row staying in L1. Each element still gets its products in increasing k. */
static void accumulate_rows(float *dst, const float *coef, long coef_row, long coef_col,
                            const float *src, int R, int K, int n) {
    for (int r = 0; r < R; r++) {
        float *d = dst + (long)r * n;
        for (int k = 0; k < K; k++) {
            float c = coef[r * coef_row + k * coef_col];
            const float *s = src + (long)k * n;
            for (int j = 0; j < n; j++) {
                float product = c * s[j];
                d[j] = d[j] + product;
            }
        }
    }
}

/* dst (R, n) += coef (R, K) @ src (K, n), as accumulate_naive defines it,
 * bit for bit, with tile t (accumulate: this CPU's best): src packed, then
 * tiled; with one tile's rows, each panel would serve once, so src
 * is read where it is. */
static void accumulate_with(Tile t, float *dst, const float *coef, long coef_row, long coef_col,
                            const float *src, int R, int K, int n) {
    if (R < t.rows) {
        accumulate_rows(dst, coef, coef_row, coef_col, src, R, K, n);
        return;
    }
    if (R == t.rows && n % TILE_COLS == 0) {
        accumulate_packed(t, dst, n, coef, coef_row, coef_col, src, 1, n, R, K, n);
        return;
    }
    float *packed = pack_src(src, n, 1, K, n);
    accumulate_packed(t, dst, n, coef, coef_row, coef_col, packed, K, TILE_COLS, R, K, n);
    free(packed);
}
static void accumulate(float *dst, const float *coef, long coef_row, long coef_col,
                       const float *src, int R, int K, int n) {
    accumulate_with(cpu_tile(), dst, coef, coef_row, coef_col, src, R, K, n);
}

/* The CPU's loops read and write fp32 slots, the CPU's gemm_dtype. An
 * operand held in 16 bits, as a GPU holds it (tests/test_units.c runs a
 * GPU's storage through whole models on the CPU), is unpacked into
 * scratch first; a 16-bit result is computed in scratch and packed, each
 * value rounded once, as cuBLAS rounds what it writes. */
static const float *cpu_operand(const void *x, Dtype held, long n) {
    if (held == DTYPE_FP32) return (const float *)x;
    float *f = (float *)host_malloc((size_t)n * sizeof(float), "unpack a matmul operand");
    FOR_EACH(n, unpack_one, f, (const uint16_t *)x, held);
    return f;
}
static void cpu_operand_free(const float *f, const void *x) {
    if ((const void *)f != x) free((void *)f);
}
static float *cpu_result(void *x, Dtype held, long n) {
    if (held == DTYPE_FP32) return (float *)x;
    return (float *)host_malloc((size_t)n * sizeof(float), "hold a matmul's result");
}
static void cpu_result_store(float *f, void *x, Dtype held, long n) {
    if (held == DTYPE_FP32) return;
    FOR_EACH(n, pack_one, (uint16_t *)x, f, held, 1.0f);
    free(f);
}

/* out (B, O) = inp (B, I) @ weight^T + bias, weight (O, I) as nn.Linear.
 * The same tiles as backward: out += inp @ weight^T, the weight packed as
 * its transpose, (I, O) in panels of 16 outputs (pack_src). out[b][o] is
 * bias[o] plus the products in increasing i: it depends only on sample b
 * and the weights, so a sample's forward gives the same bits on every
 * rank and every batch size. inp is held in gemm_dtype, out, the weight
 * and bias each in its own format (cpu_operand, above). out's rows are ldo
 * apart: O, or wider for a product without bias (matmul_forward: the
 * padded logits, whose padding it writes as 0). */
static void cpu_linear_forward(Buf out, int ldo, const void *inp, Buf weight_held, Buf bias,
                               int B, int I, int O) {
    if (backend.dry) return; /* --plan */
    const float *x = cpu_operand(inp, backend.gemm_dtype, (long)B * I);
    const float *weight = cpu_operand(weight_held.data, weight_held.dtype, (long)O * I);
    float *y = cpu_result(out.data, out.dtype, (long)B * ldo);
    if (!bias.data) /* the product alone, its rows' padding included */
        dev_zero(y, (size_t)B * ldo * sizeof(float));
    else if (B > 0) { /* rows O apart: linear_forward's; row 0 the bias, the rest copies */
        for (int o = 0; o < O; o++) y[o] = load_as(bias.data, o, bias.dtype);
        for (int b = 1; b < B; b++) memcpy(y + (long)b * O, y, (size_t)O * sizeof(float));
    }
    float *packed = pack_src(weight, 1, I, I, O); /* weight^T (I, O), in panels */
    accumulate_packed(cpu_tile(), y, ldo, x, I, 1, packed, I, TILE_COLS, B, I, O);
    free(packed);
    cpu_result_store(y, out.data, out.dtype, (long)B * ldo);
    cpu_operand_free(x, inp);
    cpu_operand_free(weight, weight_held.data);
}
static void linear_forward(const Linear *l, Buf out, const void *inp, int B) {
    cpu_linear_forward(out, l->out, inp, l->weight, l->bias, B, l->in, l->out);
}
static void matmul_forward(const Linear *l, Buf out, int ldo, const void *inp, int B) {
    Buf no_bias = buf(NULL, l->weight.dtype);
    cpu_linear_forward(out, ldo, inp, l->weight, no_bias, B, l->in, l->out);
}

/* dinp, dout (its rows ldd apart), the weight and its gradient each in
 * its own format, inp in gemm_dtype (cpu_operand, above); linear_backward
 * adds the bias's gradient */
static void matmul_backward(const Linear *l, Buf dinp, Buf dout, int ldd, const void *inp, int B) {
    if (backend.dry) return; /* --plan */
    int I = l->in, O = l->out;
    const float *g = cpu_operand(dout.data, dout.dtype, (long)B * ldd);
    const float *weight = cpu_operand(l->weight.data, l->weight.dtype, (long)O * I);
    const float *x = cpu_operand(inp, backend.gemm_dtype, (long)B * I);
    float *dx = cpu_result(dinp.data, dinp.dtype, (long)B * I);
    /* dinp (B, I) = dout (B, O) @ weight (O, I): summed over o, from 0 */
    dev_zero(dx, (size_t)B * I * sizeof(float));
    accumulate(dx, g, ldd, 1, weight, B, O, I);
    cpu_result_store(dx, dinp.data, dinp.dtype, (long)B * I);
    /* dweight (O, I) += dout^T (O, B) @ inp (B, I): summed over b, from
     * what it holds, rounded once as it is stored (as cuBLAS with beta 1) */
    Buf dw = l->dweight;
    float *dweight = (float *)cpu_operand(dw.data, dw.dtype, (long)O * I);
    accumulate(dweight, g, 1, ldd, x, O, B, I);
    cpu_result_store(dweight, dw.data, dw.dtype, (long)O * I);
    cpu_operand_free(g, dout.data);
    cpu_operand_free(x, inp);
    cpu_operand_free(weight, l->weight.data);
}
/* dbias (O) += the sum over the B rows of dout (B, O): bias_backward_one's
 * sums, each from 0 over b in increasing order, but a row at a time, so
 * that dout is read front to back and the loop vectorises across o (a
 * column at a time strides through all of dout once per column) */
static void cpu_bias_backward(Buf dbias, Buf dout, int B, int O) {
    const float *g = cpu_operand(dout.data, dout.dtype, (long)B * O);
    float *sum = (float *)host_calloc((size_t)O, sizeof(float), "sum a bias gradient");
    for (int b = 0; b < B; b++)
        for (int o = 0; o < O; o++) sum[o] += g[(long)b * O + o];
    for (int o = 0; o < O; o++)
        store_as(dbias.data, o, load_as(dbias.data, o, dbias.dtype) + sum[o], dbias.dtype);
    free(sum);
    cpu_operand_free(g, dout.data);
}
static void linear_backward(const Linear *l, Buf dinp, Buf dout, const void *inp, int B) {
    if (backend.dry) return; /* --plan */
    matmul_backward(l, dinp, dout, l->out, inp, B);
    if (l->dbias.data) cpu_bias_backward(l->dbias, dout, B, l->out);
}

/* out (B, D) = (inp - mean) * rstd * weight + bias, a matmul's input
 * (rounded to d); out and inp held in backend.gemm_dtype; saves mean, rstd
 * (B): a row per FOR_EACH element here, a warp per row on a GPU (above) */
static void layernorm_forward(const LayerNorm *ln, void *out, float *mean, float *rstd,
                              const void *inp, int B, Dtype d) {
    FOR_EACH(B, layernorm_forward_row, out, mean, rstd, inp, ln->weight.data, ln->bias.data,
             ln->weight.dtype, ln->dim, d, backend.gemm_dtype);
}
static void layernorm_backward(const LayerNorm *ln, void *dinp, const void *dout,
                               const void *inp, const float *mean, const float *rstd, int B,
                               Dtype d) {
    Dtype held = backend.gemm_dtype;
    int D = ln->dim;
    FOR_EACH(B, layernorm_backward_row, dinp, dout, inp, ln->weight.data, ln->weight.dtype, mean,
             rstd, D, d, held);
    FOR_EACH(D, layernorm_backward_col, ln->dweight.data, ln->dbias.data, dout, inp, mean, rstd,
             B, D, held, ln->dweight.dtype);
}
#endif

/* out = gelu(inp), a matmul's input (rounded to d), from fc1's output;
 * both held in gemm_dtype */
static void gelu_forward(void *out, const void *inp, long n, Dtype d) {
    FOR_EACH(n, gelu_forward_one, out, inp, d, backend.gemm_dtype);
}
/* dinp = dout * gelu'(inp), written (not added), held as a matmul's input */
static void gelu_backward(void *dinp, const void *dout, const void *inp, long n, Dtype d) {
    FOR_EACH(n, gelu_backward_one, dinp, dout, inp, d, backend.gemm_dtype);
}

/* The embedding's gradient from the batch's rows grouped by token
 * (embedding_backward_one): one thread per distinct token and channel;
 * dout held in gemm_dtype. */
static void embedding_backward(Buf dweight, const void *dout, const TokenRows *by_token, int C) {
    FOR_EACH((long)by_token->distinct * C, embedding_backward_one, dweight.data, dout,
             by_token->rows, by_token->end, by_token->token, C, backend.gemm_dtype,
             dweight.dtype);
}

/* out (B, T*C), a matmul's input (held in gemm_dtype): the embeddings of
 * the T context bytes of each sample, end to end */
static void embedding_forward(void *out, const unsigned char *tokens, Buf weight, int B, int T,
                              int C) {
    FOR_EACH((long)B * T * C, embedding_forward_one, out, tokens, weight.data, weight.dtype, C,
             backend.gemm_dtype);
}

/* Softmax cross-entropy, averaged over the B samples (logits (B, V), rows
 * ld apart): writes each row's lse (B), the log of its softmax's
 * denominator, and each sample's loss (B), and returns their mean (summed
 * on the host in sample order, so the same bits on every backend). The
 * logits are held in gemm_dtype: no kernels but these two read them, so
 * on a GPU with 16-bit parameters the head's GEMM writes them in 16 bits,
 * as autocast's logits are, and the softmax runs in fp32 (PyTorch's
 * logits.float()). */
static float crossentropy_forward(float *lse, float *losses, const void *logits, int ld,
                                  const int *targets, int B, int V) {
#ifdef __CUDACC__
    if (!backend.dry && B > 0) { /* a warp a row (above) */
        crossentropy_forward_warp<<<warp_blocks(B), 32 * WARPS_PER_BLOCK, 0, backend.compute>>>(
            lse, losses, logits, ld, targets, B, V, backend.gemm_dtype);
        cudaCheck(cudaGetLastError());
    }
#else
    FOR_EACH(B, crossentropy_forward_row, lse, losses, logits, ld, targets, V,
             backend.gemm_dtype);
#endif
    float *host =
        (float *)host_calloc(B > 0 ? (size_t)B : 1, sizeof(float), "read the losses back");
    dev_to_host(host, losses, (size_t)B * sizeof(float));
    double loss = 0.0;
    for (int b = 0; b < B; b++) loss += host[b];
    free(host);
    return (float)(loss / B);
}
/* Its backward, for loss scale `dloss`: dlogits = (softmax - onehot) *
 * dloss, each probability computed again from the logit and its row's lse,
 * and written over the logits, held as they are (in 16 bits on a GPU with
 * 16-bit parameters, so the head's two backward GEMMs read it without
 * packing it): nothing reads the logits after this, so the gradient needs
 * no buffer of its own, which would be the largest activation (GPT-2's
 * B*T x 50257 values, 1.6 GB in fp32 at B*T = 8192). llm.c's fused
 * classifier does the same. Each logit is read once and written once
 * here, read once in forward: 6 bytes in 16 bits, the least there is. */
static void crossentropy_backward(void *logits, int ld, const float *lse, const int *targets,
                                  float dloss, int B, int V, Dtype d) {
#ifdef __CUDACC__
    if (B <= 0 || backend.dry) return;
    crossentropy_backward_rows<<<B, 256, 0, backend.compute>>>(logits, ld, lse, targets, dloss, V,
                                                               d, backend.gemm_dtype);
    cudaCheck(cudaGetLastError());
#else
    FOR_EACH(B, crossentropy_backward_row, logits, ld, lse, targets, dloss, V, d,
             backend.gemm_dtype);
#endif
}

/* ---- a sum of squares, in blocks --------------------------------------------
 * clip_grad_norm's norm and the grad scaler's inf/NaN check (fsdp.c, section 10)
 * sum the squares of a gradient shard: in double, a partial sum for each
 * block of NORM_BLOCK elements, which the host adds in block order, so the
 * same bits every run. On the CPU a block is one loop (sum_squares_block,
 * also --cpu-offload's on the host); on a GPU a warp's: one thread a block
 * would read 4,096 floats alone and a warp's 32 threads 16 KB apart, where
 * lane j reads elements j, j + 32, ... of the block (coalesced) and the 32
 * partial sums meet in the warp's fixed tree of shuffles. */
enum { NORM_BLOCK = 4096 };

FSDP_HD static inline void sum_squares_block(long b, double *partial, const float *x, long n) {
    double sum = 0.0;
    for (long i = b * NORM_BLOCK; i < n && i < (b + 1) * NORM_BLOCK; i++)
        sum += (double)x[i] * x[i];
    partial[b] = sum;
}

#ifdef __CUDACC__
__device__ static inline double warp_sum_double(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__global__ static void sum_squares_warp(double *__restrict__ partial, const float *__restrict__ x,
                                        long n, long blocks) {
    long b = (long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (b >= blocks) return; /* a whole warp */
    double sum = 0.0;
    for (long i = b * NORM_BLOCK + lane; i < n && i < (b + 1) * NORM_BLOCK; i += 32)
        sum += (double)x[i] * x[i];
    sum = warp_sum_double(sum);
    if (lane == 0) partial[b] = sum;
}
/* partial[b] = the sum of squares of block b of x[0, n), b < ceil(n / NORM_BLOCK) */
static void sum_squares_blocks(double *partial, const float *x, long n) {
    long blocks = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    if (backend.dry || blocks == 0) return;
    sum_squares_warp<<<warp_blocks(blocks), 32 * WARPS_PER_BLOCK, 0, backend.compute>>>(
        partial, x, n, blocks);
    cudaCheck(cudaGetLastError());
}
#else
static void sum_squares_blocks(double *partial, const float *x, long n) {
    FOR_EACH((n + NORM_BLOCK - 1) / NORM_BLOCK, sum_squares_block, partial, x, n);
}
#endif

/* Where q, k or v (part 0, 1, 2) of head h at position t of sequence b sits in
 * c_attn's output (B, T, 3D): GPT-2's attention (kernels/transformer.h, flash.h) */
FSDP_HD static inline long qkv_index(long b, int t, int part, int h, int T, int D, int hd) {
    return (b * T + t) * 3L * D + (long)part * D + (long)h * hd;
}

/* x[0, n) rounded to format d, in place; nothing to do in fp32 */
static void round_all(float *x, long n, Dtype d) {
    if (d != DTYPE_FP32) FOR_EACH(n, round_one, x, d);
}

#endif /* FSDP_KERNELS_LAYERS_H */
