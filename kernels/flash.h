/* ============================================================================
 * kernels/flash.h — --attention flash on the tensor cores: FlashAttention-2's
 * kernels (Dao, 2023), forward and backward, for 16-bit parameters and heads
 * of 16, 32, 48 or 64 channels (GPT-2's are 64). kernels/transformer.h
 * includes it in place, in its GPU section, after the rows it computes and
 * is tested against (flash_forward_row and the three backward rows): the
 * same arithmetic, rounded where they round, a tile at a time.
 *
 * What makes it fast, each a lesson of FlashAttention-2:
 *  - the scores of a tile never leave registers: S = Q K^T lands in the
 *    tensor cores' output registers, the online softmax runs there, and
 *    P goes on to the product P V from the same registers (the layouts of
 *    mma_16816's output and input fragments line up, below);
 *  - a warp owns 16 rows alone, so the softmax's row maxima and sums need
 *    two shuffles among 4 lanes, and no barrier between warps;
 *  - the next tile of keys (or queries) loads by cp.async while the warps
 *    compute on this one (two buffers, "double buffering");
 *  - shared memory rows are padded, so ldmatrix's 8 rows hit 8 different
 *    banks;
 *  - causal blocks with the most work start first.
 * Backward needs no atomics: one kernel walks each key tile's queries for
 * dk and dv, another each query tile's keys for dq, both recomputing S and
 * dP (7 tile products where FlashAttention-2's atomic dq needs 5), so every
 * sum runs in a fixed order and a run repeats bit for bit.
 *
 * The tensor cores are reached through four PTX instructions (the level
 * below CUDA C++, as FlashAttention, CUTLASS and llm.c reach them), each a
 * function of its own. The emulator defines the same four (dev/emu/cuda_emu.h)
 * to the PTX ISA's layouts, so these kernels run in make test on a CPU.
 *
 * May include core.h, kernels/backend.h and kernels/layers.h (qkv_index,
 * warp_sum); nothing of fsdp.c's. Its body is the GPU build's alone.
 * ========================================================================== */
#ifndef FSDP_KERNELS_FLASH_H
#define FSDP_KERNELS_FLASH_H
#include "../core.h"
#include "backend.h"
#include "layers.h"
#ifdef __CUDACC__ /* the tensor cores: the GPU build alone */

/* ---- four PTX instructions ----------------------------------------------------
 * mma_16816: one warp's tensor-core product, c (16 x 8, fp32) += a (16 x
 *   16) b (16 x 8), a and b 16-bit (F16: bf16 or fp16). No lane holds a
 *   whole operand: each of the 32 holds fixed pieces of each in registers
 *   (a "fragment"). With g = lane / 4 and q = lane % 4 (the PTX ISA's
 *   groupID and threadID_in_group), a lane holds
 *     c[0], c[1]: row g, columns 2q and 2q + 1;  c[2], c[3]: row g + 8;
 *     a[0]: row g, columns 2q and 2q + 1 (two 16-bit values in 32 bits,
 *           the first in the low half); a[1]: row g + 8; a[2] and a[3]:
 *           the same rows, columns 2q + 8 and 2q + 9;
 *     b[0]: column g, rows 2q and 2q + 1;  b[1]: rows 2q + 8 and 2q + 9.
 *   So two products' c side by side (16 x 16) is laid out as an a is,
 *   once rounded to 16 bits: P goes from S's registers into P V's.
 * ldmatrix_x4: four 8 x 8 tiles of 16-bit values from shared memory into
 *   such fragments. Lanes 8i to 8i + 7 give the addresses of tile i's 8
 *   rows (16 bytes each, 16-byte aligned), and register i of lane l gets
 *   tile i's row l / 4, columns 2(l % 4) and 2(l % 4) + 1: an a's piece,
 *   or a b's of a tile stored column by column. ldmatrix_x4_trans
 *   transposes each tile on the way: register i gets column l / 4, rows
 *   2(l % 4) and 2(l % 4) + 1, a b's piece of a tile stored row by row.
 * cp_async_16: 16 bytes from global to shared memory, past the registers
 *   and without waiting: the first `bytes` copied, the rest zeros. The
 *   copies a thread issued before a cp_async_commit are a group, and
 *   cp_async_wait<n> returns once at most n of its groups are still in
 *   flight. So the next tile loads while the warps compute on this one.
 * All four need sm_80 (Ampere) or later; the Makefile builds sm_80 and sm_90. */
