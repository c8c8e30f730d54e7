/* ============================================================================
 * comm/task.h — a collective as the stream runs it (comm_task), the mean's two
 * factors (comm_mean_parts, comm_postscale), and the watchdog's words
 * (comm_watchdog_expired), which the CPU's and NCCL's watchdogs share.
 *
 * May include core.h and fsdp.h: the first floor of comm/, under ring.h,
 * host.h, device.h and stream.h; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_COMM_TASK_H
#define FSDP_COMM_TASK_H
#include "../core.h"
#include "../fsdp.h"

/* A collective as the stream will run it: kind, group, buffers, format */
static CommTask comm_task(CommKind kind, CommGroup group, float *full, const float *shard,
                          float *out, float *tmp, long S, Dtype wire) {
    CommTask k;
    memset(&k, 0, sizeof(k));
    k.kind = kind, k.group = group, k.full = full, k.shard = shard, k.out = out, k.tmp = tmp;
    k.S = S, k.wire = wire, k.prescale = 1.0f, k.postscale = 1.0f;
    return k;
}

/* A sum of N gradients in 16 bits may overflow fp16 where their mean
 * would not (N ranks' gradients, each up to 65504 / N). So, as PyTorch's
 * FSDP does (_get_gradient_predivide_factor), the inputs are divided by a
 * factor f near sqrt(N) before the sum and the result by N / f after it.
 * FSDP1 does this in every format (FSDP2 in fp16 only); in fp32, whose range
 * is never the problem, we divide once, by N, afterwards. A 16-bit sum is divided as it
 * is unpacked from the wire (unpack_mean_one), an fp32 sum in comm_wait. */
static float comm_postscale(const CommHandle *h) { return h->predivide / (float)h->group_world; }
static void comm_mean_parts(CommHandle *h, CommTask *k, const Comm *g) {
    int f = 1;
    while (h->wire != DTYPE_FP32 && g->world % f == 0 && g->world / f > f) f *= 2;
    h->predivide = (float)f;
    k->prescale = 1.0f / h->predivide, k->postscale = comm_postscale(h);
}

/* ------------------------------------------------------------------------
 * The watchdog                                PyTorch: the process group's
 *                                              timeout, NCCL's watchdog
 *
 * A collective that one rank never calls (a rank that took another branch,
 * or died) leaves the others waiting forever: the ring's receive never
 * comes. PyTorch's process group gives every collective a timeout (10
 * minutes for NCCL by default) after which a watchdog reports it and
 * tears the job down, rather than hold a cluster's GPUs idle for ever.
 * Here the main thread waits for the communication thread at most
 * --collective-timeout seconds (default 600), then names the collective,
 * its unit and step, and stops every rank with exit 4 (MPI_Abort: the
 * thread still inside the ring cannot be called back). A collective run
 * inline (--inline-collectives, --step, under a debugger) has no one to
 * watch it; --check-collectives finds the diverging rank before it hangs.
 * With NCCL on a GPU the host never waits for a collective; a thread
 * polls them instead, as PyTorch's does (comm/device.h, nccl_watchdog).
 * --------------------------------------------------------------------- */
static void comm_watchdog_expired(int rank, double timeout, const CommHandle *h) {
    char unit[32] = "the loss";
    if (h->unit >= 0) snprintf(unit, sizeof(unit), "unit %d", h->unit);
    fprintf(stderr,
            "[rank %d] error: the %s of %s at step %d over %d ranks did not "
            "finish in %.0f s (--collective-timeout): a rank never called it (it took another "
            "branch, or died).\nHINT: run again with --check-collectives to find the rank whose "
            "collectives differ, or raise --collective-timeout if a collective is that slow.\n",
            rank, COMM_KIND_NAMES[h->kind], unit, h->step + 1, h->group_world, timeout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 4);
}


#endif /* FSDP_COMM_TASK_H */
