/* datasets.c — built-in data sets and local data paths (datasets.h). */
#include "common/datasets.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/token_shard.h"

static const struct {
    const char *name, *rel; /* rel: under the datasets folder; NULL = an absolute path */
    const char *abs;
    rm_data_format fmt;
} builtins[] = {
    {"fashion-mnist", NULL, RM_TJ_FASHION_MNIST_DIR, RM_DATA_IDX},
    {"tinyshakespeare", "tinyshakespeare/input.txt", NULL, RM_DATA_TEXT},
};

static int find_builtin(const char *uri)
{
    if (!uri || strncmp(uri, "builtin:", 8) != 0)
        return -1;
    for (size_t i = 0; i < RM_ARRAY_LEN(builtins); i++)
        if (strcmp(uri + 8, builtins[i].name) == 0)
            return (int)i;
    return -1;
}

const char *rm_uri_local(const char *uri)
{
    if (!uri)
        return NULL;
    if (uri[0] == '/')
        return uri;
    if (strncmp(uri, "file:///", 8) == 0)
        return uri + 7;
    return NULL;
}

bool rm_uri_fetched(const char *uri)
{
    return uri && (strncmp(uri, "http://", 7) == 0 || strncmp(uri, "https://", 8) == 0 ||
                   strncmp(uri, "s3://", 5) == 0);
}

bool rm_builtin_known(const char *uri)
{
    return find_builtin(uri) >= 0;
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* The datasets folder holding rel; false when none does. */
static bool datasets_path(const char *rel, char *out, size_t cap)
{
    char exe[4096], dir[4096];
    const char *env = getenv(RM_ENV_DATASETS);
    if (env && *env && (size_t)snprintf(out, cap, "%s/%s", env, rel) < cap && exists(out))
        return true;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(dir, sizeof dir, "%s", exe);
            const char *tails[] = {"../share/ringmaster/datasets", "../datasets"};
            for (size_t i = 0; i < RM_ARRAY_LEN(tails); i++)
                if ((size_t)snprintf(out, cap, "%s/%s/%s", dir, tails[i], rel) < cap && exists(out))
                    return true;
        }
    }
    const char *fixed[] = {"/usr/local/share/ringmaster/datasets", "/usr/share/ringmaster/datasets"};
    for (size_t i = 0; i < RM_ARRAY_LEN(fixed); i++)
        if ((size_t)snprintf(out, cap, "%s/%s", fixed[i], rel) < cap && exists(out))
            return true;
    return false;
}

int rm_data_local_path(const char *uri, char *path, size_t cap, rm_data_format *fmt, rm_err *err)
{
    *fmt = RM_DATA_IDX;
    if (!uri || !*uri)
        uri = RM_TJ_BUILTIN_FASHION_MNIST;
    if (strncmp(uri, "builtin:", 8) == 0) {
        int i = find_builtin(uri);
        if (i < 0)
            return rm_err_field(err, RM_EINVAL, "spec.training.data.uri",
                                "unknown built-in data set \"%s\" (builtin:fashion-mnist, "
                                "builtin:tinyshakespeare)",
                                uri);
        *fmt = builtins[i].fmt;
        if (builtins[i].abs) {
            snprintf(path, cap, "%s", builtins[i].abs);
            return RM_OK;
        }
        if (!datasets_path(builtins[i].rel, path, cap))
            return rm_err_field(err, RM_ENOTFOUND, "spec.training.data.uri",
                                "%s is not installed here (looked for %s under $%s, the executable's "
                                "../share/ringmaster/datasets and ../datasets, "
                                "/usr/local/share/ringmaster/datasets)",
                                uri, builtins[i].rel, RM_ENV_DATASETS);
        return RM_OK;
    }
    const char *local = rm_uri_local(uri);
    if (!local)
        return rm_err_field(err, RM_EUNSUPPORTED, "spec.training.data.uri", "\"%s\" is not supported yet",
                            uri);
    if (strlen(local) >= cap)
        return rm_err_field(err, RM_EINVAL, "spec.training.data.uri", "path longer than %zu bytes", cap - 1);
    snprintf(path, cap, "%s", local);
    return RM_OK;
}

rm_data_format rm_data_sniff(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return RM_DATA_IDX;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        rm_data_format f = RM_DATA_IDX;
        struct dirent *e;
        while (d && (e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (n > 4 && strcmp(e->d_name + n - 4, ".bin") == 0) {
                f = RM_DATA_TOKENS;
                break;
            }
        }
        if (d)
            closedir(d);
        return f;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int32_t magic = 0;
    ssize_t got = fd >= 0 ? read(fd, &magic, sizeof magic) : -1;
    if (fd >= 0)
        close(fd);
    if (got == (ssize_t)sizeof magic && (magic == RM_TOK_MAGIC_U16 || magic == RM_TOK_MAGIC_U32))
        return RM_DATA_TOKENS;
    return RM_DATA_TEXT;
}
