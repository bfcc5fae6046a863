/* test_optim.c — the optimizer dispatcher over the flat buffer: SGD momentum + weight decay,
 * Adam's bias correction advancing per step (t), Adagrad accumulation, AdamW's decoupled decay on
 * 2-D tensors only, LAMB's and LARS's trust ratios on two tensors, the same update cut into
 * pieces and slots (how ZeRO shards run it), clipping's scale and the slotted global norm, against
 * hand-computed values; state buffers count and bad specs. */
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

/* Two tensors: a 2-D weight [0, 4) and a 1-D bias [4, 6). */
static const rm_optim_seg k_segs[] = {{.off = 0, .len = 4, .decay = true},
                                      {.off = 4, .len = 2, .decay = false}};

static void test_adamw_decay_2d_only(void)
{
    rm_err e = {0};
    rm_optimizer_spec s = {
        .type = RM_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.5};
    rm_optim o;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 6, &e), RM_OK);
    CU_ASSERT_EQUAL(o.nstate, 2);
    CU_ASSERT_EQUAL_FATAL(rm_optim_set_tensors(&o, k_segs, 2, &e), RM_OK);
    float w[6] = {1, 1, 1, 1, 1, 1}, g[6] = {0, 0, 2, 0, 0, -2};
    rm_optim_step(&o, w, g, 0.1f);
    /* weight: w * (1 - lr wd) = 0.95, minus lr * sign(g) where g != 0 (m^/sqrt(v^) = sign) */
    CU_ASSERT_DOUBLE_EQUAL(w[0], 0.95, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[2], 0.95 - 0.1, 1e-6);
    /* bias: no decay; the Adam step only */
    CU_ASSERT_DOUBLE_EQUAL(w[4], 1.0, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(w[5], 1.1, 1e-6);
    /* the decay is not in the gradient: Adam's moments saw g only */
    CU_ASSERT_DOUBLE_EQUAL(o.state[0][0], 0.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(o.state[0][2], 0.2, 1e-7);
    /* the same update in pieces that cut across the tensors gives the same bits */
    rm_optim p;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&p, rm_kernels_cpu(), &s, 6, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_optim_set_tensors(&p, k_segs, 2, &e), RM_OK);
    float w2[6] = {1, 1, 1, 1, 1, 1};
    rm_optim_tick(&p);
    float *st0[2] = {p.state[0], p.state[1]}, *st1[2] = {p.state[0] + 3, p.state[1] + 3};
    rm_optim_update_range(&p, w2, g, st0, 3, 0, 0.1f);
    rm_optim_update_range(&p, w2 + 3, g + 3, st1, 3, 3, 0.1f);
    CU_ASSERT_EQUAL(memcmp(w, w2, sizeof w), 0);
    /* without a tensor list everything is decayed */
    rm_optim q;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&q, rm_kernels_cpu(), &s, 6, &e), RM_OK);
    float w3[6] = {1, 1, 1, 1, 1, 1}, z[6] = {0};
    rm_optim_step(&q, w3, z, 0.1f);
    CU_ASSERT_DOUBLE_EQUAL(w3[5], 0.95, 1e-6);
    rm_optim_free(&o);
    rm_optim_free(&p);
    rm_optim_free(&q);
}

/* LAMB, first step (bias-corrected m^ = g, v^ = g^2, so r = sign(g) + wd w): the weight [3, 4]
 * with g [1, 1] has r [1, 1], trust ||w|| / ||r|| = 5 / sqrt(2); the bias is not adapted. */
static void test_lamb_trust_two_tensors(void)
{
    static const rm_optim_seg segs[] = {{.off = 0, .len = 2, .decay = true},
                                        {.off = 2, .len = 1, .decay = false}};
    rm_err e = {0};
    rm_optimizer_spec s = {.type = RM_OPT_LAMB, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-9};
    rm_optim o;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 3, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_optim_set_tensors(&o, segs, 2, &e), RM_OK);
    float w[3] = {3, 4, 1}, g[3] = {1, 1, 2};
    rm_optim_step(&o, w, g, 0.1f);
    double tr = 5.0 / sqrt(2.0);
    /* fp32 moments: (1 - beta2) in float is 1e-3 to 1.3e-5 relative, so |r| is 1 to ~6e-6 */
    CU_ASSERT_DOUBLE_EQUAL(rm_optim_trust(&o, 0), tr, 1e-4);
    CU_ASSERT_DOUBLE_EQUAL(rm_optim_trust(&o, 1), 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 3 - 0.1 * tr, 2e-5);
    CU_ASSERT_DOUBLE_EQUAL(w[1], 4 - 0.1 * tr, 2e-5);
    CU_ASSERT_DOUBLE_EQUAL(w[2], 0.9, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(rm_lamb_trust(0, 1), 1.0, 0); /* a zero norm: ratio 1 */
    CU_ASSERT_DOUBLE_EQUAL(rm_lamb_trust(2, 0), 1.0, 0);
    rm_optim_free(&o);
}

