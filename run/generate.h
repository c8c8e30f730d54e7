/* ============================================================================
 * run/generate.h — GPT-2's validation loss and text generation around the
 * training loop: --val-data / --val-every, --sample with --temperature,
 * and llm.c's tokenizer file (--tokenizer) to print the tokens as text.
 *
 * defines: val_open, val_close, trainer_val_loss, print_val_loss, sample_print,
 *          tokenizer_load, tokenizer_fits (its size against --vocab)
 *
 * Plumbing: the program around fsdp.c (main.c includes it after fsdp.c).
 * Everything here runs on every rank, because a forward pass is
 * collective: the units' all-gathers need every rank of the group.
 * ========================================================================== */
#ifndef FSDP_RUN_GENERATE_H
#define FSDP_RUN_GENERATE_H
#include "../core.h"
#include "../trainer.h"
#include "../kernels/layers.h"
#include "../model/gpt2.h" /* gpt2_load_batch's sampler, the vocabulary */

#include <ctype.h> /* isprint: a byte token as itself */

enum { TOKENIZER_MAGIC = 20240328 }; /* llm.c's gpt2_tokenizer.bin */

/* The validation tokens: --val-data, or else the last tenth of the training
 * corpus, which training then no longer draws from. Returns 0, or 2 with a
 * message (the same on every rank: every rank reads the same file). */
static int val_open(Trainer *t, Corpus *val, char *err, size_t errlen) {
    const Config *c = &t->cfg;
    memset(val, 0, sizeof(*val));
    if (!c->val_every) return 0;
    if (c->val_path) return corpus_load_file(val, "--val-data", c->val_path, c, err, errlen);
    long cut = t->corpus.len - t->corpus.len / 10;
    if (t->corpus.len - cut < c->context + 1 || cut < c->context + 1)
        return usage_error(err, errlen,
                           "--val-every: the corpus's %ld tokens are too few to hold out a tenth "
                           "of sequences of --context + 1 = %d. Give --val-data FILE, or a "
                           "longer --data.",
                           t->corpus.len, c->context + 1);
    *val = t->corpus; /* a view of its last tenth: nothing to release */
    if (val->tokens) val->tokens += cut;
    else val->bytes += cut;
    val->len = t->corpus.len - cut;
    t->corpus.len = cut;
    return 0;
}
static void val_close(const Config *c, Corpus *val) {
    if (c->val_every && c->val_path) corpus_release(val);
}

/* GPT-2's loss on `batches` batches of `val` (one micro-batch a rank
 * each), drawn as training draws its batches but from steps -1, -2, ...,
 * which training never uses: the same sequences for any number of ranks. */
static float trainer_val_loss(Trainer *t, const Corpus *val, int batches) {
    double loss = 0.0;
    for (int k = 0; k < batches; k++) {
        gpt2_load_batch(t, val, -1 - k, 0);
        loss += trainer_forward_only(t);
    }
    return global_mean_loss(t, (float)(loss / batches));
}

/* The validation loss after `step`, printed with the run's progress: the
 * mean time of the `done` steps run so far (in `seconds`), and the time
 * the steps left would take at that rate (validation included). The same
 * batches every time (trainer_val_loss), so two points of the curve
 * differ by what the model learnt, not by which text was drawn. */
static float print_val_loss(Trainer *t, const Corpus *val, int step, double seconds, int done) {
    float loss = trainer_val_loss(t, val, t->cfg.val_batches);
    double per_step = seconds / (done > 0 ? done : 1);
    if (t->comm.rank == 0)
        printf("step %5d/%d | val loss %.4f (%d batches of %d sequences, %s) | %.1f ms/step, "
               "%.0f s left\n",
               step + 1, t->cfg.steps, loss, t->cfg.val_batches, t->micro_batch * t->comm.world,
               t->cfg.val_path ? t->cfg.val_path : "the corpus's held-out last tenth",
               per_step * 1e3, per_step * (t->cfg.steps - 1 - step));
    return loss;
}

/* llm.c's tokenizer file: 256 uint32 (magic 20240328, version 1 or 2, the
 * vocabulary size, [v2] the end-of-text token), then each token's bytes
 * as a uint8 length and the bytes. Rank 0 reads it; NULL with a message. */
typedef struct {
    char **piece;
    unsigned char *len;
    int n;
} Tokenizer;

static int tokenizer_load(Tokenizer *tk, const char *path, char *err, size_t errlen) {
    memset(tk, 0, sizeof(*tk));
    uint64_t size = 0; /* a regular file only: fopen of a named pipe would wait for a writer */
    int fd = file_open_input("--tokenizer", path, &size, err, errlen);
    if (fd < 0) return 2;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return usage_error(err, errlen, "--tokenizer %s: %s.", path, strerror(errno));
    }
    uint32_t head[256];
    if (fread(head, sizeof(head), 1, f) != 1 || head[0] != TOKENIZER_MAGIC ||
        (head[1] != 1 && head[1] != 2) || head[2] == 0 || head[2] > 1000000) {
        fclose(f);
        return usage_error(err, errlen,
                           "--tokenizer %s: not llm.c's tokenizer file (magic %d, version 1 or "
                           "2). Write it with llm.c's train_gpt2.py, or leave --tokenizer out.",
                           path, TOKENIZER_MAGIC);
    }
    tk->n = (int)head[2];
    tk->piece = (char **)host_calloc((size_t)tk->n, sizeof(char *), "read the tokenizer");
    tk->len = (unsigned char *)host_calloc((size_t)tk->n, 1, "read the tokenizer");
    for (int i = 0; i < tk->n; i++) {
        tk->piece[i] = (char *)host_calloc(256, 1, "read the tokenizer");
        if (fread(&tk->len[i], 1, 1, f) != 1 ||
            fread(tk->piece[i], 1, tk->len[i], f) != tk->len[i]) {
            fclose(f);
            return usage_error(err, errlen, "--tokenizer %s: cut short at token %d of %d.", path,
                               i, tk->n);
        }
    }
    fclose(f);
    return 0;
}
/* A tokenizer decodes the model's tokens only if they are its own: one of
 * another size numbers other pieces (GPT-2's 50257 under a byte model's
 * 256 would print wrong text for every token, without a word). Returns 0,
 * or 2 with a message naming both sizes. */
