/*
 * test_cli.c — a matrix of bad inputs through the afinar command-line tool ($AFINAR_BIN, set by
 * `make test`; skipped without it). Each case runs the binary with fork/execv (stdin from a file
 * or /dev/null, stdout and stderr through pipes, a per-run timeout, 1 thread) and asserts the exit
 * status (2 usage error, 1 bad input / I/O; a signal is a failure) and the stderr message: ONE line
 * naming the file, the JSONL line, the field or the byte offset, matched exactly except for "*"
 * spans (a strerror text, a list, a pid). train prints its data report first: there the message
 * is the last stderr line.
 *
 * Inputs, written by the test into a mkdtemp directory that is removed at the end:
 *   tiny.gguf   tinymodel.c llama (Q8_0, 2 layers, hidden 64) + a byte-level gpt2 tokenizer;
 *   notok.gguf  the same without tokenizer.* keys; trunc*.gguf cut in the header / tensor data;
 *   text.gguf, empty files, a directory, chmod 000 files and a 0555 directory (skipped as root);
 *   *.jsonl     small corpora (3 classes: sport / tech / food) with one defect per file;
 *   run/        one good `afinar train --max-steps 4 --save-every 2` run; copies of its final/
 *               adapter with a corrupt adapter_config.json / a truncated safetensors.
 * Disk full: `afinar train --resume run/checkpoint-2` under RLIMIT_FSIZE 4 KiB (SIGXFSZ ignored,
 * so write(2) fails with EFBIG) must exit 1 naming the .safetensors being written, leave
 * checkpoint-2, checkpoint-4, best/ and final/ byte-identical and no temporary; the same for
 * `eval --json` (the old file stays).
 * CLI_DUMP=1 prints every case's exit status and stderr; TL_KEEP=1 keeps the directory.
 */
#include "cli_harness.c"
#include "train/run_lock.h"

/* ---------------------------------------------------------------- the matrix */

static void setup_files(void) {
    CHECK(write_model(P_("tiny.gguf"), 1) == AF_OK, "tiny model: %s", af_last_error());
    CHECK(write_model(P_("notok.gguf"), 0) == AF_OK, "tiny model without tokenizer: %s", af_last_error());
    CHECK(copy_file(P_("tiny.gguf"), P_("trunc.gguf"), 1000), "truncated model");
    write_text(P_("text.gguf"), "this is not a GGUF file\n");
    write_text(P_("empty.gguf"), "");
    mkdir(P_("adir"), 0777);
    write_corpus(P_("train.jsonl"), 12);
    write_corpus(P_("val.jsonl"), 6);
    write_text(P_("labels.txt"), "sport\ntech\nfood\n");
    write_text(P_("empty.jsonl"), "");
    write_text(P_("blank.jsonl"), "\n   \n\n");
    write_text(P_("badjson.jsonl"), "{\"input\": \"a\", \"label\": \"sport\"}\n{\"input\": \"b\", \"label\": \"tech\"}\n"
                                    "{\"input\": \"c\", \"label\": tech}\n");
    write_text(P_("notext.jsonl"), "{\"input\": \"a\", \"label\": \"sport\"}\n{\"text\": \"b\", \"label\": \"tech\"}\n");
    write_text(P_("nolabel.jsonl"), "{\"input\": \"a\", \"label\": \"sport\"}\n{\"input\": \"b\"}\n");
    write_text(P_("range.jsonl"), "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"b\", \"label\": 1}\n"
                                  "{\"input\": \"c\", \"label\": 7}\n");
    write_text(P_("neg.jsonl"), "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"b\", \"label\": -1}\n");
    write_text(P_("nonint.jsonl"), "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"b\", \"label\": 1.5}\n");
    write_text(P_("unknown.jsonl"), "{\"input\": \"a\", \"label\": \"sport\"}\n{\"input\": \"b\", \"label\": \"music\"}\n");
    write_text(P_("mixed.jsonl"), "{\"input\": \"a\", \"label\": \"sport\"}\n{\"input\": \"b\", \"labels\": [\"tech\"]}\n");
    write_text(P_("mixtype.jsonl"), "{\"input\": \"a\", \"label\": \"sport\"}\n{\"input\": \"b\", \"label\": 1}\n");
    write_text(P_("cfg_badjson.json"), "{\"lr\": 0.01,\n \"batch\": }\n");
    write_text(P_("cfg_key.json"), "{\"lerning-rate\": 0.01}");
    write_text(P_("cfg_val.json"), "{\"lr\": \"fast\"}");
    write_text(P_("cfg_arr.json"), "[1, 2]");
    write_text(P_("cfg_range.json"), "{\"batch\": 0}");
    write_text(P_("multi.jsonl"), "{\"input\": \"a\", \"labels\": [\"sport\"]}\n{\"input\": \"b\", \"labels\": [\"tech\", \"food\"]}\n");
    {
        size_t n = 0;
        char *b = tl_read_file(P_("tiny.gguf"), &n);
        CHECK(b && copy_file(P_("tiny.gguf"), P_("trunc_data.gguf"), (long)n - 100), "model cut in its tensor data");
        free(b);
    }
    write_text(P_("cfg_nested.json"), "{\"lr\": {\"value\": 1}}");
    write_text(P_("pred_in.txt"), "goal goal\nchip\n\nsoup soup soup\n");
    /* Hugging Face directories (tests/fixtures/hf_tiny_llama) with one thing broken */
    static const char *hf_dirs[] = {"hf", "hf_cfgkey", "hf_cfgtype", "hf_shape", "hf_shard", "hf_dtype", "hf_moe", "hf_tok"};
    for (size_t i = 0; i < sizeof hf_dirs / sizeof *hf_dirs; i++)
        CHECK(copy_tree("tests/fixtures/hf_tiny_llama", P_(hf_dirs[i])), "copy the tiny HF llama to %s", hf_dirs[i]);
    size_t cl = 0;
    char *cfg = tl_read_file("tests/fixtures/hf_tiny_llama/config.json", &cl);
    if (CHECK(cfg != NULL, "tiny HF config.json")) {
        static const struct { const char *dir, *from, *to; } edits[] = {
            {"hf_cfgkey", "\"num_hidden_layers\": 2,", ""},
            {"hf_cfgtype", "\"num_attention_heads\": 4", "\"num_attention_heads\": [4]"},
            {"hf_shape", "\"intermediate_size\": 96", "\"intermediate_size\": 128"},
            {"hf_moe", "\"vocab_size\": 256", "\"vocab_size\": 256, \"num_local_experts\": 8"},
        };
        for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
            char *at = strstr(cfg, edits[i].from), path[1300];
            if (!CHECK(at != NULL, "config edit %s", edits[i].dir)) continue;
            snprintf(path, sizeof path, "%s/config.json", P_(edits[i].dir));
            FILE *f = fopen(path, "wb");
            if (!f) continue;
            fwrite(cfg, 1, (size_t)(at - cfg), f);
            fputs(edits[i].to, f);
            fputs(at + strlen(edits[i].from), f);
            fclose(f);
        }
        free(cfg);
    }
    {
        char path[1300];
        snprintf(path, sizeof path, "%s/model-00002-of-00005.safetensors", P_("hf_shard"));
        unlink(path);
        snprintf(path, sizeof path, "%s/model-00005-of-00005.safetensors", P_("hf_dtype"));
        size_t n = 0;
        char *b = tl_read_file(path, &n);
        char *at = b ? memmem(b, n, "\"F32\"", 5) : NULL;
        if (CHECK(at != NULL, "F32 in the last shard")) {
            memcpy(at, "\"I32\"", 5);
            FILE *f = fopen(path, "wb");
            if (f) {
                fwrite(b, 1, n, f);
                fclose(f);
            }
        }
        free(b);
        snprintf(path, sizeof path, "%s/tokenizer.json", P_("hf_tok"));
        write_text(path, "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    }
}

/* Exit status 2: usage errors of every command. */
static void test_usage(void) {
    EXPECT("frobnicate", 2, "afinar: unknown command 'frobnicate' (see 'afinar --help')");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --bogus", 2,
           "afinar train: unknown option '--bogus' (see 'afinar train --help')");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o", 2, "afinar train: option '-o' needs a value");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --lr", 2, "afinar train: option '--lr' needs a value");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --lr abc", 2, "afinar train: --lr: expected a number, got 'abc'");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --lr -1", 2, "afinar train: --lr: expected a number in [0, 10], got '-1'");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --batch 0", 2, "afinar train: --batch: expected an integer in [1, 1000000], got '0'");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --batch 2.5", 2, "afinar train: --batch: expected an integer in [1, 1000000], got '2.5'");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --epochs -1", 2, "afinar train: --epochs: expected a number in [0, 1000000], got '-1'");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --epochs 0", 2,
           "afinar train: --epochs 0 trains nothing: give --epochs E > 0 or --max-steps N");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --warmup abc", 2,
           "afinar train: --warmup: expected N steps, a fraction below 1 or P%, got 'abc'");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --pooling max", 2,
           "afinar train: --pooling: expected mean or last, got 'max'");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --val @/val.jsonl --val-split 0.2", 2,
           "afinar train: --val and --val-split conflict: give a validation file or a split fraction, not both");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u extra", 2, "afinar train: unexpected argument 'extra'");
    EXPECT("train --train @/train.jsonl -o @/u", 2, "afinar train: missing -m MODEL.gguf (see 'afinar train --help')");
    EXPECT("train -m @/tiny.gguf -o @/u", 2, "afinar train: missing --train FILE.jsonl (see 'afinar train --help')");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl", 2, "afinar train: missing -o DIR (the output directory)");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/cfg_key.json", 2,
           "afinar train: @/cfg_key.json: unknown key \"lerning-rate\" (keys are the flag names without dashes, e.g. \"grad-accum\")");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/cfg_badjson.json", 2,
           "afinar train: @/cfg_badjson.json:2: invalid JSON at column 11 (byte 23) in the config file");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/cfg_arr.json", 2,
           "afinar train: @/cfg_arr.json: config file must be a JSON object {\"flag-name\": value, ...}");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/cfg_nested.json", 2,
           "afinar train: @/cfg_nested.json: key \"lr\": expected a string, number or boolean");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/cfg_val.json", 2,
           "afinar train: --lr: expected a number, got 'fast'");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/cfg_range.json", 2,
           "afinar train: --batch: expected an integer in [1, 1000000], got '0'");
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --max-seq-len 0", 2,
           "afinar check: --max-seq-len: expected an integer in [1, 1048576], got '0'");
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --threads x", 2,
           "afinar check: --threads: expected an integer, got 'x'");
    EXPECT("eval -m @/tiny.gguf -a @/run/final", 2, "afinar eval: missing --data FILE.jsonl");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/val.jsonl --batch 0", 2,
           "afinar eval: --batch: expected an integer in [1, 1048576], got '0'");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/val.jsonl --nope", 2,
           "afinar eval: unknown option '--nope' (see 'afinar eval --help')");
    EXPECT("eval -m @/tiny.gguf -a", 2, "afinar eval: option '-a' needs a value");
    EXPECT("predict", 2, "afinar predict: missing -m MODEL (a GGUF file or HF directory)");
    EXPECT("predict -m @/tiny.gguf -a @/run/final --threshold 1.5", 2,
           "afinar predict: --threshold: expected a number in [1e-06, 0.999999], got '1.5'");
    EXPECT("predict -m @/tiny.gguf -a @/run/final --batch abc", 2,
           "afinar predict: --batch: expected an integer in [1, 1048576], got 'abc'");
    EXPECT("info", 2, "afinar info: expected exactly one FILE argument (see 'afinar info --help')");
    EXPECT("info @/tiny.gguf @/tiny.gguf", 2, "afinar info: expected exactly one FILE argument (see 'afinar info --help')");
    EXPECT("generate -p hi", 2, "afinar generate: missing -m MODEL (a GGUF file or HF directory)");
    EXPECT("generate -m @/tiny.gguf", 2, "afinar generate: give exactly one of -p TEXT or -f FILE");
    EXPECT("generate -m @/tiny.gguf -p hi -f @/pred_in.txt", 2, "afinar generate: give exactly one of -p TEXT or -f FILE");
    EXPECT("generate -m @/tiny.gguf -p hi -n 0", 2, "afinar generate: --n-predict: expected an integer in [1, 1048576], got '0'");
    EXPECT("generate -m @/tiny.gguf -p hi --temp -1", 2, "afinar generate: --temp: expected a number in [0, 100], got '-1'");
    EXPECT("generate -m @/tiny.gguf -p hi --top-p nan", 2, "afinar generate: --top-p: expected a number in [0, 1], got 'nan'");
    EXPECT("generate -m @/tiny.gguf -p hi --system sys", 2, "afinar generate: --system needs --chat");
    EXPECT("generate -m @/tiny.gguf -p hi --chat-template gemma", 2, "afinar generate: --chat-template needs --chat");
    EXPECT("generate -m @/tiny.gguf -p hi --kernel avx9", 2,
           "afinar generate: --kernel: kernel path 'avx9': expected auto, scalar, avx2 or avx512");
    EXPECT("generate -m @/tiny.gguf -p", 2, "afinar generate: option '-p' needs a value");
}