#ifndef FSDP_EMU
template <typename F16>
__device__ __forceinline__ static void mma_16816(float *c, const uint32_t *a, const uint32_t *b) {
    if (std::is_same<F16, __nv_bfloat16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ static void ldmatrix_x4(uint32_t *r, const uint16_t *row) {
    unsigned s = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}
__device__ __forceinline__ static void ldmatrix_x4_trans(uint32_t *r, const uint16_t *row) {
    unsigned s = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}
__device__ __forceinline__ static void cp_async_16(void *dst, const void *src, int bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ static void cp_async_commit(void) {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int n> __device__ __forceinline__ static void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory");
}
#endif

/* two fp32 values rounded to F16 (to nearest, as round_to), as one 32-bit
 * register of a fragment: lo in the low half */
template <typename F16> __device__ static inline uint32_t pack_pair(float lo, float hi) {
    uint32_t u;
    if (std::is_same<F16, __nv_bfloat16>::value) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        memcpy(&u, &v, 4);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        memcpy(&u, &v, 4);
    }
    return u;
}

/* ---- tiles and fragments ----------------------------------------------------
 * A block of FLASH_THREADS (4 warps) owns FLASH_ROWS = 64 rows of one head,
 * 16 a warp: queries in forward and for dq, keys for dk and dv. It walks
 * the other side's rows a tile at a time: FLASH_FWD_COLS = 64 keys in
 * forward, FLASH_BWD_COLS = 32 in backward, where a warp holds twice the
 * accumulators (within the 255 registers a thread may have). Tiles in
 * shared memory are FLASH_HD = 64 values wide, their rows FLASH_LD = 72
 * values (144 bytes) apart: the 8 rows an ldmatrix reads then start 4
 * banks apart and cover the 32 banks once; 128 bytes apart, all 8 would
 * sit on the same 4 banks, and the read would take 8 turns. */
enum {
    FLASH_ROWS = 64,
    FLASH_FWD_COLS = 64,
    FLASH_BWD_COLS = 32,
    FLASH_HD = 64,
    FLASH_LD = FLASH_HD + 8,
    FLASH_THREADS = 128
};
#define FLASH_LOG2E 1.4426950408889634f /* scores times log2 e: exp(x) is exp2f(x log2 e) */
#define FLASH_LN2 0.6931471805599453f

/* rows [t0, t0 + n) of one head's q, k or v (src: its row 0, rows ld
 * apart), or of dy, into a tile by cp.async, 8 values a copy and each
 * thread a share; rows from T on are zeros, read from nowhere (their
 * scores are masked, their products add nothing) */
__device__ static void flash_copy(uint16_t *tile, int n, const uint16_t *src, long ld, int t0,
                                  int T, int hd) {
    int chunks = hd / 8;
    for (int i = threadIdx.x; i < n * chunks; i += FLASH_THREADS) {
        int r = i / chunks, c = i % chunks * 8, in = t0 + r < T;
        cp_async_16(tile + r * FLASH_LD + c, src + (in ? (long)(t0 + r) * ld : 0) + c, in ? 16 : 0);
    }
}

/* a's fragment: the 16 x 16 values of a tile at row r0, column c0. The
 * four 8 x 8 tiles are its quarters in a's register order: rows 0-7 and
 * 8-15 (lanes 0-15, a row each), then the same rows 8 columns on. */
__device__ static void frag_a(uint32_t *a, const uint16_t *tile, int r0, int c0) {
    int l = threadIdx.x % 32;
    ldmatrix_x4(a, tile + (r0 + l % 16) * FLASH_LD + c0 + l / 16 * 8);
}
/* b's fragments for two products side by side, b the transpose of the
 * tile's rows r0.. r0 + 15, columns c0.. c0 + 15 (K^T from K's rows):
 * b[0..1] for the first 8 rows, b[2..3] for the next 8 */
__device__ static void frag_b_of_rows(uint32_t *b, const uint16_t *tile, int r0, int c0) {
    int l = threadIdx.x % 32;
    ldmatrix_x4(b, tile + (r0 + l % 8 + l / 16 * 8) * FLASH_LD + c0 + l / 8 % 2 * 8);
}
/* b's fragments for two products side by side, b the tile itself: its
 * rows r0.. r0 + 15 (the sum's index), columns c0.. c0 + 7, then c0 + 8..
 * (V's rows, read transposed) */
__device__ static void frag_b_of_columns(uint32_t *b, const uint16_t *tile, int r0, int c0) {
    int l = threadIdx.x % 32;
    ldmatrix_x4_trans(b, tile + (r0 + l % 16) * FLASH_LD + c0 + l / 16 * 8);
}

/* s (16 x 8N: N fragments of c) = a (a warp's 16 rows of hd, its hd / 16
 * fragments in registers) times the transpose of the tile's rows 0.. 8N */
template <typename F16, int N>
__device__ static void flash_rows_times_tile(float (*s)[4], const uint32_t (*a)[4],
                                             const uint16_t *tile, int hd) {
#pragma unroll
    for (int n = 0; n < N; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < FLASH_HD / 16; kk++) {
        if (kk * 16 >= hd) break;
#pragma unroll
        for (int n = 0; n < N; n += 2) {
            uint32_t b[4];
            frag_b_of_rows(b, tile, n * 8, kk * 16);
            mma_16816<F16>(s[n], a[kk], b);
            mma_16816<F16>(s[n + 1], a[kk], b + 2);
        }
    }
}
/* acc (16 x hd: hd / 8 fragments of c) += p (16 x 8N, as c fragments,
 * rounded to F16 here) times the tile's rows 0.. 8N */
template <typename F16, int N>
__device__ static void flash_acc_times_tile(float (*acc)[4], float (*p)[4], const uint16_t *tile,
                                            int hd) {
#pragma unroll
    for (int kk = 0; kk < N / 2; kk++) {
        const float *lo = p[2 * kk], *hi = p[2 * kk + 1]; /* its columns 16kk.., 16kk + 8.. */
        uint32_t a[4] = {pack_pair<F16>(lo[0], lo[1]), pack_pair<F16>(lo[2], lo[3]),
                         pack_pair<F16>(hi[0], hi[1]), pack_pair<F16>(hi[2], hi[3])};
#pragma unroll
        for (int n = 0; n < FLASH_HD / 8; n += 2) {
            if (n * 8 >= hd) break;
            uint32_t b[4];
            frag_b_of_columns(b, tile, kk * 16, n * 8);
            mma_16816<F16>(acc[n], a, b);
            mma_16816<F16>(acc[n + 1], a, b + 2);
        }
    }
}
/* a warp's rows (hd / 16 a fragments) from a tile of FLASH_ROWS, its own
 * 16 from row 16 w */
__device__ static void flash_own_rows(uint32_t (*a)[4], const uint16_t *tile, int hd) {
#pragma unroll
    for (int kk = 0; kk < FLASH_HD / 16; kk++)
        if (kk * 16 < hd) frag_a(a[kk], tile, threadIdx.x / 32 * 16, kk * 16);
}
/* a warp's 16 x hd accumulator, row i's times scale[i] (rows g and
 * g + 8 of the lane), rounded to F16 into rows r0.. (those below T) of
 * dst (rows ld apart): each lane writes its pairs */
template <typename F16>
__device__ static void flash_store(uint16_t *dst, long ld, float (*acc)[4], const float *scale,
                                   int r0, int T, int hd) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int t = r0 + lane / 4 + 8 * i;
        if (t >= T) continue;
#pragma unroll
        for (int n = 0; n < FLASH_HD / 8; n++)
            if (n * 8 < hd)
                *(uint32_t *)(dst + (long)t * ld + n * 8 + lane % 4 * 2) =
                    pack_pair<F16>(acc[n][2 * i] * scale[i], acc[n][2 * i + 1] * scale[i]);
    }
}
/* the sum (or maximum) of a row's value over the 4 lanes that hold it */
__device__ static inline float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ static inline float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* ---- forward ------------------------------------------------------------------
 * One warp's 16 queries (rows r0..) meet keys s0.. s0 + 63:
 * flash_forward_row's online softmax in registers, in base 2 (scale is
 * log2 e / sqrt(hd), so exp is the GPU's exp2 and m is in its units).
 * The lane holds rows g and g + 8 (i = 0, 1), keys 2q and 2q + 1 of each 8;
 * l is the lane's part of each row's sum, added up at the end. */
