/* ============================================================================
 * io/checkpoint.h — section 13's plumbing: what a checkpoint directory holds
 * and how each file is judged before a byte of it is trained on.
 *
 * fsdp.c includes it at its top; section 13 uses it. The lessons stay there: who
 * writes which shard (ckpt_save), and how a new world size reads the old
 * shards (ckpt_load_shards, ckpt_read_range). Here is what surrounds them:
 * meta.txt's description of a trainer (ckpt_meta_of, with the schedule's
 * lr_schedule_to_meta and the optimizer's settings), the step-N and
 * .tmp-step-N directories (listing, pruning, removing only fsdp.c's own
 * files, the names a save needs), and every check of a checkpoint or a
 * safetensors file against the run that loads it (ckpt_check_*,
 * ckpt_verify_files, st_check_model), and how the ranks agree on a verdict
 * (ckpt_agree).
 *
 * A leaf: section 13 calls it, and it calls nothing of fsdp.c's (what reads
 * the shards' layout, shard_first_nonfinite, is fsdp.c's). May include
 * core.h, trainer.h, files.h, formats.h and optim/lr_schedule.h.
 * ========================================================================== */
#ifndef FSDP_IO_CHECKPOINT_H
#define FSDP_IO_CHECKPOINT_H
#include "../core.h"
#include "../trainer.h"
#include "../files.h"
#include "../formats.h"
#include "../optim/lr_schedule.h" /* LR_SCHEDULE_NAMES, lr_schedule_to_meta's words */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

/* Errors while reading or writing files are seen by some ranks and not
 * others. All ranks agree on the outcome, and the lowest failing rank
 * prints its message, so the user reads one clear line. Returns 0 or 2. */
static int ckpt_agree(Trainer *t, int rc, const char *err) {
    int mine = rc ? t->comm.rank : t->comm.world, first = 0;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, t->comm.comm);
    if (first == t->comm.world) return 0;
    if (first == t->comm.rank) {
        fprintf(stderr, "error: %s\n", err);
        fflush(stderr);
    }
    return 2;
}


/* ---- writing: meta.txt and the checkpoint directories ---------------------------- */

/* The CRC-32 of the --data file, so that a checkpoint can say which data it
 * was trained on. Computed once, when a checkpoint first needs it. */
static uint32_t trainer_data_crc(Trainer *t) {
    if (!t->data_crc_known) t->data_crc = crc32_update(0, t->corpus.bytes, t->corpus.map_bytes);
    t->data_crc_known = 1;
    return t->data_crc;
}

/* The schedule as meta.txt keeps it: the floats as their bits. */
static void lr_schedule_to_meta(const Config *c, CkptMeta *m) {
    snprintf(m->lr_schedule, sizeof(m->lr_schedule), "%s", LR_SCHEDULE_NAMES[c->lr_schedule]);
    memcpy(&m->lr_bits, &c->lr, sizeof(float));
    memcpy(&m->gamma_bits, &c->gamma, sizeof(float));
    m->warmup = c->warmup;
    m->step_size = c->step_size ? c->step_size : 1; /* only step uses it; 0 is "not given" */
    /* only cosine and linear span --steps, and end at --min-lr */
    int decays = c->lr_schedule == LR_COSINE || c->lr_schedule == LR_LINEAR;
    m->schedule_steps = decays ? c->steps : 0;
    if (decays) memcpy(&m->min_lr_bits, &c->min_lr, sizeof(float));
}

static void lr_schedule_describe(const CkptMeta *m, char *out, size_t len) {
    float lr, gamma, min_lr;
    memcpy(&lr, &m->lr_bits, sizeof(float));
    memcpy(&gamma, &m->gamma_bits, sizeof(float));
    memcpy(&min_lr, &m->min_lr_bits, sizeof(float));
    snprintf(out, len, "--lr %g --lr-schedule %s --warmup %ld --step-size %ld --gamma %g",
             (double)lr, m->lr_schedule, m->warmup, m->step_size, (double)gamma);
    if (m->schedule_steps) {
        size_t n = strlen(out);
        snprintf(out + n, len - n, " --min-lr %g (%s over --steps %ld)", (double)min_lr,
                 m->lr_schedule, m->schedule_steps);
    }
}

/* The optimizer's settings and MixedPrecision's formats as meta.txt keeps
 * them: the floats as their bits, so a resume can tell they are the same. */
static void optimizer_to_meta(const Config *c, CkptMeta *m) {
    snprintf(m->optimizer, sizeof(m->optimizer), "%s",
             c->optimizer == OPTIMIZER_ADAM ? "adam" : "adamw");
    memcpy(&m->beta1_bits, &c->beta1, sizeof(float));
    memcpy(&m->beta2_bits, &c->beta2, sizeof(float));
    memcpy(&m->eps_bits, &c->eps, sizeof(float));
    memcpy(&m->weight_decay_bits, &c->weight_decay, sizeof(float));
    memcpy(&m->clip_bits, &c->clip_grad_norm, sizeof(float));
    snprintf(m->decay, sizeof(m->decay), "%s", c->no_decay_bias_norm ? "matrices" : "all");
    snprintf(m->param_dtype, sizeof(m->param_dtype), "%s", DTYPE_NAMES[c->param_dtype]);
    snprintf(m->reduce_dtype, sizeof(m->reduce_dtype), "%s", DTYPE_NAMES[c->reduce_dtype]);
}

/* The meta file's embed_dim: the MLP's, or GPT-2's n_head, which has no
 * field of its own (GPT-2 has no embed_dim; its other differences, the
 * parameters' names and wpe's n_ctx rows, the layout check compares). */
static int meta_embed_dim(const Config *c) {
    return c->arch == ARCH_GPT2 ? c->n_head : c->embed_dim;
}

/* The metadata of this trainer's layout (files and data filled in by the
 * caller). Every rank can build it: the shard files carry its layout hash. */
static void ckpt_meta_of(const Trainer *t, CkptMeta *m, long next_step) {
    const Config *c = &t->cfg;
    memset(m, 0, sizeof(*m));
    m->version = 2;
    m->world = t->shard_world;
    snprintf(m->strategy, sizeof(m->strategy), "%s", strategy_name(c->strategy));
    m->vocab = c->vocab;
    m->embed_dim = meta_embed_dim(c);
    m->context = c->context;
    m->width = c->width;
    m->depth = c->depth;
    m->min_params = c->min_params;
    m->seed = c->seed;
    m->batch = c->batch;
    m->step = next_step;
    m->adam_step = t->adam_step;
    m->scaler_on = c->grad_scaler;
    memcpy(&m->scale_bits, &t->loss_scale, sizeof(float));
    m->scaler_growth = t->scaler_growth;
    lr_schedule_to_meta(c, m);
    optimizer_to_meta(c, m);
    m->n_units = t->n_units;
    m->units =
        (MetaUnit *)host_calloc((size_t)t->n_units, sizeof(MetaUnit), "describe the checkpoint");
    for (int u = 0; u < t->n_units; u++) {
        m->units[u].numel = t->units[u].numel;
        m->units[u].padded = t->units[u].padded;
        m->units[u].shard = t->units[u].shard;
    }
    m->fsdp2 = t->cfg.fsdp2;
    m->n_params = t->model.n_params;
    m->params =
        (MetaParam *)host_calloc((size_t)m->n_params, sizeof(MetaParam), "describe the checkpoint");
    for (int i = 0; i < m->n_params; i++) {
        const Param *p = &t->model.params[i];
        snprintf(m->params[i].name, sizeof(m->params[i].name), "%s", p->name);
        m->params[i].unit = p->unit;
        m->params[i].offset = p->offset;
        m->params[i].shape[0] = p->shape[0];
        m->params[i].shape[1] = p->shape[1];
        m->params[i].numel = p->numel;
    }
    m->n_files = c->strategy == STRATEGY_NO_SHARD ? 1 : t->shard_world;
    m->files =
        (MetaFile *)host_calloc((size_t)m->n_files, sizeof(MetaFile), "describe the checkpoint");
}

