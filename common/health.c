/* health.c — /healthz (progress deadline) and /readyz (owner-set flag) (see health.h).
 *
 * Design: the beat is a monotonic timestamp behind a mutex (a beat per training step is cheap
 * next to a step); the probes compute "seconds since the last beat" on demand, so no timer thread
 * is needed and a stalled loop is detected even if nothing else runs. */
#include "common/health.h"
#include "common/clock.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rm_health {
    pthread_mutex_t mu;
    double last_beat;
    double deadline;
    bool ready;
    char reason[256];
};

rm_health *rm_health_new(double deadline_seconds)
{
    rm_health *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    pthread_mutex_init(&h->mu, NULL);
    h->last_beat = rm_mono();
    h->deadline = deadline_seconds > 0 ? deadline_seconds : 0;
    snprintf(h->reason, sizeof h->reason, "starting");
    return h;
}

void rm_health_free(rm_health *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void rm_health_beat(rm_health *h)
{
    if (!h)
        return;
    double t = rm_mono();
    pthread_mutex_lock(&h->mu);
    h->last_beat = t;
    pthread_mutex_unlock(&h->mu);
}

void rm_health_set_deadline(rm_health *h, double deadline_seconds)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->deadline = deadline_seconds > 0 ? deadline_seconds : 0;
    pthread_mutex_unlock(&h->mu);
}

void rm_health_set_ready(rm_health *h, bool ready, const char *reason)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->ready = ready;
    snprintf(h->reason, sizeof h->reason, "%s", reason ? reason : (ready ? "ready" : "not ready"));
    pthread_mutex_unlock(&h->mu);
}

/* Seconds since the last beat and the verdict on them, read together (so /healthz never says
 * "ok" next to an age past the deadline). NULL: live, 0 s. */
static bool liveness(rm_health *h, double *since)
{
    if (!h) {
        *since = 0;
        return true;
    }
    pthread_mutex_lock(&h->mu);
    double d = rm_mono() - h->last_beat;
    bool live = h->deadline <= 0 || d <= h->deadline;
    pthread_mutex_unlock(&h->mu);
    *since = d < 0 ? 0 : d;
    return live;
}

double rm_health_since_beat(rm_health *h)
{
    double since;
    liveness(h, &since);
    return since;
}

bool rm_health_live(rm_health *h)
{
    double since;
    return liveness(h, &since);
}

double rm_health_server_deadline(double progress_deadline_seconds)
{
    return progress_deadline_seconds > 0 ? progress_deadline_seconds / 2 : 0;
}

int rm_health_healthz(const rm_http_req *req, rm_http_resp *resp, void *health)
{
    rm_health *h = health;
    (void)req;
    double since;
    bool live = liveness(h, &since);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return RM_ENOMEM;
    cJSON_AddStringToObject(o, "status", live ? "ok" : "stalled");
    cJSON_AddNumberToObject(o, "secondsSinceProgress", floor(since * 1000.0) / 1000.0);
    int rc = rm_http_reply_json(resp, live ? 200 : 503, o);
    cJSON_Delete(o);
    return rc;
}

int rm_health_readyz(const rm_http_req *req, rm_http_resp *resp, void *health)
{
    rm_health *h = health;
    char reason[256];
    bool ready;
    (void)req;
    if (!h)
        return RM_EINVAL;
    pthread_mutex_lock(&h->mu);
    ready = h->ready;
    memcpy(reason, h->reason, sizeof reason);
    pthread_mutex_unlock(&h->mu);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return RM_ENOMEM;
    cJSON_AddStringToObject(o, "status", ready ? "ready" : "not ready");
    cJSON_AddStringToObject(o, "reason", reason);
    int rc = rm_http_reply_json(resp, ready ? 200 : 503, o);
    cJSON_Delete(o);
    return rc;
}
