/* ============================================================================
 * main.c — the program around fsdp.c
 *
 * fsdp.c is the algorithm: units, shards, the lifecycle, sharded AdamW, one
 * training step, checkpoints. This file is what makes it a program: the
 * command line (run/cli.h), the training loop and --plan, what a run prints
 * and writes (run/report.h), --compare, and main. It #includes fsdp.c, so
 * the whole program is one translation unit in which everything is static
 * but the API fsdp.h and trainer.h declare (the hooks, the model's entry
 * points), and `nvcc -x cu main.c` compiles the same text for GPUs. The dependency
 * runs one way: this file calls fsdp.c, never the reverse.
 *
 * Build (the Makefile does this for you):
 *   mpicc -O2 -std=c11 main.c files.c formats.c sim/net.c sim/sim.c sim/record.c \
 *         sim/check.c sim/show.c -o fsdp -lm
 * Test programs #include this file with FSDP_NO_MAIN defined: everything
 * but main().
 * ========================================================================== */
#include "fsdp.c"

/* defines: activations_alloc, model_forward, model_backward, block_recompute
 *          (activation checkpointing) and the layers' glue (weight_of, lowp, ...):
 *          the model FSDP wraps, with fsdp.c's hooks at every module */
#include "model/mlp.h"
/* defines: gpt2_activations_alloc, gpt2_load_batch, gpt2_forward, gpt2_backward (GPT-2, on
 *          the same hooks; activation checkpointing reruns a whole block) */
#include "model/gpt2.h"

/* defines: config_usage, config_parse, config_check_world */
#include "run/cli.h"
/* defines: RunSummary, StepLog, print_header, print_unit_table, gather_stats,
 *          print_rank_table, print_step_breakdown, json_write */
#include "run/report.h"

/* defines: val_open, print_val_loss, sample_print, tokenizer_load (GPT-2) */
#include "run/generate.h"

/* defines: step_model_flops, print_roofline (--plan --roofline GPU) */
#include "sim/roofline.h"

/* defines: run_lock_dirs (one run per --save-dir: its lock, taken before step 1) */
#include "io/lock.h"

/* ------------------------------------------------------------------------
 * The training loop
 *
 * Everything a run is: build the trainer, start from scratch, from a
 * checkpoint (--resume) or from exported parameters (--init-from), take
 * trainer_step after trainer_step, save checkpoints as asked, and report.
 * --------------------------------------------------------------------- */

/* A run's first step computes its loss before any optimizer step: a loss
 * that is not a number there comes from the parameters the run started
 * from, and no --lr made it. So the message names where they came from:
 * --init-from's file, --resume's checkpoint, or the initialisation. */
static void print_cannot_start(const Config *cfg, int step, double loss) {
    fprintf(stderr, "error: the loss is %g at step %d, this run's first, computed from the "
                    "parameters it started from before any step changed them.\n", loss, step + 1);
    if (cfg->init_from)
        fprintf(stderr, "HINT: no learning rate has acted yet: the weights --init-from %s "
                        "loaded overflow the forward pass (too large, or exported from a run "
                        "that had diverged). Export them again from a sound run, or leave out "
                        "--init-from.\n", cfg->init_from);
    else if (cfg->resume_dir)
        fprintf(stderr, "HINT: no step of this run has acted yet: the parameters checkpoint %s "
                        "holds overflow the forward pass; the run that saved it was diverging. "
                        "--resume from an earlier checkpoint (or start again) with a lower --lr "
                        "(it is %g) or --clip-grad-norm 1.0.\n", cfg->resume_dir, (double)cfg->lr);
    else
        fprintf(stderr, "HINT: no learning rate has acted yet: the initialised model overflows "
                        "its first forward pass in --param-dtype %s. %s\n",
                DTYPE_NAMES[cfg->param_dtype],
                cfg->param_dtype == DTYPE_FP16 ? "fp16 ends at 65504: use bf16 (fp32's range)."
                                               : "That is a bug: report the command line.");
}

/* The loss is the same number on every rank (global_mean_loss), so every
 * rank sees it leave the numbers at the same step and stops there, before
 * a checkpoint of NaN parameters could be saved: exit 5. At the run's
 * first step no learning rate can be the cause (print_cannot_start). */
static void stop_diverged(const Config *cfg, int root, int step, long first, double loss) {
    if (root && step == first) {
        fflush(stdout);
        print_cannot_start(cfg, step, loss);
        fflush(stderr);
    } else if (root) {
        fflush(stdout);
        fprintf(stderr,
                "error: the loss is %g at step %d: training diverged, and every step after this "
                "one would train on NaN.\n"
                "HINT: lower --lr (it is %g; the default is 0.003), or clip the gradients "
                "(--clip-grad-norm 1.0, PyTorch's clip_grad_norm_).\n",
                loss, step + 1, (double)cfg->lr);
        fflush(stderr);
    }
    exit_all(5);
}

/* The learning rate the last step used (a step the loss scaler skipped
 * used none: the one the next step will use) */
static float step_lr(const Trainer *t) {
    return lr_at(&t->cfg, t->skipped_step ? t->adam_step : t->adam_step - 1);
}

/* What the step line adds for the optimizer's options, into note: the
 * learning rate the step used when a schedule changes it, with
 * --clip-grad-norm the norm before clipping, with --grad-scaler the scale.
 * Each part is cut, never written past the end, whatever its numbers. */
