/* ============================================================================
 * optim/lr_schedule.h — part of section 4 of fsdp.c: the learning rate of
 * each optimizer step (PyTorch: torch.optim.lr_scheduler). Not FSDP's
 * algorithm: a schedule is the same on any number of ranks, a function of
 * the step alone. fsdp.c includes it in place; AdamW reads lr_at.
 *
 * defines: lr_at, LR_SCHEDULE_NAMES
 *
 * The learning rate of optimizer step t (t = 0 for the first), a function of
 * t and the flags alone, so a resumed run continues it exactly (the
 * checkpoint records the schedule, and a resume with another is refused):
 *   warmup W:  t < W                  lr * (t + 1) / W   (linear warmup)
 *   then, with u = t - W and the span S = steps - W:
 *     constant                        lr
 *     step      (StepLR)              lr * gamma ^ floor(u / step_size)
 *     cosine    (CosineAnnealingLR)   min + (lr - min) * (1 + cos(pi * u / S)) / 2
 *     linear    (transformers'        min + (lr - min) * (1 - u / S)
 *                linear schedule)
 * min is --min-lr (CosineAnnealingLR's eta_min, nanoGPT's min_lr; 0 by
 * default, where transformers' linear schedule ends). nanoGPT's cosine
 * is this one; its warmup is lr * (t + 1) / (W + 1), a step slower.
 *
 * May include core.h and fsdp.h (Config); nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_OPTIM_LR_SCHEDULE_H
#define FSDP_OPTIM_LR_SCHEDULE_H
#include "../core.h"
#include "../fsdp.h"
#include <math.h>

static float lr_at(const Config *c, long t) {
    double lr = c->lr, u = (double)(t - c->warmup);
    if (t < c->warmup) return (float)(lr * (double)(t + 1) / (double)c->warmup);
    if (c->lr_schedule == LR_STEP) return (float)(lr * pow(c->gamma, floor(u / c->step_size)));
    if (c->lr_schedule == LR_COSINE || c->lr_schedule == LR_LINEAR) {
        double span = (double)(c->steps - c->warmup), S = span > 0 ? span : 1;
        const double pi = 3.14159265358979323846;
        double left = c->lr_schedule == LR_COSINE ? 0.5 * (1.0 + cos(pi * u / S))
                                                  : 1.0 - u / S; /* the share of lr - min left */
        return (float)(c->min_lr + (lr - c->min_lr) * left);
    }
    return (float)lr;
}

static const char *const LR_SCHEDULE_NAMES[] = {"constant", "step", "cosine", "linear"};

#endif /* FSDP_OPTIM_LR_SCHEDULE_H */
