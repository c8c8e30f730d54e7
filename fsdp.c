/* ============================================================================
 * fsdp.c — Fully Sharded Data Parallel training, one readable file
 *
 * This file trains a language model (a small byte-level MLP, or GPT-2 as
 * Hugging Face builds it) with FSDP (the ZeRO-3 idea) on N MPI ranks: CPU
 * processes that each play one GPU, or real GPUs.
 * Read it top to bottom: the sections follow the life of a training step,
 * the core first (1-5), then each variant in its own short section (6-12).
 *
 *   1. what a rank holds: units, flat    7. CPU offload
 *      parameters and shards (auto-wrap) 8. hybrid groups
 *   2. unshard and reshard               9. ZeRO-1
 *   3. the four hooks                   10. clipping, mixed precision, loss scaling
 *   4. reduce-scatter; sharded AdamW    11. gradient accumulation and no_sync
 *   5. one step, end to end             12. forward only; activation checkpointing
 *   6. prefetch and the limiter         13. checkpoints
 *                                       14. FSDP2: every parameter sharded on dim 0
 *
 * The program around it (the command line, the training loop, what a run
 * prints, main) lives beside it in main.c, which #includes this file: one
 * translation unit. Nothing here calls the program; the program calls this.
 * The headers it stands on are included at the top, each under a "defines:"
 * line, before the first function: code a first reading may skip (core.h's
 * checks and formats, the backend's two builds in kernels/ and comm/, the
 * ledger and the simulator's record in sim/, the corpus and the sampler in
 * data/, the module trees in model/, AdamW's element in optim/, checkpoint
 * plumbing in io/). None of them calls back into this file. The models FSDP
 * wraps (model/mlp.h, model/gpt2.h) call its hooks; main.c includes them.
 *
 * The idea in one paragraph. Data parallel training keeps a full copy of the
 * model, its gradients and its optimizer state on every GPU (DDP). FSDP
 * instead cuts the model into units, lays each unit's parameters end to end
 * in one flat parameter, and gives each of the N ranks one 1/N slice of it:
 * its shard. A unit's full state exists only while the unit computes: it is
 * all-gathered just before, and freed just after. Gradients are
 * reduce-scattered, so each rank receives only the averaged gradient of its
 * own shard, and AdamW updates only that shard. Memory for parameters,
 * gradients and optimizer state falls by N; the price is communication.
 *
 * Three companions are built with it: files.c (every file is read and
 * written through it, so that no output replaces a device or a link and no
 * input blocks on a named pipe), formats.c (the byte formats of
 * checkpoints: safetensors, meta.txt, CRC-32) and sim/ (the simulator's
 * instruments: traces, --step pictures, --view, the collective checker, the
 * network cost model), which this file calls through one-line hooks.
 *
 * Build and run (the Makefile does this for you):
 *   mpicc -O2 -std=c11 main.c files.c formats.c sim/net.c sim/sim.c sim/record.c \
 *         sim/check.c sim/show.c -o fsdp -lm
 *   mpirun -np 4 ./fsdp                         # FSDP, 4 simulated GPUs
 *   mpirun -np 4 ./fsdp --strategy ddp          # the DDP baseline
 *   mpirun -np 4 ./fsdp --compare               # both, side by side
 *   mpirun -np 4 ./fsdp --model tiny --step     # stop before every collective
 *   mpirun -np 4 ./fsdp --param-dtype bf16 --grad-accum 4 --activation-checkpointing
 *   mpirun -np 64 ./fsdp --plan --width 8192 --depth 14  # 7.5B parameters' memory
 *   ./fsdp --help
 *
 * The same file compiles as CUDA C++ (nvcc -x cu main.c ...; `make gpu`):
 *   mpirun -np 4 ./fsdp-gpu                     # the same flags, on 4 GPUs
 * The backend seam (kernels/backend.h), the layers' kernels (kernels/layers.h and
 * transformer.h) and the collectives' device side (comm/device.h) are all that differs.
 * ========================================================================== */
#define _POSIX_C_SOURCE 200809L /* open, fstat, fsync, mkdir: files and checkpoints */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> /* mkdir: a checkpoint's directory */
#include <unistd.h>   /* close */

/* defines: the vocabulary and the API (fsdp.h, with core.h and comm/comm.h), safe files
 *          (files.h), the checkpoints' byte formats (formats.h), the simulator's hooks
 *          (sim/sim.h) */
#include "fsdp.h"
#include "files.h"
#include "formats.h"
#include "sim/sim.h"

/* defines: fsdp_fatal and FATAL (say where, a HINT, MPI_Abort), host_malloc, host_calloc,
 *          host_realloc, mpiCheck, usage_error (bad input: exit 2), exit_all, now_seconds,
 *          ceil_div, mib, the counter-based random numbers (rng_u64, rng_uniform, rng_normal,
 *          STREAM_*), Dtype and the 16-bit formats (bf16_from_float, ..., round_to, pack_one),
 *          FSDP_HD: the bottom floor, included by every file (fsdp.h, above, already has) */
#include "core.h"

/* defines: backend (the process's device; backend.dry: --plan, nothing runs),
 *          dev_alloc, dev_free, dev_zero, dev_copy, dev_to_host, dev_from_host,
 *          dev_synchronize, event_record, event_seconds, batch_stage, batch_staged,
 *          FOR_EACH, HOST_FOR_EACH, STATE_FOR_EACH, scale_one, backend_init, backend_describe,
 *          backend_print_memory, backend_release (and, on GPUs, the pool) */
#include "kernels/backend.h"

/* defines: ledger_book, ledger_alloc and its variants (_held, _floats, _host), ledger_free,
 *          ledger_release_all, where a buffer lives (ON_DEVICE, HOST_PINNED, ...); and,
 *          through sim/oom.h, ledger_oom_report (the simulated out-of-memory message, in
 *          CUDA's words, with a HINT), ledger_out_of_memory (who reports, and how every rank
 *          stops), ledger_agree_fits (after setup) */
#include "sim/ledger.h"

/* defines: comm_task, comm_mean_parts, comm_postscale (the mean's two factors),
 *          comm_watchdog_expired (the watchdog's words, the CPU's and NCCL's) */
#include "comm/task.h"
/* defines: ring_right, ring_left, ring_all_gather, ring_reduce_scatter (the two rings,
 *          graded exercises: make exercise EX=ring_all_gather, EX=ring_reduce_scatter) */
#include "comm/ring.h"
/* defines: collective_run_host_16, mpi_sum_bf16, mpi_sum_fp16 (the same two rings, and
 *          Open MPI's collectives, on 16-bit values: half the bytes on the wire) */
#include "comm/wire16.h"
/* defines: collective_run_host (one collective on host buffers: a ring or Open MPI's) */
#include "comm/host.h"
/* defines: collective_run (a task on the group's buffers, wherever they live),
 *          device_comm_open, device_comm_close, device_comm_submit,
 *          device_comm_wait (NCCL on a GPU; nothing on the CPU) */
#include "comm/device.h"
/* defines: comm_group_new, comm_split_nodes, comm_group_free (nodes, and the hybrid
 *          strategies' groups, priced on the --net models sim/net.c's net_models_of reads) */
#include "comm/groups.h"
/* defines: comm_record (every collective passes through it), the stream (comm_init,
 *          comm_submit), comm_all_gather_start and _in, comm_reduce_scatter_start,
 *          comm_all_reduce_start and _in, the watchdog and comm_wait, comm_release; and,
 *          through sim/events.h, comm_event_add and the --net clock */
#include "comm/stream.h"

/* defines: Buf (a pointer and its values' format), the Linear and LayerNorm
 *          views; each layer's forward and backward (linear_forward,
 *          linear_backward, layernorm_, gelu_, embedding_, crossentropy_
 *          forward and backward) and the element functions under them
 *          (gelu, layernorm_forward_row, ...) */
#include "kernels/layers.h"

/* defines: GPT-2's layers: gelu_tanh_ (Hugging Face's gelu_new), token and
 *          position embeddings, causal attention_forward and _backward */
#include "kernels/transformer.h"

/* defines: the module tree's builders (model_add_module, model_add_param, model_add_linear,
 *          model_add_layernorm), model_build (the byte MLP's tree, in PyTorch's registration
 *          order: named_parameters()'s and each unit's flat layout), model_free */
#include "model/tree.h"

/* defines: gpt2_build (GPT-2's module tree, Hugging Face's names) and
 *          gpt2_module (block l's module of a role) */
#include "model/gpt2_tree.h"

/* ---- the rest of fsdp.c's floor ---------------------------------------------------
 * What the later sections use and a first reading may skip, included here so that
 * every header comes before the first function: the runtime's state (section 1),
 * AdamW's element and the schedule (section 4), the sampler (section 5), the
 * checkpoints' plumbing (section 13). None of them calls fsdp.c. */

/* defines: struct Trainer (every field a rank trains with), PendingReduce (the one gradient
 *          reduction in flight), CopyDirection (--cpu-offload's copies); and, through
 *          data/corpus.h, Corpus (what a run trains on; section 5 deals it out),
 *          corpus_synthetic, corpus_load_file (--data, memory-mapped), corpus_batch_token
 *          (a token for a batch, checked against the vocabulary), corpus_release; through
 *          model/activations.h, Activations (the byte MLP's) and Gpt2Activations
 *          (GPT-2's): what a forward saves for its backward */
#include "trainer.h"

/* defines: adamw_update_one (one element of section 4's update), AdamWStep (one step's
 *          hyperparameters), adamw_one, adamw_mixed_one (the update of element i, and with
 *          mixed precision its param_dtype copy in the same pass) */
#include "optim/adamw.h"

/* defines: lr_at, the learning rate of optimizer step t (torch.optim.lr_scheduler) */
#include "optim/lr_schedule.h"

/* defines: sampler_local_batch (the byte MLP's samples), sampler_local_sequences (GPT-2's,
 *          each token checked against the vocabulary as it is drawn) */
#include "data/sampler.h"

/* defines: ckpt_agree (every rank the same verdict, the first failing rank's message),
 *          ckpt_meta_of (with lr_schedule_to_meta), ckpt_list, ckpt_prune, ckpt_remove_dir,
 *          ckpt_saves_after, ckpt_check_save_dir, ckpt_locate, ckpt_check_step, ckpt_check_model,
 *          ckpt_check_data, ckpt_check_optimizer, ckpt_verify_files, param_index_text,
 *          st_tensor_of, st_check_model, st_read_header,
 *          st_header_everywhere, export_print_done, and GPT-2's Hugging Face
 *          layout: export_param (Conv1D transposed), gpt2_config_text
 *          (config.json), st_read_conv1d; gpt2_check_config (--init-from's
 *          config.json), model_file_of (a directory's model.safetensors) */
#include "io/checkpoint.h"

/* The piece of a parameter that a rank's shard holds: its elements
 * [first, end), which start at element `at` of the shard. */
typedef struct {
    long first, end, at;
} ShardPiece;

/* ---- forward declarations -----------------------------------------------------------
 * The core (sections 1-5) calls a few variants, each defined later in its own section;
 * they are declared here, under the section that defines them, so the core reads first. */
/* 4. the reduce-scatter: the hooks (section 3) start and finish it */
static void reduce_grad_start(Trainer *t, int ui);
static void reduce_grad_finish(Trainer *t);
/* 6. prefetch and the limiter */
static void unshard_rate_limit(Trainer *t);
static int unit_next_forward(const Trainer *t, int ui);
static int unit_next_backward(const Trainer *t, int ui);
/* 7. CPU offload */
static const void *unit_gather_input(Trainer *t, int ui);
static void unit_grad_to_host(Trainer *t, int ui, float *host_shard);
/* 8. hybrid groups */
static void trainer_split_nodes(Trainer *t);
static void unit_reduce_replicas(Trainer *t, int ui);
/* 9. ZeRO-1 */
static void unit_init_replica(Trainer *t, Unit *u);
/* 10. clipping and the loss scaler */
static void clip_grad_norm(Trainer *t, float max_norm);
static int grad_scaler_unscale(Trainer *t);
static void grad_scaler_update(Trainer *t);
/* 11. gradient accumulation */
static void unit_grad_accumulate(Trainer *t, Unit *u, float *kept);
/* 14. FSDP2 */
static void fsdp2_layout(Unit *u, Model *m, int world);
static void fsdp2_check_layout(const Unit *units, int n_units, const Model *m, int world);
static int fsdp2_piece(const Unit *u, int j, const Param *p, int rank, ShardPiece *s);
static void fsdp2_copy_out(Trainer *t, int ui, void *full, const void *gathered, Dtype held,
                           int from);
static void *fsdp2_chunk_cat(Trainer *t, int ui);
static void fsdp2_keep_post_forward(Trainer *t, int ui);

/* ============================================================================
 * 1. What a rank holds: units, flat parameters and shards
 *
 * Auto-wrap cuts the model's module tree into units; each unit's parameters
 * are laid end to end in one flat parameter, and each rank keeps one shard
 * of it, with the shard of its gradient and AdamW's state for it. Every
 * buffer is booked in the rank's ledger (t->ledger, sim/ledger.h) under a
 * category: what the memory tables and --plan report. trainer_create, at the
 * end of this section, builds all of it.
 * ========================================================================== */

/* ------------------------------------------------------------------------
 * Auto-wrap: which modules become units
 *
 * PyTorch's size_based_auto_wrap_policy(min_num_params), exactly:
 *   - visit the module tree in post-order (children before their parent);
 *   - a module's count is the parameters in its subtree that no wrapped
 *     descendant has claimed already;
 *   - the module becomes a unit when that remainder is >= min_num_params;
 *     nn.ModuleList containers (our `blocks`) are never wrapped;
 *   - the root is always a unit and takes whatever is left (it may be left
 *     with no parameters at all, which PyTorch allows too).
 * A parameter belongs to the unit of its nearest wrapped ancestor.
 *
 * --auto-wrap transformer is PyTorch's transformer_auto_wrap_policy: every
 * module of the block class (GPT2Block, our blocks.i) is a unit, nothing
 * else but the root. One unit per block is what transformers are wrapped
 * with in practice: the units are equal, and each is gathered exactly while
 * its block computes.
 *
 * Tied parameters. GPT-2's lm_head multiplies by wte's weight, the same
 * tensor. A unit frees its full state after its forward, so a tensor that
 * two modules use must sit in a unit that is gathered while both compute:
 * the unit of their lowest common ancestor. PyTorch requires the same
 * ("shared parameters must belong to the same FSDP unit"). Here the
 * modules on the way from that ancestor to a user (transformer, wte) are
 * marked holds_tied, and neither policy wraps them, so wte stays in the
 * root's unit.
 * --------------------------------------------------------------------- */

/* Returns the parameters in `module`'s subtree not claimed by a unit below. */
#ifdef EXERCISE_AUTO_WRAP /* graded exercise: make exercise EX=auto_wrap */
#include EXERCISE_FILE
#else
static long autowrap_visit(Model *m, int module, long min_params) {
    Module *mod = &m->modules[module];
    long remainder = 0;
    for (int i = 0; i < mod->n_children; i++)
        remainder += autowrap_visit(m, mod->children[i], min_params);
    for (int i = 0; i < mod->n_params; i++) remainder += m->params[mod->params[i]].numel;
    int is_root = (mod->parent < 0);
    if (!is_root && !mod->is_module_list && !mod->holds_tied && remainder >= min_params) {
        mod->unit = 1; /* marked; numbered in autowrap_number */
        return 0;
    }
    return remainder;
}
#endif /* EXERCISE_AUTO_WRAP */

