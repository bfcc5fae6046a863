/* export_cmd.c — see export_cmd.h. */
#include "worker/export_cmd.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/datasets.h"
#include "common/log.h"
#include "common/trainingjob.h"
#include "worker/model/export.h"
#include "worker/model/output.h"
#include "worker/sample.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ringmaster export --checkpoint DIR --out DIR|s3://bucket/prefix/ [--dtype float32|bfloat16]\n"
        "  --checkpoint DIR  a job's checkpoint folder: its newest checkpoint is exported\n"
        "                    (plain, sharded or pipeline-staged: whatever its manifest lists)\n"
        "  --out DIR|URI     where model.safetensors and config.json go: a folder, file:///path, or\n"
        "                    s3://bucket/prefix/ (credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,\n"
        "                    AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL)\n"
        "  --dtype T         float32 (default) or bfloat16\n"
        "prints {\"uri\",\"sha256\",\"bytes\",\"step\"} of the written model.safetensors\n");
}

int rm_worker_export_main(int argc, char **argv)
{
    enum { O_CK = 1, O_OUT, O_DTYPE, O_HELP };
    static const struct option opts[] = {{"checkpoint", required_argument, 0, O_CK},
                                         {"out", required_argument, 0, O_OUT},
                                         {"dtype", required_argument, 0, O_DTYPE},
                                         {"help", no_argument, 0, O_HELP},
                                         {0, 0, 0, 0}};
    const char *ck = NULL, *out = NULL;
    int dtype = RM_DTYPE_FLOAT32;
    optind = 1;
    opterr = 0;
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case O_CK:
            ck = optarg;
            break;
        case O_OUT:
            out = optarg;
            break;
        case O_DTYPE:
            if ((dtype = rm_enum_index(rm_output_dtype_names, optarg)) < 0) {
                fprintf(stderr, "ringmaster export: --dtype: must be float32 or bfloat16 (got \"%s\")\n",
                        optarg);
                return 2;
            }
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "ringmaster export: %s: unknown flag or missing value\n",
                    optind > 0 && optind <= argc ? argv[optind - 1] : "?");
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ringmaster export: %s: unexpected argument\n", argv[optind]);
        return 2;
    }
    if (!ck || !*ck || !out || !*out) {
        fprintf(stderr, "ringmaster export: %s: required\n", !ck || !*ck ? "--checkpoint" : "--out");
        usage(stderr);
        return 2;
    }
    if (!rm_uri_local(out) && strncmp(out, "s3://", 5) != 0) {
        fprintf(
            stderr,
            "ringmaster export: --out: must be a folder, file:///path or s3://bucket/prefix (got \"%s\")\n",
            out);
        return 2;
    }
    rm_model m;
    memset(&m, 0, sizeof m);
    rm_err e = {0};
    int64_t step = 0;
    int rc = rm_ckpt_model_load("export", ck, "--checkpoint", &m, &step, &e);
    if (rc == RM_ENOTFOUND && !e.msg[0])
        rm_err_field(&e, rc, "--checkpoint", "%s holds no checkpoint manifest (index-*.json)", ck);
    if (rc) {
        fprintf(stderr, "ringmaster export: %s\n", e.msg);
        rm_model_free(&m);
        return rc == RM_EINVAL ? 2 : 1;
    }
    char tmp[64] = "";
    if (strncmp(out, "s3://", 5) == 0) {
        rm_sfmt(tmp, sizeof tmp, "/tmp/ringmaster-export-XXXXXX");
        if (!mkdtemp(tmp)) {
            fprintf(stderr, "ringmaster export: --out: cannot make a staging folder in /tmp\n");
            rm_model_free(&m);
            return 1;
        }
    }
    rm_model_output_result res;
    rc = rm_model_write_out(&m, m.params, out, tmp, (rm_output_dtype)dtype, "--out", &res, &e);
    rm_model_output_staging_remove(tmp);
    rm_model_free(&m);
    if (rc) {
        fprintf(stderr, "ringmaster export: %s\n", e.msg);
        return 1;
    }
    rm_info("model exported uri=%s sha256=%s bytes=%llu dtype=%s step=%lld parts=%d", res.uri, res.sha256,
            (unsigned long long)res.bytes, rm_output_dtype_names[dtype], (long long)step, res.parts);
    printf("{\"uri\":\"%s\",\"sha256\":\"%s\",\"bytes\":%llu,\"step\":%lld}\n", res.uri, res.sha256,
           (unsigned long long)res.bytes, (long long)step);
    return 0;
}
