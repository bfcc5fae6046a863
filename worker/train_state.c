/* train_state.c — the trainer's state: fresh, restored from the newest usable checkpoint (whole,
 * sharded or a pipeline stage's range) or made equal to rank 0's; and the checkpoint writer, which
 * takes a copy of the state between steps and writes it off the critical path (trainer.h). */
#include "worker/trainer.h"
#include "worker/model/output.h"

/* ---------------- state: fresh, checkpoint, sync ---------------- */

void rm_tr_state_fresh(trainer *t, rm_err *err)
{
    t->strat->state_fresh(t->st, t->cfg->t.seed, err);
    t->step = 0;
    t->train_epoch = 0;
    t->data_pos = 0;
    t->eval_step = -1;
}

static void ckpt_expect(const trainer *t, rm_ckpt_meta *e)
{
    memset(e, 0, sizeof *e);
    e->shape = t->m.shape;
    e->opt_type = (int32_t)t->cfg->t.optimizer.type;
    e->nstate = t->opt.nstate;
    e->nparams = t->m.nparams;
}

static bool state_sharded(const trainer *t)
{
    return t->strat->state_sharded && t->strat->state_sharded(t->st);
}

/* Neither a whole checkpoint nor a set could be used: say why when some were skipped as invalid
 * (state_load, state_load_layers). */
static void warn_unusable(int skipped, int sskipped, const rm_err *e, const rm_err *se)
{
    if (skipped || sskipped)
        rm_warn("no usable checkpoint reason=\"%s%s%s\"", e->msg, sskipped ? "; " : "",
                sskipped ? se->msg : "");
}

/* The schedule position of a loaded checkpoint. A checkpoint is written after its step and before
 * that step's end-of-epoch evaluation (which runs at the top of the next iteration), so a restored
 * position has its evaluation still ahead of it — whatever this process remembers having
 * evaluated before the failure. */
static void take_position(trainer *t, const rm_ckpt_meta *meta)
{
    t->step = meta->step;
    t->train_epoch = meta->train_epoch;
    t->data_pos = meta->data_pos;
    t->last_ckpt_step = meta->step;
    t->eval_step = -1;
}

static int state_load_layers(trainer *t, int u0, int u1);

/* Every rank reads the newest valid checkpoint (if any): a whole one (ckpt-*.rmck) or a sharded
 * set (worker/checkpoint/ckpt_shard.h), whichever is newer; a sharded set is re-sharded for this round
 * (sharded strategy: this rank of this world; otherwise world 1, the whole payload). Every rank
 * sees the same files and verifies every shard, so all choose the same checkpoint. Returns 1 if
 * loaded, 0 if none. */
int rm_tr_state_load(trainer *t)
{
    if (!t->cfg->checkpoint_dir || !t->strat->state_restore)
        return 0; /* a strategy whose state lives elsewhere (the servers') loads nothing here */
    int u0, u1;
    if (t->strat->restore_layers && t->strat->restore_layers(t->st, &u0, &u1))
        return state_load_layers(t, u0, u1);
    rm_ckpt_meta exp, meta, smeta;
    ckpt_expect(t, &exp);
    char path[4200];
    int skipped = 0, sskipped = 0;
    rm_err e = {0}, se = {0};
    bool whole = rm_ckpt_load_newest(t->cfg->checkpoint_dir, &exp, &meta, t->host_stage, t->stage_bytes, path,
                                     sizeof path, &skipped, &e) == RM_OK;
    /* a newer sharded set replaces it (loaded aside: host_stage keeps the whole one until then) */
    bool sharded = state_sharded(t);
    int nw = sharded ? t->world : 1, nr = sharded ? t->rank : 0;
    rm_ckpt_units units = {t->m.nunits, t->m.unit_off, t->m.unit_len};
    size_t need = rm_ckpt_shard_dst_bytes(&units, t->opt.nstate, nw, nr);
    void *buf = need <= t->stage_bytes ? malloc(need ? need : 1) : NULL;
    char spath[4200];
    bool set =
        buf && rm_ckpt_shard_load_newest(t->cfg->checkpoint_dir, &exp, &units, nw, nr, whole ? meta.step : -1,
                                         buf, need, &smeta, spath, sizeof spath, &sskipped, &se) == RM_OK;
    if (set) {
        memcpy(t->host_stage, buf, need);
        meta = smeta;
        snprintf(path, sizeof path, "%s", spath);
    }
    free(buf);
    if (!whole && !set) {
        warn_unusable(skipped, sskipped, &e, &se);
        return 0;
    }
    if (set && sharded)
        t->strat->state_restore_shard(t->st, t->host_stage, meta.opt_t, meta.loss_scale, meta.scaler_tracker);
    else /* a whole payload (a file, or a set re-sharded to world 1) */
        t->strat->state_restore(t->st, t->host_stage, meta.opt_t, meta.loss_scale, meta.scaler_tracker);
    take_position(t, &meta);
    rm_info("checkpoint loaded path=%s step=%lld train_epoch=%d data_pos=%lld written_world=%d "
            "sharded=%s resharded_to=%d skipped_invalid=%d",
            path, (long long)meta.step, meta.train_epoch, (long long)meta.data_pos, meta.world_size,
            set ? "yes" : "no", set ? nw : 0, skipped + sskipped);
    return 1;
}