/* Numbers the marked modules in pre-order (the root is unit 0, then units in
 * the order the forward pass meets them) and gives every parameter the unit
 * of its nearest wrapped ancestor. */
static void autowrap_number(Model *m, int module, int enclosing, int *n_units) {
    Module *mod = &m->modules[module];
    if (mod->parent < 0 || mod->unit >= 0) {
        mod->unit = (*n_units)++;
        enclosing = mod->unit;
    }
    for (int i = 0; i < mod->n_params; i++) m->params[mod->params[i]].unit = enclosing;
    for (int i = 0; i < mod->n_children; i++)
        autowrap_number(m, mod->children[i], enclosing, n_units);
}

/* transformer_auto_wrap_policy: the blocks, and only they, are units */
static void autowrap_blocks(Model *m) {
    for (int i = 0; i < m->n_modules; i++)
        if (m->modules[i].is_block) m->modules[i].unit = 1; /* marked */
}

/* Wraps the model; returns the number of units. */
static int autowrap(Model *m, AutoWrapPolicy policy, long min_params) {
    for (int i = 0; i < m->n_modules; i++) m->modules[i].unit = -1;
    if (policy == AUTO_WRAP_TRANSFORMER) autowrap_blocks(m);
    else autowrap_visit(m, m->root, min_params);
    int n_units = 0;
    autowrap_number(m, m->root, 0, &n_units);
    return n_units;
}

/* ------------------------------------------------------------------------
 * Flat parameters and shards
 *
 * A unit's parameters are laid end to end, in model order, into one flat
 * parameter of `numel` elements. To split it evenly over N ranks we pad it
 * with zeros to `padded` = ceil(numel / N) * N, and rank r owns elements
 * [r * shard, (r + 1) * shard) with shard = padded / N: the torch.chunk rule.
 * When a unit has fewer elements than ranks, the last ranks own only padding.
 *
 *   flat:   | embed.weight ...... | proj_in.weight ....... |bias| 0 0 |
 *   shards: |   rank 0   |   rank 1   |   rank 2   |   rank 3   |
 *
 * Padding stays exactly zero forever: it starts at zero, its gradient is
 * zero (no parameter reads it), and AdamW maps a zero parameter with zero
 * gradient to zero. So no code needs to treat it specially.
 *
 * With no_shard (DDP) every rank "owns" the whole padded flat parameter:
 * shard = padded, and the full state is the shard itself. One layout serves
 * every strategy; only who holds what changes.
 * --------------------------------------------------------------------- */

static void units_layout(Unit *units, int n_units, Model *m, int world, const Config *c) {
    for (int u = 0; u < n_units; u++) {
        memset(&units[u], 0, sizeof(Unit));
        units[u].params =
            (int *)host_calloc((size_t)m->n_params + 1, sizeof(int), "lay out a unit");
    }
    for (int i = 0; i < m->n_params; i++) { /* model order */
        Param *p = &m->params[i];
        Unit *u = &units[p->unit];
        p->offset = u->numel;
        u->numel += p->numel;
        u->params[u->n_params++] = i;
    }
    for (int u = 0; u < n_units; u++) {
        units[u].padded = ceil_div(units[u].numel, world) * world;
        units[u].shard =
            c->strategy == STRATEGY_NO_SHARD ? units[u].padded : units[u].padded / world;
        if (c->fsdp2) fsdp2_layout(&units[u], m, world); /* each parameter its own (section 14) */
    }
    for (int i = 0; i < m->n_modules; i++) {
        int u = m->modules[i].unit;
        if (u < 0) continue;
        units[u].root_module = i;
        snprintf(units[u].name, sizeof(units[u].name), "unit %d (%.*s)", u, FSDP_MAX_NAME,
                 u == 0 ? "root" : m->modules[i].name);
    }
    if (c->fsdp2) fsdp2_check_layout(units, n_units, m, world);
}

/* The initial value of element i of parameter p: PyTorch's default
 * distributions, drawn from the counter-based generator keyed by the
 * parameter's and the element's index: the same on any world size, strategy,
 * auto-wrap threshold, or number of threads drawing them (param_init_one). */
static float param_init_value(const Param *p, int param_index, long i, uint64_t seed) {
    switch (p->init) {
    case INIT_NORMAL:
        return rng_normal(seed, STREAM_INIT, (uint64_t)param_index, (uint64_t)i) * p->init_bound;
    case INIT_UNIFORM:
        return (2.0f * rng_uniform(seed, STREAM_INIT, (uint64_t)param_index, (uint64_t)i) - 1.0f) *
               p->init_bound;
    case INIT_ONES: return 1.0f;
    case INIT_ZEROS: return 0.0f;
    }
    return 0.0f;
}
static void param_init_one(long i, float *out, const Param *p, int k, long first, uint64_t seed) {
    out[i] = param_init_value(p, k, first + i, seed); /* first: out[0]'s element of p */
}

/* Where rank's shard starts in the unit's flat parameter: rank * shard, or
 * 0 when every rank holds it all (no_shard). The shard is [lo, lo + shard). */
static long shard_begin(const Unit *u, int rank) {
    return u->shard == u->padded ? 0 : (long)rank * u->shard;
}

/* Parameter j of unit u (p) in rank's shard; 0 if the shard holds none of
 * it. FSDP1: where p's span of the flat parameter meets the shard's span;
 * FSDP2 (section 14): p's own chunk of rows. Everything that fills or reads
 * a shard parameter by parameter (initial values, checkpoints, --init-from)
 * asks this, and so works for both layouts. */
static int shard_piece(const Unit *u, int j, const Param *p, int rank, ShardPiece *s) {
    if (u->chunk_at) return fsdp2_piece(u, j, p, rank, s);
    long lo = shard_begin(u, rank), hi = lo + u->shard;
    long a = p->offset > lo ? p->offset : lo;
    long b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    s->first = a - p->offset;
    s->end = b - p->offset;
    s->at = a - lo;
    return a < b;
}

/* Fills out (the unit's shard on `rank`) with its initial values: a rank
 * computes only its own shard, so no rank materialises the whole model to
 * initialise it (zero1's replicas are the exception: unit_init_replica). */
static void unit_init_shard(const Unit *u, const Model *m, int rank, uint64_t seed, float *out) {
    ShardPiece s;
    for (int j = 0; j < u->n_params; j++) {
        const Param *p = &m->params[u->params[j]];
        if (shard_piece(u, j, p, rank, &s))
            HOST_FOR_EACH(s.end - s.first, param_init_one, out + s.at, p, u->params[j], s.first,
                          seed);
    }
}

/* Points every parameter of the unit at its place in the full state and
 * the full gradient, held in formats `held` and `gh` (full_dtype
 * and grad_dtype, below), when they exist, or at NULL when freed. */
static void unit_set_views(Unit *u, Model *m, Dtype held, Dtype gh) {
    for (int k = 0; k < u->n_params; k++) {
        Param *p = &m->params[u->params[k]];
        p->data = u->full_param ? element_at(u->full_param, p->offset, held) : NULL;
        p->grad = u->full_grad ? element_at(u->full_grad, p->offset, gh) : NULL;
    }
}

/* The fp32 parameters of the shard: what AdamW updates, checkpoints keep
 * and exports write. In fp32 that is shard_param itself; with mixed
 * precision (PyTorch: MixedPrecision) it is the master copy, and
 * shard_param holds it rounded to param_dtype: what the all-gather sends
 * (in 16 bits where the full state is: shard_held). AdamW writes it as it
 * updates the master (adamw_mixed_one); unit_refresh_low_precision rounds
 * it again after any other change (a checkpoint, --init-from). */

static float *unit_master(Unit *u) {
    return u->master_param ? u->master_param : (float *)u->shard_param;
}
static void unit_refresh_low_precision(Unit *u, Dtype param_dtype) {
    if (!u->master_param) return;
    if (u->shard_held != DTYPE_FP32) /* in 16 bits: what the all-gather sends, as it is */
        STATE_FOR_EACH(u->offloaded, u->shard, pack_one, (uint16_t *)u->shard_param,
                       u->master_param, param_dtype, 1.0f);
    else STATE_FOR_EACH(u->offloaded, u->shard, round_copy_one, (float *)u->shard_param,
                        u->master_param, param_dtype);
}

/* Tensor k of a unit's sharded state, where it lives: 0 the fp32 master
 * shard, 1 exp_avg, 2 exp_avg_sq. */
static float *unit_state_tensor(Unit *u, int k) {
    if (k == 1) return u->exp_avg;
    return k == 2 ? u->exp_avg_sq : unit_master(u);
}

/* A unit's state as the host sees it: tensor k (0 the master, 1 exp_avg,
 * 2 exp_avg_sq) in host memory, for initialisation and checkpoints. On the
 * CPU that is the tensor itself. On a GPU it is a host copy, filled by
 * unit_state_to_host and written back by unit_state_to_device. */
static float *unit_state_host(Unit *u, int k) {
    if (DEVICE_IS_HOST || u->offloaded) return unit_state_tensor(u, k);
    if (!u->host_state)
        u->host_state =
            (float *)host_calloc((size_t)(3 * u->shard + 1), 4, "copy a shard to the host");
    return u->host_state + (long)k * u->shard;
}
static void unit_state_to_host(Unit *u) {
    for (int k = 0; k < 3; k++)
        if (unit_state_host(u, k) != unit_state_tensor(u, k))
            dev_to_host(unit_state_host(u, k), unit_state_tensor(u, k),
                        (size_t)u->shard * sizeof(float));
}
static void unit_state_to_device(Unit *u, Dtype param_dtype) {
    for (int k = 0; k < 3; k++)
        if (unit_state_host(u, k) != unit_state_tensor(u, k))
            dev_from_host(unit_state_tensor(u, k), unit_state_host(u, k),
                          (size_t)u->shard * sizeof(float));
    unit_refresh_low_precision(u, param_dtype);
}

/* The strategies, by what they do with a unit's parameters around its
 * compute. Sharded: gathered before it, so they need the lifecycle below
 * (full_shard, shard_grad_op and their hybrid versions). Replicated: every
 * rank keeps them whole (no_shard, and zero1, which shards only the
 * optimizer state). Resharded after forward: freed between forward and
 * backward, and gathered again (full_shard, hybrid_shard). */
int is_sharded(const Trainer *t) { return strategy_shards_params(t->cfg.strategy); }
static int reshards_after_forward(const Trainer *t) {
    return t->cfg.strategy == STRATEGY_FULL_SHARD || t->cfg.strategy == STRATEGY_HYBRID_SHARD;
}
int is_zero1(const Trainer *t) { return t->cfg.strategy == STRATEGY_ZERO1; }
/* A unit's full state: on a GPU with 16-bit parameters, a gathered one is
 * held in 16 bits, the all-gather's own result, as PyTorch holds it, and
 * the kernels read it as it is (kernels/layers.h); else fp32 slots (the
 * CPU; no_shard's and zero1's, which are the replicas AdamW updates). */
Dtype full_dtype(const Trainer *t) {
    return is_sharded(t) ? backend.gemm_dtype : DTYPE_FP32;
}
/* ... and its full gradient: 16 bits where the full state is and the reduce-scatter
 * sums them (reduce_dtype = param_dtype, PyTorch's default); else fp32 slots. */
Dtype grad_dtype(const Trainer *t) {
    return full_dtype(t) == t->cfg.reduce_dtype ? full_dtype(t) : DTYPE_FP32;
}

/* ---- the runtime: one rank's whole training state ------------------------------
 * The Trainer is the one mutable structure the program has, the units and
 * shards above included. Nothing global but the process's device (kernels/
 * backend.h's `backend`): the tests build several trainers in one process (a 1-rank
 * reference next to an N-rank run) and compare them. */

/* struct Trainer is trainer.h's, included at the top (with data/corpus.h and
 * model/activations.h, the Corpus and the activations it holds). */

/* A unit's persistent state on this rank: its shard of the parameters and
 * of the gradient, and AdamW's two moments. With mixed precision the
 * shard of the parameters is kept in param_dtype (the all-gather's input)
 * and the gradient's in reduce_dtype (the reduce-scatter's output), and the
 * fp32 master parameters join the optimizer state, as in DeepSpeed and the
 * ZeRO paper: 2 + 2 bytes per parameter, and 4 + 4 + 4 of optimizer state
 * (PyTorch FSDP keeps the shard itself in fp32 and casts a copy for each
 * all-gather: the same numbers, booked under other names). */
static void unit_alloc_state(Trainer *t, Unit *u) {
    const Config *c = &t->cfg;
    Ledger *l = &t->ledger;
    size_t S = (size_t)u->shard;
    u->shard_held = full_dtype(t); /* as the all-gather sends it, into the full state */
    /* a gradient kept whole holds param_dtype values in backward and
     * reduce_dtype ones after the reduction: the wider of the two */
    Dtype whole_grad = c->param_dtype == DTYPE_FP32 ? DTYPE_FP32 : c->reduce_dtype;
    if (is_zero1(t)) { /* whole parameters and gradient; the shards are slices of them */
        size_t P = (size_t)u->padded, lo = (size_t)shard_begin(u, t->shard_rank);
        u->full_param = ledger_alloc_floats(l, MEM_PARAM_SHARD, P, c->param_dtype, u->name);
        u->full_grad = ledger_alloc_floats(l, MEM_GRAD_SHARD, P, whole_grad, u->name);
        u->shard_param = u->full_param ? (float *)u->full_param + lo : NULL;
        u->shard_grad = u->full_grad ? (float *)u->full_grad + lo : NULL;
    } else if (c->cpu_offload) { /* all of it in the host's memory (section 7) */
        u->offloaded = 1;
        /* the shard and its gradient cross PCIe every step: pinned */
        u->shard_param =
            ledger_alloc_host(l, MEM_PARAM_SHARD, S, u->shard_held, c->param_dtype, u->name, 1);
        u->shard_grad = ledger_alloc_host_floats(l, MEM_GRAD_SHARD, S, c->reduce_dtype, u->name, 1);
        u->exp_avg = ledger_alloc_host_floats(l, MEM_OPTIM_STATE, S, DTYPE_FP32, u->name, 0);
        u->exp_avg_sq = ledger_alloc_host_floats(l, MEM_OPTIM_STATE, S, DTYPE_FP32, u->name, 0);
        if (c->param_dtype != DTYPE_FP32)
            u->master_param =
                ledger_alloc_host_floats(l, MEM_OPTIM_STATE, S, DTYPE_FP32, u->name, 0);
        return;
    } else {
        Dtype g = c->strategy == STRATEGY_NO_SHARD ? whole_grad : c->reduce_dtype;
        u->shard_param = ledger_alloc_held(l, MEM_PARAM_SHARD, S, u->shard_held, c->param_dtype,
                                           u->name, ON_DEVICE);
        u->shard_grad = ledger_alloc_floats(l, MEM_GRAD_SHARD, S, g, u->name);
    }
    if (c->strategy == STRATEGY_NO_SHARD) { /* DDP: the "shard" is the whole flat parameter */
        u->full_param = u->shard_param;
        u->full_grad = u->shard_grad;
    }
    u->exp_avg = ledger_alloc_floats(l, MEM_OPTIM_STATE, S, DTYPE_FP32, u->name);
    u->exp_avg_sq = ledger_alloc_floats(l, MEM_OPTIM_STATE, S, DTYPE_FP32, u->name);
    if (c->param_dtype != DTYPE_FP32)
        u->master_param = ledger_alloc_floats(l, MEM_OPTIM_STATE, S, DTYPE_FP32, u->name);
}

