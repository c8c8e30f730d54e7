/* ============================================================================
 * tests/test_emu.cu — the emulator (dev/emu/) against what CUDA promises, so that
 * a pass of the GPU build on it means something. A plain CUDA program: it
 * builds with nvcc too, where what CUDA promises holds as well; the
 * refusals of misuse are the emulator's own (a GPU may fault, read garbage
 * or, NCCL's unchecked pointers, crash later).
 *
 *   make tests/test_emu-emu && mpirun -np 3 tests/test_emu-emu
 *   mpirun -np 1 tests/test_emu-emu host-pointer   (must stop: a host pointer)
 *   mpirun -np 1 tests/test_emu-emu deadlock       (must stop: stuck barriers)
 *   mpirun -np 1 tests/test_emu-emu misaligned     (must stop: an ldmatrix row off 16 bytes)
 *   mpirun -np 1 tests/test_emu-emu stream-race    (must stop: two streams, no event)
 *
 * Checked: __syncthreads orders a block's shared memory; shuffles over
 * whole warps; threads that returned no longer hold a barrier; cp.async's
 * copies are there after the wait, and a read before it sees stale bytes
 * (the PTX instructions' layouts are tests/test_kernels.cu's, on the
 * emulator and on a GPU alike, and their checks here the emulator's own);
 * launches, copies and GEMMs CUDA refuses are refused; NCCL's all-gather,
 * reduce-scatter and all-reduce over the ranks, and two ranks on one GPU;
 * a buffer written on one stream and read on another after an event, or
 * after the host waited, is no race (the stream-order checker's passes).
 * Prints one line a check and "N passed, N failed".
 * ========================================================================== */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

static int passed, failed, rank;
static void check(int ok, const char *what) {
    if (rank == 0) printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    ok ? passed++ : failed++;
}

/* each thread writes its slot, the block meets, each reads its mirror's */
__global__ void mirror(int *out, int n) {
    __shared__ int s[256];
    int t = threadIdx.x;
    s[t] = t * 10;
    __syncthreads();
    if (t < n) out[t] = s[n - 1 - t];
}
/* a warp's butterfly sum, in each of two warps */
__global__ void warp_sums(int *out) {
    int v = threadIdx.x;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    out[threadIdx.x] = v;
}
/* half the block returns at once; the rest still meet at the barrier */
__global__ void early_exit(int *out) {
    __shared__ int s[64];
    if (threadIdx.x >= 32) return;
    s[threadIdx.x] = 1;
    __syncthreads();
    int sum = 0;
    for (int i = 0; i < 32; i++) sum += s[i];
    out[threadIdx.x] = sum;
}
#ifdef FSDP_EMU /* the PTX instructions: kernels/flash.h defines them for nvcc */
/* Each lane copies 16 bytes by cp.async (lane 31 only 8, and zeros after);
 * with `early` it also reads its neighbour's before waiting, then waits,
 * meets the warp and reads its own */
__global__ void async_tile(int *seen, int *got, const int *src, int early) {
    __shared__ __align__(16) int s[32 * 4];
    int l = threadIdx.x;
    for (int i = 0; i < 4; i++) s[l * 4 + i] = -1;
    __syncwarp();
    cp_async_16(s + l * 4, src + l * 4, l == 31 ? 8 : 16);
    cp_async_commit();
    if (early) seen[l] = s[(l + 1) % 32 * 4];
    cp_async_wait<0>();
    __syncwarp();
    for (int i = 0; i < 4; i++) got[l * 4 + i] = s[l * 4 + i];
}
/* ldmatrix with row addresses 2 bytes off 16 (must stop) */
__global__ void misaligned_rows(uint32_t *out) {
    __shared__ __align__(16) uint16_t s[17 * 16];
    uint32_t r[4];
    ldmatrix_x4(r, s + 1 + threadIdx.x % 16 * 16);
    out[threadIdx.x] = r[0];
}
#endif
__global__ void touch(int *p) { p[threadIdx.x] = 1; }
__global__ void sum_into(int *out, const int *in) { out[threadIdx.x] += in[threadIdx.x]; }
/* lane 0 waits at the block's barrier, the others at their warp's */
__global__ void stuck(void) {
    if (threadIdx.x == 0) __syncthreads();
    else __syncwarp();
}

