/* test_optim.c — the optimizer dispatcher over the flat buffer: SGD momentum + weight decay,
 * Adam's bias correction advancing per step (t), Adagrad accumulation, against hand-computed
 * values; state buffers count and bad specs. */
#include <math.h>
#include <string.h>

#include "tests/unit/testutil.h"
#include "worker/optim/optim.h"

static void test_sgd(void)
{
    rm_err e = {0};
    rm_optimizer_spec s = {.type = RM_OPT_SGD, .momentum = 0.5, .weight_decay = 0.0};
    rm_optim o;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 3, &e), RM_OK);
    CU_ASSERT_EQUAL(o.nstate, 1);
    float w[3] = {1, 2, 3}, g[3] = {1, -1, 0};
    rm_optim_step(&o, w, g, 0.1f); /* v = g; w -= 0.1 g */
    CU_ASSERT_DOUBLE_EQUAL(w[0], 0.9, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[1], 2.1, 1e-6);
    rm_optim_step(&o, w, g, 0.1f); /* v = 0.5 g + g = 1.5 g; w -= 0.15 g */
    CU_ASSERT_DOUBLE_EQUAL(w[0], 0.75, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[2], 3.0, 1e-6);
    CU_ASSERT_EQUAL(o.t, 2);
    rm_optim_free(&o);
    rm_optim_free(&o);
}

static void test_adam_bias_correction(void)
{
    rm_err e = {0};
    rm_optimizer_spec s = {.type = RM_OPT_ADAM, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    rm_optim o;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 1, &e), RM_OK);
    CU_ASSERT_EQUAL(o.nstate, 2);
    float w = 0, g = 2;
    /* constant gradient: bias-corrected m/sqrt(v) = 1 every step -> w = -lr * t */
    for (int t = 1; t <= 5; t++) {
        rm_optim_step(&o, &w, &g, 0.01f);
        CU_ASSERT_DOUBLE_EQUAL(w, -0.01 * t, 1e-5);
    }
    rm_optim_free(&o);
}

static void test_adagrad_wd(void)
{
    rm_err e = {0};
    rm_optimizer_spec s = {.type = RM_OPT_ADAGRAD, .eps = 1e-10, .weight_decay = 0.5};
    rm_optim o;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 1, &e), RM_OK);
    float w = 2, g = 0; /* g' = g + 0.5 w = 1; s = 1; w -= 0.1 * 1 / 1 */
    rm_optim_step(&o, &w, &g, 0.1f);
    CU_ASSERT_DOUBLE_EQUAL(w, 1.9, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(o.state[0][0], 1.0, 1e-6);
    rm_optim_free(&o);
}

static void test_bad(void)
{
    rm_err e = {0};
    rm_optimizer_spec s = {.type = (rm_opt_type)7};
    rm_optim o;
    CU_ASSERT_EQUAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 4, &e), RM_EINVAL);
    s.type = RM_OPT_SGD;
    CU_ASSERT_EQUAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 0, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(rm_optim_name(RM_OPT_ADAGRAD), "adagrad");
}

void rm_suite_optim(void)
{
    static const rm_test_case cases[] = {
        {"sgd_momentum", test_sgd},
        {"adam_bias_correction", test_adam_bias_correction},
        {"adagrad_weight_decay", test_adagrad_wd},
        {"bad_spec", test_bad},
    };
    RM_ADD_SUITE("optim", NULL, NULL, cases);
}
