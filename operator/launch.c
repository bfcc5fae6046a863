/* launch.c — the worker launch contract (see launch.h).
 *
 * Design: one function appends every setting in a fixed order; a setting that one runtime
 * supplies differently (token, bind address, node name) differs only in its source kind, which
 * the placement picks. Adding a setting here adds it to local processes and pods at once. */
#include "operator/launch.h"
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "common/json.h"

/* Every variable a controller sets and a user may not (docs/architecture.md#the-launch-contract):
 * the one table both runtimes refuse a user's copy from, even where this job leaves the variable
 * unset (an allreduce job's RINGMASTER_STRATEGY). env_src asserts each setting it makes is listed
 * here unless it is a default the user's value overrides, so a new contract variable cannot be
 * left out. */
static const char *const ours[] = {RM_ENV_ROLE,
                                   RM_ENV_RENDEZVOUS,
                                   RM_ENV_JOB,
                                   RM_ENV_TOKEN,
                                   RM_ENV_WORKER_ID,
                                   RM_ENV_EPOCH,
                                   RM_ENV_CHECKPOINT_DIR,
                                   RM_ENV_CHECKPOINT_INTERVAL,
                                   RM_ENV_CHECKPOINT_KEEP,
                                   RM_ENV_PROGRESS_DEADLINE,
                                   RM_ENV_BIND_ADDR,
                                   RM_ENV_BACKEND,
                                   RM_ENV_TRAINING,
                                   RM_ENV_OUTPUT_URI,
                                   RM_ENV_OUTPUT_DTYPE,
                                   RM_ENV_RANK,
                                   RM_ENV_WORLD_SIZE,
                                   RM_ENV_LOCAL_RANK,
                                   RM_ENV_LOCAL_WORLD_SIZE,
                                   RM_ENV_NODE_NAME,
                                   RM_ENV_MASTER_ADDR,
                                   RM_ENV_MASTER_PORT,
                                   RM_ENV_PET_NNODES,
                                   RM_ENV_PET_NODE_RANK,
                                   RM_ENV_PET_NPROC_PER_NODE,
                                   RM_ENV_PET_MASTER_ADDR,
                                   RM_ENV_PET_MASTER_PORT,
                                   RM_ENV_STRATEGY,
                                   RM_ENV_PS_SPEC,
                                   RM_ENV_PS_ADDRS,
                                   RM_ENV_PS_INDEX,
                                   RM_ENV_PARALLELISM,
                                   NULL};

/* torchrun's rendezvous settings (docs/torchrun.md) are ours only where the contract sets them (a
 * template that runs torchrun): an image whose entrypoint is torchrun, unseen by the operator,
 * keeps the ones its template configures itself. */
static const char *const ours_if_set[] = {RM_ENV_PET_RDZV_BACKEND, RM_ENV_PET_RDZV_ENDPOINT,
                                          RM_ENV_PET_RDZV_ID,      RM_ENV_PET_RDZV_CONF,
                                          RM_ENV_PET_MAX_RESTARTS, NULL};

static bool contract_var(const char *name)
{
    for (int i = 0; ours_if_set[i]; i++)
        if (strcmp(name, ours_if_set[i]) == 0)
            return true;
    return rm_launch_is_ours(name);
}

bool rm_launch_is_ours(const char *name)
{
    for (int i = 0; name && ours[i]; i++)
        if (strcmp(name, ours[i]) == 0)
            return true;
    return false;
}

rm_backend rm_launch_backend(const rm_tj *job, int gpus)
{
    return rm_backend_resolve(job->spec.backend, gpus);
}

/* The basename of a command word. */
static const char *base_name(const char *s)
{
    const char *sl = strrchr(s, '/');
    return sl ? sl + 1 : s;
}

