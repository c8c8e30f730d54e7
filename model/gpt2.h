/* ============================================================================
 * model/gpt2.h — what section 5 of fsdp.c runs, the second model FSDP wraps:
 * GPT-2, exactly Hugging Face's GPT2LMHeadModel (model/gpt2_tree.h builds
 * its modules): its activations, forward and backward, with activation
 * checkpointing. main.c includes it after model/mlp.h, whose glue it uses.
 *
 * The FSDP calls are the MLP's: module_pre_forward / _post_forward /
 * _pre_backward / _post_backward at every module's boundary. What a
 * transformer adds to FSDP's decisions is visible in three places:
 *   - lm_head reads wte's weight, in the root's unit (section 1), gathered
 *     from the first module of forward to the last, and its gradient is
 *     the sum of what lm_head's and wte's backward add into it;
 *   - the attention probabilities, B*H*T^2 numbers a block, dominate the
 *     activations as T grows (kernels/transformer.h);
 *   - activation checkpointing reruns a block's forward from its input.
 *
 * May include trainer.h, model/mlp.h and what is below fsdp.c (kernels/,
 * sim/, data/); of fsdp.c it calls only the hooks and the formats fsdp.h
 * declares.
 * ========================================================================== */
#ifndef FSDP_MODEL_GPT2_H
#define FSDP_MODEL_GPT2_H
#include "../core.h"
#include "../trainer.h"
#include "../kernels/backend.h"
#include "../kernels/layers.h"
#include "../kernels/transformer.h"
#include "../sim/ledger.h"
#include "../data/sampler.h"
#include "activations.h"
#include "gpt2_tree.h"
#include "mlp.h" /* weight_of, lowp, activation_held: the layers' glue */

/* Each sequence is T tokens and the T that follow them by one: position t
 * predicts token t+1, and the loss is the mean over all B*T positions. */
static long gpt2_saved_blocks(const Config *c) {
    return c->activation_checkpointing ? 1 : c->depth;
}

/* What attention keeps a block for backward, in numbers: P, B*H*T^2;
 * with --attention flash one lse a row, B*H*T (kernels/transformer.h) */
static long gpt2_attention_saved(const Config *c, int B) {
    long rows = (long)B * c->n_head * c->context;
    return c->attention == ATTENTION_FLASH ? rows : rows * c->context;
}

void gpt2_activations_alloc(Gpt2Activations *a, Ledger *l, const Config *c, int B) {
    long S = gpt2_saved_blocks(c), D = c->width, T = c->context, V = c->vocab, BT = B * T;
    long att = gpt2_attention_saved(c, B);
    int flash = c->attention == ATTENTION_FLASH;
    a->tokens = (int *)ledger_alloc(l, MEM_ACTIVATIONS, (size_t)BT, sizeof(int), "the batch");
    a->targets = (int *)ledger_alloc(l, MEM_ACTIVATIONS, (size_t)BT, sizeof(int), "the batch");
    token_rows_alloc(&a->by_token, l, BT);
    a->res = activation_held(l, c, (c->depth + 1) * BT * D); /* every block's input */
    a->ln1 = activation_held(l, c, S * BT * D);
    a->ln1_mean = activation_fp32(l, S * BT);
    a->ln1_rstd = activation_fp32(l, S * BT);
    a->qkv = activation_held(l, c, S * BT * 3 * D);
    /* P in param_dtype, as autocast keeps it; lse in fp32 */
    a->att = flash ? activation_fp32(l, S * att) : activation(l, c, S * att);
    a->atty = activation_held(l, c, S * BT * D);
    a->res_mid = activation_held(l, c, S * BT * D);
    a->ln2 = activation_held(l, c, S * BT * D);
    a->ln2_mean = activation_fp32(l, S * BT);
    a->ln2_rstd = activation_fp32(l, S * BT);
    a->fc = activation_held(l, c, S * BT * 4 * D);
    a->fc_gelu = activation_held(l, c, S * BT * 4 * D);
    a->lnf = activation_held(l, c, BT * D);
    a->lnf_mean = activation_fp32(l, BT);
    a->lnf_rstd = activation_fp32(l, BT);
    a->logits = activation_held(l, c, BT * logits_stride(V)); /* rows padded */
    a->lse = activation_fp32(l, BT);
    a->losses = activation_fp32(l, BT);
    a->proj = activation_held(l, c, BT * D);
    a->d_res = activation_held(l, c, BT * D);
    a->d_x = activation_held(l, c, BT * D);
    a->d_atty = activation_held(l, c, BT * D);
    a->d_qkv = activation_held(l, c, BT * 3 * D);
    a->d_att = activation_fp32(l, att); /* dP; flash's delta, a number a row */
    a->d_fc = activation_held(l, c, BT * 4 * D);
}

