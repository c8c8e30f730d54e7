/* tests/test_distributed.c — N ranks against 1 rank, memory, and traffic.
 *
 * Run under mpirun; every rank takes part, rank 0 reports:
 *   mpirun -np N tests/test_distributed equivalence STRATEGY IMPL [fsdp flags]
 *   mpirun -np N tests/test_distributed memory [fsdp flags]
 *   mpirun -np N tests/test_distributed traffic STRATEGY [fsdp flags]
 *
 * The 1-rank reference runs in the same processes on MPI_COMM_SELF: each
 * rank trains it alone, so the comparison needs no files and no second run.
 * Exit code 0 when every check passes, 1 otherwise (on every rank).
 */
#define FSDP_NO_MAIN
#include "main.c"

static int failures = 0;

static void check(int ok, const char *what, const char *fmt, ...) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!ok) failures++;
    if (rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    printf("  %s %-40s ", ok ? "ok  " : "FAIL", what);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* ---- counting what really crosses the wire -------------------------------
 * The MPI profiling interface lets a program define MPI_Sendrecv itself and
 * reach the library through PMPI_Sendrecv. Our ring collectives move every
 * byte through MPI_Sendrecv, so this counter sees the real traffic,
 * independently of the counting in comm_record. */
static double wire_bytes_sent = 0.0;
static long wire_off_ring = 0; /* calls whose peers are not ring neighbours in their communicator */
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status) {
    int size = 0, r = 0, n = 1;
    MPI_Type_size(sendtype, &size);
    wire_bytes_sent += (double)sendcount * size;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    int right = (r + 1) % n, left = (r + n - 1) % n; /* either way round */
    wire_off_ring += !((dest == right && source == left) || (dest == left && source == right));
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, status);
}

/* Builds a Config from "fsdp flags" (argv tail) plus forced options, and
 * any more flags given in `more` (NULL-terminated, may be NULL). A
 * replicated strategy (the 1-rank references are no_shard) drops --fsdp2
 * and --reshard-after-forward K, which shard only: an FSDP2 run is compared
 * with FSDP1's DDP. */
static void make_config_more(Config *cfg, int argc, char **argv, const char *strategy,
                             const char *impl, const char *const *more) {
    char *args[64];
    int n = 0;
    args[n++] = (char *)"test";
    int replicated = strategy && (!strcmp(strategy, "no_shard") || !strcmp(strategy, "zero1"));
    for (int i = 0; i < argc && n < 50; i++) {
        if (replicated && !strcmp(argv[i], "--fsdp2")) continue;
        if (replicated && !strcmp(argv[i], "--reshard-after-forward") && i + 1 < argc) {
            i++; /* and its K */
            continue;
        }
        args[n++] = argv[i];
    }
    if (strategy) { args[n++] = (char *)"--strategy"; args[n++] = (char *)strategy; }
    if (impl) { args[n++] = (char *)"--collectives"; args[n++] = (char *)impl; }
    for (int i = 0; more && more[i] && n < 63; i++) args[n++] = (char *)more[i];
    char err[512];
    if (config_parse(cfg, n, args, err, sizeof(err)) != 0) {
        fprintf(stderr, "test_distributed: bad flags: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static void make_config(Config *cfg, int argc, char **argv, const char *strategy, const char *impl) {
    make_config_more(cfg, argc, argv, strategy, impl, NULL);
}

/* Every rank's shard of every unit's flat gradient, joined in model order:
 * the averaged gradient the optimizer just used. */
static void gather_grads(Trainer *t, float *out) {
    Model *m = &t->model;
    for (int ui = 0; ui < t->n_units; ui++) {
        Unit *u = &t->units[ui];
        float *full = (float *)calloc((size_t)u->padded + 1, sizeof(float));
        if (u->shard < u->padded) /* over the ranks sharing the shards (hybrid: a node's) */
            MPI_Allgather(u->shard_grad, (int)u->shard, MPI_FLOAT, full, (int)u->shard, MPI_FLOAT, t->comm.group[GROUP_SHARD]->comm);
        else memcpy(full, u->shard_grad, (size_t)u->padded * sizeof(float));
        if (u->chunk_at) { /* FSDP2: gathered rank by rank; each parameter's rows together */
            float *ranked = full;
            full = (float *)calloc((size_t)u->padded + 1, sizeof(float));
            fsdp2_copy(u, m, t->shard_world, t->shard_world, full, ranked, DTYPE_FP32, 1);
            free(ranked);
        }
        long pos = 0;
        for (int i = 0; i < m->n_params; i++) {
            if (m->params[i].unit == ui) memcpy(out + pos, full + m->params[i].offset, (size_t)m->params[i].numel * sizeof(float));
            pos += m->params[i].numel;
        }
        free(full);
    }
}

static double max_abs_diff(const float *a, const float *b, long n, double *scale) {
    double worst = 0.0, big = 0.0;
    for (long i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)b[i]));
    }
    *scale = big;
    return worst;
}

/* ---- equivalence -------------------------------------------------------------
 * The N-rank run and the 1-rank run do the same arithmetic except for the
 * order in which per-sample gradient contributions are summed: one rank
 * sums all B samples inside linear_backward; N ranks each sum B/N, and the
 * collective adds the N partial sums. fp32 addition is not associative, so
 * the results differ by rounding: relative ~1e-6 for the gradients. The
 * forward pass of one sample is identical bit for bit (fixed summation
 * order), so the first step's loss must agree to the last few ulps.
 * Tolerances:
 *   - gradients after step 1: max |dg| <= 1e-5 * max |g|. A reduction-order
 *     difference is ~1e-7 relative per addition, times a few dozen
 *     additions; a wrong mean (sum over N instead of average) or a missing
 *     rank is off by a factor of at least 1/N, orders of magnitude beyond.
 *   - losses every step: |dloss| <= 1e-5. Loss ~ 5, one ulp ~5e-7; the
 *     tiny parameter differences below feed through.
 *   - parameters after K steps: max |dp| <= 1e-5. Adam divides by sqrt(v),
 *     so an element whose gradient is near zero can turn a 1e-7 rounding
 *     difference into a larger step difference; in practice the worst
 *     element differs by ~1e-7 after 8 steps, so 1e-5 leaves two orders of
 *     margin. A real bug (a wrong shard offset, a missed unit, a stale
 *     gradient) moves parameters by ~lr = 3e-3 per step, far above it. */
