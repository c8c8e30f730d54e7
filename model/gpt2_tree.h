/* ============================================================================
 * model/gpt2_tree.h — GPT-2's module tree (the byte MLP's: model/tree.h): Hugging
 * Face's GPT2LMHeadModel, module for module and name for name, so that
 * auto-wrap sees the tree PyTorch's FSDP sees when a lab wraps
 * AutoModelForCausalLM.from_pretrained("gpt2"). fsdp.c includes it in
 * place; model/gpt2.h computes with it (section 5).
 *
 *   transformer.wte      (V, D)      token embedding, tied to lm_head
 *   transformer.wpe      (n_ctx, D)  learned positions
 *   transformer.h.i      for i < L, a pre-LayerNorm block:
 *       ln_1, attn.c_attn (3D, D): q, k, v at once, attn.c_proj (D, D)
 *       ln_2, mlp.c_fc (4D, D), mlp.c_proj (D, 4D)
 *   transformer.ln_f     final LayerNorm
 *   lm_head              logits = ln_f's output @ wte^T: no parameter of its own
 *
 * Hugging Face's Conv1D stores its weight as (in, out); ours are nn.Linear's
 * (out, in), as every other layer here, and io/checkpoint.h's export and
 * --init-from transpose the four matrices of a block on the way.
 *
 * May include core.h, fsdp.h and model/tree.h; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_MODEL_GPT2_TREE_H
#define FSDP_MODEL_GPT2_TREE_H
#include "../core.h"
#include "../fsdp.h"
#include "tree.h" /* model_add_module, model_add_param, model_add_layernorm */

/* the modules of block l, by role: m->gpt2_block[l * GPT2_ROLES + role] */
enum {
    GPT2_BLOCK,
    GPT2_LN_1,
    GPT2_ATTN,
    GPT2_C_ATTN,
    GPT2_ATTN_PROJ,
    GPT2_LN_2,
    GPT2_MLP,
    GPT2_C_FC,
    GPT2_MLP_PROJ,
    GPT2_ROLES
};

static int gpt2_module(const Model *m, int l, int role) {
    return m->gpt2_block[l * GPT2_ROLES + role];
}

/* GPT-2's initialisation (Hugging Face's _init_weights): every weight
 * normal(0, 0.02), biases zero, LayerNorms one and zero; the two
 * projections that write into the residual stream (attn.c_proj and
 * mlp.c_proj) normal(0, 0.02 / sqrt(2 L)), so that the stream's variance
 * does not grow with the 2L branches added to it. */
static int gpt2_add_linear(Model *m, const char *name, int parent, int in, int out, float std) {
    int id = model_add_module(m, name, parent);
    model_add_param(m, id, "weight", out, in, INIT_NORMAL, std);
    m->params[m->n_params - 1].conv1d = 1; /* (in, out) in Hugging Face's files */
    model_add_param(m, id, "bias", out, 1, INIT_ZEROS, 0.0f);
    return id;
}

/* "transformer.h.3" + ".attn.c_attn" */
static const char *gpt2_name(char *buf, size_t len, int l, const char *suffix) {
    snprintf(buf, len, "transformer.h.%d%s", l, suffix);
    return buf;
}

static void gpt2_build_block(Model *m, int l, int D) {
    char n[FSDP_MAX_NAME];
    int *r = &m->gpt2_block[l * GPT2_ROLES];
    float std = 0.02f;
    r[GPT2_BLOCK] = model_add_module(m, gpt2_name(n, sizeof(n), l, ""), m->h);
    m->modules[r[GPT2_BLOCK]].is_block = 1;
    m->block[l] = r[GPT2_BLOCK];
    r[GPT2_LN_1] = model_add_layernorm(m, gpt2_name(n, sizeof(n), l, ".ln_1"), r[GPT2_BLOCK], D);
    r[GPT2_ATTN] = model_add_module(m, gpt2_name(n, sizeof(n), l, ".attn"), r[GPT2_BLOCK]);
    r[GPT2_C_ATTN] =
        gpt2_add_linear(m, gpt2_name(n, sizeof(n), l, ".attn.c_attn"), r[GPT2_ATTN], D, 3 * D, std);
    r[GPT2_ATTN_PROJ] = gpt2_add_linear(m, gpt2_name(n, sizeof(n), l, ".attn.c_proj"),
                                        r[GPT2_ATTN], D, D, m->residual_std);
    r[GPT2_LN_2] = model_add_layernorm(m, gpt2_name(n, sizeof(n), l, ".ln_2"), r[GPT2_BLOCK], D);
    r[GPT2_MLP] = model_add_module(m, gpt2_name(n, sizeof(n), l, ".mlp"), r[GPT2_BLOCK]);
    r[GPT2_C_FC] =
        gpt2_add_linear(m, gpt2_name(n, sizeof(n), l, ".mlp.c_fc"), r[GPT2_MLP], D, 4 * D, std);
    r[GPT2_MLP_PROJ] = gpt2_add_linear(m, gpt2_name(n, sizeof(n), l, ".mlp.c_proj"), r[GPT2_MLP],
                                       4 * D, D, m->residual_std);
}

/* Builds the tree in GPT2LMHeadModel's registration order: the order of
 * named_parameters() (which lists a tied tensor once, under wte) and of
 * each unit's flat parameter. */
static void gpt2_build(Model *m, const Config *cfg) {
    int L = cfg->depth, D = cfg->width;
    memset(m, 0, sizeof(*m));
    m->modules = (Module *)host_calloc((size_t)(8 + 9 * L), sizeof(Module), "build the model");
    m->params = (Param *)host_calloc((size_t)(4 + 12 * L), sizeof(Param), "build the model");
    m->block = (int *)host_calloc((size_t)L, sizeof(int), "build the model");
    m->gpt2_block = (int *)host_calloc((size_t)L * GPT2_ROLES, sizeof(int), "build the model");
    m->residual_std = 0.02f / sqrtf(2.0f * (float)L);

    m->root = model_add_module(m, "", -1);
    m->transformer = model_add_module(m, "transformer", m->root);
    m->wte = model_add_module(m, "transformer.wte", m->transformer);
    model_add_param(m, m->wte, "weight", cfg->vocab, D, INIT_NORMAL, 0.02f);
    m->wpe = model_add_module(m, "transformer.wpe", m->transformer);
    model_add_param(m, m->wpe, "weight", cfg->n_ctx, D, INIT_NORMAL, 0.02f);
    m->h = model_add_module(m, "transformer.h", m->transformer);
    m->modules[m->h].is_module_list = 1;
    for (int l = 0; l < L; l++) gpt2_build_block(m, l, D);
    m->ln_f = model_add_layernorm(m, "transformer.ln_f", m->transformer, D);
    m->lm_head = model_add_module(m, "lm_head", m->root); /* uses wte's weight */
    /* wte's users are wte and lm_head; their common ancestor is the root */
    m->modules[m->transformer].holds_tied = 1;
    m->modules[m->wte].holds_tied = 1;
}

#endif /* FSDP_MODEL_GPT2_TREE_H */
