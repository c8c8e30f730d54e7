/* ============================================================================
 * comm/device.h — the collectives' side of the backend
 * seam: how a collective reaches a GPU's buffers. fsdp.c includes it in
 * place, after the host collectives and the --net schedule it calls.
 *
 *   ring, mpi  run on the host (collective_run_host): on a GPU the stream
 *              copies the device buffers into a host stage and back;
 *   nccl       NCCL on the GPU's communication stream, bootstrapped by MPI.
 *
 * Every function has a CPU version too, so comm/ reads the same in both
 * builds: on the CPU the device is the host, and NCCL is never chosen.
 *
 * May include core.h, kernels/backend.h, sim/events.h and the comm/ files
 * below it (task.h, host.h); nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_COMM_DEVICE_H
#define FSDP_COMM_DEVICE_H
#include "../core.h"
#include "../kernels/backend.h"
#include "../sim/events.h"
#include "task.h"
#include "host.h"

#ifdef __CUDACC__
/* On a GPU, ring and mpi run on host copies of the device buffers: the
 * stream waits until the compute stream has written the inputs (the task's
 * `ready` event), copies them into c->stage, runs the collective there and
 * copies the result back. That costs two copies over PCIe, and it is what
 * lets several ranks share one GPU, which NCCL refuses. */
static void stage_free(Comm *c) {
    if (c->stage && c->stage_pinned) host_pinned_free(c->stage);
    else free(c->stage);
    c->stage = NULL;
    c->stage_count = 0;
}

static void collective_run(Comm *c, const CommTask *k) {
    long S = k->S, N = c->world, need = (N + 2) * S; /* full, the ring's tmp, out */
    if (c->stage_count < need) { /* pinned, so the copies below are DMA at the link's speed */
        stage_free(c);
        c->stage = (float *)host_pinned_alloc((size_t)need * sizeof(float));
        c->stage_pinned = c->stage != NULL;
        if (!c->stage)
            c->stage = (float *)host_malloc((size_t)need * sizeof(float), "stage a collective");
        c->stage_count = need;
    }
    cudaEvent_t ready = (cudaEvent_t)k->ready;
    cudaCheck(cudaEventSynchronize(ready));
    cudaCheck(cudaEventDestroy(ready));
    if (S == 0 || backend.dry) return; /* no parameters, or --plan: nothing to move */
    CommTask host = comm_task(k->kind, k->group, c->stage, NULL, c->stage + (N + 1) * S,
                              c->stage + N * S, S, k->wire);
    host.prescale = k->prescale, host.postscale = k->postscale;
    host.held = k->held; /* full in 16 bits (a gather's output, a reduction's input): so here */
    size_t chunk = (size_t)S * sizeof(float), all = (size_t)(N * S) * dtype_bytes(k->held);
    if (k->kind == COMM_ALL_GATHER) {
        /* in place on the host; 16 bits from the out slot, into the stage */
        float *mine = k->held != DTYPE_FP32 ? host.out : c->stage + c->rank * S;
        host.shard = mine;
        cudaCheck(cudaMemcpyAsync(mine, k->shard, (size_t)S * dtype_bytes(k->held),
                                  cudaMemcpyDeviceToHost, backend.comm));
    } else {
        cudaCheck(cudaMemcpyAsync(host.full, k->full, all, cudaMemcpyDeviceToHost, backend.comm));
    }
    cudaCheck(cudaStreamSynchronize(backend.comm));
    collective_run_host(c, &host);
    if (k->kind == COMM_REDUCE_SCATTER)
        cudaCheck(cudaMemcpyAsync(k->out, host.out, chunk, cudaMemcpyHostToDevice, backend.comm));
    else cudaCheck(cudaMemcpyAsync(k->full, host.full, all, cudaMemcpyHostToDevice, backend.comm));
    cudaCheck(cudaStreamSynchronize(backend.comm));
}

/* ------------------------------------------------------------------------
 * NCCL's watchdog                      PyTorch: ProcessGroupNCCL's watchdog
 *
 * A NCCL collective that cannot finish (a rank that took another branch,
 * a dead peer, a failed link) returns no error: its kernel waits on the
 * communication stream, and the host blocks at its next synchronisation,
 * for ever. So, as PyTorch does, every NCCL collective is noted with an
 * event recorded after it, and a thread polls the notes every 50 ms: a
 * finished one is forgotten; an asynchronous error (ncclCommGetAsyncError)
 * or one older than --collective-timeout ends every rank (MPI_Abort, exit
 * 4), with the words of the CPU's watchdog: the collective, its unit, step
 * and ranks. Not --step, --check-collectives or --wait-for-debugger, where
 * a person may hold a rank still for minutes. Compiled here; not yet run
 * on a GPU.
 * --------------------------------------------------------------------- */

