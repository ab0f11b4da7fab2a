/* main.c: the dpprof command line. `run` executes a Lua script with the dpprof module loaded;
 * `plot` renders charts from a results directory; other commands (compare, fit, sweep) live in
 * the Lua module dpprof.cli. */
#include "dpprof.h"
#include "dpplot.h"
#include "comm.h"
#include "dpprof_engine.h"

#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const run_usage =
    "usage: dpprof run SCRIPT.lua [key=value ...]\n"
    "\n"
    "Runs a Lua script with the dpprof module loaded (require(\"dpprof\")). Each key=value pair\n"
    "arrives in dpprof.args, numbers and true/false converted; the global `arg` holds the script\n"
    "(arg[0]) and the pairs as written. --help (or -h) after SCRIPT arrives as help=true: the\n"
    "scripts in experiments/ then print what they do and the keys they take (the common ones,\n"
    "profile= threads= device= out= methods= or method=, mean the same in each) and exit, e.g.\n"
    "dpprof run experiments/default.lua --help.\n"
    "\n"
    "Errors: one line naming the problem; DPPROF_TRACEBACK=1 adds the whole Lua traceback.\n"
    "exit status: 0 the script ran to its end; 1 it raised an error; 2 bad arguments, or a sweep's\n"
    "configuration refused before anything ran or was created (an unknown method or device, ...)\n";

static const char *const plot_usage =
    "usage: dpprof plot DIR [--out DIR] [--scale S] [--width W] [--height H] [--point KEY=VALUE,...]\n"
    "                       [--heatmap X,Y] [--timelines each]\n"
    "\n"
    "Renders the charts and summaries of the result JSON files in DIR: memory_breakdown_comparison,\n"
    "memory_timeline, performance_tradeoff, module_breakdown, op_breakdown (runs with\n"
    "profile=\"ops\"), operation_level_breakdown, memory_analysis_overview (peak, components\n"
    "and time on one page) and step_peaks (each step's peak against the card: runs with\n"
    "dp.poisson or data lengths) (PNG), and summary.txt/.csv/.md/.tex (with the kernel table of\n"
    "profiled runs). For sweeps: sweep_<var>.png (one variable); memory_heatmap,\n"
    "heatmap_time, heatmap_extra (over vanilla) and heatmap_tokens_per_s (two or more, the rest\n"
    "faceted); sweep_grid_peak and sweep_grid_time, small multiples (three or four);\n"
    "memory_timeline_points, a timeline per point.\n"
    "\n"
    "  --out DIR        where to write them (default: DIR itself)\n"
    "  --scale S        resolution factor in (0, 8] (default 1: 1600x1000 pixels; 2 doubles it)\n"
    "  --width W, --height H  each chart's size in logical pixels, 400 to 8000 (default 1600 x\n"
    "                   1000): a taller chart fits more timeline panels\n"
    "  --point K=V,...  the sweep point the standard charts show (default: the largest point where\n"
    "                   the most methods finished); heatmaps and grids keep only matching points\n"
    "  --heatmap X,Y    the swept variables across and up the heatmaps (and x and lines of the\n"
    "                   small multiples); default: seq_len across when swept, else the first two\n"
    "  --timelines each also memory_timeline_<point>.png for every configuration of a sweep (e.g.\n"
    "                   memory_timeline_batch4_seq_len256.png; with --point, the matching ones;\n"
    "                   --timelines points, the default, writes memory_timeline_points.png only)\n"
    "\n"
    "exit status: 0 all rendered; 1 a problem, each one named on its line (a malformed file or an\n"
    "output not written: the rest is still rendered; or nothing to render); 2 bad arguments,\n"
    "among them a --point or --heatmap naming a variable, value or method no sweep point has\n"
    "(the line names the swept variables and their values; nothing is rendered)\n";

