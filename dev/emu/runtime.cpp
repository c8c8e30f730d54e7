/* ============================================================================
 * dev/emu/runtime.cpp — the emulator's device: threads as fibers, and the parts
 * of the CUDA runtime, cuBLAS and NCCL that fsdp.c calls, on the host.
 * dev/emu/cuda_emu.h says what it is for and what it promises.
 *
 *   1. fibers and barriers (a block's threads, CUDA's synchronisation)
 *   2. device memory (lent from the host, and known, so misuse is caught)
 *   3. the runtime: devices, streams, events, copies
 *   4. cuBLAS: the GEMMs, in fp32 (TF32 and 16-bit inputs as the tensor
 *      cores take them)
 *   5. NCCL: its collectives as MPI's, on a communicator of their own
 *   6. what the host asked of the GPU, counted (FSDP_EMU_STATS)
 *   7. stream order, checked: each device buffer's uses across streams
 * ========================================================================== */
#include "cuda_emu.h"

#include <algorithm>
#include <atomic>
#include <errno.h>
#include <fcntl.h>
#include <map>
#include <mpi.h>
#include <mutex>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

/* What the host asked of the GPU, counted as it asks (section 6 writes it
 * out). The communication and watchdog threads call in too, hence atomics. */
namespace emu {
struct Counts {
    std::atomic<long> launches, gemms, device_allocs, host_waits, memset_bytes, copies,
        collectives, serialized;
};
static Counts counts;
/* ... and the launches kernel by kernel, under FSDP_EMU_STATS (by the
 * name's address: the same literal each time a launch line runs). Made
 * by counts_begin and never destroyed: counts_write runs at exit, after
 * the destructors of static objects made later than its registration. */
static std::mutex kernels_lock;
static std::map<const char *, long> *kernel_launches;
static pthread_t main_thread; /* the host thread that queues the step's work */
/* The host blocks until the GPU catches up: on a GPU the queue drains, and
 * the GPU idles until the host queues more. Counted on the main thread,
 * whose waits stall the step (the communication thread waits by design). */
static void count_host_wait(void) {
    if (pthread_equal(pthread_self(), main_thread)) counts.host_waits++;
}

/* What a stream (or an event, or the host) knows to be done: for each
 * stream, how many of its operations (section 7) */
struct Clock {
    std::vector<std::pair<cudaStream_t, long>> done;
    long of(cudaStream_t s) const {
        for (const auto &d : done)
            if (d.first == s) return d.second;
        return 0;
    }
    void raise(cudaStream_t s, long t) {
        for (auto &d : done)
            if (d.first == s) {
                d.second = std::max(d.second, t);
                return;
            }
        done.push_back({s, t});
    }
    void join(const Clock &o) {
        for (const auto &d : o.done) raise(d.first, d.second);
    }
};
} // namespace emu

/* ---- 1. fibers and barriers -------------------------------------------------
 * A block's threads run as fibers on the CPU thread that launched it. A
 * fiber runs a thread to its end and then takes the block's next thread,
 * so a kernel without barriers is a plain loop on one fiber; a thread that
 * waits at a barrier parks its fiber, and the next thread starts on
 * another. When the last live thread arrives, the barrier opens and the
 * parked fibers run on in turn. Threads that have returned no longer
 * count, as on a GPU. */
namespace emu {
__thread Thread *self;
__thread Block *block;

enum { STACK_BYTES = 256 << 10, MAX_THREADS = 1024, MAX_WARPS = MAX_THREADS / 32 };

struct Fiber;
struct Barrier {
    int arrived;
    unsigned generation;
    std::vector<Fiber *> waiting; /* parked here, in the order they came */
};

/* Switching between fibers. On x86-64 six registers and the stack pointer,
 * in a few instructions: the warp kernels switch at every shuffle, and
 * ucontext's swapcontext (elsewhere) also makes a system call each time,
 * ten times the cost. Under AddressSanitizer each switch tells it which
 * stack is live (its fiber API), so it checks kernels' stacks too. */
struct Context {
#if defined(__x86_64__)
    void *sp;
#else
    ucontext_t uc;
#endif
    const void *bottom; /* its stack, for AddressSanitizer */
    size_t size;
    void *fake_stack;
};
#if defined(__x86_64__)
extern "C" void emu_switch(void **save_sp, void *sp);
__asm__(".text\n"
        ".globl emu_switch\n"
        ".type emu_switch, @function\n"
        "emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size emu_switch, .-emu_switch\n");
static void raw_switch(Context *from, Context *to) { emu_switch(&from->sp, to->sp); }
/* a new stack that "returns" into entry, aligned as if entry were called */
static void raw_make(Context *c, char *stack, size_t bytes, void (*entry)()) {
    uintptr_t top = ((uintptr_t)(stack + bytes)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;           /* entry's return address: it never returns */
    *--sp = (void *)entry;  /* emu_switch's ret lands here */
    for (int i = 0; i < 6; i++) *--sp = NULL; /* rbp, rbx, r12-r15 */
    c->sp = sp;
}
#else
static void raw_switch(Context *from, Context *to) {
    if (swapcontext(&from->uc, &to->uc) != 0) {
        perror("emulator: swapcontext");
        abort();
    }
}
static void raw_make(Context *c, char *stack, size_t bytes, void (*entry)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
}
#endif
static void context_make(Context *c, char *stack, size_t bytes, void (*entry)()) {
    raw_make(c, stack, bytes, entry);
    c->bottom = stack, c->size = bytes;
}
/* `from` goes on here when something switches back to it: then the stack
 * it came back from is the scheduler's, or a fiber's */
static void context_switch(Context *from, Context *to, Context *scheduler) {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(&from->fake_stack, to->bottom, to->size);
#endif
    raw_switch(from, to);
#if defined(__SANITIZE_ADDRESS__)
    const void *bottom;
    size_t size;
    __sanitizer_finish_switch_fiber(from->fake_stack, &bottom, &size);
    if (from != scheduler) scheduler->bottom = bottom, scheduler->size = size;
#else
    (void)scheduler;
#endif
}

struct Fiber {
    Context context;
    char *stack;
    Thread thread;
    Barrier *waiting; /* where it is parked, or NULL */
    int idle;
};
struct BlockRun {
    Block block;
    int threads, next, live, warp_live[MAX_WARPS];
    Barrier block_barrier, warp_barrier[MAX_WARPS];
    uint64_t slot[MAX_THREADS][4]; /* shuffles' values (8 bytes), an mma's fragments (24) */
    int reversed; /* threads start from the last (FSDP_EMU_ORDER=reverse) */
    std::vector<Fiber *> ready; /* parked where a barrier has opened since */
    size_t ready_next;
    void (*body)(void *);
    void *arg;
};
struct Scheduler {
    Context context; /* the launching thread's, while fibers run */
    std::vector<Fiber *> fibers;
    Fiber *current;
    BlockRun *run;
    ~Scheduler() { /* the CPU thread ends: its fibers go with it */
        for (Fiber *f : fibers) {
            munmap(f->stack, STACK_BYTES + 4096);
            delete f;
        }
    }
};
static thread_local Scheduler sched;

/* What a GPU would do wrong or hang on stops the job here, every rank, with
 * the message above it (MPI_Abort, as fsdp.c's own errors end a job). */
[[noreturn]] static void die(void) {
    fflush(stderr);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, 6);
    _exit(6);
}

/* A barrier opens when every live thread of its scope has arrived: the
 * threads parked there are ready to run on */
static void barrier_settle(Barrier *b, int live) {
    if (b->arrived == 0 || b->arrived < live) return;
    b->arrived = 0;
    b->generation++;
    std::vector<Fiber *> &ready = sched.run->ready;
    ready.insert(ready.end(), b->waiting.begin(), b->waiting.end());
    b->waiting.clear();
}
static void barrier_wait(Barrier *b, int live) {
    unsigned generation = b->generation;
    b->arrived++;
    barrier_settle(b, live);
    if (b->generation != generation) return; /* the last to arrive goes straight on */
    Fiber *f = sched.current;
    f->waiting = b;
    b->waiting.push_back(f);
    context_switch(&f->context, &sched.context, &sched.context);
}

void sync_block() {
    if (!sched.run) return; /* host code, outside a kernel */
    barrier_wait(&sched.run->block_barrier, sched.run->live);
}
void sync_warp() {
    BlockRun *r = sched.run;
    if (!r) return;
    barrier_wait(&r->warp_barrier[self->warp], r->warp_live[self->warp]);
}
void *warp_slot(int lane) {
    int from = self->warp * 32 + (lane & 31);
    if (from >= sched.run->threads) unmodelled("a shuffle with lanes past the block's last thread");
    return &sched.run->slot[from];
}
/* A shuffle's two meetings, for up to 32 bytes a lane: the first, so that
 * no lane overwrites its slot while another still reads the last post */
void warp_post(const void *mine, int bytes) {
    sync_warp();
    memcpy(warp_slot(self->lane), mine, (size_t)bytes);
    sync_warp();
}

/* cp.async: a copy lands at any time between its issue and the wait that
 * covers its group (cp.async.wait_group n: all but the newest n committed
 * groups are done; the uncommitted ones are in no group yet). The
 * emulator takes one end or the other, with the order threads run in: in
 * index order, at the wait, so a read of the tile before the wait sees
 * stale bytes; in reverse (FSDP_EMU_ORDER=reverse), at once, so a copy
 * into a buffer that other warps still read (a missing __syncthreads
 * before the next tile's copies) changes what they read. */
static int thread_order_reversed(void);
static void async_land(const AsyncCopy &c) {
    memcpy(c.dst, c.src, (size_t)c.bytes);
    memset((char *)c.dst + c.bytes, 0, (size_t)(16 - c.bytes));
}
void async_copy(void *dst, const void *src, int bytes) {
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16)
        unmodelled("a cp.async of 16 bytes off 16-byte alignment");
    if (bytes < 0 || bytes > 16) unmodelled("a cp.async of 16 bytes reading more than 16");
    AsyncCopy c = {dst, src, bytes, self->committed};
    if (thread_order_reversed()) return async_land(c);
    if (self->n_pending == MAX_ASYNC_COPIES)
        unmodelled("more cp.async copies in flight than the emulator holds (MAX_ASYNC_COPIES)");
    self->pending[self->n_pending++] = c;
}
void async_commit(void) { self->committed++; }
void async_wait(int groups) {
    int kept = 0;
    for (int i = 0; i < self->n_pending; i++) {
        AsyncCopy c = self->pending[i];
        if (c.group >= self->committed - groups) { /* newer, or not committed */
            self->pending[kept++] = c;
            continue;
        }
        async_land(c);
    }
    self->n_pending = kept;
}
void unmodelled(const char *what) {
    fprintf(stderr, "emulator: %s: CUDA leaves it undefined, or the emulator does not model "
                    "it (fsdp.c's kernels do neither)\n", what);
    die();
}

