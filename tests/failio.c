/* tests/failio.c — make one file's writes fail, for tests (LD_PRELOAD).
 *
 * A disk that fills up or fails is hard to arrange in a test, and /dev/full
 * is exactly what fsdp.c now refuses to write to. So this shim, preloaded
 * into the ranks, makes write(2)/pwrite(2), fsync(2) or close(2) fail with a
 * chosen errno, but only for file descriptors whose path contains a chosen
 * string; every other file, pipe and socket is untouched:
 *
 *   FAILIO=OP:SUBSTRING:ERRNO     OP: write | fsync | close
 *                                 ERRNO: ENOSPC | EIO | EDQUOT
 *   FAILIO=short:SUBSTRING:ENOSPC the first write takes half of what it
 *                                 is given; the next one fails (a disk
 *                                 that fills up part way through)
 *   FAILIO=rename:SUBSTRING:ERRNO rename(2) fails when the name it would
 *                                 give contains SUBSTRING (the second of
 *                                 two files committed together)
 *
 *   LD_PRELOAD=tests/failio.so FAILIO=fsync:trace.json:EIO ./fsdp ...
 *
 * close still closes the descriptor before reporting the error, as
 * Linux's close does on NFS.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Whether FAILIO names the operation op and a substring of path. */
static int path_matches(const char *path, const char *op) {
    const char *spec = getenv("FAILIO");
    char want[16];
    if (!spec) return 0;
    const char *c1 = strchr(spec, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || (size_t)(c1 - spec) >= sizeof(want)) return 0;
    snprintf(want, sizeof(want), "%.*s", (int)(c1 - spec), spec);
    if (strcmp(want, op) != 0) return 0;
    char sub[1024];
    snprintf(sub, sizeof(sub), "%.*s", (int)(c2 - c1 - 1), c1 + 1);
    return sub[0] && strstr(path, sub) != NULL;
}

static int matches(int fd, const char *op) {
    char path[4096], link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return path_matches(path, op);
}

static int chosen_errno(void) {
    const char *e = strrchr(getenv("FAILIO"), ':') + 1;
    return !strcmp(e, "EIO") ? EIO : !strcmp(e, "EDQUOT") ? EDQUOT : ENOSPC;
}

/* "short": half of the first write goes through, then the disk is full */
static ssize_t fail_write(int fd, size_t n, int *pass, size_t *give) {
    static int wrote_half;
    *pass = 0;
    if (matches(fd, "short")) {
        if (!wrote_half && n > 1) {
            wrote_half = 1;
            *pass = 1;
            *give = n / 2;
            return 0;
        }
        errno = ENOSPC;
        return -1;
    }
    if (matches(fd, "write")) {
        errno = chosen_errno();
        return -1;
    }
    *pass = 1;
    *give = n;
    return 0;
}

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    int pass;
    size_t give;
    ssize_t r = fail_write(fd, n, &pass, &give);
    return pass ? real(fd, buf, give) : r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t at) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    int pass;
    size_t give;
    ssize_t r = fail_write(fd, n, &pass, &give);
    return pass ? real(fd, buf, give, at) : r;
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t at) { return pwrite(fd, buf, n, at); }

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (matches(fd, "fsync")) {
        errno = chosen_errno();
        return -1;
    }
    return real(fd);
}

int close(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "close");
    int fail = matches(fd, "close");
    int rc = real(fd);
    if (fail) {
        errno = chosen_errno();
        return -1;
    }
    return rc;
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    if (path_matches(to, "rename")) {
        errno = chosen_errno();
        return -1;
    }
    return real(from, to);
}
