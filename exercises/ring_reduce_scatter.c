/* exercises/ring_reduce_scatter.c — graded exercise: the ring reduce-scatter.
 *
 * Write the body. `make exercise EX=ring_reduce_scatter` compiles fsdp.c
 * with this function in place of its own (comm/ring.h, which fsdp.c
 * includes at its top) and grades it: the run must equal the reference on
 * 1, 2, 3 and 4 ranks and under hybrid_shard (groups of 2 of 4 ranks), and
 * the bytes your ring sends must equal the ring volume the tables count.
 *
 * The task. `full` holds N chunks of S floats: this rank's contribution to
 * every chunk (its full-size gradient). On return, chunk c->rank of `full`
 * must hold the SUM over all ranks of their chunk c->rank (the caller
 * divides by N for the mean, so do not; other chunks may hold anything).
 * `tmp` is scratch for S floats. Use only MPI_Sendrecv with ring_right(c) and
 * ring_left(c), on c->stream_comm (never MPI_COMM_WORLD: under
 * --strategy hybrid_shard the ring runs on a group of the ranks, and
 * c->rank, c->world are its own), tag COMM_REDUCE_SCATTER, and N - 1 steps,
 * each sending S floats and receiving S floats into tmp, then adding tmp
 * into the chunk it belongs to. After each step, call
 *     sim_on_ring_step(c->sim, c, COMM_REDUCE_SCATTER, s, send_chunk, recv_chunk);
 * so that --step=ring can picture your ring (the grader prints the command).
 *
 * Hints. Each chunk travels around the ring picking up one rank's
 * contribution per step, and must end at its owner after N - 1 steps: so
 * which chunk must rank r send first? Add in a fixed order (acc[i] +=
 * tmp[i]); the grader compares with the reference within 1e-5.
 */
static void ring_reduce_scatter(Comm *c, float *full, long S, float *tmp) {
    /* TODO: N - 1 steps: send a partial sum right, receive one from the left, add it */
    (void)c;
    (void)full;
    (void)S;
    (void)tmp;
}
