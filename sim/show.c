/* sim/show.c — pictures of the collectives (--step) and the live terminal
 * view (--view). Rank 0 draws; every other rank only takes part in the small
 * gathers that bring its memory figures to rank 0 (instrument traffic, not
 * counted as training's).
 *
 * --step stops every rank before each collective and shows what is about to
 * move: which slice of the unit each rank holds before and after, and every
 * rank's memory. Then rank 0 reads a line: mpirun forwards what you type in
 * its terminal to rank 0's standard input, one line at a time (the ranks run
 * in the background of that terminal, so they cannot read single keys):
 *   Enter, n    next collective
 *   c           continue to the next training step
 *   q           quit (every rank exits 0); so does the end of the input
 * --step=auto draws the same pictures without waiting: for logs and tests.
 * --step=ring draws them too, and inside each ring collective a picture
 * after every one of its N-1 steps (show_ring_step).
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim.h" /* and, through fsdp.h, core.h: mib */

/* Is someone watching? Open MPI gives the ranks' standard output a
 * pseudo-terminal whether or not mpirun has one, so isatty() cannot tell.
 * But the ranks share mpirun's session: if mpirun was started from a
 * terminal, /dev/tty opens. That decides both whether --step may wait for
 * keys and whether --view redraws in place. */
int show_open_terminal(Sim *s, char *err, size_t errlen) {
    int fd = open("/dev/tty", O_RDONLY | O_NOCTTY);
    int terminal = fd >= 0;
    if (fd >= 0) close(fd);
    if (s->view) s->view_in_place = terminal;
    if (s->step_mode == STEP_INTERACTIVE && !terminal) {
        snprintf(err, errlen,
                 "--step waits for keys, but it is not running in a terminal. Run it from a "
                 "terminal, or use --step=auto to print the same pictures without waiting.");
        return 2;
    }
    return 0;
}

/* The first character of the next line typed ('n' for an empty line, 'q'
 * at the end of the input). */
static int read_key(void) {
    char line[64];
    if (!fgets(line, sizeof(line), stdin)) return 'q';
    for (char *p = line; *p; p++)
        if (*p != ' ' && *p != '\t') return *p == '\n' ? 'n' : *p;
    return 'n';
}

/* Every rank's ledger, now: rank 0 receives (N, categories) in bytes. */
static double *gather_memory(const Sim *s, const Comm *c) {
    double mine[MEM_NUM_CATEGORIES];
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) mine[k] = (double)s->ledger->current[k];
    double *all = c->rank == 0
                      ? (double *)malloc((size_t)c->world * MEM_NUM_CATEGORIES * sizeof(double))
                      : NULL;
    MPI_Gather(mine, MEM_NUM_CATEGORIES, MPI_DOUBLE, all, MEM_NUM_CATEGORIES, MPI_DOUBLE, 0,
               c->comm);
    return all;
}

static const char *unit_label(const Sim *s, int unit) {
    return unit >= 0 && unit < s->n_units ? s->units[unit].name : "the loss";
}

/* One row of the picture: N slices of the unit's flat buffer.
 *   3   rank 3's shard of the parameters
 *   +   this rank's own partial gradient (its part of the batch)
 *   S   the sum over all ranks, divided by N: the averaged gradient
 *   .   not held */
static void picture_row(char *out, int N, int rank, CommKind kind, int after) {
    int n = 0;
    int shown = N <= 16 ? N : 16;
    out[n++] = '[';
    for (int j = 0; j < shown; j++) {
        char ch = '.';
        if (kind == COMM_ALL_GATHER)
            ch = (after || j == rank) ? (char)(j < 10 ? '0' + j : 'a' + j - 10) : '.';
        else if (kind == COMM_REDUCE_SCATTER) ch = !after ? '+' : (j == rank ? 'S' : '.');
        else ch = after ? 'S' : '+';
        if (j) out[n++] = ' ';
        out[n++] = ch;
    }
    if (shown < N) n += sprintf(out + n, " ...");
    out[n++] = ']';
    out[n] = '\0';
}

