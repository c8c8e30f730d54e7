/* ============================================================================
 * core.h — the bottom floor: what every file of fsdp.c's program uses.
 *
 * defines: fsdp_fatal and FATAL (a bug or the environment: say where, HINT,
 *          MPI_Abort), host_malloc, host_calloc, host_realloc (memory or the
 *          end of the run), mpiCheck, usage_error (bad input: exit 2),
 *          exit_all, now_seconds, ceil_div, mib; the counter-based random
 *          numbers (rng_u64, rng_uniform, rng_normal, STREAM_*); Dtype and
 *          the 16-bit formats (bf16_from_float, ..., round_to, pack_one);
 *          FSDP_HD (host and device)
 *
 * Includes nothing of the project's: everything else includes it, so the
 * arrows of the include graph all point down to here. Its functions are
 * `static inline`: fsdp.h includes it, and so it enters the sim/ sources
 * too, which nvcc builds with warnings as errors, where an unused `static`
 * function would fail the build.
 * ========================================================================== */
#ifndef FSDP_CORE_H
#define FSDP_CORE_H
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* open, fstat, fsync, mkdir, clock_gettime */
#endif
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Element-wise math is written once and marked for both host and device, so
 * the CPU tests check the very arithmetic the GPU kernels will run. */
#ifdef __CUDACC__
#define FSDP_HD __host__ __device__
#else
#define FSDP_HD
#endif

/* The floating-point formats of PyTorch's MixedPrecision: a value's width
 * in memory and on the wire. Tagged: nvcc's stubs for a kernel template
 * instantiated with a Dtype argument spell it `enum Dtype`. */
typedef enum Dtype {
    DTYPE_UNSET = -1, /* --reduce-dtype not given: --param-dtype's (run/cli.h) */
    DTYPE_FP32,       /* float32: 8-bit exponent, 23-bit mantissa */
    DTYPE_BF16,       /* bfloat16: fp32's 8-bit exponent, 7-bit mantissa */
    DTYPE_FP16,       /* float16: 5-bit exponent (largest 65504), 10-bit mantissa */
} Dtype;

static const char *const DTYPE_NAMES[] = {"fp32", "bf16", "fp16"};
static inline int dtype_bytes(Dtype d) { return d == DTYPE_FP32 ? 4 : 2; }

/* A failure inside training (not bad input: that is config_parse's job) is
 * a bug or an environment problem. Say where, say what to try, and take every
 * rank down with MPI_Abort so no rank is left waiting in a collective.
 * The message leaves in one fprintf, which is one write on the unbuffered
 * stderr: mpirun forwards a rank's stdout and stderr on separate channels
 * and copies whichever it reads first, so a line written in pieces can come
 * out with the rank's earlier stdout between them ("error at fsdp.c:948: ",
 * the unit table, then the rest), and whoever reads the log for that line
 * (a student, exercises/grade.sh) finds it cut. */
static inline void fsdp_fatal(const char *file, int line, const char *hint, const char *fmt, ...) {
    int rank = 0, inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char what[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[rank %d] error at %s:%d: %s\nHINT: %s\n", rank, file, line, what, hint);
    fflush(stderr);
    if (inited) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
#define FATAL(hint, ...) fsdp_fatal(__FILE__, __LINE__, hint, __VA_ARGS__)

/* Host memory that is there or ends the run (llm.c's mallocCheck): what
 * says what it was for, "cannot WHAT" in the message. Every caller gets
 * memory or never returns, so no caller checks for NULL. */
static inline void *host_memory_or_die(void *p, const char *what, const char *file, int line) {
    if (!p) fsdp_fatal(file, line, "the machine is out of host memory", "cannot %s", what);
    return p;
}
#define host_malloc(bytes, what) host_memory_or_die(malloc(bytes), what, __FILE__, __LINE__)
#define host_calloc(n, size, what)                                                                 \
    host_memory_or_die(calloc((n), (size)), what, __FILE__, __LINE__)
#define host_realloc(p, bytes, what)                                                               \
    host_memory_or_die(realloc((p), (bytes)), what, __FILE__, __LINE__)

static inline void mpi_check(int err, const char *file, int line) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    fsdp_fatal(file, line, "an MPI call failed; check that every rank runs the same command",
               "MPI: %s", msg);
}
#define mpiCheck(call) mpi_check((call), __FILE__, __LINE__)

/* Bad input is not a bug: it gets a message saying what is wrong and what
 * to do, written into err, and the exit code 2 that every rank then uses. */
static inline int usage_error(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 2;
}

/* Every rank has agreed on a failure: all leave together, cleanly. */
static inline void exit_all(int code) {
    MPI_Finalize();
    exit(code);
}

static inline double now_seconds(void) { return MPI_Wtime(); }

static inline long ceil_div(long a, long b) { return (a + b - 1) / b; }

static inline double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/* Counter-based random numbers. A value depends only on (seed, stream, a, b),
 * never on what was drawn before, so every rank can compute any element of
 * the model or the data on its own and get the value any other world size
 * would: the root of "N ranks compute what 1 rank computes". The mixer is
 * SplitMix64's finaliser. */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}
