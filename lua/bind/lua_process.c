/* lua_process.c: running a function in a forked child, as scripts see it (the host's time,
 * sleep, pid and environment are lua_host.c's; mkdir_p and list_dir lua_files.c's).
 *
 *   dpprof.isolate(fn, ... [, {timeout=, grace=, env=, threads=}]) -> result, info
 *       runs fn(...) in a forked child and returns what it returned (a table: see below); the
 *       last argument is taken as options only when it is a table whose keys are all option names.
 *       env = {NAME = value}: set in the child before fn runs (CUDA_VISIBLE_DEVICES: the parent
 *       never started CUDA, so the child's CUDA sees only those devices); threads = n: the child's
 *       CPU thread count, as dpprof.threads(n) (and OMP_NUM_THREADS)
 *   dpprof.isolate_start(fn, ... [, options]) -> child: the same child, without waiting for it;
 *       child:finished(), child:pid(), child:result() -> result, info once finished (once; nil
 *       before), child:stop() (SIGTERM, SIGKILL after grace); closing or collecting an unfinished
 *       child kills it
 *   dpprof.isolate_wait(children [, seconds]) -> how many of the list have finished: waits until
 *       one has (or seconds passed), reading their pipes and stopping those past their timeout;
 *       SIGINT or SIGTERM stops them all and raises, as for isolate
 *   dpprof.oom_details(message) -> the OOM record {requested_bytes, category, module, live_bytes,
 *       total_live_bytes, limit_bytes, device} (dpl_push_oom, as memory.last_oom) when message is
 *       the engine's out-of-memory error, else nil
 *   dpprof.cuda_initialised() -> true when the CUDA driver was initialised in this process
 *   dpprof.testing_crash(how) kills this process with SIGSEGV ("segv"), abort() ("abort") or
 *       SIGKILL ("kill"): for the tests of isolate only
 *
 * isolate: the parent never touches the device (it refuses to fork once CUDA is in the process),
 * and ends its OpenMP thread pool before fork (a child cannot use its parent's). The child (its
 * own process group, killed if the parent dies) restarts the engine clock, clears the inherited
 * ledger, peaks, snapshots and event logs, runs fn under a traceback handler, encodes an envelope {status, value |
 * message, traceback, oom} as JSON (NaN and infinities as the strings "NaN", "Infinity", "-Infinity") and writes it to
 * a pipe with an 8-byte length prefix, then _exit()s (the parent's atexit handlers never run twice). The parent reads
 * with poll() against the deadline, stops the child's process group on timeout or on SIGINT/SIGTERM (SIGTERM, then
 * SIGKILL after `grace` seconds), reaps it and maps the outcome to a status:
 *   ok       fn returned: its table, with status = "ok" added when absent ({status, value} for a
 *            value that is not a table)
 *   error    fn raised: {status, message, traceback}
 *   oom      fn raised the engine's out-of-memory error: also oom = oom_details(message)
 *   crashed  the child died by a signal ({signal}) or exited without a result ({exit_code})
 *   timeout  the child ran past timeout seconds and was stopped
 * info = {pid, wall_s, exit_code | signal, killed_with, max_rss_bytes}. */
#include "lua_engine.h"
#include "lua_json.h"

#include "clock.h"
#include "device.h"
#include "dpprof_engine.h"
#include "error.h"
#include "ledger.h"
#include "lua_util.h"
#include "memory.h"
#include "scope.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_MT "dpprof.isolate.child"

/* ---- is CUDA in this process? ------------------------------------------------------------- */

/* 1 when the CUDA driver was initialised here (cuInit: a device was used, or probed, e.g. for
 * device="auto"): a forked child could not use the GPU. The driver library may be loaded
 * without being initialised (the runtime loads it early), so ask it: before cuInit, every driver
 * call returns CUDA_ERROR_NOT_INITIALIZED, and asking initialises nothing. */
