/* metrics.c — Prometheus registry and text exposition format 0.0.4 (see metrics.h).
 *
 * Design: the registry mutex guards only the shape (families, series lists); a series' values are
 * C11 atomics — counters/gauges keep a double as its uint64 bit pattern updated by CAS, histograms
 * keep one non-cumulative atomic count per bucket plus an atomic sum — so hot paths update without
 * locks. Rendering walks the lists under the mutex and reads the atomics; a histogram's _count is
 * the total of its buckets, so one scrape is always self-consistent (+Inf bucket == _count).
 * Removed series are hidden and reset, never freed, so a pointer a hot path holds stays valid. */
#include "common/metrics.h"
#include "common/buf.h"
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RM_METRICS_MAX_LABELS 16
#define RM_METRICS_MAX_BUCKETS 64

typedef enum { MT_COUNTER = 0, MT_GAUGE, MT_HISTOGRAM } metric_type;
static const char *const type_names[] = {"counter", "gauge", "histogram"};

struct rm_series {
    rm_metric *f;
    char **values;
    _Atomic uint64_t val;      /* double bits: counter/gauge value, histogram sum */
    _Atomic uint64_t *buckets; /* histogram: nb + 1 (last = +Inf), non-cumulative */
    atomic_bool hidden;
    rm_series *next;
};

struct rm_metric {
    rm_metrics *m;
    char *name, *help;
    metric_type type;
    char **labels;
    size_t nlabels;
    double *bounds;
    size_t nb;
    rm_series *head, *tail;
    rm_metric *next;
};

struct rm_metrics {
    pthread_mutex_t mu;
    rm_metric *head, *tail;
};

static uint64_t d2u(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}
static double u2d(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static void atomic_add_double(_Atomic uint64_t *a, double v)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    for (;;) {
        uint64_t nw = d2u(u2d(old) + v);
        if (atomic_compare_exchange_weak_explicit(a, &old, nw, memory_order_relaxed, memory_order_relaxed))
            return;
    }
}

