/* ============================================================================
 * formats.h — the bytes of fsdp.c's files: checksums, safetensors, and the
 * sharded checkpoint's metadata and shard file headers
 *
 * Five small, pure pieces (no MPI, no I/O: they turn bytes into structs and
 * back), so each can be tested and fuzzed on its own:
 *
 *   crc32_update    CRC-32, to notice a file that changed on disk
 *   st_*            safetensors, Hugging Face's file format for tensors:
 *                   --export writes one, --init-from reads one
 *   meta_*          meta.txt, the text file that says how the shard files of
 *                   a sharded checkpoint fit together
 *   shard_header_*  the 64 bytes at the start of every shard file, which say
 *                   whose shard it is (rank, world, step, layout)
 *   json_object_*   a JSON object read whole: Hugging Face's config.json,
 *                   which --init-from reads beside a GPT-2's weights
 *
 * formats.c begins with a byte-by-byte tour of the three file formats.
 *
 * Every parser here is strict: it accepts exactly the files the writers
 * produce (and, for safetensors, what the reference library accepts), says
 * in one line what is wrong with anything else, never reads past the bytes it
 * is given, and never crashes, whatever the input. tests/fuzz_formats.c
 * checks the last two claims with libFuzzer.
 *
 * Plain C11 that also compiles as C++ (nvcc -x cu, g++).
 * ========================================================================== */
#ifndef FORMATS_H
#define FORMATS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------------------
 * CRC-32: the zlib/PNG/Ethernet checksum (reflected polynomial 0xEDB88320).
 * crc32_update(0, data, n) over a whole file equals Python's zlib.crc32(data)
 * and `crc32 FILE` from the shell. Chainable, so a file can be checksummed
 * piece by piece as it is written or read:
 *   crc32_update(crc32_update(0, a, na), b, nb) == crc32 of a followed by b.
 * ------------------------------------------------------------------------- */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);

/* ----------------------------------------------------------------------------
 * safetensors: an 8-byte little-endian u64 N, then N bytes of JSON header,
 * then the raw tensor data (the data section, from byte 8 + N to the end).
 *
 *   {"__metadata__":{"format":"pt"},
 *    "embed.weight":{"dtype":"F32","shape":[256,16],"data_offsets":[0,16384]},
 *    ...}
 *
 * data_offsets are [begin, end) byte offsets counted from the start of the
 * data section. "__metadata__" is optional and maps strings to strings.
 *
 * What st_parse_header accepts, exactly (anything else: return 2 and why):
 *   - 8 <= the bytes given; 1 <= N <= 100,000,000 (the reference library's
 *     limit) and 8 + N <= file_size;
 *   - the header starts with '{' and is one JSON object, followed only by
 *     JSON whitespace (the writer pads with spaces); the strings are valid
 *     UTF-8, their escapes are JSON's (\" \\ \/ \b \f \n \r \t \uXXXX, with
 *     surrogate pairs);
 *   - each member is "__metadata__" (at most once, an object whose values are
 *     all strings, keys distinct) or a tensor: a name of 1..ST_MAX_NAME-1
 *     bytes without control characters, never seen before, whose value is an
 *     object with exactly the keys "dtype", "shape" and "data_offsets";
 *   - dtype one of BOOL U8 I8 F8_E5M2 F8_E4M3 (1 byte), I16 U16 F16 BF16
 *     (2), I32 U32 F32 (4), I64 U64 F64 (8);
 *   - shape an array of 0..ST_MAX_DIMS integers; data_offsets [begin, end];
 *     integers are plain non-negative decimals up to 2^53 (no sign, fraction,
 *     exponent or leading zero);
 *   - begin <= end <= size of the data section, and end - begin is exactly
 *     product(shape) * bytes per element;
 *   - at most ST_MAX_TENSORS tensors;
 *   - the tensors tile the data section: sorted by offset, the first begins
 *     at 0, each begins where the previous ends (no overlap, no gap), and the
 *     last ends at the end of the file. Gaps and trailing bytes are refused,
 *     as the reference implementation refuses them, so every file we accept
 *     is one Hugging Face's safetensors also loads.
 *   The structure has three levels of nesting (header, tensor, shape), so the
 *   parser is written for exactly that shape: deeper nesting is simply an
 *   error where a string or integer was expected, never a deep recursion.
 * ------------------------------------------------------------------------- */
#define ST_MAX_NAME 96
#define ST_MAX_DIMS 4
#define ST_MAX_TENSORS 100000
#define ST_MAX_HEADER 100000000u /* bytes of JSON, as in the reference library */

