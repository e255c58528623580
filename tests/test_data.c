/*
 * test_data.c — JSONL corpus reader (formats/jsonl.h) and tokenized data sets (train/data.h):
 * valid files, every error message (file:line + field), string and multi-label labels, statistics
 * on a synthetic set with known percentiles, truncation, class weights, shuffles, packed batches,
 * stratified splits, and (when models/ has it) tokenization with SmolLM2's tokenizer.
 */
#include "formats/jsonl.h"
#include "testlib.h"
#include "tokenizer/tokenizer.h"
#include "train/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/afinar_test_data_XXXXXX";

/* Writes `content` to <tmpdir>/<name>; returns the path (static ring of buffers). */
static const char *write_tmp(const char *name, const char *content) {
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    FILE *fp = fopen(p, "wb");
    if (fp) {
        fputs(content, fp);
        fclose(fp);
    }
    return p;
}

/* Reads `content` as a corpus expecting failure with status `st` and a message containing the
 * "path:LINE" prefix (line > 0) and each of the fragments. */
static void expect_err(const char *name, const char *content, const af_corpus_opts *o, af_status want, int line,
                       const char *frag1, const char *frag2) {
    const char *path = write_tmp(name, content);
    af_corpus *c = NULL;
    af_status st = af_corpus_read(path, o, &c);
    const char *msg = af_last_error();
    char pre[600];
    if (line > 0)
        snprintf(pre, sizeof pre, "%s:%d: ", path, line);
    else
        snprintf(pre, sizeof pre, "%s: ", path);
    CHECK(st == want, "%s: status %s, want %s (%s)", name, af_status_name(st), af_status_name(want), msg);
    CHECK(c == NULL, "%s: corpus returned on failure", name);
    CHECK(strstr(msg, pre) == msg, "%s: message '%s' does not start with '%s'", name, msg, pre);
    CHECK(!frag1 || strstr(msg, frag1), "%s: message '%s' lacks '%s'", name, msg, frag1);
    CHECK(!frag2 || strstr(msg, frag2), "%s: message '%s' lacks '%s'", name, msg, frag2);
    af_corpus_free(c);
}

static void test_reader_valid(void) {
    const char *p = write_tmp("ok.jsonl", "{\"input\": \"hello world\", \"label\": 1}\n"
                                          "\n"
                                          "   \r\n"
                                          "{\"label\": 0, \"input\": \"caf\\u00e9 \\\"q\\\"\", \"extra\": [1, 2]}\n"
                                          "{\"input\": \"\", \"label\": 3}"); /* no final newline */
    af_corpus *c = NULL;
    af_status st = af_corpus_read(p, NULL, &c);
    CHECK(st == AF_OK, "valid corpus: %s", af_last_error());
    if (st != AF_OK) return;
    CHECK(c->n == 3, "n = %d, want 3", c->n);
    CHECK(!c->multi_label && c->labels && c->num_classes == 4, "single-label, num_classes %d want 4", c->num_classes);
    CHECK(c->labels[0] == 1 && c->labels[1] == 0 && c->labels[2] == 3, "labels %d %d %d", c->labels[0], c->labels[1],
          c->labels[2]);
    CHECK(c->line_no[0] == 1 && c->line_no[1] == 4 && c->line_no[2] == 5, "line numbers %d %d %d", c->line_no[0],
          c->line_no[1], c->line_no[2]);
    CHECK(!strcmp(c->texts[1], "caf\xc3\xa9 \"q\"") && c->text_len[1] == 9, "unescaped text '%s' (%zu)", c->texts[1],
          c->text_len[1]);
    CHECK(c->text_len[2] == 0 && c->label_names == NULL && c->n_labelled == 3, "empty text kept, no names");
    af_corpus_free(c);

    /* known num_classes keeps classes that never occur */
    af_corpus_opts o;
    af_corpus_opts_init(&o);
    o.num_classes = 6;
    st = af_corpus_read(p, &o, &c);
    CHECK(st == AF_OK && c->num_classes == 6, "num_classes from opts");
    af_corpus_free(c);

    /* custom field names */
    p = write_tmp("fields.jsonl", "{\"text\": \"a\", \"y\": 1}\n{\"text\": \"b\", \"y\": 0}\n");
    af_corpus_opts_init(&o);
    o.text_field = "text";
    o.label_field = "y";
    st = af_corpus_read(p, &o, &c);
    CHECK(st == AF_OK && c->n == 2 && c->labels[0] == 1, "custom fields: %s", af_last_error());
    af_corpus_free(c);
    expect_err("fields2.jsonl", "{\"text\": \"a\", \"label\": 1}\n", &o, AF_ERR_FORMAT, 1, "field 'y': missing",
               NULL);
}

