/* rdzv_report.c — the rendezvous service's reports and parameter servers (protocol in
 * common/rdzv.h, "report" and "Servers"): a worker's progress report updates its member record and
 * the job's result, evaluations and memory; a parameter server registers its address and its
 * agreement record. Called by the router (common/rdzv_http.c) under the service's mutex; the state
 * is common/rdzv.c's (common/rdzv_internal.h). */
#include "common/rdzv_internal.h"
#include "common/clock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/log.h"

/* A 64-bit id as 1..16 hex digits. */
static bool hex64(const cJSON *x, uint64_t *out)
{
    if (!cJSON_IsString(x))
        return false;
    const char *p = x->valuestring;
    size_t n = strlen(p);
    if (n < 1 || n > 16 || strspn(p, "0123456789abcdef") != n)
        return false;
    *out = strtoull(p, NULL, 16);
    return true;
}

/* A server's agreement record (rdzv.h "Servers"); absent (NULL) leaves g unknown. */
static int group_parse(const cJSON *o, rm_rdzv_ps_group *g)
{
    memset(g, 0, sizeof *g);
    if (!o)
        return RM_OK;
    rm_err e = {0};
    const cJSON *held = cJSON_GetObjectItemCaseSensitive(o, "held"), *x;
    if (!cJSON_IsObject(o) || !hex64(cJSON_GetObjectItemCaseSensitive(o, "inc"), &g->inc) || !g->inc ||
        !hex64(cJSON_GetObjectItemCaseSensitive(o, "gen"), &g->gen) ||
        rdzv_bad(rm_json_bool(o, "settled", true, "group", &g->settled, &e)) ||
        rdzv_bad(rm_json_int(o, "at", true, "group", &g->at, &e)) || g->at < 0 ||
        rdzv_bad(rm_json_int(o, "version", true, "group", &g->version, &e)) || g->version < 0 ||
        !cJSON_IsArray(held) || cJSON_GetArraySize(held) > RM_RDZV_PS_HELD_MAX)
        return RM_EINVAL;
    cJSON_ArrayForEach(x, held)
    {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9e15)
            return RM_EINVAL;
        g->held[g->nheld++] = (int64_t)x->valuedouble;
    }
    g->known = true;
    return RM_OK;
}

/* Parameter servers (rdzv.h "Servers"): PUT servers/I {"addr"} registers server I's address
 * (a replacement overwrites it); GET servers lists them. Under r->mu. */
int rdzv_handle_server_put(job *j, const char *idx, const rm_http_req *req, rm_http_resp *resp)
{
    char *end;
    errno = 0;
    long i = strtol(idx, &end, 10);
    if (errno || end == idx || *end || i < 0 || i >= RM_RDZV_MAX_SERVERS)
        return rm_http_reply_error(resp, 400, "servers/INDEX: INDEX must be 0..%d", RM_RDZV_MAX_SERVERS - 1);
    if (j->stopped)
        return rdzv_reply_stop(resp);
    rm_err e = {0};
    const char *addr = NULL, *ckerr = NULL;
    int64_t ckfail = 0;
    rm_rdzv_ps_group g = {0};
    ps_server *grown = NULL;
    cJSON *body = rm_json_parse(req->body, req->body_len, &e);
    int rc;
    if (!cJSON_IsObject(body) || rm_json_str(body, "addr", true, "", &addr, &e) < 0 || !rdzv_addr_ok(addr) ||
        strlen(addr) >= sizeof j->srv[0].addr) {
        rc = rm_http_reply_error(resp, 400, "servers: body must be {\"addr\":\"host:port\"}");
    } else if (group_parse(cJSON_GetObjectItemCaseSensitive(body, "group"), &g) != RM_OK) {
        rc = rm_http_reply_error(resp, 400,
                                 "servers: group must be {\"inc\":hex,\"gen\":hex,\"settled\":bool,"
                                 "\"at\":N,\"version\":N,\"held\":[N,...] (at most %d)}",
                                 RM_RDZV_PS_HELD_MAX);
    } else if (rdzv_bad(rm_json_int(body, "checkpointFailures", false, "servers", &ckfail, &e)) ||
               ckfail < 0 || ckfail > INT32_MAX ||
               rdzv_bad(rm_json_str(body, "checkpointError", false, "servers", &ckerr, &e))) {
        rc = rm_http_reply_error(resp, 400,
                                 "servers: checkpointFailures must be an integer >= 0 and "
                                 "checkpointError a string");
    } else if (i >= j->nsrv && !(grown = realloc(j->srv, (size_t)(i + 1) * sizeof *j->srv))) {
        rc = RM_ENOMEM;
    } else {
        if (grown) {
            memset(grown + j->nsrv, 0, (size_t)(i + 1 - j->nsrv) * sizeof *grown);
            j->srv = grown;
            j->nsrv = (int)i + 1;
        }
        ps_server *sv = &j->srv[i];
        if (strcmp(sv->addr, addr) != 0)
            rm_info("parameter server registered job=%s index=%ld addr=%s", j->name, i, addr);
        snprintf(sv->addr, sizeof sv->addr, "%s", addr);
        sv->ckfail = (int)ckfail;
        snprintf(sv->ckerr, sizeof sv->ckerr, "%s", ckfail > 0 && ckerr ? ckerr : "");
        if (g.known)
            sv->group = g;
        rc = rm_http_reply_text(resp, 204, "application/json", "");
    }
    cJSON_Delete(body);
    return rc;
}

