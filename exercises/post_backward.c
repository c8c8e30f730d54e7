/* exercises/post_backward.c — graded exercise: the post-backward hook.
 *
 * Write the body. `make exercise EX=post_backward` compiles fsdp.c with this
 * function in place of its own (fsdp.c, section 8, "After a unit's
 * backward") and grades it: training must equal the reference for
 * full_shard, shard_grad_op and no_shard on 1..4 ranks, with
 * --backward-prefetch post, and under hybrid_shard on 4 ranks, and the
 * memory peaks and traffic must be what the reference promises.
 *
 * The task (PyTorch: _post_backward_hook). Unit ui has just finished its
 * backward: u->full_grad holds this rank's full-size gradient of the unit.
 *   1. span_end(t, ui, PHASE_BACKWARD) tells the instruments.
 *   2. Wait for the previous unit's reduction: unit_reduce_wait(t, v) for
 *      every unit v (at most one is ever in flight).
 *   3. no_shard (DDP, !is_sharded(t)): start an all-reduce of the unit's
 *      gradient in place (comm_all_reduce_start on u->shard_grad, u->padded
 *      elements), remember it in u->reduce, set u->reducing = 1; done.
 *   4. Otherwise reshard: free the full parameters (unit_free_full_params).
 *   5. With --backward-prefetch post, start the next unit's all-gather now:
 *      unit_unshard_start(t, unit_next_backward(t, ui)).
 *   6. Start the reduce-scatter of u->full_grad into u->shard_grad
 *      (comm_reduce_scatter_start: it averages over ranks when waited for),
 *      keep its handle in u->reduce and set u->reducing = 1. Do not wait:
 *      it travels while the next unit computes, and unit_reduce_wait frees
 *      the full gradient once it is done.
 */
static void unit_post_backward(Trainer *t, int ui) {
    /* TODO: the six steps above */
    (void)t;
    (void)ui;
}