static int ckpt_write_text(const char *path, const char *text, size_t len, char *err,
                           size_t errlen) {
    OutFile f;
    if (out_create(&f, "checkpoint", path, err, errlen)) return 2;
    out_write(&f, text, len);
    return out_commit(&f, err, errlen) ? 2 : 0;
}

/* The names of the files a checkpoint directory holds: meta.txt and
 * shard-NNNNN.bin (five or more digits). */
static int ckpt_is_own_file(const char *name) {
    size_t n = strlen(name);
    if (!strcmp(name, "meta.txt")) return 1;
    if (n < 15 || strncmp(name, "shard-", 6) != 0 || strcmp(name + n - 4, ".bin") != 0) return 0;
    for (size_t i = 6; i < n - 4; i++)
        if (name[i] < '0' || name[i] > '9') return 0;
    return 1;
}

/* Removes a checkpoint directory that fsdp.c wrote, and nothing else: the
 * directory itself must be a directory (a symbolic link is never followed),
 * only its checkpoint files are deleted, and only if they are regular
 * files. Anything else in it (a note the user put there) keeps it. */
static void ckpt_remove_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    struct dirent *e;
    struct stat st;
    while ((e = readdir(d)) != NULL)
        if (ckpt_is_own_file(e->d_name) && fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
            unlinkat(fd, e->d_name, 0);
    closedir(d); /* closes fd too */
    rmdir(dir);  /* fails, harmlessly, if anything else is left in it */
}

enum { CKPT_KEEP = 2 }; /* checkpoints kept in --save-dir */

/* Whether a run that starts at step `first` saves a checkpoint after step
 * n (named step-n): every --save-every steps, and after its last. */
static int ckpt_saves_after(const Config *c, long first, long n) {
    return c->save_dir && n > first && n <= c->steps &&
           (n == c->steps || (c->save_every && n % c->save_every == 0));
}

/* "step-00000100" -> 100; -1 for any other name (a .tmp-step-N, a copy
 * named step-00000100.bak, ...). */
static long ckpt_step_of(const char *name) {
    if (strncmp(name, "step-", 5) != 0 || strlen(name) != 13) return -1;
    long step = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        step = 10 * step + (*p - '0');
    }
    return step;
}

static int cmp_newest_first(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* The step numbers of the complete checkpoints in dir (a step-N directory
 * with its meta.txt, written last), newest first; malloc'd, or NULL when
 * dir cannot be read. */
static long *ckpt_list(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    int cap = 64;
    long *steps = (long *)host_malloc((size_t)cap * sizeof(long), "list the checkpoints");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long step = ckpt_step_of(e->d_name);
        char meta[2048];
        struct stat st;
        snprintf(meta, sizeof(meta), "%s/%s/meta.txt", dir, e->d_name);
        if (step < 0 || stat(meta, &st) != 0) continue;
        if (*n == cap)
            steps = (long *)host_realloc(steps, (size_t)(cap *= 2) * sizeof(long),
                                         "list the checkpoints");
        steps[(*n)++] = step;
    }
    closedir(d);
    qsort(steps, (size_t)*n, sizeof(long), cmp_newest_first);
    return steps;
}

/* After a save of step `saved`: keep it and the CKPT_KEEP - 1 newest before
 * it, and sweep away .tmp directories that crashed saves left behind. */
static void ckpt_prune(const char *dir, long saved) {
    int n = 0, kept = 0;
    long *steps = ckpt_list(dir, &n);
    char path[2048];
    for (int i = 0; i < n; i++) {
        if (steps[i] > saved) continue; /* never happens: run_training refuses it */
        if (kept++ < CKPT_KEEP) continue;
        snprintf(path, sizeof(path), "%s/step-%08ld", dir, steps[i]);
        ckpt_remove_dir(path);
    }
    free(steps);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".tmp-step-", 10) != 0) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        ckpt_remove_dir(path);
    }
    if (d) closedir(d);
}

/* Whether ckpt_remove_dir would clear path away: a directory (not a link
 * to one) that holds checkpoint files only, each a regular file. */
static int ckpt_removable(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return 1; /* nothing there: nothing in the way */
    DIR *d = S_ISDIR(st.st_mode) ? opendir(path) : NULL;
    if (!d) return 0;
    struct dirent *e;
    char file[2048 + 256];
    int ok = 1;
    while (ok && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
        ok = ckpt_is_own_file(e->d_name) && lstat(file, &st) == 0 && S_ISREG(st.st_mode);
    }
    closedir(d);
    return ok;
}

/* The names a save uses: it writes .tmp-step-N, then renames it to step-N.
 * A step-N that is not a directory (a file, a pipe), or a .tmp-step-N or
 * step-N that this run will save and cannot clear away (a user's files in
 * it), would make the save fail after all the training. Refuse them before
 * the first step. */
