/* lua_host.c: the host this process runs on, as scripts see it.
 *
 *   dpprof.time() -> wall-clock seconds since 1970 (for names; dpprof.clock() is for durations)
 *   dpprof.sleep(seconds); dpprof.pid() -> this process's id; dpprof.executable (path)
 *   dpprof.environment() -> {hostname, cpu, cores, threads, os, dpprof_version, git_commit,
 *       lua_version, nvidia_driver_version, devices={<kind>={...}}}; threads is the CPU
 *       backend's thread count (dpprof.threads()); devices lists
 *       initialised devices only, so calling it never initialises one
 *   dpprof.host_load() -> {loadavg = {1 min, 5 min, 15 min}, busy_s, cpu_s, wall_s, cores}: the
 *       machine's load averages, the CPU seconds all its CPUs have been busy since boot
 *       (/proc/stat: all but idle and iowait), this process's own CPU seconds (user + system) and
 *       a monotonic clock, so that two readings tell what other processes took during a run;
 *       a field the host does not give is absent */
#include "lua_engine.h"

#include "device.h"
#include "dpprof_engine.h"
#include "lua_util.h"
#include "version.h"

#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static void set_str(lua_State *L, const char *key, const char *value) {
    lua_pushstring(L, value);
    lua_setfield(L, -2, key);
}

static int l_time(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return 1;
}

static int l_sleep(lua_State *L) {
    double s = luaL_checknumber(L, 1);
    luaL_argcheck(L, s >= 0, 1, "seconds must be >= 0");
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    return 0;
}

static int l_pid(lua_State *L) {
    lua_pushinteger(L, getpid());
    return 1;
}

/* Copies the value of the first line of file starting with key (after the ':') into out. */
static int read_keyed_line(const char *file, const char *key, char *out, size_t n) {
    FILE *f = fopen(file, "r");
    if (!f) return 0;
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, strlen(key)) != 0) continue;
        const char *v = strchr(line, ':');
        v = v ? v + 1 : line + strlen(key);
        while (*v == ' ' || *v == '\t') v++;
        snprintf(out, n, "%s", v);
        out[strcspn(out, "\n")] = '\0';
        found = 1;
    }
    fclose(f);
    return found;
}

/* The NVIDIA kernel driver's version ("550.54.15") from /proc, without touching CUDA. */
static int nvidia_driver_version(char *out, size_t n) {
    char line[512];
    if (!read_keyed_line("/proc/driver/nvidia/version", "NVRM version", line, sizeof line)) return 0;
    /* "NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..." : the first dotted number */
    for (char *p = line; *p; p++) {
        if (*p >= '0' && *p <= '9' && strchr(p, '.') && (p == line || p[-1] == ' ')) {
            size_t len = strspn(p, "0123456789.");
            if (memchr(p, '.', len)) {
                snprintf(out, n, "%.*s", (int)len, p);
                return 1;
            }
        }
    }
    return 0;
}

static void push_device(lua_State *L, const dp_device *dev) {
    const dp_device_info *i = &dev->info;
    lua_createtable(L, 0, 8);
    set_str(L, "kind", dp_device_kind_name(dev->kind));
    set_str(L, "name", i->name);
    dpl_push_bytes(L, i->total_memory), lua_setfield(L, -2, "total_memory");
    lua_pushinteger(L, i->cores), lua_setfield(L, -2, "cores");
    if (dev->kind == DP_DEV_CUDA) {
        lua_pushfstring(L, "%d.%d", i->cc_major, i->cc_minor), lua_setfield(L, -2, "compute_capability");
        lua_pushfstring(L, "%d.%d", i->driver_version / 1000, (i->driver_version % 1000) / 10);
        lua_setfield(L, -2, "cuda_driver_version");
        lua_pushfstring(L, "%d.%d", i->runtime_version / 1000, (i->runtime_version % 1000) / 10);
        lua_setfield(L, -2, "cuda_version");
    }
}

static int l_environment(lua_State *L) {
    lua_createtable(L, 0, 10);
    char buf[512];
    if (gethostname(buf, sizeof buf) == 0) {
        buf[sizeof buf - 1] = '\0';
        set_str(L, "hostname", buf);
    }
    struct utsname u;
    if (!read_keyed_line("/proc/cpuinfo", "model name", buf, sizeof buf)) {
        snprintf(buf, sizeof buf, "%s", uname(&u) == 0 ? u.machine : "unknown");
    }
    set_str(L, "cpu", buf);
    lua_pushinteger(L, sysconf(_SC_NPROCESSORS_ONLN)), lua_setfield(L, -2, "cores");
    if (uname(&u) == 0) lua_pushfstring(L, "%s %s", u.sysname, u.release), lua_setfield(L, -2, "os");
    set_str(L, "dpprof_version", DPPROF_VERSION);
    set_str(L, "git_commit", dp_build_commit());
    set_str(L, "lua_version", LUA_RELEASE);
    if (nvidia_driver_version(buf, sizeof buf)) set_str(L, "nvidia_driver_version", buf);
    lua_pushinteger(L, dp_engine_threads()), lua_setfield(L, -2, "threads");
    dp_engine_blas blas;
    dp_engine_blas_info(&blas);
    lua_createtable(L, 0, 5);
    set_str(L, "library", blas.library);
    set_str(L, "version", blas.version);
    set_str(L, "core", blas.core);
    set_str(L, "chosen_by", blas.chosen_by);
    lua_pushboolean(L, blas.generic), lua_setfield(L, -2, "generic");
    lua_setfield(L, -2, "blas");
    lua_newtable(L);
    for (int k = 0; k < DP_DEV_KIND_COUNT; k++) {
        dp_device *dev;
        if (!dp_device_initialised((dp_device_kind)k) || dp_device_get((dp_device_kind)k, &dev) != DP_OK) continue;
        push_device(L, dev);
        lua_setfield(L, -2, dp_device_kind_name((dp_device_kind)k));
    }
    lua_setfield(L, -2, "devices");
    return 1;
}

/* The CPU seconds all CPUs have been busy since boot (the "cpu" line of /proc/stat: user, nice,
 * system, irq, softirq and steal ticks; idle and iowait left out), or -1. */
static double busy_seconds(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (n < 4 || hz <= 0) return -1;
    /* user nice system idle iowait irq softirq steal */
    unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    return (double)busy / (double)hz;
}

static int l_host_load(lua_State *L) {
    lua_createtable(L, 0, 5);
    double avg[3];
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &avg[0], &avg[1], &avg[2]) == 3) {
            lua_createtable(L, 3, 0);
            for (int i = 0; i < 3; i++) lua_pushnumber(L, avg[i]), lua_rawseti(L, -2, i + 1);
            lua_setfield(L, -2, "loadavg");
        }
        fclose(f);
    }
    double busy = busy_seconds();
    if (busy >= 0) lua_pushnumber(L, busy), lua_setfield(L, -2, "busy_s");
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                     (double)ru.ru_stime.tv_usec * 1e-6;
        lua_pushnumber(L, cpu), lua_setfield(L, -2, "cpu_s");
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9), lua_setfield(L, -2, "wall_s");
    lua_pushinteger(L, sysconf(_SC_NPROCESSORS_ONLN)), lua_setfield(L, -2, "cores");
    return 1;
}

void dpl_open_host(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"time", l_time}, {"sleep", l_sleep}, {"pid", l_pid}, {"environment", l_environment},
        {"host_load", l_host_load}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        lua_pushstring(L, exe);
        lua_setfield(L, -2, "executable");
    }
}