static inline uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
    return mix64(mix64(mix64(seed ^ mix64(stream + 0x9e3779b97f4a7c15ULL)) + a) + b);
}
static inline float rng_uniform(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
    return (float)(rng_u64(seed, stream, a, b) >> 40) * (1.0f / 16777216.0f); /* [0,1) */
}
static inline float rng_normal(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
    /* Box-Muller from two independent uniforms (1-u keeps log away from 0) */
    float u1 = 1.0f - rng_uniform(seed, stream, a, 2 * b);
    float u2 = rng_uniform(seed, stream, a, 2 * b + 1);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* Streams keep the model's numbers and the data's numbers independent. */
enum { STREAM_INIT = 1, STREAM_SAMPLER = 2, STREAM_CORPUS = 3 };

/* ---- 16-bit number formats: bf16 and fp16 ----------------------------------
 * Mixed precision (--param-dtype, --reduce-dtype) stores values in 16 bits.
 * A 16-bit value converts to fp32 exactly, so the simulator keeps each one
 * in a float slot, rounded exactly as a GPU rounds when it stores it:
 * round to nearest, ties to even (RNE). The arithmetic on the slots is then
 * the GPU's (fp32 accumulation, a 16-bit result), one set of kernels serves
 * every format, and the ledger books each buffer at its 16-bit width, what
 * PyTorch holds. What crosses the wire is really 16 bits: the collectives
 * pack the slots into uint16_t (comm/wire16.h).
 *   bf16: fp32's upper half. Rounding adds 0x7FFF plus the lowest kept bit
 *         to the bits and drops the lower 16; the carry into the exponent is
 *         right, and fp32's range is kept (nothing overflows).
 *   fp16: 5-bit exponent: the largest value is 65504, anything from 65520
 *         up is inf, and below 2^-14 the values are subnormal, multiples of
 *         2^-24; smaller than 2^-25 is 0. This is why fp16 needs loss
 *         scaling and bf16 does not. */
FSDP_HD static inline uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}
FSDP_HD static inline float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}
FSDP_HD static inline uint16_t bf16_from_float(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
FSDP_HD static inline float float_from_bf16(uint16_t h) { return bits_float((uint32_t)h << 16); }

FSDP_HD static inline uint16_t fp16_from_float(float f) {
    uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);  /* NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520: inf */
    if (a < 0x38800000u) /* below 2^-14: a subnormal, a whole number of 2^-24 */
        return (uint16_t)(sign | (uint32_t)rintf(bits_float(a) * 16777216.0f));
    a -= 112u << 23; /* exponent bias 127 -> 15 */
    return (uint16_t)(sign | ((a + 0xFFFu + ((a >> 13) & 1u)) >> 13));
}
FSDP_HD static inline float float_from_fp16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0) return bits_float(sign) + (sign ? -1.0f : 1.0f) * (float)m / 16777216.0f;
    if (e == 31) return bits_float(sign | 0x7F800000u | (m << 13));
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

FSDP_HD static inline uint16_t half_from_float(float f, Dtype d) {
    return d == DTYPE_BF16 ? bf16_from_float(f) : fp16_from_float(f);
}
FSDP_HD static inline float float_from_half(uint16_t h, Dtype d) {
    return d == DTYPE_BF16 ? float_from_bf16(h) : float_from_fp16(h);
}
/* x rounded to the nearest value of format d (fp32: itself) */
FSDP_HD static inline float round_to(float x, Dtype d) {
    return d == DTYPE_FP32 ? x : float_from_half(half_from_float(x, d), d);
}
FSDP_HD static inline void round_one(long i, float *x, Dtype d) { x[i] = round_to(x[i], d); }
FSDP_HD static inline void round_copy_one(long i, float *out, const float *x, Dtype d) {
    out[i] = round_to(x[i], d);
}
FSDP_HD static inline void pack_one(long i, uint16_t *out, const float *x, Dtype d, float f) {
    out[i] = half_from_float(x[i] * f, d);
}
FSDP_HD static inline void unpack_one(long i, float *out, const uint16_t *x, Dtype d) {
    out[i] = float_from_half(x[i], d);
}
/* the ring's reduce step in 16 bits: acc += x, the sum rounded, as NCCL's */
FSDP_HD static inline void add_half_one(long i, uint16_t *acc, const uint16_t *x, Dtype d) {
    acc[i] = half_from_float(float_from_half(acc[i], d) + float_from_half(x[i], d), d);
}

#endif /* FSDP_CORE_H */
