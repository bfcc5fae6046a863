/* sample.c — `ringmaster-worker sample`: generation from a trained language model over the model
 * interface (sample.h). */
#include "worker/sample.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/rm.h"
#include "kernels/kernels.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/manifest.h"
#include "worker/data/data.h"
#include "worker/model/export.h"
#include "worker/model/model.h"

#define SAMPLE_MAX_TOKENS (1 << 24)

typedef struct sample_cfg {
    const char *model, *checkpoint, *prompt, *prompt_tokens, *logits;
    long tokens;
    double temperature;
    int top_k, threads;
    uint64_t seed;
} sample_cfg;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ringmaster sample (--model FILE|DIR | --checkpoint DIR) (--prompt TEXT | --prompt-tokens "
            "1,2,3)\n"
            "                         [--tokens N] [--temperature T] [--top-k K] [--seed S] [--threads N]\n"
            "  --model FILE|DIR     an export: model.safetensors (or its folder) with config.json beside it\n"
            "  --checkpoint DIR     the newest checkpoint of a checkpoint folder (else DIR/export)\n"
            "  --prompt TEXT        a byte model's prompt (vocabulary <= 256): prints bytes\n"
            "  --prompt-tokens IDS  token ids, comma-separated: prints ids, comma-separated\n"
            "  --tokens N           tokens to generate (default 100)\n"
            "  --temperature T      0 = greedy, deterministic (default 1)\n"
            "  --top-k K            draw among the K most likely tokens (default 0: all)\n"
            "  --seed S             the draw's seed (default 0)\n"
            "  --threads N          kernel threads (default 1)\n"
            "  --logits FILE        also write the prompt's logits (float32 little-endian, prompt\n"
            "                       tokens x vocabulary; the prompt at most the context) to FILE\n"
            "stdout gets the prompt and the generated tokens only; logs go to stderr.\n");
}

static int parse_num(const char *flag, const char *s, double lo, double hi, double *out, rm_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi))
        return rm_err_field(err, RM_EINVAL, flag, "must be a number in [%g, %g] (got \"%s\")", lo, hi, s);
    *out = v;
    return RM_OK;
}

static int parse_args(int argc, char **argv, sample_cfg *c, rm_err *err)
{
    enum {
        O_MODEL = 256,
        O_CKPT,
        O_PROMPT,
        O_PTOK,
        O_TOKENS,
        O_TEMP,
        O_TOPK,
        O_SEED,
        O_THREADS,
        O_LOGITS,
        O_HELP
    };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},
        {"checkpoint", required_argument, 0, O_CKPT},
        {"prompt", required_argument, 0, O_PROMPT},
        {"prompt-tokens", required_argument, 0, O_PTOK},
        {"tokens", required_argument, 0, O_TOKENS},
        {"temperature", required_argument, 0, O_TEMP},
        {"top-k", required_argument, 0, O_TOPK},
        {"seed", required_argument, 0, O_SEED},
        {"threads", required_argument, 0, O_THREADS},
        {"logits", required_argument, 0, O_LOGITS},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    *c = (sample_cfg){.tokens = 100, .temperature = 1.0, .threads = 1};
    optind = 1;
    opterr = 0;
    int o;
    double v;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case O_MODEL:
            c->model = optarg;
            break;
        case O_CKPT:
            c->checkpoint = optarg;
            break;
        case O_PROMPT:
            c->prompt = optarg;
            break;
        case O_PTOK:
            c->prompt_tokens = optarg;
            break;
        case O_TOKENS:
            RM_CHECK(parse_num("--tokens", optarg, 0, SAMPLE_MAX_TOKENS, &v, err));
            c->tokens = (long)v;
            break;
        case O_TEMP:
            RM_CHECK(parse_num("--temperature", optarg, 0, 1e6, &c->temperature, err));
            break;
        case O_TOPK:
            RM_CHECK(parse_num("--top-k", optarg, 0, 1 << 24, &v, err));
            c->top_k = (int)v;
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            c->seed = strtoull(optarg, &end, 10);
            if (!*optarg || *end || errno || optarg[0] == '-')
                return rm_err_field(err, RM_EINVAL, "--seed", "must be an unsigned integer (got \"%s\")",
                                    optarg);
            break;
        }
        case O_LOGITS:
            c->logits = optarg;
            break;
        case O_THREADS:
            RM_CHECK(parse_num("--threads", optarg, 1, 1024, &v, err));
            c->threads = (int)v;
            break;
        case 'h':
        case O_HELP:
            return rm_errf(err, RM_EINVAL, "help");
        default:
            return rm_errf(err, RM_EINVAL, "unknown flag \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return rm_errf(err, RM_EINVAL, "unexpected argument \"%s\"", argv[optind]);
    if (!c->model == !c->checkpoint)
        return rm_errf(err, RM_EINVAL, "give one of --model and --checkpoint");
    if (!c->prompt == !c->prompt_tokens)
        return rm_errf(err, RM_EINVAL, "give one of --prompt and --prompt-tokens");
    if (c->prompt && !*c->prompt)
        return rm_err_field(err, RM_EINVAL, "--prompt", "must not be empty");
    return RM_OK;
}