Trainer *trainer_create(const Config *cfg, MPI_Comm comm) {
    Trainer *t = (Trainer *)host_calloc(1, sizeof(Trainer), "allocate the trainer");
    t->cfg = *cfg;
    /* stepping, checking and debugging want every collective on the main thread */
    int threaded = !cfg->inline_collectives && !cfg->step_mode && !cfg->check_collectives &&
                   !cfg->wait_for_debugger && !backend.dry; /* --plan sends nothing */
    comm_init(&t->comm, comm, cfg->collectives, net_model_find(cfg->net ? cfg->net : "none"),
              threaded);
    /* a person may pause a rank for minutes there: the watchdogs keep still */
    int stepping = cfg->step_mode || cfg->check_collectives || cfg->wait_for_debugger;
    t->comm.timeout = stepping ? 0 : cfg->collective_timeout;
    t->ledger.budget = cfg->vram;
    t->ledger.rank = t->comm.rank;
    t->ledger.defer_oom = 1; /* until ledger_agree_fits, below */
    t->local_batch = cfg->batch / t->comm.world;
    t->comm.reduce_dtype = cfg->reduce_dtype;
    trainer_split_nodes(t);
    t->micro_batch = t->local_batch / cfg->grad_accum;
    t->sync_grads = 1;
    t->loss_scale = cfg->grad_scaler ? cfg->init_scale : 1.0f;
    if (cfg->arch == ARCH_GPT2) gpt2_build(&t->model, cfg);
    else model_build(&t->model, cfg);
    t->n_units = autowrap(&t->model, cfg->auto_wrap, cfg->min_params);
    t->units = (Unit *)host_calloc((size_t)t->n_units, sizeof(Unit), "allocate the units");
    t->pre_order = (int *)host_calloc((size_t)t->n_units, sizeof(int), "allocate the units");
    t->post_order = (int *)host_calloc((size_t)t->n_units, sizeof(int), "allocate the units");
    units_layout(t->units, t->n_units, &t->model, t->shard_world, cfg);
    char err[512];
    if (sim_init(&t->sim, &t->cfg, &t->ledger, t->units, t->n_units, comm, err, sizeof(err)) != 0) {
        if (t->comm.rank == 0) fprintf(stderr, "error: %s\n", err);
        exit_all(2);
    }
    t->comm.sim = &t->sim;
    t->comm.keep_events = cfg->trace_path != NULL; /* the trace needs every event */
    t->ledger.sim = &t->sim;
    t->comm.reduce_dtype = cfg->reduce_dtype;
    for (int ui = 0; ui < t->n_units; ui++) {
        Unit *u = &t->units[ui];
        unit_alloc_state(t, u);
        if (t->ledger.oom_report) break; /* over budget: build no more; ledger_agree_fits stops */
        if (!is_sharded(t)) unit_set_views(u, &t->model, DTYPE_FP32, DTYPE_FP32); /* always there */
        if (backend.dry) continue; /* --plan: no values, only the ledger's bookings */
        unit_init_shard(u, &t->model, t->shard_rank, cfg->seed, unit_state_host(u, 0));
        unit_state_to_device(u, cfg->param_dtype);
        if (is_zero1(t)) unit_init_replica(t, u);
    }
    if (!t->ledger.oom_report && cfg->arch == ARCH_GPT2)
        gpt2_activations_alloc(&t->gpt, &t->ledger, cfg, t->micro_batch);
    else if (!t->ledger.oom_report)
        activations_alloc(&t->act, &t->ledger, cfg, t->micro_batch);
    ledger_agree_fits(&t->ledger, comm);
    if (cfg->data_path) {
        if (corpus_load_file(&t->corpus, "--data", cfg->data_path, cfg, err, sizeof(err)) != 0)
            FATAL("the file changed since the command line was checked", "%s", err);
    } else {
        corpus_synthetic(&t->corpus, cfg->seed);
    }
    return t;
}

long trainer_num_params(const Trainer *t) { return t->model.total_numel; }

void trainer_destroy(Trainer *t) {
    if (!t) return;
    for (int ui = 0; ui < t->n_units; ui++) {
        free(t->units[ui].params);
        free(t->units[ui].chunk_at);
        free(t->units[ui].host_state);
    }
    free(t->units);
    free(t->host_peaks);
    free(t->pre_order);
    free(t->post_order);
    corpus_release(&t->corpus);
    model_free(&t->model);
    comm_release(&t->comm);
    t->ledger.sim = NULL; /* releasing is not an event worth recording */
    ledger_release_all(&t->ledger);
    dev_empty_cache();
    sim_release(&t->sim);
    free(t);
}

/* ============================================================================
 * 2. Unshard and reshard                  PyTorch: _unshard, _reshard
 *
 * unit_unshard_start allocates the unit's full state and puts its
 * all-gather on the communication stream; unit_unshard_wait waits for it
 * and points the parameters into it. Between the two the main thread goes
 * on computing: that is prefetching (section 6), PyTorch's way of hiding the
 * all-gather of the next unit behind the compute of this one. The memory
 * is booked when the all-gather starts, so a prefetched unit costs its full
 * state from then on.
 *
 * Reshard is the other verb: unit_free_full_params frees the full state,
 * and the shard is all the unit keeps.
 * ========================================================================== */

static void unit_unshard_start(Trainer *t, int ui) {
    if (ui < 0 || !is_sharded(t)) return; /* no next unit, or nothing to gather */
    Unit *u = &t->units[ui];
    if (u->full_param || u->gathering) return; /* gathered, or on its way */
    if (t->cfg.limit_all_gathers) unshard_rate_limit(t); /* section 6 */
    /* held in fp32 slots or 16 bits (full_dtype); booked, as every full
     * state, at param_dtype's width: what PyTorch would hold. FSDP2 gathers
     * into a buffer of its own, copied out at the wait (section 14). */
    Dtype held = full_dtype(t), d = t->cfg.param_dtype;
    void *out = ledger_alloc_held(&t->ledger, u->chunk_at ? MEM_COMM_BUFFERS : MEM_FULL_PARAMS,
                                  (size_t)u->padded, held, d, u->name, ON_DEVICE_GATHERED);
    if (u->chunk_at) u->gathered = out;
    else u->full_param = out;
    if (u->post_forward) /* FSDP2 kept 1/K of it after forward: gathered within K ranks */
        u->gather = comm_all_gather_in(&t->comm, GROUP_POST_FORWARD, out, held, u->post_forward,
                                       u->padded / t->cfg.reshard_to, ui, d);
    else
        u->gather = comm_all_gather_start(&t->comm, out, held, unit_gather_input(t, ui), u->shard,
                                          ui, d);
    u->gathering = 1;
    if (++t->gathers_in_flight > t->max_gathers_in_flight)
        t->max_gathers_in_flight = t->gathers_in_flight;
}

static void unit_unshard_wait(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    if (!u->gathering) return;
    comm_wait(&t->comm, &u->gather);
    u->gathering = 0;
    t->gathers_in_flight--;
    if (u->device_shard) { /* --cpu-offload: the all-gather's input, done with */
        ledger_free(&t->ledger, u->device_shard);
        u->device_shard = NULL;
    }
    if (u->gathered) { /* FSDP2: each parameter's rows to its own place (section 14) */
        Dtype held = full_dtype(t);
        u->full_param = ledger_alloc_held(&t->ledger, MEM_FULL_PARAMS, (size_t)u->padded, held,
                                          t->cfg.param_dtype, u->name, ON_DEVICE_OVERWRITTEN);
        int from = u->post_forward ? t->cfg.reshard_to : t->shard_world; /* ranks it came from */
        fsdp2_copy_out(t, ui, u->full_param, u->gathered, held, from);
        ledger_free(&t->ledger, u->gathered);
        u->gathered = NULL;
        ledger_free(&t->ledger, u->post_forward); /* NULL: nothing */
        u->post_forward = NULL;
    }
    unit_set_views(u, &t->model, full_dtype(t), grad_dtype(t));
}

static void unit_unshard(Trainer *t, int ui) {
    unit_unshard_start(t, ui);
    unit_unshard_wait(t, ui);
}

/* Reshard: free the full state; the shard is all the unit keeps. */
static void unit_free_full_params(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    ledger_free(&t->ledger, u->full_param);
    u->full_param = NULL;
    unit_set_views(u, &t->model, full_dtype(t), grad_dtype(t));
    sim_on_free(&t->sim, ui);
}

/* ============================================================================
 * 3. The four hooks: the unit lifecycle
 *
 * PyTorch runs these four hooks around each FSDP unit; we call them at the
 * same moments from the model's forward and backward (section 5). Each
 * banner names the PyTorch function (torch/distributed/fsdp/
 * _runtime_utils.py) that does the same, so one maps onto the other. Two
 * verbs carry the whole idea: unshard (all-gather the full state from the
 * shards) and reshard (free it, keep the shard). Units nest: the root unit
 * encloses every other, so its full state is present whenever any module
 * computes, exactly as in PyTorch.
 * ========================================================================== */

/* A unit's forward or backward (or the optimizer), as the instruments see
 * it. On a GPU the host runs ahead of the kernels it queues, so when a
 * picture needs true times (--trace, --view, --step) the host first waits
 * for the compute stream; otherwise it never does. */
static int pictures_wanted(const Trainer *t) {
    return t->cfg.trace_path || t->cfg.view || t->cfg.step_mode;
}
static void span_begin(Trainer *t, int ui, SimPhase phase) {
    if (pictures_wanted(t)) dev_synchronize();
    sim_span_begin(&t->sim, ui, phase);
}
static void span_end(Trainer *t, int ui, SimPhase phase) {
    if (pictures_wanted(t)) dev_synchronize();
    sim_span_end(&t->sim, ui, phase);
}

/* ------------------------------------------------------------------------
 * Before a unit's forward                 PyTorch: _pre_forward, which
 *                                          unshards (_pre_forward_unshard)
 *
 * Between steps this rank keeps only its shard of the unit: 1/N of the flat
 * parameter. The unit's layers need all of it, so we all-gather the N shards
 * into the full state. Memory grows by one full flat parameter; each rank
 * sends its shard to the ring and receives the other N-1. With no_shard the
 * full state is always present and nothing moves.
 * --forward-prefetch (PyTorch's forward_prefetch) then starts the next
 * unit's all-gather at once, so it travels while this unit computes: the
 * forward holds the root, this unit and the next one.
 * --------------------------------------------------------------------- */
static void unit_pre_forward(Trainer *t, int ui) {
    if (!t->order_known) t->pre_order[t->n_pre++] = ui;
    t->units[ui].needs_backward = 1;
    unit_unshard(t, ui);
    if (t->cfg.forward_prefetch) unit_unshard_start(t, unit_next_forward(t, ui));
    span_begin(t, ui, PHASE_FORWARD);
}

/* ------------------------------------------------------------------------
 * After a unit's forward                  PyTorch: _post_forward, which
 *                                          reshards (_post_forward_reshard)
 *
 * full_shard frees the full state at once: the memory a unit costs while it
 * is not computing is its shard alone. That is the whole trick of FSDP, and
 * the price is that the backward pass must all-gather it again.
 * Two exceptions, both PyTorch's: the root unit keeps its full state,
 * because backward starts with it straight away (its head and norm_f run
 * first in backward); and shard_grad_op (ZeRO-2) keeps every unit's full
 * state until that unit's backward, trading memory for one all-gather less.
 * --------------------------------------------------------------------- */
static void unit_post_forward(Trainer *t, int ui) {
    span_end(t, ui, PHASE_FORWARD);
    if (!t->order_known) t->post_order[t->n_post++] = ui;
    if (ui == 0) t->order_known = 1; /* the root's forward encloses all others */
    if (reshards_after_forward(t) && ui != 0) {
        if (t->cfg.reshard_to) fsdp2_keep_post_forward(t, ui); /* section 14 */
        unit_free_full_params(t, ui);
    }
}

/* ------------------------------------------------------------------------
 * Before a unit's backward                PyTorch: _pre_backward_hook,
 *                                          which unshards again
 *
 * The unit's backward needs its full parameters (to propagate gradients to
 * its inputs) and somewhere to accumulate the full-size gradient of every
 * element, because each rank's batch touches the whole unit. So: all-gather
 * again if the full state was freed (or wait for the prefetch that already
 * started it), and allocate a zeroed full gradient. With no_shard the
 * gradient buffer is permanent and only zeroed.
 *
 * BACKWARD_PRE (PyTorch's default) starts the next unit's all-gather here,
 * before this unit's gradient is computed: the most overlap, and the most
 * memory. While this unit computes, the root, this unit's full parameters
 * and gradient, and the next unit's full parameters are all in memory: one
 * gathered unit more than BACKWARD_POST ever holds (see after backward).
 * --------------------------------------------------------------------- */
static void unit_pre_backward(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    u->needs_backward = 0;
    if (!is_sharded(t)) { /* the full gradient is permanent: zeroed once a step */
        if (t->micro == 0) dev_zero(u->full_grad, (size_t)u->padded * sizeof(float)); /* fp32 */
    } else {
        unit_unshard(t, ui);
        if (t->cfg.backward_prefetch == BACKWARD_PRE)
            unit_unshard_start(t, unit_next_backward(t, ui));
        if (!u->full_grad) /* --no-sync keeps it across micro-batches, to add into */
            u->full_grad = ledger_alloc_held(&t->ledger, MEM_FULL_GRADS, (size_t)u->padded,
                                             grad_dtype(t), t->cfg.param_dtype, u->name, ON_DEVICE);
        unit_set_views(u, &t->model, full_dtype(t), grad_dtype(t));
    }
    span_begin(t, ui, PHASE_BACKWARD);
}

/* ------------------------------------------------------------------------
 * After a unit's backward                 PyTorch: _post_backward_hook:
 *                                          _post_backward_reshard, then
 *                                          reduce-scatter (_reduce_grad)
 *
 * Every rank now holds a full-size gradient computed from its own part of
 * the batch. The optimizer needs, for this rank's shard only, the average
 * over all ranks: exactly what a reduce-scatter (mean) delivers. Each rank
 * sends and receives (N-1)/N of the flat gradient.
 *
 * In PyTorch's order: first reshard (free the full parameters: backward is
 * done with them), and with BACKWARD_POST start the next unit's all-gather
 * only now. So POST never holds two units' full parameters at once (only
 * the root beside one unit), at the price of less time to hide the
 * all-gather in. Then the reduce-scatter goes on the stream and the main
 * thread moves on to the next unit's backward: the reduce-scatter travels
 * while that computes. The full gradient must live until it is done. The
 * trainer holds that one reduction as its pending_reduce: the next unit's
 * post-backward finishes it before starting its own (so at most one is in
 * flight, and the memory stays what the tests expect), and the end of
 * backward finishes the last (PyTorch: _post_backward_final_callback).
 * Afterwards the unit is back to its shard: parameters, gradient and
 * optimizer state, 1/N each.
 *
 * The other strategies take the same path with less to do. no_shard (DDP)
 * keeps everything, so nothing is resharded and the gradient is
 * all-reduced instead: twice the traffic of a reduce-scatter, and every
 * rank then runs the same optimizer step on the whole model. It travels
 * while the next unit computes, as DDP's gradient buckets do. zero1
 * reduce-scatters into its own slice of its whole gradient (section 9).
 *
 * Inside no_sync() (--no-sync, every micro-batch of --grad-accum but the
 * last; PyTorch's _sync_gradients False) nothing is reduced: the full
 * gradient stays, and the next micro-batch's backward adds into it. The
 * full parameters are freed as usual under full_shard; shard_grad_op
 * keeps them until the last micro-batch, as PyTorch does
 * (_should_free_in_backward), so its next forward needs no all-gather.
 * --------------------------------------------------------------------- */