static const char *const usage =
    "usage: dpprof COMMAND [ARGS]\n"
    "\n"
    "commands (COMMAND --help for each):\n"
    "  run SCRIPT.lua [key=value ...]   run a Lua script with the dpprof module; the pairs are\n"
    "                                   visible as dpprof.args (numbers and true/false converted)\n"
    "  plot DIR [--out DIR] [--scale S] render charts and summaries from the result JSON files in\n"
    "       [--point K=V] [--heatmap X,Y] DIR (default out: DIR; scale 2 doubles the resolution)\n"
    "  compare BASE NEW [--memory R]    compare two results (files or directories); exit 1 when\n"
    "       [--time R|off]              peak memory grew past --memory, the median step past\n"
    "       [--threshold R]             --time beyond the runs' measured spread (3 or more a\n"
    "                                   side; default 1.05 each; --time off: memory only), or\n"
    "                                   a pair could not be compared, 2 for an invalid file\n"
    "  fit [key=value ...]              the largest seq_len, batch or layers that fits a memory\n"
    "                                   budget, per DP method, from plan runs (fit --help)\n"
    "  risk [key=value ...]             the chance that some step of a Poisson-sampled run of\n"
    "                                   samples of their own lengths runs out of memory (risk --help)\n"
    "  data FILE [key=value ...]        a data set of text tokenized by the model's tokenizer: its\n"
    "                                   samples' lengths, percentiles, bad records (data --help)\n"
    "  sweep submit|status|collect ...  run a script's sweeps as Slurm job arrays: submit SCRIPT\n"
    "                                   [key=value], status DIR, collect DIR (sweep --help)\n"
    "  calibrate [--device cpu|cuda]    fit a device model file for the plan's step times from\n"
    "       [--out FILE.json] [RESULTS] profiled runs on this device (calibrate --help)\n"
    "  --help, -h                       this text\n"
    "  --version                        version and build\n"
    "\n"
    "environment:\n"
    "  DPPROF_DEVICE     default device for tensors made outside experiments (cpu, cuda, plan, auto)\n"
    "  DPPROF_LUA_PATH   directory holding dpprof/core.lua (default: beside the binary)\n"
    "  DPPROF_TRACEBACK  1: print the whole Lua traceback of an error, dpprof's own frames included\n"
    "  OMP_NUM_THREADS   threads of the CPU backend (default: the CPU count); dpprof.threads(n) and an\n"
    "                    experiment's threads= change it. OpenBLAS runs single-threaded inside them\n";

/* "<lua_dir>/dpprof/": where dpprof's own Lua modules live (set once the module is open). */
static char own_dir[4096];

/* Whether a chunk's short source (as in "file.lua:12:", possibly shortened to "...e/x.lua") is
 * one of dpprof's own modules. */
static int own_source(const char *src, size_t len) {
    if (!own_dir[0] || len == 0) return 0;
    const char *name = src + len;
    while (name > src && name[-1] != '/') name--;
    char full[sizeof own_dir + 256];
    int n = snprintf(full, sizeof full, "%s%.*s", own_dir, (int)(src + len - name), name);
    if (n < 0 || (size_t)n >= sizeof full) return 0;
    if (len == (size_t)n && strncmp(src, full, len) == 0) return 1;
    if (len > 3 && strncmp(src, "...", 3) == 0) /* shortened: compare the tail */
        return len - 3 <= (size_t)n && strncmp(full + n - (len - 3), src + 3, len - 3) == 0;
    return 0;
}

/* Whether msg starts with a position ("file.lua:12: ") inside dpprof's own Lua code. */
static int raised_in_own_code(const char *msg) {
    const char *colon = strstr(msg, ".lua:");
    const char *nl = strchr(msg, '\n');
    if (!colon || (nl && nl < colon)) return 0;
    return own_source(msg, (size_t)(colon + 4 - msg));
}

/* ---- Ctrl-C: one line, as lua.c does it (a hook raises at the next Lua instruction) ---------- */

static volatile sig_atomic_t interrupted; /* a SIGINT arrived while a script ran */
static volatile sig_atomic_t held;        /* interrupts are held back (the ranks of a world vote on them) */
static lua_State *running;                /* the state the hook is set on */

static char interrupt_message[256] = "interrupted by SIGINT"; /* what the hook raises */

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "%s", interrupt_message);
}

