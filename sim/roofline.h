/* ============================================================================
 * sim/roofline.h — --plan --roofline GPU: what a step's kernels cost on a
 * GPU, counted, before one has run.
 *
 * defines: step_model_flops, roofline_count, print_roofline
 *
 * Each kernel of one rank's step is listed with the floating-point
 * operations it does and the bytes it reads and writes in the GPU's
 * memory. A kernel can go no faster than the larger of FLOPs / the GPU's
 * peak and bytes / its memory bandwidth: the roofline model. A GEMM of
 * width D does about D/3 flops a byte it moves, so it is bound by compute;
 * a LayerNorm or a GELU does a few flops a value, so it is bound by memory.
 * Summed, the roofline is the least time the step can take: a kernel that
 * reaches it is perfect, and today's simpler ones (the byte MLP's GELU
 * passes, GPT-2's attention scores written out whole) take longer.
 *
 * Three columns, for three ways to store and multiply the values:
 *   fp32       fp32 values, cuBLAS's fp32 GEMMs on the fp32 units (no
 *              tensor core), 4 bytes a value: the GPU build in fp32;
 *   bf16 GEMM  the GPU build with --param-dtype bf16: GEMMs on the tensor
 *              cores (kernels/layers.h's gemm), and every activation
 *              stored in 16 bits (2 bytes), written so by the kernel
 *              before it (model/activations.h): each Linear's input,
 *              output, input gradient and output gradient (the logits'
 *              included), the residual stream and its gradient,
 *              attention's B*H*T^2 probabilities P and their gradient dS
 *              (kernels/transformer.h); and the parameters, read from a
 *              unit's full state gathered in 16 bits (fsdp.c's
 *              full_dtype) from shards AdamW writes in 16 bits, under
 *              the sharded strategies, where the parameters' gradients
 *              are written in 16 bits too (grad_dtype; unless
 *              --reduce-dtype differs). LayerNorm's statistics, the
 *              loss's lse and AdamW's state in fp32 slots (4 bytes).
 *              no_shard's and zero1's full states are fp32 slots too:
 *              there each weight is packed to 16 bits before each GEMM
 *              that reads it, a pass of its own (read 4, written 2),
 *              which the GEMM then reads (2);
 *   bf16       the path llm.c and PyTorch's mixed precision take:
 *              parameters, activations and gradients stored in 16 bits
 *              everywhere, GEMMs on the tensor cores (fp32 accumulation);
 *              LayerNorm's statistics, the loss's lse and AdamW's
 *              master weights and moments in fp32. Beyond the
 *              bf16 GEMM path: attention's scores and dP written in 16
 *              bits, and no_shard's and zero1's weights too. Not built
 *              yet; printed where it differs.
 * The ceiling on MFU (model FLOPs / the step's time / the bf16 peak, the
 * figure PyTorch and llm.c report) follows: with fp32 GEMMs it can never
 * pass fp32 peak / bf16 peak, 7% on an H100.
 *
 * Not counted in the kernels: collectives (they run on the communication
 * stream beside them), zeroing and copies, kernel launch gaps. On more
 * than one rank the collectives get lines of their own: the bytes this
 * rank sends in a step (the plan's table) over the GPUs' NVLink, by
 * bandwidth alone, set beside the kernels' time. Prefetch can hide them
 * behind the kernels only while the kernels take longer: a unit's
 * all-gathers and reduce-scatter move 3 x its parameters in a step
 * whatever the batch, while its kernels' time grows with the tokens a GPU
 * computes. A bound, like the rest: NCCL reaches about 80% of the link,
 * and a step's first all-gather and last reduce-scatter have no kernels
 * to hide behind. --net prices each collective on other interconnects.
 * ========================================================================== */
#ifndef FSDP_SIM_ROOFLINE_H
#define FSDP_SIM_ROOFLINE_H
#include "../core.h"
#include "../trainer.h"

/* Dense peaks from the vendors' data sheets (no sparsity), and HBM's
 * bandwidth. */
typedef struct {
    const char *flag, *name;
    double fp32, tf32, bf16; /* TFLOP/s */
    double tbps;             /* TB/s */
    const char *link;        /* what joins a node's GPUs ... */
    double link_gbps;        /* ... and its GB/s a GPU in each direction */
    int gelu_fused;          /* GPT-2's GELU in cuBLASLt's epilogues: Hopper, by default */
} GpuPeaks;

