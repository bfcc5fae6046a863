/* quantity.h — Kubernetes resource quantities ("500m", "2", "1.5Gi", "1e3", "4k") as exact
 * milli-units, the unit Kubernetes itself compares requests in (resource.Quantity.MilliValue).
 *
 * Grammar (k8s.io/apimachinery/pkg/api/resource): sign? digits [. digits] suffix, suffix one of
 * "" | m | k M G T P E (powers of 1000) | Ki Mi Gi Ti Pi Ei (powers of 1024) | e<int> / E<int>.
 * Values are rounded UP to a whole milli-unit (as MilliValue does); anything above ~9.2e15 whole
 * units overflows and is refused. Pure functions, no allocation. */
#ifndef RM_QUANTITY_H
#define RM_QUANTITY_H
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"

/* Parse s into milli-units (>= 0; a negative quantity is RM_EINVAL). RM_EINVAL when not a quantity. */
int rm_quantity_milli(const char *s, int64_t *out_milli);
/* A quantity in whole units, rounded up ("512Mi", "1.5Gi", "2G", "1e9" bytes; "100m" -> 1): what
 * a memory limit is in bytes. RM_EINVAL when not a quantity (or above ~9.2e15). */
int rm_quantity_bytes(const char *s, int64_t *out);
/* A JSON value that is a quantity: a string, or a number (YAML writes `cpu: 2`). */
int rm_quantity_json_milli(const cJSON *v, int64_t *out_milli);
/* Canonical text of a milli value: whole values as an integer ("4", or "8Gi" when an exact
 * multiple of 1024^k >= 1Ki and the value is at least 1Ki), else "<n>m". Returns buf. */
const char *rm_quantity_format(int64_t milli, char *buf, size_t cap);
#endif