/* Micro-batch `micro` of this rank's part of global batch `step`, drawn
 * from `corpus` (the training corpus, or the validation tokens) and copied
 * to the device, as trainer_load_batch does for the MLP */
void gpt2_load_batch(Trainer *t, const Corpus *corpus, int step, int micro) {
    const Config *c = &t->cfg;
    int B = t->micro_batch;
    long BT = (long)B * c->context;
    size_t bytes = (size_t)BT * sizeof(int);
    /* the batch's stage: tokens (BT), targets (BT), the rows grouped by token (3 BT) */
    int *tokens = (int *)batch_stage(5 * bytes), *targets = tokens + BT;
    sampler_local_sequences(corpus, c->seed, step, t->comm.rank, t->comm.world, micro * B, B,
                            c->context, tokens, targets);
    dev_from_host_queued(t->gpt.tokens, tokens, bytes);
    dev_from_host_queued(t->gpt.targets, targets, bytes);
    token_rows_load(&t->gpt.by_token, tokens, BT, c->vocab, targets + BT);
    batch_staged(); /* the next batch_stage waits for these copies */
}

/* Block l's saved buffers: its own with every block kept, else the one
 * slot every block shares (--activation-checkpointing). void *: held in
 * backend.gemm_dtype (model/activations.h). */
typedef struct {
    void *ln1, *qkv, *atty, *res_mid, *ln2, *fc, *fc_gelu;
    float *ln1_mean, *ln1_rstd, *att, *ln2_mean, *ln2_rstd;
} Gpt2Saved;

static Gpt2Saved gpt2_saved(Trainer *t, int l) {
    const Config *c = &t->cfg;
    Gpt2Activations *a = &t->gpt;
    long k = c->activation_checkpointing ? 0 : l, BT = (long)t->micro_batch * c->context;
    long D = c->width, att = gpt2_attention_saved(c, t->micro_batch);
    Dtype held = backend.gemm_dtype;
    Gpt2Saved s = {element_at(a->ln1, k * BT * D, held), element_at(a->qkv, k * BT * 3 * D, held),
                   element_at(a->atty, k * BT * D, held), element_at(a->res_mid, k * BT * D, held),
                   element_at(a->ln2, k * BT * D, held), element_at(a->fc, k * BT * 4 * D, held),
                   element_at(a->fc_gelu, k * BT * 4 * D, held),
                   a->ln1_mean + k * BT, a->ln1_rstd + k * BT, a->att + k * att,
                   a->ln2_mean + k * BT, a->ln2_rstd + k * BT};
    return s;
}

/* A Linear module's forward between its hooks: out (BT, O) = inp @ W^T + b,
 * held (model/activations.h): in fp32 slots rounded here, in 16 bits
 * rounded as it is written */
static void gpt2_linear(Trainer *t, int module, void *out, const void *inp, long BT, int I,
                        int O) {
    module_pre_forward(t, module);
    Linear linear = linear_of(t, module, I, O);
    linear_forward(&linear, held_buf(out), inp, (int)BT);
    lowp(t, out, BT * O, backend.gemm_dtype);
    module_post_forward(t, module);
}
/* c_fc and the GELU after it: pre = c_fc(inp), out = gelu_new(pre), both
 * held; one cuBLASLt product where it can (kernels/transformer.h) */
static void gpt2_fc_gelu(Trainer *t, int module, void *out, void *pre, const void *inp, long BT,
                         int D) {
    module_pre_forward(t, module); /* its unit's full parameters: now present */
    Linear c_fc = linear_of(t, module, D, 4 * D);
    if (!linear_gelu_tanh_forward(&c_fc, held_buf(out), pre, inp, (int)BT)) {
        linear_forward(&c_fc, held_buf(pre), inp, (int)BT);
        lowp(t, pre, BT * 4 * D, backend.gemm_dtype);
        gelu_tanh_forward(out, pre, BT * 4 * D, t->cfg.param_dtype);
    }
    module_post_forward(t, module);
}
static void gpt2_layernorm(Trainer *t, int module, void *out, float *mean, float *rstd,
                           const void *inp, long BT) {
    module_pre_forward(t, module);
    LayerNorm ln = layernorm_of(t, module, t->cfg.width);
    layernorm_forward(&ln, out, mean, rstd, inp, (int)BT, t->cfg.param_dtype);
    module_post_forward(t, module);
}

