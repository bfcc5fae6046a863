/* train.c — `ringmaster-worker train`, the driver: setup, rounds, evaluation, the step loop, in-place
 * restart (settings.c parses the settings; train_state.c holds the state and the checkpoint
 * writer; reporter.c the progress reporter; trainer.h what they share).
 *
 * Design (see train.h for the buffer layout):
 *   - One context struct (trainer) owns everything; the only file-level state is the SIGTERM flag
 *     a signal handler must reach.
 *   - A "round" is one rendezvous epoch: join -> comm init -> load newest checkpoint -> make every
 *     rank hold rank 0's exact state (a broadcast done as an allreduce SUM where the other ranks
 *     contribute zeros: exact in floating point) -> steps until the group breaks, the job ends,
 *     or the rendezvous says rejoin/stop. A broken round is torn down and the next one joined in
 *     the same process; the world size may differ (the LR and shard follow it).
 *   - A step issues kernels on preallocated buffers; gradients of layer l are handed to the fusion
 *     layer as soon as backward finishes it, so buckets allreduce while earlier layers compute.
 *   - Progress reports (~1 s) go out from a reporter thread with its own rendezvous client, so a
 *     slow or restarting controller never stalls the step; the training loop publishes a small
 *     snapshot under a mutex each step (no allocation) and polls an atomic "rejoin/stop" answer.
 *     Logs, evaluation and checkpoints run between steps on the training thread; a hang fault
 *     pauses the reporter too, so a hung worker is silent, as a real hang would be. */
#include "worker/trainer.h"
#include "worker/comm/comm_staged.h"

/* The one piece of state a signal handler has to reach. */
volatile sig_atomic_t rm_train_term;
static void on_term(int sig)
{
    (void)sig;
    rm_train_term = 1;
}

/* The comm backend this worker runs (before a world of one turns it into "local"). */
static rm_backend cfg_backend(const rm_train_cfg *cfg)
{
    return rm_backend_resolve(cfg->backend, 0);
}
bool rm_tr_backend_is(const rm_train_cfg *cfg, rm_backend b)
{
    return !cfg->backend_local && cfg_backend(cfg) == b;
}

/* This rank's slice of the global batch: rank of world, unless the strategy groups ranks onto
 * one slice (pipeline stages of a data-parallel replica share it). */
void rm_tr_data_slot(const trainer *t, int *slot, int *nslots)
{
    *slot = t->rank;
    *nslots = t->world;
    if (t->strat->data_slot && t->st)
        t->strat->data_slot(t->st, slot, nslots);
}

/* A rendezvous client for these settings. The client constructor only answers NULL, so the
 * settings it rejects are named here: a missing token is the usual one (not "out of memory"). */
int rm_tr_rdzv_client_make(const rm_train_cfg *cfg, rm_rdzv_client **out, rm_err *err)
{
    if (!cfg->token || !*cfg->token)
        return rm_err_field(err, RM_EAUTH, RM_ENV_TOKEN,
                            "missing or empty: the rendezvous at %s needs the job's token", cfg->rdzv_url);
    *out = rm_rdzv_client_new(cfg->rdzv_url, cfg->job, cfg->token, cfg->worker_id, err);
    if (!*out) {
        rm_err why = *err; /* which argument the client refused, and why */
        return rm_err_field(err, why.code, RM_ENV_RENDEZVOUS,
                            "cannot use rendezvous %s for job \"%s\" as worker \"%s\": %s", cfg->rdzv_url,
                            cfg->job, cfg->worker_id, why.msg);
    }
    /* the node reported to the rendezvous (docs/strategies.md#topology): NODE_NAME, else the host's name */
    const char *node = getenv(RM_ENV_NODE_NAME);
    if (node && *node) {
        rm_err e2 = {0};
        if (rm_rdzv_client_set_node(*out, node, &e2) != RM_OK) {
            rm_rdzv_client_free(*out);
            *out = NULL;
            return rm_err_field(err, RM_EINVAL, RM_ENV_NODE_NAME, "%s", e2.msg);
        }
    }
    return RM_OK;
}

static void trainer_free(trainer *t)
{
    rm_tr_ckpt_writer_stop(t); /* first: the writer may still read host_stage */
    if (t->strat)
        t->strat->destroy(t->st);
    if (t->comm && t->ops)
        t->ops->destroy(t->comm);
    rm_ring_listener_free(t->ring_lst);
    if (t->listen_fd >= 0)
        close(t->listen_fd);
    rm_rdzv_client_free(t->rdzv);
    rm_optim_free(&t->opt);
    rm_model_free(&t->m);
    rm_model_weights_close(&t->init_w);
    if (t->amp_on)
        rm_amp_free(&t->amp);
    if (t->k) {
        t->k->free(t->dev_small);
        rm_kernels_host_free(t->k, t->host_x); /* pinned by the CUDA table */
        rm_kernels_host_free(t->k, t->host_labels);
        rm_kernels_host_free(t->k, t->host_stage);
    }
    free(t->perm);
    rm_data_close(&t->tr);
    rm_data_close(&t->te);
    rm_wmetrics_stop(&t->wm);
}

/* The rows of this rank's slot of the global micro-batch at data position pos into the model's
 * batch buffers (through the host staging buffers for device tables). */
static int load_rows(trainer *t, int64_t pos, rm_err *err)
{
    int slot, nslots;
    rm_tr_data_slot(t, &slot, &nslots);
    if (t->k->host_memory) {
        rm_data_gather_rows(&t->tr, t->perm, pos, slot, nslots, t->B, t->m.x, t->m.labels);
        return RM_OK;
    }
    rm_data_gather_rows(&t->tr, t->perm, pos, slot, nslots, t->B, t->host_x, t->host_labels);
    int rc = t->k->h2d(t->m.x, t->host_x, (size_t)t->B * t->m.x_row_bytes);
    if (rc == RM_OK)
        rc = t->k->h2d(t->m.labels, t->host_labels, (size_t)t->B * (size_t)t->m.label_row * sizeof(int32_t));
    return rc ? rm_errf(err, rc, "copying the batch to the device failed") : RM_OK;
}

/* Gradient accumulation (rm_step_env.load_micro): micro-batch k of the step at t->data_pos is the
 * k-th global micro-batch of B x nslots samples from there. */
static int load_micro(void *ud, int k, rm_err *err)
{
    trainer *t = ud;
    int slot, nslots;
    rm_tr_data_slot(t, &slot, &nslots);
    return load_rows(t, t->data_pos + (int64_t)k * t->B * nslots, err);
}

