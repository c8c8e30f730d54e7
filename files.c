/* ============================================================================
 * files.c — how fsdp.c touches the file system without harming it
 *
 * See files.h for the four promises. The two ideas worth knowing:
 *
 * Refuse before you open. open() itself can block (a named pipe waits for a
 * writer) or succeed on something endless (/dev/zero, /dev/urandom), and a
 * rename can replace a device node or a symbolic link with a plain file.
 * So the kind of thing at a path is looked at first (stat or lstat), and
 * only a regular file goes further.
 *
 * Write beside, then rename. rename(2) replaces a name atomically: a reader
 * sees the old file or the new one, never half of one. So an output is
 * written to PATH.tmp-XXXXXX, forced to the disk with fsync (a rename can
 * reach the disk before the data it names), and renamed over PATH only when
 * every byte is known to be there.
 * ========================================================================== */
#define _XOPEN_SOURCE 700 /* POSIX 2008 with realpath */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h> /* flock: one run per directory */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int files_fail(char *err, size_t errlen, int code, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int files_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

static const char *kind_of_mode(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a named pipe (FIFO)";
    if (S_ISCHR(m)) return "a character device (like /dev/null or /dev/zero)";
    if (S_ISBLK(m)) return "a block device (a disk)";
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* The watched mappings (--data and --val-data) and their messages, written
 * when a watch starts: a signal handler may call only async-signal-safe
 * functions (write, _exit), never printf, so the text must be ready before
 * the fault. A handler can reach nothing but globals: this is the one place
 * fsdp keeps any. The handler is installed with the first watch and the
 * one it replaced (Open MPI's backtrace) put back with the last unwatch, so
 * a second watch never takes the first's handler for Open MPI's. */
enum { FILES_MAX_WATCHED = 4 };
static struct {
    const char *begin, *end; /* NULL: a free slot */
    char message[FILES_MAX_PATH + 512];
    size_t message_len;
} watched[FILES_MAX_WATCHED];
static int n_watched;
static struct sigaction before_watch;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    (void)context;
    const char *at = (const char *)info->si_addr;
    for (int i = 0; i < FILES_MAX_WATCHED; i++)
        if (watched[i].begin && at >= watched[i].begin && at < watched[i].end) {
            ssize_t n = write(STDERR_FILENO, watched[i].message, watched[i].message_len);
            (void)n; /* nothing better to do if stderr fails too */
            _exit(2);
        }
    /* Not our mapping: give the fault back to the handler we replaced. On
     * return the faulting read runs again and faults into it. */
    (void)sig;
    sigaction(SIGBUS, &before_watch, NULL);
}

int file_changed_message(char *buf, size_t len, const char *label, const char *path,
                         const char *how) {
    return snprintf(buf, len,
                    "error: %s %s: the file changed while this run was reading it (%s).\n"
                    "HINT: do not change a training file while a run reads it; write a new file "
                    "and rename it into place, or copy it first. Restore it, then --resume from "
                    "the last checkpoint.\n",
                    label, path, how);
}

void file_watch_mapping(const char *label, const char *path, const void *addr, size_t len) {
    int slot = 0;
    while (slot < FILES_MAX_WATCHED && watched[slot].begin) slot++;
    if (slot == FILES_MAX_WATCHED) return; /* unwatched: a fault crashes, as without a watch */
    int n = file_changed_message(watched[slot].message, sizeof(watched[slot].message), label,
                                 path, "it shrank: it was truncated or rewritten, and the bytes "
                                       "it had are gone");
    size_t max = sizeof(watched[slot].message) - 1;
    watched[slot].message_len = n < 0 ? 0 : (size_t)n > max ? max : (size_t)n;
    watched[slot].begin = (const char *)addr;
    watched[slot].end = watched[slot].begin + len;
    if (n_watched++ > 0) return; /* the handler is in place */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &before_watch);
}

void file_unwatch_mapping(const void *addr) {
    for (int i = 0; i < FILES_MAX_WATCHED; i++)
        if (watched[i].begin && watched[i].begin == (const char *)addr) {
            watched[i].begin = watched[i].end = NULL;
            if (--n_watched == 0) sigaction(SIGBUS, &before_watch, NULL);
            return;
        }
}

