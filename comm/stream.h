/* ============================================================================
 * comm/stream.h — the communication stream: comm_record, the thread (comm_init,
 * comm_submit), the collectives' start (comm_all_gather_start, ...), the
 * watchdog's wait and comm_wait, and comm_release.
 *
 * FSDP needs three collectives. With N ranks and a flat buffer of N chunks
 * of S elements each:
 *
 *   all-gather      every rank holds one chunk  -> every rank holds all N
 *   reduce-scatter  every rank holds N chunks   -> rank r holds the sum of
 *                                                  everyone's chunk r
 *   all-reduce      every rank holds N chunks   -> every rank holds the sum
 *                   (= reduce-scatter followed by all-gather)
 *
 * Two implementations sit behind one interface (--collectives):
 *   ring  our own, over point-to-point messages: the ring algorithm NCCL uses
 *         for large messages, N-1 steps each moving one chunk to the right
 *         neighbour. Each rank sends and receives (N-1)*S elements per
 *         all-gather or reduce-scatter, and twice that per all-reduce: the
 *         bandwidth-optimal volume.
 *   mpi   Open MPI's built-in collectives (MPI_Allgather,
 *         MPI_Reduce_scatter_block, MPI_Allreduce), which choose their own
 *         algorithm per message size. They block, but they run on the
 *         communication stream (here), so the caller does not wait for them.
 *   nccl  NVIDIA's NCCL, in the GPU build (comm/device.h).
 *
 * Every collective is started (comm_*_start) and later waited on
 * (comm_wait), so a caller can compute in between: the communication
 * stream runs it meanwhile, and fsdp.c's sections 4 and 6 use that to let
 * reduce-scatters travel during the next backward and to prefetch the next unit.
 *
 * Counting: the bytes booked per call are the ring volume above, the figure
 * nccl-tests calls the bus traffic, so the numbers are those a ring on real
 * GPUs would move, whichever implementation ran. Every call passes through
 * comm_record, which counts and records the event (kind, unit, elements,
 * start and end time) for the tables and for the simulator's instruments.
 * Gradients are averaged ("mean"): we sum, then divide by N once at the end.
 *
 * The top of comm/: may include core.h, fsdp.h, kernels/, sim/ (the ledger
 * books the ring's buffer) and every other comm/ file; nothing of fsdp.c's,
 * which includes it at its top.
 * ========================================================================== */
#ifndef FSDP_COMM_STREAM_H
#define FSDP_COMM_STREAM_H
#include "../core.h"
#include "../fsdp.h"
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include "../sim/events.h"
#include "../sim/ledger.h"
#include "task.h"
#include "wire16.h"
#include "device.h"
#include "groups.h"

/* The one place every collective passes through: it tells the instruments
 * (which may check it, picture it, or in a fault test skip it: then it
 * returns 1 and nothing moves), counts the bytes and the simulated time,
 * and, when a trace is being written, records the event. */
static int comm_record(Comm *c, CommHandle *h, CommKind kind, CommGroup group, int unit, long count,
                       Dtype wire) {
    const Comm *g = c->group[group];
    memset(h, 0, sizeof(*h));
    h->kind = kind;
    h->unit = unit;
    h->step = c->step;
    h->event = -1;
    h->wire = wire;
    h->group_world = g->world;
    h->predivide = 1.0f;
    c->elem_bytes = dtype_bytes(wire);
    c->group_world = g->world;
    SimVerdict verdict = sim_on_collective(c->sim, c, kind, unit, count);
    if (verdict == SIM_QUIT) exit_all(0);     /* --step, q: every rank got the key */
    if (verdict == SIM_MISMATCH) exit_all(4); /* every rank saw the same notes */
    h->skipped = verdict == SIM_SKIP;
    if (h->skipped) return 1;
    double bytes = ring_bytes(kind, g->world, count, c->elem_bytes);
    double sim_seconds =
        net_collective_seconds(g->net, kind, g->world, (double)count * c->elem_bytes);
    c->calls[kind]++;
    c->bytes_sent[kind] += bytes;
    c->bytes_recv[kind] += bytes;
    c->sim_seconds[kind] += sim_seconds;
    h->t_start = now_seconds();
    h->sim_seconds = sim_seconds;
    comm_event_add(c, h, count); /* with --trace; a long run without keeps the totals only */
    return 0;
}