/* Exit status 1: files that are missing, of the wrong kind or unreadable. */
static void test_files(void) {
    const char *enoent = strerror(ENOENT);
    char want[1024];
    /* the model */
    snprintf(want, sizeof want, "afinar info: @/missing.gguf: cannot open: %s", enoent);
    EXPECT("info @/missing.gguf", 1, want);
    EXPECT("info @/adir", 1, "afinar info: @/adir: *");
    EXPECT("info @/empty.gguf", 1, "afinar info: @/empty.gguf: *");
    EXPECT("info @/text.gguf", 1, "afinar info: @/text.gguf: *");
    EXPECT("info @/trunc.gguf", 1, "afinar info: @/trunc.gguf: *");
    EXPECT("info @/train.jsonl", 1, "afinar info: @/train.jsonl: *");
    EXPECT("info @/trunc_data.gguf", 1, "afinar info: @/trunc_data.gguf: *");
    EXPECT("generate -m @/trunc_data.gguf -p hi -t 1", 1, "afinar generate: @/trunc_data.gguf: *");
    /* Hugging Face directories: the good one is described; broken ones give one message naming the
     * file and the field */
    {
        char **av = split_args("info @/hf");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0 && r.out && strstr(r.out, "model_type:    llama") && strstr(r.out, "lm_head.weight") &&
                  strstr(r.out, "model-00005-of-00005.safetensors"),
              "info on an HF directory: exit %d", r.rc);
        run_free(&r);
    }
    EXPECT("info @/hf_cfgkey", 1, "afinar info: @/hf_cfgkey/config.json: field 'num_hidden_layers': missing");
    EXPECT("generate -m @/hf_cfgkey -p hi -t 1", 1,
           "afinar generate: @/hf_cfgkey/config.json: field 'num_hidden_layers': missing");
    EXPECT("generate -m @/hf_cfgtype -p hi -t 1", 1,
           "afinar generate: @/hf_cfgtype/config.json: field 'num_attention_heads': expected an integer in [1, 1024]");
    EXPECT("generate -m @/hf_shape -p hi -t 1", 1,
           "afinar generate: @/hf_shape: tensor 'model.layers.0.mlp.gate_proj.weight': shape [64, 96, 1, 1], expected [64, 128]");
    EXPECT("generate -m @/hf_shard -p hi -t 1", 1,
           "afinar generate: @/hf_shard/model.safetensors.index.json: weight_map names shard 'model-00002-of-00005.safetensors', which is missing");
    EXPECT("info @/hf_shard", 1,
           "afinar info: @/hf_shard/model.safetensors.index.json: weight_map names shard 'model-00002-of-00005.safetensors', which is missing");
    EXPECT("generate -m @/hf_dtype -p hi -t 1", 1,
           "afinar generate: @/hf_dtype/model-00005-of-00005.safetensors: tensor '*': dtype I32 is not supported (F32, F16, BF16)");
    EXPECT("train -m @/hf_moe --train @/train.jsonl -o @/hfm", 1,
           "afinar train: @/hf_moe/config.json: field 'num_local_experts': mixture-of-experts models are not supported");
    EXPECT("train -m @/hf_tok --train @/train.jsonl -o @/hft -t 1", 1,
           "afinar train: @/hf_tok: the model has no usable tokenizer (@/hf_tok/tokenizer.json: field 'model.type': "
           "'Unigram' is not supported (BPE)); text data cannot be read");
    snprintf(want, sizeof want, "afinar train: @/missing.gguf: cannot open: %s", enoent);
    EXPECT("train -m @/missing.gguf --train @/train.jsonl -o @/u -t 1", 1, want);
    EXPECT("train -m @/train.jsonl --train @/train.jsonl -o @/u -t 1", 1, "afinar train: @/train.jsonl: *");
    EXPECT("check -m @/trunc.gguf --train @/train.jsonl -t 1", 1, "afinar check: @/trunc.gguf: *");
    EXPECT("check -m @/adir --train @/train.jsonl -t 1", 1, "afinar check: @/adir: *");
    EXPECT("check -m @/notok.gguf --train @/train.jsonl -t 1", 1,
           "afinar check: @/notok.gguf: the model has no usable tokenizer*");
    EXPECT("eval -m @/missing.gguf -a @/run/final --data @/val.jsonl -t 1", 1, "afinar eval: @/missing.gguf: cannot open: *");
    EXPECT("eval -m @/text.gguf -a @/run/final --data @/val.jsonl -t 1", 1, "afinar eval: @/text.gguf: *");
    EXPECT("predict -m @/empty.gguf -a @/run/final -t 1", 1, "afinar predict: @/empty.gguf: *");
    EXPECT("eval -m @/notok.gguf -a @/run/final --data @/val.jsonl -t 1", 1,
           "afinar eval: @/notok.gguf: the model has no usable tokenizer (tokenizer.ggml.model: missing*), so text cannot be read");
    EXPECT("predict -m @/notok.gguf -a @/run/final -t 1", 1,
           "afinar predict: @/notok.gguf: the model has no usable tokenizer (tokenizer.ggml.model: missing*), so text cannot be read");
    EXPECT("generate -m @/trunc.gguf -p hi -t 1", 1, "afinar generate: @/trunc.gguf: *");
    EXPECT("generate -m @/notok.gguf -p hi -t 1", 1,
           "afinar generate: @/notok.gguf: the model has no usable tokenizer (tokenizer.ggml.model: missing*), so text cannot be generated");
    snprintf(want, sizeof want, "afinar generate: prompt file @/missing.txt: cannot open: %s", enoent);
    EXPECT("generate -m @/tiny.gguf -f @/missing.txt -t 1", 1, want);
    EXPECT("generate -m @/tiny.gguf -f @/adir -t 1", 1, "afinar generate: prompt file @/adir: not a regular file (a directory)");
    /* the data */
    snprintf(want, sizeof want, "afinar check: @/missing.jsonl: cannot open: %s", enoent);
    EXPECT("check -m @/tiny.gguf --train @/missing.jsonl -t 1", 1, want);
    EXPECT("check -m @/tiny.gguf --train @/adir -t 1", 1, "afinar check: @/adir: *");
    EXPECT("check -m @/tiny.gguf --train @/tiny.gguf -t 1", 1, "afinar check: @/tiny.gguf:1: *");
    EXPECT("check -m @/tiny.gguf --train @/empty.jsonl -t 1", 1, "afinar check: @/empty.jsonl: no samples (empty data set)");
    EXPECT("check -m @/tiny.gguf --train @/blank.jsonl -t 1", 1, "afinar check: @/blank.jsonl: no samples (empty data set)");
    snprintf(want, sizeof want, "afinar check: @/missing.jsonl: cannot open: %s", enoent);
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --val @/missing.jsonl -t 1", 1, want);
    snprintf(want, sizeof want, "afinar train: @/missing.jsonl: cannot open: %s", enoent);
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl --val @/missing.jsonl -o @/u -t 1", 1, want);
    snprintf(want, sizeof want,
             "afinar check: --labels @/missing.txt: cannot open: %s (give a file with one name per line, or names as a,b,c)",
             enoent);
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --labels @/missing.txt -t 1", 1, want);
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --labels @/adir -t 1", 1,
           "afinar check: --labels @/adir: not a regular file");
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --labels @/empty.jsonl -t 1", 1, "afinar check: @/empty.jsonl: *");
    snprintf(want, sizeof want, "afinar train: @/missing.json: cannot read config file: %s", enoent);
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/missing.json", 1, want);
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/adir", 1,
           "afinar train: @/adir: cannot read config file: *");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/empty.jsonl", 2,
           "afinar train: @/empty.jsonl: config file is empty (expected a JSON object)");
    snprintf(want, sizeof want, "afinar eval: @/missing.jsonl: cannot open: %s", enoent);
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/missing.jsonl -t 1", 1, want);
    snprintf(want, sizeof want, "afinar predict: @/missing.jsonl: cannot open: %s", enoent);
    EXPECT("predict -m @/tiny.gguf -a @/run/final --input @/missing.jsonl -t 1", 1, want);
    /* the adapter */
    EXPECT("eval -m @/tiny.gguf -a @/missing_adapter --data @/val.jsonl -t 1", 1, "afinar eval: @/missing_adapter*");
    EXPECT("predict -m @/tiny.gguf -a @/adir -t 1", 1, "afinar predict: @/adir*");
    EXPECT("eval -m @/tiny.gguf -a @/val.jsonl --data @/val.jsonl -t 1", 1, "afinar eval: @/val.jsonl*");
    EXPECT("eval -m @/tiny.gguf -a @/bad_cfg --data @/val.jsonl -t 1", 1, "afinar eval: @/bad_cfg/adapter_config.json: *");
    EXPECT("eval -m @/tiny.gguf -a @/bad_st --data @/val.jsonl -t 1", 1,
           "afinar eval: @/bad_st/adapter_model.safetensors: *");
    EXPECT("predict -m @/tiny.gguf -a @/bad_st -t 1", 1, "afinar predict: @/bad_st/adapter_model.safetensors: *");
    /* unreadable files: root reads them anyway */
    if (geteuid() == 0) {
        tl_skip("unreadable-file cases: running as root");
    } else {
        const char *eacces = strerror(EACCES);
        copy_file(P_("tiny.gguf"), P_("noread.gguf"), -1);
        copy_file(P_("train.jsonl"), P_("noread.jsonl"), -1);
        chmod(P_("noread.gguf"), 0);
        chmod(P_("noread.jsonl"), 0);
        snprintf(want, sizeof want, "afinar info: @/noread.gguf: cannot open: %s", eacces);
        EXPECT("info @/noread.gguf", 1, want);
        snprintf(want, sizeof want, "afinar check: @/noread.jsonl: cannot open: %s", eacces);
        EXPECT("check -m @/tiny.gguf --train @/noread.jsonl -t 1", 1, want);
        snprintf(want, sizeof want, "afinar train: @/noread.jsonl: cannot read config file: %s", eacces);
        EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/noread.jsonl", 1, want);
    }
}

/* Exit status 1: data content, each message naming the file, the line and the field. */
static void test_data(void) {
    EXPECT("check -m @/tiny.gguf --train @/badjson.jsonl -t 1", 1, "afinar check: @/badjson.jsonl:3: invalid JSON at column *");
    EXPECT("check -m @/tiny.gguf --train @/notext.jsonl -t 1", 1, "afinar check: @/notext.jsonl:2: field 'input': missing (the line has 'text', 'label'; name the field with --text-field NAME)");
    EXPECT("check -m @/tiny.gguf --train @/notext.jsonl --text-field body -t 1", 1,
           "afinar check: @/notext.jsonl:1: field 'body': missing (the line has 'input', 'label'; name the field with --text-field NAME)");
    EXPECT("check -m @/tiny.gguf --train @/nolabel.jsonl -t 1", 1, "afinar check: @/nolabel.jsonl:2: field 'label': missing (the line has 'input'; name the field with --label-field NAME)");
    EXPECT("check -m @/tiny.gguf --train @/range.jsonl --num-classes 3 -t 1", 1,
           "afinar check: @/range.jsonl:3: field 'label': value 7 out of range [0, 3)");
    EXPECT("check -m @/tiny.gguf --train @/neg.jsonl -t 1", 1, "afinar check: @/neg.jsonl:2: field 'label': label -1 is negative");
    EXPECT("check -m @/tiny.gguf --train @/nonint.jsonl -t 1", 1,
           "afinar check: @/nonint.jsonl:2: field 'label': label 1.5 is not an integer");
    EXPECT("check -m @/tiny.gguf --train @/unknown.jsonl --labels @/labels.txt -t 1", 1,
           "afinar check: @/unknown.jsonl:2: field 'label': unknown label name \"music\" (known: *");
    EXPECT("check -m @/tiny.gguf --train @/unknown.jsonl --labels sport,tech -t 1", 1,
           "afinar check: @/unknown.jsonl:2: field 'label': unknown label name \"music\" (known: *");
    EXPECT("check -m @/tiny.gguf --train @/mixed.jsonl -t 1", 1, "afinar check: @/mixed.jsonl:2: *");
    EXPECT("check -m @/tiny.gguf --train @/mixtype.jsonl -t 1", 1,
           "afinar check: @/mixtype.jsonl:2: field 'label': got a* label but earlier lines use * labels");
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --val @/badjson.jsonl -t 1", 1,
           "afinar check: @/badjson.jsonl:3: invalid JSON at column *");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl --val @/unknown.jsonl -o @/u -t 1", 1,
           "afinar train: @/unknown.jsonl:2: field 'label': unknown label name \"music\" (known: *");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl --multi-label -o @/u -t 1", 1,
           "afinar train: @/train.jsonl: --multi-label given but the data are single-label (field 'label' holds one label)");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/badjson.jsonl -t 1", 1,
           "afinar eval: @/badjson.jsonl:3: invalid JSON at column *");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/unknown.jsonl -t 1", 1,
           "afinar eval: @/unknown.jsonl:2: field 'label': unknown label name \"music\" (known: *");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/multi.jsonl -t 1", 1,
           "afinar eval: @/multi.jsonl: the data are multi-label but the adapter is single-label");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/blank.jsonl -t 1", 1,
           "afinar eval: @/blank.jsonl: no samples (empty data set)");
    EXPECT("predict -m @/tiny.gguf -a @/run/final --input @/notext.jsonl -t 1", 1,
           "afinar predict: @/notext.jsonl:2: field 'input': missing (the line has 'text', 'label'; name the field with --text-field NAME)");
    /* no failed run left an output directory behind */
    CHECK(!exists(P_("u")), "a failed train left %s", P_("u"));
}

/* Output directories and checkpoints. The output directory is checked after the data report, so
 * train's message is the last stderr line. */
static void test_output(void) {
    EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o @/run --max-steps 2 -t 1 --no-plot", 1,
                 "afinar train: @/run: holds another run (*); use --overwrite to replace it, --resume @/run to continue it, "
                 "or another -o DIR");
    EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o @/train.jsonl --max-steps 2 -t 1 --no-plot", 1,
                 "afinar train: @/train.jsonl: exists and is not a directory");
    EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o @/train.jsonl/sub --max-steps 2 -t 1 --no-plot", 1,
                 "afinar train: @/train.jsonl/sub: @/train.jsonl exists and is not a directory");
    EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o /proc/afinar_out --max-steps 2 -t 1 --no-plot", 1,
                 "afinar train: /proc/afinar_out: cannot create directory: *");
    EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o @/u --lr 0 -t 1 --no-plot", 1,
                 "afinar train: not training: fix the errors above (or run 'afinar check' to iterate on the settings)");
    CHECK(!exists(P_("u")), "a train refused for its settings left %s", P_("u"));
    {
        char **av = split_args("check -m @/tiny.gguf --train @/train.jsonl --lr 0 -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 1 && strstr(r.out, "error [lr-invalid] learning rate 0 must be a finite number > 0") &&
                  strstr(r.out, "check: NOT ready to train (1 errors"),
              "check --lr 0: exit %d (want 1), stdout:\n%s", r.rc, r.out);
        run_free(&r);
    }
    /* the memory estimate above --memory-limit: refused before anything is written, with the flag
     * that would make it fit (checkpointing first, then smaller batches) */
    for (int ck = 0; ck < 2; ck++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "train -m @/tiny.gguf --train @/train.jsonl -o @/mem --memory-limit 0.01 --max-steps 2 "
                                  "-t 1 --no-plot%s", ck ? " --checkpointing" : "");
        char **av = split_args(cmd);
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        const char *want = ck ? "error [memory] the estimate exceeds the --memory-limit -> use a smaller --batch or --max-seq-len"
                              : "error [memory] the estimate exceeds the --memory-limit -> use --checkpointing, or a "
                                "smaller --batch or --max-seq-len";
        CHECK(r.rc == 1 && r.err && strstr(r.err, want) && strstr(r.err, "limit 0 MiB (--memory-limit)") &&
                  strstr(r.err, "afinar train: not training: fix the errors above"),
              "%s: exit %d (want 1), stderr:\n%s", cmd, r.rc, r.err ? r.err : "");
        run_free(&r);
        CHECK(!exists(P_("mem")), "a train refused for memory left %s", P_("mem"));
    }
    {
        char **av = split_args("check -m @/tiny.gguf --train @/train.jsonl --memory-limit 0.01 -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 1 && strstr(r.out, "error [memory] the estimate exceeds the --memory-limit"),
              "check --memory-limit 0.01: exit %d (want 1), stdout:\n%s", r.rc, r.out);
        run_free(&r);
    }
    /* --resume of a directory with no checkpoint, or of nothing */
    EXPECT("train --resume @/adir -t 1", 1,
           "afinar train: --resume @/adir: no trainer_state.safetensors there and no checkpoint-N directory holding one");
    EXPECT("train --resume @/missing_run -t 1", 1, "afinar train: --resume @/missing_run: cannot open: *");
    EXPECT("train --resume @/run/checkpoint-2 --lr abc -t 1", 2, "afinar train: --lr: expected a number, got 'abc'");
    /* eval --json into a directory that does not exist / cannot be written */
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/val.jsonl --json @/nodir/m.json -t 1", 1,
           "afinar eval: @/nodir/m.json: directory @/nodir: No such file or directory");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/val.jsonl --json @/adir -t 1", 1, "afinar eval: @/adir: is a directory, cannot be replaced by a file");
    if (geteuid() != 0) {
        mkdir(P_("rodir"), 0555);
        EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/val.jsonl --json @/rodir/m.json -t 1", 1,
               "afinar eval: @/rodir/m.json: directory @/rodir: Permission denied");
        EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o @/rodir/out --max-steps 2 -t 1 --no-plot", 1,
                     "afinar train: @/rodir/out: cannot create directory: *");
    } else {
        tl_skip("read-only directory cases: running as root");
    }
}