static int cuda_in_process(void) {
    if (dp_device_initialised(DP_DEV_CUDA)) return 1;
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD); /* only if already loaded */
    if (!lib) return 0;
    int (*device_count)(int *);
    *(void **)&device_count = dlsym(lib, "cuDeviceGetCount");
    int n = 0, initialised = device_count && device_count(&n) == 0; /* 0: CUDA_SUCCESS */
    dlclose(lib);
    return initialised;
}

static int l_cuda_initialised(lua_State *L) {
    lua_pushboolean(L, cuda_in_process());
    return 1;
}

/* ---- out-of-memory details --------------------------------------------------------------- */

/* Pushes the OOM details and returns 1 when msg carries the engine's last error and that error
 * is an out-of-memory one recorded by an initialised device's allocator; else pushes nothing. */
static int push_oom_details(lua_State *L, const char *msg) {
    const char *engine_msg = dp_error_message();
    if (dp_error_code() != DP_EOOM || !msg || !*engine_msg || !strstr(msg, engine_msg)) return 0;
    static const dp_device_kind order[] = {DP_DEV_CUDA, DP_DEV_PLAN, DP_DEV_CPU};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        dp_device *dev;
        if (!dp_device_initialised(order[i]) || dp_device_get(order[i], &dev) != DP_OK) continue;
        const dp_oom_info *o = dp_mem_last_oom(dev->mem);
        if (!o->valid) continue;
        dpl_push_oom(L, o, dp_device_kind_name(order[i]));
        return 1;
    }
    return 0;
}

static int l_oom_details(lua_State *L) {
    if (!push_oom_details(L, lua_tostring(L, 1))) lua_pushnil(L);
    return 1;
}

/* ---- the child ---------------------------------------------------------------------------- */

/* Message handler: {message=, traceback=}. */
static int child_msghandler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    lua_createtable(L, 0, 2);
    lua_pushstring(L, msg), lua_setfield(L, -2, "message");
    luaL_traceback(L, L, NULL, 1);
    lua_setfield(L, -2, "traceback");
    return 1;
}

/* Runs fn(args...) (the whole stack) and returns the envelope's JSON text. Raises when the
 * result cannot be encoded (the caller reports that instead). */
static int child_body(lua_State *L) {
    int nargs = lua_gettop(L) - 1;
    lua_pushcfunction(L, child_msghandler);
    lua_insert(L, 1);
    int status = lua_pcall(L, nargs, 1, 1);
    lua_createtable(L, 0, 5);
    if (status == LUA_OK) {
        lua_pushliteral(L, "ok"), lua_setfield(L, -2, "status");
        lua_pushvalue(L, -2), lua_setfield(L, -2, "value");
    } else {
        int err = lua_gettop(L) - 1; /* the handler's table, or a string where Lua skips it (memory errors) */
        if (lua_istable(L, err)) {
            lua_getfield(L, err, "traceback"), lua_setfield(L, -2, "traceback");
            lua_getfield(L, err, "message");
        } else {
            lua_pushstring(L, lua_isstring(L, err) ? lua_tostring(L, err) : "(no message)");
        }
        lua_pushvalue(L, -1), lua_setfield(L, -3, "message");
        int oom = push_oom_details(L, lua_tostring(L, -1)); /* envelope, message[, oom] */
        if (oom) lua_setfield(L, -3, "oom");
        lua_pop(L, 1);
        lua_pushstring(L, oom ? "oom" : "error"), lua_setfield(L, -2, "status");
    }
    /* a NaN the function returned (a config echo, ctx.extra) must not cost the whole result */
    dpl_json_encode(L, -1, DPL_JSON_NONFINITE_STRINGS, "dpprof.isolate: the child's result");
    return 1;
}

/* The envelope of a result that could not be encoded. */
static int child_encode_failure(lua_State *L) {
    lua_createtable(L, 0, 2);
    lua_pushliteral(L, "error"), lua_setfield(L, -2, "status");
    lua_pushvalue(L, 1), lua_setfield(L, -2, "message");
    dpl_json_encode(L, -1, 0, "dpprof.isolate");
    return 1;
}

