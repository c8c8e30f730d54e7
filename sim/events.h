/* ============================================================================
 * sim/events.h — the simulator's side of a collective (comm/stream.h):
 * its record, which --trace, the report and the step breakdown read, and
 * the --net clock, which prices it on a modelled network instead of the
 * machine's own. fsdp.c includes it in place; comm_record calls the first,
 * comm_submit and comm_wait the other two. Nothing here moves a byte.
 * ========================================================================== */
#ifndef FSDP_SIM_EVENTS_H
#define FSDP_SIM_EVENTS_H
#include "../core.h"
#include <limits.h>
#include "sim.h" /* net_collective_seconds */

/* Appends h's collective to the record, which only --trace needs (a long
 * run without it keeps the totals alone); h->event is its number. */
static void comm_event_add(Comm *c, CommHandle *h, long count) {
    if (!c->keep_events) return;
    if (c->n_events == c->cap_events) {
        if (c->cap_events > INT_MAX / 4)
            FATAL("record fewer --steps with --trace", "the trace has too many events");
        c->cap_events = c->cap_events ? 2 * c->cap_events : 256;
        c->events = (CommEvent *)host_realloc(c->events, (size_t)c->cap_events * sizeof(CommEvent),
                                              "grow the event record");
    }
    CommEvent *e = &c->events[c->n_events];
    memset(e, 0, sizeof(*e));
    e->kind = h->kind;
    e->unit = h->unit;
    e->count = count;
    e->elem_bytes = c->elem_bytes;
    e->group_world = h->group_world;
    e->t_start = e->t_end = h->t_start;
    e->sim_seconds = h->sim_seconds;
    e->step = h->step;
    e->shift_before = e->shift_after = c->sim_shift;
    h->event = c->n_events++;
}

/* The main thread waited for h from wb to we (this machine's clock). On the
 * --net schedule it waits from the same point of its own work until the
 * collective's simulated end, which may be sooner or later: the difference
 * moves every later moment of the main thread. Prefetching shows here: a
 * collective queued early has run by the time it is needed, and the wait
 * shrinks to nothing, however long the link takes. */
static void comm_sim_waited(Comm *c, const CommHandle *h, double wb, double we) {
    double sim_wb = wb + c->sim_shift, sim_we = fmax(sim_wb, h->sim_end);
    double before = c->sim_shift;
    c->sim_shift += (sim_we - sim_wb) - (we - wb);
    if (h->event < 0) return;
    CommEvent *e = &c->events[h->event];
    e->wait_begin = wb;
    e->wait_end = we;
    e->shift_before = before;
    e->shift_after = c->sim_shift;
}

/* The --net schedule: on a real link the stream starts a collective once it
 * is queued (at `now`) and the one before it is done, and it lasts what the
 * model says. Where the main thread has to wait for it is comm_sim_waited's
 * business. */
static void comm_sim_queued(Comm *c, CommHandle *h, double now) {
    double sim_start = fmax(now + c->sim_shift, c->sim_stream_end);
    c->sim_stream_end = sim_start + h->sim_seconds;
    h->sim_end = c->sim_stream_end;
    if (h->event >= 0) c->events[h->event].sim_start = sim_start;
}

#endif /* FSDP_SIM_EVENTS_H */