/* state_load for a rank that restores layers [u0, u1) only (worker/step.h restore_layers: a
 * pipeline stage): the same choice of checkpoint (a whole one or a set, whichever is newer; every
 * file verified in full), but only the range is kept, in host_stage's first bytes (the range's
 * size: the rest of host_stage is never touched, so the peak resident set stays the stage's). */
static int state_load_layers(trainer *t, int u0, int u1)
{
    rm_ckpt_meta exp, meta, smeta;
    ckpt_expect(t, &exp);
    rm_ckpt_units units = {t->m.nunits, t->m.unit_off, t->m.unit_len};
    size_t need = rm_ckpt_layers_bytes(&units, t->opt.nstate, u0, u1);
    if (need == 0 || need > t->stage_bytes) {
        rm_warn("checkpoint: cannot restore layers [%d, %d) of %d", u0, u1, units.n);
        return 0;
    }
    const char *dir = t->cfg->checkpoint_dir;
    char path[4200], spath[4200];
    int skipped = 0, sskipped = 0;
    rm_err e = {0}, se = {0};
    bool whole = rm_ckpt_whole_load_layers(dir, &exp, &units, u0, u1, t->host_stage, need, &meta, path,
                                           sizeof path, &skipped, &e) == RM_OK;
    /* a newer set replaces it (loaded aside while host_stage holds the whole file's range) */
    void *buf = whole ? malloc(need) : t->host_stage;
    bool set = buf && rm_ckpt_set_load_layers(dir, &exp, &units, u0, u1, whole ? meta.step : -1, buf, need,
                                              &smeta, spath, sizeof spath, &sskipped, &se) == RM_OK;
    if (set) {
        if (buf != t->host_stage)
            memcpy(t->host_stage, buf, need);
        meta = smeta;
        snprintf(path, sizeof path, "%s", spath);
    }
    if (buf != t->host_stage)
        free(buf);
    if (!whole && !set) {
        warn_unusable(skipped, sskipped, &e, &se);
        return 0;
    }
    t->strat->state_restore_layers(t->st, t->host_stage, meta.opt_t, meta.loss_scale, meta.scaler_tracker);
    take_position(t, &meta);
    rm_info("checkpoint loaded path=%s step=%lld train_epoch=%d data_pos=%lld written_world=%d "
            "sharded=%s layers=%d-%d bytes=%zu skipped_invalid=%d",
            path, (long long)meta.step, meta.train_epoch, (long long)meta.data_pos, meta.world_size,
            set ? "yes" : "no", u0, u1, need, skipped + sskipped);
    return 1;
}

/* Every rank takes rank 0's state and schedule position (the strategy's state_sync): step, data
 * cursor, last checkpoint and whether this step's end-of-epoch evaluation is done, so after a
 * round forms no rank acts on what it remembers from before (docs/architecture.md#failures-and-restarts: a survivor that skipped an
 * evaluation its replacement ran desynchronised the ring forever). */
int rm_tr_state_sync(trainer *t, rm_err *err)
{
    rm_step_pos pos = {
        .step = t->step,
        .data_pos = t->data_pos,
        .last_ckpt_step = t->last_ckpt_step,
        .train_epoch = t->train_epoch,
        .eval_done = t->eval_step == t->step,
    };
    RM_CHECK(t->strat->state_sync(t->st, &pos, err));
    t->step = pos.step;
    t->data_pos = pos.data_pos;
    t->last_ckpt_step = pos.last_ckpt_step;
    t->train_epoch = pos.train_epoch;
    t->eval_step = pos.eval_done ? t->step : -1;
    return RM_OK;
}

