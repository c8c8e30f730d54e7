/* ============================================================================
 * comm/device.h — section 4 of fsdp.c, the collectives' side of the backend
 * seam: how a collective reaches a GPU's buffers. fsdp.c includes it in
 * place, after the host collectives and the --net schedule it calls.
 *
 *   ring, mpi  run on the host (collective_run_host): on a GPU the stream
 *              copies the device buffers into a host stage and back;
 *   nccl       NCCL on the GPU's communication stream, bootstrapped by MPI.
 *
 * Every function has a CPU version too, so section 4 reads the same in both
 * builds: on the CPU the device is the host, and NCCL is never chosen.
 * ========================================================================== */

#ifdef __CUDACC__
/* On a GPU, ring and mpi run on host copies of the device buffers: the
 * stream waits until the compute stream has written the inputs (the task's
 * `ready` event), copies them into c->stage, runs the collective there and
 * copies the result back. That costs two copies over PCIe, and it is what
 * lets several ranks share one GPU, which NCCL refuses. */
static void collective_run(Comm *c, const CommTask *k) {
    long S = k->S, N = c->world, need = (N + 2) * S; /* full, the ring's tmp, out */
    if (c->stage_count < need) {
        free(c->stage);
        c->stage = (float *)host_malloc((size_t)need * sizeof(float), "stage a collective");
        c->stage_count = need;
    }
    cudaEvent_t ready = (cudaEvent_t)k->ready;
    cudaCheck(cudaEventSynchronize(ready));
    cudaCheck(cudaEventDestroy(ready));
    if (S == 0 || backend.dry) return; /* no parameters, or --plan: nothing to move */
    CommTask host = comm_task(k->kind, k->group, c->stage, NULL, c->stage + (N + 1) * S,
                              c->stage + N * S, S, k->wire, k->prescale);
    size_t chunk = (size_t)S * sizeof(float), all = (size_t)(N * S) * sizeof(float);
    if (k->kind == COMM_ALL_GATHER) {
        host.shard = c->stage + c->rank * S; /* in place on the host */
        cudaCheck(cudaMemcpyAsync(host.full + c->rank * S, k->shard, chunk, cudaMemcpyDeviceToHost,
                                  backend.comm));
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
    return 1;
}

static void device_comm_close(Comm *c) {
    if (c->nccl) ncclCheck(ncclCommDestroy((ncclComm_t)c->nccl));
    c->nccl = NULL;
    free(c->stage);
    c->stage = NULL;
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
 * that in ncclBfloat16 or ncclFloat16, and nccl_wait unpacks the result.
 * The returned task points NCCL at the packed buffer. */
static CommTask nccl_pack(const Comm *c, CommHandle *h, const CommTask *k) {
    long S = k->S, N = c->world;
    CommTask w = *k;
    /* N slices and the reduce-scatter's output; + 2 bytes, never 0 (S = 0) */
    h->wire_bytes = (size_t)(N + 1) * (size_t)S * sizeof(uint16_t) + 2;
    uint16_t *buf = (uint16_t *)dev_alloc(h->wire_bytes);
    if (!buf) FATAL("the GPU is out of memory; try a smaller model", "cannot pack a collective");
    h->wire_buf = buf;
    w.full = (float *)buf; /* NCCL sees 16-bit elements from here on */
    if (k->kind == COMM_ALL_GATHER) {
        FOR_EACH(S, pack_one, buf + c->rank * S, k->shard, k->wire, 1.0f);
        w.shard = (float *)(buf + c->rank * S);
        h->unpack_to = k->full, h->unpack_count = N * S, h->unpack_from = 0;
    } else {
        int rs = k->kind == COMM_REDUCE_SCATTER; /* its result is one chunk, after the N */
        FOR_EACH(N * S, pack_one, buf, k->full, k->wire, k->prescale);
        w.out = (float *)(buf + N * S);
        h->unpack_to = rs ? k->out : k->full;
        h->unpack_count = rs ? S : N * S;
        h->unpack_from = rs ? N * S : 0;
    }
    return w;
}

static ncclDataType_t nccl_type(Dtype d) {
    if (d == DTYPE_BF16) return ncclBfloat16;
    return d == DTYPE_FP16 ? ncclFloat16 : ncclFloat;
}

static void nccl_submit(Comm *c, CommHandle *h, const CommTask *task) {
    const Comm *g = c->group[task->group]; /* its ranks, and their NCCL communicator */
    CommTask k = task->wire == DTYPE_FP32 ? *task : nccl_pack(g, h, task);
    ncclDataType_t type = nccl_type(k.wire);
    cudaEvent_t ready = event_record(backend.compute, 0);
    cudaCheck(cudaStreamWaitEvent(backend.comm, ready, 0));
    cudaCheck(cudaEventDestroy(ready));
    ncclComm_t nc = (ncclComm_t)g->nccl;
    size_t S = (size_t)k.S;
    h->began = event_record(backend.comm, c->keep_events); /* timing only for --trace */
    if (k.kind == COMM_ALL_GATHER)
        ncclCheck(ncclAllGather(k.shard, k.full, S, type, nc, backend.comm));
    else if (k.kind == COMM_REDUCE_SCATTER)
        ncclCheck(ncclReduceScatter(k.full, k.out, S, type, ncclSum, nc, backend.comm));
    else ncclCheck(ncclAllReduce(k.full, k.full, S * g->world, type, ncclSum, nc, backend.comm));
    h->done = event_record(backend.comm, c->keep_events);
    h->number = ++c->queued;
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
    if (h->wire_buf) { /* mixed precision: the 16-bit result back into its float slots */
        const uint16_t *w = (const uint16_t *)h->wire_buf + h->unpack_from;
        FOR_EACH(h->unpack_count, unpack_one, h->unpack_to, w, h->wire);
        dev_free(h->wire_buf, h->wire_bytes);
        h->wire_buf = NULL;
    }
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
static int device_comm_submit(Comm *c, CommHandle *h, CommTask *task) {
    (void)c, (void)h, (void)task;
    return 0;
}
static int device_comm_wait(Comm *c, CommHandle *h, CommRun *run) {
    (void)c, (void)h, (void)run;
    return 0;
}
#endif
