/* ============================================================================
 * run/cli.h — the command line: the model presets, --help, and each option
 * parsed and checked into a Config, with a message that says what to do.
 *
 * defines: config_usage, config_parse, config_check_world, config_block_numel
 *          and config_total_numel (a model's size from its Config alone)
 *
 * Plumbing: the program around fsdp.c (main.c includes it after fsdp.c,
 * one translation unit); nothing in fsdp.c calls it.
 * ========================================================================== */
#ifndef FSDP_RUN_CLI_H
#define FSDP_RUN_CLI_H
#include "../core.h"
#include "../fsdp.h"
#include "../sim/sim.h" /* net_models_of */
#include "../kernels/backend.h"
#include "../kernels/transformer.h" /* FLASH_MAX_HD */
#include "../optim/lr_schedule.h"    /* LR_SCHEDULE_NAMES */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>

/* Fills cfg from argv. Returns 0 on success; on bad input writes a message
 * (what is wrong and what to do) into err and returns 2, the exit code every
 * rank then uses. Returns 1 with err empty when --help was asked for. */
int config_parse(Config *cfg, int argc, char **argv, char *err, size_t errlen);
void config_usage(FILE *out);

/* The parameters of one residual block: the default auto-wrap threshold, so
 * that by default each block becomes its own unit. */
static long config_block_numel(const Config *cfg) {
    long D = cfg->width;
    if (cfg->arch == ARCH_GPT2) /* ln_1, c_attn, c_proj, ln_2, c_fc, c_proj */
        return 2 * D + (3 * D * D + 3 * D) + (D * D + D) + 2 * D + (4 * D * D + 4 * D) +
               (4 * D * D + D);
    return 2 * D + (4 * D * D + 4 * D) + (4 * D * D + D);
}
static long config_total_numel(const Config *cfg) {
    long V = cfg->vocab, C = cfg->embed_dim, T = cfg->context, D = cfg->width;
    long blocks = cfg->depth * config_block_numel(cfg);
    if (cfg->arch == ARCH_GPT2) /* wte (tied to lm_head: counted once), wpe, blocks, ln_f */
        return V * D + (long)cfg->n_ctx * D + blocks + 2 * D;
    return V * C + (T * C * D + D) + blocks + 2 * D + (V * D + V);
}

typedef struct {
    const char *name;
    int embed_dim, context, width, depth;
    ModelArch arch;
    int n_head, n_ctx, vocab; /* GPT-2 (for the MLP: 0, 0, and 256 bytes) */
} ModelPreset;

/* tiny: for tests; small: the demo (about 0.6M parameters); medium: about
 * 3.5M; large: about 18M (72 MB of fp32 parameters, ~290 MB with gradients
 * and AdamW state under DDP). */
/* GPT-2: gpt2-tiny and gpt2-mini train on bytes on a laptop's ranks (vocab
 * 256); the other four are OpenAI's shapes (n_layer, n_embd, n_head; n_ctx
 * 1024, vocab 50257): 124M, 355M, 774M and 1558M parameters, for a GPU or
 * --plan. A GPT-2's context is its sequence length T, at most n_ctx (the
 * positions wpe holds). */
static const ModelPreset MODEL_PRESETS[] = {
    {"tiny", 4, 8, 16, 2, ARCH_MLP, 0, 0, 256},
    {"small", 16, 16, 128, 4, ARCH_MLP, 0, 0, 256},
    {"medium", 32, 32, 256, 6, ARCH_MLP, 0, 0, 256},
    {"large", 32, 64, 512, 8, ARCH_MLP, 0, 0, 256},
    {"gpt2-tiny", 0, 16, 32, 2, ARCH_GPT2, 2, 32, 256},
    {"gpt2-mini", 0, 64, 128, 4, ARCH_GPT2, 4, 128, 256},
    {"gpt2", 0, 1024, 768, 12, ARCH_GPT2, 12, 1024, 50257},
    {"gpt2-medium", 0, 1024, 1024, 24, ARCH_GPT2, 16, 1024, 50257},
    {"gpt2-large", 0, 1024, 1280, 36, ARCH_GPT2, 20, 1024, 50257},
    {"gpt2-xl", 0, 1024, 1600, 48, ARCH_GPT2, 25, 1024, 50257},
};
enum { N_PRESETS = sizeof(MODEL_PRESETS) / sizeof(MODEL_PRESETS[0]) };