/* ---------------- checkpoints, off the critical path ----------------
 * At a checkpoint step the training thread snapshots the strategy's state into host_stage (a
 * memcpy, or a device-to-host copy) with its metadata and hands it to the writer thread, which
 * does rm_ckpt_write's write + fsync + rename + prune, then the checkpoint's JSON manifest
 * (worker/checkpoint/manifest.h; a set's comes from ckpt_shard.c), while the next steps run. The
 * training thread waits only when the previous write has not finished by the next checkpoint, before a
 * round loads checkpoints (rank 0's newest write must be on disk first) and at exit (SIGTERM,
 * done). host_stage belongs to the writer from the hand-off until the result is collected. A
 * write counts (last_ckpt_step, reports, metrics) only once it is complete and renamed: nothing
 * is acknowledged before it is durable. */

static void *ckpt_writer_main(void *arg)
{
    ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && !(w->busy && !atomic_load(&w->done)))
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit && !(w->busy && !atomic_load(&w->done)))
            break;
        rm_ckpt_meta meta = w->meta;
        rm_ckpt_seg seg = {w->buf, w->bytes};
        double wait_s = w->wait_s;
        bool stages = w->nstages > 0; /* stage_bounds stay put until this write is collected */
        bool pieces = w->nruns > 0;   /* as do the runs */
        const rm_ckpt_model *mf = w->model.n > 0 ? &w->model : NULL; /* set before the thread */
        pthread_mutex_unlock(&w->mu);
        rm_err e = {0};
        char path[4200] = "";
        double t0 = rm_mono();
        /* sharded: this rank's shard, then the set completes (manifest) or the wait runs out */
        int rc = meta.shard_world && stages /* pipeline stages: per-stage layers */
                     ? rm_ckpt_stage_write(w->dir, &meta, &w->units, mf, w->stage_bounds, &seg, 1, w->keep,
                                           wait_s, path, sizeof path, &e)
                     : meta.shard_world && pieces /* tensor parallelism: each rank's pieces */
                           ? rm_ckpt_pieces_write(w->dir, &meta, &w->units, mf, w->runs, w->nruns, &seg, 1,
                                                  w->keep, wait_s, path, sizeof path, &e)
                           : meta.shard_world
                                 ? rm_ckpt_shard_write(w->dir, &meta, &w->units, mf, &seg, 1, w->keep, wait_s,
                                                       path, sizeof path, &e)
                                 : rm_ckpt_write(w->dir, &meta, &seg, 1, w->keep, path, sizeof path, &e);
        /* a whole checkpoint's manifest, last (a set's is written by ckpt_shard.c) */
        if (rc == RM_OK && !meta.shard_world && mf)
            rc = rm_ckpt_manifest_write_whole(path, &meta, mf, &e);
        double dt = rm_mono() - t0;
        pthread_mutex_lock(&w->mu);
        w->rc = rc;
        memcpy(w->err, e.msg, sizeof w->err);
        memcpy(w->path, path, sizeof w->path);
        w->seconds = dt;
        atomic_store(&w->done, true);
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* The model's named tensors, unit by unit, for the writer's manifests (manifest.h): they tile
 * the flat buffer the payload holds. A family that names none writes no manifest. */
static int ckpt_model_tensors(const rm_model *m, ckpt_writer *w, rm_err *err)
{
    int n = 0;
    for (int u = 0; m->family && m->family->tensors && u < m->nunits; u++)
        n += rm_model_tensors(m, u, NULL, 0);
    if (n == 0)
        return RM_OK;
    w->tensors = calloc((size_t)n, sizeof *w->tensors);
    if (!w->tensors)
        return rm_errf(err, RM_ENOMEM, "checkpoint writer: out of memory");
    int at = 0;
    for (int u = 0; u < m->nunits; u++)
        at += rm_model_tensors(m, u, w->tensors + at, n - at);
    w->model = (rm_ckpt_model){m->family->name, w->tensors, n};
    return RM_OK;
}

int rm_tr_ckpt_writer_start(trainer *t, rm_err *err)
{
    ckpt_writer *w = &t->cw;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    atomic_init(&w->done, false);
    w->inited = true;
    w->dir = t->cfg->checkpoint_dir;
    w->keep = t->cfg->checkpoint_keep;
    w->units = (rm_ckpt_units){t->m.nunits, t->m.unit_off, t->m.unit_len};
    RM_CHECK(ckpt_model_tensors(&t->m, w, err));
    if (pthread_create(&w->th, NULL, ckpt_writer_main, w) != 0)
        return rm_errf(err, RM_ERR, "checkpoint writer thread: cannot start");
    w->started = true;
    return RM_OK;
}

