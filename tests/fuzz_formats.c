/* tests/fuzz_formats.c — libFuzzer target for formats.c's four parsers.
 *
 * Each input is tried as a whole safetensors file (file_size = its size),
 * as the start of a larger one (file_size > size, so offsets may point past
 * the bytes given and the "read more" answer, code 3, is reached), as
 * meta.txt, as the start of a shard file, and as a config.json. Under AddressSanitizer any
 * read past the input is a crash, and leaks are reported at exit. Beyond
 * "does not crash", it checks promises the callers rely on, and aborts when
 * one is broken:
 *   - every error message is one NUL-terminated line;
 *   - after a refusal, the output holds no arrays (st_free/meta_free safe),
 *     and a refused shard header is all zeros;
 *   - whatever st_parse_header accepts lies inside the file and overlaps
 *     nothing; what meta_parse accepts, meta_format writes back byte for
 *     byte, its end line's crc32 included (so the writer and the reader
 *     agree on one format); what shard_header_decode accepts,
 *     shard_header_encode writes back as the same 64 bytes (no byte of the
 *     header is ignored).
 *
 * meta.txt ends with a crc32 of the lines above it, which a mutation almost
 * never gets right; meta_parse checks it last, so the fuzzer still reaches
 * every structural check, and the seeds (valid files) reach acceptance.
 *
 * Build and run: tests/test_fuzz.sh. Without libFuzzer, -DFUZZ_STANDALONE
 * gives a main() that runs the target on the files named on the command
 * line (to replay a crash under gcc, or a corpus in CI):
 *   gcc -g -fsanitize=address,undefined -DFUZZ_STANDALONE -I. \
 *       tests/fuzz_formats.c formats.c -o fuzz_replay && ./fuzz_replay crash-*
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"

/* Breaks the run with a message: libFuzzer saves the input as a crash. */
static void promise(int ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "fuzz_formats: broken promise: %s\n", what);
    abort();
}

static void check_message(const char *err, size_t errlen) {
    promise(memchr(err, '\0', errlen) != NULL, "err is NUL-terminated");
    promise(strchr(err, '\n') == NULL && strchr(err, '\r') == NULL, "err is one line");
    promise(err[0] != '\0', "a refusal says why");
}

static void fuzz_safetensors(const uint8_t *data, size_t size, uint64_t file_size) {
    StHeader h;
    char err[256];
    memset(err, 'x', sizeof(err));
    int rc = st_parse_header(data, size, file_size, &h, err, sizeof(err));
    promise(rc == 0 || rc == 2 || rc == 3, "st_parse_header returns 0, 2 or 3");
    if (rc != 0) {
        check_message(err, sizeof(err));
        promise(h.tensors == NULL && h.n == 0, "a refused header holds no tensors");
        if (rc == 3) promise(h.data_start > size && h.data_start <= file_size, "code 3 asks for more bytes than given");
    } else {
        promise(h.data_start >= 8 + 2 && h.data_start <= size && h.data_start <= file_size, "the header lies inside the bytes given");
        uint64_t total = 0;
        for (int i = 0; i < h.n; i++) {
            const StTensor *t = &h.tensors[i];
            promise(t->begin <= t->end && t->end <= file_size - h.data_start, "a tensor lies inside the data section");
            promise(t->name[0] != '\0' && memchr(t->name, '\0', sizeof(t->name)) != NULL, "names are non-empty C strings");
            promise(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "ndim in range");
            total += t->end - t->begin;
        }
        promise(total == file_size - h.data_start, "the tensors tile the data section");
    }
    st_free(&h);
}