static int tokenizer_fits(const Tokenizer *tk, const char *path, int vocab, char *err,
                          size_t errlen) {
    if (tk->n == vocab) return 0;
    return usage_error(err, errlen,
                       "--tokenizer %s: has %d tokens, but the model's vocabulary is %d: it "
                       "would decode other tokens than the model's. Give --vocab %d to train "
                       "for this tokenizer, or the tokenizer of %d tokens the data was made with.",
                       path, tk->n, vocab, tk->n, vocab);
}
static void tokenizer_free(Tokenizer *tk) {
    for (int i = 0; i < tk->n && tk->piece; i++) free(tk->piece[i]);
    free(tk->piece);
    free(tk->len);
}

/* One token as text: its tokenizer piece; else a byte (a byte vocabulary),
 * printable as itself and otherwise \xNN; else its number in brackets. */
static void print_token(const Tokenizer *tk, int token) {
    if (tk->n && token < tk->n) fwrite(tk->piece[token], 1, tk->len[token], stdout);
    else if (token < 256 && (isprint(token) || token == '\n')) putchar(token);
    else if (token < 256) printf("\\x%02x", token);
    else printf("[%d]", token);
}

/* The next token from the logits of the last position: softmax(logits /
 * temperature), drawn with the run's seed; temperature 0, the likeliest. */
static int sample_token(const float *logits, int V, float temperature, uint64_t seed, long i) {
    int best = 0;
    for (int v = 1; v < V; v++) best = logits[v] > logits[best] ? v : best;
    if (temperature == 0.0f) return best;
    double sum = 0.0, u, acc = 0.0;
    for (int v = 0; v < V; v++) sum += exp((logits[v] - logits[best]) / temperature);
    u = rng_uniform(seed, STREAM_SAMPLER, (uint64_t)-1, (uint64_t)i) * sum;
    for (int v = 0; v < V; v++) {
        acc += exp((logits[v] - logits[best]) / temperature);
        if (acc >= u) return v;
    }
    return best;
}

/* --sample N: N tokens after the corpus's first, each from a forward of
 * the last T tokens (every rank computes it; rank 0 draws the token and
 * sends it to all). Each row of the micro-batch holds the same context;
 * the positions after it hold 0, which causal attention keeps from
 * affecting the positions before. */
static void sample_print(Trainer *t, const Tokenizer *tk) {
    const Config *c = &t->cfg;
    int n = c->sample, T = c->context, B = t->micro_batch, V = c->vocab;
    int *text = (int *)host_calloc((size_t)n + 1, sizeof(int), "generate");
    int *rows = (int *)host_calloc((size_t)B * T, sizeof(int), "generate");
    float *logits = (float *)host_malloc((size_t)V * sizeof(float), "generate");
    Dtype held = backend.gemm_dtype; /* the logits' format on the device (activations.h) */
    void *row = host_malloc((size_t)V * (size_t)dtype_bytes(held), "generate");
    text[0] = corpus_batch_token(&t->corpus, 0); /* checked: the file may have changed */
    for (int len = 1; len <= n; len++) {
        int start = len > T ? len - T : 0, used = len - start;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T; i++) rows[(long)b * T + i] = i < used ? text[start + i] : 0;
        dev_from_host(t->gpt.tokens, rows, (size_t)B * T * sizeof(int));
        dev_from_host(t->gpt.targets, rows, (size_t)B * T * sizeof(int));
        trainer_forward_only(t);
        /* rows are logits_stride(V) apart (padded), not V: GPT-2's 50257 too */
        dev_to_host(row, element_at(t->gpt.logits, (long)(used - 1) * logits_stride(V), held),
                    (size_t)V * (size_t)dtype_bytes(held));
        for (int v = 0; v < V; v++) logits[v] = load_as(row, v, held);
        int next = sample_token(logits, V, c->temperature, c->seed, len);
        MPI_Bcast(&next, 1, MPI_INT, 0, t->comm.comm);
        text[len] = next;
    }
    if (t->comm.rank == 0) {
        printf("sample (%d tokens after the corpus's first, temperature %g):\n", n,
               (double)c->temperature);
        for (int i = 0; i <= n; i++) print_token(tk, text[i]);
        printf("\n");
    }
    free(text);
    free(rows);
    free(logits);
    free(row);
}

#endif /* FSDP_RUN_GENERATE_H */
