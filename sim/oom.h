/* ============================================================================
 * sim/oom.h — the ledger's simulated out-of-memory: what a rank
 * that crosses its --vram budget (or a GPU's real one) prints, as CUDA
 * would, with the ledger's categories and what to try; which rank says it;
 * and how every rank then stops (exit 3), during setup or in a step.
 * fsdp.c includes it in place; ledger_book calls ledger_out_of_memory.
 * ========================================================================== */
#ifndef FSDP_SIM_OOM_H
#define FSDP_SIM_OOM_H
#include "../core.h"
#include "../kernels/backend.h" /* OOM_WORDS, backend_memory_line */
#include "sim.h"                /* human_bytes */

/* A simulated GPU has a fixed amount of memory. Crossing it fails the way
 * CUDA does: which rank, what it tried to allocate and for what, the budget,
 * and what is already allocated by category. */
static char *ledger_oom_report(const Ledger *l, MemCategory cat, size_t bytes, const char *what) {
    char *r = (char *)malloc(4096), a[32], b[32], c[32];
    if (!r) return NULL;
    int n = snprintf(r, 4096,
                     "[rank %d] %s: tried to allocate %s of %s for %s.\n"
                     "[rank %d] budget %s per rank (--vram); %s already allocated:\n",
                     l->rank, OOM_WORDS, human_bytes((double)bytes, a, sizeof(a)),
                     MEM_CATEGORY_NAMES[cat], what, l->rank,
                     l->budget ? human_bytes((double)l->budget, b, sizeof(b)) : "unlimited",
                     human_bytes((double)l->current_total, c, sizeof(c)));
    for (int k = 0; k < MEM_NUM_CATEGORIES && n < 4000; k++)
        n += snprintf(r + n, (size_t)(4096 - n), "[rank %d]   %-13s %12s\n", l->rank,
                      MEM_CATEGORY_NAMES[k], human_bytes((double)l->current[k], a, sizeof(a)));
    n += backend_memory_line(r + n, (size_t)(4096 - n), l->rank);
    snprintf(r + n, (size_t)(4096 - n),
             "HINT: shard more (--strategy full_shard, more ranks), move the shards to the host "
             "(--cpu-offload), use 16 bits (--param-dtype bf16), shrink the activations "
             "(--activation-checkpointing, --grad-accum), or raise --vram. --plan shows each "
             "option's memory without running it.\n");
    return r;
}

/* While the trainer is being built every rank allocates the same things in
 * the same order, so a budget too small shows on all ranks at once. Then
 * the first failure is only noted (that allocation goes ahead in host
 * memory, untouched, and trainer_create builds nothing more) and
 * ledger_agree_fits() decides together: one report, from the lowest rank
 * that failed, and exit 3 everywhere.
 *
 * During training a rank that runs out cannot wait for the others: they
 * may already sit in a collective that needs it. So it stops the job
 * (MPI_Abort). Every rank usually fails at the same allocation, so to print
 * the report once a rank first waits a moment per rank number: the lowest
 * failing rank reports first, and its MPI_Abort takes the others down
 * before they print the same lines again. */
static void ledger_out_of_memory(Ledger *l, MemCategory cat, size_t bytes, const char *what) {
    char *report = ledger_oom_report(l, cat, bytes, what);
    if (l->defer_oom) {
        if (!l->oom_report) l->oom_report = report;
        else free(report);
        return;
    }
    struct timespec pause = {0, 400 * 1000 * 1000};
    for (int r = 0; r < l->rank && r < 8; r++) nanosleep(&pause, NULL);
    fputs(report ? report : "simulated CUDA out of memory\n", stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* The end of the trainer's setup (see ledger_out_of_memory): did the
 * budget hold on every rank? If not, the lowest rank that ran out reports
 * and every rank exits 3. */
static void ledger_agree_fits(Ledger *l, MPI_Comm comm) {
    int world = 1, mine, first;
    MPI_Comm_size(comm, &world);
    mine = l->oom_report ? l->rank : world;
    mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    l->defer_oom = 0;
    if (first == world) return;
    if (first == l->rank) {
        fputs(l->oom_report, stderr);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(3);
}

#endif /* FSDP_SIM_OOM_H */