static int reshards_after_backward(const Trainer *t) {
    /* FSDP2 reshards after every backward (reshard_after_backward=True, its
     * default), no_sync or not: set_reshard_after_backward(False) would
     * keep them */
    return is_sharded(t) && (t->sync_grads || reshards_after_forward(t) || t->cfg.fsdp2);
}

#ifdef EXERCISE_POST_BACKWARD /* graded exercise: make exercise EX=post_backward */
#include EXERCISE_FILE
#else
static void unit_post_backward(Trainer *t, int ui) {
    span_end(t, ui, PHASE_BACKWARD);
    reduce_grad_finish(t); /* the previous unit's: one reduction in flight at a time */
    if (reshards_after_backward(t)) {
        unit_free_full_params(t, ui);
        if (t->cfg.backward_prefetch == BACKWARD_POST)
            unit_unshard_start(t, unit_next_backward(t, ui));
    }
    if (t->sync_grads) reduce_grad_start(t, ui);
}
#endif /* EXERCISE_POST_BACKWARD */

/* The end of backward: every reduce-scatter done, every shard gradient
 * ready for the optimizer (or, inside no_sync, every full gradient kept). */
void units_finish_backward(Trainer *t) {
    reduce_grad_finish(t);
    /* --cpu-offload: the gradient shards' copies to the host, queued
     * (offload_copy), are there before clipping, the scaler or AdamW read them */
    if (t->cfg.cpu_offload) dev_synchronize();
    for (int v = 0; v < t->n_units; v++) {
        /* a full state kept past backward would be stale after the step */
        if (is_sharded(t) && t->sync_grads &&
            (t->units[v].full_param || t->units[v].gathering || t->units[v].post_forward))
            FATAL("this is a bug in fsdp.c's lifecycle", "%s is still gathered after backward",
                  t->units[v].name);
    }
}

/* Module boundaries: the model's code calls these on entering and leaving
 * every module; the hooks fire where a module is the root of a unit. */
void module_pre_forward(Trainer *t, int module) {
    int ui = t->model.modules[module].unit;
    if (ui < 0) return;
    if (t->recomputing) unit_unshard(t, ui); /* activation checkpointing: section 12 */
    else unit_pre_forward(t, ui);
}
void module_post_forward(Trainer *t, int module) {
    int ui = t->model.modules[module].unit;
    if (ui >= 0 && !t->recomputing) unit_post_forward(t, ui);
}
void module_pre_backward(Trainer *t, int module) {
    if (t->model.modules[module].unit >= 0) unit_pre_backward(t, t->model.modules[module].unit);
}
void module_post_backward(Trainer *t, int module) {
    const Module *mod = &t->model.modules[module];
    for (int i = 0; i < mod->n_params; i++) grad_round(t, &t->model.params[mod->params[i]]);
    if (mod->unit >= 0) unit_post_backward(t, mod->unit);
}

/* ============================================================================
 * 4. Reduce-scatter and sharded AdamW
 *
 * A unit's post-backward hook starts its gradient reduction
 * (reduce_grad_start), and the next unit's finishes it (reduce_grad_finish):
 * one reduction in flight at a time, travelling while the next unit's
 * backward computes. After backward every rank holds the averaged gradient
 * of its own shards, and AdamW steps each shard where it lies.
 * ========================================================================== */

/* Starts unit ui's gradient reduction and makes it the pending one. DDP
 * (no_shard) all-reduces its permanent gradient in place, zero1
 * reduce-scatters into its own slice of it; the sharded strategies
 * reduce-scatter the full gradient into the shard. Where the shard holds
 * something the reduce-scatter must not overwrite (the earlier
 * micro-batches' sum; with --cpu-offload the shard is the host's, and the
 * reduce-scatter writes the device's), it is kept, and the reduce-scatter
 * writes a fresh shard (PyTorch: _saved_grad_shard). */
static void reduce_grad_start(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    PendingReduce *p = &t->pending_reduce;
    if (p->in_flight)
        FATAL("finish the pending one first (reduce_grad_finish): one reduction is in flight at "
              "a time",
              "%s: its reduction started while %s's is still in flight", u->name,
              t->units[p->unit].name);
    p->in_flight = 1;
    p->unit = ui;
    p->kept = NULL;
    if (t->cfg.strategy == STRATEGY_NO_SHARD) {
        p->handle = comm_all_reduce_start(&t->comm, u->shard_grad, u->padded, ui, &t->ledger);
        return;
    }
    if (u->offloaded || (is_sharded(t) && t->micro > 0 && !t->cfg.no_sync)) {
        p->kept = u->shard_grad;
        u->shard_grad = ledger_alloc_floats(&t->ledger, MEM_GRAD_SHARD, (size_t)u->shard,
                                            t->cfg.reduce_dtype, u->name);
    }
    /* FSDP2 reduce-scatters a copy laid rank by rank (section 14) */
    void *input = u->chunk_at ? (p->input = fsdp2_chunk_cat(t, ui)) : u->full_grad;
    p->handle = comm_reduce_scatter_start(&t->comm, u->shard_grad, input, grad_dtype(t),
                                          u->shard, ui, &t->ledger);
}

/* Waits for the pending reduction, if any (comm_wait turns the sum into
 * the mean), and settles the unit's gradient shard: the full gradient the
 * reduce-scatter consumed is freed (DDP's and zero1's are permanent), the
 * hybrid strategies average across nodes, and the result goes where the
 * shard lives (--cpu-offload) or is added to the micro-batches before. */
static void reduce_grad_finish(Trainer *t) {
    PendingReduce *p = &t->pending_reduce;
    if (!p->in_flight) return;
    Unit *u = &t->units[p->unit];
    comm_wait(&t->comm, &p->handle);
    p->in_flight = 0;
    if (!is_sharded(t)) return;
    ledger_free(&t->ledger, p->input ? p->input : u->full_grad); /* FSDP2's is freed already */
    p->input = NULL;
    u->full_grad = NULL;
    unit_set_views(u, &t->model, full_dtype(t), grad_dtype(t));
    if (t->comm.group[GROUP_REPLICA]) unit_reduce_replicas(t, p->unit);
    if (u->offloaded) unit_grad_to_host(t, p->unit, p->kept);
    else if (p->kept) unit_grad_accumulate(t, u, p->kept);
    p->kept = NULL;
}

/* ------------------------------------------------------------------------
 * Sharded AdamW
 *
 * torch.optim.AdamW, step t, for one element with gradient g:
 *   p  <- p * (1 - lr * weight_decay)          (decoupled weight decay)
 *   m  <- beta1 * m + (1 - beta1) * g
 *   v  <- beta2 * v + (1 - beta2) * g^2
 *   p  <- p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * Every element's update depends on that element alone, so each rank steps
 * its own shard with its own shard of m and v: the optimizer state is
 * sharded for free, and no communication is needed.
 * --optimizer adam is torch.optim.Adam: its weight decay is L2, added to the
 * gradient (g <- g + weight_decay * p) before the same update, and no
 * decoupled decay; PyTorch's default weight_decay is then 0.
 * --------------------------------------------------------------------- */

/* AdamW's element code is optim/adamw.h's, included at the top: adamw_update_one (one
 * element of the update above), adamw_one, adamw_mixed_one, AdamWStep. */

/* The learning rate of step t, lr_at, is optim/lr_schedule.h's (torch.optim.lr_scheduler),
 * included at the top. */

#ifdef EXERCISE_ADAMW /* graded exercise: make exercise EX=adamw */
#include EXERCISE_FILE
#else
/* Elements [at, at + n) of unit u's shard, with step s: one pass over the
 * master (fp32), m, v and the gradient, writing the rounded copy that the
 * next all-gather sends where there is a master (mixed precision). */
static void adamw_shard_range(const Unit *u, long at, long n, AdamWStep s, Dtype param_dtype) {
    if (u->master_param)
        STATE_FOR_EACH(u->offloaded, n, adamw_mixed_one, u->master_param + at, u->exp_avg + at,
                       u->exp_avg_sq + at, u->shard_grad + at, s,
                       element_at(u->shard_param, at, u->shard_held), param_dtype, u->shard_held);
    else STATE_FOR_EACH(u->offloaded, n, adamw_one, (float *)u->shard_param + at, u->exp_avg + at,
                        u->exp_avg_sq + at, u->shard_grad + at, s);
}

/* --no-decay-bias-norm: PyTorch's optimizer parameter groups, as nanoGPT
 * and HF's Trainer make them: weight decay on matrices (Linear weights,
 * embeddings), none on vectors (biases, LayerNorm's weight and bias).
 * Decay pulls a matrix toward 0, which limits what it can fit; pulling a
 * LayerNorm's gain or a bias toward 0 only shifts and shrinks activations.
 * A flat parameter mixes both, so the shard is stepped a parameter's piece
 * at a time (shard_piece), each with its group's decay. */
static void adamw_unit_groups(const Trainer *t, const Unit *u, AdamWStep s) {
    ShardPiece piece;
    for (int j = 0; j < u->n_params; j++) {
        const Param *p = &t->model.params[u->params[j]];
        if (!shard_piece(u, j, p, t->shard_rank, &piece)) continue;
        AdamWStep group = s;
        if (p->shape[1] == 1) group.weight_decay = 0.0f; /* a vector */
        adamw_shard_range(u, piece.at, piece.end - piece.first, group, t->cfg.param_dtype);
    }
}

static void adamw_step(Trainer *t) {
    const Config *c = &t->cfg;
    span_begin(t, -1, PHASE_OPTIMIZER);
    t->adam_step++;
    AdamWStep s = {lr_at(c, t->adam_step - 1), /* the step just counted: t from 0 */
                   c->beta1, c->beta2, c->eps, c->weight_decay,
                   1.0f - powf(c->beta1, (float)t->adam_step),
                   sqrtf(1.0f - powf(c->beta2, (float)t->adam_step)),
                   c->optimizer == OPTIMIZER_ADAM};
    for (int ui = 0; ui < t->n_units; ui++) {
        const Unit *u = &t->units[ui];
        if (c->no_decay_bias_norm) adamw_unit_groups(t, u, s);
        else adamw_shard_range(u, 0, u->shard, s, c->param_dtype);
    }
    span_end(t, -1, PHASE_OPTIMIZER);
}
#endif /* EXERCISE_ADAMW */

/* ============================================================================
 * 5. One step, end to end
 *
 * (The training loop around it, run_training, is the program's: main.c.)
 *
 * forward:  enter each module (unit hooks gather), compute, leave (free)
 * backward: the same modules in reverse (hooks gather, reduce-scatter, free)
 * step:     AdamW on this rank's shards
 * ========================================================================== */

/* The model FSDP wraps calls the hooks of section 3 at every module, and this section calls
 * it: model_forward, model_backward, gpt2_forward, ..., declared in trainer.h. The byte MLP
 * (model/mlp.h) and GPT-2 (model/gpt2.h) are included by main.c, after this file: the one
 * loop of the design, kept out of fsdp.c's includes. */

/* ------------------------------------------------------------------------
 * Data
 *
 * The embedded corpus is a small random "language", generated from the seed
 * so the demo needs no download: a vocabulary of made-up words, and a Markov
 * chain in which each word is followed by one of a few successors with Zipf
 * weights (1, 1/2, 1/3, ...). Because we know the chain, we know the entropy
 * of the text per byte: no model can predict better, so a falling loss has a
 * known floor (printed at startup). --data FILE trains on any file's bytes.
 *
 * Sampling follows PyTorch's DistributedSampler: the global batch of step s
 * is fixed by (seed, s); sample j goes to rank j mod N. Every rank gets the
 * same number of samples, and together they cover the batch a single rank
 * would train on, so the averaged gradient is the same mathematics.
 * --------------------------------------------------------------------- */

/* The sampler is data/sampler.h's, included at the top: sampler_local_batch (the byte
 * MLP's samples), sampler_local_sequences (GPT-2's, each token checked). */

/* Micro-batch `micro` of this rank's part of global batch number `step`:
 * its samples [micro * B, (micro + 1) * B) of the local batch are drawn on
 * the host and copied to the device (on the CPU, from one host buffer to
 * another). The K micro-batches together are the local batch. */
static void trainer_load_batch(Trainer *t, int step, int micro) {
    const Config *c = &t->cfg;
    int B = t->micro_batch;
    if (backend.dry) return; /* --plan: the batch is booked in the ledger, never drawn */
    if (c->arch == ARCH_GPT2) {
        gpt2_load_batch(t, &t->corpus, step, micro);
        return;
    }
    long BT = (long)B * c->context; /* the stage: targets (B), rows by byte (3 BT), bytes (BT) */
    int *targets = (int *)batch_stage(((size_t)B + 3 * (size_t)BT) * sizeof(int) + (size_t)BT);
    unsigned char *tokens = (unsigned char *)(targets + B + 3 * BT);
    sampler_local_batch(&t->corpus, c->seed, step, t->comm.rank, t->comm.world, micro * B, B,
                        c->context, tokens, targets);
    dev_from_host_queued(t->act.tokens, tokens, (size_t)BT);
    dev_from_host_queued(t->act.targets, targets, (size_t)B * sizeof(int));
    int *ids = (int *)host_malloc((size_t)BT * sizeof(int), "group a batch by byte");
    for (long n = 0; n < BT; n++) ids[n] = tokens[n];
    token_rows_load(&t->act.by_token, ids, BT, c->vocab, targets + B);
    free(ids);
    batch_staged(); /* the next batch_stage waits for these copies */
}

/* The model FSDP wraps: the byte MLP (model/mlp.h) or GPT-2 (model/gpt2.h) */
static float trainer_forward(Trainer *t) {
    comm_shards_settled(&t->comm); /* what the unshards below wait for, and no more */
    return t->cfg.arch == ARCH_GPT2 ? gpt2_forward(t) : model_forward(t);
}
static void trainer_backward(Trainer *t) {
    if (t->cfg.arch == ARCH_GPT2) gpt2_backward(t);
    else model_backward(t);
}

/* The sum over ranks of one number each, the same bits on every rank: an
 * all-gather of one float per rank (counted like any collective), added in
 * rank order. The loss and the gradient norm travel this way. */