const char *file_kind(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return "nothing";
    return kind_of_mode(st.st_mode);
}

/* The directory part of path ("." for a bare name), into out. */
static void dir_of(const char *path, char *out, size_t outlen) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, outlen, ".");
    else if (slash == path) snprintf(out, outlen, "/");
    else snprintf(out, outlen, "%.*s", (int)(slash - path), path);
}

/* ---- inputs ------------------------------------------------------------------ */

int file_open_input(const char *label, const char *path, uint64_t *size, char *err, size_t errlen) {
    struct stat st, lst;
    if (stat(path, &st) != 0)
        return files_fail(err, errlen, -1, "%s %s: cannot open it (%s).", label, path,
                          strerror(errno));
    if (!S_ISREG(st.st_mode)) {
        int link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
        return files_fail(err, errlen, -1,
                          "%s %s: %s%s, not a regular file%s; only regular files are read.", label,
                          path, link ? "a symbolic link to " : "is ", kind_of_mode(st.st_mode),
                          S_ISDIR(st.st_mode) ? "" : ": reading it could block or never end");
    }
    /* O_NONBLOCK: should the path have become a named pipe since the stat,
     * the open still returns at once, and the fstat below refuses it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return files_fail(err, errlen, -1, "%s %s: cannot open it (%s).", label, path,
                          strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return files_fail(err, errlen, -1,
                          "%s %s: changed while being opened; it is no longer a regular file.",
                          label, path);
    }
    fcntl(fd, F_SETFL, 0); /* back to ordinary (blocking) reads of a regular file */
    *size = (uint64_t)st.st_size;
    return fd;
}

int file_read_at(int fd, void *buf, size_t n, uint64_t offset) {
    char *p = (char *)buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = 0; /* the file ends before n bytes */
            return -1;
        }
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return 0;
}

char *file_read_small(const char *label, const char *path, size_t max, size_t *len, char *err,
                      size_t errlen) {
    uint64_t size = 0;
    int fd = file_open_input(label, path, &size, err, errlen);
    if (fd < 0) return NULL;
    if (size > max) {
        close(fd);
        files_fail(err, errlen, 0,
                   "%s %s: %llu bytes, more than any such file holds (at most %zu).", label, path,
                   (unsigned long long)size, max);
        return NULL;
    }
    char *buf = (char *)malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        files_fail(err, errlen, 0, "%s %s: no memory to hold its %llu bytes.", label, path,
                   (unsigned long long)size);
        return NULL;
    }
    if (file_read_at(fd, buf, (size_t)size, 0) != 0) {
        files_fail(err, errlen, 0, "%s %s: could not read its %llu bytes (%s).", label, path,
                   (unsigned long long)size,
                   errno ? strerror(errno) : "it became shorter while being read");
        free(buf);
        close(fd);
        return NULL;
    }
    close(fd);
    buf[size] = '\0';
    *len = (size_t)size;
    return buf;
}

/* ---- outputs ---------------------------------------------------------------- */

int file_check_output(const char *label, const char *path, char *err, size_t errlen) {
    struct stat st;
    char dir[FILES_MAX_PATH];
    if (!*path) return files_fail(err, errlen, 2, "%s: the path is empty.", label);
    if (strlen(path) >= FILES_MAX_PATH - 16)
        return files_fail(err, errlen, 2, "%s: the path is too long.", label);
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return files_fail(
                err, errlen, 2,
                "%s %s: is a symbolic link. Outputs are written beside their path and renamed into "
                "place, which would replace the link itself. Give the path of its target instead.",
                label, path);
        if (!S_ISREG(st.st_mode))
            return files_fail(
                err, errlen, 2,
                "%s %s: is %s, not a regular file; fsdp.c replaces only regular files. "
                "Give the path of a new file, e.g. out/run.json.",
                label, path, kind_of_mode(st.st_mode));
        if (access(path, W_OK) != 0)
            return files_fail(err, errlen, 2, "%s %s: exists and is read-only. Give another path.",
                              label, path);
    } else if (errno != ENOENT) {
        return files_fail(err, errlen, 2, "%s %s: cannot be reached (%s).", label, path,
                          strerror(errno));
    }
    dir_of(path, dir, sizeof(dir));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return files_fail(err, errlen, 2,
                          "%s %s: the directory %s does not exist. Create it first (mkdir -p %s).",
                          label, path, dir, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return files_fail(
            err, errlen, 2,
            "%s %s: cannot write in the directory %s (%s). Give a path in a writable directory.",
            label, path, dir, strerror(errno));
    return 0;
}