/* Disk full while saving a checkpoint: resuming the good run from checkpoint-2 re-saves
 * checkpoint-4 under a 4 KiB file size limit; the save fails, and checkpoint-2 and the complete
 * checkpoint-4 of the good run stay byte-identical. */
static void test_disk_full(void) {
#define N_KEEP 6
    static const char *const files[N_KEEP] = {
        "run/checkpoint-2/trainer_state.safetensors", "run/checkpoint-2/adapter_model.safetensors",
        "run/checkpoint-4/trainer_state.safetensors", "run/checkpoint-4/adapter_model.safetensors",
        "run/best/adapter_model.safetensors",         "run/final/adapter_model.safetensors"};
    char *before[N_KEEP];
    size_t len0[N_KEEP];
    int ok = 1;
    for (int i = 0; i < N_KEEP; i++) ok &= (before[i] = tl_read_file(P_(files[i]), &len0[i])) != NULL;
    if (CHECK(ok, "the good run lacks checkpoint-2, checkpoint-4, best or final")) {
        expect_in(NULL, 4096, "train --resume @/run/checkpoint-2 -t 1 --no-plot", 1,
                  "afinar train: @/run/*.safetensors: write failed at offset *: File too large*", MULTI);
        for (int i = 0; i < N_KEEP; i++) {
            size_t n1 = 0;
            char *after = tl_read_file(P_(files[i]), &n1);
            CHECK(after && n1 == len0[i] && !memcmp(before[i], after, n1), "%s changed by the failed save", files[i]);
            free(after);
        }
        CHECK(count_named(P_("run"), ".tmp") == 0, "temporary files left after the failed save");
    }
    for (int i = 0; i < N_KEEP; i++) free(before[i]);
    /* eval --json under a 64-byte limit: fails naming the file, the old file stays, no temporary */
    write_text(P_("m.json"), "old");
    expect_in(NULL, 64, "eval -m @/tiny.gguf -a @/run/final --data @/val.jsonl --json @/m.json -t 1", 1,
              "afinar eval: @/m.json: write failed at offset *: File too large", ONE);
    char *mj = tl_read_file(P_("m.json"), NULL);
    CHECK(mj && !strcmp(mj, "old"), "m.json changed by the failed write: %.40s", mj ? mj : "(missing)");
    free(mj);
    CHECK(count_named(g_dir, ".tmp") == 0, "temporary files left after the failed eval --json");
}

/* predict reads raw lines from stdin; a good run of each command works. */
static void test_good(void) {
    char **av = split_args("predict -m @/tiny.gguf -a @/run/final -t 1");
    run_result r = run_argv(P_("pred_in.txt"), 0, av);
    free_args(av);
    CHECK(r.rc == 0 && r.out && n_lines(r.out) == 4 && strstr(r.out, "\"label\":") && r.err && !*r.err,
          "predict from stdin lines: rc %d, stdout %s, stderr %s", r.rc, r.out ? r.out : "", r.err ? r.err : "");
    run_free(&r);
    av = split_args("predict -m @/tiny.gguf -a @/run/final --input - -t 1");
    r = run_argv(P_("val.jsonl"), 0, av);
    free_args(av);
    CHECK(r.rc == 0 && r.out && n_lines(r.out) == 6, "predict --input - (JSONL on stdin): rc %d, stdout %s, stderr %s",
          r.rc, r.out ? r.out : "", r.err ? r.err : "");
    run_free(&r);
    /* info and generate work on the good model (so their failures above are about the input) */
    av = split_args("info @/tiny.gguf");
    r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && strstr(r.out, "llama") && !*r.err, "info: rc %d, stderr %s", r.rc, r.err);
    run_free(&r);
    av = split_args("generate -m @/tiny.gguf -p ab -n 3 --temp 0 -t 1");
    r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && !*r.err, "generate: rc %d, stderr %s", r.rc, r.err);
    run_free(&r);
    /* --quantize: a bad name is a usage error; the Q8_0 tiny model is refused for nf4 (no second
     * rounding), kept as it is for q8_0 (already that type) */
    EXPECT("generate -m @/tiny.gguf -p ab -n 3 --temp 0 -t 1 --quantize nf3", 2,
           "afinar generate: quantize 'nf3': expected none, nf4, q8_0, f16 or bf16");
    EXPECT("generate -m @/tiny.gguf -p ab -n 3 --temp 0 -t 1 --quantize nf4", 1,
           "afinar generate: quantize NF4: blk.0.attn_q.weight is already quantized (Q8_0)*");
    EXPECT("predict -m @/tiny.gguf -a @/run/final -t 1 --quantize nf4", 1,
           "afinar predict: *blk.0.attn_q.weight is already quantized (Q8_0)*");
    av = split_args("generate -m @/tiny.gguf -p ab -n 3 --temp 0 -t 1 --quantize q8_0");
    r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && !*r.err, "generate --quantize q8_0 on a Q8_0 model: rc %d, stderr %s", r.rc, r.err);
    run_free(&r);
    /* stdin JSONL with a defect names <stdin>'s path and the line */
    expect_in(P_("badjson.jsonl"), 0, "predict -m @/tiny.gguf -a @/run/final --input - -t 1", 1,
              "afinar predict: /dev/stdin:3: invalid JSON at column *", ONE);
}

/* A copy of tiny.gguf with afinar.classifier.* keys whose weight array has `nw` floats for
 * num_classes 3 and hidden `hidden` (a bad head when nw != 3 * hidden or hidden != 64). */
static af_status write_head_model(const char *src, const char *dst, uint32_t hidden, uint64_t nw) {
    af_gguf *g = NULL;
    af_gguf_writer *w = NULL;
    AF_TRY(af_gguf_open(src, &g));
    af_status st = af_gguf_writer_new(&w);
    for (uint64_t i = 0; st == AF_OK && i < g->n_kv; i++) st = af_gguf_writer_copy_kv(w, &g->kv[i]);
    float *f = calloc(nw ? nw : 1, sizeof(float));
    if (st == AF_OK) st = af_gguf_writer_add_u32(w, "afinar.classifier.num_classes", 3);
    if (st == AF_OK) st = af_gguf_writer_add_u32(w, "afinar.classifier.hidden", hidden);
    if (st == AF_OK) st = af_gguf_writer_add_arr(w, "afinar.classifier.weight", AF_GGUF_FLOAT32, f, nw);
    for (uint64_t i = 0; st == AF_OK && i < g->n_tensors; i++) {
        const af_gguf_tensor *t = &g->tensors[i];
        st = af_gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data, (size_t)t->nbytes);
    }
    if (st == AF_OK) st = af_gguf_writer_write_file(w, dst);
    free(f);
    af_gguf_writer_free(w);
    af_gguf_close(g);
    return st;
}

/* No "NAME.tmp.*" temporary (the GGUF writer's) left in the test directory. */
static int no_temporaries(void) {
    DIR *d = opendir(g_dir);
    int ok = d != NULL;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) ok = 0;
    if (d) closedir(d);
    return ok;
}

/* The label_id values of predict's JSON lines, in order ("0,2,1,"). */
static void label_ids(const char *out, char *buf, size_t cap) {
    buf[0] = 0;
    for (const char *p = out; p && (p = strstr(p, "\"label_id\":")); p++) {
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%ld,", strtol(p + 11, NULL, 10));
    }
}

/* afinar export / merge: good runs (the exported LoRA GGUF and the merged model give predict's
 * answers) and bad input, each one message, exit 1, nothing written. */
static void test_export_merge(void) {
    EXPECT("export -m @/tiny.gguf -a @/run/final", 2, "afinar export: missing -o OUT.gguf");
    EXPECT("export -a @/run/final -o @/x.gguf", 2, "afinar export: missing -m MODEL (a GGUF file or HF directory)");
    EXPECT("merge -m @/tiny.gguf -o @/m.gguf", 2, "afinar merge: missing -a ADAPTER");
    EXPECT("merge -m @/tiny.gguf -a @/run/final -o @/m.gguf --bogus", 2,
           "afinar merge: unknown option '--bogus' (see 'afinar merge --help')");
    /* good: export, predict with it; merge, predict without -a */
    char **av = split_args("export -m @/tiny.gguf -a @/run/final -o @/x.gguf");
    run_result r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && exists(P_("x.gguf")), "export: rc %d, stderr %s", r.rc, r.err ? r.err : "");
    run_free(&r);
    av = split_args("merge -m @/tiny.gguf -a @/run/final -o @/m.gguf --type f32");
    r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && exists(P_("m.gguf")) && strstr(r.err, "tensors merged"), "merge: rc %d, stderr %s", r.rc,
          r.err ? r.err : "");
    run_free(&r);
    char want_ids[256], got[256];
    const char *runs[3] = {"predict -m @/tiny.gguf -a @/run/final --input - -t 1",
                           "predict -m @/tiny.gguf -a @/x.gguf --input - -t 1", "predict -m @/m.gguf --input - -t 1"};
    char *first_out = NULL;
    for (int i = 0; i < 3; i++) {
        av = split_args(runs[i]);
        r = run_argv(P_("val.jsonl"), 0, av);
        free_args(av);
        label_ids(r.out, got, sizeof got);
        if (i == 0) {
            snprintf(want_ids, sizeof want_ids, "%s", got);
            first_out = r.out ? strdup(r.out) : NULL;
        }
        CHECK(r.rc == 0 && n_lines(r.out) == 6 && strcmp(got, want_ids) == 0, "%s: rc %d, labels %s want %s, stderr %s",
              runs[i], r.rc, got, want_ids, r.err ? r.err : "");
        /* the LoRA GGUF holds the same f32 parameters: the very same output */
        if (i == 1) CHECK(first_out && r.out && strcmp(first_out, r.out) == 0, "predict -a x.gguf output differs");
        run_free(&r);
    }
    free(first_out);
    /* bad input */
    EXPECT("export -m @/tiny.gguf -a @/run/final -o @/x.gguf", 1,
           "afinar export: @/x.gguf: exists (use --overwrite to replace it)");
    EXPECT("merge -m @/tiny.gguf -a @/run/final -o @/m.gguf", 1,
           "afinar merge: @/m.gguf: exists (use --overwrite to replace it)");
    EXPECT("merge -m @/tiny.gguf -a @/run/final -o @/m2.gguf --type q3_x", 1,
           "afinar merge: unknown --type 'q3_x' (keep, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k)");
    EXPECT("merge -m @/tiny.gguf -a @/run/final -o @/m2.gguf --type q4_k", 1,
           "afinar merge: @/tiny.gguf: tensor blk.0.attn_q.weight has rows of 64 values, not a multiple of Q4_K's "
           "block of 256");
    tm_spec gs = tm_default("gemma3", AF_TYPE_F32);
    CHECK(tm_write(&gs, P_("gemma.gguf")) == AF_OK, "gemma model: %s", af_last_error());
    tm_spec ws = tm_default("llama", AF_TYPE_F32);
    ws.hidden = 96;
    ws.vocab = 258;
    CHECK(tm_write(&ws, P_("wide.gguf")) == AF_OK, "wide model: %s", af_last_error());
    EXPECT("merge -m @/gemma.gguf -a @/x.gguf -o @/m2.gguf", 1,
           "afinar merge: @/x.gguf: adapter for architecture \"llama\", the model is \"gemma3\"");
    EXPECT("export -m @/wide.gguf -a @/run/final -o @/x2.gguf", 1, "afinar export: @/run/final*");
    EXPECT("merge -m @/wide.gguf -a @/x.gguf -o @/m2.gguf", 1, "afinar merge: @/x.gguf*");
    CHECK(write_head_model(P_("tiny.gguf"), P_("badhead.gguf"), 64, 100) == AF_OK &&
              write_head_model(P_("tiny.gguf"), P_("widehead.gguf"), 32, 96) == AF_OK,
          "head models: %s", af_last_error());
    EXPECT("predict -m @/badhead.gguf -t 1", 1,
           "afinar predict: @/badhead.gguf: afinar.classifier.weight: expected an f32 array of 192 values "
           "(num_classes x hidden)");
    EXPECT("predict -m @/widehead.gguf -t 1", 1,
           "afinar predict: @/widehead.gguf: adapter made for a model with hidden size 32 and >= 0 layers, but "
           "@/widehead.gguf has hidden size 64 and 2 layers");
    EXPECT("predict -m @/tiny.gguf -t 1", 1,
           "afinar predict: @/tiny.gguf: a GGUF model without an afinar classification head (afinar.classifier.*), "
           "not a LoRA adapter (general.type \"adapter\")");
    EXPECT("export -m @/tiny.gguf -a @/m.gguf -o @/x3.gguf", 1,
           "afinar export: @/m.gguf: has no LoRA tensors (only a classification head): nothing to export");
    CHECK(!exists(P_("m2.gguf")) && !exists(P_("x2.gguf")) && !exists(P_("x3.gguf")) && no_temporaries(),
          "a failed export/merge left a file or a temporary behind");
    /* --overwrite replaces */
    av = split_args("merge -m @/tiny.gguf -a @/x.gguf -o @/m.gguf --overwrite");
    r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0, "merge --overwrite: rc %d, stderr %s", r.rc, r.err ? r.err : "");
    run_free(&r);
}

/* afinar convert: usage errors (2), bad input (1, one message naming the path, nothing written), a
 * good conversion of a tiny HF directory that `info` reads, no overwrite without --overwrite. */
static void test_convert(void) {
#define QW "tests/fixtures/hf_tiny_qwen2"
    EXPECT("convert", 2, "afinar convert: missing DIR (a Hugging Face checkpoint directory)");
    EXPECT("convert " QW, 2, "afinar convert: missing -o OUT.gguf");
    EXPECT("convert " QW " -o @/c.gguf --bogus", 2, "afinar convert: unknown option '--bogus' (see 'afinar convert --help')");
    EXPECT("convert " QW " @/other -o @/c.gguf", 2, "afinar convert: unexpected argument '@/other' (one directory)");
    EXPECT("convert " QW " -o", 2, "afinar convert: option '-o' needs a value");
    EXPECT("convert " QW " -o @/c.gguf --type q3_x", 1,
           "afinar convert: unknown --type 'q3_x' (keep, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k)");
    EXPECT("convert @/tiny.gguf -o @/c.gguf", 1,
           "afinar convert: @/tiny.gguf: not a directory (convert reads a Hugging Face checkpoint directory: "
           "config.json, *.safetensors, tokenizer.json)");
    EXPECT("convert @/run -o @/c.gguf", 1, "afinar convert: @/run: a directory without config.json (not a Hugging Face checkpoint)");
    CHECK(!exists(P_("c.gguf")) && no_temporaries(), "a failed convert left a file or a temporary behind");
    char **av = split_args("convert " QW " -o @/c.gguf --quiet");
    run_result r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && exists(P_("c.gguf")) && r.err && strstr(r.err, "afinar convert: wrote") && n_lines(r.err) == 1,
          "convert: rc %d, stderr %s", r.rc, r.err ? r.err : "");
    run_free(&r);
    av = split_args("info @/c.gguf");
    r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && r.out && strstr(r.out, "qwen2") && strstr(r.out, "blk.1.attn_v.bias"),
          "info of the converted file: rc %d", r.rc);
    run_free(&r);
    EXPECT("convert " QW " -o @/c.gguf --quiet", 1, "afinar convert: @/c.gguf: exists (use --overwrite to replace it)");
    av = split_args("convert " QW " -o @/c.gguf --quiet --overwrite --type f16");
    r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == 0 && r.err && strstr(r.err, "converted to another type"), "convert --overwrite --type f16: rc %d", r.rc);
    run_free(&r);