static const GpuPeaks GPU_PEAKS[] = {
    {"h100", "an H100 SXM", 66.9, 494.7, 989.4, 3.35, "NVLink 4", 450.0, 1},
    {"h200", "an H200 SXM", 66.9, 494.7, 989.4, 4.8, "NVLink 4", 450.0, 1},
    {"a100", "an A100 SXM 80 GB", 19.5, 156.0, 312.0, 2.039, "NVLink 3", 300.0, 0},
};

/* One line of the table: a kind of kernel, summed over the step. Values
 * that are 16-bit on the bf16 path are counted apart from those that stay
 * fp32 on both (statistics, optimizer state). */
typedef struct {
    const char *name;
    int gemm; /* runs on cuBLAS: the fp32 or tensor-core peak; 0: bound by memory */
    double flops, values16, values32;
    double written;  /* of a GEMM's values16, those it writes (in fp32): not packed */
    double stored16; /* of values16, those the bf16 GEMM path stores in 16 bits */
    double fused16;  /* of stored16, those the 16-bit paths never move: GPT-2's GELU
                      * applied inside cuBLASLt's products (kernels/transformer.h) */
    double packs;    /* the bf16 GEMM path only: values packed from fp32 slots (read 4,
                      * written 2) or unpacked into them (read 2, written 4) */
    int per_shard;   /* a pass over this rank's shard: the same time whatever the batch */
} KernelCost;

enum { ROOFLINE_MAX = 16 };
typedef struct {
    KernelCost k[ROOFLINE_MAX];
    int n;
    int params16; /* the bf16 GEMM path reads the parameters in 16 bits (sharded) */
    int grads16;  /* ... and writes their gradients in 16 bits (grad_dtype) */
    int gelu_fused; /* GPT-2's GELU runs in cuBLASLt's epilogues (the GPU's default) */
} Roofline;

static int roof_add(Roofline *r, const char *name, int gemm, double flops, double values16,
                    double values32) {
    int i = 0;
    while (i < r->n && strcmp(r->k[i].name, name) != 0) i++;
    if (i == r->n) {
        if (r->n == ROOFLINE_MAX) FATAL("raise ROOFLINE_MAX", "too many kinds of kernel");
        r->k[r->n++] = (KernelCost){name, gemm, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0};
    }
    r->k[i].flops += flops;
    r->k[i].values16 += values16;
    r->k[i].values32 += values32;
    return i;
}

/* C (M x N) = A (M x K) B (K x N): 2MNK flops; A and B read, C written;
 * `held` of A's and B's values stored in 16 bits (activations), and with
 * c_held C too. */
static void roof_gemm(Roofline *r, const char *name, double M, double N, double K, double held,
                      int c_held) {
    int i = roof_add(r, name, 1, 2.0 * M * N * K, M * K + K * N + M * N, 0.0);
    r->k[i].written += c_held ? 0.0 : M * N;
    r->k[i].stored16 += held + (c_held ? M * N : 0.0);
}

/* A Linear layer on R rows, in -> out: forward, or backward's two GEMMs
 * (the input's gradient, the weight's) and, `bias` or not (GPT-2's
 * lm_head), its bias gradient (a column sum of the output's gradient).
 * Its input, output and their gradients are activations, in 16 bits; its
 * weight is in 16 bits (params16) or packed, and its weight's and bias's
 * gradients written in 16 bits (grads16) or fp32. */
static void roof_linear(Roofline *r, double R, double in, double out, int backward, int bias) {
    double w = r->params16 ? in * out : 0.0; /* the weight, read in 16 bits */
    if (!backward) {
        roof_gemm(r, "matmuls (Linear, Conv1D)", R, out, in, R * in + w, 1);
        return;
    }
    roof_gemm(r, "matmuls (Linear, Conv1D)", R, in, out, R * out + w, 1);
    roof_gemm(r, "matmuls (Linear, Conv1D)", out, in, R, R * in + R * out, r->grads16);
    if (!bias) return;
    double g16 = r->grads16 ? out : 0.0; /* the bias's gradient */
    int i = roof_add(r, "bias gradients (column sums)", 0, R * out, R * out + g16, out - g16);
    r->k[i].stored16 += R * out + g16; /* the output's gradient, and that */
}