typedef struct {
    char name[ST_MAX_NAME];
    char dtype[8]; /* "F32" etc. as read; the writer always writes F32 */
    int ndim;
    long shape[ST_MAX_DIMS];
    uint64_t begin, end; /* data_offsets */
} StTensor;

typedef struct {
    StTensor *tensors; /* in file order as they appear in the JSON */
    int n;
    uint64_t data_start; /* 8 + N: where data_offsets count from */
} StHeader;

/* Builds the first part of a safetensors file for tensors laid out
 * contiguously in the given order: fills every t[i].begin/end (begin of the
 * first = 0) and sets t[i].dtype to "F32", and returns a malloc'd buffer
 * holding the 8-byte length and the JSON header, padded with spaces so the
 * data section starts at a multiple of 8 bytes (as the reference
 * implementation does). *out_len receives its length (= data_start).
 * metadata_json may be NULL or the inside of the __metadata__ object, e.g.
 * "\"format\":\"pt\"", copied as it is (it must be valid JSON). Names are
 * escaped as JSON needs. Returns NULL on allocation failure, or when a
 * tensor's ndim is outside 0..ST_MAX_DIMS or a dimension is negative (a bug
 * in the caller). */
unsigned char *st_build_header(StTensor *t, int n, const char *metadata_json, size_t *out_len);

/* Parses and validates the start of a safetensors file (the rules above).
 * buf holds the first len bytes of the file; file_size is the size of the
 * whole file. Returns
 *   0  out filled (free it with st_free);
 *   2  the file is not acceptable: a one-line message in err (the caller
 *      prefixes the file name);
 *   3  len < 8 + N: the header is not all in buf. out->data_start = 8 + N:
 *      read that many bytes and call again. err says so too.
 * On 2 and 3 out->tensors is NULL and out->n is 0, so st_free(out) is
 * always safe. Never reads beyond buf[len). */
int st_parse_header(const unsigned char *buf, size_t len, uint64_t file_size, StHeader *out,
                    char *err, size_t errlen);
void st_free(StHeader *h);

