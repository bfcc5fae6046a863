/* informer.h — list+watch of one Kubernetes collection into a local cache, client-go style.
 *
 * A background thread LISTs the collection (paginated, `limit`/`continue`), then WATCHes from the
 * list's resourceVersion with bookmarks, keeping the newest resourceVersion it saw. A watch that
 * ends cleanly or breaks is re-opened from that version (back-off 0.2 s doubling to 10 s on
 * errors); a 410 Expired (as an HTTP status or an ERROR event), an undecodable event or an
 * oversized event line forces a fresh LIST, which is diffed against the cache so every change in
 * between is still delivered (ADDED/UPDATED/DELETED), never missed.
 *
 * The cache stores what `transform` returns for each object (a compact projection, so thousands
 * of pods cost little memory), keyed "namespace/name", and an index by `index_fn` (e.g. the owning
 * job's key), so "the pods of job X" is one lookup.
 *
 * Ownership: items are owned by the cache and freed with `free_item`; readers borrow them only
 * between rm_informer_rlock and rm_informer_runlock. Handlers run on the informer thread without the
 * cache lock, after the cache has changed; items passed to them are valid during the call. */
#ifndef RM_KUBE_INFORMER_H
#define RM_KUBE_INFORMER_H
#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "common/rm.h"
#include "operator/kube/client.h"

typedef struct rm_informer rm_informer;

typedef enum { RM_INF_ADDED = 0, RM_INF_UPDATED, RM_INF_DELETED } rm_inf_event;

typedef struct rm_informer_opts {
    const char *name;           /* for logs ("pods/default"); copied */
    const char *path;           /* collection path, "/api/v1/namespaces/ns/pods"; copied */
    const char *label_selector; /* may be NULL; copied */
    /* Projection of an object into the cache item; NULL means "do not cache" (or ENOMEM). */
    void *(*transform)(void *ud, const cJSON *obj);
    void (*free_item)(void *item);
    /* Secondary index key of an object (e.g. "ns/jobname"); return 0 and fill buf, or <0 for none. */
    int (*index_fn)(void *ud, const cJSON *obj, char *buf, size_t cap);
    /* Change notifications (may be NULL). old_item is NULL for ADDED, new_item NULL for DELETED. */
    void (*handler)(void *ud, rm_inf_event ev, const char *key, const char *index_key, const void *old_item,
                    const void *new_item);
    /* Called each time the watch is re-opened after an error or a forced re-list (metrics):
     * name is opts.name, reason "expired" | "bad-event" | "closed" | "http-error" | "transport". */
    void (*on_restart)(void *ud, const char *name, const char *reason);
    void *ud;
    int page_limit;      /* default 500 */
    int watch_timeout_s; /* server-side timeoutSeconds per watch; default 300 */
    size_t line_cap;     /* max bytes of one watch event; default 4 MiB */
    /* > 0: items are flat structs of this size (no pointers inside): the informer copies each
     * into its own entry and frees the transform's copy at once (one allocation per object).
     * Borrowed item pointers stay valid under the read lock as before. */
    size_t inline_size;
} rm_informer_opts;

/* Starts the thread. The client is borrowed and must outlive the informer. */
int rm_informer_start(rm_kube_client *c, const rm_informer_opts *opts, rm_informer **out, rm_err *err);
/* Stops the thread (interrupts a watch within ~1 s), frees the cache. NULL ok. */
void rm_informer_stop(rm_informer *inf);
/* True once the first LIST has been loaded. */
bool rm_informer_synced(rm_informer *inf);
/* Wait up to timeout_s for the first sync; true when synced. */
bool rm_informer_wait_synced(rm_informer *inf, double timeout_s);
/* Last resourceVersion seen (copied into buf). */
void rm_informer_rv(rm_informer *inf, char *buf, size_t cap);
/* Counters for tests and metrics. */
unsigned long rm_informer_lists(rm_informer *inf);
unsigned long rm_informer_watches(rm_informer *inf);

/* Read access: borrowed items valid until rm_informer_runlock. */
void rm_informer_rlock(rm_informer *inf);
void rm_informer_runlock(rm_informer *inf);
const void *rm_informer_get(rm_informer *inf, const char *key);
size_t rm_informer_count(rm_informer *inf);
/* Call fn for every item of one index key (fn returns <0 to stop). Under the read lock. */
void rm_informer_by_index(rm_informer *inf, const char *index_key,
                          int (*fn)(void *ud, const char *key, const void *item), void *ud);
/* Call fn for every item. Under the read lock. */
void rm_informer_foreach(rm_informer *inf, int (*fn)(void *ud, const char *key, const void *item), void *ud);

/* Watch-event decoding, exposed for unit tests: parses one line into type and object.
 * Returns RM_OK (type "ADDED"... written to type; *obj owned), RM_EEPOCH for a 410 ERROR event,
 * RM_EPROTO for garbage or another ERROR. */
int rm_informer_decode_event(const char *line, size_t len, char *type, size_t tcap, cJSON **obj, rm_err *err);
#endif