/* Apply a finished write's result on the training thread. wait: block until the write in
 * flight (if any) is done. Returns the write's result, RM_OK when there was none. */
int rm_tr_ckpt_collect(trainer *t, bool wait)
{
    ckpt_writer *w = &t->cw;
    if (!w->started || !w->busy || (!wait && !atomic_load(&w->done)))
        return RM_OK;
    double t0 = rm_mono();
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->done))
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->rc;
    int64_t step = w->meta.step;
    double dt = w->seconds, blocked = w->blocked;
    char path[sizeof w->path], emsg[sizeof w->err];
    memcpy(path, w->path, sizeof path);
    memcpy(emsg, w->err, sizeof emsg);
    w->busy = false;
    atomic_store(&w->done, false);
    pthread_mutex_unlock(&w->mu);
    double waited = rm_mono() - t0;
    if (waited > 0.001)
        rm_debug("waited for the checkpoint writer seconds=%.3f", waited);
    if (rc) {
        t->ckpt_failures++;
        rm_sfmt(t->ckpt_err, sizeof t->ckpt_err, "%s", emsg);
        rm_error("checkpoint write failed step=%lld consecutive_failures=%d err=\"%s\"", (long long)step,
                 t->ckpt_failures, emsg);
        return rc;
    }
    t->ckpt_failures = 0;
    t->ckpt_err[0] = 0;
    if (step > t->last_ckpt_step)
        t->last_ckpt_step = step;
    rm_series_observe(t->wm.ckpt_seconds, dt);
    rm_series_set(t->wm.last_ckpt, (double)t->last_ckpt_step);
    rm_info("checkpoint written path=%s step=%lld seconds=%.3f blocked_seconds=%.4f", path, (long long)step,
            dt, blocked);
    return RM_OK;
}

void rm_tr_ckpt_writer_stop(trainer *t)
{
    ckpt_writer *w = &t->cw;
    if (w->started) {
        rm_tr_ckpt_collect(t, true);
        pthread_mutex_lock(&w->mu);
        w->quit = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
        w->started = false;
    }
    if (w->inited) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        w->inited = false;
    }
    free(w->tensors);
    w->tensors = NULL;
    w->model = (rm_ckpt_model){0};
    free(w->runs);
    w->runs = NULL;
    w->nruns = w->runs_cap = 0;
}

/* Snapshot the state at this step boundary and hand it to the writer (rank 0 under allreduce:
 * the strategy says who writes). Waits only for a previous write still in flight. */
