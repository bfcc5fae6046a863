/* log.h — structured logging: one line per event to stderr.
 *
 * The format string is "message words key=value key=value": everything before the first token
 * that contains '=' is the message. Values with spaces must be quoted by the caller (k=\"%s\").
 *   text:  ts=2026-11-21T08:00:00.123Z level=info comp=worker msg="ring connected" peer=1 rank=0
 *   json:  {"ts":"...","level":"info","comp":"worker","msg":"ring connected","peer":"1","rank":"0"}
 * Thread-safe (one write(2) per line). Fixed fields (set once, e.g. rank=3 job=ns/x) are appended
 * to every line. Nothing here allocates on the heap. Not async-signal-safe (it takes a mutex and
 * formats with stdio): a signal handler sets a flag and the loop logs. Values are escaped
 * (quotes, backslashes, control characters) so text from the network cannot forge a line. */
#ifndef RM_LOG_H
#define RM_LOG_H
#include "common/rm.h"

typedef enum { RM_LOG_DEBUG = 0, RM_LOG_INFO, RM_LOG_WARN, RM_LOG_ERROR } rm_log_level;
typedef enum { RM_LOG_TEXT = 0, RM_LOG_JSON } rm_log_format;

/* Set minimum level, format and component name (copied). Safe to call again. Default: info, text,
 * comp unset. Env RINGMASTER_LOG_LEVEL / RINGMASTER_LOG_FORMAT override when set. */
void rm_log_init(rm_log_level min, rm_log_format fmt, const char *component);
/* Fixed key=value fields added to every line, e.g. "rank=3 job=default/x" (copied; NULL clears). */
void rm_log_set_fields(const char *kv);
/* Parse "debug|info|warn|error" / "text|json"; RM_EINVAL if unknown. */
int rm_log_parse_level(const char *s, rm_log_level *out);
int rm_log_parse_format(const char *s, rm_log_format *out);
int rm_log_enabled(rm_log_level lvl);

void rm_log_write(rm_log_level lvl, const char *file, int line, const char *fmt, ...) RM_PRINTF(4, 5);
void rm_log_vwrite(rm_log_level lvl, const char *file, int line, const char *fmt, va_list ap);

#define rm_debug(...) rm_log_write(RM_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define rm_info(...) rm_log_write(RM_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define rm_warn(...) rm_log_write(RM_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define rm_error(...) rm_log_write(RM_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)

/* Format one line into buf (no newline) exactly as rm_log_write would; for tests. Returns length. */
size_t rm_log_format_line(char *buf, size_t cap, rm_log_level lvl, const char *fmt, ...) RM_PRINTF(4, 5);
#endif
