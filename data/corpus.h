/* ============================================================================
 * data/corpus.h — the bytes a run trains on: the embedded corpus (a random
 * "language" generated from the seed, whose entropy per byte is known) and
 * --data FILE (mapped, not copied). trainer.h includes it, where the Trainer
 * that holds a Corpus is defined; fsdp.c's section 5 (Data) says what the
 * corpus is, and data/sampler.h deals it out.
 *
 * May include core.h, fsdp.h and files.h; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_DATA_CORPUS_H
#define FSDP_DATA_CORPUS_H
#include "../core.h"
#include "../fsdp.h"
#include "../files.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    unsigned char *bytes;
    const uint16_t *tokens; /* --data FILE.bin: llm.c's GPT-2 tokens (bytes is NULL) */
    long len;               /* bytes, or tokens */
    size_t map_bytes;       /* the mapped file's size */
    double entropy_floor; /* nats per byte the source cannot go below; <0: unknown */
    int mapped;           /* bytes is a read-only map of the --data file */
    int vocab;            /* every token is below it: checked at load, and in every batch
                           * drawn (data/corpus.h, NOTE: a file rewritten in place) */
    const char *flag, *path; /* "--data" FILE, "--val-data" FILE; NULL: the embedded corpus */
} Corpus;

enum { LLMC_TOKENS_MAGIC = 20240520, LLMC_HEADER_BYTES = 256 * 4 }; /* llm.c's .bin */
enum { CORPUS_WORDS = 48, CORPUS_SUCCESSORS = 6, CORPUS_MAX_WORD = 7, CORPUS_BYTES = 1 << 17 };

typedef struct {
    char word[CORPUS_WORDS][CORPUS_MAX_WORD + 1];
    int len[CORPUS_WORDS];
    int next[CORPUS_WORDS][CORPUS_SUCCESSORS];
    double cum[CORPUS_SUCCESSORS]; /* cumulative Zipf weights, ending at 1 */
} WordChain;

static void chain_build(WordChain *ch, uint64_t seed) {
    uint64_t draw = 0;
    for (int w = 0; w < CORPUS_WORDS; w++) {
        int unique = 0;
        while (!unique) { /* distinct spellings keep the entropy exact */
            ch->len[w] = 2 + (int)(rng_u64(seed, STREAM_CORPUS, 0, draw++) % (CORPUS_MAX_WORD - 1));
            for (int i = 0; i < ch->len[w]; i++)
                ch->word[w][i] = (char)('a' + rng_u64(seed, STREAM_CORPUS, 0, draw++) % 26);
            ch->word[w][ch->len[w]] = '\0';
            unique = 1;
            for (int o = 0; o < w; o++) unique &= strcmp(ch->word[o], ch->word[w]) != 0;
        }
        for (int k = 0; k < CORPUS_SUCCESSORS; k++)
            ch->next[w][k] = (int)(rng_u64(seed, STREAM_CORPUS, 1, draw++) % CORPUS_WORDS);
    }
    double total = 0.0;
    for (int k = 0; k < CORPUS_SUCCESSORS; k++) total += 1.0 / (k + 1);
    double acc = 0.0;
    for (int k = 0; k < CORPUS_SUCCESSORS; k++) ch->cum[k] = (acc += 1.0 / (k + 1) / total);
}

/* Entropy rate of the text in nats per byte: the word chain's entropy per
 * word (weighted by how often each word occurs in the long run) divided by
 * the average bytes per word, space included. Words are distinct and
 * space-separated, so the bytes determine the words and nothing is lost. */