static void test_reader_strings(void) {
    const char *p = write_tmp("str.jsonl", "{\"input\": \"a\", \"label\": \"sport\"}\n"
                                           "{\"input\": \"b\", \"label\": \"business\"}\n"
                                           "{\"input\": \"c\", \"label\": \"tech\"}\n"
                                           "{\"input\": \"d\", \"label\": \"sport\"}\n");
    af_corpus *c = NULL;
    af_status st = af_corpus_read(p, NULL, &c);
    CHECK(st == AF_OK, "string labels: %s", af_last_error());
    if (st == AF_OK) {
        CHECK(c->num_classes == 3 && c->label_names, "3 names");
        CHECK(!strcmp(c->label_names[0], "business") && !strcmp(c->label_names[1], "sport") &&
                  !strcmp(c->label_names[2], "tech"),
              "sorted names");
        CHECK(c->labels[0] == 1 && c->labels[1] == 0 && c->labels[2] == 2 && c->labels[3] == 1, "ids %d %d %d %d",
              c->labels[0], c->labels[1], c->labels[2], c->labels[3]);
        af_corpus_free(c);
    }
    /* with a label list: ids follow the list */
    const char *names[] = {"tech", "sport", "business", "politics"};
    af_corpus_opts o;
    af_corpus_opts_init(&o);
    o.label_names = names;
    o.n_label_names = 4;
    st = af_corpus_read(p, &o, &c);
    CHECK(st == AF_OK, "string labels with list: %s", af_last_error());
    if (st == AF_OK) {
        CHECK(c->num_classes == 4 && !strcmp(c->label_names[3], "politics"), "list kept");
        CHECK(c->labels[0] == 1 && c->labels[1] == 2 && c->labels[2] == 0, "ids by list");
        af_corpus_free(c);
    }
    expect_err("unk.jsonl", "{\"input\": \"a\", \"label\": \"tech\"}\n\n{\"input\": \"b\", \"label\": \"spam\"}\n", &o,
               AF_ERR_FORMAT, 3, "field 'label': unknown label name \"spam\"", "known: tech, sport, business");
    /* int labels are checked against the list size */
    expect_err("intlist.jsonl", "{\"input\": \"a\", \"label\": 4}\n", &o, AF_ERR_FORMAT, 1,
               "field 'label': value 4 out of range [0, 4)", NULL);
    /* labels.txt and --labels parsing */
    char **ln = NULL;
    int32_t nn = 0;
    st = af_labels_parse_list(" a, b ,c", &ln, &nn);
    CHECK(st == AF_OK && nn == 3 && !strcmp(ln[1], "b") && !strcmp(ln[2], "c"), "parse list");
    af_labels_free(ln, nn);
    st = af_labels_parse_list("a,b,a", &ln, &nn);
    CHECK(st == AF_ERR_INVALID_ARG && strstr(af_last_error(), "duplicate label name \"a\""), "duplicate: %s",
          af_last_error());
    CHECK(af_labels_parse_list("a,,b", &ln, &nn) == AF_ERR_INVALID_ARG, "empty name refused");
    const char *lp = write_tmp("labels.txt", "business\r\nentertainment\n\npolitics\n");
    st = af_labels_read_file(lp, &ln, &nn);
    CHECK(st == AF_OK && nn == 3 && !strcmp(ln[0], "business") && !strcmp(ln[2], "politics"), "labels file");
    af_labels_free(ln, nn);
    lp = write_tmp("labels2.txt", "x\ny\nx\n");
    st = af_labels_read_file(lp, &ln, &nn);
    char want[600];
    snprintf(want, sizeof want, "%s:3: duplicate label name \"x\"", lp);
    CHECK(st == AF_ERR_FORMAT && strstr(af_last_error(), want), "labels file duplicate: %s", af_last_error());
    CHECK(af_labels_read_file("/nonexistent/labels.txt", &ln, &nn) == AF_ERR_IO, "missing labels file");
}

