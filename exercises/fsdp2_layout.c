/* exercises/fsdp2_layout.c — graded exercise: FSDP2's layout, each
 * parameter sharded on its rows (PyTorch: fully_shard, a DTensor with
 * Shard(0)).
 *
 * Write the three bodies. `make exercise EX=fsdp2_layout` compiles fsdp.c
 * with these functions in place of its own (fsdp.c, section 14) and grades
 * them: --fsdp2 training must equal the reference on 1..4 ranks (and on 3
 * and 4 ranks with width 1, where most ranks hold no row of a LayerNorm,
 * only padding), under shard_grad_op and hybrid_shard, across a
 * checkpoint saved and resumed, and tests/test_units' check of the shards
 * against the rule must pass.
 *
 * The rule (lecture 19). A parameter p of shape (rows, cols), p->shape[0]
 * rows of p->numel / rows elements, is cut on its rows as torch.chunk
 * cuts a tensor into `world` pieces: every rank's piece has c =
 * ceil(rows / world) rows (ceil_div, core.h), the first ranks' full, the
 * last ones' short or empty, each padded with zero rows up to c. A rank's
 * shard of a unit is its pieces of the unit's parameters, in the unit's
 * order (u->params[0 .. u->n_params - 1], indices into m->params), one
 * after another.
 *
 *   fsdp2_chunk(p, world): the elements of one piece, padding included:
 *     c * cols.
 *
 *   fsdp2_layout(u, m, world): lay out unit u. Allocate u->chunk_at
 *     (host_calloc, n_params + 1 longs: the caller frees it) and set, for
 *     the unit's k-th parameter p:
 *       u->chunk_at[k]  where p's piece starts in every rank's shard;
 *       p->offset       where p starts in the unit's full state: world
 *                       times chunk_at[k] (the full state holds p's world
 *                       pieces side by side, rank 0's rows first, so p's
 *                       own elements are its first numel, then padding);
 *     and u->shard, the shard's length (the sum of the pieces), and
 *     u->padded, the full state's (world shards).
 *
 *   fsdp2_piece(u, j, p, rank, s): which elements of parameter p (the
 *     unit's j-th) rank's shard holds: s->first and s->end, the first and
 *     one past the last of p's elements (row-major: row r is elements
 *     r * cols .. r * cols + cols - 1) in rank's rows, and s->at, where in
 *     the shard they start. Return 0 when rank holds none of p's rows (its
 *     piece is all padding), 1 otherwise. The world is u->padded /
 *     u->shard. fsdp.c fills shards through it (initial values,
 *     checkpoints, --init-from).
 *
 * The copies around the collectives (fsdp2_copy_out, fsdp2_chunk_cat) use
 * your chunk_at and offsets: a wrong place moves rows to where another
 * parameter's are.
 */
static long fsdp2_chunk(const Param *p, int world) {
    /* TODO: ceil(rows / world) rows of cols elements */
    (void)p, (void)world;
    return 0;
}

static void fsdp2_layout(Unit *u, Model *m, int world) {
    /* TODO: chunk_at, each parameter's offset, the shard and the full state's sizes */
    (void)m, (void)world;
    u->chunk_at = (long *)host_calloc((size_t)u->n_params + 1, sizeof(long), "lay out a unit");
}

static int fsdp2_piece(const Unit *u, int j, const Param *p, int rank, ShardPiece *s) {
    /* TODO: rank's rows of p: its elements [first, end) and where they start in the shard */
    (void)u, (void)j, (void)p, (void)rank, (void)s;
    return 0;
}
