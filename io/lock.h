/* ============================================================================
 * io/lock.h — one run per checkpoint directory
 *
 * defines: run_lock_dirs (rank 0, before step 1: takes --save-dir's lock,
 *          and refuses a --resume of a directory a live run is saving in)
 *
 * Plumbing: the program around fsdp.c (main.c includes it after fsdp.c).
 *
 * Two runs given one --save-dir would each prune the other's checkpoints
 * (ckpt_prune keeps the two newest of the directory, whoever wrote them),
 * replace each other's step-N ("an older save of this very step"), and
 * fail at a save, after the training, with messages that cannot name the
 * other run. So a run takes the directory's lock before step 1, and a
 * second run is refused at once, naming the first: host, pid, command.
 * The lock is a file, DIR/.fsdp.lock, held with flock by a live process;
 * files.c's NOTE on it says why a killed run's leftover file blocks no one.
 *
 * Which rank holds it: rank 0, alone. Look at who writes what (ckpt_save):
 * rank 0 makes .tmp-step-N, writes meta.txt, renames it to step-N and
 * prunes; every other rank writes its one shard file into the .tmp-step-N
 * that rank 0 has just made for this save, between two agreements of the
 * whole job. No rank writes in DIR outside a save rank 0 runs, so rank 0's
 * lock covers the job, on one node or many (the ranks of a multi-node job
 * save into one shared file system; on NFS flock reaches every client).
 * A lock on every rank would be no better: flock locks of the same job
 * would conflict with each other. If rank 0 dies its lock goes with it,
 * and the launcher (mpirun, srun) ends the other ranks of the job.
 *
 * Its verdict reaches every rank (main broadcasts it), so a refused job
 * exits 2 on every rank, before a step, and never waits on a rank that
 * left: no hang. The lock is given back, and its file removed, in
 * MPI_Finalize, on every way out that finalizes (an error on all ranks
 * too); a run killed or aborted leaves the file, unlocked.
 * ========================================================================== */
#ifndef FSDP_IO_LOCK_H
#define FSDP_IO_LOCK_H
#include "../core.h"
#include "checkpoint.h" /* ckpt_step_of */

#include <ctype.h> /* isalnum */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../files.h"

#define RUN_LOCK_FILE ".fsdp.lock" /* in the --save-dir */

/* Whether a shell reads argument a as it is, unquoted */
static int shell_plain(const char *a) {
    if (*a == '\0') return 0;
    for (; *a; a++)
        if (!isalnum((unsigned char)*a) && !strchr("_-+=./,:@%", *a)) return 0;
    return 1;
}

/* argv as a shell would take it back: arguments with anything but plain
 * characters in single quotes, control characters (a newline would end
 * the note's line) as '?'. Cut, never overrun, at len. */
static void lock_command_text(int argc, char **argv, char *out, size_t len) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < argc && n + 1 < len; i++) {
        const char *a = argv[i];
        int plain = shell_plain(a);
        if (i && n + 1 < len) out[n++] = ' ';
        if (!plain && n + 1 < len) out[n++] = '\'';
        for (const char *p = a; *p && n + 5 < len; p++) {
            if (*p == '\'') { /* 'it'\''s' */
                memcpy(out + n, "'\\''", 4);
                n += 4;
            } else {
                out[n++] = (unsigned char)*p < ' ' ? '?' : *p;
            }
        }
        if (!plain && n + 1 < len) out[n++] = '\'';
        out[n] = '\0';
    }
}

/* What the lock file says about the run that holds it: one "key: value" a
 * line, read back by lock_note_field. The first lines tell a person who
 * finds the file what it is. */
static void lock_note(int argc, char **argv, int world, char *out, size_t len) {
    char host[256] = "?", cwd[1024] = "?", started[64] = "?", command[2048];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    if (!getcwd(cwd, sizeof(cwd))) snprintf(cwd, sizeof(cwd), "?");
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(started, sizeof(started), "%Y-%m-%d %H:%M:%S", &tm);
    lock_command_text(argc, argv, command, sizeof(command));
    snprintf(out, len,
             "# fsdp.c: the run below saves checkpoints in this directory and holds a lock\n"
             "# (flock) on this file while it lives. A run that ends removes the file; one\n"
             "# that was killed leaves it behind, unlocked, and the next run takes it over.\n"
             "host: %s\npid: %ld\nranks: %d\nstarted: %s\ndirectory: %s\ncommand: %s\n",
             host, (long)getpid(), world, started, cwd, command);
}

