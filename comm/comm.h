/* ============================================================================
 * comm/comm.h — the collectives' types: which collective (CommKind), over
 * which ranks (CommGroup), as the stream runs it (CommTask), its handle
 * (CommHandle), its record (CommEvent), and the communicator with its
 * stream (Comm). fsdp.h includes it; comm/stream.h says how they are used.
 *
 * Types only. It includes core.h and nothing else of ours: fsdp.h includes
 * it, so the kind names reach sim/ through fsdp.h.
 * ========================================================================== */
#ifndef FSDP_COMM_COMM_H
#define FSDP_COMM_COMM_H
#include "../core.h"
#include <mpi.h>
#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    COLLECTIVES_RING, /* our own ring over point-to-point (comm/ring.h) */
    COLLECTIVES_MPI,  /* Open MPI's built-in non-blocking collectives */
    COLLECTIVES_NCCL, /* NVIDIA's NCCL, GPU build only: device buffers, one GPU per rank */
} CollectivesImpl;

static const char *const COLLECTIVES_NAMES[] = {"ring", "mpi", "nccl"};

/* ----------------------------------------------------------------------------
 * Collectives. Each one starts, returns a handle, and is waited on; between
 * the two a caller may compute (overlap). Every call is counted and recorded.
 * ------------------------------------------------------------------------- */

typedef enum { COMM_ALL_GATHER, COMM_REDUCE_SCATTER, COMM_ALL_REDUCE, COMM_NUM_KINDS } CommKind;

/* Which ranks a collective runs over (comm/groups.h): all of them, the
 * ranks that share the shards of a unit (all, or one node's with the
 * hybrid strategies), or the ranks that hold the same shard on other nodes
 * (the hybrid strategies' replicas). */
/* GROUP_POST_FORWARD: FSDP2's --reshard-after-forward K, K ranks of a shard group */
typedef enum {
    GROUP_WORLD,
    GROUP_SHARD,
    GROUP_REPLICA,
    GROUP_POST_FORWARD,
    COMM_NUM_GROUPS
} CommGroup;

static const char *const COMM_KIND_NAMES[COMM_NUM_KINDS] = {"all_gather", "reduce_scatter",
                                                            "all_reduce"};

/* The bytes one rank sends (and as many it receives) in a ring collective
 * over `world` ranks on a full buffer of `count` elements of `elem_bytes`
 * each (4 for fp32, 2 for bf16 or fp16): N-1 chunks of count/N for an
 * all-gather or a reduce-scatter, twice that for an all-reduce (a
 * reduce-scatter, then an all-gather). This is the volume nccl-tests calls
 * bus traffic: the bandwidth-optimal figure. */
static inline double ring_bytes(CommKind kind, int world, long count, int elem_bytes) {
    double chunks = (kind == COMM_ALL_REDUCE ? 2.0 : 1.0) * (world - 1);
    return chunks * (double)(count / world) * elem_bytes;
}

typedef struct {
    CommKind kind;
    int unit;              /* unit index, -1 for the loss (not model state) */
    long count;            /* elements in the full buffer */
    int elem_bytes;        /* each element's bytes on the wire: 4, or 2 (bf16, fp16) */
    int group_world;       /* the ranks it ran over: N, or a hybrid strategy's group */
    double t_start, t_end; /* MPI_Wtime() seconds: when the stream ran it */
    double sim_seconds;    /* its duration on the --net interconnect */
    int step;              /* the training step it belongs to */
    /* the --net schedule (sim/events.h): when it would start there, and
     * the main thread's wait for it, on both clocks (sim = real + shift) */
    double sim_start;
    double wait_begin, wait_end;      /* real; wait_end = 0 until waited */
    double shift_before, shift_after; /* sim - real on the main thread */
} CommEvent;

/* One collective as the communication stream runs it: the buffers it
 * reads and writes. A handle names it by its place in the stream's order. */
typedef struct {
    CommKind kind;
    float *full;        /* (N*S) all-gather output; reduce-scatter input, consumed;
                         * all-reduce buffer, in place */
    const float *shard; /* (S) all-gather input; in `held`'s format too */
    float *out;         /* (S) reduce-scatter output */
    float *tmp;         /* (S) the ring's receive buffer */
    long S;             /* elements per rank (chunk) */
    Dtype wire;         /* the format on the wire; fp32, or 16-bit (mixed precision) */
    Dtype held;         /* full holds fp32 slots, or (= wire) the wire's 16 bits: an
                         * all-gather's output as it came, a reduce-scatter's input as
                         * it was computed (a unit's full state and gradient on a GPU) */
    CommGroup group;    /* the ranks it runs over */
    float prescale;     /* 16-bit sums: the inputs are multiplied by it first (1/predivide) */
    float postscale;    /* ... and the sum by this (predivide/G) as it is unpacked: the mean */
    void *ready;        /* GPU: cudaEvent_t on the compute stream once the inputs are
                         * written; the stream waits for it before it reads them */
} CommTask;