template <typename F16>
__device__ static void flash_forward_tile(float (*o)[4], float *m, float *l,
                                          const uint32_t (*qf)[4], const uint16_t *ks,
                                          const uint16_t *vs, int r0, int s0, int hd, float scale) {
    enum { N = FLASH_FWD_COLS / 8 };
    float s[N][4];
    flash_rows_times_tile<F16, N>(s, qf, ks, hd);
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int t = r0 + lane / 4 + 8 * i;
        float mt = m[i];
#pragma unroll
        for (int n = 0; n < N; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float z = s0 + n * 8 + lane % 4 * 2 + e <= t ? s[n][2 * i + e] * scale : -INFINITY;
                s[n][2 * i + e] = z;
                mt = fmaxf(mt, z);
            }
        mt = quad_max(mt);          /* finite: key s0 <= t for every row this tile meets */
        float c = exp2f(m[i] - mt); /* the earlier terms' rescale: 0 at first (m = -inf) */
        m[i] = mt;
        l[i] *= c;
#pragma unroll
        for (int n = 0; n < FLASH_HD / 8; n++) o[n][2 * i] *= c, o[n][2 * i + 1] *= c;
#pragma unroll
        for (int n = 0; n < N; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = exp2f(s[n][2 * i + e] - mt);
                l[i] += p; /* unrounded, as flash_forward_row sums it */
                s[n][2 * i + e] = p;
            }
    }
    flash_acc_times_tile<F16, N>(o, s, vs, hd); /* O += P V, P rounded to F16 */
}

