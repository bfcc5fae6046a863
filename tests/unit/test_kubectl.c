/* Tests for the kubectl plugin's argument parsing (operator/kubectl.h): commands, kubectl's
 * flags in every spelling kubectl accepts, logs' flags, and an error naming the flag or argument
 * for every bad input. */
#include <string.h>
#include "operator/kubectl.h"
#include "tests/unit/testutil.h"

#define MAXA 16

/* Split a command line on spaces ("" = no arguments) and parse it. */
static int parse(const char *line, rm_kubectl_args *a, rm_err *e)
{
    static char buf[512];
    static char *argv[MAXA];
    snprintf(buf, sizeof buf, "%s", line);
    int argc = 0;
    argv[argc++] = (char *)"kubectl-ringmaster";
    for (char *t = strtok(buf, " "); t && argc < MAXA - 1; t = strtok(NULL, " "))
        argv[argc++] = t;
    argv[argc] = NULL;
    memset(e, 0, sizeof *e);
    return rm_kubectl_parse(argc, argv, a, e);
}

static void test_accepted(void)
{
    rm_kubectl_args a;
    rm_err e;
    CU_ASSERT_EQUAL(parse("", &a, &e), RM_OK);
    CU_ASSERT_EQUAL(a.cmd, RM_KC_HELP);
    CU_ASSERT_EQUAL(parse("logs j1", &a, &e), RM_OK);
    CU_ASSERT_EQUAL(a.cmd, RM_KC_LOGS);
    CU_ASSERT_STRING_EQUAL(a.job, "j1");
    CU_ASSERT_FALSE(a.follow);
    CU_ASSERT_EQUAL(a.rank, -1);
    CU_ASSERT_EQUAL(a.tail, -1);
    CU_ASSERT_EQUAL(a.role, RM_KC_ROLE_ANY);
    /* kubectl's flags before or after the command, each spelling */
    CU_ASSERT_EQUAL(parse("-n ml --kubeconfig /k logs -f --rank 3 --tail=20 j1 --context=c2", &a, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(a.ns, "ml");
    CU_ASSERT_STRING_EQUAL(a.kubeconfig, "/k");
    CU_ASSERT_STRING_EQUAL(a.context, "c2");
    CU_ASSERT_TRUE(a.follow);
    CU_ASSERT_EQUAL(a.rank, 3);
    CU_ASSERT_EQUAL(a.tail, 20);
    CU_ASSERT_EQUAL(parse("logs --namespace=team-a --role ps --follow j", &a, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(a.ns, "team-a");
    CU_ASSERT_EQUAL(a.role, RM_KC_ROLE_PS);
    CU_ASSERT_EQUAL(parse("status -nprod j", &a, &e), RM_OK);
    CU_ASSERT_EQUAL(a.cmd, RM_KC_STATUS);
    CU_ASSERT_STRING_EQUAL(a.ns, "prod");
    static const struct {
        const char *line;
        rm_kubectl_cmd cmd;
    } cmds[] = {{"suspend j", RM_KC_SUSPEND},          {"resume j", RM_KC_RESUME},
                {"restart j", RM_KC_RESTART},          {"runtimes", RM_KC_RUNTIMES},
                {"completion bash", RM_KC_COMPLETION}, {"help", RM_KC_HELP}};
    for (size_t i = 0; i < RM_ARRAY_LEN(cmds); i++) {
        CU_ASSERT_EQUAL(parse(cmds[i].line, &a, &e), RM_OK);
        CU_ASSERT_EQUAL(a.cmd, cmds[i].cmd);
    }
    /* --help with any command (even without its argument) is that command's usage */
    CU_ASSERT_EQUAL(parse("logs --help", &a, &e), RM_OK);
    CU_ASSERT_TRUE(a.help);
    CU_ASSERT_EQUAL(a.cmd, RM_KC_LOGS);
    /* __complete takes every later word as typed, flags included */
    CU_ASSERT_EQUAL(parse("__complete logs --role p", &a, &e), RM_OK);
    CU_ASSERT_EQUAL(a.cmd, RM_KC_COMPLETE);
    CU_ASSERT_EQUAL(a.nwords, 3);
    CU_ASSERT_STRING_EQUAL(a.words[1], "--role");
}

static void test_refused(void)
{
    static const struct {
        const char *line, *msg;
    } bad[] = {
        {"logs", "logs: a TrainingJob name is required"},
        {"status a b", "status: one TrainingJob at a time (got \"a\" and \"b\")"},
        {"logs j --rank x", "--rank: must be an integer >= 0 (got \"x\")"},
        {"logs j --rank -1", "--rank: must be an integer >= 0 (got \"-1\")"},
        {"logs j --tail -5x", "--tail: must be an integer >= 0"},
        {"logs j --role server", "--role: worker or ps (got \"server\")"},
        {"logs j --rank 1 --role ps", "--rank: selects a worker"},
        {"status j -f", "status: -f, --rank, --role and --tail are logs flags"},
        {"logs j --namespace", "--namespace: a value is required"},
        {"logs j --namespace=", "--namespace: must not be empty"},
        {"logs j --bogus", "unknown flag --bogus"},
        {"delete j", "unknown command \"delete\""},
        {"runtimes x", "runtimes: takes no arguments (got \"x\")"},
        {"completion zsh", "completion: the shell is required: bash"},
        {"completion", "completion: the shell is required: bash"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(bad); i++) {
        rm_kubectl_args a;
        rm_err e;
        int rc = parse(bad[i].line, &a, &e);
        CU_ASSERT_NOT_EQUAL(rc, RM_OK);
        if (!strstr(e.msg, bad[i].msg)) {
            fprintf(stderr, "\n  \"%s\": got \"%s\", want \"%s\"\n", bad[i].line, e.msg, bad[i].msg);
            CU_FAIL("message");
        }
    }
}

void rm_suite_kubectl(void);
void rm_suite_kubectl(void)
{
    static const rm_test_case cases[] = {
        {"commands_and_flags_accepted", test_accepted},
        {"bad_input_names_the_flag", test_refused},
    };
    RM_ADD_SUITE("kubectl", NULL, NULL, cases);
}