/* Block l up to the MLP's second projection, from its input res[l]:
 * h_mid = h + attn(ln_1(h)), then gelu(c_fc(ln_2(h_mid))). Forward runs it
 * once; with activation checkpointing backward runs it again (what
 * backward reads is all here: mlp.c_proj's output is read by nothing). */
static void gpt2_block_inner(Trainer *t, int l) {
    const Model *m = &t->model;
    const Config *c = &t->cfg;
    Gpt2Activations *a = &t->gpt;
    Gpt2Saved s = gpt2_saved(t, l);
    int B = t->micro_batch, T = c->context, D = c->width;
    long BT = (long)B * T;
    Dtype held = backend.gemm_dtype; /* activations.h */
    const void *h = element_at(a->res, l * BT * D, held);
    gpt2_layernorm(t, gpt2_module(m, l, GPT2_LN_1), s.ln1, s.ln1_mean, s.ln1_rstd, h, BT);
    module_pre_forward(t, gpt2_module(m, l, GPT2_ATTN));
    gpt2_linear(t, gpt2_module(m, l, GPT2_C_ATTN), s.qkv, s.ln1, BT, D, 3 * D);
    if (c->attention == ATTENTION_FLASH)
        flash_attention_forward(s.atty, s.att, s.qkv, B, T, D, c->n_head, c->param_dtype);
    else attention_forward(s.atty, s.att, s.qkv, B, T, D, c->n_head, c->param_dtype);
    gpt2_linear(t, gpt2_module(m, l, GPT2_ATTN_PROJ), a->proj, s.atty, BT, D, D);
    module_post_forward(t, gpt2_module(m, l, GPT2_ATTN));
    /* the attention's residual connection */
    FOR_EACH(BT * D, residual_add_one, s.res_mid, h, a->proj, c->param_dtype, held);
    gpt2_layernorm(t, gpt2_module(m, l, GPT2_LN_2), s.ln2, s.ln2_mean, s.ln2_rstd, s.res_mid, BT);
    module_pre_forward(t, gpt2_module(m, l, GPT2_MLP));
    gpt2_fc_gelu(t, gpt2_module(m, l, GPT2_C_FC), s.fc_gelu, s.fc, s.ln2, BT, D);
}

float gpt2_forward(Trainer *t) {
    Model *m = &t->model;
    Gpt2Activations *a = &t->gpt;
    const Config *c = &t->cfg;
    int B = t->micro_batch, T = c->context, D = c->width, V = c->vocab;
    long BT = (long)B * T;
    Dtype held = backend.gemm_dtype, wh = full_dtype(t); /* activations.h; section 1 */

    module_pre_forward(t, m->root);
    module_pre_forward(t, m->transformer);
    module_pre_forward(t, m->wte);
    FOR_EACH(BT * D, token_embedding_forward_one, a->res, a->tokens, weight_of(t, m->wte), wh, D,
             held);
    module_post_forward(t, m->wte);
    module_pre_forward(t, m->wpe);
    FOR_EACH(BT * D, position_embedding_forward_one, a->res, weight_of(t, m->wpe), wh, T, D,
             c->param_dtype, held);
    module_post_forward(t, m->wpe);

    module_pre_forward(t, m->h);
    for (int l = 0; l < c->depth; l++) {
        Gpt2Saved s = gpt2_saved(t, l);
        void *h_out = element_at(a->res, (l + 1) * BT * D, held);
        module_pre_forward(t, m->block[l]);
        gpt2_block_inner(t, l);
        gpt2_linear(t, gpt2_module(m, l, GPT2_MLP_PROJ), a->proj, s.fc_gelu, BT, 4 * D, D);
        module_post_forward(t, gpt2_module(m, l, GPT2_MLP));
        /* the MLP's residual connection */
        FOR_EACH(BT * D, residual_add_one, h_out, s.res_mid, a->proj, c->param_dtype, held);
        module_post_forward(t, m->block[l]);
    }
    module_post_forward(t, m->h);
    gpt2_layernorm(t, m->ln_f, a->lnf, a->lnf_mean, a->lnf_rstd,
                   element_at(a->res, c->depth * BT * D, held), BT);
    module_post_forward(t, m->transformer);

    module_pre_forward(t, m->lm_head); /* wte's weight, still gathered: the root's unit */
    int ld = logits_stride(V); /* the logits' rows padded: kernels/layers.h */
    Linear lm_head = linear_of(t, m->wte, D, V); /* wte, tied: a Linear without bias */
    matmul_forward(&lm_head, held_buf(a->logits), ld, a->lnf, (int)BT);
    lowp(t, a->logits, BT * ld, held);
    module_post_forward(t, m->lm_head);
    float loss = crossentropy_forward(a->lse, a->losses, a->logits, ld, a->targets, (int)BT, V);
    module_post_forward(t, m->root);
    return loss;
}