/* LayerNorm over R rows of D: forward reads x (the residual stream) and
 * writes y (a Linear's input) and two statistics a row; backward reads dy
 * (the Linear after it wrote it) and x, adds into dx (the stream's
 * gradient: read and written) and into the weight's and bias's gradients
 * (16 bits with grads16). The stream, its gradient, y and dy are in 16
 * bits. */
static void roof_layernorm(Roofline *r, double R, double D, int backward) {
    if (backward) {
        double g16 = r->grads16 ? 2.0 * D : 0.0;
        int i = roof_add(r, "layernorm", 0, 14.0 * R * D, 4.0 * R * D + g16,
                         2.0 * R + 2.0 * D - g16);
        r->k[i].stored16 += 4.0 * R * D + g16;
        return;
    }
    r->k[roof_add(r, "layernorm", 0, 8.0 * R * D, 2.0 * R * D, 2.0 * R)].stored16 += 2.0 * R * D;
}

/* An element-wise pass over n values reading `reads` arrays of n and
 * writing one, `flops` flops a value; `held` of those arrays stored in 16
 * bits (all of them, as built: GELU's c_fc's output and gradient,
 * mlp.c_proj's input and its gradient; a residual connection's stream in
 * and out and its projection). */
static KernelCost *roof_elementwise(Roofline *r, const char *name, double n, int reads,
                                    double flops, int held) {
    KernelCost *k = &r->k[roof_add(r, name, 0, flops * n, (reads + 1) * n, 0.0)];
    k->stored16 += held * n;
    return k;
}

/* Causal attention on B sequences of T tokens, H heads of D/H: the
 * batched GEMMs of kernels/transformer.h (forward QK^T and PV; backward
 * four: dP, dV, dQ, dK) and the softmax between them, over B*H*T^2
 * scores (computed whole; the mask zeroes the upper triangle). The scores
 * and dP are written by a GEMM in fp32; P and dS are the softmaxes'
 * outputs, stored in 16 bits on the bf16 GEMM path. */
static void roof_attention(Roofline *r, double B, double T, double D, double H, int backward) {
    double BTD = B * T * D, scores = B * H * T * T, qk = 2.0 * B * T * T * D;
    if (!backward) {
        int i = roof_add(r, "attention GEMMs (QK^T, PV)", 1, 2.0 * qk, 2.0 * scores + 4.0 * BTD,
                         0);
        r->k[i].written += scores;               /* the scores */
        r->k[i].stored16 += scores + 4.0 * BTD; /* P read by PV; q, k, v read; y written */
        i = roof_add(r, "attention softmax", 0, 5.0 * scores, 2.0 * scores, 0.0);
        r->k[i].stored16 += scores; /* P written */
    } else {
        int i = roof_add(r, "attention GEMMs (QK^T, PV)", 1, 4.0 * qk, 4.0 * scores + 8.0 * BTD,
                         0);
        r->k[i].written += scores;                     /* dP */
        r->k[i].stored16 += 3.0 * scores + 8.0 * BTD; /* P, dS, q, k, v, dy read; dq, dk, dv */
        i = roof_add(r, "attention softmax", 0, 4.0 * scores, 3.0 * scores, 0.0);
        r->k[i].stored16 += 2.0 * scores; /* P read, dS written */
    }
}

/* --attention flash: one kernel forward, one pass and two kernels
 * backward (kernels/transformer.h), which skip the tiles the causal mask
 * empties: each T x T product costs half of qk. Forward two products (QK^T,
 * PV); backward seven (dk and dv's kernel recomputes S and computes dP,
 * dV, dK; dq's recomputes S and dP and computes dQ). From memory, each
 * value once a kernel (the tiles a block streams are assumed to come
 * from L2): forward q, k, v in and y out; backward dy and y for delta,
 * then q, k, v, dy into each kernel, dk and dv, then dq, out; all held in
 * 16 bits. lse and delta, a number a row, in fp32. Its roofline is the
 * bound of a fused kernel; the kernels built here (kernels/flash.h) will
 * stay above it. (MFU's model
 * FLOPs, llm.c's 12 L T D a token, charge attention's products whole, as
 * PyTorch's and llm.c's MFU figures do: a kernel that skips the masked
 * half is credited with work it did not do, so at long T, where attention
 * dominates, the ceiling reads high: the skipped half is 7% of GPT-2
 * 124M's model FLOPs at T 1024, 14% of gpt2-xl's at T 4096.) */