static void fuzz_meta(const uint8_t *data, size_t size) {
    CkptMeta m;
    char err[256];
    memset(err, 'x', sizeof(err));
    int rc = meta_parse((const char *)data, size, &m, err, sizeof(err));
    promise(rc == 0 || rc == 2, "meta_parse returns 0 or 2");
    if (rc != 0) {
        check_message(err, sizeof(err));
        promise(!m.units && !m.params && !m.files && !m.n_units && !m.n_params && !m.n_files, "a refused text holds no arrays");
        meta_free(&m);
        return;
    }
    /* accepted: the writer must give back the same text (up to the
     * whitespace allowed after "end"), and that text must parse again */
    size_t len = 0;
    char *text = meta_format(&m, &len);
    promise(text != NULL, "meta_format succeeds");
    promise(len <= size + 1 && memcmp(text, data, len - 1) == 0, "meta_format(meta_parse(x)) is x");
    CkptMeta again;
    promise(meta_parse(text, len, &again, err, sizeof(err)) == 0, "meta_format's output parses");
    meta_free(&again);
    free(text);
    meta_free(&m);
}

static void fuzz_shard_header(const uint8_t *data, size_t size) {
    ShardHeader h;
    char err[256];
    memset(err, 'x', sizeof(err));
    int rc = shard_header_decode(data, size, &h, err, sizeof(err));
    promise(rc == 0 || rc == 2, "shard_header_decode returns 0 or 2");
    if (rc != 0) {
        check_message(err, sizeof(err));
        promise(!h.rank && !h.world && !h.step && !h.layout, "a refused shard header is zeroed");
        return;
    }
    promise(size >= SHARD_HEADER_BYTES && h.rank < h.world,
            "an accepted header is whole, and rank < world");
    unsigned char again[SHARD_HEADER_BYTES];
    shard_header_encode(&h, again);
    promise(memcmp(again, data, SHARD_HEADER_BYTES) == 0,
            "shard_header_encode(shard_header_decode(x)) is x");
}

/* config.json: read or refused; what is read is whole: each member's key
 * is found by json_member (keys are distinct, so it finds that member),
 * and a string or number's text lies in the arena, NUL-terminated. */
static void fuzz_config(const uint8_t *data, size_t size) {
    JsonObject o;
    char err[256];
    memset(err, 'x', sizeof(err));
    int rc = json_object_parse((const char *)data, size, &o, err, sizeof(err));
    promise(rc == 0 || rc == 2, "json_object_parse returns 0 or 2");
    if (rc != 0) {
        check_message(err, sizeof(err));
        promise(o.members == NULL && o.n == 0 && o.arena == NULL, "a refused text holds nothing");
        return;
    }
    for (int i = 0; i < o.n; i++) {
        const JsonMember *m = &o.members[i];
        promise(m->key[m->key_len] == '\0', "a key ends in a NUL");
        if (strlen(m->key) == m->key_len) /* json_member takes a C string */
            promise(json_member(&o, m->key) == m, "json_member finds each key, itself");
        if (m->kind == JSON_STRING || m->kind == JSON_NUMBER)
            promise(m->text && m->text[m->text_len] == '\0', "a value's text ends in a NUL");
        else promise(m->text == NULL, "only strings and numbers have text");
    }
    json_object_free(&o);
}

#ifdef __cplusplus
extern "C"
#endif
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_safetensors(data, size, size);
    fuzz_safetensors(data, size, (uint64_t)size + 4096);
    fuzz_safetensors(data, size, UINT64_MAX); /* file_size - 8 must not wrap */
    fuzz_meta(data, size);
    fuzz_shard_header(data, size);
    fuzz_config(data, size);
    return 0;
}

#ifdef FUZZ_STANDALONE
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "%s: cannot open\n", argv[i]);
            return 2;
        }
        size_t cap = 1 << 16, n = 0, got;
        uint8_t *buf = (uint8_t *)malloc(cap);
        while ((got = fread(buf + n, 1, cap - n, f)) > 0)
            if ((n += got) == cap) buf = (uint8_t *)realloc(buf, cap *= 2);
        fclose(f);
        uint8_t *exact = (uint8_t *)malloc(n ? n : 1); /* exact size: ASan sees any over-read */
        memcpy(exact, buf, n);
        free(buf);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
    }
    printf("ran %d inputs\n", argc - 1);
    return 0;
}
#endif