static void test_equivalence_more(int argc, char **argv, const char *strategy, const char *impl,
                                  const char *const *only_n) {
    Config cfg, ref_cfg;
    make_config_more(&cfg, argc, argv, strategy, impl, only_n);
    make_config(&ref_cfg, argc, argv, "no_shard", "ring");
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    Trainer *ref = trainer_create(&ref_cfg, MPI_COMM_SELF);
    int N = t->comm.world;
    long P = trainer_num_params(t);
    float *a = (float *)malloc((size_t)P * sizeof(float)), *b = (float *)malloc((size_t)P * sizeof(float));
    float *init = (float *)malloc((size_t)P * sizeof(float));
    trainer_gather_params(ref, init);
    double worst_loss = 0.0;
    int steps = cfg.steps;
    for (int s = 0; s < steps; s++) {
        float ln = trainer_step(t, s), l1 = trainer_step(ref, s);
        worst_loss = fmax(worst_loss, fabs((double)ln - l1));
        if (s == 0) {
            double scale;
            gather_grads(t, a);
            gather_grads(ref, b);
            double d = max_abs_diff(a, b, P, &scale);
            check(d <= 1e-5 * scale, "gradients after step 1", "max |dg| %.2e, max |g| %.2e (tol 1e-5 * max|g|)", d, scale);
            check(fabs((double)ln - l1) <= 1e-5, "loss at step 1", "%d ranks %.7f, 1 rank %.7f", N, ln, l1);
        }
    }
    check(worst_loss <= 1e-5, "losses, every step", "max |dloss| %.2e over %d steps (tol 1e-5)", worst_loss, steps);
    double scale;
    trainer_gather_params(t, a);
    trainer_gather_params(ref, b);
    double d = max_abs_diff(a, b, P, &scale);
    check(d <= 1e-5, "parameters after the last step", "max |dp| %.2e over %ld parameters (tol 1e-5)", d, P);
    /* control: training moved the parameters far beyond the tolerance, so
     * "equal" above is not "both untouched" */
    double moved = max_abs_diff(b, init, P, &scale);
    check(moved > 100 * 1e-5, "(control) training moved parameters", "max |p - p0| %.2e; %d units, unit 0 shard %ld", moved, t->n_units, t->units[0].shard);
    free(init);
    free(a);
    free(b);
    trainer_destroy(t);
    trainer_destroy(ref);
}

static void test_equivalence(int argc, char **argv, const char *strategy, const char *impl) {
    test_equivalence_more(argc, argv, strategy, impl, NULL);
}

static double peak_of(Trainer *t, MemCategory k);

/* ---- gradient accumulation ----------------------------------------------------
 * --grad-accum K (with or without --no-sync) on N ranks against 1 rank
 * training on the whole batch at once, with the tolerances above: the K
 * micro-batches add their gradients in another order, nothing else. Then
 * memory: the activations are those of one micro-batch (the ledger's peak
 * equals a run with a K times smaller batch), and with --no-sync every
 * unit's full gradient is alive at once (sharded strategies). */
static void test_accum(int argc, char **argv, const char *strategy, const char *K, int no_sync) {
    const char *const flags[] = {"--grad-accum", K, no_sync ? "--no-sync" : NULL, NULL};
    test_equivalence_more(argc, argv, strategy, "ring", flags);
    Config cfg, small_cfg;
    make_config_more(&cfg, argc, argv, strategy, NULL, flags);
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    char batch[32];
    snprintf(batch, sizeof(batch), "%d", cfg.batch / cfg.grad_accum);
    const char *const smaller[] = {"--batch", batch, NULL};
    make_config_more(&small_cfg, argc, argv, strategy, NULL, smaller);
    Trainer *small = trainer_create(&small_cfg, MPI_COMM_WORLD);
    for (int s = 0; s < 2; s++) {
        trainer_step(t, s);
        trainer_step(small, s);
    }
    double act = peak_of(t, MEM_ACTIVATIONS), want = peak_of(small, MEM_ACTIVATIONS);
    check(act == want, "activations: one micro-batch's", "%.0f == %.0f bytes (--batch %s)", act,
          want, batch);
    if (no_sync && is_sharded(t)) {
        double all = 0.0, fg = peak_of(t, MEM_FULL_GRADS);
        for (int u = 0; u < t->n_units; u++) all += (double)t->units[u].padded * sizeof(float);
        check(fg == all, "--no-sync: every unit's full gradient alive", "%.0f == %.0f bytes", fg,
              all);
    }
    trainer_destroy(t);
    trainer_destroy(small);
}

/* ---- memory ---------------------------------------------------------------------
 * DDP and full_shard on the same ranks, two steps each, ledgers compared:
 *   - parameters, gradients, optimizer state: FSDP <= DDP/N + one unit's
 *     padding (in bytes, for the state tensors in that category);
 *   - full params: the root unit stays gathered through the whole step
 *     (PyTorch does not reshard the root after forward), and besides it:
 *       --backward-prefetch none or post:  one unit at a time
 *                                          -> root + largest unit
 *       --backward-prefetch pre, or --forward-prefetch: the unit computing
 *         and the next one, prefetched     -> root + largest adjacent pair
 *     (what sections 3 and 6 of fsdp.c promise for each option);
 *   - full grads: the root's, and one unit's reduce-scatter in flight while
 *     the next unit computes its own -> root + largest adjacent pair;
 *   - shard_grad_op keeps every unit's full state from its forward to its
 *     backward: the whole model.
 * Units run in index order here (auto-wrap numbers them in module order and
 * only the root nests others); the test checks that first. */
static double peak_of(Trainer *t, MemCategory k) {
    double mine = (double)t->ledger.peak[k], worst = 0.0;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, t->comm.comm);
    return worst;
}

/* Sizes of the non-root units in the order they run: the largest one, and
 * the largest two that run one after the other. */
static void unit_sizes(const Trainer *t, long *largest, long *largest_pair) {
    *largest = *largest_pair = 0;
    for (int u = 1; u < t->n_units; u++) {
        long pair = t->units[u].padded + (u + 1 < t->n_units ? t->units[u + 1].padded : 0);
        *largest = (long)fmax(*largest, t->units[u].padded);
        *largest_pair = (long)fmax(*largest_pair, pair);
    }
}

static void check_order(const Trainer *t) {
    int ok = t->order_known && t->n_pre == t->n_units && t->n_post == t->n_units;
    for (int i = 0; ok && i < t->n_units; i++)
        ok = t->pre_order[i] == i && t->post_order[i] == (i + 1) % t->n_units;
    check(ok, "units run in index order", "pre-forward 0..%d, post-forward 1..%d then the root",
          t->n_units - 1, t->n_units - 1);
}

static void test_full_state_peaks(int argc, char **argv, const char *what, const char *const *flags,
                                  int expect_pair) {
    Config cfg;
    make_config_more(&cfg, argc, argv, "full_shard", NULL, flags);
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    for (int s = 0; s < 2; s++) trainer_step(t, s);
    long largest, pair;
    unit_sizes(t, &largest, &pair);
    double root = (double)t->units[0].padded;
    double want_p = (root + (expect_pair ? pair : largest)) * sizeof(float);
    double want_g = (root + pair) * sizeof(float);
    double fp = peak_of(t, MEM_FULL_PARAMS), fg = peak_of(t, MEM_FULL_GRADS);
    char label[96];
    snprintf(label, sizeof(label), "%s: full params", what);
    check(fp == want_p, label, "%.0f == root + %s = %.0f bytes", fp,
          expect_pair ? "largest adjacent pair" : "largest unit", want_p);
    snprintf(label, sizeof(label), "%s: full grads", what);
    check(fg == want_g, label, "%.0f == root + largest adjacent pair = %.0f bytes", fg, want_g);
    snprintf(label, sizeof(label), "%s: all-gathers in flight", what);
    check(t->max_gathers_in_flight <= 2, label, "at most %d (limit 2)", t->max_gathers_in_flight);
    trainer_destroy(t);
}