static int ckpt_check_step_names(const Config *c, long first, char *err, size_t errlen) {
    const char *dir = c->save_dir;
    DIR *d = opendir(dir);
    struct dirent *e;
    struct stat st;
    char path[2048];
    int rc = 0;
    while (d && rc == 0 && (e = readdir(d)) != NULL) {
        int tmp = !strncmp(e->d_name, ".tmp-", 5);
        long step = ckpt_step_of(e->d_name + (tmp ? 5 : 0));
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (step >= 0 && !tmp && stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
            rc = usage_error(err, errlen,
                             "--save-dir %s: %s is %s, where checkpoints are directories. Move it "
                             "away, or save elsewhere.",
                             dir, e->d_name, file_kind(path));
        else if (step >= 0 && ckpt_saves_after(c, first, step) && !ckpt_removable(path))
            rc = usage_error(err, errlen,
                             "--save-dir %s: %s is in the way of the checkpoint saved after step "
                             "%ld: it is %s fsdp.c did not write. Move it away, or save elsewhere.",
                             dir, e->d_name, step,
                             lstat(path, &st) == 0 && S_ISDIR(st.st_mode) ? "a directory of files"
                                                                          : "a file or link");
    }
    if (d) closedir(d);
    return rc;
}

/* A --save-dir holding checkpoints beyond where this run starts belongs to
 * another run (or this one's future): saving next to them would mix two
 * runs, and --resume would later pick the wrong one. Refuse before
 * training rather than delete anything. */
static int ckpt_check_save_dir(Trainer *t, long first) {
    char err[4096] = "";
    int rc = 0;
    if (t->comm.rank == 0) {
        int n = 0;
        long *steps = ckpt_list(t->cfg.save_dir, &n);
        if (n > 0 && steps[0] > first)
            rc = usage_error(
                err, sizeof(err),
                "--save-dir %s already holds a checkpoint at step %ld, beyond this run's start "
                "(step %ld). Continue that run with --resume %s, or save elsewhere.",
                t->cfg.save_dir, steps[0], first, t->cfg.save_dir);
        free(steps);
        if (rc == 0) rc = ckpt_check_step_names(&t->cfg, first, err, sizeof(err));
    }
    return ckpt_agree(t, rc, err);
}

/* ---- reading -------------------------------------------------------------------- */

/* Where to load from: DIR itself if it holds meta.txt, else its newest
 * complete step-N subdirectory. */
static int ckpt_locate(const char *dir, char *out, size_t outlen, char *err, size_t errlen) {
    struct stat st;
    char meta[2048];
    if (stat(dir, &st) != 0)
        return usage_error(err, errlen,
                           "--resume %s: no such directory. Give the --save-dir of an earlier run.",
                           dir);
    if (!S_ISDIR(st.st_mode))
        return usage_error(
            err, errlen,
            "--resume %s: is %s, not a directory. Give the --save-dir of an earlier run, "
            "or one of its step-N directories.",
            dir, file_kind(dir));
    snprintf(meta, sizeof(meta), "%s/meta.txt", dir);
    if (lstat(meta, &st) == 0) { /* whatever it is: reading it will say what is wrong */
        snprintf(out, outlen, "%s", dir);
        return 0;
    }
    int n = 0;
    long *steps = ckpt_list(dir, &n);
    if (n == 0) {
        free(steps);
        return usage_error(
            err, errlen,
            "--resume %s: no complete checkpoint in it (no step-N/meta.txt). A save that "
            "crashed leaves only a .tmp-step-N directory, which is never loaded.",
            dir);
    }
    snprintf(out, outlen, "%s/step-%08ld", dir, steps[0]);
    free(steps);
    return 0;
}

/* The run being resumed must see the batches it would have seen: the same
 * seed, global batch and data (the sampler draws from all three). */
static int ckpt_check_data(Trainer *t, const CkptMeta *m, const char *path, char *err,
                           size_t errlen) {
    const Config *c = &t->cfg;
    if (m->seed != c->seed)
        return usage_error(
            err, errlen,
            "%s: the checkpoint was trained with --seed %llu, this run has --seed %llu: the "
            "batches would differ from the run being resumed. Use --seed %llu.",
            path, (unsigned long long)m->seed, (unsigned long long)c->seed,
            (unsigned long long)m->seed);
    if (m->batch != c->batch)
        return usage_error(
            err, errlen,
            "%s: the checkpoint was trained with --batch %d, this run has --batch %d: the "
            "batches would differ from the run being resumed. Use --batch %d.",
            path, m->batch, c->batch, m->batch);
    CkptMeta mine;
    memset(&mine, 0, sizeof(mine));
    lr_schedule_to_meta(c, &mine);
    if (strcmp(m->lr_schedule, mine.lr_schedule) || m->lr_bits != mine.lr_bits ||
        m->warmup != mine.warmup || m->step_size != mine.step_size ||
        m->gamma_bits != mine.gamma_bits || m->schedule_steps != mine.schedule_steps ||
        m->min_lr_bits != mine.min_lr_bits) {
        char was[160], is[160];
        lr_schedule_describe(m, was, sizeof(was));
        lr_schedule_describe(&mine, is, sizeof(is));
        return usage_error(err, errlen,
                           "%s: the checkpoint was trained with %s, this run has %s: the "
                           "learning rate would jump. Give the same flags to continue that run "
                           "(or --init-from an export to start a new schedule).",
                           path, was, is);
    }
    if (!m->data_is_file && c->data_path)
        return usage_error(
            err, errlen,
            "%s: the checkpoint was trained on the embedded corpus, this run has --data %s. "
            "Leave out --data to continue that run.",
            path, c->data_path);
    if (m->data_is_file && !c->data_path)
        return usage_error(
            err, errlen,
            "%s: the checkpoint was trained on a --data file (%llu bytes, crc32 %08x), this "
            "run on the embedded corpus. Give the same --data file.",
            path, (unsigned long long)m->data_bytes, (unsigned)m->data_crc);
    if (m->data_is_file && t->comm.rank == 0 && /* one rank reads the whole file */
        ((uint64_t)t->corpus.map_bytes != m->data_bytes || trainer_data_crc(t) != m->data_crc))
        return usage_error(
            err, errlen,
            "%s: the checkpoint was trained on a --data file of %llu bytes (crc32 %08x); "
            "--data %s has %zu bytes (crc32 %08x): other data. Give the file it was trained on.",
            path, (unsigned long long)m->data_bytes, (unsigned)m->data_crc, c->data_path,
            t->corpus.map_bytes, (unsigned)trainer_data_crc(t));
    if (m->data_train != t->corpus.len)
        return usage_error(
            err, errlen,
            "%s: the run that saved it drew its batches from %ld tokens of the data, this run "
            "from %ld: --val-every without --val-data holds out the last tenth, and the "
            "batches would change. Give the same --val-every and --val-data as that run.",
            path, m->data_train, t->corpus.len);
    return 0;
}

/* "0.01": the shortest decimal that reads back as the float of these bits */
static const char *float_text(uint32_t bits, char *out, size_t len) {
    float f;
    memcpy(&f, &bits, sizeof(f));
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(out, len, "%.*g", digits, (double)f);
        if (strtof(out, NULL) == f) break;
    }
    return out;
}

/* A resumed run goes on with the optimizer it was trained with: Adam's
 * moments were accumulated under those betas and eps, and a changed decay,
 * clipping or format would silently make it another run. So a change is
 * refused, naming both values. (PyTorch users who want one reload the
 * optimizer and edit its param_groups; here --init-from an export starts
 * fresh with any settings.) */