static void thread_begin(BlockRun *r, Thread *t, int linear) {
    dim3 d = r->block.dim;
    t->linear = linear, t->warp = linear / 32, t->lane = linear % 32;
    t->n_pending = t->committed = 0; /* a copy never waited for is lost with its thread */
    t->idx.x = linear % d.x;
    t->idx.y = linear / d.x % d.y;
    t->idx.z = linear / (d.x * d.y);
}
static void thread_end(BlockRun *r, const Thread *t) {
    r->live--;
    r->warp_live[t->warp]--;
    barrier_settle(&r->block_barrier, r->live);
    barrier_settle(&r->warp_barrier[t->warp], r->warp_live[t->warp]);
}

/* One of the emulator's settings, FSDP_EMU_*: unset (dflt), or a whole
 * number from lo up; anything else stops this rank with exit 2, and every
 * rank reads the same environment, so every rank stops alike. */
static long emu_setting(const char *name, long dflt, long lo) {
    const char *v = getenv(name);
    if (!v) return dflt;
    char *end;
    long n = strtol(v, &end, 10);
    if (end != v && !*end && n >= lo && n <= 1000000) return n;
    fprintf(stderr, "error: %s=%s: the emulator wants a whole number from %ld.\nHINT: unset it "
                    "for the default, %ld.\n", name, v, lo, dflt);
    exit(2);
}

/* The order a block's threads start in: by index, or with
 * FSDP_EMU_ORDER=reverse from the last, so a missing barrier shows whichever
 * side of it the writing thread is on (make test runs the kernels both ways) */
static int thread_order_reversed(void) {
    static const int reversed = [] { /* once, whichever CPU thread asks first */
        const char *o = getenv("FSDP_EMU_ORDER");
        if (o && strcmp(o, "reverse") && strcmp(o, "index")) {
            fprintf(stderr, "error: FSDP_EMU_ORDER=%s: the emulator runs a block's threads in "
                            "index order or in reverse.\nHINT: FSDP_EMU_ORDER=reverse, or unset "
                            "it.\n", o);
            exit(2);
        }
        return o && !strcmp(o, "reverse");
    }();
    return reversed;
}

static long nccl_hang_at(void) { return emu_setting("FSDP_EMU_NCCL_HANG", 0, 1); } /* 0: none */
static int physical_gpus(void) { return (int)emu_setting("FSDP_EMU_GPUS", 4, 1); }

/* Every setting is checked as the program starts, before main and so before
 * MPI_Init: a rank that exits after MPI_Init without MPI_Finalize makes
 * mpirun kill the others, which then never say their own exit code (a
 * bad FSDP_EMU_ORDER stopped one rank of two with 2 and killed the other,
 * 11 runs in 15 on a loaded machine). Before MPI_Init every rank stops
 * alike, on its own. */
__attribute__((constructor)) static void settings_check(void) {
    (void)thread_order_reversed();
    (void)nccl_hang_at();
    (void)physical_gpus();
}

/* A fiber's life: the block's next thread, while there is one; then idle
 * until a later block (of this or another launch) needs it again */
static void fiber_main() {
#if defined(__SANITIZE_ADDRESS__) /* its first entry: from the scheduler's stack */
    __sanitizer_finish_switch_fiber(NULL, &sched.context.bottom, &sched.context.size);
#endif
    for (;;) {
        Fiber *f = sched.current;
        BlockRun *r = sched.run;
        while (r->next < r->threads) {
            int n = r->next++;
            thread_begin(r, &f->thread, r->reversed ? r->threads - 1 - n : n);
            self = &f->thread;
            r->body(r->arg);
            thread_end(r, &f->thread);
        }
        f->idle = 1;
        context_switch(&f->context, &sched.context, &sched.context);
    }
}

static Fiber *fiber_new() {
    Fiber *f = new Fiber();
    /* its own stack, with a guard page below it: an overflow is a fault */
    f->stack = (char *)mmap(NULL, STACK_BYTES + 4096, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f->stack == MAP_FAILED) {
        perror("emulator: a fiber's stack");
        die();
    }
    mprotect(f->stack, 4096, PROT_NONE);
    context_make(&f->context, f->stack + 4096, STACK_BYTES, fiber_main);
    sched.fibers.push_back(f);
    return f;
}

static void resume(Fiber *f) {
    sched.current = f;
    self = &f->thread;
    f->waiting = NULL, f->idle = 0;
    context_switch(&sched.context, &f->context, &sched.context);
    sched.current = NULL;
}

[[noreturn]] static void deadlock(const BlockRun *r) {
    int at_block = 0, at_warp = 0;
    for (Fiber *f : sched.fibers)
        if (!f->idle && f->waiting)
            (f->waiting == &r->block_barrier ? at_block : at_warp)++;
    fprintf(stderr,
            "emulator: block (%u, %u, %u) of a kernel is stuck: %d thread(s) wait at "
            "__syncthreads and %d at a warp's barrier (__syncwarp, a shuffle, an mma "
            "or an ldmatrix), and none can go on. On a GPU this kernel hangs or computes garbage.\n"
            "HINT: every live thread of a block must reach the same __syncthreads; every lane "
            "of a warp the same warp operation.\n",
            r->block.idx.x, r->block.idx.y, r->block.idx.z, at_block, at_warp);
    die();
}

