/* patch.h — the three PATCH flavours the apiserver speaks (rule H1).
 *
 * All functions take the document by cJSON** because a patch may replace the root; on success
 * *doc is the patched tree (owned by the caller, as before); on failure *doc is left valid
 * (possibly partially patched — callers patch a private copy) and err says why:
 *   RM_EPROTO   the patch itself is malformed (→ 400)
 *   RM_EINVAL   the patch does not apply: bad path, failed "test" (→ 422)
 * The patch argument is borrowed. */
#ifndef KS_PATCH_H
#define KS_PATCH_H
#include <stdbool.h>
#include <cjson/cJSON.h>
#include "common/rm.h"

/* RFC 7386 merge patch: objects merge recursively, null deletes, everything else replaces. */
int ks_merge_patch(cJSON **doc, const cJSON *patch, rm_err *err);
/* RFC 6902 JSON patch: an array of {op,path,value,from}; add remove replace move copy test. */
int ks_json_patch(cJSON **doc, const cJSON *patch, rm_err *err);
/* Strategic merge patch for the simple cases of built-in kinds: lists of objects with a known
 * merge key (containers, env, volumes... by name; volumeMounts by mountPath; ports by
 * containerPort/port; ownerReferences by uid) merge element-wise, finalizers merge as a set,
 * other lists replace; directives $patch (replace|delete|merge), $setElementOrder/..,
 * $retainKeys and $deleteFromPrimitiveList/.. are honoured or dropped. */
int ks_strategic_merge_patch(cJSON **doc, const cJSON *patch, rm_err *err);
/* Deep equality, linear in the size of the trees. cJSON_Compare walks objects in both directions
 * at every level (2^depth), which a 60-level document turns into a hang; never use it here. */
bool ks_json_equal(const cJSON *a, const cJSON *b);
#endif