static void test_reader_multi(void) {
    const char *p = write_tmp("multi.jsonl", "{\"input\": \"a\", \"labels\": [2, 0]}\n"
                                             "{\"input\": \"b\", \"labels\": []}\n"
                                             "{\"input\": \"c\", \"labels\": [1, 1, 3]}\n");
    af_corpus *c = NULL;
    af_status st = af_corpus_read(p, NULL, &c);
    CHECK(st == AF_OK, "multi-label: %s", af_last_error());
    if (st == AF_OK) {
        CHECK(c->multi_label && !c->labels && c->num_classes == 4, "multi, C=%d", c->num_classes);
        const int32_t want_off[] = {0, 2, 2, 4}, want_ids[] = {0, 2, 1, 3};
        int ok = 1;
        for (int i = 0; i < 4; i++) ok &= c->label_off[i] == want_off[i];
        for (int i = 0; i < 4; i++) ok &= c->label_ids[i] == want_ids[i];
        CHECK(ok, "CSR labels (sorted, unique)");
        af_corpus_free(c);
    }
    p = write_tmp("multis.jsonl", "{\"input\": \"a\", \"labels\": [\"y\", \"x\"]}\n"
                                  "{\"input\": \"b\", \"labels\": [\"z\", \"y\", \"z\"]}\n");
    st = af_corpus_read(p, NULL, &c);
    CHECK(st == AF_OK, "multi-label strings: %s", af_last_error());
    if (st == AF_OK) {
        const int32_t want_off[] = {0, 2, 4}, want_ids[] = {0, 1, 1, 2}; /* x=0 y=1 z=2 */
        int ok = c->num_classes == 3;
        for (int i = 0; i < 3; i++) ok &= c->label_off[i] == want_off[i];
        for (int i = 0; i < 4; i++) ok &= c->label_ids[i] == want_ids[i];
        CHECK(ok, "multi-label string ids");
        af_corpus_free(c);
    }
    expect_err("mix1.jsonl", "{\"input\": \"a\", \"labels\": [0]}\n{\"input\": \"b\", \"label\": 1}\n", NULL,
               AF_ERR_FORMAT, 2, "field 'label': got a single label but earlier lines are multi-label", NULL);
    expect_err("mix2.jsonl", "{\"input\": \"a\", \"labels\": [0, \"x\"]}\n", NULL, AF_ERR_FORMAT, 1,
               "field 'labels': got a string label but earlier lines use integer labels", NULL);
    expect_err("mix3.jsonl", "{\"input\": \"a\", \"labels\": [0, [1]]}\n", NULL, AF_ERR_FORMAT, 1,
               "field 'labels': expected an integer or a string label, got array", NULL);
}

