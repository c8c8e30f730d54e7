/* ============================================================================
 * comm/groups.h — nodes, and the hybrid strategies' groups: comm_group_new,
 * comm_split_nodes (priced on sim/net.c's models, net_models_of), comm_group_free.
 *
 * May include core.h, fsdp.h, sim/ and comm/device.h; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_COMM_GROUPS_H
#define FSDP_COMM_GROUPS_H
#include "../core.h"
#include "../fsdp.h"
#include "../sim/sim.h"
#include "device.h"

/* ------------------------------------------------------------------------
 * Nodes, and the hybrid strategies' groups
 *
 * Ranks r and r' sit in the same node when r / G == r' / G, with G
 * --ranks-per-node. HYBRID_SHARD shards each unit over the G ranks of a
 * node (GROUP_SHARD: all-gather, reduce-scatter there, over fast links)
 * and keeps one replica of the shards per node; the ranks that hold the
 * same shard on different nodes (GROUP_REPLICA, r % G equal) then average
 * their shards of the gradient with an all-reduce over the slow links. Each
 * group is a Comm of its own ranks (MPI_Comm_split), run by the same
 * stream, so collectives of all groups keep one order. With --net A+B a
 * group within one node is priced on A, one that spans nodes on B. */
static Comm *comm_group_new(const Comm *c, int color, const NetModel *net) {
    Comm *g = (Comm *)host_calloc(1, sizeof(Comm), "make a group of ranks");
    mpiCheck(MPI_Comm_split(c->comm, color, c->rank, &g->comm));
    mpiCheck(MPI_Comm_rank(g->comm, &g->rank));
    mpiCheck(MPI_Comm_size(g->comm, &g->world));
    g->stream_comm = g->comm; /* only the stream uses it */
    g->impl = c->impl;
    g->net = net;
    g->half_sum[DTYPE_BF16] = c->half_sum[DTYPE_BF16];
    g->half_sum[DTYPE_FP16] = c->half_sum[DTYPE_FP16];
    g->group[GROUP_WORLD] = g->group[GROUP_SHARD] = g;
    device_comm_open(g);
    return g;
}

/* Collective: every rank calls it. G divides the world (config_check_world). */
static void comm_split_nodes(Comm *c, int G, int hybrid, const NetModel *intra,
                             const NetModel *inter) {
    c->net = c->world > G ? inter : intra; /* the world spans nodes, or lives in one */
    if (!hybrid || G == c->world) return;  /* one node: hybrid is full_shard */
    c->group[GROUP_SHARD] = comm_group_new(c, c->rank / G, intra);
    c->group[GROUP_REPLICA] = comm_group_new(c, c->rank % G, inter);
}

static void comm_group_free(Comm *g) {
    device_comm_close(g);
    MPI_Comm_free(&g->comm);
    free(g);
}



#endif /* FSDP_COMM_GROUPS_H */