/* The canonical form of a path that may not exist yet: its directory
 * resolved (symbolic links, "..", "."), then its last component. */
static int canonical(const char *path, char *out, size_t outlen) {
    char dir[FILES_MAX_PATH], *real = realpath(path, NULL);
    if (real) {
        snprintf(out, outlen, "%s", real);
        free(real);
        return 0;
    }
    dir_of(path, dir, sizeof(dir));
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!(real = realpath(dir, NULL))) return -1;
    snprintf(out, outlen, "%s/%s", real, base);
    free(real);
    return 0;
}

int file_same(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ca[FILES_MAX_PATH + 256], cb[FILES_MAX_PATH + 256];
    if (canonical(a, ca, sizeof(ca)) != 0 || canonical(b, cb, sizeof(cb)) != 0)
        return strcmp(a, b) == 0;
    return strcmp(ca, cb) == 0;
}

int file_within_entry(const char *path, const char *dir, char *entry, size_t len) {
    char cp[FILES_MAX_PATH + 256], cd[FILES_MAX_PATH + 256];
    if (len) entry[0] = '\0';
    if (canonical(path, cp, sizeof(cp)) != 0 || canonical(dir, cd, sizeof(cd)) != 0)
        return strcmp(path, dir) == 0;
    size_t n = strlen(cd);
    if (n == 1) n = 0; /* everything is inside "/" */
    if (strncmp(cp, cd, n) != 0 || (cp[n] != '\0' && cp[n] != '/')) return 0;
    if (cp[n] == '/' && len) /* the entry of dir on the way to path */
        snprintf(entry, len, "%.*s", (int)strcspn(cp + n + 1, "/"), cp + n + 1);
    return 1;
}

int file_within(const char *path, const char *dir) {
    return file_within_entry(path, dir, NULL, 0);
}

static void out_start(OutFile *o, const char *label, const char *path, int atomic) {
    memset(o, 0, sizeof(*o));
    o->fd = -1;
    o->atomic = atomic;
    snprintf(o->label, sizeof(o->label), "%s", label);
    snprintf(o->path, sizeof(o->path), "%s", path);
}

int out_open(OutFile *o, const char *label, const char *path, char *err, size_t errlen) {
    out_start(o, label, path, 1);
    int rc = file_check_output(label, path, err, errlen);
    if (rc) return rc;
    snprintf(o->tmp, sizeof(o->tmp), "%s.tmp-XXXXXX", path);
    o->fd = mkstemp(o->tmp); /* a new name no one else has: O_CREAT | O_EXCL */
    if (o->fd < 0)
        return files_fail(err, errlen, 2, "%s %s: cannot create a file beside it (%s).", label,
                          path, strerror(errno));
    o->created = 1;
    /* mkstemp makes the file 0600: give it the mode of the file it replaces,
     * or the usual mode of a new file */
    struct stat st;
    mode_t mask = umask(0);
    umask(mask);
    fchmod(o->fd, stat(path, &st) == 0 ? (st.st_mode & 07777) : (0666 & ~mask));
    return 0;
}

int out_create(OutFile *o, const char *label, const char *path, char *err, size_t errlen) {
    out_start(o, label, path, 0);
    o->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (o->fd < 0)
        return files_fail(err, errlen, 2, "%s %s: cannot create it (%s).", label, path,
                          strerror(errno));
    o->created = 1;
    return 0;
}

static void out_failed(OutFile *o, const char *what) {
    if (o->failed) return; /* the first failure is the one to report */
    o->failed = what;
    o->err_no = errno ? errno : EIO;
}

