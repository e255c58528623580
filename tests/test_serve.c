/*
 * test_serve.c — `afinar serve` end to end on a tiny model ($AFINAR_BIN, set by `make test`;
 * skipped without it or when the binary was built without libmicrohttpd), over loopback with a
 * minimal HTTP client of its own (curl and the `openai` Python package are exercised on SmolLM2 by
 * tests/check_serve_clients.sh):
 *  - the server on a free port (--port 0, the port read from its "listening on" line), a causal-LM
 *    adapter "lm" and a classification adapter "cls" written by af_lora_trainer_save_adapter;
 *  - GET /health, /v1/models (base + both adapters), /lora-adapters;
 *  - completions equal to `afinar generate` with the same settings: greedy (base, model=lm, the
 *    per-request "lora" field) and seeded sampling (temperature 0.9, top_p 0.95, seed 7);
 *    streamed deltas concatenate to the same text; 4 requests at once with different adapters
 *    (decoded in one batch) give each its solo text;
 *  - /v1/classify == `afinar predict` (label ids and probabilities);
 *  - bad input: malformed JSON, wrong field types, unknown model, max_tokens beyond the context,
 *    a body over --max-body (413), an unknown route, classify on an adapter without head, too many
 *    requests (429 with --parallel 1 --queue 1), a slow client (closed after --timeout), clients that
 *    vanish mid-body or mid-stream (the server keeps serving; that the request is cancelled is
 *    checked on SmolLM2 by serve_clients.py); adapters loaded and unloaded while serving;
 *  - --batch-tokens 16: a long prompt evaluated in pieces of at most 16 tokens (passes in the log);
 *  - --max-adapters: a load beyond it refused (409), or with "evict" the least recently used adapter
 *    unloaded; 8 loads with eviction racing 32 requests naming adapters being evicted (each request
 *    200 or 404 adapter_not_found, never more than the limit loaded, exit 0 / no leak);
 *  - SIGTERM: in-flight requests finish, exit status 0 (under `make sanitize` LeakSanitizer then
 *    also checks the whole server for leaks: a leak is a non-zero exit).
 */
#include "testlib.h"
#include "tinymodel.c"
#include "serve_testkit.h"

typedef struct par_job {
    const char *extra;
    char *text;
} par_job;

static void *par_run(void *a) {
    par_job *j = a;
    j->text = complete(j->extra, "hello world", 24, "0", "1", "1", 0);
    return NULL;
}

typedef struct st_job {
    int status, ok429;
} st_job;

static void *st_run(void *a) {
    st_job *j = a;
    resp r = http("POST", "/v1/completions", "{\"prompt\":\"hello world\",\"max_tokens\":110,\"temperature\":0}");
    j->status = r.status;
    j->ok429 = r.body && strstr(r.body, "rate_limit_exceeded") != NULL;
    free(r.body);
    return NULL;
}

static af_status save_adapter(const af_model *m, const char *dir, int num_classes, uint64_t seed) {
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4;
    o.targets = "all-linear";
    o.num_classes = num_classes;
    o.seed = seed;
    af_lora_trainer *tr = NULL;
    AF_TRY(af_lora_trainer_new(m, &o, &tr));
    const int64_t np = af_lora_trainer_n_params(tr);
    float *P = malloc(sizeof(float) * (size_t)np);
    uint64_t rng = seed;
    for (int64_t i = 0; i < np; i++) P[i] = tl_rand_uniform(&rng, -0.4f, 0.4f);
    af_status st = af_lora_trainer_set_params(tr, P);
    if (st == AF_OK) st = af_lora_trainer_save_adapter(tr, dir, NULL);
    free(P);
    af_lora_trainer_free(tr);
    return st;
}

/* serve's llama-server flags: --alias (the model id, with or without .gguf), -np, -c, --api-key
 * (Bearer; /health open; 401 OpenAI error elsewhere, the adapter routes included), and any model id
 * when no adapter is loaded. */
