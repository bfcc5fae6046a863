/* output.c — see output.h. */
#include "worker/model/output.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/datasets.h"
#include "common/fetch.h"
#include "common/sha256.h"
#include "common/worker_env.h"
#include "worker/model/export.h"

/* The env override of an upload size (bytes, >= 1 KiB), else 0 (the default). */
static uint64_t env_bytes(const char *name)
{
    const char *v = getenv(name);
    char *end = NULL;
    unsigned long long n = v && *v ? strtoull(v, &end, 10) : 0;
    return end && !*end && n >= 1024 ? (uint64_t)n : 0;
}

int rm_model_write_out(const rm_model *m, const float *host_params, const char *out_uri, const char *staging,
                       rm_output_dtype dtype, const char *field, rm_model_output_result *res, rm_err *err)
{
    memset(res, 0, sizeof *res);
    const char *local = rm_uri_local(out_uri);
    bool s3 = strncmp(out_uri, "s3://", 5) == 0;
    if (!local && !s3)
        return rm_err_field(err, RM_EINVAL, field,
                            "\"%s\": must be a folder, file:///path or s3://bucket/prefix", out_uri);
    const char *dir = local ? local : staging;
    rm_err e = {0};
    int rc = rm_model_export(m, host_params, dir, dtype, &e);
    if (rc)
        return rm_err_field(err, rc, field, "%s", e.msg);
    char wpath[4200], cpath[4200];
    rm_sfmt(wpath, sizeof wpath, "%s/%s", dir, RM_EXPORT_WEIGHTS);
    rm_sfmt(cpath, sizeof cpath, "%s/%s", dir, RM_EXPORT_CONFIG);
    rm_sha256_ctx c;
    uint8_t d[32];
    rm_sha256_init(&c);
    if ((rc = rm_sha256_file(&c, wpath, &e)) != RM_OK)
        return rm_err_field(err, rc, field, "%s", e.msg);
    rm_sha256_final(&c, d);
    rm_sha256_hex(d, res->sha256);
    FILE *f = fopen(wpath, "rb");
    if (f && fseek(f, 0, SEEK_END) == 0)
        res->bytes = (uint64_t)ftell(f);
    if (f)
        fclose(f);
    if (local) {
        rm_sfmt(res->uri, sizeof res->uri, "%s", wpath);
        return RM_OK;
    }
    /* s3://bucket/prefix[/]: the two files under prefix/ */
    size_t ul = strlen(out_uri);
    const char *sep = out_uri[ul - 1] == '/' ? "" : "/";
    char wurl[RM_TJ_URI_MAX + 64], curl_[RM_TJ_URI_MAX + 64];
    rm_sfmt(wurl, sizeof wurl, "%s%s%s", out_uri, sep, RM_EXPORT_WEIGHTS);
    rm_sfmt(curl_, sizeof curl_, "%s%s%s", out_uri, sep, RM_EXPORT_CONFIG);
    rm_s3_creds cr; /* the AWS_* variables (spec.training.data.secretRef or the environment) */
    rm_fetch_s3_from_env(&cr);
    rm_fetch_opts o = {.field = field,
                       .s3 = &cr,
                       .multipart_threshold = env_bytes(RM_ENV_UPLOAD_MULTIPART_BYTES),
                       .part_bytes = env_bytes(RM_ENV_UPLOAD_PART_BYTES)};
    rm_upload_stats st = {0};
    /* the weights first, config.json last: a folder with a config.json is whole */
    RM_CHECK(rm_upload_file(wpath, wurl, &o, &st, err));
    RM_CHECK(rm_upload_file(cpath, curl_, &o, NULL, err));
    rm_sfmt(res->uri, sizeof res->uri, "%s", wurl);
    res->parts = st.parts;
    return RM_OK;
}

void rm_model_output_staging_remove(const char *staging)
{
    if (!staging || !staging[0])
        return;
    char p[4200];
    rm_sfmt(p, sizeof p, "%s/%s", staging, RM_EXPORT_WEIGHTS);
    unlink(p);
    rm_sfmt(p, sizeof p, "%s/%s", staging, RM_EXPORT_CONFIG);
    unlink(p);
    rmdir(staging);
}
