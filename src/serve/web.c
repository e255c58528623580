/* web.c — the web page of `afinar serve` and its read-only view of run directories.
 *
 *   GET  /, /index.html, /app.js, /style.css   the page (assets embedded at build time:
 *                                              scripts/embed_assets.sh -> $(BUILD)/gen/web_assets.c)
 *   GET  /api/runs                             the runs under --runs DIR (one level of directories
 *                                              holding run.json or metrics.jsonl)
 *   GET  /api/runs/NAME                        run.json, eval.json (the last validation evaluation:
 *                                              per-class table, confusion matrix) and which adapters exist
 *   GET  /api/runs/NAME/metrics?from=OFFSET    the metrics.jsonl lines after byte OFFSET (whole lines
 *                                              only) and the next offset; "reset": true when the file
 *                                              shrank (a resumed run truncates it)
 *   POST /api/runs/NAME/load                   load NAME/best (or {"which": "final"}) as an adapter
 *
 * Paths: NAME is one path component of [A-Za-z0-9._-] not starting with '.', and every file read is
 * resolved with realpath(3) and must lie inside the resolved --runs directory, so `..`, absolute
 * names and symbolic links that leave it are refused (404). Nothing else on the file system is
 * reachable from the page: files are read only under --runs; adapters are loaded through the
 * existing /lora-adapters/load route (guarded by --api-key like every API route). */
#include "serve/serve.h"

#include "core/core.h"
#include "core/fsutil.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Assets (generated): name, bytes, size, content type. */
typedef struct srv_asset {
    const char *name;
    const unsigned char *data;
    size_t size;
    const char *type;
} srv_asset;
extern const srv_asset srv_web_assets[];
extern const int srv_web_n_assets;

#define WEB_MAX_FILE ((size_t)64 << 20) /* a metrics.jsonl / run.json larger than this is not read */
#define WEB_MAX_LINES 20000             /* metrics lines returned per request (the page asks again) */
#define WEB_MAX_RUNS 1000

static int valid_name(const char *n, size_t len) {
    if (len == 0 || len > 128 || n[0] == '.') return 0;
    for (size_t i = 0; i < len; i++) {
        const char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

/* realpath of dir/name/file (file may be NULL) when it exists and lies inside root (resolved);
 * malloc'ed, or NULL. */
static char *inside(const char *root, const char *name, const char *file) {
    char *rr = realpath(root, NULL);
    if (!rr) return NULL;
    char *d = af_path_join(root, name), *p = d && file ? af_path_join(d, file) : NULL;
    char *rp = realpath(file ? p : d, NULL);
    free(d), free(p);
    const size_t n = strlen(rr);
    const int ok = rp && !strncmp(rp, rr, n) && rp[n] == '/';
    free(rr);
    if (!ok) {
        free(rp);
        return NULL;
    }
    return rp;
}

static cJSON *read_json_inside(const char *root, const char *name, const char *file) {
    char *p = inside(root, name, file);
    if (!p) return NULL;
    size_t len = 0;
    const char *why = NULL;
    char *b = af_read_file_max(p, WEB_MAX_FILE, &len, &why);
    free(p);
    if (!b) return NULL;
    cJSON *o = cJSON_ParseWithLength(b, len);
    free(b);
    return o;
}

static int is_dir_inside(const char *root, const char *name, const char *sub) {
    char *p = inside(root, name, sub);
    struct stat st;
    const int ok = p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    free(p);
    return ok;
}

/* The last "train" line's step and the file's size/mtime of NAME/metrics.jsonl. */
static void metrics_summary(const char *root, const char *name, cJSON *e) {
    char *p = inside(root, name, "metrics.jsonl");
    if (!p) return;
    struct stat st;
    if (stat(p, &st) == 0) cJSON_AddNumberToObject(e, "modified", (double)st.st_mtime);
    size_t len = 0;
    const char *why = NULL;
    char *b = af_read_file_max(p, WEB_MAX_FILE, &len, &why);
    free(p);
    if (!b) return;
    /* the last line with "type":"train" */
    static const char key[] = "\"type\":\"train\"";
    size_t end = len;
    while (end > 0) {
        size_t st0 = end;
        while (st0 > 0 && b[st0 - 1] != '\n') st0--;
        if (end > st0 && memmem(b + st0, end - st0, key, sizeof key - 1)) {
            cJSON *o = cJSON_ParseWithLength(b + st0, end - st0);
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
            if (cJSON_IsNumber(s)) cJSON_AddNumberToObject(e, "step", s->valuedouble);
            cJSON_Delete(o);
            break;
        }
        if (st0 == 0) break;
        end = st0 - 1;
    }
    free(b);
}

static char *runs_list(const char *root, srv_err *err) {
    DIR *d = opendir(root);
    if (!d) {
        srv_err_set(err, 500, "server_error", NULL, NULL, "cannot read the runs directory: %s", strerror(errno));
        return NULL;
    }
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "runs");
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < WEB_MAX_RUNS) {
        const char *nm = de->d_name;
        if (!valid_name(nm, strlen(nm))) continue;
        char *rj = inside(root, nm, "run.json"), *mj = inside(root, nm, "metrics.jsonl");
        const int run = rj || mj;
        free(rj), free(mj);
        if (!run) continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", nm);
        cJSON *rjo = read_json_inside(root, nm, "run.json");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(rjo, "total_steps");
        if (cJSON_IsNumber(ts)) cJSON_AddNumberToObject(e, "total_steps", ts->valuedouble);
        cJSON_AddStringToObject(e, "task", cJSON_GetObjectItemCaseSensitive(rjo, "labels") ? "classification" : "causal-lm");
        cJSON_Delete(rjo);
        metrics_summary(root, nm, e);
        cJSON_AddBoolToObject(e, "has_best", is_dir_inside(root, nm, "best"));
        cJSON_AddBoolToObject(e, "has_final", is_dir_inside(root, nm, "final"));
        cJSON_AddItemToArray(a, e);
        n++;
    }
    closedir(d);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return js;
}