static void roof_flash_attention(Roofline *r, double B, double T, double D, double H,
                                 int backward) {
    double BTD = B * T * D, rows = B * H * T, qk = 2.0 * B * T * T * D;
    double values16 = backward ? 13.0 * BTD : 4.0 * BTD;
    int i = roof_add(r, "attention (fused: flash)", 1, (backward ? 3.5 : 1.0) * qk, values16,
                     (backward ? 5.0 : 1.0) * rows);
    r->k[i].stored16 += values16;
}

/* One GPT-2 block on B sequences (model/gpt2.h's order). */
static void roof_gpt2_block(Roofline *r, const Config *c, double B, int backward) {
    double T = c->context, D = c->width, BT = B * T;
    roof_layernorm(r, BT, D, backward);
    roof_linear(r, BT, D, 3 * D, backward, 1); /* c_attn */
    if (c->attention == ATTENTION_FLASH) roof_flash_attention(r, B, T, D, c->n_head, backward);
    else roof_attention(r, B, T, D, c->n_head, backward);
    roof_linear(r, BT, D, D, backward, 1); /* attn.c_proj */
    roof_elementwise(r, "residual adds", BT * D, 2, 1.0, 3);
    roof_layernorm(r, BT, D, backward);
    roof_linear(r, BT, D, 4 * D, backward, 1); /* c_fc */
    /* c_fc's output in, c_proj's input out; backward also c_proj's input
     * gradient in, c_fc's output gradient out. In 16 bits, inside the
     * products: forward, c_fc's writes GELU's input beside its output;
     * backward, c_proj's reads it back: one value each way, not 2 and 3
     * (a GPU's profile counts that time in the matmuls: dev/profile/kernel_times.py) */
    KernelCost *gelu = roof_elementwise(r, "gelu", BT * 4 * D, backward ? 2 : 1,
                                        backward ? 16.0 : 10.0, backward ? 3 : 2);
    /* (forward only where c_fc's bias is held as its output: params16) */
    if (r->gelu_fused) gelu->fused16 += (backward ? 2.0 : r->params16 ? 1.0 : 0.0) * BT * 4 * D;
    roof_linear(r, BT, 4 * D, D, backward, 1); /* mlp.c_proj */
    roof_elementwise(r, "residual adds", BT * D, 2, 1.0, 3);
}

/* One block of the byte MLP on B samples (model/mlp.h's order). */
static void roof_mlp_block(Roofline *r, const Config *c, double B, int backward) {
    double W = c->width;
    roof_layernorm(r, B, W, backward);
    roof_linear(r, B, W, 4 * W, backward, 1); /* fc1 */
    roof_elementwise(r, "gelu", B * 4 * W, backward ? 2 : 1, backward ? 16.0 : 10.0,
                     backward ? 3 : 2);
    roof_linear(r, B, 4 * W, W, backward, 1); /* fc2 */
    roof_elementwise(r, "residual adds", B * W, 2, 1.0, 3);
}

/* The loss over R rows of V logits: forward reads each logit once (the
 * online softmax: a compare, a subtraction, an exponential, an addition)
 * and writes each row's lse; backward reads each logit again and writes
 * its gradient over it (an exponential, two subtractions, a product). The
 * logits and their gradient in 16 bits where activations are held so
 * (kernels/layers.h, crossentropy_forward). */
static void roof_cross_entropy(Roofline *r, double R, double V) {
    int i = roof_add(r, "cross-entropy (softmax over V)", 0, 8.0 * R * V, 3.0 * R * V, 2.0 * R);
    r->k[i].stored16 += 3.0 * R * V;
}

/* One micro-batch of B sequences (GPT-2) or samples (the MLP), forward and
 * backward; activation checkpointing runs each block's forward twice. */
