/* ============================================================================
 * kernels/backend.h — the backend seam: the GPU build (CUDA memory with a
 * caching pool, streams and events, kernels, choosing the GPU) and the CPU
 * build (the same names on host memory), side by side. fsdp.c includes it
 * at its top.
 *
 * Everything built on this header is the same on CPU ranks and on GPUs: the
 * lifecycle, the ledger, the trainer, checkpoints, the instruments (all of
 * fsdp.c). What a GPU does differently is here, small and side by side:
 *
 *   memory   dev_alloc / dev_free / dev_zero, and the copies between host
 *            and device. On the CPU "the device" is host memory and a copy
 *            is memcpy. On a GPU a caching pool sits in front of cudaMalloc,
 *            as PyTorch's allocator does.
 *   streams  every rank has a compute stream and a communication stream.
 *            On a GPU they are CUDA streams, and an event recorded on one
 *            and waited for on the other is the only ordering between them.
 *            On the CPU the compute stream is the main thread and the
 *            communication stream a thread (comm/stream.h).
 *   kernels  FOR_EACH(n, fn, args...) calls fn(i, args...) for every i < n:
 *            a loop on the CPU, one CUDA thread per i on a GPU. fn is marked
 *            FSDP_HD (host and device), so the CPU tests check the very
 *            arithmetic the GPU runs.
 *   matmul   a Linear layer's three matmuls: our register-blocked loops on
 *            the CPU, cuBLAS on a GPU (kernels/layers.h, side by side).
 *
 * Determinism: every kernel writes each output element from one thread and
 * sums in an order written in the source, never with atomics whose order
 * varies. So a GPU run repeats bitwise, as a CPU run does, and N GPUs can be
 * compared with one.
 *
 * Every `#ifdef __CUDACC__` of the seam is here (and in comm/device.h, for
 * the collectives): fsdp.c is the same text on CPU ranks and on GPUs.
 * ========================================================================== */
#ifndef FSDP_BACKEND_H
#define FSDP_BACKEND_H
#include "../core.h"
#include "../fsdp.h"
#include "../sim/sim.h" /* human_bytes */
#include <pthread.h>
#include <time.h>
#include <unistd.h> /* gethostname */

#ifdef _OPENMP
#include <omp.h> /* omp_get_num_procs: host_threads_choose */
#endif
#ifdef __CUDACC__
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <type_traits> /* std::is_same: kernels/flash.h picks bf16 or fp16 instructions */
#define FSDP_GPU 1
#else
#define FSDP_GPU 0
#ifdef __GLIBC__
#include <malloc.h> /* mallopt: host_keep_freed_memory */
#endif
#endif
/* On CPU ranks "the device" is the host's memory: no copy is ever needed */
#define DEVICE_IS_HOST (!FSDP_GPU)

#ifdef __CUDACC__
/* ---- the GPU build -------------------------------------------------------- */

static void cuda_check(cudaError_t err, const char *file, int line) {
    if (err == cudaSuccess) return;
    fsdp_fatal(file, line,
               "check nvidia-smi; run with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel",
               "CUDA: %s (%s)", cudaGetErrorString(err), cudaGetErrorName(err));
}
#define cudaCheck(call) cuda_check((call), __FILE__, __LINE__)

static void cublas_check(cublasStatus_t status, const char *file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fsdp_fatal(file, line, "a matmul failed: check the GPU with nvidia-smi",
               "cuBLAS: %s (status %d)", cublasGetStatusString(status), (int)status);
}
#define cublasCheck(call) cublas_check((call), __FILE__, __LINE__)

static void nccl_check(ncclResult_t result, const char *file, int line) {
    if (result == ncclSuccess) return;
    fsdp_fatal(file, line,
               "run with NCCL_DEBUG=WARN to see why; --collectives mpi avoids NCCL altogether",
               "NCCL: %s", ncclGetErrorString(result));
}
#define ncclCheck(call) nccl_check((call), __FILE__, __LINE__)

/* A block the pool holds from cudaMalloc, lent or cached (free, kept for
 * the next request of its size). As in PyTorch's caching allocator, a
 * block belongs to the stream that first writes it: most to the compute
 * stream, an unshard's output to the communication stream (comm/stream.h). */
typedef struct {
    void *ptr;
    size_t bytes;
    int lent;
    int comm;          /* the communication stream's */
    cudaEvent_t freed; /* comm: recorded on the compute stream at each free */
    long free_stamp;   /* comm: backend.comm_takes when it was freed */
} PoolBlock;

#endif

/* The one process-wide state: this process's device. One process drives
 * one device (several processes may share a GPU), and CUDA keeps the
 * current device, its streams and its memory per process, so this belongs
 * to the process, not to a trainer: the trainers one process builds (the
 * tests build several) share it. */