/* --prompt-tokens: ids separated by commas, each < vocab. */
static int parse_tokens(const char *s, int vocab, int32_t **out, long *n, rm_err *err)
{
    long cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    long k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= vocab || (*end && *end != ',')) {
            free(t);
            return rm_err_field(err, RM_EINVAL, "--prompt-tokens",
                                "token %ld: must be an integer in [0, %d) (the model's vocabulary)", k + 1,
                                vocab);
        }
        t[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(t);
        return rm_err_field(err, RM_EINVAL, "--prompt-tokens", "no tokens");
    }
    *out = t;
    *n = k;
    return RM_OK;
}

/* The newest manifest (highest step) among DIR's index-*.json; RM_ENOTFOUND when there is none. */
static int newest_manifest(const char *dir, const char *flag, rm_ckpt_manifest *out, char *path, size_t cap,
                           rm_err *err)
{
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d)
        return rm_err_field(err, RM_EIO, flag, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "index-", 6) != 0 || n < 11 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        char p[4200];
        rm_sfmt(p, sizeof p, "%s/%s", dir, e->d_name);
        rm_ckpt_manifest m;
        rm_err me = {0};
        if (rm_ckpt_manifest_read(p, &m, &me) != RM_OK) {
            rm_warn("sample: skipping a manifest that cannot be read path=%s err=\"%s\"", p, me.msg);
            continue;
        }
        if (!found || m.step > out->step) {
            rm_ckpt_manifest_free(out);
            *out = m;
            rm_sfmt(path, cap, "%s", p);
            found = 1;
        } else {
            rm_ckpt_manifest_free(&m);
        }
    }
    closedir(d);
    return found ? RM_OK : RM_ENOTFOUND;
}

/* See sample.h. */
int rm_ckpt_model_load(const char *who, const char *dir, const char *flag, rm_model *m, int64_t *step,
                       rm_err *err)
{
    const rm_kernels *k = rm_kernels_cpu();
    const rm_model_family *fam;
    rm_err e = {0};
    rm_ckpt_manifest mf;
    char mpath[4200];
    int rc = newest_manifest(dir, flag, &mf, mpath, sizeof mpath, err);
    if (rc)
        return rc;
    fam = rm_model_family_find(mf.family);
    rc =
        fam ? RM_OK : rm_err_field(err, RM_EINVAL, flag, "%s: unknown model family \"%s\"", mpath, mf.family);
    /* the whole shape record from a checkpoint file's header: the manifest keeps words
     * 0..nlayers, which are all of an MLP's but not a transformer's */
    rm_ckpt_meta hm;
    char fpath[4200];
    if (rc == RM_OK && mf.nfiles < 1)
        rc = rm_err_field(err, RM_EINVAL, flag, "%s: lists no files", mpath);
    if (rc == RM_OK) {
        rm_sfmt(fpath, sizeof fpath, "%s/%s", dir, mf.files[0].name);
        if ((rc = rm_ckpt_read_header(fpath, &hm, NULL, &e)) != RM_OK)
            rc = rm_err_field(err, rc, flag, "%s", e.msg);
        else if (hm.shape.nlayers != mf.shape.nlayers ||
                 memcmp(hm.shape.dims, mf.shape.dims, (size_t)(mf.shape.nlayers + 1) * sizeof(int)) != 0)
            rc = rm_err_field(err, RM_EINVAL, flag, "%s: the model's shape differs from %s's", fpath, mpath);
    }
    if (rc == RM_OK && (rc = rm_model_init(m, k, fam, &hm.shape, 1, &e)) != RM_OK)
        rc = rm_err_field(err, rc, flag, "%s: %s", mpath, e.msg);
    if (rc == RM_OK && m->nparams != mf.nparams)
        rc = rm_err_field(err, RM_EINVAL, flag, "%s: %llu parameters, the model has %zu", mpath,
                          (unsigned long long)mf.nparams, m->nparams);
    size_t cap = (size_t)(1 + mf.nstate) * m->nparams * sizeof(float);
    float *buf = rc == RM_OK ? malloc(cap) : NULL;
    if (rc == RM_OK && !buf)
        rc = rm_errf(err, RM_ENOMEM, "out of memory (%zu bytes)", cap);
    if (rc == RM_OK && (rc = rm_ckpt_manifest_assemble(dir, &mf, NULL, 0, m->nparams, buf, cap, &e)))
        rc = rm_err_field(err, rc, flag, "%s", e.msg);
    if (rc == RM_OK) {
        memcpy(m->params, buf, m->nparams * sizeof(float)); /* the parameters: buffer 0 */
        rm_info("%s: checkpoint loaded path=%s step=%lld", who, mpath, (long long)mf.step);
        if (step)
            *step = mf.step;
    }
    free(buf);
    rm_ckpt_manifest_free(&mf);
    return rc;
}

