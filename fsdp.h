/* ============================================================================
 * fsdp.h — the table of contents of fsdp.c
 *
 * Read this first. It names every idea the implementation is built from, in
 * the order fsdp.c introduces them:
 *
 *   Config       what to train (model size, strategy, optimizer, data)
 *   Ledger       every byte a rank allocates, booked by category
 *   Comm         the collectives, counted and recorded in one place
 *   Model        the module tree and its parameter tensors
 *   Unit         a group of modules sharded, gathered and freed together
 *   Trainer      one rank's whole training state, built from the above
 *
 * Built with it: files.h (safe reading and writing of files), formats.h
 * (checkpoint byte formats) and sim/sim.h (the
 * simulator's instruments, called from fsdp.c through one-line hooks).
 *
 * Vocabulary (used everywhere, in code and in output):
 *   unit            a group of modules whose parameters are sharded, gathered
 *                   and freed together (PyTorch: an FSDP instance)
 *   flat parameter  a unit's parameters laid end to end in one buffer
 *   shard           the contiguous slice of a flat parameter a rank owns
 *   full state      the gathered, unsharded flat parameter (or gradient)
 *   padding         zeros appended so the flat parameter divides by N
 *   strategy        full_shard (ZeRO-3), shard_grad_op (ZeRO-2),
 *                   no_shard (DDP), hybrid_shard and hybrid_shard_zero2
 *                   (sharded within a node, replicated across nodes):
 *                   PyTorch's ShardingStrategy names; and zero1 (ZeRO-1,
 *                   DeepSpeed's stage 1: only the optimizer state sharded)
 * ========================================================================== */
#ifndef FSDP_H
#define FSDP_H

