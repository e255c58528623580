/*
 * test_data_formats.c — data in the shapes people have, and YAML settings:
 *   - CSV / TSV corpora (src/formats/csv.c over libcsv): RFC 4180 quoting, embedded newlines and
 *     quotes, CRLF, blank lines, row line numbers, integer-looking labels, every error with its line;
 *   - text encodings: a UTF-8 BOM skipped, UTF-16/32 (with and without a BOM) refused by name;
 *   - Hugging Face field names detected (text / sentence / content / input), missing-field messages
 *     naming the fields present and the flag;
 *   - causal-LM tables (prompt,completion / text columns);
 *   - YAML settings with TRL / transformers / PEFT names (src/train/settings_yaml.c): translation,
 *     the errors (unknown key with the nearest one, duplicates, nesting, bad values) and the
 *     config.yaml round trip;
 *   - with AFINAR_BIN (make test): a CSV, a TSV, an HF-style JSONL and a YAML config with TRL names
 *     each drive a short `afinar train` -> `afinar eval` run on the tiny model (cli_harness.c); a
 *     causal-LM CSV run whose max_seq_len comes from the data and lands in config.yaml; a resume
 *     given as resume_from_checkpoint in YAML.
 */
#include "cli_harness.c"

#include "formats/csv.h"
#include "formats/jsonl.h"
#include "formats/lm_jsonl.h"
#include "train/settings_yaml.h"

#include <cJSON.h>

static char g_tmp[256]; /* the library cases' files */