int rm_tr_ckpt_write(trainer *t, rm_err *err)
{
    size_t bytes = t->strat->state_bytes ? t->strat->state_bytes(t->st, t->rank) : 0;
    if (!t->cfg->checkpoint_dir || !t->have_state || bytes == 0 || t->step == t->last_ckpt_step)
        return RM_OK;
    ckpt_writer *w = &t->cw;
    if (w->busy && w->meta.step == t->step)
        return RM_OK; /* this step's state is already on its way */
    double t0 = rm_mono();
    rm_tr_ckpt_collect(t, true);
    if (t->step == t->last_ckpt_step)
        return RM_OK;
    if (bytes > t->stage_bytes)
        return rm_errf(err, RM_EINVAL, "checkpoint: strategy state %zu bytes, staging %zu", bytes,
                       t->stage_bytes);
    rm_ckpt_meta meta;
    ckpt_expect(t, &meta);
    meta.step = t->step;
    meta.train_epoch = t->train_epoch;
    meta.data_pos = t->data_pos;
    meta.world_size = t->world;
    meta.batch_per_worker = t->B;
    meta.rdzv_epoch = t->rdzv_epoch;
    meta.seed = t->cfg->t.seed;
    meta.opt_t = t->opt.t;
    meta.epoch_pos = t->train_epoch + (double)t->data_pos / t->tr.info.n;
    meta.lr = t->lr;
    meta.loss_scale = t->amp.scaler.scale;
    meta.scaler_tracker = t->amp.scaler.growth_tracker;
    if (state_sharded(t)) { /* one shard per rank (worker/checkpoint/ckpt_shard.h) */
        meta.shard_world = t->world;
        meta.shard_rank = t->rank;
        meta.shard_floats = bytes / ((size_t)(1 + t->opt.nstate) * sizeof(float));
    }
    /* pipeline stages: this stage's layers as one shard of a stage-layout set (the writer is idle
     * here: collected above, so its units may change) */
    int sr = 0, sw = 0;
    w->nstages = 0;
    if (!meta.shard_world && t->strat->ckpt_stages &&
        t->strat->ckpt_stages(t->st, &sr, &sw, w->stage_bounds)) {
        meta.shard_world = sw;
        meta.shard_rank = sr;
        meta.shard_floats = bytes / ((size_t)(1 + t->opt.nstate) * sizeof(float));
        w->nstages = sw;
    }
    /* tensor parallelism: this rank's pieces as one shard of a pieces set, every shard's runs in
     * its manifest (worker/checkpoint/ckpt_shard.h) */
    w->nruns = 0;
    int nr = 0;
    if (!meta.shard_world && t->strat->ckpt_pieces && !t->strat->ckpt_pieces(t->st, &sr, &sw, NULL, 0, &nr))
        return rm_errf(err, RM_EINVAL, "checkpoint: the strategy holds pieces but gave no layout for them");
    if (!meta.shard_world && t->strat->ckpt_pieces &&
        t->strat->ckpt_pieces(t->st, &sr, &sw, w->runs, w->runs_cap, &nr)) {
        if (nr > w->runs_cap) { /* the first write, or a larger grid: room for every run */
            rm_ckpt_run *g = realloc(w->runs, (size_t)nr * sizeof *g);
            if (!g)
                return rm_errf(err, RM_ENOMEM, "checkpoint: out of memory for %d pieces", nr);
            w->runs = g;
            w->runs_cap = nr;
            t->strat->ckpt_pieces(t->st, &sr, &sw, w->runs, w->runs_cap, &nr);
        }
        meta.shard_world = sw;
        meta.shard_rank = sr;
        meta.shard_floats = bytes / ((size_t)(1 + t->opt.nstate) * sizeof(float));
        w->nruns = nr;
    }
    /* after a device fault the reads fail: never write that as a checkpoint */
    RM_CHECK(t->strat->state_save(t->st, t->host_stage, err));
    pthread_mutex_lock(&w->mu);
    /* the other ranks' shards come within moments at an interval or the end; at SIGTERM the
     * grace period is short and a peer may have stopped a step apart */
    w->wait_s = rm_train_term ? 10 : 60;
    w->blocked = rm_mono() - t0;
    w->meta = meta;
    w->buf = t->host_stage;
    w->bytes = bytes;
    w->busy = true;
    atomic_store(&w->done, false);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return RM_OK;
}

/* ringmaster_worker_memory_bytes{kind} from the strategy, and the peak RSS; with log set, also a
 * "memory" log line (the end of training: bench/shard reads it). */
void rm_tr_report_memory(trainer *t, bool log)
{
    rm_step_memory mem = {0};
    if (t->strat->memory)
        t->strat->memory(t->st, &mem);
    struct rusage ru;
    double rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0;
    t->mem = mem;
    t->peak_rss = rss;
    rm_err e = {0};
    if (rm_wmetrics_set_memory(&t->wm, (double)mem.params, (double)mem.grads, (double)mem.optimizer,
                               (double)mem.activations, rss, &e) != RM_OK)
        rm_warn("memory gauges: %s", e.msg);
    if (log) {
        /* the resident set now, besides the high-water mark: start-up touches every buffer whole
         * (the parameters are initialised whole), so sharding shows in the current RSS */
        long pages = 0, res = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f) {
            if (fscanf(f, "%ld %ld", &pages, &res) != 2)
                res = 0;
            fclose(f);
        }
        rm_info("memory sharding=%s params_bytes=%llu grads_bytes=%llu optimizer_bytes=%llu "
                "activations_bytes=%llu peak_rss_bytes=%.0f rss_bytes=%.0f",
                rm_sharding_names[t->cfg->t.sharding], (unsigned long long)mem.params,
                (unsigned long long)mem.grads, (unsigned long long)mem.optimizer,
                (unsigned long long)mem.activations, rss, (double)res * (double)sysconf(_SC_PAGESIZE));
    }
}