static int ckpt_check_optimizer(const Config *c, const CkptMeta *m, const char *path, char *err,
                                size_t errlen) {
    CkptMeta mine;
    memset(&mine, 0, sizeof(mine));
    optimizer_to_meta(c, &mine);
    const struct {
        const char *flag;
        uint32_t was, is;
    } floats[] = {{"--beta1", m->beta1_bits, mine.beta1_bits},
                  {"--beta2", m->beta2_bits, mine.beta2_bits},
                  {"--eps", m->eps_bits, mine.eps_bits},
                  {"--weight-decay", m->weight_decay_bits, mine.weight_decay_bits},
                  {"--clip-grad-norm", m->clip_bits, mine.clip_bits}};
    const char *flag = NULL, *was = NULL, *is = NULL;
    char a[32], b[32];
    if (strcmp(m->optimizer, mine.optimizer)) {
        flag = "--optimizer";
        was = m->optimizer;
        is = mine.optimizer;
    }
    for (size_t i = 0; !flag && i < sizeof(floats) / sizeof(floats[0]); i++) {
        if (floats[i].was == floats[i].is) continue;
        int clip = !strcmp(floats[i].flag, "--clip-grad-norm"); /* 0: off */
        flag = floats[i].flag;
        was = clip && !floats[i].was ? "off" : float_text(floats[i].was, a, sizeof(a));
        is = clip && !floats[i].is ? "off" : float_text(floats[i].is, b, sizeof(b));
    }
    const char *groups_was = strcmp(m->decay, "matrices") ? "off" : "on",
               *groups_is = strcmp(mine.decay, "matrices") ? "off" : "on";
    const char *formats[][3] = {{"--param-dtype", m->param_dtype, mine.param_dtype},
                                {"--reduce-dtype", m->reduce_dtype, mine.reduce_dtype},
                                {"--no-decay-bias-norm", groups_was, groups_is}};
    for (int i = 0; !flag && i < 3; i++) {
        if (!strcmp(formats[i][1], formats[i][2])) continue;
        flag = formats[i][0];
        was = formats[i][1];
        is = formats[i][2];
    }
    if (!flag) return 0;
    char advice[96];
    if (!strcmp(was, "off")) snprintf(advice, sizeof(advice), "Leave out %s", flag);
    else if (!strcmp(was, "on")) snprintf(advice, sizeof(advice), "Give %s", flag);
    else snprintf(advice, sizeof(advice), "Give %s %s", flag, was);
    return usage_error(err, errlen,
                       "%s: the checkpoint was trained with %s %s, this run has %s %s: the "
                       "optimizer's state belongs to the first setting. %s to continue that "
                       "run (or --init-from an export to start anew with other settings).",
                       path, flag, was, flag, is, advice);
}

/* A model's shape as its options name it: "GPT-2, vocab 256 n_head 2 ..."
 * (meta.txt's embed_dim is GPT-2's n_head) or "the byte MLP, ...". */
static void model_shape_text(char *out, size_t n, int gpt2, int vocab, int embed_dim,
                             int context, int width, int depth) {
    if (gpt2)
        snprintf(out, n, "GPT-2, vocab %d n_head %d context %d n_embd %d n_layer %d", vocab,
                 embed_dim, context, width, depth);
    else
        snprintf(out, n, "the byte MLP, embed_dim %d context %d width %d depth %d", embed_dim,
                 context, width, depth);
}

/* The checkpoint must be of this model: same shape, and every parameter of
 * ours present under its name with the same shape. */

static int ckpt_check_model(const Trainer *t, const CkptMeta *m, const char *path, int *map,
                            char *err, size_t errlen) {
    const Config *c = &t->cfg;
    if (m->vocab != c->vocab || m->embed_dim != meta_embed_dim(c) || m->context != c->context ||
        m->width != c->width || m->depth != c->depth) {
        char was[160], is[160]; /* GPT-2's parameters are all transformer.* */
        int was_gpt2 = m->n_params > 0 && !strncmp(m->params[0].name, "transformer.", 12);
        model_shape_text(was, sizeof(was), was_gpt2, m->vocab, m->embed_dim, m->context,
                         m->width, m->depth);
        model_shape_text(is, sizeof(is), c->arch == ARCH_GPT2, c->vocab, meta_embed_dim(c),
                         c->context, c->width, c->depth);
        return usage_error(err, errlen,
                           "%s: the checkpoint is of a different model (%s); this run has %s. "
                           "Use the same --model and overrides.",
                           path, was, is);
    }
    if (m->step > INT_MAX)
        return usage_error(err, errlen, "%s: step %ld is beyond what a run can reach.", path,
                           m->step);
    for (int i = 0; i < t->model.n_params; i++) {
        const Param *p = &t->model.params[i];
        map[i] = -1;
        for (int j = 0; j < m->n_params && map[i] < 0; j++)
            if (!strcmp(m->params[j].name, p->name)) map[i] = j;
        if (map[i] < 0)
            return usage_error(err, errlen, "%s: parameter %s is missing from the checkpoint.",
                               path, p->name);
        const MetaParam *q = &m->params[map[i]];
        if (q->shape[0] != p->shape[0] || q->shape[1] != p->shape[1])
            return usage_error(err, errlen,
                               "%s: %s has shape (%d, %d) in the checkpoint but (%d, %d) here.",
                               path, p->name, q->shape[0], q->shape[1], p->shape[0], p->shape[1]);
    }
    return 0;
}

/* meta.txt's step is the directory's: step-00000010/meta.txt says step 10.
 * (A checkpoint copied to a directory of another name is still loaded.) */
static int ckpt_check_step(const char *dir, const CkptMeta *m, const char *path, char *err,
                           size_t errlen) {
    char name[1536];
    snprintf(name, sizeof(name), "%s", dir);
    for (size_t n = strlen(name); n > 1 && name[n - 1] == '/'; n--)
        name[n - 1] = '\0'; /* "step-4/" */
    const char *slash = strrchr(name, '/');
    long named = ckpt_step_of(slash ? slash + 1 : name);
    if (named >= 0 && named != m->step)
        return usage_error(
            err, errlen,
            "%s: says step %ld, but its directory is step %ld: the checkpoint was edited. "
            "Use another checkpoint.",
            path, m->step, named);
    return 0;
}

/* Whose shard is this file? Its header must name the rank of its place in
 * meta.txt's list, the checkpoint's world size and step, and the layout
 * meta.txt describes: a shard file swapped with another, or brought in from
 * another checkpoint, is refused here rather than trained on. */
static int ckpt_check_shard_header(int fd, int f, const CkptMeta *m, uint64_t layout,
                                   const char *path, char *err, size_t errlen) {
    unsigned char head[SHARD_HEADER_BYTES];
    ShardHeader h;
    char why[256];
    if (file_read_at(fd, head, sizeof(head), 0) != 0)
        return usage_error(err, errlen, "%s: cannot read its header.", path);
    if (shard_header_decode(head, sizeof(head), &h, why, sizeof(why)) != 0)
        return usage_error(err, errlen, "%s: %s. Use another checkpoint.", path, why);
    if ((int)h.rank != f || (int)h.world != m->world)
        return usage_error(
            err, errlen,
            "%s: holds rank %u of %u's shard, but meta.txt lists it as rank %d of %d's: "
            "shard files were swapped or copied. Use another checkpoint.",
            path, (unsigned)h.rank, (unsigned)h.world, f, m->world);
    if ((long)h.step != m->step)
        return usage_error(
            err, errlen,
            "%s: was written at step %llu, but meta.txt says step %ld: it belongs to another "
            "checkpoint. Use another checkpoint.",
            path, (unsigned long long)h.step, m->step);
    if (h.layout != layout)
        return usage_error(
            err, errlen,
            "%s: was written for another layout than meta.txt describes (layout hash "
            "%016llx, meta.txt gives %016llx): meta.txt was edited. Use another checkpoint.",
            path, (unsigned long long)h.layout, (unsigned long long)layout);
    uint32_t scale_bits = m->scaler_on ? m->scale_bits : 0,
             growth = m->scaler_on ? (uint32_t)m->scaler_growth : 0;
    if ((long)h.adam_step != m->adam_step || h.scale_bits != scale_bits ||
        h.scaler_growth != growth)
        return usage_error(
            err, errlen,
            "%s: was written with adam_step %llu and loss scale %08x (growth %u), but meta.txt "
            "says adam_step %ld and %08x (growth %u): meta.txt was edited. Use another "
            "checkpoint.",
            path, (unsigned long long)h.adam_step, (unsigned)h.scale_bits,
            (unsigned)h.scaler_growth, m->adam_step, (unsigned)scale_bits, (unsigned)growth);
    return 0;
}