static void serve_flags(void) {
    if (!CHECK(start_server("--alias mine -np 2 -c 96 --api-key s3cret") == 1, "server with --alias -np -c --api-key"))
        return;
    char *log = tl_read_file(P_("server.log"), NULL);
    CHECK(log && strstr(log, "max 2 sequences, 96 positions"), "-np 2 -c 96 reach the server: %s", log ? log : "");
    free(log);
    resp r = http("GET", "/health", NULL);
    CHECK(r.status == 200, "/health needs no key (%d)", r.status);
    free(r.body);
    r = http("GET", "/v1/models", NULL);
    CHECK(r.status == 401 && strstr(r.body, "\"invalid_api_key\""), "no key: 401 with an OpenAI error: %d %s", r.status, r.body);
    free(r.body);
    g_auth = "Authorization: Bearer s3cre\r\n";
    r = http("POST", "/v1/completions", "{\"prompt\":\"hello\",\"max_tokens\":2}");
    CHECK(r.status == 401, "a wrong key (a prefix of the right one): 401 (%d)", r.status);
    free(r.body);
    g_auth = "Authorization: Bearer s3cret\r\n";
    r = http("GET", "/v1/models", NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"id\":\"mine\"") && !strstr(r.body, "\"id\":\"tiny\""),
          "with the key: the models, the base model named by --alias: %d %s", r.status, r.body);
    free(r.body);
    const char *ids[] = {"mine", "mine.gguf"};
    for (int i = 0; i < 2; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\":\"hello\",\"max_tokens\":2,\"model\":\"%s\"}", ids[i]);
        r = http("POST", "/v1/completions", body);
        CHECK(r.status == 200, "model id '%s' is the base model: %d %s", ids[i], r.status, r.body);
        free(r.body);
    }
    r = http("POST", "/v1/completions", "{\"prompt\":\"hello\",\"max_tokens\":2,\"model\":\"other\"}");
    CHECK(r.status == 404, "with adapters loaded, an unknown id is a 404 (%d)", r.status);
    free(r.body);
    g_auth = NULL;
    r = http("POST", "/lora-adapters/unload", "{\"id\":0}");
    CHECK(r.status == 401, "the adapter routes need the key too (%d)", r.status);
    free(r.body);
    r = http("GET", "/api/runs", NULL);
    CHECK(r.status == 401, "the web page's data routes need the key too (%d)", r.status);
    free(r.body);
    r = http("GET", "/", NULL);
    CHECK(r.status == 200 && strstr(r.body, "api-key"), "the page itself loads without the key and asks for it (%d)", r.status);
    free(r.body);
    CHECK(stop_server() == 0, "server with --api-key: exit 0");
    g_bare = 1; /* one model, no adapter: any id is that model (llama-server) */
    setenv("AFINAR_API_KEY", "from-env", 1); /* the key from the environment (kept out of ps) */
    const int started = start_server("");
    unsetenv("AFINAR_API_KEY");
    if (CHECK(started == 1, "server without adapters")) {
        r = http("POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2,\"model\":\"gpt-4o\"}");
        CHECK(r.status == 401, "AFINAR_API_KEY: a request without the key is refused (%d)", r.status);
        free(r.body);
        g_auth = "Authorization: Bearer from-env\r\n";
        r = http("POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2,\"model\":\"gpt-4o\"}");
        CHECK(r.status == 200, "no adapter loaded: any model id is the model: %d %s", r.status, r.body);
        free(r.body);
        g_auth = NULL;
        CHECK(stop_server() == 0, "server without adapters: exit 0");
    }
    g_bare = 0;
}

static void rm_rf(const char *d) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd) != 0) printf("note: could not remove %s\n", d);
}

/* --max-adapters: a load beyond it refused (409) or evicting the least recently used adapter;
 * loads with eviction racing requests that name adapters being unloaded. */
typedef struct race_job {
    int n200, n404, other, k;
} race_job;

static void *race_client(void *arg) {
    race_job *j = arg;
    for (int i = 0; i < 8; i++) {
        /* the ids loaded a moment ago (GET /lora-adapters), one or two of them: being evicted meanwhile
         * gives 404 adapter_not_found, else the request is served */
        resp g = http("GET", "/lora-adapters", NULL);
        int ids[8], n = 0;
        for (const char *p = g.body; p && n < 8 && (p = strstr(p, "\"id\":")); p++) ids[n++] = atoi(p + 5);
        free(g.body);
        const int x = n ? ids[(i + j->k) % n] : 0, y = n ? ids[(i + j->k + 1) % n] : 0;
        char body[200];
        snprintf(body, sizeof body,
                 "{\"prompt\":\"hello world\",\"max_tokens\":12,\"temperature\":0,\"lora\":[{\"id\":%d,\"scale\":1},"
                 "{\"id\":%d,\"scale\":%s}]%s}",
                 x, y, i % 3 ? "0.5" : "0", i % 2 ? ",\"stream\":true" : "");
        resp r = http("POST", "/v1/completions", body);
        j->n200 += r.status == 200;
        j->n404 += r.status == 404 && r.body && strstr(r.body, "adapter_not_found");
        j->other += r.status != 200 && !(r.status == 404 && r.body && strstr(r.body, "adapter_not_found"));
        free(r.body);
    }
    return NULL;
}