/* ----------------------------------------------------------------------------
 * meta.txt: the sharded checkpoint's metadata. Line-oriented text, readable
 * with `cat`, comparable with `diff`. This exact layout, one line each, in
 * this order (numbers are plain non-negative decimals; fields are separated
 * by exactly one space; lines end with "\n"):
 *
 *   fsdp-checkpoint 7                                  magic and version
 *   world 4                                            ranks that wrote it
 *   strategy full_shard                                or shard_grad_op, no_shard
 *   model vocab 256 embed_dim 16 context 16 width 128 depth 4   (GPT-2: embed_dim
 *                                                      is its n_head)
 *   min_params 131968                                  the auto-wrap threshold
 *   seed 1337
 *   batch 64                                           the global batch
 *   data synthetic train 131072                        the training data (*)
 *   step 100                                           the next step to run
 *   adam_step 100                                      AdamW's step count t
 *   lr_schedule cosine lr 3b449ba6 warmup 10 step_size 30 gamma 3dcccccd steps 200
 *     min_lr 00000000                                  (one line) the learning-rate
 *                                                      schedule (lr, gamma, min_lr:
 *                                                      float bits)
 *   optimizer adamw beta1 3f666666 beta2 3f7fbe77 eps 322bcc77 weight_decay 3c23d70a
 *     clip_grad_norm 00000000 decay all                (one line) the optimizer and its
 *                                                      settings (float bits; clip 0: off;
 *                                                      decay all, or matrices with
 *                                                      --no-decay-bias-norm)
 *   precision param_dtype bf16 reduce_dtype fp32       MixedPrecision's formats
 *   grad_scaler scale 47000000 growth 12               the loss scaler's state (the
 *                                                      scale's float bits), or
 *                                                      "grad_scaler off"
 *   units 5                                            then one line per unit,
 *   unit 0 numel 70272 padded 70272 shard 17568          indices 0, 1, 2, ...
 *   unit 1 numel 131968 padded 131968 shard 32992
 *   ...
 *   params 31                                          then one line per param
 *   param embed.weight unit 0 offset 0 shape 256 16      (shape[1] = 1 for
 *   param proj_in.weight unit 0 offset 4096 shape 128 256  vectors)
 *   param proj_in.bias unit 0 offset 36864 shape 128 1
 *   param blocks.0.norm.weight unit 1 offset 0 shape 128 1
 *   ...
 *   files 4                                            then one line per file
 *   file shard-00000.bin bytes 1794496 crc32 1a2b3c4d    (8 lowercase hex)
 *   ...
 *   end crc32 89abcdef                                 CRC-32 of every byte
 *                                                      before this line
 *
 *   (*) "data synthetic train N" for the corpus built into fsdp.c, or for
 *       --data FILE "data file bytes 123456 crc32 1a2b3c4d train N": its size and
 *       CRC-32, so a resumed run can tell that it is given the same data;
 *       then "train N": the tokens (bytes, for the MLP) its batches are drawn
 *       from, fewer than the data's when --val-every holds out the last tenth,
 *       so a resumed run can tell that it draws the same batches.
 *
 * Rules meta_parse checks (line numbers in every message):
 *   - every line above present, once, in this order; a missing "end" means
 *     the file was cut short, and is refused (only the newline after "end"
 *     may be missing); CR, tabs, extra spaces, empty lines and bytes other
 *     than printable ASCII are refused;
 *   - the version is 6 (META_VERSION). Version 1, written by older fsdp.c,
 *     had no "batch", "data" or end checksum, version 2 no "lr_schedule",
 *     version 3 no "grad_scaler", version 4 no "optimizer" or "precision",
 *     version 5 no "train" (and hashed only part of a token file),
 *     version 6 no "min_lr" or "decay";
 *     all are refused with a message that says to train again;
 *   - optimizer: adamw or adam, decay all or matrices; beta1 and beta2 floats in [0, 1), eps a
 *     positive normal float, weight_decay in [0, 1], clip_grad_norm >= 0
 *     and finite (0: off);
 *   - precision: param_dtype and reduce_dtype each fp32, bf16 or fp16;
 *   - grad_scaler: "off", or a scale that is a positive normal float (a
 *     denormal one has lost its digits, and 1/scale is inf) and a growth
 *     count below 2000 (the growth interval);
 *   - lr_schedule: constant, step, cosine or linear; warmup and steps at most 2^53,
 *     step_size >= 1; lr and gamma are the 8 hex digits of the floats'
 *     bits, so a resumed run can tell it is given exactly the same schedule;
 *   - world, units, params, files and batch in [1, 2^20]; model dims in
 *     [1, 2^20]; data's bytes and train in [1, 2^53]; other numbers at most 2^53
 *     (seed: any u64); adam_step <= step (AdamW steps once per step at most);
 *   - units: numel >= 0 and padded = ceil(numel / world) * world (the padding
 *     that makes a unit divide evenly); shard = padded / world for the
 *     sharded strategies, shard = padded for no_shard;
 *   - params: names of 1..META_MAX_NAME-1 characters from [A-Za-z0-9._-]
 *     (not starting with '.', no ".."), all distinct; shape dims >= 1 and
 *     numel = shape0 * shape1; the unit index in range; the params of each
 *     unit tile its flat parameter exactly: sorted by offset, they start at
 *     0, each starts where the previous ends (no overlap, no gap), and the
 *     last ends at the unit's numel (fsdp.c lays parameters end to end);
 *   - files: world of them for full_shard and shard_grad_op (file r written
 *     by rank r), 1 for no_shard; names as for params, all distinct, so a
 *     name can never leave the checkpoint directory ('/', "..");
 *     bytes = SHARD_HEADER_BYTES + sum over units of 3 * shard * 4 (the
 *     header, then for each unit in order: shard floats of parameters, then
 *     exp_avg, then exp_avg_sq);
 *   - last of all, once the structure is right: the crc32 on the "end" line
 *     equals crc32_update(0, text, bytes before the "end" line). So a file
 *     edited by hand, or damaged, is refused even when every line of it is
 *     plausible (a changed step, seed or crc of a shard), and a structural
 *     mistake still gets its own message rather than "crc32 mismatch".
 * ------------------------------------------------------------------------- */
#define META_VERSION 7
#define META_MAX_NAME 96
#define META_MAX_COUNT (1 << 20)

