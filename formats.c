/* ============================================================================
 * formats.c — the bytes of fsdp.c's files
 *
 * fsdp.c writes two kinds of files: a sharded checkpoint (one binary shard
 * file per rank plus a small text file, meta.txt, that says how the shards fit
 * together) and, with --export, one safetensors file that Hugging Face's
 * libraries and PyTorch load directly. This file turns those bytes into
 * structs and back. It does no I/O and knows nothing of MPI, so every rule
 * here can be tested on one process and fuzzed (tests/test_formats.c,
 * tests/fuzz_formats.c).
 *
 *   1. small tools: error messages, a growing text buffer
 *   2. CRC-32
 *   3. safetensors: the writer
 *   4. safetensors: the reader (a small JSON parser)
 *   5. meta.txt: the writer, and the layout hash
 *   6. meta.txt: the reader
 *   7. the shard file header
 *   8. config.json: a JSON object, read whole (Hugging Face's model config)
 *
 * ---- A safetensors file, byte by byte ---------------------------------------
 *
 * Two tensors, a (2 x 3 floats) and b (4 floats), with metadata:
 *
 *   offset 0   8 bytes   N = 144, as a little-endian u64: 90 00 00 00 00 00 00 00
 *   offset 8   144 bytes JSON (one line; wrapped here), 143 bytes and one
 *                        space of padding, so that the data starts at a
 *                        multiple of 8:
 *              {"__metadata__":{"format":"pt"},
 *               "a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},
 *               "b":{"dtype":"F32","shape":[4],"data_offsets":[24,40]}}
 *   offset 152 40 bytes  the data section: a's 24 bytes, then b's 16: raw
 *                        little-endian floats, row-major, nothing between
 *
 * That is the whole format. A reader gets the length, reads the JSON, and
 * from then on can fetch any tensor with one seek: byte 8 + N + begin. So a
 * rank that needs only its own shard reads only its own bytes (see
 * trainer_init_from in fsdp.c), and a file can be memory-mapped. The padding
 * puts the data at a multiple of 8 bytes, so a mapped float or double is
 * aligned. The format has no pickle, no code, nothing executable: loading a
 * file cannot run anything, which is why Hugging Face made it.
 *
 * The reader's job is to be paranoid. The header comes from a file someone
 * gave us: its length may be a lie, its JSON may be cut off, an offset may
 * point past the end of the file, two tensors may claim the same bytes. Each
 * of those, unchecked, becomes a read out of bounds or a model silently
 * loaded with garbage. So we check everything formats.h lists, with our own
 * small JSON parser that reads only the structure safetensors allows.
 *
 * ---- meta.txt ----------------------------------------------------------------
 *
 *   fsdp-checkpoint 7
 *   world 4
 *   ...
 *   batch 64
 *   data synthetic train 131072
 *   ...
 *   unit 0 numel 70272 padded 70272 shard 17568
 *   ...
 *   file shard-00000.bin bytes 1794496 crc32 1a2b3c4d
 *   end crc32 89abcdef
 *
 * Why text: it is tiny next to the shards, and a person debugging a
 * checkpoint can read it with `cat`, compare two with `diff`, and see at once
 * which world size wrote it. Why one record per line in a fixed order: a
 * parser that expects exactly the next line is short and strict, and its
 * error messages can say "line 12: expected 'params'". Why "end": files are
 * written front to back, so a crash or a full disk leaves a prefix, and a
 * prefix of a valid file must not look valid. Every other line could be
 * missing; "end" proves nothing is.
 *
 * Why a CRC-32 on the "end" line: the checksums of the shard files live in
 * meta.txt, so they are only as good as meta.txt itself. Without a checksum
 * of its own, an edited step, a shard's crc32 "fixed" by hand to match a
 * damaged file, or a flipped digit in a seed would all parse, and the run
 * would resume from something nobody wrote. With it, the checkpoint checks
 * itself from the top: meta.txt by its last line, each shard file by its
 * line in meta.txt, and each shard's header (below) against both. The crc32
 * is checked after everything else, so a file with a real mistake in it
 * (say, a gap between two params) is told about that mistake, and the
 * checksum speaks only when each line is plausible but the whole is not what
 * was written.
 *
 * ---- A shard file, byte by byte ---------------------------------------------
 *
 * Rank 1 of 4, at step 100 (the layout hash 0x1122334455667788, say):
 *
 *   offset 0   8 bytes   "FSDPSHRD"              46 53 44 50 53 48 52 44
 *   offset 8   4 bytes   version 1, u32 LE       01 00 00 00
 *   offset 12  4 bytes   rank 1                  01 00 00 00
 *   offset 16  4 bytes   world 4                 04 00 00 00
 *   offset 20  4 bytes   zero                    00 00 00 00
 *   offset 24  8 bytes   step 100, u64 LE        64 00 00 00 00 00 00 00
 *   offset 32  8 bytes   layout, u64 LE          88 77 66 55 44 33 22 11
 *   offset 40  24 bytes  zero
 *   offset 64            the floats: for each unit in order, its shard of
 *                        parameters, then of exp_avg, then of exp_avg_sq
 *
 * Why CRC-32 per shard file: the floats are plain floats, and any bytes are
 * valid floats. A file truncated and padded, overwritten by another run, or
 * bit-flipped on disk would load without complaint and train on garbage. The
 * checksum, written next to the size, catches all of those in one pass over
 * the file before anything is loaded. Why a header as well: a checksum says
 * the bytes are the ones that were written, not whose they are. Rank 2's
 * file copied over rank 1's, or a shard kept from an earlier step or from a
 * model with another layout, each has a right checksum for itself; the
 * header names its rank, world, step and layout, so the loader can refuse it
 * by name. The layout is a hash (meta_layout_hash) of every line of meta.txt
 * that says where a number lives, so "same size, different layout" (two
 * params with their offsets swapped) is told apart too.
 * ========================================================================== */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"

/* ============================================================================
 * 1. Small tools
 * ========================================================================== */

/* Lets gcc and clang check every message's arguments against its format. */
#if defined(__GNUC__)
#define FM_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define FM_PRINTF(fmt, args)
#endif

/* Writes a one-line message into err (if there is room) and returns 2, the
 * "bad input" code, so a check reads `return fm_fail(...)`. Messages may
 * quote bytes from the file, so any control character (ASCII, or a C1
 * control such as U+0085, which is a newline to some terminals) is replaced
 * with '?': whatever the input, the message stays one printable line. */
static int fm_vfail(char *err, size_t errlen, const char *prefix, const char *fmt, va_list ap)
    FM_PRINTF(4, 0);
static int fm_vfail(char *err, size_t errlen, const char *prefix, const char *fmt, va_list ap) {
    if (!err || errlen == 0) return 2;
    size_t at = 0;
    if (prefix) {
        snprintf(err, errlen, "%s", prefix);
        at = strlen(err);
    }
    if (at < errlen) vsnprintf(err + at, errlen - at, fmt, ap);
    for (unsigned char *c = (unsigned char *)err; *c; c++) {
        if (*c < 0x20 || *c == 0x7f) *c = '?';
        else if (*c == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f)
            c[0] = c[1] = '?'; /* UTF-8 of U+0080..U+009F */
    }
    return 2;
}

static int fm_fail(char *err, size_t errlen, const char *fmt, ...) FM_PRINTF(3, 4);
static int fm_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fm_vfail(err, errlen, NULL, fmt, ap);
    va_end(ap);
    return 2;
}

/* A text buffer that grows as it is written to. On allocation failure it
 * remembers, stops writing, and the writer returns NULL at the end: one
 * check instead of one after every line. */
typedef struct {
    char *data;
    size_t len, cap;
    int failed;
} TextBuf;

static void tb_reserve(TextBuf *b, size_t more) {
    if (b->failed) return;
    if (b->len + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1) cap *= 2;
    char *p = (char *)realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return;
    }
    b->data = p;
    b->cap = cap;
}

static void tb_bytes(TextBuf *b, const void *src, size_t n) {
    tb_reserve(b, n);
    if (b->failed) return;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void tb_printf(TextBuf *b, const char *fmt, ...) FM_PRINTF(2, 3);
static void tb_printf(TextBuf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap); /* first measure, then write */
    va_end(ap);
    if (n < 0) b->failed = 1;
    else tb_reserve(b, (size_t)n);
    if (!b->failed) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

/* Every number in both formats must stay exact through a double (JSON
 * readers, Python) and far from overflow in our sums: 2^53 is the bound. */
#define FM_MAX_EXACT ((uint64_t)1 << 53)

/* ============================================================================
 * 2. CRC-32
 *
 * A CRC treats the bytes as one long binary polynomial and keeps its
 * remainder modulo a fixed polynomial of degree 32. Any change to 1..32
 * adjacent bits changes the remainder, and so do almost all other changes
 * (a random corruption goes unnoticed with probability 2^-32). The table
 * holds the effect of each possible byte, so the update costs one lookup per
 * byte. "Reflected" means bits are taken least significant first, as zlib,
 * PNG, gzip and Ethernet do. The ~ at both ends (start from all ones, invert
 * at the end) is part of the standard; it also makes leading zero bytes
 * count, and makes the function chainable.
 * ========================================================================== */

static uint32_t crc_table[256];
static int crc_table_ready; /* filled on first use; fsdp.c is single-threaded */

static void crc_make_table(void) {
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t r = byte;
        for (int bit = 0; bit < 8; bit++) r = (r & 1) ? (r >> 1) ^ 0xEDB88320u : r >> 1;
        crc_table[byte] = r;
    }
    crc_table_ready = 1;
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    if (!crc_table_ready) crc_make_table();
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

/* ============================================================================
 * 3. safetensors: the writer
 * ========================================================================== */

/* A JSON string: quotes around, and the characters JSON forbids raw
 * (quote, backslash, control characters) escaped. */
static void tb_json_string(TextBuf *b, const char *s) {
    tb_bytes(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') tb_printf(b, "\\%c", c);
        else if (c < 0x20) tb_printf(b, "\\u%04x", c);
        else tb_bytes(b, s, 1);
    }
    tb_bytes(b, "\"", 1);
}

/* Bytes of a float tensor of this shape, or 0 with *ok = 0 when a dimension
 * is negative or the size overflows. */
static uint64_t st_f32_bytes(const StTensor *t, int *ok) {
    uint64_t bytes = 4;
    *ok = t->ndim >= 0 && t->ndim <= ST_MAX_DIMS;
    for (int d = 0; *ok && d < t->ndim; d++) {
        if (t->shape[d] < 0) *ok = 0;
        else if (t->shape[d] == 0) bytes = 0;
        else if (bytes > FM_MAX_EXACT / (uint64_t)t->shape[d]) *ok = 0;
        else bytes *= (uint64_t)t->shape[d];
    }
    return bytes;
}

unsigned char *st_build_header(StTensor *t, int n, const char *metadata_json, size_t *out_len) {
    TextBuf b;
    memset(&b, 0, sizeof(b));
    tb_bytes(&b, "\0\0\0\0\0\0\0\0", 8); /* the length, filled in at the end */
    tb_bytes(&b, "{", 1);
    /* The reference writer puts __metadata__ first; so do we. */
    if (metadata_json) tb_printf(&b, "\"__metadata__\":{%s}%s", metadata_json, n > 0 ? "," : "");
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        int ok;
        uint64_t bytes = st_f32_bytes(&t[i], &ok);
        if (!ok || offset + bytes > FM_MAX_EXACT) {
            free(b.data);
            return NULL;
        }
        snprintf(t[i].dtype, sizeof(t[i].dtype), "F32");
        t[i].begin = offset;
        t[i].end = offset + bytes;
        offset = t[i].end;
        tb_json_string(&b, t[i].name);
        tb_printf(&b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) tb_printf(&b, "%s%ld", d ? "," : "", t[i].shape[d]);
        tb_printf(&b, "],\"data_offsets\":[%llu,%llu]}%s", (unsigned long long)t[i].begin,
                  (unsigned long long)t[i].end, i + 1 < n ? "," : "");
    }
    tb_bytes(&b, "}", 1);
    while (!b.failed && (b.len - 8) % 8 != 0) tb_bytes(&b, " ", 1); /* data at a multiple of 8 */
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    uint64_t N = b.len - 8;
    for (int i = 0; i < 8; i++) b.data[i] = (char)((N >> (8 * i)) & 0xffu); /* little-endian */
    *out_len = b.len;
    return (unsigned char *)b.data;
}

