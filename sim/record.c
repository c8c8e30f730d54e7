/* sim/record.c — the recorder behind --trace, and the trace writer.
 *
 * While training, each rank keeps what happened to it: compute spans (a
 * unit's forward or backward, the optimizer step), the moments a unit's
 * full state is freed, and its ledger after every allocation and free. The
 * collectives are already recorded by fsdp.c's comm_record. At the end every
 * rank turns its own record into Chrome Trace Event Format text, rank 0
 * gathers the pieces and writes one file that Perfetto (ui.perfetto.dev) or
 * chrome://tracing open: one process per rank, a "compute" and a
 * "communication" track in each, and a stacked memory counter.
 *
 * Two clocks. "real" is the wall clock of this machine. "sim" lays out the
 * schedule this run would have on the --net interconnect: compute keeps its
 * measured length, every collective lasts what the model says and starts
 * on the communication stream once it is queued and the one before it is
 * done, and the main thread waits only where it really needs a collective
 * that has not finished (fsdp.c, comm_sim_waited). So prefetching shows as
 * all-gathers hidden behind compute, from the real dependencies of the
 * run, not from an assumption of perfect overlap.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "../files.h"

/* ---- growing arrays ------------------------------------------------------------- */

/* Room for element n of a growing array: the (possibly moved) array, or
 * NULL when the host is out of memory. Then the recorder stops recording
 * (training goes on, the old array stays valid) and sim_trace_write says
 * so: nothing in sim/ ends the process. */
static void *grow(Sim *s, void *p, int *cap, int n, size_t elem) {
    if (n < *cap) return p;
    int c = *cap ? 2 * *cap : 256;
    void *q = realloc(p, (size_t)c * elem);
    if (!q) {
        s->record = 0;
        s->record_lost = 1;
        return NULL;
    }
    *cap = c;
    return q;
}

void sim_span_begin(Sim *s, int unit, SimPhase phase) {
    if (!s) return;
    s->cur_unit = unit; /* what --view shows as computing */
    s->cur_phase = phase;
    if (!s->record) return;
    void *grown = grow(s, s->spans, &s->cap_spans, s->n_spans, sizeof(SimSpan));
    if (!grown) return;
    s->spans = (SimSpan *)grown;
    SimSpan *sp = &s->spans[s->n_spans++];
    sp->unit = unit;
    sp->phase = phase;
    sp->step = s->step;
    sp->t_start = MPI_Wtime();
    sp->t_end = -1.0;
}

/* Spans nest (the root unit's forward encloses the others), so the span to
 * close is the most recent open one of this unit and phase. */
void sim_span_end(Sim *s, int unit, SimPhase phase) {
    if (!s || !s->record) return;
    for (int i = s->n_spans - 1; i >= 0; i--) {
        SimSpan *sp = &s->spans[i];
        if (sp->unit == unit && sp->phase == phase && sp->t_end < 0) {
            sp->t_end = MPI_Wtime();
            return;
        }
    }
}

void sim_on_free(Sim *s, int unit) {
    if (!s || !s->record) return;
    void *grown = grow(s, s->frees, &s->cap_frees, s->n_frees, sizeof(SimFree));
    if (!grown) return;
    s->frees = (SimFree *)grown;
    SimFree *f = &s->frees[s->n_frees++];
    f->t = MPI_Wtime();
    f->unit = unit;
    f->step = s->step;
}

void sim_on_memory(Sim *s, const Ledger *l) {
    if (!s || !s->record) return;
    void *grown = grow(s, s->mem, &s->cap_mem, s->n_mem, sizeof(SimMemSample));
    if (!grown) return;
    s->mem = (SimMemSample *)grown;
    SimMemSample *m = &s->mem[s->n_mem++];
    m->t = MPI_Wtime();
    memcpy(m->bytes, l->current, sizeof(m->bytes));
}

/* ---- text that grows ----------------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
    int failed; /* out of host memory: nothing more is added */
} Text;

