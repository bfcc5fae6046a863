/* metrics.h — a Prometheus registry: counters, gauges and histograms with label sets, rendered
 * in the text exposition format 0.0.4 (HELP/TYPE lines, label values escaped \\ \" \n).
 *
 * Names are validated at registration ([a-zA-Z_:][a-zA-Z0-9_:]*; labels [a-zA-Z_][a-zA-Z0-9_]*,
 * not starting with "__", no "le" on histograms, no duplicates): an invalid name is RM_EINVAL, never
 * a crash or a malformed scrape. Registering the same name twice with the same type and labels
 * returns the existing family; with a different shape it is RM_ECONFLICT.
 * Concurrency: families and series are created under the registry mutex; updates on a series are
 * lock-free atomics, so hot paths fetch a series once (rm_metric_with) and update it forever.
 * Families and series are owned by the registry and live until rm_metrics_free. */
#ifndef RM_METRICS_H
#define RM_METRICS_H
#include <stddef.h>
#include "common/rm.h"
#include "common/http.h"

typedef struct rm_metrics rm_metrics; /* registry */
typedef struct rm_metric rm_metric;   /* a family: name, help, type, label names */
typedef struct rm_series rm_series;   /* one label-value combination */

rm_metrics *rm_metrics_new(void);
void rm_metrics_free(rm_metrics *m); /* NULL ok */

/* labels: NULL-terminated array of label names, or NULL for none. */
int rm_metrics_counter(rm_metrics *m, const char *name, const char *help, const char *const *labels,
                       rm_metric **out, rm_err *err);
int rm_metrics_gauge(rm_metrics *m, const char *name, const char *help, const char *const *labels,
                     rm_metric **out, rm_err *err);
/* buckets: strictly increasing upper bounds (+Inf is implicit); NULL/0 → Prometheus defaults
 * (.005 .01 .025 .05 .1 .25 .5 1 2.5 5 10). */
int rm_metrics_histogram(rm_metrics *m, const char *name, const char *help, const char *const *labels,
                         const double *buckets, size_t nbuckets, rm_metric **out, rm_err *err);

/* The series for these label values (as many as the family has label names, in order; any value
 * is allowed, it is escaped on output). Returns NULL only on ENOMEM or a wrong count. */
rm_series *rm_metric_with(rm_metric *f, const char *const *values);
rm_series *rm_metric_with1(rm_metric *f, const char *v1);                 /* 1 label  */
rm_series *rm_metric_with2(rm_metric *f, const char *v1, const char *v2); /* 2 labels */
/* Unlabelled families: the single series. */
rm_series *rm_metric_series(rm_metric *f);
/* Drop a series (e.g. a deleted job's). */
void rm_metric_remove(rm_metric *f, const char *const *values);

void rm_series_inc(rm_series *s, double v);             /* counters (v >= 0) and gauges */
void rm_series_set(rm_series *s, double v);             /* gauges */
void rm_series_observe(rm_series *s, double v);         /* histograms */
double rm_series_value(const rm_series *s);             /* counter/gauge value; histogram sum */
unsigned long long rm_series_count(const rm_series *s); /* histogram count */

/* Render everything; owned string (free()), *len set. NULL on ENOMEM. */
char *rm_metrics_render(rm_metrics *m, size_t *len);
/* Route handler for GET /metrics, ud = rm_metrics*. Content-Type text/plain; version=0.0.4 */
int rm_metrics_handler(const rm_http_req *req, rm_http_resp *resp, void *registry);
#endif
