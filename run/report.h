/* ============================================================================
 * run/report.h — what a run prints and writes: the header, the unit and
 * rank tables, the step's time breakdown, and --json.
 *
 * defines: RunSummary, StepLog, print_header, print_unit_table,
 *          gather_stats, print_offload_table, print_rank_table,
 *          print_step_breakdown, json_write
 *
 * Plumbing: the program around fsdp.c (main.c includes it after fsdp.c,
 * one translation unit); nothing in fsdp.c calls it.
 * ========================================================================== */
#ifndef FSDP_RUN_REPORT_H
#define FSDP_RUN_REPORT_H
#include "../core.h"
#include "../trainer.h"
#include "../files.h"
#include "../kernels/backend.h"
#include "../sim/sim.h" /* net_models_of */
#include "../optim/lr_schedule.h"
#include <limits.h>

/* A whole run's figures, for the end of run and --compare's table */
typedef struct {
    double final_loss, seconds;
    int first, steps, world, batch; /* steps run: first .. first + steps - 1 */
    double peak[MEM_NUM_CATEGORIES];   /* max over ranks */
    double peak_total;                 /* max over ranks */
    double bytes_sent[COMM_NUM_KINDS]; /* per rank per step, max over ranks */
    long calls[COMM_NUM_KINDS];        /* per step */
} RunSummary;

/* What each step of a run did, for --json: one entry per step run */
typedef struct {
    float *loss, *grad_norm, *lr; /* the grad norm when clipping; the lr the step used */
    float *loss_scale, *skipped;  /* --grad-scaler: the scale, and 1 if inf/NaN skipped it */
    float *val_loss;              /* --val-every: the validation loss after it; NaN: none */
    double *seconds;
} StepLog;

static void print_header(const Trainer *t) {
    const Config *c = &t->cfg;
    if (c->arch == ARCH_GPT2)
        printf("fsdp.c | model %s (GPT-2): vocab %d, n_ctx %d, n_embd %d, n_layer %d, n_head %d; "
               "sequences of T=%d | %ld parameters\n",
               c->model_name, c->vocab, c->n_ctx, c->width, c->depth, c->n_head, c->context,
               t->model.total_numel);
    else
        printf("fsdp.c | model %s: V=%d C=%d T=%d D=%d L=%d | %ld parameters\n",
               c->model_name ? c->model_name : "custom", c->vocab, c->embed_dim, c->context,
               c->width, c->depth, t->model.total_numel);
    char wrap[64];
    if (c->auto_wrap == AUTO_WRAP_TRANSFORMER)
        snprintf(wrap, sizeof(wrap), "transformer (a unit per block)");
    else snprintf(wrap, sizeof(wrap), "min_params %ld", c->min_params);
    printf("strategy %s on %d rank%s | global batch %d (%d per rank) | collectives %s | auto-wrap "
           "%s\n",
           strategy_name(c->strategy), t->comm.world, t->comm.world > 1 ? "s" : "", c->batch,
           t->local_batch, COLLECTIVES_NAMES[c->collectives], wrap);
    if (c->fsdp2)
        printf("FSDP2 (fully_shard): every parameter sharded on its rows, ceil(rows / %d) a rank; "
               "copied out after each all-gather, in before each reduce-scatter\n",
               t->shard_world);
    if (t->comm.group[GROUP_REPLICA])
        printf("hybrid sharding: units sharded over the %d ranks of each node, replicated on %d "
               "nodes (--ranks-per-node %d)\n",
               t->shard_world, t->comm.world / t->shard_world, t->shard_world);
    if (c->grad_accum > 1)
        printf("gradient accumulation: %d micro-batches of %d per rank per step, %s\n",
               c->grad_accum, t->micro_batch,
               c->no_sync ? "reduce-scattered once (--no-sync)" : "each reduce-scattered");
    if (c->cpu_offload)
        printf("cpu offload: shards and AdamW's state in host memory, the optimizer on the CPU\n");
    if (c->activation_checkpointing)
        printf("activation checkpointing: each block keeps its input and runs again in backward\n");
    if (c->attention == ATTENTION_FLASH)
        printf("attention: fused (FlashAttention): one lse a query row kept, the probabilities "
               "recomputed in backward\n");
    if (c->param_dtype != DTYPE_FP32 || c->reduce_dtype != DTYPE_FP32)
        printf("mixed precision: param_dtype %s, reduce_dtype %s, fp32 master parameters and AdamW "
               "state%s\n",
               DTYPE_NAMES[c->param_dtype], DTYPE_NAMES[c->reduce_dtype],
               c->grad_scaler ? "; dynamic loss scaling" : "");
    char vram[32];
    if (c->vram)
        printf("simulated VRAM: %s per rank (--vram)\n",
               human_bytes((double)c->vram, vram, sizeof(vram)));
    if (t->corpus.entropy_floor >= 0)
        printf("data: embedded synthetic corpus, %ld bytes; entropy floor %.3f nats/byte (uniform "
               "guess: ln 256 = %.3f)\n",
               t->corpus.len, t->corpus.entropy_floor, log(256.0));
    else /* a token file's tokens are 2 bytes each: count what the model reads */
        printf("data: %s, %ld %s\n", c->data_path, t->corpus.len,
               t->corpus.tokens ? "tokens" : "bytes");
}

