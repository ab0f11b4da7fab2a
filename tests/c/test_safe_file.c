/* test_safe_file: common/safe_file.c against what a hostile directory can hold. Reads take only
 * regular files (links followed), never block on a FIFO and stop at the cap; writes never follow
 * or replace a link, device, FIFO or directory at the name, leave no temporary behind when they
 * fail (a file-size limit stands in for a full disk), and two writers of one name never share a
 * temporary; a lock held by one descriptor is refused to the next with the holder's note. A
 * writer killed mid-write leaves its temporary, and dpfile_remove_stale_temps removes it and
 * nothing else: not a live writer's, not another host's, not a directory or another name. */
#include "check.h"
#include "safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static void put(const char *name, const char *text) {
    char p[512];
    path_in(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* The whole file at name (static buffer), "" when absent. */
static const char *content(const char *name) {
    static char buf[4096];
    char p[512];
    path_in(p, sizeof p, name);
    buf[0] = '\0';
    FILE *f = fopen(p, "rb");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Entries of dir whose name contains ".tmp". */
static int temporaries(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c '\\.tmp' || true", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

static int is_link(const char *name) {
    char p[512];
    struct stat st;
    path_in(p, sizeof p, name);
    return lstat(p, &st) == 0 && S_ISLNK(st.st_mode);
}

static void test_read(void) {
    char p[512], err[512], *text;
    size_t len;
    put("result.json", "{\"status\": \"ok\"}");
    path_in(p, sizeof p, "result.json");
    CHECK(dpfile_read(p, DPFILE_MAX_READ, &text, &len, err, sizeof err) == 0);
    CHECK(text && len == 16 && strcmp(text, "{\"status\": \"ok\"}") == 0);
    free(text);
    /* the cap: 16 bytes are more than 15 */
    CHECK(dpfile_read(p, 15, &text, &len, err, sizeof err) == -1 && errno == EFBIG && text == NULL);
    CHECK(strstr(err, "16 bytes, more than the 15 allowed") != NULL);
    /* a link to a regular file is read (checkpoint caches are links to blobs) */
    char link[512];
    path_in(link, sizeof link, "linked.json");
    CHECK(symlink(p, link) == 0);
    CHECK(dpfile_read(link, DPFILE_MAX_READ, &text, &len, err, sizeof err) == 0 && len == 16);
    free(text);
    /* a link to /dev/zero would read until memory runs out: refused as a device */
    path_in(link, sizeof link, "zero.json");
    CHECK(symlink("/dev/zero", link) == 0);
    CHECK(dpfile_read(link, DPFILE_MAX_READ, &text, &len, err, sizeof err) == -1);
    CHECK(strstr(err, "a character device, not a regular file") != NULL);
    /* a FIFO would block the open and the read forever: refused at once */
    path_in(p, sizeof p, "fifo.json");
    CHECK(mkfifo(p, 0600) == 0);
    CHECK(dpfile_read(p, DPFILE_MAX_READ, &text, &len, err, sizeof err) == -1);
    CHECK(strstr(err, "fifo.json: cannot read: a FIFO, not a regular file") != NULL);
    CHECK(dpfile_open_read(p, err, sizeof err) == NULL);
    /* a directory, and a name that is not there */
    CHECK(dpfile_read(dir, DPFILE_MAX_READ, &text, &len, err, sizeof err) == -1 && strstr(err, "a directory"));
    path_in(p, sizeof p, "absent.json");
    CHECK(dpfile_read(p, DPFILE_MAX_READ, &text, &len, err, sizeof err) == -1 && errno == ENOENT);
    CHECK(strstr(err, "absent.json: cannot read: No such file or directory") != NULL);
    FILE *f = dpfile_open_read(link, err, sizeof err);
    CHECK(f == NULL);
    path_in(p, sizeof p, "result.json");
    f = dpfile_open_read(p, err, sizeof err);
    CHECK(f != NULL && fgetc(f) == '{');
    if (f) fclose(f);
}

/* the digest the ranks compare: FNV-1a 64 of the bytes (its published test values), streamed over
 * a file longer than the reader's buffer; a FIFO refused as the reader refuses it */
static void test_digest(void) {
    char p[512], err[512];
    unsigned long long h = 0, n = 1;
    put("empty.bin", "");
    path_in(p, sizeof p, "empty.bin");
    CHECK(dpfile_digest(p, &h, &n, err, sizeof err) == 0 && n == 0 && h == 0xcbf29ce484222325ull);
    put("a.bin", "a");
    path_in(p, sizeof p, "a.bin");
    CHECK(dpfile_digest(p, &h, &n, err, sizeof err) == 0 && n == 1 && h == 0xaf63dc4c8601ec8cull);
    path_in(p, sizeof p, "long.bin");
    FILE *f = fopen(p, "wb");
    unsigned long long want = 0xcbf29ce484222325ull;
    for (int i = 0; i < 100000; i++) {
        unsigned char b = (unsigned char)(i * 31 + 7);
        fputc(b, f);
        want = (want ^ b) * 1099511628211ull;
    }
    fclose(f);
    CHECK(dpfile_digest(p, &h, &n, err, sizeof err) == 0 && n == 100000 && h == want);
    path_in(p, sizeof p, "fifo.json");
    CHECK(dpfile_digest(p, &h, &n, err, sizeof err) == -1 && strstr(err, "a FIFO, not a regular file"));
}

static void test_write(void) {
    char p[512], err[512];
    /* new file, then over a regular file */
    path_in(p, sizeof p, "out.json");
    CHECK(dpfile_write(p, "one", 3, err, sizeof err) == 0);
    CHECK(strcmp(content("out.json"), "one") == 0);
    CHECK(dpfile_write(p, "two!", 4, err, sizeof err) == 0);
    CHECK(strcmp(content("out.json"), "two!") == 0);
    /* a planted link to a victim: neither the victim nor the link is touched */
    put("victim.txt", "precious");
    char link[512], victim[512];
    path_in(victim, sizeof victim, "victim.txt");
    path_in(link, sizeof link, "summary.txt");
    CHECK(symlink(victim, link) == 0);
    CHECK(dpfile_write(link, "overwritten", 11, err, sizeof err) == -1);
    CHECK(strstr(err, "summary.txt: refusing to write: it is a symbolic link") != NULL);
    CHECK(strcmp(content("victim.txt"), "precious") == 0 && is_link("summary.txt"));
    /* a dangling link would create its target elsewhere */
    path_in(link, sizeof link, "chart.png");
    char elsewhere[512];
    path_in(elsewhere, sizeof elsewhere, "elsewhere.png");
    CHECK(symlink(elsewhere, link) == 0);
    CHECK(dpfile_write(link, "png", 3, err, sizeof err) == -1 && access(elsewhere, F_OK) != 0);
    /* a FIFO (a plain open for writing would block), a directory, a device */
    path_in(p, sizeof p, "pipe.json");
    CHECK(mkfifo(p, 0600) == 0);
    CHECK(dpfile_write(p, "x", 1, err, sizeof err) == -1 && strstr(err, "it is a FIFO"));
    CHECK(dpfile_write(dir, "x", 1, err, sizeof err) == -1);
    CHECK(dpfile_write("/dev/full", "x", 1, err, sizeof err) == -1 && strstr(err, "it is a character device"));
    struct stat st;
    CHECK(lstat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)); /* still the device */
    CHECK(dpfile_write("", "x", 1, err, sizeof err) == -1 && strstr(err, "empty name"));
    CHECK(temporaries() == 0);

    /* two writers of one name have their own temporaries; the last commit wins, whole */
    dpfile_writer a, b;
    path_in(p, sizeof p, "shared.json");
    CHECK(dpfile_writer_open(&a, p, err, sizeof err) == 0);
    CHECK(dpfile_writer_open(&b, p, err, sizeof err) == 0);
    CHECK(a.tmp && b.tmp && strcmp(a.tmp, b.tmp) != 0);
    fputs("from a", a.fp);
    fputs("from b", b.fp);
    CHECK(dpfile_writer_commit(&a, err, sizeof err) == 0);
    CHECK(strcmp(content("shared.json"), "from a") == 0);
    CHECK(dpfile_writer_commit(&b, err, sizeof err) == 0);
    CHECK(strcmp(content("shared.json"), "from b") == 0);
    CHECK(temporaries() == 0);
    /* a link planted between open and commit is refused at the commit */
    CHECK(dpfile_writer_open(&a, p, err, sizeof err) == 0);
    fputs("late", a.fp);
    CHECK(unlink(p) == 0 && symlink(victim, p) == 0);
    CHECK(dpfile_writer_commit(&a, err, sizeof err) == -1 && strstr(err, "symbolic link"));
    CHECK(strcmp(content("victim.txt"), "precious") == 0 && temporaries() == 0);
    /* abort removes the temporary */
    path_in(p, sizeof p, "aborted.json");
    CHECK(dpfile_writer_open(&a, p, err, sizeof err) == 0);
    dpfile_writer_abort(&a);
    CHECK(temporaries() == 0 && access(p, F_OK) != 0);

    /* a full disk (here: a 64 KiB file-size limit) fails the write, keeps the old file whole
     * and leaves no temporary */
    path_in(p, sizeof p, "out.json");
    struct rlimit old, small = {65536, 65536};
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    size_t big = 1 << 20;
    char *data = malloc(big);
    memset(data, 'x', big);
    int rc = dpfile_write(p, data, big, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    free(data);
    CHECK(rc == -1 && errno == EFBIG && strstr(err, "out.json: cannot write"));
    CHECK(strcmp(content("out.json"), "two!") == 0);
    CHECK(temporaries() == 0);
}

static void test_lock(void) {
    char p[512], err[512];
    path_in(p, sizeof p, ".lock");
    int fd = dpfile_lock(p, "pid 1 on here since now\n", err, sizeof err);
    CHECK(fd >= 0);
    /* a second open file description conflicts, as another process's would */
    CHECK(dpfile_lock(p, "pid 2", err, sizeof err) == -1 && errno == EWOULDBLOCK);
    CHECK(strcmp(err, "pid 1 on here since now") == 0);
    close(fd);
    fd = dpfile_lock(p, "pid 2", err, sizeof err);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    /* never through a link */
    char link[512], victim[512];
    path_in(link, sizeof link, ".lock2");
    path_in(victim, sizeof victim, "victim.txt");
    CHECK(symlink(victim, link) == 0);
    CHECK(dpfile_lock(link, "x", err, sizeof err) == -1 && strstr(err, "symbolic link"));
    CHECK(strcmp(content("victim.txt"), "precious") == 0);
}

static int exists(const char *name) {
    char p[512];
    struct stat st;
    path_in(p, sizeof p, name);
    return lstat(p, &st) == 0;
}

static void test_stale_temps(void) {
    char p[512], err[1024], host[DPFILE_HOST_MAX + 1];
    dpfile_temp_host(host);
    CHECK(strlen(host) >= 1 && strlen(host) <= DPFILE_HOST_MAX && !strchr(host, '.'));
    CHECK(temporaries() == 0);
    /* a writer dies mid-write (as under kill -9): its temporary stays */
    path_in(p, sizeof p, "big.json");
    pid_t child = fork();
    if (child == 0) {
        dpfile_writer w;
        if (dpfile_writer_open(&w, p, NULL, 0) != 0) _exit(1);
        fputs("half a result", w.fp);
        fflush(w.fp);
        _exit(0); /* no commit, no abort */
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char dead[256] = "", prefix[256];
    snprintf(prefix, sizeof prefix, ".big.json.%s.%ld.", host, (long)child);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) snprintf(dead, sizeof dead, "%s", e->d_name);
    if (d) closedir(d);
    CHECK(dead[0] && strcmp(dead + strlen(dead) - 4, ".tmp") == 0 && exists(dead));
    /* a live writer's (this process's), another host's, a directory and other names stay */
    dpfile_writer live;
    path_in(p, sizeof p, "live.json");
    CHECK(dpfile_writer_open(&live, p, err, sizeof err) == 0);
    fputs("live", live.fp);
    char other_host[256], dir_named[256], old_form[256], pid1[256];
    snprintf(other_host, sizeof other_host, ".big.json.%sx.%ld.1.tmp", host, (long)child);
    snprintf(dir_named, sizeof dir_named, ".d.json.%s.%ld.2.tmp", host, (long)child);
    snprintf(old_form, sizeof old_form, ".big.json.%ld.3.tmp", (long)child);
    snprintf(pid1, sizeof pid1, ".init.json.%s.1.4.tmp", host); /* pid 1 is alive */
    put(other_host, "x");
    put(old_form, "x");
    put(pid1, "x");
    path_in(p, sizeof p, dir_named);
    CHECK(mkdir(p, 0700) == 0);
    put("notes.tmp", "x");
    CHECK(dpfile_remove_stale_temps(dir, err, sizeof err) == 1);
    CHECK(!exists(dead));
    CHECK(exists(other_host) && exists(old_form) && exists(pid1) && exists(dir_named) && exists("notes.tmp"));
    CHECK(dpfile_writer_commit(&live, err, sizeof err) == 0 && strcmp(content("live.json"), "live") == 0);
    CHECK(dpfile_remove_stale_temps(dir, err, sizeof err) == 0);
    CHECK(dpfile_remove_stale_temps("/nonexistent-dpprof-dir", err, sizeof err) == -1 &&
          strstr(err, "/nonexistent-dpprof-dir: cannot read the directory"));
    /* leave the directory as the next test found it */
    const char *planted[] = {other_host, old_form, pid1, "notes.tmp", "live.json"};
    for (size_t i = 0; i < sizeof planted / sizeof *planted; i++) {
        path_in(p, sizeof p, planted[i]);
        unlink(p);
    }
    path_in(p, sizeof p, dir_named);
    rmdir(p);
}

/* A name that cannot be written is refused by the check, before any work that would write it: an
 * empty name, a directory's name, a missing directory, a file where the directory should be. */
static void test_check_target(void) {
    char p[512], err[512];
    CHECK(dpfile_check_target("", err, sizeof err) == -1);
    CHECK(strcmp(err, "cannot write a file with an empty name") == 0);
    path_in(p, sizeof p, "");
    CHECK(dpfile_check_target(p, err, sizeof err) == -1 && strstr(err, "cannot write: the name is a directory"));
    path_in(p, sizeof p, "missing/x.json");
    CHECK(dpfile_check_target(p, err, sizeof err) == -1 && errno == ENOENT);
    CHECK(strstr(err, "x.json: cannot write: the directory ") && strstr(err, "/missing does not exist"));
    put("plain.txt", "x");
    path_in(p, sizeof p, "plain.txt/x.json");
    CHECK(dpfile_check_target(p, err, sizeof err) == -1 && errno == ENOTDIR);
    path_in(p, sizeof p, "new.json");
    CHECK(dpfile_check_target(p, err, sizeof err) == 0);
    CHECK(dpfile_check_target("relative-new.json", err, sizeof err) == 0);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dpprof-test-safe-file-%ld", (long)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0) return 1;
    test_read();
    test_digest();
    test_write();
    test_check_target();
    test_lock();
    test_stale_temps();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    return check_report("test_safe_file");
}
