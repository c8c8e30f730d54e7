/* sim/sim.h — the simulator's instruments, as fsdp.c sees them.
 *
 * fsdp.c is the algorithm; everything that only exists to show or to price
 * it lives in sim/. fsdp.c calls these through one-line hooks. */
#ifndef FSDP_SIM_H
#define FSDP_SIM_H

/* ---- network cost model (sim/net.c) ------------------------------------------
 * An alpha-beta model of one link per rank in a ring: alpha is the latency of
 * one message, bandwidth the bytes per second one link carries in one
 * direction. It prices each collective as if it ran on that interconnect. */
typedef struct NetModel {
    const char *name;       /* nvlink, pcie, ib, ethernet, none            */
    double alpha;           /* seconds per ring step (latency)             */
    double bandwidth;       /* bytes per second per link, one direction    */
    const char *source;     /* where the figures come from                 */
} NetModel;

/* The preset called `name`, or NULL if there is none. */
const NetModel *net_model_find(const char *name);
/* Comma-separated preset names, for messages. */
const char *net_model_names(void);
/* Simulated seconds of one ring collective over `world` ranks on a full
 * buffer of `bytes`: all-gather and reduce-scatter cost
 * (N-1)*alpha + (N-1)/N * bytes / bandwidth; all-reduce twice that.
 * kind: 0 all-gather, 1 reduce-scatter, 2 all-reduce (CommKind's order). */
double net_collective_seconds(const NetModel *net, int kind, int world, double bytes);

#endif