/* LARS: the weight [3, 4] with g [0.6, 0.8] (||g|| = 1) and wd 0.01 has trust
 * eta ||w|| / (||g|| + wd ||w||) = 0.001 * 5 / 1.05; v = lr trust (g + wd w); w -= v. The bias is
 * plain momentum SGD without decay. */
static void test_lars_trust_two_tensors(void)
{
    static const rm_optim_seg segs[] = {{.off = 0, .len = 2, .decay = true},
                                        {.off = 2, .len = 1, .decay = false}};
    rm_err e = {0};
    rm_optimizer_spec s = {.type = RM_OPT_LARS, .momentum = 0.9, .weight_decay = 0.01};
    rm_optim o;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 3, &e), RM_OK);
    CU_ASSERT_EQUAL(o.nstate, 1);
    CU_ASSERT_EQUAL_FATAL(rm_optim_set_tensors(&o, segs, 2, &e), RM_OK);
    float w[3] = {3, 4, 1}, g[3] = {0.6f, 0.8f, 2};
    rm_optim_step(&o, w, g, 0.1f);
    double tr = 0.001 * 5 / 1.05;
    CU_ASSERT_DOUBLE_EQUAL(rm_optim_trust(&o, 0), tr, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 3 - 0.1 * tr * (0.6 + 0.03), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[1], 4 - 0.1 * tr * (0.8 + 0.04), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[2], 0.8, 1e-6);
    /* second step: the momentum carries v */
    float v0 = o.state[0][2];
    rm_optim_step(&o, w, g, 0.1f);
    CU_ASSERT_DOUBLE_EQUAL(o.state[0][2], 0.9 * v0 + 0.2, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(rm_lars_trust(0, 1, 0.01), 1.0, 0);
    rm_optim_free(&o);
}

/* A tensor split across two "ranks": each piece's norms in its own slot, the slots added in order,
 * gives what one whole step gives (how sharding optimizer matches none). */
static void test_layerwise_pieces_match_whole(void)
{
    const rm_opt_type types[] = {RM_OPT_LAMB, RM_OPT_LARS};
    for (int ti = 0; ti < 2; ti++) {
        rm_err e = {0};
        rm_optimizer_spec s = {.type = types[ti],
                               .beta1 = 0.9,
                               .beta2 = 0.999,
                               .eps = 1e-6,
                               .momentum = 0.9,
                               .weight_decay = 0.01};
        rm_optim a, b;
        CU_ASSERT_EQUAL_FATAL(rm_optim_init(&a, rm_kernels_cpu(), &s, 6, &e), RM_OK);
        CU_ASSERT_EQUAL_FATAL(rm_optim_init(&b, rm_kernels_cpu(), &s, 6, &e), RM_OK);
        CU_ASSERT_EQUAL_FATAL(rm_optim_set_tensors(&a, k_segs, 2, &e), RM_OK);
        CU_ASSERT_EQUAL_FATAL(rm_optim_set_tensors(&b, k_segs, 2, &e), RM_OK);
        CU_ASSERT_EQUAL_FATAL(rm_optim_reserve(&a, 2, 2, &e), RM_OK);
        float wa[6] = {0.5f, -1, 2, 0.25f, 1, -1}, wb[6], g[6] = {0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.6f};
        memcpy(wb, wa, sizeof wa);
        for (int step = 0; step < 3; step++) {
            /* a: pieces [0, 3) in slot 0 and [3, 6) in slot 1 */
            rm_optim_tick(&a);
            CU_ASSERT_EQUAL_FATAL(rm_optim_norms_begin(&a, 2, &e), RM_OK);
            float *s0[2] = {a.state[0], a.nstate > 1 ? a.state[1] : NULL};
            float *s1[2] = {a.state[0] + 3, a.nstate > 1 ? a.state[1] + 3 : NULL};
            rm_optim_norms_range(&a, 0, wa, g, s0, 3, 0);
            rm_optim_norms_range(&a, 1, wa + 3, g + 3, s1, 3, 3);
            CU_ASSERT_EQUAL_FATAL(rm_optim_norms_finish(&a, &e), RM_OK);
            rm_optim_update_range(&a, wa, g, s0, 3, 0, 0.05f);
            rm_optim_update_range(&a, wa + 3, g + 3, s1, 3, 3, 0.05f);
            rm_optim_step(&b, wb, g, 0.05f);
        }
        for (int i = 0; i < 6; i++)
            CU_ASSERT_DOUBLE_EQUAL(wa[i], wb[i], 1e-6);
        CU_ASSERT(rm_optim_trust(&a, 0) != 1.0);
        rm_optim_free(&a);
        rm_optim_free(&b);
    }
}