static void arm_hook(void) { lua_sethook(running, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1); }

static void on_sigint(int sig) {
    interrupted = 1;
    signal(sig, SIG_DFL); /* a second Ctrl-C ends the process at once */
    if (!held) arm_hook();
}

/* dpprof.interrupts.hold(on [, message]): while on, SIGINT is only noted (pending()), for the
 * experiment of a launched world to vote on at a point every rank reaches; off: a noted one raises
 * at the next instruction (message, when given, is what it raises). pending(): whether one was
 * noted. interrupt(): notes one as SIGINT would (a rank that learnt of another's by the vote). */
static int l_interrupts_hold(lua_State *L) {
    held = lua_toboolean(L, 1);
    if (lua_isstring(L, 2)) snprintf(interrupt_message, sizeof interrupt_message, "%s", lua_tostring(L, 2));
    if (!held && interrupted && running) arm_hook();
    return 0;
}
static int l_interrupts_pending(lua_State *L) {
    lua_pushboolean(L, interrupted);
    return 1;
}
static int l_interrupts_interrupt(lua_State *L) {
    (void)L;
    interrupted = 1;
    if (!held && running) arm_hook();
    return 0;
}

/* os.exit(code): MPI ended first, as a script's return ends it (MPI_Finalize; a failing code
 * MPI_Abort), so that mpirun sees a proper exit; then Lua's own os.exit. */
static int l_os_exit(lua_State *L) {
    int code = lua_isnone(L, 1) || (lua_isboolean(L, 1) && lua_toboolean(L, 1)) ? 0
               : lua_isboolean(L, 1)                                         ? 1
                                                                             : (int)luaL_optinteger(L, 1, 0);
    if (code != 0)
        dp_comm_abort(code);
    else
        dp_comm_finalize();
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 0);
    return 0;
}

/* Adds dpprof.interrupts and the os.exit above to the state (the binary's: an embedder has its own). */
static void open_process_hooks(lua_State *L) {
    static const luaL_Reg fns[] = {{"hold", l_interrupts_hold},
                                   {"pending", l_interrupts_pending},
                                   {"interrupt", l_interrupts_interrupt},
                                   {NULL, NULL}};
    lua_getglobal(L, "dpprof");
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "interrupts");
    lua_pop(L, 1);
    lua_getglobal(L, "os");
    lua_getfield(L, -1, "exit");
    lua_pushcclosure(L, l_os_exit, 1);
    lua_setfield(L, -2, "exit");
    lua_pop(L, 1);
}

/* Whether SIGINT was ignored when dpprof started (a background job): then it stays ignored. */
static int sigint_ignored(void) {
    struct sigaction old;
    return sigaction(SIGINT, NULL, &old) == 0 && old.sa_handler == SIG_IGN;
}

/* msg without a leading "file.lua:12: " position. */
static const char *without_position(const char *msg) {
    const char *colon = strstr(msg, ".lua:");
    if (!colon) return msg;
    const char *p = colon + 5;
    while (*p >= '0' && *p <= '9') p++;
    return p[0] == ':' && p[1] == ' ' ? p + 2 : msg;
}

static int script_exit_status; /* an error object's exit_status (a refused configuration: 2), else 0 */

/* The exit status of a script or command that raised an error: a refused configuration's 2, else 1. */
static int error_exit_status(void) { return script_exit_status > 0 ? script_exit_status : 1; }

/* Message handler. An interrupt is one line: what was interrupted, no position, no traceback. A
 * mistake dpprof reports (the message names the problem, at the user's line)
 * gets no traceback through dpprof's insides: only the user's own frames, when there are two or
 * more. An error raised at a line of dpprof's own Lua code (a bug to report) and
 * DPPROF_TRACEBACK=1 get the whole traceback, as lua.c prints it. */