/* The value of "key: value" in a note, or "" */
static const char *lock_note_field(const char *note, const char *key, char *out, size_t len) {
    size_t k = strlen(key);
    out[0] = '\0';
    const char *line = note;
    while (line && *line) {
        if (!strncmp(line, key, k) && !strncmp(line + k, ": ", 2)) {
            snprintf(out, len, "%.*s", (int)strcspn(line + k + 2, "\n"), line + k + 2);
            break;
        }
        line = strchr(line, '\n');
        if (line) line++; /* the next line */
    }
    return out;
}

/* "pid 4242 on host node1 (2 ranks, started ... in /home/ana), running
 * ./fsdp ...": the holder as its note describes it. Sets *pid_host when
 * the note names both (a HINT can then say how to stop it). */
static void lock_holder_text(const char *note, const char *lock, char *out, size_t len,
                             int *pid_host) {
    char host[256], pid[32], ranks[32], started[64], cwd[1024], command[2048];
    lock_note_field(note, "host", host, sizeof(host));
    lock_note_field(note, "pid", pid, sizeof(pid));
    lock_note_field(note, "ranks", ranks, sizeof(ranks));
    lock_note_field(note, "started", started, sizeof(started));
    lock_note_field(note, "directory", cwd, sizeof(cwd));
    lock_note_field(note, "command", command, sizeof(command));
    *pid_host = pid[0] && host[0];
    if (!*pid_host || !command[0]) /* a note being written as we read, or edited */
        snprintf(out, len, "a live process holds its lock file %s, which does not say which run",
                 lock);
    else
        snprintf(out, len, "pid %s on host %s (%s rank%s, started %s in %s), running: %s", pid,
                 host, ranks, strcmp(ranks, "1") ? "s" : "", started, cwd, command);
}

/* MPI_Finalize frees MPI_COMM_SELF's attributes before it does anything
 * else (MPI 4.0, section 11.2.7): a delete callback there is MPI's own "at
 * finalize" hook. Through it rank 0 removes its lock file before the
 * synchronisation inside MPI_Finalize, so before any rank of the job has
 * exited: once one rank has exited with an error, the launcher kills the
 * others, and a lock file removed only by exit() would be left behind. */
static int lock_release_at_finalize(MPI_Comm comm, int key, void *value, void *extra) {
    (void)comm, (void)key, (void)value, (void)extra;
    file_lock_release();
    return MPI_SUCCESS;
}

static void lock_release_with_mpi(void) {
    int key;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, lock_release_at_finalize, &key, NULL);
    MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
}

/* --save-dir: take the directory's lock for the whole run, or refuse. */
static int lock_save_dir(const char *dir, const char *note, char *err, size_t errlen) {
    char path[2048], holder[4096], who[6144], why[2600];
    snprintf(path, sizeof(path), "%s/%s", dir, RUN_LOCK_FILE);
    FileLock got = file_lock_take(path, note, holder, sizeof(holder), why, sizeof(why));
    if (got == FILE_LOCK_OK) {
        lock_release_with_mpi();
        return 0;
    }
    if (got == FILE_LOCK_UNSUPPORTED) { /* no lock, no refusal: say so, and go on */
        fprintf(stderr,
                "note: --save-dir %s: %s: this file system has no file locks, so a second run "
                "saving here would not be refused. Make sure only one run saves in it (Lustre: "
                "mount it with -o flock).\n",
                dir, why);
        return 0;
    }
    if (got == FILE_LOCK_ERROR)
        return usage_error(err, errlen,
                           "--save-dir %s: %s\nHINT: fsdp.c keeps a lock file there while it "
                           "saves; give a --save-dir it can write.",
                           dir, why);
    int pid_host = 0;
    char host[256], pid[32];
    lock_holder_text(holder, path, who, sizeof(who), &pid_host);
    lock_note_field(holder, "host", host, sizeof(host));
    lock_note_field(holder, "pid", pid, sizeof(pid));
    char stop[384] = "";
    if (pid_host) snprintf(stop, sizeof(stop), " (or stop it: kill %s on %s)", pid, host);
    return usage_error(err, errlen,
                       "--save-dir %s: another run is saving checkpoints there: %s. Two runs "
                       "in one directory delete each other's checkpoints.\n"
                       "HINT: wait for that run to end%s, or give this run another --save-dir.",
                       dir, who, stop);
}