/* Sharded stages spread the state over the ranks: before a checkpoint every rank assembles the
 * whole payload in host_stage (a collective, so only where all ranks are at the same step: the
 * interval and the end, never SIGTERM). The previous write is finished first: it owns host_stage. */
int rm_tr_ckpt_gather(trainer *t, rm_err *err)
{
    /* the same decision on every rank (last_ckpt_step is rank 0's writer's business) */
    if (!t->strat->state_gather || !t->cfg->checkpoint_dir || !t->have_state || t->step == t->gather_step)
        return RM_OK;
    rm_tr_ckpt_collect(t, true);
    RM_CHECK(t->strat->state_gather(t->st, t->host_stage, err));
    t->gather_step = t->step;
    return RM_OK;
}

/* Write this step's checkpoint and wait until it is on disk (exit paths). */
int rm_tr_ckpt_write_sync(trainer *t, rm_err *err)
{
    RM_CHECK(rm_tr_ckpt_write(t, err));
    int rc = rm_tr_ckpt_collect(t, true);
    if (rc)
        rm_sfmt(err->msg, sizeof err->msg, "%s", t->ckpt_err);
    return rc;
}

/* ---------------- export ---------------- */

/* The whole parameter vector into host (nparams floats) on rank 0. Pipeline stages (each holds
 * only its layers): every rank adds its stage's range, written by the stage's checkpoint writer,
 * into a zeroed buffer, and an allreduce SUM leaves the whole vector everywhere (x + 0 is exact,
 * as the state broadcast relies on). Otherwise the parameters are whole on rank 0 after
 * materialize. */
static int export_gather(trainer *t, float *host, rm_err *err)
{
    const rm_kernels *k = t->k;
    size_t n = t->m.nparams, bytes = n * sizeof(float);
    int sr = 0, sw = 0, bounds[RM_MODEL_MAX_UNITS + 1];
    if (!(t->strat->ckpt_stages && t->strat->ckpt_stages(t->st, &sr, &sw, bounds)) || !t->ops || !t->comm) {
        if (t->rank == 0 && k->d2h(host, t->m.params, bytes) != RM_OK)
            return rm_errf(err, RM_EIO, "export: copying the parameters from the device failed");
        return RM_OK;
    }
    float *buf = k->alloc(bytes);
    if (!buf)
        return rm_errf(err, RM_ENOMEM, "export: out of memory (%zu bytes)", bytes);
    k->memset0(buf, bytes);
    if (t->strat->state_bytes(t->st, t->rank) > 0) {
        size_t off = rm_model_units_off(&t->m, bounds[sr]);
        size_t len = rm_model_units_len(&t->m, bounds[sr], bounds[sr + 1]);
        k->d2d(buf + off, t->m.params + off, len * sizeof(float));
    }
    int rc = t->ops->allreduce(t->comm, buf, n, RM_DT_F32, RM_OP_SUM, err);
    if (rc == RM_OK && t->rank == 0 && k->d2h(host, buf, bytes) != RM_OK)
        rc = rm_errf(err, RM_EIO, "export: copying the parameters from the device failed");
    k->free(buf);
    return rc;
}

/* Rank 0's export outcome to every rank (a broadcast as an allreduce SUM of byte values held in
 * floats, the other ranks adding zeros): whichever rank's final report reaches the controller
 * first carries status.result.model or the ExportFailing message. */
static int export_share(trainer *t, rm_err *err)
{
    if (!t->ops || !t->comm || t->world < 2)
        return RM_OK;
    enum { N = sizeof t->export_uri + sizeof t->export_sha256 + sizeof t->export_err + 32 };
    const rm_kernels *k = t->k;
    char txt[N] = "";
    float *f = calloc(N, sizeof *f), *dev = k->alloc(N * sizeof *f); /* dev: where the backend reduces */
    int rc = RM_OK;
    if (!f || !dev) {
        rc = rm_errf(err, RM_ENOMEM, "export: out of memory");
        goto out;
    }
    if (t->rank == 0) {
        rm_sfmt(txt, sizeof txt, "%s\n%s\n%llu\n%s", t->export_uri, t->export_sha256,
                (unsigned long long)t->export_bytes, t->export_err);
        for (size_t i = 0; i < N && txt[i]; i++)
            f[i] = (float)(unsigned char)txt[i];
    }
    if (k->h2d(dev, f, N * sizeof *f) != RM_OK ||
        (rc = t->ops->allreduce(t->comm, dev, N, RM_DT_F32, RM_OP_SUM, err)) ||
        k->d2h(f, dev, N * sizeof *f) != RM_OK) {
        rc = rc ? rc : rm_errf(err, RM_EIO, "export: copying the outcome to or from the device failed");
        goto out;
    }
    if (t->rank != 0) {
        for (size_t i = 0; i + 1 < N; i++)
            txt[i] = (char)(unsigned char)f[i];
        txt[N - 1] = 0;
        char *a = txt, *b = strchr(a, '\n'), *c = b ? strchr(b + 1, '\n') : NULL,
             *d = c ? strchr(c + 1, '\n') : NULL;
        if (b && c && d) {
            *b++ = 0, *c++ = 0, *d++ = 0;
            rm_sfmt(t->export_uri, sizeof t->export_uri, "%s", a);
            rm_sfmt(t->export_sha256, sizeof t->export_sha256, "%s", b);
            t->export_bytes = strtoull(c, NULL, 10);
            rm_sfmt(t->export_err, sizeof t->export_err, "%s", d);
        }
    }
out:
    free(f);
    k->free(dev);
    return rc;
}

