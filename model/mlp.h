/* ============================================================================
 * model/mlp.h — what section 5 of fsdp.c runs, the model FSDP wraps: the byte-level
 * MLP's activations, its forward and its backward (with activation
 * checkpointing). main.c includes it, after fsdp.c, whose section 5
 * calls it through trainer.h's declarations.
 *
 * As in PyTorch, where the model is the user's nn.Module and FSDP only
 * wraps it, this is the model's code, not FSDP's: what FSDP adds is the
 * module_pre_forward / module_post_forward / module_pre_backward /
 * module_post_backward calls at every module's boundary (section 3), which
 * gather a unit before it computes, free it after, and reduce-scatter its
 * gradient.
 *
 * May include trainer.h and what is below fsdp.c (kernels/, sim/, data/);
 * of fsdp.c it calls only the hooks and the formats fsdp.h declares.
 * ========================================================================== */
#ifndef FSDP_MODEL_MLP_H
#define FSDP_MODEL_MLP_H
#include "../core.h"
#include "../trainer.h"
#include "../kernels/backend.h"
#include "../kernels/layers.h"
#include "../sim/ledger.h"
#include "activations.h"

/* How many blocks' inner activations (norm output and statistics, fc1,
 * GELU) are kept from forward to backward: all L, or with
 * --activation-checkpointing one block's worth, reused by every block. */
static long saved_blocks(const Config *c) { return c->activation_checkpointing ? 1 : c->depth; }
static long saved_block(const Config *c, int l) { return c->activation_checkpointing ? 0 : l; }

/* An activation buffer in fp32 slots: in param_dtype with mixed precision
 * (GPT-2's attention probabilities P). LayerNorm's statistics, the
 * loss's lse and the losses stay fp32, as PyTorch keeps them. */
static float *activation(Ledger *l, const Config *c, long count) {
    return ledger_alloc_floats(l, MEM_ACTIVATIONS, (size_t)count, c->param_dtype, "activations");
}
static float *activation_fp32(Ledger *l, long count) {
    return ledger_alloc_floats(l, MEM_ACTIVATIONS, (size_t)count, DTYPE_FP32, "activations");
}
/* Any other activation (model/activations.h): held in the matmuls'
 * format, backend.gemm_dtype (kernels/layers.h), booked in param_dtype.
 * On a GPU with 16-bit parameters that is 2 bytes a value, as booked; on
 * the CPU float slots. */
static void *activation_held(Ledger *l, const Config *c, long count) {
    size_t n = (size_t)count;
    return ledger_book(l, MEM_ACTIVATIONS, n * (size_t)dtype_bytes(backend.gemm_dtype),
                       n * (size_t)dtype_bytes(c->param_dtype), "activations", ON_DEVICE);
}

void activations_alloc(Activations *a, Ledger *l, const Config *c, int B) {
    long L = saved_blocks(c), D = c->width, T = c->context, C = c->embed_dim, V = c->vocab;
    a->tokens = (unsigned char *)ledger_alloc(l, MEM_ACTIVATIONS, (size_t)(B * T), 1, "the batch");
    a->targets = (int *)ledger_alloc(l, MEM_ACTIVATIONS, (size_t)B, sizeof(int), "the batch");
    token_rows_alloc(&a->by_token, l, (long)B * T);
    a->x_emb = activation_held(l, c, B * T * C);
    a->h = activation_held(l, c, (c->depth + 1) * B * D); /* every block's input: checkpoints */
    a->ln = activation_held(l, c, L * B * D);
    a->ln_mean = activation_fp32(l, L * B);
    a->ln_rstd = activation_fp32(l, L * B);
    a->fc1 = activation_held(l, c, L * B * 4 * D);
    a->act = activation_held(l, c, L * B * 4 * D);
    a->nf = activation_held(l, c, B * D);
    a->nf_mean = activation_fp32(l, B);
    a->nf_rstd = activation_fp32(l, B);
    a->logits = activation_held(l, c, B * V);
    a->lse = activation_fp32(l, B);
    a->losses = activation_fp32(l, B);
    a->d_nf = activation_held(l, c, B * D);
    a->d_h = activation_held(l, c, B * D);
    a->d_ln = activation_held(l, c, B * D);
    a->d_act = activation_held(l, c, B * 4 * D);
    a->d_fc1 = activation_held(l, c, B * 4 * D);
    a->d_emb = activation_held(l, c, B * T * C);
}