void out_write_at(OutFile *o, const void *buf, size_t n, uint64_t offset) {
    const char *p = (const char *)buf;
    while (n > 0 && !o->failed) {
        ssize_t put = pwrite(o->fd, p, n, (off_t)offset);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) { /* 0: the disk took nothing; retrying would spin */
            if (put == 0) errno = ENOSPC;
            out_failed(o, "write");
            return;
        }
        p += put; /* a short write is not an error yet: write the rest */
        n -= (size_t)put;
        offset += (uint64_t)put;
    }
}

void out_write(OutFile *o, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    while (n > 0 && !o->failed) {
        ssize_t put = write(o->fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            if (put == 0) errno = ENOSPC;
            out_failed(o, "write");
            return;
        }
        p += put;
        n -= (size_t)put;
    }
}

int file_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* What to try after a failure: free space, or the disk itself. */
static const char *out_hint(int err_no) {
    return err_no == ENOSPC || err_no == EDQUOT || err_no == EFBIG
               ? "Check the free space (df -h) and try again."
               : "Check the disk and the path (dmesg may say more) and try again.";
}

/* fsync and close: after it, o's bytes are on the disk, or o->failed says
 * which call failed. */
static void out_flush_close(OutFile *o) {
    if (o->fd < 0) return;
    if (!o->failed && fsync(o->fd) != 0) out_failed(o, "fsync");
    if (close(o->fd) != 0) out_failed(o, "close"); /* NFS reports some errors only here */
    o->fd = -1;
}

/* Removes what o created and has not committed: its temporary file (or,
 * written in place, the file itself). Nothing under o->path is touched
 * when o is atomic. */
static void out_discard(OutFile *o) {
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->created) unlink(o->atomic ? o->tmp : o->path);
    o->created = 0;
}

void out_abort(OutFile *o) { out_discard(o); }

/* Whether o's final name became something other than a regular file (or
 * nothing) while the run wrote it: then it is left alone. 1 and a message
 * ending in `after`. */
static int out_path_changed(const OutFile *o, const char *after, char *err, size_t errlen) {
    struct stat st;
    if (!o->atomic || lstat(o->path, &st) != 0 || S_ISREG(st.st_mode)) return 0;
    return files_fail(err, errlen, 1, "%s %s: became %s while the run was writing it; it was left "
                      "alone%s",
                      o->label, o->path, kind_of_mode(st.st_mode), after);
}

/* fsync of the directory of o's final name, so that the rename survives
 * a crash. Returns 0, or 1 with a message. */
static int out_sync_dir(const OutFile *o, char *err, size_t errlen) {
    char dir[FILES_MAX_PATH];
    dir_of(o->path, dir, sizeof(dir));
    if (!o->atomic || file_sync_dir(dir) == 0) return 0;
    return files_fail(err, errlen, 1,
                      "%s %s: written, but the fsync of its directory failed (%s), so it may "
                      "not survive a crash. %s",
                      o->label, o->path, strerror(errno), out_hint(errno));
}

int out_commit(OutFile *o, char *err, size_t errlen) {
    out_flush_close(o);
    if (!o->failed && out_path_changed(o, ".", err, errlen)) {
        out_discard(o);
        return 1;
    }
    if (!o->failed && o->atomic && rename(o->tmp, o->path) != 0) out_failed(o, "rename");
    if (o->failed) {
        out_discard(o);
        return files_fail(err, errlen, 1,
                          "%s %s: writing failed (%s: %s); no partial file was left under that "
                          "name. %s",
                          o->label, o->path, o->failed, strerror(o->err_no), out_hint(o->err_no));
    }
    o->created = 0; /* it is the user's file now */
    return out_sync_dir(o, err, errlen);
}

/* Pair: a failure of either before the renames leaves both names as they
 * were. The message names the file that failed, and says so of both. */
