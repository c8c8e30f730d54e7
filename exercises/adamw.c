/* exercises/adamw.c — graded exercise: the sharded AdamW step.
 *
 * Write the body. `make exercise EX=adamw` compiles fsdp.c with this
 * function in place of its own (fsdp.c, section 4) and grades it: training
 * must equal the reference (torch.optim.AdamW) on 1..4 ranks, under
 * full_shard and no_shard, with a learning-rate schedule (--lr-schedule
 * cosine --warmup 2), with --optimizer adam, with --param-dtype bf16,
 * under the fp16 loss scaler, which skips steps, alone and with the
 * schedule, with --no-decay-bias-norm, and across a checkpoint (2 steps saved, then --resume to
 * step 4).
 *
 * The task. trainer_step calls adamw_step once per optimizer step taken
 * (after gradient clipping; a step the loss scaler skips never comes
 * here). One step, on this rank's shards only, c = &t->cfg:
 *   1. Count it: t->adam_step is the number of steps taken so far; add
 *      one. Its new value is t, the step of the bias corrections (1 on the
 *      first step). Keep the count there, not in a variable of your own: a
 *      checkpoint saves t->adam_step and --resume restores it.
 *   2. The step's learning rate is lr_at(c, t - 1): the schedule's rate
 *      for AdamW's step t - 1 counting from 0 (--lr-schedule, --warmup),
 *      not the training step's (they part when the loss scaler skips a
 *      step). c->lr is only the base rate. The bias corrections are 1 - beta1^t and
 *      sqrt(1 - beta2^t), in float with powf and sqrtf, as the reference
 *      computes them, so the numbers match bitwise; beta1, beta2, eps and
 *      weight_decay are in c too.
 *   3. For every unit u = &t->units[ui] (ui < t->n_units) and its u->shard
 *      elements i, update the fp32 parameter unit_master(u)[i], u->exp_avg[i]
 *      and u->exp_avg_sq[i] from the gradient u->shard_grad[i] with
 *      adamw_update_one (it does one element; read it). With --optimizer
 *      adam (c->optimizer == OPTIMIZER_ADAM, torch.optim.Adam) weight decay
 *      is L2: add c->weight_decay * p to the gradient, and pass 0 as
 *      adamw_update_one's (decoupled) weight decay.
 *   4. unit_master(u) is u->shard_param itself in fp32; with mixed
 *      precision (--param-dtype bf16) it is the fp32 master copy, and
 *      shard_param holds it rounded, which the next all-gather sends. So
 *      after stepping a unit call unit_refresh_low_precision(u,
 *      c->param_dtype) (it does nothing in fp32). (The reference writes
 *      the rounded copy in the update's own pass, adamw_mixed_one, which
 *      saves reading the master again: the same values.)
 *   5. With --no-decay-bias-norm (c->no_decay_bias_norm) the parameters
 *      are in two groups, as nanoGPT and HF's Trainer make them: vectors
 *      (a Param whose shape[1] is 1: biases, LayerNorm) get no weight
 *      decay. A flat parameter mixes both, so step the shard a parameter's
 *      piece at a time: for j < u->n_params, p = &t->model.params[u->params[j]],
 *      shard_piece(u, j, p, t->shard_rank, &piece) says whether this
 *      rank's shard holds part of p, and where: its elements
 *      [piece.first, piece.end) of p are the shard's from piece.at on.
 * Call span_begin(t, -1, PHASE_OPTIMIZER) first and span_end(t, -1,
 * PHASE_OPTIMIZER) last, for the trace.
 * Why no communication? Each element's update depends on that element
 * alone, so the optimizer state is sharded for free.
 * (A plain loop runs on the CPU; the reference uses STATE_FOR_EACH with
 * adamw_one, which also runs on a GPU, and on the host with --cpu-offload.)
 */
static void adamw_step(Trainer *t) {
    /* TODO: count the step, its learning rate and bias corrections, then every unit's shard */
    (void)t;
}