static const char *optimizer_note(const Trainer *t, char *note, size_t len) {
    const Config *c = &t->cfg;
    char lr[32] = "", norm[96] = "", scale[96] = "";
    if (c->lr_schedule != LR_CONSTANT || c->warmup > 0)
        snprintf(lr, sizeof(lr), " | lr %.6f", (double)step_lr(t));
    if (c->clip_grad_norm > 0.0f)
        snprintf(norm, sizeof(norm), " | grad norm %.4f%s", (double)t->grad_norm,
                 t->grad_norm > c->clip_grad_norm ? " (clipped)" : "");
    if (c->grad_scaler) /* the scale the step used, and whether inf/NaN skipped it */
        snprintf(scale, sizeof(scale), " | loss scale %.0f%s", (double)t->step_scale,
                 t->skipped_step ? " (inf/NaN: step skipped)" : "");
    snprintf(note, len, "%s%s%s", lr, norm, scale);
    return note;
}

/* Where training starts: step 0, or --init-from's parameters, or a
 * checkpoint (--resume) and the step it left off at. Checks that --save-dir
 * can take this run's saves before any step is spent. */
static long run_start(Trainer *t) {
    const Config *cfg = &t->cfg;
    long first = 0;
    if (cfg->init_from && trainer_init_from(t, cfg->init_from)) exit_all(2);
    if (cfg->resume_dir && ckpt_load(t, cfg->resume_dir, &first)) exit_all(2);
    if ((cfg->init_from || cfg->resume_dir) && is_zero1(t)) units_gather_replicas(t);
    if (cfg->save_dir && ckpt_check_save_dir(t, first)) exit_all(2);
    if (t->comm.rank != 0) return first;
    if (cfg->resume_dir && first >= cfg->steps)
        printf("the checkpoint is at step %ld and --steps is %d: nothing to train\n", first,
               cfg->steps);
    else if (cfg->steps == 0)
        printf("--steps 0: nothing to train; the model stays as initialised\n");
    return first;
}

/* The step log (--json): one entry per step run, each series its own array */
static StepLog step_log_create(long steps) {
    size_t n = (size_t)steps + 1;
    StepLog log = {(float *)host_calloc(n, sizeof(float), "log steps"),
                   (float *)host_calloc(n, sizeof(float), "log steps"),
                   (float *)host_calloc(n, sizeof(float), "log steps"),
                   (float *)host_calloc(n, sizeof(float), "log steps"),
                   (float *)host_calloc(n, sizeof(float), "log steps"),
                   (float *)host_calloc(n, sizeof(float), "log steps"),
                   (double *)host_calloc(n, sizeof(double), "log steps")};
    for (size_t i = 0; i < n; i++) log.val_loss[i] = NAN; /* a step without validation */
    return log;
}
static void step_log_record(StepLog *log, long i, const Trainer *t, double loss, double seconds) {
    log->loss[i] = (float)loss;
    log->grad_norm[i] = t->grad_norm;
    log->lr[i] = step_lr(t);
    log->loss_scale[i] = t->step_scale;
    log->skipped[i] = (float)t->skipped_step;
    log->seconds[i] = seconds;
}
static void step_log_free(StepLog *log) {
    free(log->loss);
    free(log->grad_norm);
    free(log->lr);
    free(log->loss_scale);
    free(log->skipped);
    free(log->val_loss);
    free(log->seconds);
}

/* The tokens a step predicts: one a sample for the MLP, T for GPT-2 */
static double tokens_per_step(const Config *c) {
    return (double)c->batch * (c->arch == ARCH_GPT2 ? c->context : 1);
}

/* Rank 0's line for a step, every --log-every steps and after the last */
static void print_step_line(const Trainer *t, int step, double loss, double seconds) {
    const Config *cfg = &t->cfg;
    if (t->comm.rank != 0 || sim_owns_terminal(&t->sim)) return;
    if (step % cfg->log_every != 0 && step != cfg->steps - 1) return;
    char note[256];
    printf("step %5d/%d | loss %.4f | %7.2f ms | %9.0f tok/s | rank 0 memory %.3f MiB "
           "(peak %.3f)%s\n",
           step + 1, cfg->steps, loss, seconds * 1e3, tokens_per_step(cfg) / seconds,
           mib((double)t->ledger.current_total), mib((double)t->ledger.peak_total),
           optimizer_note(t, note, sizeof(note)));
}

/* --trace: every rank's record in one file (the verdict is every rank's) */
static void write_trace(Trainer *t, const RunSummary *s) {
    const Config *cfg = &t->cfg;
    SimRunSummary run = {s->seconds, s->final_loss, s->steps};
    char err[4096];
    if (sim_trace_write(&t->sim, &t->comm, &run, cfg->trace_path, cfg->trace_clock_sim, err,
                        sizeof(err)) != 0) {
        if (t->comm.rank == 0) fprintf(stderr, "error: %s\n", err);
        exit_all(1);
    }
    if (t->comm.rank == 0)
        printf("trace written to %s (%s clock): open it at https://ui.perfetto.dev or "
               "chrome://tracing\n",
               cfg->trace_path, cfg->trace_clock_sim ? "simulated" : "real");
}

/* On rank 0: the run's peaks and traffic per step, the largest over the
 * ranks (peaks and sent hold every rank's, from gather_stats) */
