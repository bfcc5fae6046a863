/* reporter.c — the trainer's progress reporter: a thread with its own rendezvous client that sends
 * the latest step snapshot about every second and brings back the rendezvous' answer (rejoin,
 * stop), so a slow controller never stalls a step (trainer.h). */
#include "worker/trainer.h"

/* ---------------- reporting ---------------- */

/* Tokens in one sample: a language model's row is label_row tokens (docs/models-and-data.md,
 * "Shapes and status": tokens/s = samples/s x tokens per row); the MLP reports no tokens. */
static double tokens_per_row(const trainer *t)
{
    return t->m.family && t->m.family->name && strcmp(t->m.family->name, "gpt") == 0 ? t->m.label_row : 0;
}

/* One polling join of the group being re-formed in the background (reporter.detached): the
 * round closed -> hand it to the training thread; still open and settled -> the joiners are the
 * workers alive (what parameter servers proceed with). Reporter thread, outside mu. */
static void regroup_poll(reporter *r)
{
    int from = atomic_load(&r->regroup_from);
    if (from <= 0)
        return;
    rm_rdzv_round rr;
    int joined = 0;
    bool settled = false;
    rm_err e = {0};
    int rc = rm_rdzv_join_poll(r->client, r->my_addr, from, 0, &rr, &joined, &settled, &e);
    if ((rc == RM_OK || rc == RM_EAGAIN) && rr.epoch > from)
        atomic_store(&r->joining_epoch, rr.epoch);
    if (rc == RM_OK) {
        atomic_store(&r->new_rank, rr.rank);
        atomic_store(&r->new_world, rr.world_size);
        atomic_store(&r->new_epoch, rr.epoch);
        atomic_store(&r->view, RM_STEP_VIEW(rr.epoch, rr.world_size));
        atomic_store(&r->regroup_from, 0);
        rm_info("group re-formed in the background epoch=%d world=%d rank=%d", rr.epoch, rr.world_size,
                rr.rank);
        rm_rdzv_round_free(&rr);
    } else if (rc == RM_EAGAIN) {
        long long v = atomic_load(&r->view);
        if (settled && joined > 0 && rr.epoch > 0 && v != RM_STEP_VIEW(rr.epoch, joined)) {
            atomic_store(&r->view, RM_STEP_VIEW(rr.epoch, joined));
            rm_info("the workers alive settled while the group re-forms epoch=%d live=%d", rr.epoch, joined);
        }
    } else if (rc == RM_ECLOSED) {
        atomic_store(&r->action_epoch, from);
        atomic_store(&r->action, R_STOP);
    } else {
        rm_warn("background re-join failed, retrying err=\"%s\"", e.msg);
    }
}

