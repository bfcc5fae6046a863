/* names.h — the API server's rules for object names and metadata, as kubesim enforces them
 * (docs/kube-api-double.md G5; kubernetes 1.32: k8s.io/apimachinery/pkg/util/validation and
 * pkg/api/validation, pkg/apis/core/validation). Pure functions over cJSON, so the unit tests
 * drive them directly and api.c only maps a kind to its rule and the causes to a Status.
 *
 * Rules:
 *  - metadata.name per kind: Services a DNS-1035 label, Namespaces a DNS-1123 label, RBAC kinds a
 *    path segment, everything else (pods, CRs, secrets, ...) a DNS-1123 subdomain;
 *  - pods: spec.hostname and spec.subdomain are DNS-1123 labels;
 *  - metadata.annotations: keys + values at most 256 KiB in total.
 * Messages are the API server's words: a cause is {type, field, message} with the message being
 * the field error's body (`Invalid value: "1job": a DNS-1035 label must ...`), and the Status
 * message is `<Kind[.group]> "<name>" is invalid: <field>: <body>` (several: `[a, b]`).
 * Ownership: everything is caller-owned and fixed-size; nothing allocates. */
#ifndef KS_NAMES_H
#define KS_NAMES_H
#include <cjson/cJSON.h>
#include <stddef.h>

typedef enum {
    KS_NAME_SUBDOMAIN = 0, /* [a-z0-9]([-a-z0-9]*[a-z0-9])?(\.<that>)*, at most 253 */
    KS_NAME_LABEL,         /* [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 */
    KS_NAME_DNS1035,       /* [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 */
    KS_NAME_PATH_SEGMENT,  /* not "." or "..", no '/' or '%' */
} ks_name_fmt;

#define KS_ANNOTATIONS_MAX (256 * 1024) /* TotalAnnotationSizeLimitB */
#define KS_MAX_CAUSES 4

typedef struct ks_cause {
    char type[24];   /* FieldValueInvalid | FieldValueTooLong */
    char field[128]; /* metadata.name */
    char msg[512];   /* the field error's body */
} ks_cause;

typedef struct ks_causes {
    ks_cause c[KS_MAX_CAUSES];
    int n; /* causes kept (at most KS_MAX_CAUSES; later ones are dropped) */
} ks_causes;

/* The rule for a kind's metadata.name: group ("" = core) and kind ("Service"). */
ks_name_fmt ks_name_format(const char *group, const char *kind);
/* Append one cause per violation of fmt by value at field; returns how many were found. */
int ks_check_name(ks_name_fmt fmt, const char *field, const char *value, ks_causes *out);
/* metadata.annotations total size. Returns causes added (0 or 1). */
int ks_check_annotations(const cJSON *obj, ks_causes *out);
/* A pod's spec.hostname and spec.subdomain (each checked when non-empty). */
int ks_check_pod_names(const cJSON *pod, ks_causes *out);
/* The Status message for causes about object `name` of `qualified_kind` ("Service",
 * "TrainingJob.ringmaster.dev"). */
void ks_causes_message(const ks_causes *cs, const char *qualified_kind, const char *name, char *buf,
                       size_t cap);
#endif
