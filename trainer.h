/* ============================================================================
 * trainer.h — section 1 of fsdp.c, the runtime: one rank's whole training
 * state (struct Trainer), the one mutable structure the program has, the
 * units and shards included. Nothing global but the process's device
 * (kernels/backend.h's `backend`): the tests build several trainers in one
 * process (a 1-rank reference next to an N-rank run) and compare them.
 * fsdp.c builds and steps it; model/, io/, run/ and the tests read it.
 *
 * defines: CopyDirection, PendingReduce, struct Trainer; and declares the
 *          model's entry points that fsdp.c calls (model/mlp.h, model/gpt2.h)
 *
 * It cannot live in fsdp.h: it holds a Corpus, the activations and the
 * simulator's Sim by value, and sim/sim.h includes fsdp.h. May include
 * core.h, fsdp.h, sim/sim.h, data/corpus.h and model/activations.h;
 * nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_TRAINER_H
#define FSDP_TRAINER_H
#include "core.h"
#include "fsdp.h"
#include "sim/sim.h"
#include "data/corpus.h"
#include "model/activations.h"

/* --cpu-offload's copies, by direction (Trainer.copy_calls, copy_bytes) */
typedef enum { TO_DEVICE, TO_HOST } CopyDirection;

/* A unit's gradient reduction on its way: started by the unit's
 * post-backward hook, finished by the next one's (or at the end of
 * backward), so it travels while the next unit computes. There is at most
 * one, and the trainer owns it, as PyTorch's FSDP keeps one queue of
 * _post_reduce_grad_callback work on its reduce-scatter stream. */
typedef struct {
    int in_flight;     /* 0: nothing pending */
    int unit;          /* whose gradient */
    CommHandle handle; /* its reduce-scatter (no_shard: all-reduce) */
    float *kept;       /* the gradient shard the reduction does not write, to finish into:
                        * the sum of earlier micro-batches (--grad-accum), or the host's
                        * shard (--cpu-offload); NULL if none */
    void *input;       /* --fsdp2: the reduce-scatter's input, the gradients laid rank by
                        * rank (chunk_cat), freed when it is done; NULL with FSDP1 */
} PendingReduce;

struct Trainer {
    Config cfg;
    Comm comm;
    Ledger ledger;
    Model model;
    Unit *units; /* unit 0 is the root */
    int n_units;
    Activations act;     /* the byte MLP's, or ... */
    Gpt2Activations gpt; /* ... GPT-2's */
    Corpus corpus;
    int shard_rank, shard_world; /* this rank among those sharing its units' shards, and
                                  * their number: N, or a node's G with hybrid strategies */
    int local_batch;   /* global batch / N */
    int micro_batch;   /* B: local batch / --grad-accum, what one forward sees */
    int micro;         /* which micro-batch of the step is running, 0 .. K-1 */
    int sync_grads;    /* this backward reduces the gradients (PyTorch: _sync_gradients) */
    int recomputing;   /* --activation-checkpointing: a block's forward runs again in backward */
    float loss_scale;  /* --grad-scaler: the loss is multiplied by it before backward; else 1 */
    float step_scale;  /* ... the scale the last step used (before its update) */
    int scaler_growth; /* ... steps since it last changed (PyTorch: _growth_tracker) */
    int skipped_step;  /* ... the last step found inf/NaN gradients and was skipped */
    int found_inf_here; /* ... this rank's own shards had them (the others may not) */
    long copy_calls[2]; /* --cpu-offload: copies to the device [0] and to the host [1] */
    double copy_bytes[2];    /* ... and their bytes, as booked */
    double copy_sim_seconds; /* ... priced on PCIe (sim/net.c's pcie) */
    double *host_peaks;      /* rank 0, after gather_stats: every rank's host peaks */
    int steps_run;           /* trainer_step calls so far (a resumed run counts its own) */
    int adam_step;     /* AdamW's t, for bias correction */
    float grad_norm;   /* --clip-grad-norm: the last step's total gradient norm, before clipping */
    uint32_t data_crc; /* CRC-32 of the whole --data file, once a checkpoint needs it */
    int data_crc_known;
    Sim sim; /* the simulator's instruments (sim/), told by hooks */
    /* the order units run in, recorded in the first forward as PyTorch does,
     * so prefetching knows which unit comes next */
    int *pre_order, n_pre;   /* (n_units) units in the order their forward starts */
    int *post_order, n_post; /* (n_units) ... and ends; backward is its reverse */
    int order_known;         /* a whole forward has been recorded */
    int gathers_in_flight, max_gathers_in_flight; /* all-gathers started, not waited */
    PendingReduce pending_reduce; /* the one gradient reduction in flight (section 4) */
};

/* The model FSDP wraps, as fsdp.c calls it: the byte MLP (model/mlp.h) and
 * GPT-2 (model/gpt2.h), each on the hooks of fsdp.h. They are extern, and
 * main.c includes model/ after fsdp.c: the one loop of the design, the model
 * calling the hooks as a PyTorch module's forward triggers FSDP's. */
void activations_alloc(Activations *a, Ledger *l, const Config *c, int B);
float model_forward(Trainer *t);
void model_backward(Trainer *t);
void gpt2_activations_alloc(Gpt2Activations *a, Ledger *l, const Config *c, int B);
void gpt2_load_batch(Trainer *t, const Corpus *corpus, int step, int micro);
float gpt2_forward(Trainer *t);
void gpt2_backward(Trainer *t);

#endif /* FSDP_TRAINER_H */
