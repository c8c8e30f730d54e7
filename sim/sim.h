/* sim/sim.h — the simulator's instruments, as fsdp.c sees them.
 *
 * fsdp.c is the algorithm; everything that exists only to show it, price it
 * or check it lives in sim/. fsdp.c calls these through one-line hooks:
 *
 *   sim_on_collective   every collective, before it starts (comm_record):
 *                       the collective checker, --step pictures, --view
 *   sim_span_begin/end  a unit's forward or backward, the optimizer step
 *   sim_on_free         a unit's full state is freed
 *   sim_on_memory       the ledger changed (memory counters over time)
 *   sim_trace_write     at the end: the merged trace file for Perfetto
 *
 *   net.c      the network cost model (--net)
 *   record.c   the recorder behind --trace, and the trace writer
 *   check.c    the collective checker (--check-collectives)
 *   show.c     --step pictures and the --view terminal dashboard
 */
#ifndef FSDP_SIM_H
#define FSDP_SIM_H

#include "../fsdp.h"

#ifdef __cplusplus /* callable from C and from CUDA C++ objects alike */
extern "C" {
#endif

/* ---- network cost model (sim/net.c) ------------------------------------------
 * An alpha-beta model of one link per rank in a ring: alpha is the latency of
 * one message, bandwidth the bytes per second one link carries in one
 * direction. It prices each collective as if it ran on that interconnect. */
typedef struct NetModel {
    const char *name;   /* nvlink, pcie, ib, ethernet, none */
    double alpha;       /* seconds per ring step (latency) */
    double bandwidth;   /* bytes per second per link, one direction */
    const char *source; /* where the figures come from */
} NetModel;

/* A size in the unit that shows it: "512 B", "1.00 KiB", "160.00 MiB" (the
 * ledger's reports and messages); buf, filled */
const char *human_bytes(double bytes, char *buf, size_t len);

/* The preset called `name`, or NULL if there is none. */
const NetModel *net_model_find(const char *name);
/* The preset names, for messages. */
const char *net_model_names(void);
/* --net NAME (every link alike) or A+B (A inside a node, B between nodes):
 * the two models, both NULL for none; 0, or -1 when a name is unknown */
int net_models_of(const char *spec, const NetModel **intra, const NetModel **inter);
/* Simulated seconds of one ring collective over `world` ranks on a full
 * buffer of `bytes`: all-gather and reduce-scatter cost
 * (N-1)*alpha + (N-1)/N * bytes / bandwidth; all-reduce twice that. */
double net_collective_seconds(const NetModel *net, CommKind kind, int world, double bytes);

/* ---- the instruments' state, one per trainer ------------------------------------ */

/* What a rank's compute stream is doing: a unit's forward or backward, the
 * optimizer, (--cpu-offload) a copy between host and device memory, or
 * (--fsdp2) a copy around a collective. */
typedef enum {
    PHASE_FORWARD,
    PHASE_BACKWARD,
    PHASE_OPTIMIZER,
    PHASE_TO_DEVICE,
    PHASE_TO_HOST,
    PHASE_COPY_OUT, /* FSDP2: the all-gather's output to each parameter's place */
    PHASE_CHUNK_CAT /* FSDP2: the gradients laid rank by rank for the reduce-scatter */
} SimPhase;

static inline const char *sim_phase_name(SimPhase p) {
    static const char *const names[] = {"forward",      "backward",     "optimizer",
                                        "copy to device", "copy to host", "all-gather copy-out",
                                        "reduce-scatter copy-in"};
    return names[p];
}

typedef struct {
    int unit; /* -1 for the optimizer step */
    SimPhase phase;
    int step;
    double t_start, t_end; /* MPI_Wtime() seconds; t_end < 0 while open */
} SimSpan;

typedef struct {
    double t;
    int unit, step;
} SimFree;

typedef struct {
    double t;
    size_t bytes[MEM_NUM_CATEGORIES];
} SimMemSample;

/* --step (waits for keys), --step=auto (does not), --step=ring (auto, and a
 * picture after each of a ring collective's N-1 steps) */
typedef enum { STEP_OFF, STEP_INTERACTIVE, STEP_AUTO, STEP_RING } StepMode;

typedef struct Sim {
    /* what is switched on */
    int record;         /* --trace: keep spans, frees and memory samples */
    int check;          /* --check-collectives */
    StepMode step_mode; /* --step, --step=auto */
    int view;           /* --view */
    /* what the instruments read (owned by the trainer) */
    const Config *cfg;
    const Ledger *ledger;
    const Unit *units;
    int n_units;
    /* the recorder */
    int record_lost; /* out of host memory: recording stopped */
    SimSpan *spans;
    int n_spans, cap_spans;
    SimFree *frees;
    int n_frees, cap_frees;
    SimMemSample *mem;
    int n_mem, cap_mem;
    double t0; /* the common time origin (after a barrier) */
    int step;  /* the training step now running */
    long seq;  /* collectives so far on this rank */
    /* --step / --view */
    int view_in_place;  /* --view on a terminal: redraw; else plain lines */
    int view_last_step; /* plain --view lines: one per step */
    int cur_unit;       /* the unit computing now (for --view) */
    SimPhase cur_phase;
    int skip_to_next_step; /* 'c' pressed: no stops until the next step */
    unsigned long long *ring; /* --step=ring, rank 0: (N, N) what rank r holds of chunk j */
    int ring_from_right;      /* ... and whether this ring receives from the right */
    double last_draw;      /* --view redraw throttle */
    /* test-only fault injection: FSDP_FAULT=skip:RANK:SEQ or alter:RANK:SEQ */
    int fault_alter, fault_rank;
    long fault_seq;
    int fault_kill_rank; /* FSDP_FAULT=killsave:RANK:STEP */
    long fault_kill_step;
} Sim;

/* Sets up the instruments for a trainer; collective over comm. Returns 0,
 * or 2 with a message in err (e.g. --step without a terminal). */
int sim_init(Sim *s, const Config *cfg, const Ledger *l, const Unit *units, int n_units,
             MPI_Comm comm, char *err, size_t errlen);
void sim_release(Sim *s);

/* What the instruments say about the collective about to start. Nothing in
 * sim/ ends the process: fsdp.c decides what each verdict means. */
typedef enum {
    SIM_GO,       /* call it */
    SIM_SKIP,     /* the test-only fault switch: this rank skips it */
    SIM_QUIT,     /* --step: the user pressed q (every rank got the key) */
    SIM_MISMATCH, /* --check-collectives: the ranks disagree (every rank knows) */
} SimVerdict;

/* Called by comm_record before every collective. */
SimVerdict sim_on_collective(Sim *s, const Comm *c, CommKind kind, int unit, long count);
/* Whether --view redraws the terminal in place (then fsdp.c prints no
 * step lines, which would scroll the picture away). */
int sim_owns_terminal(const Sim *s);
void sim_on_step(Sim *s, int step);
/* --step=ring: called by the ring after each of its N-1 steps, with the
 * chunks this rank just sent to one neighbour and received from the other
 * (the ring may turn either way). */
void sim_on_ring_step(Sim *s, const Comm *c, CommKind kind, int step, int sent, int received);
/* test-only: FSDP_FAULT=killsave:RANK:STEP kills that rank (SIGKILL) half
 * way through writing the checkpoint of that step. */
void sim_fault_kill_during_save(const Sim *s, int rank, long step);

/* sim/check.c */
/* 1 if the ranks' collectives differ (reported on stderr), else 0. */
int check_collective(Sim *s, const Comm *c, long seq, CommKind kind, int unit, long count);
/* sim/show.c */
int show_open_terminal(Sim *s, char *err, size_t errlen);
/* 1 if the user asked to quit (--step, key q), else 0. */
int show_collective(Sim *s, const Comm *c, CommKind kind, int unit, long count);
void show_ring_step(Sim *s, const Comm *c, CommKind kind, int step, int sent, int received);
void sim_span_begin(Sim *s, int unit, SimPhase phase);
void sim_span_end(Sim *s, int unit, SimPhase phase);
void sim_on_free(Sim *s, int unit);
void sim_on_memory(Sim *s, const Ledger *l);

/* Writes the trace of this run, merged over all ranks of comm, to path
 * (rank 0 writes). clock_sim: lay the timeline out on the --net clock. */
typedef struct {
    double seconds, final_loss;
    int steps;
} SimRunSummary;
int sim_trace_write(const Sim *s, const Comm *c, const SimRunSummary *run, const char *path,
                    int clock_sim, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
