/* Helpers shared by unit tests: registering a suite in one line, temp dirs, reading files.
 * Everything returned is owned by the caller unless said otherwise. */
#ifndef RM_TESTUTIL_H
#define RM_TESTUTIL_H
#include <CUnit/CUnit.h>
#include <stddef.h>

/* RM_ADD_TESTS("name", setup, teardown, {"case", fn}, ...) */
typedef struct {
    const char *name;
    void (*fn)(void);
} rm_test_case;
void rm_test_add_suite(const char *name, int (*init)(void), int (*clean)(void), const rm_test_case *cases,
                       size_t n);
#define RM_ADD_SUITE(name, init, clean, cases) \
    rm_test_add_suite((name), (init), (clean), (cases), sizeof(cases) / sizeof((cases)[0]))

/* mkdtemp under $TMPDIR (or /tmp); returns owned path. */
char *rm_test_tmpdir(const char *tag);
/* rm -rf path (best effort). */
void rm_test_rmtree(const char *path);
/* Empty a suite's scratch folder between cases (rm -rf, then mkdir 0700). */
void rm_test_clear_dir(const char *path);
/* rm -rf *path, free it, set it NULL; returns 0 so a CUnit cleanup can return it. NULL ok. */
int rm_test_tmpdir_free(char **path);
/* whole file, NUL-terminated; NULL if unreadable. */
char *rm_test_read_file(const char *path, size_t *len);
int rm_test_write_file(const char *path, const void *data, size_t len);
/* ‖a − b‖ / ‖b‖ over n floats (‖a − b‖ when b is all zeros): how docs/models-and-data.md compares
 * tensors. */
double rm_test_rel_diff(const float *a, const float *b, size_t n);
/* directory with the built binaries (env RM_BIN, else "bin"); borrowed. */
const char *rm_test_bindir(void);
#endif