static char *run_info(const char *root, const char *name) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON *rj = read_json_inside(root, name, "run.json"), *ev = read_json_inside(root, name, "eval.json");
    cJSON_AddItemToObject(o, "run", rj ? rj : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "eval", ev ? ev : cJSON_CreateNull());
    cJSON_AddBoolToObject(o, "has_best", is_dir_inside(root, name, "best"));
    cJSON_AddBoolToObject(o, "has_final", is_dir_inside(root, name, "final"));
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return js;
}

/* metrics.jsonl lines after byte `from`, whole lines only. */
static char *run_metrics(const char *root, const char *name, long long from, srv_err *err) {
    char *p = inside(root, name, "metrics.jsonl");
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "lines");
    long long next = 0;
    int reset = 0;
    if (p) {
        size_t len = 0;
        const char *why = NULL;
        char *b = af_read_file_max(p, WEB_MAX_FILE, &len, &why);
        if (b) {
            if (from < 0 || (size_t)from > len) from = 0, reset = 1;
            size_t i = (size_t)from;
            int n = 0;
            while (i < len && n < WEB_MAX_LINES) {
                const char *nl = memchr(b + i, '\n', len - i);
                if (!nl) break; /* a line still being written */
                const size_t e = (size_t)(nl - b);
                cJSON *line = cJSON_ParseWithLength(b + i, e - i);
                if (line) cJSON_AddItemToArray(a, line), n++;
                i = e + 1;
            }
            next = (long long)i;
            free(b);
        }
        free(p);
    }
    cJSON_AddNumberToObject(o, "next", (double)next);
    cJSON_AddBoolToObject(o, "reset", reset);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    (void)err;
    return js;
}

static char *run_load(srv *s, const char *root, const char *name, const char *body, size_t len, srv_err *err) {
    const char *which = "best";
    cJSON *o = len ? cJSON_ParseWithLength(body, len) : NULL;
    if (len && !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        srv_err_set(err, 400, "invalid_request_error", NULL, NULL, "the body must be a JSON object ({\"which\": \"best\"|\"final\"})");
        return NULL;
    }
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "which");
    if (w && (!cJSON_IsString(w) || (strcmp(w->valuestring, "best") && strcmp(w->valuestring, "final")))) {
        cJSON_Delete(o);
        srv_err_set(err, 400, "invalid_request_error", NULL, "which", "\"which\" must be \"best\" or \"final\"");
        return NULL;
    }
    if (w) which = !strcmp(w->valuestring, "final") ? "final" : "best";
    cJSON_Delete(o);
    char *dir = inside(root, name, which);
    if (!dir) {
        srv_err_set(err, 404, "invalid_request_error", "adapter_not_found", "which", "run '%s' has no %s/ adapter", name, which);
        return NULL;
    }
    char adname[160];
    snprintf(adname, sizeof adname, "%s-%s", name, which);
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "name", adname);
    cJSON_AddStringToObject(req, "path", dir);
    free(dir);
    char *rb = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    char *res = rb ? srv_lora_load(s, rb, strlen(rb), err) : NULL;
    free(rb);
    if (!res) return NULL;
    cJSON *r = cJSON_Parse(res);
    free(res);
    if (r) cJSON_AddStringToObject(r, "name", adname);
    char *js = r ? cJSON_PrintUnformatted(r) : NULL;
    cJSON_Delete(r);
    return js;
}