static void *reporter_main(void *arg)
{
    reporter *r = arg;
    double last_t = 0;
    int64_t last_samples = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->quit) {
        /* re-joining: poll four times a second */
        struct timespec ts = rm_mono_ts_in(atomic_load(&r->regroup_from) > 0 ? 0.25 : 1.0);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->quit)
            break;
        if (!r->active)
            continue;
        double now = rm_mono();
        if (last_t > 0 && now > last_t && r->samples >= last_samples)
            r->last_rate = (double)(r->samples - last_samples) / (now - last_t);
        last_t = now;
        last_samples = r->samples;
        rm_rdzv_report rep = r->snap;
        rep.samples_per_second = r->last_rate;
        rep.tokens_per_second = r->last_rate * r->tokens_per_row;
        char ckpt_err[sizeof r->ckpt_err]; /* the report is sent after the unlock */
        memcpy(ckpt_err, r->ckpt_err, sizeof ckpt_err);
        rep.checkpoint_error = ckpt_err;
        pthread_mutex_unlock(&r->mu);

        if (!r->client) { /* alone: only the samples/s figure */
            pthread_mutex_lock(&r->mu);
            continue;
        }
        if (atomic_load(&r->regroup_from) > 0)
            regroup_poll(r);
        if (r->detached) { /* report the round joined in the background, not the one left */
            int je = atomic_load(&r->joining_epoch), ne = atomic_load(&r->new_epoch);
            if (ne > rep.epoch) {
                rep.epoch = ne;
                rep.rank = atomic_load(&r->new_rank);
            } else if (atomic_load(&r->regroup_from) > 0 && je > rep.epoch) {
                rep.epoch = je;
            }
        }
        rm_rdzv_action act = RM_RDZV_CONTINUE;
        int cur = 0;
        rm_err e = {0};
        int rc = rm_rdzv_send_report(r->client, &rep, &act, &cur, &e);
        if (rc == RM_ECLOSED)
            act = RM_RDZV_STOP;
        else if (rc)
            rm_warn("report failed err=\"%s\"", e.msg);
        if (rc == RM_OK || rc == RM_ECLOSED) {
            if (act == RM_RDZV_REJOIN && r->detached) {
                if (atomic_load(&r->regroup_from) == 0) {
                    rm_info("rendezvous moved on; re-joining in the background, training goes on "
                            "epoch=%d current=%d",
                            rep.epoch, cur);
                    atomic_store(&r->regroup_from, rep.epoch);
                    regroup_poll(r);
                }
            } else if (act == RM_RDZV_STOP || act == RM_RDZV_REJOIN) {
                if (act == RM_RDZV_REJOIN)
                    rm_info("rendezvous moved on; rejoining epoch=%d current=%d", rep.epoch, cur);
                atomic_store(&r->action_epoch, rep.epoch);
                atomic_store(&r->action, act == RM_RDZV_STOP ? R_STOP : R_REJOIN);
            }
        }
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int rm_tr_reporter_start(trainer *t, rm_err *err)
{
    reporter *r = &t->rp;
    pthread_mutex_init(&r->mu, NULL);
    rm_mono_cond_init(&r->cv);
    r->inited = true;
    /* workers that never talk to each other re-form in the background (see reporter) */
    r->detached = t->strat->claim && t->cfg->rdzv_url && !t->cfg->static_peers &&
                  !rm_tr_backend_is(t->cfg, RM_BACKEND_MPI);
    r->my_addr = t->my_addr;
    if (t->cfg->rdzv_url)
        RM_CHECK(rm_tr_rdzv_client_make(t->cfg, &r->client, err));
    if (pthread_create(&r->th, NULL, reporter_main, r) != 0)
        return rm_errf(err, RM_ERR, "reporter thread: cannot start");
    r->started = true;
    return RM_OK;
}

void rm_tr_reporter_stop(trainer *t)
{
    reporter *r = &t->rp;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->quit = true;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        r->started = false;
    }
    rm_rdzv_client_free(r->client);
    r->client = NULL;
    if (r->inited) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        r->inited = false;
    }
}

/* Publish the training state (every step; no allocation). */
void rm_tr_reporter_publish(trainer *t, bool active)
{
    reporter *r = &t->rp;
    pthread_mutex_lock(&r->mu);
    r->active = active;
    r->snap.epoch = t->rdzv_epoch;
    r->snap.rank = t->rank;
    r->snap.train_epoch = t->train_epoch;
    r->snap.step = t->step;
    r->snap.last_checkpoint_step = t->last_ckpt_step > 0 ? t->last_ckpt_step : 0;
    r->snap.loss = t->train_loss;
    r->snap.allreduce_gbps = t->ar_gbps;
    r->snap.checkpoint_failures = t->ckpt_failures;
    const rm_rdzv_eval *last = t->nevals > 0 ? &t->evals[t->nevals - 1] : NULL,
                       *had = r->snap.nevals > 0 ? &r->snap.evals[r->snap.nevals - 1] : NULL;
    /* copied only when it changed (publish runs every step): a new evaluation is a new last
     * entry, whether the list grew or, full, dropped its oldest */
    if (r->snap.nevals != t->nevals ||
        (last && (last->step != had->step || last->epoch != had->epoch ||
                  last->test_accuracy != had->test_accuracy || last->val_loss != had->val_loss))) {
        memcpy(r->snap.evals, t->evals, (size_t)t->nevals * sizeof t->evals[0]);
        r->snap.nevals = t->nevals;
    }
    if (strcmp(r->ckpt_err, t->ckpt_err) != 0)
        memcpy(r->ckpt_err, t->ckpt_err, sizeof r->ckpt_err);
    r->samples = t->samples_local;
    r->tokens_per_row = tokens_per_row(t);
    t->rate = r->last_rate;
    pthread_mutex_unlock(&r->mu);
    rm_series_set(t->wm.samples_per_s, t->rate); /* this thread re-labels: current rank's series */
    if (last)
        rm_series_set(t->wm.val_loss, last->val_loss);
    if (tokens_per_row(t) > 0)
        rm_wmetrics_set_tokens_per_second(&t->wm, t->rate * tokens_per_row(t));
}