static void *race_loader(void *arg) {
    race_job *j = arg;
    for (int i = 0; i < 8; i++) {
        char body[700];
        snprintf(body, sizeof body, "{\"name\":\"r%d\",\"path\":\"%s\",\"evict\":true}", i, P_("lm"));
        resp r = http("POST", "/lora-adapters/load", body);
        j->n200 += r.status == 200;
        j->other += r.status != 200 && !(r.status == 409 && r.body && strstr(r.body, "in use by a request"));
        free(r.body);
    }
    return NULL;
}

static void max_adapters_test(void) {
    if (start_server("--max-adapters 3 --parallel 2 --batch-tokens 16") != 1) {
        CHECK(0, "server with --max-adapters 3 --batch-tokens 16");
        return;
    }
    char body[700];
    /* chunked prefill: a long prompt goes in pieces of at most 16 tokens, one per pass (the log) */
    {
        char prompt[400] = "";
        for (int i = 0; i < 8; i++) strcat(prompt, "hello world "); /* 96 tokens of the tiny vocabulary */
        char *t = complete(NULL, prompt, 4, "0", "1", "1", 0);
        free(t);
        char *log = tl_read_file(P_("server.log"), NULL);
        const char *p = log ? strstr(log, " prompt tokens (") : NULL;
        int np = 0, nc = -1, passes = 0;
        if (p) {
            while (p > log && p[-1] != ' ') p--;
            sscanf(p, "%d prompt tokens (%d from the cache) in %d passes", &np, &nc, &passes);
        }
        const int lo = (np - nc + 15) / 16;
        CHECK(np > 32 && nc == 0 && passes >= lo && passes <= lo + 1,
              "--batch-tokens 16: a %d-token prompt in %d passes (expected %d or %d)", np, passes, lo, lo + 1);
        free(log);
    }
    snprintf(body, sizeof body, "{\"name\":\"lm2\",\"path\":\"%s\"}", P_("lm"));
    resp r = http("POST", "/lora-adapters/load", body);
    CHECK(r.status == 200 && strstr(r.body, "{\"id\":2}"), "third adapter loads: %d %s", r.status, r.body);
    free(r.body);
    snprintf(body, sizeof body, "{\"name\":\"lm3\",\"path\":\"%s\"}", P_("lm"));
    r = http("POST", "/lora-adapters/load", body);
    CHECK(r.status == 409 && strstr(r.body, "adapter_limit") && strstr(r.body, "--max-adapters 3"),
          "a fourth is refused with 409: %d %s", r.status, r.body);
    free(r.body);
    char *a = complete(",\"model\":\"lm\"", "hello world", 8, "0", "1", "1", 0); /* lm and lm2 used: cls is the LRU */
    char *b = complete(",\"model\":\"lm2\"", "hello world", 8, "0", "1", "1", 0);
    free(a), free(b);
    snprintf(body, sizeof body, "{\"name\":\"lm3\",\"path\":\"%s\",\"evict\":true}", P_("lm"));
    r = http("POST", "/lora-adapters/load", body);
    CHECK(r.status == 200 && strstr(r.body, "{\"id\":3,\"evicted\":1}"), "with evict: the least recently used (cls) goes: %d %s",
          r.status, r.body);
    free(r.body);
    r = http("GET", "/lora-adapters", NULL);
    CHECK(r.status == 200 && !strstr(r.body, "\"cls\"") && strstr(r.body, "\"lm3\""), "GET /lora-adapters: %s", r.body);
    free(r.body);
    r = http("POST", "/lora-adapters/load", "{\"name\":\"x\",\"path\":\"/tmp\",\"evict\":1}");
    CHECK(r.status == 400 && strstr(r.body, "\"param\":\"evict\""), "evict must be a boolean: %d", r.status);
    free(r.body);
    /* races: 4 clients naming loaded ids while a loader loads 8 more with eviction */
    race_job cj[4], lj;
    memset(cj, 0, sizeof cj), memset(&lj, 0, sizeof lj);
    pthread_t th[5];
    for (int i = 0; i < 4; i++) {
        cj[i].k = i;
        pthread_create(&th[i], NULL, race_client, &cj[i]);
    }
    pthread_create(&th[4], NULL, race_loader, &lj);
    int n200 = 0, n404 = 0, other = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        n200 += cj[i].n200, n404 += cj[i].n404, other += cj[i].other;
    }
    pthread_join(th[4], NULL);
    printf("serve: --max-adapters 3 under load: %d loads with eviction while 32 requests ran (%d served, %d adapter gone)\n",
           lj.n200, n200, n404);
    CHECK(other == 0 && lj.other == 0 && n200 + n404 == 32 && n200 >= 1,
          "load/evict races: every request served or 404 adapter_not_found, every load 200 or 409 in use (%d other, %d loader other)",
          other, lj.other);
    /* On a busy machine every LRU adapter can be in use at each of the 8 loads (all 409, as
     * documented): then a load with nothing in flight must evict and succeed. */
    if (lj.n200 == 0) {
        snprintf(body, sizeof body, "{\"name\":\"r8\",\"path\":\"%s\",\"evict\":true}", P_("lm"));
        r = http("POST", "/lora-adapters/load", body);
        lj.n200 += r.status == 200 && strstr(r.body, "\"evicted\":");
        free(r.body);
    }
    CHECK(lj.n200 >= 1, "a load with eviction succeeds (during the races, or after them when every load met an adapter in use)");
    r = http("GET", "/lora-adapters", NULL);
    int listed = 0;
    for (const char *p = r.body; p && (p = strstr(p, "\"name\":")); p++) listed++;
    CHECK(r.status == 200 && listed <= 3, "never more than --max-adapters loaded (%d listed)", listed);
    free(r.body);
    CHECK(stop_server() == 0, "--max-adapters server: exit 0 (no leak under the sanitizer build)");
}

