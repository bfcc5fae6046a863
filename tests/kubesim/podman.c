/* podman.c — the pod spec → `podman run` mapping of kubesim's container runtime; see podman.h. */
#include "tests/kubesim/podman.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/b64.h"

static cJSON *oget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

const char *ks_podman_runtime(void)
{
    const char *r = getenv("KUBESIM_PODMAN_RUNTIME");
    return r && *r ? r : "runc";
}

/* ---- a growing argv ---------------------------------------------------------------------- */
typedef struct sv {
    char **v;
    size_t n, cap;
    bool oom;
} sv;

static void sv_add(sv *a, const char *s)
{
    if (a->oom)
        return;
    if (a->n + 2 > a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        char **p = realloc(a->v, nc * sizeof(*p));
        if (!p) {
            a->oom = true;
            return;
        }
        a->v = p;
        a->cap = nc;
    }
    char *d = strdup(s);
    if (!d) {
        a->oom = true;
        return;
    }
    a->v[a->n++] = d;
    a->v[a->n] = NULL;
}

static void sv_addf(sv *a, const char *fmt, ...) RM_PRINTF(2, 3);
static void sv_addf(sv *a, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(buf)) {
        a->oom = true; /* never pass a truncated flag */
        return;
    }
    sv_add(a, buf);
}

