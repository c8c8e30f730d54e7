/* sim/sim.c — switching the instruments on, and the hook every collective
 * passes through. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* A size in the unit that shows it (sim.h) */
const char *human_bytes(double bytes, char *buf, size_t len) {
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

/* FSDP_FAULT=skip:RANK:SEQ or alter:RANK:SEQ makes rank RANK skip (or call
 * with a different size) its collective number SEQ; killsave:RANK:STEP
 * kills rank RANK in the middle of writing the checkpoint of step STEP.
 * They exist only so the tests can prove that --check-collectives catches a
 * mismatch and that a crash during a save loses nothing; deliberately not
 * command-line options. */
static void fault_parse(Sim *s) {
    s->fault_rank = -1;
    s->fault_kill_rank = -1;
    const char *f = getenv("FSDP_FAULT");
    if (!f) return;
    char what[16];
    int rank = -1;
    long seq = -1;
    if (sscanf(f, "%15[a-z]:%d:%ld", what, &rank, &seq) == 3 && !strcmp(what, "killsave")) {
        s->fault_kill_rank = rank;
        s->fault_kill_step = seq;
    }
    if (sscanf(f, "%15[a-z]:%d:%ld", what, &rank, &seq) == 3 &&
        (!strcmp(what, "skip") || !strcmp(what, "alter"))) {
        s->fault_alter = !strcmp(what, "alter");
        s->fault_rank = rank;
        s->fault_seq = seq;
    }
}

int sim_init(Sim *s, const Config *cfg, const Ledger *l, const Unit *units, int n_units,
             MPI_Comm comm, char *err, size_t errlen) {
    memset(s, 0, sizeof(*s));
    s->cfg = cfg;
    s->ledger = l;
    s->units = units;
    s->n_units = n_units;
    s->record = cfg->trace_path != NULL;
    s->check = cfg->check_collectives;
    s->step_mode = (StepMode)cfg->step_mode;
    s->view = cfg->view;
    s->cur_unit = -1;
    s->view_last_step = -1;
    fault_parse(s);
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    int rc = 0;
    if (rank == 0 && (s->step_mode == STEP_INTERACTIVE || s->view))
        rc = show_open_terminal(s, err, errlen);
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm);
    MPI_Barrier(comm); /* a common time origin for the trace */
    s->t0 = MPI_Wtime();
    return rc;
}

void sim_release(Sim *s) {
    free(s->spans);
    free(s->frees);
    free(s->mem);
    free(s->ring);
    memset(s, 0, sizeof(*s));
}

void sim_fault_kill_during_save(const Sim *s, int rank, long step) {
    if (!s || rank != s->fault_kill_rank || step != s->fault_kill_step) return;
    fprintf(stderr, "[rank %d] FSDP_FAULT: killed in the middle of saving step %ld\n", rank, step);
    fflush(stderr);
    raise(SIGKILL);
}

void sim_on_step(Sim *s, int step) {
    if (!s) return;
    if (step != s->step) s->skip_to_next_step = 0;
    s->step = step;
}

SimVerdict sim_on_collective(Sim *s, const Comm *c, CommKind kind, int unit, long count) {
    if (!s) return SIM_GO;
    long seq = s->seq++;
    if (c->rank == s->fault_rank && seq == s->fault_seq) {
        fprintf(stderr, "[rank %d] FSDP_FAULT: %s collective #%ld (%s)\n", c->rank,
                s->fault_alter ? "altering" : "skipping", seq, COMM_KIND_NAMES[kind]);
        if (!s->fault_alter) return SIM_SKIP;
        count += c->world; /* the size this rank would wrongly call with */
    }
    if (s->check && check_collective(s, c, seq, kind, unit, count)) return SIM_MISMATCH;
    if ((s->step_mode != STEP_OFF || s->view) && show_collective(s, c, kind, unit, count))
        return SIM_QUIT;
    return SIM_GO;
}

int sim_owns_terminal(const Sim *s) { return s && s->view_in_place; }

void sim_on_ring_step(Sim *s, const Comm *c, CommKind kind, int step, int sent, int received) {
    if (s && s->step_mode == STEP_RING) show_ring_step(s, c, kind, step, sent, received);
}