static double chain_entropy_per_byte(const WordChain *ch) {
    double P[CORPUS_WORDS][CORPUS_WORDS]; /* P[w][v]: chance that v follows w */
    double pi[CORPUS_WORDS], nxt[CORPUS_WORDS];
    memset(P, 0, sizeof(P));
    for (int w = 0; w < CORPUS_WORDS; w++)
        for (int k = 0; k < CORPUS_SUCCESSORS; k++)
            P[w][ch->next[w][k]] += ch->cum[k] - (k ? ch->cum[k - 1] : 0.0);
    for (int w = 0; w < CORPUS_WORDS; w++) pi[w] = (w == 0); /* the text starts at word 0 */
    for (int it = 0; it < 2000; it++) { /* long-run frequencies; averaged to damp periodic chains */
        memset(nxt, 0, sizeof(nxt));
        for (int w = 0; w < CORPUS_WORDS; w++)
            for (int v = 0; v < CORPUS_WORDS; v++) nxt[v] += pi[w] * P[w][v];
        for (int w = 0; w < CORPUS_WORDS; w++) pi[w] = 0.5 * (pi[w] + nxt[w]);
    }
    double h = 0.0, bytes = 0.0;
    for (int w = 0; w < CORPUS_WORDS; w++) {
        bytes += pi[w] * (ch->len[w] + 1);
        for (int v = 0; v < CORPUS_WORDS; v++)
            if (P[w][v] > 0) h -= pi[w] * P[w][v] * log(P[w][v]);
    }
    return h / bytes;
}

static void corpus_synthetic(Corpus *c, uint64_t seed) {
    WordChain ch;
    chain_build(&ch, seed);
    c->bytes = (unsigned char *)host_malloc(CORPUS_BYTES, "allocate the corpus");
    long n = 0;
    int w = 0;
    for (uint64_t i = 0; n < CORPUS_BYTES; i++) {
        for (int k = 0; k <= ch.len[w] && n < CORPUS_BYTES; k++)
            c->bytes[n++] = (unsigned char)(k < ch.len[w] ? ch.word[w][k] : ' ');
        double u = rng_uniform(seed, STREAM_CORPUS, 2, i);
        int k = 0;
        while (k < CORPUS_SUCCESSORS - 1 && u >= ch.cum[k]) k++;
        w = ch.next[w][k];
    }
    c->len = n;
    c->entropy_floor = chain_entropy_per_byte(&ch);
    c->vocab = 256; /* bytes; GPT-2 on it has --vocab 256 or more (config_check) */
    c->flag = c->path = NULL;
}

/* The largest of n tokens (uint16 tokens, or bytes where tokens is NULL),
 * where it first is, and how many are at or past vocab. A refusal names
 * the largest, not the first past the vocabulary: the --vocab it suggests
 * then holds every token of the file, and the next run does not fail on
 * the next one. */
typedef struct {
    int max;   /* the largest token */
    long at;   /* its first index */
    long past; /* tokens >= vocab */
} TokenRange;

static TokenRange token_range(const uint16_t *tokens, const unsigned char *bytes, long n,
                              int vocab) {
    TokenRange r = {-1, 0, 0};
    for (long i = 0; i < n; i++) {
        int v = tokens ? tokens[i] : bytes[i];
        if (v > r.max) {
            r.max = v;
            r.at = i;
        }
        r.past += v >= vocab;
    }
    return r;
}

/* --data FILE: the file is mapped read-only, not copied. The pages belong
 * to the operating system's page cache, so the ranks on one machine share
 * one copy (4 ranks on a 2 GiB file hold 2 GiB, not 8), and only the pages
 * the sampler touches are ever read from the disk. The file must not change
 * while training: a shorter file faults (SIGBUS) on its vanished pages,
 * which file_watch_mapping turns into a message and exit 2, and one
 * rewritten at the same size is caught batch by batch (corpus_batch_token).
 * Returns 0, or 2 with a message in err. */
/* llm.c's token files (dev/data/, .bin files): a header of 256 int32, of which
 * [0] is the magic 20240520, [1] the version 1 and [2] the number of
 * tokens; then the tokens, uint16 each (GPT-2's 50257 fit). Mapped like a
 * byte file; every token is checked against the model's vocabulary here,
 * because an embedding row past the table's end would read memory that is
 * not the model's (and again as batches draw them: corpus_batch_token).
 * Returns 0, or 2 with a message. */