/* The directory whose lock guards what --resume reads: DIR itself, or,
 * when DIR is one checkpoint (it holds meta.txt, or is named step-N: the
 * live run may have just pruned it), the --save-dir it lies in. */
static void resume_lock_dir(const char *resume, char *out, size_t len) {
    char meta[2048];
    struct stat st;
    snprintf(out, len, "%s", resume);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = '\0';
    snprintf(meta, sizeof(meta), "%s/meta.txt", out);
    char *slash = strrchr(out, '/');
    if (lstat(meta, &st) != 0 && ckpt_step_of(slash ? slash + 1 : out) < 0) return;
    if (!slash) snprintf(out, len, ".");
    else if (slash == out) out[1] = '\0';
    else *slash = '\0';
}

/* --resume of a directory a live run is saving in is refused too, up
 * front, whether or not this run saves there:
 *   - with --save-dir the same directory, this run would be the second
 *     writer, which lock_save_dir would refuse anyway;
 *   - alone, it reads what the live run deletes: that run keeps its two
 *     newest checkpoints and removes the older ones after each save, so
 *     the checkpoint picked here can vanish while its shards are read (a
 *     large model on many ranks takes a while; --save-every 1 saves every
 *     few seconds). And continuing a run that is still running makes two
 *     copies of one run: rarely what was meant.
 * Refusing costs little: wait for the run to end, or copy a step-N
 * elsewhere (nothing deletes the copy) and resume that. DIR/step-N is
 * guarded by DIR's lock, for the same reasons.
 * It is a probe, not a lock held for the run: a reader that held its
 * source's lock would keep a later writer out for hours after reading for
 * seconds. What is left is the window of the load itself (a run starting
 * to save there in the seconds before the read); a file gone then is an
 * error that names it, never a wrong checkpoint trained on. */
static int lock_check_resume(const char *resume, char *err, size_t errlen) {
    char dir[2048], path[2100], holder[4096], who[6144], why[2600];
    resume_lock_dir(resume, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/%s", dir, RUN_LOCK_FILE);
    if (file_lock_probe(path, holder, sizeof(holder), why, sizeof(why)) != FILE_LOCK_BUSY)
        return 0; /* free, or cannot tell (no locks there): the load checks every file anyway */
    int pid_host = 0;
    lock_holder_text(holder, path, who, sizeof(who), &pid_host);
    return usage_error(err, errlen,
                       "--resume %s: a live run is saving checkpoints in %s: %s. It deletes "
                       "all but its two newest as it goes, so the checkpoint this run would "
                       "read can vanish under it.\n"
                       "HINT: wait for that run to end, or copy the checkpoint first (cp -r "
                       "%s/step-N elsewhere) and --resume the copy.",
                       resume, dir, who, dir);
}

/* Rank 0, once, before any step: the locks of the directories the run
 * reads and writes. Returns 0, or 2 with the message (which holds its
 * own HINT line). The lock taken is held until MPI_Finalize, or exit.
 * What is read is checked first, so that a refused run leaves not even a
 * lock file in its --save-dir. */
static int run_lock_dirs(const Config *c, int argc, char **argv, int world, char *err,
                         size_t errlen) {
    char note[4096];
    int rc = 0;
    if (c->resume_dir) rc = lock_check_resume(c->resume_dir, err, errlen);
    lock_note(argc, argv, world, note, sizeof(note));
    if (rc == 0 && c->save_dir) rc = lock_save_dir(c->save_dir, note, err, errlen);
    return rc;
}

#endif /* FSDP_IO_LOCK_H */
