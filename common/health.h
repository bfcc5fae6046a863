/* health.h — /healthz and /readyz.
 *
 * Liveness is "the work loop made progress within the deadline": the loop calls
 * rm_health_beat() after each unit of work; /healthz answers 200 {"status":"ok"} while the last
 * beat is younger than the deadline and 503 {"status":"stalled","secondsSinceProgress":N} after.
 * deadline 0 disables the check (always 200). Readiness is a flag the owner sets (/readyz 200 when
 * ready, 503 otherwise, with the reason given to rm_health_set_ready). Thread-safe. */
#ifndef RM_HEALTH_H
#define RM_HEALTH_H
#include <stdbool.h>
#include "common/http.h"

typedef struct rm_health rm_health;
rm_health *rm_health_new(double deadline_seconds);
void rm_health_free(rm_health *h); /* NULL ok */
void rm_health_beat(rm_health *h);
void rm_health_set_deadline(rm_health *h, double deadline_seconds);
void rm_health_set_ready(rm_health *h, bool ready, const char *reason /* copied; may be NULL */);
bool rm_health_live(rm_health *h);
double rm_health_since_beat(rm_health *h); /* seconds */
/* A parameter server is declared hung after half the job's progress deadline (its /healthz goes
 * stalled then, and a runtime that gets no answer for that long kills it): its workers wait on it
 * and make no progress either, so it must be replaced before their own deadline names them
 * (docs/strategies.md#failure-semantics). 0 (no deadline) stays 0. */
double rm_health_server_deadline(double progress_deadline_seconds);
int rm_health_healthz(const rm_http_req *req, rm_http_resp *resp, void *health);
int rm_health_readyz(const rm_http_req *req, rm_http_resp *resp, void *health);
#endif