#undef QW
}

/* afinar eval --generate N (causal-LM data): usage errors, data errors naming FILE:LINE and the
 * field, and a good run on the tiny model with and without the trained adapter. */
static void test_eval_generate(void) {
    write_text(P_("pc.jsonl"), "{\"prompt\": \"ab ab\", \"completion\": \" ab\"}\n\n{\"prompt\": \"b\", \"completion\": \"a\"}\n");
    write_text(P_("pc_nocomp.jsonl"), "{\"prompt\": \"ab\", \"completion\": \"a\"}\n{\"prompt\": \"ab\"}\n");
    write_text(P_("pc_type.jsonl"), "{\"prompt\": 3, \"completion\": \"a\"}\n");
    write_text(P_("pc_msgs.jsonl"), "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n");
    write_text(P_("pc_chat.jsonl"), "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n");
    EXPECT("eval -m @/tiny.gguf --data @/pc.jsonl --generate -1", 2,
           "afinar eval: --generate: expected an integer in [0, 1073741824], got '-1'");
    EXPECT("eval --data @/pc.jsonl --generate 2", 2, "afinar eval: missing -m MODEL (a GGUF file or HF directory)");
    EXPECT("eval -m @/tiny.gguf --generate 2", 2, "afinar eval: missing --data FILE.jsonl");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/train.jsonl --first-line", 2,
           "afinar eval: --first-line needs --task causal-lm or --generate N (causal-LM data)");
    EXPECT("eval -m @/tiny.gguf --data @/pc.jsonl --generate 2 --text-field x", 2,
           "afinar eval: --text-field applies to classification data, not to causal-LM data");
    EXPECT("eval -m @/tiny.gguf --data @/pc.jsonl --generate 2 --max-new-tokens 0", 2,
           "afinar eval: --max-new-tokens: expected an integer in [1, 65536], got '0'");
    EXPECT("eval -m @/tiny.gguf --data @/pc_nocomp.jsonl --generate 0 -t 1", 1,
           "afinar eval: @/pc_nocomp.jsonl:2: field 'completion': missing (a 'prompt' needs a 'completion')");
    EXPECT("eval -m @/tiny.gguf --data @/pc_type.jsonl --generate 0 -t 1", 1,
           "afinar eval: @/pc_type.jsonl:1: field 'prompt': expected a string or a list of messages, got number");
    EXPECT("eval -m @/tiny.gguf --data @/pc_msgs.jsonl --generate 0 -t 1", 1,
           "afinar eval: @/pc_msgs.jsonl:1: field 'messages': no assistant turn (nothing to train on)");
    EXPECT("eval -m @/tiny.gguf --data @/pc_chat.jsonl --generate 0 -t 1", 1,
           "afinar eval: @/pc_chat.jsonl: chat template: the model has no chat template *--chat-template NAME (chatml, qwen3, llama3*");
    EXPECT("eval -m @/tiny.gguf --data @/badjson.jsonl --generate 1 -t 1", 1,
           "afinar eval: @/badjson.jsonl:1: field 'label': a causal-LM data file has no labels (this looks like classification data: use --task classification)");
    EXPECT("eval -m @/tiny.gguf --data @/blank.jsonl --generate 1 -t 1", 1,
           "afinar eval: @/blank.jsonl: no examples (empty file)");
    EXPECT("eval -m @/notok.gguf --data @/pc.jsonl --generate 1 -t 1", 1,
           "afinar eval: @/pc.jsonl: the model has no tokenizer");
    EXPECT("eval -m @/tiny.gguf -a @/adir --data @/pc.jsonl --generate 1 -t 1", 1, "afinar eval: *@/adir*");
    EXPECT("eval --task causal-lm -m @/tiny.gguf --data @/pc.jsonl --chat-template llama -t 1", 1, "afinar eval: *llama*");
    EXPECT("eval --task regression -m @/tiny.gguf --data @/pc.jsonl", 2,
           "afinar eval: --task: unknown task 'regression' (classification, causal-lm)");
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/train.jsonl --max-seq-len 8", 2,
           "afinar eval: --max-seq-len needs --task causal-lm or --generate N (causal-LM data)");
    {
        /* loss only: --task causal-lm without --generate, numbers in the JSON */
        char **av = split_args("eval --task causal-lm -m @/tiny.gguf --data @/pc.jsonl --json @/loss.json -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0 && r.out && strstr(r.out, "2 examples") && strstr(r.out, "loss ") && strstr(r.out, "perplexity") &&
                  !strstr(r.out, "exact match"),
              "eval --task causal-lm: rc %d, stdout %s, stderr %s", r.rc, r.out ? r.out : "", r.err ? r.err : "");
        run_free(&r);
        char *lj = tl_read_file(P_("loss.json"), NULL);
        CHECK(lj && strstr(lj, "\"loss\": ") && strstr(lj, "\"mean_token_accuracy\": "), "loss JSON written");
        free(lj);
    }
    const char *good[2] = {"eval -m @/tiny.gguf --data @/pc.jsonl --generate 0 --max-new-tokens 3 --json @/gen.json -t 1",
                           "eval -m @/tiny.gguf -a @/run/final --data @/pc.jsonl --generate 1 --first-line -t 1"};
    for (int k = 0; k < 2; k++) {
        char **av = split_args(good[k]);
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0 && r.out && strstr(r.out, k ? "first 1 prompts" : "first 2 prompts") &&
                  strstr(r.out, "exact match") && strstr(r.out, "ROUGE-L F") && strstr(r.out, "[line 1] reference:  ab") &&
                  r.err && !*r.err,
              "%s: rc %d, stdout %s, stderr %s", good[k], r.rc, r.out ? r.out : "", r.err ? r.err : "");
        run_free(&r);
    }
    char *js = tl_read_file(P_("gen.json"), NULL);
    CHECK(js && strstr(js, "\"rouge_l\"") && strstr(js, "\"examples\"") && strstr(js, "\"line\":\t3"),
          "--json written with the examples (line numbers of the file)");
    free(js);
}

/* afinar merge-adapters: usage errors (2), inputs that do not fit together (1, nothing written),
 * and good merges of the trained adapter with itself that load and predict like it. The mismatched
 * adapters are fixtures of tests/ref/make_merge_ref.py (relative paths: make test runs from the
 * repository root). */
#define MF "tests/fixtures/adapter_merge"
static void test_merge_adapters(void) {
    const char *M = "afinar merge-adapters: ";
    char want[512];
    EXPECT("merge-adapters @/run/final", 2, "afinar merge-adapters: missing -o OUT_DIR (the merged adapter directory)");
    EXPECT("merge-adapters -o @/m", 2, "afinar merge-adapters: no adapter directories given (see 'afinar merge-adapters --help')");
    EXPECT("merge-adapters @/run/final @/run/final -o @/m --method slurp", 2,
           "afinar merge-adapters: --method: unknown merge method 'slurp' (linear, svd, cat, ties, dare-ties, dare-linear, "
           "magnitude-prune, slerp)");
    EXPECT("merge-adapters @/run/final @/run/final @/run/final -o @/m --method slerp --t 0.5", 1,
           "afinar merge-adapters: merge: slerp interpolates between exactly 2 adapters (3 given)");
    EXPECT("merge-adapters @/run/final @/run/final -o @/m --method slerp --weights 1,1", 1,
           "afinar merge-adapters: merge: slerp takes no weights (t decides the mix: --t)");
    EXPECT("merge-adapters @/run/final @/run/final -o @/m --method ties --density 0", 2,
           "afinar merge-adapters: --density: expected a fraction in (0, 1], got '0'");
    EXPECT("merge-adapters @/run/final @/run/final -o @/m --method ties --density 1.5", 2,
           "afinar merge-adapters: --density: expected a fraction in (0, 1], got '1.5'");
    EXPECT("merge-adapters @/run/final @/run/final -o @/m --weights 1,2,3", 2,
           "afinar merge-adapters: --weights: 3 weights for 2 adapters (give one per adapter)");
    EXPECT("merge-adapters @/run/final @/run/final -o @/m --weights 1,x", 2,
           "afinar merge-adapters: --weights (weight 2): expected a number in [-1e+06, 1e+06], got 'x'");
    EXPECT("merge-adapters @/run/final @/run/final -o @/m --majority-sign most", 2,
           "afinar merge-adapters: --majority-sign: expected total or frequency, got 'most'");
    EXPECT("merge-adapters @/run/final @/run/final -o @/m --rank 0", 2,
           "afinar merge-adapters: --rank: expected an integer in [1, 1048576], got '0'");
    EXPECT("merge-adapters @/run/final -o @/m --bogus", 2,
           "afinar merge-adapters: unknown option '--bogus' (see 'afinar merge-adapters --help')");
    /* exit 1: the adapters, the rank, the output */
    snprintf(want, sizeof want, "%s" MF "/bad_shape: layer 0 q_proj is [24, 20] (out, in), but [24, 24] in " MF
             "/a0 (adapters of one base model only)", M);
    EXPECT("merge-adapters " MF "/a0 " MF "/bad_shape -o @/m", 1, want);
    snprintf(want, sizeof want, "%s" MF "/bad_labels/afinar.json: labels [\"neg\",\"pos\",\"neu\"], but " MF
             "/a0 has [\"neg\",\"neu\",\"pos\"] (merged heads need the same label set, in the same order)", M);
    EXPECT("merge-adapters " MF "/a0 " MF "/bad_labels -o @/m", 1, want);
    snprintf(want, sizeof want, "%s" MF "/bad_arch: architecture \"gemma3\", but " MF
             "/a0 is for \"llama\" (adapters of one base model only)", M);
    EXPECT("merge-adapters " MF "/a0 " MF "/bad_arch -o @/m", 1, want);
    snprintf(want, sizeof want, "%s" MF "/no_head: no classification head, but " MF
             "/a0 has one (merge classifiers with classifiers only)", M);
    EXPECT("merge-adapters " MF "/a0 " MF "/no_head -o @/m", 1, want);
    EXPECT("merge-adapters " MF "/a0 " MF "/a1 -o @/m --rank 17", 1,
           "afinar merge-adapters: merge: rank 17 is above min(out, in) = 16 of layer 0 v_proj");
    EXPECT("merge-adapters " MF "/a0 " MF "/a1 -o @/m --method cat --rank 4", 1,
           "afinar merge-adapters: merge: cat: rank 4, but cat's rank is the sum of the ranks, 6 (use svd or linear for another rank)");
    EXPECT("merge-adapters " MF "/a0 " MF "/a1 -o @/m --method ties", 1,
           "afinar merge-adapters: merge: ties: density 0: the fraction of entries kept must be in (0, 1] (--density is required for this method)");
    EXPECT("merge-adapters " MF "/a0 " MF "/a1 -o @/m --density 0.5", 1,
           "afinar merge-adapters: merge: linear: density does not apply (only ties, dare-ties, dare-linear, magnitude-prune prune)");
    EXPECT("merge-adapters @/run/final @/nope -o @/m", 1, "afinar merge-adapters: @/nope/adapter_config.json: cannot open: *");
    EXPECT("merge-adapters @/run/final @/bad_cfg -o @/m", 1, "afinar merge-adapters: @/bad_cfg/adapter_config.json: malformed JSON*");
    EXPECT("merge-adapters @/run/final @/run/final -o @/run/best", 1,
           "afinar merge-adapters: @/run/best: exists (--overwrite replaces an adapter directory)");
    EXPECT("merge-adapters @/run/final @/run/final -o @/run --overwrite", 1,
           "afinar merge-adapters: @/run: exists and is not an adapter directory (no adapter_config.json); not replaced");
    CHECK(!exists(P_("m")) && count_named(g_dir, "merge-tmp") == 0, "a refused merge wrote @/m or left a temporary");
    /* good: the trained adapter merged with itself, 0.5 + 0.5 (linear) and TIES at density 1, predicts
     * the same labels as the adapter itself */
    static const char *const good[2] = {"merge-adapters @/run/final @/run/final -o @/merged --weights 0.5,0.5",
                                        "merge-adapters @/run/final @/run/final -o @/merged --method ties --density 1 --overwrite"};
    char **av = split_args("predict -m @/tiny.gguf -a @/run/final --input @/val.jsonl -t 1");
    run_result ref = run_argv(NULL, 0, av);
    free_args(av);
    for (int k = 0; k < 2; k++) {
        av = split_args(good[k]);
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0 && strstr(r.out, "into ") && strstr(r.out, "rank 2") && r.err && !*r.err,
              "%s: rc %d, stdout %s, stderr %s", good[k], r.rc, r.out ? r.out : "", r.err ? r.err : "");
        run_free(&r);
        av = split_args("predict -m @/tiny.gguf -a @/merged --input @/val.jsonl -t 1");
        r = run_argv(NULL, 0, av);
        free_args(av);
        int same = r.rc == 0 && ref.rc == 0 && n_lines(r.out) == 6 && n_lines(ref.out) == 6;
        for (const char *a = ref.out, *b = r.out; same && a && b && (a = strstr(a, "\"label\": ")) && (b = strstr(b, "\"label\": "));
             a++, b++)
            same = strncmp(a, b, strcspn(a, ",")) == 0;
        CHECK(same, "%s: predictions of the merged adapter differ from the adapter's:\n%s\nvs\n%s", good[k],
              r.out ? r.out : "", ref.out ? ref.out : "");
        run_free(&r);
    }
    run_free(&ref);
}

/* ================================================================ reliability
 * Each reliability class (docs/RELIABILITY.md) as CLI cases; a hang is a failure after g_run_timeout seconds. */

/* Class 1: no path the CLI opens blocks or is read when it is not a regular file: a FIFO with no
 * writer (open(2) without O_NONBLOCK would block forever), /dev/zero (endless), a directory. */
