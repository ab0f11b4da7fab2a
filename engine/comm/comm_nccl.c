/* comm_nccl.c: collectives over NCCL on CUDA tensors. The library is dlopen'ed at the first
 * distributed CUDA run; the communicator is made with ncclGetUniqueId (rank 0) and
 * ncclCommInitRank, the id shared through the MPI world's host all-gather (a world of one needs
 * no launcher). Each collective runs on a stream of its own after the device's work is done
 * (dp_device_sync) and is waited for, so it is ordered with the backend's stream either way. */
#include "comm_nccl.h"

#include "device.h"
#include "error.h"

#ifdef DPPROF_HAVE_CUDA
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#define DP_HAVE_NCCL_H 1
#endif
#endif
#ifndef DP_HAVE_NCCL_H /* NCCL 2's ABI, for a toolkit without its header */
typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
#define ncclSuccess 0
#define ncclFloat32 7
#define ncclBfloat16 9
#define ncclSum 0
#endif

static struct {
    void *lib;
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
    ncclComm_t comm;
    cudaStream_t stream;
    dp_comm c;
    dp_comm *world;
    int made;
} nc;

static int nccl_check(ncclResult_t rc, const char *op) {
    if (rc == ncclSuccess) return DP_OK;
    return dp_error_set(DP_EDEVICE, "distributed: NCCL %s failed: %s", op,
                        nc.error_string ? nc.error_string(rc) : "unknown error");
}

/* the device's work done, the collective on our stream, then waited for */
static int run_on_stream(const dp_tensor *t, ncclResult_t rc, const char *op) {
    DP_TRY(nccl_check(rc, op));
    cudaError_t e = cudaStreamSynchronize(nc.stream);
    if (e != cudaSuccess) return dp_error_set(DP_EDEVICE, "distributed: NCCL %s: %s", op, cudaGetErrorString(e));
    return (void)t, DP_OK;
}

static int device_only(const dp_tensor *t, const char *op) {
    if (t->dev->kind != DP_DEV_CUDA)
        return dp_error_set(DP_ENOTSUP, "distributed: NCCL %s moves CUDA tensors only", op);
    return dp_device_sync(t->dev);
}

static int nccl_all_reduce(dp_comm *c, dp_tensor *t) {
    (void)c;
    DP_TRY(device_only(t, "all_reduce"));
    return run_on_stream(t, nc.all_reduce(t->data, t->data, (size_t)t->numel, ncclFloat32, ncclSum, nc.comm, nc.stream),
                         "all_reduce");
}

static int nccl_reduce_scatter(dp_comm *c, const dp_tensor *in, dp_tensor *out) {
    (void)c;
    DP_TRY(device_only(in, "reduce_scatter"));
    return run_on_stream(
        in, nc.reduce_scatter(in->data, out->data, (size_t)out->numel, ncclFloat32, ncclSum, nc.comm, nc.stream),
        "reduce_scatter");
}

static int nccl_all_gather(dp_comm *c, const dp_tensor *in, dp_tensor *out) {
    (void)c;
    DP_TRY(device_only(in, "all_gather"));
    ncclDataType_t t = in->dtype == DP_BF16 ? ncclBfloat16 : ncclFloat32; /* fsdp's bf16 compute weights */
    return run_on_stream(in, nc.all_gather(in->data, out->data, (size_t)in->numel, t, nc.comm, nc.stream),
                         "all_gather");
}

static int nccl_broadcast(dp_comm *c, dp_tensor *t, int root) {
    (void)c;
    DP_TRY(device_only(t, "broadcast"));
    return run_on_stream(t, nc.broadcast(t->data, t->data, (size_t)t->numel, ncclFloat32, root, nc.comm, nc.stream),
                         "broadcast");
}

static int nccl_barrier(dp_comm *c) {
    (void)c;
    return dp_comm_barrier(nc.world);
}

