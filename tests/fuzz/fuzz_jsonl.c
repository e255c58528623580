/*
 * fuzz_jsonl.c — libFuzzer target for the JSONL corpus reader and the label-list parsers
 * (src/formats/jsonl.c: af_corpus_read, af_labels_read_file, af_labels_parse_list).
 * Input: byte 0 selects the reader options, the rest is the file (put in a memfd):
 *   bit 0 labels_optional        bit 1 label list business,entertainment,politics,sport,tech
 *   bit 2 num_classes = 5        bit 3 text_field "text"      bit 4 label_field "labels"
 *   bit 5 max_line_bytes = 256
 * The same bytes are also read as a labels.txt file and (up to the first NUL, at most 4 KiB) as a
 * comma list. Oracles on success: n > 0, text lengths match, every label id in range, multi-label
 * lists sorted and unique, label names non-empty and distinct. Returns af_corpus_read's status.
 */
#include "fuzz/fuzz_common.h"
#include "formats/jsonl.h"

static void fz_jsonl_check_names(char **names, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        FZ_ASSERT(names[i] && names[i][0]);
        for (int32_t j = 0; j < i && j < 64; j++) FZ_ASSERT(strcmp(names[i], names[j]) != 0);
    }
}

af_status fz_jsonl_one(const uint8_t *data, size_t size) {
    if (size == 0) return AF_ERR_INVALID_ARG;
    static const char *const bbc[] = {"business", "entertainment", "politics", "sport", "tech"};
    unsigned flags = data[0];
    af_corpus_opts o;
    af_corpus_opts_init(&o);
    o.labels_optional = flags & 1;
    if (flags & 2) {
        o.label_names = bbc;
        o.n_label_names = 5;
    }
    if (flags & 4) o.num_classes = 5;
    if (flags & 8) o.text_field = "text";
    if (flags & 16) o.label_field = "labels";
    if (flags & 32) o.max_line_bytes = 256;
    char path[64];
    int fd = fz_memfd(data + 1, size - 1, path);
    if (fd < 0) return AF_ERR_IO;
    af_corpus *c = NULL;
    af_status st = af_corpus_read(path, &o, &c);
    if (st == AF_OK) {
        FZ_ASSERT(c->n > 0 && c->num_classes >= 0);
        for (int32_t i = 0; i < c->n; i++) {
            FZ_ASSERT(c->texts[i] && strlen(c->texts[i]) == c->text_len[i]);
            FZ_ASSERT(c->line_no[i] >= 1);
            if (!c->multi_label) {
                FZ_ASSERT(c->labels[i] >= -1 && c->labels[i] < c->num_classes);
                if (!o.labels_optional) FZ_ASSERT(c->labels[i] >= 0);
            } else {
                FZ_ASSERT(c->label_off[i] <= c->label_off[i + 1]);
                for (int32_t k = c->label_off[i]; k < c->label_off[i + 1]; k++) {
                    FZ_ASSERT(c->label_ids[k] >= 0 && c->label_ids[k] < c->num_classes);
                    if (k > c->label_off[i]) FZ_ASSERT(c->label_ids[k] > c->label_ids[k - 1]);
                }
            }
        }
        if (c->label_names) fz_jsonl_check_names(c->label_names, c->num_classes);
        af_corpus_free(c);
    }
    af_clear_error();

    char **names = NULL;
    int32_t n = 0;
    if (af_labels_read_file(path, &names, &n) == AF_OK) {
        FZ_ASSERT(n > 0);
        fz_jsonl_check_names(names, n);
    }
    af_labels_free(names, n);
    size_t len = size - 1 < 4096 ? size - 1 : 4096;
    char *list = malloc(len + 1);
    if (list) {
        memcpy(list, data + 1, len);
        list[len] = 0;
        names = NULL;
        n = 0;
        if (af_labels_parse_list(list, &names, &n) == AF_OK) {
            FZ_ASSERT(n > 0);
            fz_jsonl_check_names(names, n);
        }
        af_labels_free(names, n);
        free(list);
    }
    af_clear_error();
    close(fd);
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_jsonl_one(data, size);
    return 0;
}
#endif