static int msghandler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (lua_type(L, 1) == LUA_TTABLE) {
            if (lua_getfield(L, 1, "exit_status") == LUA_TNUMBER && lua_isinteger(L, -1))
                script_exit_status = (int)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    if (interrupted) {
        lua_pushstring(L, without_position(msg));
        return 1;
    }
    const char *full = getenv("DPPROF_TRACEBACK");
    if ((full && *full && strcmp(full, "0") != 0) || raised_in_own_code(msg)) {
        luaL_traceback(L, L, msg, 1);
        return 1;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    int frames = 0;
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        if (!lua_getinfo(L, "Sln", &ar) || ar.currentline <= 0) continue; /* C functions */
        if (own_source(ar.short_src, strlen(ar.short_src))) continue;
        lua_pushfstring(L, "\n\t%s:%d: in ", ar.short_src, ar.currentline);
        luaL_addvalue(&b);
        if (*ar.namewhat)
            lua_pushfstring(L, "%s '%s'", ar.namewhat, ar.name);
        else if (*ar.what == 'm')
            lua_pushliteral(L, "main chunk");
        else
            lua_pushfstring(L, "function <%s:%d>", ar.short_src, ar.linedefined);
        luaL_addvalue(&b);
        frames++;
    }
    luaL_pushresult(&b);
    if (frames >= 2)
        lua_pushfstring(L, "%s\nstack traceback (your code; DPPROF_TRACEBACK=1 shows dpprof's too):%s", msg,
                        lua_tostring(L, -1));
    else
        lua_pushstring(L, msg);
    return 1;
}

/* Calls the function below nargs arguments under the traceback handler; prints errors. */
static int docall(lua_State *L, int nargs, int nres) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    int catch_sigint = !sigint_ignored();
    running = L;
    if (catch_sigint) signal(SIGINT, on_sigint);
    int status = lua_pcall(L, nargs, nres, base);
    if (catch_sigint) signal(SIGINT, SIG_DFL);
    lua_remove(L, base);
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        if (!msg) msg = "(error object is not a string)";
        fprintf(stderr, "%s%s\n", strncmp(msg, "dpprof: ", 8) == 0 ? "" : "dpprof: ", msg);
        lua_pop(L, 1);
    }
    return status;
}

static int open_module(lua_State *L) {
    lua_pushcfunction(L, dpprof_openlib);
    if (docall(L, 0, 1) != LUA_OK) return -1;
    if (lua_getfield(L, -1, "lua_dir") == LUA_TSTRING)
        snprintf(own_dir, sizeof own_dir, "%s/dpprof/", lua_tostring(L, -1));
    lua_pop(L, 1);
    lua_setglobal(L, "dpprof");
    return 0;
}

/* Pushes "value" converted: integers and floats to numbers, true/false to booleans. */
static void push_arg_value(lua_State *L, const char *v) {
    if (strcmp(v, "true") == 0)
        lua_pushboolean(L, 1);
    else if (strcmp(v, "false") == 0)
        lua_pushboolean(L, 0);
    else if (lua_stringtonumber(L, v) == 0)
        lua_pushstring(L, v);
}

static int cmd_run(lua_State *L, int argc, char **argv) {
    if (argc < 1) {
        fprintf(stderr, "dpprof run: missing SCRIPT.lua\n%s", run_usage);
        return 2;
    }
    if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
        fputs(run_usage, stdout);
        return 0;
    }
    const char *script = argv[0];
    lua_getglobal(L, "dpprof");
    lua_newtable(L);
    lua_newtable(L); /* the global `arg`, as lua.c makes it: arg[0] = script */
    lua_pushstring(L, script);
    lua_rawseti(L, -2, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { /* the script's own help */
            lua_pushboolean(L, 1);
            lua_setfield(L, -3, "help");
            continue;
        }
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i]) {
            fprintf(stderr, "dpprof run: argument '%s' is not key=value\n", argv[i]);
            return 2;
        }
        lua_pushlstring(L, argv[i], (size_t)(eq - argv[i]));
        push_arg_value(L, eq + 1);
        lua_settable(L, -4);
    }
    lua_setglobal(L, "arg");
    lua_setfield(L, -2, "args");
    lua_pop(L, 1);
    if (luaL_loadfilex(L, script, "t") != LUA_OK) {
        fprintf(stderr, "dpprof: %s\n", lua_tostring(L, -1));
        return 1;
    }
    if (docall(L, 0, 0) == LUA_OK) return 0;
    return error_exit_status();
}