static int write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Clears what the child inherited from the parent's measurements. */
static void child_fresh_start(void) {
    dp_clock_reset();
    dp_ledger_reset();
    dp_error_clear();
    for (int k = 0; k < DP_DEV_KIND_COUNT; k++) {
        dp_device *dev;
        if (!dp_device_initialised((dp_device_kind)k) || dp_device_get((dp_device_kind)k, &dev) != DP_OK) continue;
        dp_mem_reset_peak(dev->mem);
        dp_mem_clear_snapshots(dev->mem);
        dp_mem_clear_events(dev->mem);
    }
}

/* Sets this process's CPU thread count to n: the CPU backend's one count (dpprof.threads: the
 * OpenMP team, OpenBLAS single-threaded inside it), and the variable a program started later reads. */
static void set_cpu_threads(int n) {
    char v[16];
    snprintf(v, sizeof v, "%d", n);
    setenv("OMP_NUM_THREADS", v, 1);
    (void)dp_engine_set_threads(n); /* n was checked: 1 .. 4096 */
}

/* In the child, before anything else runs: the options' env (CUDA_VISIBLE_DEVICES must be set
 * before CUDA starts, and the parent never started it) and the thread count. */
static void child_apply_options(lua_State *L, int options, int threads) {
    if (lua_getfield(L, options, "env") == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            lua_pushvalue(L, -1); /* a number stays a number in the table: convert a copy */
            setenv(lua_tostring(L, -3), lua_tostring(L, -1), 1);
            lua_pop(L, 2);
        }
    }
    lua_pop(L, 1);
    if (threads > 0) set_cpu_threads(threads);
}

/* The child: runs fn (top of the stack: fn, nargs arguments), writes the result, exits. Never
 * returns to the parent's Lua code. */
static _Noreturn void child_main(lua_State *L, int fd, int nargs, pid_t parent) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(70); /* the parent died before prctl */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    child_fresh_start();
    lua_pushcfunction(L, child_body);
    lua_insert(L, -(nargs + 2));
    const char *text = NULL;
    size_t len = 0;
    if (lua_pcall(L, nargs + 1, 1, 0) == LUA_OK) {
        text = lua_tolstring(L, -1, &len);
    } else {
        lua_pushcfunction(L, child_encode_failure);
        lua_insert(L, -2);
        if (lua_pcall(L, 1, 1, 0) == LUA_OK) text = lua_tolstring(L, -1, &len);
    }
    fflush(NULL); /* the child's own output first; the parent flushed its buffers before fork */
    if (!text) _exit(71);
    uint64_t n = len;
    if (write_all(fd, &n, sizeof n) != 0 || write_all(fd, text, len) != 0) _exit(72);
    close(fd);
    _exit(0);
}

/* ---- the parent --------------------------------------------------------------------------- */

typedef struct wait_outcome {
    int reaped, status; /* waitpid status when reaped */
    int timed_out, killed_with, no_memory;
    struct rusage usage;
    double wall_s;
} wait_outcome;

/* Owns the child until it is reaped and the pipe's bytes; __gc (and __close) stops and reaps a
 * child left behind by an error, so no zombie or orphan outlives its handle. */
typedef struct child_box {
    pid_t pid;       /* > 0 until reaped */
    pid_t first_pid; /* the child's id, kept after it is reaped */
    pid_t owner;     /* the process that forked it: a sibling forked later holds a copy of this box */
    int fd;          /* read end of the pipe, -1 when closed */
    int reading;     /* the pipe may still bring bytes */
    int finished;    /* reaped: the outcome below is final */
    int taken;       /* result() has turned the bytes into a result */
    char *buf;
    size_t len, cap;
    double start, timeout, grace; /* monotonic seconds; timeout <= 0: none */
    wait_outcome w;
} child_box;

static void kill_group(pid_t pid, int sig) {
    kill(-pid, sig); /* the child's group (it made itself leader) */
    kill(pid, sig);  /* in case it had not yet */
}