typedef struct {
    /* --plan (run_plan, in main.c) runs training steps with the backend
     * off: the ledger books every buffer, the collectives are counted, and
     * nothing is allocated, computed, copied or sent. Every function of the
     * seam returns at once while this is set; it is set once, before the
     * trainer is built. */
    int dry;
    int host_threads; /* threads for loops over host memory (HOST_FOR_EACH); 0 or 1: one */
    Dtype gemm_dtype; /* the matmuls' inputs: fp32, or 16-bit on a GPU's tensor cores */
    void *stage;      /* the batch's stage (batch_stage, below): pinned where it could be */
    size_t stage_bytes;
    int stage_pinned;
#ifdef __CUDACC__
    int device;
    cudaStream_t compute, comm;
    cublasHandle_t cublas;
    cublasLtHandle_t cublaslt; /* a Linear's product and bias in one (kernels/layers.h) */
    void *lt_workspace;        /* cuBLASLt's, as cuBLAS keeps its own: outside the ledger */
    size_t lt_workspace_bytes;
    long lt_products; /* how many: tests/test_kernels.cu checks that cuBLASLt took them */
    int gelu_fusion;  /* GPT-2's GELU inside cuBLASLt's products (kernels/transformer.h) */
    PoolBlock *blocks; /* every block the pool holds from the driver */
    int n_blocks, cap_blocks;
    long comm_takes; /* blocks lent to the communication stream so far */
    size_t reserved, peak_reserved; /* bytes held from cudaMalloc (PyTorch: "reserved") */
    size_t cap;                     /* --vram: the pool never holds more; 0: the GPU's size */
    cudaEvent_t clock_event;        /* recorded at start, when MPI_Wtime() was clock_host: */
    double clock_host;              /* a CUDA event's time on this machine's clock */
    struct NcclWatch *watch;        /* NCCL's watchdog thread (comm/device.h), or NULL */
    cudaEvent_t stage_read;         /* the last batch's copies have read the stage */
#endif
} Backend;
static Backend backend;

/* How many threads a loop over host memory may use (--cpu-offload's AdamW
 * on a big shard): OMP_NUM_THREADS if set, else the node's cores shared
 * among the node's ranks, so N ranks on N cores do not oversubscribe
 * them. Only in a build with OpenMP (make's -fopenmp). */
static void host_threads_choose(MPI_Comm comm) {
    MPI_Comm node;
    int ranks = 1;
    mpiCheck(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_Comm_size(node, &ranks);
    mpiCheck(MPI_Comm_free(&node));
    const char *env = getenv("OMP_NUM_THREADS");
#ifdef _OPENMP
    long cores = omp_get_num_procs(); /* the CPUs this process may use (its affinity) */
#else
    long cores = 1; /* no OpenMP: host loops run on one thread whatever is chosen */
#endif
    long asked = env ? atol(env) : 0, share = cores > ranks ? cores / ranks : 1;
    /* never more threads than CPUs: a memory-bound loop gains nothing from
     * them, and OMP_NUM_THREADS=100000 would have libgomp try to start them */
    backend.host_threads = (int)(asked > 0 ? (asked < cores ? asked : cores) : share);
}

#ifdef __CUDACC__

/* Sizes are rounded up to 512 bytes, as PyTorch's allocator rounds them,
 * so the same buffer every step finds its old block again, and the pool
 * holds at most 511 bytes more per block than the ledger books. */
static size_t pool_round(size_t bytes) {
    if (bytes == 0) bytes = 1; /* an empty unit still gets a block: cudaMalloc(0) gives none */
    return (bytes + 511) / 512 * 512;
}

/* Gives every cached block back to the driver (torch.cuda.empty_cache).
 * A cached block may still be read by queued work (it was freed once the
 * streams, not the host, had waited), so the host waits for the GPU first. */
static void pool_empty_cache(void) {
    int kept = 0, synced = 0;
    for (int i = 0; i < backend.n_blocks; i++) {
        PoolBlock *b = &backend.blocks[i];
        if (b->lent) {
            backend.blocks[kept++] = *b;
            continue;
        }
        if (!synced++) cudaCheck(cudaDeviceSynchronize());
        if (b->freed) cudaCheck(cudaEventDestroy(b->freed));
        cudaCheck(cudaFree(b->ptr));
        backend.reserved -= b->bytes;
    }
    backend.n_blocks = kept;
}

/* A cached block of exactly `bytes` of the stream's side, or NULL. A
 * communication block is "cold" once another has been lent to that stream
 * since it was freed; without `hot` only a cold one will do (pool_take). */
static PoolBlock *pool_cached(size_t bytes, int comm, int hot) {
    for (int i = backend.n_blocks - 1; i >= 0; i--) {
        PoolBlock *b = &backend.blocks[i];
        if (b->lent || b->bytes != bytes || b->comm != comm) continue;
        if (!comm || hot || b->free_stamp < backend.comm_takes) return b;
    }
    return NULL;
}

/* A new block from cudaMalloc, within the cap; NULL when there is no room */
static PoolBlock *pool_malloc(size_t bytes, int comm) {
    void *p = NULL;
    if (backend.cap && backend.reserved + bytes > backend.cap) return NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* an out-of-memory is reported by the ledger */
        return NULL;
    }
    backend.reserved += bytes;
    if (backend.reserved > backend.peak_reserved) backend.peak_reserved = backend.reserved;
    if (backend.n_blocks == backend.cap_blocks) {
        backend.cap_blocks = backend.cap_blocks ? 2 * backend.cap_blocks : 64;
        backend.blocks = (PoolBlock *)host_realloc(
            backend.blocks, (size_t)backend.cap_blocks * sizeof(PoolBlock), "grow the GPU pool");
    }
    PoolBlock *b = &backend.blocks[backend.n_blocks++];
    memset(b, 0, sizeof *b);
    b->ptr = p, b->bytes = bytes, b->comm = comm;
    return b;
}