static int trainer_setup(trainer *t, const rm_train_cfg *cfg, rm_err *err)
{
    memset(t, 0, sizeof *t);
    t->listen_fd = -1;
    t->cfg = cfg;
    t->B = cfg->t.batch_size_per_worker;
    t->K = cfg->t.grad_accum > 1 ? cfg->t.grad_accum : 1;
    t->grad_norm = -1;
    t->perm_epoch = -1;
    t->eval_step = -1;
    t->test_acc = -1;
    t->last_ckpt_step = -1;
    t->gather_step = -1;
    if (cfg->t.precision != RM_PREC_FP32 && strcmp(cfg->device, "cuda") != 0)
        return rm_errf(err, RM_EUNSUPPORTED,
                       "precision %s needs the GPU path (--device cuda); the CPU path is fp32",
                       rm_precision_str(cfg->t.precision));
    if (!strcmp(cfg->device, "cuda")) {
        const char *lr = getenv("LOCAL_RANK");
        char name[128] = "";
        RM_CHECK(rm_gpu_select(lr ? atoi(lr) : 0, &t->gpu, name, sizeof name, err));
        rm_info("gpu selected device=%d name=\"%s\"", t->gpu, name);
    }
    t->k = rm_kernels_get(cfg->device);
    if (!t->k) {
        char why[256] = "";
        if (!strcmp(cfg->device, "cuda"))
            rm_gpu_available(why, sizeof why);
        return rm_errf(err, RM_EUNSUPPORTED, "device %s: not available in this build or machine%s%s",
                       cfg->device, why[0] ? ": " : "", why);
    }
    rm_kernels_set_threads(t->k, cfg->threads);
    RM_CHECK(rm_amp_init(&t->amp, t->k, cfg->t.precision, err));
    t->amp_on = true;
    RM_CHECK(rm_faults_parse(cfg->fault_spec, &t->faults, err));
    rm_faults_set_dir(&t->faults, cfg->checkpoint_dir);
    RM_CHECK(rm_wmetrics_start(&t->wm, cfg->metrics_addr, cfg->job, cfg->progress_deadline_s, err));
    if (t->wm.srv)
        rm_info("metrics listening port=%d", rm_wmetrics_port(&t->wm));

    double t0 = rm_mono();
    RM_CHECK(rm_data_open(&cfg->t, RM_SPLIT_TRAIN, &t->tr, err));
    RM_CHECK(rm_data_open(&cfg->t, RM_SPLIT_TEST, &t->te, err));
    const rm_data_info *tri = &t->tr.info, *tei = &t->te.info;
    if (tei->inputs != tri->inputs || tei->classes > tri->classes)
        return rm_err_field(err, RM_EINVAL, "spec.training.data", /* bad data: DataError, no restart */
                            "the test split has %d inputs and %d classes, the "
                            "training split %d and %d",
                            tei->inputs, tei->classes, tri->inputs, tri->classes);
    rm_info("data loaded format=%s train=%lld test=%lld seconds=%.2f source=%s", t->tr.r->format,
            (long long)tri->n, (long long)tei->n, rm_mono() - t0,
            cfg->t.data.uri   ? cfg->t.data.uri
            : cfg->t.data_dir ? cfg->t.data_dir
                              : RM_DATA_DEFAULT_DIR);

    rm_model_shape shape;
    const rm_model_family *fam;
    rm_model_data md = {.inputs = tri->inputs, .classes = tri->classes};
    RM_CHECK(rm_model_shape_for(&cfg->t, &md, &fam, &shape, err));
    RM_CHECK(rm_model_init(&t->m, t->k, fam, &shape, t->B, err));
    if (cfg->t.init_uri) { /* fresh starts take these weights instead of the seed's */
        RM_CHECK(rm_model_init_weights_open(&t->m, cfg->t.init_uri, &t->init_w, err));
        t->m.init_weights = &t->init_w;
        rm_info("model init from weights path=%s tensors=%d fresh_starts_only=true", t->init_w.path,
                t->init_w.n);
    }
    if (t->m.x_row_bytes != tri->x_row_bytes || t->m.label_row != tri->label_row)
        return rm_err_field(err, RM_EINVAL, "spec.training.data", /* the data does not fit the model */
                            "%s rows of %zu bytes and %d labels, the %s model "
                            "reads %zu and %d",
                            t->tr.r->format, tri->x_row_bytes, tri->label_row, fam->name, t->m.x_row_bytes,
                            t->m.label_row);
    RM_CHECK(rm_optim_init(&t->opt, t->k, &cfg->t.optimizer, t->m.nparams, err));
    /* adamw, lamb and lars treat 2-D tensors and the rest differently (worker/optim/optim.h) */
    RM_CHECK(rm_optim_tensors_from_model(&t->opt, &t->m, err));
    rm_lr_sched_from_spec(&t->sched, &cfg->t);
    const char *sname = getenv(RM_ENV_STRATEGY);
    const char *par = getenv(RM_ENV_PARALLELISM); /* pipeline stages  */
    const char *allreduce = rm_enum_name(rm_strategy_names, RM_STRATEGY_ALLREDUCE);
    if (par && *par && (!sname || !*sname || !strcmp(sname, allreduce)))
        sname = rm_step_tensor_parallel() > 1
                    ? "tensor"    /* docs/models-and-data.md */
                    : "pipeline"; /* the step strategy of spec.parallelism (docs/strategies.md) */
    t->strat = rm_step_strategy(sname && *sname ? sname : allreduce);
    if (t->strat == &rm_step_ps_ops && cfg->t.optimizer.type == RM_OPT_LBFGS)
        t->strat = &rm_step_lbfgs_ops; /* Sandblaster L-BFGS (docs/strategies.md#sandblaster-l-bfgs) */
    if (!t->strat)
        return rm_err_field(err, RM_EINVAL, RM_ENV_STRATEGY, "unknown strategy \"%s\" (%s)", sname,
                            rm_step_strategy_names());
    rm_step_env env = {.k = t->k,
                       .m = &t->m,
                       .opt = &t->opt,
                       .amp = &t->amp,
                       .fusion_mb = cfg->t.fusion_buffer_mb,
                       .sharding = cfg->t.sharding,
                       .token = cfg->token,
                       .timeout_s = cfg->comm_timeout_s,
                       .train_samples = t->tr.info.n,
                       .batch = t->B,
                       .epochs = cfg->t.epochs,
                       .max_steps = cfg->t.max_steps,
                       .cancel = &rm_train_term,
                       .grad_clip = cfg->t.grad_clip,
                       .grad_accum = t->K,
                       .load_micro = load_micro,
                       .micro_ud = t,
                       .view = cfg->rdzv_url ? &t->rp.view : NULL};
    RM_CHECK(t->strat->init(&env, &t->st, err));
    t->perm = malloc((size_t)t->tr.info.n * sizeof *t->perm);
    t->stage_bytes = (size_t)(1 + t->opt.nstate) * t->m.nparams * sizeof(float);
    t->host_stage = rm_kernels_host_alloc(t->k, t->stage_bytes);
    t->dev_small = t->k->alloc(32 * sizeof(float));
    if (!t->k->host_memory) {
        t->host_x = rm_kernels_host_alloc(t->k, (size_t)t->B * t->m.x_row_bytes);
        t->host_labels = rm_kernels_host_alloc(t->k, (size_t)t->B * (size_t)t->m.label_row * sizeof(int32_t));
    }
    if (!t->perm || !t->host_stage || !t->dev_small ||
        (!t->k->host_memory && (!t->host_x || !t->host_labels)))
        return rm_errf(err, RM_ENOMEM, "out of memory");

    if (cfg->rdzv_url) {
        RM_CHECK(rm_tr_rdzv_client_make(cfg, &t->rdzv, err));
        rm_rdzv_client_set_cancel(t->rdzv, &rm_train_term); /* SIGINT/SIGTERM end long polls */
        /* ring; or nccl with pipeline stages: their links' TCP handshake (worker/pipeline/pipe_link.h) */
        if (rm_tr_backend_is(cfg, RM_BACKEND_RING) ||
            (rm_tr_backend_is(cfg, RM_BACKEND_NCCL) && t->strat == &rm_step_pipeline_ops)) {
            int port = 0;
            RM_CHECK(rm_comm_listen(cfg->bind_addr, &t->listen_fd, &port, err));
            /* strangers on the ring port are handled from now on, not at the next formation */
            RM_CHECK(rm_ring_listener_start(t->listen_fd, 1, cfg->token, &t->ring_lst, err));
            t->listen_fd = -1;
            snprintf(t->my_addr, sizeof t->my_addr, "%s:%d", cfg->bind_addr, port);
        } else {
            snprintf(t->my_addr, sizeof t->my_addr, "%s:0", cfg->bind_addr);
        }
    }
    char sh[128];
    rm_model_shape_str(&t->m, sh, sizeof sh);
    rm_info("model ready type=%s shape=%s params=%zu optimizer=%s device=%s precision=%s "
            "grad_accum=%d grad_clip=%g",
            fam->name, sh, t->m.nparams, rm_optim_name(cfg->t.optimizer.type), t->k->name,
            rm_precision_str(cfg->t.precision), t->K, cfg->t.grad_clip);
    return RM_OK;
}