/* The model and its parameters from an export or a checkpoint folder. */
static int load_model(const sample_cfg *c, rm_model *m, rm_err *err)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_kernels_set_threads(k, c->threads);
    rm_model_shape shape;
    const rm_model_family *fam;
    rm_err e = {0};
    const char *model = c->model;
    char exp[4200];
    if (c->checkpoint) {
        rm_ckpt_manifest mf;
        char mpath[4200];
        int rc = newest_manifest(c->checkpoint, "--checkpoint", &mf, mpath, sizeof mpath, err);
        if (rc == RM_ENOTFOUND) { /* no manifest: the folder's export, if any */
            rm_sfmt(exp, sizeof exp, "%s/export", c->checkpoint);
            struct stat st;
            if (stat(exp, &st) != 0)
                return rm_err_field(err, RM_ENOTFOUND, "--checkpoint",
                                    "%s holds no checkpoint manifest (index-*.json) and no export/",
                                    c->checkpoint);
            model = exp;
        } else if (rc) {
            return rc;
        } else {
            rm_ckpt_manifest_free(&mf);
            return rm_ckpt_model_load("sample", c->checkpoint, "--checkpoint", m, NULL, err);
        }
    }
    const char *flag = c->checkpoint ? "--checkpoint" : "--model";
    int rc = rm_model_config_read(model, &shape, &fam, &e);
    if (rc)
        return rm_err_field(err, rc, flag, "%s", e.msg);
    if ((rc = rm_model_init(m, k, fam, &shape, 1, &e)) != RM_OK)
        return rm_err_field(err, rc, flag, "%s", e.msg);
    if ((rc = rm_model_import(m, model, m->params, &e)) != RM_OK)
        return rm_err_field(err, rc, flag, "%s", e.msg);
    rm_info("sample: model loaded path=%s", model);
    return RM_OK;
}

/* The next token from the logits of one position. */
static int32_t pick(const float *logits, int V, const sample_cfg *c, rm_rng *r, double *scratch, int *order)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    if (c->temperature == 0)
        return best;
    /* softmax((l - max) / T) over the top K (ties at the cut all stay in) */
    double cut = -INFINITY;
    if (c->top_k > 0 && c->top_k < V) {
        for (int i = 0; i < V; i++)
            order[i] = i;
        /* partial selection: the K largest to the front */
        for (int i = 0; i < c->top_k; i++) {
            int m = i;
            for (int j = i + 1; j < V; j++)
                if (logits[order[j]] > logits[order[m]])
                    m = j;
            int t = order[i];
            order[i] = order[m];
            order[m] = t;
        }
        cut = logits[order[c->top_k - 1]];
    }
    double sum = 0;
    for (int i = 0; i < V; i++) {
        scratch[i] = logits[i] >= cut ? exp(((double)logits[i] - logits[best]) / c->temperature) : 0;
        sum += scratch[i];
    }
    double u = rm_rng_uniform(r) * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        acc += scratch[i];
        if (u < acc && scratch[i] > 0)
            return i;
    }
    return best;
}

