/* ============================================================================
 * optim/adamw.h — part of section 4 of fsdp.c: one element of
 * torch.optim.AdamW (and Adam), for host and device alike. fsdp.c's sharded
 * AdamW (adamw_step, section 4, whose banner gives the update) runs it on
 * every element of a rank's shard; tests/test_kernels.cu and
 * dev/bench/bench_adamw.c run it alone.
 *
 * defines: adamw_update_one, AdamWStep, adamw_one, adamw_mixed_one
 *
 * May include core.h and kernels/ (store_as); nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_OPTIM_ADAMW_H
#define FSDP_OPTIM_ADAMW_H
#include "../core.h"
#include "../kernels/layers.h" /* store_as */

FSDP_HD static inline void adamw_update_one(float *p, float *m, float *v, float g, float lr,
                                            float beta1, float beta2, float eps, float weight_decay,
                                            float bias_correction1, float bias_correction2_sqrt) {
    *p *= 1.0f - lr * weight_decay;
    *m = beta1 * *m + (1.0f - beta1) * g;
    *v = beta2 * *v + (1.0f - beta2) * g * g;
    float denom = sqrtf(*v) / bias_correction2_sqrt + eps;
    *p -= (lr / bias_correction1) * (*m / denom);
}

/* One step's hyperparameters, passed by value to every element. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2_sqrt;
    int l2; /* --optimizer adam: weight decay as L2 on the gradient */
} AdamWStep;

FSDP_HD static inline void adamw_one(long i, float *p, float *m, float *v, const float *g,
                                     AdamWStep s) {
    float grad = s.l2 ? g[i] + s.weight_decay * p[i] : g[i];
    adamw_update_one(&p[i], &m[i], &v[i], grad, s.lr, s.beta1, s.beta2, s.eps,
                     s.l2 ? 0.0f : s.weight_decay, s.bias_correction1, s.bias_correction2_sqrt);
}
/* ... with mixed precision also the shard's copy `low` in param_dtype d,
 * held as the all-gather sends it, written in the same pass: the
 * unit_refresh_low_precision pass would read the master back (4 bytes an
 * element, 1.3 ms of the 1.06B model's step on one H100) */
FSDP_HD static inline void adamw_mixed_one(long i, float *p, float *m, float *v, const float *g,
                                           AdamWStep s, void *low, Dtype d, Dtype held) {
    adamw_one(i, p, m, v, g, s);
    store_as(low, i, round_to(p[i], d), held);
}

#endif /* FSDP_OPTIM_ADAMW_H */