typedef struct {
    cudaEvent_t done; /* recorded on the communication stream after it */
    ncclComm_t nc;
    CommHandle h; /* its kind, unit, step and group size, for the message */
    double since; /* when it was queued (watch_seconds) */
    int rank;     /* this process's rank in the world */
    double timeout;
} NcclNote;

typedef struct NcclWatch {
    pthread_mutex_t lock;
    pthread_t thread;
    int stopping, open_comms;
    NcclNote *note;
    int n, cap;
} NcclWatch;

/* The watchdog's clock: monotonic, and no MPI call from its thread. */
static double watch_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A note that cannot end well ends the job, naming what hung or failed:
 * `error` is NCCL's or CUDA's word for it, or NULL for a timeout. The
 * message goes out first, then MPI_Abort ends every rank. PyTorch calls
 * ncclCommAbort first, to free its kernels; here the process ends anyway,
 * and an abort that blocked (a wedged peer) would swallow the message. */
static void nccl_watch_fail(const NcclNote *n, const char *error) {
    if (!error) comm_watchdog_expired(n->rank, n->timeout, &n->h); /* exits */
    char unit[32] = "the loss";
    if (n->h.unit >= 0) snprintf(unit, sizeof(unit), "unit %d", n->h.unit);
    fprintf(stderr,
            "[rank %d] error: the %s of %s at step %d over %d ranks failed in NCCL: %s.\n"
            "HINT: NCCL_DEBUG=WARN says which peer or link; a rank that died first says why "
            "in its own output.\n",
            n->rank, COMM_KIND_NAMES[n->h.kind], unit, n->h.step + 1, n->h.group_world, error);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 4);
}

/* One look at every note: forget the finished, fail the hopeless. Past
 * the timeout, the oldest unfinished collective is named: those queued
 * after it on the stream wait for it, and may be past the timeout too. */
static void nccl_watch_poll(NcclWatch *w) {
    double now = watch_seconds();
    const NcclNote *oldest = NULL;
    for (int i = 0; i < w->n;) {
        NcclNote *n = &w->note[i];
        cudaError_t q = cudaEventQuery(n->done);
        if (q == cudaSuccess) {
            cudaEventDestroy(n->done);
            *n = w->note[--w->n];
            continue;
        }
        if (q == cudaErrorCudartUnloading || q == cudaErrorContextIsDestroyed) {
            w->stopping = 1; /* the process is exiting: nothing left to watch */
            return;
        }
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(n->nc, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress)
            nccl_watch_fail(n, ncclGetErrorString(async));
        if (q != cudaErrorNotReady) nccl_watch_fail(n, cudaGetErrorString(q));
        if (!oldest || n->since < oldest->since) oldest = n;
        i++;
    }
    if (oldest && oldest->timeout > 0 && now - oldest->since > oldest->timeout)
        nccl_watch_fail(oldest, NULL);
}

static void *nccl_watch_main(void *arg) {
    NcclWatch *w = (NcclWatch *)arg;
    backend_thread_begin();
    struct timespec pause = {0, 50 * 1000 * 1000};
    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        nccl_watch_poll(w);
        pthread_mutex_unlock(&w->lock);
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Notes a collective just queued on the communication stream. */
static void nccl_watch_add(const Comm *c, ncclComm_t nc, const CommHandle *h) {
    NcclWatch *w = backend.watch;
    NcclNote n = {event_record(backend.comm, 0), nc, *h, watch_seconds(), c->rank, c->timeout};
    pthread_mutex_lock(&w->lock);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->note = (NcclNote *)host_realloc(w->note, (size_t)w->cap * sizeof(NcclNote),
                                           "note a collective for the watchdog");
    }
    w->note[w->n++] = n;
    pthread_mutex_unlock(&w->lock);
}

/* Stops the thread and waits for it: when the last communicator closes,
 * or at exit() (exit_all leaves from anywhere: a diverged loss, a failed
 * checkpoint), before CUDA's own teardown pulls the events away. */
static void nccl_watch_stop(void) {
    NcclWatch *w = backend.watch;
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    for (int i = 0; i < w->n; i++) cudaEventDestroy(w->note[i].done);
    free(w->note);
    free(w);
    backend.watch = NULL;
}