static void test_memory(int argc, char **argv) {
    Config ddp_cfg, fsdp_cfg, zero2_cfg;
    make_config(&ddp_cfg, argc, argv, "no_shard", NULL);
    make_config(&fsdp_cfg, argc, argv, "full_shard", NULL);
    make_config(&zero2_cfg, argc, argv, "shard_grad_op", NULL);
    Trainer *ddp = trainer_create(&ddp_cfg, MPI_COMM_WORLD);
    Trainer *fsdp = trainer_create(&fsdp_cfg, MPI_COMM_WORLD);
    Trainer *zero2 = trainer_create(&zero2_cfg, MPI_COMM_WORLD);
    for (int s = 0; s < 2; s++) {
        trainer_step(ddp, s);
        trainer_step(fsdp, s);
        trainer_step(zero2, s);
    }
    check_order(fsdp);
    int N = fsdp->comm.world;
    long max_pad = 0, all_units = 0;
    for (int u = 0; u < fsdp->n_units; u++) {
        max_pad = fmax(max_pad, fsdp->units[u].padded - fsdp->units[u].numel);
        all_units += fsdp->units[u].padded;
    }
    const double total = (double)trainer_num_params(fsdp) * sizeof(float);
    const int tensors[3] = {1, 1, 2}; /* params, grads, exp_avg + exp_avg_sq */
    for (int k = MEM_PARAM_SHARD; k <= MEM_OPTIM_STATE; k++) {
        double d = peak_of(ddp, (MemCategory)k), f = peak_of(fsdp, (MemCategory)k);
        double bound = d / N + tensors[k] * max_pad * sizeof(float);
        char what[64];
        snprintf(what, sizeof(what), "%s: full_shard <= ddp/N + padding", MEM_CATEGORY_NAMES[k]);
        check(f <= bound && d >= tensors[k] * total, what, "%.0f <= %.0f (ddp %.0f, N %d)", f, bound, d, N);
    }
    double zp = peak_of(zero2, MEM_FULL_PARAMS);
    check(zp == (double)all_units * sizeof(float), "shard_grad_op full params: all units", "%.0f == %.0f bytes", zp, (double)all_units * sizeof(float));
    check(peak_of(ddp, MEM_FULL_PARAMS) == 0.0, "no_shard: no separate full state", "%.0f bytes", peak_of(ddp, MEM_FULL_PARAMS));
    trainer_destroy(ddp);
    trainer_destroy(fsdp);
    trainer_destroy(zero2);
    static const char *const none[] = {"--backward-prefetch", "none", NULL};
    static const char *const post[] = {"--backward-prefetch", "post", NULL};
    static const char *const pre[] = {"--backward-prefetch", "pre", NULL};
    static const char *const fwd[] = {"--backward-prefetch", "none", "--forward-prefetch", NULL};
    static const char *const nolimit[] = {"--backward-prefetch", "pre", "--forward-prefetch",
                                          "--limit-all-gathers", "off", NULL};
    test_full_state_peaks(argc, argv, "backward prefetch none", none, 0);
    test_full_state_peaks(argc, argv, "backward prefetch post", post, 0);
    test_full_state_peaks(argc, argv, "backward prefetch pre (default)", pre, 1);
    test_full_state_peaks(argc, argv, "forward prefetch", fwd, 1);
    test_full_state_peaks(argc, argv, "pre + forward, no limiter", nolimit, 1);
}

/* ---- prefetch changes no number ----------------------------------------------
 * Prefetching only moves when an all-gather happens, never what it
 * computes, and the reduce-scatters sum in the same order: every option
 * must give losses and parameters bitwise equal to no prefetch at all, for
 * this strategy, on the inline stream and on the thread. */
static void test_prefetch(int argc, char **argv, const char *strategy) {
    static const char *const options[][6] = {
        {"--backward-prefetch", "pre", NULL},
        {"--backward-prefetch", "post", NULL},
        {"--backward-prefetch", "none", "--forward-prefetch", NULL},
        {"--backward-prefetch", "pre", "--forward-prefetch", "--limit-all-gathers", "off", NULL},
        {"--backward-prefetch", "post", "--forward-prefetch", "--inline-collectives", NULL},
    };
    static const char *const base[] = {"--backward-prefetch", "none", "--inline-collectives", NULL};
    Config ref_cfg;
    make_config_more(&ref_cfg, argc, argv, strategy, NULL, base);
    Trainer *ref = trainer_create(&ref_cfg, MPI_COMM_WORLD);
    long P = trainer_num_params(ref);
    float *a = (float *)malloc((size_t)P * sizeof(float)), *b = (float *)malloc((size_t)P * sizeof(float));
    float *ref_loss = (float *)malloc((size_t)ref_cfg.steps * sizeof(float));
    for (int s = 0; s < ref_cfg.steps; s++) ref_loss[s] = trainer_step(ref, s);
    trainer_gather_params(ref, b);
    for (size_t o = 0; o < sizeof(options) / sizeof(options[0]); o++) {
        Config cfg;
        make_config_more(&cfg, argc, argv, strategy, NULL, options[o]);
        Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
        int same_loss = 1;
        for (int s = 0; s < cfg.steps; s++) same_loss &= trainer_step(t, s) == ref_loss[s];
        trainer_gather_params(t, a);
        char what[160] = "";
        for (int i = 0; options[o][i]; i++)
            snprintf(what + strlen(what), sizeof(what) - strlen(what), "%s%s", i ? " " : "",
                     options[o][i] + (options[o][i][0] == '-' ? 2 : 0));
        check(same_loss && memcmp(a, b, (size_t)P * sizeof(float)) == 0, what,
              "losses and %ld parameters bitwise equal to no prefetch (%d steps)", P, cfg.steps);
        trainer_destroy(t);
    }
    free(a);
    free(b);
    free(ref_loss);
    trainer_destroy(ref);
}