static int child_gc(lua_State *L) {
    child_box *c = lua_touserdata(L, 1);
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    if (c->pid > 0 && c->owner == getpid()) { /* never a sibling's: only its parent stops it */
        kill_group(c->pid, SIGKILL);
        while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR) {}
        c->pid = 0;
    }
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
    return 0;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t interrupted_by;

static void on_interrupt(int sig) { interrupted_by = sig; }

static int try_reap(child_box *c, wait_outcome *w, int options) {
    for (;;) {
        pid_t r = wait4(c->pid, &w->status, options, &w->usage);
        if (r < 0 && errno == EINTR) continue;
        if (r == c->pid) {
            w->reaped = 1;
            c->pid = 0;
        }
        return w->reaped;
    }
}

/* Reads what is available: 1 when something was read (or a signal came), 0 at end of file or on
 * an error, -1 when nothing is available (non-blocking descriptor). */
static int read_some(child_box *c, wait_outcome *w) {
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 262144;
        char *nb = realloc(c->buf, cap);
        if (!nb) {
            w->no_memory = 1;
            return 0;
        }
        c->buf = nb;
        c->cap = cap;
    }
    ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
    if (r < 0) return errno == EINTR ? 1 : errno == EAGAIN ? -1 : 0;
    if (r == 0) return 0;
    c->len += (size_t)r;
    return 1;
}

/* Stops the child's group: SIGTERM, then SIGKILL after grace seconds; what is left of the group
 * once the child is reaped (a grandchild that ignores SIGTERM) gets SIGKILL. */
static void stop_child(child_box *c, wait_outcome *w, double grace) {
    pid_t pid = c->pid;
    kill_group(c->pid, SIGTERM);
    w->killed_with = SIGTERM;
    double until = mono_s() + grace;
    while (!try_reap(c, w, WNOHANG) && mono_s() < until) poll(NULL, 0, 20);
    if (!w->reaped) {
        kill_group(c->pid, SIGKILL);
        w->killed_with = SIGKILL;
        try_reap(c, w, 0);
    }
    kill(-pid, SIGKILL);
}

/* Marks the child finished once reaped: its wall time, and the pipe closed. */
static void child_settle(child_box *c) {
    if (!c->w.reaped || c->finished) return;
    c->finished = 1;
    c->w.wall_s = mono_s() - c->start;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* Stops an unfinished child (its deadline passed, the parent ran out of memory for its bytes,
 * or the parent was interrupted) and settles it. */
static void child_stop(child_box *c) {
    if (c->finished) return;
    if (!c->w.reaped) stop_child(c, &c->w, c->grace);
    child_settle(c);
}

/* One step of waiting for a child: reads what the pipe has (waiting up to wait_ms for it), reaps
 * the child when it ended, and stops it past its deadline. Raises nothing. */
static void child_advance(child_box *c, int wait_ms) {
    wait_outcome *w = &c->w;
    if (c->finished) return;
    double left = c->timeout > 0 ? c->start + c->timeout - mono_s() : 1e9;
    if (left <= 0) {
        w->timed_out = 1;
        child_stop(c);
        return;
    }
    if (left < 0.2 && wait_ms > (int)(left * 1000) + 1) wait_ms = (int)(left * 1000) + 1;
    if (c->reading) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, wait_ms) > 0 && read_some(c, w) == 0) c->reading = 0;
    } else if (wait_ms > 0) {
        poll(NULL, 0, wait_ms < 20 ? wait_ms : 20);
    }
    /* a grandchild may hold the pipe open after the child ended: check the child too, and once it
     * is reaped take what is left in the pipe without waiting for end of file */
    if (try_reap(c, w, WNOHANG) && c->reading) {
        int fl = fcntl(c->fd, F_GETFL);
        if (fl >= 0) fcntl(c->fd, F_SETFL, fl | O_NONBLOCK);
        while (read_some(c, w) == 1) {}
        c->reading = 0;
    }
    if (w->no_memory) child_stop(c);
    child_settle(c);
}

