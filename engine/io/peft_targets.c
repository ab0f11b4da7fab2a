/* peft_targets.c: adapter_config.json's target_modules, matched as PEFT matches it (see
 * peft_targets.h). */
#include "peft_targets.h"

#include "error.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEFT_REGEX_MAX 1024

/* The linears of a block, by the end of their module name, and their DP_LORA_* bits. */
typedef struct linear_name {
    const char *suffix; /* after "model.layers.<i>." or "transformer.h.<i>." */
    const char *peft;   /* the name in messages */
    unsigned bits;
} linear_name;

static const linear_name gpt_linears[] = {{"attn.c_attn", "c_attn", DP_LORA_QKV},
                                          {"attn.c_proj", "attn.c_proj", DP_LORA_PROJ},
                                          {"mlp.c_fc", "c_fc", DP_LORA_FC},
                                          {"mlp.c_proj", "mlp.c_proj", DP_LORA_DOWN}};
static const linear_name llama_linears[] = {
    {"self_attn.q_proj", "q_proj", DP_LORA_Q}, {"self_attn.k_proj", "k_proj", DP_LORA_K},
    {"self_attn.v_proj", "v_proj", DP_LORA_V}, {"self_attn.o_proj", "o_proj", DP_LORA_O},
    {"mlp.gate_proj", "gate_proj", DP_LORA_GATE}, {"mlp.up_proj", "up_proj", DP_LORA_UP},
    {"mlp.down_proj", "down_proj", DP_LORA_DOWN}};
/* The base model's other weight-holding modules: a selection taking one of them is refused. */
static const char *const gpt_others[] = {"transformer.wte", "transformer.wpe", "lm_head"};
static const char *const llama_others[] = {"model.embed_tokens", "lm_head"};

static const linear_name *linears(dp_arch arch, size_t *n) {
    *n = arch == DP_ARCH_GPT ? sizeof gpt_linears / sizeof *gpt_linears : sizeof llama_linears / sizeof *llama_linears;
    return arch == DP_ARCH_GPT ? gpt_linears : llama_linears;
}

unsigned dp_peft_target_of(dp_arch arch, const char *module) {
    size_t count, ml = strlen(module);
    const linear_name *ln = linears(arch, &count);
    for (size_t i = 0; i < count; i++) {
        size_t sl = strlen(ln[i].suffix);
        if (ml > sl && module[ml - sl - 1] == '.' && strcmp(module + ml - sl, ln[i].suffix) == 0) return ln[i].bits;
    }
    return 0;
}

void dp_peft_targets_text(dp_arch arch, unsigned bits, char *out, size_t n) {
    size_t count, at = 0;
    const linear_name *ln = linears(arch, &count);
    if (n) out[0] = 0;
    for (size_t i = 0; i < count && at < n; i++)
        if ((bits & ln[i].bits) == ln[i].bits)
            at += (size_t)snprintf(out + at, n - at, "%s%s", at ? ", " : "", ln[i].peft);
    if (n && !out[0]) snprintf(out, n, "none");
}

/* Python's re (what PEFT's re.fullmatch reads) as POSIX extended syntax, anchored at both ends:
 * \d \w \s and their capitals become classes, (?: a plain group, \. and the like stay escapes
 * outside brackets; what has no POSIX form (lookarounds, flags, backreferences, escapes inside
 * brackets) and {m,n} counts (glibc compiles them by copying: nested ones take gigabytes and
 * minutes) are refused naming the field. *out is malloc'd. */
static int to_posix(const char *path, const char *re, char **out) {
    static const struct {
        char c;
        const char *cls;
    } classes[] = {{'d', "[0-9]"},         {'D', "[^0-9]"},         {'w', "[A-Za-z0-9_]"},
                   {'W', "[^A-Za-z0-9_]"}, {'s', "[[:space:]]"},    {'S', "[^[:space:]]"}};
    size_t n = strlen(re);
    if (n > PEFT_REGEX_MAX)
        return dp_error_set(DP_EINVAL, "%s: 'target_modules' regular expression is longer than %d characters", path,
                            PEFT_REGEX_MAX);
    char *o = malloc(n * 13 + 8); /* the longest class per character, and ^( )$ */
    if (!o) return dp_error_set(DP_EOOM, "%s: out of host memory", path);
    size_t k = 0;
    const char *why = NULL;
    o[k++] = '^', o[k++] = '(';
    int in_bracket = 0;
    for (const char *c = re; *c && !why; c++) {
        if (in_bracket) {
            if (*c == '\\')
                why = "an escape inside [...]";
            else if (*c == ']' && c[-1] != '[' && !(c[-1] == '^' && c[-2] == '['))
                in_bracket = 0;
            o[k++] = *c;
        } else if (*c == '[') {
            in_bracket = 1;
            o[k++] = *c;
        } else if (*c == '{') {
            why = "a {m,n} repetition count";
        } else if (*c == '(' && c[1] == '?') {
            if (c[2] != ':') why = "a (?...) group other than (?:...)";
            o[k++] = '(';
            c += 2;
        } else if (*c == '\\') {
            if (!c[1]) {
                why = "a trailing backslash";
                break;
            }
            size_t i = 0;
            while (i < sizeof classes / sizeof *classes && classes[i].c != c[1]) i++;
            if (i < sizeof classes / sizeof *classes) {
                k += (size_t)sprintf(o + k, "%s", classes[i].cls);
            } else if ((c[1] >= 'a' && c[1] <= 'z') || (c[1] >= 'A' && c[1] <= 'Z') || (c[1] >= '0' && c[1] <= '9')) {
                why = "an escape with no POSIX form (\\b, \\A, a backreference, ...)";
            } else {
                o[k++] = '\\', o[k++] = c[1];
            }
            c++;
        } else {
            o[k++] = *c;
        }
    }
    if (!why && in_bracket) why = "an unclosed [";
    if (why) {
        free(o);
        return dp_error_set(DP_EINVAL,
                            "%s: 'target_modules' regular expression \"%.200s\" has %s: not supported (POSIX extended "
                            "syntax with Python's \\d \\w \\s and (?:); or give a list of module names)",
                            path, re, why);
    }
    o[k++] = ')', o[k++] = '$', o[k] = 0;
    *out = o;
    return DP_OK;
}