/* A block of exactly `bytes` (rounded) for the compute stream, or (comm)
 * for the communication stream; NULL when neither the cap nor the GPU has
 * room. A compute block is reused at once: its next user is queued behind
 * its last on the same stream. A communication block's next all-gather
 * waits for its `freed` event (nccl_order_after_inputs, comm/device.h),
 * that is for the compute that read the unit it held. A block freed since
 * the last one was lent to that stream (hot) held the unit queued just
 * before: an all-gather into it would wait for all of that unit's compute
 * and overlap none of it. So, as PyTorch's allocator passes over blocks
 * whose events are pending and calls cudaMalloc, a hot block is taken only
 * when a new one does not fit: each size settles at two blocks, one being
 * gathered into while the other's unit computes. */
static void *pool_take(size_t bytes, int comm) {
    PoolBlock *b = pool_cached(bytes, comm, 0);
    if (!b) b = pool_malloc(bytes, comm);
    if (!b) b = pool_cached(bytes, comm, 1);
    if (!b) { /* as PyTorch: free the cache, try again */
        pool_empty_cache();
        b = pool_malloc(bytes, comm);
    }
    if (!b) return NULL;
    b->lent = 1;
    backend.comm_takes += comm;
    return b->ptr;
}

static PoolBlock *pool_block(const void *p) {
    for (int i = backend.n_blocks - 1; i >= 0; i--)
        if (backend.blocks[i].ptr == p) return &backend.blocks[i];
    return NULL;
}

/* Freed on the host, once every user is queued. A communication block's
 * users are the all-gather and, after it, the compute stream (which waits
 * for it); so an event recorded on the compute stream now passes when all
 * are done: PyTorch's record_stream, at the free. */
static void pool_give_back(void *p) {
    PoolBlock *b = pool_block(p);
    if (!b) FATAL("this is a bug in fsdp.c", "a device block freed that the pool never lent");
    b->lent = 0;
    if (!b->comm) return;
    if (!b->freed) cudaCheck(cudaEventCreateWithFlags(&b->freed, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(b->freed, backend.compute));
    b->free_stamp = backend.comm_takes;
}

/* Device memory, zeroed (padding must be 0), or NULL when the GPU is full.
 * A block freed while kernels that use it are still queued is safe to lend
 * again: whatever uses it next is queued after them on the compute stream,
 * or on the communication stream after an event recorded on it (comm/stream.h). */
static void *dev_alloc(size_t bytes) {
    void *p = pool_take(pool_round(bytes), 0);
    if (p) cudaCheck(cudaMemsetAsync(p, 0, bytes, backend.compute));
    return p;
}
/* ... not zeroed, for a buffer its first user writes whole (a packed
 * collective's buffer): the memset would be a wasted pass over it. */
static void *dev_alloc_for_overwrite(size_t bytes) { return pool_take(pool_round(bytes), 0); }
/* ... not zeroed either, from the communication stream's blocks: an
 * unshard's full state, which its all-gather writes whole */
static void *dev_alloc_for_gather(size_t bytes) { return pool_take(pool_round(bytes), 1); }
static void dev_free(void *p, size_t bytes) {
    (void)bytes;
    pool_give_back(p);
}
/* Whether p is a communication block (dev_alloc_for_gather's), and the
 * event after its last free (NULL: never freed yet) */
static int dev_gather_block(const void *p, cudaEvent_t *freed) {
    const PoolBlock *b = pool_block(p);
    *freed = b ? b->freed : NULL;
    return b && b->comm;
}
/* After a run (--compare runs two): the next run's figures start afresh. */
static void dev_empty_cache(void) {
    pool_empty_cache();
    backend.peak_reserved = backend.reserved;
}
/* Host memory the GPU copies to and from by DMA (--cpu-offload's shards,
 * host staging): pinned (page-locked) with cudaHostAlloc, so a copy runs
 * at the link's speed instead of through the driver's own bounce buffer.
 * NULL if the system cannot lock that much; the caller falls back. */
static void *host_pinned_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it, and the caller uses malloc */
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}
static void host_pinned_free(void *p) { cudaCheck(cudaFreeHost(p)); }
static void dev_zero(void *p, size_t bytes) {
    if (!backend.dry) cudaCheck(cudaMemsetAsync(p, 0, bytes, backend.compute));
}
/* Copies the host waits for: what the compute stream has queued runs first. */
static void dev_to_host(void *host, const void *dev, size_t bytes) {
    if (backend.dry) return;
    cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, backend.compute));
    cudaCheck(cudaStreamSynchronize(backend.compute));
}
static void dev_from_host(void *dev, const void *host, size_t bytes) {
    if (backend.dry) return;
    cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, backend.compute));
    cudaCheck(cudaStreamSynchronize(backend.compute));
}
/* ... queued on the compute stream, the host not waiting. With pinned
 * memory the GPU reads or writes `host` when the copy's turn comes, so
 * the caller leaves it alone until it has waited for the stream
 * (dev_synchronize, or work queued after the copy); with pageable memory
 * CUDA's staging makes both copies finish their host side before they
 * return. */