int srv_web_route(srv *s, const char *method, const char *url, const char *from_arg, const char *body, size_t len,
                  srv_web_reply *out, srv_err *err) {
    memset(out, 0, sizeof *out);
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (get && (!strcmp(url, "/") || !strcmp(url, "/index.html"))) url = "/index.html";
    for (int i = 0; i < srv_web_n_assets; i++)
        if (url[0] == '/' && !strcmp(url + 1, srv_web_assets[i].name)) {
            if (!get) {
                srv_err_set(err, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: only GET", method, url);
                return 1;
            }
            out->status = 200;
            out->data = srv_web_assets[i].data;
            out->len = srv_web_assets[i].size;
            out->type = srv_web_assets[i].type;
            return 1;
        }
    if (strncmp(url, "/api/runs", 9) || (url[9] && url[9] != '/')) return 0;
    const char *root = srv_opts(s)->runs_dir;
    if (!root) {
        srv_err_set(err, 404, "invalid_request_error", "no_runs", NULL, "the server was started without --runs DIR");
        return 1;
    }
    const char *rest = url + 9;
    if (!*rest || !strcmp(rest, "/")) {
        if (!get) return srv_err_set(err, 405, "invalid_request_error", "method_not_allowed", NULL, "%s /api/runs: only GET", method), 1;
        out->body = runs_list(root, err);
        out->status = out->body ? 200 : err->status;
        return 1;
    }
    rest++;
    const char *slash = strchr(rest, '/');
    const size_t nlen = slash ? (size_t)(slash - rest) : strlen(rest);
    char name[129];
    if (!valid_name(rest, nlen)) {
        srv_err_set(err, 404, "invalid_request_error", "run_not_found", NULL, "no such run");
        return 1;
    }
    memcpy(name, rest, nlen);
    name[nlen] = 0;
    char *rd = inside(root, name, NULL);
    struct stat st;
    const int exists = rd && stat(rd, &st) == 0 && S_ISDIR(st.st_mode);
    free(rd);
    if (!exists) {
        srv_err_set(err, 404, "invalid_request_error", "run_not_found", NULL, "no run '%s' under the runs directory", name);
        return 1;
    }
    const char *sub = slash ? slash + 1 : "";
    if (!*sub && get) out->body = run_info(root, name);
    else if (!strcmp(sub, "metrics") && get) {
        long long from = 0;
        if (from_arg) {
            char *e = NULL;
            errno = 0;
            from = strtoll(from_arg, &e, 10);
            if (e == from_arg || *e || errno || from < 0) {
                srv_err_set(err, 400, "invalid_request_error", NULL, "from", "'from' must be a byte offset >= 0");
                return 1;
            }
        }
        out->body = run_metrics(root, name, from, err);
    } else if (!strcmp(sub, "load") && post) {
        out->body = run_load(s, root, name, body, len, err);
        if (!out->body) return 1;
    } else if (!*sub || !strcmp(sub, "metrics") || !strcmp(sub, "load")) {
        srv_err_set(err, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: use %s", method, url,
                    !strcmp(sub, "load") ? "POST" : "GET");
        return 1;
    } else {
        srv_err_set(err, 404, "invalid_request_error", "not_found", NULL, "no route for %s %.200s", method, url);
        return 1;
    }
    out->status = out->body ? 200 : 500;
    if (!out->body) srv_err_set(err, 500, "server_error", NULL, NULL, "out of memory");
    (void)post;
    return 1;
}