static void roof_micro_batch(Roofline *r, const Config *c, double B) {
    int gpt2 = c->arch == ARCH_GPT2, forwards = c->activation_checkpointing ? 2 : 1;
    double T = c->context, D = c->width, V = c->vocab;
    double R = gpt2 ? B * T : B;                                     /* rows the head sees */
    double E = R * T * c->embed_dim;                                 /* the MLP's proj_in input */
    /* GPT-2's two passes: wte's rows into the stream, then wpe's added to
     * it (read and written again); the MLP's one: its rows into proj_in's
     * input. The rows are parameters (16 bits with params16), the stream
     * is held in 16 bits. */
    double rows = gpt2 ? 2.0 * R * D : E, stream = gpt2 ? 3.0 * R * D : E;
    int i = roof_add(r, "embeddings", 0, gpt2 ? R * D : 0.0, rows + stream, 0.0);
    r->k[i].stored16 += stream + (r->params16 ? rows : 0.0);
    if (!gpt2) roof_linear(r, B, T * c->embed_dim, D, 0, 1); /* proj_in */
    for (int f = 0; f < forwards; f++)
        for (int l = 0; l < c->depth; l++)
            if (gpt2) roof_gpt2_block(r, c, B, 0);
            else roof_mlp_block(r, c, B, 0);
    roof_layernorm(r, R, D, 0); /* ln_f, norm_f */
    roof_linear(r, R, D, V, 0, !gpt2); /* lm_head (tied to wte, no bias), head */
    roof_cross_entropy(r, R, V);
    roof_linear(r, R, D, V, 1, !gpt2);
    roof_layernorm(r, R, D, 1);
    for (int l = 0; l < c->depth; l++)
        if (gpt2) roof_gpt2_block(r, c, B, 1);
        else roof_mlp_block(r, c, B, 1);
    if (!gpt2) roof_linear(r, B, T * c->embed_dim, D, 1, 1);
    /* the embeddings' gradient: each row of GPT-2's stream's gradient, or
     * of the MLP's proj_in's input gradient (16 bits), added into its
     * token's (16 bits with grads16, else fp32); GPT-2's stream's gradient
     * read again, for wpe's */
    double G = gpt2 ? R * D : E, pos = gpt2 ? R * D : 0.0, wpe = gpt2 ? T * D : 0.0;
    double grad = 2.0 * (G + wpe), g16 = r->grads16 ? grad : 0.0;
    i = roof_add(r, "embeddings", 0, G + pos, G + pos + g16, grad - g16);
    r->k[i].stored16 += G + pos + g16;
}

/* The all-gathers' 16-bit wire, on the bf16 GEMM path: a sharded unit's
 * shard is held in 16 bits, as AdamW writes it, and gathered as it is into
 * its 16-bit full state (fsdp.c's full_dtype): nothing to pack. zero1
 * gathers its replicas once a step, into fp32 slots: each shard packed,
 * then the whole result unpacked. */
static void roof_gathers(Roofline *r, const Trainer *t) {
    double packs = 0.0;
    for (int ui = 0; ui < t->n_units && t->cfg.strategy == STRATEGY_ZERO1; ui++)
        packs += (double)t->units[ui].shard + (double)t->units[ui].padded;
    if (packs <= 0.0) return;
    int i = roof_add(r, "all-gathers: shards packed", 0, 0, 0, 0);
    r->k[i].packs = packs;
    r->k[i].per_shard = 1;
}

/* A step's kernels on this rank: K micro-batches, then AdamW on its
 * shards (fp32 master, moments and gradient: 7 values an element read
 * or written; its 16-bit copy for the next gather), and the clipping
 * norm's pass over the gradient. */