/* Does script name torchrun or torch.distributed.run as a word (between blanks, quotes, ;&|()`)? */
static bool script_names_torchrun(const char *script)
{
    static const char *const words[] = {"torchrun", "torch.distributed.run"};
    const char *delim = " \t\n;&|()`'\"/=";
    for (size_t w = 0; w < RM_ARRAY_LEN(words); w++) {
        size_t n = strlen(words[w]);
        for (const char *q = strstr(script, words[w]); q; q = strstr(q + 1, words[w])) {
            bool before = q == script || strchr(delim, q[-1]);
            bool after = q[n] == 0 || (strchr(delim, q[n]) && q[n] != '/' && q[n] != '=');
            if (before && after)
                return true;
        }
    }
    return false;
}

bool rm_launch_runs_torchrun(const cJSON *pod_template, char *python, size_t cap)
{
    const cJSON *cs = rm_json_path(pod_template, "spec.containers"), *c0 = NULL, *c;
    cJSON_ArrayForEach(c, cs)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (!c0 || (cJSON_IsString(n) && strcmp(n->valuestring, "worker") == 0))
            c0 = c;
    }
    const char *argv[64];
    int argc = 0;
    static const char *const parts[] = {"command", "args"};
    for (size_t k = 0; k < RM_ARRAY_LEN(parts); k++) {
        const cJSON *a;
        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(c0, parts[k]))
        {
            if (cJSON_IsString(a) && argc < (int)RM_ARRAY_LEN(argv))
                argv[argc++] = a->valuestring;
        }
    }
    if (argc == 0)
        return false;
    const char *prog = base_name(argv[0]);
    bool yes = strcmp(prog, "torchrun") == 0;
    bool py_m = false;
    for (int i = 0; !yes && i + 1 < argc && strncmp(prog, "python", 6) == 0; i++)
        if (strcmp(argv[i], "-m") == 0 && strcmp(argv[i + 1], "torch.distributed.run") == 0)
            yes = py_m = true;
    bool shell = !strcmp(prog, "sh") || !strcmp(prog, "bash") || !strcmp(prog, "dash");
    for (int i = 1; !yes && shell && i + 1 < argc; i++)
        if (strcmp(argv[i], "-c") == 0 || (argv[i][0] == '-' && strchr(argv[i], 'c') && argv[i][1] != '-'))
            yes = script_names_torchrun(argv[i + 1]);
    if (yes && python && cap > 0)
        rm_sfmt(python, cap, "%s", py_m ? argv[0] : "python3");
    return yes;
}

const char *rm_launch_checkpoint_dir(const rm_tj *job, char *buf, size_t cap)
{
    const char *cp = job->spec.checkpoint.path && job->spec.checkpoint.path[0] ? job->spec.checkpoint.path
                                                                               : RM_DEFAULT_CHECKPOINT_PATH;
    rm_sfmt(buf, cap, "%s/%s/%s", cp, job->namespace_ ? job->namespace_ : "default",
            job->name ? job->name : "");
    return buf;
}

void rm_launch_free(rm_launch *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->nenv; i++)
        free(l->env[i].value);
    for (int i = 0; i < l->nargs; i++)
        free(l->args[i]);
    memset(l, 0, sizeof *l);
}

const rm_launch_var *rm_launch_find(const rm_launch *l, const char *name)
{
    for (int i = 0; l && i < l->nenv; i++)
        if (strcmp(l->env[i].name, name) == 0)
            return &l->env[i];
    return NULL;
}

typedef struct builder {
    rm_launch *l;
    int rc;
} builder;

/* Format one value for a slot among n of cap; NULL (b->rc set) when full or out of memory. */
static char *take(builder *b, int n, int cap, const char *fmt, va_list ap)
{
    char *p = NULL;
    if (b->rc)
        return NULL;
    if (n >= cap)
        b->rc = RM_ETOOBIG;
    else if (vasprintf(&p, fmt, ap) < 0)
        b->rc = RM_ENOMEM, p = NULL;
    return p;
}

/* user_wins: a default the user's own value overrides (rm_launch_var.user_wins); anything else
 * must be in ours[]. */