static const char *tmp_file(const char *name, const void *data, size_t n) {
    const char *p = tl_join(g_tmp, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
    return p;
}
#define TMP_TEXT(name, s) tmp_file((name), (s), strlen(s))

/* Reads `path` expecting failure with `want` and the fragments in the message. */
static void corpus_err(const char *path, const af_corpus_opts *o, af_status want, const char *frag1, const char *frag2) {
    af_corpus *c = NULL;
    af_status st = af_corpus_read(path, o, &c);
    const char *msg = af_last_error();
    CHECK(st == want && c == NULL, "%s: status %s, want %s (%s)", path, af_status_name(st), af_status_name(want), msg);
    CHECK(!frag1 || strstr(msg, frag1), "%s: message '%s' lacks '%s'", path, msg, frag1 ? frag1 : "");
    CHECK(!frag2 || strstr(msg, frag2), "%s: message '%s' lacks '%s'", path, msg, frag2 ? frag2 : "");
    af_corpus_free(c);
}

static void test_csv(void) {
    /* BOM, CRLF, quoted comma, doubled quotes, an embedded newline (the row starts on line 3), a blank
     * line between rows, spaces kept, an empty text */
    const char *p = TMP_TEXT("a.csv", "\xEF\xBB\xBFid,text,label\r\n"
                                      "1,\"great, fun\",pos\r\n"
                                      "2,\"he said \"\"no\"\"\nthen left\",neg\r\n"
                                      "\r\n"
                                      "3, ok ,pos\n"
                                      "4,,neg"); /* no final newline */
    af_corpus *c = NULL;
    af_status st = af_corpus_read(p, NULL, &c);
    if (CHECK(st == AF_OK, "a.csv: %s", af_last_error())) {
        CHECK(c->n == 4 && c->num_classes == 2 && !c->multi_label, "a.csv: %d samples, %d classes", c->n, c->num_classes);
        CHECK(!strcmp(c->texts[0], "great, fun") && !strcmp(c->texts[1], "he said \"no\"\nthen left") &&
                  !strcmp(c->texts[2], " ok ") && !strcmp(c->texts[3], ""),
              "a.csv texts: [%s] [%s] [%s] [%s]", c->texts[0], c->texts[1], c->texts[2], c->texts[3]);
        CHECK(c->line_no[0] == 2 && c->line_no[1] == 3 && c->line_no[2] == 6 && c->line_no[3] == 7,
              "a.csv lines %d %d %d %d", c->line_no[0], c->line_no[1], c->line_no[2], c->line_no[3]);
        CHECK(c->label_names && !strcmp(c->label_names[0], "neg") && c->labels[0] == 1 && c->labels[1] == 0,
              "a.csv labels: names sorted, ids");
    }
    af_corpus_free(c);
    /* TSV: a quoted field holds a tab; integer-looking labels are class ids; "sentence" detected */
    p = TMP_TEXT("b.tsv", "sentence\tlabel\n\"a\tb\"\t2\nc d\t0\n");
    c = NULL;
    st = af_corpus_read(p, NULL, &c);
    if (CHECK(st == AF_OK, "b.tsv: %s", af_last_error())) {
        CHECK(c->n == 2 && !strcmp(c->texts[0], "a\tb") && c->labels[0] == 2 && c->labels[1] == 0 &&
                  c->num_classes == 3 && !c->label_names,
              "b.tsv: n %d, text [%s], labels %d %d, %d classes", c->n, c->texts[0], c->labels[0], c->labels[1],
              c->num_classes);
    }
    af_corpus_free(c);
    /* a lone CR is data; CRLF inside a quoted field becomes LF */
    p = TMP_TEXT("cr.csv", "text,label\r\na\rb,1\r\n\"c\r\nd\",0\r\n");
    c = NULL;
    st = af_corpus_read(p, NULL, &c);
    CHECK(st == AF_OK && c->n == 2 && !strcmp(c->texts[0], "a\rb") && !strcmp(c->texts[1], "c\nd") && c->line_no[1] == 3,
          "cr.csv: %s", st == AF_OK ? "texts" : af_last_error());
    af_corpus_free(c);
    /* "007" and "1.0" are names, not ids: then all labels are names */
    p = TMP_TEXT("names.csv", "text,label\na,007\nb,1.0\n");
    c = NULL;
    st = af_corpus_read(p, NULL, &c);
    CHECK(st == AF_OK && c->label_names && c->num_classes == 2 && !strcmp(c->label_names[0], "007"),
          "names.csv: %s", st == AF_OK ? "names" : af_last_error());
    af_corpus_free(c);
    /* predict: an empty label cell is no label */
    af_corpus_opts o;
    af_corpus_opts_init(&o);
    o.labels_optional = 1;
    p = TMP_TEXT("opt.csv", "text,label\na,\nb,1\n");
    c = NULL;
    st = af_corpus_read(p, &o, &c);
    CHECK(st == AF_OK && c->labels[0] == -1 && c->labels[1] == 1, "opt.csv: %s", st == AF_OK ? "labels" : af_last_error());
    af_corpus_free(c);
    /* the text field by flag, other columns ignored */
    af_corpus_opts_init(&o);
    o.text_field = "review";
    p = TMP_TEXT("review.csv", "review,stars,label\nnice,5,1\n");
    c = NULL;
    st = af_corpus_read(p, &o, &c);
    CHECK(st == AF_OK && !strcmp(c->texts[0], "nice"), "review.csv: %s", st == AF_OK ? c->texts[0] : af_last_error());
    af_corpus_free(c);

    /* errors, each with its line */
    corpus_err(TMP_TEXT("q1.csv", "text,label\nab\"c,1\n"), NULL, AF_ERR_FORMAT, "q1.csv:2: malformed quoting", "RFC 4180");
    corpus_err(TMP_TEXT("q2.csv", "text,label\n\"ab\"c,1\n"), NULL, AF_ERR_FORMAT, "q2.csv:2: malformed quoting", NULL);
    corpus_err(TMP_TEXT("q3.csv", "text,label\nx,1\n\"abc,1\ny,2\n"), NULL, AF_ERR_FORMAT, "q3.csv:3: a quoted field",
               "not closed at the end of the file");
    corpus_err(TMP_TEXT("n1.csv", "text,label\nx,1\ny,1,2\n"), NULL, AF_ERR_FORMAT,
               "n1.csv:3: row has 3 fields but the header has 2", "quote the field");
    corpus_err(TMP_TEXT("n2.csv", "text,label\nx\n"), NULL, AF_ERR_FORMAT, "n2.csv:2: row has 1 field but the header has 2",
               NULL);
    corpus_err(TMP_TEXT("dup.csv", "text,text\nx,1\n"), NULL, AF_ERR_FORMAT, "dup.csv:1: duplicate column name \"text\"",
               NULL);
    corpus_err(TMP_TEXT("hdr.csv", "text,label\n"), NULL, AF_ERR_FORMAT, "hdr.csv: no data rows (only a header)", NULL);
    corpus_err(TMP_TEXT("empty.csv", ""), NULL, AF_ERR_FORMAT, "empty.csv: empty file (no header row)", NULL);
    corpus_err(tmp_file("nul.csv", "text,label\nx\0y,1\n", 17), NULL, AF_ERR_FORMAT, "nul.csv:2: NUL byte", NULL);
    corpus_err(TMP_TEXT("nolab.csv", "text,y\nx,1\n"), NULL, AF_ERR_FORMAT,
               "nolab.csv:2: field 'label': missing (the header has 'text', 'y'", "--label-field NAME");
    corpus_err(TMP_TEXT("notext.csv", "body,label\nx,1\n"), NULL, AF_ERR_FORMAT, "notext.csv:2: no text field",
               "--text-field NAME");
    af_corpus_opts_init(&o);
    o.max_line_bytes = 64; /* a row of many lines is bounded as a whole */
    corpus_err(TMP_TEXT("long.csv", "text,label\n\"aaaaaaaaaaaaaaaaaaaa\naaaaaaaaaaaaaaaaaaaaaaaaa\naaaaaaaaaaaaaaaaaaaaaaaaa\",1\n"),
               &o, AF_ERR_FORMAT, "long.csv:2: row longer than 64 bytes", NULL);
}

static void test_encodings(void) {
    /* UTF-8 with a BOM: JSONL */
    const char *p = TMP_TEXT("bom.jsonl", "\xEF\xBB\xBF{\"text\": \"caf\xC3\xA9\", \"label\": 0}\n");
    af_corpus *c = NULL;
    af_status st = af_corpus_read(p, NULL, &c);
    CHECK(st == AF_OK && !strcmp(c->texts[0], "caf\xC3\xA9"), "bom.jsonl: %s", st == AF_OK ? "ok" : af_last_error());
    af_corpus_free(c);
    /* UTF-16/32 files, as iconv writes them */
    static const struct {
        const char *name, *bytes;
        size_t n;
        const char *enc, *bom;
    } cases[] = {
        {"u16le_bom.jsonl", "\xFF\xFE{\0\"\0t\0\"\0:\0", 12, "UTF-16LE", "with a byte-order mark"},
        {"u16be_bom.jsonl", "\xFE\xFF\0{\0\"\0t\0\"\0:", 12, "UTF-16BE", "with a byte-order mark"},
        {"u32le_bom.jsonl", "\xFF\xFE\0\0{\0\0\0\"\0\0\0", 12, "UTF-32LE", "with a byte-order mark"},
        {"u32be_bom.jsonl", "\0\0\xFE\xFF\0\0\0{\0\0\0\"", 12, "UTF-32BE", "with a byte-order mark"},
        {"u16le.jsonl", "{\0\"\0t\0\"\0:\0", 10, "UTF-16LE", "without a byte-order mark"},
        {"u16be.csv", "\0t\0e\0x\0t\0,\0l", 12, "UTF-16BE", "without a byte-order mark"},
        {"u32le.csv", "t\0\0\0e\0\0\0", 8, "UTF-32LE", "without a byte-order mark"},
        {"u32be.jsonl", "\0\0\0{\0\0\0\"", 8, "UTF-32BE", "without a byte-order mark"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        p = tmp_file(cases[i].name, cases[i].bytes, cases[i].n);
        char want[64];
        snprintf(want, sizeof want, "the file is %s, %s", cases[i].enc, cases[i].bom);
        corpus_err(p, NULL, AF_ERR_FORMAT, want, "iconv -f");
        af_lm_corpus *lc = NULL;
        st = af_lm_corpus_read(p, 0, &lc);
        CHECK(st == AF_ERR_FORMAT && strstr(af_last_error(), want), "causal-LM reader, %s: %s", cases[i].name,
              af_last_error());
        af_lm_corpus_free(lc);
    }
    /* the check itself: ASCII and UTF-8 pass */
    size_t bom = 9;
    CHECK(af_text_check_encoding("x", (const unsigned char *)"{\"a\"", 4, &bom) == AF_OK && bom == 0, "ASCII passes");
    CHECK(af_text_check_encoding("x", (const unsigned char *)"\xEF\xBB\xBFz", 4, &bom) == AF_OK && bom == 3, "BOM skipped");
    CHECK(af_text_check_encoding("x", (const unsigned char *)"\xC3\xA9t\xC3\xA9", 6, &bom) == AF_OK, "UTF-8 passes");
    CHECK(af_data_file_delim("a.CSV") == ',' && af_data_file_delim("a.tsv") == '\t' && af_data_file_delim("a.tab") == '\t' &&
              af_data_file_delim("a.jsonl") == 0 && af_data_file_delim("csv") == 0,
          "layout from the file name");
}

static void test_fields(void) {
    static const struct {
        const char *name, *text, *want;
    } cases[] = {
        {"f_text.jsonl", "{\"text\": \"T\", \"input\": \"I\", \"label\": 0}\n", "T"}, /* text before input */
        {"f_sentence.jsonl", "{\"idx\": 3, \"sentence\": \"S\", \"label\": 1}\n", "S"},
        {"f_content.jsonl", "{\"content\": \"C\", \"labels\": [0, 2]}\n", "C"},
        {"f_input.jsonl", "{\"input\": \"I\", \"label\": \"x\"}\n", "I"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        af_corpus *c = NULL;
        af_status st = af_corpus_read(TMP_TEXT(cases[i].name, cases[i].text), NULL, &c);
        CHECK(st == AF_OK && !strcmp(c->texts[0], cases[i].want), "%s: %s", cases[i].name,
              st == AF_OK ? c->texts[0] : af_last_error());
        af_corpus_free(c);
    }
    /* the field found on the first line is required on every line */
    corpus_err(TMP_TEXT("f_mixed.jsonl", "{\"text\": \"a\", \"label\": 0}\n{\"sentence\": \"b\", \"label\": 0}\n"), NULL,
               AF_ERR_FORMAT, "f_mixed.jsonl:2: field 'text': missing (the line has 'sentence', 'label'",
               "--text-field NAME");
}

static void test_lm_tables(void) {
    af_lm_corpus *c = NULL;
    af_status st = af_lm_corpus_read(TMP_TEXT("pc.csv", "id,prompt,completion\n1,\"Q: 2+2, please\",\" 4\"\n2,hi,\"a\nb\"\n"),
                                     0, &c);
    if (CHECK(st == AF_OK, "pc.csv: %s", af_last_error())) {
        CHECK(c->n == 2 && c->format == AF_LM_PROMPT_COMPLETION && !strcmp(c->ex[0].text, "Q: 2+2, please") &&
                  !strcmp(c->ex[0].completion, " 4") && !strcmp(c->ex[1].completion, "a\nb") && c->ex[1].line_no == 3,
              "pc.csv: n %d, format %d", c->n, (int)c->format);
    }
    af_lm_corpus_free(c);
    c = NULL;
    st = af_lm_corpus_read(TMP_TEXT("t.tsv", "\xEF\xBB\xBFtext\nhello world\n"), 0, &c);
    CHECK(st == AF_OK && c->format == AF_LM_TEXT && !strcmp(c->ex[0].text, "hello world"), "t.tsv: %s",
          st == AF_OK ? "ok" : af_last_error());
    af_lm_corpus_free(c);
    c = NULL;
    st = af_lm_corpus_read(TMP_TEXT("alpaca.jsonl", "{\"instruction\": \"a\", \"output\": \"b\"}\n"), 0, &c);
    CHECK(st == AF_ERR_FORMAT && strstr(af_last_error(), "alpaca.jsonl:1: field 'text': missing") &&
              strstr(af_last_error(), "(it has 'instruction', 'output')"),
          "alpaca.jsonl: %s", af_last_error());
    af_lm_corpus_free(c);
    c = NULL;
    st = af_lm_corpus_read(TMP_TEXT("lab.csv", "text,label\nx,1\n"), 0, &c);
    CHECK(st == AF_ERR_FORMAT && strstr(af_last_error(), "lab.csv:2: field 'label'") &&
              strstr(af_last_error(), "--task classification"),
          "lab.csv: %s", af_last_error());
    af_lm_corpus_free(c);
}

/* Parses YAML text expecting success; returns the settings (caller frees) or NULL. */
static af_train_settings *yaml_ok(const char *text) {
    af_train_settings *s = NULL;
    af_status st = af_train_settings_parse_yaml("t.yaml", "config file", text, strlen(text), &s);
    CHECK(st == AF_OK, "yaml: %s\n%s", af_last_error(), text);
    return st == AF_OK ? s : NULL;
}

static void yaml_err(const char *text, const char *frag1, const char *frag2) {
    af_train_settings *s = NULL;
    af_status st = af_train_settings_parse_yaml("t.yaml", "config file", text, strlen(text), &s);
    const char *m = af_last_error();
    CHECK(st == AF_ERR_FORMAT && !s, "yaml error expected for:\n%s(got %s)", text, af_status_name(st));
    CHECK(strstr(m, frag1) != NULL, "yaml message '%s' lacks '%s'", m, frag1);
    CHECK(!frag2 || strstr(m, frag2), "yaml message '%s' lacks '%s'", m, frag2);
    af_train_settings_free(s);
}

static int has(const af_train_settings *s, const char *key, const char *want) {
    const char *v = af_train_settings_get(s, key);
    return CHECK(v && !strcmp(v, want), "key %s = %s, want %s", key, v ? v : "(unset)", want);
}

static void test_yaml(void) {
    af_train_settings *s = yaml_ok("---\n# TRL SFTConfig + PEFT LoraConfig names\n"
                                   "model_name_or_path: m.gguf\ntrain_file: t.csv\nvalidation_file: v.csv\n"
                                   "learning_rate: 2.0e-4\nnum_train_epochs: 3\nmax_steps: -1\n"
                                   "per_device_train_batch_size: 4\ngradient_accumulation_steps: 8\n"
                                   "max_seq_length: 512\nr: 8\nlora_alpha: 16\nlora_dropout: 0.1\n"
                                   "target_modules:\n  - q_proj\n  - v_proj\n  - o_proj\n"
                                   "warmup_ratio: 0.03\nlr_scheduler_type: constant_with_warmup\n"
                                   "eval_strategy: steps\neval_steps: 50\nsave_steps: 100\nseed: 3\n"
                                   "output_dir: out\nbias: none\ntask_type: CAUSAL_LM\ngradient_checkpointing: yes\n"
                                   "completion_only_loss: false\nuse_rslora: False\n"
                                   "early_stopping_patience: 3\nearly_stopping_threshold: 0.01\n");
    if (s) {
        has(s, "model", "m.gguf"), has(s, "train", "t.csv"), has(s, "val", "v.csv"), has(s, "lr", "2.0e-4");
        has(s, "epochs", "3"), has(s, "batch", "4"), has(s, "grad-accum", "8"), has(s, "max-seq-len", "512");
        has(s, "lora-r", "8"), has(s, "lora-alpha", "16"), has(s, "lora-dropout", "0.1");
        has(s, "targets", "q_proj,v_proj,o_proj"), has(s, "warmup", "0.03"), has(s, "schedule", "constant");
        has(s, "eval-every", "50"), has(s, "save-every", "100"), has(s, "seed", "3"), has(s, "output", "out");
        has(s, "task", "causal-lm"), has(s, "loss-on", "all");
        has(s, "patience", "3"), has(s, "early-stopping-threshold", "0.01");
        CHECK(!af_train_settings_get(s, "max-steps"), "max_steps -1 leaves max-steps unset");
        af_trainer_opts o;
        af_status st = af_train_settings_to_opts(s, &o);
        CHECK(st == AF_OK && o.checkpointing == 1 && o.use_rslora == 0 && o.lora_r == 8 && o.batch == 4 &&
                  o.grad_accum == 8 && o.max_seq_len == 512 && o.task == AF_TASK_CAUSAL_LM && o.patience == 3 &&
                  o.early_stopping_threshold == 0.01 && (o.given & AF_GIVEN_PATIENCE) && (o.given & AF_GIVEN_THRESHOLD) &&
                  (o.given & AF_GIVEN_SCHEDULE),
              "to_opts: %s", st == AF_OK ? "values" : af_last_error());
        /* the round trip: JSON -> config.yaml -> the same settings */
        char *json = NULL;
        if (CHECK(af_train_settings_to_json(s, &json) == AF_OK, "to_json")) {
            const char *yp = tl_join(g_tmp, "config.yaml");
            st = af_train_settings_write_yaml(json, yp);
            af_train_settings *back = NULL;
            if (CHECK(st == AF_OK, "write_yaml: %s", af_last_error()) &&
                CHECK(af_train_settings_read_yaml(yp, "run settings", &back) == AF_OK, "read back: %s", af_last_error())) {
                char *json2 = NULL;
                af_trainer_opts o2;
                CHECK(af_train_settings_to_opts(back, &o2) == AF_OK && o2.checkpointing == 1 && o2.lr == o.lr &&
                          o2.warmup_ratio == o.warmup_ratio && !strcmp(o2.targets, o.targets),
                      "config.yaml read back: %s", af_last_error());
                CHECK(af_train_settings_to_json(back, &json2) == AF_OK && json2 && !strcmp(json, json2),
                      "round trip:\n%s\nvs\n%s", json, json2 ? json2 : "");
                free(json2);
            }
            af_train_settings_free(back);
        }
        free(json);
    }
    af_train_settings_free(s);
    /* afinar's own keys, hyphen or underscore spelling; a string of targets; null leaves a key unset */
    s = yaml_ok("lr: 0.001\ngrad_accum: 2\nlora-r: 4\ntargets: all-linear\nval: ~\nplot: off\n");
    if (s) {
        has(s, "lr", "0.001"), has(s, "grad-accum", "2"), has(s, "lora-r", "4"), has(s, "targets", "all-linear");
        CHECK(!af_train_settings_get(s, "val"), "null value: unset");
    }
    af_train_settings_free(s);
    s = yaml_ok("eval_steps: 50\neval_strategy: epoch\n");
    if (s) has(s, "eval-every", "0");
    af_train_settings_free(s);
    s = yaml_ok("eval_strategy: epoch\neval_steps: 50\n");
    if (s) has(s, "eval-every", "0");
    af_train_settings_free(s);
    s = yaml_ok("output_dir: runs/a\nresume_from_checkpoint: true\n");
    if (s) has(s, "resume", "runs/a");
    af_train_settings_free(s);
    /* the LoRA variants: PEFT's use_dora / init_lora_weights, LoRA+'s loraplus_lr_ratio */
    s = yaml_ok("use_dora: true\ninit_lora_weights: gaussian\nloraplus_lr_ratio: 16\n");
    if (s) {
        has(s, "init-lora-weights", "gaussian"), has(s, "loraplus-lr-ratio", "16");
        af_trainer_opts o;
        CHECK(af_train_settings_to_opts(s, &o) == AF_OK && o.use_dora == 1 && o.init_lora_weights == 1 &&
                  o.loraplus_lr_ratio == 16.0,
              "LoRA variants to opts: %s", af_last_error());
    }
    af_train_settings_free(s);
    s = yaml_ok("init_lora_weights: true\n");
    if (s) has(s, "init-lora-weights", "default");
    af_train_settings_free(s);
    s = yaml_ok("init_lora_weights: pissa_niter_16\n");
    if (s) has(s, "init-lora-weights", "pissa");
    af_train_settings_free(s);
    yaml_err("init_lora_weights: loftq\n", "key 'init_lora_weights': 'loftq' is not available", "not implemented");

    yaml_err("lerning_rate: 1e-4\n", "t.yaml:1:1: unknown key 'lerning_rate'", "nearest known key: learning_rate");
    yaml_err("lr: 1\nnum_train_epoch: 2\n", "t.yaml:2:1: unknown key 'num_train_epoch'", "nearest known key: num_train_epochs");
    yaml_err("lr: 1\nlearning_rate: 2\n", "t.yaml:2:1: key 'learning_rate': the setting is already given by 'lr' (line 1)",
             NULL);
    yaml_err("max_length: 8\nmax_seq_length: 9\n", "t.yaml:2:1: key 'max_seq_length'", "'max_length' (line 1)");
    yaml_err("lora_r:\n  r: 8\n", "t.yaml:2:3: key 'lora_r': expected a single value, got a mapping", NULL);
    yaml_err("lr: [1, 2]\n", "t.yaml:1:5: key 'lr': expected a single value, got a list", NULL);
    yaml_err("- lr\n- 1\n", "t.yaml:1:1: the config file must be a YAML mapping", NULL);
    yaml_err("lr_scheduler_type: polynomial\n", "key 'lr_scheduler_type': scheduler 'polynomial' is not available", NULL);
    {
        af_train_settings *w = yaml_ok("lr_scheduler_type: warmup_stable_decay\n");
        if (w) has(w, "schedule", "wsd"), af_train_settings_free(w);
    }
    yaml_err("task_type: TOKEN_CLS\n", "key 'task_type': 'TOKEN_CLS' is not available", NULL);
    yaml_err("bias: all\n", "key 'bias': 'all' is not available", NULL);
    yaml_err("gradient_checkpointing: maybe\n", "key 'gradient_checkpointing': expected true or false", NULL);
    yaml_err("resume_from_checkpoint: true\n", "true needs output_dir", NULL);
    yaml_err("lr: 1\n  bad: [\n", "t.yaml:2:", "invalid YAML in the config file");
    yaml_err("a: &x 1\nlr: *x\n", "t.yaml:1:1: unknown key 'a'", NULL);
    yaml_err("lr: *x\n", "t.yaml:1:", NULL);
    yaml_err("", "t.yaml: config file is empty", NULL);
    yaml_err("# only a comment\n", "t.yaml: config file is empty", NULL);
    yaml_err("lr: 1\n---\nlr: 2\n", "one YAML document per settings file", NULL);
    CHECK(af_settings_is_yaml_path("a.yaml") && af_settings_is_yaml_path("B.YML") && !af_settings_is_yaml_path("a.json"),
          "YAML by file name");
}

/* ---------------------------------------------------------------- train -> eval runs */

/* Run a command line (cli_harness split_args); CHECK rc 0. Returns stdout + stderr (caller frees). */
static char *run_ok(const char *cmdline) {
    char **av = split_args(cmdline);
    run_result r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0, "%s: exit %d\n%s", cmdline, r.rc, r.err ? r.err : "");
    size_t a = strlen(r.out ? r.out : ""), b = strlen(r.err ? r.err : "");
    char *all = malloc(a + b + 1);
    if (all) {
        memcpy(all, r.out ? r.out : "", a);
        memcpy(all + a, r.err ? r.err : "", b + 1);
    }
    run_free(&r);
    return all;
}

/* One labelled data set in three shapes: n rows "<word> <keyword>" of 3 classes. */
static void write_shapes(int n, const char *stem) {
    static const char *const keys[3] = {"goal", "chip", "soup"};
    char name[64];
    snprintf(name, sizeof name, "%s.csv", stem);
    FILE *csv = fopen(P_(name), "w");
    snprintf(name, sizeof name, "%s.tsv", stem);
    FILE *tsv = fopen(P_(name), "w");
    snprintf(name, sizeof name, "%s_hf.jsonl", stem);
    FILE *hf = fopen(P_(name), "w");
    if (!csv || !tsv || !hf) {
        CHECK(0, "cannot write the data files");
        if (csv) fclose(csv);
        if (tsv) fclose(tsv);
        if (hf) fclose(hf);
        return;
    }
    fputs("idx,text,label\r\n", csv);
    fputs("sentence\tlabel\n", tsv);
    for (int i = 0; i < n; i++) {
        fprintf(csv, "%d,\"w%d, \"\"%s\"\"\",%s\r\n", i, i, keys[i % 3], k_names[i % 3]);
        fprintf(tsv, "w%d %s\t%d\n", i, keys[i % 3], i % 3);
        fprintf(hf, "{\"idx\": %d, \"sentence\": \"w%d %s\", \"label\": %d}\n", i, i, keys[i % 3], i % 3);
    }
    fclose(csv), fclose(tsv), fclose(hf);
}

static void test_runs(void) {
    if (!CHECK(write_model(P_("tiny.gguf"), 1) == AF_OK, "tiny model: %s", af_last_error())) return;
    write_shapes(24, "train");
    write_shapes(9, "val");
    static const char *const kinds[3][2] = {{"csv", ".csv"}, {"tsv", ".tsv"}, {"hf", "_hf.jsonl"}};
    const char *common = "--batch 4 --grad-accum 1 --lora-r 2 --lora-layers all --max-seq-len 16 --max-steps 3 -t 1 --no-plot";
    for (int k = 0; k < 3; k++) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "train -m @/tiny.gguf --train @/train%s --val @/val%s -o @/run_%s %s", kinds[k][1],
                 kinds[k][1], kinds[k][0], common);
        free(run_ok(cmd));
        char fin[128];
        snprintf(fin, sizeof fin, "run_%s/final/adapter_model.safetensors", kinds[k][0]);
        CHECK(exists(P_(fin)), "%s: train wrote %s", kinds[k][0], fin);
        snprintf(fin, sizeof fin, "run_%s/config.yaml", kinds[k][0]);
        CHECK(exists(P_(fin)), "%s: train wrote %s", kinds[k][0], fin);
        snprintf(cmd, sizeof cmd, "eval -m @/tiny.gguf -a @/run_%s/final --data @/val%s -t 1", kinds[k][0], kinds[k][1]);
        char *out = run_ok(cmd);
        CHECK(out && strstr(out, "accuracy") && strstr(out, "9"), "%s: eval output:\n%s", kinds[k][0], out ? out : "");
        free(out);
    }
    /* a YAML config with TRL / PEFT names drives train -> eval */
    write_text(P_("trl.yaml"), "# TRL-style\n"
                               "model_name_or_path: tiny.gguf\n"
                               "train_file: train.csv\n"
                               "validation_file: val.csv\n"
                               "learning_rate: 1.0e-3\n"
                               "max_steps: 3\n"
                               "per_device_train_batch_size: 4\n"
                               "gradient_accumulation_steps: 1\n"
                               "max_length: 16\n"
                               "lora_r: 2\n"
                               "lora_alpha: 4\n"
                               "lora_dropout: 0.0\n"
                               "target_modules: [q_proj, v_proj]\n"
                               "warmup_ratio: 0.1\n"
                               "lr_scheduler_type: linear\n"
                               "eval_strategy: steps\n"
                               "eval_steps: 2\n"
                               "save_steps: 2\n"
                               "seed: 7\n"
                               "output_dir: run_yaml\n"
                               "plot: false\n"
                               "threads: 1\n"
                               "lora_layers: all\n");
    /* paths in the file are relative to the working directory: run from the temporary directory */
    char cwd[4096];
    if (!CHECK(getcwd(cwd, sizeof cwd) && chdir(g_dir) == 0, "chdir")) return;
    char *out = run_ok("train --config @/trl.yaml");
    CHECK(out && strstr(out, "r 2 alpha 4") != NULL, "YAML run's plan names its LoRA:\n%s", out ? out : "");
    free(out);
    CHECK(exists(P_("run_yaml/final/adapter_model.safetensors")) && exists(P_("run_yaml/checkpoint-2")),
          "YAML run: final/ and checkpoint-2 (save_steps 2)");
    char *cy = tl_read_file(P_("run_yaml/config.yaml"), NULL);
    CHECK(cy && strstr(cy, "lr: \"1.0e-3\"") && strstr(cy, "targets: \"q_proj,v_proj\"") && strstr(cy, "schedule: \"linear\"") &&
              strstr(cy, "plot: false"),
          "config.yaml holds the resolved settings:\n%s", cy ? cy : "");
    free(cy);
    out = run_ok("eval -m @/tiny.gguf -a @/run_yaml/final --data @/val.csv -t 1");
    CHECK(out && strstr(out, "accuracy"), "YAML run: eval:\n%s", out ? out : "");
    free(out);
    /* config.yaml is a config file; resume_from_checkpoint continues the run */
    free(run_ok("check --config @/run_yaml/config.yaml -o @/run_check"));
    write_text(P_("resume.yaml"), "model_name_or_path: tiny.gguf\nresume_from_checkpoint: run_yaml/checkpoint-2\n");
    out = run_ok("train --config @/resume.yaml");
    CHECK(out && strstr(out, "resum") && strstr(out, "checkpoint-2"), "resume_from_checkpoint: resumed\n%s", out ? out : "");
    free(out);
    /* the run's config.yaml with --resume: the same settings, so the resume is exact */
    out = run_ok("train --config @/run_yaml/config.yaml --resume @/run_yaml/checkpoint-2");
    CHECK(out && strstr(out, "resum"), "--config config.yaml --resume:\n%s", out ? out : "");
    free(out);
    /* PEFT's layers_to_transform (YAML list or flag): the adapter of that layer alone, the same as the
       equivalent --lora-layers; with --lora-layers also given, a usage error */
    write_text(P_("ltt.yaml"), "model_name_or_path: tiny.gguf\ntrain_file: train.csv\nvalidation_file: val.csv\n"
                               "max_steps: 3\nper_device_train_batch_size: 4\ngradient_accumulation_steps: 1\n"
                               "max_length: 16\nlora_r: 2\noutput_dir: run_ltt\nplot: false\nthreads: 1\n"
                               "layers_to_transform: [1]\n");
    out = run_ok("train --config @/ltt.yaml");
    CHECK(out && strstr(out, "of layers 1 (of 2)") && strstr(out, "--layers-to-transform 1 (given)"),
          "layers_to_transform: the plan names the layer:\n%s", out ? out : "");
    free(out);
    out = run_ok("check --config @/ltt.yaml -o @/run_ltt_check");
    CHECK(out && strstr(out, "lora-layers none (layers-to-transform) (default)") &&
              strstr(out, "layers-to-transform 1 (config)"),
          "check: the layer list and the unused --lora-layers with their origins:\n%s", out ? out : "");
    free(out);
    free(run_ok("train -m @/tiny.gguf --train @/train.csv --val @/val.csv -o @/run_ll --max-steps 3 --batch 4 "
                "--grad-accum 1 --max-seq-len 16 --lora-r 2 --no-plot -t 1 --lora-layers 1"));
    free(run_ok("train -m @/tiny.gguf --train @/train.csv --val @/val.csv -o @/run_lt --max-steps 3 --batch 4 "
                "--grad-accum 1 --max-seq-len 16 --lora-r 2 --no-plot -t 1 --layers-to-transform 1"));
    static const char *const ad_files[2] = {"adapter_model.safetensors", "adapter_config.json"};
    for (int k = 0; k < 2; k++) {
        char pa[64], pb[64];
        snprintf(pa, sizeof pa, "run_ll/final/%s", ad_files[k]);
        snprintf(pb, sizeof pb, "run_lt/final/%s", ad_files[k]);
        size_t na = 0, nb = 0;
        char *a = tl_read_file(P_(pa), &na), *b = tl_read_file(P_(pb), &nb);
        CHECK(a && b && na == nb && !memcmp(a, b, na), "--layers-to-transform 1 = --lora-layers 1: %s identical",
              ad_files[k]);
        if (k == 1)
            CHECK(b && strstr(b, "\"layers_to_transform\":\t[1]"), "adapter_config.json lists layer 1:\n%s", b ? b : "");
        free(a);
        free(b);
    }
    {
        char **av = split_args("check -m @/tiny.gguf --train @/train.csv --layers-to-transform 0 --lora-layers 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 2 && r.err && strstr(r.err, "--layers-to-transform 0 and --lora-layers 1: give one of them"),
              "both layer settings: exit %d\n%s", r.rc, r.err ? r.err : "");
        run_free(&r);
    }
    /* causal LM from a CSV: max_seq_len from the data, recorded in config.yaml */
    FILE *f = fopen(P_("lm.csv"), "w");
    if (f) {
        fputs("prompt,completion\n", f);
        for (int i = 0; i < 40; i++) fprintf(f, "\"ab %d\",\"%s\"\n", i, i % 2 ? "ba" : "abab");
        fclose(f);
    }
    out = run_ok("train --task causal-lm -m @/tiny.gguf --train @/lm.csv --val @/lm.csv -o @/run_lm --batch 4 "
                 "--lora-r 2 --max-steps 2 -t 1 --no-plot");
    CHECK(out && strstr(out, "max_seq_len 64: the p99 token length"), "causal LM: the length's reason:\n%s", out ? out : "");
    free(out);
    cy = tl_read_file(P_("run_lm/config.yaml"), NULL);
    CHECK(cy && strstr(cy, "max-seq-len: 64"), "causal LM: config.yaml records max-seq-len 64:\n%s", cy ? cy : "");
    free(cy);
    out = run_ok("eval --task causal-lm -m @/tiny.gguf -a @/run_lm/final --data @/lm.csv -t 1");
    CHECK(out && strstr(out, "loss"), "causal LM eval:\n%s", out ? out : "");
    free(out);
    CHECK(chdir(cwd) == 0, "chdir back");
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/afinar_test_formats_XXXXXX");
    if (!CHECK(mkdtemp(g_tmp) != NULL, "mkdtemp")) return tl_finish("test_data_formats");
    test_csv();
    test_encodings();
    test_fields();
    test_lm_tables();
    test_yaml();
    rm_tree(g_tmp);
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || !realpath(bin, g_bin) || access(g_bin, X_OK) != 0) {
        tl_skip("train -> eval runs: AFINAR_BIN not set or not executable (make test sets it)");
        return tl_finish("test_data_formats");
    }
    g_dump = getenv("CLI_DUMP") != NULL;
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_formats_cli_XXXXXX");
    if (!CHECK(mkdtemp(g_dir) != NULL, "mkdtemp: %s", strerror(errno))) return tl_finish("test_data_formats");
    test_runs();
    rm_tree(g_dir);
    return tl_finish("test_data_formats");
}