/* ---- traffic ------------------------------------------------------------------
 * Per step, per rank, in bytes, with S_u = unit u's shard (padded_u / N):
 *   full_shard:    all-gather  (N-1) S_u * 4 for each unit, twice (forward
 *                  and backward) except the root, once (kept gathered);
 *                  reduce-scatter (N-1) S_u * 4 once per unit
 *   shard_grad_op: all-gather once per unit, reduce-scatter once
 *   no_shard:      all-reduce 2 (N-1) S_u * 4 once per unit
 *   zero1:         reduce-scatter once per unit, then all-gather after the
 *                  optimizer step: DDP's all-reduce in two halves
 *   hybrid_shard(_zero2): full_shard's (shard_grad_op's) within a node of
 *                  G ranks, and an all-reduce of each shard over the N/G
 *                  nodes (padded to a multiple of N/G), priced on --net
 *                  A+B's inter-node link B
 * With --grad-accum K all of it happens K times (one forward and backward
 * per micro-batch), except that --no-sync reduces once, and shard_grad_op
 * under --no-sync keeps its full state and gathers once; with mixed
 * precision the all-gathers move param_dtype's 2 bytes an element instead
 * of 4, and the reductions reduce_dtype's width; --grad-scaler adds one
 * all-gather of a float per rank per step (the inf/NaN verdict);
 * plus the loss: an all-gather of one float per rank, (N-1) * 4.
 * Checked three ways: the counters against this formula, the bytes that
 * really went through MPI_Sendrecv (the ring) against the counters, and the
 * cost model's price of every recorded event against its formula. */
/* One kind of collective, `calls` times a step, over `world` ranks on a
 * full buffer of `count` elements of `width` bytes, priced on `net`. */
static void expect_add(double *bytes, double *sim, long *calls, CommKind kind, int times, int world,
                       long count, int width, const NetModel *net) {
    bytes[kind] += times * ring_bytes(kind, world, count, width);
    sim[kind] += times * net_collective_seconds(net, kind, world, (double)count * width);
    calls[kind] += times;
}

static void test_traffic(int argc, char **argv, const char *strategy) {
    Config cfg;
    make_config(&cfg, argc, argv, strategy, "ring");
    if (!cfg.net) cfg.net = "ethernet"; /* every event is also priced by the cost model */
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    int N = t->comm.world, steps = cfg.steps, G = cfg.ranks_per_node ? cfg.ranks_per_node : N;
    int K = cfg.grad_accum, reductions = cfg.no_sync ? 1 : K; /* per unit per step */
    Strategy st = cfg.strategy;
    int hybrid = (st == STRATEGY_HYBRID_SHARD || st == STRATEGY_HYBRID_SHARD_ZERO2) && G < N;
    int S_world = hybrid ? G : N, R = N / G; /* the shard group, and the replicas */
    const NetModel *intra, *inter;
    net_models_of(cfg.net, &intra, &inter);
    const NetModel *world_net = N > G ? inter : intra, *shard_net = hybrid ? intra : world_net;
    double expect[COMM_NUM_KINDS] = {0, 0, 0}, expect_sim[COMM_NUM_KINDS] = {0, 0, 0};
    long expect_calls[COMM_NUM_KINDS] = {0, 0, 0};
    int scalars = cfg.grad_scaler ? 2 : 1; /* the loss, and the inf/NaN verdict */
    expect_add(expect, expect_sim, expect_calls, COMM_ALL_GATHER, scalars, N, N, 4, world_net);
    int pw = dtype_bytes(cfg.param_dtype), rw = dtype_bytes(cfg.reduce_dtype); /* wire widths */
    for (int u = 0; u < t->n_units; u++) {
        long padded = t->units[u].padded, shard = padded / S_world;
        if (st == STRATEGY_NO_SHARD) {
            expect_add(expect, expect_sim, expect_calls, COMM_ALL_REDUCE, reductions, N, padded, rw, world_net);
            continue;
        }
        if (st == STRATEGY_ZERO1) { /* reduce-scatter once a step, all-gather after it */
            expect_add(expect, expect_sim, expect_calls, COMM_REDUCE_SCATTER, 1, N, padded, rw, world_net);
            expect_add(expect, expect_sim, expect_calls, COMM_ALL_GATHER, 1, N, padded, pw, world_net);
            continue;
        }
        int reshard = st == STRATEGY_FULL_SHARD || st == STRATEGY_HYBRID_SHARD;
        int gathers = K * ((reshard && u > 0) ? 2 : 1);
        if (!reshard && cfg.no_sync) gathers = 1; /* kept */
        expect_add(expect, expect_sim, expect_calls, COMM_ALL_GATHER, gathers, S_world, padded, pw, shard_net);
        expect_add(expect, expect_sim, expect_calls, COMM_REDUCE_SCATTER, reductions, S_world, padded, rw, shard_net);
        if (hybrid) /* the shard, padded to a multiple of R, across the nodes */
            expect_add(expect, expect_sim, expect_calls, COMM_ALL_REDUCE, reductions, R, (shard + R - 1) / R * R, rw, inter);
    }
    wire_bytes_sent = 0.0;
    for (int s = 0; s < steps; s++) trainer_step(t, s);
    double counted = 0.0;
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        char what[64];
        snprintf(what, sizeof(what), "%s bytes/step (%s)", COMM_KIND_NAMES[k], strategy);
        check(t->comm.bytes_sent[k] == expect[k] * steps && t->comm.bytes_recv[k] == expect[k] * steps && t->comm.calls[k] == expect_calls[k] * steps, what,
              "counted %.0f sent, %.0f received in %ld calls, formula %.0f in %ld calls", t->comm.bytes_sent[k] / steps, t->comm.bytes_recv[k] / steps, t->comm.calls[k] / steps, expect[k], expect_calls[k]);
        counted += t->comm.bytes_sent[k];
    }
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        char what[64];
        snprintf(what, sizeof(what), "%s simulated on %s", COMM_KIND_NAMES[k], cfg.net);
        double got = t->comm.sim_seconds[k] / steps;
        check(fabs(got - expect_sim[k]) <= 1e-9 * (1.0 + expect_sim[k]), what, "%.3f us/step, formula %.3f us", 1e6 * got, 1e6 * expect_sim[k]);
    }
    check(wire_bytes_sent == counted, "bytes through MPI_Sendrecv == counted", "%.0f == %.0f (rank 0, %d steps)", wire_bytes_sent, counted, steps);
    check(wire_off_ring == 0, "every MPI_Sendrecv between ring neighbours", "%ld call(s) on rank 0 sent to or received from another rank than ring_right and ring_left", wire_off_ring);
    trainer_destroy(t);
}

/* Trains t and ref side by side for `steps` steps: an option that changes
 * where state lives, not what is computed, must give the same losses and
 * parameters bit for bit. */
static void train_both_bitwise(Trainer *t, Trainer *ref, int steps) {
    long P = trainer_num_params(t);
    float *a = (float *)malloc((size_t)P * sizeof(float)), *b = (float *)malloc((size_t)P * sizeof(float));
    int same_loss = 1;
    for (int s = 0; s < steps; s++) same_loss &= trainer_step(t, s) == trainer_step(ref, s);
    trainer_gather_params(t, a);
    trainer_gather_params(ref, b);
    check(same_loss && memcmp(a, b, (size_t)P * sizeof(float)) == 0, "bitwise equal to without it",
          "losses of %d steps and %ld parameters", steps, P);
    free(a);
    free(b);
}

