/* dev/profile/kernel_times.cpp — every kernel, copy and memset a GPU ran, with its
 * start and end on the GPU's clock: what Nsight Systems' kernel summary
 * tells, from a library of a hundred lines, for machines that have the CUDA
 * toolkit but not Nsight. make gpu-report tables a bf16 step of bench-gpu's
 * two models with it, kernel by kernel, beside the roofline
 * (dev/profile/kernel_times.py).
 *
 * It is not linked into anything. The CUDA driver loads it into a program
 * that uses a GPU when CUDA_INJECTION64_PATH names it (CUPTI's injection:
 * the driver calls InitializeInjection once, as it initialises), and
 * KERNEL_TIMES names the file to write:
 *
 *   make dev/profile/kernel_times.so
 *   CUDA_INJECTION64_PATH=$PWD/dev/profile/kernel_times.so KERNEL_TIMES=k \
 *     mpirun -np 1 ./fsdp-gpu --model gpt2 --steps 3 --param-dtype bf16
 *   python3 dev/profile/kernel_times.py k.rank0.txt --steps 3
 *
 * Each process writes KERNEL_TIMES.rankR.txt at exit (R from the launcher:
 * Open MPI, Slurm or torchrun's variable; a process no launcher numbered,
 * KERNEL_TIMES.pidP.txt, so a helper of the launcher's that opens CUDA
 * cannot overwrite rank 0's file), one line an operation:
 *   kernel START END STREAM NAME          (NAME demangled, last: it has spaces)
 *   memcpy START END STREAM BYTES KIND    (KIND: HtoD, DtoH, DtoD, ...)
 *   memset START END STREAM BYTES
 * in nanoseconds of CUPTI's clock. What CUPTI records is the GPU's own
 * timing (the activity API; PyTorch's profiler reads it too), and kernels
 * on different streams still run at once: it serialises nothing, though
 * each launch costs the host a little more. */
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unistd.h>
#include <string>
#include <vector>

namespace {

enum What { KERNEL, MEMCPY, MEMSET };
struct Op {
    What what;
    uint64_t start, end, bytes;
    uint32_t stream;
    std::string name; /* a kernel's name, or a copy's direction */
};
/* CUPTI hands buffers back from a thread of its own, and may hand one
 * more back as CUDA tears down after the file is written: so the list is
 * made once and never destroyed, and `written` tells a late buffer to go. */
std::mutex ops_lock;
std::vector<Op> *ops = new std::vector<Op>;
long dropped, incomplete;
bool written;

void check(CUptiResult r, const char *call) {
    if (r == CUPTI_SUCCESS) return;
    const char *why = "";
    cuptiGetResultString(r, &why);
    fprintf(stderr, "kernel_times: %s: %s\n", call, why);
}

std::string demangled(const char *name) {
    if (!name) return "(no name)";
    int status = 0;
    char *d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : name;
    free(d);
    return s;
}

const char *copy_kind(uint8_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "other";
    }
}

/* Each record type has had several versions (Kernel4 ... Kernel10), and
 * each begins with the same fields at the same places, so the first
 * version that has them all reads any later one, as PyTorch's profiler
 * (Kineto) reads them. */
void keep(CUpti_Activity *r) {
    Op op{};
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        auto *k = (CUpti_ActivityKernel4 *)r;
        op = {KERNEL, k->start, k->end, 0, k->streamId, demangled(k->name)};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        auto *m = (CUpti_ActivityMemcpy *)r;
        op = {MEMCPY, m->start, m->end, m->bytes, m->streamId, copy_kind(m->copyKind)};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        auto *m = (CUpti_ActivityMemset *)r;
        op = {MEMSET, m->start, m->end, m->bytes, m->streamId, ""};
    } else {
        return;
    }
    std::lock_guard<std::mutex> hold(ops_lock);
    if (op.start == 0 || op.end < op.start) /* a forced flush's unfinished record */
        incomplete++;
    else if (!written)
        ops->push_back(std::move(op));
}

/* CUPTI asks for a buffer to fill, and hands it back full (or at a flush) */
void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8 << 20;
    *buffer = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0; /* as many as fit */
}
void CUPTIAPI buffer_completed(CUcontext, uint32_t stream, uint8_t *buffer, size_t, size_t valid) {
    CUpti_Activity *r = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) keep(r);
    size_t lost = 0;
    cuptiActivityGetNumDroppedRecords(nullptr, stream, &lost);
    {
        std::lock_guard<std::mutex> hold(ops_lock);
        dropped += (long)lost;
    }
    free(buffer);
}

/* "rank3", or "pid1234" for a process no launcher numbered */
std::string process_name() {
    for (const char *v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"})
        if (getenv(v)) return std::string("rank") + getenv(v);
    return "pid" + std::to_string(getpid());
}

constexpr CUpti_ActivityKind RECORDED[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                          CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

void write_at_exit() {
    for (CUpti_ActivityKind k : RECORDED) check(cuptiActivityDisable(k), "cuptiActivityDisable");
    check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    std::lock_guard<std::mutex> hold(ops_lock);
    written = true;
    std::string path = std::string(getenv("KERNEL_TIMES")) + "." + process_name() + ".txt";
    FILE *f = fopen(path.c_str(), "w");
    if (!f) {
        fprintf(stderr, "kernel_times: cannot write %s: %s\n", path.c_str(), strerror(errno));
        return;
    }
    fprintf(f,
            "# dev/profile/kernel_times.so (CUPTI): %zu operations, %ld records dropped, %ld "
            "unfinished left out; ns\n",
            ops->size(), dropped, incomplete);
    for (const Op &op : *ops) {
        if (op.what == MEMCPY)
            fprintf(f, "memcpy %llu %llu %u %llu %s\n", (unsigned long long)op.start,
                    (unsigned long long)op.end, op.stream, (unsigned long long)op.bytes,
                    op.name.c_str());
        else if (op.what == MEMSET)
            fprintf(f, "memset %llu %llu %u %llu\n", (unsigned long long)op.start,
                    (unsigned long long)op.end, op.stream, (unsigned long long)op.bytes);
        else
            fprintf(f, "kernel %llu %llu %u %s\n", (unsigned long long)op.start,
                    (unsigned long long)op.end, op.stream, op.name.c_str());
    }
    if (fclose(f) != 0) fprintf(stderr, "kernel_times: writing %s failed\n", path.c_str());
}

} // namespace

/* The driver calls this once, as CUDA initialises; nonzero is success */
extern "C" int InitializeInjection(void) {
    if (!getenv("KERNEL_TIMES")) {
        fprintf(stderr, "kernel_times: set KERNEL_TIMES=FILE (what to write) beside "
                        "CUDA_INJECTION64_PATH; recording nothing\n");
        return 1;
    }
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
          "cuptiActivityRegisterCallbacks");
    for (CUpti_ActivityKind k : RECORDED) check(cuptiActivityEnable(k), "cuptiActivityEnable");
    atexit(write_at_exit);
    return 1;
}