int rdzv_handle_servers_get(const job *j, rm_http_resp *resp)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *a = o ? cJSON_AddArrayToObject(o, "servers") : NULL;
    int n = 0;
    for (int i = 0; i < j->nsrv; i++)
        if (j->srv[i].addr[0])
            n = i + 1;
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateString(j->srv[i].addr);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            a = NULL;
        }
    }
    cJSON *ga = a ? cJSON_AddArrayToObject(o, "groups") : NULL;
    for (int i = 0; ga && i < n; i++) {
        const rm_rdzv_ps_group *g = &j->srv[i].group;
        cJSON *x = g->known ? cJSON_CreateObject() : cJSON_CreateNull();
        char h[2][24];
        snprintf(h[0], sizeof h[0], "%" PRIx64, g->inc);
        snprintf(h[1], sizeof h[1], "%" PRIx64, g->gen);
        cJSON *held = g->known && x ? cJSON_AddArrayToObject(x, "held") : NULL;
        for (int k = 0; held && k < g->nheld; k++) {
            cJSON *v = cJSON_CreateNumber((double)g->held[k]);
            if (!v || !cJSON_AddItemToArray(held, v)) {
                cJSON_Delete(v);
                held = NULL;
            }
        }
        if (g->known && x &&
            (!held || !cJSON_AddStringToObject(x, "inc", h[0]) || !cJSON_AddStringToObject(x, "gen", h[1]) ||
             !cJSON_AddBoolToObject(x, "settled", g->settled) ||
             !cJSON_AddNumberToObject(x, "at", (double)g->at) ||
             !cJSON_AddNumberToObject(x, "version", (double)g->version))) {
            cJSON_Delete(x);
            x = NULL;
        }
        if (!x || !cJSON_AddItemToArray(ga, x)) {
            cJSON_Delete(x);
            a = NULL;
            break;
        }
    }
    if (!a || !ga) {
        cJSON_Delete(o);
        o = NULL;
    }
    return rdzv_reply_cjson(resp, 200, o);
}