static void text_printf(Text *t, const char *fmt, ...) {
    while (!t->failed) {
        va_list ap;
        va_start(ap, fmt);
        int need = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (t->p && (size_t)need < t->cap - t->n) {
            t->n += (size_t)need;
            return;
        }
        size_t cap = 2 * (t->cap + (size_t)need + 1024);
        char *p = (char *)realloc(t->p, cap);
        if (!p) { /* out of host memory: the text stops growing, the writer says so */
            t->failed = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

/* ---- the two clocks ------------------------------------------------------------ */

/* One wait of the main thread for a collective, on both clocks. */
typedef struct {
    double real_begin, real_end, sim_begin, sim_end;
} ClockWait;

typedef struct {
    ClockWait *waits; /* sorted by real_begin; the main thread waits one at a time */
    int n_waits;
    int sim;
    double t0;
} Clock;

static int cmp_wait(const void *a, const void *b) {
    double x = ((const ClockWait *)a)->real_begin, y = ((const ClockWait *)b)->real_begin;
    return (x > y) - (x < y);
}

static void clock_init(Clock *k, const Comm *c, int sim, double t0) {
    k->sim = sim;
    k->t0 = t0;
    k->n_waits = 0;
    k->waits = (ClockWait *)calloc((size_t)c->n_events + 1, sizeof(ClockWait));
    for (int i = 0; k->waits && i < c->n_events; i++) {
        const CommEvent *e = &c->events[i];
        if (e->wait_end <= 0.0) continue; /* never waited for */
        ClockWait w = {e->wait_begin, e->wait_end, e->wait_begin + e->shift_before,
                       e->wait_end + e->shift_after};
        k->waits[k->n_waits++] = w;
    }
    if (k->waits) qsort(k->waits, (size_t)k->n_waits, sizeof(ClockWait), cmp_wait);
}

static void clock_free(Clock *k) { free(k->waits); }

/* Microseconds since the common origin, on the chosen clock, of a moment
 * of the main thread. On the sim clock: between waits the main thread
 * computes exactly as it did here, shifted by what the waits before it
 * gained or lost on the --net schedule; inside a wait, time is stretched
 * (or squeezed) to the simulated wait. */
static double clock_us(const Clock *k, double t) {
    if (k->sim && k->waits) {
        int lo = 0, hi = k->n_waits; /* the first wait beginning after t */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (k->waits[mid].real_begin <= t) lo = mid + 1;
            else hi = mid;
        }
        if (lo > 0) {
            const ClockWait *w = &k->waits[lo - 1];
            double real = w->real_end - w->real_begin;
            if (t >= w->real_end) t = t - w->real_end + w->sim_end;
            else
                t = w->sim_begin +
                    (real > 0 ? (t - w->real_begin) / real : 0.0) * (w->sim_end - w->sim_begin);
        }
    }
    return (t - k->t0) * 1e6;
}

/* ---- one rank's events --------------------------------------------------------- */

static const char *unit_label(const Sim *s, int unit) {
    return unit >= 0 && unit < s->n_units ? s->units[unit].name : "the loss";
}

static void rank_events(Text *t, const Sim *s, const Comm *c, const Clock *k) {
    int r = c->rank;
    text_printf(
        t, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n",
        r, r);
    text_printf(
        t,
        "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"args\":{\"sort_index\":%d}},\n",
        r, r);
    text_printf(t,
                "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":"
                "\"compute\"}},\n",
                r);
    text_printf(t,
                "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":"
                "\"communication\"}}",
                r);
    for (int i = 0; i < s->n_spans; i++) {
        const SimSpan *sp = &s->spans[i];
        if (sp->t_end < 0) continue;
        double ts = clock_us(k, sp->t_start), te = clock_us(k, sp->t_end);
        text_printf(t,
                    ",\n{\"ph\":\"X\",\"cat\":\"compute\",\"name\":\"%s "
                    "%s\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"unit\":%d,\"phase\":\"%s\",\"step\":%d}}",
                    sim_phase_name(sp->phase), sp->unit >= 0 ? unit_label(s, sp->unit) : "step", r,
                    ts, te - ts, sp->unit, sim_phase_name(sp->phase), sp->step);
    }
    for (int i = 0; i < c->n_events; i++) {
        const CommEvent *e = &c->events[i];
        /* the stream's own timeline: when it ran here, or when it would run
         * on the --net schedule */
        double ts = k->sim ? (e->sim_start - k->t0) * 1e6 : clock_us(k, e->t_start);
        double te = k->sim ? ts + e->sim_seconds * 1e6 : clock_us(k, e->t_end);
        double bytes = ring_bytes(e->kind, e->group_world, e->count, e->elem_bytes);
        text_printf(t,
                    ",\n{\"ph\":\"X\",\"cat\":\"comm\",\"name\":\"%s "
                    "%s\",\"pid\":%d,\"tid\":2,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"kind\":\"%s\",\"unit\":%d,\"count\":%ld,\"bytes\":%.0f,\"sim_us\":"
                    "%.3f,\"step\":%d}}",
                    COMM_KIND_NAMES[e->kind], unit_label(s, e->unit), r, ts, te - ts,
                    COMM_KIND_NAMES[e->kind], e->unit, e->count, bytes, e->sim_seconds * 1e6,
                    e->step);
    }
    for (int i = 0; i < s->n_frees; i++) {
        const SimFree *f = &s->frees[i];
        text_printf(t,
                    ",\n{\"ph\":\"i\",\"s\":\"t\",\"name\":\"free full state "
                    "%s\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,\"args\":{\"unit\":%d,\"step\":%d}}",
                    unit_label(s, f->unit), r, clock_us(k, f->t), f->unit, f->step);
    }
    for (int i = 0; i < s->n_mem; i++) {
        const SimMemSample *m = &s->mem[i];
        text_printf(t, ",\n{\"ph\":\"C\",\"name\":\"memory\",\"pid\":%d,\"ts\":%.3f,\"args\":{", r,
                    clock_us(k, m->t));
        for (int cat = 0; cat < MEM_NUM_CATEGORIES; cat++)
            text_printf(t, "%s\"%s\":%zu", cat ? "," : "", MEM_CATEGORY_NAMES[cat], m->bytes[cat]);
        text_printf(t, "}}");
    }
}

/* ---- the whole file ------------------------------------------------------------ */

static void per_rank_array(Text *t, const double *v, int world) {
    text_printf(t, "[");
    for (int r = 0; r < world; r++) text_printf(t, "%s%.0f", r ? "," : "", v[r]);
    text_printf(t, "]");
}

/* otherData.fsdp: what the run was and its per-rank totals, so a reader
 * (sim/report.py) need not re-derive them from the events. */
static void run_header(Text *t, const Sim *s, const Comm *c, const SimRunSummary *run,
                       int clock_sim, const double *stats) {
    const Config *cfg = s->cfg;
    int N = c->world, n = MEM_NUM_CATEGORIES + 1 + COMM_NUM_KINDS;
    char loss[32] = "null"; /* a run with no step to take (a resume at its end) has no loss */
    if (run->steps > 0) snprintf(loss, sizeof(loss), "%.6f", run->final_loss);
    text_printf(t,
                "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"fsdp\":{\"version\":1,\"world\":%d,"
                "\"strategy\":\"%s\",\"model\":\"%s\","
                "\"steps\":%d,\"clock\":\"%s\",\"net\":\"%s\",\"vram\":%zu,\"seconds\":%.6f,"
                "\"final_loss\":%s,\n\"categories\":[",
                N, strategy_name(cfg->strategy), cfg->model_name ? cfg->model_name : "custom",
                run->steps, clock_sim ? "sim" : "real", cfg->net ? cfg->net : "none", cfg->vram,
                run->seconds, loss);
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
        text_printf(t, "%s\"%s\"", k ? "," : "", MEM_CATEGORY_NAMES[k]);
    text_printf(t, "],\n\"units\":[");
    for (int u = 0; u < s->n_units; u++)
        text_printf(t,
                    "%s{\"index\":%d,\"name\":\"%s\",\"numel\":%ld,\"padded\":%ld,\"shard\":%ld}",
                    u ? "," : "", u, s->units[u].name, s->units[u].numel, s->units[u].padded,
                    s->units[u].shard);
    double *col = (double *)malloc((size_t)N * sizeof(double));
    text_printf(t, "],\n\"peak\":{");
    for (int k = 0; k <= MEM_NUM_CATEGORIES; k++) {
        for (int r = 0; r < N; r++) col[r] = stats[(long)r * n + k];
        text_printf(t, "%s\"%s\":", k ? "," : "",
                    k < MEM_NUM_CATEGORIES ? MEM_CATEGORY_NAMES[k] : "total");
        per_rank_array(t, col, N);
    }
    text_printf(t, "},\n\"bytes_sent\":{");
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        for (int r = 0; r < N; r++) col[r] = stats[(long)r * n + MEM_NUM_CATEGORIES + 1 + k];
        text_printf(t, "%s\"%s\":", k ? "," : "", COMM_KIND_NAMES[k]);
        per_rank_array(t, col, N);
    }
    text_printf(t, "}}},\n\"traceEvents\":[\n");
    free(col);
}

int sim_trace_write(const Sim *s, const Comm *c, const SimRunSummary *run, const char *path,
                    int clock_sim, char *err, size_t errlen) {
    /* 1. every rank: its own events as text, and its totals */
    Text mine = {NULL, 0, 0, 0};
    Clock k;
    clock_init(&k, c, clock_sim, s->t0);
    rank_events(&mine, s, c, &k);
    clock_free(&k);
    int n = MEM_NUM_CATEGORIES + 1 + COMM_NUM_KINDS;
    double my_stats[MEM_NUM_CATEGORIES + 1 + COMM_NUM_KINDS];
    for (int cat = 0; cat < MEM_NUM_CATEGORIES; cat++) my_stats[cat] = (double)s->ledger->peak[cat];
    my_stats[MEM_NUM_CATEGORIES] = (double)s->ledger->peak_total;
    for (int kind = 0; kind < COMM_NUM_KINDS; kind++)
        my_stats[MEM_NUM_CATEGORIES + 1 + kind] = c->bytes_sent[kind];

    /* 2. rank 0 gathers them (instrument traffic, not counted as training's).
     * MPI counts and offsets are ints: a trace over 2 GiB in all is
     * refused, not corrupted. */
    double size = (double)mine.n, total_size = 0.0;
    int lost = s->record_lost || mine.failed, any_lost = 0;
    MPI_Allreduce(&size, &total_size, 1, MPI_DOUBLE, MPI_SUM, c->comm);
    MPI_Allreduce(&lost, &any_lost, 1, MPI_INT, MPI_MAX, c->comm);
    if (any_lost) {
        free(mine.p);
        snprintf(err, errlen,
                 "--trace %s: the host ran out of memory while recording the trace; "
                 "record fewer --steps",
                 path);
        return 1;
    }
    if (total_size > (double)INT_MAX) {
        free(mine.p);
        snprintf(err, errlen,
                 "--trace %s: the trace would exceed 2 GiB; record fewer --steps or ranks", path);
        return 2;
    }
    int N = c->world, len = (int)mine.n;
    int *lens = NULL, *offsets = NULL;
    char *all = NULL;
    double *stats = NULL;
    if (c->rank == 0) {
        lens = (int *)calloc((size_t)N, sizeof(int));
        offsets = (int *)calloc((size_t)N, sizeof(int));
        stats = (double *)calloc((size_t)N * n, sizeof(double));
    }
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, c->comm);
    MPI_Gather(my_stats, n, MPI_DOUBLE, stats, n, MPI_DOUBLE, 0, c->comm);
    long total = 0;
    if (c->rank == 0) {
        for (int r = 0; r < N; r++) {
            offsets[r] = (int)total;
            total += lens[r];
        }
        all = (char *)malloc((size_t)total + 1);
    }
    MPI_Gatherv(mine.p, len, MPI_CHAR, all, lens, offsets, MPI_CHAR, 0, c->comm);
    free(mine.p);

    /* 3. rank 0 writes header, the ranks' events, and the closing brackets */
    int rc = 0;
    if (c->rank == 0) {
        Text head = {NULL, 0, 0, 0};
        run_header(&head, s, c, run, clock_sim, stats);
        OutFile f; /* ../files.c: beside the path, then renamed into place */
        if (head.failed || !all) {
            snprintf(err, errlen, "--trace %s: the host ran out of memory while writing the trace",
                     path);
            rc = 1;
        }
        if (rc == 0) rc = out_open(&f, "--trace", path, err, errlen);
        if (rc == 0) {
            out_write(&f, head.p, head.n);
            for (int r = 0; r < N; r++) {
                if (r) out_write(&f, ",\n", 2);
                out_write(&f, all + offsets[r], (size_t)lens[r]);
            }
            out_write(&f, "\n]}\n", 4);
            rc = out_commit(&f, err, errlen);
        }
        free(head.p);
    }
    free(lens);
    free(offsets);
    free(all);
    free(stats);
    MPI_Bcast(&rc, 1, MPI_INT, 0, c->comm);
    return rc;
}
