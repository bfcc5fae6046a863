/* yaml.h — load Kubernetes manifests (one or several YAML documents) into cJSON, with positions.
 *
 * Scalars follow the YAML 1.2 core schema as Kubernetes reads it: plain true/false, null/~/empty,
 * integers (decimal, 0x, 0o), floats (.inf, .nan too) become typed JSON; quoted or block scalars
 * stay strings. Anchors/aliases are resolved (capped to stop alias bombs); duplicate keys are an
 * error. Errors carry "FILE:LINE:COL: message" in err->msg. Empty documents are skipped.
 * The loader also records the line and column of every node, addressable by dotted path, so a
 * validation error about "spec.minReplicas" can point at its line. */
#ifndef RM_YAML_H
#define RM_YAML_H
#include <cjson/cJSON.h>
#include "common/rm.h"

typedef struct rm_yaml_docs rm_yaml_docs;

/* Parse `len` bytes. `name` is used in messages (may be NULL → "<input>").
 * On success *out is owned by the caller (rm_yaml_free). On error *out is NULL and err says where. */
int rm_yaml_load(const char *text, size_t len, const char *name, rm_yaml_docs **out, rm_err *err);
/* Read the file (capped at 16 MiB) and parse it; "-" reads stdin. */
int rm_yaml_load_file(const char *path, rm_yaml_docs **out, rm_err *err);
size_t rm_yaml_count(const rm_yaml_docs *d);
/* Borrowed document i (valid until rm_yaml_free or rm_yaml_take). */
cJSON *rm_yaml_doc(const rm_yaml_docs *d, size_t i);
/* Ownership of document i passes to the caller; the slot becomes NULL (positions stay valid). */
cJSON *rm_yaml_take(rm_yaml_docs *d, size_t i);
/* Line/column (1-based) of the node at dotted path in document i ("spec.replicas",
 * "spec.template.spec.containers[0].image"). Falls back to the deepest existing ancestor.
 * RM_ENOTFOUND if not even the root is known. */
int rm_yaml_pos(const rm_yaml_docs *d, size_t i, const char *path, int *line, int *col);
void rm_yaml_free(rm_yaml_docs *d); /* NULL ok */
#endif