static void dev_from_host_queued(void *dev, const void *host, size_t bytes) {
    if (!backend.dry)
        cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, backend.compute));
}
static void dev_to_host_queued(void *host, const void *dev, size_t bytes) {
    if (!backend.dry)
        cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, backend.compute));
}
/* device to device, in the compute stream's order: the host does not wait */
static void dev_copy(void *dst, const void *src, size_t bytes) {
    if (!backend.dry)
        cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, backend.compute));
}
/* The host waits until the GPU has done what it was given: before a picture
 * is drawn or a time is read, never in the hot path otherwise. */
static void dev_synchronize(void) {
    if (!backend.dry) cudaCheck(cudaStreamSynchronize(backend.compute));
}

/* CUDA's current device is per thread: the communication thread picks it */
static void backend_thread_begin(void) { cudaCheck(cudaSetDevice(backend.device)); }

/* An event recorded on a stream: the other stream (or the host) can wait
 * for it; with `timed`, it also says when the stream reached it. */
static cudaEvent_t event_record(cudaStream_t stream, int timed) {
    cudaEvent_t e;
    cudaCheck(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(e, stream));
    return e;
}

/* An event's moment on this machine's clock (MPI_Wtime), from the
 * reference pair backend_init took. */
static double event_seconds(cudaEvent_t e) {
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, backend.clock_event, e));
    return backend.clock_host + ms / 1e3;
}

/* The out-of-memory report's first words, and its line about the GPU: the
 * ledger's "allocated" beside the driver's view and the pool's "reserved". */
#define OOM_WORDS "CUDA out of memory"
static int backend_memory_line(char *buf, size_t len, int rank) {
    size_t free_bytes = 0, total = 0;
    char a[32], b[32], c[32];
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
    int n = snprintf(buf, len,
                     "[rank %d] GPU %d: %s free of %s (cudaMemGetInfo); this rank's pool has "
                     "reserved %s\n",
                     rank, backend.device, human_bytes((double)free_bytes, a, sizeof(a)),
                     human_bytes((double)total, b, sizeof(b)),
                     human_bytes((double)backend.reserved, c, sizeof(c)));
    if (n < 0) return 0;
    return n < (int)len ? n : (int)len - 1; /* what snprintf wrote, cut or not */
}

/* The one kernel every element-wise op is launched as: thread i calls
 * fn(i, args...), the same function the CPU's loop calls. */
template <auto fn, typename... Args> __global__ void for_each_kernel(long n, Args... args) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) fn(i, args...);
}
static unsigned blocks_for(long n) { return (unsigned)((n + 255) / 256); }
#define FOR_EACH(n, fn, ...)                                                                       \
    do {                                                                                           \
        if ((n) <= 0 || backend.dry) break;                                                        \
        for_each_kernel<fn><<<blocks_for(n), 256, 0, backend.compute>>>((long)(n), __VA_ARGS__);   \
        cudaCheck(cudaGetLastError()); /* a launch that failed says so here, not never */          \
    } while (0)

/* ---- choosing the GPU ------------------------------------------------------
 * Each rank drives the GPU of its local rank, its number among the ranks on
 * its node, as the launcher says (Open MPI, Slurm, then torchrun's
 * variable), or else as MPI works it out, modulo the GPUs it can see (a
 * launcher that gives each rank its own GPU shows it one). NCCL needs a GPU
 * per rank; ring and mpi let ranks share one, as a lab with one GPU does. */