static void test_rel_special_files(void) {
    g_run_timeout = 30;
    if (!CHECK(mkfifo(P_("fifo"), 0600) == 0, "mkfifo: %s", strerror(errno))) return;
    /* an adapter directory whose files are FIFOs; a run directory whose train_config.json is one */
    mkdir(P_("fifo_ad"), 0777);
    CHECK(mkfifo(P_("fifo_ad/adapter_config.json"), 0600) == 0, "mkfifo");
    CHECK(copy_tree(P_("run/final"), P_("fifo_st")), "copy adapter");
    unlink(P_("fifo_st/adapter_model.safetensors"));
    CHECK(mkfifo(P_("fifo_st/adapter_model.safetensors"), 0600) == 0, "mkfifo");
    CHECK(copy_tree(P_("run/checkpoint-2"), P_("fifo_ck")), "copy checkpoint");
    unlink(P_("fifo_ck/train_config.json"));
    CHECK(mkfifo(P_("fifo_ck/train_config.json"), 0600) == 0, "mkfifo");
    const char *F = "not a regular file (a FIFO or pipe)", *Z = "not a regular file (a character device)";
    char want[512], cmd[512];
    static const char *const models[] = {"info %s", "generate -m %s -p hi -t 1", "check -m %s --train @/train.jsonl -t 1",
                                         "train -m %s --train @/train.jsonl -o @/u -t 1",
                                         "eval -m %s -a @/run/final --data @/val.jsonl -t 1",
                                         "predict -m %s -a @/run/final -t 1"};
    static const char *const cmds[] = {"info", "generate", "check", "train", "eval", "predict"};
    for (int k = 0; k < 6; k++)
        for (int z = 0; z < 2; z++) {
            snprintf(cmd, sizeof cmd, models[k], z ? "/dev/zero" : "@/fifo");
            snprintf(want, sizeof want, "afinar %s: %s: %s", cmds[k], z ? "/dev/zero" : "@/fifo", z ? Z : F);
            EXPECT(cmd, 1, want);
        }
    snprintf(want, sizeof want, "afinar generate: prompt file @/fifo: %s", F);
    EXPECT("generate -m @/tiny.gguf -f @/fifo -t 1", 1, want);
    snprintf(want, sizeof want, "afinar generate: prompt file /dev/zero: %s", Z);
    EXPECT("generate -m @/tiny.gguf -f /dev/zero -t 1", 1, want);
    /* data, validation data, labels, config */
    snprintf(want, sizeof want, "afinar check: @/fifo: %s", F);
    EXPECT("check -m @/tiny.gguf --train @/fifo -t 1", 1, want);
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --val @/fifo -t 1", 1, want);
    snprintf(want, sizeof want, "afinar check: /dev/zero: %s", Z);
    EXPECT("check -m @/tiny.gguf --train /dev/zero -t 1", 1, want);
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --labels @/fifo -t 1", 1, "afinar check: --labels @/fifo: not a regular file*");
    snprintf(want, sizeof want, "afinar train: @/fifo: cannot read config file: %s", F);
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config @/fifo", 1, want);
    snprintf(want, sizeof want, "afinar train: /dev/zero: cannot read config file: %s", Z);
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --config /dev/zero", 1, want);
    snprintf(want, sizeof want, "afinar eval: @/fifo: %s", F);
    EXPECT("eval -m @/tiny.gguf -a @/run/final --data @/fifo -t 1", 1, want);
    EXPECT("eval -m @/tiny.gguf --data @/fifo --generate 1 -t 1", 1, want);
    EXPECT("eval --task causal-lm -m @/tiny.gguf --data @/fifo -t 1", 1, want);
    snprintf(want, sizeof want, "afinar predict: @/fifo: %s", F);
    EXPECT("predict -m @/tiny.gguf -a @/run/final --input @/fifo -t 1", 1, want);
    /* adapters: the config or the tensors a FIFO; the adapter "directory" a device */
    snprintf(want, sizeof want, "afinar eval: @/fifo_ad/adapter_config.json: %s", F);
    EXPECT("eval -m @/tiny.gguf -a @/fifo_ad --data @/val.jsonl -t 1", 1, want);
    snprintf(want, sizeof want, "afinar predict: @/fifo_st/adapter_model.safetensors: %s", F);
    EXPECT("predict -m @/tiny.gguf -a @/fifo_st -t 1", 1, want);
    snprintf(want, sizeof want, "afinar generate: @/fifo_st/adapter_model.safetensors: %s", F);
    EXPECT("generate -m @/tiny.gguf -a @/fifo_st -p hi -t 1", 1, want);
    EXPECT("eval -m @/tiny.gguf -a /dev/zero --data @/val.jsonl -t 1", 1, "afinar eval: /dev/zero*");
    /* --resume: a FIFO, and a checkpoint whose settings file is a FIFO */
    EXPECT("train --resume @/fifo -t 1", 1, "afinar train: --resume @/fifo: *");
    snprintf(want, sizeof want, "afinar train: @/fifo_ck/train_config.json: %s; cannot resume from @/fifo_ck*", F);
    EXPECT("train --resume @/fifo_ck -t 1", 1, want);
    /* the commands added after the first round (the reliability re-sweep): export, merge, merge-adapters,
     * Hugging Face directories */
    for (int z = 0; z < 2; z++) {
        static const char *const wr[] = {"export -m %s -a @/run/final -o @/sp.gguf", "merge -m %s -a @/run/final -o @/sp.gguf"};
        for (int k = 0; k < 2; k++) {
            snprintf(cmd, sizeof cmd, wr[k], z ? "/dev/zero" : "@/fifo");
            snprintf(want, sizeof want, "afinar %s: %s: %s", k ? "merge" : "export", z ? "/dev/zero" : "@/fifo", z ? Z : F);
            EXPECT(cmd, 1, want);
        }
    }
    EXPECT("export -m @/tiny.gguf -a @/fifo -o @/sp.gguf", 1,
           "afinar export: @/fifo: not an adapter directory or LoRA GGUF file (a FIFO or pipe)");
    EXPECT("merge -m @/tiny.gguf -a /dev/zero -o @/sp.gguf", 1,
           "afinar merge: /dev/zero: not an adapter directory or LoRA GGUF file (a character device)");
    EXPECT("merge-adapters @/fifo @/run/final -o @/sp_m", 1,
           "afinar merge-adapters: @/fifo: not an adapter directory or LoRA GGUF file (a FIFO or pipe)");
    snprintf(want, sizeof want, "afinar merge-adapters: @/fifo_st/adapter_model.safetensors: %s", F);
    EXPECT("merge-adapters @/run/final @/fifo_st -o @/sp_m", 1, want);
    CHECK(!exists(P_("sp.gguf")) && !exists(P_("sp_m")), "nothing written");
    static const char *const hf_files[] = {"config.json", "model.safetensors.index.json", "model-00003-of-00005.safetensors",
                                           "tokenizer.json"};
    for (int k = 0; k < 4; k++) {
        char d[64], p[700];
        snprintf(d, sizeof d, "hf_fifo%d", k);
        if (!CHECK(copy_tree("tests/fixtures/hf_tiny_llama", P_(d)), "copy the HF fixture")) continue;
        snprintf(p, sizeof p, "%s/%s", P_(d), hf_files[k]);
        unlink(p);
        CHECK(mkfifo(p, 0600) == 0, "mkfifo %s", p);
        if (k < 3) {
            snprintf(cmd, sizeof cmd, "info @/%s", d);
            snprintf(want, sizeof want, "afinar info: @/%s/%s: not a regular file*", d, hf_files[k]);
            EXPECT_MULTI(cmd, 1, want);
        } else {
            snprintf(cmd, sizeof cmd, "generate -m @/%s -p hi -t 1", d);
            snprintf(want, sizeof want, "afinar generate: @/%s: the model has no usable tokenizer (@/%s/tokenizer.json: not "
                                        "a regular file), so text cannot be generated", d, d);
            EXPECT(cmd, 1, want);
        }
    }
    /* the stdin convention still works: JSONL through a pipe on --input - */
    g_run_timeout = RUN_TIMEOUT_S;
}

/* Class 2: every count or length taken from a file or stdin is bounded, and the message names the
 * value, the limit and the line. */
static void test_rel_sizes(void) {
    g_run_timeout = 60;
    write_text(P_("big_label.jsonl"), "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"b\", \"label\": 1000000000}\n");
    EXPECT("check -m @/tiny.gguf --train @/big_label.jsonl -t 1", 1,
           "afinar check: @/big_label.jsonl:2: field 'label': label 1000000000 is above the largest class id 999999 (at "
           "most 1000000 classes; integer labels are class ids 0..N-1: renumber them or use string labels)");
    write_text(P_("label2p31.jsonl"), "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"b\", \"label\": 2147483648}\n");
    EXPECT("check -m @/tiny.gguf --train @/label2p31.jsonl -t 1", 1,
           "afinar check: @/label2p31.jsonl:2: field 'label': label 2147483648 is above the largest class id 999999*");
    EXPECT("check -m @/tiny.gguf --train @/label2p31.jsonl --num-classes 3 -t 1", 1,
           "afinar check: @/label2p31.jsonl:2: field 'label': value 2147483648 out of range [0, 3)");
    write_text(P_("neg_big.jsonl"), "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"b\", \"label\": -3000000000}\n");
    EXPECT("check -m @/tiny.gguf --train @/neg_big.jsonl -t 1", 1,
           "afinar check: @/neg_big.jsonl:2: field 'label': label -3000000000 is negative");
    /* the largest class id allowed: check runs, and its class table stays short (no million rows) */
    write_text(P_("wide.jsonl"), "{\"input\": \"a\", \"label\": 0}\n{\"input\": \"b\", \"label\": 999999}\n"
                                 "{\"input\": \"c\", \"label\": 0}\n{\"input\": \"d\", \"label\": 999999}\n");
    {
        char **av = split_args("check -m @/tiny.gguf --train @/wide.jsonl -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc >= 0 && r.out && n_lines(r.out) < 200 && strstr(r.out, "999998 more classes not listed (999998 classes with no sample)"),
              "check with 1000000 inferred classes: rc %d, %d stdout lines (want < 200 and the summary row)", r.rc,
              r.out ? n_lines(r.out) : -1);
        run_free(&r);
    }
    /* predict's raw stdin lines: a 2 MiB line is refused naming the line and the limit, not read whole */
    {
        FILE *f = fopen(P_("long_line.txt"), "wb");
        if (CHECK(f != NULL, "cannot write long_line.txt")) {
            fputs("short line\n", f);
            for (int i = 0; i < (2 << 20) / 8; i++) fputs("abababab", f);
            fputs("\nafter\n", f);
            fclose(f);
        }
        expect_in(P_("long_line.txt"), 0, "predict -m @/tiny.gguf -a @/run/final -t 1", 1,
                  "afinar predict: <stdin>:2: line longer than 1048576 bytes (the limit for a raw text line; split the "
                  "text or pass it as JSONL with --data)",
                  ONE);
    }
    /* a prompt file above 16 MiB */
    {
        FILE *f = fopen(P_("big_prompt.txt"), "wb");
        if (CHECK(f != NULL, "cannot write big_prompt.txt")) {
            CHECK(ftruncate(fileno(f), (16 << 20) + 1) == 0, "ftruncate");
            fclose(f);
        }
        EXPECT("generate -m @/tiny.gguf -f @/big_prompt.txt -t 1", 1,
               "afinar generate: prompt file @/big_prompt.txt: larger than the limit of 16777216 bytes");
        unlink(P_("big_prompt.txt"));
        unlink(P_("long_line.txt"));
    }
    g_run_timeout = RUN_TIMEOUT_S;
}

/* Run `cmdline` with stdout to `out_path` (NULL: a pipe whose reading end is already closed, as
 * after `| head -c 10` exits), SIGPIPE ignored when ign_sigpipe (as under Python's subprocess and
 * many supervisors), RLIMIT_FSIZE `fsize` (> 0) with SIGXFSZ left at its default (the process
 * must not die of it), stderr into *err (malloc'ed). Returns the exit status, -signal when killed,
 * -1000 after `timeout_s` (then killed). *secs gets the wall time. */
static int run_special(const char *cmdline, const char *out_path, int ign_sigpipe, long fsize, int timeout_s, char **err,
                       double *secs) {
    char **av = split_args(cmdline);
    int pp[2] = {-1, -1}, pe[2] = {-1, -1};
    if (!out_path && pipe(pp) != 0) pp[0] = pp[1] = -1;
    if (pp[0] >= 0) close(pp[0]); /* the reader is gone */
    if (pipe(pe) != 0) pe[0] = pe[1] = -1; /* stderr through a pipe: RLIMIT_FSIZE does not cut it */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = out_path ? open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : pp[1];
        int fi = open("/dev/null", O_RDONLY);
        if (fo < 0 || pe[1] < 0 || fi < 0) _exit(126);
        dup2(fi, 0), dup2(fo, 1), dup2(pe[1], 2);
        close(pe[0]);
        signal(SIGPIPE, ign_sigpipe ? SIG_IGN : SIG_DFL);
        signal(SIGXFSZ, SIG_DFL);
        if (fsize > 0) {
            struct rlimit lim;
            getrlimit(RLIMIT_FSIZE, &lim);
            lim.rlim_cur = (rlim_t)fsize;
            setrlimit(RLIMIT_FSIZE, &lim);
        }
        execv(av[0], av);
        _exit(127);
    }
    if (pp[1] >= 0) close(pp[1]);
    if (pe[1] >= 0) close(pe[1]);
    if (pe[0] >= 0) fcntl(pe[0], F_SETFL, fcntl(pe[0], F_GETFL) | O_NONBLOCK);
    free_args(av);
    size_t el = 0, ec = 256;
    *err = calloc(ec, 1);
    int status = 0, rc = -1000;
    for (;;) {
        while (pe[0] >= 0 && drain(pe[0], err, &el, &ec)) {
            if (errno == EAGAIN) break;
        }
        pid_t w = waitpid(pid, &status, WNOHANG);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (w == pid) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -999;
            break;
        }
        if (t1.tv_sec - t0.tv_sec > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            CHECK(0, "%s: no exit after %d s (killed)", cmdline, timeout_s);
            break;
        }
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    if (pe[0] >= 0) {
        fcntl(pe[0], F_SETFL, fcntl(pe[0], F_GETFL) & ~O_NONBLOCK);
        while (drain(pe[0], err, &el, &ec)) {
        }
        close(pe[0]);
    }
    *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (g_dump) printf("---- %s > %s\n     rc=%d %.2fs stderr: %s", cmdline, out_path ? out_path : "(closed pipe)", rc, *secs, *err);
    return rc;
}

/* Class 3: every write to stdout is checked, the last flush and close included; a closed pipe
 * stops the command at once; a file size limit is an error, never a death by SIGXFSZ. */