static int corpus_load_tokens(Corpus *c, const char *flag, const char *path, uint64_t size,
                              const Config *cfg, char *err, size_t errlen) {
    if (cfg->arch != ARCH_GPT2)
        return usage_error(err, errlen,
                           "%s %s is llm.c's GPT-2 token file (magic %d), but the byte MLP "
                           "reads bytes. Add --model gpt2-tiny (or another GPT-2), or give a "
                           "text file.",
                           flag, path, LLMC_TOKENS_MAGIC);
    if (size < LLMC_HEADER_BYTES)
        return usage_error(err, errlen, "%s %s: %llu bytes, shorter than the token file's "
                           "1024-byte header.", flag, path, (unsigned long long)size);
    int fd = open(path, O_RDONLY);
    void *p = fd < 0 ? MAP_FAILED : mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (p == MAP_FAILED)
        return usage_error(err, errlen, "%s %s: cannot map it (%s).", flag, path, strerror(errno));
    const int32_t *head = (const int32_t *)p;
    long n = head[2];
    const uint16_t *tokens = (const uint16_t *)((const char *)p + LLMC_HEADER_BYTES);
    int rc = 0;
    if (head[1] != 1)
        rc = usage_error(err, errlen, "%s %s: token file version %d; this program reads "
                         "version 1 (llm.c's uint16 GPT-2 tokens).", flag, path, head[1]);
    else if (n < 0 || (uint64_t)LLMC_HEADER_BYTES + 2 * (uint64_t)n != size)
        rc = usage_error(err, errlen, "%s %s: its header says %ld tokens (%llu bytes with the "
                         "header), but the file has %llu bytes: cut short, or not a token file. "
                         "Write it again.", flag, path, n,
                         (unsigned long long)(LLMC_HEADER_BYTES + 2 * (uint64_t)(n > 0 ? n : 0)),
                         (unsigned long long)size);
    else if (n < (long)cfg->context + 1)
        rc = usage_error(err, errlen, "%s %s: %ld tokens, but one sequence needs --context + 1 "
                         "= %d. Give a longer file or a smaller --context.", flag, path, n,
                         cfg->context + 1);
    TokenRange r = {0, 0, 0};
    if (rc == 0) r = token_range(tokens, NULL, n, cfg->vocab);
    if (r.past)
        rc = usage_error(err, errlen, "%s %s: token %ld is %d, its largest, but the model's "
                         "vocabulary is %d (%ld of its %ld tokens are past it). Use --vocab %d "
                         "or more (GPT-2's is 50257), or the tokenizer the model was made for.",
                         flag, path, r.at, r.max, cfg->vocab, r.past, n, r.max + 1);
    if (rc) {
        munmap(p, (size_t)size);
        return rc;
    }
    c->bytes = (unsigned char *)p; /* the mapping, for corpus_release */
    c->map_bytes = (size_t)size;
    c->tokens = tokens;
    c->len = n;
    c->mapped = 1;
    c->vocab = cfg->vocab;
    c->flag = flag;
    c->path = path;
    file_watch_mapping(flag, path, p, (size_t)size);
    c->entropy_floor = -1.0;
    return 0;
}

/* Token i of the corpus: a byte, or a GPT-2 token of a token file */
static int corpus_token(const Corpus *c, long i) { return c->tokens ? c->tokens[i] : c->bytes[i]; }