/* n held values set to 0: the residual stream's gradient, before the
 * head's LayerNorm adds into it */
static void zero_held(void *x, long n) {
    dev_zero(x, (size_t)n * (size_t)dtype_bytes(backend.gemm_dtype));
}

/* The parameter tensors of a module, once its unit's full state is
 * present, held in full_dtype(t) (fsdp.c, section 1). */
static const void *weight_of(Trainer *t, int module) {
    return t->model.params[t->model.modules[module].params[0]].data;
}
static const void *bias_of(Trainer *t, int module) {
    return t->model.params[t->model.modules[module].params[1]].data;
}
/* ... and their gradients, held in grad_dtype(t) */
static void *dweight_of(Trainer *t, int module) {
    return t->model.params[t->model.modules[module].params[0]].grad;
}
static void *dbias_of(Trainer *t, int module) {
    return t->model.params[t->model.modules[module].params[1]].grad;
}
/* A module's parameters and gradients as its layer reads them
 * (kernels/layers.h's Linear and LayerNorm), each with its format
 * (full_dtype, grad_dtype: fsdp.c, section 1). Built after the module's
 * pre-forward or pre-backward hook, as weight_of is called: the pointers
 * are into its unit's full state. A module without a bias (GPT-2's wte,
 * read as lm_head) gives a NULL one. */
static Linear linear_of(Trainer *t, int module, int in, int out) {
    Dtype wh = full_dtype(t), gh = grad_dtype(t);
    int has_bias = t->model.modules[module].params[1] >= 0;
    return linear_view(weight_of(t, module), has_bias ? bias_of(t, module) : NULL, wh,
                       dweight_of(t, module), has_bias ? dbias_of(t, module) : NULL, gh, in, out);
}
static LayerNorm layernorm_of(Trainer *t, int module, int dim) {
    Linear l = linear_of(t, module, dim, dim);
    LayerNorm ln = {l.weight, l.bias, l.dweight, l.dbias, dim};
    return ln;
}

/* Mixed precision: a Linear layer's output as the GPU stores it, in
 * param_dtype. (The layers compute in fp32 from 16-bit inputs, as tensor
 * cores accumulate; the result is rounded once, when it is written.) In
 * fp32 slots (the CPU) it is rounded here; held in 16 bits, cuBLAS
 * rounded it as it wrote it. Every other layer rounds what it writes
 * itself (store_matmul_input). */
static void lowp(Trainer *t, void *x, long n, Dtype held) {
    if (held == DTYPE_FP32) round_all((float *)x, n, t->cfg.param_dtype);
}

/* A block's first half: norm, fc1 and GELU, from the block's input into
 * the saved slots. Forward runs it once; with activation checkpointing
 * backward runs it again (block_recompute). */

static void block_norm_fc1_gelu(Trainer *t, int l) {
    const Model *m = &t->model;
    Activations *a = &t->act;
    const Config *c = &t->cfg;
    int B = t->micro_batch, D = c->width;
    long k = saved_block(c, l), BD = (long)B * D, BF = 4 * BD;
    Dtype held = backend.gemm_dtype;
    void *ln = element_at(a->ln, k * BD, held), *fc1 = element_at(a->fc1, k * BF, held);
    module_pre_forward(t, m->block_norm[l]);
    LayerNorm norm = layernorm_of(t, m->block_norm[l], D);
    layernorm_forward(&norm, ln, a->ln_mean + k * B, a->ln_rstd + k * B,
                      element_at(a->h, l * BD, held), B, c->param_dtype);
    module_post_forward(t, m->block_norm[l]);
    module_pre_forward(t, m->block_fc1[l]);
    Linear fc1_layer = linear_of(t, m->block_fc1[l], D, 4 * D);
    linear_forward(&fc1_layer, held_buf(fc1), ln, B);
    lowp(t, fc1, BF, held);
    module_post_forward(t, m->block_fc1[l]);
    gelu_forward(element_at(a->act, k * BF, held), fc1, BF, c->param_dtype);
}