int rm_tr_export(trainer *t, rm_err *err)
{
    const char *ckdir = t->cfg->checkpoint_dir, *out = t->cfg->output_uri;
    rm_output_dtype dtype = t->cfg->output_dtype;
    if (!ckdir && !out) {
        if (t->rank == 0)
            rm_info("export skipped: no checkpoint folder and no spec.output.uri (the export goes to "
                    "<checkpoint dir>/export)");
        return RM_OK;
    }
    if (t->strat->claim) { /* the parameters live on the servers */
        if (t->rank == 0)
            rm_warn("export skipped: the %s strategy's parameters live on its servers (not exported yet)",
                    t->strat->name);
        return RM_OK;
    }
    float *host = t->rank == 0 ? malloc(t->m.nparams * sizeof(float)) : NULL;
    if (t->rank == 0 && !host)
        return rm_errf(err, RM_ENOMEM, "export: out of memory");
    int rc = export_gather(t, host, err);
    if (rc == RM_OK && t->rank == 0) {
        /* the default, and the staging folder of an s3:// output */
        char dir[4200], tmp[64] = "";
        if (ckdir) {
            rm_sfmt(dir, sizeof dir, "%s/export", ckdir);
        } else if (strncmp(out, "s3://", 5) == 0) { /* staged in a temporary folder, removed after */
            rm_sfmt(tmp, sizeof tmp, "/tmp/ringmaster-export-XXXXXX");
            if (!mkdtemp(tmp))
                tmp[0] = 0;
            rm_sfmt(dir, sizeof dir, "%s", tmp[0] ? tmp : "/tmp/ringmaster-export");
        } else {
            rm_sfmt(dir, sizeof dir, "%s", out);
        }
        rm_err e = {0};
        rm_model_output_result res;
        double t0 = rm_mono();
        if (rm_model_write_out(&t->m, host, out ? out : dir, dir, dtype, "spec.output.uri", &res, &e) ==
            RM_OK) {
            char staged[4300]; /* the local file: the output itself, or an s3:// upload's source */
            rm_sfmt(staged, sizeof staged, "%s/%s", dir, RM_EXPORT_WEIGHTS);
            rm_info("model exported uri=%s path=%s sha256=%s bytes=%llu dtype=%s params=%zu parts=%d "
                    "seconds=%.3f",
                    res.uri, strncmp(res.uri, "s3://", 5) != 0 ? res.uri : staged, res.sha256,
                    (unsigned long long)res.bytes, rm_enum_name(rm_output_dtype_names, (int)dtype),
                    t->m.nparams, res.parts, rm_mono() - t0);
            rm_sfmt(t->export_uri, sizeof t->export_uri, "%s", res.uri);
            rm_sfmt(t->export_sha256, sizeof t->export_sha256, "%s", res.sha256);
            t->export_bytes = res.bytes;
            t->export_err[0] = 0;
        } else { /* the training succeeded: the checkpoints stay, the status says ExportFailing */
            rm_error("model export failed (the checkpoints stay) uri=%s err=\"%s\"", out ? out : dir, e.msg);
            rm_sfmt(t->export_err, sizeof t->export_err, "%s", e.msg);
        }
        rm_model_output_staging_remove(tmp);
    }
    free(host);
    if (rc == RM_OK)
        rc = export_share(t, err);
    return rc;
}