static int launcher_local_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return -1; /* no launcher said */
}
static int local_rank(MPI_Comm node) {
    int r = launcher_local_rank();
    if (r < 0) mpiCheck(MPI_Comm_rank(node, &r));
    return r;
}

/* Before MPI_Init. A CUDA-aware MPI (Open MPI over UCX, HPC-X, MVAPICH)
 * opens a CUDA context on the current device as it starts: GPU 0, unless
 * the device was chosen first, and then every rank of a node holds memory
 * on GPU 0. The launcher's local rank is known before MPI is, so the
 * device is chosen now; backend_init checks the choice once MPI runs. */
static void backend_choose_device_early(void) {
    int local = launcher_local_rank(), count = 0;
    if (local < 0 || cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        (void)cudaGetLastError(); /* not sticky; backend_init asks again and says why */
        return;
    }
    if (cudaSetDevice(local % count) != cudaSuccess) (void)cudaGetLastError(); /* ditto */
}

/* Why no GPU can be used, in words: cudaGetDeviceCount's error, and for
 * the usual one, a driver older than the CUDA this binary was built with,
 * both versions (CUDA 13 needs a driver of the 580 series or later). */
static void gpu_count_failure(cudaError_t err, int count, const char *host, char *why, size_t len) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (err == cudaErrorInsufficientDriver && driver > 0)
        snprintf(why, len,
                 "the NVIDIA driver on %s is too old for this binary: it runs CUDA %d.%d at "
                 "most, and ./fsdp-gpu was built with CUDA %d.%d.\nHINT: update the driver, or "
                 "build with the CUDA toolkit the driver supports (nvidia-smi shows its \"CUDA "
                 "Version\").",
                 host, driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    else
        snprintf(why, len,
                 "no CUDA GPU is visible on %s (cudaGetDeviceCount: %s).\n"
                 "HINT: check nvidia-smi and CUDA_VISIBLE_DEVICES; without a GPU, run the "
                 "simulator build ./fsdp with the same flags.",
                 host, err != cudaSuccess ? cudaGetErrorString(err) : (count ? "?" : "0 devices"));
}

/* Two ranks of a node on one GPU (the same PCI bus id): NCCL would stop
 * with "Duplicate GPU detected", and a GPU in exclusive-process compute
 * mode lets only one process at a time create a context on it. Say so
 * first, and what to do. */
static void gpu_check_shared(const Config *cfg, MPI_Comm node, const char *bus, int mode,
                             char *why, size_t len) {
    int n = 1, me = 0, shared = 0;
    MPI_Comm_size(node, &n);
    MPI_Comm_rank(node, &me);
    char *all = (char *)host_calloc((size_t)n, 32, "compare GPUs");
    mpiCheck(MPI_Allgather(bus, 32, MPI_CHAR, all, 32, MPI_CHAR, node));
    for (int r = 0; r < n; r++) shared |= r != me && bus[0] && !strcmp(all + 32L * r, bus);
    free(all);
    if (why[0] || !shared) return;
    if (mode == cudaComputeModeExclusiveProcess)
        snprintf(why, len,
                 "GPU %s is in exclusive-process compute mode, so only one process may use it, "
                 "and another rank of this node would share it.\nHINT: start at most as many "
                 "ranks per node as GPUs, or (as root) nvidia-smi -c DEFAULT lets them share.",
                 bus);
    else if (cfg->collectives == COLLECTIVES_NCCL)
        snprintf(why, len,
                 "this rank and another on the same node would both use GPU %s, and NCCL "
                 "needs a GPU per rank (it stops with \"Duplicate GPU detected\").\n"
                 "HINT: add --collectives mpi to let ranks share a GPU (buffers are staged "
                 "through host memory), or start at most as many ranks per node as GPUs.",
                 bus);
}

/* Picks this rank's GPU, makes its streams and cuBLAS. Every rank agrees
 * on the verdict: on failure the lowest failing rank says why, and every
 * rank returns 1 (none is left waiting). */