/* Runs what is ready; when every started thread waits, starts the next
 * thread on a fiber of its own (every fiber is idle when a block starts,
 * and the block takes them in order). */
static void run_block(BlockRun *r) {
    size_t used = 0;
    r->ready.clear();
    r->ready_next = 0;
    while (r->live > 0) {
        if (r->ready_next == r->ready.size()) r->ready.clear(), r->ready_next = 0;
        if (r->ready_next < r->ready.size()) resume(r->ready[r->ready_next++]);
        else if (r->next < r->threads)
            resume(used < sched.fibers.size() ? sched.fibers[used++] : (used++, fiber_new()));
        else deadlock(r);
    }
}

void run_grid(dim3 grid, dim3 dim, void (*body)(void *), void *arg) {
    BlockRun *r = new BlockRun();
    r->block.grid = grid, r->block.dim = dim;
    r->threads = (int)(dim.x * dim.y * dim.z);
    r->body = body, r->arg = arg;
    r->reversed = thread_order_reversed();
    sched.run = r;
    block = &r->block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                r->block.idx = {x, y, z};
                r->next = 0, r->live = r->threads;
                for (int w = 0; w < MAX_WARPS; w++) {
                    int left = r->threads - w * 32; /* the last warp may be partial */
                    r->warp_live[w] = left < 0 ? 0 : left < 32 ? left : 32;
                    r->warp_barrier[w].arrived = 0;
                }
                r->block_barrier.arrived = 0;
                run_block(r);
            }
    sched.run = NULL, self = NULL, block = NULL;
    delete r;
}
} // namespace emu

/* ---- 2. device memory ---------------------------------------------------------
 * Lent from the host and written down, so the emulator can tell device
 * memory from host memory as a GPU's page tables do: a kernel, cuBLAS or
 * NCCL given host memory, or a copy whose direction is wrong, fails with
 * CUDA's error instead of working here and faulting on the first GPU.
 * Pinned host memory (cudaHostAlloc) is known too: a kernel may read it
 * (unified addressing), a device-to-device copy may not name it. */
namespace emu {
enum Kind { HOST = 0, DEVICE, PINNED };
static std::mutex memory_lock;
static std::map<uintptr_t, std::pair<size_t, Kind>> lent; /* start -> bytes, kind */
static size_t device_bytes;
static const size_t DEVICE_TOTAL = (size_t)80 << 30; /* an 80 GB GPU's worth */
static thread_local cudaError_t last_error = cudaSuccess;

static cudaError_t fail(cudaError_t e) {
    last_error = e;
    return e;
}
/* The lent block that holds [p, p + bytes): its start and kind; {0, HOST}
 * for host memory, or a range that runs past a block's end */
static std::pair<uintptr_t, Kind> block_at(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> hold(memory_lock);
    uintptr_t a = (uintptr_t)p;
    auto it = lent.upper_bound(a);
    if (it == lent.begin()) return {0, HOST};
    --it;
    if (a + bytes > it->first + it->second.first) return {0, HOST};
    return {it->first, it->second.second};
}
static Kind kind_of(const void *p, size_t bytes = 1) { return block_at(p, bytes).second; }
/* NULL when the emulated GPU is full (device memory) or the host is */
static void *lend(size_t bytes, Kind kind) {
    std::lock_guard<std::mutex> hold(memory_lock); /* the communication thread lends too */
    if (kind == DEVICE && device_bytes + bytes > DEVICE_TOTAL) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes ? bytes : 1)) return NULL; /* cudaMalloc's alignment */
    lent[(uintptr_t)p] = {bytes ? bytes : 1, kind};
    if (kind == DEVICE) device_bytes += bytes;
    return p;
}
static int take_back(void *p, Kind kind) {
    std::lock_guard<std::mutex> hold(memory_lock);
    auto it = lent.find((uintptr_t)p);
    if (it == lent.end() || it->second.second != kind) return 0;
    if (kind == DEVICE) device_bytes -= it->second.first;
    lent.erase(it);
    free(p);
    return 1;
}
/* A pointer some device code is given: device memory, pinned host memory
 * (reachable by unified addressing), or NULL */
static int reachable(const void *p) { return !p || kind_of(p) != HOST; }

int launch_check(dim3 grid, dim3 dim, const char *name) {
    counts.launches++;
    if (kernel_launches) {
        std::lock_guard<std::mutex> hold(kernels_lock);
        (*kernel_launches)[name]++;
    }
    unsigned long threads = (unsigned long)dim.x * dim.y * dim.z;
    if (threads == 0 || threads > MAX_THREADS || dim.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        last_error = cudaErrorInvalidConfiguration;
        return 1;
    }
    return 0;
}
void argument_check(const void *p, int index) {
    if (reachable(p)) return;
    fprintf(stderr,
            "emulator: a kernel's argument %d (%p) is not in device memory (host memory, or "
            "past a device buffer's end), which a GPU cannot read: there it faults or reads "
            "garbage.\nHINT: give kernels device memory (dev_alloc), or copy the values there "
            "first (dev_from_host).\n",
            index + 1, p);
    die();
}
} // namespace emu
using namespace emu;

/* ---- 3. the runtime ---------------------------------------------------------------
 * Devices: FSDP_EMU_GPUS of them (4 unless set), of which CUDA_VISIBLE_DEVICES
 * shows a part, as on a machine with that many GPUs: each has its own PCI
 * bus id, so two ranks on one of them are seen sharing it. Streams and
 * events are tokens: work runs when it is queued. */
struct CUstream_st {
    std::atomic<int> hung; /* it waits for what never finishes: its work never runs */
    Clock clock;           /* what its next operation comes after (section 7) */
    int number;            /* 1, 2, ...: in the order they were created */
};
struct CUevent_st {
    double at; /* when it was recorded: the work before it is done */
    int recorded, timed; /* timed: not cudaEventDisableTiming */
    std::atomic<int> never; /* recorded behind a hang: never done */
    Clock clock;            /* what is done when it is (section 7) */
};
/* section 7's side of streams, events and the host's waits */
static void order_stream_new(cudaStream_t s);
static void order_stream_gone(cudaStream_t s);
static void order_record(cudaEvent_t e, cudaStream_t s);
static void order_wait_event(cudaStream_t s, cudaEvent_t e);
static void order_host_waits_stream(cudaStream_t s);
static void order_host_waits_event(cudaEvent_t e);
static void order_host_waits_all(void);
static void order_forget(const void *p);
static void stream_op2(cudaStream_t s, const char *what, const void *read, const void *written);

/* A hang, on purpose: with FSDP_EMU_NCCL_HANG=N the Nth NCCL collective of
 * each rank never finishes, as when a peer dies or a link fails. Its stream
 * then runs nothing more, nor does a stream that waits for it, and the host
 * blocks at its next synchronisation, for ever, as on a GPU: what ends it
 * is fsdp.c's NCCL watchdog (comm/device.h), which the hang is there to
 * test. The watchdog's thread reads these flags, hence the atomics. */
static std::atomic<int> hung_streams;
static int stream_hung(cudaStream_t s) { return s && s->hung; }
static void stream_hang(cudaStream_t s) {
    if (s && !s->hung.exchange(1)) hung_streams++;
}
[[noreturn]] static void hang_forever(void) {
    for (;;) pause(); /* until the watchdog ends the process */
}
namespace emu {
int launch_skipped(cudaStream_t s) { return stream_hung(s); }
}
static thread_local int current_device;

static double now_seconds_emu(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* the visible devices' physical numbers, as CUDA_VISIBLE_DEVICES lists them */
static int visible_gpus(int *which, int cap) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0, all = physical_gpus();
    if (!v) {
        for (; n < all && n < cap; n++) which[n] = n;
        return n;
    }
    for (const char *p = v; *p && n < cap;) { /* CUDA stops at the first entry it cannot use */
        char *end;
        long g = strtol(p, &end, 10);
        if (end == p || g < 0 || g >= all) break;
        which[n++] = (int)g;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') break;
    }
    return n;
}