/* ------------------------------------------------------------------------
 * The communication stream
 *
 * On a GPU, collectives run on a CUDA stream of their own, so they overlap
 * the kernels of the compute stream; an event recorded on one and waited
 * on by the other is the only ordering between them. On the CPU the
 * communication stream is a thread with a queue: comm_*_start appends a
 * collective and returns at once, the thread runs the queue in order, and
 * comm_wait blocks until the collective asked for is done (the CPU's
 * "event"). The thread has its own copy of the communicator, so its
 * messages never meet the main thread's bookkeeping. All memory is booked
 * by the main thread, at start and at wait, so the ledger's figures do not
 * depend on how fast the thread runs.
 *
 * --inline-collectives runs each collective on the calling thread the
 * moment it starts instead: the same order, the same numbers, nothing in
 * the background. --step, --check-collectives and --wait-for-debugger
 * imply it, so stepping and debugging stay as simple as they were.
 * --------------------------------------------------------------------- */
static void *comm_stream_main(void *arg) {
    Comm *c = (Comm *)arg;
    backend_thread_begin(); /* a GPU is chosen per thread */
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (c->finished == c->queued && !c->stopping) pthread_cond_wait(&c->work, &c->lock);
        if (c->finished == c->queued) break; /* stopping, and nothing left */
        CommTask task = c->queue[c->finished % COMM_QUEUE];
        pthread_mutex_unlock(&c->lock);
        double t0 = now_seconds();
        collective_run(c->group[task.group], &task); /* on the group's ranks */
        double t1 = now_seconds();
        pthread_mutex_lock(&c->lock);
        c->finished++;
        CommRun run = {c->finished, t0, t1};
        c->ran[c->finished % COMM_QUEUE] = run;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Threaded streams need an MPI that lets two threads call it at once. */
static void comm_require_threads(const Comm *c) {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level >= MPI_THREAD_MULTIPLE) return;
    if (c->rank == 0)
        fprintf(stderr, "error: this MPI was started without MPI_THREAD_MULTIPLE, which the "
                        "communication thread needs.\nHINT: add --inline-collectives (no thread), "
                        "or use an MPI built with thread support (Open MPI 3 and later are).\n");
    exit_all(1);
}

static void comm_init(Comm *c, MPI_Comm mpi_comm, CollectivesImpl impl, const NetModel *net,
                      int threaded) {
    memset(c, 0, sizeof(*c));
    c->comm = mpi_comm;
    c->impl = impl;
    c->net = net;
    mpiCheck(MPI_Comm_rank(mpi_comm, &c->rank));
    mpiCheck(MPI_Comm_size(mpi_comm, &c->world));
    mpiCheck(MPI_Comm_dup(mpi_comm, &c->stream_comm));
    c->group[GROUP_WORLD] = c->group[GROUP_SHARD] = c; /* until comm_split_nodes */
    mpiCheck(MPI_Op_create(mpi_sum_bf16, 1, &c->half_sum[DTYPE_BF16]));
    mpiCheck(MPI_Op_create(mpi_sum_fp16, 1, &c->half_sum[DTYPE_FP16]));
    if (device_comm_open(c)) threaded = 0; /* NCCL's own stream runs in the background */
    c->threaded = threaded;
    if (!threaded) return;
    comm_require_threads(c);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done, NULL);
    if (pthread_create(&c->thread, NULL, comm_stream_main, c) != 0)
        FATAL("the system refused a thread; try --inline-collectives",
              "cannot start the communication thread");
}

/* Puts a collective on the stream; h learns its number. */
static void comm_submit(Comm *c, CommHandle *h, const CommTask *task) {
    if (backend.dry) { /* --plan: counted by comm_record, never run */
        h->number = ++c->queued;
        c->finished = c->queued;
        return;
    }
    CommTask staged = *task;
    if (device_comm_submit(c, h, &staged)) return; /* NCCL took it */
    task = &staged;
    if (!c->threaded) {
        double t0 = now_seconds();
        comm_sim_queued(c, h, t0);
        collective_run(c->group[task->group], task);
        h->number = ++c->queued;
        c->finished = c->queued;
        CommRun run = {h->number, t0, now_seconds()};
        c->ran[h->number % COMM_QUEUE] = run;
        comm_sim_waited(c, h, run.t_start, run.t_end); /* inline: the caller waited for the run */
        return;
    }
    comm_sim_queued(c, h, now_seconds());
    pthread_mutex_lock(&c->lock);
    while (c->queued - c->finished >= COMM_QUEUE) pthread_cond_wait(&c->done, &c->lock);
    c->queue[c->queued % COMM_QUEUE] = *task;
    h->number = ++c->queued;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->lock);
}