enum { COMM_QUEUE = 16 }; /* collectives queued on the stream at most */

/* When the stream ran a collective: the thread notes it here, in slot
 * number % COMM_QUEUE, and comm_wait reads it back. */
typedef struct {
    long number;
    double t_start, t_end;
} CommRun;

typedef struct Comm {
    MPI_Comm comm; /* the caller's: bookkeeping (checkpoints, tables) */
    int rank, world;
    /* The groups (GROUP_WORLD is this Comm itself): each a Comm of its own
     * ranks, with its own stream_comm, link model and NCCL communicator,
     * which the collectives of that group run on. Set up at init, read-only
     * afterwards. GROUP_SHARD is this Comm too unless a hybrid strategy
     * spans nodes; GROUP_REPLICA is NULL then. */
    struct Comm *group[COMM_NUM_GROUPS];
    CollectivesImpl impl;
    /* per kind: calls, and bytes this rank sent and received (ring volume) */
    long calls[COMM_NUM_KINDS];
    double bytes_sent[COMM_NUM_KINDS];
    double bytes_recv[COMM_NUM_KINDS];
    double sim_seconds[COMM_NUM_KINDS]; /* priced by the --net model */
    double wall_seconds;                /* time spent waiting for collectives */
    double gpu_busy_seconds; /* NCCL: the communication stream's time in collectives
                              * (CUDA events, measured with --trace) */
    double sim_shift;      /* the --net schedule's clock minus this machine's (main thread) */
    double sim_stream_end; /* on that clock, when the stream's last collective ends */
    int keep_events;       /* record every event (for --trace), or totals only */
    const struct NetModel *net;
    struct Sim *sim;   /* the instruments, told of every collective */
    int step;          /* the training step now running */
    double timeout;    /* the watchdog: seconds a waited-for collective may take; 0: none */
    int elem_bytes;    /* the collective being recorded: bytes per element on the wire, */
    int group_world;   /* ... and the ranks it runs over (its group's) */
    Dtype reduce_dtype; /* the gradients' format on the wire (--reduce-dtype) */
    MPI_Op half_sum[3]; /* --collectives mpi: the sum of two bf16 or fp16 values, rounded */
    CommEvent *events; /* every collective, in order */
    int n_events, cap_events;
    /* the communication stream (comm/stream.h) */
    MPI_Comm stream_comm; /* a copy of comm that only the stream's collectives use */
    int threaded;         /* a thread runs the queue; 0: each collective inline */
    pthread_t thread;
    pthread_mutex_t lock;       /* guards everything below */
    pthread_cond_t work, done;  /* "a task was queued", "a task finished" */
    CommTask queue[COMM_QUEUE]; /* task number i sits at i % COMM_QUEUE */
    CommRun ran[COMM_QUEUE];    /* when task number i ran, at i % COMM_QUEUE */
    long queued, finished;      /* tasks so far; the stream runs number `finished` next */
    int stopping;
    /* the GPU build (kernels/backend.h, comm/device.h) */
    void *nccl;       /* ncclComm_t, with --collectives nccl */
    void *settled;    /* cudaEvent_t: the shards are written (comm_shards_settled) */
    float *stage;     /* host copy of a task's buffers: ring and mpi stage through it */
    long stage_count; /* its size in floats */
    int stage_pinned; /* cudaHostAlloc'd (else malloc'd: the system would not pin it) */
} Comm;

typedef struct {
    int skipped;    /* the test-only fault switch skipped it */
    int unit, step; /* whose (-1: the loss) and when, for the watchdog's message */
    long number;    /* its place on the stream: done once finished >= number */
    double t_start; /* when it was queued */
    CommKind kind;
    float *buf;       /* reduce-scatter / all-reduce, fp32 wire: the sum to scale */
    long scale_count; /* elements to divide by world for the mean */
    float *tmp;       /* the ring's receive buffer, freed when waited for */
    struct Ledger *ledger;
    double sim_seconds; /* how long it takes on the --net interconnect */
    double sim_end;     /* when it would end on the --net schedule */
    int event;          /* index into Comm.events, or -1 when not recorded */
    Dtype wire;         /* 16-bit: the mean is rounded to it again */
    int group_world;    /* the ranks it ran over: the mean divides by them */
    float predivide;    /* ... after dividing by this before the sum (16-bit sums) */
    void *wire_buf;     /* GPU with NCCL, 16-bit: the packed buffer NCCL works on */
    size_t wire_bytes;  /* ... its size */
    const void *unpack_from; /* ... where its 16-bit result is (NULL: none to unpack) */
    float *unpack_to;        /* ... and where it goes once waited for */
    long unpack_count;
    void *began, *done; /* GPU with NCCL: cudaEvent_t on the communication stream */
} CommHandle;

#ifdef __cplusplus
}
#endif
#endif /* FSDP_COMM_COMM_H */