static void check_kernels(void) {
    int *d, h[256];
    cudaMalloc(&d, 256 * sizeof(int));
    mirror<<<1, 256>>>(d, 256);
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    int ok = 1;
    for (int t = 0; t < 256; t++) ok &= h[t] == (255 - t) * 10;
    check(ok, "__syncthreads: every thread reads the slot its mirror wrote");
    warp_sums<<<1, 64>>>(d);
    cudaMemcpy(h, d, 64 * sizeof(int), cudaMemcpyDeviceToHost);
    ok = 1;
    for (int t = 0; t < 64; t++) ok &= h[t] == (t < 32 ? 0 : 32 * 32) + 31 * 32 / 2;
    check(ok, "__shfl_xor_sync: a butterfly sums each warp on its every lane");
    early_exit<<<1, 64>>>(d);
    cudaMemcpy(h, d, 32 * sizeof(int), cudaMemcpyDeviceToHost);
    ok = 1;
    for (int t = 0; t < 32; t++) ok &= h[t] == 32;
    check(ok, "__syncthreads after half the block returned: the rest meet");
    cudaFree(d);
}

#ifdef FSDP_EMU
/* cp.async: what a thread waited for is there, a short copy ends in zeros,
 * and (in index order, where the emulator lands a copy at its wait) a read
 * before the copier's wait sees the old bytes, as a GPU may */
static void check_async_copies(void) {
    int hsrc[128], got[128], seen[32];
    for (int i = 0; i < 128; i++) hsrc[i] = 1000 + i;
    int *src, *dg, *ds;
    cudaMalloc(&src, sizeof(hsrc)), cudaMalloc(&dg, sizeof(got)), cudaMalloc(&ds, sizeof(seen));
    cudaMemcpy(src, hsrc, sizeof(hsrc), cudaMemcpyHostToDevice);
    async_tile<<<1, 32>>>(ds, dg, src, 1);
    cudaMemcpy(got, dg, sizeof(got), cudaMemcpyDeviceToHost);
    cudaMemcpy(seen, ds, sizeof(seen), cudaMemcpyDeviceToHost);
    int ok = 1, stale = 0;
    for (int i = 0; i < 128; i++) ok &= got[i] == (i >= 126 ? 0 : hsrc[i]);
    for (int l = 0; l < 32; l++) stale |= seen[l] == -1;
    check(ok, "cp.async: after cp.async.wait_group, the copy (a short one, then zeros)");
    const char *order = getenv("FSDP_EMU_ORDER");
    if (!order || strcmp(order, "reverse"))
        check(stale, "cp.async: a read before the copier's wait sees the old bytes");
    cudaFree(src), cudaFree(dg), cudaFree(ds);
}
#endif

/* One stream writes, another reads: ordered by an event, or by the host
 * waiting for the first; with `order` 0, by nothing (a race: must stop) */
static void two_streams(int order) {
    cudaStream_t a, b;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    int *x, *y, h[32];
    cudaMalloc(&x, 32 * sizeof(int)), cudaMalloc(&y, 32 * sizeof(int));
    cudaMemsetAsync(y, 0, 32 * sizeof(int), b);
    cudaStreamSynchronize(b);
    touch<<<1, 32, 0, a>>>(x);
    if (order == 1) {
        cudaEvent_t e;
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        cudaEventRecord(e, a);
        cudaStreamWaitEvent(b, e, 0);
        cudaEventDestroy(e);
    } else if (order == 2) {
        cudaStreamSynchronize(a);
    }
    sum_into<<<1, 32, 0, b>>>(y, x);
    cudaMemcpyAsync(h, y, sizeof(h), cudaMemcpyDeviceToHost, b);
    cudaStreamSynchronize(b);
    int ok = 1;
    for (int i = 0; i < 32; i++) ok &= h[i] == 1;
    check(ok, order == 1 ? "two streams, ordered by an event: the read sees the write"
                         : "two streams, ordered by the host's wait: the read sees the write");
    cudaFree(x), cudaFree(y);
    cudaStreamDestroy(a), cudaStreamDestroy(b);
}

static void check_refusals(void) {
    int *d, h[4] = {0};
    cudaMalloc(&d, sizeof(h));
    cudaGetLastError();
    touch<<<1, 1025>>>(d);
    check(cudaGetLastError() == cudaErrorInvalidConfiguration,
          "a block of 1025 threads: cudaErrorInvalidConfiguration");
    check(cudaMemcpy(d, h, sizeof(h), cudaMemcpyDeviceToHost) != cudaSuccess,
          "a copy whose direction is the wrong way round fails");
    cudaGetLastError();
    cublasHandle_t handle;
    cublasCreate(&handle);
    float one = 1.0f, zero = 0.0f;
    check(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, (float *)d, 2, (float *)d,
                      4, &zero, (float *)d, 4) == CUBLAS_STATUS_INVALID_VALUE,
          "cublasSgemm with lda < m: CUBLAS_STATUS_INVALID_VALUE");
    cublasDestroy(handle);
    cudaFree(d);
}