/* The 8-byte length and the message after it, when complete. */
static const char *complete_message(const child_box *c, size_t *len) {
    uint64_t n;
    if (c->len < sizeof n) return NULL;
    memcpy(&n, c->buf, sizeof n);
    if (c->len != sizeof n + n) return NULL;
    *len = (size_t)n;
    return c->buf + sizeof n;
}

static void set_str(lua_State *L, const char *key, const char *value) {
    lua_pushstring(L, value);
    lua_setfield(L, -2, key);
}

/* Pushes the result of a child that left no complete message. */
static void push_failure(lua_State *L, const wait_outcome *w, double timeout) {
    lua_createtable(L, 0, 4);
    if (w->timed_out) {
        set_str(L, "status", "timeout");
        char msg[160];
        snprintf(msg, sizeof msg, "timed out after %.1f s (limit %g s); stopped with %s", w->wall_s, timeout,
                 w->killed_with == SIGKILL ? "SIGKILL" : "SIGTERM");
        set_str(L, "message", msg);
    } else if (w->no_memory) {
        set_str(L, "status", "error");
        set_str(L, "message", "out of host memory reading the child's result; the child was stopped");
    } else if (WIFSIGNALED(w->status)) {
        int sig = WTERMSIG(w->status);
        set_str(L, "status", "crashed");
        lua_pushfstring(L, "killed by signal %d (%s)%s", sig, strsignal(sig),
                        sig == SIGKILL ? "; the kernel's OOM killer sends SIGKILL when host memory runs out" : "");
        lua_setfield(L, -2, "message");
        lua_pushinteger(L, sig), lua_setfield(L, -2, "signal");
    } else {
        int code = WIFEXITED(w->status) ? WEXITSTATUS(w->status) : -1;
        set_str(L, "status", "crashed");
        lua_pushfstring(L, "exited with code %d without returning a result", code);
        lua_setfield(L, -2, "message");
        lua_pushinteger(L, code), lua_setfield(L, -2, "exit_code");
    }
}

/* Turns the decoded envelope on top into the result: the value (with status "ok") or the failure. */
static void envelope_to_result(lua_State *L) {
    lua_getfield(L, -1, "status");
    int ok = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "ok") == 0;
    lua_pop(L, 1);
    if (!ok) {
        lua_pushnil(L), lua_setfield(L, -2, "value");
        return;
    }
    if (lua_getfield(L, -1, "value") == LUA_TTABLE) { /* envelope, value */
        if (lua_getfield(L, -1, "status") == LUA_TNIL) {
            lua_pop(L, 1);
            set_str(L, "status", "ok");
        } else {
            lua_pop(L, 1);
        }
        lua_remove(L, -2);
    } else {
        lua_pop(L, 1); /* keep {status="ok", value=v} */
    }
}

static void push_info(lua_State *L, pid_t pid, const wait_outcome *w) {
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, pid), lua_setfield(L, -2, "pid");
    lua_pushnumber(L, w->wall_s), lua_setfield(L, -2, "wall_s");
    if (WIFEXITED(w->status)) lua_pushinteger(L, WEXITSTATUS(w->status)), lua_setfield(L, -2, "exit_code");
    if (WIFSIGNALED(w->status)) lua_pushinteger(L, WTERMSIG(w->status)), lua_setfield(L, -2, "signal");
    if (w->killed_with) set_str(L, "killed_with", w->killed_with == SIGKILL ? "SIGKILL" : "SIGTERM");
    dpl_push_bytes(L, (uint64_t)w->usage.ru_maxrss * 1024u), lua_setfield(L, -2, "max_rss_bytes");
}

/* Pushes the finished child's result and info (the bytes are freed: once only). */
static int push_child_result(lua_State *L, child_box *c) {
    size_t len;
    const char *msg = complete_message(c, &len);
    c->taken = 1;
    if (msg) {
        dpl_json_decode(L, msg, len, "dpprof.isolate: the child's result");
        envelope_to_result(L);
    } else {
        push_failure(L, &c->w, c->timeout);
    }
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
    push_info(L, c->first_pid, &c->w);
    return 2;
}