int main(void) {
    af_model *m = NULL;
    const int ready = stk_setup("test_serve", 0, &m);
    if (ready == 0) return tl_finish("test_serve");
    if (ready < 0 && !g_dir[0]) return 1;
    if (ready < 0 ||
        !CHECK(save_adapter(m, P_("lm"), 0, 11) == AF_OK, "lm adapter: %s", af_last_error()) ||
        !CHECK(save_adapter(m, P_("cls"), 3, 12) == AF_OK, "cls adapter: %s", af_last_error()))
        goto out;
    /* a --runs directory: one run, a hidden entry, a link out, a run whose metrics.jsonl links out */
    char runs_arg[1200];
    {
        mkdir(P_("runs"), 0755);
        mkdir(P_("runs/good"), 0755);
        mkdir(P_("runs/.hidden"), 0755);
        mkdir(P_("runs/sym"), 0755);
        FILE *f = fopen(P_("runs/good/metrics.jsonl"), "w");
        if (f) {
            fputs("{\"type\":\"train\",\"step\":1,\"loss\":2.5}\n{\"type\":\"train\",\"step\":2,\"loss\":2.0}\n{\"type\":\"tr", f);
            fclose(f);
        }
        f = fopen(P_("runs/good/run.json"), "w");
        if (f) fputs("{\"total_steps\":10,\"labels\":[\"a\",\"b\"]}", f), fclose(f);
        f = fopen(P_("runs/good/eval.json"), "w");
        if (f) fputs("{\"accuracy\":0.5,\"confusion\":[[1,0],[1,0]]}", f), fclose(f);
        f = fopen(P_("runs/.hidden/run.json"), "w");
        if (f) fputs("{}", f), fclose(f);
        f = fopen(P_("runs/sym/run.json"), "w");
        if (f) fputs("{}", f), fclose(f);
        if (symlink("/etc/hostname", P_("runs/sym/metrics.jsonl")) != 0 || symlink("/", P_("runs/out")) != 0)
            CHECK(0, "symlinks for the runs test");
        snprintf(runs_arg, sizeof runs_arg, "--parallel 4 --queue 8 --runs %s", P_("runs"));
    }
    const int s = start_server(runs_arg);
    if (s < 0) {
        tl_skip("serve: the binary was built without libmicrohttpd");
        goto out;
    }
    if (!CHECK(s == 1, "the server starts (log: %s)", P_("server.log"))) goto out;
    resp r = http("GET", "/health", NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"ok\""), "GET /health: %d %s", r.status, r.body);
    free(r.body);
    r = http("GET", "/v1/models", NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"id\":\"tiny\"") && strstr(r.body, "\"id\":\"lm\"") && strstr(r.body, "\"id\":\"cls\""),
          "GET /v1/models lists the base and both adapters: %s", r.body);
    free(r.body);
    r = http("GET", "/lora-adapters", NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"id\":0") && strstr(r.body, "\"id\":1"), "GET /lora-adapters: %s", r.body);
    free(r.body);

    /* the web page and its runs API (web.c) */
    {
        static const struct {
            const char *method, *path;
            int status;
            const char *has; /* in the body */
        } web[] = {
            {"GET", "/", 200, "<title>afinar</title>"},
            {"GET", "/index.html", 200, "/app.js"},
            {"GET", "/app.js", 200, "use strict"},
            {"GET", "/style.css", 200, "body"},
            {"POST", "/app.js", 405, "only GET"},
            {"GET", "/api/runs", 200, "\"runs\":[{\"name\":\""},
            {"GET", "/api/runs/good", 200, "\"confusion\":[[1,0],[1,0]]"},
            {"GET", "/api/runs/good/metrics", 200, "\"step\":2"},
            {"GET", "/api/runs/good/metrics?from=9999", 200, "\"reset\":true"},
            {"GET", "/api/runs/good/metrics?from=-1", 400, "byte offset"},
            {"GET", "/api/runs/good/metrics?from=x", 400, "byte offset"},
            {"GET", "/api/runs/good/load", 405, "use POST"},
            {"POST", "/api/runs/good/load", 404, "no best/"},
            {"POST", "/api/runs/good/metrics", 405, "use GET"},
            {"GET", "/api/runs/good/other", 404, "no route"},
            {"GET", "/api/runs/out", 404, "no run"},
            {"GET", "/api/runs/.hidden", 404, "no such run"},
            {"GET", "/api/runs/..%2F..%2Fetc", 404, "no such run"},
            {"GET", "/api/runs/good%2F..%2F..", 404, "\"error\""},
            {"GET", "/api/runs/nope", 404, "no run 'nope'"},
            {"GET", "/api/runs/sym/metrics", 200, "\"lines\":[]"},
            {"GET", "/api/runsx", 404, "no route"},
        };
        for (size_t i = 0; i < sizeof web / sizeof web[0]; i++) {
            r = http(web[i].method, web[i].path, NULL);
            CHECK(r.status == web[i].status && r.body && strstr(r.body, web[i].has), "web: %s %s -> %d (want %d, '%s'): %.200s",
                  web[i].method, web[i].path, r.status, web[i].status, web[i].has, r.body ? r.body : "");
            free(r.body);
        }
        r = http("GET", "/api/runs", NULL);
        CHECK(r.status == 200 && strstr(r.body, "\"name\":\"good\"") && strstr(r.body, "\"name\":\"sym\"") &&
                  !strstr(r.body, "hidden") && !strstr(r.body, "\"out\"") && strstr(r.body, "\"step\":2"),
              "web: /api/runs lists good (last step 2) and sym only: %s", r.body);
        free(r.body);
        r = http("GET", "/api/runs/good/metrics?from=0", NULL);
        const char *nx = r.body ? strstr(r.body, "\"next\":") : NULL;
        const long next = nx ? atol(nx + 7) : -1;
        CHECK(r.status == 200 && next == 74, "web: metrics stop before the unfinished third line (next %ld): %s", next, r.body);
        free(r.body);
        char q[64];
        snprintf(q, sizeof q, "/api/runs/good/metrics?from=%ld", next);
        r = http("GET", q, NULL);
        CHECK(r.status == 200 && strstr(r.body, "\"lines\":[]") && strstr(r.body, "\"reset\":false"), "web: nothing new after next: %s", r.body);
        free(r.body);
    }

    /* equality with afinar generate */
    struct {
        const char *extra, *adapter, *temp, *top_p, *seed;
    } cases[] = {{NULL, NULL, "0", "1", "1"},
                 {",\"model\":\"lm\"", "lm", "0", "1", "1"},
                 {",\"lora\":[{\"id\":0,\"scale\":1}]", "lm", "0", "1", "1"},
                 {",\"lora\":[{\"id\":0,\"scale\":1},{\"id\":1,\"scale\":0}]", "lm", "0", "1", "1"}, /* scale 0 = off */
                 {NULL, NULL, "0.9", "0.95", "7"},
                 {",\"model\":\"lm\"", "lm", "0.9", "0.95", "7"}};
    int n_eq = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *g = generate(cases[i].adapter ? P_(cases[i].adapter) : NULL, "hello world", 24, cases[i].temp, cases[i].top_p,
                           cases[i].seed);
        char *a = complete(cases[i].extra, "hello world", 24, cases[i].temp, cases[i].top_p, cases[i].seed, 0);
        char *b = complete(cases[i].extra, "hello world", 24, cases[i].temp, cases[i].top_p, cases[i].seed, 1);
        n_eq += CHECK(g && !strcmp(a, g), "case %zu (%s, temp %s): server text == afinar generate\n  server   [%s]\n  generate [%s]", i,
                      cases[i].adapter ? cases[i].adapter : "base", cases[i].temp, a, g ? g : "");
        CHECK(!strcmp(a, b), "case %zu: streamed deltas == the non-streamed text", i);
        free(g), free(a), free(b);
    }
    printf("serve: %d of %d completions equal to afinar generate (greedy, adapter by model id and by lora field, a scale-0 "
           "entry off, seeded sampling)\n", n_eq, (int)(sizeof cases / sizeof cases[0]));
    /* 4 at once, different adapters (one request with two together), in one batch == alone */
    {
        const char *ex[4] = {NULL, ",\"model\":\"lm\"", ",\"model\":\"cls\"",
                             ",\"lora\":[{\"id\":0,\"scale\":0.5},{\"id\":1,\"scale\":1}]"};
        par_job jobs[4];
        pthread_t th[4];
        char *solo[4];
        for (int i = 0; i < 4; i++) solo[i] = complete(ex[i], "hello world", 24, "0", "1", "1", 0);
        for (int i = 0; i < 4; i++) {
            jobs[i].extra = ex[i];
            pthread_create(&th[i], NULL, par_run, &jobs[i]);
        }
        int same = 1;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            same &= !strcmp(jobs[i].text, solo[i]);
            free(jobs[i].text);
            free(solo[i]);
        }
        CHECK(same, "4 concurrent requests with different adapters (two together in one) give each its solo text");
    }
    /* classify == afinar predict */
    {
        r = http("POST", "/v1/classify", "{\"model\":\"cls\",\"input\":[\"ab goal\",\"chip soup\"]}");
        CHECK(r.status == 200 && strstr(r.body, "\"probabilities\""), "classify: %d %s", r.status, r.body);
        FILE *f = fopen(P_("in.jsonl"), "w");
        if (f) {
            fputs("{\"input\": \"ab goal\"}\n{\"input\": \"chip soup\"}\n", f);
            fclose(f);
        }
        char *av[] = {"afinar", "predict", "-m", (char *)P_("tiny.gguf"), "-a", (char *)P_("cls"), "--input", (char *)P_("in.jsonl"),
                      "-t", "1", NULL};
        int rc = 0;
        char *pred = run_cli(av, &rc);
        /* predict's lines: {"label":"0","label_id":0,"probs":[...]}: the server's data entries carry the same */
        int match = rc == 0 && pred && r.body;
        const char *p = pred, *q = r.body;
        for (int i = 0; match && i < 2; i++) {
            const char *pp = strstr(p, "\"probs\":["), *qq = strstr(q, "\"probs\":[");
            match = pp && qq && !strncmp(pp, qq, (size_t)(strchr(pp, ']') - pp));
            const char *lp = strstr(p, "\"label_id\":"), *lq = strstr(q, "\"label_id\":");
            match = match && lp && lq && atoi(lp + 11) == atoi(lq + 11);
            p = pp ? pp + 1 : p, q = qq ? qq + 1 : q;
        }
        CHECK(match, "classify == afinar predict (label ids and probabilities)\n  server  %s\n  predict %s", r.body, pred ? pred : "");
        free(pred);
        free(r.body);
    }
    /* bad input */
    struct {
        const char *method, *path, *body;
        int status;
        const char *needle;
    } bad[] = {
        {"POST", "/v1/chat/completions", "{\"messages\": [", 400, "not valid JSON"},
        {"POST", "/v1/chat/completions", "[1,2]", 400, "must be a JSON object"},
        {"POST", "/v1/chat/completions", "{\"messages\":\"hi\"}", 400, "\"param\":\"messages\""},
        {"POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", 400, "role"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "\"param\":\"temperature\""},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1.5}", 400, "must be an integer"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"stream\":1}", 400, "true or false"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"model\":\"nope\"}", 404, "model_not_found"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":500}", 400, "context_length_exceeded"},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"lora\":[{\"id\":9}]}", 404, "adapter_not_found"},
        {"POST", "/v1/classify", "{\"model\":\"lm\",\"input\":\"x\"}", 400, "no classification head"},
        {"POST", "/v1/classify", "{\"input\":\"x\"}", 404, "model_not_found"},
        {"GET", "/v1/nothing", NULL, 404, "no route"},
        {"POST", "/lora-adapters/load", "{\"name\":\"x\",\"path\":\"/nonexistent\"}", 400, "nonexistent"},
        /* a NUL character (\u0000) in any string: 400 naming the field, never the text cut short */
        {"POST", "/v1/completions", "{\"prompt\":\"a\\u0000 the quick brown fox\"}", 400, "\"param\":\"prompt\""},
        {"POST", "/v1/completions", "{\"prompt\":[\"x\\u0000y\"]}", 400, "\"param\":\"prompt[0]\""},
        {"POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\\u0000there\"}]}", 400,
         "\"param\":\"messages[0].content\""},
        {"POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"user\\u0000\",\"content\":\"x\"}]}",
         400, "\"param\":\"messages[1].role\""},
        {"POST", "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"name\":\"a\\u0000\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]}", 400,
         "\"param\":\"messages[0].name\""},
        {"POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\\u0000\"}]}]}",
         400, "\"param\":\"messages[0].content[0].text\""},
        {"POST", "/v1/completions", "{\"prompt\":\"x\",\"stop\":[\"\\u0000\"]}", 400, "\"param\":\"stop[0]\""},
        {"POST", "/v1/classify", "{\"model\":\"cls\",\"input\":[\"ok\",\"a\\u0000b\"]}", 400, "\"param\":\"input[1]\""},
        {"POST", "/lora-adapters/load", "{\"name\":\"x\",\"path\":\"/tmp\\u0000/y\"}", 400, "\"param\":\"path\""},
        /* a route asked with the wrong method: 405 naming the path as written and the method it takes */
        {"GET", "/v1/chat/completions", NULL, 405, "/v1/chat/completions takes POST, not GET"},
        {"GET", "/v1/completions", NULL, 405, "/v1/completions takes POST"},
        {"POST", "/v1/models", "{}", 405, "/v1/models takes GET, not POST"},
        {"DELETE", "/lora-adapters", NULL, 405, "/lora-adapters takes GET, POST"},
    };
    int bad_ok = 0;
    const int nbad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < nbad; i++) {
        r = http(bad[i].method, bad[i].path, bad[i].body);
        bad_ok += CHECK(r.status == bad[i].status && r.body && strstr(r.body, "{\"error\":{\"message\":") &&
                            strstr(r.body, bad[i].needle),
                        "%s %s %s: want %d with '%s', got %d %s", bad[i].method, bad[i].path, bad[i].body ? bad[i].body : "",
                        bad[i].status, bad[i].needle, r.status, r.body ? r.body : "");
        free(r.body);
    }
    {
        char *big = malloc(8192);
        memset(big, 'a', 8191);
        big[8191] = 0;
        memcpy(big, "{\"prompt\":\"", 11);
        r = http("POST", "/v1/completions", big);
        bad_ok += CHECK(r.status == 413 && strstr(r.body, "request_too_large"), "a body over --max-body: 413 (%d %s)", r.status, r.body);
        free(r.body);
        free(big);
    }
    printf("serve: %d of %d bad requests answered with the right status and an OpenAI error object\n", bad_ok, nbad + 1);
    /* a client that vanishes mid-request */
    {
        /* (the tiny model answers in milliseconds, before a disconnect can be seen: that the request
         * is cancelled is checked on SmolLM2 by tests/check_serve_clients.sh; here: nothing breaks) */
        const char *body = "{\"prompt\":\"hello world\",\"max_tokens\":100,\"temperature\":0,\"stream\":true}";
        char req[512];
        snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
        for (int i = 0; i < 3; i++) {
            int fd = connect_port();
            CHECK(fd >= 0 && send_all(fd, req, strlen(req) - (i == 2 ? 10 : 0)), "send");
            close(fd); /* i = 2: gone in the middle of the body */
        }
        usleep(300000);
        r = http("GET", "/health", NULL);
        CHECK(r.status == 200, "the server keeps serving after a vanished client");
        free(r.body);
    }
    /* adapters loaded and unloaded while serving */
    {
        char body[700];
        snprintf(body, sizeof body, "{\"name\":\"lm2\",\"path\":\"%s\"}", P_("lm"));
        r = http("POST", "/lora-adapters/load", body);
        CHECK(r.status == 200 && strstr(r.body, "\"id\":2"), "load lm2: %d %s", r.status, r.body);
        free(r.body);
        char *a = complete(",\"model\":\"lm2\"", "hello world", 24, "0", "1", "1", 0);
        char *b = complete(",\"model\":\"lm\"", "hello world", 24, "0", "1", "1", 0);
        CHECK(!strcmp(a, b), "the adapter loaded while serving gives the same text as the same adapter loaded at start");
        free(a), free(b);
        r = http("POST", "/lora-adapters/unload", "{\"name\":\"lm2\"}");
        CHECK(r.status == 200, "unload lm2: %d %s", r.status, r.body);
        free(r.body);
        r = http("POST", "/v1/completions", "{\"prompt\":\"x\",\"model\":\"lm2\"}");
        CHECK(r.status == 404, "an unloaded adapter is gone (%d)", r.status);
        free(r.body);
        r = http("POST", "/lora-adapters", "[{\"id\":0,\"scale\":0.5}]");
        CHECK(r.status == 200 && strstr(r.body, "\"scale\":0.5"), "POST /lora-adapters sets a scale: %s", r.body);
        free(r.body);
    }
    CHECK(stop_server() == 0, "SIGTERM: the server drains and exits 0 (no leak under the sanitizer build)");
    /* 429: one slot, a queue of one, four requests at once */
    if (start_server("--parallel 1 --queue 1 --timeout 2") == 1) {
        /* a slow client (half a request line, then nothing): closed after --timeout */
        int fd = connect_port();
        struct timeval tv = {20, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        const double t0 = (double)time(NULL);
        char c;
        const int sent = fd >= 0 && send_all(fd, "POST /v1/completions HTTP/1.1\r\n", 31);
        const ssize_t got = sent ? recv(fd, &c, 1, 0) : -1;
        CHECK(sent && got <= 0 && (double)time(NULL) - t0 < 15, "a slow client is disconnected after --timeout (recv %zd after %.0f s)",
              got, (double)time(NULL) - t0);
        if (fd >= 0) close(fd);
        st_job jobs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, st_run, &jobs[i]);
        int n200 = 0, n429 = 0, other = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            n200 += jobs[i].status == 200;
            n429 += jobs[i].status == 429 && jobs[i].ok429;
            other += jobs[i].status != 200 && jobs[i].status != 429;
        }
        printf("serve: 4 requests at once with --parallel 1 --queue 1: %d served, %d refused with 429\n", n200, n429);
        CHECK(n200 >= 1 && n429 >= 1 && other == 0, "too many requests: 429 with an OpenAI error (%d x 200, %d x 429, %d other)",
              n200, n429, other);
        resp h = http("GET", "/health", NULL);
        CHECK(h.status == 200, "still serving after the 429s");
        free(h.body);
        CHECK(stop_server() == 0, "second server: exit 0");
    }
    max_adapters_test();
    serve_flags();
out:
    af_model_free(m);
    if (!getenv("TL_KEEP")) rm_rf(g_dir);
    return tl_finish("test_serve");
}