/* ---------------- rounds ---------------- */

static void round_teardown(trainer *t)
{
    if (t->strat)
        t->strat->round_end(t->st);
    if (t->comm) {
        t->ops->destroy(t->comm);
        t->comm = NULL;
    }
}

/* Join (or go alone), init the comm, restore state. R_STOP/R_TERM or a negative error. */
static int round_setup(trainer *t, bool first, rm_err *err)
{
    const rm_train_cfg *cfg = t->cfg;
    rm_rdzv_round rr = {0};
    bool mpi = rm_tr_backend_is(cfg, RM_BACKEND_MPI);
    const char *be = cfg->backend_local ? "local" : rm_backend_name(cfg_backend(cfg));
    rm_health_set_ready(t->wm.health, false, "joining");
    rm_rdzv_peer *static_peers = NULL;
    if (cfg->static_peers) {
        int n = 0;
        RM_CHECK(rm_comm_parse_peers(cfg->static_peers, &static_peers, &n, err));
        if (cfg->static_rank >= n) {
            free(static_peers);
            return rm_errf(err, RM_EINVAL, "--rank %d but --peers lists %d workers", cfg->static_rank, n);
        }
        rr.peers = static_peers;
        rr.world_size = n;
        t->rank = cfg->static_rank;
        t->world = n;
        t->rdzv_epoch = 1;
    } else if (t->rdzv && !mpi) {
        int last = first ? 0 : t->rdzv_epoch;
        double started = rm_mono(), deadline = started + 900, next_note = started + 60;
        for (;;) {
            rm_health_beat(t->wm.health); /* waiting for peers is not a hang */
            if (rm_train_term)
                return R_TERM;
            rm_err e = {0};
            /* slices shorter than the progress deadline: waiting for peers is not a hang */
            double slice = cfg->progress_deadline_s > 0 ? cfg->progress_deadline_s / 2 : 15;
            slice = slice > 15 ? 15 : slice < 0.5 ? 0.5 : slice;
            int rc = rm_rdzv_join(t->rdzv, t->my_addr, last, slice, &rr, &e);
            if (rc == RM_OK)
                break;
            if (rc == RM_ECANCELED || rm_train_term)
                return R_TERM;
            if (rc == RM_ECLOSED) {
                rm_info("rendezvous says stop");
                return R_STOP;
            }
            if (rc == RM_EAUTH)
                return rm_errf(err, rc, "rendezvous join: %s", e.msg);
            if (rm_mono() > deadline) {
                t->join_gave_up = true;
                return rm_errf(err, RM_ETIMEDOUT, "rendezvous join: no round within 900 s (%s)", e.msg);
            }
            if (rc != RM_ETIMEDOUT) {
                rm_warn("rendezvous join failed, retrying err=\"%s\"", e.msg);
                sleep(1);
            } else if (rm_mono() >= next_note) { /* a long silent wait looks like a hang */
                next_note = rm_mono() + 60;
                rm_warn("still waiting for a rendezvous round waited_s=%.0f gives_up_after_s=900 "
                        "last=\"%s\"",
                        rm_mono() - started, e.msg);
            }
        }
        t->rank = rr.rank;
        t->world = rr.world_size;
        t->rdzv_epoch = rr.epoch;
    } else if (mpi) {
        const char *r = getenv("OMPI_COMM_WORLD_RANK"), *n = getenv("OMPI_COMM_WORLD_SIZE");
        t->rank = r ? atoi(r) : 0;
        t->world = n ? atoi(n) : 1;
        t->rdzv_epoch = 1;
    } else {
        t->rank = 0;
        t->world = 1;
        t->rdzv_epoch = 1;
        be = "local";
    }
    /* a configuration error no re-formation can heal: fail now rather than re-form forever */
    int64_t G = (int64_t)t->B * t->world * t->K;
    if (rm_data_steps_per_epoch(t->tr.info.n, (int)(G < INT32_MAX ? G : INT32_MAX)) < 1) {
        rm_rdzv_round_free(&rr);
        char acc[64] = "";
        if (t->K > 1)
            snprintf(acc, sizeof acc, " x gradientAccumulationSteps %d", t->K);
        return rm_err_field(err, RM_EINVAL, "spec.training.batchSizePerWorker",
                            "global batch %lld (batchSizePerWorker %d x %d workers%s) exceeds the "
                            "training set (%lld samples): an epoch would have 0 steps",
                            (long long)G, t->B, t->world, acc, (long long)t->tr.info.n);
    }
    if ((t->world == 1 || t->strat->claim) && !mpi)
        be = "local"; /* a world of one, or workers that never talk to each other (servers) */
    /* where the ranks sit (docs/strategies.md#topology): the rendezvous hands every rank each peer's node */
    rm_rdzv_topo topo = {.nnodes = 1, .local_world = 1, .uniform = true};
    if (rr.peers && t->world > 1 && rm_rdzv_topology(rr.peers, t->world, t->rank, &topo) != RM_OK)
        topo = (rm_rdzv_topo){.nnodes = 1, .local_world = 1, .uniform = true};
    snprintf(t->node, sizeof t->node, "%s", rr.peers && t->rank < t->world ? rr.peers[t->rank].node : "");
    t->local_rank = topo.local_rank;
    t->local_world = topo.local_world;
    t->nnodes = topo.nnodes;
    /* spec.training.allreduce: hierarchical always takes the "hier" backend (which runs flat when
     * the topology does not allow it); auto only when it runs hierarchically */
    if (!strcmp(be, "ring") && rr.peers && t->world > 1 &&
        (cfg->t.allreduce == RM_AR_HIER ||
         (cfg->t.allreduce == RM_AR_AUTO && topo.nnodes > 1 && topo.local_world > 1 && topo.uniform)))
        be = "hier";
    else if (!strcmp(be, "ring") && rm_comm_shm_wanted(rr.peers, t->world))
        be = "shm"; /* every rank on this host: shared memory instead of loopback TCP */
    t->ops = rm_comm_backend(be);
    if (!t->ops) {
        rm_rdzv_round_free(&rr);
        return rm_errf(err, RM_EUNSUPPORTED, "comm backend %s: not available in this build", be);
    }
    char fields[128];
    snprintf(fields, sizeof fields, "rank=%d", t->rank);
    rm_log_set_fields(fields);
    rm_comm_cfg cc = {
        .rank = t->strat->claim ? 0 : t->rank,
        .world_size = t->strat->claim ? 1 : t->world,
        .epoch = t->rdzv_epoch,
        .peers = rr.peers,
        .token = cfg->token,
        .listener = t->ring_lst,
        .listen_fd = t->listen_fd,
        .timeout_s = cfg->comm_timeout_s,
        .rdzv = t->rdzv,
        .device = t->gpu,
        .shm_ok = rm_comm_shm_allowed(),
    };
    int rc = rm_comm_init_or_ring(&t->ops, &cc, &t->comm, err);
    if (rc) {
        rm_rdzv_round_free(&rr);
        return rc;
    }
    /* device buffers over a host transport (backend ring on GPUs): staged through the host */
    if (!t->k->host_memory && t->ops != rm_comm_nccl_ops() && cc.world_size > 1 &&
        (rc = rm_comm_staged_wrap(&t->ops, &t->comm, t->k, cc.rank, cc.world_size, err))) {
        t->ops->destroy(t->comm);
        t->comm = NULL;
        rm_rdzv_round_free(&rr);
        return rc;
    }
    const rm_comm_ops *tops = rm_comm_staged_inner(t->ops, t->comm);
    if ((rc = rm_wmetrics_set_rank(&t->wm, t->rank, err))) {
        rm_rdzv_round_free(&rr);
        return rc;
    }
    rm_series_set(t->wm.epoch, t->rdzv_epoch);
    rm_series_set(t->wm.world, t->world);
    rm_info("round ready epoch=%d world=%d backend=%s%s", t->rdzv_epoch, t->world, tops->name,
            tops != t->ops ? " (device buffers staged through the host)" : "");
    rm_info("topology nodes=%d node=%s local_rank=%d local_world_size=%d allreduce=\"%s\"", t->nnodes,
            t->node[0] ? t->node : "\"\"", t->local_rank, t->local_world,
            tops == rm_comm_hier_ops() && tops == t->ops ? rm_comm_hier_desc(t->comm) : tops->name);
    t->gather_step = -1; /* a sharded gather is per round: every rank starts without one */
    /* peers and the listener: for strategies that form sub-groups (pipeline), round_begin only */
    rm_step_round sr = {.ops = t->ops,
                        .comm = t->comm,
                        .rank = t->rank,
                        .world = t->world,
                        .peers = rr.peers,
                        .listener = t->ring_lst,
                        .epoch = t->rdzv_epoch};
    rc = t->strat->round_begin(t->st, &sr, err);
    rm_rdzv_round_free(&rr);
    if (rc)
        return rc;

    /* state: newest checkpoint, else fresh; then everyone takes rank 0's. A write still in
     * flight finishes first: it may be the newest checkpoint, and it owns host_stage. */
    rm_tr_ckpt_collect(t, true);
    if (!rm_tr_state_load(t)) {
        if (first || t->cfg->checkpoint_dir)
            rm_tr_state_fresh(t, err);
        /* else: no checkpoints configured; rank 0's in-memory state is broadcast below */
    }
    RM_CHECK(rm_tr_state_sync(t, err));
    t->have_state = true;
    rm_tr_report_memory(t, false);
    rm_series_set(t->wm.last_ckpt, (double)(t->last_ckpt_step > 0 ? t->last_ckpt_step : 0));
    rm_health_set_ready(t->wm.health, true, NULL);
    rm_health_beat(t->wm.health);
    return RM_OK;
}