static void summarize(RunSummary *s, const Trainer *t, const double *peaks, const double *sent) {
    for (int r = 0; r < s->world; r++) {
        const double *mine = peaks + (long)r * (MEM_NUM_CATEGORIES + 1);
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) s->peak[k] = fmax(s->peak[k], mine[k]);
        s->peak_total = fmax(s->peak_total, mine[MEM_NUM_CATEGORIES]);
        for (int k = 0; k < COMM_NUM_KINDS; k++)
            s->bytes_sent[k] =
                fmax(s->bytes_sent[k], sent[(long)r * COMM_NUM_KINDS + k] / s->steps);
    }
    for (int k = 0; k < COMM_NUM_KINDS; k++) s->calls[k] = t->comm.calls[k] / s->steps;
}

/* Rank 0's end of a run: speed, where a step's time went, and the memory
 * and traffic of every rank */
static void print_run_end(const Trainer *t, const RunSummary *s, const double *peaks,
                          const double *sent, int rank_table) {
    printf("\n%d steps in %.2f s: %.2f ms/step, %.0f tok/s (one token = one predicted %s)\n",
           s->steps, s->seconds, 1e3 * s->seconds / s->steps,
           tokens_per_step(&t->cfg) * s->steps / s->seconds,
           t->cfg.arch == ARCH_GPT2 ? "token; a step predicts batch x context" : "byte");
    print_step_breakdown(t, s->seconds, s->steps);
    if (rank_table) print_rank_table(t, peaks, sent);
    backend_print_memory(t->ledger.peak_total);
}

/* --json: written by rank 0; every rank learns whether it was */
static void write_json(Trainer *t, const RunSummary *s, const StepLog *log, const double *peaks,
                       const double *sent) {
    char err[2048] = "";
    int rc = t->comm.rank == 0 ? json_write(t, s, log, peaks, sent, err, sizeof(err)) : 0;
    if (ckpt_agree(t, rc, err)) exit_all(1);
    if (t->comm.rank == 0) printf("figures written to %s (JSON)\n", t->cfg.json_path);
}

/* Trains with cfg on comm; rank 0 prints as it goes. */
static RunSummary run_training(const Config *cfg, MPI_Comm comm, int rank_table) {
    Trainer *t = trainer_create(cfg, comm);
    int root = t->comm.rank == 0;
    if (root) {
        print_header(t);
        backend_describe(cfg);
        print_unit_table(t);
    }
    /* the held-out tenth first: it changes the batches, which --resume checks */
    Corpus val;
    char err[1024];
    if (val_open(t, &val, err, sizeof(err))) {
        if (root) fprintf(stderr, "error: %s\n", err);
        exit_all(2);
    }
    long first = run_start(t);
    RunSummary s;
    memset(&s, 0, sizeof(s));
    s.first = (int)first;
    s.steps = cfg->steps > first ? cfg->steps - (int)first : 0;
    s.world = t->comm.world;
    s.batch = cfg->batch;
    StepLog log = step_log_create(s.steps);
    double t0 = now_seconds();
    for (int step = (int)first; step < cfg->steps; step++) {
        double ts = now_seconds();
        double loss = trainer_step(t, step), dt = now_seconds() - ts;
        step_log_record(&log, step - first, t, loss, dt);
        s.final_loss = loss;
        if (!isfinite(loss)) stop_diverged(cfg, root, step, first, loss);
        print_step_line(t, step, loss, dt);
        if (cfg->val_every && ((step + 1) % cfg->val_every == 0 || step == cfg->steps - 1))
            log.val_loss[step - first] =
                print_val_loss(t, &val, step, now_seconds() - t0, step + 1 - (int)first);
        if (ckpt_saves_after(cfg, first, step + 1)) {
            if (ckpt_save(t, step + 1)) exit_all(1);
            if (root) printf("checkpoint: %s/step-%08d\n", cfg->save_dir, step + 1);
        }
    }
    s.seconds = now_seconds() - t0;
    if (cfg->trace_path) write_trace(t, &s);
    double *peaks = (double *)host_calloc((size_t)s.world * (MEM_NUM_CATEGORIES + 1),
                                          sizeof(double), "gather the statistics");
    double *sent = (double *)host_calloc((size_t)s.world * COMM_NUM_KINDS, sizeof(double),
                                         "gather the statistics");
    gather_stats(t, peaks, sent);
    if (root && s.steps > 0) {
        summarize(&s, t, peaks, sent);
        print_run_end(t, &s, peaks, sent, rank_table);
    }
    if (cfg->json_path) write_json(t, &s, &log, peaks, sent);
    step_log_free(&log);
    free(peaks);
    free(sent);
    if (cfg->sample) {
        Tokenizer tk;
        memset(&tk, 0, sizeof(tk));
        if (root && cfg->tokenizer_path) tokenizer_load(&tk, cfg->tokenizer_path, err, sizeof(err));
        sample_print(t, &tk);
        tokenizer_free(&tk);
    }
    val_close(cfg, &val);
    if (cfg->export_path && trainer_export(t, cfg->export_path)) exit_all(1);
    trainer_destroy(t);
    return s;
}