/* The unit table: what auto-wrap decided and what each rank holds. */
static void print_unit_table(const Trainer *t) {
    const Model *m = &t->model;
    printf("\n%-4s %-34s %10s %10s %10s %14s\n", "unit", "modules", "params", "padded",
           "shard/rank", "bytes/rank*");
    for (int ui = 0; ui < t->n_units; ui++) {
        const Unit *u = &t->units[ui];
        char mods[256] = "";
        size_t used = 0;
        const char *label = ui == 0 ? "(root)" : m->modules[u->root_module].name;
        size_t prefix = ui == 0 ? 0 : strlen(label) + 1; /* "blocks.0.fc1" -> "fc1" */
        for (int i = 0; i < m->n_modules && used < sizeof(mods);
             i++) { /* modules holding this unit's parameters */
            const Module *mod = &m->modules[i];
            if (mod->n_params == 0 || m->params[mod->params[0]].unit != ui) continue;
            const char *short_name = strlen(mod->name) > prefix ? mod->name + prefix : "(itself)";
            used += (size_t)snprintf(mods + used, sizeof(mods) - used, "%s%s", used ? "," : "",
                                     short_name);
        }
        char both[FSDP_MAX_NAME + 8 + 256];
        snprintf(both, sizeof(both), "%s: %s", label, u->numel ? mods : "(no parameters)");
        if (strlen(both) > 34) strcpy(both + 31, "...");
        printf("%4d %-34s %10ld %10ld %10ld %14ld\n", ui, both, u->numel, u->padded, u->shard,
               u->shard * 4L * (long)sizeof(float));
    }
    printf("* parameters + gradients + optimizer state of the shard: 16 bytes an element (fp32: "
           "4 + 4 + 8; mixed precision: 2 + 2 + 12 with the fp32 master)\n\n");
}

/* Rank 0 collects every rank's ledger peaks and traffic for the tables.
 * These reports are not training traffic, so they bypass the counted
 * collectives of comm/. */
static void gather_stats(Trainer *t, double *peaks, double *sent) {
    double mine[MEM_NUM_CATEGORIES + 1 + COMM_NUM_KINDS];
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) mine[k] = (double)t->ledger.peak[k];
    mine[MEM_NUM_CATEGORIES] = (double)t->ledger.peak_total;
    for (int k = 0; k < COMM_NUM_KINDS; k++)
        mine[MEM_NUM_CATEGORIES + 1 + k] = t->comm.bytes_sent[k];
    int n = MEM_NUM_CATEGORIES + 1 + COMM_NUM_KINDS;
    double *all =
        (double *)host_malloc((size_t)n * t->comm.world * sizeof(double), "gather the statistics");
    mpiCheck(MPI_Gather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, t->comm.comm));
    if (t->comm.rank == 0) {
        for (int r = 0; r < t->comm.world; r++) {
            memcpy(peaks + (long)r * (MEM_NUM_CATEGORIES + 1), all + (long)r * n,
                   (MEM_NUM_CATEGORIES + 1) * sizeof(double));
            memcpy(sent + (long)r * COMM_NUM_KINDS, all + (long)r * n + MEM_NUM_CATEGORIES + 1,
                   COMM_NUM_KINDS * sizeof(double));
        }
    }
    free(all);
    /* --cpu-offload: the host's memory, apart */
    double host[MEM_NUM_CATEGORIES];
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) host[k] = (double)t->ledger.host_peak[k];
    free(t->host_peaks);
    t->host_peaks = t->comm.rank == 0 ? (double *)calloc((size_t)t->comm.world * MEM_NUM_CATEGORIES,
                                                         sizeof(double))
                                      : NULL;
    mpiCheck(MPI_Gather(host, MEM_NUM_CATEGORIES, MPI_DOUBLE, t->host_peaks, MEM_NUM_CATEGORIES,
                        MPI_DOUBLE, 0, t->comm.comm));
}