static void test_reader_errors(void) {
    af_corpus_opts o;
    af_corpus_opts_init(&o);
    expect_err("badjson.jsonl", "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"b\" \"label\": 1}\n", NULL,
               AF_ERR_FORMAT, 2, "invalid JSON at column 15", NULL);
    expect_err("trailing.jsonl", "{\"input\": \"a\", \"label\": 0} x\n", NULL, AF_ERR_FORMAT, 1,
               "invalid JSON at column 28", "unexpected text");
    expect_err("notobj.jsonl", "[1, 2]\n", NULL, AF_ERR_FORMAT, 1, "expected a JSON object, got array", NULL);
    expect_err("noinput.jsonl", "{\"label\": 0}\n", NULL, AF_ERR_FORMAT, 1, "no text field", "the line has 'label'");
    expect_err("noinput2.jsonl", "{\"input\": \"a\", \"label\": 0}\n{\"label\": 0}\n", NULL, AF_ERR_FORMAT, 2,
               "field 'input': missing (the line has 'label'", "--text-field NAME");
    expect_err("inputtype.jsonl", "{\"input\": 5, \"label\": 0}\n", NULL, AF_ERR_FORMAT, 1,
               "field 'input': expected a string, got number", NULL);
    expect_err("nolabel.jsonl", "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"a\"}\n", NULL, AF_ERR_FORMAT, 2,
               "field 'label': missing", NULL);
    expect_err("labeltype.jsonl", "{\"input\": \"a\", \"label\": true}\n", NULL, AF_ERR_FORMAT, 1,
               "field 'label': expected an integer or a string label, got boolean", NULL);
    expect_err("labelfrac.jsonl", "{\"input\": \"a\", \"label\": 1.5}\n", NULL, AF_ERR_FORMAT, 1,
               "field 'label': label 1.5 is not an integer", NULL);
    expect_err("labelneg.jsonl", "{\"input\": \"a\", \"label\": -1}\n", NULL, AF_ERR_FORMAT, 1,
               "field 'label': label -1 is negative", NULL);
    o.num_classes = 5;
    expect_err("range.jsonl", "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"a\", \"label\": 7}\n", &o,
               AF_ERR_FORMAT, 2, "field 'label': value 7 out of range [0, 5)", NULL);
    expect_err("kinds.jsonl", "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"a\", \"label\": \"x\"}\n", NULL,
               AF_ERR_FORMAT, 2, "field 'label': got a string label but earlier lines use integer labels", NULL);
    expect_err("empty.jsonl", "", NULL, AF_ERR_FORMAT, 0, "no samples (empty data set)", NULL);
    expect_err("blank.jsonl", "\n  \n\r\n", NULL, AF_ERR_FORMAT, 0, "no samples (empty data set)", NULL);
    af_corpus_opts_init(&o);
    o.max_line_bytes = 40;
    expect_err("long.jsonl", "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaa\", \"label\": 0}\n",
               &o, AF_ERR_FORMAT, 2, "line longer than 40 bytes", NULL);
    af_corpus *c = NULL;
    af_status st = af_corpus_read("/nonexistent/x.jsonl", NULL, &c);
    CHECK(st == AF_ERR_IO && strstr(af_last_error(), "/nonexistent/x.jsonl: cannot open") && !c, "missing file: %s",
          af_last_error());
    /* labels optional (predict): missing labels become -1 */
    af_corpus_opts_init(&o);
    o.labels_optional = 1;
    const char *p = write_tmp("opt.jsonl", "{\"input\": \"a\"}\n{\"input\": \"b\", \"label\": 2}\n");
    st = af_corpus_read(p, &o, &c);
    CHECK(st == AF_OK && c->n == 2 && c->labels[0] == -1 && c->labels[1] == 2 && c->n_labelled == 1,
          "optional labels: %s", af_last_error());
    af_corpus_free(c);
}

/* ---- data sets ---- */
static af_dataset *synthetic(int32_t n, int32_t max_len, const int32_t *counts, int32_t C) {
    /* sample i has i+1 tokens (token value = 1000*i + position); labels cycle through counts */
    int64_t *off = malloc(((size_t)n + 1) * sizeof *off);
    off[0] = 0;
    for (int32_t i = 0; i < n; i++) off[i + 1] = off[i] + i + 1;
    int32_t *ids = malloc((size_t)off[n] * sizeof *ids), *lab = malloc((size_t)n * sizeof *lab);
    for (int32_t i = 0; i < n; i++)
        for (int32_t t = 0; t <= i; t++) ids[off[i] + t] = 1000 * i + t;
    int32_t k = 0;
    for (int32_t c = 0; c < C; c++)
        for (int32_t j = 0; j < counts[c] && k < n; j++) lab[k++] = c;
    while (k < n) lab[k++] = 0;
    af_dataset *ds = NULL;
    af_status st = af_dataset_from_tokens(ids, off, n, lab, NULL, C, max_len, &ds);
    CHECK(st == AF_OK, "from_tokens: %s", af_last_error());
    free(off), free(ids), free(lab);
    return ds;
}

