/* The one CUnit runner. Every tests/unit/test_<name>.c defines `void rm_suite_<name>(void)` which
 * adds its suite(s) with CU_add_suite/CU_add_test; the Makefile generates suites.h from the file
 * names, so adding a test file needs no edit here.
 * Usage: unit-tests [SUITE_FILTER...]  — runs only suites whose name contains one of the filters;
 *        unit-tests --exact SUITE...    — runs only the suites named exactly (tests/run-unit.sh shards so);
 *        unit-tests --list              — prints every suite's name, one a line. */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>

#define RM_SUITE(n) extern void rm_suite_##n(void);
#include "suites.h"
#undef RM_SUITE

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
#define RM_SUITE(n) rm_suite_##n();
#include "suites.h"
#undef RM_SUITE
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext)
            printf("%s\n", s->pName);
        CU_cleanup_registry();
        return 0;
    }
    int exact = argc > 1 && strcmp(argv[1], "--exact") == 0;
    if (argc > 1) {
        /* deactivate suites that match no filter */
        CU_pSuite s = CU_get_registry()->pSuite;
        for (; s; s = s->pNext) {
            int keep = 0;
            for (int i = 1 + exact; i < argc; i++)
                if (exact ? strcmp(s->pName, argv[i]) == 0 : strstr(s->pName, argv[i]) != NULL)
                    keep = 1;
            if (!keep)
                CU_set_suite_active(s, CU_FALSE);
        }
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures();
    unsigned tests_failed = CU_get_number_of_tests_failed();
    unsigned run = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    printf("unit: %u passed, %u failed\n", run - tests_failed, tests_failed);
    return (failed || tests_failed) ? 1 : 0;
}
