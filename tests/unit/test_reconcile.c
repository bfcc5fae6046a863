/* test_reconcile.c — the reconcile core as a table of scenarios, plus simulations.
 *
 * Design: each row is (spec knobs, current status, observed workers and rendezvous state written
 * in a tiny notation, clock) -> (expected actions as a compact string, phase, restarts, epoch,
 * conditions). Every row is also re-run with its own output status fed back in (the operator calls
 * the core again before it observes the effect of its actions): that second call must emit no
 * event and no restart, and leave the status byte-for-byte unchanged (idempotence).
 *
 * Notation
 *   workers: space-separated "<index><phase>[opts]": phase P pending, R running+ready, r running
 *            not ready, S succeeded, F failed, T terminating, M missing (carries create failures);
 *            opts: x<exit> f<finished_at> c<created_at> d<deletion_started_at> n (node NotReady)
 *            k<create failures> o<reason: O OOMKilled, E Evicted>.
 *   rdzv:    NULL (not registered) or "<epoch> C@<closed_at>|O <member>... [result]" with members
 *            "<id>/<epoch>/<rank>/<last_progress>[/d]" (d = reported done; last_report = progress).
 *   actions: C<i>@<epoch> create, D<i>[!] delete (! force), R<from> restart group, S<d>/<m> set
 *            rendezvous, STOP, E:<reason> Normal event, W:<reason> Warning event, DJ delete job,
 *            Q<seconds> requeue. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/json.h"
#include "operator/reconcile.h"
#include "tests/unit/testutil.h"

#define T_MAXW 16
#define CREATED_ (1u << RM_COND_CREATED)
#define RUNNING_ (1u << RM_COND_RUNNING)
#define RESTARTING_ (1u << RM_COND_RESTARTING)
#define SUCCEEDED_ (1u << RM_COND_SUCCEEDED)
#define FAILED_ (1u << RM_COND_FAILED)
#define SUSPENDED_ (1u << RM_COND_SUSPENDED)
#define CKFAIL_ (1u << RM_COND_CHECKPOINT_FAILING)
#define INVALID_ (1u << RM_COND_INVALID_SPEC)
/* conditions present but False */
#define OFF(x) ((x) << 8)

typedef struct scen {
    const char *name;
    /* spec (0 = base value: replicas 4 = min = max, maxRestarts 3, backoff 1, deadline 30) */
    int replicas, minr, maxr, max_restarts;
    double backoff, pd; /* pd < 0 -> 0 (disabled) */
    int64_t ads, ttl;   /* ttl 0 -> -1 (keep); ttl < 0 -> 0 */
    int clean;          /* 0 Running, 1 All, 2 None */
    bool suspend;
    int generation;
    bool no_rdzv;
    /* status */
    rm_phase phase;
    unsigned conds; /* bit set = condition present True; OFF(bit) = present False */
    int restarts, epoch;
    double last_restart, start_time, completion;
    /* observations */
    const char *workers;
    const char *rdzv;
    void (*rdzv_more)(rm_rdzv_state *r); /* what the notation cannot say (NULL = nothing) */
    int rdzv_desired;                    /* 0 -> base 4/min; -1 -> never set */
    double now;                          /* 0 -> 1000 */
    /* expectations */
    const char *actions;
    rm_phase ephase;
    int erestarts, eepoch;
    const char *econds; /* "Running=T:TrainingJobRunning Restarting=F ..." ; ~substr of message */
    /* status.stepHighWater, member 0's consecutive checkpoint failures ("disk full"), and the
     * runtime's invalid-update message (R0b) */
    int64_t hw_step;
    int hw_epoch;
    int ckfail;
    const char *invalid;
    const char *waiting; /* worker wait_index's rm_observed_worker.waiting (why it cannot start) */
    int wait_index;
    const char *queued;     /* rm_reconcile_in.queued */
    bool torchrun;          /* opts.torchrun (R7t) */
    const char *run_reason; /* the Running condition's reason in status (NULL: "Old") */
} scen;

/* ------------------------------------------------------------------ notation parsers */

static int parse_workers(const char *s, rm_observed_worker *w, int cap)
{
    int n = 0;
    if (!s)
        return 0;
    const char *p = s;
    while (*p && n < cap) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        rm_observed_worker *o = &w[n++];
        memset(o, 0, sizeof *o);
        o->node_ready = true;
        o->created_at = 500;
        o->index = (int)strtol(p, (char **)&p, 10);
        switch (*p++) {
        case 'P':
            o->phase = RM_WORKER_PENDING;
            break;
        case 'R':
            o->phase = RM_WORKER_RUNNING;
            o->ready = true;
            break;
        case 'r':
            o->phase = RM_WORKER_RUNNING;
            break;
        case 'S':
            o->phase = RM_WORKER_SUCCEEDED;
            o->finished_at = 990;
            break;
        case 'F':
            o->phase = RM_WORKER_FAILED;
            o->exit_code = 1;
            o->finished_at = 990;
            snprintf(o->reason, sizeof o->reason, "Error");
            break;
        case 'T':
            o->phase = RM_WORKER_TERMINATING;
            o->deletion_started_at = 990;
            break;
        case 'M':
            o->phase = RM_WORKER_MISSING;
            break;
        default:
            CU_FAIL_FATAL("bad worker phase letter");
        }
        while (*p && *p != ' ') {
            char k = *p++;
            switch (k) {
            case 'x':
                o->exit_code = (int)strtol(p, (char **)&p, 10);
                break;
            case 'f':
                o->finished_at = strtod(p, (char **)&p);
                break;
            case 'c':
                o->created_at = strtod(p, (char **)&p);
                break;
            case 'd':
                o->deletion_started_at = strtod(p, (char **)&p);
                break;
            case 'k':
                o->create_failures = (int)strtol(p, (char **)&p, 10);
                break;
            case 'n':
                o->node_ready = false;
                break;
            case 'o':
                snprintf(o->reason, sizeof o->reason, "%s", *p == 'O' ? "OOMKilled" : "Evicted");
                p++;
                break;
            default:
                CU_FAIL_FATAL("bad worker option");
            }
        }
    }
    return n;
}

static void parse_rdzv(const char *s, rm_rdzv_state *r)
{
    memset(r, 0, sizeof *r);
    const char *p = s;
    r->epoch = (int)strtol(p, (char **)&p, 10);
    while (*p == ' ')
        p++;
    if (*p == 'C') {
        r->closed = true;
        p += 2; /* "C@" */
        r->closed_at = strtod(p, (char **)&p);
    } else {
        p++;
    }
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        if (strncmp(p, "result", 6) == 0) {
            r->have_result = true;
            r->test_accuracy = 0.9;
            r->seconds = 60;
            r->steps = 1000;
            p += 6;
            continue;
        }
        rm_rdzv_member *m = &r->members[r->nmembers++];
        int id = (int)strtol(p, (char **)&p, 10);
        snprintf(m->worker_id, sizeof m->worker_id, "%d", id);
        p++;
        m->epoch = (int)strtol(p, (char **)&p, 10);
        p++;
        m->rank = (int)strtol(p, (char **)&p, 10);
        p++;
        m->last_progress = strtod(p, (char **)&p);
        m->last_report = m->last_progress;
        m->step = 100 + id;
        if (*p == '/' && p[1] == 'd') {
            m->done = true;
            p += 2;
        }
    }
    for (int i = 0; i < r->nmembers; i++)
        if (r->closed && r->members[i].rank >= 0 && r->members[i].epoch == r->epoch)
            r->world_size++;
}

static void fmt_actions(const rm_reconcile_out *o, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < o->nactions && n < cap; i++) {
        const rm_action *a = &o->actions[i];
        char one[96];
        switch (a->type) {
        case RM_ACT_CREATE_WORKER:
            snprintf(one, sizeof one, "C%d@%d", a->index, a->epoch);
            break;
        case RM_ACT_DELETE_WORKER:
            snprintf(one, sizeof one, "D%d%s", a->index, a->force ? "!" : "");
            break;
        case RM_ACT_RESTART_GROUP:
            snprintf(one, sizeof one, "R%d", a->epoch);
            break;
        case RM_ACT_SET_RDZV:
            snprintf(one, sizeof one, "S%d/%d", a->desired, a->min);
            break;
        case RM_ACT_STOP_RDZV:
            snprintf(one, sizeof one, "STOP");
            break;
        case RM_ACT_EVENT:
            snprintf(one, sizeof one, "%c:%s", a->warning ? 'W' : 'E', a->reason);
            break;
        case RM_ACT_DELETE_JOB:
            snprintf(one, sizeof one, "DJ");
            break;
        case RM_ACT_REQUEUE_AFTER:
            snprintf(one, sizeof one, "Q%g", a->seconds);
            break;
        default:
            snprintf(one, sizeof one, "?");
            break;
        }
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? " " : "", one);
    }
}

/* ------------------------------------------------------------------ fixture */