static const char *const option_names[] = {"timeout", "grace", "env", "threads", NULL};

/* 1 when the table at idx has only option keys (and at least one). */
static int is_options(lua_State *L, int idx) {
    if (!lua_istable(L, idx) || lua_getmetatable(L, idx)) {
        if (lua_istable(L, idx)) lua_pop(L, 1);
        return 0;
    }
    int n = 0, only = 1;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int known = 0;
        for (int i = 0; k && option_names[i]; i++) known |= strcmp(k, option_names[i]) == 0;
        if (!known) only = 0;
        n++;
    }
    return n > 0 && only;
}

/* Checks the env option of the options table at idx: names to strings (or numbers), each name a
 * valid environment variable name. */
static void check_env_option(lua_State *L, int idx, const char *fname) {
    if (lua_getfield(L, idx, "env") == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    if (!lua_istable(L, -1)) luaL_error(L, "%s: 'env' must be a table of NAME = value strings", fname);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (!k || !*k || strchr(k, '=')) luaL_error(L, "%s: 'env' names must be non-empty strings without '='", fname);
        if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "%s: env.%s must be a string or a number, got %s", fname, k, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* Forks the child that runs fn(args...): the stack is fn, args..., [options]. Leaves the box
 * (the child's handle) at index 1, the function and its arguments above it, the options gone. */
/* While a parent waits, SIGINT and SIGTERM only set interrupted_by (poll returns at once); a
 * signal this process ignores (a background job's SIGINT) stays ignored. */
typedef struct saved_signals {
    struct sigaction old_int, old_term;
} saved_signals;

static void catch_interrupts(saved_signals *s) {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = on_interrupt; /* no SA_RESTART: poll returns EINTR at once */
    sigemptyset(&act.sa_mask);
    interrupted_by = 0;
    sigaction(SIGINT, &act, &s->old_int);
    sigaction(SIGTERM, &act, &s->old_term);
    if (s->old_int.sa_handler == SIG_IGN) sigaction(SIGINT, &s->old_int, NULL);
    if (s->old_term.sa_handler == SIG_IGN) sigaction(SIGTERM, &s->old_term, NULL);
}

static void restore_interrupts(const saved_signals *s) {
    sigaction(SIGINT, &s->old_int, NULL);
    sigaction(SIGTERM, &s->old_term, NULL);
}

/* Forks the child. With sig, the SIGINT/SIGTERM handlers go in (catch_interrupts) before the
 * fork: a signal sent as soon as the child runs (by the child itself, or a Ctrl-C) must find
 * them, not the handlers they replace (the child puts the defaults back first thing). */
static child_box *spawn_child(lua_State *L, const char *fname, saved_signals *sig) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    double timeout = 0, grace = 2;
    int threads = 0, has_options = 0;
    int top = lua_gettop(L);
    if (top >= 2 && is_options(L, top)) {
        timeout = dpl_opt_num_field(L, top, fname, "timeout", 0);
        grace = dpl_opt_num_field(L, top, fname, "grace", 2);
        int64_t t = dpl_opt_int_field(L, top, fname, "threads", 0);
        if (timeout < 0) luaL_error(L, "%s: 'timeout' must be >= 0 seconds (0: none), got %f", fname, timeout);
        if (grace < 0) luaL_error(L, "%s: 'grace' must be >= 0 seconds, got %f", fname, grace);
        int given = lua_getfield(L, top, "threads") != LUA_TNIL;
        lua_pop(L, 1);
        if (given && (t < 1 || t > DPL_MAX_THREADS))
            luaL_error(L, "%s: 'threads' must be 1 .. %d (absent: as the parent), got %d", fname, DPL_MAX_THREADS,
                       (int)t);
        threads = (int)t;
        check_env_option(L, top, fname);
        has_options = 1;
    }
    if (cuda_in_process())
        luaL_error(L,
                   "%s: CUDA is already initialised in this process (a CUDA device was used, or probed "
                   "by dpprof.cuda_available() or device=\"auto\"), so a forked child could not use the "
                   "GPU; keep the parent CUDA-free and choose the device inside the isolated function",
                   fname);
    int nargs = top - 1 - has_options;
    child_box *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    c->fd = -1;
    luaL_setmetatable(L, CHILD_MT); /* made by dpl_open_process */
    lua_insert(L, 1);               /* box, fn, args..., [options] */
    luaL_checkstack(L, 8, fname);
    c->timeout = timeout;
    c->grace = grace;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) luaL_error(L, "%s: pipe failed: %s", fname, strerror(errno));
    fflush(NULL); /* or the child would write the parent's pending output again */
#ifdef _OPENMP
    /* A forked child cannot use the OpenMP thread pool of its parent (GNU libgomp's threads are
     * not copied and its first parallel region hangs): end the pool; the next region makes one. */
    omp_pause_resource_all(omp_pause_hard);
#endif
    pid_t parent = getpid();
    if (sig) catch_interrupts(sig);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        if (sig) restore_interrupts(sig);
        close(fds[0]);
        close(fds[1]);
        luaL_error(L, "%s: fork failed: %s", fname, strerror(e));
    }
    if (pid == 0) {
        close(fds[0]);
        if (has_options) {
            child_apply_options(L, lua_gettop(L), threads);
            lua_pop(L, 1);
        }
        child_main(L, fds[1], nargs, parent);
    }
    close(fds[1]);
    if (has_options) lua_pop(L, 1);
    c->pid = c->first_pid = pid;
    c->owner = parent;
    c->fd = fds[0];
    c->reading = 1;
    c->start = mono_s();
    setpgid(pid, pid); /* also done by the child; whichever runs first wins the race */
    return c;
}