static int corpus_load_file(Corpus *c, const char *flag, const char *path, const Config *cfg,
                            char *err, size_t errlen) {
    uint64_t size = 0;
    int context = cfg->context;
    char why[1024];
    int fd = file_open_input(flag, path, &size, why, sizeof(why));
    if (fd < 0)
        return usage_error(err, errlen, "%s Leave out %s to use %s.", why, flag,
                           strcmp(flag, "--data") ? "the corpus's held-out last tenth"
                                                  : "the embedded corpus");
    uint32_t head[3] = {0, 0, 0};
    if (size >= sizeof(head) && pread(fd, head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
        head[0] == LLMC_TOKENS_MAGIC) {
        close(fd);
        return corpus_load_tokens(c, flag, path, size, cfg, err, errlen);
    }
    size_t n = strlen(path);
    if (cfg->arch == ARCH_GPT2 && n > 4 && !strcmp(path + n - 4, ".bin")) {
        close(fd); /* a .bin that is not a token file: most likely one cut short or corrupted */
        return usage_error(err, errlen,
                           "%s %s: a .bin file, but not llm.c's token file: its first int32 is "
                           "%u, not the magic %d. Write it again with llm.c's data scripts, or "
                           "rename it if it is text.",
                           flag, path, head[0], LLMC_TOKENS_MAGIC);
    }
    if (size < (uint64_t)context + 1) {
        close(fd);
        return usage_error(
            err, errlen,
            "%s %s: has %llu bytes, but one sample needs --context + 1 = %d. Give a "
            "larger file or a smaller --context.",
            flag, path, (unsigned long long)size, context + 1);
    }
    if (size > (uint64_t)LONG_MAX / 2) {
        close(fd);
        return usage_error(err, errlen, "%s %s: %llu bytes is more than this program indexes.",
                           flag, path, (unsigned long long)size);
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd); /* the mapping keeps the file open */
    if (p == MAP_FAILED)
        return usage_error(err, errlen,
                           "%s %s: cannot map its %llu bytes into memory (mmap: %s).", flag,
                           path, (unsigned long long)size, strerror(errno));
    /* a byte is its own token: under GPT-2's --vocab below 256 (for a
     * token file) a byte past it would index past the embedding table */
    int small_vocab = cfg->arch == ARCH_GPT2 && cfg->vocab < 256;
    TokenRange r = {0, 0, 0};
    if (small_vocab) r = token_range(NULL, (const unsigned char *)p, (long)size, cfg->vocab);
    if (r.past) {
        int rc = usage_error(err, errlen,
                             "%s %s: byte %ld is %d, its largest, but the model's vocabulary is "
                             "%d (%ld of its %llu bytes are past it), and a text file's bytes "
                             "are its tokens. Use --vocab %d or more (256 holds every byte), or "
                             "an llm.c token file.",
                             flag, path, r.at, r.max, cfg->vocab, r.past,
                             (unsigned long long)size, r.max + 1);
        munmap(p, (size_t)size);
        return rc;
    }
    c->bytes = (unsigned char *)p;
    c->len = (long)size;
    c->map_bytes = (size_t)size;
    c->mapped = 1;
    c->vocab = cfg->arch == ARCH_GPT2 ? cfg->vocab : 256; /* the byte MLP's vocabulary: bytes */
    c->flag = flag;
    c->path = path;
    file_watch_mapping(flag, path, p, (size_t)size);
    c->entropy_floor = -1.0;
    return 0;
}

/* NOTE: a file rewritten in place
 *
 * A training file is mapped, not copied, and checked token by token when
 * it is opened. A file cut short under the mapping faults (SIGBUS), and
 * file_watch_mapping turns the fault into a message. But a file rewritten
 * at the same size faults nothing: its pages now hold whatever was
 * written, and a token past the vocabulary would index past the embedding
 * table (and the logits' row, as a target): a crash, or a silent wrong
 * number. So every token a batch draws is compared with the vocabulary
 * again, here in the data layer, before any kernel sees it: 2 B T compares
 * a micro-batch, nothing beside its forward. (A rewrite that keeps every
 * token within the vocabulary is other data, not a crash, and no check of
 * a token can tell it from the old: the run trains on it.)
 *
 * Each rank draws other rows of the batch, so one rank may find a changed
 * token while the others sit in a collective that needs it: waiting to
 * agree would hang them. So the rank that finds it stops the job as a rank
 * out of memory does (sim/oom.h): a moment's wait per rank number, so that
 * the lowest rank that found it prints the one message, then MPI_Abort with
 * exit 2, which takes every rank down: bad input, not a bug. */
static void corpus_changed_abort(const Corpus *c, long i, int token) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char how[256], message[FILES_MAX_PATH + 1024];
    snprintf(how, sizeof(how),
             "token %ld is now %d, past the model's vocabulary of %d, which every token was "
             "within when the file was opened: it was rewritten in place",
             i, token, c->vocab);
    file_changed_message(message, sizeof(message), c->flag ? c->flag : "the corpus",
                         c->path ? c->path : "", how);
    struct timespec pause = {0, 400 * 1000 * 1000};
    for (int r = 0; r < rank && r < 8; r++) nanosleep(&pause, NULL);
    fputs(message, stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Token i of the corpus, for a batch: below the vocabulary, or the run
 * stops with exit 2 (NOTE: a file rewritten in place) */
static int corpus_batch_token(const Corpus *c, long i) {
    int token = corpus_token(c, i);
    if (token >= c->vocab) corpus_changed_abort(c, i, token);
    return token;
}

static void corpus_release(Corpus *c) {
    if (c->mapped) file_unwatch_mapping(c->bytes);
    if (c->mapped) munmap(c->bytes, c->map_bytes);
    else free(c->bytes);
    c->bytes = NULL;
}

#endif /* FSDP_DATA_CORPUS_H */