static void base_job(rm_tj *tj, const scen *s)
{
    memset(tj, 0, sizeof *tj);
    tj->name = strdup("mnist");
    tj->namespace_ = strdup("default");
    tj->generation = s->generation ? s->generation : 1;
    rm_tj_defaults(tj);
    rm_tj_spec *sp = &tj->spec;
    sp->replicas = s->replicas ? s->replicas : 4;
    sp->min_replicas = s->minr ? s->minr : sp->replicas;
    sp->max_replicas = s->maxr ? s->maxr : sp->replicas;
    sp->restart.max_restarts = s->max_restarts >= 0 ? (s->max_restarts ? s->max_restarts : 3) : 0;
    sp->restart.backoff_seconds = s->backoff ? s->backoff : 1;
    sp->restart.progress_deadline_seconds = s->pd < 0 ? 0 : s->pd ? s->pd : 30;
    sp->run.active_deadline_seconds = s->ads;
    sp->run.ttl_seconds_after_finished = s->ttl == 0 ? -1 : s->ttl < 0 ? 0 : s->ttl;
    sp->run.clean_pod_policy = s->clean == 1   ? RM_CLEAN_ALL
                               : s->clean == 2 ? RM_CLEAN_NONE
                                               : RM_CLEAN_RUNNING;
    sp->run.suspend = s->suspend;
    rm_tj_status *st = &tj->status;
    st->phase = s->phase;
    st->restarts = s->restarts;
    st->epoch = s->epoch;
    st->last_restart_time = s->last_restart;
    st->start_time = s->start_time;
    st->completion_time = s->completion;
    st->observed_generation = 1;
    st->high_step = s->hw_step;
    st->high_epoch = s->hw_epoch;
    for (int t = 0; t < RM_COND__COUNT; t++) {
        bool on = s->conds & (1u << t), off = s->conds & OFF(1u << t);
        if (!on && !off)
            continue;
        rm_condition *c = &st->conditions[t];
        c->type = (rm_cond_type)t;
        c->present = true;
        c->status = on;
        snprintf(c->reason, sizeof c->reason, "%s",
                 t == RM_COND_RUNNING && s->run_reason ? s->run_reason : "Old");
        c->last_transition = 1;
        c->observed_generation = 1;
    }
}

static const char *cond_letter_name(const char *p, size_t n, rm_cond_type *out)
{
    for (int t = 0; t < RM_COND__COUNT; t++) {
        const char *nm = rm_cond_name((rm_cond_type)t);
        if (strlen(nm) == n && strncmp(nm, p, n) == 0) {
            *out = (rm_cond_type)t;
            return nm;
        }
    }
    return NULL;
}

/* "Running=T:TrainingJobRunning~is running Restarting=F" */
static void check_conds(const scen *s, const rm_tj_status *st)
{
    if (!s->econds)
        return;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s->econds);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        CU_ASSERT_PTR_NOT_NULL_FATAL(eq);
        rm_cond_type t;
        if (!cond_letter_name(tok, (size_t)(eq - tok), &t)) {
            CU_FAIL("unknown condition in expectation");
            continue;
        }
        const rm_condition *c = &st->conditions[t];
        char *tilde = strchr(eq, '~');
        if (tilde)
            *tilde++ = 0;
        char *colon = strchr(eq, ':');
        if (colon)
            *colon++ = 0;
        bool want = eq[1] == 'T';
        if (!c->present || c->status != want) {
            fprintf(stderr, "\n  [%s] condition %s: want %s, got %s/%s\n", s->name, rm_cond_name(t),
                    want ? "True" : "False", c->present ? "present" : "absent", c->status ? "True" : "False");
            CU_FAIL("condition status");
            continue;
        }
        if (colon && strcmp(c->reason, colon) != 0) {
            fprintf(stderr, "\n  [%s] condition %s reason: want %s got %s\n", s->name, rm_cond_name(t), colon,
                    c->reason);
            CU_FAIL("condition reason");
        }
        if (tilde) {
            for (char *u = tilde; *u; u++)
                if (*u == '_')
                    *u = ' ';
            if (!strstr(c->message, tilde)) {
                fprintf(stderr, "\n  [%s] condition %s message \"%s\" lacks \"%s\"\n", s->name,
                        rm_cond_name(t), c->message, tilde);
                CU_FAIL("condition message");
            }
        }
        CU_ASSERT_EQUAL(c->observed_generation, s->generation ? s->generation : 1);
    }
}

typedef struct run_result {
    rm_reconcile_out out;
    rm_action acts[RM_RECONCILE_ACTIONS(T_MAXW)];
    char str[2048];
} run_result;

static void run_once(const scen *s, const rm_tj *tj, run_result *rr)
{
    static rm_observed_worker w[T_MAXW];
    static rm_rdzv_state rz;
    int nw = parse_workers(s->workers, w, T_MAXW);
    if (s->waiting && s->wait_index < nw)
        snprintf(w[s->wait_index].waiting, sizeof w[s->wait_index].waiting, "%s", s->waiting);
    if (s->rdzv)
        parse_rdzv(s->rdzv, &rz);
    if (s->rdzv && s->rdzv_more)
        s->rdzv_more(&rz);
    if (s->rdzv && s->ckfail && rz.nmembers > 0) {
        rz.members[0].checkpoint_failures = s->ckfail;
        snprintf(rz.members[0].checkpoint_error, sizeof rz.members[0].checkpoint_error, "disk full");
    }
    rm_reconcile_opts opts;
    rm_reconcile_opts_default(&opts);
    opts.no_rendezvous = s->no_rdzv;
    opts.torchrun = s->torchrun;
    rm_reconcile_in in = {
        .job = tj,
        .workers = w,
        .nworkers = (size_t)nw,
        .rdzv = s->rdzv ? &rz : NULL,
        .rdzv_desired = s->rdzv_desired < 0 ? 0
                        : s->rdzv_desired   ? s->rdzv_desired
                                            : tj->spec.replicas,
        .rdzv_min = tj->spec.min_replicas,
        .now = s->now ? s->now : 1000,
        .opts = &opts,
        .invalid_update = s->invalid,
        .queued = s->queued,
    };
    memset(&rr->out, 0, sizeof rr->out);
    rr->out.actions = rr->acts;
    rr->out.cap = RM_ARRAY_LEN(rr->acts);
    int rc = rm_reconcile(&in, &rr->out);
    CU_ASSERT_EQUAL(rc, RM_OK);
    fmt_actions(&rr->out, rr->str, sizeof rr->str);
}

static void run_scenario(const scen *s)
{
    rm_tj tj;
    base_job(&tj, s);
    static run_result r1, r2;
    run_once(s, &tj, &r1);
    if (strcmp(r1.str, s->actions) != 0) {
        fprintf(stderr, "\n  [%s] actions:\n    want \"%s\"\n    got  \"%s\"\n", s->name, s->actions, r1.str);
        for (size_t i = 0; i < r1.out.nactions; i++) {
            char b[400];
            fprintf(stderr, "      %s\n", rm_action_str(&r1.out.actions[i], b, sizeof b));
        }
        CU_FAIL("actions differ");
    }
    const rm_tj_status *st = &r1.out.status;
    if (st->phase != s->ephase || st->restarts != s->erestarts || st->epoch != s->eepoch) {
        fprintf(stderr, "\n  [%s] phase/restarts/epoch: want %s/%d/%d got %s/%d/%d\n", s->name,
                rm_phase_name(s->ephase), s->erestarts, s->eepoch, rm_phase_name(st->phase), st->restarts,
                st->epoch);
        CU_FAIL("phase/restarts/epoch");
    }
    CU_ASSERT_EQUAL(st->observed_generation, s->generation ? s->generation : 1);
    check_conds(s, st);

    /* Idempotence: same observations, status fed back. */
    rm_tj_status saved = tj.status;
    tj.status = r1.out.status;
    scen s2 = *s;
    for (size_t i = 0; i < r1.out.nactions; i++)
        if (r1.out.actions[i].type == RM_ACT_SET_RDZV)
            s2.rdzv_desired = r1.out.actions[i].desired;
    run_once(&s2, &tj, &r2);
    for (size_t i = 0; i < r2.out.nactions; i++) {
        rm_action_type t = r2.out.actions[i].type;
        if (t == RM_ACT_EVENT || t == RM_ACT_RESTART_GROUP || t == RM_ACT_SET_RDZV) {
            fprintf(stderr, "\n  [%s] not idempotent: second call emitted \"%s\"\n", s->name, r2.str);
            CU_FAIL("second call repeated an event/restart");
            break;
        }
    }
    if (!rm_reconcile_status_equal(&r2.out.status, &r1.out.status) || r2.out.status_changed) {
        fprintf(stderr,
                "\n  [%s] second call changed status (restarts %d->%d epoch %d->%d "
                "phase %s->%s)\n",
                s->name, r1.out.status.restarts, r2.out.status.restarts, r1.out.status.epoch,
                r2.out.status.epoch, rm_phase_name(r1.out.status.phase), rm_phase_name(r2.out.status.phase));
        CU_FAIL("second call changed status");
    }
    tj.status = saved;
    rm_tj_free(&tj);
}

/* ------------------------------------------------------------------ the table */

#define ALL4 "0R 1R 2R 3R"
#define CLOSED0 "1 C@990 0/1/0/995 1/1/1/995 2/1/2/995 3/1/3/995"
#define RUNNING_ST .phase = RM_PHASE_RUNNING, .conds = CREATED_ | RUNNING_, .epoch = 1, .start_time = 500

/* parameter server 1 reports 4 failed checkpoint writes with its registration */
static void ps1_ckfail(rm_rdzv_state *r)
{
    r->ps_checkpoint_index = 1;
    r->ps_checkpoint_failures = 4;
    snprintf(r->ps_checkpoint_error, sizeof r->ps_checkpoint_error, "read-only file system");
}