/* all-gather: shard (S elements) from each of the group's G ranks -> full
 * (G*S) on every one, in format `wire` (fp32, or mixed precision's
 * param_dtype); shard and full held in fp32 slots, or (held = wire) the
 * wire's 16 bits: the shard as it is sent, full as it came */
static CommHandle comm_all_gather_in(Comm *c, CommGroup group, void *full, Dtype held,
                                     const void *shard, long S, int unit, Dtype wire) {
    if (held != DTYPE_FP32 && held != wire) /* the output is the wire's buffer itself */
        FATAL("this is a bug in fsdp.c", "a 16-bit all-gather on a %s wire", DTYPE_NAMES[wire]);
    CommHandle h;
    if (comm_record(c, &h, COMM_ALL_GATHER, group, unit, S * c->group[group]->world, wire))
        return h;
    CommTask task =
        comm_task(COMM_ALL_GATHER, group, (float *)full, (const float *)shard, NULL, NULL, S, wire);
    task.held = held;
    comm_submit(c, &h, &task);
    return h;
}

/* ... over the ranks that share a unit's shards (GROUP_SHARD): the unshard */
static CommHandle comm_all_gather_start(Comm *c, void *full, Dtype held, const void *shard,
                                        long S, int unit, Dtype wire) {
    return comm_all_gather_in(c, GROUP_SHARD, full, held, shard, S, unit, wire);
}

/* The ring's receive buffer for a reduction, when the ring runs it */
static void comm_ring_tmp(Comm *c, CommHandle *h, long S, Ledger *l, const char *what) {
    if (c->impl != COLLECTIVES_RING) return;
    h->tmp = ledger_alloc_floats(l, MEM_COMM_BUFFERS, (size_t)S, h->wire, what);
    h->ledger = l;
}

/* reduce-scatter (mean): full (G*S; fp32 slots, or the wire's 16 bits, scaled in place) on
 * each of the G ranks that share a unit's shards (GROUP_SHARD) -> shard (S), the average of
 * chunk `rank`, in c->reduce_dtype. The ring consumes `full`: it must live until the wait. */
static CommHandle comm_reduce_scatter_start(Comm *c, float *shard, void *full, Dtype held,
                                            long S, int unit, Ledger *l) {
    if (held != DTYPE_FP32 && held != c->reduce_dtype)
        FATAL("this is a bug in fsdp.c", "a %s gradient on another wire", DTYPE_NAMES[held]);
    CommHandle h;
    const Comm *g = c->group[GROUP_SHARD];
    if (comm_record(c, &h, COMM_REDUCE_SCATTER, GROUP_SHARD, unit, S * g->world, c->reduce_dtype))
        return h;
    h.buf = shard;
    h.scale_count = S;
    comm_ring_tmp(c, &h, S, l, "ring reduce-scatter");
    CommTask task =
        comm_task(COMM_REDUCE_SCATTER, GROUP_SHARD, (float *)full, NULL, shard, h.tmp, S, h.wire);
    comm_mean_parts(&h, &task, g);
    task.held = held;
    comm_submit(c, &h, &task);
    return h;
}

/* all-reduce (mean), in place: buf (count, a multiple of the group's size)
 * on every rank of the group -> the average over them, bitwise the same on
 * every one. The ring version is literally reduce-scatter then all-gather,
 * which is why it moves twice the bytes of either. */