static int nccl_gather_host(dp_comm *c, const void *buf, size_t *n, char **out) {
    (void)c;
    return dp_comm_all_gather_host(nc.world, buf, n, out);
}

static const dp_comm_ops nccl_ops = {"nccl",         nccl_all_reduce, nccl_reduce_scatter, nccl_all_gather,
                                     nccl_broadcast, nccl_barrier,    nccl_gather_host};

static int load(void) {
    const char *path = getenv("DPPROF_NCCL");
    const char *name = path && *path ? path : "libnccl.so.2";
    nc.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!nc.lib)
        return dp_error_set(DP_EINVAL,
                            "distributed: NCCL is needed by a distributed CUDA run but %s cannot be loaded (%s): set "
                            "DPPROF_NCCL to the library's path or add its folder to LD_LIBRARY_PATH (PyPI's "
                            "nvidia-nccl-cu13 has it in site-packages/nvidia/nccl/lib)",
                            name, dlerror());
    struct {
        void **fn;
        const char *sym;
    } syms[] = {{(void **)&nc.get_unique_id, "ncclGetUniqueId"}, {(void **)&nc.init_rank, "ncclCommInitRank"},
                {(void **)&nc.all_reduce, "ncclAllReduce"},      {(void **)&nc.reduce_scatter, "ncclReduceScatter"},
                {(void **)&nc.all_gather, "ncclAllGather"},      {(void **)&nc.broadcast, "ncclBroadcast"},
                {(void **)&nc.destroy, "ncclCommDestroy"},       {(void **)&nc.error_string, "ncclGetErrorString"}};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(nc.lib, syms[i].sym);
        if (!*syms[i].fn) {
            dlclose(nc.lib);
            nc.lib = NULL;
            return dp_error_set(DP_EINVAL, "distributed: %s has no %s (is it NCCL 2?)", name, syms[i].sym);
        }
    }
    return DP_OK;
}

int dp_comm_nccl(dp_comm *world, dp_comm **out) {
    *out = &nc.c;
    if (nc.made) return DP_OK;
    if (!nc.lib) DP_TRY(load());
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (world->rank == 0) DP_TRY(nccl_check(nc.get_unique_id(&id), "get_unique_id"));
    if (world->world_size > 1) { /* rank 0's id to every rank */
        size_t *n = calloc((size_t)world->world_size, sizeof *n);
        char *all = NULL;
        if (!n) return dp_error_set(DP_EOOM, "distributed: out of host memory");
        n[world->rank] = sizeof id;
        int rc = dp_comm_all_gather_host(world, &id, n, &all);
        if (rc == DP_OK && n[0] != sizeof id) rc = dp_error_set(DP_EINTERNAL, "distributed: NCCL id not shared");
        if (rc == DP_OK) memcpy(&id, all, sizeof id);
        free(n);
        free(all);
        DP_TRY(rc);
    }
    cudaError_t e = cudaStreamCreateWithFlags(&nc.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return dp_error_set(DP_EDEVICE, "distributed: NCCL stream: %s", cudaGetErrorString(e));
    DP_TRY(nccl_check(nc.init_rank(&nc.comm, world->world_size, id, world->rank), "comm_init_rank"));
    nc.c.ops = &nccl_ops;
    nc.c.rank = world->rank;
    nc.c.world_size = world->world_size;
    nc.world = world;
    nc.made = 1;
    return DP_OK;
}

void dp_comm_nccl_stop(void) {
    if (nc.made) {
        nc.destroy(nc.comm);
        cudaStreamDestroy(nc.stream);
    }
    nc.made = 0;
}

#else

int dp_comm_nccl(dp_comm *world, dp_comm **out) {
    (void)world;
    *out = NULL;
    return dp_error_set(DP_ENOTSUP, "distributed: NCCL needs the CUDA backend (this dpprof was built without it)");
}

void dp_comm_nccl_stop(void) {}

#endif