/* ------------------------------------------------------------------------
 * --plan: the memory of a run, without the run
 *
 * The ledger's figures do not depend on the numbers in the buffers, only on
 * which buffers exist when: so training steps with the backend switched
 * off (backend.dry: nothing allocated, computed, copied or sent) book
 * exactly what real steps book, for a model of any size. They are the real
 * trainer_step, through the same lifecycle, so the plan cannot drift from
 * the program: tests/test_plan.sh holds it equal to a real run's ledger.
 * Two steps, as forward prefetch starts in the second. Printed: each
 * category's peak (the largest over the ranks), the peak of the total, the
 * model states as the ZeRO paper counts them, and one step's collectives.
 * --------------------------------------------------------------------- */
static void print_plan_row(const char *name, double bytes) {
    printf("  %-28s %18.0f bytes %12.3f GB %12.3f GiB\n", name, bytes, bytes / 1e9,
           bytes / 1073741824.0);
}

/* A step's compute as llm.c counts it for its MFU: a token's forward and
 * backward take 6 flops a parameter (2 forward, 4 backward: the input's
 * and the weight's gradients), and GPT-2's attention 12 L T D more (QK^T
 * and PV, each 2 L T D forward and twice that backward). One rank's share,
 * and what one GPU would take for it at 40% of its dense bf16 peak, the
 * MFU PyTorch FSDP and llm.c reach: an estimate to plan with, not a
 * measurement (the GPU build has run on one H100: make test-gpu, 83
 * passed, on 2026-11-27). */
static void print_plan_compute(const Trainer *t) {
    double tokens = 0.0, flops = step_model_flops(t, &tokens), at40 = 0.4e12;
    printf("  compute        %.4g TFLOP a step per rank (llm.c's count: 6 x parameters%s a token, "
           "%.0f tokens)\n",
           flops / 1e12, t->cfg.arch == ARCH_GPT2 ? " + 12 L T D" : "", tokens);
    printf("  at 40%% of a GPU's dense bf16 peak: %.1f ms a step on an H100 SXM (989 TFLOP/s), "
           "%.1f ms on an A100 (312)\n",
           1e3 * flops / (989 * at40), 1e3 * flops / (312 * at40));
}

static void run_plan(const Config *cfg, MPI_Comm comm) {
    Config c = *cfg;
    c.vram = 0; /* the plan books everything, and says below whether it fits */
    backend.dry = 1;
    Trainer *t = trainer_create(&c, comm);
    int root = t->comm.rank == 0, N = t->comm.world;
    if (root) {
        print_header(t);
        print_unit_table(t);
    }
    /* Two steps: the first records the order units run in, which forward
     * prefetch needs (section 6), so only the second is the steady state. */
    long calls[COMM_NUM_KINDS];
    double bytes[COMM_NUM_KINDS];
    trainer_step(t, 0);
    for (int k = 0; k < COMM_NUM_KINDS; k++) calls[k] = t->comm.calls[k];
    for (int k = 0; k < COMM_NUM_KINDS; k++) bytes[k] = t->comm.bytes_sent[k];
    trainer_step(t, 1);
    double *peaks = (double *)host_calloc((size_t)N * (MEM_NUM_CATEGORIES + 1), sizeof(double),
                                          "collect the plan");
    double *sent =
        (double *)host_calloc((size_t)N * COMM_NUM_KINDS, sizeof(double), "collect the plan");
    gather_stats(t, peaks, sent);
    if (root) {
        double peak[MEM_NUM_CATEGORIES + 1] = {0}, states = 0.0;
        for (int r = 0; r < N; r++)
            for (int k = 0; k <= MEM_NUM_CATEGORIES; k++)
                peak[k] = fmax(peak[k], peaks[(long)r * (MEM_NUM_CATEGORIES + 1) + k]);
        printf("plan: two steps booked by the ledger, nothing allocated or run; the peak per rank "
               "(the largest over the %d ranks)\n",
               N);
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) print_plan_row(MEM_CATEGORY_NAMES[k], peak[k]);
        print_plan_row("total (peak of the sum)", peak[MEM_NUM_CATEGORIES]);
        for (int k = MEM_PARAM_SHARD; k <= MEM_OPTIM_STATE; k++) states += peak[k];
        if (!is_sharded(t) || t->cfg.strategy == STRATEGY_SHARD_GRAD_OP ||
            t->cfg.strategy == STRATEGY_HYBRID_SHARD_ZERO2) /* full parameters kept all step */
            states += peak[MEM_FULL_PARAMS];
        print_plan_row("model states (ZeRO's count)", states);
        for (int k = 0; t->cfg.cpu_offload && k < MEM_NUM_CATEGORIES; k++) {
            char name[64];
            double most = 0.0;
            for (int r = 0; r < N; r++)
                most = fmax(most, t->host_peaks[(long)r * MEM_NUM_CATEGORIES + k]);
            snprintf(name, sizeof(name), "host: %s", MEM_CATEGORY_NAMES[k]);
            print_plan_row(name, most);
        }
        double sent = 0.0; /* rank 0's, in the step booked second */
        for (int k = 0; k < COMM_NUM_KINDS; k++) {
            printf("  %-14s %4ld calls, %18.0f bytes sent per rank in a step\n", COMM_KIND_NAMES[k],
                   t->comm.calls[k] - calls[k], t->comm.bytes_sent[k] - bytes[k]);
            sent += t->comm.bytes_sent[k] - bytes[k];
        }
        print_plan_compute(t);
        if (cfg->roofline) print_roofline(t, cfg->roofline, sent);
        if (cfg->vram) {
            char a[32], b[32];
            double over = peak[MEM_NUM_CATEGORIES] - (double)cfg->vram;
            printf("--vram %s: %s (%s %s)\n", human_bytes((double)cfg->vram, a, sizeof(a)),
                   over > 0 ? "does not fit" : "fits", human_bytes(fabs(over), b, sizeof(b)),
                   over > 0 ? "over" : "to spare");
        }
    }
    free(peaks);
    free(sent);
    trainer_destroy(t);
}