static void draw_step_picture(const Sim *s, const Comm *c, CommKind kind, int unit, long count,
                              const double *mem) {
    int N = c->group_world; /* the ranks it runs over: all, or a hybrid group */
    long S = count / N;
    double moved = ring_bytes(kind, N, count, c->elem_bytes);
    printf("\n---- step %d, collective #%ld: %s of %s ----\n", s->step, s->seq - 1,
           COMM_KIND_NAMES[kind], unit_label(s, unit));
    printf("%ld elements = %d slices of %ld; each rank sends %.1f KiB and receives %.1f KiB\n",
           count, N, S, moved / 1024, moved / 1024);
    if (N != c->world)
        printf("(a hybrid strategy's group of %d of the %d ranks: the first %d are shown)\n", N,
               c->world, N);
    if (kind == COMM_ALL_GATHER)
        printf("each rank holds its own shard; afterwards every rank holds the full state\n");
    if (kind == COMM_REDUCE_SCATTER)
        printf("each rank holds a full gradient of its own batch (+); afterwards rank r holds "
               "slice r averaged over all ranks (S)\n");
    if (kind == COMM_ALL_REDUCE)
        printf("each rank holds a full gradient of its own batch (+); afterwards every rank holds "
               "all of it averaged (S)\n");
    printf("          %-*s     %-*s   memory now (MiB): total = params + grads + optimizer + full "
           "params + full grads + other\n",
           2 * (N <= 16 ? N : 16) + 5, "before", 2 * (N <= 16 ? N : 16) + 5, "after");
    for (int r = 0; r < N; r++) {
        char before[64], after[64];
        picture_row(before, N, r, kind, 0);
        picture_row(after, N, r, kind, 1);
        const double *m = mem + (long)r * MEM_NUM_CATEGORIES;
        double total = 0.0;
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) total += m[k];
        printf("  rank %-3d %-*s ->  %-*s  %7.3f = %.3f + %.3f + %.3f + %.3f + %.3f + %.3f\n", r,
               2 * (N <= 16 ? N : 16) + 5, before, 2 * (N <= 16 ? N : 16) + 5, after, mib(total),
               mib(m[MEM_PARAM_SHARD]), mib(m[MEM_GRAD_SHARD]), mib(m[MEM_OPTIM_STATE]),
               mib(m[MEM_FULL_PARAMS]), mib(m[MEM_FULL_GRADS]),
               mib(m[MEM_ACTIVATIONS] + m[MEM_COMM_BUFFERS]));
    }
    fflush(stdout);
}

/* ---- --view ------------------------------------------------------------------------ */

static const char BAR_CHARS[MEM_NUM_CATEGORIES] = {'P', 'G', 'O', 'F', 'f', 'a', 'c'};