/* Every shard file must be the one meta.txt lists: the right size, the
 * right CRC-32, and a header saying it is that rank's shard of this
 * checkpoint. Each file is checked by one rank (file f by rank f mod N). */
static int ckpt_verify_files(Trainer *t, const char *dir, const CkptMeta *m, char *err,
                             size_t errlen) {
    int rc = 0;
    char path[2048], why[1024];
    uint64_t layout = meta_layout_hash(m);
    unsigned char *buf = (unsigned char *)host_malloc(1 << 20, "verify the checkpoint");
    for (int f = t->comm.rank; f < m->n_files && rc == 0; f += t->comm.world) {
        snprintf(path, sizeof(path), "%s/%s", dir, m->files[f].name);
        uint64_t size = 0, want = m->files[f].bytes;
        int fd = file_open_input("checkpoint", path, &size, why, sizeof(why));
        if (fd < 0) {
            rc = usage_error(err, errlen, "%s", why);
            break;
        }
        uint32_t crc = 0;
        for (uint64_t at = 0; size == want && at < size && rc == 0; at += 1 << 20) {
            size_t n = size - at < (1 << 20) ? (size_t)(size - at) : (size_t)1 << 20;
            if (file_read_at(fd, buf, n, at) != 0)
                rc = usage_error(err, errlen, "%s: cannot read it (%s).", path,
                                 errno ? strerror(errno) : "it became shorter");
            crc = crc32_update(crc, buf, n);
        }
        if (rc == 0 && size != want)
            rc = usage_error(
                err, errlen,
                "%s: %llu bytes, but meta.txt says %llu: the file is truncated or was replaced. "
                "Use another checkpoint.",
                path, (unsigned long long)size, (unsigned long long)want);
        else if (rc == 0 && crc != m->files[f].crc)
            rc = usage_error(err, errlen,
                             "%s: checksum mismatch (crc32 %08x, meta.txt says %08x): the file is "
                             "corrupted. Use another checkpoint.",
                             path, crc, m->files[f].crc);
        if (rc == 0) rc = ckpt_check_shard_header(fd, f, m, layout, path, err, errlen);
        close(fd);
    }
    free(buf);
    return rc;
}

/* Where element i of parameter p is, as "[3, 17]" (a vector: "[3]"):
 * in fsdp.c's layout, or, with hf_layout, where a Hugging Face file holds
 * it. The two differ for GPT-2's Conv1D weights only: ours are (out, in),
 * the file's (in, out), transposed on load (st_read_conv1d). A message
 * about a file must give the file's index, or the user looks for the bad
 * value at [17, 3] of the file and finds a good one there. */
static const char *param_index_text(const Param *p, long i, int hf_layout, char *out,
                                    size_t len) {
    long row = i / p->shape[1], col = i % p->shape[1]; /* ours: (out, in) */
    if (p->shape[1] == 1) snprintf(out, len, "[%ld]", i);
    else if (hf_layout && p->conv1d) snprintf(out, len, "[%ld, %ld]", col, row);
    else snprintf(out, len, "[%ld, %ld]", row, col);
    return out;
}

/* ---- the full state as safetensors ----------------------------------------------- */

/* 1-D for vectors (biases, norms), 2-D (out, in) for matrices: the shapes
 * PyTorch's state_dict has; GPT-2's Conv1D weights (in, out), as Hugging
 * Face's files hold them. */
static void st_tensor_of(const Param *p, StTensor *s) {
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", p->name);
    snprintf(s->dtype, sizeof(s->dtype), "F32");
    s->ndim = p->shape[1] == 1 ? 1 : 2;
    s->shape[0] = p->shape[p->conv1d ? 1 : 0];
    s->shape[1] = p->shape[p->conv1d ? 0 : 1];
}

/* (R, C) -> (C, R): a Conv1D weight between our layout and Hugging Face's */
static void transpose_into(float *out, const float *in, long R, long C) {
    for (long r = 0; r < R; r++)
        for (long c = 0; c < C; c++) out[c * R + r] = in[r * C + c];
}

/* Hugging Face's files name GPT-2's tensors with "transformer." (saved from
 * GPT2LMHeadModel) or without it (OpenAI's checkpoint, saved from
 * GPT2Model): either is the parameter `ours`. */
static int st_name_is(const char *file_name, const char *ours) {
    if (!strcmp(file_name, ours)) return 1;
    return !strncmp(ours, "transformer.", 12) && !strcmp(file_name, ours + 12);
}
/* What else a Hugging Face GPT-2 file may hold that is not a parameter:
 * the tied lm_head.weight (wte's tensor, when saved twice) and the causal
 * mask buffers older versions saved (attn.bias, attn.masked_bias). */
static int st_is_gpt2_extra(const char *name) {
    size_t n = strlen(name);
    return !strcmp(name, "lm_head.weight") ||
           (n > 10 && !strcmp(name + n - 10, ".attn.bias")) ||
           (n > 17 && !strcmp(name + n - 17, ".attn.masked_bias"));
}

/* Checks a safetensors header against our model: the same names, each
 * F32 with our shape, and nothing else. */
/* "(256)", "(128, 256)": a tensor's shape as PyTorch prints it */
static const char *st_shape_text(const StTensor *s, char *out, size_t len) {
    size_t n = (size_t)snprintf(out, len, "(");
    for (int d = 0; d < s->ndim && n < len; d++)
        n += (size_t)snprintf(out + n, len - n, "%s%ld", d ? ", " : "", s->shape[d]);
    if (n < len) snprintf(out + n, len - n, ")");
    return out;
}