/* --cpu-offload: the host's memory per rank, and the copies over PCIe */
static void print_offload_table(const Trainer *t, int steps) {
    int N = t->comm.world;
    printf("host memory per rank, MiB (--cpu-offload; --vram counts the device alone)\n");
    for (int k = MEM_PARAM_SHARD; k <= MEM_OPTIM_STATE; k++) {
        printf("  %-34s", MEM_CATEGORY_NAMES[k]);
        for (int r = 0; r < N; r++)
            printf(" %9.3f", mib(t->host_peaks[(long)r * MEM_NUM_CATEGORIES + k]));
        printf("\n");
    }
    printf("copies on rank 0 per step over PCIe: to the device %ld (%.3f MiB), to the host %ld "
           "(%.3f MiB); %.3f ms on sim/net.c's pcie\n",
           t->copy_calls[TO_DEVICE] / steps, mib(t->copy_bytes[TO_DEVICE] / steps),
           t->copy_calls[TO_HOST] / steps, mib(t->copy_bytes[TO_HOST] / steps),
           1e3 * t->copy_sim_seconds / steps);
}

static void print_rank_table(const Trainer *t, const double *peaks, const double *sent) {
    int N = t->comm.world;
    printf("\npeak memory per rank, MiB (ledger)  ");
    for (int r = 0; r < N; r++) printf("  rank %-3d", r);
    printf("\n");
    for (int k = 0; k <= MEM_NUM_CATEGORIES; k++) {
        printf("  %-34s",
               k < MEM_NUM_CATEGORIES ? MEM_CATEGORY_NAMES[k] : "total (peak of the sum)");
        for (int r = 0; r < N; r++)
            printf(" %9.3f", mib(peaks[(long)r * (MEM_NUM_CATEGORIES + 1) + k]));
        printf("\n");
    }
    printf("traffic per rank, MiB sent (= received, ring volume)\n");
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        char label[64];
        snprintf(label, sizeof(label), "%s (%ld calls)", COMM_KIND_NAMES[k], t->comm.calls[k]);
        printf("  %-34s", label);
        for (int r = 0; r < N; r++) printf(" %9.3f", mib(sent[(long)r * COMM_NUM_KINDS + k]));
        printf("\n");
    }
    printf("  (all_gather includes the loss: one float per rank per step)\n");
    if (t->cfg.cpu_offload) print_offload_table(t, t->steps_run ? t->steps_run : 1);
}

/* A run of `seconds` over `steps` steps, on rank 0: the time it computed
 * (the rest it waited for collectives), and, with --net, this schedule
 * replayed on that link (comm_sim_waited): its length per step, and how
 * much of the collectives ran while the main thread computed (hidden). */
typedef struct {
    double compute, wait;     /* seconds, the whole run, this machine */
    double sim;               /* the collectives on --net, the whole run */
    double step, hidden;      /* the schedule on --net, per step */
} StepBreakdown;

static StepBreakdown step_breakdown(const Trainer *t, double seconds, int steps) {
    StepBreakdown b = {seconds - t->comm.wall_seconds, t->comm.wall_seconds, 0.0, 0.0, 0.0};
    for (int k = 0; k < COMM_NUM_KINDS; k++) b.sim += t->comm.sim_seconds[k];
    b.step = (seconds + t->comm.sim_shift) / steps;
    /* a schedule never costs more than compute + collectives in series;
     * what would show below zero is rounding ("-0.000 ms") */
    b.hidden = fmax((b.compute + b.sim) / steps - b.step, 0.0);
    return b;
}