static void roofline_count(const Trainer *t, Roofline *r, int gelu_fused) {
    const Config *c = &t->cfg;
    memset(r, 0, sizeof(*r));
    int sharded = strategy_shards_params(c->strategy); /* fsdp.c's is_sharded */
    r->params16 = sharded; /* full_dtype: 16 bits where gathered */
    r->gelu_fused = gelu_fused;
    r->grads16 = sharded && c->reduce_dtype == c->param_dtype; /* grad_dtype */
    for (int m = 0; m < c->grad_accum; m++) roof_micro_batch(r, c, t->micro_batch);
    roof_gathers(r, t);
    double shard = 0.0;
    for (int ui = 0; ui < t->n_units; ui++) shard += (double)t->units[ui].shard; /* no_shard: all */
    int i = roof_add(r, "AdamW (this rank's shards)", 0, 12.0 * shard, shard, 7.0 * shard);
    if (r->params16) r->k[i].stored16 += shard; /* the shard's 16-bit copy, held so */
    r->k[i].per_shard = 1;
    if (c->clip_grad_norm > 0.0f)
        r->k[roof_add(r, "gradient norm (clipping)", 0, 2.0 * shard, 0, shard)].per_shard = 1;
}

/* llm.c's count of a step's model FLOPs on this rank (main.c's compute
 * line): 6 a parameter a token, and GPT-2's attention 12 L T D a token. */
static double step_model_flops(const Trainer *t, double *tokens) {
    const Config *c = &t->cfg;
    int gpt2 = c->arch == ARCH_GPT2;
    *tokens = (double)t->local_batch * (gpt2 ? c->context : 1);
    double per_token = 6.0 * (double)t->model.total_numel;
    if (gpt2) per_token += 12.0 * c->depth * (double)c->context * c->width;
    return per_token * *tokens;
}

enum { ROOF_FP32, ROOF_BF16_GEMM, ROOF_BF16, ROOF_MODES };
static const char *const ROOF_MODE_NAMES[ROOF_MODES] = {"fp32", "bf16 GEMM", "bf16"};

/* The least time of kernel k on GPU g, its values stored the `mode` way */
static double roof_seconds(const KernelCost *k, const GpuPeaks *g, int mode) {
    double peak = !k->gemm ? 1e9 : mode == ROOF_FP32 ? g->fp32 : g->bf16; /* 1e9: no limit */
    double bytes = 4.0 * (k->values16 + k->values32);
    if (mode == ROOF_BF16) bytes = 2.0 * (k->values16 - k->fused16) + 4.0 * k->values32;
    double packing = 0.0;
    if (mode == ROOF_BF16_GEMM) { /* a GEMM's weights packed first: a pass of their own */
        double packed = k->gemm ? k->values16 - k->written - k->stored16 : 0.0;
        bytes = 2.0 * (packed + k->stored16) + 4.0 * (k->written + k->values32);
        if (!k->gemm)
            bytes = 2.0 * (k->stored16 - k->fused16) +
                    4.0 * (k->values16 - k->stored16 + k->values32);
        packing = 6.0 * (packed + k->packs) / (g->tbps * 1e12); /* read 4, written 2 */
    }
    return fmax(k->flops / (peak * 1e12), bytes / (g->tbps * 1e12)) + packing;
}

/* The collectives beside the kernels: a ring's bytes sent by a rank cross
 * its link one way, so they take sent / the link's bandwidth at least.
 * `kernels` is the step's roofline as built, `fixed` the part of it that
 * does not grow with the tokens (AdamW and the passes over the shard). */
static void print_roofline_collectives(const GpuPeaks *g, int N, double sent, double kernels,
                                       double fixed, double model, double tokens) {
    double comm = 1e3 * sent / (g->link_gbps * 1e9); /* ms */
    printf("  collectives: %.3f GB sent by this rank a step, over %s (%.0f GB/s a direction): "
           "at least %.3f ms\n",
           sent / 1e9, g->link, g->link_gbps, comm);
    if (N > 8) /* a node holds 8 such GPUs; between nodes, a NIC a GPU */
        printf("    as if all %d GPUs shared one NVLink domain: across nodes each GPU has "
               "~50 GB/s (400 Gb/s InfiniBand), and --net nvlink+ib prices a run's "
               "collectives so\n",
               N);
    if (comm <= kernels) {
        printf("    the kernels take longer (%.3f ms): prefetch can hide the collectives behind "
               "them\n",
               kernels);
        return;
    }
    printf("    longer than the kernels' %.3f ms: even hidden behind them by prefetch, a step "
           "takes %.3f ms, %.1f%% MFU (of the bf16 peak) at best\n",
           kernels, comm, 100.0 * model / (comm / 1e3 * g->bf16 * 1e12));
    printf("    the kernels grow with the tokens a GPU computes (%.0f here), the collectives do "
           "not: from about %.0f tokens a GPU on, prefetch can hide them\n",
           tokens, tokens * (comm - fixed) / (kernels - fixed));
}