static void test_stats_weights(void) {
    const int32_t counts[] = {60, 30, 10};
    af_dataset *ds = synthetic(100, 90, counts, 3);
    if (!ds) return;
    /* truncation keeps the first tokens */
    CHECK(af_dataset_len(ds, 99) == 90 && ds->orig_len[99] == 100, "truncated to 90");
    CHECK(ds->tokens[ds->tok_off[99]] == 99000 && ds->tokens[ds->tok_off[99] + 89] == 99089, "first tokens kept");
    CHECK(af_dataset_len(ds, 10) == 11, "short sample untouched");
    af_data_stats s;
    CHECK(af_data_stats_compute(ds, &s) == AF_OK, "stats");
    /* lengths 1..100: nearest rank p50 = 50, p95 = 95, p99 = 99 */
    CHECK(s.len_p50 == 50 && s.len_p95 == 95 && s.len_p99 == 99 && s.len_max == 100 && s.len_min == 1,
          "percentiles p50 %d p95 %d p99 %d max %d", s.len_p50, s.len_p95, s.len_p99, s.len_max);
    CHECK(fabs(s.len_mean - 50.5) < 1e-9, "mean %g", s.len_mean);
    CHECK(s.n_truncated == 10 && s.n_tokens == 4095 + 900, "truncated %d, tokens %lld (want 10, 4995)", s.n_truncated,
          (long long)s.n_tokens);
    CHECK(s.class_count[0] == 60 && s.class_count[1] == 30 && s.class_count[2] == 10, "class counts");
    CHECK(fabs(s.imbalance - 6.0) < 1e-12 && s.min_class == 2 && s.max_class == 0, "imbalance %g", s.imbalance);
    CHECK(af_data_stats_count_longer(&s, 90) == 10 && af_data_stats_count_longer(&s, 0) == 100 &&
              af_data_stats_count_longer(&s, 100) == 0,
          "count_longer");
    /* class weights */
    float w[3];
    CHECK(af_class_weights(&s, "uniform", w) == AF_OK && w[0] == 1 && w[2] == 1, "uniform");
    CHECK(af_class_weights(&s, "inverse-freq", w) == AF_OK, "inverse-freq");
    float want_inv[3] = {100.0f / 180, 100.0f / 90, 100.0f / 30};
    CHECK_CLOSE("inverse-freq weights", w, want_inv, 3, 1e-6, 1e-6);
    double avg = (60 * w[0] + 30 * w[1] + 10 * w[2]) / 100.0;
    CHECK(fabs(avg - 1) < 1e-6, "inverse-freq sample average %g", avg);
    CHECK(af_class_weights(&s, "sqrt-inverse", w) == AF_OK, "sqrt-inverse");
    double S = sqrt(60.0) + sqrt(30.0) + sqrt(10.0);
    float want_sq[3] = {(float)(100 / (sqrt(60.0) * S)), (float)(100 / (sqrt(30.0) * S)), (float)(100 / (sqrt(10.0) * S))};
    CHECK_CLOSE("sqrt-inverse weights", w, want_sq, 3, 1e-6, 1e-6);
    avg = (60 * w[0] + 30 * w[1] + 10 * w[2]) / 100.0;
    CHECK(fabs(avg - 1) < 1e-6, "sqrt-inverse sample average %g", avg);
    CHECK(af_class_weights(&s, "1,2.5, 3", w) == AF_OK && w[1] == 2.5f && w[2] == 3, "explicit weights");
    CHECK(af_class_weights(&s, "1,2", w) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "2 weights given for 3"),
          "wrong count: %s", af_last_error());
    CHECK(af_class_weights(&s, "balanced", w) == AF_ERR_INVALID_ARG, "unknown spec");
    CHECK(af_class_weights(&s, "1,0,1", w) == AF_ERR_INVALID_ARG, "zero weight refused");
    FILE *devnull = fopen("/dev/null", "w");
    const char *names[] = {"a", "b", "c"};
    if (devnull) af_data_stats_print(&s, names, "train", devnull), fclose(devnull);
    af_data_stats_free(&s);
    af_dataset_free(ds);
}