/* ------------------------------------------------------------------------
 * --json FILE: the run's figures for programs (the notebooks), so nothing
 * needs to scrape the tables above. The schema is in docs/instruments.md ("--json FILE");
 * every number is the one the tables print, unrounded: bytes in bytes,
 * times in seconds. Written by rank 0, atomically, through files.c.
 * --------------------------------------------------------------------- */
static void json_numbers(FILE *f, const double *x, int n, long stride) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.17g", i ? ", " : "", x[(long)i * stride]);
    fputc(']', f);
}

/* The config's fields for the options of lectures 10-15 (accumulation,
 * precision, offload, checkpointing), as one piece of JSON text. */
static const char *json_options(const Trainer *t) {
    static char out[512];
    const Config *c = &t->cfg;
    snprintf(out, sizeof(out),
             "\"grad_accum\": %d, \"micro_batch\": %d, \"no_sync\": %s, "
             "\"activation_checkpointing\": %s, \"param_dtype\": \"%s\", \"reduce_dtype\": \"%s\", "
             "\"grad_scaler\": %s, \"ranks_per_node\": %d, \"cpu_offload\": %s, "
             "\"attention\": \"%s\", \"fsdp2\": %s, \"reshard_after_forward\": %d, ",
             c->grad_accum, t->micro_batch, c->no_sync ? "true" : "false",
             c->activation_checkpointing ? "true" : "false", DTYPE_NAMES[c->param_dtype],
             DTYPE_NAMES[c->reduce_dtype], c->grad_scaler ? "true" : "false",
             c->ranks_per_node ? c->ranks_per_node : t->comm.world,
             c->cpu_offload ? "true" : "false",
             c->attention == ATTENTION_FLASH ? "flash" : "math", c->fsdp2 ? "true" : "false",
             c->reshard_to);
    return out;
}

static void json_config(FILE *f, const Trainer *t) {
    static const char *const prefetch[] = {"pre", "post", "none"};
    const Config *c = &t->cfg;
    fprintf(f,
            "  \"config\": {\"model\": \"%s\", \"vocab\": %d, \"embed_dim\": %d, \"context\": %d, "
            "\"width\": %d, \"depth\": %d, \"arch\": \"%s\", \"n_head\": %d, \"n_ctx\": %d, "
            "\"auto_wrap\": \"%s\", \"strategy\": \"%s\", \"world\": %d, \"batch\": %d, "
            "\"local_batch\": %d, \"steps\": %d, \"min_params\": %ld, \"collectives\": \"%s\", "
            "\"backward_prefetch\": \"%s\", \"forward_prefetch\": %s, \"limit_all_gathers\": %s, "
            "\"optimizer\": \"%s\", \"lr\": %.7g, \"beta1\": %.7g, \"beta2\": %.7g, "
            "\"eps\": %.7g, \"weight_decay\": %.7g, \"no_decay_bias_norm\": %s, "
            "\"clip_grad_norm\": %.7g, \"lr_schedule\": \"%s\", \"warmup\": %ld, "
            "\"step_size\": %ld, \"gamma\": %.7g, \"min_lr\": %.7g, %s"
            "\"seed\": %llu, \"vram\": %zu, \"net\": \"%s\", \"backend\": \"%s\"},\n",
            c->model_name ? c->model_name : "custom", c->vocab, c->embed_dim, c->context, c->width,
            c->depth, c->arch == ARCH_GPT2 ? "gpt2" : "mlp", c->n_head, c->n_ctx,
            c->auto_wrap == AUTO_WRAP_TRANSFORMER ? "transformer" : "size",
            strategy_name(c->strategy), t->comm.world, c->batch, t->local_batch, c->steps,
            c->min_params, COLLECTIVES_NAMES[c->collectives], prefetch[c->backward_prefetch],
            c->forward_prefetch ? "true" : "false", c->limit_all_gathers ? "true" : "false",
            c->optimizer == OPTIMIZER_ADAM ? "adam" : "adamw", (double)c->lr, (double)c->beta1,
            (double)c->beta2, (double)c->eps, (double)c->weight_decay,
            c->no_decay_bias_norm ? "true" : "false", (double)c->clip_grad_norm,
            LR_SCHEDULE_NAMES[c->lr_schedule], c->warmup, c->step_size, (double)c->gamma,
            (double)c->min_lr, json_options(t), (unsigned long long)c->seed, c->vram,
            c->net ? c->net : "none",
            FSDP_GPU ? "gpu" : "cpu");
}