/* ---- mixed precision: N ranks == 1 rank in the same formats ------------------------
 * Both runs round every stored value to the same 16-bit format; what
 * differs is where the gradient's sums are rounded. One rank sums its B
 * samples in fp32 and rounds once; N ranks each round their partial sum of
 * B/N samples, and the ring rounds each of its N-1 additions. Each rounding
 * is within u = 2^-8 (bf16) or 2^-11 (fp16) of the value rounded, so the
 * averaged gradient differs by at most about (N + 1) u of the largest
 * partial sum: we allow 2 (N + 1) u of max |g| after step 1. The forward of
 * a sample is the same bits on any number of ranks, so step 1's loss agrees
 * to fp32 rounding (1e-5). After that the parameters part by rounding
 * noise: Adam's update of an element is about lr in size whatever its
 * gradient, so an element whose gradient sits at rounding level may step
 * the other way. The test bounds the drift in aggregate: the RMS of the
 * difference must stay within 5% of the RMS distance training moved the
 * parameters, and the losses within 2 (N + 1) u relative every step; a
 * wrong shard, a lost rank or a skipped step on some ranks only moves them
 * by 100% of that distance. With fp16 each rank's gradient is the mean of
 * its B/N samples, up to N times one rank's and so quicker to overflow:
 * the comparison runs at a loss scale neither reaches (checked). */
static double rms(const float *a, const float *b, long n) {
    double sum = 0.0;
    for (long i = 0; i < n; i++) sum += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(sum / (double)n);
}

static void test_precision(int argc, char **argv, const char *strategy) {
    Config cfg, ref_cfg;
    make_config(&cfg, argc, argv, strategy, NULL);
    make_config(&ref_cfg, argc, argv, "no_shard", "ring");
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD), *ref = trainer_create(&ref_cfg, MPI_COMM_SELF);
    int N = t->comm.world, skipped = 0;
    double u = cfg.param_dtype == DTYPE_FP16 || cfg.reduce_dtype == DTYPE_FP16 ? 1.0 / 2048 : 1.0 / 256;
    if (cfg.param_dtype == DTYPE_BF16 || cfg.reduce_dtype == DTYPE_BF16) u = 1.0 / 256;
    long P = trainer_num_params(t);
    float *a = (float *)malloc((size_t)P * sizeof(float)), *b = (float *)malloc((size_t)P * sizeof(float));
    float *init = (float *)malloc((size_t)P * sizeof(float));
    trainer_gather_params(ref, init);
    double worst_loss = 0.0;
    for (int s = 0; s < cfg.steps; s++) {
        float ln = trainer_step(t, s), l1 = trainer_step(ref, s);
        skipped += t->skipped_step + ref->skipped_step;
        worst_loss = fmax(worst_loss, fabs((double)ln - l1) / fabs((double)l1));
        if (s == 0) {
            double scale;
            check(fabs((double)ln - l1) <= 1e-5, "loss at step 1", "%d ranks %.7f, 1 rank %.7f", N, ln, l1);
            gather_grads(t, a);
            gather_grads(ref, b);
            double d = max_abs_diff(a, b, P, &scale);
            check(d <= 2 * (N + 1) * u * scale, "gradients after step 1", "max |dg| %.2e, max |g| %.2e (tol 2 (N+1) u max|g| = %.2e)", d, scale, 2 * (N + 1) * u * scale);
        }
    }
    check(worst_loss <= 2 * (N + 1) * u, "losses, every step", "max |dloss|/loss %.2e over %d steps (tol 2 (N+1) u = %.2e)", worst_loss, cfg.steps, 2 * (N + 1) * u);
    if (cfg.grad_scaler) check(skipped == 0, "(control) no step skipped", "loss scale %g", (double)cfg.init_scale);
    trainer_gather_params(t, a);
    trainer_gather_params(ref, b);
    double drift = rms(a, b, P), moved = rms(b, init, P);
    check(drift <= 0.05 * moved && moved > 0, "parameters: RMS drift within 5% of RMS movement", "%.2e <= 0.05 * %.2e", drift, moved);
    free(a);
    free(b);
    free(init);
    trainer_destroy(t);
    trainer_destroy(ref);
}

/* ---- zero1 and the hybrid strategies: memory ----------------------------------------
 * zero1 keeps DDP's whole parameters and gradients and full_shard's
 * optimizer state: its "parameters" and "gradients" peaks equal no_shard's
 * and its "optimizer" peak equals full_shard's, on the same ranks.
 * hybrid_shard (hybrid_shard_zero2) over nodes of G ranks holds, on every
 * rank, what full_shard (shard_grad_op) holds on a G-rank world: checked
 * against such a trainer built on this rank's node alone (MPI_Comm_split),
 * with the same samples per rank, category by category. */
static void test_strategy_memory(int argc, char **argv, const char *strategy) {
    Config cfg, a_cfg, b_cfg;
    make_config(&cfg, argc, argv, strategy, NULL);
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    int N = t->comm.world, G = cfg.ranks_per_node ? cfg.ranks_per_node : N;
    MPI_Comm node = MPI_COMM_NULL;
    Trainer *a, *b = NULL;
    if (cfg.strategy == STRATEGY_ZERO1) {
        make_config(&a_cfg, argc, argv, "no_shard", NULL);
        make_config(&b_cfg, argc, argv, "full_shard", NULL);
        a = trainer_create(&a_cfg, MPI_COMM_WORLD);
        b = trainer_create(&b_cfg, MPI_COMM_WORLD);
    } else {
        char batch[32];
        snprintf(batch, sizeof(batch), "%d", cfg.batch / N * G);
        const char *const flags[] = {"--batch", batch, NULL};
        int zero2 = cfg.strategy == STRATEGY_HYBRID_SHARD_ZERO2;
        make_config_more(&a_cfg, argc, argv, zero2 ? "shard_grad_op" : "full_shard", NULL, flags);
        a_cfg.ranks_per_node = 0;
        MPI_Comm_split(MPI_COMM_WORLD, t->comm.rank / G, t->comm.rank, &node);
        a = trainer_create(&a_cfg, node);
    }
    for (int s = 0; s < 2; s++) {
        trainer_step(t, s);
        trainer_step(a, s);
        if (b) trainer_step(b, s);
    }
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) {
        if (k == MEM_COMM_BUFFERS) continue; /* the replicas' all-reduce stages its own */
        Trainer *ref = b && k == MEM_OPTIM_STATE ? b : a;
        if (b && (k == MEM_FULL_PARAMS || k == MEM_FULL_GRADS)) continue; /* none in either */
        double got = peak_of(t, (MemCategory)k), want = peak_of(ref, (MemCategory)k);
        char what[96];
        snprintf(what, sizeof(what), "%s: as %s%s", MEM_CATEGORY_NAMES[k], strategy_name(ref->cfg.strategy),
                 node != MPI_COMM_NULL ? " on one node" : "");
        check(got == want, what, "%.0f == %.0f bytes", got, want);
    }
    trainer_destroy(t);
    trainer_destroy(a);
    if (b) trainer_destroy(b);
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
}