/* --logits: one forward pass of the prompt (at most a window), its positions' logits to path. */
static int write_logits(const char *path, rm_model *m, const int32_t *toks, long np, rm_err *err)
{
    int T = m->label_row, V = m->classes;
    if (np > T)
        return rm_err_field(err, RM_EINVAL, "--logits", "the prompt has %ld tokens, more than the context %d",
                            np, T);
    int32_t *x = m->x;
    memcpy(x, toks, (size_t)np * sizeof *x);
    memset(x + np, 0, (size_t)(T - np) * sizeof *x);
    rm_model_forward(m, 1);
    FILE *f = fopen(path, "wb");
    if (!f)
        return rm_err_field(err, RM_EIO, "--logits", "%s: %s", path, strerror(errno));
    size_t n = (size_t)np * (size_t)V;
    bool ok = fwrite(rm_model_output(m, m->nunits - 1, 0), sizeof(float), n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok ? RM_OK : rm_err_field(err, RM_EIO, "--logits", "%s: write failed", path);
}

static int run(const sample_cfg *c, rm_err *err)
{
    rm_model m;
    memset(&m, 0, sizeof m);
    int rc = load_model(c, &m, err);
    if (rc) {
        rm_model_free(&m);
        return rc;
    }
    /* a language model: rows are token windows and the last unit's output their logits */
    int T = m.label_row, V = m.classes, last = m.nunits - 1;
    if (T < 1 || m.x_row_bytes != (size_t)T * sizeof(int32_t) || m.unit[last].out_width != T * V) {
        char sh[128];
        rm_model_shape_str(&m, sh, sizeof sh);
        rc = rm_errf(err, RM_EINVAL,
                     "sample: the %s model %s is not a language model (its rows are not token windows)",
                     m.family->name, sh);
        rm_model_free(&m);
        return rc;
    }
    int32_t *toks = NULL;
    long np = 0;
    if (c->prompt_tokens) {
        rc = parse_tokens(c->prompt_tokens, V, &toks, &np, err);
    } else if (V > 256) {
        rc = rm_err_field(
            err, RM_EINVAL, "--prompt",
            "a text prompt is bytes, and this model's vocabulary is %d tokens (use --prompt-tokens)", V);
    } else {
        np = (long)strlen(c->prompt);
        toks = malloc((size_t)np * sizeof *toks);
        if (!toks)
            rc = rm_errf(err, RM_ENOMEM, "out of memory");
        for (long i = 0; rc == RM_OK && i < np; i++) {
            toks[i] = (unsigned char)c->prompt[i];
            if (toks[i] >= V)
                rc = rm_err_field(err, RM_EINVAL, "--prompt",
                                  "byte %ld (%d) is outside the model's vocabulary of %d", i + 1, toks[i], V);
        }
    }
    int32_t *all = rc == RM_OK ? realloc(toks, (size_t)(np + c->tokens) * sizeof *toks) : NULL;
    double *scratch = malloc((size_t)V * sizeof *scratch);
    int *order = malloc((size_t)V * sizeof *order);
    if (rc == RM_OK && (!all || !scratch || !order))
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
    if (all)
        toks = all;
    if (rc == RM_OK) {
        char sh[128];
        rm_model_shape_str(&m, sh, sizeof sh);
        rm_info("sample: generating model=%s prompt_tokens=%ld tokens=%ld temperature=%g top_k=%d seed=%llu",
                sh, np, c->tokens, c->temperature, c->top_k, (unsigned long long)c->seed);
        rm_rng r;
        rm_rng_seed(&r, c->seed);
        int32_t *x = m.x;
        if (c->logits)
            rc = write_logits(c->logits, &m, toks, np, err);
        for (long n = np; rc == RM_OK && n < np + c->tokens; n++) {
            long w = n < T ? n : T; /* the window: the last T tokens */
            memcpy(x, toks + (n - w), (size_t)w * sizeof *x);
            memset(x + w, 0, (size_t)(T - w) * sizeof *x); /* after the window: causal, never read */
            rm_model_forward(&m, 1);
            toks[n] =
                pick(rm_model_output(&m, last, 0) + (size_t)(w - 1) * (size_t)V, V, c, &r, scratch, order);
        }
        long total = np + c->tokens;
        if (rc == RM_OK && c->prompt_tokens) {
            for (long i = 0; i < total; i++)
                printf("%s%d", i ? "," : "", toks[i]);
            printf("\n");
        } else if (rc == RM_OK) {
            for (long i = 0; i < total; i++)
                putchar(toks[i]);
        }
        if (rc == RM_OK && (fflush(stdout) != 0 || ferror(stdout)))
            rc = rm_errf(err, RM_EIO, "sample: writing stdout: %s", strerror(errno));
    }
    free(order);
    free(scratch);
    free(toks);
    rm_model_free(&m);
    return rc;
}

int rm_worker_sample_main(int argc, char **argv)
{
    sample_cfg c;
    rm_err err = {0};
    int rc = parse_args(argc, argv, &c, &err);
    if (rc) {
        if (strcmp(err.msg, "help") == 0) {
            usage(stdout);
            return 0;
        }
        fprintf(stderr, "ringmaster sample: %s\n", err.msg);
        usage(stderr);
        return 2;
    }
    rc = run(&c, &err);
    if (rc) {
        fprintf(stderr, "ringmaster sample: %s\n", err.msg);
        bool usage_err =
            rc == RM_EINVAL && (!strcmp(err.field, "--prompt") || !strcmp(err.field, "--prompt-tokens"));
        return usage_err ? 2 : 1; /* a prompt the model cannot read is a usage error */
    }
    return 0;
}
