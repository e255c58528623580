/* afinar export — an adapter as a llama.cpp LoRA GGUF (af_adapter_export_gguf). */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void help(void) {
    printf("usage: afinar export -m MODEL -a ADAPTER -o OUT.gguf [--overwrite]\n"
           "\n"
           "Write ADAPTER as a llama.cpp LoRA GGUF (llama-cli --lora OUT.gguf, Ollama ADAPTER).\n"
           "  -m, --model PATH   the base model the adapter was trained on, a GGUF file or HF directory\n"
           "                     (architecture, q/k row order and shapes come from it)\n"
           "  -a, --adapter PATH adapter directory ('afinar train', PEFT) or a LoRA GGUF\n"
           "  -o, --output FILE  the LoRA GGUF to write (atomically)\n"
           "      --overwrite    replace FILE when it exists\n"
           "A classification head and its labels travel as afinar.* metadata (llama.cpp ignores them;\n"
           "afinar predict -a OUT.gguf reads them).\n");
}

int cmd_export(int argc, char **argv) {
    const char *C = "export";
    const char *model = NULL, *adapter = NULL, *out = NULL;
    int overwrite = 0;
    enum { O_OVERWRITE = 1000 };
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},   {"adapter", required_argument, 0, 'a'},
                                         {"output", required_argument, 0, 'o'},  {"overwrite", no_argument, 0, O_OVERWRITE},
                                         {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:a:o:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'a': adapter = optarg; break;
        case 'o': out = optarg; break;
        case O_OVERWRITE: overwrite = 1; break;
        case 'h': help(); return 0;
        case ':': cli_error(C, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(C, "unknown option '%s' (see 'afinar export --help')", argv[optind - 1]); return 2;
        }
    }
    if (optind < argc) {
        cli_error(C, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (!model || !adapter || !out) {
        cli_error(C, "missing %s", !model ? "-m MODEL (a GGUF file or HF directory)" : !adapter ? "-a ADAPTER" : "-o OUT.gguf");
        return 2;
    }
    af_status st = af_adapter_export_gguf(model, adapter, out, overwrite);
    if (st != AF_OK) return cli_fail(C, st);
    fprintf(stderr, "afinar export: wrote %s\n", out);
    return 0;
}
