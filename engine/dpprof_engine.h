/* dpprof_engine.h: the dpprof engine as a C library, without Lua. Include this header, link the
 * CMake target dpprof_engine (libdpprof_engine.a and the parts it links) or, installed,
 * libdpprof.so (`#include <dpprof/dpprof_engine.h>`, `pkg-config --cflags --libs dpprof`, or
 * find_package(dpprof) and dpprof::engine: docs/building.md), and every byte the engine
 * allocates is tagged with what it is for and which module asked.
 *
 * One DP-SGD step on a small GPT, its memory read back (tests/c/test_engine_api.c runs this):
 *
 *   dp_engine_init();                                      registers cpu, plan (and cuda)
 *   dp_device *dev;      dp_device_get(DP_DEV_CPU, &dev);  or DP_DEV_CUDA, DP_DEV_PLAN
 *   dp_model_config mc;  dp_model_config_default(&mc, DP_ARCH_GPT);   then set sizes
 *   dp_model *m;         dp_model_new(dev, &mc, &m);
 *   dp_optim_opts oo;    dp_optim_opts_default(&oo, DP_OPTIM_ADAMW);
 *   dp_optimizer *opt;   dp_optim_new(m, DP_OPTIM_ADAMW, &oo, &opt);
 *   dpsgd_config dc;     dpsgd_config_default(&dc);  dc.norms = DPSGD_NORMS_GHOST;
 *                        dc.clip = DPSGD_CLIP_TWOPASS;  (or dpsgd_method_preset("bk", ...))
 *   dpsgd *dp;           dpsgd_new(m, &dc, &dp);
 *   dp_batch b;          dp_batch_init(&b, dev, mc.batch, mc.seq_len);
 *   dpsgd_step_plan sp;  dpsgd_next_step(dp, &sp);          one logical step:
 *   for each physical batch k < sp.n_physical:
 *       dp_data_synthetic(&b.inputs, &b.targets, mc.vocab, seed, k);
 *       dpsgd_forward(dp, &b.inputs, &b.targets, &loss, NULL);
 *       dpsgd_backward(dp);  dpsgd_clip(dp);
 *   dpsgd_noise(dp);  dp_optim_step(opt);  dp_optim_zero_grad(opt, 1);
 *   dp_mem_stats st;     dp_mem_get_stats(dev->mem, &st);   bytes per dp_category: now,
 *                                                            peak, live at the total peak
 *   dp_batch_release(&b); dpsgd_free(dp); dp_optim_free(opt); dp_model_free(m);
 *   dp_engine_shutdown();
 *
 * The per-op profile of the steps (the time, calls, flops and bytes of each op, by category):
 *
 *   dp_ledger_reset();  dp_profile_enable(dev, 1);         then run steps
 *   dp_device_sync(dev);  dp_profile_collect(dev);         reads a CUDA device's op timers
 *   for (size_t i = 0; i < dp_engine_op_count(); i++) {
 *       dp_engine_op op;  dp_engine_op_at(i, &op);          op.op, op.category, op.calls, op.ms, ...
 *   }
 *   dp_profile_enable(dev, 0);
 *
 * Errors are values: every call returns DP_OK or a status code (error.h) whose one-line message,
 * naming the problem and the valid choices, is dp_error_message(). Nothing aborts; running out of
 * device memory is DP_EOOM with dp_mem_last_oom() describing the request.
 *
 * The headers below are the manuals of the engine's modules, one line per function: */
#ifndef DPPROF_ENGINE_H
#define DPPROF_ENGINE_H