static void json_units(FILE *f, const Trainer *t) {
    fprintf(f, "  \"parameters\": %ld,\n  \"units\": [", t->model.total_numel);
    for (int ui = 0; ui < t->n_units; ui++) {
        const Unit *u = &t->units[ui];
        const char *module = t->model.modules[u->root_module].name;
        fprintf(f,
                "%s\n    {\"index\": %d, \"module\": \"%s\", \"numel\": %ld, \"padded\": %ld, "
                "\"shard\": %ld}",
                ui ? "," : "", ui, *module ? module : "(root)", u->numel, u->padded, u->shard);
    }
    fprintf(f, "\n  ],\n");
}

static void json_steps(FILE *f, const Trainer *t, const RunSummary *s, const StepLog *log) {
    fprintf(f, "  \"steps\": [");
    for (int i = 0; i < s->steps; i++) {
        fprintf(f, "%s\n    {\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"seconds\": %.9g",
                i ? "," : "", s->first + i + 1, (double)log->loss[i], (double)log->lr[i],
                log->seconds[i]);
        if (t->cfg.clip_grad_norm > 0.0f)
            fprintf(f, ", \"grad_norm\": %.9g", (double)log->grad_norm[i]);
        if (t->cfg.grad_scaler)
            fprintf(f, ", \"loss_scale\": %.9g, \"skipped\": %s", (double)log->loss_scale[i],
                    log->skipped[i] ? "true" : "false");
        if (!isnan(log->val_loss[i])) fprintf(f, ", \"val_loss\": %.9g", (double)log->val_loss[i]);
        fprintf(f, "}");
    }
    fprintf(f, "\n  ],\n  \"seconds\": %.9g,\n", s->seconds);
}

static void json_memory_and_traffic(FILE *f, const Trainer *t, const double *peaks,
                                    const double *sent) {
    int N = t->comm.world, M = MEM_NUM_CATEGORIES + 1;
    fprintf(f, "  \"memory_peak_bytes\": {");
    for (int k = 0; k <= MEM_NUM_CATEGORIES; k++) {
        fprintf(f, "%s\n    \"%s\": ", k ? "," : "",
                k < MEM_NUM_CATEGORIES ? MEM_CATEGORY_NAMES[k] : "total");
        json_numbers(f, peaks + k, N, M); /* one per rank */
    }
    fprintf(f, "\n  },\n  \"collectives\": {");
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        fprintf(f, "%s\n    \"%s\": {\"calls\": %ld, \"bytes_sent\": ", k ? "," : "",
                COMM_KIND_NAMES[k], t->comm.calls[k]);
        json_numbers(f, sent + k, N, COMM_NUM_KINDS); /* one per rank, the whole run */
        fprintf(f, ", \"sim_seconds\": %.9g}", t->comm.sim_seconds[k]);
    }
    fprintf(f, "\n  }");
    if (!t->cfg.cpu_offload) return;
    fprintf(f, ",\n  \"host_memory_peak_bytes\": {");
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) {
        fprintf(f, "%s\n    \"%s\": ", k ? "," : "", MEM_CATEGORY_NAMES[k]);
        json_numbers(f, t->host_peaks + k, N, MEM_NUM_CATEGORIES);
    }
    fprintf(f,
            "\n  },\n  \"offload_copies\": {\"to_device\": {\"calls\": %ld, \"bytes\": %.17g}, "
            "\"to_host\": {\"calls\": %ld, \"bytes\": %.17g}, \"sim_seconds\": %.9g}",
            t->copy_calls[TO_DEVICE], t->copy_bytes[TO_DEVICE], t->copy_calls[TO_HOST],
            t->copy_bytes[TO_HOST], t->copy_sim_seconds);
}

