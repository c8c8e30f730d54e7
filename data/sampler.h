/* ============================================================================
 * data/sampler.h — section 5 of fsdp.c, PyTorch's DistributedSampler: the
 * global batch of step s is fixed by (seed, s), and sample j goes to rank
 * j mod N. Section 5's comment on data says why every rank then trains on
 * its share of the batch one rank would.
 *
 * defines: sampler_local_batch (the byte MLP's), sampler_local_sequences (GPT-2's)
 *
 * May include core.h and data/corpus.h; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_DATA_SAMPLER_H
#define FSDP_DATA_SAMPLER_H
#include "../core.h"
#include "corpus.h" /* Corpus, corpus_batch_token */

/* This rank's share of the global batch of `step` is samples j = rank,
 * rank + N, rank + 2N, ... (DistributedSampler's interleaving); this draws
 * its samples k = first .. first + count - 1 (a micro-batch). Each sample
 * depends on (seed, step, j) alone, so drawing a part of the local batch
 * gives the same bytes as drawing all of it. */
static void sampler_local_batch(const Corpus *c, uint64_t seed, int step, int rank, int world,
                                int first, int count, int T, unsigned char *tokens, int *targets) {
    uint64_t positions = (uint64_t)(c->len - T);
    for (int k = 0; k < count; k++) {
        uint64_t j = (uint64_t)rank + (uint64_t)(first + k) * (uint64_t)world;
        long pos = (long)(rng_u64(seed, STREAM_SAMPLER, (uint64_t)step, j) % positions);
        memcpy(tokens + (long)k * T, c->bytes + pos, (size_t)T);
        targets[k] = c->bytes[pos + T];
    }
}

/* GPT-2's samples: sequence k is T tokens at a position drawn as above,
 * and its targets the T tokens one further on, each checked as it is drawn */
static void sampler_local_sequences(const Corpus *c, uint64_t seed, int step, int rank, int world,
                                    int first, int count, int T, int *tokens, int *targets) {
    uint64_t positions = (uint64_t)(c->len - T);
    for (int k = 0; k < count; k++) {
        uint64_t j = (uint64_t)rank + (uint64_t)(first + k) * (uint64_t)world;
        long pos = (long)(rng_u64(seed, STREAM_SAMPLER, (uint64_t)step, j) % positions);
        for (int i = 0; i < T; i++) { /* checked: an embedding row past the table crashes */
            tokens[(long)k * T + i] = corpus_batch_token(c, pos + i);
            targets[(long)k * T + i] = corpus_batch_token(c, pos + i + 1);
        }
    }
}

#endif /* FSDP_DATA_SAMPLER_H */
