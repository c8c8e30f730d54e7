/* ============================================================================
 * sim/ledger.h — the memory ledger: every buffer of the training state is
 * allocated through it under a category, and it keeps the current and peak
 * bytes per category (and, with --vram, fails as CUDA does when a rank would
 * cross its budget: sim/oom.h). fsdp.c includes it at its top; the ledger's
 * types are fsdp.h's.
 *
 * Why: a GPU's memory is the scarce resource FSDP exists to save. The final
 * table and the DDP-vs-FSDP comparison read this rank's peaks. In the
 * simulator the bytes live in host memory; the accounting is what a GPU
 * would see.
 *
 * defines: ON_DEVICE, HOST_PAGEABLE, HOST_PINNED, ON_DEVICE_OVERWRITTEN,
 *          ON_DEVICE_GATHERED, on_host, ledger_book, ledger_alloc,
 *          ledger_alloc_held, ledger_alloc_floats(_overwritten),
 *          ledger_alloc_host(_floats), ledger_free, ledger_release_all
 *
 * It sits below comm/ (the ring books its receive buffer here) and above
 * kernels/backend.h (where the bytes come from): it may include core.h,
 * fsdp.h, kernels/backend.h and sim/, nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_SIM_LEDGER_H
#define FSDP_SIM_LEDGER_H
#include "../core.h"
#include "../fsdp.h"
#include "../kernels/backend.h" /* backend.dry, dev_alloc, host_pinned_alloc */
#include "oom.h"                /* ledger_out_of_memory */
#include "sim.h"                /* sim_on_memory */

/* Where a booked buffer lives: the device, or the host's memory, plain or
 * pinned for DMA (a GPU's --cpu-offload shards); and, on the device,
 * whether it must start zeroed: a buffer its first user writes whole (an
 * all-gather's output) skips that pass, as PyTorch's empty() does. An
 * unshard's comes from the communication stream's blocks (kernels/backend.h). */
enum { ON_DEVICE, HOST_PAGEABLE, HOST_PINNED, ON_DEVICE_OVERWRITTEN, ON_DEVICE_GATHERED };
static int on_host(int where) { return where == HOST_PAGEABLE || where == HOST_PINNED; }

/* Zeroed memory (padding must be 0), but for the two overwritten. --plan allocates
 * nothing: a distinct address the ledger can recognise at ledger_free stands in. */
static void *ledger_memory(Ledger *l, size_t physical, int where) {
    if (backend.dry) return (void *)(l->plan_next += 64);
    if (where == HOST_PINNED) return host_pinned_alloc(physical);
    if (where == HOST_PAGEABLE) return calloc(physical ? physical : 1, 1);
    if (where == ON_DEVICE_OVERWRITTEN) return dev_alloc_for_overwrite(physical);
    if (where == ON_DEVICE_GATHERED) return dev_alloc_for_gather(physical);
    return dev_alloc(physical);
}

static void ledger_memory_release(const LedgerEntry *e) {
    if (backend.dry) return;
    if (e->where == HOST_PINNED) host_pinned_free(e->ptr);
    else if (e->where == HOST_PAGEABLE) free(e->ptr);
    else dev_free(e->ptr, e->physical);
}

/* Allocates `physical` bytes and books `bytes` of them: the two differ
 * only for 16-bit values kept in float slots (core.h). `what` names the
 * owner (a unit, "activations", ...) for that report. */