/* ============================================================================
 * 4. safetensors: the reader
 *
 * A recursive-descent parser shaped like the format: the header is an object
 * whose values are tensor descriptions (objects) or the metadata (an object
 * of strings); a description holds a string and two arrays of integers.
 * There is no "parse any JSON value" function, so nothing nests deeper than
 * those three levels and no input can make the parser recurse.
 * ========================================================================== */

typedef struct {
    const unsigned char *file; /* buf: positions in messages count from here */
    const unsigned char *p;    /* the cursor */
    const unsigned char *end;  /* one past the header's last byte */
    char *err;
    size_t errlen;
    int text_file; /* 1: a JSON text file (config.json): positions as lines and columns */
} Json;

/* An error at the cursor: "header byte 123: ..." in a safetensors header,
 * "line 3, column 14: ..." in a text file, as an editor shows it. */
static int json_fail(Json *J, const char *fmt, ...) FM_PRINTF(2, 3);
static int json_fail(Json *J, const char *fmt, ...) {
    char prefix[64];
    if (J->text_file) {
        long line = 1, column = 1;
        for (const unsigned char *q = J->file; q < J->p; q++, column++)
            if (*q == '\n') line++, column = 0;
        snprintf(prefix, sizeof(prefix), "line %ld, column %ld: ", line, column);
    } else {
        snprintf(prefix, sizeof(prefix), "header byte %ld: ", (long)(J->p - J->file));
    }
    va_list ap;
    va_start(ap, fmt);
    fm_vfail(J->err, J->errlen, prefix, fmt, ap);
    va_end(ap);
    return 2;
}

static void json_skip_ws(Json *J) {
    while (J->p < J->end && (*J->p == ' ' || *J->p == '\t' || *J->p == '\n' || *J->p == '\r'))
        J->p++;
}

/* The next significant byte, or -1 at the end of the header. */
static int json_peek(Json *J) {
    json_skip_ws(J);
    return J->p < J->end ? *J->p : -1;
}

/* "expected X, found Y", where Y describes the byte at the cursor. */
static int json_unexpected(Json *J, const char *expected) {
    int c = json_peek(J);
    if (c < 0)
        return json_fail(J, "expected %s, found the end of the %s (cut short?)", expected,
                         J->text_file ? "file" : "header");
    if (c >= 0x21 && c < 0x7f) return json_fail(J, "expected %s, found '%c'", expected, c);
    return json_fail(J, "expected %s, found byte 0x%02x", expected, c);
}

/* After an object's member: either ',' and another member, or the closing
 * '}'. Leaves the next character in *c. */
static int json_after_member(Json *J, int *c) {
    *c = json_peek(J);
    if (*c == ',') {
        J->p++;
        *c = json_peek(J);
        if (*c == '}') return json_unexpected(J, "a key after ','");
    } else if (*c != '}') {
        return json_unexpected(J, "',' or '}'");
    }
    return 0;
}

static int json_expect(Json *J, int c, const char *expected) {
    if (json_peek(J) != c) return json_unexpected(J, expected);
    J->p++;
    return 0;
}

/* One UTF-8 character at p: its length (1..4) and code point, or 0 when the
 * bytes are not valid UTF-8 (overlong forms and surrogates included). */
static int utf8_decode(const unsigned char *p, const unsigned char *end, uint32_t *cp) {
    unsigned c = p[0];
    int n;
    uint32_t min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        min = 0x80;
        *cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        min = 0x800;
        *cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        min = 0x10000;
        *cp = c & 0x07;
    } else return 0;
    if (end - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        *cp = (*cp << 6) | (p[i] & 0x3fu);
    }
    if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff)) return 0;
    return n;
}

static int utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Four hex digits after "\u". */
static int json_hex4(Json *J, uint32_t *v) {
    *v = 0;
    if (J->end - J->p < 4) return json_fail(J, "\\u needs four hex digits");
    for (int i = 0; i < 4; i++) {
        int c = J->p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return json_fail(J, "\\u needs four hex digits");
        *v = (*v << 4) | (uint32_t)d;
    }
    J->p += 4;
    return 0;
}

/* An escape, the cursor on its backslash: the code point it stands for.
 * UTF-16 surrogate pairs (\ud83d\ude00) become one code point; half a pair
 * is an error, as it is in Python's and Rust's JSON. */
static int json_escape(Json *J, uint32_t *cp) {
    if (J->end - J->p < 2) return json_fail(J, "unterminated string");
    int c = J->p[1];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *hit = c ? strchr(from, c) : NULL;
    if (hit) {
        *cp = (unsigned char)to[hit - from];
        J->p += 2;
        return 0;
    }
    if (c != 'u')
        return json_fail(J, "unknown escape '\\%c' in a string", c >= 0x21 && c < 0x7f ? c : '?');
    J->p += 2;
    if (json_hex4(J, cp)) return 2;
    if (*cp >= 0xdc00 && *cp <= 0xdfff)
        return json_fail(J, "\\u%04x is half of a surrogate pair, alone", (unsigned)*cp);
    if (*cp >= 0xd800 && *cp <= 0xdbff) {
        uint32_t low;
        if (J->end - J->p < 2 || J->p[0] != '\\' || J->p[1] != 'u')
            return json_fail(J, "\\u%04x must be followed by a \\u low surrogate", (unsigned)*cp);
        J->p += 2;
        if (json_hex4(J, &low)) return 2;
        if (low < 0xdc00 || low > 0xdfff)
            return json_fail(J, "\\u%04x must be followed by a \\u low surrogate", (unsigned)*cp);
        *cp = 0x10000 + ((*cp - 0xd800) << 10) + (low - 0xdc00);
    }
    return 0;
}

/* A JSON string at the cursor, decoded (escapes resolved) into out: at most
 * cap - 1 bytes and a NUL (out may be NULL with cap 0: just check it).
 * *len receives the whole decoded length, even when out was too small, and
 * *ctrl whether it holds a control character (U+0000..U+001F,
 * U+007F..U+009F): names must not, since they end up in C strings and on
 * terminals. Raw bytes must be valid UTF-8, as JSON requires. */
static int json_string(Json *J, char *out, size_t cap, size_t *len, int *ctrl) {
    size_t n = 0;
    *ctrl = 0;
    if (json_peek(J) != '"') return json_unexpected(J, "a string");
    J->p++;
    for (;;) {
        if (J->p >= J->end) return json_fail(J, "unterminated string");
        unsigned c = *J->p;
        if (c == '"') break;
        uint32_t cp = 0;
        unsigned char bytes[4];
        int nb;
        if (c == '\\') {
            if (json_escape(J, &cp)) return 2;
            nb = utf8_encode(cp, bytes);
        } else if (c < 0x20) {
            return json_fail(J, "control byte 0x%02x inside a string (JSON requires it escaped)",
                             c);
        } else {
            nb = utf8_decode(J->p, J->end, &cp);
            if (nb == 0) return json_fail(J, "a string is not valid UTF-8");
            memcpy(bytes, J->p, (size_t)nb);
            J->p += nb;
        }
        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) *ctrl = 1;
        for (int i = 0; i < nb; i++, n++)
            if (out && n + 1 < cap) out[n] = (char)bytes[i];
    }
    J->p++; /* the closing quote */
    if (out && cap) out[n < cap ? n : cap - 1] = '\0';
    *len = n;
    return 0;
}

/* A non-negative integer written the one way JSON writers write them: no
 * sign, no fraction or exponent, no leading zero, at most 2^53. */
static int json_uint(Json *J, const char *what, uint64_t *v) {
    int c = json_peek(J);
    if (c == '-') return json_fail(J, "%s: negative numbers are not allowed", what);
    if (c < '0' || c > '9') {
        char expected[64];
        snprintf(expected, sizeof(expected), "a non-negative integer in %s", what);
        return json_unexpected(J, expected);
    }
    if (c == '0' && J->end - J->p > 1 && J->p[1] >= '0' && J->p[1] <= '9')
        return json_fail(J, "%s: leading zeros are not allowed", what);
    uint64_t x = 0;
    while (J->p < J->end && *J->p >= '0' && *J->p <= '9') {
        x = x * 10 + (uint64_t)(*J->p - '0'); /* x <= 2^53 here, so no overflow */
        if (x > FM_MAX_EXACT) return json_fail(J, "%s: number larger than 2^53", what);
        J->p++;
    }
    if (J->p < J->end && (*J->p == '.' || *J->p == 'e' || *J->p == 'E'))
        return json_fail(J, "%s: fractions and exponents are not allowed, only integers", what);
    *v = x;
    return 0;
}

/* [a, b, ...]: at most max integers into vals, their count into *n. */
static int json_uint_array(Json *J, const char *what, uint64_t *vals, int max, int *n) {
    char expected[64];
    snprintf(expected, sizeof(expected), "'[' (%s is an array of integers)", what);
    if (json_expect(J, '[', expected)) return 2;
    *n = 0;
    if (json_peek(J) == ']') {
        J->p++;
        return 0;
    }
    for (;;) {
        if (*n == max) return json_fail(J, "%s has more than %d entries", what, max);
        if (json_uint(J, what, &vals[*n])) return 2;
        (*n)++;
        int c = json_peek(J);
        if (c != ',' && c != ']') return json_unexpected(J, "',' or ']'");
        J->p++;
        if (c == ']') return 0;
    }
}

/* Element sizes of the dtypes safetensors defines with whole bytes. */
static int st_dtype_bytes(const char *dtype) {
    static const char *const names[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
                                        "I16",  "U16", "F16", "BF16",    "I32",
                                        "U32",  "F32", "I64", "U64",     "F64"};
    static const int bytes[] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
    for (size_t i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++)
        if (!strcmp(dtype, names[i])) return bytes[i];
    return 0;
}

/* The checks of one tensor on its own: a known dtype, offsets inside the
 * data section, and exactly the bytes its shape needs. */
