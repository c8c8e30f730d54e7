/* exercises/adamw.c — graded exercise: the sharded AdamW step.
 *
 * Write the body. `make exercise EX=adamw` compiles fsdp.c with this
 * function in place of its own (fsdp.c, section 9) and grades it: training
 * must equal the reference (torch.optim.AdamW) on 1..4 ranks and for every
 * strategy.
 *
 * The task. One optimizer step on this rank's shards only: for every unit
 * u = &t->units[ui] (ui < t->n_units), for its u->shard elements i, update
 * u->shard_param[i], u->exp_avg[i] and u->exp_avg_sq[i] from the gradient
 * u->shard_grad[i] with adamw_update_one (it does one element; read it).
 * Its last two arguments are the bias corrections for step t, where t
 * counts optimizer steps from 1 (t->adam_step holds the previous step's
 * t): 1 - beta1^t, and sqrt(1 - beta2^t). The hyperparameters are in
 * t->cfg (lr, beta1, beta2, eps, weight_decay). Compute in float, with
 * powf and sqrtf, as the reference does, so the numbers match bitwise.
 * Call span_begin(t, -1, PHASE_OPTIMIZER) first and span_end(t, -1,
 * PHASE_OPTIMIZER) last, for the trace.
 * Why no communication? Each element's update depends on that element
 * alone, so the optimizer state is sharded for free.
 * (A plain loop runs on the CPU; the reference uses FOR_EACH with
 * adamw_one, which also runs on a GPU.)
 */
static void adamw_step(Trainer *t) {
    /* TODO: bias corrections for the new step, then every unit's shard */
    (void)t;
}
