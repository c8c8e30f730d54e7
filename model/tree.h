/* ============================================================================
 * model/tree.h — building a module tree: modules, their parameters, and the
 * byte MLP's tree (GPT-2's: model/gpt2_tree.h), in PyTorch's registration
 * order, which is also named_parameters()'s and each unit's flat layout.
 * The Model it fills is fsdp.h's.
 *
 * A small language model over bytes. Its parameters sit in clearly separate
 * modules of very different sizes, so auto-wrap decisions are easy to see:
 *
 *   embed    (V, C)        embedding of each of the last T bytes
 *   proj_in  (D, T*C)      concatenate the T embeddings, project to width D
 *   blocks.i for i < L:    h = h + fc2(gelu(fc1(norm(h))))
 *       norm (D), fc1 (4D, D), fc2 (D, 4D)
 *   norm_f   (D)           final LayerNorm
 *   head     (V, D)        logits over the next byte; softmax cross-entropy
 *
 * Names and layouts are PyTorch's: Linear weights are (out_features,
 * in_features), LayerNorm has weight and bias with eps 1e-5, GELU is the
 * exact erf form (nn.GELU()), so an exported state dict loads into the same
 * nn.Module. Each layer (kernels/layers.h) has a forward and a backward
 * side by side, with the same argument order; backward accumulates (+=)
 * into gradients.
 *
 * defines: model_add_module, model_add_param, model_add_linear,
 *          model_add_layernorm, model_build, model_free
 *
 * May include core.h and fsdp.h; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_MODEL_TREE_H
#define FSDP_MODEL_TREE_H
#include "../core.h"
#include "../fsdp.h"

static int model_add_module(Model *m, const char *name, int parent) {
    Module *mod = &m->modules[m->n_modules];
    memset(mod, 0, sizeof(*mod));
    snprintf(mod->name, sizeof(mod->name), "%s", name);
    mod->parent = parent;
    mod->unit = -1;
    mod->params[0] = mod->params[1] = -1;
    if (parent >= 0) {
        Module *p = &m->modules[parent];
        p->children[p->n_children++] = m->n_modules;
    }
    return m->n_modules++;
}

static void model_add_param(Model *m, int module, const char *suffix, int rows, int cols,
                            ParamInit init, float bound) {
    Module *mod = &m->modules[module];
    Param *p = &m->params[m->n_params];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s.%s", mod->name, suffix);
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = (long)rows * cols;
    p->module = module;
    p->unit = -1;
    p->init = init;
    p->init_bound = bound;
    mod->params[mod->n_params++] = m->n_params++;
    m->total_numel += p->numel;
}

/* nn.Linear(in, out): weight (out, in) and bias (out), both initialised
 * uniform(-1/sqrt(in), 1/sqrt(in)) as PyTorch does. */
static int model_add_linear(Model *m, const char *name, int parent, int in, int out) {
    int id = model_add_module(m, name, parent);
    float bound = 1.0f / sqrtf((float)in);
    model_add_param(m, id, "weight", out, in, INIT_UNIFORM, bound);
    model_add_param(m, id, "bias", out, 1, INIT_UNIFORM, bound);
    return id;
}
static int model_add_layernorm(Model *m, const char *name, int parent, int dim) {
    int id = model_add_module(m, name, parent);
    model_add_param(m, id, "weight", dim, 1, INIT_ONES, 0.0f);
    model_add_param(m, id, "bias", dim, 1, INIT_ZEROS, 0.0f);
    return id;
}

/* Builds the module tree in PyTorch's registration order, which is also the
 * order of named_parameters() and of each unit's flat parameter. */
static void model_build(Model *m, const Config *cfg) {
    int L = cfg->depth, D = cfg->width;
    char name[FSDP_MAX_NAME];
    memset(m, 0, sizeof(*m));
    int max_modules = 6 + 4 * L;
    m->modules = (Module *)host_calloc((size_t)max_modules, sizeof(Module), "build the model");
    m->params = (Param *)host_calloc((size_t)(7 + 6 * L), sizeof(Param), "build the model");
    m->block = (int *)host_calloc((size_t)L * 4, sizeof(int), "build the model");
    m->block_norm = m->block + L;
    m->block_fc1 = m->block + 2 * L;
    m->block_fc2 = m->block + 3 * L;

    m->root = model_add_module(m, "", -1);
    m->embed = model_add_module(m, "embed", m->root);
    model_add_param(m, m->embed, "weight", cfg->vocab, cfg->embed_dim, INIT_NORMAL, 1.0f);
    m->proj_in = model_add_linear(m, "proj_in", m->root, cfg->context * cfg->embed_dim, D);
    m->blocks = model_add_module(m, "blocks", m->root);
    m->modules[m->blocks].is_module_list = 1;
    for (int i = 0; i < L; i++) {
        snprintf(name, sizeof(name), "blocks.%d", i);
        m->block[i] = model_add_module(m, name, m->blocks);
        m->modules[m->block[i]].is_block = 1;
        snprintf(name, sizeof(name), "blocks.%d.norm", i);
        m->block_norm[i] = model_add_layernorm(m, name, m->block[i], D);
        snprintf(name, sizeof(name), "blocks.%d.fc1", i);
        m->block_fc1[i] = model_add_linear(m, name, m->block[i], D, 4 * D);
        snprintf(name, sizeof(name), "blocks.%d.fc2", i);
        m->block_fc2[i] = model_add_linear(m, name, m->block[i], 4 * D, D);
    }
    m->norm_f = model_add_layernorm(m, "norm_f", m->root, D);
    m->head = model_add_linear(m, "head", m->root, D, cfg->vocab);
}

static void model_free(Model *m) {
    free(m->modules);
    free(m->params);
    free(m->block);
    free(m->gpt2_block);
    memset(m, 0, sizeof(*m));
}

#endif /* FSDP_MODEL_TREE_H */