static void test_rel_output(void) {
    static const char *const full_cmds[] = {
        "predict -m @/tiny.gguf -a @/run/final --input @/val.jsonl -t 1",
        "eval -m @/tiny.gguf -a @/run/final --data @/val.jsonl -t 1",
        "check -m @/tiny.gguf --train @/train.jsonl -t 1",
        "info @/tiny.gguf",
        "generate -m @/tiny.gguf -p ab -n 3 --temp 0 -t 1",
        "eval -m @/tiny.gguf --data @/pc.jsonl --generate 1 --max-new-tokens 2 -t 1",
        "train --help",
        "version",
        /* the commands added after the first round (the reliability re-sweep) */
        "export --help", "merge --help", "merge-adapters --help", "info tests/fixtures/hf_tiny_llama",
        "merge-adapters @/run/final @/run/final -o @/full_m"};
    for (size_t k = 0; k < sizeof full_cmds / sizeof *full_cmds; k++) {
        char *err = NULL;
        double secs = 0;
        int rc = run_special(full_cmds[k], "/dev/full", 0, 0, 60, &err, &secs);
        char cmd[64];
        sscanf(full_cmds[k], "%63s", cmd);
        char want[160];
        snprintf(want, sizeof want, "afinar %s: cannot write to stdout: %s", cmd, strerror(ENOSPC));
        CHECK(rc == 1 && strstr(err, want), "%s > /dev/full: exit %d (want 1), stderr: %s", full_cmds[k], rc, err);
        free(err);
    }
    /* generate into a closed pipe with SIGPIPE ignored: stops at the first token (EPIPE), exit 1 */
    {
        char *err = NULL;
        double secs = 0;
        int rc = run_special("generate -m @/tiny.gguf -p ab -n 40 --temp 0 --ignore-eos -t 1", NULL, 1, 0, 60, &err, &secs);
        char want[160];
        snprintf(want, sizeof want, "afinar generate: cannot write to stdout: %s", strerror(EPIPE));
        CHECK(rc == 1 && strstr(err, want), "generate | (closed pipe), SIGPIPE ignored: exit %d (want 1), stderr: %s", rc, err);
        free(err);
        /* SIGPIPE at its default: the usual quiet death by the signal */
        rc = run_special("generate -m @/tiny.gguf -p ab -n 40 --temp 0 --ignore-eos -t 1", NULL, 0, 0, 60, &err, &secs);
        CHECK(rc == -SIGPIPE, "generate | (closed pipe), SIGPIPE default: exit %d (want death by SIGPIPE)", rc);
        free(err);
    }
    /* ulimit -f with SIGXFSZ at its default: train's checkpoint save and eval --json fail with a
     * message (EFBIG), exit 1, nothing half-written, no temporary left */
    {
        char *err = NULL;
        double secs = 0;
        size_t n0 = 0, n1 = 0;
        char *before = tl_read_file(P_("run/checkpoint-4/adapter_model.safetensors"), &n0);
        int rc = run_special("train --resume @/run/checkpoint-2 -t 1 --no-plot", "/dev/null", 0, 4096, 120, &err, &secs);
        CHECK(rc == 1 && strstr(err, "File too large"), "train under ulimit -f 4 KiB (SIGXFSZ default): exit %d (want 1), stderr: %s", rc,
              err);
        char *after = tl_read_file(P_("run/checkpoint-4/adapter_model.safetensors"), &n1);
        CHECK(before && after && n0 == n1 && !memcmp(before, after, n0), "checkpoint-4 changed by the failed save");
        CHECK(count_named(P_("run"), ".tmp") == 0, "temporary files left after SIGXFSZ");
        free(before), free(after), free(err);
        write_text(P_("m2.json"), "old");
        rc = run_special("eval -m @/tiny.gguf -a @/run/final --data @/val.jsonl --json @/m2.json -t 1", "/dev/null", 0, 64, 60,
                         &err, &secs);
        CHECK(rc == 1 && strstr(err, "afinar eval: ") && strstr(err, "m2.json: write failed at offset"),
              "eval --json under ulimit -f 64 B (SIGXFSZ default): exit %d (want 1), stderr: %s", rc, err);
        char *mj = tl_read_file(P_("m2.json"), NULL);
        CHECK(mj && !strcmp(mj, "old"), "m2.json changed by the failed write");
        free(mj), free(err);
        CHECK(count_named(g_dir, ".tmp") == 0, "temporary files left after the failed eval --json");
    }
}

/* Start `cmdline` (stdout and stderr to files in the test directory), wait until its stderr holds
 * `ready` (at most 60 s), send `sig`, wait for the exit (at most 60 s). Returns the exit status,
 * -signal when killed by a signal, -1000 on a hang; *err gets stderr (malloc'ed). */
static int run_signalled_in(const char *in, const char *cmdline, const char *ready, int sig, char **err) {
    char **av = split_args(cmdline);
    const char *ef = P_("sig_stderr.txt"), *of = P_("sig_stdout.txt");
    unlink(ef), unlink(of); /* not the previous run's text */
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fi = open(in ? in : "/dev/null", O_RDONLY), fo = open(of, O_WRONLY | O_CREAT | O_TRUNC, 0644),
            fe = open(ef, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fi < 0 || fo < 0 || fe < 0) _exit(126);
        dup2(fi, 0), dup2(fo, 1), dup2(fe, 2);
        signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
        execv(av[0], av);
        _exit(127);
    }
    free_args(av);
    int status = 0, rc = -1000, sent = 0;
    struct timespec t0, t1, nap = {0, 20 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -999;
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (!sent) {
            int on_out = !strncmp(ready, "@stdout:", 8); /* wait for text on stdout instead */
            const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
            const int timed = !strncmp(ready, "@after:", 7); /* "@after:MS": send after MS milliseconds */
            char *e = timed ? NULL : tl_read_file(on_out ? of : ef, NULL);
            if ((e && strstr(e, on_out ? ready + 8 : ready)) || (timed && ms >= atof(ready + 7)) ||
                t1.tv_sec - t0.tv_sec > 60) {
                kill(pid, sig);
                sent = 1;
                t0 = t1;
            }
            free(e);
        } else if (t1.tv_sec - t0.tv_sec > 60) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            CHECK(0, "%s: no exit 60 s after signal %d (killed)", cmdline, sig);
            break;
        }
        nanosleep(&nap, NULL);
    }
    *err = tl_read_file(ef, NULL);
    if (!*err) *err = strdup("");
    if (g_dump) printf("---- %s (signal %d)\n     rc=%d stderr: %s", cmdline, sig, rc, *err);
    return rc;
}

static int run_signalled(const char *cmdline, const char *ready, int sig, char **err) {
    return run_signalled_in(NULL, cmdline, ready, sig, err);
}

/* Class 4: SIGTERM stops train like Ctrl-C (finish the step, save a checkpoint, exit 143) and the
 * run resumes from that checkpoint; generate stops after the current token (exit 143 / 130). */
static void test_rel_signals(void) {
    for (int k = 0; k < 2; k++) {
        const int sig = k ? SIGINT : SIGTERM;
        char cmd[512], *err = NULL;
        snprintf(cmd, sizeof cmd, "train -m @/tiny.gguf --train @/train.jsonl -o @/sig%d --batch 4 --grad-accum 1 --lora-r 2 "
                                  "--max-seq-len 16 --max-steps 1000000 --log-every 1 -t 1 --no-plot", k);
        int rc = run_signalled(cmd, "| step ", sig, &err);
        CHECK(rc == 128 + sig, "train, signal %d during the run: exit %d (want %d), stderr: %.300s", sig, rc, 128 + sig,
              err);
        CHECK(strstr(err, sig == SIGTERM ? "terminated (SIGTERM): finishing this step" : "interrupt: finishing this step") &&
                  strstr(err, "stopped at step"),
              "train, signal %d: the messages (stderr: %.300s)", sig, err);
        free(err);
        char dir[64];
        snprintf(dir, sizeof dir, "sig%d", k);
        int n_ck = count_named(P_(dir), "checkpoint-");
        CHECK(n_ck >= 1 && count_named(P_(dir), ".tmp") == 0, "train, signal %d: %d checkpoints saved (want >= 1), temporaries %d",
              sig, n_ck, count_named(P_(dir), ".tmp"));
    }
    /* the checkpoint the SIGTERM saved resumes, and a second SIGTERM saves again */
    {
        char *err = NULL;
        int rc = run_signalled("train --resume @/sig0 --log-every 1 -t 1 --no-plot", "| step ", SIGTERM, &err);
        CHECK(rc == 143 && strstr(err, "stopped at step"), "train --resume after SIGTERM, then SIGTERM: exit %d (want 143), stderr: %.400s",
              rc, err);
        free(err);
    }
    /* generate: the handlers are set before the prompt is echoed; SIGTERM / SIGINT after the echo
     * stops after the current token with 143 / 130 (0 when the generation ended first), never a
     * death by the signal */
    for (int k = 0; k < 2; k++) {
        const int sig = k ? SIGINT : SIGTERM;
        char *err = NULL;
        int rc = run_signalled("generate -m @/tiny.gguf -p ab -n 200 --temp 0 --ignore-eos --echo -t 1", "@stdout:ab", sig, &err);
        CHECK(rc == 128 + sig || rc == 0, "generate, signal %d after the echo: exit %d (want %d, or 0 when it had finished)",
              sig, rc, 128 + sig);
        free(err);
    }
    /* eval and predict: stop after the current batch (before their long loop: at once), exit 130 /
     * 143, nothing half-written: eval prints nothing and writes no --json file, predict's stdout holds
     * only complete lines; no temporary anywhere */
    {
        FILE *fj = fopen(P_("big.jsonl"), "w"), *ft = fopen(P_("big.txt"), "w");
        for (int i = 0; fj && ft && i < 20000; i++) {
            fprintf(fj, "{\"input\": \"w%d goal chip soup\", \"label\": \"%s\"}\n", i, k_names[i % 3]);
            fprintf(ft, "w%d goal chip soup\n", i);
        }
        if (fj) fclose(fj);
        if (ft) fclose(ft);
    }
    for (int k = 0; k < 2; k++) {
        const int sig = k ? SIGINT : SIGTERM;
        const char *sn = k ? "interrupted (SIGINT)" : "terminated (SIGTERM)";
        char *err = NULL, graceful[128], at_once[128];
        snprintf(graceful, sizeof graceful, "afinar eval: %s: stopped after ", sn);
        snprintf(at_once, sizeof at_once, "afinar: %s: stopped at once, temporary files removed", sn);
        unlink(P_("sig_eval.json"));
        int rc = run_signalled("eval -m @/tiny.gguf -a @/run/final --data @/big.jsonl --json @/sig_eval.json -t 1",
                               "@after:700", sig, &err);
        char *out = tl_read_file(P_("sig_stdout.txt"), NULL);
        CHECK(rc == 128 + sig && (strstr(err, graceful) || strstr(err, at_once)) && out && !out[0] &&
                  !exists(P_("sig_eval.json")) && count_named(g_dir, ".tmp-") == 0,
              "eval, signal %d: exit %d (want %d), nothing on stdout (%zu bytes), no --json file; stderr: %.300s", sig, rc,
              128 + sig, out ? strlen(out) : 0, err);
        free(out);
        free(err);
        snprintf(graceful, sizeof graceful, "afinar predict: %s", sn);
        rc = run_signalled_in(P_("big.txt"), "predict -m @/tiny.gguf -a @/run/final -t 1", "@stdout:\"label\"", sig, &err);
        out = tl_read_file(P_("sig_stdout.txt"), NULL);
        size_t ol = out ? strlen(out) : 0;
        int lines = 0, whole = out != NULL;
        for (char *ln = out; ln && *ln;) {
            char *nl = strchr(ln, '\n');
            whole &= nl && ln[0] == '{' && nl[-1] == '}';
            if (!nl) break;
            lines++;
            ln = nl + 1;
        }
        CHECK(rc == 128 + sig && strstr(err, graceful) && strstr(err, "nothing more is written") && whole &&
                  (ol == 0 || out[ol - 1] == '\n') && lines < 20000,
              "predict, signal %d after its first lines: exit %d (want %d), %d complete lines (all whole: %d); stderr: %.300s",
              sig, rc, 128 + sig, lines, whole, err);
        free(out);
        free(err);
    }
    /* predict waiting for a line on stdin (a terminal, a pipe with no data yet): Ctrl-C ends it */
    if (CHECK(mkfifo(P_("sig_fifo"), 0600) == 0, "mkfifo")) {
        int wfd = open(P_("sig_fifo"), O_RDWR); /* a writer that never writes: the reader blocks */
        char *err = NULL;
        int rc = run_signalled_in(P_("sig_fifo"), "predict -m @/tiny.gguf -a @/run/final -t 1", "@after:1500", SIGINT, &err);
        CHECK(rc == 130 && (strstr(err, "afinar predict: interrupted (SIGINT); nothing more is written") ||
                            strstr(err, "afinar: interrupted (SIGINT): stopped at once")),
              "predict blocked on stdin, SIGINT: exit %d (want 130); stderr: %.300s", rc, err);
        free(err);
        if (wfd >= 0) close(wfd);
    }
}

/* `check CMD`: expect exit status want_rc and stdout holding `want` (a diagnostic line). */
static void expect_check_out(const char *cmdline, int want_rc, const char *want) {
    char **av = split_args(cmdline);
    run_result r = run_argv(NULL, 0, av);
    free_args(av);
    CHECK(r.rc == want_rc && r.out && strstr(r.out, want), "%s: exit %d (want %d), stdout lacks \"%s\":\n%s\nstderr: %s", cmdline,
          r.rc, want_rc, want, r.out ? r.out : "", r.err ? r.err : "");
    run_free(&r);
}

/* Class 6: configurations that cannot be right, refused (or warned about) in one place
 * (af_trainer_new + af_hparams_check) for check and train alike. */
static void test_rel_config(void) {
    expect_check_out("check -m @/tiny.gguf --train @/train.jsonl --lr 1e-4 --lr-min 0.01 -t 1", 1,
                     "error [lr-min-above-lr] --lr-min 0.01 is above --lr 1e-4: the schedule would climb to 0.01 instead of decaying");
    EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o @/u --lr 1e-4 --lr-min 0.01 -t 1 --no-plot", 1,
                 "afinar train: not training: fix the errors above*");
    CHECK(!exists(P_("u")), "a refused train left %s", P_("u"));
    /* a constant schedule does not use --lr-min: no error */
    {
        char **av = split_args("check -m @/tiny.gguf --train @/train.jsonl --lr 1e-4 --lr-min 0.01 --schedule constant -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.out && !strstr(r.out, "lr-min-above-lr"), "constant schedule: --lr-min reported:\n%s", r.out ? r.out : "");
        run_free(&r);
    }
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl --targets '' -t 1", 1,
           "afinar check: lora targets '': empty (use presets qv, qkv, all-linear or a comma list of q,k,v,o,gate,up,down)");
    EXPECT("train -m @/tiny.gguf --train @/train.jsonl -o @/u --targets '' -t 1", 1,
           "afinar train: lora targets '': empty (use presets qv, qkv, all-linear or a comma list of q,k,v,o,gate,up,down)");
    EXPECT("check -m @/tiny.gguf --train @/train.jsonl -t 1000", 1,
           "afinar check: threads 1000: more than 4x the * CPUs this process may use (at most *; 0 = one per CPU)");
    EXPECT("generate -m @/tiny.gguf -p hi -t 1000", 2,
           "afinar generate: threads 1000: more than 4x the * CPUs this process may use (at most *; 0 = one per CPU)");
    EXPECT("predict -m @/tiny.gguf -a @/run/final -t 1000", 2,
           "afinar predict: threads 1000: more than 4x the * CPUs this process may use (at most *; 0 = one per CPU)");
    /* samples longer than the model's 256 positions with --max-seq-len 512 */
    {
        FILE *f = fopen(P_("long.jsonl"), "wb");
        if (CHECK(f != NULL, "cannot write long.jsonl")) {
            for (int i = 0; i < 6; i++) {
                fprintf(f, "{\"input\": \"");
                for (int k = 0; k < 400; k++) fputc('a' + (k * 7 + i) % 26, f);
                fprintf(f, "\", \"label\": \"%s\"}\n", k_names[i % 3]);
            }
            fclose(f);
        }
        expect_check_out("check -m @/tiny.gguf --train @/long.jsonl --max-seq-len 512 -t 1", 1,
                         "error [seq-len-positions] max_seq_len 512 lets samples of ");
        expect_check_out("check -m @/tiny.gguf --train @/long.jsonl --max-seq-len 512 -t 1", 1,
                         "beyond the model's 256 positions (context_length)");
        char **av = split_args("check -m @/tiny.gguf --train @/long.jsonl --max-seq-len 256 -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.out && !strstr(r.out, "seq-len-positions"), "--max-seq-len 256: positions error reported:\n%s", r.out ? r.out : "");
        run_free(&r);
    }
    expect_check_out("check -m @/tiny.gguf --train @/train.jsonl --patience 2 -t 1", 1,
                     "error [patience-no-val] --patience 2 needs validation data");
    expect_check_out("check -m @/tiny.gguf --train @/train.jsonl --val @/val.jsonl --warmup 50 --max-steps 10 -t 1", 0,
                     "warn  [warmup-long] the warm-up (50 steps) is as long as the whole run (10 steps)");
    expect_check_out("check -m @/tiny.gguf --train @/train.jsonl --eval-every 2 -t 1", 0,
                     "warn  [eval-no-val] --eval-every 2 has no validation data");
}