static int st_check_tensor(Json *J, const StTensor *t, uint64_t data_len) {
    int size = st_dtype_bytes(t->dtype);
    if (!size)
        return json_fail(J,
                         "tensor '%s': unknown dtype '%s' (known: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 "
                         "U16 F16 BF16 I32 U32 F32 I64 U64 F64)",
                         t->name, t->dtype);
    /* bytes = size * product(shape); a zero dimension means no elements,
     * however large the others, so look for one before multiplying */
    uint64_t need = (uint64_t)size;
    int empty = 0;
    for (int d = 0; d < t->ndim; d++) empty |= t->shape[d] == 0;
    for (int d = 0; d < t->ndim && !empty; d++) {
        uint64_t dim = (uint64_t)t->shape[d];
        if (need > UINT64_MAX / dim)
            return json_fail(J, "tensor '%s': its shape has more bytes than a file can hold",
                             t->name);
        need *= dim;
    }
    if (empty) need = 0;
    if (t->begin > t->end)
        return json_fail(J, "tensor '%s': data_offsets [%llu,%llu] end before they begin", t->name,
                         (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_len)
        return json_fail(J,
                         "tensor '%s': data_offsets end at %llu, beyond the data section (%llu "
                         "bytes: file cut short?)",
                         t->name, (unsigned long long)t->end, (unsigned long long)data_len);
    if (t->end - t->begin != need) {
        char shape[96] = "[";
        for (int d = 0; d < t->ndim; d++) {
            size_t at = strlen(shape);
            snprintf(shape + at, sizeof(shape) - at, "%s%ld", d ? "," : "", t->shape[d]);
        }
        strcat(shape, "]"); /* 4 dims of at most 16 digits: always fits */
        return json_fail(
            J,
            "tensor '%s': data_offsets [%llu,%llu] hold %llu bytes, but shape %s of %s needs %llu",
            t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
            (unsigned long long)(t->end - t->begin), shape, t->dtype, (unsigned long long)need);
    }
    return 0;
}

/* One tensor description: {"dtype": "...", "shape": [...], "data_offsets":
 * [begin, end]}, each key exactly once, in any order, nothing else. */
static int st_parse_tensor(Json *J, StTensor *t, uint64_t data_len) {
    static const char *const keys[3] = {"dtype", "shape", "data_offsets"};
    int seen[3] = {0, 0, 0};
    if (json_expect(J, '{', "'{' (a tensor is described by an object)")) return 2;
    int c = json_peek(J);
    while (c != '}') {
        char key[16];
        size_t klen;
        int ctrl, k = -1;
        if (json_string(J, key, sizeof(key), &klen, &ctrl)) return 2;
        for (int i = 0; i < 3; i++) /* by length too: "dtype\u0000" is not "dtype" */
            if (klen == strlen(keys[i]) && !strcmp(key, keys[i])) k = i;
        if (k < 0)
            return json_fail(
                J, "tensor '%s': unknown key '%s' (only dtype, shape and data_offsets are allowed)",
                t->name, key);
        if (seen[k]) return json_fail(J, "tensor '%s': %s given twice", t->name, keys[k]);
        seen[k] = 1;
        if (json_expect(J, ':', "':' after a key")) return 2;
        uint64_t v[ST_MAX_DIMS];
        int n;
        if (k == 0) {
            size_t dlen;
            if (json_peek(J) != '"') return json_unexpected(J, "a string (dtype)");
            if (json_string(J, t->dtype, sizeof(t->dtype), &dlen, &ctrl)) return 2;
            if (dlen >= sizeof(t->dtype) || dlen != strlen(t->dtype))
                snprintf(t->dtype, sizeof(t->dtype),
                         "?"); /* too long, or a NUL inside: no known dtype */
        } else if (k == 1) {
            if (json_uint_array(J, "shape", v, ST_MAX_DIMS, &n)) return 2;
            t->ndim = n;
            for (int d = 0; d < n; d++) {
                if (v[d] > (uint64_t)LONG_MAX)
                    return json_fail(J, "tensor '%s': dimension %llu is too large", t->name,
                                     (unsigned long long)v[d]);
                t->shape[d] = (long)v[d];
            }
        } else {
            if (json_uint_array(J, "data_offsets", v, 2, &n)) return 2;
            if (n != 2)
                return json_fail(J, "tensor '%s': data_offsets must be [begin, end]", t->name);
            t->begin = v[0];
            t->end = v[1];
        }
        if (json_after_member(J, &c)) return 2;
    }
    J->p++;
    for (int i = 0; i < 3; i++)
        if (!seen[i]) return json_fail(J, "tensor '%s' has no %s", t->name, keys[i]);
    return st_check_tensor(J, t, data_len);
}

/* The keys of __metadata__, decoded, for the duplicate check. */
typedef struct {
    const char *s; /* into KeyList.text */
    size_t len;    /* a key may hold a NUL (\u0000), so its length counts */
} Key;
typedef struct {
    char *text; /* every key, NUL-terminated, one after the other */
    size_t used, cap;
    Key *keys;
    int n, cap_n;
} KeyList;

/* "__metadata__": {"key": "value", ...}, strings only. */
static int st_parse_metadata(Json *J, KeyList *keys) {
    if (json_expect(J, '{', "'{' (__metadata__ is an object of strings)")) return 2;
    int c = json_peek(J);
    while (c != '}') {
        size_t klen, vlen;
        int ctrl;
        if (keys->n == keys->cap_n) {
            int cap = keys->cap_n ? 2 * keys->cap_n : 16;
            Key *k = (Key *)realloc(keys->keys, (size_t)cap * sizeof(Key));
            if (!k) return json_fail(J, "out of memory");
            keys->keys = k;
            keys->cap_n = cap;
        }
        /* a decoded key is never longer than its JSON text, so the buffer
         * the caller sized to the whole header always has room */
        char *at = keys->text + keys->used;
        if (json_string(J, at, keys->cap - keys->used, &klen, &ctrl)) return 2;
        keys->keys[keys->n].s = at;
        keys->keys[keys->n].len = klen;
        keys->used += klen + 1;
        keys->n++;
        if (json_expect(J, ':', "':' after a key")) return 2;
        if (json_peek(J) != '"')
            return json_unexpected(J, "a string (__metadata__ values are strings)");
        if (json_string(J, NULL, 0, &vlen, &ctrl)) return 2;
        if (json_after_member(J, &c)) return 2;
    }
    J->p++;
    return 0;
}

/* Sorting helpers for the whole-header checks below. qsort has no context
 * argument, so we sort arrays of pointers into the data. */
static int cmp_key(const void *a, const void *b) {
    const Key *x = (const Key *)a, *y = (const Key *)b;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len < y->len ? -1 : x->len > y->len ? 1 : 0);
}
static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}
static int cmp_tensor_offsets(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Names are unique, and the tensors tile the data section: sorted by
 * offset, each starts where the previous ended, the first at 0, the last
 * at the end of the file. Sorting makes both O(n log n). */
static int st_check_layout(const StHeader *h, uint64_t data_len, const KeyList *keys, char *err,
                           size_t errlen) {
    if (keys->n > 1)
        qsort(keys->keys, (size_t)keys->n, sizeof(Key),
              cmp_key); /* only the check needs them sorted */
    for (int i = 1; i < keys->n; i++)
        if (!cmp_key(&keys->keys[i - 1], &keys->keys[i]))
            return fm_fail(err, errlen, "__metadata__ has the key '%.60s' twice", keys->keys[i].s);
    const StTensor **s = (const StTensor **)malloc((size_t)(h->n ? h->n : 1) * sizeof(*s));
    if (!s) return fm_fail(err, errlen, "out of memory");
    for (int i = 0; i < h->n; i++) s[i] = &h->tensors[i];
    int rc = 0;
    qsort(s, (size_t)h->n, sizeof(*s), cmp_tensor_name);
    for (int i = 1; i < h->n && !rc; i++)
        if (!strcmp(s[i - 1]->name, s[i]->name))
            rc = fm_fail(err, errlen, "two tensors are named '%s'", s[i]->name);
    qsort(s, (size_t)h->n, sizeof(*s), cmp_tensor_offsets);
    uint64_t at = 0; /* where the next tensor must begin */
    for (int i = 0; i < h->n && !rc; i++) {
        if (s[i]->begin < at)
            rc = fm_fail(err, errlen,
                         "tensors '%s' and '%s' overlap (bytes %llu..%llu of the data section)",
                         s[i - 1]->name, s[i]->name, (unsigned long long)s[i]->begin,
                         (unsigned long long)at);
        else if (s[i]->begin > at)
            rc = fm_fail(err, errlen,
                         "tensor '%s' begins at %llu, leaving a gap of unused bytes after %llu "
                         "(safetensors data is contiguous)",
                         s[i]->name, (unsigned long long)s[i]->begin, (unsigned long long)at);
        at = s[i]->end;
    }
    if (!rc && at != data_len)
        rc = fm_fail(err, errlen,
                     "the tensors end at byte %llu of the data section, but it has %llu bytes "
                     "(trailing bytes, or a wrong file)",
                     (unsigned long long)at, (unsigned long long)data_len);
    free(s);
    return rc;
}

/* The header's top level: {"name": {...}, "__metadata__": {...}, ...}. */
static int st_parse_json(Json *J, StHeader *h, uint64_t data_len, KeyList *keys) {
    int cap = 0, seen_metadata = 0;
    if (*J->p != '{')
        return json_fail(J,
                         "the header does not start with '{': not a safetensors file"); /* N >= 1 */
    J->p++;
    int c = json_peek(J);
    while (c != '}') {
        char name[ST_MAX_NAME];
        size_t nlen;
        int ctrl;
        if (json_string(J, name, sizeof(name), &nlen, &ctrl)) return 2;
        if (json_expect(J, ':', "':' after a name")) return 2;
        if (nlen == 12 && !strcmp(name, "__metadata__")) { /* 12: not "__metadata__\u0000x" */
            if (seen_metadata) return json_fail(J, "__metadata__ given twice");
            seen_metadata = 1;
            if (st_parse_metadata(J, keys)) return 2;
        } else {
            if (nlen == 0) return json_fail(J, "a tensor has an empty name");
            if (nlen >= ST_MAX_NAME)
                return json_fail(
                    J, "tensor name '%.40s...' is %lu bytes long; at most %d are supported", name,
                    (unsigned long)nlen, ST_MAX_NAME - 1);
            if (ctrl) return json_fail(J, "tensor name '%s' contains a control character", name);
            if (h->n == ST_MAX_TENSORS) return json_fail(J, "more than %d tensors", ST_MAX_TENSORS);
            if (h->n == cap) {
                cap = cap ? 2 * cap : 16;
                StTensor *t = (StTensor *)realloc(h->tensors, (size_t)cap * sizeof(StTensor));
                if (!t) return json_fail(J, "out of memory");
                h->tensors = t;
            }
            StTensor *t = &h->tensors[h->n++];
            memset(t, 0, sizeof(*t));
            memcpy(t->name, name, nlen + 1);
            if (st_parse_tensor(J, t, data_len)) return 2;
        }
        c = json_peek(J);
        if (c == ',') {
            J->p++;
            c = json_peek(J);
            if (c == '}') return json_unexpected(J, "a name after ','");
        } else if (c != '}') {
            return json_unexpected(J, "',' or '}'");
        }
    }
    J->p++;
    if (json_peek(J) >= 0)
        return json_fail(
            J, "unexpected bytes after the header's closing '}' (only spaces may follow)");
    return 0;
}

int st_parse_header(const unsigned char *buf, size_t len, uint64_t file_size, StHeader *out,
                    char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (err && errlen) err[0] = '\0';
    if (len < 8)
        return fm_fail(
            err, errlen,
            "only %lu bytes given; a safetensors file starts with an 8-byte header length",
            (unsigned long)len);
    if (file_size < 8)
        return fm_fail(
            err, errlen,
            "the file has %llu bytes, too few for safetensors (8-byte length, then the header)",
            (unsigned long long)file_size);
    uint64_t N = 0;
    for (int i = 7; i >= 0; i--) N = (N << 8) | buf[i]; /* little-endian u64 */
    if (N == 0) return fm_fail(err, errlen, "the header length is 0: not a safetensors file");
    if (N > file_size - 8)
        return fm_fail(err, errlen,
                       "the header length %llu runs past the end of the %llu-byte file: cut short, "
                       "or not a safetensors file",
                       (unsigned long long)N, (unsigned long long)file_size);
    if (N > ST_MAX_HEADER)
        return fm_fail(err, errlen,
                       "the header length %llu is over the %u-byte limit: not a safetensors file?",
                       (unsigned long long)N, ST_MAX_HEADER);
    out->data_start = 8 + N;
    if (N > len - 8) {
        fm_fail(err, errlen, "need the first %llu bytes of the file to read its header; %lu given",
                (unsigned long long)(8 + N), (unsigned long)len);
        return 3;
    }
    Json J;
    J.file = buf;
    J.p = buf + 8;
    J.end = buf + 8 + N;
    J.err = err;
    J.errlen = errlen;
    J.text_file = 0;
    KeyList keys;
    memset(&keys, 0, sizeof(keys));
    keys.cap = (size_t)N + 1; /* enough for every decoded metadata key */
    keys.text = (char *)malloc(keys.cap);
    int rc = keys.text ? st_parse_json(&J, out, file_size - out->data_start, &keys)
                       : fm_fail(err, errlen, "out of memory");
    if (rc == 0) rc = st_check_layout(out, file_size - out->data_start, &keys, err, errlen);
    free(keys.text);
    free(keys.keys);
    if (rc != 0) st_free(out);
    return rc;
}

void st_free(StHeader *h) {
    if (!h) return;
    free(h->tensors);
    h->tensors = NULL;
    h->n = 0;
}

/* ============================================================================
 * 5. meta.txt: the writer, and the layout hash
 *
 * meta.txt is written line by line through one function, meta_write_lines,
 * for two uses: meta_format keeps every line (in a TextBuf), and
 * meta_layout_hash folds the layout lines (those marked MW_LAYOUT) into a
 * hash and keeps nothing. So the hash is over exactly the bytes meta_format
 * writes for those lines, by construction, and the two cannot drift apart.
 * ========================================================================== */

/* 64-bit FNV-1a: for each byte, xor it in, then multiply by the prime. Not a
 * cryptographic hash (anyone can build a collision on purpose); it is there
 * to tell layouts apart that differ by accident, and any change to a byte
 * changes it. Short, and easy to recompute in any language (see formats.h). */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv1a_update(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

/* The longest line meta_format can write, with room to spare: a param line
 * is at most 6 + 95 + 6 + 11 + 8 + 20 + 7 + 11 + 1 + 11 + 1 = 177 bytes. */
#define META_MAX_LINE 320

enum { MW_OTHER = 0, MW_LAYOUT = 1 };

typedef struct {
    TextBuf *text;   /* every line is appended here, when not NULL */
    uint64_t layout; /* FNV-1a of the MW_LAYOUT lines so far */
    int failed;      /* a line did not fit in META_MAX_LINE (a bad struct) */
} MetaWriter;

/* One line, formatted into a local buffer (so the hash needs no memory),
 * then hashed if it is a layout line and kept if there is a text. */
static void mw_line(MetaWriter *W, int kind, const char *fmt, ...) FM_PRINTF(3, 4);
static void mw_line(MetaWriter *W, int kind, const char *fmt, ...) {
    char line[META_MAX_LINE];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line)) {
        W->failed = 1;
        n = n < 0 ? 0 : (int)sizeof(line) - 1; /* hash what fits; the text gives up */
    }
    if (kind == MW_LAYOUT) W->layout = fnv1a_update(W->layout, line, (size_t)n);
    if (W->text) tb_bytes(W->text, line, (size_t)n);
}

