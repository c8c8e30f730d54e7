/* dev/bench/bench_gpu.cu — what the GPUs themselves can do, to set fsdp-gpu's figures beside.
 *
 *   mpirun -np G dev/bench/bench_gpu [--batch B] [--width D] [--tf32 | --bf16] [--max-mib M]
 *                                [--vocab V]
 *
 * One rank per GPU (make bench-gpu runs it; build: make dev/bench/bench_gpu).
 *
 * (i)  cublasSgemm at the shapes of one residual block of fsdp.c's model,
 *      fc1 (D -> 4D) and fc2 (4D -> D), for B rows: each layer's forward and
 *      its two backward GEMMs (dinp and dweight), in the row-major layout
 *      fsdp.c uses (weights stored (out, in), as PyTorch's Linear). Prints
 *      GFLOP/s per shape and over all six together (total FLOPs / total
 *      time: the FLOP-weighted mean). fp32 by default; --tf32 lets cuBLAS
 *      round the inputs to TF32 on tensor cores, as fsdp-gpu --tf32 does;
 *      --bf16 multiplies bf16 copies of the inputs on the tensor cores with
 *      fp32 accumulation and output (cublasGemmEx), as fsdp-gpu
 *      --param-dtype bf16 does (its packing to 16 bits not counted here).
 * (iii) With --vocab V: GPT-2's lm_head, its three GEMMs (logits = x .
 *      wte^T, and backward's two) at B rows, width D and V logits, whose
 *      rows are V apart or padded to a multiple of 64 (fsdp-gpu's
 *      logits_stride), side by side: what the padding buys. With --bf16
 *      all in bf16 (the logits and gradients too, as fsdp-gpu holds them).
 * (ii) With >= 2 ranks: NCCL all-gather and reduce-scatter of 1 MiB .. M MiB
 *      (default 1 GiB) in bus bandwidth as nccl-tests defines it: size = the
 *      full (gathered) buffer, algbw = size / time, busbw = algbw * (N-1)/N,
 *      which is what each link carries in a ring, so it compares across N.
 *
 * With no GPU it says so, with a HINT, and exits 1. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- checks: what failed, where, and what to do ---------------------------- */
static void fail_at(const char *call, const char *why, const char *file, int line,
                    const char *hint) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "error (rank %d): %s failed: %s\n  at %s:%d\nHINT: %s\n", rank, call, why,
            file, line, hint);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
#define cudaCheck(x)                                                                           \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess)                                                                 \
            fail_at(#x, cudaGetErrorString(e_), __FILE__, __LINE__,                            \
                    "nvidia-smi shows whether the GPU is there and how much memory is free; "  \
                    "try a smaller --batch, --width or --max-mib");                            \
    } while (0)
#define cublasCheck(x)                                                                         \
    do {                                                                                       \
        cublasStatus_t s_ = (x);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            fail_at(#x, cublasGetStatusString(s_), __FILE__, __LINE__,                         \
                    "check the cuBLAS install (the CUDA toolkit's lib64) matches the driver"); \
    } while (0)
#define ncclCheck(x)                                                                           \
    do {                                                                                       \
        ncclResult_t r_ = (x);                                                                 \
        if (r_ != ncclSuccess)                                                                 \
            fail_at(#x, ncclGetErrorString(r_), __FILE__, __LINE__,                            \
                    "one rank per GPU; NCCL_DEBUG=INFO says more");                            \
    } while (0)

/* ---- (i) the GEMMs of one block --------------------------------------------- */
/* Row-major C(M,N) = A(M,K) . W(N,K)^T is, to column-major cuBLAS, C^T = W^T' . A^T:
 * every row-major matrix is its own transpose in column-major, so each call
 * below names the layer's operation and the cuBLAS arguments that do it. */
typedef struct {
    const char *name;
    cublasOperation_t ta, tb;
    int m, n, k; /* cuBLAS (column-major) sizes */
    const float *a, *b;
    int lda, ldb;
    float beta; /* backward accumulates (+=) into its output, as fsdp.c's does */
    float *c;
    int ldc;
    const __nv_bfloat16 *a16, *b16; /* --bf16: the inputs' bf16 copies, else NULL */
    int c16;                        /* c holds bf16 values (lm_head's), else fp32 */
} Gemm;

__global__ void fill(float *x, size_t n, unsigned seed) { /* values in [-1, 1) */
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    x[i] = (float)(h >> 8) / 8388608.0f - 1.0f;
}
static float *device_array(size_t n, unsigned seed) {
    float *x = NULL;
    cudaCheck(cudaMalloc(&x, n * sizeof(float)));
    fill<<<(unsigned)((n + 255) / 256), 256>>>(x, n, seed);
    cudaCheck(cudaGetLastError());
    return x;
}