/* After an interrupt stopped the children: lets the handler that was there run (dpprof's own
 * makes the interrupt one line; the default action ends the process, as it would have without
 * us), then raises. */
static _Noreturn void raise_interrupt(lua_State *L, const char *fname, const char *what) {
    int sig = interrupted_by;
    raise(sig);
    lua_sethook(L, NULL, 0, 0); /* this error is the interrupt: no second one from a hook */
    luaL_error(L, "%s: interrupted by %s; %s", fname, sig == SIGINT ? "SIGINT" : "SIGTERM", what);
    abort(); /* not reached: luaL_error does not return */
}

static int l_isolate(lua_State *L) {
    const char *fname = "dpprof.isolate";
    saved_signals saved;
    child_box *c = spawn_child(L, fname, &saved);
    while (!c->finished && !interrupted_by) child_advance(c, 200);
    if (interrupted_by) child_stop(c);
    restore_interrupts(&saved);
    if (interrupted_by) raise_interrupt(L, fname, "the child was stopped");
    return push_child_result(L, c);
}

/* ---- children running side by side -------------------------------------------------------- */

static child_box *check_child(lua_State *L, int idx) { return luaL_checkudata(L, idx, CHILD_MT); }

static int l_isolate_start(lua_State *L) {
    spawn_child(L, "dpprof.isolate_start", NULL);
    lua_settop(L, 1);
    return 1;
}

static int child_finished(lua_State *L) {
    lua_pushboolean(L, check_child(L, 1)->finished);
    return 1;
}

static int child_pid(lua_State *L) {
    lua_pushinteger(L, check_child(L, 1)->first_pid);
    return 1;
}

static int child_result(lua_State *L) {
    child_box *c = check_child(L, 1);
    if (!c->finished) return 0;
    if (c->taken) luaL_error(L, "dpprof.isolate: child %d: its result was already taken", (int)c->first_pid);
    return push_child_result(L, c);
}

static int child_stop_method(lua_State *L) {
    child_box *c = check_child(L, 1);
    child_stop(c);
    return 0;
}