/* Every line of meta.txt but "end", in order. Without a text (the hash),
 * it stops after the params: the file lines are not part of the layout, and
 * the hash must not need them (a writer hashes before it has the files). */
static void meta_write_lines(const CkptMeta *m, MetaWriter *W) {
    mw_line(W, MW_OTHER, "fsdp-checkpoint %d\n", META_VERSION);
    mw_line(W, MW_LAYOUT, "world %d\n", m->world);
    mw_line(W, MW_LAYOUT, "strategy %s%s\n", m->strategy, m->fsdp2 ? " layout fsdp2" : "");
    mw_line(W, MW_LAYOUT, "model vocab %d embed_dim %d context %d width %d depth %d\n", m->vocab,
            m->embed_dim, m->context, m->width, m->depth);
    mw_line(W, MW_LAYOUT, "min_params %ld\n", m->min_params);
    mw_line(W, MW_OTHER, "seed %llu\n", (unsigned long long)m->seed);
    mw_line(W, MW_OTHER, "batch %d\n", m->batch);
    if (m->data_is_file)
        mw_line(W, MW_OTHER, "data file bytes %llu crc32 %08x train %ld\n",
                (unsigned long long)m->data_bytes, (unsigned)m->data_crc, m->data_train);
    else mw_line(W, MW_OTHER, "data synthetic train %ld\n", m->data_train);
    mw_line(W, MW_OTHER, "step %ld\n", m->step);
    mw_line(W, MW_OTHER, "adam_step %ld\n", m->adam_step);
    /* a meta without a schedule (all zero) writes the constant one */
    mw_line(W, MW_OTHER,
            "lr_schedule %s lr %08x warmup %ld step_size %ld gamma %08x steps %ld min_lr %08x\n",
            m->lr_schedule[0] ? m->lr_schedule : "constant", (unsigned)m->lr_bits, m->warmup,
            m->step_size > 0 ? m->step_size : 1, (unsigned)m->gamma_bits, m->schedule_steps,
            (unsigned)m->min_lr_bits);
    mw_line(W, MW_OTHER,
            "optimizer %s beta1 %08x beta2 %08x eps %08x weight_decay %08x clip_grad_norm %08x "
            "decay %s\n",
            m->optimizer[0] ? m->optimizer : "adamw", (unsigned)m->beta1_bits,
            (unsigned)m->beta2_bits, (unsigned)m->eps_bits, (unsigned)m->weight_decay_bits,
            (unsigned)m->clip_bits, m->decay[0] ? m->decay : "all");
    mw_line(W, MW_OTHER, "precision param_dtype %s reduce_dtype %s\n",
            m->param_dtype[0] ? m->param_dtype : "fp32",
            m->reduce_dtype[0] ? m->reduce_dtype : "fp32");
    if (m->scaler_on)
        mw_line(W, MW_OTHER, "grad_scaler scale %08x growth %ld\n", (unsigned)m->scale_bits,
                m->scaler_growth);
    else mw_line(W, MW_OTHER, "grad_scaler off\n");
    mw_line(W, MW_LAYOUT, "units %d\n", m->n_units);
    for (int i = 0; i < m->n_units; i++) {
        const MetaUnit *u = &m->units[i];
        mw_line(W, MW_LAYOUT, "unit %d numel %ld padded %ld shard %ld\n", i, u->numel, u->padded,
                u->shard);
    }
    mw_line(W, MW_LAYOUT, "params %d\n", m->n_params);
    for (int i = 0; i < m->n_params; i++) {
        const MetaParam *p = &m->params[i];
        mw_line(W, MW_LAYOUT, "param %s unit %d offset %ld shape %d %d\n", p->name, p->unit,
                p->offset, p->shape[0], p->shape[1]);
    }
    if (!W->text) return;
    mw_line(W, MW_OTHER, "files %d\n", m->n_files);
    for (int i = 0; i < m->n_files; i++) {
        const MetaFile *f = &m->files[i];
        mw_line(W, MW_OTHER, "file %s bytes %llu crc32 %08x\n", f->name,
                (unsigned long long)f->bytes, (unsigned)f->crc);
    }
}

char *meta_format(const CkptMeta *m, size_t *len) {
    TextBuf b;
    memset(&b, 0, sizeof(b));
    MetaWriter W = {&b, FNV_OFFSET, 0};
    meta_write_lines(m, &W);
    /* the checksum of everything above, as meta_parse will compute it */
    if (!b.failed && !W.failed)
        tb_printf(&b, "end crc32 %08x\n", (unsigned)crc32_update(0, b.data, b.len));
    if (b.failed || W.failed) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}

uint64_t meta_layout_hash(const CkptMeta *m) {
    MetaWriter W = {NULL, FNV_OFFSET, 0};
    meta_write_lines(m, &W);
    return W.layout;
}

/* ============================================================================
 * 6. meta.txt: the reader
 *
 * A reader that expects one line at a time, in order. Each line is first
 * split into fields (checking the characters and the single spaces), then
 * matched against a pattern such as "unit %d numel %L padded %L shard %L":
 * words must be equal, and each % field is parsed and range-checked:
 *
 *   %d  int, 0..INT_MAX           %U  u64, any
 *   %L  long, 0..2^53             %X  u32 as exactly 8 lowercase hex digits
 *   %N  a name (see meta_name_problem), into char[META_MAX_NAME]
 *   %W  a word of at most 31 characters, into char[32]
 * ========================================================================== */

#define META_MAX_FIELDS 16

typedef struct {
    const char *text;
    size_t len, pos; /* the whole text; where the next line starts */
    int line_no;     /* of the current line, from 1 */
    const char *field[META_MAX_FIELDS];
    size_t field_len[META_MAX_FIELDS];
    int n_fields;
    int last_cut; /* the current line is the text's last and has no "\n" */
    char *err;
    size_t errlen;
} MetaReader;

/* An error on the current line: "line 12: ...". */
static int meta_fail(MetaReader *R, const char *fmt, ...) FM_PRINTF(2, 3);
static int meta_fail(MetaReader *R, const char *fmt, ...) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "line %d: ", R->line_no);
    va_list ap;
    va_start(ap, fmt);
    fm_vfail(R->err, R->errlen, prefix, fmt, ap);
    va_end(ap);
    /* a bad last line without its newline is most likely a cut-off file */
    size_t n = R->err ? strlen(R->err) : 0;
    if (R->last_cut && n + 1 < R->errlen)
        snprintf(R->err + n, R->errlen - n, " (the file ends inside this line: cut short?)");
    return 2;
}

/* The keys in the order the file has them; used to explain a wrong key. */
static const char *const META_KEYS[] = {
    "fsdp-checkpoint", "world", "strategy", "model",     "min_params", "seed",
    "batch",           "data",  "step",     "adam_step", "lr_schedule", "optimizer",
    "precision",       "grad_scaler", "units", "unit", "params",   "param",     "files",
    "file",            "end"};

static int meta_key_index(const char *s, size_t n) {
    for (int i = 0; i < (int)(sizeof(META_KEYS) / sizeof(META_KEYS[0])); i++)
        if (strlen(META_KEYS[i]) == n && !memcmp(META_KEYS[i], s, n)) return i;
    return -1;
}

/* A key that is repeated as many times as the count before it says ("unit"
 * after "units", and so on). By name, so adding a key elsewhere in
 * META_KEYS cannot silently change which ones these are. */
static int meta_key_is_repeated(int index) {
    if (index < 0) return 0;
    const char *k = META_KEYS[index];
    return !strcmp(k, "unit") || !strcmp(k, "param") || !strcmp(k, "file");
}

/* Splits the next line into fields, and checks that it starts with the key
 * we expect here. */