/* --help: the options by theme, each with its range and default */
static const char USAGE[] =
    "usage: mpirun -np N ./fsdp [options]\n"
    "\n"
    "Trains a language model with FSDP on N ranks (one per simulated GPU): a byte-level\n"
    "MLP, or GPT-2 (Hugging Face's GPT2LMHeadModel).\n"
    "\n"
    "model\n"
    "  --model NAME          the byte MLP: tiny | small | medium | large (default small);\n"
    "                        GPT-2: gpt2-tiny | gpt2-mini (bytes, for CPU ranks) |\n"
    "                        gpt2 | gpt2-medium | gpt2-large | gpt2-xl (OpenAI's shapes)\n"
    "  --depth L             blocks, 1..64 (GPT-2: alias --n-layer)  (preset)\n"
    "  --width D             residual stream width, 1..8192 (alias --n-embd)  (preset)\n"
    "  --context T           the MLP's bytes of context; GPT-2's sequence length,\n"
    "                        1..4096, at most --n-ctx                (preset)\n"
    "  --embed-dim C         the MLP: width of a byte's embedding, 1..4096 (preset)\n"
    "  --n-head H            GPT-2: attention heads, dividing --n-embd   (preset)\n"
    "  --n-ctx N             GPT-2: positions wpe holds                  (preset)\n"
    "  --vocab V             GPT-2: vocabulary size, 2..65536 (presets 256 or 50257)\n"
    "FSDP\n"
    "  --strategy S          full_shard | shard_grad_op | no_shard (alias ddp) |\n"
    "                        hybrid_shard | hybrid_shard_zero2 (shard within a node,\n"
    "                        replicate across nodes) | zero1 (DeepSpeed stage 1: only\n"
    "                        the optimizer state sharded)         (default full_shard)\n"
    "  --ranks-per-node G    ranks per node: hybrid strategies shard within G, and\n"
    "                        --net A+B prices A inside a node   (default: all ranks)\n"
    "  --auto-wrap P         size (size_based_auto_wrap_policy, with --min-params) |\n"
    "                        transformer (transformer_auto_wrap_policy: one unit per\n"
    "                        block)                                  (default size)\n"
    "  --min-params N        auto-wrap threshold: a module whose unclaimed parameters\n"
    "                        reach N becomes a unit (default: one block's parameters)\n"
    "  --collectives IMPL    ring (ours, point-to-point) | mpi (Open MPI's built-ins) |\n"
    "                        nccl (GPU build; one GPU per rank). On GPUs ring and mpi\n"
    "                        stage through host memory, so ranks may share a GPU\n"
    "                                                    (default ring; GPU build nccl)\n"
    "  --tf32                GPU build: let cuBLAS use TF32 tensor cores (10-bit\n"
    "                        mantissa); default fp32, as the CPU computes\n"
    "  --backward-prefetch P pre | post | none: when backward starts the next unit's\n"
    "                        all-gather (PyTorch's BackwardPrefetch)     (default pre)\n"
    "  --forward-prefetch    start the next unit's all-gather while this one computes its\n"
    "                        forward (PyTorch's forward_prefetch)        (default off)\n"
    "  --limit-all-gathers X on | off: at most two all-gathers in flight (default on)\n"
    "  --fsdp2               FSDP2 (fully_shard): every parameter sharded on its rows\n"
    "                        (Shard(0)), not a unit's flat parameter; full_shard is\n"
    "                        reshard_after_forward=True, shard_grad_op False\n"
    "  --reshard-after-forward K  with --fsdp2: after forward keep 1/K of each unit\n"
    "                        and gather it again within K ranks in backward\n"
    "                        (reshard_after_forward=K; K divides the shard group)\n"
    "  --compare             train with no_shard (DDP), then with the sharded strategy,\n"
    "                        and print memory and traffic side by side\n"
    "simulator\n"
    "  --vram SIZE           simulated GPU memory per rank, e.g. 512M or 2G (K M G T P);\n"
    "                        going over it fails like CUDA's out-of-memory\n"
    "                                                                (default unlimited)\n"
    "  --net NAME            price every collective on a modelled interconnect:\n"
    "                        nvlink | pcie | ib | ethernet | none (default none), or\n"
    "                        A+B: A within a node, B between nodes (e.g. nvlink+ib)\n"
    "  --trace FILE          write a trace for ui.perfetto.dev / chrome://tracing; with\n"
    "                        --compare, FILE.no_shard.json and FILE.<strategy>.json\n"
    "  --trace-clock CLOCK   real (this machine) | sim (collectives timed by --net)\n"
    "  --json FILE           the run's figures as JSON (docs/instruments.md): config,\n"
    "                        units, loss per step, memory and traffic per rank; with\n"
    "                        --compare, FILE.no_shard.json and FILE.<strategy>.json\n"
    "  --view                live terminal view of memory per rank and traffic\n"
    "  --step                stop before every collective and picture it; keys:\n"
    "                        n next, c continue to the next step, q quit\n"
    "  --step=auto           the same pictures without stopping\n"
    "  --step=ring           ... and inside each ring collective, after each of its\n"
    "                        N-1 steps, which chunk went where and what each rank holds\n"
    "  --check-collectives   ranks compare each collective before calling it and stop\n"
    "                        with a report on a mismatch, instead of hanging\n"
    "  --wait-for-debugger   every rank prints its PID and waits for gdb (docs/instruments.md)\n"
    "  --collective-timeout S  seconds a collective may take before every rank stops\n"
    "                        with a report naming it (PyTorch's process group\n"
    "                        timeout); 0: wait for ever                 (default 600)\n"
    "  --inline-collectives  run each collective on the main thread at once, not on the\n"
    "                        communication thread (implied by --step, --check-collectives\n"
    "                        and --wait-for-debugger)\n"
    "  --cpu-offload         keep the shards and AdamW's state in host memory, step on\n"
    "                        the CPU (CPUOffload(offload_params=True)); --vram\n"
    "                        limits the device alone\n"
    "  --plan                print each rank's memory by category for two steps, from the\n"
    "                        ledger, without allocating or training: any model size;\n"
    "                        and a step's compute, with its time on an H100 or A100\n"
    "  --roofline GPU        with --plan: every kernel's FLOPs and bytes, and the least\n"
    "                        time each takes on GPU (h100, h200, a100), in fp32 and bf16\n"
    "checkpoints\n"
    "  --save-dir DIR        write sharded checkpoints to DIR/step-N (at the end, and\n"
    "  --save-every K        every K steps); the two newest are kept\n"
    "  --resume DIR          continue from DIR's newest complete checkpoint, on any\n"
    "                        number of ranks; --steps is the total to reach\n"
    "  --export FILE         write the full parameters as safetensors at the end; a\n"
    "                        directory (or DIR/): DIR/model.safetensors, and for GPT-2\n"
    "                        DIR/config.json, as save_pretrained(DIR) writes them\n"
    "  --init-from FILE      start from a safetensors file (fresh optimizer); a directory:\n"
    "                        its model.safetensors; GPT-2: checked against the config.json\n"
    "                        beside it, as from_pretrained reads it\n"
    "training\n"
    "  --steps N             optimizer steps; 0 with --export saves the initial model\n"
    "                                                                (default 200)\n"
    "  --batch N             global batch, split evenly over ranks   (default 64)\n"
    "  --grad-accum K        split each rank's batch into K micro-batches, one forward\n"
    "                        and backward each, then one step         (default 1)\n"
    "  --no-sync             with --grad-accum: keep full gradients and reduce-scatter\n"
    "                        once per step (PyTorch's no_sync()); default: every\n"
    "                        micro-batch\n"
    "  --activation-checkpointing  keep only each block's input in forward and run the\n"
    "                        block again in backward (PyTorch's checkpoint_wrapper)\n"
    "  --attention A         GPT-2: math (keep the B*H*T^2 probabilities for backward)\n"
    "                        | flash (FlashAttention: recompute them)  (default math)\n"
    "  --lr X                AdamW learning rate                     (default 0.003)\n"
    "  --beta1 X --beta2 X   AdamW betas                             (default 0.9 0.999)\n"
    "  --eps X               AdamW eps                               (default 1e-8)\n"
    "  --optimizer O         adamw (torch.optim.AdamW) | adam (torch.optim.Adam: weight\n"
    "                        decay as L2 on the gradient)           (default adamw)\n"
    "  --weight-decay X      weight decay                 (default 0.01; 0 with adam)\n"
    "  --no-decay-bias-norm  no weight decay on biases and LayerNorm parameters (the\n"
    "                        two parameter groups of nanoGPT and HF's Trainer)\n"
    "  --param-dtype D       fp32 | bf16 | fp16: gathered parameters, compute and the\n"
    "                        all-gather (MixedPrecision's param_dtype)  (default fp32)\n"
    "  --reduce-dtype D      fp32 | bf16 | fp16: the gradients' reduce-scatter\n"
    "                        (MixedPrecision's reduce_dtype)   (default: --param-dtype)\n"
    "  --grad-scaler         dynamic loss scaling, needed by fp16 (ShardedGradScaler)\n"
    "  --init-scale X        its first scale                        (default 65536)\n"
    "  --clip-grad-norm X    scale the gradients so their total norm is at most X, as\n"
    "                        FSDP's clip_grad_norm_                  (default off)\n"
    "  --lr-schedule S       constant | step (StepLR: lr x gamma every --step-size\n"
    "                        steps) | cosine (CosineAnnealingLR over --steps) | linear\n"
    "                        (transformers' linear decay over --steps), after --warmup\n"
    "                        N steps of linear warmup             (default constant)\n"
    "  --warmup N --step-size N --gamma X    the schedule's  (defaults 0, none, 0.1)\n"
    "  --min-lr X            where cosine and linear end (eta_min, nanoGPT's min_lr)\n"
    "                                                                  (default 0)\n"
    "  --seed N              seeds the model, the corpus and the sampler (default 1337)\n"
    "  --data FILE           train on FILE's bytes instead of the embedded corpus; for\n"
    "                        GPT-2 also llm.c's token files (FILE.bin, uint16 tokens)\n"
    "  --val-data FILE       GPT-2: held-out text or tokens for the validation loss\n"
    "  --val-every N         GPT-2: print the validation loss every N steps (and at\n"
    "                        the end); with no --val-data, on the corpus (default off)\n"
    "  --val-batches N       batches it averages, of --batch / --grad-accum\n"
    "                        sequences (a micro-batch a rank)          (default 4)\n"
    "  --sample N            GPT-2: after training, rank 0 generates N tokens from the\n"
    "                        first token of the corpus and prints them      (default 0)\n"
    "  --temperature X       their softmax temperature; 0: always the likeliest token\n"
    "                                                                (default 1.0)\n"
    "  --tokenizer FILE      decode them with llm.c's gpt2_tokenizer.bin (default: as\n"
    "                        bytes, which the byte-vocabulary models are)\n"
    "  --log-every N         print a line every N steps              (default 20)\n"
    "  --help                this text\n"
    "\n"
    "exit codes (the same on every rank)\n"
    "  0 trained   1 a file could not be written, or an internal error   2 bad input\n"
    "  3 simulated out of memory (--vram)   4 the ranks' collectives disagree, or one\n"
    "    timed out (--collective-timeout)\n"
    "  5 the loss became NaN or infinite (training diverged)\n";