extern "C" {
cudaError_t cudaGetDeviceCount(int *count) {
    int which[64];
    *count = visible_gpus(which, 64);
    return *count ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) {
    int n = 0;
    cudaGetDeviceCount(&n);
    if (device < 0 || device >= n) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device) {
    int which[64], n = visible_gpus(which, 64);
    if (device < 0 || device >= n) return fail(cudaErrorInvalidDevice);
    snprintf(bus, (size_t)len, "00000000:%02X:00.0", 0x10 + which[device]);
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    (void)device;
    *value = attr == cudaDevAttrComputeMode              ? cudaComputeModeDefault
             : attr == cudaDevAttrComputeCapabilityMajor ? 9 /* as cudaGetDeviceProperties */
                                                         : 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "fsdp.c's CPU emulator (dev/emu/), device %d", device);
    prop->totalGlobalMem = DEVICE_TOTAL;
    prop->multiProcessorCount = 1;
    prop->major = 9, prop->minor = 0;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = MAX_THREADS;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
    }
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error";
    }
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    counts.device_allocs++;
    *p = lend(bytes, DEVICE);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void *p) {
    order_forget(p); /* its uses end with it */
    if (!p || take_back(p, DEVICE)) return cudaSuccess;
    return fail(cudaErrorInvalidValue);
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    *p = lend(bytes, PINNED);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void *p) {
    order_forget(p);
    if (!p || take_back(p, PINNED)) return cudaSuccess;
    return fail(cudaErrorInvalidValue);
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    std::lock_guard<std::mutex> hold(memory_lock);
    *total = DEVICE_TOTAL;
    *free_bytes = DEVICE_TOTAL - device_bytes;
    return cudaSuccess;
}

/* A copy's direction must match where its ends are, as it must on a GPU
 * (there a host pointer given as device memory faults, or the copy fails) */
static int copy_ends_ok(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return 1;
    int dst_dev = kind_of(dst, bytes) == DEVICE, src_dev = kind_of(src, bytes) == DEVICE;
    switch (kind) {
    case cudaMemcpyHostToDevice: return dst_dev && !src_dev;
    case cudaMemcpyDeviceToHost: return !dst_dev && src_dev;
    case cudaMemcpyDeviceToDevice: return dst_dev && src_dev;
    case cudaMemcpyHostToHost: return !dst_dev && !src_dev;
    default: return 1; /* cudaMemcpyDefault: unified addressing works it out */
    }
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    if (stream_hung(stream)) return cudaSuccess; /* queued behind a hang: never runs */
    if (!copy_ends_ok(dst, src, bytes, kind)) {
        fprintf(stderr,
                "emulator: cudaMemcpyAsync of %zu bytes from %p to %p: its ends are not where "
                "its kind (%d) says (or it runs past the end of a device buffer)\n",
                bytes, src, dst, (int)kind);
        return fail(cudaErrorInvalidValue);
    }
    if (bytes) stream_op2(stream, "cudaMemcpyAsync", src, dst);
    memmove(dst, src, bytes);
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToHost) counts.copies++;
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    count_host_wait(); /* it returns when the copy is done */
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, NULL);
    order_host_waits_stream(NULL);
    return e;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream) {
    if (stream_hung(stream)) return cudaSuccess;
    if (bytes && kind_of(p, bytes) != DEVICE) return fail(cudaErrorInvalidValue);
    counts.memset_bytes += (long)bytes;
    if (bytes) stream_op2(stream, "cudaMemsetAsync", NULL, p);
    memset(p, value, bytes);
    return cudaSuccess;
}

/* Non-blocking or not, every stream runs its work as it is queued. The
 * checker (section 7) takes each as non-blocking, the stricter: no implicit
 * order with the default stream. */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags;
    *s = new CUstream_st();
    order_stream_new(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    order_stream_gone(s);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    count_host_wait();
    if (stream_hung(s)) hang_forever();
    order_host_waits_stream(s);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    (void)flags;
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (e->never) stream_hang(s); /* it waits for ever too */
    order_wait_event(s, e);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    count_host_wait();
    if (hung_streams) hang_forever();
    order_host_waits_all();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    *e = new CUevent_st();
    (*e)->timed = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    e->at = now_seconds_emu();
    e->recorded = 1;
    e->never = stream_hung(s);
    order_record(e, s);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    count_host_wait();
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (e->never) hang_forever();
    order_host_waits_event(e);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    return e->never ? cudaErrorNotReady : cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    /* as CUDA: both recorded, and neither made with cudaEventDisableTiming */
    if (!start->recorded || !end->recorded || !start->timed || !end->timed)
        return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)((end->at - start->at) * 1e3);
    return cudaSuccess;
}
} /* extern "C" */

/* ---- 4. cuBLAS -----------------------------------------------------------------
 * C (m, n) = alpha op(A) op(B) + beta C, column-major, as cuBLAS defines it:
 * each operand read in its type (TF32 rounds fp32 inputs to 10 bits of
 * mantissa, as the tensor cores read them with --tf32), the sum in fp32 in
 * k's order, C written once in its type; beta 0 reads no C. The leading
 * dimensions are checked as cuBLAS checks them, and every element an
 * operand spans must lie in one device buffer. */
struct cublasContext {
    cublasMath_t math;
    cudaStream_t stream;
};
enum { ROWS = 32, COLS = 256 }; /* a tile of C: its sums stay in cache */

static float tf32(float v) { /* round to nearest, ties away, as cvt.rna.tf32.f32 */
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}
static size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
static float load_typed(const void *p, long i, cudaDataType t) {
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == CUDA_R_16F) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}
static void store_typed(void *p, long i, float v, cudaDataType t) {
    if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else if (t == CUDA_R_16F) ((__half *)p)[i] = __float2half(v);
    else ((float *)p)[i] = v;
}
/* the elements an operand of rows x cols spans, stored op-wise with ld */
static long span(cublasOperation_t op, int rows, int cols, int ld) {
    int major = op == CUBLAS_OP_N ? cols : rows, minor = op == CUBLAS_OP_N ? rows : cols;
    return major == 0 || minor == 0 ? 0 : (long)(major - 1) * ld + minor;
}
static int operand_ok(const void *p, long elements, cudaDataType t) {
    return elements == 0 || kind_of(p, (size_t)elements * type_bytes(t)) == DEVICE;
}

/* What cuBLASLt's epilogue does to each sum v of row i, column j as it is
 * written (gemm_batched's last argument): bias[i] added; then, with
 * GELU_AUX_BIAS, v kept in aux and GELU(v) written; with DGELU, v times
 * GELU's derivative at aux. aux holds C's type, its columns aux_ld apart.
 * cuBLASLt's GELU is the tanh form; libm's tanhf here, where a GPU has its
 * own rounding (tests/test_kernels.cu allows for it). */
enum { EPI_NONE, EPI_GELU_AUX, EPI_DGELU };
struct Epilogue {
    const void *bias;
    int gelu;
    void *aux;
    long aux_ld;
};
static float gelu_tanh_of(float x, int derivative) {
    const float k = 0.7978845608f; /* sqrt(2 / pi) */
    float th = tanhf(k * (x + 0.044715f * x * x * x));
    if (!derivative) return 0.5f * x * (1.0f + th);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * k * (1.0f + 3.0f * 0.044715f * x * x);
}
static float epilogue_apply(const Epilogue &e, float v, int i, int j, cudaDataType ct) {
    if (e.bias) v += load_typed(e.bias, i, ct);
    long at = i + (long)j * e.aux_ld;
    if (e.gelu == EPI_GELU_AUX) {
        store_typed(e.aux, at, v, ct);
        return gelu_tanh_of(v, 0);
    }
    if (e.gelu == EPI_DGELU) return v * gelu_tanh_of(load_typed(e.aux, at, ct), 1);
    return v;
}

static cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, float alpha, const void *A,
                                   cudaDataType at, int lda, long long sa, const void *B,
                                   cudaDataType bt, int ldb, long long sb, float beta, void *C,
                                   cudaDataType ct, int ldc, long long sc, int batches,
                                   Epilogue epilogue = Epilogue{NULL, EPI_NONE, NULL, 0}) {
    if (m < 0 || n < 0 || k < 0 || batches < 0 || ldc < (m > 1 ? m : 1) ||
        lda < ((ta == CUBLAS_OP_N ? m : k) > 1 ? (ta == CUBLAS_OP_N ? m : k) : 1) ||
        ldb < ((tb == CUBLAS_OP_N ? k : n) > 1 ? (tb == CUBLAS_OP_N ? k : n) : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    counts.gemms++;
    if (stream_hung(h->stream)) return CUBLAS_STATUS_SUCCESS; /* queued behind a hang */
    const void *bias = epilogue.bias, *aux = epilogue.aux;
    Use uses[5] = {{A, USE_READ}, {B, USE_READ}, {C, USE_WRITE}};
    int n_uses = 3;
    if (bias) uses[n_uses++] = Use{bias, USE_READ};
    if (aux) uses[n_uses++] = Use{aux, epilogue.gelu == EPI_GELU_AUX ? USE_WRITE : USE_READ};
    stream_op(h->stream, "a cuBLAS GEMM", uses, n_uses);
    if (aux && batches == 1 && !operand_ok(aux, span(CUBLAS_OP_N, m, n, (int)epilogue.aux_ld), ct)) {
        fprintf(stderr, "emulator: cuBLASLt's epilogue buffer (aux) is not all in one device "
                        "buffer (m %d n %d, ld %ld)\n", m, n, epilogue.aux_ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    int round = h->math == CUBLAS_TF32_TENSOR_OP_MATH && at == CUDA_R_32F;
    std::vector<float> a((size_t)m * k), b((size_t)k * n), acc((size_t)ROWS * COLS);
    for (int batch = 0; batch < batches; batch++) {
        const char *pa = (const char *)A + (size_t)batch * sa * type_bytes(at);
        const char *pb = (const char *)B + (size_t)batch * sb * type_bytes(bt);
        char *pc = (char *)C + (size_t)batch * sc * type_bytes(ct);
        if (!operand_ok(pa, span(ta, m, k, lda), at) || !operand_ok(pb, span(tb, k, n, ldb), bt) ||
            !operand_ok(pc, span(CUBLAS_OP_N, m, n, ldc), ct)) {
            fprintf(stderr, "emulator: a GEMM's operand is not all in one device buffer "
                            "(m %d n %d k %d, lda %d ldb %d ldc %d, batch %d)\n",
                    m, n, k, lda, ldb, ldc, batch);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        for (int i = 0; i < m; i++) /* op(A) row-major (m, k) */
            for (int l = 0; l < k; l++) {
                float v = load_typed(pa, ta == CUBLAS_OP_N ? i + (long)l * lda : l + (long)i * lda, at);
                a[(size_t)i * k + l] = round ? tf32(v) : v;
            }
        for (int l = 0; l < k; l++) /* op(B) row-major (k, n) */
            for (int j = 0; j < n; j++) {
                float v = load_typed(pb, tb == CUBLAS_OP_N ? l + (long)j * ldb : j + (long)l * ldb, bt);
                b[(size_t)l * n + j] = round ? tf32(v) : v;
            }
        /* a tile of C at a time, each element summed in k's order; the
         * loop over a row of the tile is what the compiler vectorises */
        for (int i0 = 0; i0 < m; i0 += ROWS)
            for (int j0 = 0; j0 < n; j0 += COLS) {
                int rows = m - i0 < ROWS ? m - i0 : ROWS, cols = n - j0 < COLS ? n - j0 : COLS;
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int l = 0; l < k; l++) {
                    const float *bl = &b[(size_t)l * n + j0];
                    for (int i = 0; i < rows; i++) {
                        float x = a[(size_t)(i0 + i) * k + l], *out = &acc[(size_t)i * COLS];
                        for (int j = 0; j < cols; j++) out[j] += x * bl[j];
                    }
                }
                for (int i = 0; i < rows; i++)
                    for (int j = 0; j < cols; j++) {
                        long at_c = (i0 + i) + (long)(j0 + j) * ldc;
                        float v = alpha * acc[(size_t)i * COLS + j];
                        if (beta != 0.0f) v += beta * load_typed(pc, at_c, ct);
                        v = epilogue_apply(epilogue, v, i0 + i, j0 + j, ct); /* cuBLASLt's */
                        store_typed(pc, at_c, v, ct);
                    }
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = new cublasContext{CUBLAS_DEFAULT_MATH, NULL};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
    }
}
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta, float *C, int ldc) {
    return gemm_batched(h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0,
                        *beta, C, CUDA_R_32F, ldc, 0, 1);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sa, const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc, long long sc,
                                         int batches) {
    return gemm_batched(h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb,
                        sb, *beta, C, CUDA_R_32F, ldc, sc, batches);
}
/* the tensor cores' GEMMs as fsdp.c asks for them: 16-bit inputs of one
 * type, fp32 sums, an output in fp32 or the inputs' type; else the
 * emulator says NOT_SUPPORTED (cuBLAS takes more) */
static int ex_supported(cudaDataType at, cudaDataType bt, cudaDataType ct,
                        cublasComputeType_t compute) {
    return (at == CUDA_R_16BF || at == CUDA_R_16F) && at == bt &&
           (ct == at || ct == CUDA_R_32F) && compute == CUBLAS_COMPUTE_32F;
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
    (void)algo;
    if (!ex_supported(at, bt, ct, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_batched(h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, 0, B, bt, ldb, 0,
                        *(const float *)beta, C, ct, ldc, 0, 1);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at,
                                          int lda, long long sa, const void *B, cudaDataType bt,
                                          int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sc, int batches,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!ex_supported(at, bt, ct, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_batched(h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, sa, B, bt, ldb, sb,
                        *(const float *)beta, C, ct, ldc, sc, batches);
}

} /* extern "C" */

/* cuBLASLt, as far as fsdp.c asks it (kernels/layers.h' lt_matmul): one
 * product D = op(A) op(B) + beta C, in place (C is D), with no epilogue,
 * the bias's, GELU_AUX_BIAS's or DGELU's (Epilogue, above); the types
 * cublasGemmEx takes (ex_supported), the bias and GELU's input (aux) in
 * D's type, aux's leading dimension a multiple of 8 and at least D's rows,
 * as cuBLASLt asks. Anything else: the heuristic finds no algorithm, as
 * cuBLASLt's does for what it cannot run, and fsdp.c takes its other path.
 * The descriptors are cuBLASLt's own semi-opaque structs, holding the
 * emulator's fields. */
struct cublasLtContext {
    int unused;
};
struct LtDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t op[2];
    cublasLtEpilogue_t epilogue;
    const void *bias;
    int bias_type; /* -1: D's */
    void *aux;
    int64_t aux_ld;
};
struct LtLayout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
static_assert(sizeof(LtDesc) <= sizeof(cublasLtMatmulDescOpaque_t), "LtDesc fits");
static_assert(sizeof(LtLayout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "LtLayout fits");
static LtDesc *lt_desc(cublasLtMatmulDesc_t d) { return (LtDesc *)(void *)d->data; }
static LtLayout *lt_layout(cublasLtMatrixLayout_t l) { return (LtLayout *)(void *)l->data; }

/* Whether the emulator runs this product (the heuristic's verdict) */
static int lt_supported(const LtDesc *o, const LtLayout *a, const LtLayout *b, const LtLayout *c,
                        const LtLayout *d) {
    int bias_ok = o->bias && (o->bias_type == -1 || o->bias_type == (int)d->type);
    int aux_ok = o->aux && o->aux_ld % 8 == 0 && o->aux_ld >= (int64_t)d->rows;
    int epilogue_ok = o->epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
                      (o->epilogue == CUBLASLT_EPILOGUE_BIAS && bias_ok) ||
                      (o->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS && bias_ok && aux_ok) ||
                      (o->epilogue == CUBLASLT_EPILOGUE_DGELU && aux_ok);
    return epilogue_ok && o->scale == CUDA_R_32F && c->type == d->type &&
           ex_supported(a->type, b->type, d->type, o->compute);
}

/* The descriptor's epilogue, as gemm_batched applies it */
static Epilogue lt_epilogue(const LtDesc *o) {
    cublasLtEpilogue_t e = o->epilogue;
    int with_bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int gelu = e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? EPI_GELU_AUX
               : e == CUBLASLT_EPILOGUE_DGELU       ? EPI_DGELU
                                                    : EPI_NONE;
    return Epilogue{with_bias ? o->bias : NULL, gelu, gelu ? o->aux : NULL, (long)o->aux_ld};
}

extern "C" {
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new cublasLtContext{0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    *d = new cublasLtMatmulDescOpaque_t();
    *lt_desc(*d) = LtDesc{compute, scale, {CUBLAS_OP_N, CUBLAS_OP_N}, CUBLASLT_EPILOGUE_DEFAULT,
                          NULL, -1, NULL, 0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
} /* extern "C" */
/* An attribute's value into its field, if it is the field's size (cuBLASLt
 * takes each attribute in one type, and says INVALID_VALUE to another) */
template <typename T> static cublasStatus_t lt_attribute(T *field, const void *buf, size_t bytes) {
    if (bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy((void *)field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" {
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t bytes) {
    LtDesc *o = lt_desc(d);
    static_assert(sizeof(o->op[0]) == sizeof(int32_t), "TRANSA and TRANSB are int32_t");
    static_assert(sizeof(o->epilogue) == sizeof(uint32_t), "the epilogue is a uint32_t");
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return lt_attribute(&o->op[0], buf, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return lt_attribute(&o->op[1], buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return lt_attribute(&o->epilogue, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return lt_attribute(&o->bias, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return lt_attribute(&o->bias_type, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return lt_attribute(&o->aux, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return lt_attribute(&o->aux_ld, buf, bytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* the emulator's limit, not cuBLASLt's */
    }
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    *l = new cublasLtMatrixLayoutOpaque_t();
    *lt_layout(*l) = LtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new cublasLtMatmulPreferenceOpaque_t();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t bytes) {
    (void)p, (void)attr, (void)buf, (void)bytes; /* workspace, alignments: any will do here */
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t p, int wanted,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned) {
    (void)h, (void)p;
    if (wanted < 1) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = lt_supported(lt_desc(op), lt_layout(a), lt_layout(b), lt_layout(c), lt_layout(d));
    if (*returned) results[0] = cublasLtMatmulHeuristicResult_t();
    return *returned ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t a, const void *B,
                              cublasLtMatrixLayout_t b, const void *beta, const void *C,
                              cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    (void)h, (void)algo, (void)workspace, (void)workspace_bytes;
    const LtDesc *o = lt_desc(op);
    const LtLayout *la = lt_layout(a), *lb = lt_layout(b), *ld = lt_layout(d);
    if (!lt_supported(o, la, lb, lt_layout(c), ld) || C != D) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* op(A) is (m, k), op(B) (k, n), D (m, n): a layout gives the stored shape */
    int m = (int)ld->rows, n = (int)ld->cols;
    int k = (int)(o->op[0] == CUBLAS_OP_N ? la->cols : la->rows);
    int kb = (int)(o->op[1] == CUBLAS_OP_N ? lb->rows : lb->cols);
    int ma = (int)(o->op[0] == CUBLAS_OP_N ? la->rows : la->cols);
    int nb = (int)(o->op[1] == CUBLAS_OP_N ? lb->cols : lb->rows);
    if (k != kb || m != ma || n != nb) return CUBLAS_STATUS_INVALID_VALUE;
    cublasContext as_cublas{CUBLAS_DEFAULT_MATH, stream};
    return gemm_batched(&as_cublas, o->op[0], o->op[1], m, n, k, *(const float *)alpha, A,
                        la->type, (int)la->ld, 0, B, lb->type, (int)lb->ld, 0,
                        *(const float *)beta, D, ld->type, (int)ld->ld, 0, 1, lt_epilogue(o));
}
} /* extern "C" */

/* ---- 5. NCCL ------------------------------------------------------------------------
 * A communicator is an MPI communicator of its own ranks. ncclCommInitRank
 * cannot see which MPI communicator the caller broadcast the id over, so
 * it splits MPI_COMM_WORLD by the id: every rank of the world must open
 * its communicators in the same order, as fsdp.c's ranks do (the world's,
 * then each hybrid group's). As NCCL does, it refuses two ranks on one
 * GPU. A collective runs when it is queued; 16-bit sums add in fp32 and
 * round at each step, as NCCL's ring does. */
struct ncclComm {
    MPI_Comm comm;
    int rank, size;
};
static std::atomic<int> id_counter;

/* Whether this collective runs: not behind a hang, and not the one
 * FSDP_EMU_NCCL_HANG names (which hangs its stream instead) */
static int after_all_queued(cudaStream_t s);
static int collective_runs(cudaStream_t s) {
    static std::atomic<int> count;
    counts.collectives++;
    counts.serialized += after_all_queued(s);
    long n = nccl_hang_at();
    if (stream_hung(s)) return 0;
    if (!n || ++count != n) return 1;
    fprintf(stderr, "emulator: FSDP_EMU_NCCL_HANG=%ld: this NCCL collective never finishes, as "
                    "if a peer had died\n", n);
    stream_hang(s);
    return 0;
}

static void sum16(void *in, void *inout, int *len, MPI_Datatype *type, int bf16) {
    (void)type;
    for (int i = 0; i < *len; i++) {
        if (bf16) {
            __nv_bfloat16 *a = (__nv_bfloat16 *)in, *b = (__nv_bfloat16 *)inout;
            b[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
        } else {
            __half *a = (__half *)in, *b = (__half *)inout;
            b[i] = __float2half(__half2float(a[i]) + __half2float(b[i]));
        }
    }
}
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *t) { sum16(in, inout, len, t, 1); }
static void sum_fp16(void *in, void *inout, int *len, MPI_Datatype *t) { sum16(in, inout, len, t, 0); }

static size_t nccl_bytes(ncclDataType_t t) { return t == ncclFloat ? 4 : 2; }

/* PreMulSum operators: ncclRedOpCreatePreMulSum's numbers, from ncclNumOps
 * on, each for one communicator and type, as NCCL's are; a destroyed one
 * is refused, as are one of another communicator and one never made. A
 * destroyed one's number is given again, as NCCL may: fsdp.c makes one a
 * reduce-scatter. */
struct PreMulSum {
    ncclComm_t comm;
    ncclDataType_t type;
    float scalar; /* the value of the type's scalar it was made with */
    bool live;
};
static std::mutex premul_lock;
static std::vector<PreMulSum> premuls;
/* op's operator, if it is a live one of communicator c; premul_lock held */
static PreMulSum *premul_live(ncclRedOp_t op, ncclComm_t c) {
    size_t i = (size_t)op - (size_t)ncclNumOps;
    if ((int)op < (int)ncclNumOps || i >= premuls.size() || !premuls[i].live ||
        premuls[i].comm != c)
        return NULL;
    return &premuls[i];
}
/* The scalar of op, a live PreMulSum of c and t, into *scalar; else 0 */
static int premul_scalar(ncclRedOp_t op, ncclComm_t c, ncclDataType_t t, float *scalar) {
    std::lock_guard<std::mutex> hold(premul_lock);
    const PreMulSum *p = premul_live(op, c);
    if (p && p->type == t) return *scalar = p->scalar, 1;
    fprintf(stderr, "emulator: an NCCL collective's operator is neither ncclSum nor a live "
                    "PreMulSum of its communicator and type\n");
    return 0;
}
/* n values of type t at x, each times the scalar, rounded to t as NCCL's
 * product of two values of t is */
static void premultiply(void *x, size_t n, ncclDataType_t t, float scalar) {
    for (size_t i = 0; i < n; i++)
        if (t == ncclFloat) ((float *)x)[i] *= scalar;
        else if (t == ncclBfloat16)
            ((__nv_bfloat16 *)x)[i] =
                __float2bfloat16(__bfloat162float(((__nv_bfloat16 *)x)[i]) * scalar);
        else ((__half *)x)[i] = __float2half(__half2float(((__half *)x)[i]) * scalar);
}
/* The MPI type and sum of an NCCL type, or 0 where the emulator has none */
static int mpi_sum_of(ncclDataType_t t, MPI_Datatype *type, MPI_Op *op) {
    static MPI_Op ops[2];
    static std::once_flag made;
    std::call_once(made, [] {
        MPI_Op_create(sum_bf16, 1, &ops[0]);
        MPI_Op_create(sum_fp16, 1, &ops[1]);
    });
    if (t == ncclFloat) return *type = MPI_FLOAT, *op = MPI_SUM, 1;
    if (t == ncclBfloat16) return *type = MPI_UINT16_T, *op = ops[0], 1;
    if (t == ncclFloat16) return *type = MPI_UINT16_T, *op = ops[1], 1;
    return 0;
}
static int buffers_ok(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes) {
    if ((!send_bytes || kind_of(send, send_bytes) == DEVICE) &&
        (!recv_bytes || kind_of(recv, recv_bytes) == DEVICE))
        return 1;
    fprintf(stderr, "emulator: an NCCL collective's buffers are not device memory "
                    "(NCCL reads and writes only the GPU's)\n");
    return 0;
}
/* An all-gather's or reduce-scatter's two buffers are apart, or the small
 * one (a rank's chunk) is the rank's own slice of the large one: NCCL's
 * in-place form. Any other overlap NCCL leaves undefined. */
static int in_place_ok(const void *large, size_t large_bytes, const void *small,
                       size_t small_bytes, int rank) {
    const char *l = (const char *)large, *s = (const char *)small;
    if (s + small_bytes <= l || l + large_bytes <= s || s == l + (size_t)rank * small_bytes)
        return 1;
    fprintf(stderr, "emulator: an NCCL collective's buffers overlap, and not as its in-place "
                    "form (a rank's chunk at its own slice of the whole)\n");
    return 0;
}

extern "C" {
ncclResult_t ncclGetVersion(int *version) {
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "unhandled system error";
    default: return "internal error";
    }
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    memset(id, 0, sizeof(*id));
    int color = (world * 4096 + id_counter++ % 4096) & 0x7fffffff; /* unique in the world */
    memcpy(id->internal, &color, sizeof(color));
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    int color;
    memcpy(&color, id.internal, sizeof(color));
    ncclComm *c = new ncclComm();
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &c->comm);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    int which[64], n = visible_gpus(which, 64);
    int mine = current_device < n ? which[current_device] : -1, dup = 0;
    std::vector<int> all((size_t)c->size);
    MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, c->comm);
    for (int r = 0; r < c->size; r++) dup |= r != c->rank && all[(size_t)r] == mine;
    if (c->size != nranks || c->rank != rank || dup) {
        if (dup) fprintf(stderr, "emulator: NCCL WARN Duplicate GPU detected: rank %d and another "
                                 "rank both on GPU %d\n", rank, mine);
        MPI_Comm_free(&c->comm);
        delete c;
        return ncclInvalidUsage;
    }
    *out = c;
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    MPI_Comm_free(&c->comm);
    delete c;
    return ncclSuccess;
}
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t t,
                                      ncclScalarResidence_t residence, ncclComm_t c) {
    MPI_Datatype type;
    MPI_Op sum;
    if (residence != ncclScalarHostImmediate || !mpi_sum_of(t, &type, &sum))
        return ncclInvalidArgument; /* the emulator reads only a host scalar, now */
    float f = t == ncclFloat      ? *(float *)scalar
              : t == ncclBfloat16 ? __bfloat162float(*(__nv_bfloat16 *)scalar)
                                  : __half2float(*(__half *)scalar);
    std::lock_guard<std::mutex> hold(premul_lock);
    size_t i = 0;
    while (i < premuls.size() && premuls[i].live) i++;
    if (i == premuls.size()) premuls.push_back(PreMulSum());
    premuls[i] = PreMulSum{c, t, f, true};
    *op = (ncclRedOp_t)((int)ncclNumOps + (int)i);
    return ncclSuccess;
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) {
    std::lock_guard<std::mutex> hold(premul_lock);
    PreMulSum *p = premul_live(op, c);
    if (!p) return ncclInvalidArgument;
    p->live = false;
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
    (void)c;
    *r = ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclComm_t c, cudaStream_t s) {
    size_t bytes = count * nccl_bytes(t);
    if (bytes > INT32_MAX) return ncclInvalidArgument;
    if (!buffers_ok(send, bytes, recv, bytes * (size_t)c->size) ||
        !in_place_ok(recv, bytes * (size_t)c->size, send, bytes, c->rank))
        return ncclInvalidArgument;
    if (!collective_runs(s)) return ncclSuccess;
    stream_op2(s, "ncclAllGather", send, recv);
    const void *in = send == (const char *)recv + (size_t)c->rank * bytes ? MPI_IN_PLACE : send;
    MPI_Allgather(in, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm);
    return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    MPI_Datatype type;
    MPI_Op sum;
    float scalar = 1.0f;
    int premul = op != ncclSum;
    if ((premul && !premul_scalar(op, c, t, &scalar)) || !mpi_sum_of(t, &type, &sum) ||
        count > INT32_MAX)
        return ncclInvalidArgument;
    size_t bytes = count * nccl_bytes(t);
    if (!buffers_ok(send, bytes * (size_t)c->size, recv, bytes) ||
        !in_place_ok(send, bytes * (size_t)c->size, recv, bytes, c->rank))
        return ncclInvalidArgument;
    if (!collective_runs(s)) return ncclSuccess;
    stream_op2(s, "ncclReduceScatter", send, recv);
    std::vector<char> copy;
    const char *in = (const char *)send;
    /* in place (MPI wants them apart), or premultiplied (the input stays as it was) */
    if (premul ||
        ((const char *)recv < in + bytes * (size_t)c->size && in < (const char *)recv + bytes)) {
        copy.assign(in, in + bytes * (size_t)c->size);
        in = copy.data();
    }
    if (premul) premultiply(copy.data(), count * (size_t)c->size, t, scalar);
    MPI_Reduce_scatter_block(in, recv, (int)count, type, sum, c->comm);
    return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    MPI_Datatype type;
    MPI_Op sum;
    if (op != ncclSum || !mpi_sum_of(t, &type, &sum) || count > INT32_MAX) return ncclInvalidArgument;
    size_t bytes = count * nccl_bytes(t);
    if (!buffers_ok(send, bytes, recv, bytes)) return ncclInvalidArgument;
    if (!collective_runs(s)) return ncclSuccess;
    stream_op2(s, "ncclAllReduce", send, recv);
    MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, type, sum, c->comm);
    return ncclSuccess;
}
} /* extern "C" */

/* ---- 6. what the host asked of the GPU, counted --------------------------------------
 * With FSDP_EMU_STATS=FILE each process adds a line to FILE as it exits:
 * its kernel launches, GEMMs, cudaMallocs, the main thread's waits for the
 * GPU (synchronizations, blocking copies), bytes zeroed, copies between host
 * and device, NCCL collectives, and how many of those were queued behind
 * all the work the other streams had queued ("serialized": overlapping none
 * of what was queued before them); then a line a kernel, "rank R kernel
 * NAME N": its launches (element-wise passes are for_each_kernel<fn>).
 * These are the GPU build's own choices, the same on a GPU (the emulator
 * only counts them), and they say what
 * the GPU's speed alone cannot: a step that mallocs (the pool missed), waits
 * (the queue drains and the GPU idles) or launches thousands of small
 * kernels (the host, at a few microseconds a launch, falls behind the GPU)
 * is slow on any GPU. make test-gpu-emu holds a step's counts (check l.). */
static void counts_write(void) {
    const char *path = getenv("FSDP_EMU_STATS"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = getenv("PMIX_RANK");
    if (!rank) rank = "0";
    char line[512];
    snprintf(line, sizeof line,
             "rank %s: launches %ld gemms %ld device_allocs %ld host_waits %ld "
             "memset_bytes %ld copies %ld collectives %ld serialized %ld\n",
             rank, counts.launches.load(), counts.gemms.load(), counts.device_allocs.load(),
             counts.host_waits.load(), counts.memset_bytes.load(), counts.copies.load(),
             counts.collectives.load(), counts.serialized.load());
    std::string all = line;
    std::map<std::string, long> by_name; /* a name's literal may sit at several addresses */
    for (const auto &k : *kernel_launches) by_name[k.first] += k.second;
    for (const auto &k : by_name) {
        snprintf(line, sizeof line, "rank %s kernel %s %ld\n", rank, k.first.c_str(), k.second);
        all += line;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644); /* one write: lines stay whole */
    if (fd < 0 || write(fd, all.data(), all.size()) != (ssize_t)all.size())
        fprintf(stderr, "emulator: FSDP_EMU_STATS=%s: cannot write the counts (%s)\n", path,
                strerror(errno));
    if (fd >= 0) close(fd);
}
/* The file is tried now, before MPI_Init, so a path it cannot write stops
 * every rank alike (section 1's settings_check says why before MPI_Init) */
__attribute__((constructor)) static void counts_begin(void) {
    main_thread = pthread_self(); /* constructors run on the main thread, before main */
    const char *path = getenv("FSDP_EMU_STATS");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        fprintf(stderr, "error: FSDP_EMU_STATS=%s: cannot write there (%s).\nHINT: name a file "
                        "in a folder that exists, or unset it.\n", path, strerror(errno));
        exit(2);
    }
    close(fd);
    kernel_launches = new std::map<const char *, long>;
    atexit(counts_write);
}

/* ---- 7. stream order, checked ----------------------------------------------------------
 * Work runs here as it is queued, one order of the many a GPU may take: on
 * a GPU the compute and communication streams run at once, and only events
 * (cudaStreamWaitEvent) and the host's waits order one stream's work after
 * another's. So a missing event passes here and races there. This section
 * finds it without a GPU: every stream, event and the host carry a Clock
 * (for each stream, how many of its operations are known to be done),
 * and every block of device memory (a cudaMalloc's, so a pool's block
 * reused for another buffer is the same block) remembers its last write
 * and the reads since. An operation that reads a block written on another
 * stream, or writes one read or written there, must know that operation
 * done; else the job stops, naming both. The host's threads count as one
 * (the communication thread hands its results over through a queue the
 * emulator does not see): what one has waited for, all know. */
struct Access {
    cudaStream_t stream;
    long t; /* the stream's operation number */
    const char *what;
};
struct BlockUse {
    Access write;              /* the last write (what NULL: none yet) */
    std::vector<Access> reads; /* since it, the last of each stream */
};
static std::mutex order_lock;
static Clock host_knows, default_stream; /* the legacy stream: cudaMemcpy, launches on 0 */
static std::vector<cudaStream_t> streams;
static std::map<uintptr_t, BlockUse> block_uses; /* by the block's start */
static int streams_created;

static Clock &clock_of(cudaStream_t s) { return s ? s->clock : default_stream; }
static void stream_name(char *buf, size_t len, cudaStream_t s) {
    if (s) snprintf(buf, len, "stream %d", s->number);
    else snprintf(buf, len, "the default stream");
}
static void order_stream_new(cudaStream_t s) {
    std::lock_guard<std::mutex> hold(order_lock);
    s->number = ++streams_created;
    streams.push_back(s);
}
static void order_stream_gone(cudaStream_t s) {
    std::lock_guard<std::mutex> hold(order_lock);
    streams.erase(std::remove(streams.begin(), streams.end(), s), streams.end());
}
/* Queued now: after all the host has waited for */
static Clock &enqueue(cudaStream_t s) {
    Clock &c = clock_of(s);
    c.join(host_knows);
    return c;
}
static void order_record(cudaEvent_t e, cudaStream_t s) {
    std::lock_guard<std::mutex> hold(order_lock);
    e->clock = enqueue(s);
}
static void order_wait_event(cudaStream_t s, cudaEvent_t e) {
    std::lock_guard<std::mutex> hold(order_lock);
    enqueue(s).join(e->clock);
}
static void order_host_waits_stream(cudaStream_t s) {
    std::lock_guard<std::mutex> hold(order_lock);
    host_knows.join(clock_of(s));
}
static void order_host_waits_event(cudaEvent_t e) {
    std::lock_guard<std::mutex> hold(order_lock);
    host_knows.join(e->clock);
}
static void order_host_waits_all(void) {
    std::lock_guard<std::mutex> hold(order_lock);
    host_knows.join(default_stream);
    for (cudaStream_t s : streams) host_knows.join(s->clock);
}
static void order_forget(const void *p) {
    std::lock_guard<std::mutex> hold(order_lock);
    block_uses.erase((uintptr_t)p);
}

/* `now` (on stream s, which knows `c`) comes after `before`, or the job stops */
static void ordered(const Access &before, const Access &now, const Clock &c, uintptr_t block,
                    const char *how) {
    if (!before.what || before.stream == now.stream || c.of(before.stream) >= before.t) return;
    char a[32], b[32];
    stream_name(a, sizeof a, before.stream), stream_name(b, sizeof b, now.stream);
    size_t bytes;
    {
        std::lock_guard<std::mutex> hold(memory_lock);
        bytes = lent[block].first;
    }
    fprintf(stderr,
            "emulator: a stream race on the device block at %p (%zu bytes): %s on %s %s it "
            "after %s on %s, and nothing orders the two: no event %s waited for, no wait of "
            "the host between. On a GPU they may run at once.\nHINT: record an event on %s "
            "after the first (event_record) and make %s wait for it (cudaStreamWaitEvent) "
            "before the second.\n",
            (void *)block, bytes, now.what, b, how, before.what, a, b, a, b);
    die();
}
void emu::stream_op(cudaStream_t s, const char *what, const Use *uses, int n) {
    std::lock_guard<std::mutex> hold(order_lock);
    Clock &c = enqueue(s);
    Access now = {s, c.of(s) + 1, what};
    c.raise(s, now.t);
    for (int i = 0; i < n; i++) {
        uintptr_t block = uses[i].ptr ? block_at(uses[i].ptr, 1).first : 0;
        if (!block) continue; /* NULL, or host memory (refused elsewhere) */
        BlockUse &u = block_uses[block];
        int how = uses[i].how;
        const char *verb = how == USE_ANY ? "uses" : how == USE_WRITE ? "writes" : "reads";
        ordered(u.write, now, c, block, verb);
        if (how != USE_READ) { /* a kernel's argument may be written: taken as written */
            for (const Access &r : u.reads) ordered(r, now, c, block, verb);
            u.write = now;
            u.reads.clear();
            continue;
        }
        auto same = std::find_if(u.reads.begin(), u.reads.end(),
                                 [&](const Access &r) { return r.stream == s; });
        if (same != u.reads.end()) *same = now;
        else u.reads.push_back(now);
    }
}
/* Whether an operation queued on s now waits for all that the other streams
 * have queued: a collective that does overlaps none of it (counted) */
static int after_all_queued(cudaStream_t s) {
    std::lock_guard<std::mutex> hold(order_lock);
    const Clock &c = enqueue(s);
    if (s && c.of(nullptr) < default_stream.of(nullptr)) return 0;
    for (cudaStream_t o : streams)
        if (o != s && c.of(o) < o->clock.of(o)) return 0;
    return 1;
}
/* An operation that reads one buffer and writes another (either may be NULL) */
static void stream_op2(cudaStream_t s, const char *what, const void *read, const void *written) {
    const Use uses[] = {{read, USE_READ}, {written, USE_WRITE}};
    emu::stream_op(s, what, uses, 2);
}