static int meta_next_line(MetaReader *R, const char *key) {
    R->line_no++;
    if (R->pos >= R->len)
        return meta_fail(R, "the file ends where '%s' was expected (cut short?)", key);
    const char *line = R->text + R->pos;
    const char *nl = (const char *)memchr(line, '\n', R->len - R->pos);
    size_t n = nl ? (size_t)(nl - line) : R->len - R->pos;
    R->pos += n + (nl ? 1 : 0);
    R->last_cut = nl == NULL;
    if (n == 0) return meta_fail(R, "empty line where '%s' was expected", key);
    R->n_fields = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        unsigned char c = i < n ? (unsigned char)line[i] : ' ';
        if (c == '\r') return meta_fail(R, "carriage return: lines must end with \\n alone");
        if (c == '\t') return meta_fail(R, "tab: fields are separated by exactly one space");
        if (c != ' ' && (c < 0x21 || c > 0x7e))
            return meta_fail(R, "byte 0x%02x is not printable ASCII", c);
        if (c != ' ') continue;
        if (i == start)
            return meta_fail(
                R, "extra space: fields are separated by exactly one space, with none at the ends");
        if (R->n_fields == META_MAX_FIELDS) return meta_fail(R, "too many fields");
        R->field[R->n_fields] = line + start;
        R->field_len[R->n_fields++] = i - start;
        start = i + 1;
    }
    const char *got = R->field[0];
    int gl = (int)R->field_len[0];
    if (strlen(key) == (size_t)gl && !memcmp(key, got, (size_t)gl)) return 0;
    int want = meta_key_index(key, strlen(key)), have = meta_key_index(got, (size_t)gl);
    if (R->line_no == 1)
        return meta_fail(
            R, "not an fsdp.c checkpoint metadata file (it must start with 'fsdp-checkpoint %d')",
            META_VERSION);
    if (have < 0)
        return meta_fail(R, "expected '%s', found the unknown key '%.*s'", key, gl > 40 ? 40 : gl,
                         got);
    /* "unit" follows "units" (and so on): a count that disagrees with the
     * lines after it shows as the next key too early, or the last one again */
    int repeated = meta_key_is_repeated(have), counted = meta_key_is_repeated(want);
    if (repeated && have == want - 1)
        return meta_fail(R, "expected '%s', found '%.*s' (more '%.*s' lines than '%.*ss' says)",
                         key, gl, got, gl, got, gl, got);
    if (counted && have == want + 1)
        return meta_fail(R, "expected '%s', found '%.*s' (fewer '%s' lines than '%ss' says)", key,
                         gl, got, key, key);
    if (have < want)
        return meta_fail(R, "expected '%s', found '%.*s' (a duplicate, or out of order)", key, gl,
                         got);
    return meta_fail(R, "expected '%s', found '%.*s' (a line is missing before this one)", key, gl,
                     got);
}

/* A decimal number of at most max, no sign, no leading zero. */
static int meta_number(MetaReader *R, const char *label, const char *s, size_t n, uint64_t max,
                       uint64_t *v) {
    if (n > 1 && s[0] == '0')
        return meta_fail(R, "%s '%.*s': leading zeros are not allowed", label, (int)n, s);
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return meta_fail(R, "%s '%.*s' is not a non-negative decimal number", label,
                             (int)(n > 40 ? 40 : n), s);
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (max - d) / 10)
            return meta_fail(R, "%s '%.*s' is too large (at most %llu)", label,
                             (int)(n > 40 ? 40 : n), s, (unsigned long long)max);
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

/* Why this string cannot be a param or file name, or NULL if it can. File
 * names are joined to the checkpoint directory, so they must not be able to
 * point anywhere else: no '/', no "..", no hidden or special names. */
static const char *meta_name_problem(const char *s, size_t n) {
    if (n >= META_MAX_NAME) return "is too long";
    if (n >= 2 && memchr(s, '.', n)) {
        for (size_t i = 0; i + 1 < n; i++)
            if (s[i] == '.' && s[i + 1] == '.') return "contains '..'";
    }
    if (s[0] == '.') return "starts with '.'";
    if (memchr(s, '/', n)) return "contains '/': names are relative to the checkpoint directory";
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return "has a character other than A-Z a-z 0-9 . _ -";
    }
    return NULL;
}

/* Matches the current line's fields against a pattern (see the section's
 * comment), storing each % field through the next pointer argument. */
static int meta_fields(MetaReader *R, const char *pattern, ...) {
    /* the pattern's words, and how the line should look for the message */
    const char *word[META_MAX_FIELDS];
    size_t word_len[META_MAX_FIELDS];
    int n = 0;
    char shape[160] = "";
    for (const char *p = pattern; *p && n < META_MAX_FIELDS; n++) {
        const char *sp = strchr(p, ' ');
        word[n] = p;
        word_len[n] = sp ? (size_t)(sp - p) : strlen(p);
        const char *show = word[n][0] != '%'   ? NULL
                           : word[n][1] == 'X' ? "XXXXXXXX"
                           : word[n][1] == 'N' ? "NAME"
                           : word[n][1] == 'W' ? "WORD"
                                               : "N";
        size_t at = strlen(shape);
        snprintf(shape + at, sizeof(shape) - at, "%s%.*s", n ? " " : "",
                 show ? (int)strlen(show) : (int)word_len[n], show ? show : word[n]);
        p += word_len[n] + (sp ? 1 : 0);
    }
    if (R->n_fields != n)
        return meta_fail(R, "expected '%s' (%d field%s), found %d", shape, n, n == 1 ? "" : "s",
                         R->n_fields);
    va_list ap;
    va_start(ap, pattern);
    int rc = 0;
    char label[40] = ""; /* the last word before a % field names it in messages */
    for (int i = 1; i < n && !rc; i++) {
        const char *f = R->field[i];
        size_t fl = R->field_len[i];
        if (word[i - 1][0] != '%')
            snprintf(label, sizeof(label), "%.*s", (int)word_len[i - 1], word[i - 1]);
        if (word[i][0] != '%') {
            if (fl != word_len[i] || memcmp(f, word[i], fl) != 0)
                rc =
                    meta_fail(R, "expected '%.*s' as field %d of '%s', found '%.*s'",
                              (int)word_len[i], word[i], i + 1, shape, (int)(fl > 40 ? 40 : fl), f);
            continue;
        }
        uint64_t v = 0;
        const char *why;
        switch (word[i][1]) {
        case 'd':
            if (!(rc = meta_number(R, label, f, fl, INT_MAX, &v))) *va_arg(ap, int *) = (int)v;
            break;
        case 'L':
            if (!(rc = meta_number(
                      R, label, f, fl,
                      (uint64_t)LONG_MAX < FM_MAX_EXACT ? (uint64_t)LONG_MAX : FM_MAX_EXACT, &v)))
                *va_arg(ap, long *) = (long)v;
            break;
        case 'U':
            if (!(rc = meta_number(R, label, f, fl, UINT64_MAX, &v))) *va_arg(ap, uint64_t *) = v;
            break;
        case 'X':
            for (size_t k = 0; k < fl && !rc; k++) {
                char c = f[k];
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) rc = 1;
                else v = (v << 4) | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
            }
            if (rc || fl != 8)
                rc = meta_fail(R, "%s '%.*s' is not 8 lowercase hex digits", label,
                               (int)(fl > 40 ? 40 : fl), f);
            else *va_arg(ap, uint32_t *) = (uint32_t)v;
            break;
        case 'N':
            why = meta_name_problem(f, fl);
            if (why)
                rc = meta_fail(R, "%s name '%.*s' %s", label, (int)(fl > 40 ? 40 : fl), f, why);
            else snprintf(va_arg(ap, char *), META_MAX_NAME, "%.*s", (int)fl, f);
            break;
        default: /* 'W' */
            if (fl >= 32)
                rc = meta_fail(R, "%s '%.*s...' is too long", label, 31,
                               f); /* f is not NUL-terminated */
            else snprintf(va_arg(ap, char *), 32, "%.*s", (int)fl, f);
            break;
        }
    }
    va_end(ap);
    return rc;
}

/* Checks a count or size against [lo, hi]. */
static int meta_range(MetaReader *R, const char *what, long v, long lo, long hi) {
    if (v < lo || v > hi) return meta_fail(R, "%s %ld is out of range [%ld, %ld]", what, v, lo, hi);
    return 0;
}

/* Makes room for element i of a growing array (doubling). Returns the
 * (possibly moved) array, or NULL on allocation failure (old one intact). */
static void *meta_grow(void *arr, int i, int *cap, size_t elem) {
    if (i < *cap) return arr;
    int c = *cap ? 2 * *cap : 16;
    void *p = realloc(arr, (size_t)c * elem);
    if (p) *cap = c;
    return p;
}

static int meta_is_sharded(const CkptMeta *m) { return strcmp(m->strategy, "no_shard") != 0; }

/* Is field i of the current line exactly word? */
static int meta_field_is(const MetaReader *R, int i, const char *word) {
    return i < R->n_fields && R->field_len[i] == strlen(word) &&
           !memcmp(R->field[i], word, R->field_len[i]);
}

/* "fsdp-checkpoint 7". Version 1 has its own message: it is what every
 * checkpoint written before version 2 says, and it cannot be upgraded (it has
 * no batch, no data, and nothing to check it against). */
static int meta_parse_version(MetaReader *R, CkptMeta *m) {
    if (meta_next_line(R, "fsdp-checkpoint") || meta_fields(R, "fsdp-checkpoint %d", &m->version))
        return 2;
    static const char *const lacked[] = {"", "checksums", "learning-rate schedule",
                                         "loss scaler's state", "optimizer settings",
                                         "data's held-out tenth",
                                         "--min-lr and weight decay's group"};
    if (m->version >= 1 && m->version < META_VERSION)
        return meta_fail(R,
                         "version %d was written by an older fsdp.c, before checkpoints carried "
                         "their own %s; this fsdp.c reads version %d only: train again to "
                         "re-create it",
                         m->version, lacked[m->version], META_VERSION);
    if (m->version != META_VERSION)
        return meta_fail(R, "version %d; this fsdp.c reads version %d only", m->version,
                         META_VERSION);
    return 0;
}

/* "data synthetic train N" or "data file bytes N crc32 XXXXXXXX train N":
 * the second word says which, and so which pattern the line must match. */
static int meta_parse_data(MetaReader *R, CkptMeta *m) {
    if (meta_next_line(R, "data")) return 2;
    long bytes = 1;
    if (meta_field_is(R, 1, "synthetic")) {
        if (meta_fields(R, "data synthetic train %L", &m->data_train)) return 2;
    } else if (meta_field_is(R, 1, "file")) {
        if (meta_fields(R, "data file bytes %L crc32 %X train %L", &bytes, &m->data_crc,
                        &m->data_train))
            return 2;
        m->data_is_file = 1;
        m->data_bytes = (uint64_t)bytes;
    } else {
        int fl = R->n_fields < 2 ? 0 : (int)(R->field_len[1] > 40 ? 40 : R->field_len[1]);
        return meta_fail(R,
                         "data '%.*s': expected 'data synthetic train N' or 'data file bytes N "
                         "crc32 XXXXXXXX train N'",
                         fl, R->n_fields < 2 ? "" : R->field[1]);
    }
    if (bytes < 1) return meta_fail(R, "data file bytes 0: training data cannot be an empty file");
    if (m->data_train < 1) return meta_fail(R, "data ... train 0: training draws from no tokens");
    return 0;
}

/* "grad_scaler off", or "grad_scaler scale BITS growth N" */
static int meta_parse_scaler(MetaReader *R, CkptMeta *m) {
    if (meta_next_line(R, "grad_scaler")) return 2;
    m->scaler_on = !meta_field_is(R, 1, "off");
    if (!m->scaler_on) return meta_fields(R, "grad_scaler off");
    if (meta_fields(R, "grad_scaler scale %X growth %L", &m->scale_bits, &m->scaler_growth))
        return 2;
    float scale;
    memcpy(&scale, &m->scale_bits, sizeof(scale));
    if (!(scale > 0.0f) || !isnormal(scale)) /* a denormal's 1/scale is inf */
        return meta_fail(R, "grad_scaler scale %08x is not a positive normal float",
                         (unsigned)m->scale_bits);
    if (m->scaler_growth >= 2000)
        return meta_fail(R, "grad_scaler growth %ld: the scale doubles at 2000, so it is below",
                         m->scaler_growth);
    return 0;
}

static float float_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* "optimizer adamw beta1 X beta2 X eps X weight_decay X clip_grad_norm X":
 * the settings torch.optim.AdamW (or Adam) and clip_grad_norm_ were given. */