/* ---------------- evaluation (sharded over ranks, reduced) ---------------- */

/* A device copy's status: on failure the table's first pending error (a CUDA/cuBLAS call or a
 * device fault since the last check) says more than the copy, so it is the one reported; the round
 * fails either way, as it does when state_save's d2h fails. */
static int dev_copy(trainer *t, int rc, const char *what, rm_err *err);

static int read_loss(trainer *t, rm_err *err);

static int evaluate(trainer *t, rm_err *err)
{
    if (t->strat->materialize) /* sharding full: every layer whole for the forward passes */
        RM_CHECK(t->strat->materialize(t->st, err));
    if (t->step > 0)
        RM_CHECK(read_loss(t, err)); /* the last step's */
    /* workers that do not move together (claim) evaluate alone, on the whole test set */
    int eworld = t->strat->claim ? 1 : t->world, erank = t->strat->claim ? 0 : t->rank;
    bool piped = t->strat->eval_forward != NULL; /* a pipeline: a replica's stages share a slice */
    if (piped)
        rm_tr_data_slot(t, &erank, &eworld);
    int n = t->te.info.n, per = (n + eworld - 1) / eworld;
    int start = erank * per, end = start + per < n ? start + per : n;
    double correct = 0, loss = 0;
    for (int s = start; s < end; s += t->B) {
        int rows = end - s < t->B ? end - s : t->B;
        if (t->k->host_memory) {
            rm_data_slice_rows(&t->te, s, rows, t->m.x, t->m.labels);
        } else {
            rm_data_slice_rows(&t->te, s, rows, t->host_x, t->host_labels);
            RM_CHECK(dev_copy(t, t->k->h2d(t->m.x, t->host_x, (size_t)rows * t->m.x_row_bytes),
                              "evaluation batch", err));
            RM_CHECK(dev_copy(t,
                              t->k->h2d(t->m.labels, t->host_labels,
                                        (size_t)rows * (size_t)t->m.label_row * sizeof(int32_t)),
                              "evaluation labels", err));
        }
        bool have_logits = true;
        if (piped)
            RM_CHECK(t->strat->eval_forward(t->st, rows, &have_logits, err));
        else
            rm_model_forward(&t->m, rows);
        if (!have_logits)
            continue;
        rm_model_count_correct(&t->m, rows);
        /* loss only (its gradient lands in the output buffer, unused) */
        rm_model_loss(&t->m, 0, rows, 1.0f, t->dev_small + 8); /* not loss_sum: the step's */
        int32_t c = 0;
        float ls = 0;
        RM_CHECK(dev_copy(t, t->k->d2h(&c, t->m.correct, sizeof c), "evaluation count", err));
        RM_CHECK(dev_copy(t, t->k->d2h(&ls, t->dev_small + 8, sizeof ls), "evaluation loss", err));
        correct += c;
        loss += ls;
    }
    if (eworld > 1 || (piped && t->world > 1)) {
        float v[4] = {(float)correct, (float)(end > start ? end - start : 0), (float)loss, 0};
        RM_CHECK(dev_copy(t, t->k->h2d(t->dev_small, v, sizeof v), "evaluation sums", err));
        RM_CHECK(t->ops->allreduce(t->comm, t->dev_small, 4, RM_DT_F32, RM_OP_SUM, err));
        RM_CHECK(dev_copy(t, t->k->d2h(v, t->dev_small, sizeof v), "evaluation sums", err));
        correct = v[0];
        loss = v[2];
    }
    t->test_acc = correct / ((double)n * t->m.label_row); /* per position for a language model */
    t->eval_step = t->step;
    /* per-epoch numbers for the controller (a sweep's early stopping): the epoch just finished */
    t->test_loss = loss / n;
    rm_rdzv_eval_add(t->evals, &t->nevals, t->train_epoch + 1, t->step, t->test_acc, t->train_loss,
                     t->test_loss);
    rm_series_set(t->wm.test_acc, t->test_acc);
    rm_info("evaluation train_epoch=%d step=%lld test_accuracy=%.4f test_loss=%.4f", t->train_epoch,
            (long long)t->step, t->test_acc, t->test_loss);
    return RM_OK;
}