/* Block (b*H + h, query tile): y (c_proj's input) and lse of 64 queries,
 * the key tiles up to the diagonal two buffers deep. The blocks are
 * numbered from the last query tile, which meets the most keys: the longest
 * blocks start first, and the short ones fill in at the end. */
template <typename F16>
__global__ static void __launch_bounds__(FLASH_THREADS)
    flash_forward_tc(uint16_t *y, float *lse, const uint16_t *qkv, int T, int D, int H) {
    __shared__ __align__(16) uint16_t qs[FLASH_ROWS * FLASH_LD], ks[2][FLASH_FWD_COLS * FLASH_LD],
        vs[2][FLASH_FWD_COLS * FLASH_LD];
    int hd = D / H, h = blockIdx.x % H, lane = threadIdx.x % 32;
    long b = blockIdx.x / H, ld = 3L * D;
    int q0 = (gridDim.y - 1 - blockIdx.y) * FLASH_ROWS, r0 = q0 + threadIdx.x / 32 * 16;
    int tiles = (min(T, q0 + FLASH_ROWS) - 1) / FLASH_FWD_COLS + 1;
    float scale = FLASH_LOG2E / sqrtf((float)hd);
    const uint16_t *q = qkv + qkv_index(b, 0, 0, h, T, D, hd);
    flash_copy(qs, FLASH_ROWS, q, ld, q0, T, hd);
    flash_copy(ks[0], FLASH_FWD_COLS, q + D, ld, 0, T, hd);
    flash_copy(vs[0], FLASH_FWD_COLS, q + 2L * D, ld, 0, T, hd);
    cp_async_commit();
    uint32_t qf[FLASH_HD / 16][4];
    float o[FLASH_HD / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int j = 0; j < tiles; j++) {
        int s1 = (j + 1) * FLASH_FWD_COLS;
        if (j + 1 < tiles) {
            flash_copy(ks[(j + 1) % 2], FLASH_FWD_COLS, q + D, ld, s1, T, hd);
            flash_copy(vs[(j + 1) % 2], FLASH_FWD_COLS, q + 2L * D, ld, s1, T, hd);
        }
        cp_async_commit();  /* (empty on the last tile: the wait below stays the same) */
        cp_async_wait<1>(); /* this thread's copies of tile j are in */
        __syncthreads();    /* ... and every thread's */
        if (j == 0) flash_own_rows(qf, qs, hd);
        if (r0 < T)
            flash_forward_tile<F16>(o, m, l, qf, ks[j % 2], vs[j % 2], r0, j * FLASH_FWD_COLS, hd,
                                    scale);
        __syncthreads(); /* every warp is done with buffer j % 2 before tile j + 2 fills it */
    }
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] = quad_sum(l[i]);
        inv[i] = 1.0f / l[i];
        int t = r0 + lane / 4 + 8 * i;
        if (lane % 4 == 0 && t < T) lse[blockIdx.x * (long)T + t] = m[i] * FLASH_LN2 + logf(l[i]);
    }
    flash_store<F16>(y + b * T * D + (long)h * hd, D, o, inv, r0, T, hd);
}