#include "core.h"      /* Dtype, and what every file uses */
#include "comm/comm.h" /* CommKind, CommGroup, CommHandle, Comm */
#include <mpi.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#ifdef __cplusplus /* callable from C and from CUDA C++ objects alike */
extern "C" {
#endif

/* ----------------------------------------------------------------------------
 * Configuration: everything the command line can set.
 * ------------------------------------------------------------------------- */

typedef enum {
    STRATEGY_FULL_SHARD,         /* ZeRO-3: shard params, grads, optimizer state */
    STRATEGY_SHARD_GRAD_OP,      /* ZeRO-2: keep full params from forward to backward */
    STRATEGY_NO_SHARD,           /* DDP: everything replicated, grads all-reduced */
    STRATEGY_HYBRID_SHARD,       /* full_shard within a node, replicated across nodes */
    STRATEGY_HYBRID_SHARD_ZERO2, /* shard_grad_op within a node, replicated across */
    STRATEGY_ZERO1,              /* DeepSpeed stage 1: only the optimizer state sharded */
} Strategy;

/* Whether a strategy shards the parameters, so that a unit is gathered
 * before it computes (full_shard, shard_grad_op and their hybrid
 * versions); no_shard and zero1 keep every parameter whole on every rank.
 * fsdp.c's is_sharded asks it, and so does the roofline (sim/roofline.h). */
static inline int strategy_shards_params(Strategy s) {
    return s != STRATEGY_NO_SHARD && s != STRATEGY_ZERO1;
}

/* PyTorch's BackwardPrefetch: when the next unit's all-gather is issued in
 * backward (fsdp.c, sections 3 and 6, say what each costs in memory). */
typedef enum {
    BACKWARD_PRE,  /* before the current unit's gradient is computed (default) */
    BACKWARD_POST, /* after it, once the current unit's full state is freed */
    BACKWARD_NONE, /* only when the unit itself needs it */
} BackwardPrefetch;

typedef enum { LR_CONSTANT, LR_STEP, LR_COSINE, LR_LINEAR } LrSchedule;
/* --attention: GPT-2's attention as matmuls that keep P (SDPBackend.MATH),
 * or fused, recomputing P in backward (SDPBackend.FLASH_ATTENTION) */
typedef enum { ATTENTION_MATH, ATTENTION_FLASH } AttentionKind;

typedef enum {
    OPTIMIZER_ADAMW, /* torch.optim.AdamW: decoupled weight decay (the default) */
    OPTIMIZER_ADAM,  /* torch.optim.Adam: weight decay as L2 on the gradient */
} Optimizer;

typedef enum {
    ARCH_MLP,  /* the byte-level MLP (model/mlp.h): the lectures' model */
    ARCH_GPT2, /* Hugging Face's GPT2LMHeadModel (model/gpt2.h) */
} ModelArch;

typedef enum {
    AUTO_WRAP_SIZE,        /* size_based_auto_wrap_policy(min_num_params) */
    AUTO_WRAP_TRANSFORMER, /* transformer_auto_wrap_policy: one unit per block */
} AutoWrapPolicy;

typedef struct {
    /* model shape (the --model preset, then overrides) */
    ModelArch arch;
    int vocab;     /* V: 256 bytes; GPT-2's 50257 tokens */
    int embed_dim; /* C: width of one byte's embedding (the MLP only) */
    int context;   /* T: the MLP's bytes of context; GPT-2's sequence length */
    int width;     /* D: width of the residual stream (GPT-2's n_embd) */
    int depth;     /* L: number of blocks (GPT-2's n_layer) */
    int n_head;    /* GPT-2: attention heads; D % n_head == 0 */
    int n_ctx;     /* GPT-2: positions wpe holds; context <= n_ctx */
    /* FSDP */
    AutoWrapPolicy auto_wrap; /* --auto-wrap size | transformer */
    long min_params; /* auto-wrap threshold, size_based_auto_wrap_policy */
    Strategy strategy;
    int ranks_per_node; /* --ranks-per-node G: the hybrid strategies shard within G ranks,
                         * and --net A+B prices links inside a node with A; 0: all */
    CollectivesImpl collectives;
    BackwardPrefetch backward_prefetch; /* --backward-prefetch pre|post|none */
    int forward_prefetch;               /* --forward-prefetch (PyTorch's default: off) */
    int limit_all_gathers;              /* --limit-all-gathers on|off: at most 2 in flight */
    int fsdp2; /* --fsdp2: every parameter sharded on dim 0 (fully_shard), no flat parameter */
    int reshard_to; /* --reshard-after-forward K (FSDP2): after forward keep 1/K of a unit,
                     * gathered again within K ranks in backward; 0: free it all */
    /* optimizer: torch.optim.AdamW, or Adam */
    Optimizer optimizer;
    float lr, beta1, beta2, eps, weight_decay;
    int no_decay_bias_norm; /* --no-decay-bias-norm: no weight decay on vectors (biases,
                             * LayerNorm), as nanoGPT's and HF Trainer's parameter groups */
    float clip_grad_norm; /* --clip-grad-norm: max total norm; 0: no clipping */
    LrSchedule lr_schedule; /* --lr-schedule, with --warmup, --step-size, --gamma */
    long warmup, step_size;
    float gamma;
    float min_lr; /* --min-lr: where cosine and linear end (CosineAnnealingLR's eta_min) */
    /* mixed precision: PyTorch's MixedPrecision(param_dtype, reduce_dtype) */
    Dtype param_dtype;  /* --param-dtype: gathered parameters, compute, all-gather */
    Dtype reduce_dtype; /* --reduce-dtype: gradients' reduce-scatter (default: param_dtype) */
    int grad_scaler;    /* --grad-scaler: dynamic loss scaling (ShardedGradScaler) */
    int cpu_offload;    /* --cpu-offload: shards and optimizer state in host memory */
    float init_scale;   /* --init-scale: its first scale (PyTorch: 2^16) */
    /* training */
    int steps; /* optimizer steps */
    int batch; /* global batch (samples), split across ranks */
    int grad_accum; /* --grad-accum K: micro-batches per optimizer step (default 1) */
    int no_sync;    /* --no-sync: reduce only the last micro-batch's sum (PyTorch's no_sync()) */
    uint64_t seed;
    int log_every;         /* print one line every this many steps */
    const char *data_path; /* NULL: the embedded synthetic corpus */
    const char *model_name;
    int compare;     /* --compare: run no_shard, then the sharded strategy */
    size_t vram;     /* --vram: simulated memory per rank in bytes; 0: unlimited */
    const char *net; /* --net: network cost model preset (sim/net.c) */
    /* the simulator's instruments (sim/) */
    const char *trace_path; /* --trace: Chrome/Perfetto trace of the run */
    const char *json_path;  /* --json: the run's figures, machine-readable */
    int trace_clock_sim;    /* --trace-clock sim: collectives timed by --net */
    int check_collectives;  /* --check-collectives */
    int step_mode;          /* --step: 1 wait for keys, 2 =auto (StepMode) */
    int view;               /* --view: live terminal dashboard on rank 0 */
    int wait_for_debugger;  /* --wait-for-debugger */
    int inline_collectives; /* --inline-collectives: no communication thread */
    int collective_timeout; /* --collective-timeout: seconds a collective may take; 0: no limit */
    int activation_checkpointing; /* --activation-checkpointing: keep block inputs only */
    AttentionKind attention;      /* --attention math|flash (GPT-2) */
    int tf32;               /* --tf32: cuBLAS may use TF32 tensor cores (GPU build) */
    int gelu_fusion;        /* FSDP_GELU_FUSION: 1, 0, or -1 (unset: the GPU decides) */
    int plan;               /* --plan: the ledger's figures for one step, nothing run */
    const char *roofline;   /* --roofline GPU: --plan also counts the kernels (h100, ...) */
    /* checkpoints */
    const char *save_dir;    /* --save-dir: sharded checkpoints go here */
    int save_every;          /* --save-every K steps (and at the end) */
    const char *resume_dir;  /* --resume: continue from the newest complete one */
    const char *export_path; /* --export: full state as safetensors at the end */
    const char *init_from;   /* --init-from: start from a safetensors file */
    /* GPT-2: validation and generation */
    const char *val_path; /* --val-data: held-out tokens (default: none) */
    int val_every;        /* --val-every N: the validation loss every N steps */
    int val_batches;      /* --val-batches: batches the validation loss averages */
    int sample;           /* --sample N: tokens rank 0 generates after training */
    float temperature;    /* --temperature: 0 takes the most likely token */
    const char *tokenizer_path; /* --tokenizer: llm.c's gpt2_tokenizer.bin */
} Config;

/* The names both fsdp.c and sim/ print live here, with the types they name. */
static inline const char *strategy_name(Strategy s) {
    switch (s) {
    case STRATEGY_FULL_SHARD: return "full_shard";
    case STRATEGY_SHARD_GRAD_OP: return "shard_grad_op";
    case STRATEGY_NO_SHARD: return "no_shard";
    case STRATEGY_HYBRID_SHARD: return "hybrid_shard";
    case STRATEGY_HYBRID_SHARD_ZERO2: return "hybrid_shard_zero2";
    case STRATEGY_ZERO1: return "zero1";
    }
    return "?";
}

/* ----------------------------------------------------------------------------
 * The memory ledger: one per rank. Every buffer of the training state is
 * allocated through it under a category, so the final table can say where
 * each byte went, and the DDP-vs-FSDP lab can compare them.
 * ------------------------------------------------------------------------- */

typedef enum {
    MEM_PARAM_SHARD,  /* this rank's shard of every flat parameter */
    MEM_GRAD_SHARD,   /* this rank's shard of every flat gradient */
    MEM_OPTIM_STATE,  /* AdamW exp_avg and exp_avg_sq for the shard */
    MEM_FULL_PARAMS,  /* gathered full state of units being computed */
    MEM_FULL_GRADS,   /* full-size gradient of a unit before reduce-scatter */
    MEM_ACTIVATIONS,  /* saved activations and their gradients */
    MEM_COMM_BUFFERS, /* staging buffers the collectives need */
    MEM_NUM_CATEGORIES
} MemCategory;

typedef struct {
    void *ptr;
    size_t bytes;    /* as booked: what a GPU would hold */
    size_t physical; /* as allocated: a 16-bit value sits in a float (core.h) */
    MemCategory cat;
    int where;       /* ON_DEVICE, HOST_PAGEABLE (--cpu-offload), HOST_PINNED, ... (fsdp.c) */
} LedgerEntry;

typedef struct Ledger {
    size_t current[MEM_NUM_CATEGORIES]; /* the device's (the simulated GPU's) memory */
    size_t peak[MEM_NUM_CATEGORIES];
    size_t current_total, peak_total;
    size_t host_current[MEM_NUM_CATEGORIES]; /* --cpu-offload: the host's; --vram ignores it */
    size_t host_peak[MEM_NUM_CATEGORIES];
    LedgerEntry *entries; /* live allocations, so a free knows its size */
    int n_entries, cap_entries;
    size_t budget;    /* simulated VRAM per rank (--vram); 0: unlimited */
    int rank;         /* for the out-of-memory report */
    int defer_oom;    /* setup: note an overrun, decide together later */
    char *oom_report; /* the first overrun's report, while deferred */
    uintptr_t plan_next; /* --plan: the stand-in address of the next "allocation" */
    struct Sim *sim;  /* the instruments, told of every change */
} Ledger;

static const char *const MEM_CATEGORY_NAMES[MEM_NUM_CATEGORIES] = {
    "parameters", "gradients",   "optimizer",    "full params",
    "full grads", "activations", "comm buffers",
};

/* ----------------------------------------------------------------------------
 * The model: a tree of modules, each owning parameter tensors.
 * ------------------------------------------------------------------------- */

#define FSDP_MAX_NAME 48
#define FSDP_MAX_CHILDREN 64

typedef enum { INIT_NORMAL, INIT_UNIFORM, INIT_ONES, INIT_ZEROS } ParamInit;

typedef struct {
    char name[FSDP_MAX_NAME + 8]; /* PyTorch name, "blocks.0.fc1.weight" */
    int shape[2];                 /* (out, in) for Linear weights; shape[1]=1 for vectors */
    long numel;
    int module;       /* owning module */
    int unit;         /* unit whose flat parameter holds it */
    long offset;      /* where it starts in that flat parameter */
    ParamInit init;   /* how its elements start (PyTorch defaults) */
    float init_bound; /* INIT_UNIFORM: uniform(-bound, bound); INIT_NORMAL: the std */
    int conv1d;       /* GPT-2's Conv1D weight: Hugging Face's files hold it (in, out) */
    void *data;       /* view into the unit's full state (its format: fsdp.c's full_dtype),
                       * or NULL */
    void *grad;       /* view into the unit's full gradient (its format: fsdp.c's
                       * grad_dtype), or NULL */
} Param;

typedef struct {
    char name[FSDP_MAX_NAME]; /* "" for the root */
    int parent;
    int children[FSDP_MAX_CHILDREN];
    int n_children;
    int params[2]; /* weight, bias (-1 if absent) */
    int n_params;
    int is_module_list; /* nn.ModuleList: never wrapped, as in PyTorch */
    int is_block;       /* a transformer block: transformer_auto_wrap_policy wraps it */
    int holds_tied;     /* holds a tied parameter (GPT-2's wte) or a user of it: never
                         * wrapped, so the tied weight stays in the root's unit */
    int unit;           /* the unit whose root this module is, or -1 */
} Module;

/* The module tree: every module and parameter, and the modules the forward
 * pass calls, by role (the byte MLP's, GPT-2's). model/tree.h builds it. */
typedef struct {
    Module *modules;
    int n_modules;
    Param *params;
    int n_params;
    long total_numel;
    /* the modules the forward pass calls, by role */
    int root, embed, proj_in, blocks, norm_f, head;
    int *block, *block_norm, *block_fc1, *block_fc2; /* (L) each */
    /* GPT-2 (model/gpt2.h): the same idea, Hugging Face's names */
    int transformer, wte, wpe, h, ln_f, lm_head;
    int *gpt2_block;    /* (L, GPT2_ROLES): block l's module of each role */
    float residual_std; /* the std of GPT-2's residual projections' initial weights */
} Model;

/* ----------------------------------------------------------------------------
 * A unit: PyTorch's FSDP instance, owner of one flat parameter.
 * ------------------------------------------------------------------------- */

typedef struct {
    char name[FSDP_MAX_NAME + 32]; /* "unit 2 (blocks.1)", for reports */
    int root_module;               /* the module that was wrapped */
    long numel;                    /* parameters in the unit */
    long padded;                   /* numel rounded up to a multiple of world */
    long shard;                    /* padded / world: what each rank owns */
    int *params, n_params;         /* its parameters, in model order: the flat layout */
    long *chunk_at;                /* --fsdp2: (n_params) where parameter k's rows start in
                                    * every rank's shard (fsdp.c, section 14); NULL: FSDP1 */
    void *shard_param;             /* (shard) this rank's slice of the parameters, held in
                                    * shard_held: fp32 slots, or the 16 bits a sharded unit
                                    * gathers into on a GPU (fsdp.c's full_dtype) */
    Dtype shard_held;
    float *shard_grad;             /* (shard) this rank's slice of the gradient */
    float *exp_avg;                /* (shard) AdamW first moment */
    float *exp_avg_sq;             /* (shard) AdamW second moment */
    int offloaded;       /* --cpu-offload: the shards and AdamW's state live in host memory */
    void *device_shard;  /* (shard) --cpu-offload: shard_param's copy on the device, the
                          * input of an all-gather on its way */
    float *master_param;           /* (shard) mixed precision: the fp32 parameters AdamW
                                    * updates; shard_param is then their param_dtype copy.
                                    * NULL in fp32: shard_param is the master itself */
    void *full_param;              /* (padded) gathered full state, or NULL; fp32 slots, or
                                    * 16 bits on a GPU (fsdp.c's full_dtype) */
    void *full_grad;               /* (padded) full-size gradient, or NULL; fp32 slots, or
                                    * 16 bits on a GPU (fsdp.c's grad_dtype) */
    /* its all-gather on the way (fsdp.c, section 2; a gradient's reduction
     * is the trainer's pending_reduce) */
    CommHandle gather; /* the all-gather of full_param, while `gathering` */
    void *gathered;    /* --fsdp2: the all-gather's output, rank by rank, until copied out */
    void *post_forward; /* --reshard-after-forward K: this rank's 1/K of the full state, kept
                         * from forward to backward (fsdp.c, section 14) */
    int gathering;
    int needs_backward; /* ran forward this step, its backward not begun yet */
    float *host_state;  /* (3, shard) GPU build: a host copy of the fp32 master (master_param,
                         * else shard_param), exp_avg, exp_avg_sq for checkpoints; NULL on CPU */
} Unit;

typedef struct Trainer Trainer;

/* Builds the model, wraps it into units, shards it over comm's ranks and
 * initialises this rank's shards. Collective: every rank of comm calls it. */
Trainer *trainer_create(const Config *cfg, MPI_Comm comm);
/* One optimizer step on the global batch number `step`; returns the loss
 * averaged over the global batch (the same value on every rank). */
float trainer_step(Trainer *t, int step);
/* Gathers every parameter, in model order, into out (rank 0 and others). */
void trainer_gather_params(Trainer *t, float *out);
long trainer_num_params(const Trainer *t);
void trainer_destroy(Trainer *t);

/* ----------------------------------------------------------------------------
 * The hooks: the model's code (model/) calls these on entering and leaving
 * every module; they fire where a module is the root of a unit (fsdp.c).
 * ------------------------------------------------------------------------- */
void module_pre_forward(Trainer *t, int module);
void module_post_forward(Trainer *t, int module);
void module_pre_backward(Trainer *t, int module);
void module_post_backward(Trainer *t, int module);
void units_finish_backward(Trainer *t); /* the end of backward (_post_backward_final_callback) */
/* The format a unit's full state and its full gradient are held in */
Dtype full_dtype(const Trainer *t);
Dtype grad_dtype(const Trainer *t);
void grad_round(Trainer *t, const Param *p); /* a 16-bit gradient's fp32 slots, rounded */

/* ----------------------------------------------------------------------------
 * What the program around fsdp.c (main.c, run/) calls besides the above
 * ------------------------------------------------------------------------- */
int is_sharded(const Trainer *t); /* the strategy gathers parameters before compute */
int is_zero1(const Trainer *t);
void units_gather_replicas(Trainer *t);          /* zero1, after a load: every rank's slice */
float trainer_forward_only(Trainer *t);          /* eval: a forward, every unit freed after */
float global_mean_loss(Trainer *t, float local); /* the same bits on every rank */
int ckpt_save(Trainer *t, long next_step);       /* 0, or 2 (every rank agrees) */
int ckpt_load(Trainer *t, const char *from, long *next_step);
int trainer_export(Trainer *t, const char *path);    /* safetensors, PyTorch's names */
int trainer_init_from(Trainer *t, const char *path); /* a safetensors file's parameters */

#ifdef __cplusplus
}
#endif
#endif /* FSDP_H */