/* A Linear module's backward between its hooks: dinp is written, dout @ W,
 * and its weight and bias gradients add dout's share; all three
 * activations held (model/activations.h), dinp rounded here in fp32 slots */
static void gpt2_linear_backward(Trainer *t, int module, void *dinp, const void *dout,
                                 const void *inp, long BT, int I, int O) {
    module_pre_backward(t, module);
    Linear linear = linear_of(t, module, I, O);
    linear_backward(&linear, held_buf(dinp), held_buf(dout), inp, (int)BT);
    lowp(t, dinp, BT * I, backend.gemm_dtype);
    module_post_backward(t, module);
}
/* mlp.c_proj's backward and GELU's: dpre, c_fc's output gradient, from
 * dout (one cuBLASLt product where it can: kernels/transformer.h). Apart,
 * c_proj's input gradient goes to dpre, and GELU's backward works there in
 * place: element i of its output needs element i of that gradient alone. */
static void gpt2_proj_gelu_backward(Trainer *t, int module, void *dpre, const void *dout,
                                    const void *act, const void *pre, long BT, int D) {
    module_pre_backward(t, module); /* its unit's full parameters and gradient: present */
    Linear c_proj = linear_of(t, module, 4 * D, D);
    if (!linear_backward_dgelu_tanh(&c_proj, dpre, dout, act, pre, (int)BT)) {
        linear_backward(&c_proj, held_buf(dpre), held_buf(dout), act, (int)BT);
        lowp(t, dpre, BT * 4 * D, backend.gemm_dtype);
        gelu_tanh_backward(dpre, dpre, pre, BT * 4 * D, t->cfg.param_dtype);
    }
    module_post_backward(t, module);
}
/* LayerNorm's backward adds into dinp (the residual stream's gradient),
 * rounding the sum, from dout (d_x: the Linear after the norm wrote it) */
static void gpt2_layernorm_backward(Trainer *t, int module, void *dinp, const void *dout,
                                    const void *inp, const float *mean, const float *rstd,
                                    long BT) {
    module_pre_backward(t, module);
    LayerNorm ln = layernorm_of(t, module, t->cfg.width);
    layernorm_backward(&ln, dinp, dout, inp, mean, rstd, (int)BT, t->cfg.param_dtype);
    module_post_backward(t, module);
}

/* Block l's backward: d_res holds dL/d(block output) and leaves holding
 * dL/d(block input). Each residual connection passes the gradient through
 * unchanged, and its branch adds its own share through the LayerNorm that
 * opened it. */