/* ---------------- the step loop ---------------- */

static void fire_fault(trainer *t, const rm_fault *f)
{
    rm_warn("fault injected kind=%s rank=%d step=%lld", rm_fault_kind_name(f->kind), t->rank,
            (long long)t->step);
    if (f->kind == RM_FAULT_EXIT && f->lost &&
        rm_faults_mark_lost(t->cfg->checkpoint_dir, t->cfg->worker_id) != 0)
        rm_warn("fault node=lost: cannot mark worker %s lost", t->cfg->worker_id);
    if (f->kind == RM_FAULT_EXIT)
        _exit(137);
    rm_tr_reporter_publish(t, false); /* a hung worker sends no reports */
    for (;;) {                        /* hang: no steps, no reports, no beats; only SIGTERM/SIGKILL end it */
        if (rm_train_term)
            _exit(143);
        sleep(1);
    }
}

/* The `slow` fault (a straggler): this step takes factor times its compute time. */
static void straggle(trainer *t, double compute_s)
{
    double f = rm_faults_slow(&t->faults, t->rank, t->step);
    if (f > 1 && compute_s > 0) {
        double d = (f - 1) * compute_s;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* The step's gradient norm (gradClip) into the gauge and the progress line. */
static void note_grad_norm(trainer *t, const rm_step_stats *st)
{
    if (!st->has_grad_norm)
        return;
    t->grad_norm = st->grad_norm;
    rm_series_set(t->wm.grad_norm, st->grad_norm);
}

/* One step on this rank's shard: the driver gathers the batch and sets the LR from the schedule
 * position; the strategy does the rest. Negative on a collective failure. */
static int step_once(trainer *t, rm_err *err)
{
    int slot, nslots;
    rm_tr_data_slot(t, &slot, &nslots);
    int G = t->B * nslots * t->K; /* the global batch: K micro-batches of B x data-parallel world */
    if (t->perm_epoch != t->train_epoch) {
        rm_perm_make(t->perm, t->tr.info.n, t->cfg->t.seed, t->train_epoch);
        rm_data_set_epoch(&t->tr, t->cfg->t.seed, t->train_epoch);
        t->perm_epoch = t->train_epoch;
    }
    RM_CHECK(load_rows(t, t->data_pos, err));
    double epos = t->train_epoch + (double)t->data_pos / t->tr.info.n;
    t->lr = rm_lr_at_step(&t->sched, epos, t->step, rm_data_steps_per_epoch(t->tr.info.n, G), G);
    rm_step_stats st;
    double t0 = rm_mono();
    RM_CHECK(t->strat->step(t->st, t->B, (float)t->lr, &st, err));
    note_grad_norm(t, &st);
    straggle(t, st.compute_s > 0 ? st.compute_s : rm_mono() - t0 - st.allreduce_s);
    if (st.comm) {
        rm_series_observe(t->wm.ar_seconds, st.allreduce_s);
        rm_series_inc(t->wm.ar_bytes, (double)st.bytes);
        t->ar_gbps = st.busbw_gbps;
    }
    if (st.pipe)
        rm_wmetrics_set_pipeline(&t->wm, st.pipe_stage, st.pipe_bubble, (double)st.pipe_sent,
                                 (double)st.pipe_recv);
    if (st.tensor)
        rm_wmetrics_set_tensor(&t->wm, st.tensor_rank, (double)st.tensor_bytes, st.tensor_wait_s);
    t->step++;
    t->data_pos += G;
    t->samples_local += (int64_t)t->B * t->K;
    return RM_OK;
}

static int dev_copy(trainer *t, int rc, const char *what, rm_err *err)
{
    return rm_kernels_copy_error(t->k, rc, what, err);
}

/* The last step's mean loss into t->train_loss; an error (the d2h failed: a device fault) fails the
 * round instead of reporting a NaN loss. */
static int read_loss(trainer *t, rm_err *err)
{
    float ls = 0;
    RM_CHECK(dev_copy(t, t->k->d2h(&ls, t->m.loss_sum, sizeof ls), "training loss", err));
    t->train_loss = ls / ((double)t->B * t->K); /* the loss sum of the step's K micro-batches */
    return RM_OK;
}

/* The tail every step loop shares (run_round, run_round_claimed): after a step, its metrics and
 * the recovery it ends; then, about once a second, the loss and memory; the report to the
 * controller and its answer; the progress line every log_every steps. */
typedef struct step_log {
    double t;        /* when the last progress line was logged */
    int64_t samples; /* samples_local then */
} step_log;

static step_log step_log_start(trainer *t)
{
    t->log_step = t->step;
    return (step_log){rm_mono(), t->samples_local};
}

static void step_note(trainer *t)
{
    if (t->fail_t > 0) { /* the first step after a failure: recovery ends here */
        double rec = rm_mono() - t->fail_t;
        rm_series_observe(t->wm.recovery, rec);
        rm_info("recovered seconds=%.2f step=%lld", rec, (long long)t->step);
        t->fail_t = 0;
    }
    rm_health_beat(t->wm.health);
    rm_series_set(t->wm.step, (double)t->step);
    rm_series_inc(t->wm.samples, (double)t->B * t->K);
    rm_series_set(t->wm.train_epoch, t->train_epoch);
}

/* 0 to go on; an R_* action of the controller or an error code to end the round. */
static int step_report(trainer *t, step_log *lg, rm_err *err)
{
    double now = rm_mono();
    if (now - t->rep_t >= 1.0) { /* the loss needs the device: read it here, ~1/s */
        rm_tr_report_memory(t, false);
        RM_CHECK(read_loss(t, err));
        rm_series_set(t->wm.loss, t->train_loss);
        t->rep_t = now;
    }
    rm_tr_reporter_publish(t, true);
    int a = rm_tr_reporter_action(t);
    if (a)
        return a;
    if (t->cfg->log_every > 0 && t->step - t->log_step >= t->cfg->log_every) {
        RM_CHECK(read_loss(t, err));
        rm_series_set(t->wm.loss, t->train_loss);
        double sps = (double)(t->samples_local - lg->samples) / (now - lg->t);
        char tok[48] = "", gn[48] = ""; /* a language model's rows are sequences: its rate in tokens too */
        if (t->m.label_row > 1)
            snprintf(tok, sizeof tok, " tokens_per_s=%.0f", sps * t->m.label_row);
        if (t->grad_norm >= 0)
            snprintf(gn, sizeof gn, " grad_norm=%.4g", t->grad_norm);
        rm_info("progress step=%lld train_epoch=%d loss=%.4f lr=%.5f samples_per_s=%.0f%s "
                "allreduce_gbps=%.2f%s",
                (long long)t->step, t->train_epoch, t->train_loss, t->lr, sps, tok, t->ar_gbps, gn);
        t->log_step = t->step;
        lg->t = now;
        lg->samples = t->samples_local;
    }
    return 0;
}

/* evalEverySteps: an evaluation is due when the step reached the next multiple since the last
 * one (claimed steps may jump past a multiple). */
static bool eval_due(const trainer *t)
{
    int every = t->cfg->t.eval_every_steps;
    if (every <= 0 || t->step <= 0 || t->eval_step == t->step)
        return false;
    int64_t last = t->eval_step > 0 ? t->eval_step : 0;
    return t->step / every > last / every;
}

/* Steps until the job ends or the round breaks. */
static int run_round(trainer *t, rm_err *err)
{
    const rm_train_cfg *cfg = t->cfg;
    int slot, nslots;
    rm_tr_data_slot(t, &slot, &nslots);
    int G = t->B * nslots * t->K;
    int64_t max_steps = cfg->t.max_steps;
    if (rm_data_steps_per_epoch(t->tr.info.n, G) < 1)
        return rm_errf(err, RM_EINVAL, "global batch %d larger than the training set (%lld)", G,
                       (long long)t->tr.info.n);
    rm_info("global batch global_batch=%d batch_per_worker=%d data_parallel=%d grad_accum=%d", G, t->B,
            nslots, t->K);
    t->rep_t = rm_mono();
    rm_tr_reporter_publish(t, true);
    rm_tr_reporter_kick(t);
    step_log lg = step_log_start(t);
    for (;;) {
        if (rm_train_term)
            return R_TERM;
        const rm_fault *f = rm_faults_due(&t->faults, t->rank, t->step);
        if (f)
            fire_fault(t, f);
        /* epoch boundary: evaluate the finished epoch, move the cursor */
        if (t->data_pos + G > t->tr.info.n) {
            if (cfg->eval_every_epoch && t->eval_step != t->step) {
                int rc = evaluate(t, err);
                if (rc)
                    return rc;
            }
            t->train_epoch++;
            t->data_pos = 0;
            rm_series_set(t->wm.train_epoch, t->train_epoch);
        }
        if (t->train_epoch >= cfg->t.epochs || (max_steps > 0 && t->step >= max_steps))
            return R_DONE;
        int rc = step_once(t, err);
        if (rc)
            return rc;
        step_note(t);
        if (cfg->checkpoint_interval > 0 && t->step % cfg->checkpoint_interval == 0) {
            int grc = rm_tr_ckpt_gather(t, err); /* sharded state: every rank, collectively */
            if (grc)
                return grc;
            rm_tr_ckpt_write(t, err); /* handed to the writer; a failed write is logged, counted
                                     and reported, and training goes on */
        }
        rm_tr_ckpt_collect(t, false); /* a finished write's result, if any (no waiting) */
        if (eval_due(t) && (rc = evaluate(t, err)) != 0)
            return rc;
        if ((rc = step_report(t, &lg, err)) != 0)
            return rc;
    }
}

/* One step of a strategy that claimed its batch (parameter servers): the batch is the claim's
 * slot of its global position; the schedule's LR is the position's. */
static int step_claimed(trainer *t, const rm_step_claim *c, rm_err *err)
{
    if (t->perm_epoch != c->train_epoch) {
        rm_perm_make(t->perm, t->tr.info.n, t->cfg->t.seed, c->train_epoch);
        rm_data_set_epoch(&t->tr, t->cfg->t.seed, c->train_epoch);
        t->perm_epoch = c->train_epoch;
    }
    rm_data_gather_rows(&t->tr, t->perm, c->data_pos, c->slot, c->nslots, t->B, t->m.x, t->m.labels);
    double epos = c->train_epoch + (double)c->data_pos / t->tr.info.n;
    int G = t->B * t->world;
    t->lr = rm_lr_at_step(&t->sched, epos, c->step, rm_data_steps_per_epoch(t->tr.info.n, G), G);
    rm_step_stats st;
    double t0 = rm_mono();
    RM_CHECK(t->strat->step(t->st, t->B, (float)t->lr, &st, err));
    note_grad_norm(t, &st);
    straggle(t, st.compute_s > 0 ? st.compute_s : rm_mono() - t0 - st.allreduce_s);
    rm_series_observe(t->wm.ar_seconds, st.allreduce_s);
    rm_series_inc(t->wm.ar_bytes, (double)st.bytes);
    t->step = c->step + 1;
    t->samples_local += t->B;
    return RM_OK;
}

/* Take the round the reporter re-formed in the background (reporter.detached), if any: the new
 * epoch, rank and world, without stopping (the strategy keeps its connections and state). */
static int adopt_background_round(trainer *t, rm_err *err)
{
    int ne = atomic_load(&t->rp.new_epoch);
    if (ne <= t->rdzv_epoch)
        return RM_OK;
    t->rank = atomic_load(&t->rp.new_rank);
    t->world = atomic_load(&t->rp.new_world);
    t->rdzv_epoch = ne;
    char fields[128];
    snprintf(fields, sizeof fields, "rank=%d", t->rank);
    rm_log_set_fields(fields);
    RM_CHECK(rm_wmetrics_set_rank(&t->wm, t->rank, err));
    rm_series_set(t->wm.epoch, t->rdzv_epoch);
    rm_series_set(t->wm.world, t->world);
    rm_step_round sr = {.ops = t->ops, .comm = t->comm, .rank = t->rank, .world = t->world};
    RM_CHECK(t->strat->round_begin(t->st, &sr, err));
    rm_info("round adopted without stopping epoch=%d world=%d step=%lld", t->rdzv_epoch, t->world,
            (long long)t->step);
    rm_tr_reporter_publish(t, true);
    rm_tr_reporter_kick(t);
    return RM_OK;
}

/* The loop of a strategy that claims its batches (parameter servers: epochs are a global budget,
 * docs/strategies.md#progress-epochs-are-a-global-budget): before each step the strategy says where the job is; rank 0
 * evaluates (alone) when a data epoch ended; the job ends when the strategy says the budget is
 * spent. Checkpoints are the servers'. */
static int run_round_claimed(trainer *t, rm_err *err)
{
    const rm_train_cfg *cfg = t->cfg;
    /* a round formed the ordinary way: no background re-join is pending for it */
    atomic_store(&t->rp.regroup_from, 0);
    atomic_store(&t->rp.joining_epoch, 0);
    atomic_store(&t->rp.new_epoch, t->rdzv_epoch);
    atomic_store(&t->rp.view, RM_STEP_VIEW(t->rdzv_epoch, t->world));
    t->rep_t = rm_mono();
    rm_tr_reporter_publish(t, true);
    rm_tr_reporter_kick(t);
    step_log lg = step_log_start(t);
    for (;;) {
        if (rm_train_term)
            return R_TERM;
        const rm_fault *f = rm_faults_due(&t->faults, t->rank, t->step);
        if (f)
            fire_fault(t, f);
        rm_step_claim c;
        RM_CHECK(t->strat->claim(t->st, &c, err));
        if (c.train_epoch > t->train_epoch && t->rank == 0 && cfg->eval_every_epoch && !c.done &&
            t->eval_step != t->step)
            RM_CHECK(evaluate(t, err));
        t->step = c.step;
        t->train_epoch = c.train_epoch;
        t->data_pos = c.data_pos;
        rm_series_set(t->wm.train_epoch, t->train_epoch);
        if (c.done)
            return R_DONE;
        RM_CHECK(step_claimed(t, &c, err));
        step_note(t);
        RM_CHECK(adopt_background_round(t, err));
        if (t->rank == 0 && eval_due(t))
            RM_CHECK(evaluate(t, err));
        int a = step_report(t, &lg, err);
        if (a)
            return a;
    }
}

/* What a start can find unusable before any data is loaded, so a worker refuses it at once
 * (exit 2) instead of failing every checkpoint write later or silently starting over:
 *   - a rendezvous without a token (RINGMASTER_TOKEN missing or empty);
 *   - a checkpoint folder that cannot be written (a regular file, read-only, /proc/self);
 *   - --resume with no checkpoint this job can continue from (none, all corrupt, another model
 *     shape or optimizer): an error, or with --resume=if-present a loud warning and step 0. */
static int preflight(const rm_train_cfg *cfg, rm_err *err)
{
    rm_err e = {0};
    if (cfg->rdzv_url && (!cfg->token || !*cfg->token))
        return rm_err_field(err, RM_EAUTH, RM_ENV_TOKEN,
                            "missing or empty: the rendezvous at %s needs the job's token", cfg->rdzv_url);
    if (cfg->checkpoint_dir && rm_ckpt_dir_check(cfg->checkpoint_dir, &e) != RM_OK)
        return rm_err_field(err, RM_EINVAL, "--checkpoint-dir", "%s", e.msg);
    if (cfg->resume == RM_RESUME_OFF)
        return RM_OK;
    if (!cfg->checkpoint_dir)
        return rm_err_field(err, RM_EINVAL, "--resume",
                            "needs a checkpoint folder (--checkpoint-dir or "
                            "RINGMASTER_CHECKPOINT_DIR)");
    rm_model lay; /* the plan only: units and sizes, nothing allocated */
    rm_data_info di;
    RM_CHECK(rm_data_probe(&cfg->t, &di, err));
    rm_model_data md = {.inputs = di.inputs, .classes = di.classes};
    RM_CHECK(rm_model_plan_spec(&cfg->t, &md, &lay, err));
    rm_ckpt_meta exp, meta;
    memset(&exp, 0, sizeof exp);
    exp.shape = lay.shape;
    exp.opt_type = (int32_t)cfg->t.optimizer.type;
    exp.nstate = rm_optim_nstate(cfg->t.optimizer.type);
    exp.nparams = lay.nparams;
    size_t cap = (size_t)(1 + exp.nstate) * lay.nparams * sizeof(float);
    void *buf = malloc(cap ? cap : 1);
    if (!buf)
        return rm_errf(err, RM_ENOMEM, "--resume: out of memory (%zu bytes)", cap);
    char path[4200], sh[128];
    int skipped = 0;
    int rc = rm_ckpt_load_newest(cfg->checkpoint_dir, &exp, &meta, buf, cap, path, sizeof path, &skipped, &e);
    if (rc != RM_OK) { /* or a sharded set (any world: it re-shards) */
        rm_ckpt_units units = {lay.nunits, lay.unit_off, lay.unit_len};
        rm_err se = {0};
        int sskipped = 0;
        if (rm_ckpt_shard_load_newest(cfg->checkpoint_dir, &exp, &units, 1, 0, -1, buf, cap, &meta, path,
                                      sizeof path, &sskipped, &se) == RM_OK)
            rc = RM_OK;
        else if (sskipped)
            rm_sfmt(e.msg + strlen(e.msg), sizeof e.msg - strlen(e.msg), "; %s", se.msg);
        skipped += sskipped;
    }
    free(buf);
    rm_model_shape_str(&lay, sh, sizeof sh);
    if (rc == RM_OK) {
        rm_info("resume: continuing from path=%s step=%lld skipped_invalid=%d", path, (long long)meta.step,
                skipped);
        return RM_OK;
    }
    if (cfg->resume == RM_RESUME_IF_PRESENT) {
        rm_warn("resume: NOTHING TO RESUME, starting at step 0 as --resume=if-present allows "
                "dir=%s model=%s optimizer=%s reason=\"%s\"",
                cfg->checkpoint_dir, sh, rm_optim_name(cfg->t.optimizer.type), e.msg);
        return RM_OK;
    }
    return rm_err_field(err, RM_ENOTFOUND, "--resume",
                        "no checkpoint this job can continue from in %s (model %s, optimizer "
                        "%s): %s; not starting over at step 0 (--resume=if-present allows it)",
                        cfg->checkpoint_dir, sh, rm_optim_name(cfg->t.optimizer.type), e.msg);
}

int rm_train_run(const rm_train_cfg *cfg, rm_err *err)
{
    int rc = preflight(cfg, err);
    if (rc || cfg->check_only) {
        if (rc == RM_OK)
            rm_info("check passed checkpoint_dir=%s resume=%s",
                    cfg->checkpoint_dir ? cfg->checkpoint_dir : "(none)",
                    cfg->resume == RM_RESUME_OFF        ? "off"
                    : cfg->resume == RM_RESUME_REQUIRED ? "required"
                                                        : "if-present");
        return rc;
    }
    trainer t;
    rc = trainer_setup(&t, cfg, err);
    if (rc == RM_OK && cfg->checkpoint_dir)
        rc = rm_tr_ckpt_writer_start(&t, err);
    if (rc == RM_OK)
        rc = rm_tr_reporter_start(&t, err);
    if (rc) {
        rm_tr_reporter_stop(&t);
        trainer_free(&t);
        return rc;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    t.t_start = rm_mono();
    bool first = true;
    int outcome = 0, setup_failures = 0;
    for (;;) {
        rc = round_setup(&t, first, err);
        first = false;
        if (rc == R_STOP || rc == R_TERM) {
            outcome = rc;
            break;
        }
        if (rc < 0) {
            /* configuration errors do not heal by retrying; a peer lost during setup does */
            if (rc == RM_EAUTH || t.join_gave_up || !t.rdzv || rc == RM_EUNSUPPORTED || rc == RM_EINVAL ||
                rc == RM_ENOMEM || ++setup_failures > 20)
                goto out;
            rm_warn("round setup failed; rejoining err=\"%s\" attempt=%d", err->msg, setup_failures);
            round_teardown(&t);
            if (t.fail_t == 0)
                t.fail_t = rm_mono();
            sleep(1);
            continue;
        }
        setup_failures = 0;
        rc = t.strat->claim ? run_round_claimed(&t, err) : run_round(&t, err);
        if (rc == R_DONE || rc == R_STOP || rc == R_TERM) {
            outcome = rc;
            /* SIGTERM seen at a step boundary: peers already in the next step's first collective
             * would wait for this rank until the comm timeout, past the 10 s its sharded
             * checkpoint waits for their shards; abort so they fail now and write theirs (their
             * state is still the last whole step's) */
            if (rc == R_TERM && t.ops && t.comm && t.ops->abort)
                t.ops->abort(t.comm);
            break;
        }
        /* the round broke: a collective failed, or the rendezvous moved on */
        rm_tr_reporter_publish(&t, false);
        t.fail_t = rm_mono();
        t.restarts++;
        rm_series_inc(t.wm.restarts, 1);
        if (rc < 0)
            rm_warn("collective failed; restarting in place err=\"%s\" step=%lld", err->msg,
                    (long long)t.step);
        if (t.ops && t.comm && t.ops->abort)
            t.ops->abort(t.comm);
        round_teardown(&t);
        if (!t.rdzv || t.cfg->static_peers || rm_tr_backend_is(t.cfg, RM_BACKEND_MPI)) {
            /* no rendezvous to re-form the group (static world, mpirun): fail */
            rc = rc < 0 ? rc : RM_ERR;
            goto out;
        }
        if (rm_train_term) {
            outcome = R_TERM;
            break;
        }
        memset(err, 0, sizeof *err);
    }
    rc = RM_OK;
    rm_tr_reporter_publish(&t, false);
    rm_tr_reporter_stop(&t);
    t.train_seconds = rm_mono() - t.t_start;
    if (outcome == R_TERM) {
        rm_info("SIGTERM: writing a checkpoint and exiting step=%lld", (long long)t.step);
        rm_err e = {0};
        rm_tr_ckpt_write_sync(&t, &e);
    } else if (outcome == R_DONE) {
        rm_tr_report_memory(&t,
                            true); /* after the last step: before the evaluation makes every layer whole */
        if (t.eval_step != t.step) {
            rc = evaluate(&t, err);
            if (rc)
                goto out;
        }
        rm_err e = {0};
        if (t.strat->materialize && (rc = t.strat->materialize(t.st, err)) != RM_OK)
            goto out; /* the checksum below reads every parameter */
        if ((rc = rm_tr_ckpt_gather(&t, err)) != RM_OK)
            goto out;
        rm_tr_ckpt_write_sync(&t, &e);
        char scratch[4096];
        uint64_t sum = 0;
        if (!t.strat->checksum)
            sum = rm_model_checksum(&t.m, scratch, sizeof scratch);
        else if ((rc = t.strat->checksum(t.st, &sum, err)) != RM_OK)
            goto out;
        if ((rc = rm_tr_export(&t, err)) != RM_OK)
            goto out; /* a collective failed; a write that failed is only logged */
        rm_info("training done steps=%lld train_epoch=%d test_accuracy=%.4f train_loss=%.4f "
                "seconds=%.2f samples_per_s=%.0f params_fnv64=%016llx restarts=%d",
                (long long)t.step, t.train_epoch, t.test_acc, t.train_loss, t.train_seconds,
                t.train_seconds > 0 ? t.samples_local / t.train_seconds : 0.0, (unsigned long long)sum,
                t.restarts);
        rm_tr_report(&t, true);
    } else {
        rm_info("stopping (rendezvous said stop) step=%lld", (long long)t.step);
    }
out:
    rm_tr_reporter_stop(&t);
    round_teardown(&t);
    trainer_free(&t);
    return rc;
}