static int out_pair_failed(OutFile *bad, OutFile *other, char *err, size_t errlen) {
    int err_no = bad->err_no;
    out_discard(bad);
    out_discard(other);
    return files_fail(err, errlen, 1,
                      "%s %s: writing failed (%s: %s); it goes with %s, so neither was "
                      "written: no partial file was left under either name. %s",
                      bad->label, bad->path, bad->failed, strerror(err_no), other->path,
                      out_hint(err_no));
}

int out_commit_pair(OutFile *a, OutFile *b, char *err, size_t errlen) {
    char backup[sizeof(a->tmp) + 8];
    struct stat st;
    out_flush_close(a);
    out_flush_close(b);
    if (a->failed || b->failed) return out_pair_failed(a->failed ? a : b, a->failed ? b : a, err,
                                                       errlen);
    if (out_path_changed(a, ", and so was the other file of the pair.", err, errlen) ||
        out_path_changed(b, ", and so was the other file of the pair.", err, errlen)) {
        out_discard(a);
        out_discard(b);
        return 1;
    }
    /* a's old file, if any, kept under a second name (a hard link: no copy)
     * until b is in place too, so that a can be put back should b's rename
     * fail. A file system without hard links keeps none: then a failure
     * there, rare as a rename's is, is reported as what it left. */
    int had_old = lstat(a->path, &st) == 0;
    snprintf(backup, sizeof(backup), "%s.old", a->tmp);
    int kept = had_old && link(a->path, backup) == 0;
    if (rename(a->tmp, a->path) != 0) {
        out_failed(a, "rename");
        if (kept) unlink(backup);
        return out_pair_failed(a, b, err, errlen);
    }
    a->created = 0;
    if (rename(b->tmp, b->path) != 0) {
        out_failed(b, "rename");
        int err_no = b->err_no, undone = kept ? rename(backup, a->path) == 0
                                              : !had_old && unlink(a->path) == 0;
        out_discard(b);
        if (undone)
            return files_fail(err, errlen, 1,
                              "%s %s: writing failed (rename: %s); %s, written with it, was %s, "
                              "so neither file changed. %s",
                              b->label, b->path, strerror(err_no), a->path,
                              had_old ? "put back as it was" : "removed again", out_hint(err_no));
        if (kept) unlink(backup);
        return files_fail(err, errlen, 1,
                          "%s %s: writing failed (rename: %s), after %s was replaced by this "
                          "run's, which could not be undone: the two files do not belong "
                          "together. %s",
                          b->label, b->path, strerror(err_no), a->path, out_hint(err_no));
    }
    b->created = 0;
    if (kept) unlink(backup);
    int rc = out_sync_dir(a, err, errlen);
    char da[FILES_MAX_PATH], db[FILES_MAX_PATH];
    dir_of(a->path, da, sizeof(da));
    dir_of(b->path, db, sizeof(db));
    if (rc == 0 && strcmp(da, db) != 0) rc = out_sync_dir(b, err, errlen);
    return rc;
}

/* ---- one run per directory (promise 5) -------------------------------------- */

/* NOTE: a lock file, held with flock.
 *
 * Two runs writing one directory delete each other's files, so a run takes
 * a lock on a file in the directory before it writes there, and holds it
 * for as long as it lives. What makes the lock is the kernel's lock, never
 * the file's content: when a process dies, however it dies (SIGKILL, the
 * node's power), the kernel lets its locks go, so the file a killed run
 * leaves behind is taken over by the next run and rewritten. The content is
 * a note for people: which run holds the lock (host, pid, command), so that
 * a refused run can say whom it is waiting for.
 *
 * Why flock(2) and not fcntl(F_SETLK), POSIX's record locks: a record lock
 * belongs to the process, and the process loses it when it closes *any*
 * descriptor of the file, so one open and close of the lock file anywhere in
 * the run (a probe) would silently give the lock away. A flock lock belongs
 * to the one open file. On NFS, Linux turns flock into an NFS lock that
 * every client sees, so a run on another node is refused as well; Lustre
 * needs its `flock` mount option (without it flock fails: UNSUPPORTED).
 *
 * A normal exit removes the file, and removing it is safe only because a
 * taker checks, once it holds the lock, that the file it locked is still
 * the one at the path: one removed between its open and its lock belonged
 * to a run that just ended, and it opens the path again. */