/* ------------------------------------------------------------------------
 * --compare, the files a run names, and main
 * --------------------------------------------------------------------- */

/* --compare writes two traces: "run.json" -> "run.no_shard.json". */
static void trace_path_for(char *out, size_t len, const char *path, Strategy strategy) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) dot = path + strlen(path);
    snprintf(out, len, "%.*s.%s%s", (int)(dot - path), path, strategy_name(strategy), dot);
}

/* Every file or directory an option names, and whether the run writes it. */
typedef struct {
    const char *flag, *path;
    int output;
    int dir; /* a checkpoint directory: what is inside it is the run's too */
} NamedFile;

/* Whether path is a checkpoint directory itself or lies in what a run
 * writes, prunes or reads there: its step-N and .tmp-step-N directories.
 * Anything else in it (the --data file, notes) is none of the run's. */
static int within_checkpoints(const char *path, const char *dir) {
    char entry[1024], meta[2048];
    struct stat st;
    if (!file_within_entry(path, dir, entry, sizeof(entry))) return 0;
    snprintf(meta, sizeof(meta), "%s/meta.txt", dir); /* --resume DIR/step-N: all of it */
    if (entry[0] == '\0' || lstat(meta, &st) == 0) return 1;
    return ckpt_step_of(entry) >= 0 || !strncmp(entry, ".tmp-step-", 10);
}

/* Whether two named paths collide: the same file, or a file among a
 * checkpoint directory's checkpoints. Two directories never collide:
 * --resume DIR --save-dir DIR is how a run continues. */
static int files_collide(const NamedFile *a, const NamedFile *b) {
    if (a->dir && b->dir) return 0;
    if (a->dir) return within_checkpoints(b->path, a->path);
    if (b->dir) return within_checkpoints(a->path, b->path);
    return file_same(a->path, b->path);
}

/* Two options naming one file would lose one of them: two outputs keep only
 * the last written, and an output over an input (or into a checkpoint
 * directory) destroys what the run, or the next, reads. Found before any
 * step is spent. Returns 0 or 2. */
static int check_distinct_files(const NamedFile *f, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (!f[i].path || !f[j].path || (!f[i].output && !f[j].output) ||
                !files_collide(&f[i], &f[j]))
                continue;
            const NamedFile *out = f[i].output ? &f[i] : &f[j],
                            *other = out == &f[i] ? &f[j] : &f[i];
            if (other->output)
                return usage_error(err, errlen,
                                   "%s %s and %s %s name the same %s, so one output would replace "
                                   "the other. Give each output its own path.",
                                   f[i].flag, f[i].path, f[j].flag, f[j].path,
                                   out->dir || other->dir ? "place" : "file");
            return usage_error(err, errlen,
                               "%s %s would replace %s %s, which this run reads. Give the output "
                               "another path.",
                               out->flag, out->path, other->flag, other->path);
        }
    return 0;
}

/* --save-dir must be a directory we can write into (created if missing,
 * its parent must exist), found out before any step is spent. */
static int check_save_dir(const char *dir, char *err, size_t errlen) {
    struct stat st;
    if (stat(dir, &st) != 0 && mkdir(dir, 0755) != 0)
        return usage_error(
            err, errlen,
            "--save-dir %s: cannot create it (%s). Give a path in an existing, writable directory.",
            dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return usage_error(err, errlen, "--save-dir %s: exists and is not a directory.", dir);
    if (access(dir, W_OK) != 0)
        return usage_error(err, errlen, "--save-dir %s: not writable.", dir);
    return 0;
}

/* --wait-for-debugger: each rank prints its PID and spins until a debugger
 * sets `attached` (the variable is local so no global state exists for it):
 *   gdb -p PID -ex 'frame function debugger_wait' -ex 'set var attached = 1' -ex continue
 * sim/gdb-ranks.sh opens one such gdb per rank in tmux panes. */
static void debugger_wait(MPI_Comm comm) {
    volatile int attached = 0;
    int rank = 0;
    char host[256] = "?";
    MPI_Comm_rank(comm, &rank);
    gethostname(host, sizeof(host));
    printf("rank %d: pid %ld on %s waiting for a debugger\n", rank, (long)getpid(), host);
    fflush(stdout);
    while (!attached) {
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    MPI_Barrier(comm);
}

static void print_comparison(const RunSummary *a, const char *na, const RunSummary *b,
                             const char *nb, int offload) {
    printf("\n==================================================================\n");
    printf("DDP vs FSDP on %d ranks: the same model, data and optimizer\n", a->world);
    if (offload)
        printf("(%s with --cpu-offload; %s without: DDP keeps its replicas on the device)\n", nb,
               na);
    printf("==================================================================\n");
    printf("%-30s %14s %14s %8s\n", "", na, nb, "ratio");
    printf("%-30s %14.4f %14.4f\n", "final loss", a->final_loss, b->final_loss);
    printf("%-30s %14.2f %14.2f %8.2f\n", "step time, ms", 1e3 * a->seconds / a->steps,
           1e3 * b->seconds / b->steps, (b->seconds / b->steps) / (a->seconds / a->steps));
    printf("peak memory per rank, MiB (max over ranks)\n");
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) {
        printf("  %-28s %14.3f %14.3f", MEM_CATEGORY_NAMES[k], mib(a->peak[k]), mib(b->peak[k]));
        if (a->peak[k] > 0) printf(" %8.2f", b->peak[k] / a->peak[k]);
        printf("\n");
    }
    printf("  %-28s %14.3f %14.3f %8.2f\n", "total (peak of the sum)", mib(a->peak_total),
           mib(b->peak_total), b->peak_total / a->peak_total);
    printf("traffic per rank per step, MiB sent\n");
    double ta = 0, tb = 0;
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        char label[64];
        snprintf(label, sizeof(label), "%s (%ld/%ld calls)", COMM_KIND_NAMES[k], a->calls[k],
                 b->calls[k]);
        printf("  %-28s %14.3f %14.3f\n", label, mib(a->bytes_sent[k]), mib(b->bytes_sent[k]));
        ta += a->bytes_sent[k];
        tb += b->bytes_sent[k];
    }
    printf("  %-28s %14.3f %14.3f %8.2f\n", "total", mib(ta), mib(tb), ta > 0 ? tb / ta : 0.0);
    printf("\nFSDP keeps 1/%d of the parameters, gradients and optimizer state per rank,\n"
           "gathering each unit's full state only while it computes; it pays with about\n"
           "1.5x DDP's traffic (all-gather twice + reduce-scatter vs one all-reduce).\n",
           a->world);
}

