/* test_schedule.c — the large-batch LR rule: linear scaling by global batch / 64, warmup from the
 * unscaled lr to the scaled one, cosine to 0 at the last epoch, step decay, constant, and the
 * elastic property (same epoch position, new world -> lr follows the new global batch); the step
 * form: warmupSteps, a maxSteps budget that ends the cosine, and adamw/lamb/lars taking the lr as
 * given with nanoGPT's warmup from zero. */
#include <math.h>

#include "tests/unit/testutil.h"
#include "worker/optim/schedule.h"

static rm_lr_sched mk(rm_schedule type, double warm)
{
    rm_lr_sched s = {.base_lr = 0.02,
                     .warmup_epochs = warm,
                     .epochs = 10,
                     .type = type,
                     .gamma = 0.1,
                     .step_every = 3,
                     .scaled = true};
    return s;
}

static void test_scaling_and_warmup(void)
{
    rm_lr_sched s = mk(RM_SCHED_CONSTANT, 1);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_scaled(&s, 64), 0.02, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_scaled(&s, 256), 0.08, 1e-12);  /* 4 workers x 64 */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 0.0, 256), 0.02, 1e-12); /* warmup starts unscaled */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 0.5, 256), 0.05, 1e-12); /* halfway */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 1.0, 256), 0.08, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 7.3, 256), 0.08, 1e-12);
    /* no warmup */
    rm_lr_sched n = mk(RM_SCHED_CONSTANT, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&n, 0.0, 128), 0.04, 1e-12);
}

static void test_cosine(void)
{
    rm_lr_sched s = mk(RM_SCHED_COSINE, 1);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 1.0, 64), 0.02, 1e-12); /* peak after warmup */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 5.5, 64), 0.01, 1e-12); /* midpoint: half */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 10.0, 64), 0.0, 1e-12); /* end: 0 */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 3.25, 64), 0.02 * 0.5 * (1 + cos(M_PI * 0.25)), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 12.0, 64), 0.0, 1e-12); /* clamped */
}

static void test_step(void)
{
    rm_lr_sched s = mk(RM_SCHED_STEP, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 2.9, 64), 0.02, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 3.0, 64), 0.002, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 6.5, 128), 0.04 * 0.01, 1e-12);
}

static void test_elastic(void)
{
    rm_lr_sched s = mk(RM_SCHED_COSINE, 1);
    double e = 4.0;
    double l4 = rm_lr_at(&s, e, 4 * 64), l2 = rm_lr_at(&s, e, 2 * 64);
    CU_ASSERT_DOUBLE_EQUAL(l4, 2 * l2, 1e-12); /* world 4 -> 2: lr halves, position kept */
}

static void test_from_spec(void)
{
    rm_training_spec t = {0};
    t.optimizer.lr = 0.1;
    t.warmup_epochs = 2;
    t.epochs = 5;
    t.schedule = RM_SCHED_STEP;
    rm_lr_sched s;
    rm_lr_sched_from_spec(&s, &t);
    CU_ASSERT_DOUBLE_EQUAL(s.gamma, 0.1, 1e-12); /* defaults for unset step fields */
    CU_ASSERT_EQUAL(s.step_every, 3);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at(&s, 1.0, 64), 0.1, 1e-12);
}

/* adamw: lr as given (no scaling), warmup lr (step + 1) / (W + 1) over W = 10 steps, then cosine to
 * 0 at maxSteps 110 (the epochs would last 10 x 100 steps: maxSteps ends the job first). */
static void test_warmup_steps_cosine_unscaled(void)
{
    rm_training_spec t = {0};
    t.optimizer.type = RM_OPT_ADAMW;
    t.optimizer.lr = 1e-3;
    t.epochs = 10;
    t.warmup_epochs = 1; /* replaced by warmupSteps */
    t.warmup_steps = 10;
    t.max_steps = 110;
    t.schedule = RM_SCHED_COSINE;
    rm_lr_sched s;
    rm_lr_sched_from_spec(&s, &t);
    CU_ASSERT_FALSE(s.scaled);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_scaled(&s, 1024), 1e-3, 1e-15); /* no linear scaling */
    const int64_t spe = 100;
    CU_ASSERT(rm_lr_step_based(&s, spe));
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 0, spe, 1024), 1e-3 / 11, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 9, spe, 1024), 1e-3 * 10 / 11, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 10, spe, 1024), 1e-3, 1e-15); /* peak */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 60, spe, 1024), 5e-4, 1e-15); /* halfway */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 35, spe, 1024), 1e-3 * 0.5 * (1 + cos(M_PI * 0.25)), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 110, spe, 1024), 0.0, 1e-15); /* the last step's end */
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 500, spe, 1024), 0.0, 1e-15); /* clamped */
    /* the epochs end first (maxSteps 5000): the cosine spans 10 x 100 steps */
    t.max_steps = 5000;
    rm_lr_sched_from_spec(&s, &t);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 505, spe, 1024), 5e-4, 1e-15);
    /* warmupEpochs in steps when warmupSteps is unset: 1 epoch = 100 steps */
    t.warmup_steps = 0;
    rm_lr_sched_from_spec(&s, &t);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0.5, 50, spe, 1024), 1e-3 * 51 / 101, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 5.5, 550, spe, 1024), 5e-4, 1e-15);
}

/* sgd (scaled): warmupSteps goes from the unscaled lr to the scaled one; without a step budget the
 * epoch form runs, unchanged. */
static void test_warmup_steps_scaled(void)
{
    rm_training_spec t = {0};
    t.optimizer.type = RM_OPT_SGD;
    t.optimizer.lr = 0.02;
    t.epochs = 10;
    t.warmup_epochs = 1;
    t.schedule = RM_SCHED_COSINE;
    rm_lr_sched s;
    rm_lr_sched_from_spec(&s, &t);
    CU_ASSERT(s.scaled);
    const int64_t spe = 100;
    CU_ASSERT_FALSE(rm_lr_step_based(&s, spe));
    for (int64_t k = 0; k < 1000; k += 37)
        CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, k / 100.0, k, spe, 256), rm_lr_at(&s, k / 100.0, 256), 0);
    t.warmup_steps = 10;
    rm_lr_sched_from_spec(&s, &t);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 0, spe, 256), 0.02, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 5, spe, 256), 0.05, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 10, spe, 256), 0.08, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 0, 505, spe, 256), 0.04, 1e-15); /* cosine over 990 steps */
    /* a maxSteps that ends the job early makes the step form, the cosine spans it */
    t.warmup_steps = 0;
    t.warmup_epochs = 0;
    t.max_steps = 200;
    rm_lr_sched_from_spec(&s, &t);
    CU_ASSERT(rm_lr_step_based(&s, spe));
    CU_ASSERT_DOUBLE_EQUAL(rm_lr_at_step(&s, 1.0, 100, spe, 64), 0.01, 1e-15);
}

void rm_suite_schedule(void)
{
    static const rm_test_case cases[] = {
        {"scaling_warmup", test_scaling_and_warmup},
        {"cosine", test_cosine},
        {"step", test_step},
        {"elastic", test_elastic},
        {"from_spec", test_from_spec},
        {"warmup_steps_cosine_unscaled", test_warmup_steps_cosine_unscaled},
        {"warmup_steps_scaled", test_warmup_steps_scaled},
    };
    RM_ADD_SUITE("schedule", NULL, NULL, cases);
}
