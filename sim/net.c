/* sim/net.c — what the same run would cost on a real interconnect.
 *
 * The simulator's collectives run over shared memory between processes on
 * one machine, so their wall-clock time says little about a cluster. This
 * alpha-beta model gives every collective a *simulated* duration instead:
 * a ring of N ranks takes N-1 steps, each paying the latency alpha and
 * moving 1/N of the buffer over one link, so
 *
 *     all-gather, reduce-scatter:  (N-1) * alpha + (N-1)/N * bytes / bandwidth
 *     all-reduce:                  twice that (reduce-scatter + all-gather)
 *
 * where bytes is the full buffer. (N-1)/N * bytes / time is exactly the
 * "bus bandwidth" nccl-tests reports, so a preset's bandwidth is what a
 * well-tuned NCCL ring reaches on that link, not the marketing peak.
 *
 * The presets' figures (one direction, per GPU):
 *   nvlink    NVLink 4 on H100 SXM: 900 GB/s bidirectional aggregate, so
 *             450 GB/s per direction; NCCL's per-step latency a few us.
 *   pcie      PCIe 4.0 x16: 32 GB/s per direction in theory, ~25 GB/s
 *             measured by copy benchmarks; latency ~5 us through the host.
 *   ib        InfiniBand NDR, 400 Gb/s = 50 GB/s per port, one port per GPU
 *             as in DGX systems; ~5 us per message across a switch.
 *   ethernet  25 Gb/s Ethernet = 3.125 GB/s with TCP; ~30 us per message.
 * These are round figures for teaching, in the range vendors publish and
 * nccl-tests users report; change them to your cluster's measurements.
 */
#include <string.h>

#include "sim.h"

static const NetModel NET_MODELS[] = {
    {"nvlink", 3e-6, 450e9, "NVLink 4 (H100 SXM), 450 GB/s per direction"},
    {"pcie", 5e-6, 25e9, "PCIe 4.0 x16, ~25 GB/s achieved"},
    {"ib", 5e-6, 50e9, "InfiniBand NDR 400 Gb/s, one port per GPU"},
    {"ethernet", 30e-6, 3.125e9, "25 Gb/s Ethernet (TCP)"},
    {"none", 0.0, 0.0, "no model: wall-clock time of the simulator only"},
};

const NetModel *net_model_find(const char *name) {
    for (size_t i = 0; i < sizeof(NET_MODELS) / sizeof(NET_MODELS[0]); i++)
        if (!strcmp(NET_MODELS[i].name, name)) return &NET_MODELS[i];
    return NULL;
}

const char *net_model_names(void) { return "nvlink, pcie, ib, ethernet or none"; }

/* --net NAME prices every link alike; --net A+B prices links inside a node
 * with A (e.g. nvlink) and between nodes with B (e.g. ib). Both NULL: none.
 * Returns 0, or -1 when a name is unknown. */
int net_models_of(const char *spec, const NetModel **intra, const NetModel **inter) {
    char a[32] = "none", b[32] = "";
    const char *plus = spec ? strchr(spec, '+') : NULL;
    if (spec) snprintf(a, sizeof(a), "%.*s", plus ? (int)(plus - spec) : 31, spec);
    if (plus) snprintf(b, sizeof(b), "%s", plus + 1);
    *intra = net_model_find(a);
    *inter = plus ? net_model_find(b) : *intra;
    return *intra && *inter ? 0 : -1;
}

double net_collective_seconds(const NetModel *net, CommKind kind, int world, double bytes) {
    if (!net || net->bandwidth <= 0.0 || world < 2) return 0.0;
    double one = (world - 1) * net->alpha + (double)(world - 1) / world * bytes / net->bandwidth;
    return kind == COMM_ALL_REDUCE ? 2.0 * one : one;
}