static int backend_init(const Config *cfg, MPI_Comm comm) {
    int rank = 0, world = 1, count = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);
    MPI_Comm node;
    mpiCheck(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int local = local_rank(node);
    cudaError_t err = cudaGetDeviceCount(&count);
    char why[1024] = "", bus[32] = "", host[256] = "?";
    gethostname(host, sizeof(host));
    int mode = cudaComputeModeDefault;
    if (err != cudaSuccess || count == 0) gpu_count_failure(err, count, host, why, sizeof(why));
    else if (cudaDeviceGetPCIBusId(bus, sizeof(bus), local % count) != cudaSuccess)
        bus[0] = '\0';
    if (!why[0]) cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, local % count);
    if (mode == cudaComputeModeProhibited)
        snprintf(why, sizeof(why),
                 "GPU %s is in prohibited compute mode: no process may use it.\nHINT: choose "
                 "another with CUDA_VISIBLE_DEVICES, or (as root) nvidia-smi -c DEFAULT.",
                 bus);
    gpu_check_shared(cfg, node, bus, mode, why, sizeof(why));
    mpiCheck(MPI_Comm_free(&node));
    int mine = why[0] ? rank : world, first = world;
    mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first != world) {
        if (first == rank) fprintf(stderr, "[rank %d] error: %s\n", rank, why);
        return 1;
    }
    backend.device = local % count;
    cudaCheck(cudaSetDevice(backend.device));
    host_threads_choose(comm);
    cudaCheck(cudaStreamCreateWithFlags(&backend.compute, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&backend.comm, cudaStreamNonBlocking));
    cublasCheck(cublasCreate(&backend.cublas));
    cublasCheck(cublasSetStream(backend.cublas, backend.compute));
    /* fp32 by default, so a GPU run can be held against a CPU run; TF32
     * (a 10-bit mantissa on tensor cores) only when asked */
    cublasCheck(cublasSetMathMode(backend.cublas, cfg->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                         : CUBLAS_DEFAULT_MATH));
    backend.gemm_dtype = cfg->param_dtype; /* 16-bit parameters: tensor cores (kernels/layers.h) */
    int major = 0; /* the compute capability: Hopper and later fuse GELU unless told */
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, backend.device));
    backend.gelu_fusion = cfg->gelu_fusion >= 0 ? cfg->gelu_fusion : major >= 9;
    cublasCheck(cublasLtCreate(&backend.cublaslt));
    if (backend.gemm_dtype != DTYPE_FP32) { /* 32 MiB, what llm.c gives Hopper's GEMMs */
        backend.lt_workspace_bytes = (size_t)32 << 20;
        cudaCheck(cudaMalloc(&backend.lt_workspace, backend.lt_workspace_bytes));
    }
    /* --vram is the ledger's budget, as in the simulator (exact bytes: the
     * same verdict on both builds), and caps the pool too, with room for its
     * rounding (512 bytes a block) and the kernels' scratch. With mixed
     * precision the ledger books 16-bit values at 2 bytes, but the shards,
     * the gradients and no_shard's replicas sit in float slots (core.h),
     * 4, and NCCL's packed 16-bit copies of the buffers in flight
     * (nccl_pack) take 2 more: its cap triples, a bound from above (a
     * sharded unit's gathered full state and the activations are held in
     * 16 bits, as booked). */
    int halves = cfg->param_dtype != DTYPE_FP32 || cfg->reduce_dtype != DTYPE_FP32;
    backend.cap = 0; /* no --vram: the GPU's own size limits the pool */
    if (cfg->vram) /* + the kernels' scratch, outside the ledger as cuBLAS's workspace is
                    * (column sums, 16-bit matmul packs, attention's scores) */
        backend.cap = (halves ? 3 : 1) * cfg->vram + ((size_t)64 << 20) + cfg->vram / 4;
    backend.clock_event = event_record(backend.compute, 1);
    cudaCheck(cudaEventSynchronize(backend.clock_event));
    backend.clock_host = now_seconds();
    return 0;
}

/* After a run: what the ledger booked ("allocated", PyTorch's
 * memory_allocated) beside what the pool holds from the driver ("reserved",
 * memory_reserved) and what the driver says of the whole GPU. */
static void backend_print_memory(size_t allocated_peak) {
    size_t free_bytes = 0, total = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total));
    char a[32], r[32], u[32], t[32];
    printf("GPU memory on rank 0: allocated (the ledger) peak %s; reserved (the pool) peak %s; "
           "the driver: %s in use of %s (cudaMemGetInfo, every process on this GPU)\n",
           human_bytes((double)allocated_peak, a, sizeof(a)),
           human_bytes((double)backend.peak_reserved, r, sizeof(r)),
           human_bytes((double)(total - free_bytes), u, sizeof(u)),
           human_bytes((double)total, t, sizeof(t)));
}

static void batch_stage_release(void);
static void backend_release(void) {
    batch_stage_release();
    pool_empty_cache();
    free(backend.blocks);
    cudaCheck(cudaEventDestroy(backend.clock_event));
    cublasCheck(cublasDestroy(backend.cublas));
    if (backend.lt_workspace) cudaCheck(cudaFree(backend.lt_workspace));
    cublasCheck(cublasLtDestroy(backend.cublaslt));
    cudaCheck(cudaStreamDestroy(backend.compute));
    cudaCheck(cudaStreamDestroy(backend.comm));
}

