/* faults_parse.c — parse RINGMASTER_FAULT (see faults.h). A translation unit of its own with no
 * dependency beyond common/, so `ringmaster run` links the very same parser and refuses a
 * malformed spec before it starts any worker. */
#include "common/faults.h"
#include "common/trainingjob.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

const char *rm_fault_kind_name(rm_fault_kind k)
{
    return k == RM_FAULT_HANG ? "hang" : k == RM_FAULT_SLOW ? "slow" : "exit";
}

double rm_faults_slow(const rm_faults *fs, int rank, int64_t step)
{
    double f = 1;
    for (int i = 0; fs && i < fs->n; i++) {
        const rm_fault *x = &fs->f[i];
        if (x->kind == RM_FAULT_SLOW && x->rank == rank && step >= x->step &&
            (x->until == 0 || step < x->until) && x->factor > f)
            f = x->factor;
    }
    return f;
}

static int parse_num(const char *s, size_t len, long long lo, long long hi, long long *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_one(const char *s, size_t len, rm_fault *f, rm_err *err)
{
    memset(f, 0, sizeof *f);
    const char *end = s + len, *p = s;
    const char *colon = memchr(p, ':', len);
    size_t kl = colon ? (size_t)(colon - p) : len;
    if (kl == 4 && !memcmp(p, "exit", 4))
        f->kind = RM_FAULT_EXIT;
    else if (kl == 4 && !memcmp(p, "hang", 4))
        f->kind = RM_FAULT_HANG;
    else if (kl == 4 && !memcmp(p, "slow", 4))
        f->kind = RM_FAULT_SLOW;
    else
        return rm_errf(err, RM_EINVAL,
                       "RINGMASTER_FAULT: unknown fault kind \"%.*s\" "
                       "(exit|hang|slow)",
                       (int)kl, p);
    bool have_rank = false, have_step = false, ps = false, have_index = false;
    int index = 0;
    p = colon ? colon + 1 : end;
    while (p < end) {
        const char *q = memchr(p, ':', (size_t)(end - p));
        if (!q)
            q = end;
        const char *eq = memchr(p, '=', (size_t)(q - p));
        if (!eq)
            return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: expected key=value, got \"%.*s\"", (int)(q - p),
                           p);
        long long v;
        size_t klen = (size_t)(eq - p);
        if (klen == 4 && !memcmp(p, "rank", 4)) {
            if (parse_num(eq + 1, (size_t)(q - eq - 1), 0, 1 << 20, &v))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad rank \"%.*s\"", (int)(q - eq - 1),
                               eq + 1);
            f->rank = (int)v;
            have_rank = true;
        } else if (klen == 4 && !memcmp(p, "step", 4)) {
            if (parse_num(eq + 1, (size_t)(q - eq - 1), 0, (long long)1 << 50, &v))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad step \"%.*s\"", (int)(q - eq - 1),
                               eq + 1);
            f->step = v;
            have_step = true;
        } else if (klen == 4 && !memcmp(p, "role", 4)) {
            size_t vl = (size_t)(q - eq - 1);
            if (vl == 2 && !memcmp(eq + 1, "ps", 2))
                ps = true;
            else if (!(vl == 6 && !memcmp(eq + 1, "worker", 6)))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad role \"%.*s\" (worker|ps)", (int)vl,
                               eq + 1);
        } else if (klen == 5 && !memcmp(p, "index", 5)) {
            if (parse_num(eq + 1, (size_t)(q - eq - 1), 0, 63, &v))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad index \"%.*s\" (0..63)",
                               (int)(q - eq - 1), eq + 1);
            index = (int)v;
            have_index = true;
        } else if (klen == 6 && !memcmp(p, "factor", 6)) {
            char nb[32];
            size_t vl = (size_t)(q - eq - 1);
            char *e2;
            if (vl == 0 || vl >= sizeof nb)
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad factor");
            memcpy(nb, eq + 1, vl);
            nb[vl] = 0;
            errno = 0;
            f->factor = strtod(nb, &e2);
            if (errno || *e2 || !(f->factor >= 1 && f->factor <= 1000))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad factor \"%s\" (1..1000)", nb);
        } else if (klen == 5 && !memcmp(p, "until", 5)) {
            if (parse_num(eq + 1, (size_t)(q - eq - 1), 1, (long long)1 << 50, &v))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad until \"%.*s\"", (int)(q - eq - 1),
                               eq + 1);
            f->until = v;
        } else if (klen == 4 && !memcmp(p, "node", 4)) {
            size_t vl = (size_t)(q - eq - 1);
            if (!(vl == 4 && !memcmp(eq + 1, "lost", 4)))
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: bad node \"%.*s\" (lost)", (int)vl, eq + 1);
            f->lost = true;
        } else {
            return rm_errf(err, RM_EINVAL,
                           "RINGMASTER_FAULT: unknown key \"%.*s\" "
                           "(rank|step|role|index|factor|until|node)",
                           (int)klen, p);
        }
        p = q < end ? q + 1 : end;
    }
    if (f->lost && (f->kind != RM_FAULT_EXIT || ps))
        return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: \"%.*s\": node=lost is for a worker's exit",
                       (int)len, s);
    if (ps != have_index || (ps && have_rank))
        return rm_errf(err, RM_EINVAL,
                       "RINGMASTER_FAULT: \"%.*s\": role=ps goes with index= "
                       "(and no rank=)",
                       (int)len, s);
    if (ps) {
        if (f->kind == RM_FAULT_SLOW)
            return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: \"%.*s\": slow is for workers", (int)len, s);
        f->rank = RM_FAULT_PS_RANK(index);
        have_rank = true;
    }
    if (f->kind == RM_FAULT_SLOW) {
        if (!have_rank)
            return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: \"%.*s\" needs rank= (the worker to slow)",
                           (int)len, s);
        if (f->factor < 1)
            return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: \"%.*s\" needs factor= (1..1000)", (int)len, s);
        if (f->until && f->until <= f->step)
            return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: \"%.*s\": until must be > step", (int)len, s);
        return RM_OK;
    }
    if (f->factor || f->until)
        return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: \"%.*s\": factor/until are for slow", (int)len, s);
    if (!have_rank)
        return rm_errf(err, RM_EINVAL,
                       "RINGMASTER_FAULT: \"%.*s\" needs rank= (a worker) or role=ps:index= (a server)",
                       (int)len, s);
    if (!have_step)
        return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: \"%.*s\" needs step= (%s)", (int)len, s,
                       ps ? "the server's version: updates applied, from 1" : "the worker's step");
    /* a server looks for its faults after each update it applies: version 0 is never one */
    if (ps && f->step == 0)
        return rm_errf(err, RM_EINVAL,
                       "RINGMASTER_FAULT: \"%.*s\": step=0 never fires for a server (step counts the "
                       "updates it applied; the first is 1)",
                       (int)len, s);
    return RM_OK;
}