#ifndef FSDP_NO_MAIN
/* Every rank parses the same argv and reaches the same verdict, so on bad
 * input every rank exits 2 on its own; only rank 0 prints. What a run
 * prints is its result (--plan's only one), so output that could not be
 * written (a full disk, /dev/full) fails the run instead of exiting 0. */
static int finish(int code) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr,
                "error: cannot write the standard output (%s): what this run printed is "
                "incomplete.\nHINT: make room where it goes, or send it to another file.\n",
                errno ? strerror(errno) : "a write failed");
        if (code == 0) code = 1;
    }
    MPI_Finalize();
    return code;
}

/* A closed standard output (./fsdp >&-) would hand its descriptor to the
 * next file opened, and print into that file: refuse it before anything
 * is opened. */
static int stdout_is_open(void) {
    if (fcntl(STDOUT_FILENO, F_GETFD) != -1) return 1;
    fprintf(stderr, "error: the standard output is closed, and it is where fsdp prints its "
                    "results.\nHINT: send it to a file (> out.txt) or to /dev/null.\n");
    return 0;
}

/* --compare runs DDP (no_shard), then the sharded strategy asked for
 * (full_shard if none was), each writing its --trace and --json to a file
 * of its own beside the one named. */
typedef struct {
    Config ddp, fsdp;
    char trace[2][1024], json[2][1024]; /* [0] DDP's, [1] the sharded run's */
} Comparison;

static void comparison_of(const Config *cfg, Comparison *k) {
    memset(k, 0, sizeof(*k));
    k->ddp = k->fsdp = *cfg;
    k->ddp.strategy = STRATEGY_NO_SHARD;
    k->ddp.cpu_offload = 0; /* no_shard computes with whole replicas on the device */
    if (k->fsdp.strategy == STRATEGY_NO_SHARD) k->fsdp.strategy = STRATEGY_FULL_SHARD;
    if (!cfg->compare) return;
    Config *run[2] = {&k->ddp, &k->fsdp};
    for (int i = 0; i < 2; i++) {
        if (cfg->trace_path) {
            trace_path_for(k->trace[i], sizeof(k->trace[i]), cfg->trace_path, run[i]->strategy);
            run[i]->trace_path = k->trace[i];
        }
        if (cfg->json_path) {
            trace_path_for(k->json[i], sizeof(k->json[i]), cfg->json_path, run[i]->strategy);
            run[i]->json_path = k->json[i];
        }
    }
}

/* A --data or --val-data file is read whole once, by rank 0, before any
 * rank starts: a bad one is refused before a trainer is built. */
static int check_corpus_file(const char *flag, const char *path, const Config *cfg, char *err,
                             size_t errlen) {
    if (!path) return 0;
    Corpus probe;
    memset(&probe, 0, sizeof(probe));
    int rc = corpus_load_file(&probe, flag, path, cfg, err, errlen);
    corpus_release(&probe);
    return rc;
}

/* The files a model's options mean, once rank 0 has looked (a directory
 * stands for the files save_pretrained writes in it), and what a GPT-2's
 * carry beside them: config.json, written by --export and read by
 * --init-from. Every rank uses rank 0's answer (model_files_share). */
typedef struct {
    char export_file[FILES_MAX_PATH + 64]; /* --export's weights; "" without --export */
    char export_config[FILES_MAX_PATH + 64]; /* GPT-2: the config.json beside them; else "" */
    char init_file[FILES_MAX_PATH + 64];     /* --init-from's weights; "" without it */
    char init_config[FILES_MAX_PATH + 64];   /* GPT-2: the config.json beside them, if any */
} ModelFiles;