/* Prints each problem and note of dpplot_render_dir; counts them in *user. */
static void plot_warn(void *user, const char *message) {
    ++*(int *)user;
    fprintf(stderr, "dpprof plot: %s\n", message);
}

static int cmd_plot(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    int warned = 0;
    dpplot_options opt = dpplot_options_default();
    opt.warn = plot_warn;
    opt.warn_user = &warned;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(plot_usage, stdout);
            return 0;
        } else if ((strcmp(argv[i], "--out") == 0 || strcmp(argv[i], "--scale") == 0 ||
                    strcmp(argv[i], "--point") == 0 || strcmp(argv[i], "--heatmap") == 0 ||
                    strcmp(argv[i], "--timelines") == 0 || strcmp(argv[i], "--width") == 0 ||
                    strcmp(argv[i], "--height") == 0) &&
                   i + 1 == argc) {
            fprintf(stderr, "dpprof plot: %s needs a value (%s)\n", argv[i],
                    argv[i][2] == 'o'   ? "--out DIR"
                    : argv[i][2] == 's' ? "--scale S, a number in (0, 8]"
                    : argv[i][2] == 'p' ? "--point KEY=VALUE,..."
                    : argv[i][2] == 't' ? "--timelines each"
                    : argv[i][2] == 'w' ? "--width W, whole pixels from 400 to 8000"
                    : argv[i][3] == 'e' ? "--height H, whole pixels from 400 to 8000"
                                        : "--heatmap X,Y");
            return 2;
        } else if (strcmp(argv[i], "--width") == 0 || strcmp(argv[i], "--height") == 0) {
            char *end;
            const char *v = argv[++i];
            long px = strtol(v, &end, 10);
            if (end == v || *end || px < 400 || px > 8000) {
                fprintf(stderr, "dpprof plot: %s must be whole pixels from 400 to 8000, got '%s'\n", argv[i - 1], v);
                return 2;
            }
            *(argv[i - 1][2] == 'w' ? &opt.width : &opt.height) = (int)px;
        } else if (strcmp(argv[i], "--timelines") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "each") != 0 && strcmp(v, "points") != 0) {
                fprintf(stderr,
                        "dpprof plot: --timelines takes 'each' (a timeline file per configuration) or 'points' "
                        "(the default: memory_timeline_points.png only), got '%s'\n",
                        v);
                return 2;
            }
            opt.timelines_each = strcmp(v, "each") == 0;
        } else if (strcmp(argv[i], "--point") == 0) {
            opt.point = argv[++i];
            for (const char *p = opt.point; *p;) { /* every item key=value, both non-empty */
                size_t len = strcspn(p, ","), eq = strcspn(p, "=");
                if (eq == 0 || eq >= len - (len > 0) || len == 0) {
                    fprintf(stderr,
                            "dpprof plot: --point takes KEY=VALUE items joined by commas (e.g. "
                            "batch=8,lora_rank=0), got '%s'\n",
                            opt.point);
                    return 2;
                }
                p += len + (p[len] == ',');
            }
            if (!*opt.point) {
                fprintf(stderr, "dpprof plot: --point needs KEY=VALUE, got an empty string\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--heatmap") == 0) {
            opt.heatmap = argv[++i];
            const char *comma = strchr(opt.heatmap, ',');
            if (!comma || comma == opt.heatmap || !comma[1] || strchr(comma + 1, ',')) {
                fprintf(stderr,
                        "dpprof plot: --heatmap takes two swept variables, X,Y (e.g. seq_len,batch), "
                        "got '%s'\n",
                        opt.heatmap);
                return 2;
            }
        } else if (strcmp(argv[i], "--out") == 0) {
            out = argv[++i];
            if (!*out) {
                fprintf(stderr, "dpprof plot: --out needs a directory, got an empty string\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--scale") == 0) {
            char *end;
            opt.scale = strtod(argv[++i], &end);
            if (*end || opt.scale <= 0 || opt.scale > 8) {
                fprintf(stderr, "dpprof plot: --scale must be a number in (0, 8], got '%s'\n", argv[i]);
                return 2;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr,
                    "dpprof plot: unknown option '%s' (valid: --out DIR, --scale S, --width W, --height H, --point "
                    "K=V,..., "
                    "--heatmap X,Y, --timelines each, --help)\n",
                    argv[i]);
            return 2;
        } else if (!dir)
            dir = argv[i];
        else {
            fprintf(stderr, "dpprof plot: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "dpprof plot: missing DIR\n%s", plot_usage);
        return 2;
    }
    char err[1024] = "";
    int rc = dpplot_render_dir(dir, out ? out : dir, &opt, err, sizeof err);
    if (rc != 0 && warned == 0) fprintf(stderr, "dpprof plot: %s\n", err); /* else each was warned */
    return rc == 2 ? 2 : rc ? 1 : 0;
}

/* Other commands are functions of dpprof.cli, called with the remaining arguments; they return
 * an exit status. */
static int cmd_lua(lua_State *L, const char *cmd, int argc, char **argv) {
    lua_getglobal(L, "require");
    lua_pushliteral(L, "dpprof.cli");
    if (docall(L, 1, 1) != LUA_OK) return 1;
    if (lua_getfield(L, -1, cmd) != LUA_TFUNCTION) {
        fprintf(stderr, "dpprof: unknown command '%s' (see dpprof --help)\n", cmd);
        return 2;
    }
    lua_createtable(L, argc, 0);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    if (docall(L, 1, 1) != LUA_OK) return error_exit_status(); /* sweep submit runs a script */
    return (int)luaL_optinteger(L, -1, 0);
}

/* When OpenBLAS fell back to a generic kernel on a CPU it does not know, runs this binary again with
 * the kernel the CPU's flags call for (OPENBLAS_CORETYPE is read only as the library loads). */
static void blas_reexec(char **argv) {
    const char *core = dp_engine_blas_reexec_core();
    if (!core) return;
    if (setenv("OPENBLAS_CORETYPE", core, 1) == 0 && setenv("DPPROF_BLAS_CORETYPE", core, 1) == 0)
        execv("/proc/self/exe", argv);
    /* not re-executed: the generic kernel runs, and the CPU backend says so */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("DPPROF_BLAS_CORETYPE");
}

int main(int argc, char **argv) {
    blas_reexec(argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "plot") == 0) return cmd_plot(argc - 2, argv + 2);
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "dpprof: cannot create a Lua state (out of memory)\n");
        return 1;
    }
    luaL_openlibs(L);
    int rc;
    int opened = open_module(L) == 0;
    if (opened) open_process_hooks(L);
    if (!opened)
        rc = 1;
    else if (strcmp(argv[1], "--version") == 0) {
        lua_getglobal(L, "dpprof");
        lua_getfield(L, -1, "version");
        lua_getfield(L, -2, "git_commit");
        lua_getfield(L, -3, "cuda_compiled");
        printf("dpprof %s (commit %s, %s, %s)\n", lua_tostring(L, -3), lua_tostring(L, -2),
               lua_toboolean(L, -1) ? "CUDA backend compiled" : "CPU only", LUA_RELEASE);
        rc = 0;
    } else if (strcmp(argv[1], "run") == 0)
        rc = cmd_run(L, argc - 2, argv + 2);
    else
        rc = cmd_lua(L, argv[1], argc - 2, argv + 2);
    /* a rank that failed ends every rank of a distributed run (none then waits in a collective) */
    if (rc != 0 && interrupted) rc = 130; /* as a shell reports a process ended by SIGINT */
    if (rc != 0) dp_comm_abort(rc);
    lua_close(L); /* collects the script's tensors before the devices go */
    dpprof_shutdown();
    if (interrupted) { /* end as an interrupted process does, so a calling shell stops too */
        fflush(NULL);
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
    }
    return rc;
}
