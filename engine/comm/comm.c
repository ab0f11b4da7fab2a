/* comm.c: the collectives through a communicator's table, each
 * recorded in the ledger with the bytes this rank puts on the wire and timed in the profile. */
#include "comm.h"

#include "clock.h"
#include "dispatch.h"
#include "error.h"
#include "ledger.h"

#include <stdlib.h>
#include <string.h>

double dp_comm_wire_bytes(const char *op, double bytes, int world_size) {
    double n = world_size > 0 ? (double)world_size : 1.0;
    if (world_size <= 1) return 0.0;
    if (strcmp(op, "comm_all_reduce") == 0) return 2.0 * (n - 1.0) / n * bytes;
    if (strcmp(op, "comm_reduce_scatter") == 0 || strcmp(op, "comm_all_gather") == 0) return (n - 1.0) / n * bytes;
    if (strcmp(op, "comm_broadcast") == 0) return bytes;
    return 0.0;
}

static struct {
    int gpus_per_node;
    double intra, inter, device;
} link;

void dp_comm_link_model(int gpus_per_node, double intra_Bps, double inter_Bps, double device_Bps) {
    int on = gpus_per_node > 0 && intra_Bps > 0 && inter_Bps > 0 && device_Bps > 0;
    link.gpus_per_node = on ? gpus_per_node : 0;
    link.intra = on ? intra_Bps : 0;
    link.inter = on ? inter_Bps : 0;
    link.device = on ? device_Bps : 0;
}

double dp_comm_link_seconds(double wire_bytes, int world_size) {
    if (link.gpus_per_node <= 0) return 0.0;
    return wire_bytes / (world_size <= link.gpus_per_node ? link.intra : link.inter);
}

/* The ledger entry of a collective: its wire bytes. On a modelled clock dp_ledger_add timed them at
 * the device's memory bandwidth; the link model's time is the rest (clock.h's roofline with no
 * flops is bytes / bandwidth, so the remainder is given to it as bytes at that bandwidth). */
static void record(const char *op, double bytes, int world_size) {
    double wire = dp_comm_wire_bytes(op, bytes, world_size);
    dp_ledger_add(op, 0.0, wire);
    double t = dp_comm_link_seconds(wire, world_size);
    if (t > 0 && dp_clock_modelled()) {
        double rest = t * link.device - wire;
        if (rest > 0) dp_clock_advance(0.0, rest);
    }
}

static int check_f32(const dp_tensor *t, const char *op) {
    if (t->dtype != DP_F32)
        return dp_error_set(DP_ENOTSUP, "%s: collectives move f32 tensors, an all_gather bf16 too (got %s)", op,
                            dp_dtype_name(t->dtype));
    return DP_OK;
}

/* the ledger entry of a collective over `bytes` of data, then the call, timed on dev */
#define COMM_CALL(c, dev, op, bytes, call) (record(op, (bytes), (c)->world_size), DP_PROFILED(dev, (call)))

static double tensor_bytes(const dp_tensor *t) { return (double)t->numel * (double)dp_dtype_size(t->dtype); }

int dp_comm_checking_sizes(void) {
#ifndef NDEBUG
    return 1;
#else
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("DPPROF_CHECK_COLLECTIVES");
        on = e && *e && strcmp(e, "0") != 0;
    }
    return on;
#endif
}

/* Before a collective, when dp_comm_checking_sizes: every rank's element count and dtype of t
 * (what each derived on its own) gathered and compared, so that ranks that disagree fail on every
 * rank, naming both, instead of overrunning a buffer or waiting for bytes that never come. */