/* dpprof.isolate_wait(children [, seconds]): waits until one of the children has finished (or
 * seconds passed), reading their pipes and stopping those past their deadline; returns how many
 * of them have finished. */
static int l_isolate_wait(lua_State *L) {
    const char *fname = "dpprof.isolate_wait";
    luaL_checktype(L, 1, LUA_TTABLE);
    double seconds = luaL_optnumber(L, 2, -1);
    lua_Integer n = luaL_len(L, 1);
    luaL_argcheck(L, n >= 0 && n <= 4096, 1, "at most 4096 children");
    child_box **kids = lua_newuserdatauv(L, sizeof *kids * (size_t)(n ? n : 1), 0);
    struct pollfd *fds = lua_newuserdatauv(L, sizeof *fds * (size_t)(n ? n : 1), 0);
    for (lua_Integer i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        kids[i] = luaL_testudata(L, -1, CHILD_MT);
        if (!kids[i]) luaL_error(L, "%s: children[%d] is not a child of dpprof.isolate_start", fname, (int)i + 1);
        lua_pop(L, 1);
    }
    double until = seconds >= 0 ? mono_s() + seconds : 0;
    saved_signals saved;
    catch_interrupts(&saved);
    int done = 0;
    for (;;) {
        done = 0;
        for (lua_Integer i = 0; i < n; i++) done += kids[i]->finished;
        if (done > 0 || done == n || interrupted_by) break;
        double now = mono_s();
        if (seconds >= 0 && now >= until) break;
        double wait = 0.2;
        if (seconds >= 0 && until - now < wait) wait = until - now;
        nfds_t k = 0;
        for (lua_Integer i = 0; i < n; i++) {
            child_box *c = kids[i];
            if (c->timeout > 0 && c->start + c->timeout - now < wait) wait = c->start + c->timeout - now;
            if (c->reading)
                fds[k++] = (struct pollfd){.fd = c->fd, .events = POLLIN};
            else if (!c->finished && wait > 0.02)
                wait = 0.02; /* its pipe is closed: look for its end often */
        }
        int wait_ms = wait <= 0 ? 0 : (int)(wait * 1000) + 1;
        if (k > 0)
            poll(fds, k, wait_ms);
        else
            poll(NULL, 0, wait_ms < 20 ? wait_ms : 20);
        for (lua_Integer i = 0; i < n; i++) child_advance(kids[i], 0);
    }
    if (interrupted_by) {
        for (lua_Integer i = 0; i < n; i++) child_stop(kids[i]);
        restore_interrupts(&saved);
        raise_interrupt(L, fname, "the children were stopped");
    }
    restore_interrupts(&saved);
    lua_pushinteger(L, done);
    return 1;
}

static int l_testing_crash(lua_State *L) {
    static const char *const hows[] = {"segv", "abort", "kill", NULL};
    int how = luaL_checkoption(L, 1, NULL, hows);
    fflush(NULL);
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would turn the signal into exit(1) */
    signal(SIGABRT, SIG_DFL);
    if (how == 0) raise(SIGSEGV);
    if (how == 1) abort();
    raise(SIGKILL);
    return luaL_error(L, "dpprof.testing_crash: still alive after raising the signal");
}

void dpl_open_process(lua_State *L) {
    static const luaL_Reg child_meta[] = {{"__gc", child_gc}, {"__close", child_gc}, {NULL, NULL}};
    static const luaL_Reg child_methods[] = {{"finished", child_finished},
                                             {"pid", child_pid},
                                             {"result", child_result},
                                             {"stop", child_stop_method},
                                             {NULL, NULL}};
    dpl_new_type(L, CHILD_MT, child_meta, child_methods, NULL);
    static const luaL_Reg fns[] = {{"isolate", l_isolate},
                                   {"isolate_start", l_isolate_start},
                                   {"isolate_wait", l_isolate_wait},
                                   {"oom_details", l_oom_details},
                                   {"cuda_initialised", l_cuda_initialised},
                                   {"testing_crash", l_testing_crash},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