static void draw_view(Sim *s, const Comm *c, CommKind kind, int unit, long count,
                      const double *mem) {
    int N = c->world;
    double scale = (double)s->cfg->vram, sent = 0.0;
    for (int r = 0; r < N; r++) {
        double total = 0.0;
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) total += mem[(long)r * MEM_NUM_CATEGORIES + k];
        if (!s->cfg->vram && total > scale) scale = total;
    }
    for (int k = 0; k < COMM_NUM_KINDS; k++) sent += c->bytes_sent[k];
    if (!s->view_in_place) { /* not a terminal: one plain line per step */
        if (s->step == s->view_last_step) return;
        s->view_last_step = s->step;
        printf("view: step %d | rank 0 sent %.2f MiB so far | memory MiB per rank:", s->step + 1,
               mib(sent));
        for (int r = 0; r < N; r++) {
            double total = 0.0;
            for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
                total += mem[(long)r * MEM_NUM_CATEGORIES + k];
            printf(" %.2f", mib(total));
        }
        printf("\n");
        fflush(stdout);
        return;
    }
    double now = MPI_Wtime();
    if (now - s->last_draw < 0.05 && s->step_mode == STEP_OFF)
        return; /* ~20 frames a second is plenty */
    s->last_draw = now;
    printf("\033[H\033[J"); /* home, clear: redraw in place */
    printf("fsdp.c live view: %s on %d ranks, step %d of %d\n\n", strategy_name(s->cfg->strategy),
           N, s->step + 1, s->cfg->steps);
    printf("computing:  %s %s\n", s->cur_unit >= 0 ? sim_phase_name(s->cur_phase) : "-",
           s->cur_unit >= 0 ? unit_label(s, s->cur_unit) : "");
    printf("in flight:  %s of %s, %ld elements\n", COMM_KIND_NAMES[kind], unit_label(s, unit),
           count);
    printf("traffic so far (rank 0 sent): all_gather %.2f MiB, reduce_scatter %.2f MiB, all_reduce "
           "%.2f MiB\n\n",
           mib(c->bytes_sent[COMM_ALL_GATHER]), mib(c->bytes_sent[COMM_REDUCE_SCATTER]),
           mib(c->bytes_sent[COMM_ALL_REDUCE]));
    printf("memory per rank, bar = %s %.1f MiB\n", s->cfg->vram ? "budget" : "largest rank,",
           mib(scale));
    const int width = 50;
    for (int r = 0; r < N; r++) {
        char bar[64];
        int n = 0;
        double total = 0.0;
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) {
            double v = mem[(long)r * MEM_NUM_CATEGORIES + k];
            total += v;
            int cells = scale > 0 ? (int)(v / scale * width + 0.5) : 0;
            for (int i = 0; i < cells && n < width; i++) bar[n++] = BAR_CHARS[k];
        }
        while (n < width) bar[n++] = ' ';
        bar[n] = '\0';
        printf("  rank %-3d |%s| %8.3f MiB\n", r, bar, mib(total));
    }
    printf("  P params  G grads  O optimizer  F full params  f full grads  a activations  c comm "
           "buffers\n");
    fflush(stdout);
}

int show_collective(Sim *s, const Comm *c, CommKind kind, int unit, long count) {
    int stop = s->step_mode != STEP_OFF && !s->skip_to_next_step;
    if (!stop && !s->view) return 0;
    double *mem = gather_memory(s, c);
    int key = 'n';
    if (c->rank == 0) {
        if (s->view) draw_view(s, c, kind, unit, count, mem);
        if (stop) draw_step_picture(s, c, kind, unit, count, mem);
        if (stop && s->step_mode == STEP_INTERACTIVE) {
            /* A whole line: Open MPI 5's mpirun passes a rank's output on a
             * line at a time, so a prompt without its newline stays hidden. */
            printf("Enter/n: next collective, c: continue to the next step, q: quit\n");
            fflush(stdout);
            key = read_key();
        }
    }
    free(mem);
    if (s->step_mode != STEP_INTERACTIVE || !stop) return 0;
    MPI_Bcast(&key, 1, MPI_INT, 0, c->comm); /* every rank follows rank 0's key */
    if (key == 'c') s->skip_to_next_step = 1;
    if (key == 'q' && c->rank == 0)
        printf("stopped at your request before %s of %s\n", COMM_KIND_NAMES[kind],
               unit_label(s, unit));
    fflush(stdout);
    return key == 'q';
}

/* ---- --step=ring: the ring itself, step by step ---------------------------------
 * After each of the N-1 steps of a ring all-gather or reduce-scatter, every
 * rank tells rank 0 which chunk it sent and which it received. Rank 0 keeps
 * what each rank holds of each chunk: a set of ranks (a bit each) whose
 * contribution it contains. Before step 0 rank r holds, of an all-gather,
 * its own chunk r ({r} there, nothing elsewhere), and of a reduce-scatter
 * its own part of every chunk ({r} everywhere). Receiving chunk j from a
 * neighbour adds what the neighbour held of j: a copy for the all-gather, a
 * sum for the reduce-scatter. An all-reduce shows both phases in turn. Up
 * to 16 ranks are drawn.
 * A ring may turn either way (fsdp.c's sends right; a student's may send
 * left), and the ranks report chunks, not peers. So the direction is read
 * from the collective's first step: most ranks received the chunk either
 * their left neighbour or their right one sent (a tie is the textbook
 * direction, from the left; on 2 ranks both are the same rank). From then
 * on a rank receives from that side, and a chunk it received that this
 * neighbour did not send is flagged (and not counted as held: what arrived
 * was another chunk). */