int rm_faults_parse(const char *spec, rm_faults *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    if (!spec)
        return RM_OK;
    const char *p = spec, *end = spec + strlen(spec);
    while (p < end) {
        const char *q = memchr(p, ';', (size_t)(end - p));
        if (!q)
            q = end;
        /* trim spaces */
        const char *a = p, *b = q;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (b > a) {
            if (out->n == RM_FAULTS_MAX) {
                memset(out, 0, sizeof *out);
                return rm_errf(err, RM_EINVAL, "RINGMASTER_FAULT: more than %d faults", RM_FAULTS_MAX);
            }
            int rc = parse_one(a, (size_t)(b - a), &out->f[out->n], err);
            if (rc) {
                memset(out, 0, sizeof *out);
                return rc;
            }
            out->n++;
        }
        p = q < end ? q + 1 : end;
    }
    return RM_OK;
}

/* ---- against the job: a fault that can never fire is refused (faults.h) ---- */

int rm_faults_check_job(const rm_faults *fs, const rm_tj *job, rm_err *err)
{
    const rm_tj_spec *sp = &job->spec;
    bool ps_job = sp->strategy == RM_STRATEGY_PS;
    int servers = ps_job ? sp->ps.replicas : 0;
    int workers = rm_tj_most_workers(sp);
    for (int i = 0; fs && i < fs->n; i++) {
        const rm_fault *f = &fs->f[i];
        const char *kind = rm_fault_kind_name(f->kind);
        if (f->rank >= RM_FAULT_PS_RANK(0)) {
            int index = f->rank - RM_FAULT_PS_RANK(0);
            if (!ps_job)
                return rm_errf(
                    err, RM_EINVAL,
                    "RINGMASTER_FAULT: fault %d (%s:role=ps:index=%d) can never fire: TrainingJob %s has no "
                    "parameter servers (spec.strategy is not parameterServer)",
                    i + 1, kind, index, job->name);
            if (index >= servers)
                return rm_errf(
                    err, RM_EINVAL,
                    "RINGMASTER_FAULT: fault %d (%s:role=ps:index=%d) can never fire: TrainingJob %s has %d "
                    "parameter server%s (spec.parameterServer.replicas; index 0..%d)",
                    i + 1, kind, index, job->name, servers, servers == 1 ? "" : "s", servers - 1);
        } else if (f->rank >= workers) {
            return rm_errf(
                err, RM_EINVAL,
                "RINGMASTER_FAULT: fault %d (%s:rank=%d) can never fire: TrainingJob %s has at most %d "
                "worker%s (spec.replicas/maxReplicas; rank 0..%d)",
                i + 1, kind, f->rank, job->name, workers, workers == 1 ? "" : "s", workers - 1);
        }
    }
    return RM_OK;
}

/* ---- node=lost: the exited worker's replica index can never be recreated (faults.h) ---- */

static int lost_path(char *out, size_t cap, const char *dir, const char *worker_id)
{
    int w = snprintf(out, cap, "%s/.fault-lost-worker-%s", dir, worker_id);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

int rm_faults_mark_lost(const char *dir, const char *worker_id)
{
    char p[1200];
    if (!dir || !*dir || !worker_id || !*worker_id || strchr(worker_id, '/') ||
        lost_path(p, sizeof p, dir, worker_id) != 0)
        return -1;
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

bool rm_faults_index_lost(const char *dir, int index)
{
    char p[1200], id[16];
    snprintf(id, sizeof id, "%d", index);
    struct stat st;
    return dir && *dir && lost_path(p, sizeof p, dir, id) == 0 && stat(p, &st) == 0;
}