static double sum_over_ranks(Trainer *t, CommGroup group, float mine, const char *what) {
    int N = t->comm.group[group]->world, rank = t->comm.group[group]->rank;
    float *all =
        (float *)ledger_alloc(&t->ledger, MEM_COMM_BUFFERS, (size_t)N, sizeof(float), what);
    float *host = (float *)host_calloc((size_t)N, sizeof(float), "gather one float per rank");
    dev_from_host(all + rank, &mine, sizeof(float)); /* in place: our slot is the input */
    CommHandle h =
        comm_all_gather_in(&t->comm, group, all, DTYPE_FP32, all + rank, 1, -1, DTYPE_FP32);
    comm_wait(&t->comm, &h);
    dev_to_host(host, all, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int r = 0; r < N; r++) sum += host[r];
    free(host);
    ledger_free(&t->ledger, all);
    return sum;
}

/* The mean of the N ranks' losses, summed in rank order so every rank gets
 * the same bits. It travels as an all-gather of one float per rank. */
float global_mean_loss(Trainer *t, float local_loss) {
    return (float)(sum_over_ranks(t, GROUP_WORLD, local_loss, "the loss all-gather") /
                   t->comm.world);
}

float trainer_step(Trainer *t, int step) {
    int K = t->cfg.grad_accum;
    t->steps_run++;
    double loss = 0.0;
    t->comm.step = step;
    sim_on_step(&t->sim, step);
    for (t->micro = 0; t->micro < K; t->micro++) {
        t->sync_grads = (!t->cfg.no_sync && !is_zero1(t)) || t->micro == K - 1;
        trainer_load_batch(t, step, t->micro);
        loss += trainer_forward(t);
        trainer_backward(t);
    }
    t->skipped_step = t->cfg.grad_scaler && !grad_scaler_unscale(t);
    if (!t->skipped_step) {
        if (t->cfg.clip_grad_norm > 0.0f) clip_grad_norm(t, t->cfg.clip_grad_norm);
        adamw_step(t);
        if (is_zero1(t)) units_gather_replicas(t);
    }
    if (t->cfg.grad_scaler) grad_scaler_update(t);
    return global_mean_loss(t, (float)(loss / K));
}

/* ============================================================================
 * 6. Prefetch and the limiter      PyTorch: forward_prefetch, backward_prefetch,
 *                                            limit_all_gathers
 *
 * Prefetch starts the next unit's all-gather early (unit_unshard_start,
 * section 2), so it travels while this unit computes: --forward-prefetch in
 * the pre-forward hook, --backward-prefetch pre or post in the pre- or the
 * post-backward hook (section 3).
 *
 * Which unit is next comes from the order recorded in the first forward
 * (PyTorch records it too): forward runs pre_order, backward runs
 * post_order backwards. Forward prefetch starts in the second step; the
 * first backward already knows its order.
 *
 * The rate limiter (--limit-all-gathers, PyTorch's limit_all_gathers,
 * on by default) lets at most two all-gathers be in flight: before a third
 * starts, the oldest is waited for. On a GPU the CPU queues kernels far
 * ahead of the compute stream, and without the limiter it would queue
 * all-gather after all-gather and fill the memory with prefetched units.
 * (PyTorch bounds the same run-ahead by frees: before an all-gather, the
 * CPU waits until the GPU has passed the free of the unit resharded two
 * frees ago; _FreeEventQueue. Ours counts all-gathers: the same guard,
 * measured at the other end.) Here compute runs on the main thread itself,
 * so the hooks' schedules never reach a third; the limiter is the
 * guarantee, and the tests check it.
 * ========================================================================== */

/* The unit after ui in forward (or backward) order, or -1. */
static int unit_next_forward(const Trainer *t, int ui) {
    for (int i = 0; t->order_known && i + 1 < t->n_pre; i++)
        if (t->pre_order[i] == ui) return t->pre_order[i + 1];
    return -1;
}
static int unit_next_backward(const Trainer *t, int ui) {
    for (int i = t->n_post - 1; t->order_known && i > 0; i--)
        if (t->post_order[i] == ui) {
            int next = t->post_order[i - 1];
            /* as PyTorch's _needs_pre_backward_unshard: never gather a unit
             * whose backward is over (the root's post-backward is last) */
            return t->units[next].needs_backward ? next : -1;
        }
    return -1;
}

/* Before an all-gather starts (--limit-all-gathers): while two are in
 * flight, wait for the oldest. */
static void unshard_rate_limit(Trainer *t) {
    while (t->gathers_in_flight >= 2) {
        int oldest = -1;
        for (int v = 0; v < t->n_units; v++)
            if (t->units[v].gathering &&
                (oldest < 0 || t->units[v].gather.number < t->units[oldest].gather.number))
                oldest = v;
        if (oldest < 0) FATAL("this is a bug in fsdp.c's lifecycle", "all-gathers miscounted");
        unit_unshard_wait(t, oldest);
    }
}

/* ============================================================================
 * 7. CPU offload                      PyTorch: CPUOffload(offload_params=True)
 *
 * --cpu-offload keeps a unit's shards (parameters, gradient) and AdamW's
 * state in the host's memory, and runs the optimizer on the CPU there (as
 * PyTorch does: the optimizer sees CPU parameters). The device holds only
 * what computes: gathered full states, full gradients, activations, and
 * for a while a unit's shard, copied over PCIe:
 *   to the device  the parameter shard, the input of each all-gather of the
 *                  unit, freed once the all-gather is done (as PyTorch does at
 *                  every unshard): once a step under shard_grad_op, twice
 *                  under full_shard (forward and backward) but for the root;
 *   to the host    the averaged gradient shard, when its reduce-scatter is
 *                  done, added to the host's shard after the first
 *                  micro-batch of --grad-accum.
 * --vram limits the device alone, so a model too large for full_shard's
 * shards on the device trains with them on the host, at the price of the
 * copies (counted, traced, and priced on sim/net.c's pcie link) and of a
 * CPU optimizer step. The ledger books the host's buffers apart.
 * ========================================================================== */
/* count values of format d between host and device, counted and priced.
 * The copy is queued on the compute stream, not waited for: waiting
 * would stall the host, and with it the next kernels, until the GPU had
 * run everything queued (under prefetch, the unit computing now). The
 * host's side is safe all the same. To the device: the all-gather that
 * reads the copy is queued after it, and the host waits for that
 * all-gather (unit_unshard_wait) before it frees the device's copy or
 * changes the host's shard (AdamW, after every all-gather of the step).
 * To the host: whoever reads the shard there waits for the stream first
 * (unit_grad_to_host when it adds at once, else units_finish_backward). */
static void offload_copy(Trainer *t, int ui, void *dst, const void *src, long count, Dtype held,
                         Dtype d, CopyDirection dir) {
    SimPhase phase = dir == TO_DEVICE ? PHASE_TO_DEVICE : PHASE_TO_HOST;
    size_t physical = (size_t)count * dtype_bytes(held);
    double bytes = (double)count * dtype_bytes(d);
    const NetModel *pcie = net_model_find("pcie");
    sim_span_begin(&t->sim, ui, phase);
    if (dir == TO_DEVICE) dev_from_host_queued(dst, src, physical);
    else dev_to_host_queued(dst, src, physical);
    sim_span_end(&t->sim, ui, phase);
    t->copy_calls[dir]++;
    t->copy_bytes[dir] += bytes;
    t->copy_sim_seconds += pcie->alpha + bytes / pcie->bandwidth;
}

/* The all-gather's input: the shard, on the device, held in shard_held */
static const void *unit_gather_input(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    Dtype d = t->cfg.param_dtype;
    if (!u->offloaded) return u->shard_param;
    if (!u->device_shard) { /* the copy writes it all */
        u->device_shard = ledger_alloc_held(&t->ledger, MEM_PARAM_SHARD, (size_t)u->shard,
                                            u->shard_held, d, u->name, ON_DEVICE_OVERWRITTEN);
        offload_copy(t, ui, u->device_shard, u->shard_param, u->shard, u->shard_held, d, TO_DEVICE);
        comm_shards_settled(&t->comm); /* its all-gather waits for the copy */
    }
    return u->device_shard;
}

/* After the reduce-scatter (which wrote a fresh shard on the device,
 * reduce_grad_start): the averaged shard to the host's shard, added to the
 * earlier micro-batches' there */
static void unit_grad_to_host(Trainer *t, int ui, float *host_shard) {
    Unit *u = &t->units[ui];
    int add = t->micro > 0 && !t->cfg.no_sync;
    Dtype d = t->cfg.reduce_dtype;
    float *dst = host_shard;
    if (add)
        dst = ledger_alloc_host_floats(&t->ledger, MEM_COMM_BUFFERS, (size_t)u->shard, d,
                                       "the gradient from the device", 0);
    offload_copy(t, ui, dst, u->shard_grad, u->shard, DTYPE_FP32, d, TO_HOST);
    if (add) {
        dev_synchronize(); /* the copy, before the host reads it */
        HOST_FOR_EACH(u->shard, add_one, host_shard, dst);
        if (d != DTYPE_FP32) HOST_FOR_EACH(u->shard, round_one, host_shard, d);
        ledger_free(&t->ledger, dst);
    }
    ledger_free(&t->ledger, u->shard_grad);
    u->shard_grad = host_shard;
}

/* ============================================================================
 * 8. Hybrid groups                     PyTorch: ShardingStrategy.HYBRID_SHARD
 *
 * hybrid_shard and hybrid_shard_zero2 shard each unit over the G ranks of
 * a node (GROUP_SHARD) and replicate it across nodes (GROUP_REPLICA): the
 * all-gathers and reduce-scatters stay on the node's fast links, and one
 * all-reduce of each gradient shard crosses the slow ones.
 * ========================================================================== */

/* Which ranks share a unit's shards: all N, or with the hybrid strategies
 * the G of this rank's node (comm/groups.h's comm_split_nodes). */
static void trainer_split_nodes(Trainer *t) {
    const Config *c = &t->cfg;
    int N = t->comm.world, G = c->ranks_per_node ? c->ranks_per_node : N;
    int hybrid = c->strategy == STRATEGY_HYBRID_SHARD || c->strategy == STRATEGY_HYBRID_SHARD_ZERO2;
    const NetModel *intra = NULL, *inter = NULL;
    net_models_of(c->net, &intra, &inter);
    comm_split_nodes(&t->comm, G, hybrid, intra, inter);
    t->shard_rank = t->comm.group[GROUP_SHARD]->rank;
    t->shard_world = t->comm.group[GROUP_SHARD]->world;
    if (c->reshard_to) { /* FSDP2's post-forward groups: K ranks in a row, in a node if K | G */
        const NetModel *net = G % c->reshard_to ? inter : intra;
        t->comm.group[GROUP_POST_FORWARD] =
            comm_group_new(&t->comm, t->comm.rank / c->reshard_to, net);
    }
}

/* The hybrid strategies, after the reduce-scatter within the node: the
 * ranks holding the same shard on the other nodes (GROUP_REPLICA, R of
 * them) average their shards of the gradient with an all-reduce over the
 * slow links, so every replica takes the same step. The ring needs a
 * multiple of R elements; a shard that is not one travels padded with
 * zeros in a staging buffer, as NCCL pads internally. It runs at once,
 * here: the node's reduce-scatter has just finished. */
static void unit_reduce_replicas(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    int R = t->comm.group[GROUP_REPLICA]->world;
    long padded = ceil_div(u->shard, R) * R;
    float *buf = u->shard_grad;
    if (padded != u->shard) {
        buf = ledger_alloc_floats(&t->ledger, MEM_COMM_BUFFERS, (size_t)padded, t->cfg.reduce_dtype,
                                  "the replicas' all-reduce");
        dev_copy(buf, u->shard_grad, (size_t)u->shard * sizeof(float));
    }
    CommHandle h = comm_all_reduce_in(&t->comm, GROUP_REPLICA, buf, padded, ui, &t->ledger);
    comm_wait(&t->comm, &h);
    if (buf == u->shard_grad) return;
    dev_copy(u->shard_grad, buf, (size_t)u->shard * sizeof(float));
    ledger_free(&t->ledger, buf);
}

/* ============================================================================
 * 9. ZeRO-1: zero1                         DeepSpeed: ZeRO stage 1
 *
 * Every rank keeps the full parameters and the full gradient, as DDP does,
 * but AdamW's state only for its 1/N shard. So after backward the gradient
 * needs averaging only on the rank that updates it: a reduce-scatter,
 * written in place into the rank's own slice of the full gradient, instead
 * of DDP's all-reduce (reduce_grad_start). After the step each rank has
 * updated its slice of the parameters, and an all-gather in place hands
 * every rank the others': the other half of DDP's all-reduce, so the
 * traffic equals DDP's, and the optimizer state falls by N. As in
 * DeepSpeed, the gradients are reduced once a step, after the last
 * micro-batch of --grad-accum (sync_grads, section 5).
 * ========================================================================== */
/* After zero1's step: every rank's slice of the parameters to every rank */
void units_gather_replicas(Trainer *t) {
    for (int ui = 0; ui < t->n_units; ui++) {
        Unit *u = &t->units[ui];
        CommHandle h = comm_all_gather_start(&t->comm, u->full_param, DTYPE_FP32, u->shard_param,
                                             u->shard, ui, t->cfg.param_dtype);
        comm_wait(&t->comm, &h);
    }
}

/* zero1: every rank's replica of the parameters starts as the same
 * initial values, computed whole (as DDP's), and rounded to param_dtype */
static void unit_init_replica(Trainer *t, Unit *u) {
    float *host = (float *)host_calloc((size_t)u->padded + 1, sizeof(float), "initialise a unit");
    for (int j = 0; j < u->n_params; j++) { /* whole: every element of every parameter */
        const Param *p = &t->model.params[u->params[j]];
        HOST_FOR_EACH(p->numel, param_init_one, host + p->offset, p, u->params[j], 0L,
                      t->cfg.seed);
    }
    dev_from_host(u->full_param, host, (size_t)u->padded * sizeof(float));
    round_all((float *)u->full_param, u->padded, t->cfg.param_dtype);
    free(host);
}

/* ============================================================================
 * 10. Clipping, mixed precision and the loss scaler
 *
 * What may run between backward and AdamW, each on a rank's shards alone:
 * clipping the gradient norm, gradients held in 16 bits rounded as they
 * are, and dynamic loss scaling for fp16.
 * ========================================================================== */

/* ------------------------------------------------------------------------
 * Gradient clipping                         PyTorch: FSDP's clip_grad_norm_
 *
 * The norm is the whole model's, but a rank holds only its shards of the
 * gradient. So each rank sums the squares of its own shards (padding left
 * out: it holds no parameter), the ranks add their sums (sum_over_ranks),
 * and every rank scales its shards by the same factor, max_norm / (norm +
 * 1e-6), when that is below 1. The result is 1-rank clipping, up to the
 * order of the sums. With no_shard each rank holds the whole gradient and
 * needs no communication for it. Sums run in double over blocks of fixed
 * size (sum_squares_blocks, kernels/layers.h), added in order: the same
 * bits every run.
 * --------------------------------------------------------------------- */

/* The sum of the squares of the first n[u] elements of each unit's
 * gradient shard, added unit by unit. The device's partial sums of every
 * unit go to one buffer, read back at once: one wait for the GPU a step,
 * not one a unit. An offloaded shard (--cpu-offload) is summed on the
 * host, into its place among them. */