enum { LOCK_NOTE_MAX = 4096 };
static const char LOCK_END[] = "end\n"; /* the note's last line: the note is whole */

/* The lock this process holds, removed by exit(): an atexit handler reaches
 * nothing but globals (like the SIGBUS handler's mappings above). One is
 * enough: a run writes one directory. */
static struct {
    int fd; /* -1: none held */
    char path[FILES_MAX_PATH];
} held_lock = {-1, ""};

static void lock_pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int same_inode(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* flock's errors that mean "this file system has no locks", not "no" */
static int lock_unsupported(int e) {
    return e == ENOLCK || e == ENOSYS || e == EOPNOTSUPP || e == EINVAL;
}

void file_lock_release(void) {
    struct stat mine, now;
    if (held_lock.fd < 0) return;
    /* Still the file at the path? Someone may have removed ours, and
     * another run made a new one there: that one is not ours to remove. */
    if (fstat(held_lock.fd, &mine) == 0 && lstat(held_lock.path, &now) == 0 &&
        same_inode(&mine, &now))
        unlink(held_lock.path); /* while still locked: see the NOTE */
    close(held_lock.fd);        /* the lock goes with it */
    held_lock.fd = -1;
}

/* The holder's note, once whole (it ends with LOCK_END, cut off here). A
 * holder that has just taken the lock may not have written it yet, so this
 * waits for it a little (a second at most); "" if it never becomes whole. */
static void lock_read_note(int fd, char *out, size_t outlen) {
    char buf[LOCK_NOTE_MAX];
    size_t end = strlen(LOCK_END);
    if (outlen) out[0] = '\0';
    for (int tries = 0; tries < 20; tries++) {
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
        size_t len = strlen(buf);
        if (len >= end && !strcmp(buf + len - end, LOCK_END) &&
            (len == end || buf[len - end - 1] == '\n')) {
            if (outlen) snprintf(out, outlen, "%.*s", (int)(len - end), buf);
            return;
        }
        lock_pause_ms(50);
    }
}

/* Opens the lock file, creating it if missing; *created says whether we
 * did. -1 with the message in err. */
static int lock_open(const char *path, int *created, char *err, size_t errlen) {
    for (int tries = 0; tries < 100; tries++) {
        int flags =
            O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC; /* NONBLOCK: a FIFO never blocks */
        int fd = open(path, flags | O_CREAT | O_EXCL, 0644);
        *created = fd >= 0;
        if (fd < 0 && errno == EEXIST) fd = open(path, flags);
        if (fd >= 0) return fd;
        if (errno == ENOENT) continue; /* removed between the two opens: its run just ended */
        if (errno == ELOOP)
            return files_fail(err, errlen, -1,
                              "%s: is a symbolic link, where fsdp.c keeps its lock file. Move it "
                              "away.",
                              path);
        return files_fail(err, errlen, -1, "%s: cannot create or open the lock file (%s).", path,
                          strerror(errno));
    }
    return files_fail(err, errlen, -1, "%s: the lock file keeps vanishing; try again.", path);
}

/* Writes our note (and LOCK_END) over what a killed holder left. */
static int lock_write_note(int fd, const char *note) {
    size_t n = strlen(note), end = strlen(LOCK_END);
    char *text = (char *)malloc(n + end + 1);
    if (!text) return -1;
    memcpy(text, note, n);
    memcpy(text + n, LOCK_END, end + 1);
    int rc = ftruncate(fd, 0);
    for (size_t at = 0; rc == 0 && at < n + end;) {
        ssize_t put = pwrite(fd, text + at, n + end - at, (off_t)at);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) rc = -1;
        else at += (size_t)put;
    }
    free(text);
    return rc;
}