void config_usage(FILE *out) { fputs(USAGE, out); }

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out, char *err,
                      size_t errlen) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno == ERANGE)
        return usage_error(err, errlen,
                           "%s: %s is out of range. Give an integer between %ld and %ld.", flag, s,
                           lo, hi);
    if (errno || end == s || *end != '\0')
        return usage_error(err, errlen,
                           "%s: '%s' is not a whole number. Give an integer between %ld and %ld.",
                           flag, s, lo, hi);
    if (v < lo || v > hi)
        return usage_error(err, errlen,
                           "%s: %ld is out of range. Give an integer between %ld and %ld.", flag, v,
                           lo, hi);
    *out = v;
    return 0;
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out, char *err,
                     size_t errlen) {
    long v = 0;
    int rc = parse_long(flag, s, lo, hi, &v, err, errlen);
    if (rc == 0) *out = (int)v;
    return rc;
}

/* lo_open: whether lo itself is excluded (a learning rate of 0 is not one) */
static int parse_float(const char *flag, const char *s, double lo, int lo_open, double hi,
                       float *out, char *err, size_t errlen) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v))
        return usage_error(err, errlen, "%s: '%s' is not a number. Give a value like 0.001.", flag,
                           s);
    if (v < lo || (lo_open && v == lo) || v > hi)
        return usage_error(err, errlen, "%s: %s is out of range. Give a value %s %g and <= %g.",
                           flag, s, lo_open ? ">" : ">=", lo,
                           hi); /* s, not v: %g would print 0.99999999999 as 1 */
    /* The range is checked in double, but the value is held in a float:
     * 1e-50 passes "> 0" and then becomes 0 (or a denormal, which loses its
     * digits and turns 1/x into inf). Judge the float that will be used.
     * What uses it differs (the optimizer, the loss scaler, the sampler's
     * temperature), so the message says only what is true of all of them. */
    float f = (float)v;
    if (v != 0.0 && !isnormal(f))
        return usage_error(err, errlen,
                           "%s: %s is below the smallest normal 32-bit float (%g), the format "
                           "the program holds it in: it would become %g. Give %s%g or more.",
                           flag, s, (double)FLT_MIN, (double)f, lo_open ? "" : "0, or ",
                           (double)FLT_MIN);
    *out = f;
    return 0;
}

/* "512M", "2G", "1048576", "64KiB": bytes, with binary suffixes as GPU
 * memory is quoted (K = 1024). */
static int parse_size(const char *flag, const char *s, size_t *out, char *err, size_t errlen) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    double unit = 1.0;
    if (end != s) {
        switch (*end) {
        case 'K':
        case 'k':
            unit = 1024.0;
            end++;
            break;
        case 'M':
        case 'm':
            unit = 1048576.0;
            end++;
            break;
        case 'G':
        case 'g':
            unit = 1073741824.0;
            end++;
            break;
        case 'T':
        case 't':
            unit = 1099511627776.0;
            end++;
            break;
        case 'P':
        case 'p':
            unit = 1125899906842624.0;
            end++;
            break;
        }
        if (unit > 1.0 && (!strcmp(end, "iB") || !strcmp(end, "B"))) end += strlen(end);
    }
    /* strtod also reads hex (0x10), exponents and "inf": a size is decimal */
    const char *num = s + (*s == '-'); /* a sign reaches the range check */
    size_t digits = strspn(num, "0123456789.");
    int then_suffix = num[digits] == '\0' || strchr("KkMmGgTtPp", num[digits]) != NULL;
    if (errno || end == s || *end != '\0' || !isfinite(v) || digits == 0 || !then_suffix)
        return usage_error(err, errlen,
                           "%s: '%s' is not a size. Give bytes with an optional K, M, G, T or P "
                           "suffix, e.g. %s 512M.",
                           flag, s, flag);
    if (v * unit != floor(v * unit))
        return usage_error(err, errlen,
                           "%s: '%s' is %g bytes, not a whole number of bytes. Give whole bytes, "
                           "e.g. %s 1536K for 1.5M.",
                           flag, s, v * unit, flag);
    if (v * unit < 1.0 || v * unit > 1125899906842624.0)
        return usage_error(
            err, errlen,
            "%s: '%s' is out of range. Give a size between 1 byte and 1P, e.g. %s 512M.", flag, s,
            flag);
    *out = (size_t)(v * unit);
    return 0;
}

static void config_defaults(Config *c) {
    memset(c, 0, sizeof(*c));
    c->vocab = 256;
    c->strategy = STRATEGY_FULL_SHARD;
    c->collectives = FSDP_GPU ? COLLECTIVES_NCCL : COLLECTIVES_RING;
    c->lr = 3e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->weight_decay = -1.0f; /* PyTorch's default for the optimizer: resolved below */
    c->reduce_dtype = DTYPE_UNSET; /* MixedPrecision's default: param_dtype, resolved below */
    c->init_scale = 65536.0f;    /* ShardedGradScaler's default, 2^16 */
    c->gamma = 0.1f;         /* StepLR's default; step_size has none (0: not given) */
    c->steps = 200;
    c->batch = 64;
    c->grad_accum = 1;
    c->seed = 1337;
    c->log_every = 20;
    c->val_batches = 4;
    c->collective_timeout = 600; /* PyTorch's NCCL process group: 10 minutes */
    c->temperature = 1.0f;
    c->min_params = -1;                  /* -1: one block's parameters, resolved below */
    c->backward_prefetch = BACKWARD_PRE; /* PyTorch's defaults */
    c->limit_all_gathers = 1;
}

static int config_apply_preset(Config *c, const char *name, char *err, size_t errlen) {
    for (int i = 0; i < N_PRESETS; i++) {
        if (strcmp(MODEL_PRESETS[i].name, name) != 0) continue;
        const ModelPreset *p = &MODEL_PRESETS[i];
        c->model_name = p->name;
        c->embed_dim = p->embed_dim;
        c->context = p->context;
        c->width = p->width;
        c->depth = p->depth;
        c->arch = p->arch;
        c->n_head = p->n_head;
        c->n_ctx = p->n_ctx;
        c->vocab = p->vocab;
        return 0;
    }
    return usage_error(err, errlen,
                       "--model: unknown model '%s'. Choose tiny, small, medium or large (the byte "
                       "MLP), or gpt2-tiny, gpt2-mini, gpt2, gpt2-medium, gpt2-large or gpt2-xl.",
                       name);
}

