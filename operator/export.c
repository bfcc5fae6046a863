/* export.c — `ringmaster export` (export.h): exec `ringmaster-worker export ARGS...`. */
#include "operator/export.h"
#include "operator/sample.h"

int rm_export_main(int argc, char **argv)
{
    return rm_worker_exec("export", argc, argv);
}