float model_forward(Trainer *t) {
    Model *m = &t->model;
    Activations *a = &t->act;
    const Config *c = &t->cfg;
    int B = t->micro_batch, T = c->context, C = c->embed_dim, D = c->width, V = c->vocab;
    long BD = (long)B * D, BF = (long)B * 4 * D;

    Dtype held = backend.gemm_dtype; /* activations.h */
    module_pre_forward(t, m->root);
    module_pre_forward(t, m->embed);
    embedding_forward(a->x_emb, a->tokens, buf(weight_of(t, m->embed), full_dtype(t)), B, T, C);
    module_post_forward(t, m->embed);

    module_pre_forward(t, m->proj_in);
    Linear proj_in = linear_of(t, m->proj_in, T * C, D);
    linear_forward(&proj_in, held_buf(a->h), a->x_emb, B);
    lowp(t, a->h, BD, held);
    module_post_forward(t, m->proj_in);

    module_pre_forward(t, m->blocks);
    for (int l = 0; l < c->depth; l++) {
        void *h_in = element_at(a->h, l * BD, held), *h_out = element_at(a->h, (l + 1) * BD, held);
        const void *act = element_at(a->act, saved_block(c, l) * BF, held);
        module_pre_forward(t, m->block[l]);
        block_norm_fc1_gelu(t, l);
        module_pre_forward(t, m->block_fc2[l]);
        Linear fc2 = linear_of(t, m->block_fc2[l], 4 * D, D);
        linear_forward(&fc2, held_buf(h_out), act, B);
        lowp(t, h_out, BD, held);
        module_post_forward(t, m->block_fc2[l]);
        /* the residual connection, over fc2's output in place */
        FOR_EACH(BD, residual_add_one, h_out, h_in, h_out, c->param_dtype, held);
        module_post_forward(t, m->block[l]);
    }
    module_post_forward(t, m->blocks);

    module_pre_forward(t, m->norm_f);
    LayerNorm norm_f = layernorm_of(t, m->norm_f, D);
    layernorm_forward(&norm_f, a->nf, a->nf_mean, a->nf_rstd,
                      element_at(a->h, c->depth * BD, held), B, c->param_dtype);
    module_post_forward(t, m->norm_f);
    module_pre_forward(t, m->head);
    Linear head = linear_of(t, m->head, D, V);
    linear_forward(&head, held_buf(a->logits), a->nf, B);
    lowp(t, a->logits, (long)B * V, held);
    module_post_forward(t, m->head);
    /* rows V apart: 256 bytes' logits need no padding (logits_stride) */
    float loss = crossentropy_forward(a->lse, a->losses, a->logits, V, a->targets, B, V);
    module_post_forward(t, m->root);
    return loss;
}

/* ------------------------------------------------------------------------
 * Activation checkpointing                  PyTorch: checkpoint_wrapper,
 *                                            apply_activation_checkpointing
 *
 * Without it the forward keeps, for every block, its input and everything
 * computed inside it for backward to read: the norm's output (B*D) and
 * statistics (2*B), fc1's output and GELU's (B*4D each), 9*B*D + 2*B
 * floats, nine times the block's input. With --activation-checkpointing
 * forward keeps only each block's input (a->h, the checkpoint) and one
 * block's inner buffers, which every block overwrites; backward, on
 * reaching block l, runs the block's first half again from its checkpoint
 * (norm, fc1, GELU: what backward reads; fc2's output is read by nothing,
 * so unlike PyTorch's checkpoint_wrapper, which reruns the whole block, we
 * skip fc2), then its backward. The memory of the saved activations falls
 * from L blocks' to one's, and the price is fc1's matmul once more per
 * block: one of the block's six matmuls of a step, a sixth more compute.
 * The recomputation needs the block's parameters: when the block is a unit,
 * its pre-backward hook has just gathered it, so the recomputation costs no
 * collective. When units are smaller than a block (a low --min-params),
 * the norm and fc1 units are gathered for it and stay gathered until their
 * own backward, a moment later: no all-gather more, one unit's full state
 * held a little longer. The recomputed numbers are the forward's numbers,
 * bit for bit: the same kernels on the same inputs.
 * --------------------------------------------------------------------- */
static void block_recompute(Trainer *t, int l) {
    t->recomputing = 1; /* the forward hooks only unshard (module_pre_forward) */
    block_norm_fc1_gelu(t, l);
    t->recomputing = 0;
}

