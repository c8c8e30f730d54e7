/* ============================================================================
 * files.h — how fsdp.c touches the file system without harming it
 *
 * A teaching tool is run by students, often as root in a container, with
 * paths typed by hand. So every file fsdp.c reads or writes goes through
 * the few functions here, which keep four promises:
 *
 *   1. An output never replaces what is not ours. A path that exists must
 *      be a regular file (not /dev/null, not a named pipe, not a directory,
 *      not a symbolic link) before anything is written, and is checked again
 *      just before it is replaced.
 *   2. An output appears whole or not at all. It is written to a temporary
 *      file beside it (PATH.tmp-XXXXXX), flushed to the disk (fsync), and
 *      only then renamed over PATH in one atomic step. Any failed write,
 *      fsync or close (disk full, I/O error, a short write) is an error that
 *      names the operation, and the temporary file is removed.
 *   3. An input never hangs and is never read without bound. It must be a
 *      regular file: that is checked before it is opened (and again on the
 *      open file), and the open itself cannot block (O_NONBLOCK), so a named
 *      pipe or /dev/zero is refused by name instead of read forever.
 *   4. Every refusal says what the path is and what to do instead.
 *   5. A directory a run writes is written by that run alone. The run holds
 *      a lock (flock) on a lock file in it for as long as it lives; another
 *      run asking for it is told who holds it, and a lock whose run was
 *      killed is gone with the run (the kernel releases it), so a file left
 *      behind never blocks anyone.
 *
 * Writes use write(2) and pwrite(2) directly, not stdio, so that every
 * failure is seen where it happens (and so tests/failio.c can inject one).
 * Plain POSIX C11 that also compiles as C++ (nvcc -x cu, g++).
 * ========================================================================== */
#ifndef FSDP_FILES_H
#define FSDP_FILES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FILES_MAX_PATH 2048

/* ---- inputs ------------------------------------------------------------------ */

/* Opens a regular file for reading. Returns the descriptor and its size in
 * *size, or -1 with "LABEL PATH: why" in err (missing, a directory, a named
 * pipe, a character device such as /dev/zero, ...). label is the option
 * that named the file, e.g. "--init-from", or a description. */
int file_open_input(const char *label, const char *path, uint64_t *size, char *err, size_t errlen);

/* Reads exactly n bytes at offset. Returns 0, or -1 on an error or when the
 * file ends first (errno is then 0). Retries short reads and EINTR. */
int file_read_at(int fd, void *buf, size_t n, uint64_t offset);

/* Reads a whole regular file of at most max bytes into a malloc'd buffer
 * (NUL-terminated, length in *len). NULL with "LABEL PATH: why" in err. */
char *file_read_small(const char *label, const char *path, size_t max, size_t *len, char *err,
                      size_t errlen);

/* A file mapped with mmap that shrinks while mapped (a user truncates or
 * rewrites it) makes every read of a vanished page fault with SIGBUS: a
 * crash with a backtrace. file_watch_mapping turns that fault, for reads
 * inside [addr, addr + len), into "error: LABEL PATH: ..." with a HINT and
 * exit status 2; a SIGBUS anywhere else still crashes as it would. Up to
 * four mappings are watched at once (--data and --val-data are two);
 * file_unwatch_mapping before munmap. */
void file_watch_mapping(const char *label, const char *path, const void *addr, size_t len);
void file_unwatch_mapping(const void *addr);

/* The one message for a training file that changed under a run, whatever
 * gave it away: "error: LABEL PATH: the file changed while this run was
 * reading it (HOW).", a HINT, and a newline, into buf (snprintf's return).
 * The fault of a shrunk file says so through the watch above; a file
 * rewritten at the same size faults nothing, and its data layer's check of
 * every batch (data/corpus.h) finds a token that was not there at load. */
int file_changed_message(char *buf, size_t len, const char *label, const char *path,
                         const char *how);

/* What kind of thing is at path, in words ("a directory", "a named pipe
 * (FIFO)", ...), for messages; "a regular file" or "nothing" too. Follows
 * symbolic links. */
const char *file_kind(const char *path);

/* ---- outputs ---------------------------------------------------------------- */

/* Before any work is spent: can an output go to path? It may not exist yet
 * (then its directory must exist and be writable), or be a regular file
 * that is ours to replace. Anything else is refused: 2 with a message. */
int file_check_output(const char *label, const char *path, char *err, size_t errlen);