static void gemm_run(cublasHandle_t h, const Gemm *g) {
    const float one = 1.0f;
    if (g->a16) {
        cublasCheck(cublasGemmEx(h, g->ta, g->tb, g->m, g->n, g->k, &one, g->a16, CUDA_R_16BF,
                                  g->lda, g->b16, CUDA_R_16BF, g->ldb, &g->beta, g->c,
                                  g->c16 ? CUDA_R_16BF : CUDA_R_32F, g->ldc, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
        return;
    }
    cublasCheck(cublasSgemm(h, g->ta, g->tb, g->m, g->n, g->k, &one, g->a, g->lda, g->b, g->ldb,
                             &g->beta, g->c, g->ldc));
}

__global__ void to_bf16(__nv_bfloat16 *out, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(x[i]);
}
/* A bf16 copy of the n floats at x, for --bf16 */
static __nv_bfloat16 *bf16_copy(const float *x, size_t n) {
    __nv_bfloat16 *y = NULL;
    cudaCheck(cudaMalloc(&y, n * sizeof(__nv_bfloat16)));
    to_bf16<<<(unsigned)((n + 255) / 256), 256>>>(y, x, n);
    cudaCheck(cudaGetLastError());
    return y;
}

/* Seconds per call: a few warm-up calls (cuBLAS picks its kernel), then
 * enough calls for about 0.2 s, timed with events on the stream. */
static double gemm_seconds(cublasHandle_t h, const Gemm *g) {
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    float ms = 0.0f;
    int reps = 3;
    for (int round = 0; round < 2; round++) { /* round 0 warms up and sizes round 1 */
        cudaCheck(cudaEventRecord(t0));
        for (int i = 0; i < reps; i++) gemm_run(h, g);
        cudaCheck(cudaEventRecord(t1));
        cudaCheck(cudaEventSynchronize(t1));
        cudaCheck(cudaEventElapsedTime(&ms, t0, t1));
        if (round == 0) {
            double per = ms / reps;
            reps = per > 0.0 ? (int)(200.0 / per) : 1000;
            reps = reps < 3 ? 3 : reps > 1000 ? 1000 : reps;
        }
    }
    cudaCheck(cudaEventDestroy(t0));
    cudaCheck(cudaEventDestroy(t1));
    return 1e-3 * ms / reps;
}

/* Returns the FLOP-weighted mean GFLOP/s over the six GEMMs; rank 0 prints each. */
static double bench_gemms(int B, int D, int tf32, int bf16, int rank) {
    int H = 4 * D;                                         /* fc1's output width */
    float *x = device_array((size_t)B * D, 1);             /* (B, D)  block input / fc2 output */
    float *h = device_array((size_t)B * H, 2);             /* (B, 4D) fc1 output / fc2 input */
    float *w1 = device_array((size_t)H * D, 3);            /* (4D, D) fc1.weight */
    float *w2 = device_array((size_t)D * H, 4);            /* (D, 4D) fc2.weight */
    float *dx = device_array((size_t)B * D, 5), *dh = device_array((size_t)B * H, 6);
    float *dw1 = device_array((size_t)H * D, 7), *dw2 = device_array((size_t)D * H, 8);
    cublasHandle_t cb;
    cublasCheck(cublasCreate(&cb));
    cublasCheck(cublasSetMathMode(cb, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    const cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;
    /* name, cuBLAS: op(A), op(B), m, n, k, A, B, lda, ldb, beta, C, ldc (bf16 copies: below) */
    Gemm g[6] = {
        /* forward: out(B,out) = inp(B,in) . W(out,in)^T */
        {"fc1 forward  h(B,4D) = x(B,D) . W1(4D,D)^T", T_, N_, H, B, D, w1, x, D, D, 0, h, H, NULL,
         NULL, 0},
        {"fc2 forward  x(B,D) = h(B,4D) . W2(D,4D)^T", T_, N_, D, B, H, w2, h, H, H, 0, x, D, NULL,
         NULL, 0},
        /* dinp(B,in) += dout(B,out) . W(out,in) */
        {"fc1 dinp     dx(B,D) += dh(B,4D) . W1(4D,D)", N_, N_, D, B, H, w1, dh, D, H, 1, dx, D,
         NULL, NULL, 0},
        {"fc2 dinp     dh(B,4D) += dx(B,D) . W2(D,4D)", N_, N_, H, B, D, w2, dx, H, D, 1, dh, H,
         NULL, NULL, 0},
        /* dweight(out,in) += dout(B,out)^T . inp(B,in) */
        {"fc1 dweight  dW1(4D,D) += dh^T(4D,B) . x(B,D)", N_, T_, D, H, B, x, dh, D, H, 1, dw1, D,
         NULL, NULL, 0},
        {"fc2 dweight  dW2(D,4D) += dx^T(D,B) . h(B,4D)", N_, T_, H, D, B, h, dx, H, D, 1, dw2, H,
         NULL, NULL, 0},
    };
    const float *inputs[6] = {x, h, w1, w2, dx, dh};
    size_t sizes[6] = {(size_t)B * D, (size_t)B * H, (size_t)H * D,
                       (size_t)D * H, (size_t)B * D, (size_t)B * H};
    __nv_bfloat16 *copies[6] = {NULL};
    for (int i = 0; i < 6 && bf16; i++) copies[i] = bf16_copy(inputs[i], sizes[i]);
    for (int i = 0; i < 6 && bf16; i++) /* each GEMM's inputs by their fp32 arrays' copies */
        for (int j = 0; j < 6; j++) {
            if (g[i].a == inputs[j]) g[i].a16 = copies[j];
            if (g[i].b == inputs[j]) g[i].b16 = copies[j];
        }
    double flops = 2.0 * B * D * H, total_s = 0.0; /* every one of the six: 2*B*D*4D */
    if (rank == 0)
        printf("cuBLAS %s (%s), B=%d rows, D=%d: one block's GEMMs, %.1f GFLOP each\n",
               bf16 ? "GemmEx" : "SGEMM",
               bf16 ? "bf16 inputs on tensor cores, fp32 accumulation"
                    : tf32 ? "TF32 tensor cores allowed" : "fp32",
               B, D, flops / 1e9);
    for (int i = 0; i < 6; i++) {
        double s = gemm_seconds(cb, &g[i]);
        total_s += s;
        if (rank == 0)
            printf("  %-48s %9.3f ms %10.1f GFLOP/s\n", g[i].name, 1e3 * s, flops / s / 1e9);
    }
    cublasCheck(cublasDestroy(cb));
    for (int i = 0; i < 6; i++)
        if (copies[i]) cudaCheck(cudaFree(copies[i]));
    float *all[] = {x, h, w1, w2, dx, dh, dw1, dw2};
    for (int i = 0; i < 8; i++) cudaCheck(cudaFree(all[i]));
    return 6.0 * flops / total_s / 1e9;
}

/* ---- (iii) lm_head, its logits' rows V apart or padded ------------------------- */
/* One of lm_head's three GEMMs at one leading dimension (cuBLAS's view, as
 * fsdp-gpu's matmul_forward and matmul_backward call it): 0 forward,
 * logits^T (V, B) = wte^T . x^T; 1 dinp, dx^T (D, B) = wte (D, V as cuBLAS
 * sees it) . dlogits^T; 2 dweight, dwte^T (D, V) += x^T . dlogits. */
static Gemm lm_head_gemm(int which, int B, int D, int V, int ld, float *x, float *w, float *logits,
                         float *dx, float *dw, const __nv_bfloat16 *const *c16) {
    const cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;
    Gemm g[3] = {
        {"forward  logits = x . wte^T", T_, N_, V, B, D, w, x, D, D, 0, logits, ld, NULL, NULL, 0},
        {"dinp     dx = dlogits . wte", N_, N_, D, B, V, w, logits, D, ld, 0, dx, D, NULL, NULL,
         0},
        {"dweight  dwte += dlogits^T . x", N_, T_, D, V, B, x, logits, D, ld, 1, dw, D, NULL, NULL,
         0},
    };
    Gemm out = g[which];
    if (c16) { /* every operand and result in bf16, as fsdp-gpu --param-dtype bf16 holds them */
        out.a16 = which == 2 ? c16[0] : c16[1]; /* x or wte */
        out.b16 = which == 0 ? c16[0] : c16[2]; /* x or the logits' gradient */
        out.c = which == 0 ? (float *)c16[2] : which == 1 ? (float *)c16[3] : (float *)c16[4];
        out.c16 = 1;
    }
    return out;
}

/* The three at ld = V and at V rounded up to 64, B rows of width D;
 * prints each and the sum, rank 0. The buffers are sized for the padded
 * rows; the unpadded run uses their first B x V. */
static void bench_lm_head(int B, int D, int V, int tf32, int bf16, int rank) {
    int padded = (V + 63) / 64 * 64;
    size_t nl = (size_t)B * padded;
    float *x = device_array((size_t)B * D, 11), *w = device_array((size_t)V * D, 12),
          *logits = device_array(nl, 13), *dx = device_array((size_t)B * D, 14),
          *dw = device_array((size_t)V * D, 15);
    __nv_bfloat16 *c16[5] = {NULL};
    if (bf16) { /* x, wte, the logits (and their gradient, written over them), dx, dwte */
        c16[0] = bf16_copy(x, (size_t)B * D), c16[1] = bf16_copy(w, (size_t)V * D);
        c16[2] = bf16_copy(logits, nl), c16[3] = bf16_copy(dx, (size_t)B * D);
        c16[4] = bf16_copy(dw, (size_t)V * D);
    }
    cublasHandle_t cb;
    cublasCheck(cublasCreate(&cb));
    cublasCheck(cublasSetMathMode(cb, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    double flops = 2.0 * B * D * V, total[2] = {0.0, 0.0};
    if (rank == 0)
        printf("lm_head, %s: B=%d rows, D=%d, V=%d logits a row, %.1f GFLOP each; the logits' "
               "rows %d apart | %d apart (fsdp-gpu's logits_stride)\n",
               bf16 ? "bf16 in and out" : tf32 ? "TF32" : "fp32", B, D, V, flops / 1e9, V,
               padded);
    for (int which = 0; which < 3; which++) {
        double s[2];
        for (int p = 0; p < 2; p++) {
            Gemm g = lm_head_gemm(which, B, D, V, p ? padded : V, x, w, logits, dx, dw,
                                  bf16 ? c16 : NULL);
            s[p] = gemm_seconds(cb, &g);
            total[p] += s[p];
        }
        if (rank == 0)
            printf("  %-32s %8.3f ms %8.1f TFLOP/s | %8.3f ms %8.1f TFLOP/s\n",
                   lm_head_gemm(which, B, D, V, V, x, w, logits, dx, dw, NULL).name, 1e3 * s[0],
                   flops / s[0] / 1e12, 1e3 * s[1], flops / s[1] / 1e12);
    }
    if (rank == 0)
        printf("  all three                        %8.3f ms %8.1f TFLOP/s | %8.3f ms %8.1f "
               "TFLOP/s\n",
               1e3 * total[0], 3 * flops / total[0] / 1e12, 1e3 * total[1],
               3 * flops / total[1] / 1e12);
    cublasCheck(cublasDestroy(cb));
    for (int i = 0; i < 5; i++)
        if (c16[i]) cudaCheck(cudaFree(c16[i]));
    float *all[] = {x, w, logits, dx, dw};
    for (int i = 0; i < 5; i++) cudaCheck(cudaFree(all[i]));
}

/* ---- (ii) NCCL bus bandwidth -------------------------------------------------- */
/* Seconds per collective, the slowest rank's (as nccl-tests reports). */
static double nccl_seconds(int gather, float *part, float *full, size_t count, ncclComm_t comm,
                           cudaStream_t st) {
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    const int warm = 3, reps = 20;
    for (int i = 0; i < warm + reps; i++) {
        if (i == warm) {
            cudaCheck(cudaStreamSynchronize(st));
            MPI_Barrier(MPI_COMM_WORLD);
            cudaCheck(cudaEventRecord(t0, st));
        }
        if (gather)
            ncclCheck(ncclAllGather(part, full, count, ncclFloat, comm, st));
        else
            ncclCheck(ncclReduceScatter(full, part, count, ncclFloat, ncclSum, comm, st));
    }
    cudaCheck(cudaEventRecord(t1, st));
    cudaCheck(cudaEventSynchronize(t1));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, t0, t1));
    cudaCheck(cudaEventDestroy(t0));
    cudaCheck(cudaEventDestroy(t1));
    double s = 1e-3 * ms / reps, slowest = 0.0;
    MPI_Allreduce(&s, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static void bench_nccl(int rank, int world, long max_mib) {
    ncclUniqueId id;
    if (rank == 0) ncclCheck(ncclGetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    ncclCheck(ncclCommInitRank(&comm, world, id, rank));
    cudaStream_t st;
    cudaCheck(cudaStreamCreate(&st));
    size_t max_bytes = (size_t)max_mib << 20;
    float *full = device_array(max_bytes / sizeof(float), 9);
    float *part = device_array(max_bytes / sizeof(float) / world + 1, 10);
    if (rank == 0)
        printf("NCCL %d.%d.%d on %d ranks, one GPU each; busbw = algbw * (N-1)/N (nccl-tests)\n"
               "  %-10s %24s %24s\n",
               NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, world, "size", "all_gather busbw",
               "reduce_scatter busbw");
    for (size_t bytes = (size_t)1 << 20; bytes <= max_bytes; bytes *= 2) {
        size_t count = bytes / sizeof(float) / world; /* elements per rank's shard */
        double size = (double)count * world * sizeof(float), f = (world - 1.0) / world;
        double ag = nccl_seconds(1, part, full, count, comm, st);
        double rs = nccl_seconds(0, part, full, count, comm, st);
        if (rank == 0)
            printf("  nccl %5zu MiB   all_gather %9.2f GB/s   reduce_scatter %9.2f GB/s\n",
                   bytes >> 20, size / ag * f / 1e9, size / rs * f / 1e9);
    }
    cudaCheck(cudaFree(full));
    cudaCheck(cudaFree(part));
    cudaCheck(cudaStreamDestroy(st));
    ncclCheck(ncclCommDestroy(comm));
}

/* ---- main ------------------------------------------------------------------------ */
/* The integer after argv[*i], or -1 when it is missing or outside [lo, hi]. */
static long arg_value(int argc, char **argv, int *i, long lo, long hi) {
    char *end = NULL;
    long v = *i + 1 < argc ? strtol(argv[*i + 1], &end, 10) : -1;
    *i += 1;
    return end && *end == '\0' && v >= lo && v <= hi ? v : -1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1, local = 0, local_n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm node; /* the ranks on this machine: they share its GPUs */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_n);
    long B = 4096, D = 4096, max_mib = 1024, V = 0;
    int tf32 = 0, bf16 = 0, bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--batch"))
            bad = (B = arg_value(argc, argv, &i, 1, 1 << 20)) < 0;
        else if (!strcmp(argv[i], "--width"))
            bad = (D = arg_value(argc, argv, &i, 1, 1 << 14)) < 0;
        else if (!strcmp(argv[i], "--max-mib"))
            bad = (max_mib = arg_value(argc, argv, &i, 1, 1 << 16)) < 0;
        else if (!strcmp(argv[i], "--vocab"))
            bad = (V = arg_value(argc, argv, &i, 2, 1 << 20)) < 0;
        else if (!strcmp(argv[i], "--tf32"))
            tf32 = 1;
        else if (!strcmp(argv[i], "--bf16"))
            bf16 = 1;
        else
            bad = 1;
    }
    if (bad) { /* every rank parses the same argv, so every rank stops here */
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np GPUS dev/bench/bench_gpu [--batch B (1..2^20)] "
                            "[--width D (1..2^14)] [--tf32 | --bf16] [--max-mib M (1..65536)] "
                            "[--vocab V (2..2^20)]\n");
        MPI_Finalize();
        return 2;
    }
    /* One GPU per rank, chosen by the rank's place on its node. Every rank
     * learns whether all found theirs, so all exit together. */
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    int ok = e == cudaSuccess && devices > local ? 1 : 0, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (!ok && local == 0 && (e != cudaSuccess || devices == 0))
            fprintf(stderr, "error: no CUDA GPU visible to rank %d (cudaGetDeviceCount: %s)\n"
                            "HINT: run on a machine with an NVIDIA GPU (nvidia-smi -L lists "
                            "them); check the driver and CUDA_VISIBLE_DEVICES\n",
                    rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        else if (!ok && local == devices)
            fprintf(stderr, "error: %d ranks on this node but %d GPU(s)\n"
                            "HINT: one rank per GPU: mpirun -np %d dev/bench/bench_gpu ...\n",
                    local_n, devices, devices);
        MPI_Finalize();
        return 1;
    }
    cudaCheck(cudaSetDevice(local));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, local));
    if (rank == 0) printf("GPU 0: %s, %d rank(s)\n", prop.name, world);

    double mean = bench_gemms((int)B, (int)D, tf32, bf16, rank), lo = 0.0, hi = 0.0;
    MPI_Reduce(&mean, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&mean, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("gemm mean (FLOP-weighted: total FLOPs / total time), GPU 0: %.1f GFLOP/s\n", mean);
        if (world > 1)
            printf("  the same on each of the %d GPUs: %.1f .. %.1f GFLOP/s\n", world, lo, hi);
    }
    if (V > 0) bench_lm_head((int)B, (int)D, (int)V, tf32, bf16, rank);
    if (world > 1) bench_nccl(rank, world, max_mib);
    else if (rank == 0)
        printf("NCCL: skipped: one rank has no other GPU to all-gather from or reduce-scatter "
               "with; run one rank per GPU on >= 2 GPUs (mpirun -np 2 dev/bench/bench_gpu)\n");
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