static void env_any(builder *b, const char *name, rm_launch_src src, bool user_wins, const char *fmt, ...)
    RM_PRINTF(5, 6);
static void env_any(builder *b, const char *name, rm_launch_src src, bool user_wins, const char *fmt, ...)
{
    assert(user_wins || contract_var(name));
    va_list ap;
    va_start(ap, fmt);
    char *v = take(b, b->l->nenv, RM_LAUNCH_MAX_ENV, fmt, ap);
    va_end(ap);
    if (v)
        b->l->env[b->l->nenv++] =
            (rm_launch_var){.name = name, .value = v, .src = src, .user_wins = user_wins};
}

#define env_src(b, name, src, ...) env_any(b, name, src, false, __VA_ARGS__)
#define ENV(b, name, ...) env_any(b, name, RM_LAUNCH_LITERAL, false, __VA_ARGS__)
#define ENV_DEFAULT(b, name, ...) env_any(b, name, RM_LAUNCH_LITERAL, true, __VA_ARGS__)

static void arg(builder *b, const char *fmt, ...) RM_PRINTF(2, 3);
static void arg(builder *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *v = take(b, b->l->nargs, RM_LAUNCH_MAX_ARGS, fmt, ap);
    va_end(ap);
    if (v)
        b->l->args[b->l->nargs++] = v;
}

const char *rm_launch_ps_addrs(const rm_tj *job, const rm_launch_placement *p, char *buf, size_t cap)
{
    if (p->ps_addrs) {
        rm_sfmt(buf, cap, "%s", p->ps_addrs);
        return buf;
    }
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < job->spec.ps.replicas && n + 1 < cap; i++) {
        int w =
            snprintf(buf + n, cap - n, "%s%s-ps-%d.%s:%d", i ? "," : "", job->name, i, job->name, RM_PORT_PS);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return buf;
}

/* What a worker and a server of a parameterServer job both get beyond the common contract. */
static void ps_env(builder *b, const rm_tj *job, const rm_launch_placement *p)
{
    char addrs[8192];
    ENV(b, RM_ENV_STRATEGY, "%s", rm_strategy_names[RM_STRATEGY_PS]);
    ENV(b, RM_ENV_PS_ADDRS, "%s", rm_launch_ps_addrs(job, p, addrs, sizeof addrs));
    if (!b->rc) {
        cJSON *o = rm_ps_to_json(&job->spec.ps);
        char *js = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (js)
            ENV(b, RM_ENV_PS_SPEC, "%s", js);
        else
            b->rc = RM_ENOMEM;
        free(js);
    }
}

