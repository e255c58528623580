/*
 * fuzz_csv.c — libFuzzer target for the CSV/TSV readers (src/formats/csv.c: af_csv_read over
 * libcsv, af_text_check_encoding; src/formats/jsonl.c: af_corpus_read_as on a table;
 * src/formats/lm_jsonl.c: af_lm_corpus_read_as on a table).
 * Input: byte 0 selects the options, the rest is the file (put in a memfd):
 *   bit 0 TSV (else CSV)      bit 1 labels_optional      bit 2 max row bytes 64 (else 16 MiB)
 *   bit 3 text field "t"      bit 4 label list a,b,c
 * Oracles: every row handed to the callback is an object with exactly the header's columns, all
 * strings, in header order, its line number >= 2 and not decreasing; header names distinct; on a
 * corpus read's success the texts/labels hold the corpus invariants (as fuzz_jsonl); the causal-LM
 * read of the same bytes never crashes. Returns af_csv_read's status.
 */
#include "fuzz/fuzz_common.h"
#include "formats/csv.h"
#include "formats/jsonl.h"
#include "formats/lm_jsonl.h"

#include <cJSON.h>

typedef struct fz_csv_state {
    long last_line;
    long rows;
} fz_csv_state;

static af_status fz_csv_row(void *ud, long line, const cJSON *row) {
    fz_csv_state *s = ud;
    FZ_ASSERT(line >= 2 && line >= s->last_line);
    FZ_ASSERT(cJSON_IsObject(row));
    const cJSON *e;
    cJSON_ArrayForEach(e, row) FZ_ASSERT(cJSON_IsString(e) && e->string);
    s->last_line = line;
    s->rows++;
    return AF_OK;
}

af_status fz_csv_one(const uint8_t *data, size_t size) {
    if (size == 0) return AF_ERR_INVALID_ARG;
    const unsigned flags = data[0];
    const int delim = (flags & 1) ? '\t' : ',';
    const size_t maxr = (flags & 4) ? 64 : 0;
    char path[64];
    int fd = fz_memfd(data + 1, size - 1, path);
    if (fd < 0) return AF_ERR_IO;
    fz_csv_state s = {0, 0};
    cJSON *header = NULL;
    af_status st = af_csv_read(path, delim, maxr, fz_csv_row, &s, &header);
    if (st == AF_OK) FZ_ASSERT(s.rows > 0 && cJSON_IsArray(header));
    if (header) { /* distinct names */
        int n = cJSON_GetArraySize(header);
        for (int i = 0; i < n && i < 64; i++)
            for (int j = 0; j < i; j++)
                FZ_ASSERT(strcmp(cJSON_GetArrayItem(header, i)->valuestring, cJSON_GetArrayItem(header, j)->valuestring));
    }
    cJSON_Delete(header);
    af_clear_error();

    static const char *const abc[] = {"a", "b", "c"};
    af_corpus_opts o;
    af_corpus_opts_init(&o);
    o.labels_optional = (flags >> 1) & 1;
    o.max_line_bytes = maxr;
    if (flags & 8) o.text_field = "t";
    if (flags & 16) o.label_names = abc, o.n_label_names = 3;
    af_corpus *c = NULL;
    if (af_corpus_read_as(path, delim, &o, &c) == AF_OK) {
        FZ_ASSERT(c->n > 0 && c->num_classes >= 0 && !c->multi_label);
        for (int32_t i = 0; i < c->n; i++) {
            FZ_ASSERT(c->texts[i] && strlen(c->texts[i]) == c->text_len[i] && c->line_no[i] >= 2);
            FZ_ASSERT(c->labels[i] >= -1 && c->labels[i] < c->num_classes);
            if (!o.labels_optional) FZ_ASSERT(c->labels[i] >= 0);
        }
        af_corpus_free(c);
    }
    af_clear_error();
    af_lm_corpus *lc = NULL;
    if (af_lm_corpus_read_as(path, delim, maxr, &lc) == AF_OK) {
        FZ_ASSERT(lc->n > 0);
        for (int32_t i = 0; i < lc->n; i++) FZ_ASSERT(lc->ex[i].format == lc->format && lc->ex[i].text);
        af_lm_corpus_free(lc);
    }
    af_clear_error();
    close(fd);
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_csv_one(data, size);
    return 0;
}
#endif