/* ---- mixed precision: every buffer booked at its width -------------------------------
 * The same run in fp32 and with --param-dtype bf16 (--reduce-dtype as
 * given): the shard of the parameters, the gathered full parameters and the
 * full gradients are param_dtype, 2 bytes instead of 4: exactly half the
 * fp32 peaks. The gradient shard is reduce_dtype's width. The optimizer
 * state gains the fp32 master: 12 bytes a parameter instead of 8, 1.5x. */
static void test_precision_memory(int argc, char **argv, const char *strategy) {
    static const char *const fp32[] = {"--param-dtype", "fp32", "--reduce-dtype", "fp32", NULL};
    Config cfg, ref_cfg;
    make_config(&cfg, argc, argv, strategy, NULL);
    make_config_more(&ref_cfg, argc, argv, strategy, NULL, fp32);
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD), *ref = trainer_create(&ref_cfg, MPI_COMM_WORLD);
    for (int s = 0; s < 2; s++) {
        trainer_step(t, s);
        trainer_step(ref, s);
    }
    double pw = dtype_bytes(cfg.param_dtype) / 4.0, rw = dtype_bytes(cfg.reduce_dtype) / 4.0;
    const MemCategory cats[5] = {MEM_PARAM_SHARD, MEM_GRAD_SHARD, MEM_OPTIM_STATE, MEM_FULL_PARAMS, MEM_FULL_GRADS};
    double ratio[5] = {pw, rw, 1.5, pw, pw};
    if (!is_sharded(t)) ratio[0] = pw, ratio[1] = rw; /* the "shards" are the whole model */
    for (int k = 0; k < 5; k++) {
        double got = peak_of(t, cats[k]), fp = peak_of(ref, cats[k]);
        char what[64];
        snprintf(what, sizeof(what), "%s: %.2gx fp32's", MEM_CATEGORY_NAMES[cats[k]], ratio[k]);
        check(got == ratio[k] * fp, what, "%.0f == %.2g * %.0f bytes", got, ratio[k], fp);
    }
    trainer_destroy(t);
    trainer_destroy(ref);
}

/* ---- ShardedGradScaler: one verdict on every rank ----------------------------------
 * At a loss scale too large for fp16 the gradients overflow, but a rank sees
 * only its own shards: an inf in one rank's shard is no inf in another's.
 * Started from such a scale, every rank must skip exactly the same steps
 * (the ranks agree on found_inf), and the test checks that on some step the
 * ranks' own findings differed, so the agreement was needed. Each skip
 * halves the scale until steps go through, a skipped step leaves the
 * parameters as they were, and training then moves them. */
