/* tests/test_formats.c — the byte formats of formats.c, one rule per check.
 *
 *   crc32        known values (the check value of "123456789"), chaining
 *   safetensors  our writer -> our reader; hand-written headers; every rule
 *                of formats.h broken once, each refused with a message that
 *                names the problem; a file written by Hugging Face's own
 *                library (tests/fixtures/reference.safetensors)
 *   meta.txt     meta_format -> meta_parse, field by field (both forms of
 *                "data"); every prefix of a valid file refused; every
 *                one-bit change refused; every rule broken once; the end
 *                line's crc32 (an edit refused, the same edit with the crc32
 *                recomputed accepted)
 *   layout hash  meta_layout_hash: its definition (FNV-1a of the layout
 *                lines), what changes it and what does not
 *   shard header shard_header_encode -> shard_header_decode, byte by byte;
 *                every refusal; no byte of the header ignored
 *   config.json  json_object_parse: OpenAI's gpt2 config read, every JSON
 *                rule broken once, nesting bounded, every prefix refused,
 *                every one-byte change read or refused in one line
 *   --interop    only: live interop with Hugging Face's library, both ways
 *                (tests/fixtures/st_check.py); needs python3 with
 *                safetensors and numpy, and exits 77 ("skipped") without
 *                them, so a missing Python is never reported as a pass
 *
 * Every check prints "ok" or "FAIL", what it checked and what it saw. The
 * exit code is the number of failed checks.
 *
 * Build (no MPI needed; any C11 compiler, with or without sanitizers):
 *   gcc -O1 -g -std=c11 -Wall -Wextra -fsanitize=address,undefined -I. \
 *       tests/test_formats.c formats.c -o tests/test_formats
 * Run from anywhere: ./tests/test_formats; ./tests/test_formats --interop
 * Seeds for the fuzzer: ./tests/test_formats --write-seeds DIR
 * (and --accepted FILE..., for tests/test_fuzz.sh's check against the
 * reference library)
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, for the interop files */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats.h"

static int failures = 0, passes = 0;

static void check(int ok, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  %s %-52s ", ok ? "ok  " : "FAIL", what);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) passes++;
    else failures++;
}

/* ============================================================================
 * Small helpers
 * ========================================================================== */

/* A whole safetensors file in memory: the 8-byte length, the JSON as given
 * (no padding), then data_len bytes of data (0, 1, 2, ...). */
static unsigned char *st_file(const char *json, size_t data_len, size_t *size) {
    size_t n = strlen(json);
    *size = 8 + n + data_len;
    unsigned char *f = (unsigned char *)malloc(*size);
    for (int i = 0; i < 8; i++) f[i] = (unsigned char)(((uint64_t)n >> (8 * i)) & 0xff);
    memcpy(f + 8, json, n);
    for (size_t i = 0; i < data_len; i++) f[8 + n + i] = (unsigned char)i;
    return f;
}

/* Parses json + data_len bytes as a whole file; returns the code, and the
 * message in err. */
static int st_try(const char *json, size_t data_len, StHeader *h, char *err, size_t errlen) {
    size_t size;
    unsigned char *f = st_file(json, data_len, &size);
    int rc = st_parse_header(f, size, size, h, err, errlen);
    free(f);
    return rc;
}

static void st_accepts(const char *what, const char *json, size_t data_len) {
    StHeader h;
    char err[512];
    int rc = st_try(json, data_len, &h, err, sizeof(err));
    check(rc == 0, what, rc == 0 ? "(%d tensors)" : "rc %d: %s", rc == 0 ? h.n : rc, err);
    st_free(&h);
}

/* The file must be refused (code 2), with a message that contains needle. */
static void st_refuses(const char *what, const char *json, size_t data_len, const char *needle) {
    StHeader h;
    char err[512] = "";
    int rc = st_try(json, data_len, &h, err, sizeof(err));
    check(rc == 2 && strstr(err, needle) && h.tensors == NULL && h.n == 0, what, "rc %d: %s", rc, err);
    st_free(&h);
}

/* A copy of s with the first occurrence of old replaced by new (s itself
 * when old is not there: the check that uses it then fails visibly). */
static char *replace(const char *s, const char *old, const char *new_text) {
    const char *at = strstr(s, old);
    size_t n = strlen(s), a = strlen(old), b = strlen(new_text);
    char *out = (char *)malloc(n - (at ? a : 0) + b + 1);
    if (!at) {
        memcpy(out, s, n + 1);
        return out;
    }
    size_t k = (size_t)(at - s);
    memcpy(out, s, k);
    memcpy(out + k, new_text, b);
    memcpy(out + k + b, at + a, n - k - a + 1);
    return out;
}

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok ? 0 : -1;
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = (unsigned char *)malloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) buf = (unsigned char *)realloc(buf, cap *= 2);
    }
    fclose(f);
    *n = len;
    return buf;
}

/* ============================================================================
 * CRC-32
 * ========================================================================== */

static void test_crc32(void) {
    printf("crc32\n");
    uint32_t c = crc32_update(0, "123456789", 9);
    check(c == 0xCBF43926u, "crc32(\"123456789\") is the standard check value", "%08x (want cbf43926)", (unsigned)c);
    const char *fox = "The quick brown fox jumps over the lazy dog";
    c = crc32_update(0, fox, strlen(fox));
    check(c == 0x414FA339u, "crc32(quick brown fox) as zlib.crc32", "%08x (want 414fa339)", (unsigned)c);
    check(crc32_update(0, "", 0) == 0, "crc32 of nothing is 0", "%08x", (unsigned)crc32_update(0, "", 0));
    uint32_t chained = crc32_update(crc32_update(0, "1234", 4), "56789", 5);
    check(chained == 0xCBF43926u, "chained over two pieces == over the whole", "%08x", (unsigned)chained);
    unsigned char zeros[64] = {0};
    check(crc32_update(0, zeros, 1) != crc32_update(0, zeros, 2), "leading zero bytes change the CRC", "%08x vs %08x", (unsigned)crc32_update(0, zeros, 1),
          (unsigned)crc32_update(0, zeros, 2));
}

/* ============================================================================
 * safetensors: our writer, our reader
 * ========================================================================== */

static void set_tensor(StTensor *t, const char *name, int ndim, long d0, long d1) {
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
}

static void test_st_round_trip(void) {
    printf("safetensors: st_build_header -> st_parse_header\n");
    StTensor t[5];
    set_tensor(&t[0], "embed.weight", 2, 256, 16);
    set_tensor(&t[1], "proj_in.bias", 1, 128, 0);
    set_tensor(&t[2], "scalar", 0, 0, 0);
    set_tensor(&t[3], "empty", 2, 0, 5);
    set_tensor(&t[4], "we\"ird\\name \xc3\xa9", 1, 3, 0); /* quote, backslash, e-acute */
    size_t len = 0;
    unsigned char *head = st_build_header(t, 5, "\"format\":\"pt\",\"producer\":\"fsdp.c\"", &len);
    check(head != NULL, "st_build_header returns a header", "%lu bytes", (unsigned long)len);
    if (!head) return;
    uint64_t N = 0;
    for (int i = 7; i >= 0; i--) N = (N << 8) | head[i];
    check(N + 8 == len && len % 8 == 0, "length prefix N, data at a multiple of 8", "N %llu, data at %lu", (unsigned long long)N, (unsigned long)len);
    check(head[len - 1] == ' ' || head[len - 1] == '}', "padding is spaces after the closing brace", "last byte '%c'", head[len - 1]);
    uint64_t want_begin[5] = {0, 16384, 16896, 16900, 16900}, want_end[5] = {16384, 16896, 16900, 16900, 16912};
    int offsets_ok = 1;
    for (int i = 0; i < 5; i++) offsets_ok &= t[i].begin == want_begin[i] && t[i].end == want_end[i] && !strcmp(t[i].dtype, "F32");
    check(offsets_ok, "begin/end filled in, contiguous from 0, dtype F32", "last ends at %llu", (unsigned long long)t[4].end);

    /* the whole file: header, then the data section */
    size_t size = len + (size_t)t[4].end;
    unsigned char *file = (unsigned char *)calloc(size, 1);
    memcpy(file, head, len);
    StHeader h;
    char err[512] = "";
    int rc = st_parse_header(file, size, size, &h, err, sizeof(err));
    check(rc == 0 && h.n == 5 && h.data_start == len, "our file parses", "rc %d, %d tensors, data_start %llu %s", rc, h.n, (unsigned long long)h.data_start, err);
    int same = rc == 0 && h.n == 5;
    for (int i = 0; same && i < 5; i++) {
        same &= !strcmp(h.tensors[i].name, t[i].name) && !strcmp(h.tensors[i].dtype, "F32") && h.tensors[i].ndim == t[i].ndim;
        same &= h.tensors[i].begin == t[i].begin && h.tensors[i].end == t[i].end;
        for (int d = 0; d < t[i].ndim; d++) same &= h.tensors[i].shape[d] == t[i].shape[d];
    }
    check(same, "every field back as written, in file order", "%s", same ? "names (escapes, UTF-8), dtypes, shapes, offsets" : "differs");
    st_free(&h);

    /* the caller reads 8 bytes first, learns N, then reads the rest */
    rc = st_parse_header(file, 8, size, &h, err, sizeof(err));
    check(rc == 3 && h.data_start == len && h.tensors == NULL, "8 bytes given: code 3 and data_start = 8 + N", "rc %d, data_start %llu: %s", rc,
          (unsigned long long)h.data_start, err);
    st_free(&h);
    rc = st_parse_header(file, len - 1, size, &h, err, sizeof(err));
    check(rc == 3 && strstr(err, "need the first"), "one byte short of the header: code 3", "rc %d: %s", rc, err);
    st_free(&h);
    rc = st_parse_header(file, len, size, &h, err, sizeof(err));
    check(rc == 0 && h.n == 5, "exactly 8 + N bytes given: parses", "rc %d %s", rc, err);
    st_free(&h);
    rc = st_parse_header(file, size - 1, size - 1, &h, err, sizeof(err));
    check(rc == 2 && strstr(err, "beyond the data section"), "the same file one byte short is refused", "rc %d: %s", rc, err);
    st_free(&h);
    free(file);
    free(head);

    /* no tensors, no metadata: "{}" and padding */
    head = st_build_header(NULL, 0, NULL, &len);
    rc = head ? st_parse_header(head, len, len, &h, err, sizeof(err)) : -1;
    check(rc == 0 && h.n == 0 && len == 16, "no tensors: {} padded to 8, parses", "rc %d, %lu bytes %s", rc, (unsigned long)len, err);
    st_free(&h);
    free(head);

    set_tensor(&t[0], "bad", 5, 1, 1);
    head = st_build_header(t, 1, NULL, &len);
    check(head == NULL, "st_build_header refuses ndim 5", "%s", head ? "built" : "NULL");
    free(head);
    set_tensor(&t[0], "bad", 1, -3, 0);
    head = st_build_header(t, 1, NULL, &len);
    check(head == NULL, "st_build_header refuses a negative dimension", "%s", head ? "built" : "NULL");
    free(head);
}

