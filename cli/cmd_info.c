/* afinar info FILE|DIR — describe a GGUF file or a Hugging Face checkpoint directory. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: afinar info FILE.gguf|DIR\n"
               "Prints architecture, hyper-parameters (Hugging Face names), tokenizer kind and a tensor\n"
               "table (name, type, shape [out, in], bytes) of a GGUF file, or of a Hugging Face checkpoint\n"
               "directory (config.json, SafeTensors weights, tokenizer.json).\n");
        return 0;
    }
    if (argc != 2) {
        cli_error("info", "expected exactly one FILE argument (see 'afinar info --help')");
        return 2;
    }
    af_status st = af_model_describe(argv[1], stdout);
    if (st != AF_OK) return cli_fail("info", st);
    return 0;
}
