/* ============================================================================
 * dev/emu/cuda_emu.h — the CUDA language on a CPU: what `make fsdp-emu` builds
 * the GPU build with in place of nvcc, so that fsdp.c's CUDA path (its kernels,
 * its cuBLAS and NCCL calls, its streams and events) runs where no GPU is.
 *
 *   make fsdp-emu tests/test_kernels-emu       (g++, the CUDA headers, MPI)
 *   make test-gpu-emu                          (tests/test_gpu.sh on them)
 *
 * CUDA 2 had this as `nvcc -deviceemu`; it went away in CUDA 3.1. This is a
 * small one, for a course whose students have no GPU yet: it runs the very
 * source nvcc compiles, one CUDA thread after another, so a kernel's
 * indexing, its barriers and its bounds are tested on every `make test`.
 * What it does not tell is speed: a CPU thread per CUDA thread, in turn.
 *
 * How the source reaches g++ unchanged but for one piece of syntax: the
 * Makefile copies it and rewrites each launch `k<<<grid, block, 0, s>>>(args)`
 * as `EMU_LAUNCH(k, (grid, block, 0, s))(args)` (perl, line for line), and
 * g++ compiles the copy with this header first (-include). The header then
 * says that this is CUDA (__CUDACC__), so fsdp.c takes its GPU path.
 *
 * The model it runs (what a real GPU guarantees, and no more where it can):
 *  - a kernel's blocks run one after another; a block's threads run as
 *    fibers on one CPU thread, in index order (FSDP_EMU_ORDER=reverse: from
 *    the last), switching only where CUDA synchronises: __syncthreads,
 *    __syncwarp, a shuffle. A kernel with none of these runs its threads as
 *    a plain loop. So a missing barrier shows where a thread reads what a
 *    thread after it in that order writes: the two orders cover both sides;
 *  - threads that wait at different barriers forever (a __syncthreads that
 *    some of the block's threads skip while others wait at a warp's) stop
 *    the program with a message, where a GPU would hang or go wrong;
 *  - the four PTX instructions of the flash kernels (kernels/flash.h) are
 *    the PTX ISA's to the bit: mma.sync and ldmatrix meet the warp, as the
 *    hardware's do, and each lane gets the fragment's elements the ISA's
 *    tables give it; a cp.async lands at one end of the time a GPU may
 *    land it: in index order at the cp.async.wait_group that covers it,
 *    so a read of shared memory before the wait (or before the
 *    __syncthreads after every thread's wait) sees stale bytes; in reverse,
 *    as it is issued, so a copy into a tile other warps still read (no
 *    __syncthreads between) changes what they read;
 *  - every stream runs its work as it is queued (a legal order of any
 *    CUDA program: nothing starts before what it waits for), so events are
 *    done when recorded and a synchronize returns at once;
 *  - device memory is host memory the emulator lends and knows, so a copy
 *    in the wrong direction, a kernel, cuBLAS or NCCL given a host pointer,
 *    or a GEMM operand past its buffer fail here at once, where a GPU
 *    would fault or read garbage, perhaps later; a launch CUDA refuses
 *    (more than 1024 threads a block) fails with CUDA's error; a shuffle
 *    that is not a whole warp's (a mask, a width, lanes past the block)
 *    stops the job: fsdp.c uses none, and the emulator does not model them;
 *    so does an ldmatrix row or a cp.async off 16 bytes;
 *  - cuBLAS is a loop in fp32 (TF32 rounds its inputs as the tensor cores
 *    do; 16-bit inputs are widened, the sum is fp32 and rounded once into a
 *    16-bit output); NCCL is MPI on a communicator of its own;
 *  - FSDP_EMU_NCCL_HANG=N makes each rank's Nth NCCL collective never
 *    finish (a dead peer): what waits for it hangs, as on a GPU, so the
 *    NCCL watchdog (comm/device.h) can be tested;
 *  - streams run their work as it is queued, but each device buffer's uses
 *    are held to the order CUDA guarantees: an operation on one stream
 *    that touches a buffer an operation on another stream wrote (or, to
 *    write it, read), with neither an event the stream waited for nor a
 *    wait of the host between them, stops the job. On a GPU the two could
 *    run at once (dev/emu/runtime.cpp, section 7).
 * The runtime, cuBLAS and NCCL are in dev/emu/runtime.cpp.
 * ========================================================================== */
#ifndef FSDP_CUDA_EMU_H
#define FSDP_CUDA_EMU_H

/* The toolkit's own headers, read as a host compiler reads them (before
 * __CUDACC__ is defined): the types and declarations are CUDA's; the
 * functions behind them are the emulator's. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <type_traits> /* std::is_const: a kernel argument read, or written */

#define __CUDACC__ 1 /* fsdp.c's GPU path from here on */
#define FSDP_EMU 1    /* ... on the emulator (tests/test_kernels.cu times one launch) */
#undef __shared__
/* one per CPU thread: the blocks it runs in turn share it, and find the last
 * block's values in it, as a GPU's shared memory is not cleared either */