/* Report now rather than within the next second: a round's first report is how the controller
 * knows the group trains again (recovery time), and a short round must not go unreported. */
void rm_tr_reporter_kick(trainer *t)
{
    reporter *r = &t->rp;
    if (!r->inited)
        return;
    pthread_mutex_lock(&r->mu);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* What the reporter heard for the current round: 0, R_REJOIN or R_STOP. */
int rm_tr_reporter_action(trainer *t)
{
    int a = atomic_load(&t->rp.action);
    if (a == R_STOP)
        return R_STOP;
    if (a == R_REJOIN && atomic_load(&t->rp.action_epoch) == t->rdzv_epoch)
        return R_REJOIN;
    return 0;
}

/* Synchronous report from the training thread: used for the final "done" (with the result). */
int rm_tr_report(trainer *t, bool done)
{
    if (!t->rdzv)
        return 0; /* continue */
    rm_rdzv_report rep = {
        .epoch = t->rdzv_epoch,
        .rank = t->rank,
        .train_epoch = t->train_epoch,
        .step = t->step,
        .last_checkpoint_step = t->last_ckpt_step > 0 ? t->last_ckpt_step : 0,
        .loss = t->train_loss,
        .samples_per_second = t->rate,
        .tokens_per_second = t->rate * tokens_per_row(t),
        .allreduce_gbps = t->ar_gbps,
        .done = done,
        .checkpoint_failures = t->ckpt_failures,
        .checkpoint_error = t->ckpt_err,
        .mem_params = (double)t->mem.params,
        .mem_grads = (double)t->mem.grads,
        .mem_optimizer = (double)t->mem.optimizer,
        .mem_activations = (double)t->mem.activations,
        .peak_rss = t->peak_rss,
    };
    memcpy(rep.evals, t->evals, (size_t)t->nevals * sizeof t->evals[0]);
    rep.nevals = t->nevals;
    if (done) {
        int rslot, rslots; /* the group's samples: each data-parallel slice once */
        rm_tr_data_slot(t, &rslot, &rslots);
        rep.have_result = true;
        rep.test_accuracy = t->test_acc;
        rep.train_loss = t->train_loss;
        rep.seconds = t->train_seconds;
        rep.result_samples_per_second =
            t->train_seconds > 0 ? (double)t->samples_local * rslots / t->train_seconds : 0;
        rep.result_tokens_per_second = rep.result_samples_per_second * tokens_per_row(t);
        rep.val_loss = t->eval_step >= 0 ? t->test_loss : 0; /* the final evaluation's */
        rep.result_steps = t->step;
        rep.model_uri = t->export_uri;
        rep.model_sha256 = t->export_sha256;
        rep.model_bytes = (double)t->export_bytes;
        rep.export_error = t->export_err;
    }
    rm_rdzv_action act = RM_RDZV_CONTINUE;
    int cur = 0;
    rm_err e = {0};
    int rc = rm_rdzv_send_report(t->rdzv, &rep, &act, &cur, &e);
    if (rc == RM_ECLOSED)
        return R_STOP;
    if (rc) {
        rm_warn("report failed err=\"%s\"", e.msg);
        return 0;
    }
    if (act == RM_RDZV_STOP)
        return R_STOP;
    if (act == RM_RDZV_REJOIN && !done) {
        rm_info("rendezvous moved on; rejoining epoch=%d current=%d", t->rdzv_epoch, cur);
        return R_REJOIN;
    }
    return 0;
}