void ks_podman_argv_free(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

/* ---- files for volumes ------------------------------------------------------------------- */
static int mkdirs_mode(const char *path, mode_t mode)
{
    char buf[1024];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -1;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -1;
    return chmod(buf, mode); /* the umask must not narrow an emptyDir's 0777 */
}

static int write_file(const char *dir, const char *name, const char *data, size_t len, mode_t mode)
{
    if (!name[0] || strstr(name, "..") || name[0] == '/')
        return -1; /* a key is a file name inside the volume, never a way out of it */
    char p[1200];
    if (snprintf(p, sizeof(p), "%s/%s", dir, name) >= (int)sizeof(p))
        return -1;
    char *slash = strrchr(p, '/');
    *slash = 0;
    mkdirs_mode(p, 0755);
    *slash = '/';
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    bool ok = write(fd, data, len) == (ssize_t)len;
    fchmod(fd, mode);
    close(fd);
    return ok ? 0 : -1;
}

/* A Secret's or ConfigMap's data (a copy; NULL when the object is missing). */
static cJSON *ref_data(ks_server *s, int type, const char *ns, const char *name)
{
    if (!name)
        return NULL;
    ks_kind *k = ks_core_kind(s, type);
    pthread_rwlock_rdlock(&s->lock);
    ks_obj *o = ks_table_get(k->tab, ns, name);
    cJSON *d = o ? cJSON_Duplicate(oget(o->j, "data"), 1) : NULL;
    if (o && !d)
        d = cJSON_CreateObject();
    pthread_rwlock_unlock(&s->lock);
    return d;
}

/* Writes a secret's/configMap's keys (or only `items`) as files under dir. */
static int materialize(ks_server *s, bool secret, const char *ns, const cJSON *src, const char *dir,
                       char *msg, size_t mcap)
{
    const char *name = ks_sget(src, secret ? "secretName" : "name");
    cJSON *data = ref_data(s, secret ? KS_T_SECRET : KS_T_CONFIGMAP, ns, name);
    if (!data) {
        if (cJSON_IsTrue(oget(src, "optional")))
            return mkdirs_mode(dir, 0755);
        snprintf(msg, mcap, "%s \"%s\" not found", secret ? "secret" : "configmap", name ? name : "");
        return -1;
    }
    mkdirs_mode(dir, 0755);
    const cJSON *dm = oget(src, "defaultMode");
    mode_t mode = cJSON_IsNumber(dm) ? (mode_t)dm->valueint & 0777 : 0644;
    const cJSON *items = oget(src, "items");
    for (const cJSON *d = data->child; d; d = d->next) {
        if (!cJSON_IsString(d))
            continue;
        const char *path = d->string;
        if (cJSON_IsArray(items)) {
            path = NULL;
            for (const cJSON *it = items->child; it; it = it->next)
                if (ks_sget(it, "key") && !strcmp(ks_sget(it, "key"), d->string))
                    path = ks_sget(it, "path");
            if (!path)
                continue;
        }
        size_t len = strlen(d->valuestring);
        unsigned char *dec = NULL;
        if (secret && rm_b64_decode(d->valuestring, strlen(d->valuestring), &dec, &len) != RM_OK)
            len = 0;
        char *bytes = secret ? (char *)dec : strdup(d->valuestring);
        int rc = bytes ? write_file(dir, path, bytes, len, mode) : -1;
        free(bytes);
        if (rc < 0) {
            snprintf(msg, mcap, "cannot write key %s of %s %s", d->string, secret ? "secret" : "configmap",
                     name);
            cJSON_Delete(data);
            return -1;
        }
    }
    cJSON_Delete(data);
    return 0;
}

/* The service account files: token (kubesim does not check it), namespace, ca.crt (KUBESIM_SERVICE_CA). */
static int sa_files(const char *ns, const char *sa, const char *dir)
{
    if (mkdirs_mode(dir, 0755) < 0)
        return -1;
    char tok[512];
    snprintf(tok, sizeof(tok), "kubesim-token.%s.%s", ns, sa);
    if (write_file(dir, "token", tok, strlen(tok), 0644) < 0 ||
        write_file(dir, "namespace", ns, strlen(ns), 0644) < 0)
        return -1;
    const char *ca = getenv("KUBESIM_SERVICE_CA");
    if (ca && *ca) {
        FILE *f = fopen(ca, "rb");
        if (!f)
            return -1;
        char buf[65536];
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        if (write_file(dir, "ca.crt", buf, n, 0644) < 0)
            return -1;
    }
    return 0;
}

/* Kubernetes quantities → bytes / cores. <0 on a form we do not know. */
static double quantity(const char *q)
{
    char *end;
    double v = strtod(q, &end);
    if (end == q || v < 0)
        return -1;
    static const struct {
        const char *sfx;
        double mul;
    } u[] = {{"Ki", 1024.0},
             {"Mi", 1048576.0},
             {"Gi", 1073741824.0},
             {"Ti", 1099511627776.0},
             {"k", 1e3},
             {"K", 1e3},
             {"M", 1e6},
             {"G", 1e9},
             {"T", 1e12},
             {"m", 1e-3},
             {"", 1}};
    for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
        if (!strcmp(end, u[i].sfx))
            return v * u[i].mul;
    return -1;
}

static const char *qstr(const cJSON *v, char *buf, size_t cap)
{
    if (cJSON_IsString(v))
        return v->valuestring;
    if (cJSON_IsNumber(v)) {
        snprintf(buf, cap, "%g", v->valuedouble);
        return buf;
    }
    return NULL;
}

/* One volumeMount → flags. */
static int add_mount(ks_server *s, sv *a, const cJSON *pod, const ks_podman_pod *pp, const cJSON *vm,
                     char *msg, size_t mcap)
{
    const char *vname = ks_sget(vm, "name"), *dst = ks_sget(vm, "mountPath"), *sub = ks_sget(vm, "subPath");
    bool ro = cJSON_IsTrue(oget(vm, "readOnly"));
    if (!vname || !dst || dst[0] != '/' || strchr(dst, ':') || strchr(dst, ',')) {
        snprintf(msg, mcap, "volumeMount needs a name and an absolute mountPath without ':' or ','");
        return -1;
    }
    const cJSON *vols = oget(oget(pod, "spec"), "volumes"), *v = NULL;
    for (const cJSON *x = vols ? vols->child : NULL; x; x = x->next)
        if (ks_sget(x, "name") && !strcmp(ks_sget(x, "name"), vname))
            v = x;
    if (!v) {
        snprintf(msg, mcap, "volume \"%s\" not found in the pod's volumes", vname);
        return -1;
    }
    char src[1100];
    const cJSON *x;
    if ((x = oget(v, "emptyDir")) != NULL) {
        if (ks_sget(x, "medium") && !strcmp(ks_sget(x, "medium"), "Memory")) {
            char qb[64];
            const char *lim = qstr(oget(x, "sizeLimit"), qb, sizeof(qb));
            double b = lim ? quantity(lim) : -1;
            if (b > 0)
                sv_addf(a, "--tmpfs=%s:rw,mode=1777,size=%.0f", dst, b);
            else
                sv_addf(a, "--tmpfs=%s:rw,mode=1777", dst);
            return 0;
        }
        snprintf(src, sizeof(src), "%s/volumes/%s", pp->poddir, vname);
        if (mkdirs_mode(src, 0777) < 0)
            goto mkfail;
    } else if ((x = oget(v, "hostPath")) != NULL) {
        const char *hp = ks_sget(x, "path");
        if (!hp || hp[0] != '/' || strchr(hp, ':')) {
            snprintf(msg, mcap, "volume \"%s\": hostPath.path must be absolute", vname);
            return -1;
        }
        snprintf(src, sizeof(src), "%s", hp);
        const char *t = ks_sget(x, "type");
        if (t && !strcmp(t, "DirectoryOrCreate") && mkdirs_mode(src, 0755) < 0)
            goto mkfail;
        struct stat st;
        if (stat(src, &st) < 0) {
            snprintf(msg, mcap, "hostPath %s of volume \"%s\" does not exist", hp, vname);
            return -1;
        }
    } else if ((x = oget(v, "secret")) != NULL || (x = oget(v, "configMap")) != NULL) {
        bool secret = oget(v, "secret") != NULL;
        snprintf(src, sizeof(src), "%s/volumes/%s", pp->poddir, vname);
        if (materialize(s, secret, pp->ns, x, src, msg, mcap) < 0)
            return -1;
        ro = true;
    } else if ((x = oget(v, "persistentVolumeClaim")) != NULL) {
        const char *claim = ks_sget(x, "claimName");
        if (!claim || strchr(claim, '/') || !strcmp(claim, "..")) {
            snprintf(msg, mcap, "volume \"%s\": persistentVolumeClaim.claimName is required", vname);
            return -1;
        }
        snprintf(src, sizeof(src), "%s/pvc/%s/%s", s->opts.data_dir, pp->ns, claim);
        if (mkdirs_mode(src, 0777) < 0)
            goto mkfail;
        ro = ro || cJSON_IsTrue(oget(x, "readOnly"));
    } else if ((x = oget(v, "projected")) != NULL) {
        snprintf(src, sizeof(src), "%s/volumes/%s", pp->poddir, vname);
        mkdirs_mode(src, 0755);
        const cJSON *srcs = oget(x, "sources");
        for (const cJSON *p = srcs ? srcs->child : NULL; p; p = p->next) {
            const cJSON *y;
            if ((y = oget(p, "serviceAccountToken")) != NULL) {
                const char *sa = ks_sget(oget(pod, "spec"), "serviceAccountName");
                char dir[1200];
                snprintf(dir, sizeof(dir), "%s", src);
                if (sa_files(pp->ns, sa ? sa : "default", dir) < 0)
                    goto mkfail;
            } else if ((y = oget(p, "secret")) != NULL || (y = oget(p, "configMap")) != NULL) {
                bool secret = oget(p, "secret") != NULL;
                cJSON *c = cJSON_Duplicate(y, 1);
                if (secret && c && ks_sget(c, "name") && !oget(c, "secretName"))
                    cJSON_AddStringToObject(c, "secretName", ks_sget(c, "name"));
                int rc = c ? materialize(s, secret, pp->ns, c, src, msg, mcap) : -1;
                cJSON_Delete(c);
                if (rc < 0)
                    return -1;
            } else if ((y = oget(p, "downwardAPI")) != NULL) {
                const cJSON *items = oget(y, "items");
                for (const cJSON *it = items ? items->child : NULL; it; it = it->next) {
                    const char *fp = ks_sget(oget(it, "fieldRef"), "fieldPath"), *path = ks_sget(it, "path");
                    if (fp && path && !strcmp(fp, "metadata.namespace"))
                        write_file(src, path, pp->ns, strlen(pp->ns), 0644);
                }
            }
        }
        ro = true;
    } else {
        snprintf(msg, mcap,
                 "volume \"%s\": kubesim's podman runtime supports emptyDir, hostPath, secret, configMap, "
                 "persistentVolumeClaim and projected",
                 vname);
        return -1;
    }
    if (sub && *sub) {
        if (strstr(sub, "..") || sub[0] == '/') {
            snprintf(msg, mcap, "volumeMount %s: subPath must be relative without '..'", vname);
            return -1;
        }
        size_t l = strlen(src);
        snprintf(src + l, sizeof(src) - l, "/%s", sub);
        struct stat st;
        if (stat(src, &st) < 0 && mkdirs_mode(src, 0777) < 0)
            goto mkfail;
    }
    sv_addf(a, "--volume=%s:%s:%s", src, dst, ro ? "ro" : "rw");
    return 0;
mkfail:
    snprintf(msg, mcap, "volume \"%s\": cannot prepare %.200s: %s", vname, src, strerror(errno));
    return -1;
}

static bool mounts_path(const cJSON *ctr, const char *path)
{
    const cJSON *vms = oget(ctr, "volumeMounts");
    for (const cJSON *m = vms ? vms->child : NULL; m; m = m->next)
        if (ks_sget(m, "mountPath") && !strcmp(ks_sget(m, "mountPath"), path))
            return true;
    return false;
}

char **ks_podman_argv(ks_server *s, const cJSON *pod, const cJSON *ctr, const ks_podman_pod *pp,
                      const char *cname, char *const *env, size_t nenv, char *msg, size_t mcap)
{
    const cJSON *spec = oget(pod, "spec");
    const char *image = ks_sget(ctr, "image");
    if (!image || !*image) {
        snprintf(msg, mcap, "container has no image");
        return NULL;
    }
    sv a = {0};
    sv_add(&a, "podman");
    sv_addf(&a, "--runtime=%s", ks_podman_runtime());
    sv_add(&a, "run");
    sv_add(&a, "--rm");
    sv_add(&a, "--pull=never");
    sv_add(&a, "--sig-proxy=true");
    sv_addf(&a, "--name=%s", cname);
    sv_addf(&a, "--label=io.kubesim.instance=%d", (int)getpid());
    sv_addf(&a, "--label=io.kubesim.pod=%s/%s", pp->ns, pp->name);
    sv_add(&a, "--network=host");
    /* raising rlimits inside a container is refused on these hosts: ask for what they allow */
    sv_add(&a, "--ulimit=nofile=16384:16384");
    sv_add(&a, "--ulimit=nproc=16384:16384");
    const char *hn = ks_sget(spec, "hostname");
    sv_addf(&a, "--hostname=%.63s", hn ? hn : pp->name);
    if (pp->hosts)
        sv_addf(&a, "--volume=%s:/etc/hosts:ro", pp->hosts);
    /* securityContext: the container's fields override the pod's */
    const cJSON *psc = oget(spec, "securityContext"), *csc = oget(ctr, "securityContext");
    const cJSON *uid = oget(csc, "runAsUser") ? oget(csc, "runAsUser") : oget(psc, "runAsUser");
    const cJSON *gid = oget(csc, "runAsGroup") ? oget(csc, "runAsGroup") : oget(psc, "runAsGroup");
    const cJSON *nonroot = oget(csc, "runAsNonRoot") ? oget(csc, "runAsNonRoot") : oget(psc, "runAsNonRoot");
    if (cJSON_IsTrue(nonroot) && cJSON_IsNumber(uid) && uid->valuedouble == 0) {
        snprintf(msg, mcap, "container's runAsUser breaks non-root policy (pod: \"%s\", container: %s)",
                 pp->name, ks_sget(ctr, "name") ? ks_sget(ctr, "name") : "");
        goto fail;
    }
    if (cJSON_IsNumber(uid) && cJSON_IsNumber(gid))
        sv_addf(&a, "--user=%d:%d", uid->valueint, gid->valueint);
    else if (cJSON_IsNumber(uid))
        sv_addf(&a, "--user=%d:%d", uid->valueint, uid->valueint);
    if (cJSON_IsTrue(oget(csc, "readOnlyRootFilesystem"))) {
        sv_add(&a, "--read-only");
        sv_add(&a, "--read-only-tmpfs=false"); /* a pod gets the writable paths it declares, no more */
    }
    if (cJSON_IsFalse(oget(csc, "allowPrivilegeEscalation")))
        sv_add(&a, "--security-opt=no-new-privileges");
    const cJSON *caps = oget(csc, "capabilities");
    for (const cJSON *c = oget(caps, "drop") ? oget(caps, "drop")->child : NULL; c; c = c->next)
        if (cJSON_IsString(c))
            sv_addf(&a, "--cap-drop=%s", c->valuestring);
    for (const cJSON *c = oget(caps, "add") ? oget(caps, "add")->child : NULL; c; c = c->next)
        if (cJSON_IsString(c))
            sv_addf(&a, "--cap-add=%s", c->valuestring);
    /* limits, where this host's cgroups take them (KUBESIM_PODMAN_LIMITS=0 turns them off) */
    const char *lim_env = getenv("KUBESIM_PODMAN_LIMITS");
    if (!lim_env || strcmp(lim_env, "0")) {
        const cJSON *lim = oget(oget(ctr, "resources"), "limits");
        char qb[64];
        const char *mem = qstr(oget(lim, "memory"), qb, sizeof(qb));
        if (mem) {
            double b = quantity(mem);
            if (b <= 0) {
                snprintf(msg, mcap, "resources.limits.memory: bad quantity %.60s", mem);
                goto fail;
            }
            sv_addf(&a, "--memory=%.0f", b);
        }
        const char *cpu = qstr(oget(lim, "cpu"), qb, sizeof(qb));
        if (cpu) {
            double c = quantity(cpu);
            if (c <= 0) {
                snprintf(msg, mcap, "resources.limits.cpu: bad quantity %.60s", cpu);
                goto fail;
            }
            sv_addf(&a, "--cpus=%.3f", c);
        }
    }
    /* volumes */
    const cJSON *vms = oget(ctr, "volumeMounts");
    for (const cJSON *m = vms ? vms->child : NULL; m; m = m->next)
        if (add_mount(s, &a, pod, pp, m, msg, mcap) < 0)
            goto fail;
    static const char *SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
    if (!cJSON_IsFalse(oget(spec, "automountServiceAccountToken")) && !mounts_path(ctr, SA_DIR)) {
        const char *sa = ks_sget(spec, "serviceAccountName");
        char dir[1100];
        snprintf(dir, sizeof(dir), "%s/volumes/kube-api-access", pp->poddir);
        if (sa_files(pp->ns, sa ? sa : "default", dir) < 0) {
            snprintf(msg, mcap, "cannot write the service account token: %s", strerror(errno));
            goto fail;
        }
        sv_addf(&a, "--volume=%s:%s:ro", dir, SA_DIR);
    }
    for (size_t i = 0; i < nenv; i++) {
        sv_add(&a, "-e");
        sv_add(&a, env[i]);
    }
    const char *wd = ks_sget(ctr, "workingDir");
    if (wd && *wd)
        sv_addf(&a, "--workdir=%s", wd);
    const cJSON *cmd = oget(ctr, "command"), *args = oget(ctr, "args");
    if (cJSON_IsArray(cmd) && cJSON_GetArraySize(cmd) > 0) {
        char *js = cJSON_PrintUnformatted(cmd);
        if (!js)
            goto oom;
        sv_add(&a, "--entrypoint");
        sv_add(&a, js);
        free(js);
    }
    sv_add(&a, image);
    for (const cJSON *x = cJSON_IsArray(args) ? args->child : NULL; x; x = x->next)
        if (cJSON_IsString(x))
            sv_add(&a, x->valuestring);
    if (a.oom)
        goto oom;
    return a.v;
oom:
    snprintf(msg, mcap, "kubesim: out of memory (or a flag over 4 KiB) building the podman command");
fail:
    ks_podman_argv_free(a.v);
    return NULL;
}

static int run_wait(char *const argv[], bool quiet)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (quiet) {
            int nul = open("/dev/null", O_WRONLY);
            if (nul >= 0) {
                dup2(nul, 1);
                dup2(nul, 2);
            }
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int ks_podman_image_exists(const char *image)
{
    /* only the kubelet thread calls this: a small cache of images seen present (a check forks podman) */
    static char seen[32][256];
    static int nseen;
    for (int i = 0; i < nseen; i++)
        if (!strcmp(seen[i], image))
            return 1;
    char rt[64];
    snprintf(rt, sizeof(rt), "--runtime=%s", ks_podman_runtime());
    char *argv[] = {"podman", rt, "image", "exists", (char *)image, NULL};
    if (run_wait(argv, true) != 0)
        return 0;
    if (nseen < 32 && strlen(image) < sizeof(seen[0]))
        snprintf(seen[nseen++], sizeof(seen[0]), "%s", image);
    return 1;
}

void ks_podman_kill(const char *cname, int sig)
{
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) {
            dup2(nul, 1);
            dup2(nul, 2);
        }
        char sg[16], rt[64];
        snprintf(sg, sizeof(sg), "%d", sig);
        snprintf(rt, sizeof(rt), "--runtime=%s", ks_podman_runtime());
        execlp("podman", "podman", rt, "kill", "--signal", sg, cname, (char *)NULL);
        _exit(127);
    }
}

void ks_podman_cleanup(void)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "podman --runtime=%s ps -aq --filter label=io.kubesim.instance=%d | xargs -r podman "
             "--runtime=%s rm -f -t 0",
             ks_podman_runtime(), (int)getpid(), ks_podman_runtime());
    char *argv[] = {"sh", "-c", cmd, NULL};
    run_wait(argv, true);
}