/* The loss is the mean over this rank's local batch, so dloss = 1/(K*B)
 * for each sample of each of the K micro-batches of B samples (K = 1
 * without --grad-accum), and the gradients of the K backward passes add up;
 * the reduce-scatter's mean over N ranks then makes it the mean over the
 * global batch, as one rank training on the whole batch would get. */
void model_backward(Trainer *t) {
    Model *m = &t->model;
    Activations *a = &t->act;
    const Config *c = &t->cfg;
    int B = t->micro_batch, T = c->context, C = c->embed_dim, D = c->width, V = c->vocab;
    long BD = (long)B * D, BF = (long)B * 4 * D;

    module_pre_backward(t, m->root);
    crossentropy_backward(a->logits, V, a->lse, a->targets,
                          t->loss_scale / (float)t->local_batch, B, V,
                          c->param_dtype); /* over the logits */
    module_pre_backward(t, m->head);
    Dtype held = backend.gemm_dtype; /* activations.h */
    Linear head = linear_of(t, m->head, D, V);
    linear_backward(&head, held_buf(a->d_nf), held_buf(a->logits), a->nf, B);
    lowp(t, a->d_nf, BD, held);
    module_post_backward(t, m->head);
    module_pre_backward(t, m->norm_f);
    zero_held(a->d_h, BD);
    LayerNorm norm_f = layernorm_of(t, m->norm_f, D);
    layernorm_backward(&norm_f, a->d_h, a->d_nf, element_at(a->h, c->depth * BD, held),
                       a->nf_mean, a->nf_rstd, B, c->param_dtype);
    module_post_backward(t, m->norm_f);

    module_pre_backward(t, m->blocks);
    for (int l = c->depth - 1; l >= 0; l--) {
        long k = saved_block(c, l);
        const void *h_in = element_at(a->h, l * BD, held), *ln = element_at(a->ln, k * BD, held),
                   *fc1 = element_at(a->fc1, k * BF, held), *act = element_at(a->act, k * BF, held);
        module_pre_backward(t, m->block[l]);
        if (c->activation_checkpointing) block_recompute(t, l);
        /* d_h holds dL/dh_out; the residual passes it straight to h_in, and
         * the MLP branch adds its own part through norm's backward. */
        module_pre_backward(t, m->block_fc2[l]);
        Linear fc2 = linear_of(t, m->block_fc2[l], 4 * D, D);
        linear_backward(&fc2, held_buf(a->d_act), held_buf(a->d_h), act, B);
        lowp(t, a->d_act, BF, held);
        module_post_backward(t, m->block_fc2[l]);
        gelu_backward(a->d_fc1, a->d_act, fc1, BF, c->param_dtype);
        module_pre_backward(t, m->block_fc1[l]);
        Linear fc1_layer = linear_of(t, m->block_fc1[l], D, 4 * D);
        linear_backward(&fc1_layer, held_buf(a->d_ln), held_buf(a->d_fc1), ln, B);
        lowp(t, a->d_ln, BD, held);
        module_post_backward(t, m->block_fc1[l]);
        module_pre_backward(t, m->block_norm[l]);
        LayerNorm norm = layernorm_of(t, m->block_norm[l], D);
        layernorm_backward(&norm, a->d_h, a->d_ln, h_in, a->ln_mean + k * B, a->ln_rstd + k * B,
                           B, c->param_dtype);
        module_post_backward(t, m->block_norm[l]);
        module_post_backward(t, m->block[l]);
    }
    module_post_backward(t, m->blocks);

    module_pre_backward(t, m->proj_in);
    Linear proj_in = linear_of(t, m->proj_in, T * C, D);
    linear_backward(&proj_in, held_buf(a->d_emb), held_buf(a->d_h), a->x_emb, B);
    lowp(t, a->d_emb, (long)B * T * C, held);
    module_post_backward(t, m->proj_in);
    module_pre_backward(t, m->embed);
    embedding_backward(buf(dweight_of(t, m->embed), grad_dtype(t)), a->d_emb, &a->by_token, C);
    module_post_backward(t, m->embed);
    module_post_backward(t, m->root);
    units_finish_backward(t);
}

#endif /* FSDP_MODEL_MLP_H */
