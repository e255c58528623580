/* afinar merge-adapters — several LoRA adapters of one base model into one (af_adapter_merge:
 * methods on each projection's ΔW = s·B·A, written at rank r by truncated SVD; see afinar.h). */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: afinar merge-adapters ADAPTER_DIR ADAPTER_DIR ... -o OUT_DIR [options]\n"
           "\n"
           "Merges LoRA adapters (PEFT directories, as 'afinar train' or PEFT write them) of one base model on\n"
           "each adapted projection's ΔW = s·B·A, and writes the result as one adapter of rank r (truncated\n"
           "SVD).\n"
           "\n"
           "  -o, --output DIR        the merged adapter directory (must not exist, see --overwrite)\n"
           "      --method M          linear (default): ΔW = Σ w_i ΔW_i, then rank r by SVD (= svd)\n"
           "                          svd:     the same (PEFT's name)\n"
           "                          cat:     Σ w_i ΔW_i exactly, rank = the sum of the ranks\n"
           "                          ties:    magnitude pruning to --density, sign election, disjoint mean\n"
           "                          dare-ties, dare-linear: random pruning (--density, --seed), rescaled\n"
           "                          by 1/density; then as ties / as linear\n"
           "                          magnitude-prune: magnitude pruning, then as linear\n"
           "                          slerp:   two adapters, spherical interpolation of each ΔW at --t\n"
           "      --weights W1,W2,... one weight per adapter (default 1 each; negative subtracts)\n"
           "      --density D         fraction of ΔW entries kept, in (0, 1] (ties, dare-*, magnitude-prune)\n"
           "      --rank R            rank of the result (default: the largest input rank; cat: the sum)\n"
           "      --seed S            DARE pruning masks (default 0)\n"
           "      --t T               slerp: position in [0, 1] (0: the first adapter, 1: the second)\n"
           "      --majority-sign M   ties / dare-ties sign election: total (default) or frequency\n"
           "      --overwrite         replace an existing output adapter directory\n"
           "  -t, --threads N         projections merged at the same time (default: all cores)\n"
           "Classification heads are combined as Σ w_i W_i and must share the label set.\n");
}

/* "1,0.5,-1" -> w [n]; returns the count, or -1 after printing an error. */
static int parse_weights(const char *s, double **out) {
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    double *w = malloc(sizeof(double) * (size_t)n);
    if (!w) return -1;
    const char *p = s;
    for (int i = 0; i < n; i++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char buf[64];
        if (len == 0 || len >= sizeof buf) {
            cli_error("merge-adapters", "--weights: weight %d: expected a number, got '%.*s'", i + 1, (int)len, p);
            free(w);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        char flag[32];
        snprintf(flag, sizeof flag, "--weights (weight %d)", i + 1);
        if (!cli_parse_float("merge-adapters", flag, buf, -1e6, 1e6, &w[i])) {
            free(w);
            return -1;
        }
        p = e ? e + 1 : p + len;
    }
    *out = w;
    return n;
}

int cmd_merge_adapters(int argc, char **argv) {
    const char *cmd = "merge-adapters";
    static const struct option lo[] = {{"output", required_argument, 0, 'o'},  {"method", required_argument, 0, 'M'},
                                       {"weights", required_argument, 0, 'w'}, {"density", required_argument, 0, 'd'},
                                       {"rank", required_argument, 0, 'r'},    {"seed", required_argument, 0, 's'},
                                       {"majority-sign", required_argument, 0, 'g'},
                                       {"overwrite", no_argument, 0, 'O'},     {"help", no_argument, 0, 'h'},
                                       {"threads", required_argument, 0, 't'}, {"t", required_argument, 0, 'T'},
                                       {0, 0, 0, 0}};
    af_adapter_merge_opts o;
    af_adapter_merge_opts_default(&o);
    const char *out = NULL, *weights = NULL;
    double *w = NULL;
    int c, rc = 2;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":o:t:h", lo, NULL)) != -1) {
        long v;
        switch (c) {
        case 'o': out = optarg; break;
        case 'M':
            if (af_merge_method_parse(optarg, &o.method) != AF_OK) {
                cli_error(cmd, "--method: %s", af_last_error());
                return 2;
            }
            break;
        case 'w': weights = optarg; break;
        case 'd':
            if (!cli_parse_float(cmd, "--density", optarg, -1e9, 1e9, &o.density)) return 2;
            if (!(o.density > 0 && o.density <= 1)) {
                cli_error(cmd, "--density: expected a fraction in (0, 1], got '%s'", optarg);
                return 2;
            }
            break;
        case 'r':
            if (!cli_parse_int(cmd, "--rank", optarg, 1, 1 << 20, &v)) return 2;
            o.rank = (int32_t)v;
            break;
        case 's': {
            char *end;
            unsigned long long sv = strtoull(optarg, &end, 10);
            if (!*optarg || *end || optarg[0] == '-') {
                cli_error(cmd, "--seed: expected a non-negative integer, got '%s'", optarg);
                return 2;
            }
            o.seed = (uint64_t)sv;
            break;
        }
        case 'g':
            if (!strcmp(optarg, "total")) o.majority_sign_frequency = 0;
            else if (!strcmp(optarg, "frequency")) o.majority_sign_frequency = 1;
            else {
                cli_error(cmd, "--majority-sign: expected total or frequency, got '%s'", optarg);
                return 2;
            }
            break;
        case 'T':
            if (!cli_parse_float(cmd, "--t", optarg, 0, 1, &o.t)) return 2;
            break;
        case 'O': o.overwrite = 1; break;
        case 't':
            if (!cli_parse_int(cmd, "--threads", optarg, 0, 4096, &v)) return 2;
            o.n_threads = (int)v;
            break;
        case 'h': help(); return 0;
        case ':': cli_error(cmd, "option '%s' needs a value", argv[optind - 1]); return 2;
        default: cli_error(cmd, "unknown option '%s' (see 'afinar merge-adapters --help')", argv[optind - 1]); return 2;
        }
    }
    const int n = argc - optind;
    if (!out) {
        cli_error(cmd, "missing -o OUT_DIR (the merged adapter directory)");
        return 2;
    }
    if (n < 1) {
        cli_error(cmd, "no adapter directories given (see 'afinar merge-adapters --help')");
        return 2;
    }
    if (weights) {
        int nw = parse_weights(weights, &w);
        if (nw < 0) return 2;
        if (nw != n) {
            cli_error(cmd, "--weights: %d weights for %d adapters (give one per adapter)", nw, n);
            free(w);
            return 2;
        }
        o.weights = w;
        o.n_weights = nw;
    }
    af_adapter_merge_report rep;
    af_status st = af_adapter_merge((const char *const *)(argv + optind), n, out, &o, &rep);
    if (st != AF_OK) {
        rc = cli_fail(cmd, st);
    } else {
        printf("merged %d adapters (%s) into %s: rank %d, %d projections%s\n", n, af_merge_method_name(o.method), out,
               rep.rank, rep.n_projections, rep.has_head ? ", classification head" : "");
        if (rep.worst_layer >= 0)
            printf("truncation error |ΔW - B·A|_F / |ΔW|_F: at most %.3g (layer %d %s)\n", rep.max_rel_error,
                   rep.worst_layer, rep.worst_proj);
        rc = 0;
    }
    free(w);
    return rc;
}