/* How one module name is matched: by a list's names, or by a compiled regex. */
typedef struct matcher {
    const cJSON *list;
    regex_t re;
    int have_re;
    unsigned char *hit; /* per list entry: matched some module */
} matcher;

static int matches(matcher *mt, const char *module) {
    if (mt->have_re) return regexec(&mt->re, module, 0, NULL, 0) == 0;
    int any = 0, i = 0;
    size_t ml = strlen(module);
    for (const cJSON *e = mt->list->child; e; e = e->next, i++) {
        const char *name = e->valuestring;
        size_t nl = strlen(name);
        if (strcmp(module, name) == 0 || (ml > nl && module[ml - nl - 1] == '.' && strcmp(module + ml - nl, name) == 0)) {
            mt->hit[i] = 1;
            any = 1;
        }
    }
    return any;
}

/* Matches every module of the model; the bits of block 0, checked equal in every block. */
static int match_model(const char *path, matcher *mt, dp_arch arch, int64_t layers, unsigned *bits) {
    size_t count;
    const linear_name *ln = linears(arch, &count);
    const char *block = arch == DP_ARCH_GPT ? "transformer.h" : "model.layers";
    char module[160];
    unsigned first = 0;
    for (int64_t l = 0; l < layers; l++) {
        unsigned here = 0;
        for (size_t i = 0; i < count; i++) {
            snprintf(module, sizeof module, "%s.%lld.%s", block, (long long)l, ln[i].suffix);
            if (matches(mt, module)) here |= ln[i].bits;
        }
        if (l == 0) first = here;
        if (here != first) {
            char a[160], b[160];
            dp_peft_targets_text(arch, first, a, sizeof a);
            dp_peft_targets_text(arch, here, b, sizeof b);
            return dp_error_set(DP_ENOTSUP,
                                "%s: 'target_modules' selects %s in block 0 but %s in block %lld: dpprof adapts the "
                                "same linears in every block",
                                path, a, b, (long long)l);
        }
    }
    size_t n_others = arch == DP_ARCH_GPT ? 3 : 2;
    for (size_t i = 0; i < n_others; i++) {
        const char *other = arch == DP_ARCH_GPT ? gpt_others[i] : llama_others[i];
        if (matches(mt, other))
            return dp_error_set(DP_ENOTSUP,
                                "%s: 'target_modules' selects '%s', which dpprof cannot adapt (LoRA on the blocks' "
                                "linears only)",
                                path, other);
    }
    *bits = first;
    return DP_OK;
}

int dp_peft_targets(const char *path, const cJSON *v, dp_arch arch, int64_t layers, unsigned *bits) {
    *bits = 0;
    if (!v || cJSON_IsNull(v)) { /* PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING */
        *bits = arch == DP_ARCH_GPT ? DP_LORA_QKV : DP_LORA_Q | DP_LORA_V;
        return DP_OK;
    }
    matcher mt = {0};
    int rc = DP_OK;
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "all-linear") == 0) {
            *bits = DP_LORA_ALL;
            return DP_OK;
        }
        char *posix = NULL;
        DP_TRY(to_posix(path, v->valuestring, &posix));
        int bad = regcomp(&mt.re, posix, REG_EXTENDED | REG_NOSUB);
        free(posix);
        if (bad)
            return dp_error_set(DP_EINVAL,
                                "%s: 'target_modules' \"%.200s\" is not a regular expression dpprof can match (POSIX "
                                "extended syntax with Python's \\d \\w \\s and (?:), nor a list of module names",
                                path, v->valuestring);
        mt.have_re = 1;
    } else if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v), i = 0;
        if (n == 0)
            return dp_error_set(DP_EINVAL, "%s: 'target_modules' is an empty list: it must name the linears to adapt",
                                path);
        for (const cJSON *e = v->child; e; e = e->next, i++)
            if (!cJSON_IsString(e) || !*e->valuestring)
                return dp_error_set(DP_EINVAL, "%s: 'target_modules' entry %d is not a module name (a non-empty string)",
                                    path, i + 1);
        mt.list = v;
        mt.hit = calloc((size_t)n, 1);
        if (!mt.hit) return dp_error_set(DP_EOOM, "%s: out of host memory", path);
    } else {
        return dp_error_set(DP_EINVAL,
                            "%s: 'target_modules' must be a list of module names, a regular expression (a string) or "
                            "null",
                            path);
    }
    rc = match_model(path, &mt, arch, layers, bits);
    int i = 0;
    for (const cJSON *e = mt.list ? mt.list->child : NULL; e && rc == DP_OK; e = e->next, i++)
        if (!mt.hit[i])
            rc = dp_error_set(DP_EINVAL, "%s: 'target_modules' names '%.100s', which is no module of this %s model",
                              path, e->valuestring, arch == DP_ARCH_GPT ? "gpt2" : "llama");
    if (rc == DP_OK && !*bits)
        rc = dp_error_set(DP_EINVAL, "%s: 'target_modules' selects no linear of this %s model", path,
                          arch == DP_ARCH_GPT ? "gpt2" : "llama");
    if (mt.have_re) regfree(&mt.re);
    free(mt.hit);
    return rc;
}