enum { MAX_PATH_CHARS = 1000 }; /* room for "/step-N/shard-N.bin" in the path buffers */
enum { MAX_STEPS = 99999999 };   /* the checkpoint names' 8 digits hold every step */

/* The options whose value is a path. */
static int flag_takes_path(const char *flag) {
    static const char *const flags[] = {"--save-dir", "--resume",   "--export",
                                        "--init-from", "--trace",   "--json",
                                        "--data",      "--val-data", "--tokenizer"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (!strcmp(flag, flags[i])) return 1;
    return 0;
}

enum { NOT_MINE = -1 }; /* config_set_*: the option belongs to another group */

/* Where an option whose value is a path is kept, or NULL (--trace and
 * --data check more, in config_set_run). */
static const char **config_path_slot(Config *c, const char *flag) {
    if (!strcmp(flag, "--save-dir")) return &c->save_dir;
    if (!strcmp(flag, "--resume")) return &c->resume_dir;
    if (!strcmp(flag, "--export")) return &c->export_path;
    if (!strcmp(flag, "--init-from")) return &c->init_from;
    if (!strcmp(flag, "--val-data")) return &c->val_path;
    if (!strcmp(flag, "--tokenizer")) return &c->tokenizer_path;
    return !strcmp(flag, "--json") ? &c->json_path : NULL;
}

/* The model's shape, the batch and the run's length. Returns 0, 2 with a message, or
 * NOT_MINE. */
static int config_set_shape(Config *c, const char *flag, const char *val, char *err,
                            size_t errlen) {
    if (!strcmp(flag, "--depth")) return parse_int(flag, val, 1, 64, &c->depth, err, errlen);
    if (!strcmp(flag, "--width")) return parse_int(flag, val, 1, 8192, &c->width, err, errlen);
    if (!strcmp(flag, "--context")) return parse_int(flag, val, 1, 4096, &c->context, err, errlen);
    if (!strcmp(flag, "--embed-dim"))
        return parse_int(flag, val, 1, 4096, &c->embed_dim, err, errlen);
    if (!strcmp(flag, "--n-layer")) return parse_int(flag, val, 1, 64, &c->depth, err, errlen);
    if (!strcmp(flag, "--n-embd")) return parse_int(flag, val, 1, 8192, &c->width, err, errlen);
    if (!strcmp(flag, "--n-head")) return parse_int(flag, val, 1, 1024, &c->n_head, err, errlen);
    if (!strcmp(flag, "--n-ctx")) return parse_int(flag, val, 1, 65536, &c->n_ctx, err, errlen);
    if (!strcmp(flag, "--vocab")) return parse_int(flag, val, 2, 65536, &c->vocab, err, errlen);
    if (!strcmp(flag, "--val-every"))
        return parse_int(flag, val, 1, INT_MAX, &c->val_every, err, errlen);
    if (!strcmp(flag, "--val-batches"))
        return parse_int(flag, val, 1, 1 << 20, &c->val_batches, err, errlen);
    if (!strcmp(flag, "--sample")) return parse_int(flag, val, 1, 1 << 20, &c->sample, err, errlen);
    if (!strcmp(flag, "--temperature"))
        return parse_float(flag, val, 0.0, 0, 100.0, &c->temperature, err, errlen);
    if (!strcmp(flag, "--min-params"))
        return parse_long(flag, val, 1, LONG_MAX, &c->min_params, err, errlen);
    if (!strcmp(flag, "--steps")) /* at most 8 digits: checkpoints are named step-%08d */
        return parse_int(flag, val, 0, MAX_STEPS, &c->steps, err, errlen);
    if (!strcmp(flag, "--batch")) return parse_int(flag, val, 1, 1 << 20, &c->batch, err, errlen);
    if (!strcmp(flag, "--grad-accum"))
        return parse_int(flag, val, 1, 1 << 20, &c->grad_accum, err, errlen);
    if (!strcmp(flag, "--log-every"))
        return parse_int(flag, val, 1, INT_MAX, &c->log_every, err, errlen);
    return NOT_MINE;
}

/* The optimizer, its schedule, and mixed precision. Returns 0, 2 with a message, or
 * NOT_MINE. */
static int config_set_optimizer(Config *c, const char *flag, const char *val, char *err,
                                size_t errlen) {
    if (!strcmp(flag, "--lr")) return parse_float(flag, val, 0.0, 1, 10.0, &c->lr, err, errlen);
    if (!strcmp(flag, "--beta1"))
        return parse_float(flag, val, 0.0, 0, 0.999999, &c->beta1, err, errlen);
    if (!strcmp(flag, "--beta2"))
        return parse_float(flag, val, 0.0, 0, 0.999999, &c->beta2, err, errlen);
    if (!strcmp(flag, "--eps")) return parse_float(flag, val, 0.0, 1, 1.0, &c->eps, err, errlen);
    if (!strcmp(flag, "--weight-decay"))
        return parse_float(flag, val, 0.0, 0, 1.0, &c->weight_decay, err, errlen);
    if (!strcmp(flag, "--clip-grad-norm"))
        return parse_float(flag, val, 0.0, 1, 1e30, &c->clip_grad_norm, err, errlen);
    if (!strcmp(flag, "--lr-schedule")) {
        if (!strcmp(val, "constant")) c->lr_schedule = LR_CONSTANT;
        else if (!strcmp(val, "step")) c->lr_schedule = LR_STEP;
        else if (!strcmp(val, "cosine")) c->lr_schedule = LR_COSINE;
        else if (!strcmp(val, "linear")) c->lr_schedule = LR_LINEAR;
        else
            return usage_error(err, errlen,
                               "--lr-schedule: unknown schedule '%s'. Choose constant (the "
                               "default), step (StepLR), cosine (CosineAnnealingLR) or linear "
                               "(transformers' get_linear_schedule_with_warmup).",
                               val);
        return 0;
    }
    if (!strcmp(flag, "--warmup"))
        return parse_long(flag, val, 0, 100000000, &c->warmup, err, errlen);
    if (!strcmp(flag, "--step-size"))
        return parse_long(flag, val, 1, 100000000, &c->step_size, err, errlen);
    if (!strcmp(flag, "--gamma"))
        return parse_float(flag, val, 0.0, 1, 1.0, &c->gamma, err, errlen);
    if (!strcmp(flag, "--min-lr"))
        return parse_float(flag, val, 0.0, 0, 10.0, &c->min_lr, err, errlen);
    if (!strcmp(flag, "--param-dtype") || !strcmp(flag, "--reduce-dtype")) {
        Dtype d;
        if (!strcmp(val, "fp32")) d = DTYPE_FP32;
        else if (!strcmp(val, "bf16")) d = DTYPE_BF16;
        else if (!strcmp(val, "fp16")) d = DTYPE_FP16;
        else
            return usage_error(err, errlen, "%s: unknown format '%s'. Choose fp32, bf16 or fp16.",
                               flag, val);
        if (flag[2] == 'p') c->param_dtype = d;
        else c->reduce_dtype = d;
        return 0;
    }
    if (!strcmp(flag, "--attention")) {
        if (!strcmp(val, "math")) c->attention = ATTENTION_MATH;
        else if (!strcmp(val, "flash")) c->attention = ATTENTION_FLASH;
        else
            return usage_error(err, errlen,
                               "--attention: unknown '%s'. Choose math (the default: P kept for "
                               "backward) or flash (FlashAttention: P recomputed).",
                               val);
        return 0;
    }
    if (!strcmp(flag, "--init-scale"))
        return parse_float(flag, val, 0.0, 1, 1e30, &c->init_scale, err, errlen);
    if (!strcmp(flag, "--optimizer")) {
        if (!strcmp(val, "adamw")) c->optimizer = OPTIMIZER_ADAMW;
        else if (!strcmp(val, "adam")) c->optimizer = OPTIMIZER_ADAM;
        else
            return usage_error(err, errlen,
                               "--optimizer: unknown optimizer '%s'. Choose adamw "
                               "(torch.optim.AdamW, the default) or adam (torch.optim.Adam).",
                               val);
        return 0;
    }
    return NOT_MINE;
}

/* The seed, the budget, checkpoints, outputs, the network and the data.
 * Returns 0, 2 with a message, or NOT_MINE. */
static int config_set_run(Config *c, const char *flag, const char *val, char *err, size_t errlen) {
    long lv = 0;
    int rc = 0;
    if (!strcmp(flag, "--seed")) {
        rc = parse_long(flag, val, 0, LONG_MAX, &lv, err, errlen);
        c->seed = (uint64_t)lv;
        return rc;
    }
    if (!strcmp(flag, "--vram")) return parse_size(flag, val, &c->vram, err, errlen);
    if (!strcmp(flag, "--collective-timeout"))
        return parse_int(flag, val, 0, 1 << 24, &c->collective_timeout, err, errlen);
    if (!strcmp(flag, "--save-every"))
        return parse_int(flag, val, 1, INT_MAX, &c->save_every, err, errlen);
    const char **path = config_path_slot(c, flag);
    if (path) {
        if (!*val) return usage_error(err, errlen, "%s: the path is empty.", flag);
        *path = val;
        return 0;
    }
    if (!strcmp(flag, "--trace")) {
        if (!*val)
            return usage_error(err, errlen,
                               "--trace: the file name is empty. Give a path such as run.json.");
        c->trace_path = val;
        return 0;
    }
    if (!strcmp(flag, "--trace-clock")) {
        if (!strcmp(val, "real")) c->trace_clock_sim = 0;
        else if (!strcmp(val, "sim")) c->trace_clock_sim = 1;
        else
            return usage_error(err, errlen,
                               "--trace-clock: unknown clock '%s'. Choose real (this machine's) or "
                               "sim (collectives timed by --net).",
                               val);
        return 0;
    }
    if (!strcmp(flag, "--net")) {
        const NetModel *intra, *inter;
        if (net_models_of(val, &intra, &inter))
            return usage_error(err, errlen,
                               "--net: unknown network '%s'. Choose %s, or two joined by + "
                               "(within a node + between nodes, e.g. nvlink+ib).",
                               val, net_model_names());
        c->net = val;
        return 0;
    }
    if (!strcmp(flag, "--data")) {
        if (!*val)
            return usage_error(err, errlen,
                               "--data: the file name is empty. Give the path of a text file.");
        c->data_path = val;
        return 0;
    }
    return NOT_MINE;
}

/* How the model is spread: strategy, nodes, prefetch, collectives. Returns 0, 2 with a message, or
 * NOT_MINE. */
static int config_set_parallel(Config *c, const char *flag, const char *val, char *err,
                               size_t errlen) {
    if (!strcmp(flag, "--ranks-per-node"))
        return parse_int(flag, val, 1, 1 << 20, &c->ranks_per_node, err, errlen);
    if (!strcmp(flag, "--reshard-after-forward"))
        return parse_int(flag, val, 2, 1 << 20, &c->reshard_to, err, errlen);
    if (!strcmp(flag, "--auto-wrap")) {
        if (!strcmp(val, "size")) c->auto_wrap = AUTO_WRAP_SIZE;
        else if (!strcmp(val, "transformer")) c->auto_wrap = AUTO_WRAP_TRANSFORMER;
        else
            return usage_error(err, errlen,
                               "--auto-wrap: unknown policy '%s'. Choose size "
                               "(size_based_auto_wrap_policy, the default) or transformer "
                               "(transformer_auto_wrap_policy: one unit per block).",
                               val);
        return 0;
    }
    if (!strcmp(flag, "--strategy")) {
        if (!strcmp(val, "full_shard")) c->strategy = STRATEGY_FULL_SHARD;
        else if (!strcmp(val, "shard_grad_op")) c->strategy = STRATEGY_SHARD_GRAD_OP;
        else if (!strcmp(val, "no_shard") || !strcmp(val, "ddp")) c->strategy = STRATEGY_NO_SHARD;
        else if (!strcmp(val, "hybrid_shard")) c->strategy = STRATEGY_HYBRID_SHARD;
        else if (!strcmp(val, "hybrid_shard_zero2")) c->strategy = STRATEGY_HYBRID_SHARD_ZERO2;
        else if (!strcmp(val, "zero1")) c->strategy = STRATEGY_ZERO1;
        else
            return usage_error(err, errlen,
                               "--strategy: unknown strategy '%s'. Choose full_shard, "
                               "shard_grad_op, no_shard (alias ddp), hybrid_shard, "
                               "hybrid_shard_zero2 or zero1.",
                               val);
        return 0;
    }
    if (!strcmp(flag, "--backward-prefetch")) {
        if (!strcmp(val, "pre")) c->backward_prefetch = BACKWARD_PRE;
        else if (!strcmp(val, "post")) c->backward_prefetch = BACKWARD_POST;
        else if (!strcmp(val, "none")) c->backward_prefetch = BACKWARD_NONE;
        else
            return usage_error(err, errlen,
                               "--backward-prefetch: unknown value '%s'. Choose pre "
                               "(PyTorch's BACKWARD_PRE, the default), post or none.",
                               val);
        return 0;
    }
    if (!strcmp(flag, "--limit-all-gathers")) {
        if (!strcmp(val, "on")) c->limit_all_gathers = 1;
        else if (!strcmp(val, "off")) c->limit_all_gathers = 0;
        else return usage_error(err, errlen, "--limit-all-gathers: '%s'; give on or off.", val);
        return 0;
    }
    if (!strcmp(flag, "--roofline")) {
        if (strcmp(val, "h100") && strcmp(val, "h200") && strcmp(val, "a100"))
            return usage_error(err, errlen,
                               "--roofline: no peaks for '%s'. Choose h100, h200 or a100.", val);
        c->roofline = val;
        return 0;
    }
    if (!strcmp(flag, "--collectives")) {
        if (!strcmp(val, "ring")) c->collectives = COLLECTIVES_RING;
        else if (!strcmp(val, "mpi")) c->collectives = COLLECTIVES_MPI;
        else if (!strcmp(val, "nccl") && FSDP_GPU) c->collectives = COLLECTIVES_NCCL;
        else if (!strcmp(val, "nccl"))
            return usage_error(err, errlen,
                               "--collectives nccl needs GPUs: build the GPU binary (make gpu) and "
                               "run mpirun -np N ./fsdp-gpu. Here choose ring or mpi.");
        else
            return usage_error(err, errlen,
                               "--collectives: unknown implementation '%s'. Choose ring, mpi%s.",
                               val, FSDP_GPU ? " or nccl" : " (or nccl in the GPU build)");
        return 0;
    }
    return NOT_MINE;
}

/* One option and its value; returns 0, or 2 with a message. */
static int config_set(Config *c, const char *flag, const char *val, char *err, size_t errlen) {
    if (flag_takes_path(flag) && strlen(val) > MAX_PATH_CHARS)
        return usage_error(err, errlen,
                           "%s: the path is %zu characters long; at most %d are handled. "
                           "Use a shorter (relative) path.",
                           flag, strlen(val), (int)MAX_PATH_CHARS);
    if (!strcmp(flag, "--model")) return 0; /* applied first, in config_parse */
    int (*const groups[])(Config *, const char *, const char *, char *, size_t) = {
        config_set_shape, config_set_optimizer, config_set_run, config_set_parallel};
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
        int rc = groups[g](c, flag, val, err, errlen);
        if (rc != NOT_MINE) return rc;
    }
    return usage_error(err, errlen,
                       "this is a bug in fsdp.c: option '%s' is listed but not handled.", flag);
}