static double shards_sum_squares(Trainer *t, const long *n) {
    long total = 0, at = 0;
    for (int ui = 0; ui < t->n_units; ui++) total += ceil_div(n[ui], NORM_BLOCK);
    double *partial = (double *)ledger_alloc(&t->ledger, MEM_COMM_BUFFERS, (size_t)total + 1,
                                             sizeof(double), "clip_grad_norm's partial sums");
    double *host = (double *)host_calloc((size_t)total + 1, sizeof(double), "sum the squares");
    for (int ui = 0; ui < t->n_units; ui++) {
        const Unit *u = &t->units[ui];
        if (!u->offloaded) sum_squares_blocks(partial + at, u->shard_grad, n[ui]);
        at += ceil_div(n[ui], NORM_BLOCK);
    }
    dev_to_host(host, partial, (size_t)total * sizeof(double)); /* the one wait */
    double local = 0.0;
    at = 0;
    for (int ui = 0; ui < t->n_units; ui++) {
        long blocks = ceil_div(n[ui], NORM_BLOCK);
        if (t->units[ui].offloaded)
            HOST_FOR_EACH(blocks, sum_squares_block, host + at, t->units[ui].shard_grad, n[ui]);
        double sum = 0.0;
        for (long b = 0; b < blocks; b++) sum += host[at + b];
        local += sum;
        at += blocks;
    }
    free(host);
    ledger_free(&t->ledger, partial);
    return local;
}

static void clip_grad_norm(Trainer *t, float max_norm) {
    long *real = (long *)host_calloc((size_t)t->n_units, sizeof(long), "clip the gradients");
    for (int ui = 0; ui < t->n_units; ui++) {
        const Unit *u = &t->units[ui];
        long lo = shard_begin(u, t->shard_rank);
        /* this rank's elements before the padding: none of a shard past numel
         * (FSDP2's padding sits after each parameter's rows: all of it) */
        long r = u->numel - lo < u->shard ? u->numel - lo : u->shard;
        real[ui] = u->chunk_at ? u->shard : r > 0 ? r : 0;
    }
    double local = shards_sum_squares(t, real);
    free(real);
    /* the ranks sharing the shards add theirs; hybrid's other nodes hold the same */
    int alone = t->cfg.strategy == STRATEGY_NO_SHARD;
    double total =
        alone ? local : sum_over_ranks(t, GROUP_SHARD, (float)local, "the gradient norm");
    t->grad_norm = (float)sqrt(total);
    float coef = max_norm / (t->grad_norm + 1e-6f);
    if (coef >= 1.0f) return;
    for (int ui = 0; ui < t->n_units; ui++)
        STATE_FOR_EACH(t->units[ui].offloaded, t->units[ui].shard, scale_one,
                       t->units[ui].shard_grad, coef);
}

/* Mixed precision: a gradient in fp32 slots rounded to param_dtype, as 16 bits hold it */
void grad_round(Trainer *t, const Param *p) {
    if (grad_dtype(t) == DTYPE_FP32) round_all((float *)p->grad, p->numel, t->cfg.param_dtype);
}

/* ------------------------------------------------------------------------
 * Dynamic loss scaling                      PyTorch: ShardedGradScaler
 *
 * fp16 holds nothing below 2^-24 and nothing above 65504. Gradients are
 * small: many would round to zero. So backward starts from the loss times a
 * large scale S (crossentropy_backward's factor), every gradient is S times
 * larger, and before the optimizer step each rank divides its shards by S
 * again (unscale_), in fp32. Too large an S overflows to inf somewhere;
 * then the step must be skipped, and S halved (backoff_factor 0.5); after
 * 2000 steps without one (growth_interval) S doubles (growth_factor 2).
 * The verdict must be the same on every rank, or the ranks' parameters
 * part: an inf in one rank's shard skips the step everywhere. So each rank
 * checks its own shards and the ranks add their findings (sum_over_ranks:
 * one float each), as ShardedGradScaler all-reduces found_inf. Returns 1
 * when the gradients are finite everywhere and the step may go ahead.
 * --------------------------------------------------------------------- */
enum { SCALER_GROWTH_INTERVAL = 2000 };

static int grad_scaler_unscale(Trainer *t) {
    long *n = (long *)host_calloc((size_t)t->n_units, sizeof(long), "unscale the gradients");
    for (int ui = 0; ui < t->n_units; ui++) {
        Unit *u = &t->units[ui];
        STATE_FOR_EACH(u->offloaded, u->shard, scale_one, u->shard_grad, 1.0f / t->loss_scale);
        n[ui] = u->shard;
    }
    double local = shards_sum_squares(t, n); /* inf or NaN if any element is */
    free(n);
    t->found_inf_here = !isfinite(local);
    return sum_over_ranks(t, GROUP_WORLD, (float)t->found_inf_here, "the inf/NaN check") == 0.0;
}

static void grad_scaler_update(Trainer *t) {
    t->step_scale = t->loss_scale;
    if (t->skipped_step) {
        t->loss_scale *= 0.5f;
        t->scaler_growth = 0;
    } else if (++t->scaler_growth == SCALER_GROWTH_INTERVAL) {
        t->loss_scale *= 2.0f;
        t->scaler_growth = 0;
    }
}

/* ============================================================================
 * 11. Gradient accumulation and no_sync    PyTorch: a loop of forward and
 *                                          backward, and FSDP's no_sync()
 *
 * --grad-accum K runs K forward and backward passes on micro-batches of
 * local_batch / K samples before one optimizer step: the activations are
 * those of a micro-batch, K times smaller, and the gradients add up to the
 * local batch's. Where they add up is the choice PyTorch offers:
 *   default    every backward reduce-scatters, and each rank adds the result
 *              into its gradient shard: K reduce-scatters a step, and no
 *              memory beyond a shard's;
 *   --no-sync  the first K-1 backward passes skip the collective
 *              (sync_grads = 0) and keep each unit's full-size gradient to
 *              add into; the last one reduce-scatters the sum: one
 *              reduce-scatter a step, and every unit's full gradient alive
 *              from the first backward to the last.
 * Both are one batch of local_batch samples, up to the order of the sums.
 * ========================================================================== */

/* --grad-accum without --no-sync: the reduce-scatter wrote this
 * micro-batch's averaged shard into a fresh buffer; added into the sum of
 * the earlier ones (kept), which becomes the shard again. The sum is kept
 * in reduce_dtype, the shard's format (PyTorch keeps its _saved_grad_shard
 * in fp32, beside the fp32 parameters). */
static void unit_grad_accumulate(Trainer *t, Unit *u, float *kept) {
    FOR_EACH(u->shard, add_one, kept, u->shard_grad);
    round_all(kept, u->shard, t->cfg.reduce_dtype);
    ledger_free(&t->ledger, u->shard_grad);
    u->shard_grad = kept;
}

/* ============================================================================
 * 12. Forward only; activation checkpointing   PyTorch: model.eval() and
 *                                               torch.no_grad()
 *
 * The validation loss and generation (GPT-2) run the model's forward on
 * the training buffers, through the same hooks, so every unit is gathered
 * and freed as in training. No backward follows, so what a forward leaves
 * gathered for backward (the root's unit; with shard_grad_op every unit)
 * is freed at its end, and no unit waits for a backward that never comes.
 *
 * Activation checkpointing (--activation-checkpointing) is a forward
 * again, inside backward: the model (model/mlp.h, model/gpt2.h) keeps
 * only a block's input and recomputes the rest with t->recomputing set,
 * so module_pre_forward (section 3) only unshards and no hook reshards.
 * ========================================================================== */
float trainer_forward_only(Trainer *t) {
    float loss = trainer_forward(t);
    for (int ui = 0; ui < t->n_units; ui++) {
        Unit *u = &t->units[ui];
        u->needs_backward = 0;
        if (u->gathering) unit_unshard_wait(t, ui); /* a prefetch on its way */
        if (is_sharded(t) && u->full_param) unit_free_full_params(t, ui);
    }
    return loss;
}

/* ============================================================================
 * 13. Checkpoints
 *
 * A sharded checkpoint is what FSDP makes natural: every rank writes its own
 * shards (parameters and AdamW's two moments) to its own file, and nobody
 * ever holds the whole model. One small text file, meta.txt, says how to put
 * the pieces back together: the model's shape, every parameter's name, shape
 * and offset in its unit's flat parameter, the world size, and a CRC-32 per
 * shard file. The byte formats live in formats.c; this section is about who
 * writes and reads what.
 *
 *   DIR/step-00000100/meta.txt            written last, by rank 0
 *   DIR/step-00000100/shard-00000.bin     rank 0: a header (whose shard this
 *   DIR/step-00000100/shard-00001.bin       is), then for each unit its shard
 *   ...                                     of parameters, exp_avg, exp_avg_sq
 *
 * A checkpoint checks itself: meta.txt ends with a CRC-32 of its own lines,
 * each shard file has a CRC-32 in meta.txt and a header naming its rank,
 * world size, step and a hash of the layout meta.txt describes, and meta.txt
 * records the seed, batch and data the run drew its batches from. So an
 * edited meta.txt, shard files swapped or brought in from elsewhere, or a
 * resume on other data is refused with what is wrong, not trained on.
 *
 * Crash safety: a save goes to DIR/.tmp-step-N, every file is flushed to
 * disk (fsync), and only then is the directory renamed to DIR/step-N in
 * one atomic step. A crash during a save leaves a .tmp directory the loader
 * ignores; the previous step-N directory is untouched. The two newest
 * checkpoints are kept.
 *
 * Resharding: the flat layout of a unit does not depend on N, only its
 * padding does. So a rank of a new world size M can compute, for every
 * element of its new shard, where it sits in the old flat parameter, which
 * old rank's file holds it and at which byte, and read just those ranges.
 * Parameters are matched by name, so even a different --min-params (other
 * units) loads. Any N to any M.
 * ========================================================================== */

/* A unit's full flat parameter, in fp32, in a new buffer: allocate
 * `padded` elements and all-gather the shards into it (PyTorch: unshard).
 * Where every rank already holds it in fp32 (no_shard; zero1 without mixed
 * precision), the replica itself is returned. Give it back with
 * unit_release_gathered. For export and tests; the lifecycle (section 2)
 * does the same in two halves, so it can prefetch. */
static float *unit_gather(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    if (t->cfg.strategy == STRATEGY_NO_SHARD) return unit_master(u);
    if (is_zero1(t) && !u->master_param) return (float *)u->full_param; /* fp32 slots */
    float *full = ledger_alloc_floats_overwritten(&t->ledger, MEM_FULL_PARAMS, (size_t)u->padded,
                                                  DTYPE_FP32, u->name);
    float *mine = unit_master(u), *staged = NULL;
    if (u->offloaded) { /* the master is in the host's memory: to the device first */
        staged = ledger_alloc_floats(&t->ledger, MEM_COMM_BUFFERS, (size_t)u->shard, DTYPE_FP32,
                                     "the shard, from the host");
        dev_from_host(staged, mine, (size_t)u->shard * sizeof(float));
        mine = staged;
    }
    float *out = full; /* FSDP2: gathered rank by rank, then copied out (section 14) */
    if (u->chunk_at)
        out = ledger_alloc_floats_overwritten(&t->ledger, MEM_COMM_BUFFERS, (size_t)u->padded,
                                              DTYPE_FP32, u->name);
    CommHandle h = comm_all_gather_start(&t->comm, out, DTYPE_FP32, mine, u->shard, ui, DTYPE_FP32);
    comm_wait(&t->comm, &h);
    if (staged) ledger_free(&t->ledger, staged);
    if (u->chunk_at) {
        fsdp2_copy_out(t, ui, full, out, DTYPE_FP32, t->shard_world);
        ledger_free(&t->ledger, out);
    }
    return full;
}

static void unit_release_gathered(Trainer *t, int ui, float *full) {
    if (full != unit_master(&t->units[ui]) && full != t->units[ui].full_param)
        ledger_free(&t->ledger, full);
}

/* Every parameter in model order (named_parameters() order), gathered from
 * the shards; every rank receives the whole model. For tests (the export
 * gathers one unit at a time, with unit_gather). */
void trainer_gather_params(Trainer *t, float *out) {
    Model *m = &t->model;
    for (int ui = 0; ui < t->n_units; ui++) {
        float *full = unit_gather(t, ui);
        long pos = 0;
        for (int i = 0; i < m->n_params; i++) {
            Param *p = &m->params[i];
            if (p->unit == ui)
                dev_to_host(out + pos, full + p->offset, (size_t)p->numel * sizeof(float));
            pos += p->numel;
        }
        unit_release_gathered(t, ui, full);
    }
}

/* A checkpoint holds one copy of every shard: the shards of the first node
 * (all ranks but with the hybrid strategies), or rank 0's whole replica
 * under no_shard. Its "world" is the number of shards, so the hybrid
 * strategies' checkpoints look like full_shard's over one node. */
static int ckpt_writes_file(const Trainer *t) {
    if (t->cfg.strategy == STRATEGY_NO_SHARD) return t->comm.rank == 0;
    return t->comm.rank < t->shard_world;
}

/* The checkpoints' plumbing is io/checkpoint.h's, included at the top: ckpt_agree,
 * meta.txt (ckpt_meta_of), the step-N directories, every check of a checkpoint or a
 * safetensors file, and GPT-2's Hugging Face layout (export_param, gpt2_config_text). */

/* The first value in this rank's shards of tensor k (0 parameters,
 * 1 exp_avg, 2 exp_avg_sq, which must also be >= 0) that cannot be trained
 * on: NaN or infinite. Says which parameter and where, "blocks.0.fc1.weight
 * [3, 17] is nan", in out (hf_layout: the index as --init-from's file holds
 * it, see param_index_text); returns 0 when every value is a number. */
static int shard_first_nonfinite(Trainer *t, int k, int hf_layout, char *out, size_t outlen) {
    Dtype dtype = t->cfg.param_dtype;
    static const char *const what[3] = {"", "exp_avg of ", "exp_avg_sq of "};
    for (int ui = 0; ui < t->n_units; ui++) {
        Unit *u = &t->units[ui];
        const float *x = unit_state_host(u, k); /* as just loaded */
        ShardPiece s;
        for (int j = 0; j < u->n_params; j++) {
            const Param *p = &t->model.params[u->params[j]];
            if (!shard_piece(u, j, p, t->shard_rank, &s)) continue;
            for (long e = s.first; e < s.end; e++) {
                float v = x[s.at + e - s.first];
                /* a parameter is computed with in param_dtype: fp16 ends at 65504 */
                int overflows = k == 0 && isfinite(v) && !isfinite(round_to(v, dtype));
                if (isfinite(v) && (k != 2 || v >= 0.0f) && !overflows) continue;
                char at[64];
                int n = snprintf(out, outlen, "%s%s%s is %g", what[k], p->name,
                                 param_index_text(p, e, hf_layout, at, sizeof(at)),
                                 (double)v);
                if (!overflows) return 1;
                float largest = bits_float(dtype == DTYPE_FP16 ? 0x477FE000u : 0x7F7F0000u);
                if (n > 0 && (size_t)n < outlen)
                    snprintf(out + n, outlen - (size_t)n,
                             ", beyond the largest %s (%g): --param-dtype %s would compute with "
                             "inf. Use --param-dtype %s",
                             DTYPE_NAMES[dtype], (double)largest, DTYPE_NAMES[dtype],
                             dtype == DTYPE_FP16 ? "bf16, which has fp32's range" : "fp32");
                return 2;
            }
        }
    }
    return 0;
}