/* A communicator opens: the first starts the thread. */
static void nccl_watch_open(void) {
    if (!backend.watch) {
        NcclWatch *w = (NcclWatch *)host_calloc(1, sizeof(NcclWatch), "start NCCL's watchdog");
        pthread_mutex_init(&w->lock, NULL);
        if (pthread_create(&w->thread, NULL, nccl_watch_main, w) != 0)
            FATAL("the system refused a thread", "cannot start NCCL's watchdog");
        backend.watch = w;
        static int registered;
        if (!registered++) atexit(nccl_watch_stop); /* runs before CUDA's, registered earlier */
    }
    backend.watch->open_comms++;
}

/* A communicator closes: its notes go first (its collectives are done:
 * the stream is drained), and the last one stops the thread. */
static void nccl_watch_close(ncclComm_t nc) {
    NcclWatch *w = backend.watch;
    cudaCheck(cudaStreamSynchronize(backend.comm));
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < w->n;)
        if (w->note[i].nc == nc) {
            cudaEventDestroy(w->note[i].done);
            w->note[i] = w->note[--w->n];
        } else i++;
    int last = --w->open_comms == 0;
    pthread_mutex_unlock(&w->lock);
    if (last) nccl_watch_stop();
}

/* One NCCL communicator over the MPI ranks of c: rank 0 makes the unique
 * id, MPI broadcasts it, and every rank joins with it. Returns 1 when NCCL
 * runs c's collectives: its own stream runs them in the background, so the
 * communication thread is not needed. */
static int device_comm_open(Comm *c) {
    if (c->impl != COLLECTIVES_NCCL || backend.dry) return 0; /* --plan runs no collective */
    ncclUniqueId id;
    if (c->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    mpiCheck(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, c->comm));
    ncclComm_t nc;
    ncclCheck(ncclCommInitRank(&nc, c->world, id, c->rank));
    c->nccl = nc;
    nccl_watch_open();
    return 1;
}

static void device_comm_close(Comm *c) {
    if (c->settled) cudaCheck(cudaEventDestroy((cudaEvent_t)c->settled));
    c->settled = NULL;
    if (c->nccl) nccl_watch_close((ncclComm_t)c->nccl);
    if (c->nccl) ncclCheck(ncclCommDestroy((ncclComm_t)c->nccl));
    c->nccl = NULL;
    stage_free(c);
}

/* ------------------------------------------------------------------------
 * NCCL on the GPU's communication stream
 *
 * A collective reads what the compute stream wrote, so the communication
 * stream first waits for an event recorded on the compute stream now
 * (PyTorch does the same before each all-gather and reduce-scatter). The
 * collective is then queued on the communication stream and the host goes
 * on at once; comm_wait makes the compute stream wait for the event
 * recorded after it. Neither stream blocks the host.
 * --------------------------------------------------------------------- */
/* Mixed precision on NCCL: the float slots are packed into a 16-bit device
 * buffer on the compute stream (before the `ready` event), NCCL works on
 * that in ncclBfloat16 or ncclFloat16, and nccl_wait unpacks the result
 * (a sum as its mean: unpack_mean_one).
 * The returned task points NCCL at the packed buffer. A unit's shard, full
 * state and full gradient held in 16 bits (k->held) are such buffers
 * already: the all-gather gathers the shard into the full state as they
 * are; the reduce-scatter sums the gradient as it is, its predivision done
 * by NCCL as it reads it (nccl_sum).
 * A reduce-scatter writes its chunk in place, over this rank's slice of
 * its input (NCCL's in-place form, recvbuff = sendbuff + rank * count):
 * no buffer of its own, and on one rank no copy at all. */
static CommTask nccl_pack(const Comm *c, CommHandle *h, const CommTask *k) {
    long S = k->S, N = c->world;
    CommTask w = *k;
    int packed = k->held != DTYPE_FP32;
    if (k->kind == COMM_ALL_GATHER && packed) return w; /* 16 bits in, 16 bits out */
    if (k->kind == COMM_ALL_REDUCE && packed) /* only a unit's full state and gradient are */
        FATAL("this is a bug in fsdp.c", "an all-reduce of a buffer held in 16 bits");
    uint16_t *buf = (uint16_t *)k->full;
    if (!packed) { /* N slices, each written whole before it is read (not zeroed); + 2 bytes,
                    * never 0 (S = 0) */
        h->wire_bytes = (size_t)(N * S) * sizeof(uint16_t) + 2;
        buf = (uint16_t *)dev_alloc_for_overwrite(h->wire_bytes);
        if (!buf)
            FATAL("the GPU is out of memory; try a smaller model", "cannot pack a collective");
        h->wire_buf = buf;
        w.full = (float *)buf; /* NCCL sees 16-bit elements from here on */
        if (k->kind == COMM_ALL_GATHER)
            FOR_EACH(S, pack_one, buf + c->rank * S, k->shard, k->wire, 1.0f);
        else FOR_EACH(N * S, pack_one, buf, k->full, k->wire, k->prescale);
    }
    h->unpack_from = buf, h->unpack_to = k->full, h->unpack_count = N * S;
    if (k->kind == COMM_ALL_GATHER) w.shard = (float *)(buf + c->rank * S);
    if (k->kind == COMM_REDUCE_SCATTER) { /* in place */
        w.out = (float *)(buf + c->rank * S);
        h->unpack_from = w.out, h->unpack_to = k->out, h->unpack_count = S;
    }
    return w;
}