static void print_roofline(const Trainer *t, const char *gpu, double sent) {
    const GpuPeaks *g = &GPU_PEAKS[0];
    for (size_t i = 0; i < sizeof(GPU_PEAKS) / sizeof(GPU_PEAKS[0]); i++)
        if (!strcmp(gpu, GPU_PEAKS[i].flag)) g = &GPU_PEAKS[i];
    Roofline r;
    roofline_count(t, &r, g->gelu_fused);
    printf("roofline on %s: fp32 %.1f, TF32 %.1f, bf16 %.1f TFLOP/s dense; %.2f TB/s\n"
           "  one rank's step, kernel by kernel; each takes at least max(FLOPs / peak, bytes / "
           "bandwidth)\n",
           g->name, g->fp32, g->tf32, g->bf16, g->tbps);
    printf("  %-32s %9s %10s %9s %12s %9s\n", "kernel", "GFLOP", "GB (fp32)", "ms fp32",
           "ms bf16 GEMM", "ms bf16");
    double total[ROOF_MODES] = {0.0}, fixed[ROOF_MODES] = {0.0}, flops = 0.0, attention = 0.0;
    for (int i = 0; i < r.n; i++) {
        const KernelCost *k = &r.k[i];
        double ms[ROOF_MODES];
        for (int m = 0; m < ROOF_MODES; m++) total[m] += ms[m] = 1e3 * roof_seconds(k, g, m);
        if (!strncmp(k->name, "attention", 9)) attention += ms[ROOF_BF16];
        for (int m = 0; k->per_shard && m < ROOF_MODES; m++) fixed[m] += ms[m];
        flops += k->flops;
        printf("  %-32s %9.1f %10.3f %9.3f %12.3f %9.3f%s\n", k->name, k->flops / 1e9,
               (4.0 * (k->values16 + k->values32)) / 1e9, ms[0], ms[1], ms[2],
               k->gemm ? "" : "  (memory)");
    }
    double tokens = 0.0, model = step_model_flops(t, &tokens);
    printf("  %-32s %9.1f %10s %9.3f %12.3f %9.3f\n", "total", flops / 1e9, "", total[0], total[1],
           total[2]);
    printf("  model FLOPs %.4g TFLOP (6 x parameters%s a token); at best:\n", model / 1e12,
           t->cfg.arch == ARCH_GPT2 ? " + 12 L T D" : "");
    const char *what[ROOF_MODES] = {"(as built)", "(as built, --param-dtype bf16)",
                                    "(16-bit storage throughout: not built)"};
    /* the last only where it differs: attention's scores, no_shard's and zero1's weights */
    int modes = total[ROOF_BF16] < total[ROOF_BF16_GEMM] - 1e-9 ? ROOF_MODES : ROOF_BF16;
    for (int m = 0; m < modes; m++)
        printf("    %-9s %10.0f tokens/s %6.1f%% MFU (of the bf16 peak) %s\n", ROOF_MODE_NAMES[m],
               1e3 * tokens / total[m], 100.0 * model / (total[m] / 1e3 * g->bf16 * 1e12), what[m]);
    if (attention > 0.0 && t->cfg.attention == ATTENTION_MATH)
        printf("  attention is %.0f%% of the bf16 time, most of it moving the B*H*T^2 scores "
               "through memory: --attention flash keeps them on chip\n",
               100.0 * attention / total[ROOF_BF16]);
    if (attention > 0.0 && t->cfg.attention == ATTENTION_FLASH)
        printf("  attention, fused, is %.0f%% of the bf16 time at its roofline; the kernels "
               "built here take longer (make test-gpu prints their TFLOP/s)\n",
               100.0 * attention / total[ROOF_BF16]);
    int built = t->cfg.param_dtype == DTYPE_FP32 ? ROOF_FP32 : ROOF_BF16_GEMM;
    if (t->comm.world > 1 && sent > 0.0)
        print_roofline_collectives(g, t->comm.world, sent, total[built], fixed[built], model, tokens);
}

#endif /* FSDP_RUN_ROOFLINE_H */