/* One line under the run's header: which GPU, and how it computes. */
static void backend_describe(const Config *cfg) {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, backend.device));
    int nccl = 0;
    ncclGetVersion(&nccl);
    char total[32];
    const char *gemms = cfg->tf32 ? "TF32 (--tf32)"
                        : backend.gemm_dtype == DTYPE_BF16 ? "bf16 on the tensor cores"
                        : backend.gemm_dtype == DTYPE_FP16 ? "fp16 on the tensor cores"
                                                           : "fp32";
    const char *gelu = cfg->arch != ARCH_GPT2 || backend.gemm_dtype == DTYPE_FP32 ? ""
                       : backend.gelu_fusion ? " | GELU in cuBLASLt's epilogues"
                                             : " | GELU in its own kernels";
    printf("GPU: rank 0 on device %d, %s (%s, %d SMs) | cuBLAS %s%s | NCCL %d.%d.%d\n",
           backend.device, prop.name,
           human_bytes((double)prop.totalGlobalMem, total, sizeof(total)), prop.multiProcessorCount,
           gemms, gelu, nccl / 10000, (nccl % 10000) / 100, nccl % 100);
}

#else
/* ---- the CPU build: the same names, on host memory ------------------------ */

/* Never NULL: a simulated GPU that runs out of memory is the ledger's
 * business (--vram); the host running out is the end of the run. */
#define SIM_BUFFER_WHAT                                                                        \
    "allocate a simulated GPU's buffer; try a smaller --model or --batch (--plan books a "       \
    "run without allocating)"
static void *dev_alloc(size_t bytes) { return host_calloc(1, bytes ? bytes : 1, SIM_BUFFER_WHAT); }
/* ... not zeroed on a GPU, so here filled with NaN (all bits set): a byte
 * its user forgets to write turns the loss to NaN in the tests, where on
 * a GPU it would be whatever the block held before. */
static void *dev_alloc_for_overwrite(size_t bytes) {
    void *p = host_malloc(bytes ? bytes : 1, SIM_BUFFER_WHAT); /* not calloc: one pass, not two */
    memset(p, 0xff, bytes);
    return p;
}
static void *dev_alloc_for_gather(size_t bytes) { return dev_alloc_for_overwrite(bytes); }
static void dev_free(void *p, size_t bytes) {
    (void)bytes;
    free(p);
}
static void dev_zero(void *p, size_t bytes) {
    if (!backend.dry) memset(p, 0, bytes);
}
static void dev_empty_cache(void) {} /* free() gave everything back already */
/* The CPU's host memory is all the memory there is: nothing to pin. */
static void *host_pinned_alloc(size_t bytes) { return calloc(bytes ? bytes : 1, 1); }
static void host_pinned_free(void *p) { free(p); }
static void dev_to_host(void *host, const void *dev, size_t bytes) {
    if (!backend.dry) memcpy(host, dev, bytes);
}
static void dev_from_host(void *dev, const void *host, size_t bytes) {
    if (!backend.dry) memcpy(dev, host, bytes);
}
/* the host is the compute stream: the queued copies are done at once */
static void dev_from_host_queued(void *dev, const void *host, size_t bytes) {
    dev_from_host(dev, host, bytes);
}
static void dev_to_host_queued(void *host, const void *dev, size_t bytes) {
    dev_to_host(host, dev, bytes);
}
static void dev_copy(void *dst, const void *src, size_t bytes) {
    if (!backend.dry) memcpy(dst, src, bytes);
}
static void dev_synchronize(void) {} /* the main thread is the compute stream */
static void backend_thread_begin(void) {} /* the thread's device is the host */

/* A simulated GPU's buffers come and go with every unit, as FSDP's do: a
 * calloc and a free each. glibc hands a large block back to the kernel when
 * it is freed (munmap, or trimming the top of its heap) and takes it again
 * at the next calloc, a page fault and the kernel's zeroing for every 4 KiB:
 * a third of the time of the default run on 4 ranks. Kept in the heap (up
 * to 32 MiB a block, glibc's ceiling), freed blocks are reused, as a GPU's
 * caching allocator reuses its own. */