#define __shared__ static thread_local
#define __launch_bounds__(...)

namespace emu {
/* A cp.async a thread has issued and not yet waited for: `group` counts
 * the thread's cp_async_commit calls before it */
struct AsyncCopy {
    void *dst;
    const void *src;
    int bytes, group;
};
enum { MAX_ASYNC_COPIES = 64 };
/* The thread a fiber runs now, and its block */
struct Thread {
    uint3 idx;
    int linear, warp, lane;
    AsyncCopy pending[MAX_ASYNC_COPIES]; /* its cp.async copies in flight */
    int n_pending, committed;
};
struct Block {
    dim3 grid, dim;
    uint3 idx;
};
extern __thread Thread *self; /* __thread: plain TLS, no C++ wrapper call at each use */
extern __thread Block *block;

void sync_block();                 /* __syncthreads */
void sync_warp();                  /* __syncwarp, and a warp's collective operations */
void *warp_slot(int lane); /* where a lane of this warp leaves a shuffle's value (8 bytes) */
/* every lane posts `bytes` (at most 32) of its own in its warp_slot, and
 * the warp meets: each lane may then read any lane's slot, until its next
 * warp operation */
void warp_post(const void *mine, int bytes);
[[noreturn]] void unmodelled(const char *what); /* stops the job: undefined, or not modelled */
void async_copy(void *dst, const void *src, int bytes); /* cp.async, issued */
void async_commit(void);                                /* cp.async.commit_group */
void async_wait(int groups);                            /* cp.async.wait_group */

/* A kernel's launch: the grid is checked as CUDA checks it, every pointer
 * argument must be device memory (or NULL), and body runs once per thread. */
struct Launch {
    dim3 grid, dim;
    cudaStream_t stream;
    const char *name; /* the kernel's, for the stream-order checker's messages */
    Launch(dim3 g, dim3 b, size_t shared = 0, cudaStream_t s = 0)
        : grid(g), dim(b), stream(s), name("a kernel") {
        (void)shared;
    }
    Launch &named(const char *n) {
        name = n;
        return *this;
    }
    template <typename K> struct Bound;
    template <typename K> Bound<K> bind(K k) { return Bound<K>{*this, k}; }
};
int launch_check(dim3 grid, dim3 dim, const char *name); /* 0, or it fails (cudaGetLastError) */
int launch_skipped(cudaStream_t s);    /* queued behind a hang (FSDP_EMU_NCCL_HANG) */
void argument_check(const void *p, int index); /* a kernel's pointer argument */
void run_grid(dim3 grid, dim3 dim, void (*body)(void *), void *arg);

template <typename T> static inline void check_arg(const T &, int) {}
template <typename T> static inline void check_arg(T *const &p, int index) {
    argument_check((const void *)p, index);
}

/* What an operation queued on a stream reads or writes: the stream-order
 * checker (dev/emu/runtime.cpp, section 7) holds every device buffer to the
 * order CUDA guarantees between streams. A kernel's pointer arguments are
 * its uses: read where the pointer passed points to const, else read or
 * written (USE_ANY: the kernel's own signature is not seen here). */
enum { USE_READ, USE_WRITE, USE_ANY };
struct Use {
    const void *ptr;
    int how; /* USE_READ, USE_WRITE or USE_ANY */
};
void stream_op(cudaStream_t s, const char *what, const Use *uses, int n);
template <typename T> static inline void note_use(const T &, Use *, int &) {}
template <typename T> static inline void note_use(T *const &p, Use *uses, int &n) {
    uses[n++] = {(const void *)p, std::is_const<T>::value ? USE_READ : USE_ANY};
}

template <typename K> struct Launch::Bound {
    Launch l;
    K kernel;
    template <typename... A> void operator()(A... args) {
        if (launch_check(l.grid, l.dim, l.name) || launch_skipped(l.stream)) return;
        int index = 0, n = 0;
        (check_arg(args, index++), ...);
        Use uses[sizeof...(A) + 1];
        (note_use(args, uses, n), ...);
        stream_op(l.stream, l.name, uses, n);
        auto body = [&]() { kernel(args...); }; /* each thread gets its own copies */
        run_grid(l.grid, l.dim, [](void *b) { (*(decltype(body) *)b)(); }, &body);
    }
};
} // namespace emu

/* k<<<cfg>>>(args), rewritten by the Makefile: a generic lambda calls k, so
 * a kernel template's arguments are deduced from args as nvcc deduces them */
#define EMU_LAUNCH(k, cfg) emu::Launch cfg.named(#k).bind([](auto... emu_a) { k(emu_a...); })

#define threadIdx (emu::self->idx)
#define blockIdx (emu::block->idx)
#define blockDim (emu::block->dim)
#define gridDim (emu::block->grid)