/* Whether two paths name the same file (or would, once created): the same
 * inode if both exist, else the same canonical path. */
int file_same(const char *a, const char *b);
/* Whether path is the directory dir or lies inside it, however either is
 * spelled (symbolic links, "..", "."). */
int file_within(const char *path, const char *dir);
/* The same, and the name of dir's entry that path lies in (dir/ENTRY/...),
 * in entry: "" when path is dir itself. */
int file_within_entry(const char *path, const char *dir, char *entry, size_t len);

/* An output being written. The first failure sticks: later writes do
 * nothing, and out_commit reports it. */
typedef struct {
    int fd;                        /* -1 when closed */
    int atomic;                    /* written to tmp, renamed over path */
    int created;                   /* we made the file: ours to remove */
    char label[32];                /* "--export", "checkpoint", ... */
    char path[FILES_MAX_PATH];     /* the final name */
    char tmp[FILES_MAX_PATH + 16]; /* the temporary name (atomic only) */
    int err_no;                    /* errno of the first failure, or 0 */
    const char *failed;            /* what failed first: "write", "fsync" ... */
} OutFile;

/* Starts the output PATH as a temporary file beside it (promise 2).
 * Returns 0, or 2 with a message (path refused or not creatable). */
int out_open(OutFile *o, const char *label, const char *path, char *err, size_t errlen);
/* Starts a new file that must not exist yet, written in place: for the
 * files of a checkpoint, whose whole directory is renamed into place. */
int out_create(OutFile *o, const char *label, const char *path, char *err, size_t errlen);
/* Appends n bytes / writes n bytes at offset. */
void out_write(OutFile *o, const void *buf, size_t n);
void out_write_at(OutFile *o, const void *buf, size_t n, uint64_t offset);
/* Flushes to disk and closes; an atomic output is then renamed over its
 * path. Returns 0, or 1 with "LABEL PATH: writing failed (fsync: No space
 * left on device) ..." in err, and nothing left under the final name that
 * was not there before (the temporary file is removed). */
int out_commit(OutFile *o, char *err, size_t errlen);
/* Commits two outputs as one, for files that belong together (a GPT-2's
 * model.safetensors and its config.json): both are flushed and closed
 * first, so a failed write, fsync or close of either leaves neither, and
 * only then renamed, a first. Should b's rename fail after a's, a is put
 * back as it was (its old file kept under a hard link until then), or
 * removed when it had none. Returns 0, or 1 with a message that names the
 * file that failed and says truly what was left. */
int out_commit_pair(OutFile *a, OutFile *b, char *err, size_t errlen);
/* Gives up an output that will not be committed: its temporary file is
 * removed, nothing under its name is touched. */
void out_abort(OutFile *o);
/* fsync of a directory: makes a rename or a new file in it durable. */
int file_sync_dir(const char *dir); /* 0, or -1 with errno */

/* ---- one run per directory (promise 5) -------------------------------------- */

/* What file_lock_take and file_lock_probe found. */
typedef enum {
    FILE_LOCK_OK = 0,      /* take: the lock is ours; probe: no live holder */
    FILE_LOCK_BUSY,        /* a live process holds it; its note is in holder */
    FILE_LOCK_UNSUPPORTED, /* the file system has no locks (flock: ENOLCK, ENOSYS ...) */
    FILE_LOCK_ERROR        /* the lock file could not be opened or created (err says why) */
} FileLock;

/* Takes the exclusive lock on the file at path (created if missing) without
 * waiting, and writes note into it (who we are: host, pid, command, one
 * "key: value" a line) for a refused process to read. The lock is held until
 * the process ends: a normal exit (exit(), a return from main) or
 * file_lock_release removes the file, a killed process leaves it behind,
 * unlocked. BUSY: the holder's note (as it wrote it) in holder. */
FileLock file_lock_take(const char *path, const char *note, char *holder, size_t holderlen,
                        char *err, size_t errlen);
/* Gives the lock back and removes its file (if it is still the one we
 * locked) now, before the process ends: at MPI_Finalize, say, after which
 * the launcher may kill a rank before its exit() has run. Then a no-op. */
void file_lock_release(void);
/* Whether a live process holds the lock on path, without taking it (a
 * shared lock, given back at once; a missing file is OK: no one holds it).
 * BUSY: the holder's note in holder. */
FileLock file_lock_probe(const char *path, char *holder, size_t holderlen, char *err,
                         size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* FSDP_FILES_H */
