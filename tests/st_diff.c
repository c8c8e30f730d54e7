/* tests/st_diff.c — compares two safetensors files tensor by tensor.
 *
 *   st_diff A B            bitwise: same names, shapes and bytes
 *   st_diff A B TOL        every value within TOL (absolute)
 *
 * Prints the worst difference and the tensor it is in; exit 0 if equal
 * (within TOL), 1 if not, 2 if a file cannot be read as safetensors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"

typedef struct {
    StHeader h;
    unsigned char *bytes;
    size_t size;
} StFile;

static int load(const char *path, StFile *f) {
    FILE *fp = fopen(path, "rb");
    if (!fp) { fprintf(stderr, "st_diff: %s: cannot open\n", path); return 2; }
    fseek(fp, 0, SEEK_END);
    f->size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->bytes = (unsigned char *)malloc(f->size + 1);
    size_t got = fread(f->bytes, 1, f->size, fp);
    fclose(fp);
    char err[512];
    if (got != f->size || st_parse_header(f->bytes, f->size, f->size, &f->h, err, sizeof(err)) != 0) {
        fprintf(stderr, "st_diff: %s: %s\n", path, got != f->size ? "short read" : err);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) { fprintf(stderr, "usage: st_diff A B [TOL]\n"); return 2; }
    StFile a, b;
    if (load(argv[1], &a) || load(argv[2], &b)) return 2;
    double tol = argc == 4 ? atof(argv[3]) : 0.0, worst = 0.0;
    const char *where = "-";
    long values = 0;
    int same = a.h.n == b.h.n;
    for (int i = 0; i < a.h.n && same; i++) {
        const StTensor *x = &a.h.tensors[i], *y = NULL;
        for (int j = 0; j < b.h.n; j++) if (!strcmp(b.h.tensors[j].name, x->name)) y = &b.h.tensors[j];
        if (!y || y->ndim != x->ndim || y->end - y->begin != x->end - x->begin || strcmp(x->dtype, "F32") || strcmp(y->dtype, "F32")) {
            printf("tensor %s: missing or different shape/dtype in %s\n", x->name, argv[2]);
            same = 0;
            break;
        }
        const unsigned char *px = a.bytes + a.h.data_start + x->begin, *py = b.bytes + b.h.data_start + y->begin;
        if (argc == 3 && memcmp(px, py, (size_t)(x->end - x->begin)) != 0) { where = x->name; worst = 1.0; }
        for (uint64_t k = 0; k + 4 <= x->end - x->begin; k += 4, values++) {
            float u, v;
            memcpy(&u, px + k, 4);
            memcpy(&v, py + k, 4);
            double d = fabs((double)u - v);
            if (d > worst || d != d) { worst = d != d ? INFINITY : d; where = x->name; }
        }
    }
    if (!same) return 1;
    if (argc == 3) {
        printf("%s: %s and %s (%ld values)\n", worst == 0.0 ? "bitwise identical" : "DIFFERENT", argv[1], argv[2], values);
        if (worst != 0.0) printf("  first difference in %s\n", where);
        return worst == 0.0 ? 0 : 1;
    }
    printf("max |a - b| = %.3g in %s over %ld values (tol %g)\n", worst, where, values, tol);
    return worst <= tol ? 0 : 1;
}
