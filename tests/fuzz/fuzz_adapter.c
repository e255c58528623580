/*
 * fuzz_adapter.c — libFuzzer target for adapter loading (src/lora/adapter_io.c):
 * adapter_config.json (PEFT LoraConfig fields), afinar.json and adapter_model.safetensors (tensor
 * names -> layer/projection mapping, shapes, dtypes).
 * Input: up to three parts separated by the line FZ_ADAPTER_SEP ("\n#AFSEP#\n"):
 *   part 0 -> adapter_config.json, part 1 -> afinar.json (absent when the input has only two
 *   parts), last part -> adapter_model.safetensors (absent when the input has one part).
 * The files are written into a per-process temporary directory, then af_adapter_read_info and
 * af_adapter_load run onto a hand-built layout matching tests/fixtures/peft_adapter_small/seq_cls
 * (2 layers, hidden 64, q 64, kv 32, ffn 96, all seven projections, r 2, alpha 4, 3 classes;
 * llama q/k row conversion with 4 heads / 2 KV heads of 16). Load flags come from size & 3.
 * Oracles: read_info and load agree; a successful info has r >= 1 and sorted layers_to_transform.
 * Returns af_adapter_read_info's status.
 */
#include "fuzz/fuzz_common.h"
#include "lora/adapter_io.h"

#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>

#define FZ_ADAPTER_SEP "\n#AFSEP#\n"

static char fz_adapter_dir[64];

static void fz_adapter_cleanup(void) {
    static const char *const files[] = {AF_ADAPTER_CONFIG_FILE, AF_ADAPTER_AFINAR_FILE, AF_ADAPTER_WEIGHTS_FILE};
    char p[128];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", fz_adapter_dir, files[i]);
        unlink(p);
    }
    rmdir(fz_adapter_dir);
}

static int fz_adapter_put(const char *name, const uint8_t *d, size_t n, int present) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", fz_adapter_dir, name);
    unlink(p);
    if (!present) return 0;
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, d + done, n - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    close(fd);
    return done == n ? 0 : -1;
}

/* The layout of tests/test_adapter_io.c make_layout(TINY, 0x7f, r 2, alpha 4, 3 classes). */
static void fz_adapter_layout(af_param_layout *lay, af_lora_slot *slots) {
    memset(lay, 0, sizeof *lay);
    const int64_t hidden = 64, q_out = 64, kv_out = 32, ffn = 96;
    lay->lora = (af_lora_config){.r = 2, .alpha = 4.0f, .dropout = 0.1f, .targets = 0x7f};
    lay->scale = 2.0f;
    lay->n_layers = 2;
    lay->hidden = (int32_t)hidden;
    lay->slots = slots;
    int64_t off = 0;
    for (int l = 0; l < 2; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            int64_t in = p == AF_PROJ_O ? q_out : p == AF_PROJ_DOWN ? ffn : hidden;
            int64_t out = p == AF_PROJ_Q ? q_out : (p == AF_PROJ_K || p == AF_PROJ_V) ? kv_out
                        : (p == AF_PROJ_GATE || p == AF_PROJ_UP) ? ffn : hidden;
            af_lora_slot *s = &slots[l * AF_PROJ_COUNT + p];
            *s = (af_lora_slot){off, off + 2 * in, in, out, -1};
            off += 2 * in + 2 * out;
        }
    lay->n_lora = off;
    lay->num_classes = 3;
    lay->head_w_off = off;
    off += 3 * hidden;
    lay->head_b_off = off;
    off += 3;
    lay->n_total = off;
}

af_status fz_adapter_one(const uint8_t *data, size_t size) {
    if (!fz_adapter_dir[0]) {
        snprintf(fz_adapter_dir, sizeof fz_adapter_dir, "/tmp/afinar-fuzz-adapter-XXXXXX");
        if (!mkdtemp(fz_adapter_dir)) {
            fz_adapter_dir[0] = 0;
            return AF_ERR_IO;
        }
        atexit(fz_adapter_cleanup);
    }
    const size_t sl = strlen(FZ_ADAPTER_SEP);
    const uint8_t *part[3] = {data, NULL, NULL};
    size_t plen[3] = {size, 0, 0};
    int np = 1;
    const uint8_t *p = data, *end = data + size;
    while (np < 3) {
        const uint8_t *s = memmem(p, (size_t)(end - p), FZ_ADAPTER_SEP, sl);
        if (!s) break;
        plen[np - 1] = (size_t)(s - part[np - 1]);
        part[np] = s + sl;
        plen[np] = (size_t)(end - part[np]);
        p = part[np];
        np++;
    }
    /* 1 part: config only; 2 parts: config + weights; 3 parts: config + afinar + weights */
    const uint8_t *cfg = part[0], *afj = np == 3 ? part[1] : NULL, *wts = np >= 2 ? part[np - 1] : NULL;
    size_t cfg_n = plen[0], afj_n = np == 3 ? plen[1] : 0, wts_n = np >= 2 ? plen[np - 1] : 0;
    if (fz_adapter_put(AF_ADAPTER_CONFIG_FILE, cfg, cfg_n, 1) || fz_adapter_put(AF_ADAPTER_AFINAR_FILE, afj, afj_n, afj != NULL) ||
        fz_adapter_put(AF_ADAPTER_WEIGHTS_FILE, wts, wts_n, wts != NULL))
        return AF_ERR_IO;

    af_adapter_info info;
    af_status st = af_adapter_read_info(fz_adapter_dir, &info);
    if (st == AF_OK) {
        FZ_ASSERT(info.r >= 1 && info.peft_type != NULL);
        FZ_ASSERT(info.n_layers >= 0 && info.num_classes >= 0);
        for (int32_t i = 1; i < info.n_layers_to_transform; i++)
            FZ_ASSERT(info.layers_to_transform[i - 1] <= info.layers_to_transform[i]);
        af_lora_slot slots[2 * AF_PROJ_COUNT];
        af_param_layout lay;
        fz_adapter_layout(&lay, slots);
        af_adapter_restrict_layout(&lay, &info);
        float *P = calloc((size_t)lay.n_total, sizeof *P);
        if (P) {
            af_adapter_load_opts lo = {.flags = (unsigned)(size & 3), .architecture = "llama", .n_head = 4,
                                       .n_kv_head = 2, .head_dim = 16};
            af_adapter_info info2;
            af_status ls = af_adapter_load(fz_adapter_dir, &lay, P, &lo, &info2);
            FZ_ASSERT(ls != AF_ERR_INTERNAL);
            if (ls == AF_OK) {
                FZ_ASSERT(info2.r == info.r);
                af_adapter_info_free(&info2);
            }
            free(P);
        }
        af_adapter_info_free(&info);
    }
    af_clear_error();
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_adapter_one(data, size);
    return 0;
}
#endif