static int same_size(dp_comm *c, const char *op, const dp_tensor *t) {
    if (c->world_size <= 1 || !c->ops->all_gather_host || !dp_comm_checking_sizes()) return DP_OK;
    long long mine[2] = {(long long)t->numel, (long long)t->dtype};
    size_t *n = calloc((size_t)c->world_size, sizeof *n);
    if (!n) return dp_error_set(DP_EOOM, "%s: out of host memory", op);
    n[c->rank] = sizeof mine;
    char *all = NULL;
    int rc = c->ops->all_gather_host(c, mine, n, &all);
    size_t at = 0;
    for (int r = 0; r < c->world_size && rc == DP_OK; r++) {
        long long theirs[2] = {-1, -1};
        if (n[r] == sizeof theirs) memcpy(theirs, all + at, sizeof theirs);
        at += n[r];
        if (theirs[0] != mine[0] || theirs[1] != mine[1])
            rc = dp_error_set(DP_EINVAL,
                              "distributed: ranks disagree on the size of a %s: rank %d moves %lld %s elements, "
                              "rank %d %lld %s",
                              op, c->rank, mine[0], dp_dtype_name(t->dtype), r, theirs[0],
                              theirs[1] >= 0 && theirs[1] < DP_DTYPE_COUNT ? dp_dtype_name((dp_dtype)theirs[1]) : "?");
    }
    free(all);
    free(n);
    return rc;
}

int dp_comm_all_reduce(dp_comm *c, dp_tensor *t) {
    DP_TRY(check_f32(t, "all_reduce"));
    DP_TRY(same_size(c, "all_reduce", t));
    return COMM_CALL(c, t->dev, "comm_all_reduce", tensor_bytes(t), c->ops->all_reduce(c, t));
}

/* whole is world_size parts; f32 (sums), or an all-gather's bf16 too (a copy: fsdp's compute weights) */
static int check_parts(dp_comm *c, const dp_tensor *whole, const dp_tensor *part, const char *op, int any16) {
    if (!(any16 && whole->dtype == DP_BF16 && part->dtype == DP_BF16)) {
        DP_TRY(check_f32(whole, op));
        DP_TRY(check_f32(part, op));
    }
    if (whole->numel != part->numel * c->world_size)
        return dp_error_set(DP_EINVAL, "%s: %lld elements are not %d parts of %lld", op, (long long)whole->numel,
                            c->world_size, (long long)part->numel);
    return DP_OK;
}

int dp_comm_reduce_scatter(dp_comm *c, const dp_tensor *in, dp_tensor *out) {
    DP_TRY(check_parts(c, in, out, "reduce_scatter", 0));
    DP_TRY(same_size(c, "reduce_scatter", in));
    return COMM_CALL(c, in->dev, "comm_reduce_scatter", tensor_bytes(in), c->ops->reduce_scatter(c, in, out));
}

int dp_comm_all_gather(dp_comm *c, const dp_tensor *in, dp_tensor *out) {
    DP_TRY(check_parts(c, out, in, "all_gather", 1));
    DP_TRY(same_size(c, "all_gather", in));
    return COMM_CALL(c, in->dev, "comm_all_gather", tensor_bytes(out), c->ops->all_gather(c, in, out));
}

int dp_comm_broadcast(dp_comm *c, dp_tensor *t, int root) {
    if (root < 0 || root >= c->world_size)
        return dp_error_set(DP_EINVAL, "broadcast: root %d is not a rank of a world of %d", root, c->world_size);
    DP_TRY(check_f32(t, "broadcast"));
    DP_TRY(same_size(c, "broadcast", t));
    return COMM_CALL(c, t->dev, "comm_broadcast", tensor_bytes(t), c->ops->broadcast(c, t, root));
}

int dp_comm_barrier(dp_comm *c) { return c->ops->barrier(c); }

/* a world of one, or a plan world whose other ranks do not exist: this rank's bytes alone */
static int own_bytes(dp_comm *c, const void *buf, size_t *n, char **out) {
    size_t mine = n[c->rank];
    for (int r = 0; r < c->world_size; r++) n[r] = r == c->rank ? mine : 0;
    *out = malloc(mine ? mine : 1);
    if (!*out) return dp_error_set(DP_EOOM, "all_gather_host: out of host memory");
    if (mine) memcpy(*out, buf, mine);
    return DP_OK;
}

int dp_comm_all_gather_host(dp_comm *c, const void *buf, size_t *n, char **out) {
    *out = NULL;
    if (c->world_size <= 1 || !c->ops->all_gather_host) return own_bytes(c, buf, n, out);
    return c->ops->all_gather_host(c, buf, n, out);
}