static ncclDataType_t nccl_type(Dtype d) {
    if (d == DTYPE_BF16) return ncclBfloat16;
    return d == DTYPE_FP16 ? ncclFloat16 : ncclFloat;
}

/* The reduction's sum. A gradient held in 16 bits is predivided
 * (comm_mean_parts: by a power of two near sqrt(N), on 2 ranks or more)
 * by NCCL itself: its PreMulSum multiplies each rank's input by the factor
 * as it reads it, where a kernel of its own (PyTorch's FSDP1 runs one, a
 * div_: lecture 10) would read and write the whole full gradient
 * once more (4 bytes an element: 1.3 ms of the 1.06B model's step on each
 * of 8 H100s). The factor is a power of two, and the product rounds to
 * the wire's format as that kernel's did: the same bits. Float slots were
 * scaled as they were packed. Returns the operator; nccl_sum_done
 * destroys it once the collective is queued (NCCL allows that). */
static ncclRedOp_t nccl_sum(const CommTask *k, ncclComm_t nc, ncclDataType_t type) {
    if (k->held == DTYPE_FP32 || k->prescale == 1.0f) return ncclSum;
    uint16_t f = half_from_float(k->prescale, k->wire); /* in the wire's format */
    ncclRedOp_t op;
    ncclCheck(ncclRedOpCreatePreMulSum(&op, &f, type, ncclScalarHostImmediate, nc));
    return op;
}
static void nccl_sum_done(ncclRedOp_t op, ncclComm_t nc) {
    if (op != ncclSum) ncclCheck(ncclRedOpDestroy(op, nc));
}

/* From here on, the all-gathers of unshards may start as soon as what the
 * compute stream has queued so far is done: the trainer calls this as a
 * forward begins (PyTorch's root pre-forward makes its all-gather stream
 * wait for the compute stream once, there), and after it copies a shard to
 * the device. Shards are written by the optimizer step, loads and those
 * copies only, never during forward and backward. */
static void comm_shards_settled(Comm *c) {
    if (c->impl != COLLECTIVES_NCCL || backend.dry) return;
    if (!c->settled) cudaCheck(cudaEventCreateWithFlags((cudaEvent_t *)&c->settled,
                                                        cudaEventDisableTiming));
    cudaCheck(cudaEventRecord((cudaEvent_t)c->settled, backend.compute));
}

/* The communication stream waits until what the collective reads is
 * written and what it writes is no longer read. Most collectives read what
 * the compute stream has just computed, so they wait for all of it. An
 * unshard's all-gather waits for less: its shard is settled (above) and its
 * output is a communication block (dev_alloc_for_gather), whose readers are
 * done once its `freed` event has passed. So it does not wait for the unit
 * computing now, and runs while that unit computes (no --forward-prefetch
 * needed: the host queues it early, as PyTorch's CPU runs ahead). A packed
 * shard (nccl_pack, on the compute stream) takes the first way. */
static void nccl_order_after_inputs(const Comm *c, const CommTask *task, const CommTask *k) {
    cudaEvent_t freed = NULL;
    if (task->kind == COMM_ALL_GATHER && k->shard == task->shard && c->settled &&
        dev_gather_block(task->full, &freed)) {
        cudaCheck(cudaStreamWaitEvent(backend.comm, (cudaEvent_t)c->settled, 0));
        if (freed) cudaCheck(cudaStreamWaitEvent(backend.comm, freed, 0));
        return;
    }
    cudaEvent_t ready = event_record(backend.compute, 0);
    cudaCheck(cudaStreamWaitEvent(backend.comm, ready, 0));
    cudaCheck(cudaEventDestroy(ready));
}