static int meta_parse_optimizer(MetaReader *R, CkptMeta *m) {
    if (meta_next_line(R, "optimizer") ||
        meta_fields(R,
                    "optimizer %W beta1 %X beta2 %X eps %X weight_decay %X clip_grad_norm %X "
                    "decay %W",
                    m->optimizer, &m->beta1_bits, &m->beta2_bits, &m->eps_bits,
                    &m->weight_decay_bits, &m->clip_bits, m->decay))
        return 2;
    if (strcmp(m->optimizer, "adamw") && strcmp(m->optimizer, "adam"))
        return meta_fail(R, "unknown optimizer '%s' (adamw or adam)", m->optimizer);
    if (strcmp(m->decay, "all") && strcmp(m->decay, "matrices"))
        return meta_fail(R, "unknown decay '%s' (all or matrices)", m->decay);
    const char *names[] = {"beta1", "beta2"};
    uint32_t betas[] = {m->beta1_bits, m->beta2_bits};
    for (int i = 0; i < 2; i++) {
        float b = float_of_bits(betas[i]);
        if (!(b >= 0.0f && b < 1.0f))
            return meta_fail(R, "%s %08x is not a float in [0, 1)", names[i], (unsigned)betas[i]);
    }
    float eps = float_of_bits(m->eps_bits), wd = float_of_bits(m->weight_decay_bits),
          clip = float_of_bits(m->clip_bits);
    if (!(eps > 0.0f) || !isnormal(eps))
        return meta_fail(R, "eps %08x is not a positive normal float", (unsigned)m->eps_bits);
    if (!(wd >= 0.0f && wd <= 1.0f))
        return meta_fail(R, "weight_decay %08x is not a float in [0, 1]",
                         (unsigned)m->weight_decay_bits);
    if (!(clip >= 0.0f) || !isfinite(clip))
        return meta_fail(R, "clip_grad_norm %08x is not a finite float >= 0 (0: off)",
                         (unsigned)m->clip_bits);
    return 0;
}

/* "precision param_dtype D reduce_dtype D": MixedPrecision's formats */
static int meta_parse_precision(MetaReader *R, CkptMeta *m) {
    if (meta_next_line(R, "precision") ||
        meta_fields(R, "precision param_dtype %W reduce_dtype %W", m->param_dtype,
                    m->reduce_dtype))
        return 2;
    const char *d[] = {m->param_dtype, m->reduce_dtype};
    for (int i = 0; i < 2; i++)
        if (strcmp(d[i], "fp32") && strcmp(d[i], "bf16") && strcmp(d[i], "fp16"))
            return meta_fail(R, "unknown %s '%s' (fp32, bf16 or fp16)",
                             i ? "reduce_dtype" : "param_dtype", d[i]);
    return 0;
}

/* fsdp-checkpoint 2 ... adam_step: the scalars. */
static int meta_parse_scalars(MetaReader *R, CkptMeta *m) {
    if (meta_parse_version(R, m)) return 2;
    if (meta_next_line(R, "world") || meta_fields(R, "world %d", &m->world) ||
        meta_range(R, "world", m->world, 1, META_MAX_COUNT))
        return 2;
    if (meta_next_line(R, "strategy")) return 2;
    m->fsdp2 = R->n_fields == 4; /* FSDP2's per-parameter shards; FSDP1's say nothing more */
    if (meta_fields(R, m->fsdp2 ? "strategy %W layout fsdp2" : "strategy %W", m->strategy))
        return 2;
    static const char *const known[] = {"full_shard",   "shard_grad_op",      "no_shard",
                                        "hybrid_shard", "hybrid_shard_zero2", "zero1"};
    int found = 0;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        found |= !strcmp(m->strategy, known[i]);
    if (!found)
        return meta_fail(R,
                         "unknown strategy '%s' (full_shard, shard_grad_op, no_shard, "
                         "hybrid_shard, hybrid_shard_zero2 or zero1)",
                         m->strategy);
    if (m->fsdp2 && (!strcmp(m->strategy, "no_shard") || !strcmp(m->strategy, "zero1")))
        return meta_fail(R, "layout fsdp2 with %s, which keeps whole replicas", m->strategy);
    if (meta_next_line(R, "model") ||
        meta_fields(R, "model vocab %d embed_dim %d context %d width %d depth %d", &m->vocab,
                    &m->embed_dim, &m->context, &m->width, &m->depth))
        return 2;
    if (meta_range(R, "vocab", m->vocab, 1, META_MAX_COUNT) ||
        meta_range(R, "embed_dim", m->embed_dim, 1, META_MAX_COUNT) ||
        meta_range(R, "context", m->context, 1, META_MAX_COUNT) ||
        meta_range(R, "width", m->width, 1, META_MAX_COUNT) ||
        meta_range(R, "depth", m->depth, 1, META_MAX_COUNT))
        return 2;
    if (meta_next_line(R, "min_params") || meta_fields(R, "min_params %L", &m->min_params))
        return 2;
    if (meta_next_line(R, "seed") || meta_fields(R, "seed %U", &m->seed)) return 2;
    if (meta_next_line(R, "batch") || meta_fields(R, "batch %d", &m->batch) ||
        meta_range(R, "batch", m->batch, 1, META_MAX_COUNT))
        return 2;
    if (meta_parse_data(R, m)) return 2;
    if (meta_next_line(R, "step") || meta_fields(R, "step %L", &m->step)) return 2;
    if (meta_next_line(R, "adam_step") || meta_fields(R, "adam_step %L", &m->adam_step)) return 2;
    /* AdamW's t counts the optimizer steps taken, at most one per step */
    if (m->adam_step > m->step)
        return meta_fail(R, "adam_step %ld is more than step %ld: adam_step must be <= step",
                         m->adam_step, m->step);
    if (meta_next_line(R, "lr_schedule") ||
        meta_fields(R, "lr_schedule %W lr %X warmup %L step_size %L gamma %X steps %L min_lr %X",
                    m->lr_schedule, &m->lr_bits, &m->warmup, &m->step_size, &m->gamma_bits,
                    &m->schedule_steps, &m->min_lr_bits))
        return 2;
    if (strcmp(m->lr_schedule, "constant") && strcmp(m->lr_schedule, "step") &&
        strcmp(m->lr_schedule, "cosine") && strcmp(m->lr_schedule, "linear"))
        return meta_fail(R, "unknown lr_schedule '%s' (constant, step, cosine or linear)",
                         m->lr_schedule);
    if (m->step_size < 1) return meta_fail(R, "step_size %ld must be >= 1", m->step_size);
    if (meta_parse_optimizer(R, m) || meta_parse_precision(R, m)) return 2;
    return meta_parse_scaler(R, m);
}

/* units N, then N unit lines, each padded and sharded as fsdp.c does. */
static int meta_parse_units(MetaReader *R, CkptMeta *m) {
    int n, cap = 0;
    if (meta_next_line(R, "units") || meta_fields(R, "units %d", &n) ||
        meta_range(R, "units", n, 1, META_MAX_COUNT))
        return 2;
    for (int i = 0; i < n; i++) {
        MetaUnit u;
        int index;
        if (meta_next_line(R, "unit") || meta_fields(R, "unit %d numel %L padded %L shard %L",
                                                     &index, &u.numel, &u.padded, &u.shard))
            return 2;
        if (index != i)
            return meta_fail(
                R, "unit %d where unit %d was expected (units are listed in order from 0)", index,
                i);
        uint64_t W = (uint64_t)m->world, numel = (uint64_t)u.numel;
        uint64_t padded = (numel + W - 1) / W * W, shard = meta_is_sharded(m) ? padded / W : padded;
        if (m->fsdp2) { /* padded by each parameter's rows: meta_check_fsdp2 checks it */
            padded = (uint64_t)u.padded;
            shard = (uint64_t)u.shard;
        }
        if ((uint64_t)u.padded != padded)
            return meta_fail(R,
                             "unit %d: padded %ld, but numel %ld on %d ranks pads to %llu "
                             "(ceil(numel / world) * world)",
                             i, u.padded, u.numel, m->world, (unsigned long long)padded);
        if ((uint64_t)u.shard != shard)
            return meta_fail(R, "unit %d: shard %ld, but %s on %d ranks gives %llu (%s)", i,
                             u.shard, m->strategy, m->world, (unsigned long long)shard,
                             meta_is_sharded(m) ? "padded / world"
                                                : "no_shard keeps all of padded");
        void *p = meta_grow(m->units, i, &cap, sizeof(MetaUnit));
        if (!p) return meta_fail(R, "out of memory");
        m->units = (MetaUnit *)p;
        m->units[i] = u;
        m->n_units = i + 1;
    }
    return 0;
}

static int cmp_param_name(const void *a, const void *b) {
    return strcmp((*(const MetaParam *const *)a)->name, (*(const MetaParam *const *)b)->name);
}
static int cmp_param_place(const void *a, const void *b) {
    const MetaParam *x = *(const MetaParam *const *)a, *y = *(const MetaParam *const *)b;
    if (x->unit != y->unit) return x->unit < y->unit ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return 0;
}

/* FSDP2's layout (fsdp.c, section 14): a unit's params, in order of
 * offset, each take ceil(rows / world) rows of every rank's shard, one
 * after another from 0 to the shard; a param's offset is world times where
 * its rows start. s: the params sorted by (unit, offset). */
static int meta_check_fsdp2(MetaReader *R, const CkptMeta *m, const MetaParam **s,
                            int first_line) {
    int k = 0;
    long W = m->world;
    for (int u = 0; u < m->n_units; u++) {
        long at = 0, numel = 0;
        for (; k < m->n_params && s[k]->unit == u; k++) {
            R->line_no = first_line + (int)(s[k] - m->params);
            if (s[k]->offset != W * at)
                return meta_fail(R,
                                 "param '%s': offset %ld, but with layout fsdp2 on %ld ranks "
                                 "its rows start at %ld of each shard: offset %ld",
                                 s[k]->name, s[k]->offset, W, at, W * at);
            at += (s[k]->shape[0] + W - 1) / W * s[k]->shape[1];
            numel += s[k]->numel;
        }
        if (at != m->units[u].shard || W * at != m->units[u].padded || numel != m->units[u].numel) {
            R->line_no = first_line - 1 - m->n_units + u; /* the unit's own line */
            return meta_fail(R,
                             "unit %d: numel %ld padded %ld shard %ld, but its params on %ld "
                             "ranks (layout fsdp2) give numel %ld padded %ld shard %ld",
                             u, m->units[u].numel, m->units[u].padded, m->units[u].shard, W,
                             numel, W * at, at);
        }
    }
    return 0;
}

/* The params of every unit tile its flat parameter: sorted by (unit,
 * offset), each starts where the previous ended, from 0 to the unit's
 * numel (FSDP2's: meta_check_fsdp2). Names are unique. first_line is the
 * line of the first param. */