static void test_shuffle_batches(void) {
    /* splitmix64 reference values (Vigna's splitmix64.c, state 0) */
    uint64_t st = 0;
    uint64_t r0 = af_splitmix64(&st), r1 = af_splitmix64(&st);
    CHECK(r0 == 0xE220A8397B1DCDAFull && r1 == 0x6E789E6AA1B965F4ull, "splitmix64 %016llx %016llx",
          (unsigned long long)r0, (unsigned long long)r1);
    int32_t a[100], b[100], c[100], d[100];
    af_shuffle_perm(a, 100, 42, 0);
    af_shuffle_perm(b, 100, 42, 0);
    af_shuffle_perm(c, 100, 43, 0);
    af_shuffle_perm(d, 100, 42, 1);
    int same_ab = !memcmp(a, b, sizeof a), same_ac = !memcmp(a, c, sizeof a), same_ad = !memcmp(a, d, sizeof a);
    CHECK(same_ab && !same_ac && !same_ad, "shuffle determinism: same seed %d, other seed %d, other epoch %d", same_ab,
          same_ac, same_ad);
    int seen[100] = {0}, ok = 1;
    for (int i = 0; i < 100; i++) ok &= a[i] >= 0 && a[i] < 100 && !seen[a[i]]++;
    CHECK(ok, "shuffle is a permutation");

    const int32_t counts[] = {60, 30, 10};
    af_dataset *ds = synthetic(100, 64, counts, 3);
    if (!ds) return;
    af_batcher *bt = NULL;
    CHECK(af_batcher_new(ds, a, 100, 7, &bt) == AF_OK, "batcher");
    if (!bt) return;
    CHECK(af_batcher_count(bt) == 15, "15 batches of <= 7");
    for (int epoch = 0; epoch < 2; epoch++) {
        int cnt[100] = {0}, nb = 0, bad = 0, pos = 0;
        af_packed_batch pb;
        int rc;
        while ((rc = af_batcher_next(bt, &pb)) == 1) {
            nb++;
            bad |= pb.seq_start[0] != 0 || pb.n_tok != pb.seq_start[pb.n_samples] || !pb.labels || pb.multi_hot;
            bad |= pb.n_samples != (nb < 15 ? 7 : 2);
            for (int k = 0; k < pb.n_samples; k++) {
                int32_t i = pb.index[k];
                cnt[i]++;
                bad |= i != (epoch ? d : a)[pos++];
                bad |= pb.labels[k] != ds->labels[i];
                int32_t len = pb.seq_start[k + 1] - pb.seq_start[k];
                bad |= len != af_dataset_len(ds, i);
                bad |= memcmp(pb.tokens + pb.seq_start[k], ds->tokens + ds->tok_off[i], (size_t)len * 4) != 0;
            }
        }
        int once = 1;
        for (int i = 0; i < 100; i++) once &= cnt[i] == 1;
        CHECK(rc == 0 && nb == 15 && !bad && once, "epoch %d: %d batches, every sample once %d, layout ok %d", epoch,
              nb, once, !bad);
        CHECK(af_batcher_reset(bt, d) == AF_OK, "reset with new order");
    }
    af_batcher_free(bt);

    /* stratified split */
    int32_t *tr = NULL, *va = NULL, ntr = 0, nva = 0;
    CHECK(af_dataset_split_stratified(ds, 0.2, 7, &tr, &ntr, &va, &nva) == AF_OK, "split");
    int per[3] = {0}, mark[100] = {0}, ok2 = ntr + nva == 100;
    for (int k = 0; k < nva; k++) per[ds->labels[va[k]]]++, mark[va[k]]++;
    for (int k = 0; k < ntr; k++) mark[tr[k]]++;
    for (int i = 0; i < 100; i++) ok2 &= mark[i] == 1;
    CHECK(ok2 && per[0] == 12 && per[1] == 6 && per[2] == 2, "stratified 20%%: val per class %d %d %d (want 12 6 2)",
          per[0], per[1], per[2]);
    int32_t *tr2 = NULL, *va2 = NULL, n2 = 0, n3 = 0;
    af_dataset_split_stratified(ds, 0.2, 7, &tr2, &n2, &va2, &n3);
    CHECK(n3 == nva && va2 && !memcmp(va, va2, (size_t)nva * 4), "split deterministic");
    free(tr2), free(va2);
    af_dataset_split_stratified(ds, 0.2, 8, &tr2, &n2, &va2, &n3);
    CHECK(va2 && memcmp(va, va2, (size_t)nva * 4) != 0, "other seed, other split");
    free(tr2), free(va2);
    CHECK(af_dataset_split_stratified(ds, 1.0, 7, &tr2, &n2, &va2, &n3) == AF_ERR_INVALID_ARG, "val_frac 1 refused");
    af_dataset *sub = NULL;
    CHECK(af_dataset_subset(ds, va, nva, &sub) == AF_OK && sub->n == nva, "subset");
    if (sub) {
        CHECK(sub->labels[0] == ds->labels[va[0]] && af_dataset_len(sub, nva - 1) == af_dataset_len(ds, va[nva - 1]),
              "subset content");
        af_dataset_free(sub);
    }
    free(tr), free(va);
    af_dataset_free(ds);

    /* multi-label packed batch */
    const int32_t ids[] = {5, 6, 7, 8, 9, 10};
    const int64_t off[] = {0, 2, 3, 6};
    const uint8_t mh[] = {1, 0, 1, 0, 0, 0, 0, 1, 1};
    CHECK(af_dataset_from_tokens(ids, off, 3, NULL, mh, 3, 2, &ds) == AF_OK, "multi-label from_tokens");
    if (!ds) return;
    CHECK(af_batcher_new(ds, NULL, 0, 8, &bt) == AF_OK, "multi batcher");
    af_packed_batch pb;
    CHECK(af_batcher_next(bt, &pb) == 1 && pb.n_samples == 3 && pb.n_tok == 5 && !pb.labels && pb.multi_hot,
          "multi batch shape");
    const int32_t want_tok[] = {5, 6, 7, 8, 9}, want_ss[] = {0, 2, 3, 5};
    float want_mh[9];
    for (int k = 0; k < 9; k++) want_mh[k] = mh[k];
    CHECK(!memcmp(pb.tokens, want_tok, sizeof want_tok) && !memcmp(pb.seq_start, want_ss, sizeof want_ss),
          "multi tokens/offsets (truncated to 2)");
    CHECK_CLOSE("multi-hot", pb.multi_hot, want_mh, 9, 0, 0);
    CHECK(af_batcher_next(bt, &pb) == 0, "end of pass");
    af_data_stats s;
    af_data_stats_compute(ds, &s);
    CHECK(s.class_count[0] == 1 && s.class_count[1] == 1 && s.class_count[2] == 2 && s.n_labelled == 2,
          "multi-label stats");
    af_data_stats_free(&s);
    af_batcher_free(bt);
    af_dataset_free(ds);
}

