/* ============================================================================
 * sim/oom.h — section 3 of fsdp.c, the words of an out-of-memory: what a
 * rank that crosses its simulated --vram budget (or a GPU's real one)
 * prints, as CUDA would, with the ledger's categories and what to try.
 * fsdp.c includes it in place; ledger_out_of_memory decides when and who.
 * ========================================================================== */

/* A size in the unit that shows it: "512 B", "1.00 KiB", "160.00 MiB". */
static const char *human_bytes(double bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 5) {
        bytes /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, len, "%.0f B", bytes);
    else snprintf(buf, len, "%.2f %s", bytes, units[u]);
    return buf;
}

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