static void gpt2_block_backward(Trainer *t, int l) {
    const Model *m = &t->model;
    const Config *c = &t->cfg;
    Gpt2Activations *a = &t->gpt;
    int B = t->micro_batch, T = c->context, D = c->width;
    long BT = (long)B * T;
    module_pre_backward(t, m->block[l]);
    if (c->activation_checkpointing) {
        t->recomputing = 1; /* the forward hooks only unshard (module_pre_forward) */
        gpt2_block_inner(t, l);
        t->recomputing = 0;
    }
    Gpt2Saved s = gpt2_saved(t, l);
    /* the MLP branch: c_proj, GELU, c_fc, then ln_2 into d_res */
    module_pre_backward(t, gpt2_module(m, l, GPT2_MLP));
    gpt2_proj_gelu_backward(t, gpt2_module(m, l, GPT2_MLP_PROJ), a->d_fc, a->d_res, s.fc_gelu,
                            s.fc, BT, D);
    gpt2_linear_backward(t, gpt2_module(m, l, GPT2_C_FC), a->d_x, a->d_fc, s.ln2, BT, D, 4 * D);
    module_post_backward(t, gpt2_module(m, l, GPT2_MLP));
    gpt2_layernorm_backward(t, gpt2_module(m, l, GPT2_LN_2), a->d_res, a->d_x, s.res_mid,
                            s.ln2_mean, s.ln2_rstd, BT);
    /* the attention branch: c_proj, attention, c_attn, then ln_1 into d_res */
    module_pre_backward(t, gpt2_module(m, l, GPT2_ATTN));
    gpt2_linear_backward(t, gpt2_module(m, l, GPT2_ATTN_PROJ), a->d_atty, a->d_res, s.atty, BT, D,
                         D);
    if (c->attention == ATTENTION_FLASH)
        flash_attention_backward(a->d_qkv, a->d_att, a->d_atty, s.atty, s.qkv, s.att, B, T, D,
                                 c->n_head, c->param_dtype);
    else attention_backward(a->d_qkv, a->d_att, a->d_atty, s.qkv, s.att, B, T, D, c->n_head,
                            c->param_dtype);
    gpt2_linear_backward(t, gpt2_module(m, l, GPT2_C_ATTN), a->d_x, a->d_qkv, s.ln1, BT, D, 3 * D);
    module_post_backward(t, gpt2_module(m, l, GPT2_ATTN));
    gpt2_layernorm_backward(t, gpt2_module(m, l, GPT2_LN_1), a->d_res, a->d_x,
                            element_at(a->res, l * BT * D, backend.gemm_dtype), s.ln1_mean,
                            s.ln1_rstd, BT);
    module_post_backward(t, m->block[l]);
}

/* dloss = 1/(K*B*T) for each position (the mean over the local batch's
 * positions, K micro-batches of B sequences; see model_backward) */
void gpt2_backward(Trainer *t) {
    Model *m = &t->model;
    Gpt2Activations *a = &t->gpt;
    const Config *c = &t->cfg;
    int B = t->micro_batch, T = c->context, D = c->width, V = c->vocab, ld = logits_stride(V);
    long BT = (long)B * T;

    module_pre_backward(t, m->root);
    crossentropy_backward(a->logits, ld, a->lse, a->targets,
                          t->loss_scale / ((float)t->local_batch * (float)T), (int)BT, V,
                          c->param_dtype); /* over the logits */
    module_pre_backward(t, m->lm_head); /* the tied weight's first share of its gradient */
    Dtype held = backend.gemm_dtype, gh = grad_dtype(t); /* activations.h; section 1 */
    Linear lm_head = linear_of(t, m->wte, D, V); /* wte, tied: a Linear without bias */
    matmul_backward(&lm_head, held_buf(a->d_x), held_buf(a->logits), ld, a->lnf, (int)BT);
    /* ... stored in param_dtype, as autograd accumulates a tied weight's
     * shares (and 16 bits hold it): wte's backward adds to the rounded sum */
    grad_round(t, &m->params[m->modules[m->wte].params[0]]);
    lowp(t, a->d_x, BT * D, held);
    module_post_backward(t, m->lm_head);
    module_pre_backward(t, m->transformer);
    zero_held(a->d_res, BT * D);
    const void *h_last = element_at(a->res, c->depth * BT * D, held); /* ln_f's input */
    gpt2_layernorm_backward(t, m->ln_f, a->d_res, a->d_x, h_last, a->lnf_mean, a->lnf_rstd, BT);
    module_pre_backward(t, m->h);
    for (int l = c->depth - 1; l >= 0; l--) gpt2_block_backward(t, l);
    module_post_backward(t, m->h);
    module_pre_backward(t, m->wpe);
    FOR_EACH((long)T * D, position_embedding_backward_one, dweight_of(t, m->wpe), a->d_res, B, T,
             D, held, gh);
    module_post_backward(t, m->wpe);
    module_pre_backward(t, m->wte); /* ... and its second */
    embedding_backward(buf(dweight_of(t, m->wte), gh), a->d_res, &a->by_token, D);
    module_post_backward(t, m->wte);
    module_post_backward(t, m->transformer);
    module_post_backward(t, m->root);
    units_finish_backward(t);
}

#endif /* FSDP_MODEL_GPT2_H */