/* NCCL over the ranks: rank r contributes r + 1 + i */
static void check_nccl(void) {
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    cudaSetDevice(rank);
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, world, id, rank) != ncclSuccess) {
        check(0, "ncclCommInitRank, a GPU a rank");
        return;
    }
    const int n = 5;
    float *d, h[64];
    cudaMalloc(&d, sizeof(float) * n * world);
    for (int i = 0; i < n; i++) h[i] = (float)(rank + 1 + i);
    cudaMemcpy(d + rank * n, h, sizeof(float) * n, cudaMemcpyHostToDevice);
    ncclAllGather(d + rank * n, d, n, ncclFloat, comm, 0); /* in place */
    cudaMemcpy(h, d, sizeof(float) * n * world, cudaMemcpyDeviceToHost);
    int ok = 1;
    for (int r = 0; r < world; r++)
        for (int i = 0; i < n; i++) ok &= h[r * n + i] == (float)(r + 1 + i);
    check(ok, "ncclAllGather in place: every rank's chunk in rank order");
    float *out;
    cudaMalloc(&out, sizeof(float) * n);
    for (int i = 0; i < n * world; i++) h[i] = (float)(rank + 1);
    cudaMemcpy(d, h, sizeof(float) * n * world, cudaMemcpyHostToDevice);
    ncclReduceScatter(d, out, n, ncclFloat, ncclSum, comm, 0);
    cudaMemcpy(h, out, sizeof(float) * n, cudaMemcpyDeviceToHost);
    ok = 1;
    for (int i = 0; i < n; i++) ok &= h[i] == (float)(world * (world + 1) / 2);
    check(ok, "ncclReduceScatter: each rank's chunk, summed over the ranks");
    for (int i = 0; i < n * world; i++) h[i] = (float)(rank + 1);
    cudaMemcpy(d, h, sizeof(float) * n * world, cudaMemcpyHostToDevice);
    ncclReduceScatter(d, d + rank * n, n, ncclFloat, ncclSum, comm, 0); /* in place */
    cudaMemcpy(h, d + rank * n, sizeof(float) * n, cudaMemcpyDeviceToHost);
    ok = 1;
    for (int i = 0; i < n; i++) ok &= h[i] == (float)(world * (world + 1) / 2);
    check(ok, "ncclReduceScatter in place: the chunk over the rank's own slice of the input");
    check(ncclReduceScatter(d, d + 1, n, ncclFloat, ncclSum, comm, 0) != ncclSuccess,
          "ncclReduceScatter into its input other than in place is refused (the emulator's check: "
          "NCCL leaves it undefined)");
    ncclAllReduce(out, out, n, ncclFloat, ncclSum, comm, 0);
    cudaMemcpy(h, out, sizeof(float) * n, cudaMemcpyDeviceToHost);
    check(h[0] == (float)(world * world * (world + 1) / 2), "ncclAllReduce in place");
    check(ncclAllGather(h, d, n, ncclFloat, comm, 0) != ncclSuccess,
          "ncclAllGather from host memory is refused (the emulator's check)");
    cudaFree(d), cudaFree(out);
    ncclCommDestroy(comm);
    if (world < 2) return;
    cudaSetDevice(0); /* every rank on GPU 0: NCCL refuses */
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    check(ncclCommInitRank(&comm, world, id, rank) != ncclSuccess,
          "ncclCommInitRank with two ranks on one GPU is refused");
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 1 && !strcmp(argv[1], "host-pointer")) {
        static int host[32];
        touch<<<1, 32>>>(host); /* must not return */
        cudaDeviceSynchronize();
        printf("the kernel ran on host memory\n");
        return 0;
    }
#ifdef FSDP_EMU
    if (argc > 1 && !strcmp(argv[1], "misaligned")) {
        uint32_t *out;
        cudaMalloc(&out, 32 * sizeof(*out));
        misaligned_rows<<<1, 32>>>(out); /* must not return */
        cudaDeviceSynchronize();
        printf("the misaligned load ran\n");
        return 0;
    }
#endif
    if (argc > 1 && !strcmp(argv[1], "stream-race")) {
        two_streams(0); /* must not return */
        printf("the race ran\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "deadlock")) {
        stuck<<<1, 64>>>(); /* must not return */
        cudaDeviceSynchronize();
        printf("the kernel finished\n");
        return 0;
    }
    check_kernels();
    two_streams(1);
    two_streams(2);
#ifdef FSDP_EMU
    check_async_copies();
#endif
    check_refusals();
    check_nccl();
    if (rank == 0) printf("%d passed, %d failed\n", passed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