static void test_real_tokenizer(void) {
    const char *mp = tl_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!mp) return;
    af_model *m = NULL;
    if (af_model_load(T_CTX, mp, &m) != AF_OK) {
        CHECK(0, "model load: %s", af_last_error());
        return;
    }
    const af_tokenizer *tok = af_model_tokenizer(m);
    const char *p = write_tmp("real.jsonl", "{\"input\": \"The quick brown fox jumps over the lazy dog.\", \"label\": 0}\n"
                                            "{\"input\": \"<|im_start|>user hi\", \"label\": 1}\n"
                                            "{\"input\": \"\", \"label\": 1}\n");
    af_corpus *c = NULL;
    af_dataset *ds = NULL;
    CHECK(af_corpus_read(p, NULL, &c) == AF_OK, "real corpus");
    if (c && af_dataset_build(T_CTX, c, tok, 8, &ds) == AF_OK) {
        for (int i = 0; i < 2; i++) {
            int32_t *ids = NULL;
            size_t n = 0;
            af_tokenize(tok, c->texts[i], c->text_len[i], 1, 0, &ids, &n);
            size_t keep = n < 8 ? n : 8;
            CHECK(ds->orig_len[i] == (int32_t)n && af_dataset_len(ds, i) == (int32_t)keep &&
                      !memcmp(ds->tokens + ds->tok_off[i], ids, keep * 4),
                  "sample %d matches af_tokenize (%zu tokens)", i, n);
            free(ids);
        }
        /* parse_special = 0: the control token text is not one token */
        int32_t imstart = af_tokenizer_find(tok, "<|im_start|>", 12), found = 0;
        for (int64_t k = ds->tok_off[1]; k < ds->tok_off[2]; k++) found |= ds->tokens[k] == imstart;
        CHECK(imstart >= 0 && !found, "special token text in data is plain text (id %d)", imstart);
        int32_t fill = af_token_bos(tok) >= 0 ? af_token_bos(tok) : af_token_eos(tok);
        CHECK(af_dataset_len(ds, 2) >= 1 && (ds->orig_len[2] > 0 || ds->tokens[ds->tok_off[2]] == fill),
              "empty text -> one BOS/EOS token");
        af_dataset_free(ds);
    } else {
        CHECK(0, "dataset build: %s", af_last_error());
    }
    af_corpus_free(c);
    /* the BBC validation split, when scripts/fetch_data.sh has run */
    char **names = NULL;
    int32_t nn = 0;
    if (access("data/bbc/val.jsonl", R_OK) == 0 && af_labels_read_file("data/bbc/labels.txt", &names, &nn) == AF_OK) {
        af_corpus_opts o;
        af_corpus_opts_init(&o);
        o.label_names = (const char *const *)names;
        o.n_label_names = nn;
        double t0 = af_time_sec();
        af_status st = af_corpus_read("data/bbc/val.jsonl", &o, &c);
        CHECK(st == AF_OK, "bbc val: %s", af_last_error());
        if (st == AF_OK && af_dataset_build(T_CTX, c, tok, 512, &ds) == AF_OK) {
            af_data_stats s;
            af_data_stats_compute(ds, &s);
            printf("bbc val: %d samples, tokens p50 %d p95 %d p99 %d max %d, %d truncated at 512 (%.2f s)\n", s.n,
                   s.len_p50, s.len_p95, s.len_p99, s.len_max, s.n_truncated, af_time_sec() - t0);
            CHECK(s.n == c->n && s.num_classes == nn && s.len_min > 0, "bbc stats");
            af_data_stats_free(&s);
            af_dataset_free(ds);
        }
        af_corpus_free(c);
        af_labels_free(names, nn);
    } else {
        tl_skip("data/bbc/val.jsonl not found (scripts/fetch_data.sh)");
    }
    af_model_free(m);
}

