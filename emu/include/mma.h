/* emu/include/mma.h — the emulator's WMMA (nvcuda::wmma), found before the
 * toolkit's mma.h when `make fsdp-emu` compiles the GPU build on a CPU.
 *
 * A fragment here holds its whole tile in every lane (CUDA leaves the
 * layout unspecified, and code that is right for any layout is right for
 * this one), and a lane owns the elements e of an accumulator with
 * e % 32 == its lane. No operation waits for the warp's other lanes: a
 * load reads memory when its lane comes to it, mma_sync multiplies in fp32
 * in k's order, and a store writes only the lane's own elements. So a lane
 * that loads what later lanes have not yet written, or reads a stored
 * tile's elements another lane owns, before the __syncwarp a GPU needs
 * there, reads stale memory here, and the result is wrong. */
#ifndef FSDP_EMU_MMA_H
#define FSDP_EMU_MMA_H

namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct shape;
template <int M, int N, int K> struct shape<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct shape<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct shape<accumulator, M, N, K> { enum { rows = M, cols = N }; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    enum { rows = shape<Use, M, N, K>::rows, cols = shape<Use, M, N, K>::cols };
    enum { num_elements = rows * cols };
    float x[num_elements]; /* row-major, whatever the memory's layout */
};

/* What CUDA asks of a fragment's memory: a 256-bit aligned pointer, and a
 * leading dimension of a multiple of 16 bytes (8 16-bit values, 4 floats).
 * A GPU faults or loads garbage otherwise; the emulator stops. */
template <typename T> static inline void check_tile(const T *p, unsigned ld) {
    if ((uintptr_t)p % 32 || ld * sizeof(T) % 16)
        emu::unmodelled("a WMMA load or store misaligned (its pointer not on 32 bytes, or "
                        "its leading dimension not a multiple of 16 bytes)");
}

static inline float widen(float v) { return v; }
static inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float widen(__half v) { return __half2float(v); }

template <typename Use, int M, int N, int K, typename T, typename L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, float v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

/* a or b: the layout is the fragment's */
template <typename Use, int M, int N, int K, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ld) {
    check_tile(p, ld);
    const bool col = __is_same(L, col_major);
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++)
            f.x[r * f.cols + c] = widen(col ? p[(long)c * ld + r] : p[(long)r * ld + c]);
}
/* the accumulator: the layout is the call's */
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p,
                                    unsigned ld, layout_t layout) {
    check_tile(p, ld);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            f.x[r * N + c] = layout == mem_row_major ? p[(long)r * ld + c] : p[(long)c * ld + r];
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f,
                                     unsigned ld, layout_t layout) {
    check_tile(p, ld);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            if (emu::lane_owns(r * N + c))
                (layout == mem_row_major ? p[(long)r * ld + c] : p[(long)c * ld + r]) =
                    f.x[r * N + c];
}
template <int M, int N, int K, typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                            const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c) {
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = c.x[i * N + j];
            for (int k = 0; k < K; k++) s += a.x[i * K + k] * b.x[k * N + j];
            out[i * N + j] = s;
        }
    for (int i = 0; i < M * N; i++) d.x[i] = out[i];
}
} // namespace wmma
} // namespace nvcuda
#endif