/* s holds a control character (a report's strings end up in status and events). */
static bool ctrl_in(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

rm_rdzv_action rdzv_report_action(const job *j, int epoch)
{
    return !j || j->stopped || j->removed ? RM_RDZV_STOP
           : epoch != j->epoch            ? RM_RDZV_REJOIN
                                          : RM_RDZV_CONTINUE;
}

int rdzv_reply_report(rm_http_resp *resp, const job *j, int epoch)
{
    char buf[96];
    snprintf(buf, sizeof buf, "{\"epoch\":%d,\"action\":\"%s\"}", j && !j->removed ? j->epoch : 0,
             rm_rdzv_action_names[rdzv_report_action(j, epoch)]);
    return rm_http_reply_text(resp, 200, "application/json", buf);
}

int rdzv_handle_report(rm_rdzv *r, job *j, const rm_http_req *req, rm_http_resp *resp)
{
    rm_err e = {0};
    int rc;
    if (j->removed)
        return rdzv_reply_report(resp, j, 0); /* stop */
    const char *wid = NULL, *state = NULL;
    int64_t epoch = 0, rank = -1, step = 0, train_epoch = 0, ckpt = 0, ckfail = 0;
    double loss = 0, sps = 0, gbps = 0, tps = 0;
    const char *ckerr = NULL;
    const cJSON *res = NULL, *ev = NULL, *memo = NULL;
    bool hold = false;
    double mem[5] = {0};
    static const char *const mem_keys[5] = {"params", "grads", "optimizer", "activations", "peakRss"};
    cJSON *body = rm_json_parse(req->body, req->body_len, &e);
    if (!body)
        return rm_http_reply_error(resp, 400, "report: %s", e.msg);
    if (!cJSON_IsObject(body) || rm_json_str(body, "workerId", true, "", &wid, &e) < 0 ||
        rm_json_int(body, "epoch", true, "", &epoch, &e) < 0 ||
        rdzv_bad(rm_json_int(body, "rank", false, "", &rank, &e)) ||
        rdzv_bad(rm_json_int(body, "step", false, "", &step, &e)) ||
        rdzv_bad(rm_json_int(body, "trainEpoch", false, "", &train_epoch, &e)) ||
        rdzv_bad(rm_json_int(body, "lastCheckpointStep", false, "", &ckpt, &e)) ||
        rdzv_bad(rm_json_num(body, "loss", false, "", &loss, &e)) ||
        rdzv_bad(rm_json_num(body, "samplesPerSecond", false, "", &sps, &e)) ||
        rdzv_bad(rm_json_num(body, "tokensPerSecond", false, "", &tps, &e)) ||
        rdzv_bad(rm_json_num(body, "allreduceGBps", false, "", &gbps, &e)) ||
        rdzv_bad(rm_json_str(body, "state", false, "", &state, &e)) ||
        rdzv_bad(rm_json_int(body, "checkpointFailures", false, "", &ckfail, &e)) ||
        rdzv_bad(rm_json_str(body, "checkpointError", false, "", &ckerr, &e)) ||
        rdzv_bad(rm_json_obj(body, "result", false, "", &res, &e)) ||
        rdzv_bad(rm_json_arr(body, "evaluations", false, "", &ev, &e)) ||
        rdzv_bad(rm_json_obj(body, "memory", false, "", &memo, &e)) ||
        rdzv_bad(rm_json_bool(body, "hold", false, "", &hold, &e))) {
        rc = rm_http_reply_error(resp, 400, "report: %s", e.msg[0] ? e.msg : "body must be an object");
        goto out;
    }
    if (!rdzv_str_ok(wid, sizeof(((rm_rdzv_member *)0)->worker_id) - 1) || epoch < 0 || epoch > 1000000000 ||
        rank < -1 || rank > RM_RDZV_MAX_WORLD || train_epoch < 0 || train_epoch > 1000000000 || ckfail < 0 ||
        ckfail > 1000000000 || (state && strcmp(state, "training") != 0 && strcmp(state, "done") != 0)) {
        rc = rm_http_reply_error(resp, 400, "report: bad workerId, epoch, rank, trainEpoch or state");
        goto out;
    }
    double ta = 0, tl = 0, secs = 0, rsps = 0, rvl = 0, rtps = 0;
    int64_t rsteps = 0;
    if (res && (rdzv_bad(rm_json_num(res, "testAccuracy", false, "result", &ta, &e)) ||
                rdzv_bad(rm_json_num(res, "trainLoss", false, "result", &tl, &e)) ||
                rdzv_bad(rm_json_num(res, "seconds", false, "result", &secs, &e)) ||
                rdzv_bad(rm_json_num(res, "samplesPerSecond", false, "result", &rsps, &e)) ||
                rdzv_bad(rm_json_num(res, "valLoss", false, "result", &rvl, &e)) ||
                rdzv_bad(rm_json_num(res, "tokensPerSecond", false, "result", &rtps, &e)) ||
                rdzv_bad(rm_json_int(res, "steps", false, "result", &rsteps, &e)))) {
        rc = rm_http_reply_error(resp, 400, "report: %s", e.msg);
        goto out;
    }
    /* the exported model and an export's failure (the rank that exported sends them) */
    const cJSON *rmod = NULL;
    const char *muri = NULL, *msha = NULL, *xerr = NULL;
    double mbytes = 0;
    if (res && (rdzv_bad(rm_json_obj(res, "model", false, "result", &rmod, &e)) ||
                rdzv_bad(rm_json_str(res, "exportError", false, "result", &xerr, &e)) ||
                (rmod && (rdzv_bad(rm_json_str(rmod, "uri", true, "result.model", &muri, &e)) ||
                          rdzv_bad(rm_json_str(rmod, "sha256", false, "result.model", &msha, &e)) ||
                          rdzv_bad(rm_json_num(rmod, "bytes", false, "result.model", &mbytes, &e)))))) {
        rc = rm_http_reply_error(resp, 400, "report: %s", e.msg);
        goto out;
    }
    if ((muri && (strlen(muri) >= RM_RDZV_MODEL_URI_MAX || ctrl_in(muri))) ||
        (msha && (strlen(msha) > 64 || ctrl_in(msha))) || !(mbytes >= 0 && mbytes < 1e18) ||
        (xerr && ctrl_in(xerr))) {
        rc = rm_http_reply_error(resp, 400, "report: bad result.model or result.exportError");
        goto out;
    }
    /* rank 0's evaluations (the same on every rank: evaluation is reduced); capped. "step" and
     * "valLoss" are absent from a peer that predates them: its entries are keyed by epoch */
    int nev = 0;
    for (const cJSON *x = ev ? ev->child : NULL; x && nev < RM_RDZV_MAX_EVALS; x = x->next, nev++) {
        int64_t ep = 0, estep = 0;
        double eacc = 0, eloss = 0, evl = 0;
        if (!cJSON_IsObject(x) || rm_json_int(x, "epoch", true, "evaluations[]", &ep, &e) < 0 ||
            rdzv_bad(rm_json_int(x, "step", false, "evaluations[]", &estep, &e)) ||
            rdzv_bad(rm_json_num(x, "testAccuracy", false, "evaluations[]", &eacc, &e)) ||
            rdzv_bad(rm_json_num(x, "trainLoss", false, "evaluations[]", &eloss, &e)) ||
            rdzv_bad(rm_json_num(x, "valLoss", false, "evaluations[]", &evl, &e)) || ep < 1 ||
            ep > 1000000000 || estep < 0) {
            rc = rm_http_reply_error(resp, 400, "report: %s", e.msg[0] ? e.msg : "bad evaluations[]");
            goto out;
        }
        if (rank == 0)
            rm_rdzv_eval_add(j->evals, &j->nevals, (int)ep, estep, eacc, eloss, evl);
    }
    for (int k = 0; memo && k < 5; k++) {
        if (rdzv_bad(rm_json_num(memo, mem_keys[k], false, "memory", &mem[k], &e)) || !(mem[k] >= 0) ||
            mem[k] > 1e18) {
            rc = rm_http_reply_error(resp, 400, "report: %s", e.msg[0] ? e.msg : "memory: bad value");
            goto out;
        }
    }
    int i = rdzv_member_find(j, wid);
    member *m = i >= 0 ? j->mem[i] : rdzv_member_add(j, wid);
    if (!m) {
        rc = rm_http_reply_error(resp, 400, "report: job has %d workers already", j->nmem);
        goto out;
    }
    double now = rm_wall();
    if (step > m->step || m->epoch != (int)epoch || m->last_report == 0)
        m->last_progress = now;
    m->last_report = now;
    m->epoch = (int)epoch;
    /* the group trains again: the first report of a member of the closed round (rank >= 0
     * only there; kept when the next epoch opens, so a failure right after a recovery cannot
     * hide it) */
    if (j->closed && (int)epoch == j->epoch && m->rank >= 0 && j->trained_epoch < j->epoch) {
        j->trained_epoch = j->epoch;
        j->trained_at = now;
        j->trained_world = j->world;
    }
    m->step = step;
    m->train_epoch = (int)train_epoch;
    m->last_checkpoint_step = ckpt;
    m->loss = loss;
    m->samples_per_second = sps;
    m->tokens_per_second = tps;
    m->allreduce_gbps = gbps;
    m->done = state && strcmp(state, "done") == 0;
    m->checkpoint_failures = (int)ckfail;
    rdzv_member_set_ckerr(m, ckfail > 0 ? ckerr : NULL); /* out of memory: no message kept */
    for (int k = 0; k < 5; k++)
        if (mem[k] > j->memmax[k])
            j->memmax[k] = mem[k];
    if (res) {
        j->have_result = true;
        j->test_accuracy = ta;
        j->train_loss = tl;
        j->seconds = secs;
        j->samples_per_second = rsps;
        j->val_loss = rvl;
        j->tokens_per_second = rtps;
        j->steps = rsteps;
        if (muri) {
            snprintf(j->model_uri, sizeof j->model_uri, "%s", muri);
            snprintf(j->model_sha256, sizeof j->model_sha256, "%s", msha ? msha : "");
            j->model_bytes = mbytes;
        }
        if (xerr) /* cut to the cap: the message is for people */
            snprintf(j->export_error, sizeof j->export_error, "%s", xerr);
    }
    rm_rdzv_action act = rdzv_report_action(j, (int)epoch);
    /* "hold": a report that would answer "continue" waits for the epoch to move, the job to stop
     * or REPORT_HOLD_S (docs/scale.md, "Held reports") */
    if (hold && act == RM_RDZV_CONTINUE && rdzv_hold_report(r, j, req)) {
        rc = RM_OK;
        goto out;
    }
    rc = rdzv_reply_report(resp, j, (int)epoch);
out:
    cJSON_Delete(body);
    return rc;
}