/* af_dataset_truncate: the first L tokens of every sample kept in place, orig_len untouched, the
 * same tokens as a build at L; L above the build length and causal-LM sets refused. */
static void test_truncate(void) {
    const int32_t ids[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, lab[3] = {0, 1, 0};
    const int64_t off[4] = {0, 2, 8, 12};
    af_dataset *a = NULL, *b = NULL;
    CHECK(af_dataset_from_tokens(ids, off, 3, lab, NULL, 2, 6, &a) == AF_OK, "from_tokens at 6");
    CHECK(af_dataset_from_tokens(ids, off, 3, lab, NULL, 2, 3, &b) == AF_OK, "from_tokens at 3");
    if (!a || !b) goto done;
    CHECK(af_dataset_truncate(a, 7) == AF_ERR_INVALID_ARG, "truncate above the build length refused");
    CHECK(af_dataset_truncate(a, 0) == AF_ERR_INVALID_ARG, "truncate to 0 refused");
    CHECK(af_dataset_truncate(a, 3) == AF_OK, "truncate to 3");
    int same = a->max_seq_len == 3 && a->tok_off[3] == b->tok_off[3];
    for (int32_t i = 0; same && i <= 3; i++) same = a->tok_off[i] == b->tok_off[i];
    for (int64_t k = 0; same && k < b->tok_off[3]; k++) same = a->tokens[k] == b->tokens[k];
    CHECK(same && a->tok_off[3] == 2 + 3 + 3, "truncated = built at 3 (%lld tokens)", (long long)a->tok_off[3]);
    CHECK(a->orig_len[0] == 2 && a->orig_len[1] == 6 && a->orig_len[2] == 4, "orig_len kept");
done:
    af_dataset_free(a);
    af_dataset_free(b);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp");
        return tl_finish("test_data");
    }
    test_reader_valid();
    test_reader_strings();
    test_reader_multi();
    test_reader_errors();
    test_stats_weights();
    test_shuffle_batches();
    test_real_tokenizer();
    test_truncate();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return tl_finish("test_data");
}