static int st_check_model(const Trainer *t, const StHeader *h, const char *path, int *map,
                          char *err, size_t errlen) {
    for (int i = 0; i < t->model.n_params; i++) {
        StTensor want;
        st_tensor_of(&t->model.params[i], &want);
        map[i] = -1;
        for (int j = 0; j < h->n && map[i] < 0; j++)
            if (st_name_is(h->tensors[j].name, want.name)) map[i] = j;
        if (map[i] < 0)
            return usage_error(err, errlen,
                               "--init-from %s: no tensor named %s. Export it from a run of the "
                               "same model.",
                               path, want.name);
        const StTensor *s = &h->tensors[map[i]];
        if (strcmp(s->dtype, "F32") != 0)
            return usage_error(err, errlen, "--init-from %s: %s is %s; fsdp.c trains in F32.", path,
                               s->name, s->dtype);
        int same = s->ndim == want.ndim;
        for (int d = 0; d < want.ndim && same; d++) same = s->shape[d] == want.shape[d];
        if (!same) {
            char got[128], expected[128];
            return usage_error(err, errlen,
                               "--init-from %s: %s has shape %s, but this model's is %s. Export "
                               "it from a run of the same model.",
                               path, s->name, st_shape_text(s, got, sizeof(got)),
                               st_shape_text(&want, expected, sizeof(expected)));
        }
    }
    /* every parameter found: a tensor left over is one the model lacks */
    for (int j = 0; j < h->n; j++) {
        int used = t->cfg.arch == ARCH_GPT2 && st_is_gpt2_extra(h->tensors[j].name);
        for (int i = 0; i < t->model.n_params && !used; i++) used = map[i] == j;
        if (!used)
            return usage_error(err, errlen,
                               "--init-from %s: it holds %s, which this model has no parameter "
                               "for (%d tensors, %d parameters). Export it from a run of the same "
                               "model.",
                               path, h->tensors[j].name, h->n, t->model.n_params);
    }
    return 0;
}

/* Reads rank 0's copy of a safetensors header: the 8-byte length, then the
 * JSON. Returns the bytes (all ranks judge these same bytes). */
static int st_read_header(const char *path, unsigned char **out, size_t *len, uint64_t *file_size,
                          char *err, size_t errlen) {
    int fd = file_open_input("--init-from", path, file_size, err, errlen);
    if (fd < 0) return 2;
    unsigned char prefix[8];
    uint64_t n = 0;
    int got = *file_size >= 8 && file_read_at(fd, prefix, 8, 0) == 0;
    for (int i = 7; i >= 0 && got; i--) n = (n << 8) | prefix[i];
    if (!got || n > *file_size - 8 || n > ST_MAX_HEADER) {
        close(fd);
        return usage_error(
            err, errlen,
            "--init-from %s: not a safetensors file (%llu bytes; its first 8 bytes do not "
            "give a header length that fits the file).",
            path, (unsigned long long)*file_size);
    }
    *len = 8 + (size_t)n;
    *out = (unsigned char *)host_malloc(*len, "hold the safetensors header");
    memcpy(*out, prefix, 8);
    int ok = file_read_at(fd, *out + 8, (size_t)n, 8) == 0;
    close(fd);
    if (!ok) return usage_error(err, errlen, "--init-from %s: the header is cut short.", path);
    return 0;
}

/* Rank 0 reads the header and every rank receives its bytes, so that all
 * judge the same file. Returns 0, or 2 with the message, on every rank. */
static int st_header_everywhere(Trainer *t, const char *path, unsigned char **head, size_t *len,
                                uint64_t *file_size, char *err, size_t errlen) {
    int rc = 0;
    *head = NULL;
    if (t->comm.rank == 0) rc = st_read_header(path, head, len, file_size, err, errlen);
    if (ckpt_agree(t, rc, err)) {
        free(*head);
        return 2;
    }
    unsigned long long sizes[2] = {*len, *file_size};
    MPI_Bcast(sizes, 2, MPI_UNSIGNED_LONG_LONG, 0, t->comm.comm);
    *len = (size_t)sizes[0];
    *file_size = sizes[1];
    if (t->comm.rank != 0) *head = (unsigned char *)host_malloc(*len, "hold the header");
    MPI_Bcast(*head, (int)*len, MPI_UNSIGNED_CHAR, 0, t->comm.comm);
    return 0;
}

/* ---- a directory for --export and --init-from ---------------------------------- */

/* The name Hugging Face gives a model's weights in its directory:
 * save_pretrained(DIR) writes DIR/model.safetensors (with DIR/config.json
 * beside it), and from_pretrained(DIR) reads them. */
#define MODEL_FILE_NAME "model.safetensors"

/* The file that --export or --init-from ARG means: ARG itself, or, when ARG
 * is a directory, MODEL_FILE_NAME in it. An existing directory is one (a
 * link to one too, as for from_pretrained); for an output, so is a path
 * ending in '/' that does not exist yet (then its missing directory is
 * refused as any output's is, with the mkdir to run). */
static void model_file_of(const char *arg, int output, char *out, size_t len) {
    struct stat st;
    size_t n = strlen(arg);
    int slash = n > 0 && arg[n - 1] == '/';
    if (!(output && slash) && !(stat(arg, &st) == 0 && S_ISDIR(st.st_mode))) {
        snprintf(out, len, "%s", arg);
        return;
    }
    while (n > 0 && arg[n - 1] == '/') n--; /* "out//" is "out"; "/" is the root */
    snprintf(out, len, "%.*s/%s", (int)n, arg, MODEL_FILE_NAME);
}

/* ---- GPT-2's config.json beside --init-from's file ----------------------------- */

/* The path of `name` in the directory that holds `path` ("d/x.st" and
 * "config.json": "d/config.json"; "x.st": "config.json"). */
static void path_beside(const char *path, const char *name, char *out, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, len, "%s", name);
    else snprintf(out, len, "%.*s/%s", (int)(slash - path), path, name);
}

/* Rank 0 reads the config.json beside path, if there is one, and every
 * rank receives its bytes: *text is NULL when there is none. A config.json
 * that is there but cannot be read (a directory, a named pipe, too large)
 * is refused by name: from_pretrained would fail on it too, and a model
 * whose description cannot be read is not loaded on its shapes alone.
 * Returns 0, or 2 on every rank, with the message on rank 0 (the caller's
 * ckpt_agree prints it). */
static int gpt2_config_everywhere(Trainer *t, const char *path, char **text, size_t *len,
                                  char *err, size_t errlen) {
    char config[FILES_MAX_PATH], why[FILES_MAX_PATH + 256];
    struct stat st;
    long n = -1; /* -1: no config.json; -2: one that cannot be read */
    *text = NULL;
    path_beside(path, "config.json", config, sizeof(config));
    if (t->comm.rank == 0 && lstat(config, &st) == 0) {
        size_t got = 0;
        *text = file_read_small("config.json", config, JSON_MAX_TEXT, &got, why, sizeof(why));
        n = *text ? (long)got : -2;
        if (!*text)
            usage_error(err, errlen,
                        "--init-from %s: the config.json beside it cannot be read: %s Move it "
                        "away, or make it Hugging Face's description of these weights.",
                        path, why);
    }
    MPI_Bcast(&n, 1, MPI_LONG, 0, t->comm.comm);
    if (n == -2) return 2;
    if (n < 0) return 0;
    if (t->comm.rank != 0) *text = (char *)host_malloc((size_t)n + 1, "hold config.json");
    MPI_Bcast(*text, (int)n, MPI_CHAR, 0, t->comm.comm);
    *len = (size_t)n;
    return 0;
}

/* What Hugging Face's GPT2Config takes for a key config.json leaves out:
 * from_pretrained builds the model with these, so a check must too. */