static int bits(unsigned long long x) {
    int n = 0;
    for (; x; x &= x - 1) n++;
    return n;
}

static void ring_start(Sim *s, int N, CommKind kind) {
    free(s->ring);
    s->ring = (unsigned long long *)calloc((size_t)N * N, sizeof(unsigned long long));
    if (!s->ring) return;
    for (int r = 0; r < N; r++)
        for (int j = 0; j < N; j++)
            if (kind == COMM_REDUCE_SCATTER || j == r) s->ring[r * N + j] = 1ULL << r;
}

/* One rank's row: per chunk, how many ranks' contributions it holds ('.'
 * none; for a reduce-scatter 'S' once it holds all N: the finished sum). */
static void ring_row(const Sim *s, int N, int r, CommKind kind, char *out) {
    int n = 0;
    out[n++] = '[';
    for (int j = 0; j < N; j++) {
        int k = bits(s->ring[r * N + j]);
        char ch = k == 0 ? '.' : (kind == COMM_REDUCE_SCATTER && k == N) ? 'S' : (char)('0' + k % 10);
        if (kind == COMM_ALL_GATHER && k) ch = (char)(j < 10 ? '0' + j : 'a' + j - 10);
        if (j) out[n++] = ' ';
        out[n++] = ch;
    }
    out[n++] = ']';
    out[n] = '\0';
}

void show_ring_step(Sim *s, const Comm *c, CommKind kind, int step, int sent, int received) {
    int N = c->world, mine[2] = {sent, received};
    int *all = c->rank == 0 ? (int *)malloc((size_t)N * 2 * sizeof(int)) : NULL;
    MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, 0, c->comm);
    if (c->rank != 0 || N > 16 || !all) {
        free(all);
        return;
    }
    if (step == 0 || !s->ring) ring_start(s, N, kind);
    if (!s->ring) return;
    unsigned long long *before = (unsigned long long *)malloc((size_t)N * N * sizeof(*before));
    if (!before) return;
    memcpy(before, s->ring, (size_t)N * N * sizeof(*before));
    if (step == 0) { /* which way this ring turns: most ranks say */
        int left = 0, right = 0;
        for (int r = 0; r < N; r++) {
            left += all[2 * ((r - 1 + N) % N)] == all[2 * r + 1];
            right += all[2 * ((r + 1) % N)] == all[2 * r + 1];
        }
        s->ring_from_right = right > left;
    }
    int turn = s->ring_from_right ? -1 : 1; /* rank r sends to r + turn */
    printf("  ring %s, step %d of %d:", kind == COMM_ALL_GATHER ? "all-gather" : "reduce-scatter",
           step + 1, N - 1);
    for (int r = 0; r < N; r++) printf("  %d -[%d]-> %d", r, all[2 * r], (r + turn + N) % N);
    printf("\n");
    for (int r = 0; r < N; r++) {
        int from = (r - turn + N) % N, other = (r + turn + N) % N, j = all[2 * r + 1];
        if (all[2 * from] != j) {
            printf("    rank %d received chunk %d, but rank %d, which sends to it, sent chunk %d", r,
                   j, from, all[2 * from]);
            if (other != from && all[2 * other] == j)
                printf(" (rank %d, on its other side, sent chunk %d: the ring turned around?)",
                       other, j);
            printf("\n");
            continue; /* what arrived is not chunk j: the picture does not count it */
        }
        s->ring[r * N + j] |= before[from * N + j];
    }
    for (int r = 0; r < N; r++) {
        char row[64];
        ring_row(s, N, r, kind, row);
        printf("    rank %d holds %s\n", r, row);
    }
    fflush(stdout);
    free(before);
    free(all);
}