int rm_launch_build_ps(const rm_tj *job, int index, const rm_launch_placement *p, rm_launch *out, rm_err *err)
{
    if (!out)
        return rm_errf(err, RM_EINVAL, "launch: no output");
    memset(out, 0, sizeof *out);
    if (!job || !p || !job->name || job->spec.strategy != RM_STRATEGY_PS)
        return rm_errf(err, RM_EINVAL, "launch: a parameterServer job is required");
    if (index < 0 || index >= job->spec.ps.replicas)
        return rm_errf(err, RM_EINVAL, "launch: server index %d out of range [0, %d)", index,
                       job->spec.ps.replicas);
    const rm_tj_spec *sp = &job->spec;
    builder b = {.l = out, .rc = RM_OK};
    char ckpt[1200];
    if (p->checkpoint_dir)
        rm_sfmt(ckpt, sizeof ckpt, "%s", p->checkpoint_dir);
    else
        rm_launch_checkpoint_dir(job, ckpt, sizeof ckpt);
    int port = p->metrics_port < 0 ? RM_PORT_WORKER_METRICS : p->metrics_port;
    arg(&b, "ps");
    arg(&b, "--metrics-addr");
    arg(&b, "%s:%d", p->metrics_host ? p->metrics_host : "$(" RM_ENV_BIND_ADDR ")", port);
    if (p->log_format) {
        arg(&b, "--log-format");
        arg(&b, "%s", p->log_format);
    }
    ENV(&b, RM_ENV_ROLE, "ps");
    ENV(&b, RM_ENV_PS_INDEX, "%d", index);
    if (p->rdzv_url && *p->rdzv_url) /* servers register their address there (rdzv.h) */
        ENV(&b, RM_ENV_RENDEZVOUS, "%s", p->rdzv_url);
    ENV(&b, RM_ENV_JOB, "%s/%s", job->namespace_ ? job->namespace_ : "default", job->name);
    if (p->token)
        ENV(&b, RM_ENV_TOKEN, "%s", p->token);
    else
        env_src(&b, RM_ENV_TOKEN, RM_LAUNCH_SECRET, "%s-rendezvous", job->name);
    if (p->bind_addr)
        ENV(&b, RM_ENV_BIND_ADDR, "%s", p->bind_addr);
    else
        env_src(&b, RM_ENV_BIND_ADDR, RM_LAUNCH_FIELD, "status.podIP");
    ENV(&b, RM_ENV_CHECKPOINT_DIR, "%s", ckpt);
    ENV(&b, RM_ENV_CHECKPOINT_INTERVAL, "%d", sp->checkpoint.interval_steps);
    ENV(&b, RM_ENV_CHECKPOINT_KEEP, "%d", sp->checkpoint.keep > 0 ? sp->checkpoint.keep : 3);
    ENV(&b, RM_ENV_WORLD_SIZE, "%d", sp->replicas);
    /* the server's /healthz goes stalled after this long holding requests unanswered */
    ENV(&b, RM_ENV_PROGRESS_DEADLINE, "%g", sp->restart.progress_deadline_seconds);
    if (!b.rc) {
        cJSON *tj = rm_training_to_json(&sp->training);
        char *js = tj ? cJSON_PrintUnformatted(tj) : NULL;
        cJSON_Delete(tj);
        if (js)
            ENV(&b, RM_ENV_TRAINING, "%s", js);
        else
            b.rc = RM_ENOMEM;
        free(js);
    }
    ps_env(&b, job, p);
    if (b.rc) {
        rm_launch_free(out);
        return rm_errf(err, b.rc, "server %d: %s building its settings", index,
                       b.rc == RM_ENOMEM ? "out of memory" : "too many settings");
    }
    return RM_OK;
}

