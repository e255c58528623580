/* afinar convert — a Hugging Face checkpoint directory to a GGUF (af_model_convert). */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void help(void) {
    printf("usage: afinar convert DIR -o OUT.gguf [--type TYPE] [--overwrite] [--quiet]\n"
           "\n"
           "Write the Hugging Face checkpoint DIR (config.json, *.safetensors, tokenizer.json; llama, gemma3,\n"
           "qwen2, qwen3, gemma4) as a GGUF with llama.cpp's tensor names and metadata and the tokenizer\n"
           "(tokenizer.ggml.*, chat template): a file llama.cpp and afinar load as the same model.\n"
           "  -o, --output FILE  the GGUF to write (atomically)\n"
           "      --type TYPE    type of the weight matrices: keep (default: as stored, f32/f16/bf16: exact),\n"
           "                     f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k; a matrix whose\n"
           "                     rows do not fit the type's block is stored as q8_0 or f16 (counted in the\n"
           "                     summary).\n"
           "                     Norms, biases and other vectors stay f32.\n"
           "      --overwrite    replace FILE when it exists\n"
           "      --quiet        no progress lines\n"
           "Prints a summary on stderr (tensors written, converted, fallbacks, bytes).\n");
}

int cmd_convert(int argc, char **argv) {
    const char *C = "convert";
    af_convert_opts co;
    memset(&co, 0, sizeof co);
    co.log = stderr;
    const char *out = NULL, *dir = NULL;
    enum { O_OVERWRITE = 1000, O_TYPE, O_QUIET };
    static const struct option opts[] = {{"output", required_argument, 0, 'o'}, {"type", required_argument, 0, O_TYPE},
                                         {"overwrite", no_argument, 0, O_OVERWRITE},
                                         {"quiet", no_argument, 0, O_QUIET},
                                         {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "-:o:h", opts, NULL)) != -1) {
        switch (o) {
        case 1:
            if (dir) {
                cli_error(C, "unexpected argument '%s' (one directory)", optarg);
                return 2;
            }
            dir = optarg;
            break;
        case 'o': out = optarg; break;
        case O_TYPE: co.type = optarg; break;
        case O_OVERWRITE: co.overwrite = 1; break;
        case O_QUIET: co.log = NULL; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar convert --help')", argv[optind - 1]); return 2;
        }
    }
    if (!dir || !out) {
        cli_error(C, "missing %s", !dir ? "DIR (a Hugging Face checkpoint directory)" : "-o OUT.gguf");
        return 2;
    }
    af_convert_stats cs;
    af_status st = af_model_convert(dir, out, &co, &cs);
    if (st != AF_OK) return cli_fail(C, st);
    fprintf(stderr, "afinar convert: wrote %s: %d tensors (%d converted to another type, %d of them as q8_0/f16 "
                    "because of their row length), %llu bytes\n",
            out, cs.tensors, cs.converted, cs.fallback, (unsigned long long)cs.bytes);
    return 0;
}