typedef struct {
    const char *key, *flag; /* config.json's name; the fsdp.c option that sets it */
    long hf_default;
} Gpt2ConfigInt;

/* One whole-number field of config.json: absent, its default; present, a
 * JSON integer in 1..2^31-1 (GPT2Config's fields are Python ints: 12.0 or
 * "12" would fail there). Returns 0 with *value, or 2 with a message. */
static int gpt2_config_int(const JsonObject *o, const Gpt2ConfigInt *f, long *value,
                           const char *where, char *err, size_t errlen) {
    const JsonMember *m = json_member(o, f->key);
    char shown[96];
    *value = f->hf_default;
    if (!m) return 0;
    if (m->kind != JSON_NUMBER || !m->integer || m->number < 1 || m->number > 2147483647.0)
        return usage_error(err, errlen,
                           "%s says %s %s, which is not a whole number of at least 1. Fix the "
                           "file: Hugging Face's GPT2Config needs one too.",
                           where, f->key, json_member_text(m, shown, sizeof(shown)));
    *value = (long)m->number;
    return 0;
}

/* A true/false field: absent, its default. Returns 0 or 2. */
static int gpt2_config_bool(const JsonObject *o, const char *key, int hf_default, int *value,
                            const char *where, char *err, size_t errlen) {
    const JsonMember *m = json_member(o, key);
    char shown[96];
    *value = hf_default;
    if (!m) return 0;
    if (m->kind != JSON_TRUE && m->kind != JSON_FALSE)
        return usage_error(err, errlen, "%s says %s %s, where true or false belongs. Fix the file.",
                           where, key, json_member_text(m, shown, sizeof(shown)));
    *value = m->kind == JSON_TRUE;
    return 0;
}

/* The shape: what the run was given against what config.json says (or
 * GPT2Config's default for what it leaves out). n_head above all: the
 * weights of 4 heads and of 2 have the same shapes, and the wrong count
 * trains without complaint, on attention split the wrong way. */
static int gpt2_config_shape(const Config *c, const JsonObject *o, const char *where, char *err,
                             size_t errlen) {
    const Gpt2ConfigInt fields[5] = {{"n_head", "--n-head", 12},
                                     {"n_layer", "--n-layer", 12},
                                     {"n_embd", "--n-embd", 768},
                                     {"n_positions", "--n-ctx", 1024},
                                     {"vocab_size", "--vocab", 50257}};
    const long ours[5] = {c->n_head, c->depth, c->width, c->n_ctx, c->vocab};
    for (int i = 0; i < 5; i++) {
        long v = 0;
        if (gpt2_config_int(o, &fields[i], &v, where, err, errlen)) return 2;
        if (v == ours[i]) continue;
        if (!json_member(o, fields[i].key))
            return usage_error(err, errlen,
                               "%s gives no %s, which Hugging Face's GPT2Config reads as %ld, "
                               "but this run has %s %ld. Give %s %ld, or write the model's %s "
                               "into it.",
                               where, fields[i].key, v, fields[i].flag, ours[i], fields[i].flag, v,
                               fields[i].key);
        return usage_error(err, errlen,
                           "%s says %s %ld, but this run has %s %ld: the weights are of another "
                           "model%s. Give %s %ld.",
                           where, fields[i].key, v, fields[i].flag, ours[i],
                           i == 0 ? " (its heads' projections have the same shapes whatever the "
                                    "count, so only config.json can tell)"
                                  : "",
                           fields[i].flag, v);
    }
    long inner = 0;
    const JsonMember *m = json_member(o, "n_inner"); /* null or absent: 4 x n_embd */
    if (m && m->kind != JSON_NULL) {
        Gpt2ConfigInt f = {"n_inner", "", 0};
        if (gpt2_config_int(o, &f, &inner, where, err, errlen)) return 2;
        if (inner != 4L * c->width)
            return usage_error(err, errlen,
                               "%s says n_inner %ld, but fsdp.c's MLP is 4 x n_embd = %ld wide "
                               "(GPT-2's; n_inner null means the same). This model cannot be "
                               "trained here.",
                               where, inner, 4L * c->width);
    }
    return 0;
}

/* The arithmetic: the activation, LayerNorm's eps, attention's scaling,
 * the tied lm_head. fsdp.c computes GPT-2's, and has no option for any
 * other; a model that needs another is refused, not trained wrongly. */
static int gpt2_config_math(const JsonObject *o, const char *where, char *err, size_t errlen) {
    char shown[96];
    const JsonMember *m = json_member(o, "model_type");
    if (m && (m->kind != JSON_STRING || strcmp(m->text, "gpt2") != 0))
        return usage_error(err, errlen,
                           "%s says model_type %s: fsdp.c trains Hugging Face's gpt2 only. Give a "
                           "GPT-2's weights.",
                           where, json_member_text(m, shown, sizeof(shown)));
    /* gelu_new is GPT-2's tanh approximation; gelu_pytorch_tanh and
     * gelu_fast are the same function, computed by another kernel
     * (transformers' activations.py says so), and "gelu" (erf) is not */
    m = json_member(o, "activation_function");
    if (m && (m->kind != JSON_STRING || (strcmp(m->text, "gelu_new") != 0 &&
                                         strcmp(m->text, "gelu_pytorch_tanh") != 0 &&
                                         strcmp(m->text, "gelu_fast") != 0)))
        return usage_error(err, errlen,
                           "%s says activation_function %s, but fsdp.c's MLP computes gelu_new "
                           "(the tanh approximation, GPT-2's). This model cannot be trained here.",
                           where, json_member_text(m, shown, sizeof(shown)));
    m = json_member(o, "layer_norm_epsilon"); /* kernels/layers.h adds 1e-5f */
    if (m && (m->kind != JSON_NUMBER || (float)m->number != 1e-5f))
        return usage_error(err, errlen,
                           "%s says layer_norm_epsilon %s, but fsdp.c's LayerNorm adds 1e-05 "
                           "(GPT-2's). This model cannot be trained here.",
                           where, json_member_text(m, shown, sizeof(shown)));
    /* reorder_and_upcast_attn is left alone: it changes only the order and
     * precision in which transformers' eager attention computes the same
     * scores (and sdpa ignores it), not what they are */
    static const char *const keys[3] = {"scale_attn_by_inverse_layer_idx", "scale_attn_weights",
                                        "tie_word_embeddings"};
    static const int want[3] = {0, 1, 1}, hf_default[3] = {0, 1, 1};
    static const char *const why[3] = {
        "divides layer i's attention scores by i + 1 as well",
        "leaves attention's scores unscaled by 1/sqrt(head dim)",
        "gives lm_head a matrix of its own, where fsdp.c ties it to wte (and reads no "
        "lm_head.weight)"};
    for (int i = 0; i < 3; i++) {
        int v = 0;
        if (gpt2_config_bool(o, keys[i], hf_default[i], &v, where, err, errlen)) return 2;
        if (v != want[i])
            return usage_error(err, errlen,
                               "%s says %s %s: this model %s, and fsdp.c's GPT-2 does not. It "
                               "cannot be trained here.",
                               where, keys[i], v ? "true" : "false", why[i]);
    }
    return 0;
}