/* ---- backward -----------------------------------------------------------------
 * A warp's 16 rows meet a tile of 32 of the other side's, through two
 * products of its fragments a and a2 (in registers) with tiles t1 and t2:
 *   for dq, rows are queries:  S = Q K^T, dP = dY V^T;
 *   for dk and dv, keys:       S^T = K Q^T, dP^T = V dY^T (`keys`).
 * From them p = exp(S - lse) and ds = p (dP - delta) (flash_dscore's), 0
 * where the key comes after the query; lse2 (in base 2: +inf past T, so
 * p = 0 there) and delta are the queries': the lane's two rows' in
 * registers for dq, the tile's 32 columns' in shared memory for dk and dv. */
template <typename F16, bool keys>
__device__ static void flash_p_and_ds(float (*p)[4], float (*ds)[4], const uint32_t (*a)[4],
                                      const uint32_t (*a2)[4], const uint16_t *t1,
                                      const uint16_t *t2, const float *lse2, const float *delta,
                                      int r0, int c0, int hd, float scale) {
    enum { N = FLASH_BWD_COLS / 8 };
    flash_rows_times_tile<F16, N>(p, a, t1, hd);
    flash_rows_times_tile<F16, N>(ds, a2, t2, hd);
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int n = 0; n < N; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = n * 8 + lane % 4 * 2 + e, row = r0 + lane / 4 + 8 * i, q = keys ? c : i;
                int seen = keys ? row <= c0 + c : c0 + c <= row;
                float pv = seen ? exp2f(p[n][2 * i + e] * scale - lse2[q]) : 0.0f;
                p[n][2 * i + e] = pv;
                ds[n][2 * i + e] = pv * (ds[n][2 * i + e] - delta[q]);
            }
}

/* the queries t0.. t0 + 31 a key tile meets: q's and dy's rows by
 * cp.async, their lse (in base 2; +inf past T, so p = 0 there) and delta
 * by plain loads, seen by the other threads after the next barrier */
__device__ static void flash_copy_queries(uint16_t *qs, uint16_t *gs, float *lse2, float *dl,
                                          const uint16_t *q, const uint16_t *g, const float *lse,
                                          const float *delta, int t0, int T, int D, int hd) {
    flash_copy(qs, FLASH_BWD_COLS, q, 3L * D, t0, T, hd);
    flash_copy(gs, FLASH_BWD_COLS, g, D, t0, T, hd);
    int t = t0 + threadIdx.x;
    if (threadIdx.x < FLASH_BWD_COLS) {
        lse2[threadIdx.x] = t < T ? lse[t] * FLASH_LOG2E : INFINITY;
        dl[threadIdx.x] = t < T ? delta[t] : 0.0f;
    }
}

/* Block (b*H + h, key tile): dk and dv of 64 keys from the queries at and
 * after the tile's first, 32 at a time, two buffers deep. Block 0's keys
 * meet every query: the longest blocks are numbered first. */