typedef struct {
    char name[META_MAX_NAME];
    int unit;
    long offset;
    int shape[2];
    long numel;
} MetaParam;
typedef struct {
    long numel, padded, shard;
} MetaUnit;
typedef struct {
    char name[META_MAX_NAME];
    uint64_t bytes;
    uint32_t crc;
} MetaFile;
typedef struct {
    int version, world; /* meta_format writes META_VERSION, whatever version says */
    char strategy[32];
    int fsdp2; /* "strategy S layout fsdp2": FSDP2's shards, each parameter's rows (fsdp.c,
                * section 14): a param's offset is world * where its rows start in a shard */
    int vocab, embed_dim, context, width, depth;
    long min_params;
    uint64_t seed;
    int batch;           /* the global batch, in sequences */
    int data_is_file;    /* 0: "data synthetic"; 1: "data file bytes ..." */
    uint64_t data_bytes; /* the --data file's size and CRC-32 (0 when */
    uint32_t data_crc;   /*   synthetic) */
    long data_train;     /* the tokens training draws from ("train N") */
    long step, adam_step;
    /* the learning-rate schedule (fsdp.c, lr_at): name, base lr and gamma
     * as float bits, warmup, step_size and the total steps it spans */
    char lr_schedule[32];
    uint32_t lr_bits, gamma_bits;
    long warmup, step_size, schedule_steps;
    uint32_t min_lr_bits; /* --min-lr, where cosine and linear end */
    /* the optimizer and MixedPrecision: a resumed run must use the same */
    char optimizer[32];                      /* adamw or adam */
    uint32_t beta1_bits, beta2_bits, eps_bits; /* floats' bits, as lr_bits */
    uint32_t weight_decay_bits, clip_bits;     /* clip_grad_norm; 0: off */
    char decay[32]; /* the weight decay's group: all, or matrices (--no-decay-bias-norm) */
    char param_dtype[32], reduce_dtype[32];  /* fp32, bf16 or fp16 */
    int scaler_on;       /* --grad-scaler's state: on, its scale (float bits) */
    uint32_t scale_bits; /* and the steps since the scale last changed */
    long scaler_growth;
    int n_units;
    MetaUnit *units;
    int n_params;
    MetaParam *params;
    int n_files;
    MetaFile *files;
    uint32_t meta_crc; /* what the "end" line says (meta_parse fills it;
                                 meta_format computes it and ignores this) */
} CkptMeta;

/* Returns a malloc'd NUL-terminated text of the metadata (length in *len),
 * or NULL on allocation failure. Writes what it is given (params' numel is
 * not written: meta_parse recomputes it from the shape), except the version,
 * always META_VERSION, and the end line's crc32, which it computes over the
 * text it wrote; meta_parse is the one that judges it. data_bytes and
 * data_crc are written only when data_is_file is nonzero. */
char *meta_format(const CkptMeta *m, size_t *len);

/* Parses text (len bytes, not necessarily NUL-terminated). Returns 0, or 2
 * with a one-line message in err: "line N: what is wrong". On 2 every array
 * in out is NULL, so meta_free(out) is always safe. Never reads past len. */
int meta_parse(const char *text, size_t len, CkptMeta *out, char *err, size_t errlen);
void meta_free(CkptMeta *m);

/* The layout hash: a 64-bit fingerprint of everything that says where each
 * number of the model lives in the shard files, and nothing else. It is
 * 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3) over
 * the bytes of these lines, exactly as meta_format writes them (each with its
 * "\n"), in this order:
 *
 *   world, strategy, model, min_params, units, every unit, params, every param
 *
 * so it covers world, strategy, the model's dims, min_params, each unit's
 * numel padded shard, and each param's name unit offset shape0 shape1, in
 * order; and not the version, seed, batch, data, step, adam_step, files or
 * the end crc32 (two checkpoints of one run have the same layout hash). To
 * recompute it from a meta.txt by hand:
 *   grep -E '^(world|strategy|model|min_params|units?|params?) ' meta.txt |
 *     python3 -c 'import sys, functools; print("%016x" % functools.reduce(
 *       lambda h, b: (h ^ b) * 0x100000001b3 % 2**64, sys.stdin.buffer.read(),
 *       0xcbf29ce484222325))'
 * Needs no memory (the lines are hashed one at a time), so it cannot fail. */
uint64_t meta_layout_hash(const CkptMeta *m);

/* ----------------------------------------------------------------------------
 * Shard files: every shard file starts with this fixed 64-byte header, then
 * the floats (for each unit in order: shard floats of parameters, exp_avg,
 * exp_avg_sq). All fields little-endian, whatever the host:
 *
 *   bytes  0..7   magic "FSDPSHRD"
 *   bytes  8..11  u32 version, SHARD_HEADER_VERSION (1)
 *   bytes 12..15  u32 rank: the rank that wrote it = its index in meta.txt's
 *                 file list
 *   bytes 16..19  u32 world: the ranks that wrote the checkpoint
 *   bytes 20..23  zero
 *   bytes 24..31  u64 step: meta.txt's step
 *   bytes 32..39  u64 layout: meta_layout_hash() of the checkpoint's meta.txt
 *   bytes 40..47  u64 adam_step: meta.txt's adam_step
 *   bytes 48..51  u32 the loss scale's float bits from meta.txt's grad_scaler
 *                 line (0 when it says off)
 *   bytes 52..55  u32 its growth count (0 when off)
 *   bytes 56..63  zero (room for later versions)
 *
 * meta.txt's crc32 of a file says the bytes did not change since they were
 * written; the header says whose bytes they are: a shard file copied in from
 * another rank, another step or another model is refused by name, even with
 * a meta.txt written to match it. And the optimizer's state in meta.txt
 * (adam_step, the loss scale) is bound to the shards it goes with: an edit
 * of meta.txt with its checksum recomputed still disagrees with the header.
 * Version 1 had bytes 40..55 zero.
 * ------------------------------------------------------------------------- */