/* Writes this rank's shard file: a header saying whose shard it is (rank,
 * world size, step, and a hash of the layout of meta.txt), then for each
 * unit its shard of parameters, exp_avg and exp_avg_sq. So a shard file
 * that was renamed, swapped with another or copied from another checkpoint
 * is recognised on load. Returns 0 or 2; reports bytes and CRC-32. */
static int ckpt_write_shard(Trainer *t, const char *path, long next_step, uint64_t layout,
                            uint64_t *bytes, uint32_t *crc, char *err, size_t errlen) {
    OutFile f;
    if (out_create(&f, "checkpoint", path, err, errlen)) return 2;
    ShardHeader h = {(uint32_t)t->shard_rank, (uint32_t)t->shard_world, (uint64_t)next_step,
                     layout, (uint64_t)t->adam_step, 0, 0};
    if (t->cfg.grad_scaler) { /* as meta.txt's grad_scaler line says */
        memcpy(&h.scale_bits, &t->loss_scale, sizeof(float));
        h.scaler_growth = (uint32_t)t->scaler_growth;
    }
    unsigned char head[SHARD_HEADER_BYTES];
    shard_header_encode(&h, head);
    out_write(&f, head, sizeof(head));
    *crc = crc32_update(0, head, sizeof(head));
    *bytes = sizeof(head);
    for (int ui = 0; ui < t->n_units; ui++) {
        Unit *u = &t->units[ui];
        unit_state_to_host(u);
        const float *tensors[3] = {unit_state_host(u, 0), unit_state_host(u, 1),
                                   unit_state_host(u, 2)};
        for (int k = 0; k < 3; k++) {
            size_t n = (size_t)u->shard * sizeof(float);
            out_write(&f, tensors[k], n);
            *crc = crc32_update(*crc, tensors[k], n);
            *bytes += n;
            /* test-only: die half way through this save, like a node crash */
            if (ui == t->n_units / 2 && k == 0)
                sim_fault_kill_during_save(&t->sim, t->comm.rank, next_step);
        }
    }
    return out_commit(&f, err, errlen) ? 2 : 0;
}

/* ------------------------------------------------------------------------
 * Save a sharded checkpoint after `next_step` steps.
 *
 * Every rank writes only its own shards: the same 1/N of the model it holds,
 * so a save moves no data between ranks at all. Rank 0 then gathers the N
 * checksums (a few bytes each), writes meta.txt, and renames the directory
 * into place. With no_shard every rank holds the same replica; rank 0
 * writes the one file.
 * --------------------------------------------------------------------- */
int ckpt_save(Trainer *t, long next_step) {
    char err[8192] = "", tmp[1536], final_dir[1536], path[2048];
    const char *dir = t->cfg.save_dir;
    snprintf(tmp, sizeof(tmp), "%s/.tmp-step-%08ld", dir, next_step);
    snprintf(final_dir, sizeof(final_dir), "%s/step-%08ld", dir, next_step);
    int rc = 0;
    if (t->comm.rank == 0) {
        ckpt_remove_dir(tmp); /* left by a crashed save of the same step */
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) rc = 2;
        if (rc == 0 && mkdir(tmp, 0755) != 0) rc = 2;
        if (rc)
            snprintf(err, sizeof(err), "checkpoint: cannot create %s (%s)", tmp, strerror(errno));
    }
    if (ckpt_agree(t, rc, err)) return 2;
    CkptMeta m;
    ckpt_meta_of(t, &m, next_step);
    uint64_t bytes = 0, layout = meta_layout_hash(&m);
    uint32_t crc = 0;
    if (ckpt_writes_file(t)) {
        snprintf(path, sizeof(path), "%s/shard-%05d.bin", tmp, t->comm.rank);
        rc = ckpt_write_shard(t, path, next_step, layout, &bytes, &crc, err, sizeof(err));
    }
    if (ckpt_agree(t, rc, err)) {
        if (t->comm.rank == 0) ckpt_remove_dir(tmp); /* what the other ranks wrote */
        meta_free(&m);
        return 2;
    }
    /* checksums to rank 0: bookkeeping, not training traffic */
    unsigned long long my[2] = {bytes, crc}, *all = NULL;
    if (t->comm.rank == 0)
        all = (unsigned long long *)host_calloc((size_t)t->comm.world * 2,
                                                sizeof(unsigned long long), "gather the checksums");
    MPI_Gather(my, 2, MPI_UNSIGNED_LONG_LONG, all, 2, MPI_UNSIGNED_LONG_LONG, 0, t->comm.comm);
    if (t->comm.rank == 0) {
        for (int f = 0; f < m.n_files; f++) {
            snprintf(m.files[f].name, sizeof(m.files[f].name), "shard-%05d.bin", f);
            m.files[f].bytes = all[2 * f];
            m.files[f].crc = (uint32_t)all[2 * f + 1];
        }
        m.data_is_file = t->cfg.data_path != NULL; /* which data: --resume checks it is the same */
        if (m.data_is_file) {
            m.data_bytes = (uint64_t)t->corpus.map_bytes;
            m.data_crc = trainer_data_crc(t);
        }
        m.data_train = t->corpus.len; /* ... and that it draws the same batches */
        size_t len = 0;
        char *text = meta_format(&m, &len);
        snprintf(path, sizeof(path), "%s/meta.txt", tmp);
        rc = text ? ckpt_write_text(path, text, len, err, sizeof(err)) : 2;
        free(text);
        if (rc == 0 && file_sync_dir(tmp) != 0)
            rc = usage_error(err, sizeof(err), "checkpoint %s: fsync of the directory failed (%s).",
                             tmp, strerror(errno));
        if (rc == 0) {
            ckpt_remove_dir(final_dir); /* an older save of this very step */
            if (rename(tmp, final_dir) != 0)
                rc = usage_error(err, sizeof(err), "checkpoint: cannot rename %s to %s (%s)", tmp,
                                 final_dir, strerror(errno));
            else if (file_sync_dir(dir) != 0)
                rc = usage_error(err, sizeof(err),
                                 "checkpoint %s: fsync of the directory failed (%s).", dir,
                                 strerror(errno));
        }
        if (rc == 0) ckpt_prune(dir, next_step);
        else ckpt_remove_dir(tmp); /* a failed save leaves nothing behind */
        free(all);
    }
    meta_free(&m);
    return ckpt_agree(t, rc, err);
}

/* ---- reading: any N to any M -------------------------------------------------- */

/* Reads elements [a, b) of old unit `ou`'s flat tensor k (0 parameters,
 * 1 exp_avg, 2 exp_avg_sq) into dst, from whichever old files hold them. */
static int ckpt_read_range(const char *dir, const CkptMeta *m, int ou, int k, long a, long b,
                           float *dst, char *err, size_t errlen) {
    long S = m->units[ou].shard;
    long base = 0; /* where unit ou starts in each file, in floats after the header */
    for (int v = 0; v < ou; v++) base += 3 * m->units[v].shard;
    while (a < b) {
        int file = (int)(a / S);
        long in_shard = a % S, run = S - in_shard < b - a ? S - in_shard : b - a;
        char path[2048], why[1024];
        uint64_t size = 0, at = SHARD_HEADER_BYTES +
                                (uint64_t)(base + (long)k * S + in_shard) * sizeof(float);
        snprintf(path, sizeof(path), "%s/%s", dir, m->files[file].name);
        int fd = file_open_input("checkpoint", path, &size, why, sizeof(why));
        if (fd < 0) return usage_error(err, errlen, "%s", why);
        int ok = file_read_at(fd, dst, (size_t)run * sizeof(float), at) == 0;
        close(fd);
        if (!ok)
            return usage_error(err, errlen, "%s: cannot read %ld values at element %ld of unit %d.",
                               path, run, in_shard, ou);
        a += run;
        dst += run;
    }
    return 0;
}

/* Reads elements [first, end) of parameter q's tensor k from the old
 * files. FSDP1's: element e sat at q->offset + e of its unit's flat
 * tensor. FSDP2's (section 14): in the piece of rank e / chunk, at
 * q->offset / world + e % chunk of that rank's shard; read piece by piece.
 * So a checkpoint of either design loads into either, on any world size. */
static int ckpt_read_param(const char *dir, const CkptMeta *m, const MetaParam *q, int k,
                           long first, long end, float *dst, char *err, size_t errlen) {
    if (!m->fsdp2)
        return ckpt_read_range(dir, m, q->unit, k, q->offset + first, q->offset + end, dst, err,
                               errlen);
    long chunk = ceil_div(q->shape[0], m->world) * q->shape[1], S = m->units[q->unit].shard;
    while (first < end) {
        long rank = first / chunk, in = first % chunk;
        long run = chunk - in < end - first ? chunk - in : end - first;
        long at = rank * S + q->offset / m->world + in; /* the ranks' shards end to end */
        if (ckpt_read_range(dir, m, q->unit, k, at, at + run, dst, err, errlen)) return 2;
        first += run;
        dst += run;
    }
    return 0;
}

/* Fills this rank's shards from the checkpoint: for every parameter, the
 * part of it that falls in our new shard, from wherever it was. */