static int json_write(const Trainer *t, const RunSummary *s, const StepLog *log,
                      const double *peaks, const double *sent, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) FATAL("the machine is out of host memory", "cannot build the JSON summary");
    fprintf(f, "{\n  \"schema\": \"fsdp.c run\",\n  \"version\": 1,\n");
    json_config(f, t);
    json_units(f, t);
    json_steps(f, t, s, log);
    json_memory_and_traffic(f, t, peaks, sent);
    StepBreakdown b = step_breakdown(t, s->seconds, s->steps ? s->steps : 1);
    fprintf(f, ",\n  \"rank0_compute_seconds\": %.9g,\n  \"rank0_wait_seconds\": %.9g", b.compute,
            b.wait);
    const NetModel *net = t->comm.net;
    if (net && net->bandwidth > 0.0) /* this schedule on --net, per step */
        fprintf(f, ",\n  \"sim_step_seconds\": %.9g,\n  \"sim_hidden_seconds\": %.9g", b.step,
                b.hidden);
    fprintf(f, "\n}\n");
    fclose(f);
    OutFile out;
    int rc = out_open(&out, "--json", t->cfg.json_path, err, errlen);
    if (rc == 0) {
        out_write(&out, text, len);
        rc = out_commit(&out, err, errlen);
    }
    free(text);
    return rc ? 1 : 0;
}

/* Where a step's time went on rank 0, and what the collectives would cost
 * on the --net interconnect instead of the simulator's shared memory. */
static void print_step_breakdown(const Trainer *t, double seconds, int steps) {
    const Config *c = &t->cfg;
    StepBreakdown b = step_breakdown(t, seconds, steps);
    double wait = b.wait, compute = b.compute;
    if (c->collectives == COLLECTIVES_NCCL && c->trace_path)
        printf("per step on rank 0: collectives busy %.2f ms on the communication stream "
               "(CUDA events), beside the compute stream's kernels\n",
               1e3 * t->comm.gpu_busy_seconds / steps);
    else if (c->collectives == COLLECTIVES_NCCL)
        printf("per step on rank 0: the collectives run on their own CUDA stream and the host "
               "never waits for them (--trace times them)\n");
    else
        printf("per step on rank 0: compute %.2f ms, waiting for collectives %.2f ms (this "
               "machine)\n",
               1e3 * compute / steps, 1e3 * wait / steps);
    const NetModel *net = t->comm.net;
    if (!net || net->bandwidth <= 0.0) return;
    double sim = b.sim;
    const NetModel *intra, *inter;
    net_models_of(c->net, &intra, &inter);
    char where[160];
    snprintf(where, sizeof(where), "%s", intra->source);
    if (intra != inter) /* two links: say which is which */
        snprintf(where, sizeof(where), "%s within a node of %d ranks, %s between nodes",
                 intra->name, c->ranks_per_node ? c->ranks_per_node : t->comm.world, inter->name);
    printf("on %s (%s): the collectives take %.3f ms per step (all_gather %.3f, reduce_scatter "
           "%.3f, all_reduce %.3f)\n",
           c->net, where, 1e3 * sim / steps, 1e3 * t->comm.sim_seconds[COMM_ALL_GATHER] / steps,
           1e3 * t->comm.sim_seconds[COMM_REDUCE_SCATTER] / steps,
           1e3 * t->comm.sim_seconds[COMM_ALL_REDUCE] / steps);
    static const char *const prefetch[] = {"pre", "post", "none"};
    double step = b.step, hidden = b.hidden;
    printf("  this schedule there (backward prefetch %s, forward prefetch %s, %s): %.2f ms per "
           "step, %.3f ms of the collectives hidden behind compute (%.0f%%)\n",
           prefetch[c->backward_prefetch], c->forward_prefetch ? "on" : "off",
           t->comm.threaded ? "communication thread" : "inline collectives", 1e3 * step,
           1e3 * hidden, sim > 0 ? 100.0 * hidden * steps / sim : 0.0);
}

#endif /* FSDP_RUN_REPORT_H */
