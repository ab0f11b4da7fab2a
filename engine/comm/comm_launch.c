/* comm_launch.c: the launcher that started this process, read from its environment. */
#include "comm.h"

#include "error.h"

#include <errno.h>
#include <stdlib.h>

/* The integer in variable `name` into *out (0 when unset); DP_EINVAL when it is not one >= min. */
static int env_int(const char *name, int min, int *out, int *set) {
    const char *v = getenv(name);
    *set = v != NULL && *v != '\0';
    if (!*set) return DP_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end != '\0' || x < min || x > 1 << 24)
        return dp_error_set(DP_EINVAL, "distributed: the launcher's %s='%s' is not an integer >= %d", name, v, min);
    *out = (int)x;
    return DP_OK;
}

int dp_comm_launcher(dp_launch *out) {
    static const struct {
        const char *launcher, *size, *rank;
    } vars[] = {{"mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                {"pmi", "PMI_SIZE", "PMI_RANK"},
                {"srun", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"}};
    out->launcher = NULL;
    out->rank = 0;
    out->world_size = 1;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int size = 1, rank = 0, has_size, has_rank;
        DP_TRY(env_int(vars[i].size, 1, &size, &has_size));
        if (!has_size) continue;
        DP_TRY(env_int(vars[i].rank, 0, &rank, &has_rank));
        if (!has_rank || rank >= size)
            return dp_error_set(DP_EINVAL, "distributed: %s=%d but %s is %s", vars[i].size, size, vars[i].rank,
                                has_rank ? "not below it" : "unset");
        out->launcher = vars[i].launcher;
        out->rank = rank;
        out->world_size = size;
        return DP_OK;
    }
    return DP_OK;
}
