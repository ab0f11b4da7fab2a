/* safe_file.h: files whose names come from outside (a script, the command line, a directory a
 * user hands us), opened so that what sits at the name cannot redirect, hang or exhaust us.
 *
 * Reading follows symbolic links (checkpoints in a Hugging Face cache are links to blobs) but
 * accepts only a regular file at the end of them: a FIFO, device, socket or directory is refused
 * without blocking on it (the open is non-blocking, the type checked with fstat on the opened
 * descriptor), and dpfile_read refuses files over a size cap before reading a byte.
 *
 * Writing never follows a link at the name and never replaces anything but a regular file: the
 * text goes to a unique temporary in the same directory (".<name>.<host>.<pid>.<n>.tmp", created with
 * O_EXCL | O_NOFOLLOW), is flushed and fsync'ed, and is renamed over the name only if the name is
 * absent or a regular file (a link, device, FIFO or directory there is refused and left alone).
 * A reader sees the old file or the whole new one, never a part. A writer killed mid-write (kill -9)
 * leaves its temporary: dpfile_remove_stale_temps removes those whose writer is gone.
 *
 * Errors: -1 (or NULL) with errno set and one line in err ("PATH: REASON") when err is non-NULL.
 * Used by the engine's Lua bindings, the Lua host and plots/ alike: C11 and POSIX only. */
#ifndef DPFILE_SAFE_FILE_H
#define DPFILE_SAFE_FILE_H

#include <stddef.h>
#include <stdio.h>

/* The cap on the files dpprof reads whole: result JSON, config.json, index.json (256 MiB). */
#define DPFILE_MAX_READ ((size_t)256 << 20)

/* Reads the regular file at path (links followed) into a malloc'd buffer with a NUL after its
 * *len bytes (len may be NULL); refuses non-regular files and files over max_bytes (EFBIG). */
int dpfile_read(const char *path, size_t max_bytes, char **out, size_t *len, char *err, size_t errlen);

/* Opens the regular file at path (links followed) for reading as a stream ("rb"); NULL for a
 * non-regular file (never blocks on a FIFO) or when it cannot be opened. The caller fcloses. */
FILE *dpfile_open_read(const char *path, char *err, size_t errlen);

/* The FNV-1a 64-bit hash of the bytes of the regular file at path (links followed), read as a
 * stream, and its size; 0, or -1 and the reason. What ranks compare for a file each names by
 * its own path (a node-local copy of one data set). */
int dpfile_digest(const char *path, unsigned long long *hash, unsigned long long *size, char *err, size_t errlen);

/* 0 when path can be written and would replace nothing but a regular file: a non-empty file name
 * that is absent or a regular file (not a symbolic link, device, FIFO, socket or directory), in a
 * directory that exists and may be written in; else -1 and the reason. */
int dpfile_check_target(const char *path, char *err, size_t errlen);

/* An atomic write in progress: write to fp, then dpfile_writer_commit or dpfile_writer_abort. */
typedef struct dpfile_writer {
    FILE *fp;   /* the temporary, open for writing */
    char *path; /* the name being written (owned) */
    char *tmp;  /* the temporary's name (owned) */
} dpfile_writer;

/* Starts writing path: checks the target (dpfile_check_target) and creates a unique temporary
 * beside it. On failure w holds nothing to release. */
int dpfile_writer_open(dpfile_writer *w, const char *path, char *err, size_t errlen);

/* Flushes, fsyncs and closes the temporary and renames it over the path after checking the
 * target again; on any failure the temporary is removed and the path left as it was. Releases w
 * either way. */
int dpfile_writer_commit(dpfile_writer *w, char *err, size_t errlen);

/* Closes and removes the temporary; releases w. Safe on a released writer. */
void dpfile_writer_abort(dpfile_writer *w);

/* Writes len bytes of data to path atomically (dpfile_writer_open, fwrite, commit). */
int dpfile_write(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* Removes the temporaries in dir left by writers that died before committing: names of the form
 * ".<name>.<host>.<pid>.<n>.tmp" (dpfile_writer_open's) of this host whose process no longer exists
 * (kill(pid, 0) fails with ESRCH), regular files only. A live writer's temporary, another host's
 * (a shared filesystem) and any other name are left alone. Returns how many were removed, or -1
 * and the reason when dir cannot be read. */
int dpfile_remove_stale_temps(const char *dir, char *err, size_t errlen);

/* The longest host part of a temporary's name. */
#define DPFILE_HOST_MAX 32

/* Writes the host part of this host's temporaries' names into host (DPFILE_HOST_MAX + 1 bytes):
 * the host name with every byte but letters, digits and - made _, at most DPFILE_HOST_MAX bytes;
 * "host" when it has none. */
void dpfile_temp_host(char *host);

/* Takes an exclusive, non-blocking advisory lock (flock) on the lock file at path, created if
 * absent (never through a link), and writes `holder` into it for whoever finds it held. Returns
 * the descriptor that holds the lock (close it to release), or -1: errno EWOULDBLOCK when another
 * process holds it, with what that process wrote (its holder text) in err. */
int dpfile_lock(const char *path, const char *holder, char *err, size_t errlen);

#endif