static int meta_check_params(MetaReader *R, const CkptMeta *m, int first_line) {
    const MetaParam **s = (const MetaParam **)malloc((size_t)m->n_params * sizeof(*s));
    if (!s) return meta_fail(R, "out of memory");
    for (int i = 0; i < m->n_params; i++) s[i] = &m->params[i];
    int rc = 0;
    qsort(s, (size_t)m->n_params, sizeof(*s), cmp_param_name);
    for (int i = 1; i < m->n_params && !rc; i++)
        if (!strcmp(s[i - 1]->name, s[i]->name)) {
            long a = (long)(s[i - 1] - m->params), b = (long)(s[i] - m->params);
            R->line_no = first_line + (int)(a > b ? a : b);
            rc = meta_fail(R, "param '%s' is listed twice (also on line %d)", s[i]->name,
                           first_line + (int)(a < b ? a : b));
        }
    qsort(s, (size_t)m->n_params, sizeof(*s), cmp_param_place);
    if (!rc && m->fsdp2) {
        rc = meta_check_fsdp2(R, m, s, first_line);
        free(s);
        return rc;
    }
    int k = 0;
    for (int u = 0; u < m->n_units && !rc; u++) {
        long at = 0; /* where the next param of unit u must start */
        const MetaParam *prev = NULL;
        for (; k < m->n_params && s[k]->unit == u && !rc; k++) {
            R->line_no = first_line + (int)(s[k] - m->params);
            if (s[k]->offset < at)
                rc = meta_fail(
                    R, "param '%s' (offset %ld) overlaps param '%s' (line %d), which ends at %ld",
                    s[k]->name, s[k]->offset, prev->name, first_line + (int)(prev - m->params), at);
            else if (s[k]->offset > at)
                rc = meta_fail(R,
                               "param '%s' starts at offset %ld, but the unit's params before it "
                               "end at %ld: a gap",
                               s[k]->name, s[k]->offset, at);
            at = s[k]->offset + s[k]->numel;
            prev = s[k];
        }
        if (!rc && at != m->units[u].numel) {
            R->line_no = first_line - 1 - m->n_units + u; /* the unit's own line */
            rc = meta_fail(R, "unit %d has %ld elements, but its params cover only %ld", u,
                           m->units[u].numel, at);
        }
    }
    free(s);
    return rc;
}

/* params N, then N param lines. */
static int meta_parse_params(MetaReader *R, CkptMeta *m) {
    int n, cap = 0;
    if (meta_next_line(R, "params") || meta_fields(R, "params %d", &n) ||
        meta_range(R, "params", n, 1, META_MAX_COUNT))
        return 2;
    int first_line = R->line_no + 1;
    for (int i = 0; i < n; i++) {
        MetaParam p;
        memset(&p, 0, sizeof(p));
        if (meta_next_line(R, "param") ||
            meta_fields(R, "param %N unit %d offset %L shape %d %d", p.name, &p.unit, &p.offset,
                        &p.shape[0], &p.shape[1]))
            return 2;
        if (p.shape[0] < 1 || p.shape[1] < 1)
            return meta_fail(R, "param '%s': shape %d %d has no elements (a vector is N 1)", p.name,
                             p.shape[0], p.shape[1]);
        if (p.unit >= m->n_units)
            return meta_fail(R, "param '%s': unit %d does not exist (there are %d)", p.name, p.unit,
                             m->n_units);
        const MetaUnit *u = &m->units[p.unit];
        uint64_t numel = (uint64_t)p.shape[0] * (uint64_t)p.shape[1]; /* < 2^62: no overflow */
        long span = m->fsdp2 ? u->padded : u->numel; /* FSDP2's params lie among padding rows */
        if (p.offset > span || numel > (uint64_t)(span - p.offset))
            return meta_fail(
                R, "param '%s': offset %ld + %llu elements goes beyond unit %d, which has %ld",
                p.name, p.offset, (unsigned long long)numel, p.unit, span);
        p.numel = (long)numel; /* <= the unit's numel, so it fits */
        void *grown = meta_grow(m->params, i, &cap, sizeof(MetaParam));
        if (!grown) return meta_fail(R, "out of memory");
        m->params = (MetaParam *)grown;
        m->params[i] = p;
        m->n_params = i + 1;
    }
    int last_line = R->line_no;
    if (meta_check_params(R, m, first_line)) return 2;
    R->line_no = last_line;
    return 0;
}

static int cmp_file_name(const void *a, const void *b) {
    return strcmp((*(const MetaFile *const *)a)->name, (*(const MetaFile *const *)b)->name);
}

/* files N (world of them if sharded, else 1), then N file lines, each as
 * long as the header and the shards of every unit, three times over. */
static int meta_parse_files(MetaReader *R, CkptMeta *m) {
    int n, cap = 0, want = meta_is_sharded(m) ? m->world : 1;
    if (meta_next_line(R, "files") || meta_fields(R, "files %d", &n) ||
        meta_range(R, "files", n, 1, META_MAX_COUNT))
        return 2;
    if (n != want)
        return meta_fail(R, "files %d, but %s on %d ranks writes %d (%s)", n, m->strategy, m->world,
                         want, meta_is_sharded(m) ? "one per rank" : "rank 0's only");
    /* shard <= 2^53 + 2^20, so 12 * shard < 2^57; the sum of 2^20 of them could
     * still overflow, so stop at 2^63 (no real file is that large) */
    uint64_t bytes = SHARD_HEADER_BYTES;
    for (int u = 0; u < m->n_units; u++) {
        bytes += 3 * 4 * (uint64_t)m->units[u].shard;
        if (bytes > ((uint64_t)1 << 63))
            return meta_fail(R, "the units' shards add up to more bytes than a file can hold");
    }
    for (int i = 0; i < n; i++) {
        MetaFile f;
        if (meta_next_line(R, "file") ||
            meta_fields(R, "file %N bytes %U crc32 %X", f.name, &f.bytes, &f.crc))
            return 2;
        if (f.bytes != bytes)
            return meta_fail(R,
                             "file '%s': bytes %llu, but a shard file takes %llu (a %d-byte "
                             "header, then 3 * 4 * sum of shard)",
                             f.name, (unsigned long long)f.bytes, (unsigned long long)bytes,
                             SHARD_HEADER_BYTES);
        void *grown = meta_grow(m->files, i, &cap, sizeof(MetaFile));
        if (!grown) return meta_fail(R, "out of memory");
        m->files = (MetaFile *)grown;
        m->files[i] = f;
        m->n_files = i + 1;
    }
    /* distinct names: two ranks must never share a file */
    const MetaFile **s = (const MetaFile **)malloc((size_t)n * sizeof(*s));
    if (!s) return meta_fail(R, "out of memory");
    for (int i = 0; i < n; i++) s[i] = &m->files[i];
    qsort(s, (size_t)n, sizeof(*s), cmp_file_name);
    int rc = 0, last_line = R->line_no, first_line = last_line - n + 1;
    for (int i = 1; i < n && !rc; i++)
        if (!strcmp(s[i - 1]->name, s[i]->name)) {
            long a = (long)(s[i - 1] - m->files), b = (long)(s[i] - m->files);
            R->line_no = first_line + (int)(a > b ? a : b);
            rc = meta_fail(R, "file name '%s' is listed twice (also on line %d)", s[i]->name,
                           first_line + (int)(a < b ? a : b));
        }
    free(s);
    R->line_no = last_line;
    return rc;
}

/* Last of all: the crc32 the "end" line (line end_line) gives against the
 * end_at bytes above it. Last, so that every other mistake gets its own
 * message; what is left for this one is a file whose every line is
 * plausible, but which is not what fsdp.c wrote. */
static int meta_check_crc(MetaReader *R, size_t end_at, int end_line, uint32_t said) {
    uint32_t crc = crc32_update(0, R->text, end_at);
    if (crc == said) return 0;
    R->line_no = end_line;
    R->last_cut = 0; /* the line is whole: its crc32 is wrong, not cut off */
    return meta_fail(
        R,
        "crc32 of the lines above is %08x, but 'end' says %08x: meta.txt was edited or damaged. "
        "Use another checkpoint, or train again",
        (unsigned)crc, (unsigned)said);
}

int meta_parse(const char *text, size_t len, CkptMeta *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (err && errlen) err[0] = '\0';
    MetaReader R;
    memset(&R, 0, sizeof(R));
    R.text = text;
    R.len = len;
    R.err = err;
    R.errlen = errlen;
    int rc = meta_parse_scalars(&R, out);
    if (!rc) rc = meta_parse_units(&R, out);
    if (!rc) rc = meta_parse_params(&R, out);
    if (!rc) rc = meta_parse_files(&R, out);
    size_t end_at = R.pos; /* where the "end" line starts: the crc32 covers what is before it */
    int end_line = R.line_no + 1;
    if (!rc && !(rc = meta_next_line(&R, "end")))
        rc = meta_fields(&R, "end crc32 %X", &out->meta_crc);
    R.line_no++; /* the text after "end\n" starts on the next line */
    for (size_t i = R.pos; !rc && i < len; i++) {
        char c = text[i];
        if (c == '\n') R.line_no++;
        else if (c != ' ' && c != '\t' && c != '\r')
            rc = meta_fail(&R, "text after 'end' (only whitespace may follow it)");
    }
    if (!rc) rc = meta_check_crc(&R, end_at, end_line, out->meta_crc);
    if (rc) meta_free(out);
    return rc;
}

void meta_free(CkptMeta *m) {
    if (!m) return;
    free(m->units);
    free(m->params);
    free(m->files);
    m->units = NULL;
    m->params = NULL;
    m->files = NULL;
    m->n_units = m->n_params = m->n_files = 0;
}

/* ============================================================================
 * 7. The shard file header
 *
 * 64 bytes, every field written one byte at a time, least significant first,
 * so the file is the same whatever the host's byte order and whatever the
 * compiler does with struct padding (a struct written with fwrite would
 * carry both). The layout is in formats.h and in the tour at the top.
 * ========================================================================== */

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)((v >> (8 * i)) & 0xffu);
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)((v >> (8 * i)) & 0xffu);
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The reserved bytes: 20..23 and 56..63. */
static int shard_byte_is_reserved(int i) { return (i >= 20 && i < 24) || i >= 56; }

void shard_header_encode(const ShardHeader *h, unsigned char out[SHARD_HEADER_BYTES]) {
    memset(out, 0, SHARD_HEADER_BYTES);
    memcpy(out, SHARD_MAGIC, 8);
    put_u32(out + 8, SHARD_HEADER_VERSION);
    put_u32(out + 12, h->rank);
    put_u32(out + 16, h->world);
    put_u64(out + 24, h->step);
    put_u64(out + 32, h->layout);
    put_u64(out + 40, h->adam_step);
    put_u32(out + 48, h->scale_bits);
    put_u32(out + 52, h->scaler_growth);
}

int shard_header_decode(const unsigned char *buf, size_t len, ShardHeader *h, char *err,
                        size_t errlen) {
    memset(h, 0, sizeof(*h));
    if (err && errlen) err[0] = '\0';
    if (len < SHARD_HEADER_BYTES)
        return fm_fail(err, errlen,
                       "%llu bytes: a shard file starts with a %d-byte header (cut short?)",
                       (unsigned long long)len, SHARD_HEADER_BYTES);
    if (memcmp(buf, SHARD_MAGIC, 8) != 0)
        return fm_fail(err, errlen, "not an fsdp.c shard file (it must start with '%s')",
                       SHARD_MAGIC);
    uint32_t version = get_u32(buf + 8);
    if (version != SHARD_HEADER_VERSION)
        return fm_fail(err, errlen, "shard file version %lu; this fsdp.c reads version %d only",
                       (unsigned long)version, SHARD_HEADER_VERSION);
    for (int i = 0; i < SHARD_HEADER_BYTES; i++)
        if (shard_byte_is_reserved(i) && buf[i] != 0)
            return fm_fail(err, errlen,
                           "header byte %d is 0x%02x, but bytes 20..23 and 56..63 are reserved "
                           "and must be zero (damaged?)",
                           i, buf[i]);
    ShardHeader got;
    got.rank = get_u32(buf + 12);
    got.world = get_u32(buf + 16);
    got.step = get_u64(buf + 24);
    got.layout = get_u64(buf + 32);
    got.adam_step = get_u64(buf + 40);
    got.scale_bits = get_u32(buf + 48);
    got.scaler_growth = get_u32(buf + 52);
    if (got.world == 0)
        return fm_fail(err, errlen, "world 0: a checkpoint is written by at least one rank");
    if (got.rank >= got.world)
        return fm_fail(err, errlen, "rank %lu of world %lu: the rank must be below the world size",
                       (unsigned long)got.rank, (unsigned long)got.world);
    *h = got;
    return 0;
}