#define SHARD_HEADER_BYTES 64
#define SHARD_HEADER_VERSION 2
#define SHARD_MAGIC "FSDPSHRD" /* 8 bytes, no NUL in the file */

typedef struct {
    uint32_t rank;   /* the rank that wrote it = its index in meta.txt's file list */
    uint32_t world;  /* ranks that wrote the checkpoint */
    uint64_t step;   /* meta.txt's step */
    uint64_t layout; /* meta_layout_hash() of the checkpoint it belongs to */
    uint64_t adam_step;     /* meta.txt's adam_step */
    uint32_t scale_bits;    /* meta.txt's loss scale (0: grad_scaler off) */
    uint32_t scaler_growth; /* and its growth count */
} ShardHeader;

/* Writes the 64 header bytes for h (the reserved bytes zero). */
void shard_header_encode(const ShardHeader *h, unsigned char out[SHARD_HEADER_BYTES]);

/* Reads a header from the first len bytes of a shard file (len may be more
 * than 64: the floats that follow are not looked at). Returns 0 with h
 * filled, or 2 with a one-line message in err (and h zeroed) when len < 64
 * (cut short), the magic is wrong (not an fsdp.c shard file), the version is
 * not SHARD_HEADER_VERSION, a reserved byte is not zero, world is 0 or rank
 * >= world. Whether rank, world, step and layout are the expected ones is
 * the caller's to check: the header cannot know. Never reads past len. */
int shard_header_decode(const unsigned char *buf, size_t len, ShardHeader *h, char *err,
                        size_t errlen);

/* ----------------------------------------------------------------------------
 * config.json: Hugging Face's description of a model beside its weights, one
 * JSON object:
 *
 *   {"model_type": "gpt2", "n_head": 12, "n_inner": null,
 *    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
 *    "task_specific_params": {"text-generation": {"max_length": 50}}, ...}
 *
 * json_object_parse reads the whole text (at most JSON_MAX_TEXT bytes) as
 * RFC 8259 JSON, strictly: one object at the top, then only whitespace; no
 * byte-order mark, comments, trailing commas, single quotes, NaN or
 * Infinity; strings valid UTF-8 with JSON's escapes; numbers by JSON's
 * grammar and within a double's range; objects and arrays nested at most
 * JSON_MAX_DEPTH deep; at most JSON_MAX_MEMBERS members at the top level,
 * each key given once (compared whole, a \u0000 in it included). What it
 * keeps: every top-level member, in file order, with its kind and, for a
 * string or number, its value; nested objects and arrays are checked and
 * skipped (their kind is kept, not their contents). Returns 0 with out
 * filled (free it with json_object_free), or 2 with a one-line message
 * naming the line and column ("line 3, column 14: ...") and out empty.
 * Never reads past len; the text need not end in a NUL.
 * ------------------------------------------------------------------------- */
#define JSON_MAX_DEPTH 64
#define JSON_MAX_MEMBERS 10000
#define JSON_MAX_TEXT (16u << 20) /* bytes: a model's config.json is a few KB */

typedef enum {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} JsonKind;

typedef struct {
    const char *key; /* decoded, NUL-terminated; key_len counts a \u0000 inside it too */
    size_t key_len;
    JsonKind kind;
    const char *text; /* a string: decoded (text_len bytes, then a NUL); a number:
                       * as written ("1e-05"); otherwise NULL */
    size_t text_len;
    double number; /* a number's value */
    int integer;   /* a number written with no fraction or exponent (Python: an int) */
} JsonMember;

typedef struct {
    JsonMember *members; /* the top level's, in file order */
    int n;
    char *arena; /* the keys' and values' text */
} JsonObject;

int json_object_parse(const char *text, size_t len, JsonObject *out, char *err, size_t errlen);
/* The member named key, or NULL (keys are distinct: at most one matches). */
const JsonMember *json_member(const JsonObject *o, const char *key);
void json_object_free(JsonObject *o);
/* A member's value for a message, in one printable line: 12, 1e-05,
 * "gelu" (quoted, cut at 60 bytes), true, false, null, [...] or {...}. */
const char *json_member_text(const JsonMember *m, char *out, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* FORMATS_H */
