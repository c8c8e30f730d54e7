/* sim/check.c — the collective checker (--check-collectives).
 *
 * A collective is a meeting: every rank must call the same one, in the same
 * order, with the same size. If one rank takes a different branch (skips a
 * unit, frees in another order, computes a different size), MPI and NCCL do
 * not notice: the ranks wait for each other forever, or worse, pair up the
 * wrong buffers. So before each collective the ranks first compare notes:
 * (sequence number, kind, unit, element count), all-gathered. If any rank's
 * note differs, every rank says so and stops, instead of hanging.
 * The extra all-gather is instrument traffic and is not counted.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sim.h"

enum { NOTE_SEQ, NOTE_KIND, NOTE_UNIT, NOTE_COUNT, NOTE_LEN };

static void describe(char *out, size_t len, const Sim *s, const long *note) {
    int unit = (int)note[NOTE_UNIT];
    snprintf(out, len, "#%ld %s %s, %ld elements", note[NOTE_SEQ],
             note[NOTE_KIND] >= 0 && note[NOTE_KIND] < COMM_NUM_KINDS
                 ? COMM_KIND_NAMES[note[NOTE_KIND]]
                 : "?",
             unit >= 0 && unit < s->n_units ? s->units[unit].name : "the loss", note[NOTE_COUNT]);
}

static int same(const long *a, const long *b) {
    for (int i = 0; i < NOTE_LEN; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

int check_collective(Sim *s, const Comm *c, long seq, CommKind kind, int unit, long count) {
    int N = c->world;
    long mine[NOTE_LEN] = {seq, (long)kind, (long)unit, count};
    long *all = (long *)malloc((size_t)N * NOTE_LEN * sizeof(long));
    MPI_Allgather(mine, NOTE_LEN, MPI_LONG, all, NOTE_LEN, MPI_LONG, c->comm);
    int mismatch = 0;
    for (int r = 1; r < N; r++) mismatch |= !same(all, all + (long)r * NOTE_LEN);
    if (!mismatch) {
        free(all);
        return 0;
    }
    /* Every rank has every note, so every rank can tell what went wrong. */
    char me[160], other[160];
    describe(me, sizeof(me), s, mine);
    int first_other = -1;
    for (int r = 0; r < N && first_other < 0; r++)
        if (!same(mine, all + (long)r * NOTE_LEN)) first_other = r;
    describe(other, sizeof(other), s, all + (long)first_other * NOTE_LEN);
    fprintf(stderr,
            "[rank %d] collective mismatch: rank %d is about to call %s, but rank %d calls %s\n",
            c->rank, c->rank, me, first_other, other);
    if (c->rank == 0) {
        fprintf(
            stderr,
            "collective mismatch in step %d: the ranks would not meet in the same collective.\n",
            s->step);
        for (int r = 0; r < N; r++) {
            describe(other, sizeof(other), s, all + (long)r * NOTE_LEN);
            fprintf(stderr, "  rank %d: %s%s\n", r, other,
                    same(all, all + (long)r * NOTE_LEN) ? "" : "   <- differs from rank 0");
        }
        fprintf(stderr,
                "HINT: every rank must call the same collectives in the same order with the same "
                "sizes;\n"
                "      look for a branch that depends on the rank around the unit named above.\n");
    }
    fflush(stderr);
    free(all);
    /* All ranks reached this point through the same all-gather, so all of
     * them return 1, and fsdp.c stops them together. */
    return 1;
}