/* ============================================================================
 * 8. config.json: one JSON object, read whole
 *
 * Hugging Face keeps a model's hyperparameters beside its weights, in
 * config.json: {"model_type": "gpt2", "n_head": 12, ..., "task_specific_params":
 * {"text-generation": {"do_sample": true, "max_length": 50}}}. --init-from
 * reads it for what the weights' shapes cannot say: how many heads share
 * n_embd's channels, the activation, LayerNorm's eps (io/checkpoint.h judges
 * the values). Unlike a safetensors header, such a file may hold any JSON at
 * all below its top level, so this reader parses every JSON value, strictly
 * (RFC 8259: no comments, no trailing commas, no NaN, no byte-order mark;
 * strings valid UTF-8, escapes JSON's), and keeps the top level's members,
 * with the values of those that are scalars. A nested object or array is
 * checked and skipped. Nesting deeper than JSON_MAX_DEPTH is refused rather
 * than followed, so no input can run the recursion off the stack.
 *
 * Where the decoded text goes: one arena of 2 * len + 16 bytes. A decoded
 * string is never longer than its JSON text (an escape is longer than what
 * it stands for) and a number is copied as written, so the keys, strings and
 * numbers of the top level, each with its NUL, always fit: no string has to
 * be cut, and a key is compared whole (a \u0000 inside it included).
 * ========================================================================== */

/* Where the top level's text goes (see above): used + what is decoded next
 * always fits in cap. */
typedef struct {
    char *base;
    size_t used, cap;
} JsonArena;

/* A literal (true, false, null) at the cursor; 0 when it is not there. */
static int json_literal(Json *J, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(J->end - J->p) < n || memcmp(J->p, word, n) != 0) return 0;
    J->p += n;
    return 1;
}

/* A JSON number at the cursor, by JSON's grammar exactly:
 *   -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
 * With m (a member of the top level), its text is copied into the arena
 * and converted: m->number, and m->integer when it has neither fraction
 * nor exponent (Python's json reads that as an int, anything else as a
 * float). A number beyond a double's range is refused there: Python would
 * read inf, which no hyperparameter can be. */
static int json_number(Json *J, JsonMember *m, JsonArena *a) {
    const unsigned char *start = J->p;
    int integer = 1;
    if (J->p < J->end && *J->p == '-') J->p++;
    if (J->p >= J->end || *J->p < '0' || *J->p > '9')
        return json_fail(J, "a number needs a digit after its '-'");
    if (*J->p == '0' && J->end - J->p > 1 && J->p[1] >= '0' && J->p[1] <= '9')
        return json_fail(J, "a number has a leading zero, which JSON does not allow");
    while (J->p < J->end && *J->p >= '0' && *J->p <= '9') J->p++;
    if (J->p < J->end && *J->p == '.') {
        integer = 0;
        J->p++;
        if (J->p >= J->end || *J->p < '0' || *J->p > '9')
            return json_fail(J, "a number needs a digit after its '.'");
        while (J->p < J->end && *J->p >= '0' && *J->p <= '9') J->p++;
    }
    if (J->p < J->end && (*J->p == 'e' || *J->p == 'E')) {
        integer = 0;
        J->p++;
        if (J->p < J->end && (*J->p == '+' || *J->p == '-')) J->p++;
        if (J->p >= J->end || *J->p < '0' || *J->p > '9')
            return json_fail(J, "a number needs a digit in its exponent");
        while (J->p < J->end && *J->p >= '0' && *J->p <= '9') J->p++;
    }
    if (!m) return 0;
    size_t n = (size_t)(J->p - start);
    if (n + 1 > a->cap - a->used) return json_fail(J, "out of room for a number (a bug)");
    char *text = a->base + a->used;
    memcpy(text, start, n);
    text[n] = '\0';
    a->used += n + 1;
    m->kind = JSON_NUMBER;
    m->text = text;
    m->text_len = n;
    m->integer = integer;
    m->number = strtod(text, NULL); /* the grammar above is a subset of strtod's */
    if (!isfinite(m->number)) {
        J->p = start;
        return json_fail(J, "the number %.40s is beyond the range of a double", text);
    }
    return 0;
}

static int json_value(Json *J, int depth, JsonMember *m, JsonArena *a);

/* The members of a nested object, after its '{': checked, not kept. */
static int json_skip_object(Json *J, int depth) {
    int c = json_peek(J);
    while (c != '}') {
        size_t len;
        int ctrl;
        if (json_string(J, NULL, 0, &len, &ctrl)) return 2;
        if (json_expect(J, ':', "':' after a key")) return 2;
        if (json_value(J, depth + 1, NULL, NULL)) return 2;
        if (json_after_member(J, &c)) return 2;
    }
    J->p++;
    return 0;
}

/* The elements of an array, after its '[': checked, not kept. */
static int json_skip_array(Json *J, int depth) {
    if (json_peek(J) == ']') {
        J->p++;
        return 0;
    }
    for (;;) {
        if (json_value(J, depth + 1, NULL, NULL)) return 2;
        int c = json_peek(J);
        if (c != ',' && c != ']') return json_unexpected(J, "',' or ']'");
        J->p++;
        if (c == ']') return 0;
    }
}

/* Any JSON value at the cursor, at nesting depth `depth` (the top level's
 * values are at 1). With m, what it is goes into m (a string's text and a
 * number's into the arena); without, it is only checked. */
static int json_value(Json *J, int depth, JsonMember *m, JsonArena *a) {
    int c = json_peek(J);
    JsonKind kind = JSON_NULL;
    if (c == '{' || c == '[') {
        if (depth >= JSON_MAX_DEPTH)
            return json_fail(J, "objects and arrays nested deeper than %d levels", JSON_MAX_DEPTH);
        J->p++;
        kind = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        if (c == '{' ? json_skip_object(J, depth) : json_skip_array(J, depth)) return 2;
    } else if (c == '"') {
        size_t len;
        int ctrl;
        char *text = m ? a->base + a->used : NULL;
        if (json_string(J, text, m ? a->cap - a->used : 0, &len, &ctrl)) return 2;
        if (m) {
            m->text = text;
            m->text_len = len;
            a->used += len + 1;
        }
        kind = JSON_STRING;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        return json_number(J, m, a); /* sets m->kind */
    } else if (json_literal(J, "true")) {
        kind = JSON_TRUE;
    } else if (json_literal(J, "false")) {
        kind = JSON_FALSE;
    } else if (json_literal(J, "null")) {
        kind = JSON_NULL;
    } else if (c == 'N' || c == 'I') {
        return json_fail(J, "NaN and Infinity are not JSON numbers (Python's json writes them "
                            "for float('nan') and float('inf'))");
    } else {
        return json_unexpected(J, "a value (an object, array, string, number, true, false or "
                                  "null)");
    }
    if (m) m->kind = kind;
    return 0;
}

/* The top level's members: keys distinct, compared whole. Sorting makes
 * it O(n log n), as st_check_layout does for metadata keys. */
static int json_check_duplicates(const JsonObject *o, char *err, size_t errlen) {
    if (o->n < 2) return 0;
    Key *keys = (Key *)malloc((size_t)o->n * sizeof(Key));
    if (!keys) return fm_fail(err, errlen, "out of memory");
    for (int i = 0; i < o->n; i++) {
        keys[i].s = o->members[i].key;
        keys[i].len = o->members[i].key_len;
    }
    qsort(keys, (size_t)o->n, sizeof(Key), cmp_key);
    int rc = 0;
    for (int i = 1; i < o->n && !rc; i++)
        if (!cmp_key(&keys[i - 1], &keys[i]))
            rc = fm_fail(err, errlen,
                         "the key '%.60s' is given twice; readers differ on which one counts "
                         "(Python's json takes the last), so give it once",
                         keys[i].s);
    free(keys);
    return rc;
}

static int json_parse_object(Json *J, JsonObject *o, JsonArena *a) {
    int cap = 0;
    if (J->end - J->p >= 3 && J->p[0] == 0xef && J->p[1] == 0xbb && J->p[2] == 0xbf)
        return json_fail(J, "the file starts with a UTF-8 byte-order mark, which JSON does not "
                            "allow (Python's json refuses it too); save it without one");
    if (json_expect(J, '{', "'{' (the file is one JSON object)")) return 2;
    int c = json_peek(J);
    while (c != '}') {
        if (o->n == JSON_MAX_MEMBERS)
            return json_fail(J, "more than %d members at the top level", JSON_MAX_MEMBERS);
        if (o->n == cap) {
            cap = cap ? 2 * cap : 32;
            JsonMember *grown = (JsonMember *)realloc(o->members, (size_t)cap * sizeof(JsonMember));
            if (!grown) return json_fail(J, "out of memory");
            o->members = grown;
        }
        JsonMember *m = &o->members[o->n++];
        memset(m, 0, sizeof(*m));
        int ctrl;
        m->key = a->base + a->used;
        if (json_string(J, a->base + a->used, a->cap - a->used, &m->key_len, &ctrl)) return 2;
        a->used += m->key_len + 1;
        if (json_expect(J, ':', "':' after a key")) return 2;
        if (json_value(J, 1, m, a)) return 2;
        if (json_after_member(J, &c)) return 2;
    }
    J->p++;
    if (json_peek(J) >= 0)
        return json_fail(J, "more after the object's closing '}' (only whitespace may follow)");
    return 0;
}

int json_object_parse(const char *text, size_t len, JsonObject *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (err && errlen) err[0] = '\0';
    if (len > JSON_MAX_TEXT)
        return fm_fail(err, errlen, "%lu bytes, more than the %lu this reader takes",
                       (unsigned long)len, (unsigned long)JSON_MAX_TEXT);
    JsonArena a = {(char *)malloc(2 * len + 16), 0, 2 * len + 16};
    if (!a.base) return fm_fail(err, errlen, "out of memory");
    out->arena = a.base;
    Json J;
    J.file = (const unsigned char *)text;
    J.p = J.file;
    J.end = J.file + len;
    J.err = err;
    J.errlen = errlen;
    J.text_file = 1;
    int rc = json_parse_object(&J, out, &a);
    if (rc == 0) rc = json_check_duplicates(out, err, errlen);
    if (rc != 0) json_object_free(out);
    return rc;
}

const JsonMember *json_member(const JsonObject *o, const char *key) {
    size_t n = strlen(key);
    for (int i = 0; i < o->n; i++)
        if (o->members[i].key_len == n && !memcmp(o->members[i].key, key, n))
            return &o->members[i];
    return NULL;
}

void json_object_free(JsonObject *o) {
    if (!o) return;
    free(o->members);
    free(o->arena);
    memset(o, 0, sizeof(*o));
}

const char *json_member_text(const JsonMember *m, char *out, size_t len) {
    static const char *const words[] = {"null", "false", "true", "", "", "[...]", "{...}"};
    if (m->kind == JSON_NUMBER) snprintf(out, len, "%.60s", m->text);
    else if (m->kind == JSON_STRING)
        snprintf(out, len, "\"%.60s%s\"", m->text, m->text_len > 60 ? "..." : "");
    else snprintf(out, len, "%s", words[m->kind]);
    for (unsigned char *c = (unsigned char *)out; *c; c++) /* one printable line, as fm_vfail */
        if (*c < 0x20 || *c == 0x7f) *c = '?';
        else if (*c == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f) c[0] = c[1] = '?';
    return out;
}