static void host_keep_freed_memory(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

/* The CPU needs no device: each rank is a process, its memory the host's. */
static int backend_init(const Config *cfg, MPI_Comm comm) {
    (void)cfg;
    host_keep_freed_memory();
    host_threads_choose(comm);
    return 0;
}
static void batch_stage_release(void);
static void backend_release(void) { batch_stage_release(); }
static void backend_choose_device_early(void) {} /* there is no device to choose */
static void backend_describe(const Config *cfg) { (void)cfg; }
static void backend_print_memory(size_t allocated_peak) { (void)allocated_peak; }

#define OOM_WORDS "simulated CUDA out of memory"
static int backend_memory_line(char *buf, size_t len, int rank) {
    (void)buf, (void)len, (void)rank;
    return 0; /* no driver to ask */
}

#define FOR_EACH(n, fn, ...)                                                                       \
    do {                                                                                           \
        if (!backend.dry)                                                                          \
            for (long i_ = 0; i_ < (long)(n); i_++) fn(i_, __VA_ARGS__);                           \
    } while (0)
#endif

/* The same loop over buffers in the host's memory, in both builds:
 * --cpu-offload keeps the shards and the optimizer there, and AdamW runs
 * on the CPU; every run draws its initial parameters there (470M took one
 * thread 3 s at -O2, as nvcc's host pass compiles). A long one is split
 * over backend.host_threads threads (OpenMP), as DeepSpeed's CPU Adam is:
 * every element is computed alone, so the result is the same, bit for
 * bit, on any number of threads.
 * STATE_FOR_EACH picks by where the state lives. */
#ifdef _OPENMP
#define HOST_PARALLEL_FOR                                                                          \
    _Pragma("omp parallel for schedule(static) if (n_ >= 65536 && backend.host_threads > 1) \
             num_threads(backend.host_threads > 1 ? backend.host_threads : 1)")
#else
#define HOST_PARALLEL_FOR
#endif
#define HOST_FOR_EACH(n, fn, ...)                                                                  \
    do {                                                                                           \
        long n_ = (long)(n);                                                                       \
        if (!backend.dry) {                                                                        \
            HOST_PARALLEL_FOR                                                                      \
            for (long i_ = 0; i_ < n_; i_++) fn(i_, __VA_ARGS__);                                  \
        }                                                                                          \
    } while (0)
#define STATE_FOR_EACH(on_host, n, fn, ...)                                                        \
    do {                                                                                           \
        if (on_host) HOST_FOR_EACH(n, fn, __VA_ARGS__);                                            \
        else FOR_EACH(n, fn, __VA_ARGS__);                                                         \
    } while (0)

/* ---- the batch's stage ----------------------------------------------------------
 * Each forward's batch (its tokens, targets and rows grouped by token) is
 * drawn on the host and copied to the device. Copied from pageable memory,
 * each copy would first wait for the compute stream: the GPU's queue would
 * run dry at every one. So the batch is drawn into the stage, pinned
 * memory that the copies, queued (dev_from_host_queued), read when their
 * turn comes; the host waits only before it draws the next batch into the
 * same memory, for the copies that read the last one (stage_read), which
 * are done long before: the host reads the loss in between. On the CPU
 * the stage is plain memory and the copies are done at once.
 *   batch_stage(bytes)  the stage, at least `bytes`, free to be written;
 *   batch_staged()      its copies are queued: the next batch_stage waits
 *                       for them. */
static void batch_stage_wait(void) {
#ifdef __CUDACC__
    if (backend.stage_read) {
        cudaCheck(cudaEventSynchronize(backend.stage_read));
        cudaCheck(cudaEventDestroy(backend.stage_read));
        backend.stage_read = NULL;
    }
#endif
}
static void batch_stage_release(void) {
    batch_stage_wait();
    if (backend.stage_pinned) host_pinned_free(backend.stage);
    else free(backend.stage);
    backend.stage = NULL, backend.stage_bytes = 0, backend.stage_pinned = 0;
}
static void *batch_stage(size_t bytes) {
    batch_stage_wait();
    if (bytes > backend.stage_bytes) {
        batch_stage_release();
        backend.stage = host_pinned_alloc(bytes);
        backend.stage_pinned = backend.stage != NULL;
        if (!backend.stage) backend.stage = host_malloc(bytes, "stage a batch"); /* still right */
        backend.stage_bytes = bytes;
    }
    return backend.stage;
}
static void batch_staged(void) {
#ifdef __CUDACC__
    backend.stage_read = event_record(backend.compute, 0);
#endif
}

/* x *= f, element i: how the collectives turn a sum into a mean */
FSDP_HD static inline void scale_one(long i, float *x, float f) { x[i] *= f; }
/* FSDP2's two copies on a GPU (fsdp.c, section 14; the CPU copies each
 * rank's piece with one memcpy), one parameter at a time: element
 * j of the parameter's N pieces of `chunk` elements, together in `full`,
 * and its place in a buffer laid rank by rank (rank r's shard at r * shard,
 * the parameter's piece at `at` in it). to_full 1 copies from the ranked
 * buffer (the all-gather's output), 0 into it (the reduce-scatter's input).
 * Elements of `bytes` bytes: fp32 slots or 16-bit values. */
FSDP_HD static inline void rank_major_copy_one(long j, void *full, void *ranked, long chunk,
                                               long at, long shard, int bytes, int to_full) {
    long i = (j / chunk) * shard + at + j % chunk;
    if (bytes == 2) {
        uint16_t *f = (uint16_t *)full, *r = (uint16_t *)ranked;
        if (to_full) f[j] = r[i];
        else r[i] = f[j];
    } else {
        float *f = (float *)full, *r = (float *)ranked;
        if (to_full) f[j] = r[i];
        else r[i] = f[j];
    }
}

#endif /* FSDP_BACKEND_H */