static int ckpt_load_shards(Trainer *t, const char *dir, const CkptMeta *m, const int *map,
                            char *err, size_t errlen) {
    for (int ui = 0; ui < t->n_units; ui++) {
        Unit *u = &t->units[ui];
        ShardPiece s;
        unit_state_to_host(u); /* padding stays as it is */
        float *dst[3] = {unit_state_host(u, 0), unit_state_host(u, 1), unit_state_host(u, 2)};
        for (int j = 0; j < u->n_params; j++) {
            const Param *p = &t->model.params[u->params[j]];
            const MetaParam *q = &m->params[map[u->params[j]]];
            if (!shard_piece(u, j, p, t->shard_rank, &s)) continue;
            for (int k = 0; k < 3; k++)
                if (ckpt_read_param(dir, m, q, k, s.first, s.end, dst[k] + s.at, err, errlen))
                    return 2;
        }
        unit_state_to_device(u, t->cfg.param_dtype);
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Resume from DIR (or its newest complete checkpoint) on any world size.
 * Rank 0 reads meta.txt and sends its bytes to every rank, so all ranks
 * judge the same text; meta_parse checks its own checksum, the shard files
 * are verified (each file by one rank), and every rank reads the byte
 * ranges of its new shards. Returns 0 and the step to continue from, or 2
 * (the message already printed).
 * --------------------------------------------------------------------- */
int ckpt_load(Trainer *t, const char *from, long *next_step) {
    char err[8192] = "", dir[1536] = "", path[2048];
    int rc = 0;
    long len = 0;
    char *text = NULL;
    if (t->comm.rank == 0) {
        rc = ckpt_locate(from, dir, sizeof(dir), err, sizeof(err));
        size_t n = 0;
        snprintf(path, sizeof(path), "%s/meta.txt", dir);
        if (rc == 0 &&
            (text = file_read_small("checkpoint", path, 64 << 20, &n, err, sizeof(err))) == NULL)
            rc = 2;
        len = (long)n;
    }
    if (ckpt_agree(t, rc, err)) return 2;
    MPI_Bcast(dir, (int)sizeof(dir), MPI_CHAR, 0, t->comm.comm);
    MPI_Bcast(&len, 1, MPI_LONG, 0, t->comm.comm);
    if (t->comm.rank != 0) text = (char *)host_malloc((size_t)len + 1, "hold meta.txt");
    MPI_Bcast(text, (int)len, MPI_CHAR, 0, t->comm.comm);
    snprintf(path, sizeof(path), "%s/meta.txt", dir);
    CkptMeta m;
    memset(&m, 0, sizeof(m));
    int *map = (int *)host_calloc((size_t)t->model.n_params, sizeof(int), "map the checkpoint");
    char why[768] = "";
    if (meta_parse(text, (size_t)len, &m, why, sizeof(why)) != 0)
        rc = usage_error(err, sizeof(err), "%s: %s", path, why);
    free(text);
    if (rc == 0) rc = ckpt_check_step(dir, &m, path, err, sizeof(err));
    if (rc == 0) rc = ckpt_check_model(t, &m, path, map, err, sizeof(err));
    if (rc == 0) rc = ckpt_check_data(t, &m, path, err, sizeof(err));
    if (rc == 0) rc = ckpt_check_optimizer(&t->cfg, &m, path, err, sizeof(err));
    rc = ckpt_agree(t, rc, err); /* the same verdict on every rank so far */
    if (rc == 0) rc = ckpt_agree(t, ckpt_verify_files(t, dir, &m, err, sizeof(err)), err);
    if (rc == 0) rc = ckpt_agree(t, ckpt_load_shards(t, dir, &m, map, err, sizeof(err)), err);
    for (int k = 0; k < 3 && rc == 0;
         k++) { /* a CRC cannot tell whether the numbers were numbers */
        int bad = shard_first_nonfinite(t, k, 0, why, sizeof(why));
        if (bad)
            rc = usage_error(err, sizeof(err), "%s: %s.%s", path, why,
                             bad == 1 ? " A checkpoint of a run that diverged cannot be trained "
                                        "on; use an earlier one."
                                      : "");
        rc = ckpt_agree(t, rc, err);
    }
    if (rc == 0) {
        t->adam_step = (int)m.adam_step;
        if (t->cfg.grad_scaler && m.scaler_on) { /* the scale goes on where it was */
            memcpy(&t->loss_scale, &m.scale_bits, sizeof(float));
            t->scaler_growth = (int)m.scaler_growth;
        }
        *next_step = m.step;
        if (t->comm.rank == 0)
            printf("resumed from %s: step %ld, written by %d rank%s with %s, loaded on %d\n", dir,
                   m.step, m.world, m.world > 1 ? "s" : "", m.strategy, t->comm.world);
    }
    meta_free(&m);
    free(map);
    return rc;
}

/* ---- the full state as safetensors ----------------------------------------------- */

/* ------------------------------------------------------------------------
 * Export the full parameters as one safetensors file.
 *
 * Unit by unit, exactly as in a forward pass: all-gather the unit's full
 * state, let rank 0 write its tensors, free it. So no rank ever holds more
 * than one unit's full state, and rank 0 writes the tensors under their
 * PyTorch names, so safetensors.torch.load_file() and an equivalent
 * nn.Module's load_state_dict() take the file as it is. Written beside the
 * path and renamed into place (files.c), like the checkpoints; a GPT-2's
 * config.json beside it is committed with it, both or neither (a model
 * without its description, or with another's, would load wrong).
 * --------------------------------------------------------------------- */
int trainer_export(Trainer *t, const char *path) {
    char err[8192] = "", config[FILES_MAX_PATH + 64], text[1024];
    int n = t->model.n_params, root = t->comm.rank == 0, rc = 0;
    int gpt2 = t->cfg.arch == ARCH_GPT2;
    StTensor *st = (StTensor *)host_calloc((size_t)n, sizeof(StTensor), "describe the export");
    for (int i = 0; i < n; i++) st_tensor_of(&t->model.params[i], &st[i]);
    size_t head_len = 0;
    unsigned char *head =
        st_build_header(st, n, "\"format\":\"pt\",\"producer\":\"fsdp.c\"", &head_len);
    if (!head) FATAL("the machine is out of host memory", "cannot build the safetensors header");
    OutFile f, cf; /* the weights; GPT-2's config.json */
    memset(&f, 0, sizeof(f));
    memset(&cf, 0, sizeof(cf));
    path_beside(path, "config.json", config, sizeof(config));
    if (root && (rc = out_open(&f, "--export", path, err, sizeof(err))) == 0)
        out_write(&f, head, head_len);
    if (root && rc == 0 && gpt2 && (rc = out_open(&cf, "--export", config, err, sizeof(err))))
        out_abort(&f); /* both or neither */
    for (int ui = 0; ui < t->n_units; ui++) { /* every rank takes part in each gather */
        Unit *u = &t->units[ui];
        float *full = unit_gather(t, ui);
        /* rank 0 writes the unit's tensors at their offsets in the header,
         * from a host copy (on a GPU the full state is in device memory) */
        float *host =
            root ? (float *)host_malloc((size_t)u->padded * sizeof(float), "export a unit") : NULL;
        if (root) dev_to_host(host, full, (size_t)u->padded * sizeof(float));
        for (int j = 0; j < u->n_params && root && rc == 0; j++)
            export_param(&f, &t->model.params[u->params[j]], host,
                         head_len + st[u->params[j]].begin);
        free(host);
        unit_release_gathered(t, ui, full);
    }
    if (root && rc == 0 && gpt2) {
        out_write(&cf, text, (size_t)gpt2_config_text(&t->cfg, text, sizeof(text)));
        rc = out_commit_pair(&f, &cf, err, sizeof(err));
    } else if (root && rc == 0) {
        rc = out_commit(&f, err, sizeof(err));
    }
    if (root && rc == 0) export_print_done(t, path, n);
    free(head);
    free(st);
    return ckpt_agree(t, rc, err);
}

/* Reads this rank's shard of every parameter from the safetensors file
 * (the header says where each tensor is). Returns 0 or 2. */
static int st_read_shards(Trainer *t, const StHeader *h, const int *map, const char *path,
                          char *err, size_t errlen) {
    uint64_t size = 0;
    int rc = 0, fd = file_open_input("--init-from", path, &size, err, errlen);
    if (fd < 0) return 2;
    for (int ui = 0; ui < t->n_units && rc == 0; ui++) {
        Unit *u = &t->units[ui];
        ShardPiece s;
        unit_state_to_host(u);
        float *master = unit_state_host(u, 0);
        for (int j = 0; j < u->n_params && rc == 0; j++) {
            const Param *p = &t->model.params[u->params[j]];
            if (!shard_piece(u, j, p, t->shard_rank, &s)) continue;
            uint64_t at = h->data_start + h->tensors[map[u->params[j]]].begin;
            if (p->conv1d) { /* transposed in the file: read it whole, take our part */
                rc = st_read_conv1d(fd, at, p, s.first, s.end, master + s.at);
            } else {
                at += (uint64_t)s.first * sizeof(float);
                rc = file_read_at(fd, master + s.at, (size_t)(s.end - s.first) * sizeof(float),
                                  at);
            }
            if (rc)
                rc = usage_error(err, errlen, "--init-from %s: cannot read %s (the file changed?).",
                                 path, p->name);
        }
        unit_state_to_device(u, t->cfg.param_dtype);
    }
    close(fd);
    return rc;
}

/* ------------------------------------------------------------------------
 * Start from a safetensors file: every rank reads only the bytes of its
 * own shards. AdamW starts fresh. A GPT-2's config.json beside the file,
 * when there is one, must describe this run's model (gpt2_check_config).
 * A value that is not a number (NaN, Inf) is refused by name: training on
 * it would give NaN at every step.
 * --------------------------------------------------------------------- */
int trainer_init_from(Trainer *t, const char *path) {
    char err[8192] = "", why[768] = "";
    unsigned char *head = NULL;
    size_t len = 0;
    uint64_t file_size = 0;
    int rc = 0;
    if (st_header_everywhere(t, path, &head, &len, &file_size, err, sizeof(err))) return 2;
    StHeader h;
    memset(&h, 0, sizeof(h));
    int *map =
        (int *)host_calloc((size_t)t->model.n_params, sizeof(int), "map the safetensors file");
    if (st_parse_header(head, len, file_size, &h, why, sizeof(why)) != 0)
        rc = usage_error(err, sizeof(err), "--init-from %s: %s", path, why);
    free(head);
    /* config.json says what shapes cannot (n_head, the activation) */
    if (rc == 0 && t->cfg.arch == ARCH_GPT2 && gpt2_check_config(t, path, err, sizeof(err)))
        rc = 2; /* said on every rank (every rank judged rank 0's bytes) */
    if (rc == 0) rc = st_check_model(t, &h, path, map, err, sizeof(err));
    rc = ckpt_agree(t, rc, err); /* every rank reached the same verdict */
    if (rc == 0) rc = ckpt_agree(t, st_read_shards(t, &h, map, path, err, sizeof(err)), err);
    if (rc == 0) {
        int bad = shard_first_nonfinite(t, 0, 1, why, sizeof(why));
        if (bad)
            bad = usage_error(err, sizeof(err), "--init-from %s: %s%s", path, why,
                              bad == 1 ? "; training on it would give NaN at every step. Export "
                                         "from a run that did not diverge."
                                       : ".");
        rc = ckpt_agree(t, bad, err);
    }
    st_free(&h);
    free(map);
    if (rc == 0 && t->comm.rank == 0) printf("initialised from %s\n", path);
    return rc;
}

/* ============================================================================
 * 14. FSDP2: every parameter sharded on dim 0     PyTorch: fully_shard
 *
 * PyTorch's FSDP today is FSDP2 (torch.distributed.fsdp.fully_shard, public
 * since 2.6; FullyShardedDataParallel, sections 1-13, is FSDP1). The units
 * are the same (one fully_shard call per unit, from the same auto-wrap
 * policy) and so are the hooks, the collectives and AdamW; what changes is
 * what a rank keeps. FSDP1 lays a unit's parameters end to end and cuts the
 * flat parameter into N slices, so a slice may end in the middle of a
 * weight. FSDP2 has no flat parameter: every parameter is cut on its own
 * dim 0, its rows, as torch.chunk cuts them (a DTensor with Shard(0)):
 * each rank gets ceil(rows / N) rows, the last ranks fewer or none, each
 * piece padded with zero rows to ceil(rows / N). A rank's shard of the
 * unit is its pieces of every parameter, one after another:
 *
 *   rank 0's shard: | fc1.weight rows 0-1 | fc1.bias 0-1 | fc2.weight rows 0-1 |
 *   rank 1's shard: | fc1.weight rows 2-3 | fc1.bias 2-3 | fc2.weight rows 2 +0|
 *
 * So a shard holds whole rows of every parameter: a checkpoint's shard of
 * one parameter is a plain tensor (what DCP saves of a DTensor), and
 * AdamW, clipping and the loss scaler step it element by element as before.
 * The price is two copies around the collectives (foreach_all_gather's
 * copy-out, and chunk_cat before the reduce-scatter): the all-gather
 * returns the shards rank after rank, and each parameter's full tensor
 * wants its rows together, so its rows are copied out to their place; the
 * reduce-scatter wants the gradients laid rank after rank, so they are
 * copied in. Each copy needs a second buffer the size of the unit: FSDP2's
 * peak holds both for a moment (the ledger books the all-gather's output
 * and the reduce-scatter's input under comm buffers).
 *
 * In the full state, parameter k keeps N * chunk elements (its rows and its
 * padding rows) at offset N * chunk_at[k]: the all-gather's output with
 * each parameter's N pieces brought together. Its first numel elements are
 * the parameter (p->offset points there), the rest padding, zero forever as
 * in FSDP1.
 * ========================================================================== */

/* Elements in one rank's piece of parameter p: ceil(rows / world) rows */
#ifdef EXERCISE_FSDP2_LAYOUT /* graded exercise: make exercise EX=fsdp2_layout */
#include EXERCISE_FILE
#else
static long fsdp2_chunk(const Param *p, int world) {
    long rows = p->shape[0], cols = p->numel / rows;
    return ceil_div(rows, world) * cols;
}

/* Lays out unit u for FSDP2 over `world` ranks: where each parameter's
 * piece starts in a shard (chunk_at), the shard's and the full state's
 * sizes, and each parameter's place in the full state (p->offset) */
static void fsdp2_layout(Unit *u, Model *m, int world) {
    u->chunk_at = (long *)host_calloc((size_t)u->n_params + 1, sizeof(long), "lay out a unit");
    u->shard = 0;
    for (int k = 0; k < u->n_params; k++) {
        Param *p = &m->params[u->params[k]];
        u->chunk_at[k] = u->shard;
        p->offset = (long)world * u->shard;
        u->shard += fsdp2_chunk(p, world);
    }
    u->padded = (long)world * u->shard;
}

/* shard_piece for FSDP2: rank's rows of parameter j */
static int fsdp2_piece(const Unit *u, int j, const Param *p, int rank, ShardPiece *s) {
    int world = (int)(u->padded / u->shard);
    long chunk = fsdp2_chunk(p, world);
    s->first = (long)rank * chunk;
    s->end = s->first + chunk < p->numel ? s->first + chunk : p->numel;
    s->at = u->chunk_at[j];
    return s->first < s->end;
}
#endif /* EXERCISE_FSDP2_LAYOUT */

/* What the copies and the model rely on, checked once: every parameter's
 * world pieces hold all its elements, inside the unit's full state, and
 * the pieces tile a shard (a wrong layout would otherwise write past a
 * buffer, far from the mistake) */
static void fsdp2_check_layout(const Unit *units, int n_units, const Model *m, int world) {
    for (int ui = 0; ui < n_units; ui++) {
        const Unit *u = &units[ui];
        long at = 0;
        for (int k = 0; k < u->n_params; k++) {
            const Param *p = &m->params[u->params[k]];
            long chunk = fsdp2_chunk(p, world);
            if (world * chunk < p->numel || u->chunk_at[k] != at ||
                p->offset != world * at || p->offset + world * chunk > u->padded)
                FATAL("a piece is ceil(rows / world) rows (fsdp2_chunk); the pieces follow one "
                      "another in a shard (chunk_at), and a parameter's offset is world * "
                      "chunk_at",
                      "FSDP2's layout of %s: %s's %d pieces of %ld elements (at %ld, offset "
                      "%ld) do not hold its %ld elements inside the full state of %ld",
                      u->name, p->name, world, chunk, u->chunk_at[k], p->offset, p->numel,
                      u->padded);
            at += chunk;
        }
        if (u->shard != at || u->padded != world * at)
            FATAL("the shard is the sum of the pieces, the full state world shards",
                  "FSDP2's layout of %s: shard %ld and full state %ld, where its pieces add up "
                  "to %ld a rank",
                  u->name, u->shard, u->padded, at);
    }
}

/* One parameter's copy on the CPU: G memcpys, one a rank's piece (an
 * element loop, a division an element, cost more than the rest of a small
 * model's step) */
static void fsdp2_copy_runs(void *full, void *ranked, int G, long chunk, long at, long S,
                            int bytes, int to_full) {
    for (int r = 0; r < G; r++) {
        char *a = (char *)full + (size_t)(r * chunk) * (size_t)bytes;
        char *b = (char *)ranked + (size_t)(r * S + at) * (size_t)bytes;
        dev_copy(to_full ? a : b, to_full ? b : a, (size_t)chunk * (size_t)bytes);
    }
}

/* Unit u's full state, parameter after parameter, from (to_full 1) or to
 * (0) a buffer laid rank after rank over G of the `world` ranks it is
 * sharded on, its elements held in `held`. G is world, or K after
 * --reshard-after-forward K: each of the K then holds world / K ranks'
 * pieces of every parameter, side by side, and the arithmetic is the same
 * with pieces world / K times as long. */
static void fsdp2_copy(const Unit *u, const Model *m, int world, int G, void *full, void *ranked,
                       Dtype held, int to_full) {
    int bytes = (int)dtype_bytes(held);
    long per = world / G;
    for (int k = 0; k < u->n_params; k++) {
        const Param *p = &m->params[u->params[k]];
        long chunk = per * fsdp2_chunk(p, world), at = per * u->chunk_at[k], S = per * u->shard;
        if (DEVICE_IS_HOST) /* the CPU: each rank's piece is one run on both sides */
            fsdp2_copy_runs(element_at(full, p->offset, held), ranked, G, chunk, at, S, bytes,
                            to_full);
        else /* a GPU: one kernel, a thread an element */
            FOR_EACH(G * chunk, rank_major_copy_one, element_at(full, p->offset, held), ranked,
                     chunk, at, S, bytes, to_full);
    }
}

/* The all-gather's output, rank after rank over `from` ranks, to the full
 * state, parameter after parameter (PyTorch: foreach_all_gather_copy_out) */
static void fsdp2_copy_out(Trainer *t, int ui, void *full, const void *gathered, Dtype held,
                           int from) {
    span_begin(t, ui, PHASE_COPY_OUT);
    fsdp2_copy(&t->units[ui], &t->model, t->shard_world, from, full, (void *)gathered, held, 1);
    span_end(t, ui, PHASE_COPY_OUT);
}

/* --reshard-after-forward K (PyTorch: reshard_after_forward=K): after
 * forward, instead of keeping only its shard (1/N) until backward gathers
 * the unit from all N ranks again, a rank keeps 1/K of the full state: the
 * rows of world / K ranks in a row, those of its place g in its group of K
 * (GROUP_POST_FORWARD). Backward's all-gather then runs within the K
 * ranks, inside a node when K divides it, over the fast links; the price
 * is (N / K - 1) shards more memory a unit between forward and backward.
 * The piece kept is the ranked buffer a K-rank all-gather sends: each
 * parameter's world / K pieces, one parameter after another. */
static void fsdp2_keep_post_forward(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    Dtype held = full_dtype(t);
    long per = t->shard_world / t->cfg.reshard_to, g = t->shard_rank % t->cfg.reshard_to;
    u->post_forward =
        ledger_alloc_held(&t->ledger, MEM_FULL_PARAMS, (size_t)(per * u->shard), held,
                          t->cfg.param_dtype, u->name, ON_DEVICE_OVERWRITTEN);
    for (int k = 0; k < u->n_params; k++) {
        const Param *p = &t->model.params[u->params[k]];
        long chunk = per * fsdp2_chunk(p, t->shard_world);
        dev_copy(element_at(u->post_forward, per * u->chunk_at[k], held),
                 element_at(u->full_param, p->offset + g * chunk, held),
                 (size_t)chunk * dtype_bytes(held));
    }
}

/* The full gradient, parameter after parameter, to a new buffer laid rank
 * after rank, the reduce-scatter's input (PyTorch: torch._chunk_cat in
 * foreach_reduce); the full gradient is freed at once, as FSDP2 frees it */
static void *fsdp2_chunk_cat(Trainer *t, int ui) {
    Unit *u = &t->units[ui];
    Dtype gh = grad_dtype(t);
    void *ranked = ledger_alloc_held(&t->ledger, MEM_COMM_BUFFERS, (size_t)u->padded, gh,
                                     t->cfg.reduce_dtype, u->name, ON_DEVICE_OVERWRITTEN);
    span_begin(t, ui, PHASE_CHUNK_CAT);
    fsdp2_copy(u, &t->model, t->shard_world, t->shard_world, u->full_grad, ranked, gh, 0);
    span_end(t, ui, PHASE_CHUNK_CAT);
    ledger_free(&t->ledger, u->full_grad);
    u->full_grad = NULL;
    unit_set_views(u, &t->model, full_dtype(t), gh);
    return ranked;
}