static void nccl_submit(Comm *c, CommHandle *h, const CommTask *task) {
    const Comm *g = c->group[task->group]; /* its ranks, and their NCCL communicator */
    CommTask k = task->wire == DTYPE_FP32 ? *task : nccl_pack(g, h, task);
    ncclDataType_t type = nccl_type(k.wire);
    nccl_order_after_inputs(c, task, &k);
    ncclComm_t nc = (ncclComm_t)g->nccl;
    size_t S = (size_t)k.S;
    h->began = event_record(backend.comm, c->keep_events); /* timing only for --trace */
    if (k.kind == COMM_ALL_GATHER)
        ncclCheck(ncclAllGather(k.shard, k.full, S, type, nc, backend.comm));
    else if (k.kind == COMM_REDUCE_SCATTER) {
        ncclRedOp_t sum = nccl_sum(&k, nc, type);
        ncclCheck(ncclReduceScatter(k.full, k.out, S, type, sum, nc, backend.comm));
        nccl_sum_done(sum, nc);
    } else ncclCheck(ncclAllReduce(k.full, k.full, S * g->world, type, ncclSum, nc, backend.comm));
    h->done = event_record(backend.comm, c->keep_events);
    h->number = ++c->queued;
    nccl_watch_add(c, nc, h);
}

/* The compute stream waits for the collective; the host does not. Only a
 * trace needs to know when it ran: then the host waits for it too. */
static CommRun nccl_wait(Comm *c, CommHandle *h) {
    cudaEvent_t began = (cudaEvent_t)h->began, done = (cudaEvent_t)h->done;
    cudaCheck(cudaStreamWaitEvent(backend.compute, done, 0));
    CommRun run = {h->number, h->t_start, h->t_start};
    if (c->keep_events) {
        cudaCheck(cudaEventSynchronize(done));
        run.t_start = event_seconds(began);
        run.t_end = event_seconds(done);
        c->gpu_busy_seconds += run.t_end - run.t_start;
    }
    cudaCheck(cudaEventDestroy(began));
    cudaCheck(cudaEventDestroy(done));
    if (h->unpack_from) { /* mixed precision: the 16-bit result into its float slots */
        const uint16_t *w = (const uint16_t *)h->unpack_from;
        if (h->kind == COMM_ALL_GATHER)
            FOR_EACH(h->unpack_count, unpack_one, h->unpack_to, w, h->wire);
        else
            FOR_EACH(h->unpack_count, unpack_mean_one, h->unpack_to, w, h->wire, comm_postscale(h));
        h->unpack_from = NULL;
    }
    if (h->wire_buf) dev_free(h->wire_buf, h->wire_bytes);
    h->wire_buf = NULL;
    double now = now_seconds();
    comm_sim_waited(c, h, now, now);
    c->finished = h->number;
    return run;
}

/* Hands a collective to the device. NCCL queues it on its stream (returns
 * 1: nothing left to do); ring and mpi go on to the CPU stream, which must
 * first wait for an event on the compute stream: it is put in task. */
static int device_comm_submit(Comm *c, CommHandle *h, CommTask *task) {
    if (c->impl == COLLECTIVES_NCCL) {
        comm_sim_queued(c, h, now_seconds());
        nccl_submit(c, h, task);
        return 1;
    }
    task->ready = event_record(backend.compute, 0);
    return 0;
}

/* Waits for a collective the device ran (returns 1, its run in *run), or
 * returns 0: the CPU stream ran it, and comm_wait_for_run waits. */
static int device_comm_wait(Comm *c, CommHandle *h, CommRun *run) {
    if (c->impl != COLLECTIVES_NCCL || backend.dry) return 0;
    *run = nccl_wait(c, h);
    return 1;
}

#else
/* ---- the CPU build: the device is the host, and there is no NCCL ---------- */
static void collective_run(Comm *c, const CommTask *k) { collective_run_host(c, k); }
static int device_comm_open(Comm *c) {
    (void)c;
    return 0;
}
static void device_comm_close(Comm *c) { (void)c; }
static void comm_shards_settled(Comm *c) { (void)c; } /* the CPU's collectives wait on the host */
static int device_comm_submit(Comm *c, CommHandle *h, CommTask *task) {
    (void)c, (void)h, (void)task;
    return 0;
}
static int device_comm_wait(Comm *c, CommHandle *h, CommRun *run) {
    (void)c, (void)h, (void)run;
    return 0;
}
#endif

#endif /* FSDP_COMM_DEVICE_H */