static inline void __syncthreads(void) { emu::sync_block(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    emu::sync_warp();
}
/* A shuffle: every lane posts its value, the warp meets, each reads its
 * partner's, and the warp meets again before the slots are reused. */
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask,
                                                      int width = 32) {
    if (mask != 0xffffffffu || width != 32) emu::unmodelled("a shuffle of part of a warp");
    T out;
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    emu::sync_warp();
    memcpy(emu::warp_slot(emu::self->lane), &v, sizeof(T));
    emu::sync_warp();
    memcpy(&out, emu::warp_slot(emu::self->lane ^ lane_mask), sizeof(T));
    return out;
}

/* ---- the four PTX instructions of kernels/flash.h ------------------------------
 * Their layouts are the PTX ISA's (the comment above them in kernels/flash.h
 * gives them in words): lane l's groupID g = l / 4 and q = l % 4. */
namespace emu {
template <typename F16> static inline float widen(uint16_t bits) {
    F16 v;
    memcpy((void *)&v, &bits, 2); /* the bits as they are */
    return (float)v;
}
static inline uint16_t half_of(uint32_t reg, int k) { return (uint16_t)(k % 2 ? reg >> 16 : reg); }
} // namespace emu
/* c (16 x 8) += a (16 x 16) b (16 x 8): element (row, k) of a is in lane
 * (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), its half
 * k % 2; element (k, n) of b in lane n * 4 + (k % 8) / 2, register k >= 8.
 * So a lane's four outputs need a's rows g and g + 8 from lanes 4g..
 * 4g + 3, and b's columns 2q and 2q + 1 from lanes 8q.. 8q + 7.
 * The sum runs in fp32 in k's order (a GPU's order within the tensor core
 * is its own: tests/test_kernels.cu's tolerances allow for it). */
template <typename F16> static inline void mma_16816(float *c, const uint32_t *a, const uint32_t *b) {
    struct Fragments {
        uint32_t a[4], b[2];
    } mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
    emu::warp_post(&mine, sizeof(mine));
    int g = emu::self->lane / 4, q = emu::self->lane % 4;
    float x[2][16], y[2][16]; /* a's rows g and g + 8, b's columns 2q and 2q + 1 */
    for (int kq = 0; kq < 4; kq++) { /* the 4 lanes that hold a row's (a column's) 16 */
        const Fragments *ra = (const Fragments *)emu::warp_slot(g * 4 + kq);
        for (int half = 0; half < 2; half++) /* k = 2kq + half, and + 8 */
            for (int r = 0; r < 2; r++) {
                x[r][2 * kq + half] = emu::widen<F16>(emu::half_of(ra->a[r], half));
                x[r][2 * kq + half + 8] = emu::widen<F16>(emu::half_of(ra->a[r + 2], half));
            }
        for (int n = 0; n < 2; n++) {
            const Fragments *rb = (const Fragments *)emu::warp_slot((2 * q + n) * 4 + kq);
            for (int half = 0; half < 2; half++) {
                y[n][2 * kq + half] = emu::widen<F16>(emu::half_of(rb->b[0], half));
                y[n][2 * kq + half + 8] = emu::widen<F16>(emu::half_of(rb->b[1], half));
            }
        }
    }
    for (int i = 0; i < 4; i++) { /* c[i]: row g + 8 (i / 2), column 2q + i % 2 */
        float sum = c[i];
        for (int k = 0; k < 16; k++) sum += x[i / 2][k] * y[i % 2][k];
        c[i] = sum;
    }
}
/* register j of lane l: tile j's row g, columns 2q and 2q + 1 (or, with
 * trans, its column g, rows 2q and 2q + 1); tile j's row r at the address
 * lane 8j + r gave. Read when the whole warp has come, as on a GPU. */
static inline void emu_ldmatrix(uint32_t *r, const uint16_t *row, int trans) {
    if ((uintptr_t)row % 16) emu::unmodelled("an ldmatrix row address off 16 bytes");
    emu::warp_post(&row, sizeof(row));
    auto at = [](int l) { return *(const uint16_t *const *)emu::warp_slot(l); };
    int g = emu::self->lane / 4, q = emu::self->lane % 4;
    for (int j = 0; j < 4; j++) {
        int l0 = 8 * j; /* tile j's rows: the addresses of lanes 8j.. 8j + 7 */
        uint16_t lo = trans ? at(l0 + 2 * q)[g] : at(l0 + g)[2 * q],
                 hi = trans ? at(l0 + 2 * q + 1)[g] : at(l0 + g)[2 * q + 1];
        r[j] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}
static inline void ldmatrix_x4(uint32_t *r, const uint16_t *row) { emu_ldmatrix(r, row, 0); }
static inline void ldmatrix_x4_trans(uint32_t *r, const uint16_t *row) { emu_ldmatrix(r, row, 1); }
static inline void cp_async_16(void *dst, const void *src, int bytes) {
    emu::async_copy(dst, src, bytes);
}
static inline void cp_async_commit(void) { emu::async_commit(); }
template <int n> static inline void cp_async_wait(void) { emu::async_wait(n); }

/* CUDA's device math, host side */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }

#endif