static void *ledger_book(Ledger *l, MemCategory cat, size_t physical, size_t bytes,
                         const char *what, int where) {
    int host = on_host(where);
    if (!host && l->budget && l->current_total + bytes > l->budget)
        ledger_out_of_memory(l, cat, bytes, what);
    void *p = ledger_memory(l, physical, where);
    if (!p && where == HOST_PINNED) return NULL; /* the caller asks for pageable memory */
    if (!p && host)
        FATAL("the machine is out of host memory", "cannot allocate %zu bytes (%s)", bytes,
              MEM_CATEGORY_NAMES[cat]);
    if (!p) { /* the GPU itself is full (the CPU build's dev_alloc never returns NULL) */
        if (!l->oom_report) ledger_out_of_memory(l, cat, bytes, what);
        return NULL; /* during setup: noted, and trainer_create builds nothing more */
    }
    if (l->n_entries == l->cap_entries) {
        l->cap_entries = l->cap_entries ? 2 * l->cap_entries : 64;
        l->entries = (LedgerEntry *)host_realloc(
            l->entries, (size_t)l->cap_entries * sizeof(LedgerEntry), "grow the ledger");
    }
    l->entries[l->n_entries].ptr = p;
    l->entries[l->n_entries].bytes = bytes;
    l->entries[l->n_entries].physical = physical;
    l->entries[l->n_entries].cat = cat;
    l->entries[l->n_entries].where = where;
    l->n_entries++;
    if (host) { /* the host's memory: booked apart, outside --vram */
        l->host_current[cat] += bytes;
        if (l->host_current[cat] > l->host_peak[cat]) l->host_peak[cat] = l->host_current[cat];
        return p;
    }
    l->current[cat] += bytes;
    l->current_total += bytes;
    if (l->current[cat] > l->peak[cat]) l->peak[cat] = l->current[cat];
    if (l->current_total > l->peak_total) l->peak_total = l->current_total;
    sim_on_memory(l->sim, l);
    return p;
}

static void *ledger_alloc(Ledger *l, MemCategory cat, size_t count, size_t elem_size,
                          const char *what) {
    return ledger_book(l, cat, count * elem_size, count * elem_size, what, ON_DEVICE);
}

/* `count` values of format d, held in format `held` (float slots, or the
 * 16 bits of a GPU's mixed precision), booked at d's width: what PyTorch
 * holds; `where` on the device (zeroed or not) or the host */
static void *ledger_alloc_held(Ledger *l, MemCategory cat, size_t count, Dtype held, Dtype d,
                               const char *what, int where) {
    return ledger_book(l, cat, count * (size_t)dtype_bytes(held), count * (size_t)dtype_bytes(d),
                       what, where);
}
/* ... in float slots; not zeroed (_overwritten) for a buffer its first user writes whole */
#define ledger_alloc_floats(l, cat, count, d, what)                                                \
    (float *)ledger_alloc_held(l, cat, count, DTYPE_FP32, d, what, ON_DEVICE)
#define ledger_alloc_floats_overwritten(l, cat, count, d, what)                                    \
    (float *)ledger_alloc_held(l, cat, count, DTYPE_FP32, d, what, ON_DEVICE_OVERWRITTEN)

/* ... in the host's memory (--cpu-offload): booked apart from the device's.
 * What lives there all run and is copied every step is pinned on a GPU
 * (HOST_PINNED, kernels/backend.h's host_pinned_alloc), or pageable if the system
 * will not lock that much. */
static void *ledger_alloc_host(Ledger *l, MemCategory cat, size_t count, Dtype held, Dtype d,
                               const char *what, int pinned) {
    void *p = pinned ? ledger_alloc_held(l, cat, count, held, d, what, HOST_PINNED) : NULL;
    return p ? p : ledger_alloc_held(l, cat, count, held, d, what, HOST_PAGEABLE);
}
#define ledger_alloc_host_floats(l, cat, count, d, what, pinned)                                   \
    (float *)ledger_alloc_host(l, cat, count, DTYPE_FP32, d, what, pinned)

static void ledger_free(Ledger *l, void *p) {
    if (!p) return;
    for (int i = l->n_entries - 1; i >= 0; i--) { /* recent allocations first */
        if (l->entries[i].ptr != p) continue;
        ledger_memory_release(&l->entries[i]);
        if (on_host(l->entries[i].where)) {
            l->host_current[l->entries[i].cat] -= l->entries[i].bytes;
            l->entries[i] = l->entries[--l->n_entries];
            return;
        }
        l->current[l->entries[i].cat] -= l->entries[i].bytes;
        l->current_total -= l->entries[i].bytes;
        l->entries[i] = l->entries[--l->n_entries];
        sim_on_memory(l->sim, l);
        return;
    }
    FATAL("this is a bug in fsdp.c: every buffer must come from ledger_alloc",
          "freeing a pointer the ledger does not know");
}

static void ledger_release_all(Ledger *l) {
    for (int i = 0; i < l->n_entries; i++)
        if (l->entries[i].ptr) ledger_memory_release(&l->entries[i]);
    free(l->entries);
    free(l->oom_report);
    memset(l, 0, sizeof(*l));
}

#endif /* FSDP_SIM_LEDGER_H */