/* torch.nn.utils.clip_grad_norm_: scale = min(1, clip / (norm + 1e-6)); the norm summed in slots. */
static void test_clip(void)
{
    CU_ASSERT_DOUBLE_EQUAL(rm_clip_scale(5.0, 1.0), 1.0 / (5.0 + 1e-6), 1e-7); /* a float */
    CU_ASSERT_DOUBLE_EQUAL(rm_clip_scale(0.5, 1.0), 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_clip_scale(5.0, 0.0), 1.0, 0); /* off */
    rm_err e = {0};
    rm_optimizer_spec s = {.type = RM_OPT_SGD};
    rm_optim o;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 2, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_optim_reserve(&o, 1, 3, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_optim_gnorm_begin(&o, 4, &e), RM_EINVAL); /* more slots than reserved */
    CU_ASSERT_EQUAL_FATAL(rm_optim_gnorm_begin(&o, 3, &e), RM_OK);
    float g[3] = {3, 4, 12};
    rm_optim_gnorm_add(&o, 0, g, 1);
    rm_optim_gnorm_add(&o, 2, g + 1, 2); /* slot 1 stays 0 */
    size_t c;
    CU_ASSERT_PTR_NOT_NULL(rm_optim_gnorm_buf(&o, &c));
    CU_ASSERT_EQUAL(c, 3);
    double norm = 0;
    CU_ASSERT_EQUAL_FATAL(rm_optim_gnorm_finish(&o, &norm, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(norm, 13.0, 1e-6);
    rm_optim_free(&o);
}

static void test_bad(void)
{
    rm_err e = {0};
    rm_optimizer_spec s = {.type = (rm_opt_type)(RM_OPT__LAST + 1)};
    rm_optim o;
    CU_ASSERT_EQUAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 4, &e), RM_EINVAL);
    s.type = RM_OPT_SGD;
    CU_ASSERT_EQUAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 0, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(rm_optim_name(RM_OPT_ADAGRAD), "adagrad");
    CU_ASSERT_STRING_EQUAL(rm_optim_name(RM_OPT_ADAMW), "adamw");
    CU_ASSERT_EQUAL(RM_OPT_LAMB, 4); /* stored in checkpoints: the values never move */
    CU_ASSERT_EQUAL(RM_OPT_LARS, 5);
    CU_ASSERT_EQUAL(RM_OPT_ADAMW, 6);
    /* overlapping tensors are refused */
    static const rm_optim_seg bad[] = {{.off = 0, .len = 4, .decay = true}, {.off = 3, .len = 2}};
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, rm_kernels_cpu(), &s, 4, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_optim_set_tensors(&o, bad, 2, &e), RM_EINVAL);
    rm_optim_free(&o);
}

void rm_suite_optim(void)
{
    static const rm_test_case cases[] = {
        {"sgd_momentum", test_sgd},
        {"adam_bias_correction", test_adam_bias_correction},
        {"adagrad_weight_decay", test_adagrad_wd},
        {"adamw_decay_2d_only", test_adamw_decay_2d_only},
        {"lamb_trust_two_tensors", test_lamb_trust_two_tensors},
        {"lars_trust_two_tensors", test_lars_trust_two_tensors},
        {"layerwise_pieces_match_whole", test_layerwise_pieces_match_whole},
        {"clip_scale_and_norm", test_clip},
        {"bad_spec", test_bad},
    };
    RM_ADD_SUITE("optim", NULL, NULL, cases);
}