FileLock file_lock_take(const char *path, const char *note, char *holder, size_t holderlen,
                        char *err, size_t errlen) {
    if (holderlen) holder[0] = '\0';
    if (held_lock.fd >= 0)
        return (FileLock)files_fail(err, errlen, FILE_LOCK_ERROR,
                                    "%s: this process already holds the lock of %s.", path,
                                    held_lock.path);
    if (strlen(path) >= sizeof(held_lock.path))
        return (FileLock)files_fail(err, errlen, FILE_LOCK_ERROR, "%s: the path is too long.",
                                    path);
    for (int tries = 0;; tries++) {
        int created = 0, fd = lock_open(path, &created, err, errlen);
        if (fd < 0) return FILE_LOCK_ERROR;
        struct stat st, now;
        if (fstat(fd, &st) != 0) st.st_mode = 0; /* "not a regular file" below */
        if (!S_ISREG(st.st_mode)) {
            if (created) unlink(path);
            close(fd);
            return (FileLock)files_fail(err, errlen, FILE_LOCK_ERROR,
                                        "%s: is %s, where fsdp.c keeps its lock file (a regular "
                                        "file). Move it away.",
                                        path, kind_of_mode(st.st_mode));
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            /* busy: a probe holds a shared lock for a moment, so ask a few
             * times; a run holds it for good */
            if ((e == EWOULDBLOCK || e == EINTR) && tries < 10) {
                close(fd);
                lock_pause_ms(50);
                continue;
            }
            if (e == EWOULDBLOCK) { /* the file is the holder's now, even if we made it */
                lock_read_note(fd, holder, holderlen);
                close(fd);
                return FILE_LOCK_BUSY;
            }
            if (created) unlink(path);
            close(fd);
            return (FileLock)files_fail(
                err, errlen, lock_unsupported(e) ? FILE_LOCK_UNSUPPORTED : FILE_LOCK_ERROR,
                "%s: cannot lock it (flock: %s).", path, strerror(e));
        }
        /* ours, if it is still the file at path (see the NOTE) */
        if (lstat(path, &now) != 0 || !same_inode(&st, &now)) {
            close(fd);
            if (tries < 100) continue;
            return (FileLock)files_fail(err, errlen, FILE_LOCK_ERROR,
                                        "%s: the lock file keeps being replaced; try again.", path);
        }
        if (lock_write_note(fd, note) != 0) {
            int e = errno;
            unlink(path);
            close(fd);
            return (FileLock)files_fail(err, errlen, FILE_LOCK_ERROR,
                                        "%s: cannot write the lock file (%s). %s", path,
                                        strerror(e), out_hint(e));
        }
        static int registered = 0;
        if (!registered) registered = atexit(file_lock_release) == 0;
        held_lock.fd = fd;
        snprintf(held_lock.path, sizeof(held_lock.path), "%s", path);
        return FILE_LOCK_OK;
    }
}

FileLock file_lock_probe(const char *path, char *holder, size_t holderlen, char *err,
                         size_t errlen) {
    if (holderlen) holder[0] = '\0';
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return FILE_LOCK_OK; /* no lock file: no run holds it */
    if (fd < 0)
        return (FileLock)files_fail(err, errlen, FILE_LOCK_ERROR, "%s: cannot open it (%s).", path,
                                    strerror(errno));
    struct stat st, mine;
    FileLock rc = FILE_LOCK_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = (FileLock)files_fail(err, errlen, FILE_LOCK_ERROR,
                                  "%s: is not a regular file, where fsdp.c keeps its lock file.",
                                  path);
    else if (held_lock.fd >= 0 && fstat(held_lock.fd, &mine) == 0 && same_inode(&st, &mine))
        rc = FILE_LOCK_OK; /* our own: a second open would conflict with it (see the NOTE) */
    else if (flock(fd, LOCK_SH | LOCK_NB) == 0)
        flock(fd, LOCK_UN); /* free: no live run holds it; nothing kept */
    else if (errno == EWOULDBLOCK) {
        lock_read_note(fd, holder, holderlen);
        rc = FILE_LOCK_BUSY;
    } else {
        int e = errno;
        rc = (FileLock)files_fail(err, errlen,
                                  lock_unsupported(e) ? FILE_LOCK_UNSUPPORTED : FILE_LOCK_ERROR,
                                  "%s: cannot lock it (flock: %s).", path, strerror(e));
    }
    close(fd);
    return rc;
}