/* Dropout is not refused: the weights are the same, only training differs.
 * But fsdp.c has none, and Hugging Face's GPT-2 has 0.1 by default, so the
 * user is told, once. Returns 0, or 2 when a rate is not a number. */
static int gpt2_config_dropout(const JsonObject *o, const char *path, int root, char *err,
                               size_t errlen) {
    static const char *const keys[3] = {"resid_pdrop", "embd_pdrop", "attn_pdrop"};
    char rates[256] = "", shown[96];
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        const JsonMember *m = json_member(o, keys[i]);
        if (m && (m->kind != JSON_NUMBER || m->number < 0 || m->number > 1))
            return usage_error(err, errlen,
                               "--init-from %s: its config.json says %s %s, which is not a "
                               "probability between 0 and 1. Fix the file.",
                               path, keys[i], json_member_text(m, shown, sizeof(shown)));
        if (m && m->number == 0) continue;
        n += (size_t)snprintf(rates + n, sizeof(rates) - n, "%s%s %s", n ? ", " : "", keys[i],
                              m ? m->text : "0.1 (absent: GPT2Config's default)");
        if (n >= sizeof(rates)) n = sizeof(rates) - 1;
    }
    if (root && n)
        printf("note: --init-from %s: its config.json has dropout: %s. fsdp.c trains without "
               "dropout, as model.eval() computes, so its losses are not those of "
               "model.train() with that config\n",
               path, rates);
    return 0;
}

/* ------------------------------------------------------------------------
 * A GPT-2's config.json, beside the --init-from file, against this run.
 *
 * A safetensors file holds tensors, not the model they belong to: the
 * weights of n_head 4 and n_head 2 have the same shapes, and so do those of
 * a model with another activation or LayerNorm eps. Loaded into the wrong
 * one, they train without complaint, to a worse loss. Hugging Face keeps
 * what the shapes cannot say in config.json, beside the weights, and
 * from_pretrained builds the model from it: so do we, when it is there,
 * refusing any difference by name. Every rank judges the same bytes (rank
 * 0's), so every rank reaches the same verdict. No config.json: the shapes
 * alone are checked, as before (OpenAI's checkpoint is often copied alone).
 * Returns 0, or 2 with the message, on every rank.
 * --------------------------------------------------------------------- */
static int gpt2_check_config(Trainer *t, const char *path, char *err, size_t errlen) {
    char *text = NULL, why[512], where[FILES_MAX_PATH + 64];
    size_t len = 0;
    if (gpt2_config_everywhere(t, path, &text, &len, err, errlen)) return 2;
    if (!text) return 0;
    JsonObject o;
    int rc = 0;
    snprintf(where, sizeof(where), "--init-from %s: its config.json", path);
    if (json_object_parse(text, len, &o, why, sizeof(why)) != 0) {
        char config[FILES_MAX_PATH];
        path_beside(path, "config.json", config, sizeof(config));
        rc = usage_error(err, errlen,
                         "%s (%s) is not valid JSON: %s. Fix it (python3 -m json.tool %s shows "
                         "where), or move it away to load the weights on their shapes alone.",
                         where, config, why, config);
    }
    if (rc == 0) rc = gpt2_config_math(&o, where, err, errlen);
    if (rc == 0) rc = gpt2_config_shape(&t->cfg, &o, where, err, errlen);
    if (rc == 0) rc = gpt2_config_dropout(&o, path, t->comm.rank == 0, err, errlen);
    json_object_free(&o);
    free(text);
    return rc;
}

/* ---- GPT-2 in Hugging Face's layout -------------------------------------------- */

/* One parameter of a unit's full state (on the host) into the file, at
 * its place; a Conv1D weight transposed to Hugging Face's (in, out). */
static void export_param(OutFile *f, const Param *p, const float *full, uint64_t at) {
    size_t bytes = (size_t)p->numel * sizeof(float);
    if (!p->conv1d) {
        out_write_at(f, full + p->offset, bytes, at);
        return;
    }
    float *t = (float *)host_malloc(bytes, "export a Conv1D weight");
    transpose_into(t, full + p->offset, p->shape[0], p->shape[1]);
    out_write_at(f, t, bytes, at);
    free(t);
}

/* GPT-2's config.json beside the exported weights, so that Hugging Face's
 * GPT2LMHeadModel.from_pretrained(that directory) builds the same model:
 * the shape, gelu_new, LayerNorm eps 1e-5, no dropout (fsdp.c trains
 * without), tied embeddings. Its text into out (at most len bytes);
 * returns its length. --init-from reads these fields back
 * (gpt2_check_config).
 *
 * bos_token_id and eos_token_id must be tokens of the vocabulary:
 * transformers warns of an id outside it, and generate() would stop on a
 * token the model cannot produce. OpenAI's GPT-2 uses its last token,
 * <|endoftext|> = 50256 of 50257, for both; a byte-level vocabulary (256)
 * has no special token at all, and its last one (255) is the same
 * convention: the highest id, in range, whatever --vocab is. */
static int gpt2_config_text(const Config *c, char *out, size_t len) {
    return snprintf(out, len,
                    "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                    "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_embd\": %d,\n"
                    "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                    "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                    "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                    "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
                    "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
                    "  \"torch_dtype\": \"float32\"\n}\n",
                    c->vocab, c->n_ctx, c->width, c->depth, c->n_head, c->vocab - 1, c->vocab - 1);
}

/* What rank 0 prints after an export: how many tensors, whose names, and
 * for GPT-2 the file name from_pretrained(directory) looks for. */
static void export_print_done(const Trainer *t, const char *path, int n_tensors) {
    int gpt2 = t->cfg.arch == ARCH_GPT2;
    printf("exported %ld parameters in %d tensors to %s (safetensors, F32, %s)\n",
           t->model.total_numel, n_tensors, path,
           gpt2 ? "Hugging Face's GPT-2, with config.json beside it" : "PyTorch names");
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (gpt2 && strcmp(base, "model.safetensors") != 0)
        printf("note: from_pretrained(directory) reads the file named model.safetensors there; "
               "name the export so, or pass this file's path to its loader\n");
}

/* Elements [a, b) of Conv1D weight p (in our (out, in) order) from the
 * file's (in, out) copy at `at`: the file holds it
 * transposed, so a shard's slice of ours is scattered over the file's. */
static int st_read_conv1d(int fd, uint64_t at, const Param *p, long a, long b, float *out) {
    size_t bytes = (size_t)p->numel * sizeof(float);
    float *file = (float *)host_malloc(bytes, "read a Conv1D weight");
    float *ours = (float *)host_malloc(bytes, "read a Conv1D weight");
    int rc = file_read_at(fd, file, bytes, at);
    if (rc == 0) {
        transpose_into(ours, file, p->shape[1], p->shape[0]);
        memcpy(out, ours + a, (size_t)(b - a) * sizeof(float));
    }
    free(file);
    free(ours);
    return rc;
}

#endif /* FSDP_IO_CHECKPOINT_H */
