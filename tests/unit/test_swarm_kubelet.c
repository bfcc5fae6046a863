/* Tests for the swarm's kubelet mode (worker/swarm/swarm.h, rm_swarm_kubelet_run) against the real
 * rendezvous service in this process: lines in on one pipe as kubesim writes them, exit lines out
 * on another. Four workers of a job form a round, re-join when the round is restarted (as the
 * operator's RESTART_GROUP does), run the job's steps and exit 0 with the result at the
 * rendezvous; kill, hang and stop are answered as a pod's process would end; a bad start line is
 * answered with exit code 2. Bounded: every wait ends after 20 s. */
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/podline.h"
#include "common/rdzv.h"
#include "tests/unit/testutil.h"
#include "worker/swarm/swarm.h"

#define TOKEN "kubelet-token-42"

typedef struct kfx {
    rm_rdzv *r;
    rm_http_server *srv;
    char url[64];
    int in[2], out[2]; /* in: the test writes in[1]; out: the test reads out[0] */
    pthread_t th;
    rm_swarm_kubelet_cfg cfg;
    rm_swarm_kubelet_stats st;
    int rc;
    rm_podline_in rd;
    char keys[32][RM_PODLINE_KEY_MAX];
    int codes[32], nexits;
} kfx;

static void *run_thread(void *arg)
{
    kfx *f = arg;
    rm_err e = {0};
    f->rc = rm_swarm_kubelet_run(&f->cfg, f->in[0], f->out[1], &f->st, &e);
    if (f->rc != RM_OK)
        fprintf(stderr, "swarm --kubelet: %s\n", e.msg);
    return NULL;
}

static kfx *kfx_start(void)
{
    kfx *f = calloc(1, sizeof *f);
    rm_err e = {0};
    if (!f || !(f->r = rm_rdzv_new()) || rm_rdzv_serve(f->r, "127.0.0.1:0", &f->srv, &e) != RM_OK ||
        pipe(f->in) != 0 || pipe(f->out) != 0) {
        fprintf(stderr, "kubelet fixture: %s\n", e.msg);
        return NULL;
    }
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d", rm_http_port(f->srv));
    rm_swarm_kubelet_cfg_default(&f->cfg);
    f->cfg.step_s = 0.02;
    f->cfg.report_s = 0.1;
    f->cfg.max = 64;
    if (pthread_create(&f->th, NULL, run_thread, f) != 0)
        return NULL;
    return f;
}

/* End of input: the run returns (its rc and stats into *rc, *st); then the rendezvous goes. */
static void kfx_stop(kfx *f, int *rc, rm_swarm_kubelet_stats *st)
{
    close(f->in[1]);
    pthread_join(f->th, NULL);
    *rc = f->rc;
    *st = f->st;
    close(f->in[0]);
    close(f->out[0]);
    close(f->out[1]);
    rm_rdzv_shutdown(f->r);
    rm_http_stop(f->srv);
    rm_rdzv_free(f->r);
    free(f);
}

static void say(kfx *f, const char *fmt, ...) RM_PRINTF(2, 3);
static void say(kfx *f, const char *fmt, ...)
{
    char line[RM_PODLINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    CU_ASSERT_FATAL(n > 0 && (size_t)n < sizeof line - 1);
    line[n++] = '\n';
    CU_ASSERT_EQUAL(write(f->in[1], line, (size_t)n), n);
}

static void start_line(kfx *f, const char *key, const char *job, int id, long long steps)
{
    say(f, "start %s url=%s job=%s token=" TOKEN " id=%d ip=127.0.9.%d steps=%lld", key, f->url, job, id,
        2 + id, steps);
}

/* The exit code of key's next exit line (waiting for it up to 20 s; the line is used up), or -1. */
static int exit_of(kfx *f, const char *key)
{
    double until = rm_mono() + 20;
    for (;;) {
        for (int i = 0; i < f->nexits; i++)
            if (!strcmp(f->keys[i], key)) {
                int code = f->codes[i];
                f->nexits--;
                memmove(f->keys[i], f->keys[i + 1], sizeof f->keys[0] * (size_t)(f->nexits - i));
                memmove(&f->codes[i], &f->codes[i + 1], sizeof f->codes[0] * (size_t)(f->nexits - i));
                return code;
            }
        struct pollfd p = {.fd = f->out[0], .events = POLLIN};
        int ms = (int)((until - rm_mono()) * 1000);
        if (ms <= 0 || poll(&p, 1, ms) <= 0)
            return -1;
        size_t room;
        char *b = rm_podline_space(&f->rd, &room);
        ssize_t n = read(f->out[0], b, room);
        if (n <= 0)
            return -1;
        rm_podline_fed(&f->rd, (size_t)n);
        char line[RM_PODLINE_MAX];
        rm_err e = {0};
        while (rm_podline_take(&f->rd, line, &e) == 1) {
            rm_podline l;
            CU_ASSERT_EQUAL_FATAL(rm_podline_parse(line, strlen(line), &l, &e), RM_OK);
            CU_ASSERT_EQUAL(l.verb, RM_PODLINE_EXIT);
            CU_ASSERT_FATAL(f->nexits < 32);
            snprintf(f->keys[f->nexits], sizeof f->keys[0], "%s", l.key);
            f->codes[f->nexits++] = l.code;
        }
    }
}

/* Wait (20 s at most) until job's round at epoch is closed with world members and one reported. */
static bool trained(kfx *f, const char *job, int epoch, int world)
{
    rm_rdzv_state *s = calloc(1, sizeof *s);
    bool ok = false;
    for (double until = rm_mono() + 20; s && !ok && rm_mono() < until; rm_sleep(0.01))
        ok = rm_rdzv_snapshot(f->r, job, s) == RM_OK && s->epoch == epoch && s->closed &&
             s->world_size == world && s->trained_epoch == epoch;
    free(s);
    return ok;
}

static void test_job_runs_its_steps_and_exits_0(void)
{
    kfx *f = kfx_start();
    CU_ASSERT_FATAL(f != NULL);
    const char *job = "default/four";
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_job_set(f->r, job, TOKEN, 4, 4, 0), RM_OK);
    char key[4][32];
    for (int i = 0; i < 4; i++) {
        snprintf(key[i], sizeof key[i], "uid-%d/worker", i);
        start_line(f, key[i], job, i, 150); /* 3 s of steps: room for the restart below */
    }
    CU_ASSERT_FATAL(trained(f, job, 1, 4));
    /* the operator's RESTART_GROUP: reports answer "rejoin", the four form epoch 2 */
    int ne = 0;
    CU_ASSERT_EQUAL(rm_rdzv_restart(f->r, job, 1, &ne), RM_OK);
    CU_ASSERT_EQUAL(ne, 2);
    CU_ASSERT(trained(f, job, 2, 4));
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(exit_of(f, key[i]), 0);
    rm_rdzv_state *s = calloc(1, sizeof *s);
    CU_ASSERT_FATAL(s != NULL);
    CU_ASSERT_EQUAL(rm_rdzv_snapshot(f->r, job, s), RM_OK);
    CU_ASSERT(s->have_result);
    CU_ASSERT_EQUAL(s->steps, 150); /* rank 0's result: the job's steps, across the re-join */
    CU_ASSERT_EQUAL(s->nmembers, 4);
    for (int i = 0; i < s->nmembers; i++) {
        CU_ASSERT(s->members[i].done);
        CU_ASSERT_EQUAL(s->members[i].step, 150);
    }
    free(s);
    int rc;
    rm_swarm_kubelet_stats st;
    kfx_stop(f, &rc, &st);
    CU_ASSERT_EQUAL(rc, RM_OK);
    CU_ASSERT_EQUAL(st.started, 4);
    CU_ASSERT_EQUAL(st.exited, 4);
    CU_ASSERT_EQUAL(st.errors, 0);
    CU_ASSERT(st.requests >= 4 * 6); /* join, kv, report, re-join, kv, report at least */
}