static const scen table[] = {
    /* R1/R2/R3: creation */
    {.name = "new job: Created, register rendezvous, create every index",
     .rdzv_desired = -1,
     .actions = "E:TrainingJobCreated S4/4 C0@0 C1@0 C2@0 C3@0",
     .ephase = RM_PHASE_PENDING,
     .econds = "Created=T:TrainingJobCreated~is_created"},
    {.name = "registered, workers starting, round open: wait",
     .conds = CREATED_,
     .epoch = 1,
     .workers = "0R 1R 2Rc990 3Pc990",
     .rdzv = "1 O 0/1/-1/900 1/1/-1/900",
     .actions = "Q20",
     .ephase = RM_PHASE_PENDING,
     .eepoch = 1},
    {.name = "rendezvous epoch adopted from snapshot",
     .conds = CREATED_,
     .epoch = 0,
     .workers = "0P 1P 2P 3P",
     .rdzv = "1 O",
     .actions = "",
     .ephase = RM_PHASE_PENDING,
     .eepoch = 1},
    {.name = "missing index recreated at the current epoch",
     .conds = CREATED_,
     .epoch = 1,
     .workers = "0R 2R 3R",
     .rdzv = "1 O",
     .actions = "C1@1",
     .ephase = RM_PHASE_PENDING,
     .eepoch = 1},
    /* R4: Running */
    {.name = "round closes: Running with event",
     .conds = CREATED_,
     .epoch = 1,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "E:TrainingJobRunning Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "Created=T Running=T:TrainingJobRunning~is_running"},
    {.name = "steady running: only the progress-deadline requeue",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "Running=T"},
    {.name = "new generation: observedGeneration follows, no event",
     RUNNING_ST,
     .generation = 2,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "Running=T Created=T"},
    {.name = "non-rank-0 worker exits 0 early: not a failure, not recreated",
     RUNNING_ST,
     .workers = "0R 1R 2S 3R",
     .rdzv = CLOSED0,
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1},
    {.name = "workers moved the epoch themselves, no cause yet: adopt, stay Running",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = "2 O 0/2/-1/999 1/2/-1/999 2/2/-1/999 3/2/-1/999",
     .actions = "",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 2,
     .econds = "Running=T"},
    /* R5a/R7: worker failure */
    {.name = "worker exits non-zero: restart group, replace only it",
     RUNNING_ST,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = CLOSED0,
     .actions = "R1 W:WorkerFailed D2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T:WorkerFailed~worker_2_failed_(exit_code_1 Running=F:WorkerFailed"},
    {.name = "worker killed by a signal (137) counts",
     RUNNING_ST,
     .workers = "0R 1Fx137f999 2R 3R",
     .rdzv = CLOSED0,
     .actions = "R1 W:WorkerFailed D1",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T:WorkerFailed~exit_code_137"},
    {.name = "OOMKilled pod",
     RUNNING_ST,
     .workers = "0R 1R 2R 3Fx137f999oO",
     .rdzv = CLOSED0,
     .actions = "R1 W:WorkerFailed D3",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T~OOMKilled"},
    {.name = "evicted pod on a NotReady node: force delete",
     RUNNING_ST,
     .workers = "0R 1R 2Fx0f999oEn 3R",
     .rdzv = CLOSED0,
     .actions = "R1 W:WorkerFailed D2!",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T~Evicted"},
    {.name = "two workers fail together: one restart",
     RUNNING_ST,
     .workers = "0R 1Fx1f999 2Fx1f998 3R",
     .rdzv = CLOSED0,
     .actions = "R1 W:WorkerFailed D1 D2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "same failure seen again with stale snapshot: delete only, no count",
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 999.5,
     .start_time = 500,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = CLOSED0,
     .actions = "D2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T"},
    {.name = "after delete: replacement created at the new epoch",
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 999.5,
     .start_time = 500,
     .workers = "0R 1R 3R",
     .rdzv = "2 O 0/2/-1/999 1/2/-1/999 3/2/-1/999 2/1/2/995",
     .actions = "C2@2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "new round closes: Running again, Restarting off",
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 999.5,
     .start_time = 500,
     .workers = "0R 1R 2Rc1000 3R",
     .rdzv = "2 C@1002 0/2/0/1003 1/2/1/1003 2/2/2/1003 3/2/3/1003",
     .now = 1004,
     .actions = "E:TrainingJobRunning Q29",
     .ephase = RM_PHASE_RUNNING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Running=T:TrainingJobRunning Restarting=F:TrainingJobRunning"},
    {.name = "crash before the round closed (not a member): count, no new epoch",
     .conds = CREATED_,
     .epoch = 1,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = "1 O 0/1/-1/900 1/1/-1/900",
     .actions = "W:WorkerFailed D2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 1},
    {.name = "crash after joining the open round: new epoch",
     .conds = CREATED_,
     .epoch = 1,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = "1 O 0/1/-1/900 1/1/-1/900 2/1/-1/900",
     .actions = "R1 W:WorkerFailed D2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "survivors re-formed first, failure seen later: count once, no extra epoch",
     RUNNING_ST,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = "2 O 0/2/-1/999 1/2/-1/999 3/2/-1/999 2/1/2/995",
     .actions = "W:WorkerFailed D2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "failed worker already being deleted: not counted, left alone",
     RUNNING_ST,
     .workers = "0R 1R 2Fx1f999d999.5 3R",
     .rdzv = CLOSED0,
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1},
    {.name = "another worker fails while the group re-forms: counted again",
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 998,
     .start_time = 500,
     .workers = "0R 1R 2Rc998 3Fx1f999.5",
     .rdzv = "2 O 0/2/-1/998.5 1/2/-1/998.5 3/2/-1/998.5",
     .actions = "R2 W:WorkerFailed D3",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 2,
     .eepoch = 3},
    /* R5b */
    {.name = "member of the closed round vanished (pod deleted): restart + recreate",
     RUNNING_ST,
     .workers = "0R 1R 3R",
     .rdzv = CLOSED0,
     .actions = "R1 W:WorkerFailed C2@2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T~disappeared"},
    /* R5e: bad data fails the job at once, without a restart */
    {.name = "worker exits 3 (its data): Failed DataError, no restart spent",
     RUNNING_ST,
     .workers = "0R 1R 2Fx3f999 3R",
     .rdzv = CLOSED0,
     .actions = "W:DataError STOP D0 D1 D3",
     .ephase = RM_PHASE_FAILED,
     .erestarts = 0,
     .eepoch = 1,
     .econds = "Failed=T:DataError~worker_2:_the_data_could_not_be_read_(exit_code_3) Running=F"},
    {.name = "exit 3 from before the last restart is not a new DataError",
     RUNNING_ST,
     .restarts = 1,
     .last_restart = 995,
     .workers = "0R 1R 2Fx3f990 3R",
     .rdzv = CLOSED0,
     .actions = "D2 Q25",
     .ephase = RM_PHASE_RUNNING,
     .erestarts = 1,
     .eepoch = 1,
     .econds = "Running=T"},
    /* R7 budget and back-off */
    {.name = "restart budget exhausted: Failed BackoffLimitExceeded, cleanup Running",
     RUNNING_ST,
     .restarts = 3,
     .last_restart = 900,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = CLOSED0,
     .actions = "W:BackoffLimitExceeded STOP D0 D1 D3",
     .ephase = RM_PHASE_FAILED,
     .erestarts = 3,
     .eepoch = 1,
     .econds = "Failed=T:BackoffLimitExceeded~has_reached_the_specified_restart_limit_(3) "
               "Running=F"},
    {.name = "maxRestarts 0: first failure fails the job",
     RUNNING_ST,
     .max_restarts = -1,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = CLOSED0,
     .actions = "W:BackoffLimitExceeded STOP D0 D1 D3",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 1,
     .econds = "Failed=T:BackoffLimitExceeded~restart_limit_(0)"},
    {.name = "second restart inside back-off: wait, delete nothing",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_ | OFF(RESTARTING_),
     .restarts = 1,
     .epoch = 2,
     .last_restart = 999.5,
     .start_time = 500,
     .workers = "0R 1R 2Fx1f999.8 3R",
     .rdzv = "2 C@999.6 0/2/0/999.7 1/2/1/999.7 2/2/2/999.7 3/2/3/999.7",
     .actions = "Q0.5",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T:BackOff Running=F"},
    {.name = "back-off elapsed: second restart",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_ | OFF(RESTARTING_),
     .restarts = 1,
     .epoch = 2,
     .last_restart = 999.5,
     .start_time = 500,
     .workers = "0R 1R 2Fx1f999.8 3R",
     .rdzv = "2 C@999.6 0/2/0/999.7 1/2/1/999.7 2/2/2/999.7 3/2/3/999.7",
     .now = 1000.6,
     .actions = "R2 W:WorkerFailed D2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 2,
     .eepoch = 3,
     .econds = "Restarting=T:WorkerFailed"},
    {.name = "back-off doubles (third restart waits 2 s)",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_,
     .restarts = 2,
     .epoch = 3,
     .last_restart = 998,
     .start_time = 500,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = "3 C@998.5 0/3/0/999 1/3/1/999 2/3/2/999 3/3/3/999",
     .now = 999.5,
     .actions = "Q0.5",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 2,
     .eepoch = 3},
    {.name = "back-off capped at 300 s",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_,
     .backoff = 100,
     .max_restarts = 10,
     .restarts = 3,
     .epoch = 4,
     .last_restart = 900,
     .start_time = 500,
     .workers = "0R 1R 2Fx1f999 3R",
     .rdzv = "4 C@901 0/4/0/999 1/4/1/999 2/4/2/999 3/4/3/999",
     .actions = "Q200",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 3,
     .eepoch = 4},
    /* R5c: progress deadline */
    {.name = "stale and unready member: ProgressDeadlineExceeded, replace it only",
     RUNNING_ST,
     .workers = "0R 1R 2r 3R",
     .rdzv = "1 C@900 0/1/0/990 1/1/1/990 2/1/2/950 3/1/3/990",
     .actions = "R1 W:ProgressDeadlineExceeded D2 Q20",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T:ProgressDeadlineExceeded~worker_2_made_no_progress_for_50s"},
    {.name = "hang: everyone stale, one unready -> only the unready one",
     RUNNING_ST,
     .workers = "0R 1R 2R 3r",
     .rdzv = "1 C@900 0/1/0/950 1/1/1/950 2/1/2/950 3/1/3/950",
     .actions = "R1 W:ProgressDeadlineExceeded D3",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "everyone stale and ready: all stale replaced",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = "1 C@900 0/1/0/950 1/1/1/950 2/1/2/950 3/1/3/990",
     .actions = "R1 W:ProgressDeadlineExceeded D0 D1 D2 Q20",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "no progress since the round closed: deadline counts from closed_at",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = "1 C@960 0/1/0/0 1/1/1/0 2/1/2/0 3/1/3/0",
     .now = 1000,
     .actions = "R1 W:ProgressDeadlineExceeded D0 D1 D2 D3",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "within the deadline: requeue at the earliest expiry",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = "1 C@980 0/1/0/0 1/1/1/0 2/1/2/0 3/1/3/0",
     .actions = "Q10",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1},
    {.name = "progressDeadlineSeconds 0 disables the check",
     RUNNING_ST,
     .pd = -1,
     .workers = ALL4,
     .rdzv = "1 C@100 0/1/0/100 1/1/1/100 2/1/2/100 3/1/3/100",
     .actions = "",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1},
    /* R5d */
    {.name = "hung outside the re-formed round: deadline, no extra epoch",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = "2 O 0/2/-1/995 1/2/-1/995 3/2/-1/995 2/1/2/950",
     .actions = "W:ProgressDeadlineExceeded D2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Restarting=T~has_not_joined"},
    {.name = "not re-joined yet but within the deadline: requeue",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = "2 O 0/2/-1/995 1/2/-1/995 3/2/-1/995 2/1/2/990",
     .actions = "Q20",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 2},
    /* R6 success */
    {.name = "result reported: Succeeded, stop rendezvous, clean running workers",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = CLOSED0 " result",
     .actions = "E:Succeeded STOP D0 D1 D2 D3",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1,
     .econds = "Succeeded=T:Succeeded~successfully_completed Running=F"},
    {.name = "rank 0 reports done",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = "1 C@990 0/1/0/995/d 1/1/1/995 2/1/2/995 3/1/3/995",
     .actions = "E:Succeeded STOP D0 D1 D2 D3",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1},
    {.name = "index 0 exited 0 (foreign image): Succeeded",
     RUNNING_ST,
     .workers = "0S 1R 2R 3R",
     .rdzv = CLOSED0,
     .actions = "E:Succeeded STOP D1 D2 D3",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1},
    {.name = "success wins over a failure seen in the same call",
     RUNNING_ST,
     .workers = "0S 1Fx1f999 2S 3S",
     .rdzv = CLOSED0 " result",
     .actions = "E:Succeeded STOP",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1},
    {.name = "cleanPodPolicy All deletes finished workers too",
     RUNNING_ST,
     .clean = 1,
     .workers = "0S 1R",
     .rdzv = CLOSED0 " result",
     .actions = "E:Succeeded STOP D0 D1",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1},
    {.name = "cleanPodPolicy None deletes nothing",
     RUNNING_ST,
     .clean = 2,
     .workers = "0S 1R",
     .rdzv = CLOSED0 " result",
     .actions = "E:Succeeded STOP",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1},
    /* R9 terminal */
    {.name = "terminal is quiet: stop only",
     .phase = RM_PHASE_SUCCEEDED,
     .conds = CREATED_ | SUCCEEDED_ | OFF(RUNNING_),
     .epoch = 1,
     .completion = 990,
     .workers = "0S 1S",
     .rdzv = CLOSED0 " result",
     .actions = "STOP",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1,
     .econds = "Succeeded=T"},
    {.name = "terminal never creates, cleans leftovers",
     .phase = RM_PHASE_FAILED,
     .conds = CREATED_ | FAILED_,
     .epoch = 1,
     .completion = 990,
     .workers = "1R",
     .actions = "STOP D1",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 1},
    {.name = "ttlSecondsAfterFinished passed: delete the job",
     .phase = RM_PHASE_SUCCEEDED,
     .conds = CREATED_ | SUCCEEDED_,
     .ttl = 60,
     .completion = 900,
     .epoch = 1,
     .actions = "STOP DJ",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1},
    {.name = "ttlSecondsAfterFinished pending: requeue",
     .phase = RM_PHASE_SUCCEEDED,
     .conds = CREATED_ | SUCCEEDED_,
     .ttl = 200,
     .completion = 900,
     .epoch = 1,
     .actions = "STOP Q100",
     .ephase = RM_PHASE_SUCCEEDED,
     .eepoch = 1},
    {.name = "ttl 0: delete right away",
     .phase = RM_PHASE_FAILED,
     .conds = CREATED_ | FAILED_,
     .ttl = -1,
     .completion = 999,
     .epoch = 1,
     .actions = "STOP DJ",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 1},
    {.name = "stuck Terminating on a NotReady node: force delete",
     .phase = RM_PHASE_FAILED,
     .conds = CREATED_ | FAILED_,
     .epoch = 1,
     .completion = 990,
     .workers = "2Tnd900",
     .actions = "STOP D2!",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 1},
    {.name = "Terminating on a NotReady node within grace: requeue",
     .phase = RM_PHASE_FAILED,
     .conds = CREATED_ | FAILED_,
     .epoch = 1,
     .completion = 990,
     .workers = "2Tnd990",
     .actions = "STOP Q20",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 1},
    {.name = "Terminating on a Ready node: left alone",
     RUNNING_ST,
     .workers = "0R 1R 2Td900 3R",
     .rdzv = CLOSED0,
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1},
    /* R8 deadline */
    {.name = "activeDeadlineSeconds exceeded: Failed DeadlineExceeded",
     RUNNING_ST,
     .ads = 400,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "W:DeadlineExceeded STOP D0 D1 D2 D3",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 1,
     .econds = "Failed=T:DeadlineExceeded~was_active_longer_than_specified_deadline Running=F"},
    {.name = "activeDeadlineSeconds pending: requeue at the smaller timer",
     RUNNING_ST,
     .ads = 510,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "Q10",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1},
    /* R8 suspend / resume */
    {.name = "suspend a running job: delete all, Suspended",
     RUNNING_ST,
     .suspend = true,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "D0 D1 D2 D3 E:Suspended",
     .ephase = RM_PHASE_SUSPENDED,
     .eepoch = 1,
     .econds = "Suspended=T:Suspended Running=F:Suspended"},
    {.name = "suspended and terminating: quiet",
     .phase = RM_PHASE_SUSPENDED,
     .suspend = true,
     .conds = CREATED_ | OFF(RUNNING_) | SUSPENDED_,
     .epoch = 1,
     .workers = "0Td999 1Td999",
     .rdzv = CLOSED0,
     .actions = "",
     .ephase = RM_PHASE_SUSPENDED,
     .eepoch = 1},
    {.name = "created suspended (Kueue): nothing created",
     .suspend = true,
     .rdzv_desired = -1,
     .actions = "E:TrainingJobCreated E:Suspended",
     .ephase = RM_PHASE_SUSPENDED,
     .econds = "Created=T Suspended=T"},
    {.name = "resume: fresh round (not a restart), recreate all, startTime reset",
     .phase = RM_PHASE_SUSPENDED,
     .conds = CREATED_ | OFF(RUNNING_) | SUSPENDED_,
     .epoch = 1,
     .restarts = 1,
     .rdzv = CLOSED0,
     .ads = 100,
     .start_time = 100,
     .actions = "E:Resumed R1 C0@2 C1@2 C2@2 C3@2 Q100",
     .ephase = RM_PHASE_PENDING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Suspended=F:Resumed"},
    /* R0 */
    {.name = "invalid spec: Failed InvalidSpec naming the field",
     .minr = 5,
     .rdzv_desired = -1,
     .actions = "W:InvalidSpec STOP",
     .ephase = RM_PHASE_FAILED,
     .econds = "Failed=T:InvalidSpec~minReplicas Created=T"},
    /* R7 elastic */
    {.name = "elastic: replacement Pending too long -> continue with 3",
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .minr = 2,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 900,
     .workers = "0R 1R 2Pc900 3R",
     .rdzv = "2 O 0/2/-1/950 1/2/-1/950 3/2/-1/950",
     .actions = "S3/2 W:ScaledDown",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "elastic: replacement Pending within timeout -> requeue",
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .minr = 2,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 990,
     .workers = "0R 1R 2Pc980 3R",
     .rdzv = "2 O 0/2/-1/995 1/2/-1/995 3/2/-1/995",
     .actions = "Q40",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "elastic: creation keeps failing -> continue with 3, keep trying",
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .minr = 2,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 990,
     .workers = "0R 1R 2Mk3 3R",
     .rdzv = "2 O 0/2/-1/995 1/2/-1/995 3/2/-1/995",
     .actions = "S3/2 W:ScaledDown C2@2",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "elastic: shrunk round closed at 3 >= min: Running",
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .minr = 2,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 900,
     .workers = "0R 1R 2Pc900 3R",
     .rdzv = "2 C@995 0/2/0/995 1/2/1/995 3/2/2/995",
     .rdzv_desired = 3,
     .actions = "E:TrainingJobRunning Q25",
     .ephase = RM_PHASE_RUNNING,
     .erestarts = 1,
     .eepoch = 2,
     .econds = "Running=T Restarting=F"},
    {.name = "elastic: below minReplicas keeps waiting for all",
     .minr = 3,
     .phase = RM_PHASE_RESTARTING,
     .conds = CREATED_ | OFF(RUNNING_) | RESTARTING_,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 990,
     .workers = "0R 1R 2Pc900 3Pc900",
     .rdzv = "2 O 0/2/-1/995 1/2/-1/995",
     .actions = "",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 2},
    {.name = "elastic: the missing worker runs again -> grow back (not a restart)",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_,
     .minr = 2,
     .restarts = 1,
     .epoch = 2,
     .last_restart = 900,
     .workers = ALL4,
     .rdzv_desired = 3,
     .rdzv = "2 C@990 0/2/0/995 1/2/1/995 3/2/2/995",
     .actions = "S4/2 E:ScaledUp R2 E:Resized Q25",
     .ephase = RM_PHASE_RUNNING,
     .erestarts = 1,
     .eepoch = 3},
    {.name = "elastic: round closed by settle without a slow starter -> re-form with it",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_,
     .minr = 2,
     .epoch = 1,
     .workers = ALL4,
     .rdzv = "1 C@990 0/1/0/995 1/1/1/995 2/1/2/995",
     .actions = "R1 E:Resized Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 2},
    {.name = "scale up replicas 4 -> 6: register and create the new indices",
     RUNNING_ST,
     .replicas = 6,
     .minr = 4,
     .maxr = 8,
     .rdzv_desired = 4,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "S6/4 E:ScaledUp C4@1 C5@1 Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1},
    {.name = "scale down replicas 4 -> 2: delete the top indices and re-form",
     RUNNING_ST,
     .replicas = 2,
     .minr = 2,
     .maxr = 4,
     .rdzv_desired = 4,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "S2/2 E:ScaledDown D2 D3 R1 E:Resized Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 2},
    /* R10 recovery loop (a group that re-forms without getting past its step) */
    {.name = "re-formed 20 epochs without passing the high-water step: RecoveryLoop",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_,
     .start_time = 500,
     .epoch = 21,
     .hw_step = 200,
     .hw_epoch = 1,
     .workers = ALL4,
     .rdzv = "21 C@990 0/21/0/995 1/21/1/995 2/21/2/995 3/21/3/995",
     .actions = "W:RecoveryLoop STOP D0 D1 D2 D3",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 21,
     .econds = "Failed=T:RecoveryLoop~re-formed_20_times Running=F"},
    {.name = "re-formed 19 epochs without progress: still Running",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_,
     .start_time = 500,
     .epoch = 20,
     .hw_step = 200,
     .hw_epoch = 1,
     .workers = ALL4,
     .rdzv = "20 C@990 0/20/0/995 1/20/1/995 2/20/2/995 3/20/3/995",
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 20,
     .econds = "Running=T"},
    {.name = "a step past the high-water mark resets the count",
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_,
     .start_time = 500,
     .epoch = 30,
     .hw_step = 50,
     .hw_epoch = 1,
     .workers = ALL4,
     .rdzv = "30 C@990 0/30/0/995 1/30/1/995 2/30/2/995 3/30/3/995",
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 30,
     .econds = "Running=T"},
    {.name = "join loop before any step (batch larger than the data): RecoveryLoop",
     .conds = CREATED_,
     .epoch = 25,
     .hw_epoch = 3,
     .start_time = 500,
     .workers = ALL4,
     .rdzv = "25 O",
     .actions = "W:RecoveryLoop STOP D0 D1 D2 D3",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 25,
     .econds = "Failed=T:RecoveryLoop~past_step_0"},
    /* R11 checkpoint failures */
    {.name = "first failed checkpoint: CheckpointFailing condition and Warning",
     RUNNING_ST,
     .ckfail = 2,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "W:CheckpointFailing Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "CheckpointFailing=T:CheckpointWriteFailed~2_checkpoint_writes_failed_in_a_row:_disk_full "
               "Running=T"},
    {.name = "a parameter server's checkpoints failing: CheckpointFailing names it",
     RUNNING_ST,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .rdzv_more = ps1_ckfail,
     .actions = "W:CheckpointFailing Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds =
         "CheckpointFailing=T:CheckpointWriteFailed~parameter_server_1:_4_checkpoint_writes_failed_in_a_row:"
         "_read-only_file_system Running=T"},
    {.name = "a parameter server's checkpoints failing longer than the progress deadline: Failed",
     .phase = RM_PHASE_RUNNING,
     .epoch = 1,
     .start_time = 500,
     .conds = CREATED_ | RUNNING_ | CKFAIL_,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .rdzv_more = ps1_ckfail,
     .actions = "W:CheckpointFailing STOP D0 D1 D2 D3",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 1,
     .econds = "Failed=T:CheckpointFailing~parameter_server_1"},
    {.name = "checkpoints failing longer than the progress deadline: Failed",
     .phase = RM_PHASE_RUNNING,
     .epoch = 1,
     .start_time = 500,
     .conds = CREATED_ | RUNNING_ | CKFAIL_,
     .ckfail = 9,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "W:CheckpointFailing STOP D0 D1 D2 D3",
     .ephase = RM_PHASE_FAILED,
     .eepoch = 1,
     .econds = "Failed=T:CheckpointFailing~progressDeadlineSeconds_30"},
    {.name = "checkpoints failing within the deadline: wait for it",
     .phase = RM_PHASE_RUNNING,
     .epoch = 1,
     .start_time = 500,
     .conds = CREATED_ | RUNNING_ | CKFAIL_,
     .ckfail = 3,
     .pd = 2000,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "Q1001",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "CheckpointFailing=T Running=T"},
    {.name = "checkpoints written again: condition cleared, no event",
     .phase = RM_PHASE_RUNNING,
     .epoch = 1,
     .start_time = 500,
     .conds = CREATED_ | RUNNING_ | CKFAIL_,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "CheckpointFailing=F:CheckpointWritten Running=T"},
    /* R0b invalid update of a running job (kubectl scale --replicas=20000) */
    {.name = "invalid update, last valid spec given: keep running, InvalidSpec condition",
     RUNNING_ST,
     .invalid = "spec.replicas: must be <= 16384",
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "W:InvalidSpec Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "InvalidSpec=T:InvalidUpdate~spec.replicas:_must_be_<=_16384 Running=T"},
    {.name = "invalid update, no valid spec known: nothing deleted, not Failed",
     RUNNING_ST,
     .replicas = 20000,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "W:InvalidSpec",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "InvalidSpec=T:InvalidUpdate~must_be_<=_16384 Running=T"},
    {.name = "valid again: InvalidSpec cleared, normal operation",
     .phase = RM_PHASE_RUNNING,
     .epoch = 1,
     .start_time = 500,
     .conds = CREATED_ | RUNNING_ | INVALID_,
     .workers = ALL4,
     .rdzv = CLOSED0,
     .actions = "Q25",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1,
     .econds = "InvalidSpec=F:Valid Running=T"},
    /* foreign images (torchrun) */
    {.name = "no rendezvous: Running when every pod runs",
     .no_rdzv = true,
     .conds = CREATED_,
     .workers = ALL4,
     .rdzv = "1 O",
     .actions = "E:TrainingJobRunning",
     .ephase = RM_PHASE_RUNNING,
     .eepoch = 1},
    {.name = "no rendezvous: pod failure restarts without a deadline check",
     .no_rdzv = true,
     .phase = RM_PHASE_RUNNING,
     .conds = CREATED_ | RUNNING_,
     .epoch = 1,
     .workers = "0R 1Fx1f999 2R 3R",
     .rdzv = "1 O",
     .actions = "W:WorkerFailed D1",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 1},
    /* R7t: torchrun's agents re-form without the lost worker; the operator only replaces it */
    {.name = "torchrun: a lost worker is replaced, the job keeps running",
     .replicas = 3,
     .minr = 2,
     .maxr = 3,
     .no_rdzv = true,
     .torchrun = true,
     RUNNING_ST,
     .workers = "0R 1Fx137f999 2R",
     .rdzv = "1 O",
     .actions = "W:WorkerLost D1",
     .ephase = RM_PHASE_RUNNING,
     .erestarts = 1,
     .eepoch = 1,
     .econds = "Running=T:WorkerLost~worker_1_failed_(exit_code_137,_Error);_torchrun_re-forms_with_the_2_"
               "surviving"},
    {.name = "torchrun: the lost worker is gone: its replacement is created, still Running",
     .replicas = 3,
     .minr = 2,
     .maxr = 3,
     .no_rdzv = true,
     .torchrun = true,
     RUNNING_ST,
     .run_reason = "WorkerLost",
     .restarts = 1,
     .last_restart = 999,
     .workers = "0R 2R",
     .rdzv = "1 O",
     .actions = "C1@1",
     .ephase = RM_PHASE_RUNNING,
     .erestarts = 1,
     .eepoch = 1,
     .econds = "Running=T:WorkerLost"},
    {.name = "torchrun: every worker runs again: WorkerReplaced",
     .replicas = 3,
     .minr = 2,
     .maxr = 3,
     .no_rdzv = true,
     .torchrun = true,
     RUNNING_ST,
     .run_reason = "WorkerLost",
     .restarts = 1,
     .last_restart = 999,
     .workers = "0R 1R 2R",
     .rdzv = "1 O",
     .actions = "E:WorkerReplaced",
     .ephase = RM_PHASE_RUNNING,
     .erestarts = 1,
     .eepoch = 1,
     .econds = "Running=T:TrainingJobRunning"},
    {.name = "torchrun: a second loss waits out the back-off, still Running",
     .replicas = 3,
     .minr = 2,
     .maxr = 3,
     .no_rdzv = true,
     .torchrun = true,
     .backoff = 10,
     RUNNING_ST,
     .restarts = 1,
     .last_restart = 995,
     .workers = "0R 1R 2Fx1f999",
     .rdzv = "1 O",
     .actions = "Q5",
     .ephase = RM_PHASE_RUNNING,
     .erestarts = 1,
     .eepoch = 1,
     .econds = "Running=T:WorkerLost~replacing_pod_mnist-worker-2_in_5.0s"},
    {.name = "torchrun: fewer survivors than minReplicas: restarting as any job",
     .replicas = 3,
     .minr = 2,
     .maxr = 3,
     .no_rdzv = true,
     .torchrun = true,
     RUNNING_ST,
     .workers = "0R 1Fx137f999 2Pc990", /* a Pending worker is no survivor (its start-up timer: Q50) */
     .rdzv = "1 O",
     .actions = "W:WorkerFailed D1 Q50",
     .ephase = RM_PHASE_RESTARTING,
     .erestarts = 1,
     .eepoch = 1},
    {.name = "torchrun: the restart budget spent: BackoffLimitExceeded",
     .replicas = 3,
     .minr = 2,
     .maxr = 3,
     .no_rdzv = true,
     .torchrun = true,
     RUNNING_ST,
     .restarts = 3,
     .last_restart = 900,
     .workers = "0R 1Fx137f999 2R",
     .rdzv = "1 O",
     .actions = "W:BackoffLimitExceeded STOP D0 D2",
     .ephase = RM_PHASE_FAILED,
     .erestarts = 3,
     .eepoch = 1},
};

static void test_table(void)
{
    for (size_t i = 0; i < RM_ARRAY_LEN(table); i++)
        run_scenario(&table[i]);
}

/* ------------------------------------------------------------------ targeted checks */

static void test_transition_time_only_on_flip(void)
{
    scen s = {.name = "t", RUNNING_ST, .workers = ALL4, .rdzv = CLOSED0};
    rm_tj tj;
    base_job(&tj, &s);
    static run_result r;
    run_once(&s, &tj, &r);
    CU_ASSERT_EQUAL(r.out.status.conditions[RM_COND_RUNNING].last_transition, 1);
    /* a failure flips Running to False: the time moves to now */
    s.workers = "0R 1R 2Fx1f999 3R";
    run_once(&s, &tj, &r);
    CU_ASSERT_EQUAL(r.out.status.conditions[RM_COND_RUNNING].last_transition, 1000);
    CU_ASSERT_EQUAL(r.out.status.conditions[RM_COND_RESTARTING].last_transition, 1000);
    CU_ASSERT_EQUAL(r.out.status.last_restart_time, 1000);
    CU_ASSERT_TRUE(r.out.status_changed);
    rm_tj_free(&tj);
}

static void test_progress_and_result_copied(void)
{
    scen s = {.name = "p", RUNNING_ST, .workers = ALL4, .rdzv = CLOSED0};
    rm_tj tj;
    base_job(&tj, &s);
    static run_result r;
    run_once(&s, &tj, &r);
    CU_ASSERT_EQUAL(r.out.status.progress.step, 100); /* rank 0 = worker 0: step 100 */
    CU_ASSERT_EQUAL(r.out.status.replicas, 4);
    CU_ASSERT_EQUAL(r.out.status.ready_replicas, 4);
    s.rdzv = CLOSED0 " result";
    run_once(&s, &tj, &r);
    CU_ASSERT_TRUE(r.out.status.result.present);
    CU_ASSERT_DOUBLE_EQUAL(r.out.status.result.test_accuracy, 0.9, 1e-9);
    CU_ASSERT_EQUAL(r.out.status.result.steps, 1000);
    CU_ASSERT_EQUAL(r.out.status.completion_time, 1000);
    rm_tj_free(&tj);
}

/* A language model's numbers (docs/models-and-data.md, "Shapes and status"): rank 0's tokens/s,
 * the evaluations with their steps and valLoss, the result's valLoss and tokens/s reach status and
 * its JSON; a change of one of them alone is a status change. */
static void lm_numbers(rm_rdzv_state *r)
{
    r->members[0].tokens_per_second = 65536;
    r->members[1].tokens_per_second = 1; /* not rank 0: not shown */
    rm_rdzv_eval_add(r->evals, &r->nevals, 1, 50, 0.30, 2.9, 2.70);
    rm_rdzv_eval_add(r->evals, &r->nevals, 1, 100, 0.35, 2.5, 2.40);
    rm_rdzv_eval_add(r->evals, &r->nevals, 2, 150, 0.40, 2.2, 2.10);
    if (r->have_result) {
        r->val_loss = 2.10;
        r->tokens_per_second = 250000;
    }
}

static void lm_numbers_old_worker(rm_rdzv_state *r)
{
    lm_numbers(r);
    r->val_loss = 0; /* a worker that predates result.valLoss: the newest evaluation's */
}

static void test_lm_numbers_projected(void)
{
    scen s = {.name = "lm", RUNNING_ST, .workers = ALL4, .rdzv = CLOSED0, .rdzv_more = lm_numbers};
    rm_tj tj;
    base_job(&tj, &s);
    static run_result r;
    run_once(&s, &tj, &r);
    const rm_tj_status *st = &r.out.status;
    CU_ASSERT_DOUBLE_EQUAL(st->progress.tokens_per_second, 65536, 0);
    CU_ASSERT_EQUAL_FATAL(st->progress.nevals, 3);
    CU_ASSERT_EQUAL(st->progress.evals[0].step, 50);
    CU_ASSERT_EQUAL(st->progress.evals[1].epoch, 1); /* two in epoch 1: keyed by step */
    CU_ASSERT_EQUAL(st->progress.evals[1].step, 100);
    CU_ASSERT_DOUBLE_EQUAL(st->progress.evals[2].val_loss, 2.10, 0);
    CU_ASSERT_FALSE(st->result.present);
    cJSON *j = rm_tj_status_to_json(st);
    CU_ASSERT_DOUBLE_EQUAL(rm_json_path(j, "progress.tokensPerSecond")->valuedouble, 65536, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_json_path(j, "progress.evaluations[1].step")->valuedouble, 100, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_json_path(j, "progress.evaluations[1].valLoss")->valuedouble, 2.40, 0);
    cJSON_Delete(j);

    /* fed back (the operator reads its own status): the same numbers are no change */
    tj.status = r.out.status;
    run_once(&s, &tj, &r);
    CU_ASSERT_EQUAL(r.out.status.progress.nevals, 3);
    CU_ASSERT_FALSE(r.out.status_changed);

    s.rdzv = CLOSED0 " result";
    run_once(&s, &tj, &r);
    st = &r.out.status;
    CU_ASSERT_TRUE(r.out.status_changed);
    CU_ASSERT_TRUE(st->result.present);
    CU_ASSERT_DOUBLE_EQUAL(st->result.val_loss, 2.10, 0);
    CU_ASSERT_DOUBLE_EQUAL(st->result.tokens_per_second, 250000, 0);
    j = rm_tj_status_to_json(st);
    CU_ASSERT_DOUBLE_EQUAL(rm_json_path(j, "result.valLoss")->valuedouble, 2.10, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_json_path(j, "result.tokensPerSecond")->valuedouble, 250000, 0);
    rm_tj_status back;
    memset(&back, 0, sizeof back);
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_tj_status_from_json(j, &back, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(back.result.val_loss, 2.10, 0);
    CU_ASSERT_DOUBLE_EQUAL(back.progress.tokens_per_second, 65536, 0);
    CU_ASSERT_EQUAL(back.progress.nevals, 3);
    CU_ASSERT_EQUAL(back.progress.evals[2].step, 150);
    cJSON_Delete(j);

    /* an older worker's result without valLoss: the newest evaluation's stands in */
    rm_tj tj2;
    s.rdzv_more = lm_numbers_old_worker;
    base_job(&tj2, &s);
    run_once(&s, &tj2, &r);
    CU_ASSERT_DOUBLE_EQUAL(r.out.status.result.val_loss, 2.10, 0);

    /* an MLP job (no tokens, no valLoss anywhere) leaves the keys out */
    s.rdzv_more = NULL;
    rm_tj tj3;
    base_job(&tj3, &s);
    run_once(&s, &tj3, &r);
    j = rm_tj_status_to_json(&r.out.status);
    CU_ASSERT_PTR_NULL(rm_json_path(j, "result.valLoss"));
    CU_ASSERT_PTR_NULL(rm_json_path(j, "result.tokensPerSecond"));
    CU_ASSERT_PTR_NULL(rm_json_path(j, "progress.tokensPerSecond"));
    cJSON_Delete(j);
    rm_tj_free(&tj);
    rm_tj_free(&tj2);
    rm_tj_free(&tj3);
}

/* The data fetch's progress (docs/models-and-data.md, "Fetch progress"): the rendezvous' report
 * becomes status.data {uri, bytes, totalBytes}; a change of it alone is a status change; it stays
 * when the report is gone (a later epoch); data that is not fetched gets none. */
static void fetching(rm_rdzv_state *r)
{
    r->data_bytes = 1000;
    r->data_total = 4000;
}

static void fetched(rm_rdzv_state *r)
{
    r->data_bytes = r->data_total = 4000;
}

static void test_data_progress(void)
{
    scen s = {.name = "d", RUNNING_ST, .workers = ALL4, .rdzv = CLOSED0, .rdzv_more = fetching};
    rm_tj tj;
    base_job(&tj, &s);
    tj.spec.training.data.uri = strdup("s3://data/tiny/");
    static run_result r;
    run_once(&s, &tj, &r);
    CU_ASSERT_TRUE(r.out.status_changed);
    CU_ASSERT_STRING_EQUAL(r.out.status.data.uri, "s3://data/tiny/");
    CU_ASSERT_EQUAL(r.out.status.data.bytes, 1000);
    CU_ASSERT_EQUAL(r.out.status.data.total_bytes, 4000);
    tj.status = r.out.status; /* fed back: no change */
    run_once(&s, &tj, &r);
    CU_ASSERT_FALSE(r.out.status_changed);
    s.rdzv_more = fetched;
    run_once(&s, &tj, &r);
    CU_ASSERT_TRUE(r.out.status_changed);
    CU_ASSERT_EQUAL(r.out.status.data.bytes, 4000);
    tj.status = r.out.status;
    s.rdzv_more = NULL; /* a new epoch: no report, the figures stay */
    run_once(&s, &tj, &r);
    CU_ASSERT_FALSE(r.out.status_changed);
    CU_ASSERT_EQUAL(r.out.status.data.total_bytes, 4000);
    rm_tj_free(&tj);

    s.rdzv_more = fetching; /* local data: nothing fetched, no status.data */
    base_job(&tj, &s);
    run_once(&s, &tj, &r);
    CU_ASSERT_STRING_EQUAL(r.out.status.data.uri, "");
    rm_tj_free(&tj);
}

/* The export (docs/models-and-data.md, "Shapes and status"): status.result.model comes from the
 * rendezvous' result; an export that failed leaves the job Succeeded with the condition
 * ExportFailing (reason ExportFailed, the worker's message) and one Warning event. */
static void model_exported(rm_rdzv_state *r)
{
    snprintf(r->model_uri, sizeof r->model_uri, "s3://models/run-1/model.safetensors");
    snprintf(r->model_sha256, sizeof r->model_sha256, "%064d", 5);
    r->model_bytes = 203912;
}

static void export_failed(rm_rdzv_state *r)
{
    snprintf(r->export_error, sizeof r->export_error,
             "spec.output.uri: 403 from s3://models/run-1/model.safetensors: access denied");
}

static void test_export_outcome(void)
{
    scen s = {
        .name = "ex", RUNNING_ST, .workers = ALL4, .rdzv = CLOSED0 " result", .rdzv_more = model_exported};
    rm_tj tj;
    base_job(&tj, &s);
    static run_result r;
    run_once(&s, &tj, &r);
    const rm_tj_status *st = &r.out.status;
    CU_ASSERT_EQUAL(st->phase, RM_PHASE_SUCCEEDED);
    CU_ASSERT_STRING_EQUAL(st->result.model_uri, "s3://models/run-1/model.safetensors");
    CU_ASSERT_EQUAL(st->result.model_bytes, 203912);
    CU_ASSERT_EQUAL(strlen(st->result.model_sha256), 64);
    CU_ASSERT_FALSE(st->conditions[RM_COND_EXPORT_FAILING].present);
    cJSON *j = rm_tj_status_to_json(st);
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "result.model.uri")->valuestring,
                           "s3://models/run-1/model.safetensors");
    CU_ASSERT_DOUBLE_EQUAL(rm_json_path(j, "result.model.bytes")->valuedouble, 203912, 0);
    cJSON_Delete(j);
    rm_tj_free(&tj);

    s.rdzv_more = export_failed;
    base_job(&tj, &s);
    run_once(&s, &tj, &r);
    st = &r.out.status;
    CU_ASSERT_EQUAL(st->phase, RM_PHASE_SUCCEEDED);
    CU_ASSERT_FALSE(st->result.model_uri[0]);
    const rm_condition *c = &st->conditions[RM_COND_EXPORT_FAILING];
    CU_ASSERT_TRUE(c->present && c->status);
    CU_ASSERT_STRING_EQUAL(c->reason, "ExportFailed");
    CU_ASSERT_STRING_EQUAL(c->message,
                           "spec.output.uri: 403 from s3://models/run-1/model.safetensors: access denied");
    int warnings = 0;
    for (size_t i = 0; i < r.out.nactions; i++)
        if (r.out.actions[i].type == RM_ACT_EVENT && r.out.actions[i].warning &&
            !strcmp(r.out.actions[i].reason, "ExportFailing"))
            warnings++;
    CU_ASSERT_EQUAL(warnings, 1);
    j = rm_tj_status_to_json(st);
    rm_tj_status back;
    memset(&back, 0, sizeof back);
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_tj_status_from_json(j, &back, &e), RM_OK);
    CU_ASSERT_TRUE(back.conditions[RM_COND_EXPORT_FAILING].status);
    cJSON_Delete(j);
    /* fed back: no second event, no change */
    tj.status = r.out.status;
    run_once(&s, &tj, &r);
    CU_ASSERT_FALSE(r.out.status_changed);
    for (size_t i = 0; i < r.out.nactions; i++)
        CU_ASSERT_FALSE(r.out.actions[i].type == RM_ACT_EVENT &&
                        !strcmp(r.out.actions[i].reason, "ExportFailing"));
    rm_tj_free(&tj);
}

/* R12: a pod that cannot start sets Blocked with its cause and a Warning event once; the same
 * observation again changes nothing; another cause is a new event; a started pod clears it. */
static void test_blocked(void)
{
    scen s = {.name = "blk",
              .phase = RM_PHASE_PENDING,
              .conds = CREATED_,
              .epoch = 1,
              .start_time = 500,
              .workers = "0P 1P 2P 3P",
              .rdzv = "1 O",
              .waiting = "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.",
              .wait_index = 2};
    rm_tj tj;
    base_job(&tj, &s);
    static run_result r;
    run_once(&s, &tj, &r);
    const rm_condition *c = &r.out.status.conditions[RM_COND_BLOCKED];
    CU_ASSERT_TRUE(c->present && c->status);
    CU_ASSERT_STRING_EQUAL(c->reason, "Unschedulable");
    CU_ASSERT_STRING_EQUAL(
        c->message, "worker 2 cannot start: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.");
    int ev = 0;
    for (size_t i = 0; i < r.out.nactions; i++)
        ev += r.out.actions[i].type == RM_ACT_EVENT && r.out.actions[i].warning &&
              !strcmp(r.out.actions[i].reason, "Unschedulable");
    CU_ASSERT_EQUAL(ev, 1);
    CU_ASSERT_NOT_EQUAL(r.out.status.phase, RM_PHASE_FAILED); /* the cause may be fixed */
    tj.status = r.out.status; /* the same observation: no write, no second event */
    run_once(&s, &tj, &r);
    CU_ASSERT_FALSE(r.out.status_changed);
    for (size_t i = 0; i < r.out.nactions; i++)
        CU_ASSERT_FALSE(r.out.actions[i].type == RM_ACT_EVENT);
    s.waiting = "ImagePullBackOff: Back-off pulling image \"ringmaster/worker:nope\"";
    tj.status = r.out.status;
    run_once(&s, &tj, &r);
    CU_ASSERT_STRING_EQUAL(r.out.status.conditions[RM_COND_BLOCKED].reason, "ImagePullFailed");
    ev = 0;
    for (size_t i = 0; i < r.out.nactions; i++)
        ev += r.out.actions[i].type == RM_ACT_EVENT && !strcmp(r.out.actions[i].reason, "ImagePullFailed");
    CU_ASSERT_EQUAL(ev, 1);
    s.waiting = "CreateContainerConfigError: secret \"s3-creds\" not found";
    tj.status = r.out.status;
    run_once(&s, &tj, &r);
    CU_ASSERT_STRING_EQUAL(r.out.status.conditions[RM_COND_BLOCKED].reason, "ContainerConfigError");
    s.waiting = NULL; /* started: cleared */
    s.workers = ALL4;
    tj.status = r.out.status;
    run_once(&s, &tj, &r);
    c = &r.out.status.conditions[RM_COND_BLOCKED];
    CU_ASSERT_TRUE(c->present && !c->status);
    CU_ASSERT_STRING_EQUAL(c->reason, "PodsStarting");
    rm_tj_free(&tj);

    /* held by its queue (Kueue suspended it; no pods): the queue's word is the reason, a Normal event */
    scen q = {.name = "kq",
              .phase = RM_PHASE_SUSPENDED,
              .conds = CREATED_,
              .epoch = 1,
              .suspend = true,
              .workers = "",
              .queued =
                  "QueuedByKueue: Workload kq-1 in queue team-a is not admitted: couldn't assign flavors"};
    base_job(&tj, &q);
    run_once(&q, &tj, &r);
    c = &r.out.status.conditions[RM_COND_BLOCKED];
    CU_ASSERT_TRUE(c->present && c->status);
    CU_ASSERT_STRING_EQUAL(c->reason, "QueuedByKueue");
    CU_ASSERT_STRING_EQUAL(c->message,
                           "Workload kq-1 in queue team-a is not admitted: couldn't assign flavors");
    ev = 0;
    for (size_t i = 0; i < r.out.nactions; i++)
        ev += r.out.actions[i].type == RM_ACT_EVENT && !r.out.actions[i].warning &&
              !strcmp(r.out.actions[i].reason, "QueuedByKueue");
    CU_ASSERT_EQUAL(ev, 1);
    rm_tj_free(&tj);
}

static void test_start_time_set_on_first_create(void)
{
    scen s = {.name = "st", .rdzv_desired = -1, .now = 1234};
    rm_tj tj;
    base_job(&tj, &s);
    static run_result r;
    run_once(&s, &tj, &r);
    CU_ASSERT_EQUAL(r.out.status.start_time, 1234);
    rm_tj_free(&tj);
}

static void test_action_array_too_small(void)
{
    scen s = {.name = "small", .rdzv_desired = -1};
    rm_tj tj;
    base_job(&tj, &s);
    rm_action acts[2];
    rm_reconcile_in in = {.job = &tj, .now = 1000};
    rm_reconcile_out out = {.actions = acts, .cap = 2};
    CU_ASSERT_EQUAL(rm_reconcile(&in, &out), RM_ETOOBIG);
    CU_ASSERT_EQUAL(out.nactions, 2);
    CU_ASSERT_EQUAL(rm_reconcile(NULL, &out), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_reconcile(&in, NULL), RM_EINVAL);
    rm_tj_free(&tj);
}

/* ------------------------------------------------------------------ simulation
 * A tiny world: processes per index and a rendezvous that closes when everyone present joined.
 * Actions are applied as a runtime would; the clock advances 0.2 s per tick. */
typedef struct world {
    rm_observed_worker w[T_MAXW];
    bool alive[T_MAXW];
    int mepoch[T_MAXW]; /* epoch index i last joined (0 = never); kept after death */
    rm_rdzv_state rz;
    int rdzv_desired, rdzv_min;
    double now;
    int creates, deletes, restarts_applied;
} world;

static void world_apply(world *wd, const rm_reconcile_out *o)
{
    for (size_t i = 0; i < o->nactions; i++) {
        const rm_action *a = &o->actions[i];
        switch (a->type) {
        case RM_ACT_CREATE_WORKER: {
            rm_observed_worker *w = &wd->w[a->index];
            memset(w, 0, sizeof *w);
            w->index = a->index;
            w->phase = RM_WORKER_RUNNING;
            w->ready = true;
            w->node_ready = true;
            w->created_at = wd->now;
            w->epoch_label = a->epoch;
            wd->alive[a->index] = true;
            wd->creates++;
            break;
        }
        case RM_ACT_DELETE_WORKER:
            wd->alive[a->index] = false;
            memset(&wd->w[a->index], 0, sizeof wd->w[a->index]);
            wd->deletes++;
            break;
        case RM_ACT_RESTART_GROUP:
            if (a->epoch == wd->rz.epoch) {
                wd->rz.epoch++;
                wd->rz.closed = false;
                wd->rz.world_size = 0;
                wd->restarts_applied++;
            }
            break;
        case RM_ACT_SET_RDZV:
            wd->rdzv_desired = a->desired;
            wd->rdzv_min = a->min;
            break;
        default:
            break;
        }
    }
}

/* Alive running workers join the open round; it closes when `desired` joined; members of the
 * closed round progress every tick. Member entries outlive their process (as in common/rdzv.c). */
static void world_step(world *wd, int nidx)
{
    rm_rdzv_state *r = &wd->rz;
    int joined = 0;
    for (int i = 0; i < nidx; i++) {
        if (wd->alive[i] && wd->w[i].phase == RM_WORKER_RUNNING && !r->closed)
            wd->mepoch[i] = r->epoch;
        joined += wd->mepoch[i] == r->epoch;
    }
    if (!r->closed && wd->rdzv_desired > 0 && joined >= wd->rdzv_desired) {
        r->closed = true;
        r->closed_at = wd->now;
        r->world_size = joined;
    }
    r->nmembers = 0;
    int rank = 0;
    for (int i = 0; i < nidx; i++) {
        if (!wd->mepoch[i])
            continue;
        rm_rdzv_member *m = &r->members[r->nmembers++];
        memset(m, 0, sizeof *m);
        snprintf(m->worker_id, sizeof m->worker_id, "%d", i);
        m->epoch = wd->mepoch[i];
        m->rank = r->closed && m->epoch == r->epoch ? rank++ : -1;
        bool progressing = wd->alive[i] && wd->w[i].phase == RM_WORKER_RUNNING;
        m->last_progress = progressing ? wd->now : 1;
        m->last_report = m->last_progress;
    }
}

static int world_obs(world *wd, int nidx, rm_observed_worker *out)
{
    int n = 0;
    for (int i = 0; i < nidx; i++)
        if (wd->alive[i])
            out[n++] = wd->w[i];
    return n;
}

/* One controller pass over the simulated world of 4 indices: the round moves on, the core sees
 * the live workers, its status is adopted and its actions applied. Returns the restart count
 * from before the pass. */
static int world_tick(world *wd, rm_tj *tj, run_result *r)
{
    rm_observed_worker obs[T_MAXW];
    world_step(wd, 4);
    int n = world_obs(wd, 4, obs);
    rm_reconcile_in in = {.job = tj,
                          .workers = obs,
                          .nworkers = (size_t)n,
                          .rdzv = &wd->rz,
                          .rdzv_desired = wd->rdzv_desired,
                          .rdzv_min = wd->rdzv_min,
                          .now = wd->now};
    memset(&r->out, 0, sizeof r->out);
    r->out.actions = r->acts;
    r->out.cap = RM_ARRAY_LEN(r->acts);
    CU_ASSERT_EQUAL_FATAL(rm_reconcile(&in, &r->out), RM_OK);
    int before = tj->status.restarts;
    tj->status = r->out.status;
    world_apply(wd, &r->out);
    return before;
}

static void test_simulated_failures(void)
{
    scen s = {.name = "sim"};
    rm_tj tj;
    base_job(&tj, &s);
    tj.spec.restart.max_restarts = 3;
    tj.spec.restart.backoff_seconds = 1;
    static world wd;
    memset(&wd, 0, sizeof wd);
    wd.rz.epoch = 1;
    wd.now = 1000;
    static run_result r;
    double kills[] = {1010, 1020, 1030}; /* worker deaths: ranks 1, 2, 3 */
    int next_kill = 0;
    double restart_at[4] = {0};
    for (int tick = 0; tick < 400; tick++, wd.now += 0.2) {
        if (next_kill < 3 && wd.now >= kills[next_kill]) {
            int idx = next_kill + 1;
            wd.w[idx].phase = RM_WORKER_FAILED;
            wd.w[idx].exit_code = 1;
            wd.w[idx].finished_at = wd.now;
            next_kill++;
        }
        if (tick == 300) { /* (the round's step does not touch the result) */
            wd.rz.have_result = true;
            wd.rz.test_accuracy = 0.89;
        }
        int before = world_tick(&wd, &tj, &r);
        if (tj.status.restarts != before)
            restart_at[tj.status.restarts] = wd.now;
        if (tj.status.phase == RM_PHASE_SUCCEEDED)
            break;
    }
    CU_ASSERT_EQUAL(tj.status.phase, RM_PHASE_SUCCEEDED);
    CU_ASSERT_EQUAL(tj.status.restarts, 3);
    CU_ASSERT_EQUAL(wd.restarts_applied, 3);
    CU_ASSERT_EQUAL(wd.creates, 4 + 3); /* only the failed workers were replaced */
    CU_ASSERT_TRUE(restart_at[1] >= 1010 && restart_at[1] < 1010.5); /* first: no back-off */
    CU_ASSERT_TRUE(restart_at[2] >= 1020 && restart_at[2] < 1020.5); /* spaced > 1 s */
    CU_ASSERT_DOUBLE_EQUAL(tj.status.result.test_accuracy, 0.89, 1e-9);
    rm_tj_free(&tj);
}

static void test_simulated_crash_loop(void)
{
    scen s = {.name = "loop"};
    rm_tj tj;
    base_job(&tj, &s);
    tj.spec.restart.max_restarts = 4;
    tj.spec.restart.backoff_seconds = 1;
    static world wd;
    memset(&wd, 0, sizeof wd);
    wd.rz.epoch = 1;
    wd.now = 1000;
    static run_result r;
    double restart_at[8] = {0};
    for (int tick = 0; tick < 500; tick++, wd.now += 0.1) {
        /* worker 2 dies 0.3 s after every start */
        if (wd.alive[2] && wd.w[2].phase == RM_WORKER_RUNNING && wd.now - wd.w[2].created_at >= 0.3) {
            wd.w[2].phase = RM_WORKER_FAILED;
            wd.w[2].exit_code = 2;
            wd.w[2].finished_at = wd.now;
        }
        int before = world_tick(&wd, &tj, &r);
        if (tj.status.restarts != before && tj.status.restarts < 8)
            restart_at[tj.status.restarts] = wd.now;
        if (tj.status.phase == RM_PHASE_FAILED)
            break;
    }
    CU_ASSERT_EQUAL(tj.status.phase, RM_PHASE_FAILED);
    CU_ASSERT_EQUAL(tj.status.restarts, 4);
    CU_ASSERT_STRING_EQUAL(tj.status.conditions[RM_COND_FAILED].reason, "BackoffLimitExceeded");
    /* doubling: gaps >= 1, 2, 4 s */
    CU_ASSERT_TRUE(restart_at[2] - restart_at[1] >= 1 - 1e-6);
    CU_ASSERT_TRUE(restart_at[3] - restart_at[2] >= 2 - 1e-6);
    CU_ASSERT_TRUE(restart_at[4] - restart_at[3] >= 4 - 1e-6);
    CU_ASSERT_TRUE(restart_at[4] - restart_at[3] < 4.5);
    rm_tj_free(&tj);
}

void rm_suite_reconcile(void)
{
    static const rm_test_case cases[] = {
        {"scenario table (each row also checked for idempotence)", test_table},
        {"lastTransitionTime moves only on a flip", test_transition_time_only_on_flip},
        {"progress and result copied from the rendezvous", test_progress_and_result_copied},
        {"valLoss, tokens/s and stepped evaluations reach status", test_lm_numbers_projected},
        {"result.model and ExportFailing from the export", test_export_outcome},
        {"status.data from the fetch's report", test_data_progress},
        {"startTime set on first creation", test_start_time_set_on_first_create},
        {"a pod that cannot start: Blocked with its cause", test_blocked},
        {"action array too small / bad args", test_action_array_too_small},
        {"simulation: three failures -> Succeeded, restarts 3", test_simulated_failures},
        {"simulation: crash loop -> doubling back-off -> BackoffLimitExceeded", test_simulated_crash_loop},
    };
    RM_ADD_SUITE("reconcile", NULL, NULL, cases);
}