/* Class 7: files that parse but do not make sense are refused (or warned about) with a message. */
static void test_rel_semantics(void) {
    /* tiny.gguf with llama.block_count patched from 2 to 1: layer 1's tensors would be ignored */
    {
        size_t n = 0;
        unsigned char *b = (unsigned char *)tl_read_file(P_("tiny.gguf"), &n);
        const char key[] = "llama.block_count";
        unsigned char *k = NULL;
        for (size_t i = 0; b && i + sizeof key + 8 < n; i++)
            if (!memcmp(b + i, key, sizeof key - 1)) {
                k = b + i + sizeof key - 1;
                break;
            }
        uint32_t ty = 0, v = 0;
        if (k) memcpy(&ty, k, 4), memcpy(&v, k + 4, 4);
        if (CHECK(k && ty == 4 && v == 2, "llama.block_count (u32 2) not found in tiny.gguf")) {
            v = 1;
            memcpy(k + 4, &v, 4);
            FILE *f = fopen(P_("blocks1.gguf"), "wb");
            if (f) fwrite(b, 1, n, f), fclose(f);
            EXPECT("generate -m @/blocks1.gguf -p hi -t 1", 1,
                   "afinar generate: @/blocks1.gguf: tensor 'blk.1.*' belongs to layer 1 but llama.block_count is 1: the "
                   "file's layer count is wrong (layers 1.. would be ignored)");
            EXPECT("check -m @/blocks1.gguf --train @/train.jsonl -t 1", 1, "afinar check: @/blocks1.gguf: tensor 'blk.1.*");
        }
        free(b);
    }
    /* overlapping tensor data / a type that does not match the bytes (the fuzz regression inputs) */
    EXPECT("info tests/fuzz/regress/gguf/tensor-data-overlap.FORMAT", 1,
           "afinar info: tests/fuzz/regress/gguf/tensor-data-overlap.FORMAT: tensor 'b': data [64, +128 bytes) "
           "overlaps tensor 'a' [0, +128 bytes) (F32, 128 bytes by its type and shape) at offset *");
    EXPECT("info tests/fuzz/regress/gguf/tensor-type-vs-bytes.FORMAT", 1,
           "afinar info: tests/fuzz/regress/gguf/tensor-type-vs-bytes.FORMAT: tensor 'a': F32 [32 x 1 x 1 x 1] = 128 bytes "
           "by its type and shape, but the next tensor ('b') starts 512 bytes after it (more than the 32-byte alignment): "
           "its type does not match its data at offset *");
    /* afinar.json: a label list of the wrong length, a missing file, no pooling field */
    CHECK(copy_tree(P_("run/final"), P_("lab4")) && copy_tree(P_("run/final"), P_("nojson")) && copy_tree(P_("run/final"), P_("nopool")),
          "copy adapters");
    {
        char *j = tl_read_file(P_("run/final/afinar.json"), NULL);
        char *l = j ? strstr(j, "\"food\"") : NULL;
        if (CHECK(l != NULL, "afinar.json of the run lacks the labels")) {
            /* 4 names for a 3-class head */
            size_t pre = (size_t)(l - j);
            char *o = malloc(strlen(j) + 32);
            memcpy(o, j, pre);
            strcpy(o + pre, "\"food\", \"music\"");
            strcat(o, l + strlen("\"food\""));
            write_text(P_("lab4/afinar.json"), o);
            free(o);
        }
        char *pl = j ? strstr(j, "\"pooling\"") : NULL;
        if (CHECK(pl != NULL, "afinar.json lacks pooling")) {
            memcpy(pl, "\"poolinX\"", 9); /* an unknown key: as if the field were missing */
            write_text(P_("nopool/afinar.json"), j);
        }
        free(j);
    }
    unverify(P_("lab4")), unverify(P_("nojson")), unverify(P_("nopool")); /* hand edits reach the readers */
    EXPECT("predict -m @/tiny.gguf -a @/lab4 -t 1", 1,
           "afinar predict: @/lab4/afinar.json: field 'labels': 4 names but the head (score.weight) has 3 classes: the label "
           "list does not belong to this adapter");
    EXPECT("eval -m @/tiny.gguf -a @/lab4 --data @/val.jsonl -t 1", 1, "afinar eval: @/lab4/afinar.json: field 'labels': *");
    unlink(P_("nojson/afinar.json"));
    {
        char **av = split_args("predict -m @/tiny.gguf -a @/nojson -t 1");
        run_result r = run_argv(P_("pred_in.txt"), 0, av);
        free_args(av);
        CHECK(r.rc == 0 && r.err && strstr(r.err, "afinar predict: warning: ") &&
                  strstr(r.err, "nojson/afinar.json is missing: assuming a PEFT/transformers adapter (last-token pooling"),
              "predict without afinar.json: rc %d, stderr %s", r.rc, r.err ? r.err : "");
        run_free(&r);
        av = split_args("predict -m @/tiny.gguf -a @/nopool -t 1");
        r = run_argv(P_("pred_in.txt"), 0, av);
        free_args(av);
        CHECK(r.rc == 0 && r.err && strstr(r.err, "nopool/afinar.json has no 'pooling' field: assuming last-token pooling"),
              "predict, afinar.json without pooling: rc %d, stderr %s", r.rc, r.err ? r.err : "");
        run_free(&r);
    }
}