static void model_files_of(const Config *cfg, ModelFiles *mf) {
    struct stat st;
    memset(mf, 0, sizeof(*mf));
    int gpt2 = cfg->arch == ARCH_GPT2;
    if (cfg->export_path) {
        model_file_of(cfg->export_path, 1, mf->export_file, sizeof(mf->export_file));
        if (gpt2) path_beside(mf->export_file, "config.json", mf->export_config,
                              sizeof(mf->export_config));
    }
    if (cfg->init_from) {
        model_file_of(cfg->init_from, 0, mf->init_file, sizeof(mf->init_file));
        path_beside(mf->init_file, "config.json", mf->init_config, sizeof(mf->init_config));
        if (!gpt2 || lstat(mf->init_config, &st) != 0) mf->init_config[0] = '\0';
    }
}

/* Every rank takes rank 0's files, and the options point at them. */
static void model_files_share(Config *cfg, ModelFiles *mf, MPI_Comm comm) {
    MPI_Bcast(mf, (int)sizeof(*mf), MPI_BYTE, 0, comm);
    if (cfg->export_path) cfg->export_path = mf->export_file;
    if (cfg->init_from) cfg->init_from = mf->init_file;
}

/* --init-from DIR reads DIR/model.safetensors, as from_pretrained(DIR)
 * does. A directory without it is refused here, saying what it lacks and
 * what it holds instead: a sharded checkpoint, or a file of another name. */
static int check_init_dir(const char *dir, const char *file, char *err, size_t errlen) {
    struct stat st;
    char other[256] = "", index[FILES_MAX_PATH + 96];
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || lstat(file, &st) == 0) return 0;
    snprintf(index, sizeof(index), "%s.index.json", file);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && !other[0] && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors"))
            snprintf(other, sizeof(other), "%s", e->d_name);
    }
    if (d) closedir(d);
    if (lstat(index, &st) == 0)
        return usage_error(err, errlen,
                           "--init-from %s: is a directory holding a sharded checkpoint (%s), "
                           "which fsdp.c does not read: it reads %s, one file. Save the model as "
                           "one (save_pretrained(DIR, max_shard_size=\"100GB\")).",
                           dir, index, file);
    int n = (int)strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* "d/" + "/w.safetensors" reads "d/w.safetensors" */
    if (other[0])
        return usage_error(err, errlen,
                           "--init-from %s: is a directory without %s, the file "
                           "from_pretrained(%s) reads. Give the file it holds instead: "
                           "--init-from %.*s/%s",
                           dir, file, dir, n, dir, other);
    return usage_error(err, errlen,
                       "--init-from %s: is a directory without %s, the file from_pretrained(%s) "
                       "reads. Give the path of a safetensors file, or of a directory that holds "
                       "model.safetensors.",
                       dir, file, dir);
}

/* A GPT-2's --export writes two files: the weights, and config.json beside
 * them, as save_pretrained does. config.json is an output no option names,
 * so it is checked here as --export's path is, before the first step (not
 * found after the training): nothing there but a regular file of ours to
 * replace, or nothing at all; and no file the run names is that one. */
static int check_export_config(const ModelFiles *mf, const NamedFile *f, int n, char *err,
                               size_t errlen) {
    const char *weights = mf->export_file, *config = mf->export_config;
    char why[FILES_MAX_PATH + 512];
    struct stat st;
    if (file_same(weights, config))
        return usage_error(err, errlen,
                           "--export %s: a GPT-2's export writes config.json beside its weights, "
                           "as save_pretrained does, so the weights cannot be named config.json: "
                           "one would replace the other. Name them model.safetensors, or give "
                           "the directory (--export DIR/ writes DIR/model.safetensors).",
                           weights);
    if (lstat(config, &st) == 0 && !S_ISREG(st.st_mode))
        return usage_error(err, errlen,
                           "--export %s writes config.json beside it, as save_pretrained does, but "
                           "%s is %s%s: fsdp.c replaces only regular files. Move it away, or "
                           "export into another directory.",
                           weights, config, S_ISLNK(st.st_mode) ? "a symbolic link" : "",
                           S_ISLNK(st.st_mode) ? "" : file_kind(config));
    if (file_check_output("--export", config, why, sizeof(why)))
        return usage_error(err, errlen,
                           "--export %s writes config.json beside it, as save_pretrained does: %s",
                           weights, why);
    NamedFile self = {"--export", config, 1, 0};
    for (int i = 0; i < n; i++) {
        if (!f[i].path || f[i].path == weights || !files_collide(&self, &f[i])) continue;
        if (f[i].output)
            return usage_error(err, errlen,
                               "--export %s writes config.json beside it, as save_pretrained "
                               "does, to %s, which %s %s also names: one output would replace "
                               "the other. Give %s another path, or export into another "
                               "directory.",
                               weights, config, f[i].flag, f[i].path, f[i].flag);
        return usage_error(err, errlen,
                           "--export %s writes config.json beside it, as save_pretrained does, "
                           "over %s %s, which this run reads. Export into another directory.",
                           weights, f[i].flag, f[i].path);
    }
    return 0;
}

/* Rank 0 checks every file the run names before any is touched: inputs
 * readable and well formed, outputs writable, no two the same file.
 * Returns 0, or 2 with the message (every rank then agrees on it), and
 * the files --export and --init-from mean in mf. */