static CommHandle comm_all_reduce_in(Comm *c, CommGroup group, float *buf, long count, int unit,
                                     Ledger *l) {
    const Comm *g = c->group[group];
    if (count % g->world != 0)
        FATAL("this is a bug in fsdp.c: flat buffers are padded to a multiple of N",
              "all-reduce of %ld elements over %d ranks", count, g->world);
    CommHandle h;
    if (comm_record(c, &h, COMM_ALL_REDUCE, group, unit, count, c->reduce_dtype)) return h;
    h.buf = buf;
    h.scale_count = count;
    long S = count / g->world;
    comm_ring_tmp(c, &h, S, l, "ring all-reduce");
    CommTask task = comm_task(COMM_ALL_REDUCE, group, buf, NULL, NULL, h.tmp, S, h.wire);
    comm_mean_parts(&h, &task, g);
    comm_submit(c, &h, &task);
    return h;
}

/* ... over every rank: DDP's gradients */
static CommHandle comm_all_reduce_start(Comm *c, float *buf, long count, int unit, Ledger *l) {
    return comm_all_reduce_in(c, GROUP_WORLD, buf, count, unit, l);
}


/* Waits on the stream's condition for collective h, at most c->timeout s */
static void comm_wait_watched(Comm *c, const CommHandle *h) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)c->timeout;
    while (c->finished < h->number) {
        if (c->timeout <= 0) pthread_cond_wait(&c->done, &c->lock);
        else if (pthread_cond_timedwait(&c->done, &c->lock, &deadline) == ETIMEDOUT &&
                 c->finished < h->number)
            comm_watchdog_expired(c->rank, c->timeout, h);
    }
}

static CommRun comm_wait_for_run(Comm *c, const CommHandle *h) {
    double waited = now_seconds();
    CommRun run = {0, h->t_start, waited}; /* if its record was overwritten: queued..now */
    const CommRun *noted = &c->ran[h->number % COMM_QUEUE];
    if (c->threaded) {
        pthread_mutex_lock(&c->lock);
        comm_wait_watched(c, h);
        if (noted->number == h->number) run = *noted;
        pthread_mutex_unlock(&c->lock);
        double done = now_seconds();
        comm_sim_waited(c, h, waited, done);
        c->wall_seconds += done - waited; /* the time the caller could not compute */
    } else {
        if (noted->number == h->number) run = *noted;
        c->wall_seconds +=
            run.t_end - run.t_start; /* it ran inline: the caller waited for it all */
    }
    return run;
}

/* Completes a collective: waits until the stream has run it, turns an
 * fp32 sum into a mean (a 16-bit one was as it was unpacked), frees its
 * staging buffer and books the time it took. */
static void comm_wait(Comm *c, CommHandle *h) {
    if (h->skipped) return; /* by the test-only fault switch */
    CommRun run;
    if (!device_comm_wait(c, h, &run)) run = comm_wait_for_run(c, h);
    if (h->kind != COMM_ALL_GATHER && h->wire == DTYPE_FP32)
        FOR_EACH(h->scale_count, scale_one, h->buf, comm_postscale(h));
    if (h->tmp) ledger_free(h->ledger, h->tmp);
    h->tmp = NULL;
    if (h->event < 0) return;
    c->events[h->event].t_start = run.t_start; /* when the stream really ran it */
    c->events[h->event].t_end = run.t_end;
}


/* Stops the stream (after what is queued) and frees what it holds. */
static void comm_release(Comm *c) {
    if (c->threaded) {
        pthread_mutex_lock(&c->lock);
        c->stopping = 1;
        pthread_cond_signal(&c->work);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->thread, NULL);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->work);
        pthread_cond_destroy(&c->done);
        c->threaded = 0;
    }
    for (int k = GROUP_SHARD; k < COMM_NUM_GROUPS; k++) /* the stream is done with them */
        if (c->group[k] && c->group[k] != c) comm_group_free(c->group[k]);
    c->group[GROUP_SHARD] = c->group[GROUP_REPLICA] = c->group[GROUP_POST_FORWARD] = NULL;
    if (c->stream_comm != MPI_COMM_NULL) MPI_Comm_free(&c->stream_comm);
    for (int d = DTYPE_BF16; d <= DTYPE_FP16; d++)
        if (c->half_sum[d] != MPI_OP_NULL) MPI_Op_free(&c->half_sum[d]);
    device_comm_close(c);
    free(c->events);
    c->events = NULL;
    c->n_events = c->cap_events = 0;
}

#endif /* FSDP_COMM_STREAM_H */