int rm_launch_build(const rm_tj *job, int index, int epoch, const rm_launch_placement *p, rm_launch *out,
                    rm_err *err)
{
    if (!out)
        return rm_errf(err, RM_EINVAL, "launch: no output");
    memset(out, 0, sizeof *out);
    if (!job || !p || !job->name || !p->rdzv_url)
        return rm_errf(err, RM_EINVAL, "launch: job, name and rendezvous URL are required");
    if (index < 0 || index >= RM_MAX_WORLD)
        return rm_errf(err, RM_EINVAL, "launch: replica index %d out of range [0, %d)", index, RM_MAX_WORLD);
    const rm_tj_spec *sp = &job->spec;
    const char *ns = job->namespace_ ? job->namespace_ : "default";
    builder b = {.l = out, .rc = RM_OK};
    int world = sp->replicas;
    int per_node = p->workers_per_node > 1 ? p->workers_per_node : 1;
    char master[600], ckpt[1200];
    if (p->master_host)
        rm_sfmt(master, sizeof master, "%s", p->master_host);
    else
        rm_sfmt(master, sizeof master, "%s-worker-0.%s", job->name, job->name);
    if (p->checkpoint_dir)
        rm_sfmt(ckpt, sizeof ckpt, "%s", p->checkpoint_dir);
    else
        rm_launch_checkpoint_dir(job, ckpt, sizeof ckpt);
    rm_backend be = rm_launch_backend(job, p->gpus);

    /* arguments: the mode (the worker's subcommand is its name) and what only a flag can say */
    arg(&b, "%s", rm_enum_name(rm_mode_names, (int)sp->training.mode));
    if (sp->training.mode == RM_MODE_BENCH) {
        const rm_training_spec *t = &sp->training;
        arg(&b, "-b");
        arg(&b, "%lld", (long long)t->bench_min_bytes);
        arg(&b, "-e");
        arg(&b, "%lld", (long long)t->bench_max_bytes);
        arg(&b, "-f");
        arg(&b, "%d", t->bench_factor);
        arg(&b, "-n");
        arg(&b, "%d", t->bench_iters);
        arg(&b, "-w");
        arg(&b, "%d", t->bench_warmup);
        arg(&b, "-c");
        arg(&b, "%d", t->bench_check ? 1 : 0);
        arg(&b, "--backend");
        arg(&b, "%s", rm_backend_name(be));
    } else {
        int port = p->metrics_port < 0 ? RM_PORT_WORKER_METRICS : p->metrics_port;
        arg(&b, "--metrics-addr");
        arg(&b, "%s:%d", p->metrics_host ? p->metrics_host : "$(" RM_ENV_BIND_ADDR ")", port);
        if (p->log_format) {
            arg(&b, "--log-format");
            arg(&b, "%s", p->log_format);
        }
    }

    /* identity and rendezvous */
    ENV(&b, RM_ENV_ROLE, "worker");
    ENV(&b, RM_ENV_RENDEZVOUS, "%s", p->rdzv_url);
    ENV(&b, RM_ENV_JOB, "%s/%s", ns, job->name);
    if (p->token)
        ENV(&b, RM_ENV_TOKEN, "%s", p->token);
    else /* the token comes from the job's Secret, never inline */
        env_src(&b, RM_ENV_TOKEN, RM_LAUNCH_SECRET, "%s-rendezvous", job->name);
    if (p->bind_addr)
        ENV(&b, RM_ENV_BIND_ADDR, "%s", p->bind_addr);
    else
        env_src(&b, RM_ENV_BIND_ADDR, RM_LAUNCH_FIELD, "status.podIP");
    if (p->node_name)
        ENV(&b, RM_ENV_NODE_NAME, "%s", p->node_name);
    else
        env_src(&b, RM_ENV_NODE_NAME, RM_LAUNCH_FIELD, "spec.nodeName");
    ENV(&b, RM_ENV_WORKER_ID, "%d", index);
    ENV(&b, RM_ENV_EPOCH, "%d", epoch);
    /* training */
    ENV(&b, RM_ENV_CHECKPOINT_DIR, "%s", ckpt);
    ENV(&b, RM_ENV_CHECKPOINT_INTERVAL, "%d", sp->checkpoint.interval_steps);
    ENV(&b, RM_ENV_CHECKPOINT_KEEP, "%d", sp->checkpoint.keep > 0 ? sp->checkpoint.keep : 3);
    ENV(&b, RM_ENV_PROGRESS_DEADLINE, "%g", sp->restart.progress_deadline_seconds);
    ENV(&b, RM_ENV_BACKEND, "%s", rm_backend_name(be));
    if (!b.rc) {
        cJSON *tj = rm_training_to_json(&sp->training);
        char *js = tj ? cJSON_PrintUnformatted(tj) : NULL;
        cJSON_Delete(tj);
        if (js)
            ENV(&b, RM_ENV_TRAINING, "%s", js);
        else
            b.rc = RM_ENOMEM;
        free(js);
    }
    if (sp->output.present) { /* spec.output: rank 0's export at the end (worker/train_state.c) */
        if (sp->output.uri)
            ENV(&b, RM_ENV_OUTPUT_URI, "%s", sp->output.uri);
        ENV(&b, RM_ENV_OUTPUT_DTYPE, "%s", rm_enum_name(rm_output_dtype_names, (int)sp->output.dtype));
    }
    if (sp->strategy == RM_STRATEGY_PS)
        ps_env(&b, job, p);
    if (sp->par.pipeline_stages > 1 || sp->par.micro_batches > 1 ||
        sp->par.tensor_parallel > 1) { /* pipeline stages, tensor groups */
        cJSON *po = b.rc ? NULL : rm_par_to_json(&sp->par);
        char *js = po ? cJSON_PrintUnformatted(po) : NULL;
        cJSON_Delete(po);
        if (js)
            ENV(&b, RM_ENV_PARALLELISM, "%s", js);
        else if (!b.rc)
            b.rc = RM_ENOMEM;
        free(js);
    }
    /* torchrun's view: one process per node slot */
    ENV(&b, RM_ENV_RANK, "%d", index);
    ENV(&b, RM_ENV_WORLD_SIZE, "%d", world);
    ENV(&b, RM_ENV_LOCAL_RANK, "%d", per_node > 1 ? index : 0);
    ENV(&b, RM_ENV_LOCAL_WORLD_SIZE, "%d", per_node);
    ENV(&b, RM_ENV_MASTER_ADDR, "%s", master);
    ENV(&b, RM_ENV_MASTER_PORT, "%d", RM_PORT_MASTER);
    if (p->torchrun) { /* elastic: the agents rendezvous at the job's c10d store (docs/torchrun.md) */
        int lo = sp->min_replicas > 0 ? sp->min_replicas : world;
        int hi = sp->max_replicas > 0 ? sp->max_replicas : world;
        ENV(&b, RM_ENV_PET_NNODES, "%d:%d", lo, hi);
    } else {
        ENV(&b, RM_ENV_PET_NNODES, "%d", world);
    }
    ENV(&b, RM_ENV_PET_NODE_RANK, "%d", index);
    ENV(&b, RM_ENV_PET_NPROC_PER_NODE, "%d", p->torchrun && p->gpus > 0 ? p->gpus : 1);
    ENV(&b, RM_ENV_PET_MASTER_ADDR, "%s", master);
    ENV(&b, RM_ENV_PET_MASTER_PORT, "%d", RM_PORT_MASTER);
    if (p->torchrun) {
        ENV(&b, RM_ENV_PET_RDZV_BACKEND, "c10d");
        if (p->c10d_host)
            ENV(&b, RM_ENV_PET_RDZV_ENDPOINT, "%s:%d", p->c10d_host, RM_PORT_C10D);
        else
            ENV(&b, RM_ENV_PET_RDZV_ENDPOINT, "%s" RM_C10D_SUFFIX ".%s:%d", job->name, job->name,
                RM_PORT_C10D);
        if (job->uid && *job->uid)
            ENV(&b, RM_ENV_PET_RDZV_ID, "%s", job->uid);
        else
            ENV(&b, RM_ENV_PET_RDZV_ID, "%s.%s", ns, job->name);
        /* the store lives in its own pod: an agent that guessed it hosts it (torch compares the
         * endpoint with its own names and addresses) would take the rendezvous down with it */
        ENV(&b, RM_ENV_PET_RDZV_CONF, "is_host=false");
        ENV(&b, RM_ENV_PET_MAX_RESTARTS, "%d", sp->restart.max_restarts);
    }
    /* GPU workers: the NCCL settings a user would otherwise hand-tune (docs/strategies.md#topology) */
    if (p->gpus > 0) {
        ENV_DEFAULT(&b, RM_ENV_NCCL_SOCKET_IFNAME, "%s", p->net_ifname ? p->net_ifname : RM_POD_NET_IFNAME);
        ENV_DEFAULT(&b, RM_ENV_NCCL_ASYNC_ERROR_HANDLING, "1");
        ENV_DEFAULT(&b, RM_ENV_TORCH_NCCL_ASYNC_ERROR_HANDLING, "1");
        ENV_DEFAULT(&b, RM_ENV_NCCL_DEBUG, "WARN");
    }
    if (b.rc) {
        rm_launch_free(out);
        return rm_errf(err, b.rc, "worker %d: %s building its settings", index,
                       b.rc == RM_ENOMEM ? "out of memory" : "too many settings");
    }
    return RM_OK;
}