template <typename F16>
__global__ static void __launch_bounds__(FLASH_THREADS)
    flash_backward_key_tc(uint16_t *dqkv, const uint16_t *dy, const uint16_t *qkv, const float *lse,
                          const float *delta, int T, int D, int H) {
    __shared__ __align__(16) uint16_t ks[FLASH_ROWS * FLASH_LD], vs[FLASH_ROWS * FLASH_LD],
        qs[2][FLASH_BWD_COLS * FLASH_LD], gs[2][FLASH_BWD_COLS * FLASH_LD];
    __shared__ float lse2[2][FLASH_BWD_COLS], dl[2][FLASH_BWD_COLS];
    int hd = D / H, h = blockIdx.x % H;
    long b = blockIdx.x / H, ld = 3L * D;
    int k0 = blockIdx.y * FLASH_ROWS, r0 = k0 + threadIdx.x / 32 * 16;
    int first = k0 / FLASH_BWD_COLS, tiles = (T - 1) / FLASH_BWD_COLS + 1;
    float scale = 1.0f / sqrtf((float)hd);
    const uint16_t *q = qkv + qkv_index(b, 0, 0, h, T, D, hd), *g = dy + b * T * D + h * hd;
    lse += blockIdx.x * (long)T, delta += blockIdx.x * (long)T; /* this head's rows */
    flash_copy(ks, FLASH_ROWS, q + D, ld, k0, T, hd);
    flash_copy(vs, FLASH_ROWS, q + 2L * D, ld, k0, T, hd);
    flash_copy_queries(qs[0], gs[0], lse2[0], dl[0], q, g, lse, delta, first * FLASH_BWD_COLS, T, D,
                       hd);
    cp_async_commit();
    uint32_t kf[FLASH_HD / 16][4], vf[FLASH_HD / 16][4];
    float dk[FLASH_HD / 8][4] = {}, dv[FLASH_HD / 8][4] = {};
    for (int j = first; j < tiles; j++) {
        int buf = (j - first) % 2, t0 = j * FLASH_BWD_COLS;
        if (j + 1 < tiles)
            flash_copy_queries(qs[1 - buf], gs[1 - buf], lse2[1 - buf], dl[1 - buf], q, g, lse,
                               delta, t0 + FLASH_BWD_COLS, T, D, hd);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (j == first) flash_own_rows(kf, ks, hd), flash_own_rows(vf, vs, hd);
        if (r0 < T && t0 + FLASH_BWD_COLS - 1 >= r0) { /* else no query here sees its keys */
            float p[FLASH_BWD_COLS / 8][4], ds[FLASH_BWD_COLS / 8][4];
            flash_p_and_ds<F16, true>(p, ds, kf, vf, qs[buf], gs[buf], lse2[buf], dl[buf], r0, t0,
                                      hd, scale * FLASH_LOG2E);
            flash_acc_times_tile<F16, FLASH_BWD_COLS / 8>(dv, p, gs[buf], hd);  /* dV += P^T dY */
            flash_acc_times_tile<F16, FLASH_BWD_COLS / 8>(dk, ds, qs[buf], hd); /* dK += dS^T Q */
        }
        __syncthreads();
    }
    float dk_scale[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
    uint16_t *dk_out = dqkv + qkv_index(b, 0, 1, h, T, D, hd);
    flash_store<F16>(dk_out, ld, dk, dk_scale, r0, T, hd);
    flash_store<F16>(dk_out + D, ld, dv, one, r0, T, hd); /* dv: D values on */
}

/* Block (b*H + h, query tile): dq of 64 queries from the keys up to the
 * diagonal, 32 at a time, two buffers deep; the last query tile first.
 * Four blocks an SM: ptxas gave it 143 registers a thread alone (three
 * blocks' worth), and fits it in 128 without spilling when asked. */
template <typename F16>
__global__ static void __launch_bounds__(FLASH_THREADS, 4)
    flash_backward_query_tc(uint16_t *dqkv, const uint16_t *dy, const uint16_t *qkv,
                            const float *lse, const float *delta, int T, int D, int H) {
    __shared__ __align__(16) uint16_t qs[FLASH_ROWS * FLASH_LD], gs[FLASH_ROWS * FLASH_LD],
        ks[2][FLASH_BWD_COLS * FLASH_LD], vs[2][FLASH_BWD_COLS * FLASH_LD];
    int hd = D / H, h = blockIdx.x % H, lane = threadIdx.x % 32;
    long b = blockIdx.x / H, ld = 3L * D, bh = blockIdx.x;
    int q0 = (gridDim.y - 1 - blockIdx.y) * FLASH_ROWS, r0 = q0 + threadIdx.x / 32 * 16;
    int tiles = (min(T, q0 + FLASH_ROWS) - 1) / FLASH_BWD_COLS + 1;
    float scale = 1.0f / sqrtf((float)hd), lse2[2], delta_r[2];
    const uint16_t *q = qkv + qkv_index(b, 0, 0, h, T, D, hd), *g = dy + b * T * D + h * hd;
    flash_copy(qs, FLASH_ROWS, q, ld, q0, T, hd);
    flash_copy(gs, FLASH_ROWS, g, D, q0, T, hd);
    flash_copy(ks[0], FLASH_BWD_COLS, q + D, ld, 0, T, hd);
    flash_copy(vs[0], FLASH_BWD_COLS, q + 2L * D, ld, 0, T, hd);
    cp_async_commit();
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int t = r0 + lane / 4 + 8 * i;
        lse2[i] = t < T ? lse[bh * T + t] * FLASH_LOG2E : INFINITY;
        delta_r[i] = t < T ? delta[bh * T + t] : 0.0f;
    }
    uint32_t qf[FLASH_HD / 16][4], gf[FLASH_HD / 16][4];
    float dq[FLASH_HD / 8][4] = {};
    for (int j = 0; j < tiles; j++) {
        int s1 = (j + 1) * FLASH_BWD_COLS;
        if (j + 1 < tiles) {
            flash_copy(ks[(j + 1) % 2], FLASH_BWD_COLS, q + D, ld, s1, T, hd);
            flash_copy(vs[(j + 1) % 2], FLASH_BWD_COLS, q + 2L * D, ld, s1, T, hd);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (j == 0) flash_own_rows(qf, qs, hd), flash_own_rows(gf, gs, hd);
        if (r0 < T && r0 + 15 >= j * FLASH_BWD_COLS) { /* else its rows see no key here */
            float p[FLASH_BWD_COLS / 8][4], ds[FLASH_BWD_COLS / 8][4];
            flash_p_and_ds<F16, false>(p, ds, qf, gf, ks[j % 2], vs[j % 2], lse2, delta_r, r0,
                                       j * FLASH_BWD_COLS, hd, scale * FLASH_LOG2E);
            flash_acc_times_tile<F16, FLASH_BWD_COLS / 8>(dq, ds, ks[j % 2], hd); /* dQ += dS K */
        }
        __syncthreads();
    }
    float dq_scale[2] = {scale, scale};
    flash_store<F16>(dqkv + qkv_index(b, 0, 0, h, T, D, hd), ld, dq, dq_scale, r0, T, hd);
}

/* Backward, first: delta = dy_t . y_t (flash_backward_dot_row's), a warp
 * a row of a head: lane j takes channels 2j and 2j + 1, and warp_sum adds
 * the 32 in its fixed tree. A thread a row would read its 64 values alone,
 * the warp's 32 rows D apart. */
__global__ static void flash_delta_tc(float *delta, const uint16_t *dy, const uint16_t *y,
                                      long rows, int T, int D, int H, Dtype d) {
    long r = (long)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (r >= rows) return; /* the whole warp: its lanes share r */
    int hd = D / H, lane = threadIdx.x % 32, t = (int)(r % T), h = (int)(r / T % H);
    long at = (r / ((long)T * H) * T + t) * D + (long)h * hd + 2 * lane;
    float z = 0.0f;
    if (2 * lane < hd)
        z = float_from_half(dy[at], d) * float_from_half(y[at], d) +
            float_from_half(dy[at + 1], d) * float_from_half(y[at + 1], d);
    z = warp_sum(z);
    if (lane == 0) delta[r] = z;
}

/* Heads of 16, 32, 48 or 64 channels and 16-bit parameters (q, k, v and dy
 * held in param_dtype); else the rows, a thread each */
static int flash_tensor_cores(Dtype d, int hd) {
    return d != DTYPE_FP32 && backend.gemm_dtype == d && hd % 16 == 0 && hd <= FLASH_HD;
}
/* kernel<the 16-bit type of d> on (B*H, T / FLASH_ROWS) blocks */
#define FLASH_LAUNCH(kernel, B, H, T, ...)                                                         \
    do {                                                                                           \
        dim3 grid_((unsigned)((B) * (H)), (unsigned)(((T) + FLASH_ROWS - 1) / FLASH_ROWS));        \
        if (d == DTYPE_BF16)                                                                       \
            kernel<__nv_bfloat16><<<grid_, FLASH_THREADS, 0, backend.compute>>>(__VA_ARGS__);      \
        else kernel<__half><<<grid_, FLASH_THREADS, 0, backend.compute>>>(__VA_ARGS__);            \
        cudaCheck(cudaGetLastError());                                                             \
    } while (0)

#endif /* __CUDACC__ */
#endif /* FSDP_KERNELS_FLASH_H */