rm_metrics *rm_metrics_new(void)
{
    rm_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void free_strv(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void series_free(rm_series *s, size_t nlabels)
{
    free_strv(s->values, nlabels);
    free(s->buckets);
    free(s);
}

static void family_free(rm_metric *f)
{
    if (!f)
        return;
    for (rm_series *s = f->head, *n; s; s = n) {
        n = s->next;
        series_free(s, f->nlabels);
    }
    free(f->name);
    free(f->help);
    free_strv(f->labels, f->nlabels);
    free(f->bounds);
    free(f);
}

void rm_metrics_free(rm_metrics *m)
{
    if (!m)
        return;
    for (rm_metric *f = m->head, *n; f; f = n) {
        n = f->next;
        family_free(f);
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* ---- validation -------------------------------------------------------------------------------- */

static int valid_metric_name(const char *s)
{
    if (!s || !*s)
        return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(p > s && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

static int valid_label_name(const char *s)
{
    if (!s || !*s || strncmp(s, "__", 2) == 0)
        return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && !(p > s && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

static int same_labels(const rm_metric *f, const char *const *labels, size_t n)
{
    if (f->nlabels != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(f->labels[i], labels[i]) != 0)
            return 0;
    return 1;
}

/* "x_count" against histogram "x" and vice versa: both would render the same sample name. */
static int suffix_clash(const char *a, const rm_metric *hist)
{
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};
    size_t hl = strlen(hist->name);
    if (strncmp(a, hist->name, hl) != 0)
        return 0;
    for (size_t i = 0; i < 3; i++)
        if (strcmp(a + hl, sfx[i]) == 0)
            return 1;
    return 0;
}

static rm_series *series_new_locked(rm_metric *f, const char *const *values);

static int register_family(rm_metrics *m, metric_type type, const char *name, const char *help,
                           const char *const *labels, const double *buckets, size_t nbuckets, rm_metric **out,
                           rm_err *err)
{
    static const double defaults[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};
    size_t nl = 0;
    *out = NULL;
    if (!m)
        return rm_errf(err, RM_EINVAL, "metrics: no registry");
    if (!valid_metric_name(name))
        return rm_errf(err, RM_EINVAL, "metric name \"%s\" is invalid (want [a-zA-Z_:][a-zA-Z0-9_:]*)",
                       name ? name : "(null)");
    for (; labels && labels[nl]; nl++) {
        if (nl >= RM_METRICS_MAX_LABELS)
            return rm_errf(err, RM_EINVAL, "metric %s: more than %d labels", name, RM_METRICS_MAX_LABELS);
        if (!valid_label_name(labels[nl]))
            return rm_errf(err, RM_EINVAL,
                           "metric %s: label name \"%s\" is invalid (want [a-zA-Z_][a-zA-Z0-9_]*, "
                           "not starting with __)",
                           name, labels[nl]);
        if (type == MT_HISTOGRAM && strcmp(labels[nl], "le") == 0)
            return rm_errf(err, RM_EINVAL, "metric %s: label \"le\" is reserved in histograms", name);
        for (size_t j = 0; j < nl; j++)
            if (strcmp(labels[j], labels[nl]) == 0)
                return rm_errf(err, RM_EINVAL, "metric %s: duplicate label \"%s\"", name, labels[nl]);
    }
    const double *b = buckets;
    size_t nb = nbuckets;
    if (type == MT_HISTOGRAM) {
        if (!b || nb == 0) {
            b = defaults;
            nb = RM_ARRAY_LEN(defaults);
        }
        if (nb > 0 && isinf(b[nb - 1]) && b[nb - 1] > 0)
            nb--; /* +Inf is implicit */
        if (nb > RM_METRICS_MAX_BUCKETS)
            return rm_errf(err, RM_EINVAL, "metric %s: more than %d buckets", name, RM_METRICS_MAX_BUCKETS);
        for (size_t i = 0; i < nb; i++) {
            if (!isfinite(b[i]) || (i > 0 && !(b[i] > b[i - 1])))
                return rm_errf(err, RM_EINVAL, "metric %s: buckets must be finite and strictly increasing",
                               name);
        }
    } else {
        nb = 0;
    }

    int rc = RM_OK;
    pthread_mutex_lock(&m->mu);
    for (rm_metric *f = m->head; f; f = f->next) {
        if (strcmp(f->name, name) == 0) {
            int same = f->type == type && same_labels(f, labels, nl) && f->nb == nb;
            for (size_t i = 0; same && i < nb; i++)
                same = f->bounds[i] == b[i];
            if (same)
                *out = f;
            else
                rc = rm_errf(err, RM_ECONFLICT,
                             "metric %s already registered with a different type, labels or buckets", name);
            goto out;
        }
        if ((f->type == MT_HISTOGRAM && suffix_clash(name, f)) ||
            (type == MT_HISTOGRAM && suffix_clash(f->name, &(rm_metric){.name = (char *)name}))) {
            rc = rm_errf(err, RM_ECONFLICT, "metric %s clashes with histogram series of %s", name, f->name);
            goto out;
        }
    }
    rm_metric *f = calloc(1, sizeof *f);
    if (!f) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    f->m = m;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    f->nlabels = nl;
    f->nb = nb;
    int bad = !f->name || !f->help;
    if (nl) {
        f->labels = calloc(nl, sizeof *f->labels);
        bad |= !f->labels;
        for (size_t i = 0; !bad && i < nl; i++)
            bad |= !(f->labels[i] = strdup(labels[i]));
    }
    if (nb) {
        f->bounds = malloc(nb * sizeof *f->bounds);
        bad |= !f->bounds;
        if (f->bounds)
            memcpy(f->bounds, b, nb * sizeof *b);
    }
    if (!bad && nl == 0 && !series_new_locked(f, NULL))
        bad = 1;
    if (bad) {
        family_free(f);
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    if (m->tail)
        m->tail->next = f;
    else
        m->head = f;
    m->tail = f;
    *out = f;
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int rm_metrics_counter(rm_metrics *m, const char *name, const char *help, const char *const *labels,
                       rm_metric **out, rm_err *err)
{
    return register_family(m, MT_COUNTER, name, help, labels, NULL, 0, out, err);
}

int rm_metrics_gauge(rm_metrics *m, const char *name, const char *help, const char *const *labels,
                     rm_metric **out, rm_err *err)
{
    return register_family(m, MT_GAUGE, name, help, labels, NULL, 0, out, err);
}

int rm_metrics_histogram(rm_metrics *m, const char *name, const char *help, const char *const *labels,
                         const double *buckets, size_t nbuckets, rm_metric **out, rm_err *err)
{
    return register_family(m, MT_HISTOGRAM, name, help, labels, buckets, nbuckets, out, err);
}

/* ---- series ------------------------------------------------------------------------------------ */

static rm_series *series_new_locked(rm_metric *f, const char *const *values)
{
    rm_series *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->f = f;
    atomic_init(&s->val, d2u(0.0));
    atomic_init(&s->hidden, false);
    if (f->nlabels) {
        s->values = calloc(f->nlabels, sizeof *s->values);
        if (!s->values)
            goto fail;
        for (size_t i = 0; i < f->nlabels; i++)
            if (!(s->values[i] = strdup(values[i])))
                goto fail;
    }
    if (f->type == MT_HISTOGRAM) {
        s->buckets = calloc(f->nb + 1, sizeof *s->buckets);
        if (!s->buckets)
            goto fail;
        for (size_t i = 0; i <= f->nb; i++)
            atomic_init(&s->buckets[i], 0);
    }
    if (f->tail)
        f->tail->next = s;
    else
        f->head = s;
    f->tail = s;
    return s;
fail:
    series_free(s, f->nlabels);
    return NULL;
}

static rm_series *find_locked(rm_metric *f, const char *const *values)
{
    for (rm_series *s = f->head; s; s = s->next) {
        size_t i = 0;
        while (i < f->nlabels && strcmp(s->values[i], values[i]) == 0)
            i++;
        if (i == f->nlabels)
            return s;
    }
    return NULL;
}

static void series_reset(rm_series *s)
{
    atomic_store(&s->val, d2u(0.0));
    if (s->buckets)
        for (size_t i = 0; i <= s->f->nb; i++)
            atomic_store(&s->buckets[i], 0);
}

rm_series *rm_metric_with(rm_metric *f, const char *const *values)
{
    if (!f)
        return NULL;
    for (size_t i = 0; i < f->nlabels; i++)
        if (!values || !values[i])
            return NULL;
    pthread_mutex_lock(&f->m->mu);
    rm_series *s = find_locked(f, values);
    if (s) {
        if (atomic_load(&s->hidden)) {
            series_reset(s);
            atomic_store(&s->hidden, false);
        }
    } else {
        s = series_new_locked(f, values);
    }
    pthread_mutex_unlock(&f->m->mu);
    return s;
}

rm_series *rm_metric_with1(rm_metric *f, const char *v1)
{
    if (!f || f->nlabels != 1)
        return NULL;
    const char *v[] = {v1};
    return rm_metric_with(f, v);
}

rm_series *rm_metric_with2(rm_metric *f, const char *v1, const char *v2)
{
    if (!f || f->nlabels != 2)
        return NULL;
    const char *v[] = {v1, v2};
    return rm_metric_with(f, v);
}

rm_series *rm_metric_series(rm_metric *f)
{
    if (!f || f->nlabels != 0)
        return NULL;
    return f->head;
}

void rm_metric_remove(rm_metric *f, const char *const *values)
{
    if (!f || f->nlabels == 0)
        return;
    for (size_t i = 0; i < f->nlabels; i++)
        if (!values || !values[i])
            return;
    pthread_mutex_lock(&f->m->mu);
    rm_series *s = find_locked(f, values);
    if (s) {
        atomic_store(&s->hidden, true);
        series_reset(s);
    }
    pthread_mutex_unlock(&f->m->mu);
}

void rm_series_inc(rm_series *s, double v)
{
    if (!s || s->f->type == MT_HISTOGRAM)
        return;
    if (s->f->type == MT_COUNTER && !(v >= 0))
        return; /* counters only go up */
    atomic_add_double(&s->val, v);
}

void rm_series_set(rm_series *s, double v)
{
    if (!s || s->f->type != MT_GAUGE)
        return;
    atomic_store_explicit(&s->val, d2u(v), memory_order_relaxed);
}

void rm_series_observe(rm_series *s, double v)
{
    if (!s || s->f->type != MT_HISTOGRAM)
        return;
    size_t i = 0;
    while (i < s->f->nb && !(v <= s->f->bounds[i]))
        i++;
    atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
    atomic_add_double(&s->val, v);
}

double rm_series_value(const rm_series *s)
{
    if (!s)
        return 0;
    return u2d(atomic_load_explicit(&((rm_series *)s)->val, memory_order_relaxed));
}

unsigned long long rm_series_count(const rm_series *s)
{
    if (!s || !s->buckets)
        return 0;
    unsigned long long n = 0;
    for (size_t i = 0; i <= s->f->nb; i++)
        n += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
    return n;
}

/* ---- rendering --------------------------------------------------------------------------------- */

/* The scrape text: uncapped (it is ours, not the network's); the first failed append sticks. */
typedef struct {
    rm_capbuf b;
    int oom;
} sbuf;

static void sb_put(sbuf *s, const char *p, size_t n)
{
    if (!s->oom && rm_capbuf_append(&s->b, p, n) != RM_OK)
        s->oom = 1;
}
static void sb_puts(sbuf *s, const char *p)
{
    sb_put(s, p, strlen(p));
}

/* Shortest %g that round-trips; Prometheus spellings for the specials. */
static void fmt_double(char *buf, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, cap, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* Length (1-4) of the well-formed UTF-8 sequence at p, or 0 for a stray continuation byte, an
 * overlong form, a surrogate, a code point past U+10FFFF or a sequence cut short. */
static size_t utf8_len(const unsigned char *p)
{
    unsigned c = p[0], cp, min;
    size_t n;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) /* also stops at the NUL */
            return 0;
        cp = (cp << 6) | (p[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* HELP text and label values: escapes of format 0.0.4, and invalid UTF-8 as U+FFFD, because one
 * bad byte makes Prometheus reject the whole scrape ("invalid label value"). */
static void sb_escaped(sbuf *s, const char *p, int quote)
{
    while (*p) {
        size_t n = 1;
        if (*p == '\\')
            sb_puts(s, "\\\\");
        else if (*p == '\n')
            sb_puts(s, "\\n");
        else if (quote && *p == '"')
            sb_puts(s, "\\\"");
        else if ((n = utf8_len((const unsigned char *)p)) == 0) {
            sb_puts(s, "\xef\xbf\xbd");
            n = 1;
        } else
            sb_put(s, p, n);
        p += n;
    }
}

/* name{labels,extra} value\n ; extra is an already-formatted le value or NULL */
static void sb_sample(sbuf *s, const rm_metric *f, const rm_series *se, const char *suffix, const char *le,
                      const char *value)
{
    sb_puts(s, f->name);
    sb_puts(s, suffix);
    if (f->nlabels || le) {
        sb_puts(s, "{");
        for (size_t i = 0; i < f->nlabels; i++) {
            if (i)
                sb_puts(s, ",");
            sb_puts(s, f->labels[i]);
            sb_puts(s, "=\"");
            sb_escaped(s, se->values[i], 1);
            sb_puts(s, "\"");
        }
        if (le) {
            sb_puts(s, f->nlabels ? ",le=\"" : "le=\"");
            sb_puts(s, le);
            sb_puts(s, "\"");
        }
        sb_puts(s, "}");
    }
    sb_puts(s, " ");
    sb_puts(s, value);
    sb_puts(s, "\n");
}

char *rm_metrics_render(rm_metrics *m, size_t *len)
{
    sbuf s = {.b.max = SIZE_MAX};
    char v[64], le[64];
    if (!m)
        return NULL;
    sb_put(&s, "", 0);
    pthread_mutex_lock(&m->mu);
    for (const rm_metric *f = m->head; f; f = f->next) {
        int any = 0;
        for (const rm_series *se = f->head; se; se = se->next)
            any |= !atomic_load(&((rm_series *)se)->hidden);
        if (!any)
            continue;
        sb_puts(&s, "# HELP ");
        sb_puts(&s, f->name);
        sb_puts(&s, " ");
        sb_escaped(&s, f->help, 0);
        sb_puts(&s, "\n# TYPE ");
        sb_puts(&s, f->name);
        sb_puts(&s, " ");
        sb_puts(&s, type_names[f->type]);
        sb_puts(&s, "\n");
        for (const rm_series *se = f->head; se; se = se->next) {
            if (atomic_load(&((rm_series *)se)->hidden))
                continue;
            if (f->type != MT_HISTOGRAM) {
                fmt_double(v, sizeof v, rm_series_value(se));
                sb_sample(&s, f, se, "", NULL, v);
                continue;
            }
            unsigned long long cum = 0;
            for (size_t i = 0; i <= f->nb; i++) {
                cum += atomic_load_explicit(&((rm_series *)se)->buckets[i], memory_order_relaxed);
                if (i < f->nb)
                    fmt_double(le, sizeof le, f->bounds[i]);
                else
                    snprintf(le, sizeof le, "+Inf");
                snprintf(v, sizeof v, "%llu", cum);
                sb_sample(&s, f, se, "_bucket", le, v);
            }
            fmt_double(v, sizeof v, rm_series_value(se));
            sb_sample(&s, f, se, "_sum", NULL, v);
            snprintf(v, sizeof v, "%llu", cum);
            sb_sample(&s, f, se, "_count", NULL, v);
        }
    }
    pthread_mutex_unlock(&m->mu);
    if (s.oom) {
        rm_capbuf_free(&s.b);
        return NULL;
    }
    if (len)
        *len = s.b.len;
    return s.b.b;
}

int rm_metrics_handler(const rm_http_req *req, rm_http_resp *resp, void *registry)
{
    size_t n;
    (void)req;
    char *b = rm_metrics_render(registry, &n);
    if (!b)
        return RM_ENOMEM;
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    if (n == 0) {
        free(b);
        b = NULL;
    }
    resp->body = b;
    resp->body_len = n;
    return RM_OK;
}