static void test_st_hand_written(void) {
    printf("safetensors: hand-written headers\n");
    st_accepts("a minimal header", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    StHeader h;
    char err[512];
    const char *json = "{ \"x\\u00e9\\/y\\ud83d\\ude00\" : { \"shape\" : [ 1 , 2 ] ,\n \"dtype\":\"F16\", \"data_offsets\":[8,12] } ,\r\n"
           "  \"__metadata__\" : {\"k\":\"v\\n\\t\\\"\\\\\\b\\f\\r\", \"k2\":\"\"},"
           "\"b\":{\"data_offsets\":[0,8],\"dtype\":\"I64\",\"shape\":[]} }    ";
    int rc = st_try(json, 12, &h, err, sizeof(err));
    int ok = rc == 0 && h.n == 2 && !strcmp(h.tensors[0].name, "x\xc3\xa9/y\xf0\x9f\x98\x80") && !strcmp(h.tensors[0].dtype, "F16") && h.tensors[0].ndim == 2 &&
             h.tensors[0].shape[1] == 2 && h.tensors[0].begin == 8 && !strcmp(h.tensors[1].name, "b") && h.tensors[1].ndim == 0;
    check(ok, "whitespace, escapes, surrogate pair, keys in any order", "rc %d %s%s", rc, err, rc == 0 ? (ok ? "" : "fields differ") : "");
    st_free(&h);
    st_accepts("no tensors at all: {}", "{}", 0);
    st_accepts("only __metadata__", "{\"__metadata__\":{}}", 0);
    st_accepts("a zero-size tensor inside the data, any order", "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},\"z\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[2,2]},\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 4);
    st_accepts("a dimension of exactly 2^53 (with another of 0)", "{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,0],\"data_offsets\":[0,0]}}", 0);
    char name[200], buf[400];
    memset(name, 'n', 95);
    name[95] = '\0';
    snprintf(buf, sizeof(buf), "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
    st_accepts("a name of ST_MAX_NAME - 1 = 95 bytes", buf, 1);
}

/* A header with n tensors "t0", "t1", ... of zero bytes each. */
static char *many_tensors(int n) {
    size_t cap = (size_t)n * 64 + 16, len = 0;
    char *s = (char *)malloc(cap);
    len += (size_t)snprintf(s + len, cap - len, "{");
    for (int i = 0; i < n; i++) len += (size_t)snprintf(s + len, cap - len, "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", i ? "," : "", i);
    snprintf(s + len, cap - len, "}");
    return s;
}

static void test_st_rejects(void) {
    printf("safetensors: every rule broken once\n");
    StHeader h;
    char err[512];
    unsigned char tiny[5] = {1, 0, 0, 0, 0};
    int rc = st_parse_header(tiny, 5, 5, &h, err, sizeof(err));
    check(rc == 2 && strstr(err, "8-byte"), "fewer than 8 bytes", "rc %d: %s", rc, err);
    st_free(&h);
    unsigned char zero[16] = {0};
    rc = st_parse_header(zero, 16, 16, &h, err, sizeof(err));
    check(rc == 2 && strstr(err, "length is 0"), "N == 0", "rc %d: %s", rc, err);
    st_free(&h);
    unsigned char big[8] = {0x00, 0x01, 0, 0, 0, 0, 0, 0}; /* N = 256 */
    rc = st_parse_header(big, 8, 100, &h, err, sizeof(err));
    check(rc == 2 && strstr(err, "runs past the end"), "N > file_size - 8", "rc %d: %s", rc, err);
    st_free(&h);
    unsigned char huge[8] = {0, 0xc2, 0xeb, 0x0b, 0, 0, 0, 0}; /* N = 200,000,000 */
    rc = st_parse_header(huge, 8, (uint64_t)1 << 40, &h, err, sizeof(err));
    check(rc == 2 && strstr(err, "limit"), "N over the 100 MB header limit", "rc %d: %s", rc, err);
    st_free(&h);
    rc = st_parse_header(big, 8, 1000, &h, err, sizeof(err));
    check(rc == 3 && h.data_start == 264 && strstr(err, "264"), "N > len - 8: code 3, asks for 8 + N bytes", "rc %d, data_start %llu: %s", rc,
          (unsigned long long)h.data_start, err);
    st_free(&h);

    const char *A = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char buf[1024];
#define WITH(fmt) (snprintf(buf, sizeof(buf), fmt, A), buf)
    /* JSON syntax */
    st_refuses("JSON: missing ':'", "{\"a\" {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "expected ':'");
    st_refuses("JSON: trailing comma", WITH("{%s,}"), 8, "after ','");
    st_refuses("JSON: trailing comma in a tensor", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],}}", 8, "after ','");
    st_refuses("JSON: trailing comma in an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,],\"data_offsets\":[0,8]}}", 8, "integer in shape");
    st_refuses("JSON: missing comma between tensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]} \"b\":{}}", 1, "',' or '}'");
    st_refuses("JSON: cut short", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]", 8, "end of the header");
    st_refuses("JSON: unterminated string", "{\"a", 0, "unterminated string");
    st_refuses("JSON: bytes after the closing brace", WITH("{%s} x"), 8, "after the header's closing");
    st_refuses("JSON: a second object after the first", WITH("{%s}{}"), 8, "after the header's closing");
    st_refuses("JSON: header does not start with '{'", WITH(" {%s}"), 8, "does not start with '{'");
    st_refuses("JSON: top level is an array", "[1]", 0, "does not start with '{'");
    st_refuses("JSON: unknown escape", "{\"a\\x\":{}}", 0, "unknown escape");
    st_refuses("JSON: \\u with too few hex digits", "{\"a\\u12\":{}}", 0, "four hex digits");
    st_refuses("JSON: raw control byte in a string", "{\"a\tb\":{}}", 0, "control byte");
    st_refuses("JSON: invalid UTF-8", "{\"a\xff\":{}}", 0, "UTF-8");
    st_refuses("JSON: overlong UTF-8", "{\"a\xc0\xaf\":{}}", 0, "UTF-8");
    st_refuses("JSON: lone low surrogate", "{\"a\\udc00\":{}}", 0, "surrogate");
    st_refuses("JSON: high surrogate without its pair", "{\"a\\ud800x\":{}}", 0, "surrogate");
    st_refuses("JSON: single quotes", "{'a':{}}", 0, "a string");
    /* values */
    st_refuses("a tensor that is a number, not an object", "{\"a\":5}", 0, "described by an object");
    st_refuses("a tensor that is an array", "{\"a\":[0,8]}", 0, "described by an object");
    st_refuses("a tensor that is null", "{\"a\":null}", 0, "described by an object");
    st_refuses("duplicate tensor names", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
               "two tensors are named 'a'");
    st_refuses("a tensor without dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "has no dtype");
    st_refuses("a tensor without shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "has no shape");
    st_refuses("a tensor without data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "has no data_offsets");
    st_refuses("an empty tensor object", "{\"a\":{}}", 0, "has no dtype");
    st_refuses("an unknown key in a tensor", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"foo\":1}}", 8, "unknown key 'foo'");
    st_refuses("a key twice in a tensor", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype given twice");
    st_refuses("\"dtype\\u0000\" is not the key dtype", "{\"a\":{\"dtype\\u0000\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown key");
    st_refuses("dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "a string (dtype)");
    st_refuses("dtype an object (nesting)", "{\"a\":{\"dtype\":{\"F32\":1},\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "a string (dtype)");
    st_refuses("unknown dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype 'F33'");
    st_refuses("dtype with a NUL inside", "{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype");
    st_refuses("shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "shape is an array");
    st_refuses("shape with a negative dimension", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "negative");
    st_refuses("shape with a string", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, "integer in shape");
    st_refuses("shape with a nested array", "{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8, "integer in shape");
    st_refuses("shape with 5 dimensions", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, "more than 4");
    st_refuses("a fraction", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "fractions");
    st_refuses("an exponent", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8e0]}}", 8, "exponents");
    st_refuses("leading zeros", "{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "leading zeros");
    st_refuses("a number over 2^53", "{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740993,0],\"data_offsets\":[0,0]}}", 0, "larger than 2^53");
    st_refuses("a number over 2^64", "{\"a\":{\"dtype\":\"F32\",\"shape\":[184467440737095516160],\"data_offsets\":[0,0]}}", 0, "larger than 2^53");
    st_refuses("data_offsets with one number", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8, "[begin, end]");
    st_refuses("data_offsets with three numbers", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "more than 2");
    st_refuses("data_offsets with begin > end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, "end before they begin");
    st_refuses("data_offsets beyond the data section", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, "beyond the data section");
    st_refuses("bytes != product(shape) * dtype size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "shape [3] of F32 needs 12");
    st_refuses("a shape too large for any file", "{\"a\":{\"dtype\":\"F64\",\"shape\":[9007199254740992,9007199254740992],\"data_offsets\":[0,8]}}", 8,
               "more bytes than a file can hold");
    st_refuses("overlapping tensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6,
               "overlap");
    st_refuses("the same bytes claimed twice", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
               "overlap");
    st_refuses("a zero-size tensor inside another", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}", 4,
               "overlap");
    st_refuses("a gap between tensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}", 6, "gap");
    st_refuses("a gap before the first tensor", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3, "gap");
    st_refuses("trailing bytes after the last tensor", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 3, "trailing bytes");
    st_refuses("data but no tensors", "{}", 4, "trailing bytes");
    st_refuses("an empty name", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "empty name");
    char name[200];
    memset(name, 'n', 96);
    name[96] = '\0';
    snprintf(buf, sizeof(buf), "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", name);
    st_refuses("a name of ST_MAX_NAME = 96 bytes", buf, 1, "at most 95");
    st_refuses("a name with \\n", "{\"a\\nb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "control character");
    st_refuses("a name with \\u0000", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "control character");
    st_refuses("a name with U+0085 (a C1 control), not echoed raw", "{\"a\xc2\x85\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "name 'a?\?' contains a control character");
    st_refuses("\"__metadata__\\u0000x\" is a tensor name, not metadata", "{\"__metadata__\\u0000x\":{}}", 0, "control character");
    /* metadata */
    st_refuses("__metadata__ not an object", "{\"__metadata__\":\"pt\"}", 0, "__metadata__ is an object");
    st_refuses("__metadata__ with a number value", "{\"__metadata__\":{\"k\":1}}", 0, "values are strings");
    st_refuses("__metadata__ with an object value (nesting)", "{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "values are strings");
    st_refuses("__metadata__ with a key twice", "{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"\\u006b\":\"3\"}}", 0, "key 'k' twice");
    st_refuses("__metadata__ twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ given twice");
    st_accepts("__metadata__ keys differing after a NUL", "{\"__metadata__\":{\"k\\u0000a\":\"1\",\"k\\u0000b\":\"2\"}}", 0);
    /* deep nesting is an error at the first level that does not allow it */
    {
        size_t depth = 100000;
        char *deep = (char *)malloc(depth * 2 + 16);
        size_t n = (size_t)sprintf(deep, "{\"a\":");
        for (size_t i = 0; i < depth; i++) deep[n++] = '[';
        for (size_t i = 0; i < depth; i++) deep[n++] = ']';
        deep[n++] = '}';
        deep[n] = '\0';
        st_refuses("100000 nested arrays: refused, no deep recursion", deep, 0, "described by an object");
        free(deep);
    }
    /* the tensor count limit, and the count just under it */
    {
        char *s = many_tensors(ST_MAX_TENSORS);
        st_accepts("ST_MAX_TENSORS = 100000 tensors", s, 0);
        free(s);
        s = many_tensors(ST_MAX_TENSORS + 1);
        st_refuses("100001 tensors", s, 0, "more than 100000 tensors");
        free(s);
    }
    /* messages stay one line and fit the buffer, whatever the input */
    {
        char small[8];
        int rc2 = st_try("{\"a\\nb\":5}", 0, &h, small, sizeof(small));
        check(rc2 == 2 && strlen(small) == 7, "a small err buffer is filled and terminated", "rc %d, \"%s\"", rc2, small);
        st_free(&h);
        rc2 = st_try("{\"a\":5}", 0, &h, NULL, 0);
        check(rc2 == 2, "err may be NULL with errlen 0", "rc %d", rc2);
        st_free(&h);
        rc2 = st_try("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\\ny\":1}}", 4, &h, err, sizeof(err));
        check(rc2 == 2 && !strchr(err, '\n'), "a quoted key with \\n stays on one line", "%s", err);
        st_free(&h);
    }
#undef WITH
}

/* ============================================================================
 * safetensors: files written by Hugging Face's library
 *
 * tests/fixtures/st_check.py writes these tensors (the same list is in the
 * script); we check names, dtypes, shapes and the data bytes themselves.
 * ========================================================================== */

typedef struct {
    const char *name, *dtype;
    int ndim;
    long shape[2];
} Expected;

static const Expected REFERENCE[] = {
    {"embed.weight", "F32", 2, {3, 4}},   /* arange(12) * 0.5             */
    {"blocks.0.fc1.bias", "F32", 1, {5, 0}}, /* arange(5) - 2             */
    {"half", "F16", 2, {2, 3}},            /* arange(6)                    */
    {"ids", "I64", 1, {3, 0}},             /* 1, -2, 3                     */
    {"mask", "BOOL", 1, {5, 0}},           /* T F T T F                    */
    {"scalar", "F64", 0, {0, 0}},          /* 3.25                         */
    {"empty", "F32", 2, {0, 3}},
    {"u8", "U8", 1, {7, 0}},               /* arange(7)                    */
    {"name with spaces \xc3\xa9", "F32", 1, {2, 0}}, /* ones                */
};
#define N_REFERENCE ((int)(sizeof(REFERENCE) / sizeof(REFERENCE[0])))

static float le_f32(const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Parses a reference file and checks its tensors, values included. */
static void check_reference_file(const char *label, const char *path) {
    size_t size = 0;
    unsigned char *f = read_file(path, &size);
    char what[160], err[512] = "";
    snprintf(what, sizeof(what), "%s parses", label);
    if (!f) {
        check(0, what, "cannot read %s", path);
        return;
    }
    StHeader h;
    int rc = st_parse_header(f, size, size, &h, err, sizeof(err));
    check(rc == 0 && h.n == N_REFERENCE, what, "rc %d, %d tensors, data at %llu %s", rc, h.n, (unsigned long long)h.data_start, err);
    int found = 0, fields = 1, values = 1;
    for (int i = 0; rc == 0 && i < N_REFERENCE; i++) {
        const Expected *e = &REFERENCE[i];
        const StTensor *t = NULL;
        for (int j = 0; j < h.n; j++)
            if (!strcmp(h.tensors[j].name, e->name)) t = &h.tensors[j];
        if (!t) continue;
        found++;
        fields &= !strcmp(t->dtype, e->dtype) && t->ndim == e->ndim;
        for (int d = 0; d < e->ndim; d++) fields &= t->shape[d] == e->shape[d];
        const unsigned char *data = f + h.data_start + t->begin;
        if (!strcmp(e->name, "embed.weight"))
            for (int k = 0; k < 12; k++) values &= le_f32(data + 4 * k) == 0.5f * (float)k;
        if (!strcmp(e->name, "blocks.0.fc1.bias"))
            for (int k = 0; k < 5; k++) values &= le_f32(data + 4 * k) == (float)k - 2.0f;
        if (!strcmp(e->name, "ids")) values &= data[0] == 1 && data[8] == 0xfe && data[15] == 0xff && data[16] == 3;
        if (!strcmp(e->name, "mask")) values &= !memcmp(data, "\1\0\1\1\0", 5);
        if (!strcmp(e->name, "u8"))
            for (int k = 0; k < 7; k++) values &= data[k] == k;
        if (!strcmp(e->name, "scalar")) values &= t->end - t->begin == 8 && data[7] == 0x40 && data[6] == 0x0a; /* 3.25 = 0x400a000000000000 */
    }
    snprintf(what, sizeof(what), "%s: names, dtypes, shapes", label);
    check(rc == 0 && found == N_REFERENCE && fields, what, "%d of %d found, fields %s", found, N_REFERENCE, fields ? "equal" : "differ");
    snprintf(what, sizeof(what), "%s: data where data_offsets say", label);
    check(rc == 0 && found == N_REFERENCE && values, what, "%s", values ? "F32, I64, BOOL, U8, F64 values as written" : "values differ");
    st_free(&h);
    free(f);
}

/* Where tests/fixtures is, from the path this program was started by. */
static void fixtures_dir(const char *argv0, char *out, size_t n) {
    const char *slash = strrchr(argv0, '/');
    if (!slash) snprintf(out, n, "fixtures");
    else snprintf(out, n, "%.*s/fixtures", (int)(slash - argv0), argv0);
}

/* Our own file for the reference library to read: F32 tensors with known
 * values and a name that needs escaping. */
static int write_our_file(const char *path) {
    StTensor t[4];
    set_tensor(&t[0], "embed.weight", 2, 3, 4);
    set_tensor(&t[1], "proj_in.bias", 1, 5, 0);
    set_tensor(&t[2], "scalar", 0, 0, 0);
    set_tensor(&t[3], "q\"uote\\back \xc3\xa9", 2, 0, 3);
    size_t len;
    unsigned char *head = st_build_header(t, 4, "\"format\":\"pt\",\"producer\":\"fsdp.c\"", &len);
    if (!head) return -1;
    float data[18];
    for (int k = 0; k < 12; k++) data[k] = 0.5f * (float)k;
    for (int k = 0; k < 5; k++) data[12 + k] = (float)k - 2.0f;
    data[17] = 3.25f;
    size_t size = len + sizeof(data);
    unsigned char *file = (unsigned char *)malloc(size);
    memcpy(file, head, len);
    memcpy(file + len, data, sizeof(data)); /* x86 and ARM: already little-endian */
    int rc = write_file(path, file, size);
    free(file);
    free(head);
    return rc;
}

static void test_st_reference_fixture(const char *argv0) {
    printf("safetensors: a file written by Hugging Face's library\n");
    char dir[512], path[1024];
    fixtures_dir(argv0, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/reference.safetensors", dir);
    check_reference_file("fixtures/reference.safetensors (safetensors 0.8)", path);
}

/* Live: the library reads a file we write, and we read one it writes now.
 * Returns 77 when python3 lacks the packages. */
static int test_st_interop(const char *argv0) {
    printf("safetensors: live interop with Hugging Face's library\n");
    if (system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0) {
        printf("skip: python3 with safetensors and numpy not found (pip install safetensors numpy)\n");
        return 77;
    }
    char dir[512], cmd[3072];
    fixtures_dir(argv0, dir, sizeof(dir));
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char tdir[512];
    snprintf(tdir, sizeof(tdir), "%s/test_formats.XXXXXX", tmp);
    if (!mkdtemp(tdir)) {
        check(0, "live interop", "cannot create a temporary directory in %s", tmp);
        return 0;
    }
    char ours[1024], theirs[1024], log[1024];
    snprintf(ours, sizeof(ours), "%s/ours.safetensors", tdir);
    snprintf(theirs, sizeof(theirs), "%s/theirs.safetensors", tdir);
    snprintf(log, sizeof(log), "%s/log.txt", tdir);
    int rc = write_our_file(ours);
    if (rc == 0) {
        snprintf(cmd, sizeof(cmd), "python3 '%s/st_check.py' read '%s' >'%s' 2>&1", dir, ours, log);
        rc = system(cmd);
    }
    size_t n = 0;
    char *out = (char *)read_file(log, &n);
    if (out) out[n ? n - 1 : 0] = '\0';
    check(rc == 0, "live interop: the library reads our file", "%s", out ? out : "(no output)");
    free(out);
    snprintf(cmd, sizeof(cmd), "python3 '%s/st_check.py' write '%s' >'%s' 2>&1", dir, theirs, log);
    rc = system(cmd);
    if (rc != 0) check(0, "live interop: the library writes a file", "st_check.py write failed (exit %d)", rc);
    else check_reference_file("live interop: a file the library just wrote", theirs);
    remove(ours);
    remove(theirs);
    remove(log);
    rmdir(tdir);
    return 0;
}

/* ============================================================================
 * meta.txt
 * ========================================================================== */

/* A checkpoint's metadata as fsdp.c lays it out: the root unit (embed,
 * proj_in, norm_f, head), then one unit per block; parameters end to end;
 * padding and shards by the strategy's rule. Free with meta_free. */
static void sample_meta(CkptMeta *m, int world, const char *strategy, int depth) {
    memset(m, 0, sizeof(*m));
    m->version = META_VERSION;
    m->world = world;
    snprintf(m->strategy, sizeof(m->strategy), "%s", strategy);
    m->vocab = 256;
    m->embed_dim = 16;
    m->context = 16;
    m->width = 128;
    m->depth = depth; /* at most 4 */
    m->min_params = 131968;
    m->seed = 18446744073709551615ull; /* the largest u64: all 64 bits survive */
    m->batch = 64;
    m->data_is_file = 0; /* "data synthetic"; meta_round_trip tries the other form too */
    m->data_train = 117965;
    m->step = 100;
    m->adam_step = 100;
    snprintf(m->optimizer, sizeof(m->optimizer), "adamw");
    m->beta1_bits = 0x3f666666u; /* 0.9 */
    m->beta2_bits = 0x3f7fbe77u; /* 0.999 */
    m->eps_bits = 0x322bcc77u;   /* 1e-8 */
    m->weight_decay_bits = 0x3c23d70au; /* 0.01 */
    m->clip_bits = 0x3f800000u;  /* 1.0 */
    snprintf(m->param_dtype, sizeof(m->param_dtype), "bf16");
    snprintf(m->reduce_dtype, sizeof(m->reduce_dtype), "fp32");
    int sharded = strcmp(strategy, "no_shard") != 0, D = m->width;
    m->n_units = 1 + m->depth;
    m->units = (MetaUnit *)calloc((size_t)m->n_units, sizeof(MetaUnit));
    m->n_params = 7 + 6 * m->depth;
    m->params = (MetaParam *)calloc((size_t)m->n_params, sizeof(MetaParam));
    struct { const char *name; int unit, rows, cols; } list[32];
    int n = 0;
    list[n].name = "embed.weight", list[n].unit = 0, list[n].rows = 256, list[n++].cols = 16;
    list[n].name = "proj_in.weight", list[n].unit = 0, list[n].rows = D, list[n++].cols = 256;
    list[n].name = "proj_in.bias", list[n].unit = 0, list[n].rows = D, list[n++].cols = 1;
    static char names[24][32];
    for (int b = 0; b < m->depth; b++) {
        const char *suffix[6] = {"norm.weight", "norm.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
        int rows[6] = {D, D, 4 * D, 4 * D, D, D}, cols[6] = {1, 1, D, 1, 4 * D, 1};
        for (int k = 0; k < 6; k++) {
            snprintf(names[6 * b + k], sizeof(names[0]), "blocks.%d.%s", b, suffix[k]);
            list[n].name = names[6 * b + k], list[n].unit = 1 + b, list[n].rows = rows[k], list[n++].cols = cols[k];
        }
    }
    list[n].name = "norm_f.weight", list[n].unit = 0, list[n].rows = D, list[n++].cols = 1;
    list[n].name = "norm_f.bias", list[n].unit = 0, list[n].rows = D, list[n++].cols = 1;
    list[n].name = "head.weight", list[n].unit = 0, list[n].rows = 256, list[n++].cols = D;
    list[n].name = "head.bias", list[n].unit = 0, list[n].rows = 256, list[n++].cols = 1;
    for (int i = 0; i < n; i++) {
        MetaParam *p = &m->params[i];
        snprintf(p->name, sizeof(p->name), "%s", list[i].name);
        p->unit = list[i].unit;
        p->shape[0] = list[i].rows;
        p->shape[1] = list[i].cols;
        p->numel = (long)list[i].rows * list[i].cols;
        p->offset = m->units[p->unit].numel;
        m->units[p->unit].numel += p->numel;
    }
    uint64_t bytes = SHARD_HEADER_BYTES;
    for (int u = 0; u < m->n_units; u++) {
        MetaUnit *x = &m->units[u];
        x->padded = (x->numel + world - 1) / world * world;
        x->shard = sharded ? x->padded / world : x->padded;
        bytes += 3 * 4 * (uint64_t)x->shard;
    }
    m->n_files = sharded ? world : 1;
    m->files = (MetaFile *)calloc((size_t)m->n_files, sizeof(MetaFile));
    for (int r = 0; r < m->n_files; r++) {
        snprintf(m->files[r].name, sizeof(m->files[r].name), "shard-%05d.bin", r);
        m->files[r].bytes = bytes;
        m->files[r].crc = 0x1a2b3c4du * (uint32_t)(r + 1);
    }
}

static int meta_equal(const CkptMeta *a, const CkptMeta *b) {
    int eq = a->version == b->version && a->world == b->world && !strcmp(a->strategy, b->strategy) && a->vocab == b->vocab && a->embed_dim == b->embed_dim &&
             a->context == b->context && a->width == b->width && a->depth == b->depth && a->min_params == b->min_params && a->seed == b->seed &&
             a->step == b->step && a->adam_step == b->adam_step && a->n_units == b->n_units && a->n_params == b->n_params && a->n_files == b->n_files;
    eq = eq && a->batch == b->batch && a->data_is_file == b->data_is_file &&
         a->data_bytes == b->data_bytes && a->data_crc == b->data_crc &&
         a->data_train == b->data_train;
    eq = eq && !strcmp(a->optimizer, b->optimizer) && a->beta1_bits == b->beta1_bits &&
         a->beta2_bits == b->beta2_bits && a->eps_bits == b->eps_bits &&
         a->weight_decay_bits == b->weight_decay_bits && a->clip_bits == b->clip_bits &&
         !strcmp(a->param_dtype, b->param_dtype) && !strcmp(a->reduce_dtype, b->reduce_dtype);
    for (int i = 0; eq && i < a->n_units; i++)
        eq = a->units[i].numel == b->units[i].numel && a->units[i].padded == b->units[i].padded && a->units[i].shard == b->units[i].shard;
    for (int i = 0; eq && i < a->n_params; i++) {
        const MetaParam *p = &a->params[i], *q = &b->params[i];
        eq = !strcmp(p->name, q->name) && p->unit == q->unit && p->offset == q->offset && p->shape[0] == q->shape[0] && p->shape[1] == q->shape[1] && p->numel == q->numel;
    }
    for (int i = 0; eq && i < a->n_files; i++)
        eq = !strcmp(a->files[i].name, b->files[i].name) && a->files[i].bytes == b->files[i].bytes && a->files[i].crc == b->files[i].crc;
    return eq;
}

/* The bytes of text before its "end" line (the end line's crc32 covers
 * them), or 0 when there is no "\nend " in it. */
static size_t before_end(const char *text) {
    const char *at = strstr(text, "\nend ");
    return at ? (size_t)(at - text) + 1 : 0;
}

static void meta_round_trip(int world, const char *strategy, int data_is_file) {
    CkptMeta m, back;
    sample_meta(&m, world, strategy, 2);
    if (data_is_file) {
        m.data_is_file = 1;
        m.data_bytes = 123456;
        m.data_crc = 0x0000beefu; /* leading zeros: written as 8 digits */
    }
    m.meta_crc = 0x12345678u; /* meta_format ignores it: it computes its own */
    size_t len = 0;
    char *text = meta_format(&m, &len);
    char err[512] = "", what[96];
    int rc = text ? meta_parse(text, len, &back, err, sizeof(err)) : -1;
    snprintf(what, sizeof(what), "round trip, %s on %d ranks, data %s", strategy, world,
             data_is_file ? "file" : "synthetic");
    check(rc == 0 && meta_equal(&m, &back), what, "rc %d, %d units, %d params, %d files, %lu bytes %s", rc, back.n_units, back.n_params, back.n_files,
          (unsigned long)len, err);
    if (rc == 0) {
        uint32_t want = crc32_update(0, text, before_end(text));
        snprintf(what, sizeof(what), "meta_crc = crc32 of the lines above 'end', %s", strategy);
        check(back.meta_crc == want && back.version == META_VERSION, what, "%08x (want %08x)",
              (unsigned)back.meta_crc, (unsigned)want);
    }
    if (rc == 0) {
        size_t len2 = 0;
        char *again = meta_format(&back, &len2);
        snprintf(what, sizeof(what), "format(parse(text)) == text, %s", strategy);
        check(again && len2 == len && !memcmp(again, text, len), what, "%lu bytes", (unsigned long)len2);
        free(again);
    }
    meta_free(&back);
    meta_free(&m);
    free(text);
}

/* The sample text (full_shard on 4 ranks), malloc'd. */
static char *sample_text(void) {
    CkptMeta m;
    sample_meta(&m, 4, "full_shard", 2);
    size_t len;
    char *text = meta_format(&m, &len);
    meta_free(&m);
    return text;
}

static void meta_refuses(const char *what, const char *text, const char *needle) {
    CkptMeta m;
    char err[512] = "";
    size_t len = strlen(text);
    char *exact = (char *)malloc(len ? len : 1); /* no NUL after it: ASan sees any read past len */
    memcpy(exact, text, len);
    int rc = meta_parse(exact, len, &m, err, sizeof(err));
    free(exact);
    check(rc == 2 && strstr(err, needle) && strncmp(err, "line ", 5) == 0 && !m.units && !m.params && !m.files, what, "rc %d: %s", rc, err);
    meta_free(&m);
}

/* Replaces old with new in the sample text and expects a refusal. */
static void meta_edit_refuses(const char *what, const char *old, const char *new_text, const char *needle) {
    char *text = sample_text();
    char *bad = replace(text, old, new_text);
    if (!strcmp(bad, text)) check(0, what, "test bug: '%s' not in the sample", old);
    else meta_refuses(what, bad, needle);
    free(bad);
    free(text);
}

/* Rewrites the crc32 on text's "end" line to match the lines above it, as
 * someone who edits meta.txt and knows the format would. In place. */
static void fix_crc(char *text) {
    size_t at = before_end(text);
    char *hex = at ? strstr(text + at, "crc32 ") : NULL;
    if (!hex || strlen(hex) < 14) return; /* no end line to fix: the check that uses it fails */
    char digits[9];
    snprintf(digits, sizeof(digits), "%08x", (unsigned)crc32_update(0, text, at));
    memcpy(hex + 6, digits, 8);
}

/* The same edit, with the crc32 fixed afterwards: accepted (so it was the
 * crc32 alone that refused the edit), or refused with needle (a rule that
 * holds whatever the crc32 says). needle NULL: must be accepted. */
static void meta_edit_fixed(const char *what, const char *old, const char *new_text,
                            const char *needle) {
    char *text = sample_text();
    char *edited = replace(text, old, new_text);
    fix_crc(edited);
    if (!strcmp(edited, text)) {
        check(0, what, "test bug: '%s' not in the sample", old);
    } else if (needle) {
        meta_refuses(what, edited, needle);
    } else {
        CkptMeta m;
        char err[512] = "";
        int rc = meta_parse(edited, strlen(edited), &m, err, sizeof(err));
        check(rc == 0, what, "rc %d %s", rc, err);
        meta_free(&m);
    }
    free(edited);
    free(text);
}

/* The sample's "end" line, "end crc32 xxxxxxxx\n", malloc'd. */
static char *sample_end_line(void) {
    char *text = sample_text();
    size_t at = before_end(text);
    char *line = (char *)malloc(strlen(text + at) + 1);
    strcpy(line, text + at);
    free(text);
    return line;
}

static void test_meta(void) {
    printf("meta.txt: meta_format -> meta_parse\n");
    meta_round_trip(4, "full_shard", 0);
    meta_round_trip(4, "full_shard", 1);
    meta_round_trip(3, "shard_grad_op", 1);
    meta_round_trip(1, "full_shard", 0);
    meta_round_trip(4, "no_shard", 1);
    meta_round_trip(7, "full_shard", 0); /* units that do not divide by 7 */
    {
        CkptMeta m;
        sample_meta(&m, 4, "full_shard", 2);
        m.version = 1; /* meta_format writes META_VERSION whatever this says */
        size_t len;
        char *text = meta_format(&m, &len);
        check(text && !strncmp(text, "fsdp-checkpoint 7\n", 18),
              "meta_format writes version 7, whatever m->version says", "%.17s",
              text ? text : "(NULL)");
        free(text);
        meta_free(&m);
    }

    char *text = sample_text();
    size_t len = strlen(text);
    CkptMeta m;
    char err[512];
    printf("meta.txt: a cut-short file is refused\n");
    int refused = 0, prefixes = 0, boundary_msgs = 0, boundaries = 0, cut_msgs = 0;
    for (size_t cut = 0; cut + 1 < len; cut++) { /* every prefix but text minus its last "\n" */
        char *prefix = (char *)malloc(cut + 1); /* exact size: ASan sees any read past it */
        memcpy(prefix, text, cut);
        int rc = meta_parse(prefix, cut, &m, err, sizeof(err));
        meta_free(&m);
        prefixes++;
        refused += rc == 2;
        cut_msgs += rc == 2 && strstr(err, "cut short?") != NULL;
        if (cut == 0 || text[cut - 1] == '\n') {
            boundaries++;
            boundary_msgs += rc == 2 && strstr(err, "cut short") != NULL;
        }
        free(prefix);
    }
    check(refused == prefixes, "every proper prefix refused", "%d of %d", refused, prefixes);
    check(boundary_msgs == boundaries, "cut at a line boundary: 'cut short?'", "%d of %d line boundaries", boundary_msgs, boundaries);
    check(cut_msgs == prefixes, "cut anywhere: the message says 'cut short?'", "%d of %d prefixes", cut_msgs, prefixes);
    int rc = meta_parse(text, len - 1, &m, err, sizeof(err));
    check(rc == 0, "\"end\" without its final newline is complete", "rc %d %s", rc, err);
    meta_free(&m);
    char *more = (char *)malloc(len + 8);
    snprintf(more, len + 8, "%s \n\t\n", text);
    rc = meta_parse(more, strlen(more), &m, err, sizeof(err));
    check(rc == 0, "whitespace after \"end\" is fine", "rc %d %s", rc, err);
    meta_free(&m);
    free(more);

    printf("meta.txt: every rule broken once\n");
    meta_edit_refuses("wrong magic", "fsdp-checkpoint 7\n", "fsdp-checkpoinT 4\n",
                      "not an fsdp.c checkpoint");
    meta_refuses("not a checkpoint at all", "{\"a\":1}\n", "not an fsdp.c checkpoint");
    meta_refuses("empty text", "", "cut short");
    meta_edit_refuses("version 1 (an older fsdp.c)", "fsdp-checkpoint 7\n", "fsdp-checkpoint 1\n",
                      "line 1: version 1 was written by an older fsdp.c, before checkpoints "
                      "carried their own checksums; "
                      "this fsdp.c reads version 7 only: train again to re-create it");
    meta_edit_refuses("version 2 (before the lr schedule)", "fsdp-checkpoint 7\n",
                      "fsdp-checkpoint 2\n",
                      "line 1: version 2 was written by an older fsdp.c, before checkpoints "
                      "carried their own learning-rate schedule; this fsdp.c reads version 7");
    meta_edit_refuses("version 3 (before the loss scaler)", "fsdp-checkpoint 7\n",
                      "fsdp-checkpoint 3\n",
                      "line 1: version 3 was written by an older fsdp.c, before checkpoints "
                      "carried their own loss scaler's state; this fsdp.c reads version 7");
    meta_edit_refuses("version 4 (before the optimizer settings)", "fsdp-checkpoint 7\n",
                      "fsdp-checkpoint 4\n",
                      "line 1: version 4 was written by an older fsdp.c, before checkpoints "
                      "carried their own optimizer settings; this fsdp.c reads version 7");
    meta_edit_refuses("version 5 (before the held-out tenth)", "fsdp-checkpoint 7\n",
                      "fsdp-checkpoint 5\n",
                      "line 1: version 5 was written by an older fsdp.c, before checkpoints "
                      "carried their own data's held-out tenth; this fsdp.c reads version 7");
    meta_edit_refuses("version 6 (before --min-lr and the decay's group)", "fsdp-checkpoint 7\n",
                      "fsdp-checkpoint 6\n",
                      "line 1: version 6 was written by an older fsdp.c, before checkpoints "
                      "carried their own --min-lr and weight decay's group; this fsdp.c reads "
                      "version 7");
    meta_edit_refuses("version 8", "fsdp-checkpoint 7\n", "fsdp-checkpoint 8\n",
                      "version 8; this fsdp.c reads version 7 only");
    meta_edit_refuses("version 0", "fsdp-checkpoint 7\n", "fsdp-checkpoint 0\n",
                      "version 0; this fsdp.c reads version 7 only");
    meta_edit_refuses("grad_scaler neither off nor a state", "grad_scaler off\n", "grad_scaler on\n",
                      "expected 'grad_scaler scale XXXXXXXX growth N' (5 fields), found 2");
    meta_edit_refuses("grad_scaler scale 0", "grad_scaler off\n", "grad_scaler scale 00000000 growth 0\n",
                      "grad_scaler scale 00000000 is not a positive normal float");
    meta_edit_refuses("grad_scaler scale inf", "grad_scaler off\n", "grad_scaler scale 7f800000 growth 0\n",
                      "is not a positive normal float");
    meta_edit_refuses("grad_scaler scale a denormal (1/scale is inf)", "grad_scaler off\n",
                      "grad_scaler scale 00000001 growth 0\n",
                      "grad_scaler scale 00000001 is not a positive normal float");
    meta_edit_refuses("an unknown optimizer", "optimizer adamw ", "optimizer sgd ",
                      "unknown optimizer 'sgd' (adamw or adam)");
    meta_edit_refuses("beta1 1.0", "beta1 3f666666", "beta1 3f800000",
                      "beta1 3f800000 is not a float in [0, 1)");
    meta_edit_refuses("beta2 NaN", "beta2 3f7fbe77", "beta2 7fc00000",
                      "beta2 7fc00000 is not a float in [0, 1)");
    meta_edit_refuses("eps 0", "eps 322bcc77", "eps 00000000",
                      "eps 00000000 is not a positive normal float");
    meta_edit_refuses("eps a denormal", "eps 322bcc77", "eps 00000010",
                      "eps 00000010 is not a positive normal float");
    meta_edit_refuses("weight_decay 2", "weight_decay 3c23d70a", "weight_decay 40000000",
                      "weight_decay 40000000 is not a float in [0, 1]");
    meta_edit_refuses("clip_grad_norm inf", "clip_grad_norm 3f800000", "clip_grad_norm 7f800000",
                      "clip_grad_norm 7f800000 is not a finite float >= 0 (0: off)");
    meta_edit_refuses("no optimizer line (a version-4 body)", "optimizer adamw ", "xoptimizer adamw ",
                      "expected 'optimizer'");
    meta_edit_refuses("an unknown param_dtype", "param_dtype bf16", "param_dtype fp8",
                      "unknown param_dtype 'fp8' (fp32, bf16 or fp16)");
    meta_edit_refuses("an unknown reduce_dtype", "reduce_dtype fp32", "reduce_dtype half",
                      "unknown reduce_dtype 'half' (fp32, bf16 or fp16)");
    meta_edit_refuses("grad_scaler growth 2000", "grad_scaler off\n", "grad_scaler scale 47800000 growth 2000\n",
                      "grad_scaler growth 2000: the scale doubles at 2000");
    meta_edit_refuses("no grad_scaler line (a version-3 body)", "grad_scaler off\n", "",
                      "expected 'grad_scaler', found 'units'");
    meta_edit_refuses("an unknown lr_schedule", "lr_schedule constant ", "lr_schedule onecycle ",
                      "unknown lr_schedule 'onecycle' (constant, step, cosine or linear)");
    meta_edit_refuses("an unknown decay", " decay all\n", " decay vectors\n",
                      "unknown decay 'vectors' (all or matrices)");
    meta_edit_refuses("optimizer without its decay", " decay all\n", "\n", "(14 fields), found 12");
    meta_edit_refuses("lr_schedule step_size 0", "step_size 1 ", "step_size 0 ",
                      "step_size 0 must be >= 1");
    meta_edit_refuses("lr_schedule without gamma", " gamma 00000000", "",
                      "(14 fields), found 12");
    meta_edit_refuses("lr_schedule without min_lr", " min_lr 00000000", "",
                      "(14 fields), found 12");
    meta_edit_refuses("no lr_schedule line (a version-2 body)",
                      "adam_step 100\nlr_schedule constant lr 00000000 warmup 0 step_size 1 gamma "
                      "00000000 steps 0 min_lr 00000000\n",
                      "adam_step 100\n", "expected 'lr_schedule', found 'optimizer'");
    meta_edit_refuses("world 0", "world 4\n", "world 0\n", "out of range");
    meta_edit_refuses("units 0", "units 3\n", "units 0\n", "units 0 is out of range");
    meta_edit_refuses("params over 2^20", "params 19\n", "params 1048577\n", "out of range");
    meta_edit_refuses("files 0", "files 4\n", "files 0\n", "out of range");
    meta_edit_refuses("a count too large for an int", "params 19\n", "params 99999999999\n", "too large");
    meta_edit_refuses("units says 4, 3 unit lines follow", "units 3\n", "units 4\n", "fewer 'unit' lines than 'units' says");
    meta_edit_refuses("units says 2, 3 unit lines follow", "units 3\n", "units 2\n", "more 'unit' lines than 'units' says");
    meta_edit_refuses("params says 20, 19 param lines follow", "params 19\n", "params 20\n", "fewer 'param' lines than 'params' says");
    meta_edit_refuses("files 3 for full_shard on 4 ranks", "files 4\n", "files 3\n", "files 3, but full_shard on 4 ranks writes 4");
    meta_edit_refuses("a duplicate key (world twice)", "world 4\n", "world 4\nworld 4\n", "a duplicate, or out of order");
    meta_edit_refuses("a missing key (no seed line)", "seed 18446744073709551615\n", "", "a line is missing");
    meta_edit_refuses("keys out of order (batch before seed)",
                      "seed 18446744073709551615\nbatch 64\n",
                      "batch 64\nseed 18446744073709551615\n", "expected 'seed', found 'batch'");
    meta_edit_refuses("keys out of order (step before data)", "data synthetic train 117965\nstep 100\n",
                      "step 100\ndata synthetic train 117965\n", "expected 'data', found 'step'");
    meta_edit_refuses("an unknown key", "min_params 131968\n", "min_params 131968\nlr 0.001\n", "unknown key 'lr'");
    meta_edit_refuses("an unknown strategy", "strategy full_shard\n", "strategy zero3\n", "unknown strategy 'zero3'");
    meta_edit_refuses("a strategy of 40 characters", "strategy full_shard\n", "strategy full_shard_full_shard_full_shard_full\n", "is too long");
    /* found by the fuzzer: the message read 40 bytes of a word at the very end */
    meta_refuses("a 35-character word at the end of the text",
                 "fsdp-checkpoint 7\nworld 2\nstrategy full_shard_full_shard_full_shard_",
                 "is too long");
    meta_edit_refuses("model dims 0", "width 128", "width 0", "width 0 is out of range");
    meta_edit_refuses("a model field renamed", "embed_dim 16", "embed 16", "expected 'embed_dim' as field 4");
    meta_edit_refuses("a model field missing", " depth 2\n", "\n", "(11 fields), found 9");
    meta_edit_refuses("a leading zero", "world 4\n", "world 04\n", "leading zeros");
    meta_edit_refuses("a negative number", "step 100\n", "step -100\n", "not a non-negative decimal number");
    meta_edit_refuses("a fraction", "step 100\n", "step 100.5\n", "not a non-negative decimal number");
    meta_edit_refuses("seed over 2^64", "seed 18446744073709551615\n", "seed 18446744073709551616\n", "too large");
    meta_edit_refuses("step over 2^53", "step 100\n", "step 9007199254740993\n", "too large");
    meta_edit_refuses("CRLF line ends", "world 4\n", "world 4\r\n", "carriage return");
    meta_edit_refuses("two spaces between fields", "world 4\n", "world  4\n", "extra space");
    meta_edit_refuses("a trailing space", "world 4\n", "world 4 \n", "extra space");
    meta_edit_refuses("a tab", "world 4\n", "world\t4\n", "tab");
    meta_edit_refuses("an empty line", "world 4\n", "world 4\n\n", "empty line");
    meta_edit_refuses("a non-ASCII byte", "strategy full_shard\n", "strategy full_shard\xc3\xa9\n", "not printable ASCII");
    meta_edit_refuses("a unit out of order", "unit 1 ", "unit 2 ", "unit 2 where unit 1 was expected");
    meta_edit_refuses("padded not ceil(numel/world)*world", "padded 70272", "padded 70276", "pads to 70272");
    meta_edit_refuses("shard not padded/world", "shard 17568", "shard 17569", "shard 17569, but full_shard on 4 ranks gives 17568");
    meta_edit_refuses("numel over padded", "numel 70272 padded 70272", "numel 70273 padded 70272", "pads to 70276");
    meta_edit_refuses("overlapping params", "param proj_in.weight unit 0 offset 4096", "param proj_in.weight unit 0 offset 4000", "overlaps param 'embed.weight'");
    meta_edit_refuses("a gap between params", "param proj_in.bias unit 0 offset 36864", "param proj_in.bias unit 0 offset 36865", "a gap");
    meta_edit_refuses("params not covering their unit", "param head.bias unit 0 offset 70016 shape 256 1", "param head.bias unit 0 offset 70016 shape 128 1",
                      "its params cover only");
    meta_edit_refuses("a param's offset beyond its unit", "param head.bias unit 0 offset 70016", "param head.bias unit 0 offset 70017", "goes beyond unit 0");
    meta_edit_refuses("a param in a unit that does not exist", "param head.bias unit 0", "param head.bias unit 3", "unit 3 does not exist");
    meta_edit_refuses("a param with shape 0", "shape 256 1\n", "shape 0 1\n", "has no elements");
    meta_edit_refuses("a param listed twice", "param head.bias ", "param head.weight ", "listed twice");
    meta_edit_refuses("a param name with a space", "param head.bias ", "param head bias ", "fields");
    meta_edit_refuses("file name ../x", "file shard-00000.bin ", "file ../x ", "contains '..'");
    meta_edit_refuses("file name a/b", "file shard-00000.bin ", "file a/b ", "contains '/'");
    meta_edit_refuses("file name /etc/passwd", "file shard-00000.bin ", "file /etc/passwd ", "contains '/'");
    meta_edit_refuses("file name .hidden", "file shard-00000.bin ", "file .hidden ", "starts with '.'");
    meta_edit_refuses("file name with a backslash", "file shard-00000.bin ", "file a\\b ", "character other than");
    meta_edit_refuses("two files with the same name", "file shard-00001.bin ",
                      "file shard-00000.bin ",
                      "line 41: file name 'shard-00000.bin' is listed twice (also on line 40)");
    meta_edit_refuses("bytes not 64 + 3 * 4 * sum of shards", "bytes 1002688 crc32 1a2b3c4d",
                      "bytes 1002684 crc32 1a2b3c4d",
                      "bytes 1002684, but a shard file takes 1002688 (a 64-byte header, then 3 * 4 "
                      "* sum of shard)");
    meta_edit_refuses("file bytes without the 64-byte header", "bytes 1002688 crc32 1a2b3c4d",
                      "bytes 1002624 crc32 1a2b3c4d",
                      "bytes 1002624, but a shard file takes 1002688");
    meta_edit_refuses("crc32 in upper case", "crc32 1a2b3c4d", "crc32 1A2B3C4D", "8 lowercase hex");
    meta_edit_refuses("crc32 with 7 digits", "crc32 1a2b3c4d", "crc32 1a2b3c4", "8 lowercase hex");
    {
        char *end = sample_end_line(), twice[64], after[64];
        snprintf(twice, sizeof(twice), "%s%s", end, end);
        snprintf(after, sizeof(after), "%smore\n", end);
        meta_edit_refuses("no end line", end, "",
                          "line 44: the file ends where 'end' was expected (cut short?)");
        meta_edit_refuses("end written twice", end, twice, "line 45: text after 'end'");
        meta_edit_refuses("text after end", end, after, "text after 'end'");
        meta_edit_refuses("end without its crc32 (as version 1 wrote it)", end, "end\n",
                          "expected 'end crc32 XXXXXXXX' (3 fields), found 1");
        meta_edit_refuses("end with another word", "\nend crc32 ", "\nend crc 32",
                          "expected 'crc32' as field 2");
        meta_edit_refuses("end crc32 in upper case", end, "end crc32 ABCDEF01\n",
                          "8 lowercase hex");
        meta_edit_refuses("end crc32 with 9 digits", "\nend crc32 ", "\nend crc32 0",
                          "8 lowercase hex");
        free(end);
    }
    {
        char *t = sample_text();
        size_t n = strlen(t);
        t[10] = '\0'; /* a NUL inside the given length */
        rc = meta_parse(t, n, &m, err, sizeof(err));
        check(rc == 2 && strstr(err, "not printable ASCII"), "a NUL byte inside the text", "rc %d: %s", rc, err);
        meta_free(&m);
        free(t);
    }
    {
        char small[6];
        rc = meta_parse("hello\n", 6, &m, small, sizeof(small));
        check(rc == 2 && strlen(small) == 5, "a small err buffer is filled and terminated", "rc %d, \"%s\"", rc, small);
        rc = meta_parse("hello\n", 6, &m, NULL, 0);
        check(rc == 2, "err may be NULL with errlen 0", "rc %d", rc);
    }
    free(text);
}

/* meta.txt version 2's additions: batch, data, adam_step <= step, and the
 * crc32 on the "end" line. */
static void test_meta_v2(void) {
    printf("meta.txt: batch, data, adam_step\n");
    meta_edit_refuses("no batch line", "batch 64\n", "",
                      "line 7: expected 'batch', found 'data' (a line is missing before this one)");
    meta_edit_refuses("no data line", "data synthetic train 117965\n", "",
                      "line 8: expected 'data', found 'step' (a line is missing before this one)");
    meta_edit_refuses("batch 0", "batch 64\n", "batch 0\n", "batch 0 is out of range [1, 1048576]");
    meta_edit_refuses("batch over 2^20", "batch 64\n", "batch 1048577\n",
                      "batch 1048577 is out of range");
    meta_edit_refuses("batch negative", "batch 64\n", "batch -64\n",
                      "not a non-negative decimal number");
    meta_edit_refuses(
        "data alone", "data synthetic train 117965\n", "data\n",
        "line 8: data '': expected 'data synthetic train N' or 'data file bytes N crc32 XXXXXXXX train N'");
    meta_edit_refuses("data of an unknown kind", "data synthetic train 117965\n", "data random\n",
                      "data 'random': expected 'data synthetic train N' or");
    meta_edit_refuses("data's kind in upper case", "data synthetic train 117965\n",
                      "data File bytes 12 crc32 1a2b3c4d train 6\n", "data 'File': expected");
    meta_edit_refuses("data synthetic without train (version 5's line)", "data synthetic train 117965\n",
                      "data synthetic\n", "expected 'data synthetic train N' (4 fields), found 2");
    meta_edit_refuses("data synthetic with more", "data synthetic train 117965\n", "data synthetic train 12 bytes 12\n",
                      "expected 'data synthetic train N' (4 fields), found 6");
    meta_edit_refuses("data synthetic train 0", "data synthetic train 117965\n", "data synthetic train 0\n",
                      "line 8: data ... train 0: training draws from no tokens");
    meta_edit_refuses("data file without its crc32", "data synthetic train 117965\n", "data file bytes 12 train 6\n",
                      "expected 'data file bytes N crc32 XXXXXXXX train N' (8 fields), found 6");
    meta_edit_refuses("data file without train (version 5's line)", "data synthetic train 117965\n",
                      "data file bytes 12 crc32 1a2b3c4d\n",
                      "expected 'data file bytes N crc32 XXXXXXXX train N' (8 fields), found 6");
    meta_edit_refuses("data file with 'size' for 'bytes'", "data synthetic train 117965\n",
                      "data file size 12 crc32 1a2b3c4d train 6\n", "expected 'bytes' as field 3");
    meta_edit_refuses("data file of 0 bytes", "data synthetic train 117965\n",
                      "data file bytes 0 crc32 1a2b3c4d train 6\n", "line 8: data file bytes 0:");
    meta_edit_refuses("data file bytes over 2^53", "data synthetic train 117965\n",
                      "data file bytes 9007199254740993 crc32 1a2b3c4d train 6\n", "too large");
    meta_edit_refuses("data file train over 2^53", "data synthetic train 117965\n",
                      "data file bytes 12 crc32 1a2b3c4d train 9007199254740993\n", "too large");
    meta_edit_refuses("data file crc32 in upper case", "data synthetic train 117965\n",
                      "data file bytes 12 crc32 1A2B3C4D train 6\n", "8 lowercase hex");
    meta_edit_refuses("data file crc32 of 7 digits", "data synthetic train 117965\n",
                      "data file bytes 12 crc32 1a2b3c4 train 6\n", "8 lowercase hex");
    meta_edit_fixed("data file bytes 12 crc32 ... train 6 (crc fixed): accepted", "data synthetic train 117965\n",
                    "data file bytes 12 crc32 0000abcd train 6\n", NULL);
    meta_edit_fixed("data file bytes of exactly 2^53 (crc fixed): accepted", "data synthetic train 117965\n",
                    "data file bytes 9007199254740992 crc32 ffffffff train 9007199254740992\n", NULL);
    meta_edit_fixed("data synthetic train 131072 (crc fixed): accepted", "data synthetic train 117965\n",
                    "data synthetic train 131072\n", NULL);
    meta_edit_refuses("adam_step > step", "adam_step 100\n", "adam_step 101\n",
                      "line 10: adam_step 101 is more than step 100: adam_step must be <= step");
    meta_edit_fixed("adam_step > step (crc fixed): still refused", "adam_step 100\n",
                    "adam_step 101\n", "adam_step must be <= step");
    meta_edit_fixed("adam_step < step (crc fixed): accepted", "adam_step 100\n", "adam_step 7\n",
                    NULL);
    meta_edit_fixed("step 0, adam_step 0 (crc fixed): accepted", "step 100\nadam_step 100\n",
                    "step 0\nadam_step 0\n", NULL);

    printf("meta.txt: the crc32 on the end line\n");
    char *end = sample_end_line();
    meta_edit_refuses("an edited step, the crc32 left alone", "step 100\n", "step 101\n",
                      "line 44: crc32 of the lines above is ");
    meta_edit_refuses("... the message says what to do", "step 100\n", "step 101\n",
                      ": meta.txt was edited or damaged. Use another checkpoint, or train again");
    meta_edit_fixed("... the same edit with the crc32 fixed: accepted", "step 100\n", "step 101\n",
                    NULL);
    meta_edit_refuses("an edited seed", "seed 18446744073709551615\n",
                      "seed 18446744073709551614\n", "meta.txt was edited or damaged");
    meta_edit_refuses("an edited shard crc32", "crc32 1a2b3c4d", "crc32 1a2b3c4e",
                      "meta.txt was edited or damaged");
    meta_edit_refuses("a renamed param", "param head.bias ", "param head.bias2 ",
                      "meta.txt was edited or damaged");
    meta_edit_refuses("data synthetic swapped for a file", "data synthetic train 117965\n",
                      "data file bytes 12 crc32 0000abcd train 6\n", "meta.txt was edited or damaged");
    {
        char wrong[32];
        snprintf(wrong, sizeof(wrong), "%.10s%08x\n", end,
                 (unsigned)(strtoul(end + 10, NULL, 16) ^ 1u));
        meta_edit_refuses("the end crc32 itself off by one bit", end, wrong,
                          "line 44: crc32 of the lines above is ");
    }
    {
        /* the crc32 is checked last: a structural mistake keeps its own message */
        meta_edit_refuses("a gap between params (crc32 wrong too): the gap is named",
                          "param proj_in.bias unit 0 offset 36864",
                          "param proj_in.bias unit 0 offset 36865", "a gap");
        char *text = sample_text(), *bad = replace(text, "step 100\n", "step 101\n");
        size_t n = strlen(bad);
        CkptMeta m;
        char err[512] = "";
        bad[n - 1] = '\0'; /* no newline after end: not a cut file, just a wrong crc32 */
        int rc = meta_parse(bad, n - 1, &m, err, sizeof(err));
        check(rc == 2 && strstr(err, "edited or damaged") && !strstr(err, "cut short"),
              "wrong crc32, no final newline: not 'cut short'", "rc %d: %s", rc, err);
        meta_free(&m);
        free(bad);
        free(text);
    }
    {
        /* every one-bit change anywhere in the file is refused: most break a
         * rule; the rest (a digit that is still a digit...) the crc32 catches */
        char *text = sample_text();
        size_t len = strlen(text);
        char *copy = (char *)malloc(len);
        int flips = 0, refused = 0, by_crc = 0;
        for (size_t i = 0; i < len; i++)
            for (int bit = 0; bit < 8; bit++) {
                memcpy(copy, text, len);
                copy[i] = (char)(copy[i] ^ (1 << bit));
                CkptMeta m;
                char err[512] = "";
                int rc = meta_parse(copy, len, &m, err, sizeof(err));
                meta_free(&m);
                flips++;
                refused += rc == 2;
                by_crc += rc == 2 && strstr(err, "edited or damaged") != NULL;
            }
        check(refused == flips && by_crc > 0, "every one-bit change is refused",
              "%d of %d (%d of them by the crc32 alone)", refused, flips, by_crc);
        free(copy);
        free(text);
    }
    free(end);
}

/* ============================================================================
 * The layout hash
 * ========================================================================== */

/* FNV-1a, written again here from its definition, so the test does not
 * trust formats.c's copy. */
static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* formats.h's definition, from the text: the FNV-1a of the lines of meta.txt
 * that start with world, strategy, model, min_params, units, unit, params or
 * param (as the grep in formats.h picks them). */
static uint64_t layout_hash_of_text(const char *text) {
    const char *keys[8] = {"world ", "strategy ", "model ",  "min_params ",
                           "units ", "unit ",     "params ", "param "};
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) + 1 : strlen(line);
        for (int k = 0; k < 8; k++)
            if (!strncmp(line, keys[k], strlen(keys[k]))) h = fnv1a(h, line, n);
        line += n;
    }
    return h;
}

/* sample_meta with one change: the hash must differ (or not, when same). */
static void hash_changes(const char *what, int same, void (*edit)(CkptMeta *)) {
    CkptMeta a, b;
    sample_meta(&a, 4, "full_shard", 2);
    sample_meta(&b, 4, "full_shard", 2);
    edit(&b);
    uint64_t ha = meta_layout_hash(&a), hb = meta_layout_hash(&b);
    check(same ? ha == hb : ha != hb, what, "%016llx %s %016llx", (unsigned long long)ha,
          ha == hb ? "==" : "!=", (unsigned long long)hb);
    meta_free(&a);
    meta_free(&b);
}

static void edit_nothing(CkptMeta *m) { (void)m; }
static void edit_step(CkptMeta *m) { m->step = 7, m->adam_step = 3; }
static void edit_seed(CkptMeta *m) { m->seed = 1; }
static void edit_batch_data(CkptMeta *m) {
    m->batch = 8, m->data_is_file = 1, m->data_bytes = 9, m->data_crc = 10;
}
static void edit_files(CkptMeta *m) {
    m->files[1].crc ^= 1;
    m->files[2].bytes += 4;
    snprintf(m->files[3].name, sizeof(m->files[3].name), "other.bin");
    m->version = 7;
    m->meta_crc = 99;
}
static void edit_no_files(CkptMeta *m) { /* the hash does not look at them */
    free(m->files);
    m->files = NULL;
}
static void edit_world(CkptMeta *m) { m->world = 2; }
static void edit_strategy(CkptMeta *m) {
    snprintf(m->strategy, sizeof(m->strategy), "shard_grad_op");
}
static void edit_vocab(CkptMeta *m) { m->vocab = 255; }
static void edit_context(CkptMeta *m) { m->context = 32; }
static void edit_min_params(CkptMeta *m) { m->min_params = 1; }
static void edit_unit_shard(CkptMeta *m) { m->units[1].shard++; }
static void edit_param_name(CkptMeta *m) { m->params[0].name[0] = 'E'; }
static void edit_param_shape(CkptMeta *m) { /* transposed: the same numel */
    m->params[0].shape[0] = 16, m->params[0].shape[1] = 256;
}
/* blocks.0.norm.weight and blocks.0.norm.bias: both 128 x 1, in unit 1 */
static void edit_swap_offsets(CkptMeta *m) {
    long t = m->params[3].offset;
    m->params[3].offset = m->params[4].offset;
    m->params[4].offset = t;
}

static void test_layout_hash(void) {
    printf("layout hash\n");
    check(fnv1a(0xcbf29ce484222325ull, "a", 1) == 0xaf63dc4c8601ec8cull,
          "the test's FNV-1a: fnv1a64(\"a\") = af63dc4c8601ec8c", "%016llx",
          (unsigned long long)fnv1a(0xcbf29ce484222325ull, "a", 1));
    CkptMeta m;
    sample_meta(&m, 4, "full_shard", 2);
    size_t len;
    char *text = meta_format(&m, &len);
    uint64_t h = meta_layout_hash(&m), want = text ? layout_hash_of_text(text) : 0;
    check(text && h == want, "= FNV-1a of meta.txt's layout lines (formats.h)",
          "%016llx (want %016llx)", (unsigned long long)h, (unsigned long long)want);
    free(text);
    meta_free(&m);
    hash_changes("equal for two equal layouts", 1, edit_nothing);
    hash_changes("unaffected by files (none at all)", 1, edit_no_files);
    hash_changes("unaffected by step and adam_step", 1, edit_step);
    hash_changes("unaffected by seed", 1, edit_seed);
    hash_changes("unaffected by batch and data", 1, edit_batch_data);
    hash_changes("unaffected by files, version, meta_crc", 1, edit_files);
    hash_changes("changed by world", 0, edit_world);
    hash_changes("changed by strategy", 0, edit_strategy);
    hash_changes("changed by vocab", 0, edit_vocab);
    hash_changes("changed by context", 0, edit_context);
    hash_changes("changed by min_params", 0, edit_min_params);
    hash_changes("changed by a unit's shard", 0, edit_unit_shard);
    hash_changes("changed by a param's name", 0, edit_param_name);
    hash_changes("changed by a param transposed (same numel)", 0, edit_param_shape);
    hash_changes("changed by two same-size params swapping offsets", 0, edit_swap_offsets);
    {
        /* ... which meta_parse cannot see: both layouts are valid */
        CkptMeta s;
        sample_meta(&s, 4, "full_shard", 2);
        edit_swap_offsets(&s);
        char *t = meta_format(&s, &len), err[512] = "";
        CkptMeta back;
        int rc = t ? meta_parse(t, len, &back, err, sizeof(err)) : -1;
        check(rc == 0, "... and the swapped layout is itself valid meta.txt", "rc %d %s", rc, err);
        meta_free(&back);
        free(t);
        meta_free(&s);
    }
}

/* ============================================================================
 * The shard file header
 * ========================================================================== */

static void shard_refuses(const char *what, const unsigned char *buf, size_t len,
                          const char *needle) {
    ShardHeader h;
    char err[256] = "";
    memset(&h, 0x55, sizeof(h));
    int rc = shard_header_decode(buf, len, &h, err, sizeof(err));
    check(rc == 2 && strstr(err, needle) && h.rank == 0 && h.world == 0 && h.step == 0 &&
              h.layout == 0,
          what, "rc %d: %s", rc, err);
}

static void test_shard_header(void) {
    printf("shard file header\n");
    ShardHeader h = {1, 4, 0x0102030405060708ull, 0x1122334455667788ull, 0x0a0b0c0d0e0f1011ull,
                     0x47000000u, 1999u},
                back;
    unsigned char buf[SHARD_HEADER_BYTES + 8], want[SHARD_HEADER_BYTES];
    memset(buf, 0xee, sizeof(buf)); /* encode must write all 64 bytes */
    shard_header_encode(&h, buf);
    memset(want, 0, sizeof(want));
    memcpy(want, "FSDPSHRD", 8);
    want[8] = 2;  /* version, little-endian */
    want[12] = 1; /* rank */
    want[16] = 4; /* world */
    for (int i = 0; i < 8; i++) want[24 + i] = (unsigned char)(8 - i);          /* 08 07 .. 01 */
    for (int i = 0; i < 8; i++) want[32 + i] = (unsigned char)(0x88 - 0x11 * i); /* 88 77 .. 11 */
    for (int i = 0; i < 8; i++) want[40 + i] = (unsigned char)(0x11 - i);        /* 11 10 .. 0a */
    want[51] = 0x47;                                                             /* 47000000 */
    want[52] = 0xcf, want[53] = 0x07;                                            /* 1999 */
    int first_diff = -1;
    for (int i = SHARD_HEADER_BYTES - 1; i >= 0; i--)
        if (buf[i] != want[i]) first_diff = i;
    check(first_diff < 0 && buf[SHARD_HEADER_BYTES] == 0xee,
          "encode: the bytes of formats.h, little-endian",
          first_diff < 0 ? "64 bytes, nothing after" : "byte %d differs", first_diff);
    char err[256] = "";
    int rc = shard_header_decode(buf, SHARD_HEADER_BYTES, &back, err, sizeof(err));
    check(rc == 0 && back.rank == h.rank && back.world == h.world && back.step == h.step &&
              back.layout == h.layout && back.adam_step == h.adam_step &&
              back.scale_bits == h.scale_bits && back.scaler_growth == h.scaler_growth,
          "decode(encode(h)) == h", "rc %d %s", rc, err);
    ShardHeader big = {0xfffffffeu, 0xffffffffu, UINT64_MAX, UINT64_MAX, UINT64_MAX, 0xffffffffu,
                       0xffffffffu};
    shard_header_encode(&big, buf);
    rc = shard_header_decode(buf, sizeof(buf), &back, err, sizeof(err));
    check(rc == 0 && back.rank == big.rank && back.world == big.world && back.step == UINT64_MAX &&
              back.layout == UINT64_MAX && back.adam_step == UINT64_MAX &&
              back.scale_bits == 0xffffffffu && back.scaler_growth == 0xffffffffu,
          "the largest values survive; bytes after 64 are not looked at", "rc %d %s", rc, err);

    shard_header_encode(&h, buf);
    shard_refuses("63 bytes: cut short", buf, SHARD_HEADER_BYTES - 1,
                  "63 bytes: a shard file starts with a 64-byte header (cut short?)");
    shard_refuses("no bytes at all", buf, 0, "0 bytes");
    unsigned char bad[SHARD_HEADER_BYTES];
    memcpy(bad, buf, sizeof(bad));
    bad[7] = 'd';
    shard_refuses("wrong magic", bad, sizeof(bad), "not an fsdp.c shard file");
    memset(bad, 0, sizeof(bad)); /* raw floats, as version 1 checkpoints' shard files began */
    shard_refuses("a header-less shard file (floats)", bad, sizeof(bad),
                  "not an fsdp.c shard file");
    memcpy(bad, buf, sizeof(bad));
    bad[8] = 1;
    shard_refuses("version 1 (no adam_step or loss scale)", bad, sizeof(bad),
                  "shard file version 1; this fsdp.c reads version 2 only");
    memcpy(bad, buf, sizeof(bad));
    bad[11] = 1; /* version 0x01000002: a big-endian writer would get this wrong */
    shard_refuses("version in the wrong byte order", bad, sizeof(bad), "version 16777218");
    int reserved = 0, refused = 0;
    for (int i = 0; i < SHARD_HEADER_BYTES; i++) {
        if (!((i >= 20 && i < 24) || i >= 56)) continue;
        memcpy(bad, buf, sizeof(bad));
        bad[i] = 0x80;
        char msg[256] = "", needle[32];
        snprintf(needle, sizeof(needle), "header byte %d is 0x80", i);
        reserved++;
        refused += shard_header_decode(bad, sizeof(bad), &back, msg, sizeof(msg)) == 2 &&
                   strstr(msg, needle) != NULL;
    }
    check(reserved == 12 && refused == reserved, "a nonzero reserved byte (20..23, 56..63)",
          "%d of %d refused, each named", refused, reserved);
    ShardHeader odd = {4, 4, 1, 1, 1, 0, 0};
    shard_header_encode(&odd, bad);
    shard_refuses("rank 4 of world 4", bad, sizeof(bad),
                  "rank 4 of world 4: the rank must be below the world size");
    odd.rank = 0, odd.world = 0;
    shard_header_encode(&odd, bad);
    shard_refuses("world 0", bad, sizeof(bad), "world 0");
    {
        /* no byte is ignored: a change to any one bit is refused, or read as
         * another header */
        int flips = 0, seen = 0;
        for (int i = 0; i < SHARD_HEADER_BYTES; i++)
            for (int bit = 0; bit < 8; bit++) {
                memcpy(bad, buf, sizeof(bad));
                bad[i] = (unsigned char)(bad[i] ^ (1 << bit));
                rc = shard_header_decode(bad, sizeof(bad), &back, err, sizeof(err));
                flips++;
                seen += rc == 2 || back.rank != h.rank || back.world != h.world ||
                        back.step != h.step || back.layout != h.layout ||
                        back.adam_step != h.adam_step || back.scale_bits != h.scale_bits ||
                        back.scaler_growth != h.scaler_growth;
            }
        check(seen == flips, "every one-bit change is refused or read differently", "%d of %d",
              seen, flips);
    }
    {
        char small[8];
        rc = shard_header_decode(buf, 3, &back, small, sizeof(small));
        check(rc == 2 && strlen(small) == 7, "a small err buffer is filled and terminated",
              "rc %d, \"%s\"", rc, small);
        rc = shard_header_decode(buf, 3, &back, NULL, 0);
        check(rc == 2, "err may be NULL with errlen 0", "rc %d", rc);
    }
}

/* ============================================================================
 * config.json: json_object_parse
 * ========================================================================== */

/* OpenAI's gpt2 on the Hub, as it is (n_ctx, which GPT2Config no longer
 * reads, and a nested task_specific_params included) */
static const char OPENAI_GPT2_CONFIG[] =
    "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\n"
    "    \"GPT2LMHeadModel\"\n  ],\n  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n"
    "  \"embd_pdrop\": 0.1,\n  \"eos_token_id\": 50256,\n  \"initializer_range\": 0.02,\n"
    "  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n  \"n_ctx\": 1024,\n"
    "  \"n_embd\": 768,\n  \"n_head\": 12,\n  \"n_layer\": 12,\n  \"n_positions\": 1024,\n"
    "  \"resid_pdrop\": 0.1,\n  \"summary_activation\": null,\n"
    "  \"summary_first_dropout\": 0.1,\n  \"summary_proj_to_labels\": true,\n"
    "  \"summary_type\": \"cls_index\",\n  \"summary_use_proj\": true,\n"
    "  \"task_specific_params\": {\n    \"text-generation\": {\n      \"do_sample\": true,\n"
    "      \"max_length\": 50\n    }\n  },\n  \"vocab_size\": 50257\n}\n";

static int json_try(const char *text, size_t len, JsonObject *o, char *err, size_t errlen) {
    char *exact = (char *)malloc(len ? len : 1); /* exact size: ASan sees any over-read */
    memcpy(exact, text, len);
    int rc = json_object_parse(exact, len, o, err, errlen);
    free(exact);
    return rc;
}

static void json_refuses(const char *what, const char *text, const char *needle) {
    JsonObject o;
    char err[256] = "";
    int rc = json_try(text, strlen(text), &o, err, sizeof(err));
    check(rc == 2 && strstr(err, needle) && !strchr(err, '\n') && o.n == 0 && !o.members,
          what, "rc %d: %s", rc, err);
    json_object_free(&o);
}

static void json_accepts(const char *what, const char *text) {
    JsonObject o;
    char err[256] = "";
    int rc = json_try(text, strlen(text), &o, err, sizeof(err));
    check(rc == 0, what, "rc %d %s(%d members)", rc, err, o.n);
    json_object_free(&o);
}

static void test_config_json(void) {
    printf("config.json\n");
    JsonObject o;
    char err[256] = "";
    int rc = json_try(OPENAI_GPT2_CONFIG, strlen(OPENAI_GPT2_CONFIG), &o, err, sizeof(err));
    const JsonMember *heads = json_member(&o, "n_head"), *eps = json_member(&o, "layer_norm_epsilon"),
                     *act = json_member(&o, "activation_function"),
                     *tasks = json_member(&o, "task_specific_params"),
                     *summary = json_member(&o, "summary_activation"),
                     *use = json_member(&o, "summary_use_proj"), *arch = json_member(&o, "architectures");
    check(rc == 0 && o.n == 22, "OpenAI's gpt2 config.json: 22 members", "rc %d, %d %s", rc, o.n, err);
    check(heads && heads->kind == JSON_NUMBER && heads->integer && heads->number == 12.0,
          "n_head 12, an integer", "%s", heads ? heads->text : "missing");
    check(eps && eps->kind == JSON_NUMBER && !eps->integer && eps->number == 1e-5 &&
              !strcmp(eps->text, "1e-05"),
          "layer_norm_epsilon 1e-05, a float, as written", "%s", eps ? eps->text : "missing");
    check(act && act->kind == JSON_STRING && !strcmp(act->text, "gelu_new") && act->text_len == 8,
          "activation_function \"gelu_new\"", "%s", act ? act->text : "missing");
    check(tasks && tasks->kind == JSON_OBJECT && arch && arch->kind == JSON_ARRAY && summary &&
              summary->kind == JSON_NULL && use && use->kind == JSON_TRUE,
          "nested object, array, null, true: their kinds", "%d %d", tasks ? (int)tasks->kind : -1,
          arch ? (int)arch->kind : -1);
    check(!json_member(&o, "do_sample") && !json_member(&o, "n_hea") && !json_member(&o, ""),
          "nested keys and prefixes are not members", "");
    json_object_free(&o);

    /* a key with \u0000 inside is not the key before it; escapes decoded */
    const char *escaped =
        "{\"n_head\\u0000\": 3, \"n\\u005fhead\": 4, \"s\": \"a\\\"\\u00e9\\ud83d\\ude00\"}";
    rc = json_try(escaped, strlen(escaped), &o, err, sizeof(err));
    heads = json_member(&o, "n_head");
    const JsonMember *str = json_member(&o, "s");
    check(rc == 0 && heads && heads->number == 4.0 && str && str->text_len == 8 &&
              !memcmp(str->text, "a\"\xc3\xa9\xf0\x9f\x98\x80", 8),
          "escapes decoded; \"n_head\\u0000\" is its own key", "rc %d %s", rc, err);
    json_object_free(&o);
    const char *numbers = "{\"a\":-0,\"b\":-12.5e+2,\"c\":0.5E-3}";
    rc = json_try(numbers, strlen(numbers), &o, err, sizeof(err));
    const JsonMember *na = json_member(&o, "a"), *nb = json_member(&o, "b"), *nc = json_member(&o, "c");
    check(rc == 0 && na && na->integer && nb && !nb->integer && nb->number == -1250.0 && nc &&
              nc->number == 0.5e-3,
          "numbers: -0 (an integer), -12.5e+2, 0.5E-3", "rc %d %s", rc, err);
    json_object_free(&o);
    json_accepts("the empty object", "{}");
    json_accepts("whitespace around, nested empties", " \t\r\n{\"a\":[],\"b\":{},\"c\":[[{}]]}\n\n");

    /* every rule broken once */
    json_refuses("an empty file", "",
                 "expected '{' (the file is one JSON object), found the end of the file");
    json_refuses("an array at the top", "[1, 2]", "line 1, column 1: expected '{'");
    json_refuses("a byte-order mark", "\xef\xbb\xbf{}", "byte-order mark");
    json_refuses("a trailing comma", "{\"a\": 1,}", "expected a key after ','");
    json_refuses("a trailing comma in an array", "{\"a\": [1,]}", "expected a value");
    json_refuses("a comment", "{\"a\": 1 // heads\n}", "expected ',' or '}', found '/'");
    json_refuses("single quotes", "{'a': 1}", "expected a string");
    json_refuses("NaN", "{\"a\": NaN}", "NaN and Infinity are not JSON");
    json_refuses("-Infinity", "{\"a\": -Infinity}", "a number needs a digit after its '-'");
    json_refuses("a leading zero", "{\"n_head\": 012}", "leading zero");
    json_refuses("a bare '.'", "{\"a\": 1.}", "a digit after its '.'");
    json_refuses("an empty exponent", "{\"a\": 1e}", "a digit in its exponent");
    json_refuses("a number beyond a double", "{\"a\": 1e400}", "the number 1e400 is beyond the range");
    json_refuses("a bare word", "{\"a\": gelu}", "expected a value");
    json_refuses("True, Python's spelling", "{\"a\": True}", "expected a value");
    json_refuses("a literal run on", "{\"a\": truex}", "expected ',' or '}', found 'x'");
    json_refuses("a key given twice", "{\"n_head\": 2, \"x\": 0, \"n_head\": 4}",
                 "the key 'n_head' is given twice");
    json_refuses("an unterminated string", "{\"a\": \"gelu", "unterminated string");
    json_refuses("a raw newline in a string", "{\"a\": \"ge\nlu\"}", "control byte 0x0a");
    json_refuses("invalid UTF-8", "{\"a\": \"\xff\"}", "not valid UTF-8");
    json_refuses("half a surrogate pair", "{\"a\": \"\\ud83d\"}", "surrogate");
    json_refuses("a second object after the first", "{} {}", "more after the object's closing '}'");
    json_refuses("cut short inside a nested object", "{\"t\": {\"x\": [1, 2", "found the end of the file");
    json_refuses("a missing ':'", "{\"a\" 1}", "expected ':' after a key");
    rc = json_try("{\"a\": 1\0}", 9, &o, err, sizeof(err));
    check(rc == 2 && strstr(err, "found byte 0x00"), "a NUL byte between members", "rc %d: %s", rc, err);
    json_refuses("position in lines and columns", "{\n  \"a\": 1,\n  \"b\": @\n}", "line 3, column 8:");

    /* nesting: JSON_MAX_DEPTH levels (the top object is level 1) are read,
     * one more is refused, and a million '[' neither recurse nor crash */
    size_t deep = 2000000;
    char *text = (char *)malloc(deep + 16);
    for (int levels = JSON_MAX_DEPTH; levels <= JSON_MAX_DEPTH + 1; levels++) {
        size_t n = 0;
        n += (size_t)sprintf(text, "{\"a\":");
        for (int i = 1; i < levels; i++) text[n++] = '[';
        for (int i = 1; i < levels; i++) text[n++] = ']';
        text[n++] = '}';
        rc = json_try(text, n, &o, err, sizeof(err));
        check(levels == JSON_MAX_DEPTH ? rc == 0 : rc == 2 && strstr(err, "nested deeper than"),
              levels == JSON_MAX_DEPTH ? "nested JSON_MAX_DEPTH levels: read"
                                       : "nested one level more: refused",
              "rc %d %s", rc, err);
        json_object_free(&o);
    }
    memcpy(text, "{\"a\":", 5);
    memset(text + 5, '[', deep);
    rc = json_try(text, deep + 5, &o, err, sizeof(err));
    check(rc == 2 && strstr(err, "nested deeper than"), "two million '[': refused, no deep recursion",
          "rc %d %.60s", rc, err);
    free(text);

    /* every prefix of a valid file is refused (a file cut short never
     * reads as a smaller config), and every one-byte change is either
     * read or refused with one line, never anything else */
    size_t len = strlen(OPENAI_GPT2_CONFIG), prefixes_ok = 0, changes_ok = 0, changes = 0;
    const char *last = OPENAI_GPT2_CONFIG + len - 2; /* the closing '}' */
    for (size_t n = 0; n < len; n++) {
        rc = json_try(OPENAI_GPT2_CONFIG, n, &o, err, sizeof(err));
        prefixes_ok += (OPENAI_GPT2_CONFIG + n > last) ? rc == 0 : rc == 2 && err[0];
        json_object_free(&o);
    }
    check(prefixes_ok == len, "every prefix cut before the '}' refused", "%zu of %zu", prefixes_ok, len);
    char *copy = (char *)malloc(len);
    static const char swaps[] = {'\0', '"', '{', '}', '[', ']', ',', ':',
                                 '\\', '0', '-', 'e', 'x', '\n', '\x80'};
    for (size_t i = 0; i < len; i++)
        for (size_t k = 0; k < sizeof(swaps); k++) {
            memcpy(copy, OPENAI_GPT2_CONFIG, len);
            copy[i] = swaps[k];
            memset(err, 'x', sizeof(err));
            rc = json_try(copy, len, &o, err, sizeof(err));
            changes++;
            changes_ok += (rc == 0 && o.n > 0) ||
                          (rc == 2 && memchr(err, '\0', sizeof(err)) && !strchr(err, '\n') && err[0] &&
                           o.n == 0 && !o.members);
            json_object_free(&o);
        }
    free(copy);
    check(changes_ok == changes, "every one-byte change: read, or refused in one line", "%zu of %zu",
          changes_ok, changes);
}

/* ============================================================================
 * Seeds for the fuzzer: valid files of both kinds
 * ========================================================================== */

static int write_seeds(const char *dir) {
    char path[1024];
    int bad = 0;
    mkdir(dir, 0777);
    for (int k = 0; k < 3; k++) { /* three metadata files */
        CkptMeta m;
        sample_meta(&m, k == 0 ? 4 : k == 1 ? 3 : 2, k == 0 ? "full_shard" : k == 1 ? "shard_grad_op" : "no_shard", k == 0 ? 2 : 1);
        if (k == 1) { /* the other form of "data" */
            m.data_is_file = 1;
            m.data_bytes = 123456;
            m.data_crc = 0x1a2b3c4du;
        }
        size_t len;
        char *text = meta_format(&m, &len);
        snprintf(path, sizeof(path), "%s/meta-%d.txt", dir, k);
        bad += !text || write_file(path, text, len) != 0;
        free(text);
        meta_free(&m);
    }
    /* valid files, then near misses (overlap, gap, a metadata key twice):
     * refused, but one mutation from valid, so the fuzzer reaches those checks */
    const char *jsons[6] = {
        ("{\"__metadata__\":{\"format\":\"pt\",\"n\\u00e9\":\"v\\n\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[8,10]},\"\\ud83d\\ude00\":{\"dtype\":\"I8\",\"shape\":[0,1,1,1],\"data_offsets\":[10,10]}}"),
        "{\"x\":{\"data_offsets\":[0,3],\"shape\":[3],\"dtype\":\"U8\"}}  ",
        "{}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
        "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"};
    size_t data[6] = {10, 3, 0, 5, 5, 0};
    for (int k = 0; k < 6; k++) {
        size_t size;
        unsigned char *f = st_file(jsons[k], data[k], &size);
        snprintf(path, sizeof(path), "%s/st-%d.safetensors", dir, k);
        bad += write_file(path, f, size) != 0;
        free(f);
    }
    StTensor t[3];
    set_tensor(&t[0], "embed.weight", 2, 4, 2);
    set_tensor(&t[1], "fc.bias", 1, 3, 0);
    set_tensor(&t[2], "s", 0, 0, 0);
    size_t len;
    unsigned char *head = st_build_header(t, 3, "\"format\":\"pt\"", &len);
    if (head) {
        size_t size = len + (size_t)t[2].end;
        unsigned char *f = (unsigned char *)calloc(size, 1);
        memcpy(f, head, len);
        snprintf(path, sizeof(path), "%s/st-3.safetensors", dir);
        bad += write_file(path, f, size) != 0;
        free(f);
    }
    bad += head == NULL;
    free(head);
    /* a shard file: its header and a few floats' worth of bytes */
    unsigned char shard[SHARD_HEADER_BYTES + 16] = {0};
    ShardHeader sh = {1, 4, 100, 0x1122334455667788ull, 100, 0x47800000u, 12};
    shard_header_encode(&sh, shard);
    snprintf(path, sizeof(path), "%s/shard-0.bin", dir);
    bad += write_file(path, shard, sizeof(shard)) != 0;
    /* config.json: OpenAI's, and one with each kind of value */
    snprintf(path, sizeof(path), "%s/config-0.json", dir);
    bad += write_file(path, OPENAI_GPT2_CONFIG, strlen(OPENAI_GPT2_CONFIG)) != 0;
    static const char kinds[] =
        "{\"a\":null,\"b\":[true,false,{\"c\":-1.5e-3}],\"\\u00e9\":\"\\ud83d\\ude00\",\"d\":0}";
    snprintf(path, sizeof(path), "%s/config-1.json", dir);
    bad += write_file(path, kinds, strlen(kinds)) != 0;
    if (bad) fprintf(stderr, "test_formats: could not write every seed into %s\n", dir);
    return bad ? 1 : 0;
}

/* Prints the files st_parse_header accepts, one per line: test_fuzz.sh
 * hands them to the reference library, which must accept them too. */
static int print_accepted(int n, char **paths) {
    for (int i = 0; i < n; i++) {
        size_t size = 0;
        unsigned char *f = read_file(paths[i], &size);
        StHeader h;
        char err[256];
        if (f && st_parse_header(f, size, size, &h, err, sizeof(err)) == 0) printf("%s\n", paths[i]);
        st_free(&h);
        free(f);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-seeds")) return write_seeds(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "--accepted")) return print_accepted(argc - 2, argv + 2);
    int interop = argc == 2 && !strcmp(argv[1], "--interop");
    if (argc != 1 && !interop) {
        fprintf(stderr,
                "usage: %s                        every check that needs only C\n"
                "       %s --interop              live checks against Hugging Face's safetensors (python3)\n"
                "       %s --write-seeds DIR      write files for the fuzzer's corpus\n"
                "       %s --accepted FILE...     print the safetensors files st_parse_header accepts\n",
                argv[0], argv[0], argv[0], argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (interop) {
        if (test_st_interop(argv[0]) == 77) return 77;
    } else {
        test_crc32();
        test_st_round_trip();
        test_st_hand_written();
        test_st_rejects();
        test_st_reference_fixture(argv[0]);
        test_meta();
        test_meta_v2();
        test_layout_hash();
        test_shard_header();
        test_config_json();
    }
    printf("%d passed, %d failed\n", passes, failures);
    return failures > 76 ? 76 : failures; /* never 77, the suite's "skipped" */
}
