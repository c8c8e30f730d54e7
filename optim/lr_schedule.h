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
 *   then, with u = t - W:
 *     constant                        lr
 *     step      (StepLR)              lr * gamma ^ floor(u / step_size)
 *     cosine    (CosineAnnealingLR)   lr * (1 + cos(pi * u / (steps - W))) / 2
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
    if (c->lr_schedule == LR_COSINE) {
        double span = (double)(c->steps - c->warmup);
        return (float)(lr * 0.5 * (1.0 + cos(3.14159265358979323846 * u / (span > 0 ? span : 1))));
    }
    return (float)lr;
}

static const char *const LR_SCHEDULE_NAMES[] = {"constant", "step", "cosine"};

#endif /* FSDP_OPTIM_LR_SCHEDULE_H */