static void test_scaler(int argc, char **argv, const char *strategy) {
    Config cfg;
    make_config(&cfg, argc, argv, strategy, NULL);
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    long P = trainer_num_params(t);
    float *a = (float *)malloc((size_t)P * sizeof(float)), *init = (float *)malloc((size_t)P * sizeof(float));
    trainer_gather_params(t, init);
    int skips = 0, agreed = 1, differed = 0, unchanged = 1;
    for (int s = 0; s < cfg.steps; s++) {
        trainer_step(t, s);
        int v[2] = {t->skipped_step, t->found_inf_here}, lo[2], hi[2];
        MPI_Allreduce(v, lo, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(v, hi, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        agreed &= lo[0] == hi[0];
        differed |= lo[1] != hi[1];
        skips += t->skipped_step;
        if (t->skipped_step && skips == s + 1) { /* every step so far skipped */
            trainer_gather_params(t, a);
            unchanged &= memcmp(a, init, (size_t)P * sizeof(float)) == 0;
        }
    }
    trainer_gather_params(t, a);
    double moved = rms(a, init, P), want = cfg.init_scale / pow(2.0, skips);
    check(agreed, "every rank skipped the same steps", "%d of %d skipped", skips, cfg.steps);
    check(differed, "ranks' own findings differed on some step", "so agreeing on found_inf mattered");
    check(skips > 0 && skips < cfg.steps && t->loss_scale == (float)want, "the scale halved per skip, then steps went through",
          "scale %g == %g / 2^%d", (double)t->loss_scale, (double)cfg.init_scale, skips);
    check(unchanged && moved > 0, "skipped steps left the parameters alone; the others moved them", "RMS movement %.2e", moved);
    free(a);
    free(init);
    trainer_destroy(t);
}

/* ---- CPU offload -------------------------------------------------------------------
 * --cpu-offload moves where the shards live, not what is computed: on the
 * same ranks, losses and parameters are bitwise those without it. The
 * host's ledger holds what the device held (the shards of parameters and
 * gradient, the optimizer state); the device keeps none of the optimizer
 * state and less of the rest. The copies, per step: to the device, the
 * parameter shard at every all-gather (twice for full_shard's units but the
 * root); to the host, the gradient shard at every reduce-scatter; their
 * bytes, and their price on PCIe (alpha + bytes / bandwidth each); K times
 * with --grad-accum K. Then, in fp32, N ranks with it == 1 rank without
 * it, with the tolerances above. */
static void test_offload(int argc, char **argv, const char *strategy) {
    static const char *const on[] = {"--cpu-offload", NULL};
    Config cfg, ref_cfg;
    make_config_more(&cfg, argc, argv, strategy, NULL, on);
    make_config(&ref_cfg, argc, argv, strategy, NULL);
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD), *ref = trainer_create(&ref_cfg, MPI_COMM_WORLD);
    train_both_bitwise(t, ref, cfg.steps);
    for (int k = MEM_PARAM_SHARD; k <= MEM_OPTIM_STATE; k++) {
        if (k == MEM_GRAD_SHARD && cfg.grad_accum > 1) continue; /* accumulates otherwise */
        double mine = (double)t->ledger.host_peak[k], host = 0.0, dev = peak_of(ref, (MemCategory)k);
        MPI_Allreduce(&mine, &host, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        char what[64];
        snprintf(what, sizeof(what), "host: %s as the device's without it", MEM_CATEGORY_NAMES[k]);
        check(host == dev, what, "%.0f == %.0f bytes", host, dev);
    }
    check(peak_of(t, MEM_OPTIM_STATE) == 0 && peak_of(t, MEM_PARAM_SHARD) < peak_of(ref, MEM_PARAM_SHARD) &&
          t->ledger.peak_total < ref->ledger.peak_total, "device: no optimizer state, less in total", "rank 0 total %.0f < %.0f bytes",
          (double)t->ledger.peak_total, (double)ref->ledger.peak_total);
    double to_dev = 0, to_host = 0, price = 0;
    long calls_dev = 0, calls_host = 0;
    const NetModel *pcie = net_model_find("pcie");
    int reshard = cfg.strategy == STRATEGY_FULL_SHARD || cfg.strategy == STRATEGY_HYBRID_SHARD;
    int K = cfg.grad_accum, reductions = cfg.no_sync ? 1 : K;
    for (int u = 0; u < t->n_units; u++) {
        double pb = (double)t->units[u].shard * dtype_bytes(cfg.param_dtype), rb = (double)t->units[u].shard * dtype_bytes(cfg.reduce_dtype);
        int gathers = K * ((reshard && u > 0) ? 2 : 1);
        if (!reshard && cfg.no_sync) gathers = 1; /* kept across the micro-batches */
        to_dev += gathers * pb, calls_dev += gathers, price += gathers * (pcie->alpha + pb / pcie->bandwidth);
        to_host += reductions * rb, calls_host += reductions, price += reductions * (pcie->alpha + rb / pcie->bandwidth);
    }
    int S = cfg.steps;
    check(t->copy_calls[TO_DEVICE] == calls_dev * S && t->copy_bytes[TO_DEVICE] == to_dev * S, "copies to the device: the parameter shard per all-gather", "%ld calls, %.0f bytes a step", t->copy_calls[TO_DEVICE] / S, t->copy_bytes[TO_DEVICE] / S);
    check(t->copy_calls[TO_HOST] == calls_host * S && t->copy_bytes[TO_HOST] == to_host * S, "copies to the host: the gradient shard per reduce-scatter", "%ld calls, %.0f bytes a step", t->copy_calls[TO_HOST] / S, t->copy_bytes[TO_HOST] / S);
    check(fabs(t->copy_sim_seconds - price * S) <= 1e-9 * price * S, "priced on PCIe", "%.3f us a step", 1e6 * t->copy_sim_seconds / S);
    trainer_destroy(t);
    trainer_destroy(ref);
    if (cfg.param_dtype == DTYPE_FP32 && cfg.reduce_dtype == DTYPE_FP32) /* else: mode precision */
        test_equivalence_more(argc, argv, strategy, "ring", on);
}

/* ---- activation checkpointing -------------------------------------------------
 * --activation-checkpointing must change no number: losses and parameters
 * bitwise equal to the run without it (the recomputed activations are the
 * forward's, bit for bit). Its saving is exact: L-1 blocks' inner
 * activations (norm output B*D, its mean and rstd 2*B, fc1 and GELU outputs
 * 2*B*4D floats each) are no longer kept. And it costs no collective: the
 * same calls and bytes. */
static void test_checkpointing(int argc, char **argv, const char *strategy) {
    static const char *const ac[] = {"--activation-checkpointing", NULL};
    Config cfg, ref_cfg;
    make_config(&ref_cfg, argc, argv, strategy, NULL);
    make_config_more(&cfg, argc, argv, strategy, NULL, ac);
    Trainer *ref = trainer_create(&ref_cfg, MPI_COMM_WORLD), *t = trainer_create(&cfg, MPI_COMM_WORLD);
    train_both_bitwise(t, ref, cfg.steps);
    double B = t->micro_batch, D = cfg.width;
    double saved = (cfg.depth - 1) * (B * D + 2 * B + 2 * B * 4 * D) * sizeof(float);
    double with = peak_of(t, MEM_ACTIVATIONS), without = peak_of(ref, MEM_ACTIVATIONS);
    check(without - with == saved && saved > 0, "activation peak: L-1 blocks' inner activations less",
          "%.0f - %.0f == %.0f bytes (L = %d)", without, with, saved, cfg.depth);
    int same_traffic = 1;
    for (int k = 0; k < COMM_NUM_KINDS; k++)
        same_traffic &= t->comm.calls[k] == ref->comm.calls[k] && t->comm.bytes_sent[k] == ref->comm.bytes_sent[k];
    check(same_traffic, "no collective more", "all-gathers %ld == %ld", t->comm.calls[COMM_ALL_GATHER], ref->comm.calls[COMM_ALL_GATHER]);
    trainer_destroy(t);
    trainer_destroy(ref);
}

/* ---- --init-from ---------------------------------------------------------------
 * A trainer started from a safetensors file holds exactly its parameters:
 * every rank read only its own shard ranges, and gathered back together
 * they are the file's tensors, bit for bit, whatever the world size. */
static void test_init_from(int argc, char **argv, const char *path) {
    Config cfg;
    make_config(&cfg, argc, argv, NULL, NULL);
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    int rc = trainer_init_from(t, path);
    check(rc == 0, "trainer_init_from", "%s", path);
    long P = trainer_num_params(t);
    float *got = (float *)malloc((size_t)P * sizeof(float)), *want = (float *)malloc((size_t)P * sizeof(float));
    trainer_gather_params(t, got);
    FILE *f = fopen(path, "rb");
    unsigned char *bytes = NULL;
    long size = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        bytes = (unsigned char *)malloc((size_t)size);
        if (fread(bytes, 1, (size_t)size, f) != (size_t)size) size = 0;
    }
    if (f) fclose(f);
    StHeader h;
    char err[256];
    int parsed = size > 0 && st_parse_header(bytes, (size_t)size, (uint64_t)size, &h, err, sizeof(err)) == 0;
    check(parsed, "the file parses", "%s", parsed ? path : err);
    if (parsed) {
        long pos = 0;
        for (int i = 0; i < t->model.n_params; i++) { /* the file in model order */
            for (int j = 0; j < h.n; j++)
                if (!strcmp(h.tensors[j].name, t->model.params[i].name)) memcpy(want + pos, bytes + h.data_start + h.tensors[j].begin, (size_t)t->model.params[i].numel * sizeof(float));
            pos += t->model.params[i].numel;
        }
        check(memcmp(got, want, (size_t)P * sizeof(float)) == 0, "parameters == the file's tensors", "%ld values, bitwise, %d ranks", P, t->comm.world);
        st_free(&h);
    }
    free(bytes);
    free(got);
    free(want);
    trainer_destroy(t);
}

/* ---- gradient clipping --------------------------------------------------------
 * FSDP's clip_grad_norm_ on N ranks against the 1-rank gradient's norm,
 * computed here straight from that gradient in double: a 1-rank no_shard
 * trainer that never clips (max norm 1e30) must report it, and N ranks
 * under STRATEGY must find the same total norm from their shards (1e-5
 * relative: fp32 sums in another order). Clipped to a tenth of it, the N
 * ranks' averaged gradient (what AdamW used) must have exactly that norm. */
static double norm_of(const float *g, long n) {
    double sum = 0.0;
    for (long i = 0; i < n; i++) sum += (double)g[i] * g[i];
    return sqrt(sum);
}

static void test_clip(int argc, char **argv, const char *strategy) {
    static const char *const never[] = {"--clip-grad-norm", "1e30", NULL};
    Config cfg, ref_cfg;
    make_config_more(&ref_cfg, argc, argv, "no_shard", "ring", never);
    Trainer *ref = trainer_create(&ref_cfg, MPI_COMM_SELF);
    trainer_step(ref, 0);
    long P = trainer_num_params(ref);
    float *g = (float *)malloc((size_t)P * sizeof(float));
    gather_grads(ref, g);
    double norm = norm_of(g, P);
    check(fabs(ref->grad_norm - norm) <= 1e-5 * norm, "1 rank: the norm it reports",
          "%.7f, from the gradient %.7f", ref->grad_norm, norm);
    char max[32];
    snprintf(max, sizeof(max), "%.9g", norm / 10);
    const char *const tenth[] = {"--clip-grad-norm", max, NULL};
    make_config_more(&cfg, argc, argv, strategy, "ring", tenth);
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    trainer_step(t, 0);
    check(fabs(t->grad_norm - norm) <= 1e-5 * norm, "N ranks: the same total norm from their shards",
          "%d ranks %.7f, 1 rank %.7f", t->comm.world, t->grad_norm, norm);
    gather_grads(t, g);
    double clipped = norm_of(g, P);
    check(fabs(clipped - norm / 10) <= 1e-5 * norm / 10, "clipped to max_norm",
          "norm after clipping %.7f, max_norm %s", clipped, max);
    free(g);
    trainer_destroy(t);
    trainer_destroy(ref);
}

/* ---- a GPU's storage, on N ranks -----------------------------------------------
 * With backend.gemm_dtype the 16-bit param_dtype, as backend_init sets it
 * on a GPU, activations are held in 16 bits and a sharded unit's full state
 * is gathered into 16 bits, the all-gather's output as it came, from which
 * every kernel reads the parameters (fsdp.c's full_dtype); its full
 * gradient is held in 16 bits too, each kernel rounding what it adds, and
 * reduce-scattered as it is (grad_dtype: unless --reduce-dtype differs).
 * K steps on N ranks must give the losses and parameters of the same N
 * ranks holding fp32 slots, the CPU's own storage, bit for bit: a shard
 * packed into the wrong slice of the gathered state, a view at the wrong
 * offset, or a gradient rounded where the fp32 slots are not (a tied
 * weight's two shares), would not. The global switch is set for one
 * trainer's whole life at a time. */
static float held16_run(int argc, char **argv, const char *strategy, int held16, float **params,
                        long *P) {
    Config cfg;
    make_config(&cfg, argc, argv, strategy, NULL);
    backend.gemm_dtype = held16 ? cfg.param_dtype : DTYPE_FP32;
    Trainer *t = trainer_create(&cfg, MPI_COMM_WORLD);
    float loss = 0.0f;
    for (int s = 0; s < cfg.steps; s++) loss += trainer_step(t, s);
    *P = trainer_num_params(t);
    *params = (float *)malloc((size_t)*P * sizeof(float));
    trainer_gather_params(t, *params);
    trainer_destroy(t);
    backend.gemm_dtype = DTYPE_FP32;
    return loss;
}

static void test_held16(int argc, char **argv, const char *strategy) {
    float *a = NULL, *b = NULL;
    long P = 0, P32 = 0, differ = 0;
    float l16 = held16_run(argc, argv, strategy, 1, &a, &P),
          l32 = held16_run(argc, argv, strategy, 0, &b, &P32);
    for (long i = 0; P == P32 && i < P; i++) differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    check(P == P32 && l16 == l32 && differ == 0, "16-bit storage == fp32 slots",
          "losses summed over the steps %.7g == %.7g; %ld of %ld parameters differ", l16, l32, differ, P);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    int provided = 0; /* fsdp.c's communication thread needs MPI_THREAD_MULTIPLE */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "equivalence") && argc >= 4) {
        if (rank == 0) printf("equivalence: %s (%s) on %d ranks == 1 rank\n", argv[2], argv[3], world);
        test_equivalence(argc - 4, argv + 4, argv[2], argv[3]);
    } else if (!strcmp(mode, "accum") && argc >= 4) {
        int no_sync = argc >= 5 && !strcmp(argv[4], "no-sync");
        if (rank == 0) printf("accumulation: %s, %s micro-batches%s, on %d ranks == 1 rank, one batch\n", argv[2], argv[3], no_sync ? " (--no-sync)" : "", world);
        test_accum(argc - 4 - no_sync, argv + 4 + no_sync, argv[2], argv[3], no_sync);
    } else if (!strcmp(mode, "precision") && argc >= 3) {
        if (rank == 0) printf("mixed precision: %s on %d ranks == 1 rank in the same formats\n", argv[2], world);
        test_precision(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "strategy-memory") && argc >= 3) {
        if (rank == 0) printf("memory: %s on %d ranks against the strategies it combines\n", argv[2], world);
        test_strategy_memory(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "precision-memory") && argc >= 3) {
        if (rank == 0) printf("mixed precision: %s on %d ranks, memory against fp32\n", argv[2], world);
        test_precision_memory(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "scaler") && argc >= 3) {
        if (rank == 0) printf("loss scaling: %s on %d ranks from a scale too large\n", argv[2], world);
        test_scaler(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "offload") && argc >= 3) {
        if (rank == 0) printf("cpu offload: %s on %d ranks against without it, and 1 rank\n", argv[2], world);
        test_offload(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "checkpointing") && argc >= 3) {
        if (rank == 0) printf("activation checkpointing: %s on %d ranks against without it\n", argv[2], world);
        test_checkpointing(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "prefetch") && argc >= 3) {
        if (rank == 0) printf("prefetch: %s on %d ranks, every option against none\n", argv[2], world);
        test_prefetch(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "memory")) {
        if (rank == 0) printf("memory: no_shard vs full_shard vs shard_grad_op on %d ranks\n", world);
        test_memory(argc - 2, argv + 2);
    } else if (!strcmp(mode, "init-from") && argc >= 3) {
        if (rank == 0) printf("init-from: %s on %d ranks\n", argv[2], world);
        test_init_from(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "clip") && argc >= 3) {
        if (rank == 0) printf("clip_grad_norm: %s on %d ranks against 1 rank\n", argv[2], world);
        test_clip(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "held16") && argc >= 3) {
        if (rank == 0) printf("a GPU's 16-bit storage: %s on %d ranks == fp32 slots\n", argv[2], world);
        test_held16(argc - 3, argv + 3, argv[2]);
    } else if (!strcmp(mode, "traffic") && argc >= 3) {
        if (rank == 0) printf("traffic: %s on %d ranks\n", argv[2], world);
        test_traffic(argc - 3, argv + 3, argv[2]);
    } else {
        if (rank == 0) fprintf(stderr, "usage: test_distributed equivalence STRATEGY IMPL | memory | traffic STRATEGY  [fsdp flags]\n");
        MPI_Finalize();
        return 2;
    }
    int any = 0;
    MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("%s\n", any ? "FAILED" : "all checks passed");
    MPI_Finalize();
    return any ? 1 : 0;
}