static void test_faults_and_bad_lines_are_answered(void)
{
    kfx *f = kfx_start();
    CU_ASSERT_FATAL(f != NULL);
    const char *job = "team/two";
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_job_set(f->r, job, TOKEN, 2, 2, 0), RM_OK);
    start_line(f, "b0/worker", job, 0, 1000000);
    start_line(f, "b1/worker", job, 1, 1000000);
    start_line(f, "b1/worker", job, 1, 1000000); /* a second start of a running key is ignored */
    CU_ASSERT_FATAL(trained(f, job, 1, 2));
    say(f, "kill b1/worker code=137");
    CU_ASSERT_EQUAL(exit_of(f, "b1/worker"), 137);
    say(f, "hang b0/worker");
    say(f, "stop nobody/worker"); /* unknown key: nothing to answer */
    say(f, "launch b0/worker");   /* unknown verb: logged, nothing to answer */
    /* a bad start (job without a namespace) is answered so its pod fails */
    say(f, "start bad/worker url=%s job=nons token=t id=1", f->url);
    CU_ASSERT_EQUAL(exit_of(f, "bad/worker"), 2);
    say(f, "stop b0/worker"); /* the hung worker's pod is deleted */
    CU_ASSERT_EQUAL(exit_of(f, "b0/worker"), 0);
    /* the key is free again: a restarted container starts anew */
    start_line(f, "b1/worker", job, 1, 1000000);
    say(f, "kill b1/worker code=9");
    CU_ASSERT_EQUAL(exit_of(f, "b1/worker"), 9);
    int rc;
    rm_swarm_kubelet_stats st;
    kfx_stop(f, &rc, &st);
    CU_ASSERT_EQUAL(rc, RM_OK);
    CU_ASSERT_EQUAL(st.started, 3);
    CU_ASSERT_EQUAL(st.exited, 3);
    CU_ASSERT_EQUAL(st.refused, 1);
}

static void test_bad_config_names_the_field(void)
{
    rm_swarm_kubelet_cfg c;
    rm_swarm_kubelet_cfg_default(&c);
    rm_err e = {0};
    c.steps = 0;
    CU_ASSERT_EQUAL(rm_swarm_kubelet_run(&c, -1, -1, NULL, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "steps");
    rm_swarm_kubelet_cfg_default(&c);
    c.max = RM_SWARM_MAX_COUNT + 1;
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_swarm_kubelet_run(&c, -1, -1, NULL, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "max");
    rm_swarm_kubelet_cfg_default(&c);
    c.report_s = 0;
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_swarm_kubelet_run(&c, -1, -1, NULL, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "step/report");
}

void rm_suite_swarm_kubelet(void)
{
    static const rm_test_case cases[] = {
        {"job_of_4_rejoins_runs_its_steps_and_exits_0", test_job_runs_its_steps_and_exits_0},
        {"kill_hang_stop_and_bad_start_answered", test_faults_and_bad_lines_are_answered},
        {"bad_config_names_the_field", test_bad_config_names_the_field},
    };
    RM_ADD_SUITE("swarm_kubelet", NULL, NULL, cases);
}
