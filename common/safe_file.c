/* safe_file.c: reading and writing files named from outside; see safe_file.h. */
#include "safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Sets errno to e and err to the formatted line; returns -1. */
static int fail(char *err, size_t errlen, int e, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    errno = e;
    return -1;
}

/* What a file of this mode is, for messages ("a FIFO"). */
static const char *kind_of(mode_t m) {
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* ---- reading ------------------------------------------------------------------------------ */

/* A read-only descriptor on the regular file at path, or -1. The type is checked before the open
 * (so no device is opened) and again on the descriptor (so a name swapped in between is caught);
 * the open does not block on a FIFO. */
static int open_regular(const char *path, struct stat *st, char *err, size_t errlen) {
    if (stat(path, st) != 0) return fail(err, errlen, errno, "%s: cannot read: %s", path, strerror(errno));
    if (!S_ISREG(st->st_mode))
        return fail(err, errlen, EINVAL, "%s: cannot read: %s, not a regular file", path, kind_of(st->st_mode));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return fail(err, errlen, errno, "%s: cannot read: %s", path, strerror(errno));
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        int e = errno;
        close(fd);
        return fail(err, errlen, e ? e : EINVAL, "%s: cannot read: it changed into %s", path, kind_of(st->st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int dpfile_read(const char *path, size_t max_bytes, char **out, size_t *len, char *err, size_t errlen) {
    *out = NULL;
    if (len) *len = 0;
    struct stat st;
    int fd = open_regular(path, &st, err, errlen);
    if (fd < 0) return -1;
    if ((uintmax_t)st.st_size > (uintmax_t)max_bytes) {
        close(fd);
        return fail(err, errlen, EFBIG, "%s: cannot read: %jd bytes, more than the %zu allowed", path,
                    (intmax_t)st.st_size, max_bytes);
    }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return fail(err, errlen, ENOMEM, "%s: cannot read: out of memory", path);
    }
    for (;;) { /* until end of file: the file may have grown since fstat, up to the cap */
        if (n == cap) {
            if (cap > max_bytes) {
                free(buf);
                close(fd);
                return fail(err, errlen, EFBIG, "%s: cannot read: more than the %zu bytes allowed", path, max_bytes);
            }
            size_t bigger = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
            char *p = realloc(buf, bigger + 1);
            if (!p) {
                free(buf);
                close(fd);
                return fail(err, errlen, ENOMEM, "%s: cannot read: out of memory", path);
            }
            buf = p, cap = bigger;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return fail(err, errlen, e, "%s: cannot read: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max_bytes) {
        free(buf);
        return fail(err, errlen, EFBIG, "%s: cannot read: more than the %zu bytes allowed", path, max_bytes);
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return 0;
}

FILE *dpfile_open_read(const char *path, char *err, size_t errlen) {
    struct stat st;
    int fd = open_regular(path, &st, err, errlen);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        fail(err, errlen, e, "%s: cannot read: %s", path, strerror(e));
    }
    return f;
}

int dpfile_digest(const char *path, unsigned long long *hash, unsigned long long *size, char *err, size_t errlen) {
    struct stat st;
    int fd = open_regular(path, &st, err, errlen);
    if (fd < 0) return -1;
    unsigned long long h = 14695981039346656037ull, n = 0; /* FNV-1a 64: offset basis, prime below */
    unsigned char buf[1 << 14];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return fail(err, errlen, e, "%s: cannot read: %s", path, strerror(e));
        }
        if (r == 0) break;
        for (ssize_t i = 0; i < r; i++) h = (h ^ buf[i]) * 1099511628211ull;
        n += (unsigned long long)r;
    }
    close(fd);
    *hash = h, *size = n;
    return 0;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* 0 when the directory that would hold path (its name up to the last '/'; "." without one) exists,
 * is a directory and may be written in; else -1 and the reason. */
static int check_parent(const char *path, char *err, size_t errlen) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        strcpy(dir, ".");
    else if (slash == path)
        strcpy(dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = '\0';
    else
        return fail(err, errlen, ENAMETOOLONG, "%s: cannot write: the name is too long", path);
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        if (e == ENOENT) return fail(err, errlen, e, "%s: cannot write: the directory %s does not exist", path, dir);
        return fail(err, errlen, e, "%s: cannot write: directory %s: %s", path, dir, strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return fail(err, errlen, ENOTDIR, "%s: cannot write: %s is %s, not a directory", path, dir,
                    kind_of(st.st_mode));
    if (access(dir, W_OK | X_OK) != 0)
        return fail(err, errlen, errno, "%s: cannot write in the directory %s: %s", path, dir, strerror(errno));
    return 0;
}

int dpfile_check_target(const char *path, char *err, size_t errlen) {
    if (!path || !*path) return fail(err, errlen, EINVAL, "cannot write a file with an empty name");
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return fail(err, errlen, EISDIR, "%s: cannot write: the name is a directory", path);
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return check_parent(path, err, errlen);
        return fail(err, errlen, errno, "%s: cannot write: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return fail(err, errlen, EEXIST,
                    "%s: refusing to write: it is %s; dpprof replaces only regular files (remove it or "
                    "choose another name)",
                    path, kind_of(st.st_mode));
    return check_parent(path, err, errlen); /* the file is replaced by a rename in its directory */
}

static atomic_ulong tmp_counter;

void dpfile_temp_host(char *host) {
    char name[256] = {0};
    size_t n = 0;
    if (gethostname(name, sizeof name - 1) == 0) {
        for (; name[n] && n < DPFILE_HOST_MAX; n++) {
            char c = name[n];
            int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
            host[n] = ok ? c : '_';
        }
    }
    if (n == 0) memcpy(host, "host", n = 4);
    host[n] = '\0';
}

/* The pid of a temporary's writer when name is ".<name>.<host>.<pid>.<n>.tmp" with this host's
 * host part, else 0. */
static long temp_writer(const char *name, const char *host) {
    size_t len = strlen(name), hl = strlen(host);
    if (len < 5 || name[0] != '.' || strcmp(name + len - 4, ".tmp") != 0) return 0;
    size_t end = len - 4; /* name[0, end) ends with ".<host>.<pid>.<n>" */
    size_t i = end;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') i--;
    if (i == end || i == 0 || name[i - 1] != '.') return 0; /* <n> */
    size_t pid_end = --i;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') i--;
    if (i == pid_end || pid_end - i > 9 || i == 0 || name[i - 1] != '.') return 0; /* <pid> */
    long pid = strtol(name + i, NULL, 10);
    size_t host_end = --i;
    if (host_end < hl + 2 || name[host_end - hl - 1] != '.' || memcmp(name + host_end - hl, host, hl) != 0) return 0;
    if (host_end - hl - 1 < 2) return 0; /* an empty <name> */
    return pid > 0 ? pid : 0;
}

int dpfile_remove_stale_temps(const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir && *dir ? dir : ".");
    if (!d) return fail(err, errlen, errno, "%s: cannot read the directory: %s", dir, strerror(errno));
    char host[DPFILE_HOST_MAX + 1];
    dpfile_temp_host(host);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = temp_writer(e->d_name, host);
        if (pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
    }
    closedir(d);
    return removed;
}

int dpfile_writer_open(dpfile_writer *w, const char *path, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    if (!path || !*path) return fail(err, errlen, EINVAL, "cannot write a file with an empty name");
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return fail(err, errlen, EISDIR, "%s: cannot write: the name is a directory", path);
    if (dpfile_check_target(path, err, errlen) != 0) return -1;
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0; /* with its '/' */
    size_t cap = dir_len + strlen(base) + 100;
    w->path = malloc(strlen(path) + 1);
    w->tmp = malloc(cap);
    if (!w->path || !w->tmp) {
        free(w->path), free(w->tmp);
        memset(w, 0, sizeof *w);
        return fail(err, errlen, ENOMEM, "%s: cannot write: out of memory", path);
    }
    strcpy(w->path, path);
    int fd = -1, e = 0;
    char host[DPFILE_HOST_MAX + 1];
    dpfile_temp_host(host);
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        /* a long name is shortened so the temporary stays within NAME_MAX */
        snprintf(w->tmp, cap, "%.*s.%.64s.%s.%ld.%lu.tmp", (int)dir_len, path, base, host,
                 (long)getpid(), (unsigned long)atomic_fetch_add(&tmp_counter, 1));
        fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        e = errno;
        if (fd < 0 && e != EEXIST) break;
    }
    if (fd >= 0 && !(w->fp = fdopen(fd, "wb"))) {
        e = errno;
        close(fd);
        unlink(w->tmp);
        fd = -1;
    }
    if (fd < 0) {
        fail(err, errlen, e, "%s: cannot write: %s", path, strerror(e));
        free(w->path), free(w->tmp);
        memset(w, 0, sizeof *w);
        errno = e;
        return -1;
    }
    return 0;
}

static void writer_release(dpfile_writer *w) {
    free(w->path), free(w->tmp);
    memset(w, 0, sizeof *w);
}

int dpfile_writer_commit(dpfile_writer *w, char *err, size_t errlen) {
    if (!w->fp) return fail(err, errlen, EINVAL, "cannot commit a write that was not started");
    int e = 0;
    if (fflush(w->fp) != 0 || ferror(w->fp)) e = errno ? errno : EIO;
    if (!e && fsync(fileno(w->fp)) != 0 && errno != EINVAL && errno != EROFS) e = errno;
    if (fclose(w->fp) != 0 && !e) e = errno ? errno : EIO;
    w->fp = NULL;
    int rc = 0;
    if (e) {
        rc = fail(err, errlen, e, "%s: cannot write: %s", w->path, strerror(e));
    } else if (dpfile_check_target(w->path, err, errlen) != 0) {
        rc = -1; /* something other than a regular file appeared at the name meanwhile */
    } else if (rename(w->tmp, w->path) != 0) {
        e = errno;
        rc = fail(err, errlen, e, "%s: cannot write: cannot rename %s over it: %s", w->path, w->tmp, strerror(e));
    }
    if (rc != 0) {
        e = errno;
        unlink(w->tmp);
        errno = e;
    }
    writer_release(w);
    return rc;
}

void dpfile_writer_abort(dpfile_writer *w) {
    if (w->fp) {
        fclose(w->fp);
        unlink(w->tmp);
    }
    writer_release(w);
}

int dpfile_write(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    dpfile_writer w;
    if (dpfile_writer_open(&w, path, err, errlen) != 0) return -1;
    if (len && fwrite(data, 1, len, w.fp) != len) {
        int e = errno ? errno : EIO;
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", w.tmp);
        dpfile_writer_abort(&w);
        return fail(err, errlen, e, "%s: cannot write: %s (to %s)", path, strerror(e), tmp);
    }
    return dpfile_writer_commit(&w, err, errlen);
}

/* ---- locks -------------------------------------------------------------------------------- */

int dpfile_lock(const char *path, const char *holder, char *err, size_t errlen) {
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP) return fail(err, errlen, e, "%s: cannot lock: it is a symbolic link", path);
        return fail(err, errlen, e, "%s: cannot lock: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, errlen, EINVAL, "%s: cannot lock: %s, not a regular file", path, kind_of(st.st_mode));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char text[256] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, text, sizeof text - 1, 0) : -1;
        close(fd);
        if (n > 0) {
            text[n] = '\0';
            text[strcspn(text, "\n")] = '\0';
        }
        if (e == EWOULDBLOCK) return fail(err, errlen, e, "%s", n > 0 ? text : "another process (it left no note)");
        return fail(err, errlen, e, "%s: cannot lock: %s", path, strerror(e));
    }
    size_t n = holder ? strlen(holder) : 0;
    if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, holder, n, 0) != (ssize_t)n)) {
        /* the lock holds without the note; a second comer just learns less */
    }
    return fd;
}
