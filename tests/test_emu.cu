/* ============================================================================
 * tests/test_emu.cu — the emulator (emu/) against what CUDA promises, so that
 * a pass of the GPU build on it means something. A plain CUDA program: it
 * builds with nvcc too, where what CUDA promises holds as well; the
 * refusals of misuse are the emulator's own (a GPU may fault, read garbage
 * or, NCCL's unchecked pointers, crash later).
 *
 *   make tests/test_emu-emu && mpirun -np 3 tests/test_emu-emu
 *   mpirun -np 1 tests/test_emu-emu host-pointer   (must stop: a host pointer)
 *   mpirun -np 1 tests/test_emu-emu deadlock       (must stop: stuck barriers)
 *   mpirun -np 1 tests/test_emu-emu misaligned     (must stop: a WMMA load off 32 bytes)
 *   mpirun -np 1 tests/test_emu-emu stream-race    (must stop: two streams, no event)
 *
 * Checked: __syncthreads orders a block's shared memory; shuffles over
 * whole warps; threads that returned no longer hold a barrier; a
 * WMMA product; a lane that reads a stored fragment before __syncwarp sees
 * stale memory (as on a GPU, where the warp's lanes store their own parts);
 * launches, copies and GEMMs CUDA refuses are refused; NCCL's all-gather,
 * reduce-scatter and all-reduce over the ranks, and two ranks on one GPU;
 * a buffer written on one stream and read on another after an event, or
 * after the host waited, is no race (the stream-order checker's passes).
 * Prints one line a check and "N passed, N failed".
 * ========================================================================== */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
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
namespace wmma = nvcuda::wmma;
/* C = A B (16 x 16 x 16, bf16 in, fp32 out), then each lane reads element
 * lane of C from memory: with `sync`, after __syncwarp */
__global__ void tile_product(float *c, float *seen, const __nv_bfloat16 *a,
                             const __nv_bfloat16 *b, int sync) {
    __shared__ __align__(32) float stage[256]; /* WMMA wants 32-byte alignment */
    for (int i = threadIdx.x; i < 256; i += 32) stage[i] = -1.0f;
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(stage, acc, 16, wmma::mem_row_major);
    if (sync) __syncwarp();
    seen[threadIdx.x] = stage[(threadIdx.x * 7 + 3) % 256]; /* another lane's element */
    __syncwarp();
    for (int i = threadIdx.x; i < 256; i += 32) c[i] = stage[i];
}
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

static void check_wmma(void) {
    __nv_bfloat16 ha[256], hb[256];
    float want[256], c[256], seen[32];
    for (int i = 0; i < 256; i++) ha[i] = __float2bfloat16((float)(i % 7) - 3.0f);
    for (int i = 0; i < 256; i++) hb[i] = __float2bfloat16((float)(i % 5) - 2.0f);
    for (int r = 0; r < 16; r++)
        for (int col = 0; col < 16; col++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++)
                s += __bfloat162float(ha[r * 16 + k]) * __bfloat162float(hb[k * 16 + col]);
            want[r * 16 + col] = s;
        }
    __nv_bfloat16 *a, *b;
    float *dc, *ds;
    cudaMalloc(&a, sizeof(ha));
    cudaMalloc(&b, sizeof(hb));
    cudaMalloc(&dc, sizeof(c));
    cudaMalloc(&ds, sizeof(seen));
    cudaMemcpy(a, ha, sizeof(ha), cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof(hb), cudaMemcpyHostToDevice);
    int stale = 0;
    for (int sync = 1; sync >= 0; sync--) {
        tile_product<<<1, 32>>>(dc, ds, a, b, sync);
        cudaMemcpy(c, dc, sizeof(c), cudaMemcpyDeviceToHost);
        cudaMemcpy(seen, ds, sizeof(seen), cudaMemcpyDeviceToHost);
        if (sync) {
            int ok = !memcmp(c, want, sizeof(c)); /* small integers: exact in fp32 */
            for (int t = 0; t < 32; t++) ok &= seen[t] == want[(t * 7 + 3) % 256];
            check(ok, "wmma: a 16x16x16 bf16 product, stored and read after __syncwarp");
        } else
            for (int t = 0; t < 32; t++) stale |= seen[t] == -1.0f;
    }
#ifdef FSDP_EMU /* a GPU may or may not show it: its lanes run together */
    check(stale, "wmma: a lane reading the store before __syncwarp sees stale memory");
#endif
    cudaFree(a), cudaFree(b), cudaFree(dc), cudaFree(ds);
}

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
    if (argc > 1 && !strcmp(argv[1], "misaligned")) {
        __nv_bfloat16 *a;
        float *c;
        cudaMalloc(&a, 512 * sizeof(*a));
        cudaMalloc(&c, 512 * sizeof(*c));
        tile_product<<<1, 32>>>(c, c + 256, a + 1, a + 256, 1); /* must not return */
        cudaDeviceSynchronize();
        printf("the misaligned load ran\n");
        return 0;
    }
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
    check_wmma();
    check_refusals();
    check_nccl();
    if (rank == 0) printf("%d passed, %d failed\n", passed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