#include "error.h"    /* status codes, dp_error_message, DP_TRY */
#include "dtype.h"    /* f32, bf16, i32 */
#include "memory.h"   /* the tagged allocator: categories, stats, per-module figures, snapshots, OOM */
#include "scope.h"    /* module scopes: the dotted paths allocations are tagged with */
#include "ledger.h"   /* flops and bytes moved per op name */
#include "profile.h"  /* per-op timing (profile = "ops"): dp_profile_enable on and off, collect, total */
#include "clock.h"    /* the monotonic clock of timings and snapshots */
#include "device.h"   /* devices (cpu, cuda, plan), the current device, sync, snapshots, shutdown */
#include "tensor.h"   /* tensors on a device: allocate, view, copy, fill, random */
#include "ops.h"      /* GEMM, add, scale, axpy, sums of squares on tensors */
#include "model.h"    /* GPT and Llama (LoRA, bf16): build, forward, backward, parameters */
#include "data.h"     /* token batches: synthetic or from a token file */
#include "optim.h"    /* AdamW and SGD with PyTorch's rules */
#include "dpsgd.h"    /* DP-SGD around a model: norms x clip methods, presets, noise, sampling */
#include "dpsgd_dist.h" /* a run's `distributed` configuration and the world it trains over */
#include "rdp.h"  /* the RDP of the sampled Gaussian: epsilon at delta, noise multiplier for a target */
#include "accountant.h" /* the accountants by name (rdp, prv, pld) over a history of segments */
#include "model_io.h" /* Hugging Face checkpoints (safetensors + config.json) in and out */
#include "tokenizer.h" /* Hugging Face tokenizer.json: encode and decode text (byte-level and SentencePiece BPE) */
#include "dataset.h"   /* data sets of text (JSONL, JSON arrays, text) read as a stream of records */
#include "version.h"  /* the engine's version and build commit */

/* Registers the backends this build has (cpu, plan and, when compiled, cuda) with the device
 * registry. Call once before any device is used; calling again is harmless. DP_OK or the error. */
int dp_engine_init(void);

/* Threads of the CPU backend (its parallel loops and GEMMs share one OpenMP team; OpenBLAS runs
 * single-threaded inside it): OMP_NUM_THREADS, else the CPU count, until dp_engine_set_threads. */
int dp_engine_threads(void);

/* The BLAS of the CPU backend: library, version, the kernel that runs, who chose it. */
typedef struct dp_engine_blas {
    char library[16];   /* "OpenBLAS" */
    char version[32];   /* "0.3.21" */
    char core[32];      /* the running kernel, openblas_get_corename(): "SkylakeX", "Zen", "Prescott" */
    char chosen_by[24]; /* "openblas" (its detection), "dpprof" (from the CPU's flags), "OPENBLAS_CORETYPE" */
    int generic;        /* 1: a generic fallback kernel runs (several times slower GEMMs) */
} dp_engine_blas;

/* Fills out with the CPU backend's BLAS as it runs in this process. */
void dp_engine_blas_info(dp_engine_blas *out);

/* The OPENBLAS_CORETYPE a binary should re-execute itself with before any work (execv of
 * /proc/self/exe, DPPROF_BLAS_CORETYPE set to the same value as the guard), or NULL: only when the
 * library fell back to a generic kernel and the CPU's flags name a better one (cpu_blas.h). */
const char *dp_engine_blas_reexec_core(void);

/* Sets the CPU backend's thread count (n >= 1) for this process and the children it forks after.
 * DP_OK, or DP_EINVAL naming n and the valid range. */
int dp_engine_set_threads(int n);

/* One op of the per-op profile: its ledger entry (ledger.h) with its category and measured time. */
typedef struct dp_engine_op {
    const char *op;                    /* the ledger's name ("recompute:gemm" in a section), until dp_ledger_reset */
    const char *category;              /* its category: a name of the result schema's profile.ops[].category */
    uint64_t calls;                    /* calls recorded, timed or not */
    uint64_t timed_calls;              /* backend calls timed while profiling was on */
    double ms;                         /* the timed calls' time (a plan device's: modelled) */
    double flops, bytes;               /* floating-point operations; bytes read + written */
    uint64_t alloc_bytes, freed_bytes; /* tagged bytes allocated and freed for the timed calls */
} dp_engine_op;

/* The category of a ledger op name: matmul, attention, norm, per_sample_norms, clip, noise,
 * optimizer or other ("<section>:<op>" is in its op's); a static string. */
const char *dp_engine_op_category(const char *op);
/* Number of ops in the per-op profile (the ledger's, in order of first use). */
size_t dp_engine_op_count(void);
/* Op i of the per-op profile into *out (DP_OK), or DP_EINVAL naming i and the count. */
int dp_engine_op_at(size_t i, dp_engine_op *out);

#endif