/* Class 8: messages that name the file, the field and the fix. */
static void test_rel_messages(void) {
    /* a checkpoint without train_config.json: the missing file is named first */
    CHECK(copy_tree(P_("run/checkpoint-2"), P_("nocfg_ck")), "copy checkpoint");
    unlink(P_("nocfg_ck/train_config.json"));
    EXPECT("train --resume @/nocfg_ck -t 1", 1,
           "afinar train: --resume @/nocfg_ck: @/nocfg_ck/train_config.json is missing (it holds the run's settings); copy it "
           "back from the run directory, or give the original run's settings again (-m, --train, --batch, ...)");
    /* a different --lora-r at resume: named as such, not as a parameter count */
    EXPECT_MULTI("train --resume @/run/checkpoint-2 --lora-r 4 -t 1 --no-plot", 1,
                 "afinar train: @/run/checkpoint-2: cannot resume: --lora-r is 2 in the checkpoint (adapter_config.json r) "
                 "but 4 now (resume with the checkpoint's settings)");
    EXPECT_MULTI("train --resume @/run/checkpoint-2 --batch 3 -t 1 --no-plot", 1,
                 "afinar train: @/run/checkpoint-2/trainer_state.safetensors: cannot resume exactly: batch (--batch) is 4 in "
                 "the checkpoint but 3 now (resume with the same data and settings)");
    /* check: the memory error is counted in the summary line */
    {
        char **av = split_args("check -m @/tiny.gguf --train @/train.jsonl --memory-limit 0.01 -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 1 && r.out && strstr(r.out, "error [memory]") && strstr(r.out, "check: NOT ready to train (1 errors"),
              "check --memory-limit 0.01: the summary must count the memory error:\n%s", r.out ? r.out : "");
        run_free(&r);
    }
    /* a failed save of a directory that never existed does not claim an earlier one is kept */
    {
        char *err = NULL;
        double secs = 0;
        int rc = run_special("train -m @/tiny.gguf --train @/train.jsonl -o @/fresh_small --batch 4 --grad-accum 1 --lora-r 2 "
                             "--max-seq-len 16 --max-steps 2 --save-every 1 -t 1 --no-plot",
                             "/dev/null", 0, 2048, 120, &err, &secs);
        CHECK(rc == 1 && strstr(err, "(not saved; there is no earlier ") && !strstr(err, "the previous"),
              "first save under ulimit -f: exit %d, stderr: %.600s", rc, err);
        free(err);
    }
    /* an adapter of another model whose rank matches: the shapes differ, and the message says which
     * model the adapter was trained on (was: the shapes only) */
    EXPECT("merge -m tests/fixtures/hf_tiny_llama -a @/run/final -o @/other.gguf", 1,
           "afinar merge: @/run/final/adapter_model.safetensors: tensor '*': shape [*], expected [*] (an adapter for "
           "another model: it was trained on @/tiny.gguf)");
}

/* Class 5 (the adapter part): an adapter holding a NaN is refused by every command that loads it. */
static void test_rel_nonfinite_adapter(void) {
    if (!CHECK(copy_tree(P_("run/final"), P_("nan_ad")), "copy adapter")) return;
    unverify(P_("nan_ad")); /* as an afinar before manifests wrote a diverged run's final/ */
    size_t n = 0;
    unsigned char *b = (unsigned char *)tl_read_file(P_("nan_ad/adapter_model.safetensors"), &n);
    uint64_t hl = 0;
    if (b && n > 8) memcpy(&hl, b, 8);
    if (!CHECK(b && hl > 0 && 8 + hl + 4 <= n, "adapter safetensors header")) {
        free(b);
        return;
    }
    const unsigned char nan_f32[4] = {0x00, 0x00, 0xc0, 0x7f}; /* the first element of the first tensor */
    memcpy(b + 8 + hl, nan_f32, 4);
    FILE *f = fopen(P_("nan_ad/adapter_model.safetensors"), "wb");
    if (f) fwrite(b, 1, n, f), fclose(f);
    free(b);
    const char *tail = "element 0 is not finite (NaN or Inf): the adapter is unusable (saved from a diverged run?)";
    char want[512];
    snprintf(want, sizeof want, "afinar predict: @/nan_ad/adapter_model.safetensors: tensor '*': %s", tail);
    EXPECT("predict -m @/tiny.gguf -a @/nan_ad -t 1", 1, want);
    snprintf(want, sizeof want, "afinar eval: @/nan_ad/adapter_model.safetensors: tensor '*': %s", tail);
    EXPECT("eval -m @/tiny.gguf -a @/nan_ad --data @/val.jsonl -t 1", 1, want);
    snprintf(want, sizeof want, "afinar generate: @/nan_ad/adapter_model.safetensors: tensor '*': %s", tail);
    EXPECT("generate -m @/tiny.gguf -a @/nan_ad -p hi -t 1", 1, want);
    EXPECT("eval -m @/tiny.gguf -a @/nan_ad --data @/pc.jsonl --generate 1 -t 1", 1, "afinar eval: *not finite (NaN or Inf)*");
    /* the commands that write a model or an adapter from it (the reliability re-sweep: export, merge,
     * merge-adapters came after the first round) */
    snprintf(want, sizeof want, "afinar export: @/nan_ad/adapter_model.safetensors: tensor '*': %s", tail);
    EXPECT("export -m @/tiny.gguf -a @/nan_ad -o @/nan.gguf", 1, want);
    snprintf(want, sizeof want, "afinar merge: @/nan_ad/adapter_model.safetensors: tensor '*': %s", tail);
    EXPECT("merge -m @/tiny.gguf -a @/nan_ad -o @/nan.gguf", 1, want);
    snprintf(want, sizeof want, "afinar merge-adapters: @/nan_ad/adapter_model.safetensors: tensor '*': %s", tail);
    EXPECT("merge-adapters @/run/final @/nan_ad -o @/nan_m", 1, want);
    CHECK(!exists(P_("nan.gguf")) && !exists(P_("nan_m")), "nothing written from a NaN adapter");
    /* a LoRA GGUF holding a NaN (the GGUF reader had no finite check) */
    EXPECT("export -m @/tiny.gguf -a @/run/final -o @/lora_nan.gguf", 0, "*");
    af_gguf *g = NULL;
    uint64_t off = 0;
    if (CHECK(af_gguf_open(P_("lora_nan.gguf"), &g) == AF_OK && g->n_tensors > 0, "open the exported LoRA GGUF")) {
        off = g->data_offset + g->tensors[0].offset;
        af_gguf_close(g);
        b = (unsigned char *)tl_read_file(P_("lora_nan.gguf"), &n);
        if (b && off + 4 <= n) {
            memcpy(b + off, nan_f32, 4);
            f = fopen(P_("lora_nan.gguf"), "wb");
            if (f) fwrite(b, 1, n, f), fclose(f);
        }
        free(b);
        EXPECT("predict -m @/tiny.gguf -a @/lora_nan.gguf -t 1", 1,
               "afinar predict: @/lora_nan.gguf: tensor 'blk.*': element 0 is not finite (NaN or Inf): the adapter is "
               "unusable (saved from a diverged run?)");
        EXPECT("generate -m @/tiny.gguf -a @/lora_nan.gguf -p hi -t 1", 1, "afinar generate: @/lora_nan.gguf: tensor *not finite*");
    }
    /* finite values whose products overflow: predict must not print "probs": [null, ...] */
    if (CHECK(copy_tree(P_("run/final"), P_("huge_ad")), "copy adapter")) {
        unverify(P_("huge_ad"));
        af_st_file *sf = NULL;
        size_t at = 0, cnt = 0;
        if (CHECK(af_st_open(P_("huge_ad/adapter_model.safetensors"), &sf) == AF_OK, "open adapter")) {
            const af_st_tensor *w = af_st_find(sf, "base_model.model.score.weight");
            if (w) at = (size_t)w->begin, cnt = (size_t)w->n_elem; /* offsets in the data after the header */
            af_st_close(sf);
        }
        b = (unsigned char *)tl_read_file(P_("huge_ad/adapter_model.safetensors"), &n);
        uint64_t hdr = 0;
        if (b && n > 8) memcpy(&hdr, b, 8);
        if (b && cnt && 8 + hdr + at + 4 * cnt <= n) {
            for (size_t i = 0; i < cnt; i++) {
                const float big = (i % 2 ? -3e38f : 3e38f);
                memcpy(b + 8 + hdr + at + 4 * i, &big, 4);
            }
            f = fopen(P_("huge_ad/adapter_model.safetensors"), "wb");
            if (f) fwrite(b, 1, n, f), fclose(f);
        }
        free(b);
        expect_in(P_("pred_in.txt"), 0, "predict -m @/tiny.gguf -a @/huge_ad -t 1", 1,
                  "afinar predict: <stdin>: sample 1: the classifier's probabilities are not finite (NaN or Inf): the "
                  "model's weights or activations overflow; no prediction is made", ONE);
        EXPECT("eval -m @/tiny.gguf -a @/huge_ad --data @/val.jsonl -t 1", 1,
               "afinar eval: @/val.jsonl: sample 1: the classifier's probabilities are not finite*");
    }
}

/* Round three: NUL characters in JSONL text, a tokenizer that does not fit its model, one writer per
 * run directory, the failed save that names the last good checkpoint. */
static void test_rel_round3(void) {
    /* \u0000 in a JSON string would cut the text short (cJSON's strings end at a NUL): refused,
     * naming the line and the field, in every JSONL reader */
    write_text(P_("nul.jsonl"), "{\"input\": \"a\", \"label\": \"sport\"}\n{\"input\": \"b\\u0000 the rest\", \"label\": \"tech\"}\n");
    write_text(P_("nul_label.jsonl"), "{\"input\": \"a\", \"label\": \"sport\\u0000x\"}\n");
    write_text(P_("nul_pc.jsonl"), "{\"prompt\": \"ab\", \"completion\": \"a\\u0000b\"}\n");
    write_text(P_("nul_msgs.jsonl"),
               "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\\u0000\"}]}\n");
    EXPECT("check -m @/tiny.gguf --train @/nul.jsonl -t 1", 1,
           "afinar check: @/nul.jsonl:2: field 'input' holds a NUL character (\\u0000); text with NUL characters is not accepted");
    EXPECT("check -m @/tiny.gguf --train @/nul_label.jsonl -t 1", 1,
           "afinar check: @/nul_label.jsonl:1: field 'label' holds a NUL character (\\u0000); text with NUL characters is not accepted");
    EXPECT("predict -m @/tiny.gguf -a @/run/final --input @/nul.jsonl -t 1", 1,
           "afinar predict: @/nul.jsonl:2: field 'input' holds a NUL character (\\u0000)*");
    EXPECT("eval -m @/tiny.gguf --data @/nul_pc.jsonl --generate 0 -t 1", 1,
           "afinar eval: @/nul_pc.jsonl:1: field 'completion' holds a NUL character (\\u0000)*");
    EXPECT("eval -m @/tiny.gguf --data @/nul_msgs.jsonl --generate 0 -t 1", 1,
           "afinar eval: @/nul_msgs.jsonl:1: field 'messages[1].content' holds a NUL character (\\u0000)*");
    EXPECT_MULTI("train -m @/tiny.gguf --task causal-lm --train @/nul_msgs.jsonl -o @/nul_run -t 1 --no-plot", 1,
                 "afinar train: @/nul_msgs.jsonl:1: field 'messages[1].content' holds a NUL character (\\u0000)*");
    CHECK(!exists(P_("nul_run")), "a refused train left its output directory");

    /* a tokenizer that does not fit its model: refused at load, by every command */
    {
        static const char *const ex1[1] = {"<|endoftext|>"};
        static const char *ex44[44];
        static char names[44][16];
        for (int i = 0; i < 44; i++) snprintf(names[i], sizeof names[i], "tok%d", i), ex44[i] = names[i];
        tm_spec s = tm_default("llama", AF_TYPE_Q8_0);
        s.vocab = 258, s.seed = 5;
        CHECK(tm_write_bpe_misfit(&s, P_("tok_big.gguf"), ex44, 44, 299, 299) == AF_OK, "tok_big: %s", af_last_error());
        CHECK(tm_write_bpe_misfit(&s, P_("tok_bos.gguf"), ex1, 1, 300, 256) == AF_OK, "tok_bos: %s", af_last_error());
        CHECK(tm_write_bpe_misfit(&s, P_("tok_eos.gguf"), ex1, 1, 256, 4294967295u) == AF_OK, "tok_eos: %s", af_last_error());
        s.vocab = 600;
        CHECK(tm_write_bpe_misfit(&s, P_("tok_small.gguf"), ex1, 1, 256, 256) == AF_OK, "tok_small: %s", af_last_error());
    }
    EXPECT("generate -m @/tok_big.gguf -p ab -n 1 -t 1", 1,
           "afinar generate: @/tok_big.gguf: the tokenizer has 300 tokens but the model's embedding has 258 rows (ids "
           "258..299 have no embedding): the tokenizer does not belong to this model");
    EXPECT("generate -m @/tok_small.gguf -p ab -n 1 -t 1", 1,
           "afinar generate: @/tok_small.gguf: the tokenizer has 257 tokens, fewer than half the model's 600 embedding "
           "rows: the tokenizer does not belong to this model");
    EXPECT("generate -m @/tok_bos.gguf -p ab -n 1 -t 1", 1,
           "afinar generate: @/tok_bos.gguf: tokenizer.ggml.bos_token_id is 300, outside the tokenizer's 257 tokens [0, "
           "257): the tokenizer does not belong to this model");
    EXPECT_MULTI("train -m @/tok_bos.gguf --train @/train.jsonl -o @/tok_run -t 1 --no-plot", 1,
                 "afinar train: @/tok_bos.gguf: tokenizer.ggml.bos_token_id is 300*");
    EXPECT("serve -m @/tok_bos.gguf --port 0 -t 1", 1, "afinar serve: @/tok_bos.gguf: tokenizer.ggml.bos_token_id is 300*");
    /* "none" stored as 2^32 - 1 (-1 as u32) is no error */
    {
        char **av = split_args("generate -m @/tok_eos.gguf -p ab -n 1 -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0, "an eos id of 2^32-1 (none) loads: exit %d, %s", r.rc, r.err ? r.err : "");
        run_free(&r);
    }
    /* Hugging Face directories: the tiny llama (256 rows) with the 256 byte tokens of a byte-level
     * BPE (tests/fixtures/tok_bytes) fits; with 333 tokens (tok_nfc) or config.json's bos_token_id
     * 999 it does not */
    CHECK(copy_tree("tests/fixtures/hf_tiny_llama", P_("hf_fit")) && copy_tree("tests/fixtures/hf_tiny_llama", P_("hf_bigtok")) &&
              copy_file("tests/fixtures/tok_bytes/tokenizer.json", P_("hf_fit/tokenizer.json"), -1) &&
              copy_file("tests/fixtures/tok_nfc/tokenizer.json", P_("hf_bigtok/tokenizer.json"), -1) &&
              copy_tree(P_("hf_fit"), P_("hf_badbos")),
          "tiny HF llamas with tokenizers");
    {
        size_t cl = 0;
        char *cfg = tl_read_file(P_("hf_badbos/config.json"), &cl), *at = cfg ? strstr(cfg, "\"bos_token_id\": 1,") : NULL;
        if (CHECK(at != NULL, "bos_token_id in the tiny HF config")) {
            FILE *f = fopen(P_("hf_badbos/config.json"), "wb");
            if (f) {
                fwrite(cfg, 1, (size_t)(at - cfg), f);
                fputs("\"bos_token_id\": 999,", f);
                fputs(at + strlen("\"bos_token_id\": 1,"), f);
                fclose(f);
            }
        }
        free(cfg);
        char **av = split_args("generate -m @/hf_fit -p ab -n 1 -t 1");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        CHECK(r.rc == 0, "the tiny HF llama with 256 byte tokens loads: exit %d, %s", r.rc, r.err ? r.err : "");
        run_free(&r);
    }
    EXPECT("generate -m @/hf_badbos -p ab -n 1 -t 1", 1,
           "afinar generate: @/hf_badbos: config.json bos_token_id is 999, outside the tokenizer's 256 tokens [0, 256): the "
           "tokenizer does not belong to this model");
    EXPECT("generate -m @/hf_bigtok -p ab -n 1 -t 1", 1,
           "afinar generate: @/hf_bigtok: the tokenizer has 333 tokens but the model's embedding has 256 rows (ids 256..332 "
           "have no embedding): the tokenizer does not belong to this model");

    /* one writer per run directory: while run A trains into lock_run (saving no checkpoint, so that
     * nothing it rotates away races with the test), a second train there (fresh, --overwrite,
     * --resume in place, --resume into it) is refused naming A's pid, and A's files are untouched;
     * once A is killed (SIGKILL: its lock file stays behind) the directory is free again */
    {
        char **av = split_args("train -m @/tiny.gguf --train @/train.jsonl -o @/lock_run --batch 4 --grad-accum 1 --lora-r 2 "
                               "--max-seq-len 16 --max-steps 100000000 --save-every 100000000 -t 1 --no-plot");
        fflush(stdout), fflush(stderr);
        pid_t a = fork();
        if (a == 0) {
            int fd = open("/dev/null", O_RDWR);
            if (fd >= 0) dup2(fd, 0), dup2(fd, 1), dup2(fd, 2);
            execv(av[0], av);
            _exit(127);
        }
        free_args(av);
        int up = 0;
        for (int i = 0; i < 1200 && a > 0 && !up; i++) { /* up to 60 s for A to take the lock and start */
            up = exists(P_("lock_run/run.json"));
            if (!up) usleep(50000);
        }
        if (CHECK(up, "run A did not start in 60 s")) {
            char want[256];
            snprintf(want, sizeof want,
                     "afinar train: @/lock_run: another afinar run is writing to this directory (pid %ld); wait for it to "
                     "end, stop it, or use another -o DIR",
                     (long)a);
            /* a checkpoint in A's directory (A never rotates it: it saves none) */
            CHECK(copy_tree(P_("run/checkpoint-2"), P_("lock_run/checkpoint-2")), "copy checkpoint-2 into lock_run");
            EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o @/lock_run --overwrite --seed 7 --batch 4 "
                         "--grad-accum 1 --lora-r 2 --max-seq-len 16 --max-steps 2 -t 1 --no-plot",
                         1, want);
            /* without --overwrite: refused by the earlier check that the directory holds a run */
            EXPECT_MULTI("train -m @/tiny.gguf --train @/train.jsonl -o @/lock_run --batch 4 --grad-accum 1 --lora-r 2 "
                         "--max-seq-len 16 --max-steps 2 -t 1 --no-plot",
                         1, "afinar train: @/lock_run: holds another run (*); use --overwrite to replace it, *");
            EXPECT_MULTI("train --resume @/lock_run/checkpoint-2 -t 1 --no-plot", 1, want);
            EXPECT_MULTI("train --resume @/run/checkpoint-2 -o @/lock_run -t 1 --no-plot", 1, want);
            CHECK(exists(P_("lock_run/checkpoint-2/manifest.json")) && exists(P_("lock_run/run.json")) &&
                      exists(P_("lock_run/metrics.jsonl")),
                  "a refused writer removed files of A's directory");
            CHECK(waitpid(a, NULL, WNOHANG) == 0, "run A ended while the others were refused");
        }
        if (a > 0) {
            kill(a, SIGKILL);
            waitpid(a, NULL, 0);
        }
        CHECK(exists(P_("lock_run/" AF_RUN_LOCK_FILE)), "the killed run's lock file is not there (the test means nothing)");
        /* the lock of a killed process is gone with it: the directory is writable again */
        char **bv = split_args("train -m @/tiny.gguf --train @/train.jsonl -o @/lock_run --overwrite --batch 4 --grad-accum 1 "
                               "--lora-r 2 --max-seq-len 16 --max-steps 2 -t 1 --no-plot");
        run_result r = run_argv(NULL, 0, bv);
        free_args(bv);
        CHECK(r.rc == 0 && exists(P_("lock_run/final/manifest.json")),
              "train --overwrite after the holder was killed: exit %d, %s", r.rc, r.err ? r.err : "");
        CHECK(!exists(P_("lock_run/" AF_RUN_LOCK_FILE)), "a finished run left its lock file");
        run_free(&r);
    }

    /* a failed save names the newest checkpoint that is kept (was: "there is no earlier checkpoint-4") */
    mkdir(P_("lastgood"), 0777);
    CHECK(copy_tree(P_("run/checkpoint-2"), P_("lastgood/checkpoint-2")), "copy checkpoint-2");
    expect_in(NULL, 4096, "train --resume @/lastgood/checkpoint-2 -t 1 --no-plot", 1,
              "afinar train: @/lastgood/*: write failed at offset *: File too large (not saved; the last good checkpoint is "
              "@/lastgood/checkpoint-2)*",
              MULTI);
}

int main(void) {
    const char *bin = getenv("AFINAR_BIN");
    if (!bin || !realpath(bin, g_bin) || access(g_bin, X_OK) != 0) {
        tl_skip("CLI matrix: AFINAR_BIN not set or not executable (make test sets it)");
        return tl_finish("cli");
    }
    g_dump = getenv("CLI_DUMP") != NULL;
    snprintf(g_dir, sizeof g_dir, "/tmp/afinar_cli_XXXXXX");
    if (!CHECK(mkdtemp(g_dir) != NULL, "mkdtemp: %s", strerror(errno))) return tl_finish("cli");
    setup_files();
    /* one good run: 2 steps, checkpoint at step 2, final/ */
    {
        char **av = split_args("train -m @/tiny.gguf --train @/train.jsonl --val @/val.jsonl -o @/run "
                               "--batch 4 --grad-accum 1 --lora-r 2 --lora-layers all --max-seq-len 16 --max-steps 4 --save-every 2 -t 1 --no-plot");
        run_result r = run_argv(NULL, 0, av);
        free_args(av);
        if (!CHECK(r.rc == 0 && exists(P_("run/final/adapter_model.safetensors")) &&
                       exists(P_("run/checkpoint-2/trainer_state.safetensors")) &&
                       exists(P_("run/checkpoint-4/trainer_state.safetensors")),
                   "good train run: exit %d, stderr:\n%s", r.rc, r.err ? r.err : "")) {
            run_free(&r);
            rm_tree(g_dir);
            return tl_finish("cli");
        }
        run_free(&r);
    }
    CHECK(copy_tree(P_("run/final"), P_("bad_cfg")) && copy_tree(P_("run/final"), P_("bad_st")), "copy adapters");
    unverify(P_("bad_cfg")); /* the parser's message, not the manifest's (tests/test_ckpt.c) */
    write_text(P_("bad_cfg/adapter_config.json"), "{\"r\": 2, \"lora_alpha\": ");
    {
        size_t n = 0;
        char *b = tl_read_file(P_("run/final/adapter_model.safetensors"), &n);
        CHECK(b && copy_file(P_("run/final/adapter_model.safetensors"), P_("bad_st/adapter_model.safetensors"), (long)(n / 2)),
              "truncated adapter");
        free(b);
    }
    test_usage();
    test_files();
    test_data();
    test_output();
    test_disk_full();
    test_good();
    test_export_merge();
    test_eval_generate();
    test_merge_adapters();
    test_convert();
    /* reliability */
    test_rel_special_files();
    test_rel_sizes();
    test_rel_output();
    test_rel_signals();
    test_rel_config();
    test_rel_semantics();
    test_rel_messages();
    test_rel_nonfinite_adapter();
    test_rel_round3();
    if (!tl_failed && !getenv("TL_KEEP")) rm_tree(g_dir);
    else printf("test files kept in %s\n", g_dir);
    return tl_finish("cli");
}
