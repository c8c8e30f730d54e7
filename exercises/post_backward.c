/* exercises/post_backward.c — graded exercise: the post-backward hook.
 *
 * Write the body. `make exercise EX=post_backward` compiles fsdp.c with this
 * function in place of its own (fsdp.c, section 3, "After a unit's
 * backward") and grades it: training must equal the reference for
 * full_shard, shard_grad_op and no_shard on 1..4 ranks, with
 * --backward-prefetch post, under hybrid_shard on 4 ranks, and inside
 * no_sync (shard_grad_op, hybrid_shard_zero2); each run must call every
 * collective as many times as the reference; and the memory peaks and
 * traffic must be what the reference promises.
 *
 * The task (PyTorch: _post_backward_hook). Unit ui has just finished its
 * backward: u->full_grad holds this rank's full-size gradient of the unit.
 *   1. span_end(t, ui, PHASE_BACKWARD) tells the instruments.
 *   2. Finish the previous unit's gradient reduction: reduce_grad_finish(t).
 *      The trainer holds at most one in flight (t->pending_reduce), so it
 *      must be done before this unit's starts.
 *   3. Reshard, where the strategy frees the full parameters in backward:
 *      if reshards_after_backward(t) (call it; it is the whole rule, for
 *      every strategy, hybrid ones included), unit_free_full_params(t, ui),
 *      then, with --backward-prefetch post, start the next unit's
 *      all-gather: unit_unshard_start(t, unit_next_backward(t, ui)).
 *      Freeing first is what makes post hold one unit's full parameters
 *      less than pre. (The rule: a replicated strategy has nothing to
 *      free; a strategy that keeps its full parameters from forward to
 *      backward, as every one does that does not reshard after forward,
 *      also keeps them inside no_sync, for the next micro-batch.)
 *   4. When this backward reduces the gradients (t->sync_grads; not inside
 *      no_sync), start this unit's reduction: reduce_grad_start(t, ui) puts
 *      the reduce-scatter (no_shard: all-reduce) on the stream and makes it
 *      the pending one. Do not wait: it travels while the next unit
 *      computes, and the next post-backward (or the end of backward)
 *      finishes it and frees the full gradient.
 */
static void unit_post_backward(Trainer *t, int ui) {
    /* TODO: the four steps above */
    (void)t;
    (void)ui;
}