/* Switches: options that stand alone. --step alone waits for keys;
 * --step=auto is the one switch that takes a value. */
static int flag_takes_no_value(const char *flag) {
    static const char *const flags[] = {"--help",
                                        "-h",
                                        "--compare",
                                        "--check-collectives",
                                        "--step",
                                        "--view",
                                        "--wait-for-debugger",
                                        "--inline-collectives",
                                        "--forward-prefetch",
                                        "--tf32",
                                        "--no-sync",
                                        "--activation-checkpointing",
                                        "--grad-scaler",
                                        "--plan",
                                        "--cpu-offload",
                                        "--fsdp2",
                                        "--no-decay-bias-norm"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (!strcmp(flag, flags[i])) return 1;
    return 0;
}

/* Sets a switch; returns 0, 1 for --help, or 2 with a message. */
static int config_switch(Config *c, const char *flag, const char *val, char *err, size_t errlen) {
    if (!strcmp(flag, "--step")) {
        if (val && strcmp(val, "auto") != 0 && strcmp(val, "ring") != 0)
            return usage_error(err, errlen,
                               "--step=%s: the values are auto and ring (--step waits for keys; "
                               "--step=auto does not; --step=ring also pictures each ring step).",
                               val);
        c->step_mode = STEP_INTERACTIVE;
        if (val) c->step_mode = !strcmp(val, "ring") ? STEP_RING : STEP_AUTO;
        return 0;
    }
    if (val) return usage_error(err, errlen, "%s takes no value.", flag);
    if (!strcmp(flag, "--compare")) c->compare = 1;
    else if (!strcmp(flag, "--check-collectives")) c->check_collectives = 1;
    else if (!strcmp(flag, "--view")) c->view = 1;
    else if (!strcmp(flag, "--wait-for-debugger")) c->wait_for_debugger = 1;
    else if (!strcmp(flag, "--inline-collectives")) c->inline_collectives = 1;
    else if (!strcmp(flag, "--forward-prefetch")) c->forward_prefetch = 1;
    else if (!strcmp(flag, "--tf32")) c->tf32 = 1; /* the CPU computes fp32 regardless */
    else if (!strcmp(flag, "--no-sync")) c->no_sync = 1;
    else if (!strcmp(flag, "--activation-checkpointing")) c->activation_checkpointing = 1;
    else if (!strcmp(flag, "--grad-scaler")) c->grad_scaler = 1;
    else if (!strcmp(flag, "--plan")) c->plan = 1;
    else if (!strcmp(flag, "--cpu-offload")) c->cpu_offload = 1;
    else if (!strcmp(flag, "--fsdp2")) c->fsdp2 = 1;
    else if (!strcmp(flag, "--no-decay-bias-norm")) c->no_decay_bias_norm = 1;
    else return 1; /* --help, -h */
    return 0;
}

static int flag_takes_value(const char *flag) {
    static const char *const flags[] = {"--model",
                                        "--depth",
                                        "--width",
                                        "--context",
                                        "--embed-dim",
                                        "--min-params",
                                        "--strategy",
                                        "--ranks-per-node",
                                        "--reshard-after-forward",
                                        "--collectives",
                                        "--roofline",
                                        "--steps",
                                        "--batch",
                                        "--grad-accum",
                                        "--lr",
                                        "--beta1",
                                        "--beta2",
                                        "--eps",
                                        "--weight-decay",
                                        "--optimizer",
                                        "--param-dtype",
                                        "--reduce-dtype",
                                        "--init-scale",
                                        "--clip-grad-norm",
                                        "--lr-schedule",
                                        "--warmup",
                                        "--step-size",
                                        "--gamma",
                                        "--min-lr",
                                        "--seed",
                                        "--data",
                                        "--log-every",
                                        "--vram",
                                        "--net",
                                        "--trace",
                                        "--trace-clock",
                                        "--json",
                                        "--save-dir",
                                        "--save-every",
                                        "--resume",
                                        "--export",
                                        "--init-from",
                                        "--backward-prefetch",
                                        "--limit-all-gathers",
                                        "--auto-wrap",
                                        "--n-layer",
                                        "--n-embd",
                                        "--n-head",
                                        "--n-ctx",
                                        "--vocab",
                                        "--val-data",
                                        "--val-every",
                                        "--val-batches",
                                        "--sample",
                                        "--temperature",
                                        "--tokenizer",
                                        "--collective-timeout",
                                        "--attention"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (!strcmp(flag, flags[i])) return 1;
    return 0;
}

/* Splits argv into (flag, value) pairs, accepting "--flag value" and
 * "--flag=value", and hands each to `apply`. */
static int config_each_option(Config *c, int argc, char **argv, int only_model, char *err,
                              size_t errlen) {
    for (int i = 1; i < argc; i++) {
        char buf[256]; /* the flag part of "--flag=value" */
        const char *arg = argv[i], *val = NULL;
        if (strncmp(arg, "--", 2) != 0 && strcmp(arg, "-h") != 0)
            return usage_error(err, errlen,
                               "unexpected argument '%s'. Options start with --; see --help.", arg);
        const char *eq = strchr(arg, '=');
        if (eq) {
            snprintf(buf, sizeof(buf), "%.*s", (int)(eq - arg), arg);
            arg = buf;
            val = eq + 1;
        }
        if (!flag_takes_no_value(arg) && !flag_takes_value(arg))
            return usage_error(err, errlen, "unknown option '%s'. See --help for the options.",
                               arg);
        if (flag_takes_no_value(arg)) {
            int rc = config_switch(c, arg, val, err, errlen);
            if (rc == 2 || (rc == 1 && !only_model)) return rc;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc)
                return usage_error(err, errlen, "%s needs a value. See --help.", arg);
            val = argv[++i];
        }
        int rc = 0;
        if (!only_model) rc = config_set(c, arg, val, err, errlen);
        else if (!strcmp(arg, "--model")) rc = config_apply_preset(c, val, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

/* Was `flag` given on the command line (alone or as --flag=value)? */
static int flag_given(int argc, char **argv, const char *flag) {
    size_t n = strlen(flag);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], flag, n) && (argv[i][n] == '\0' || argv[i][n] == '=')) return 1;
    return 0;
}

/* Whether --net prices some link: "none" and "none+none" price nothing. */
static int config_has_network(const Config *c) {
    const NetModel *intra = NULL, *inter = NULL;
    if (!c->net || net_models_of(c->net, &intra, &inter)) return 0;
    return strcmp(intra->name, "none") != 0 || strcmp(inter->name, "none") != 0;
}

/* The model's shape: the options of one model are refused with the
 * other's. Returns 0 or 2 with a message. */
static int config_check_model(Config *c, int argc, char **argv, char *err, size_t errlen) {
    static const char *const gpt2_only[] = {"--n-head", "--n-ctx", "--vocab", "--val-data",
                                            "--val-every", "--sample", "--tokenizer",
                                            "--temperature", "--val-batches", "--attention"};
    for (size_t i = 0; i < sizeof(gpt2_only) / sizeof(gpt2_only[0]); i++)
        if (c->arch != ARCH_GPT2 && flag_given(argc, argv, gpt2_only[i]))
            return usage_error(err, errlen,
                               "%s is GPT-2's; the byte MLP (--model %s) has no such thing. Add "
                               "--model gpt2-tiny (or another GPT-2), or leave it out.",
                               gpt2_only[i], c->model_name ? c->model_name : "small");
    if (c->arch != ARCH_GPT2) return 0;
    if (flag_given(argc, argv, "--embed-dim"))
        return usage_error(err, errlen,
                           "--embed-dim is the byte MLP's; GPT-2's embeddings are --n-embd wide. "
                           "Leave it out.");
    if (c->width % c->n_head != 0)
        return usage_error(err, errlen,
                           "--n-embd %d does not divide into --n-head %d heads: each head takes "
                           "n_embd / n_head channels. Give a divisor of %d as --n-head.",
                           c->width, c->n_head, c->width);
    if (c->attention == ATTENTION_FLASH && c->width / c->n_head > FLASH_MAX_HD)
        return usage_error(err, errlen,
                           "--attention flash keeps a head's output row in registers: heads of "
                           "at most %d channels, and these are %d (n_embd / n_head). Give more "
                           "--n-head, or --attention math.",
                           FLASH_MAX_HD, c->width / c->n_head);
    if (c->context > c->n_ctx)
        return usage_error(err, errlen,
                           "--context %d is longer than the %d positions wpe holds (--n-ctx): "
                           "position %d would have no embedding. Give --context %d or less, or "
                           "a larger --n-ctx.",
                           c->context, c->n_ctx, c->n_ctx, c->n_ctx);
    if (c->vocab < 256 && !c->data_path)
        return usage_error(err, errlen,
                           "--vocab %d is smaller than the embedded corpus's 256 byte values. Use "
                           "--vocab 256 or more, or --data a token file within it.",
                           c->vocab);
    /* an option of a part that does not run would be silently ignored */
    static const char *const of_sample[] = {"--tokenizer", "--temperature"};
    static const char *const of_val[] = {"--val-data", "--val-batches"};
    for (int i = 0; i < 2; i++) {
        if (!c->sample && flag_given(argc, argv, of_sample[i]))
            return usage_error(err, errlen,
                               "%s shapes the text --sample prints, and there is none. Add "
                               "--sample N, or leave it out.",
                               of_sample[i]);
        if (!c->val_every && flag_given(argc, argv, of_val[i]))
            return usage_error(err, errlen,
                               "%s is for the validation loss, which only --val-every computes. "
                               "Add --val-every N, or leave it out.",
                               of_val[i]);
    }
    /* ... and so would one of a part that runs after steps there are none of */
    if (c->plan && (c->sample || c->val_every))
        return usage_error(err, errlen,
                           "%s needs forward passes, and --plan runs none: it books a step's "
                           "memory without computing it. Leave out %s, or --plan.",
                           c->sample ? "--sample" : "--val-every",
                           c->sample ? "--sample" : "--val-every");
    if (c->val_every && c->steps == 0)
        return usage_error(err, errlen,
                           "--val-every computes the validation loss after training steps (every "
                           "N, and the last), and --steps 0 runs none. Give --steps 1 or more, "
                           "or leave out --val-every.");
    return 0;
}

/* Mixed precision's combinations; returns 0 or 2 with a message. */
static int config_check_precision(const Config *c, int argc, char **argv, char *err,
                                  size_t errlen) {
    int fp16 = c->param_dtype == DTYPE_FP16 || c->reduce_dtype == DTYPE_FP16;
    if (fp16 && !c->grad_scaler)
        return usage_error(err, errlen,
                           "fp16 holds nothing below 2^-24: most gradients would round to zero "
                           "without loss scaling. Add --grad-scaler (PyTorch's ShardedGradScaler), "
                           "or use bf16, which has fp32's range.");
    if (flag_given(argc, argv, "--init-scale") && !c->grad_scaler)
        return usage_error(err, errlen,
                           "--init-scale is the first scale of --grad-scaler; add --grad-scaler.");
    return 0;
}

/* FSDP_GELU_FUSION=1 or 0: GPT-2's GELU inside cuBLASLt's products, or in
 * kernels of its own, on a GPU with 16-bit parameters; unset, the GPU
 * decides (kernels/transformer.h). An environment variable, as NCCL's
 * knobs are: it changes how a step is computed, not what (make bench-gpu
 * times both); the CPU build checks it and has nothing to fuse. */
static int config_gelu_fusion(Config *c, char *err, size_t errlen) {
    const char *v = getenv("FSDP_GELU_FUSION");
    c->gelu_fusion = -1;
    if (!v) return 0;
    if (!strcmp(v, "0") || !strcmp(v, "1")) {
        c->gelu_fusion = v[0] - '0';
        return 0;
    }
    return usage_error(err, errlen,
                       "FSDP_GELU_FUSION=%.40s: give 1 (GPT-2's GELU inside cuBLASLt's "
                       "products), 0 (in kernels of its own), or leave it unset (the GPU's "
                       "choice).",
                       v);
}

int config_parse(Config *c, int argc, char **argv, char *err, size_t errlen) {
    err[0] = '\0';
    config_defaults(c);
    config_apply_preset(c, "small", err, errlen);
    /* Two passes, so --model sets the preset and --depth etc. override it
     * whatever their order on the command line. */
    int rc = config_each_option(c, argc, argv, 1, err, errlen);
    if (rc == 0) rc = config_each_option(c, argc, argv, 0, err, errlen);
    if (rc == 0) rc = config_gelu_fusion(c, err, errlen);
    if (rc) return rc;
    rc = config_check_model(c, argc, argv, err, errlen);
    if (rc) return rc;
    long total = config_total_numel(c);
    if (total > (1L << 30) && !c->plan)
        return usage_error(err, errlen,
                           "the model would have %ld parameters, more than this simulator trains "
                           "(2^30). Use a smaller --width, --depth or --context, or --plan to see "
                           "its memory without training it.",
                           total);
    if (c->cpu_offload && (c->strategy == STRATEGY_NO_SHARD || c->strategy == STRATEGY_ZERO1))
        return usage_error(
            err, errlen,
            "--cpu-offload moves the shards to the host, but %s keeps whole replicas "
            "on the device, which the model computes with. Use a sharded strategy "
            "(full_shard, shard_grad_op or the hybrid ones) with it.",
            strategy_name(c->strategy));
    if (c->reshard_to && (!c->fsdp2 || (c->strategy != STRATEGY_FULL_SHARD &&
                                        c->strategy != STRATEGY_HYBRID_SHARD)))
        return usage_error(err, errlen,
                           "--reshard-after-forward %d is FSDP2's fully_shard(reshard_after_"
                           "forward=%d): give it with --fsdp2 and a strategy that reshards after "
                           "forward (full_shard, hybrid_shard).",
                           c->reshard_to, c->reshard_to);
    if (c->fsdp2 && !strategy_shards_params(c->strategy))
        return usage_error(err, errlen,
                           "--fsdp2 shards every parameter, but %s keeps whole replicas: FSDP2 "
                           "has no such strategy (PyTorch's DDP is replicate()). Use "
                           "full_shard, shard_grad_op or a hybrid one with it, or leave out "
                           "--fsdp2.",
                           strategy_name(c->strategy));
    if (c->roofline && !c->plan)
        return usage_error(err, errlen,
                           "--roofline counts the kernels of the step --plan books: add --plan.");
    if (c->plan &&
        (c->compare || c->trace_path || c->json_path || c->step_mode || c->view ||
         c->check_collectives || c->save_dir || c->resume_dir || c->export_path || c->init_from))
        return usage_error(err, errlen,
                           "--plan trains nothing and writes nothing: leave out --compare, "
                           "--trace, --json, --step, --view, --check-collectives and the "
                           "checkpoint options.");
    if (c->auto_wrap == AUTO_WRAP_TRANSFORMER && c->min_params >= 0)
        return usage_error(err, errlen,
                           "--min-params is the size policy's threshold, and --auto-wrap "
                           "transformer makes a unit of each block whatever its size. Leave out "
                           "one of them.");
    if (c->min_params < 0) c->min_params = config_block_numel(c);
    if (c->weight_decay < 0.0f) c->weight_decay = c->optimizer == OPTIMIZER_ADAM ? 0.0f : 0.01f;
    if (c->reduce_dtype == DTYPE_UNSET) c->reduce_dtype = c->param_dtype;
    rc = config_check_precision(c, argc, argv, err, errlen);
    if (rc) return rc;
    if (c->lr_schedule != LR_STEP &&
        (flag_given(argc, argv, "--step-size") || flag_given(argc, argv, "--gamma")))
        return usage_error(err, errlen,
                           "--step-size and --gamma are StepLR's: they apply to --lr-schedule "
                           "step only. Add --lr-schedule step, or leave them out.");
    if (c->lr_schedule == LR_STEP && c->step_size == 0)
        return usage_error(err, errlen,
                           "--lr-schedule step needs --step-size N: every N steps the learning "
                           "rate is multiplied by --gamma (PyTorch's StepLR has no default).");
    int decays = c->lr_schedule == LR_COSINE || c->lr_schedule == LR_LINEAR;
    if (decays && c->warmup >= c->steps)
        return usage_error(err, errlen,
                           "--lr-schedule %s decays over the steps after --warmup, but "
                           "--warmup %ld leaves none of --steps %d. Give a shorter --warmup.",
                           LR_SCHEDULE_NAMES[c->lr_schedule], c->warmup, c->steps);
    if (flag_given(argc, argv, "--min-lr") && !decays)
        return usage_error(err, errlen,
                           "--min-lr is where cosine and linear decay end: add --lr-schedule "
                           "cosine or linear, or leave --min-lr out.");
    if (decays && c->min_lr > c->lr)
        return usage_error(err, errlen,
                           "--min-lr %g is above --lr %g: the schedule would rise, not decay. "
                           "Give a --min-lr below --lr (nanoGPT: lr / 10).",
                           (double)c->min_lr, (double)c->lr);
    if (c->no_decay_bias_norm && c->weight_decay == 0.0f)
        return usage_error(err, errlen,
                           "--no-decay-bias-norm exempts biases and LayerNorm from weight decay, "
                           "but --weight-decay is 0 (%s): nothing decays. Give --weight-decay X, "
                           "or leave --no-decay-bias-norm out.",
                           c->optimizer == OPTIMIZER_ADAM ? "Adam's default" : "given");
    if (c->min_params > total)
        return usage_error(
            err, errlen,
            "--min-params %ld is larger than the whole model (%ld parameters): nothing below the "
            "root could ever reach it, so the threshold says nothing. Use a value between 1 and "
            "%ld (%ld or near it wraps the whole model as one unit).",
            c->min_params, total, total, total);
    if (c->no_sync && c->grad_accum < 2)
        return usage_error(err, errlen,
                           "--no-sync keeps the gradients of the first K-1 of --grad-accum K "
                           "micro-batches unreduced; with one micro-batch there is nothing to "
                           "keep. Add --grad-accum K (K >= 2), or leave out --no-sync.");
    if (c->save_every && !c->save_dir)
        return usage_error(err, errlen,
                           "--save-every needs --save-dir: say where the checkpoints go.");
    if (c->resume_dir && c->init_from)
        return usage_error(err, errlen,
                           "--resume and --init-from both say where training starts; give one. "
                           "(--resume continues a run with its optimizer state; --init-from starts "
                           "fresh from exported parameters.)");
    if (c->compare && (c->save_dir || c->resume_dir || c->export_path || c->init_from))
        return usage_error(err, errlen,
                           "--compare runs two trainings; checkpoint options (--save-dir, "
                           "--resume, --export, --init-from) apply to single runs only.");
    if (c->compare && c->steps == 0)
        return usage_error(err, errlen,
                           "--compare --steps 0 has no step to time or measure. Give --steps 1 "
                           "or more.");
    if (c->trace_clock_sim && !config_has_network(c))
        return usage_error(err, errlen,
                           "--trace-clock sim times the collectives with a network model, but none "
                           "is chosen. Add --net nvlink, pcie, ib or ethernet.");
    return 0;
}

/* Checks that need the world size; returns 0 or 2 with a message. */
static int config_check_world(const Config *c, int world, char *err, size_t errlen) {
    if (c->batch % world != 0) {
        int up = (c->batch / world + 1) * world;
        return usage_error(
            err, errlen,
            "--batch %d does not divide by %d ranks: like PyTorch's DistributedSampler, every rank "
            "takes the same number of samples. Use a multiple of %d, e.g. --batch %d.",
            c->batch, world, world, up);
    }
    if (c->ranks_per_node && world % c->ranks_per_node != 0) {
        int g = world > 1 ? world - 1 : 1; /* the largest divisor below N: the fewest nodes, 2 or more */
        while (world % g) g--;
        return usage_error(
            err, errlen,
            "--ranks-per-node %d does not divide %d ranks: every node holds the same "
            "number of ranks. Give a divisor of %d (e.g. %d: %d nodes of %d), or "
            "change -np.",
            c->ranks_per_node, world, world, g, world / g, g);
    }
    int hybrid = c->ranks_per_node && c->strategy == STRATEGY_HYBRID_SHARD;
    int G = hybrid ? c->ranks_per_node : world; /* the ranks that share a unit's shards */
    if (c->reshard_to && (G % c->reshard_to != 0 || c->reshard_to >= G))
        return usage_error(err, errlen,
                           "--reshard-after-forward %d: after forward each unit is resharded to "
                           "groups of %d ranks, which must divide the %d ranks that share its "
                           "shards, and be fewer (%d is --strategy full_shard's own choice). Give "
                           "a divisor of %d between 2 and %d, e.g. the ranks of one node.",
                           c->reshard_to, c->reshard_to, G, G, G, G / 2);
    if ((c->batch / world) % c->grad_accum != 0)
        return usage_error(err, errlen,
                           "--grad-accum %d does not divide the %d samples each of %d ranks takes "
                           "(--batch %d): every micro-batch must be the same size. Give a "
                           "--grad-accum that divides %d, or a --batch that is a multiple of %d.",
                           c->grad_accum, c->batch / world, world, c->batch, c->batch / world,
                           world * c->grad_accum);
    return 0;
}

#endif /* FSDP_RUN_CLI_H */
