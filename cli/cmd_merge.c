/* afinar merge — fold an adapter into a GGUF model (af_merge_adapter). */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void help(void) {
    printf("usage: afinar merge -m MODEL.gguf -a ADAPTER -o OUT.gguf [--type TYPE] [--overwrite]\n"
           "\n"
           "Write MODEL with W + s*B*A folded into every adapted tensor (a model llama.cpp and afinar load\n"
           "without the adapter). Every other tensor and all metadata are copied byte for byte.\n"
           "  -m, --model FILE   the base model: a GGUF file only (its tensors and metadata are copied;\n"
           "                     'afinar convert' makes one of an HF directory)\n"
           "  -a, --adapter PATH adapter directory ('afinar train', PEFT) or a LoRA GGUF ('afinar export')\n"
           "  -o, --output FILE  the merged GGUF to write (atomically)\n"
           "      --type TYPE    type of the merged tensors: keep (default: each tensor's own type), f32,\n"
           "                     f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k\n"
           "      --overwrite    replace FILE when it exists\n"
           "A classification head travels in the merged file: afinar predict -m OUT.gguf (no -a).\n"
           "Prints the RMS of s*B*A and of the re-quantization error on stderr.\n");
}

int cmd_merge(int argc, char **argv) {
    const char *C = "merge";
    af_merge_opts mo;
    memset(&mo, 0, sizeof mo);
    const char *model = NULL, *adapter = NULL, *out = NULL;
    enum { O_OVERWRITE = 1000, O_TYPE };
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},  {"adapter", required_argument, 0, 'a'},
                                         {"output", required_argument, 0, 'o'}, {"type", required_argument, 0, O_TYPE},
                                         {"overwrite", no_argument, 0, O_OVERWRITE},
                                         {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:a:o:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'a': adapter = optarg; break;
        case 'o': out = optarg; break;
        case O_TYPE: mo.type = optarg; break;
        case O_OVERWRITE: mo.overwrite = 1; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar merge --help')", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (!model || !adapter || !out) {
        cli_error(C, "missing %s", !model ? "-m MODEL.gguf (a GGUF file)" : !adapter ? "-a ADAPTER" : "-o OUT.gguf");
        return 2;
    }
    af_merge_stats ms;
    af_status st = af_merge_adapter(model, adapter, out, &mo, &ms);
    if (st != AF_OK) return cli_fail(C, st);
    fprintf(stderr,
            "afinar merge: wrote %s: %d tensors merged, %d copied; rms(s*B*A) = %.4g, re-quantization rms = %.4g",
            out, ms.merged, ms.copied, ms.delta_rms, ms.requant_rms);
    if (ms.base_requant_rms > 0) fprintf(stderr, " (the base alone in that type: %.4g)", ms.base_requant_rms);
    fputc('\n', stderr);
    return 0;
}