static int check_files(const Config *cfg, const Comparison *k, ModelFiles *mf, char *err,
                       size_t errlen) {
    int rc = check_corpus_file("--data", cfg->data_path, cfg, err, errlen);
    if (rc == 0) rc = check_corpus_file("--val-data", cfg->val_path, cfg, err, errlen);
    if (rc == 0 && cfg->tokenizer_path) {
        Tokenizer tk;
        rc = tokenizer_load(&tk, cfg->tokenizer_path, err, errlen);
        if (rc == 0) rc = tokenizer_fits(&tk, cfg->tokenizer_path, cfg->vocab, err, errlen);
        tokenizer_free(&tk);
    }
    model_files_of(cfg, mf);
    if (rc == 0 && cfg->init_from) rc = check_init_dir(cfg->init_from, mf->init_file, err, errlen);
    int two = cfg->compare; /* the named --trace and --json become two files each */
    NamedFile files[] = {{"--trace", two ? NULL : cfg->trace_path, 1, 0},
                         {"--trace", two && cfg->trace_path ? k->trace[0] : NULL, 1, 0},
                         {"--trace", two && cfg->trace_path ? k->trace[1] : NULL, 1, 0},
                         {"--json", two ? NULL : cfg->json_path, 1, 0},
                         {"--json", two && cfg->json_path ? k->json[0] : NULL, 1, 0},
                         {"--json", two && cfg->json_path ? k->json[1] : NULL, 1, 0},
                         {"--export", cfg->export_path ? mf->export_file : NULL, 1, 0},
                         {"--save-dir", cfg->save_dir, 1, 1},
                         {"--data", cfg->data_path, 0, 0},
                         {"--init-from", cfg->init_from ? mf->init_file : NULL, 0, 0},
                         {"--init-from's config.json", mf->init_config[0] ? mf->init_config : NULL,
                          0, 0},
                         {"--val-data", cfg->val_path, 0, 0},
                         {"--tokenizer", cfg->tokenizer_path, 0, 0},
                         {"--resume", cfg->resume_dir, 0, 1}};
    int n_files = (int)(sizeof(files) / sizeof(files[0]));
    for (int i = 0; i < n_files && rc == 0; i++)
        if (files[i].output && !files[i].dir && files[i].path)
            rc = file_check_output(files[i].flag, files[i].path, err, errlen);
    if (rc == 0 && mf->export_config[0])
        rc = check_export_config(mf, files, n_files, err, errlen);
    if (rc == 0) rc = check_distinct_files(files, n_files, err, errlen);
    if (rc == 0 && cfg->save_dir) rc = check_save_dir(cfg->save_dir, err, errlen);
    return rc;
}

int main(int argc, char **argv) {
    if (!stdout_is_open()) return 2;
    backend_choose_device_early(); /* kernels/backend.h: before a CUDA-aware MPI opens a context */
    int provided = 0; /* comm/stream.h: the communication thread calls MPI beside the main thread */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    Config cfg;
    char err[4096];
    int rc = config_parse(&cfg, argc, argv, err, sizeof(err));
    if (rc == 0) rc = config_check_world(&cfg, world, err, sizeof(err));
    Comparison both;
    if (rc == 0) comparison_of(&cfg, &both);
    ModelFiles model_files; /* what --export and --init-from name: rank 0 looks, all use it */
    memset(&model_files, 0, sizeof(model_files));
    if (rc == 0 && rank == 0) rc = check_files(&cfg, &both, &model_files, err, sizeof(err));
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc == 1) {
        if (rank == 0) config_usage(stdout);
        return finish(0);
    }
    if (rc != 0) {
        if (rank == 0)
            fprintf(stderr,
                    "error: %s\nusage: mpirun -np N ./fsdp [options]; ./fsdp --help lists them.\n",
                    err);
        return finish(2);
    }
    model_files_share(&cfg, &model_files, MPI_COMM_WORLD);
    if (cfg.plan) { /* no GPU needed: nothing runs */
        run_plan(&cfg, MPI_COMM_WORLD);
        return finish(0);
    }
    /* One run per --save-dir (io/lock.h): rank 0 takes its lock or is
     * refused, naming the run that holds it; the verdict reaches every
     * rank, so a refused job exits 2 together, before step 1. */
    rc = rank == 0 ? run_lock_dirs(&cfg, argc, argv, world, err, sizeof(err)) : 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc != 0) {
        if (rank == 0) fprintf(stderr, "error: %s\n", err);
        return finish(2);
    }
    if (backend_init(&cfg, MPI_COMM_WORLD)) return finish(1); /* kernels/backend.h: a GPU? */
    if (cfg.wait_for_debugger) debugger_wait(MPI_COMM_WORLD);
    if (!cfg.compare) {
        run_training(&cfg, MPI_COMM_WORLD, 1);
    } else {
        RunSummary a = run_training(&both.ddp, MPI_COMM_WORLD, 0);
        if (rank == 0) printf("\n");
        RunSummary b = run_training(&both.fsdp, MPI_COMM_WORLD, 0);
        if (rank == 0)
            print_comparison(&a, strategy_name(both.ddp.strategy), &b,
                             strategy_name(both.fsdp.strategy), both.fsdp.cpu_offload);
    }
    backend_release();
    return finish(0);
}
#endif /* FSDP_NO_MAIN */
