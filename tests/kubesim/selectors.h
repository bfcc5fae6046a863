/* selectors.h — Kubernetes label selectors (rule K4) and field selectors (rule K5).
 *
 * Parsed once per request into a small owned structure, matched per object (and per watch
 * event, so matching allocates nothing). Error messages follow the apiserver's wording so
 * clients that print them look familiar. */
#ifndef KS_SELECTORS_H
#define KS_SELECTORS_H
#include <stdbool.h>
#include <cjson/cJSON.h>
#include "common/rm.h"

typedef struct ks_lsel ks_lsel;
typedef struct ks_fsel ks_fsel;

/* Parse "a=b,c!=d,e in (x,y),f notin (z),g,!h,i>3". NULL or "" → an empty selector that matches
 * everything. On success *out is owned (ks_lsel_free). RM_EINVAL with err->msg on bad syntax. */
int ks_lsel_parse(const char *s, ks_lsel **out, rm_err *err);
/* labels: the metadata.labels object (may be NULL). */
bool ks_lsel_match(const ks_lsel *sel, const cJSON *labels);
bool ks_lsel_empty(const ks_lsel *sel);
void ks_lsel_free(ks_lsel *sel); /* NULL ok */

/* Parse "metadata.name=x,status.phase!=Running". `allowed` is a NULL-terminated list of field
 * paths the kind supports; others give RM_EINVAL "field label not supported: X". */
int ks_fsel_parse(const char *s, const char *const *allowed, ks_fsel **out, rm_err *err);
/* Values are looked up by dotted path in obj; a missing field compares as "". */
bool ks_fsel_match(const ks_fsel *sel, const cJSON *obj);
bool ks_fsel_empty(const ks_fsel *sel);
void ks_fsel_free(ks_fsel *sel); /* NULL ok */

/* Dotted lookup ("metadata.name", "spec.x.y"); labels['k'] not supported here. Borrowed or NULL. */
const cJSON *ks_json_dot(const cJSON *obj, const char *path);
#endif
