/*
 * jsonl.h — classification corpora in JSON Lines (https://jsonlines.org): one JSON object per line,
 *   single-label:  {"input": "text ...", "label": 3}          or  {"input": "...", "label": "sport"}
 *   multi-label:   {"input": "text ...", "labels": [0, 4]}    or  {"input": "...", "labels": ["a","b"]}
 * Field names are configurable. Lines are parsed with cJSON (Debian libcjson); blank lines (only
 * spaces, tabs, CR) are skipped; other keys in an object are ignored.
 *
 * Labels
 *  - Integer labels must be integral numbers >= 0 (and < num_classes when that is known: from the
 *    label-name list, or from opts.num_classes). Without either, num_classes = max label + 1.
 *  - String labels are mapped to ids. With a label-name list (labels.txt, --labels a,b,c) the id is
 *    the name's position in the list and an unknown name is an error. Without a list the distinct
 *    names of the file are collected and sorted by byte value (strcmp), so ids are stable for the
 *    same set of names whatever the line order.
 *  - A file uses either integer or string labels, and either the single-label or the multi-label
 *    form, throughout (decided by its first labelled line); mixing is an error.
 *  - In the multi-label form a repeated label in one list counts once; an empty list is allowed
 *    (a sample with no positive class).
 *
 * Errors (never crash, never abort; the message is kept by af_fail, read with af_last_error):
 *   AF_ERR_IO      "FILE: cannot open: <strerror>"
 *   AF_ERR_FORMAT  "FILE:LINE: invalid JSON at column C" (C = 1-based byte column where cJSON
 *                  stopped), "FILE:LINE: expected a JSON object",
 *                  "FILE:LINE: field 'input': missing" / ": expected a string, got number",
 *                  "FILE:LINE: field 'label': value 7 out of range [0, 5)",
 *                  "FILE:LINE: field 'label': unknown label name \"spam\" (known: a, b, c)",
 *                  "FILE:LINE: line longer than N bytes", "FILE: no samples (empty data set)"
 *   AF_ERR_NOMEM, AF_ERR_INVALID_ARG (bad options, e.g. duplicate names in the label list).
 * Memory: the texts are kept (about the file size) plus O(lines) bookkeeping; one line at a time
 * is parsed, and a line is never buffered beyond max_line_bytes (a longer one is refused before it
 * is read whole). Label-name files: lines of at most 65536 bytes.
 */
#ifndef AF_JSONL_H
#define AF_JSONL_H

#include "core/core.h"

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define AF_JSONL_DEFAULT_MAX_LINE ((size_t)16 << 20) /* 16 MiB per line */
/* The most classes a corpus may have, given (--num-classes, a label list) or inferred from the data
 * (integer labels: max + 1; string labels: distinct names). The same bound as --num-classes. */
#define AF_MAX_CLASSES 1000000


struct af_corpus {
    char *path;               /* owned copy of the file name */
    int32_t n;                /* samples (non-blank lines) */
    char **texts;             /* [n] owned NUL-terminated UTF-8 texts (JSON unescaped) */
    size_t *text_len;         /* [n] byte lengths (a "\u0000" escape ends the text there) */
    int32_t *line_no;         /* [n] 1-based source line of each sample (for messages) */
    int multi_label;          /* 0: labels[]; 1: label_off/label_ids */
    int32_t *labels;          /* single-label: [n] class ids, -1 = no label (labels_optional); else NULL */
    int32_t *label_off;       /* multi-label: [n + 1] offsets into label_ids (CSR); else NULL */
    int32_t *label_ids;       /* multi-label: [label_off[n]] sorted, unique class ids per sample */
    int32_t n_labelled;       /* samples that carried a label field */
    int32_t num_classes;      /* number of classes (see the header comment) */
    char **label_names;       /* [num_classes] owned names, or NULL for integer labels without a list */
};

/* af_corpus_opts, af_corpus_opts_init, af_corpus_read, af_corpus_from_texts, af_corpus_size,
 * af_corpus_multi_label, af_corpus_free: include/afinar.h ("Data sets"). */

/* af_corpus_read with the layout given instead of taken from the file name: delim 0 = JSON Lines,
 * ',' = CSV, '\t' = TSV (formats/csv.h: header row, RFC 4180 quoting; a label cell that is a
 * canonical non-negative integer is a class id, other cells are label names; with labels_optional
 * an empty label cell is no label). Text field: opts->text_field, else the first of "text",
 * "sentence", "content", "input" present in the first sample (then required in every sample).
 * Errors: those of af_corpus_read and af_csv_read; a missing field names the fields the line (or
 * header) has and the flag (--text-field / --label-field). */
af_status af_corpus_read_as(const char *path, int delim, const af_corpus_opts *opts, af_corpus **out);

/* Label-name lists.
 * af_labels_parse_list: split "a,b,c" at commas (spaces around names are trimmed).
 * af_labels_read_file:  one name per line (labels.txt); trailing CR/spaces trimmed, blank lines
 *                       skipped.
 * Both reject empty lists, duplicate names and names holding a NUL byte (AF_ERR_INVALID_ARG /
 * AF_ERR_FORMAT naming the name and, for files, the line); labels.txt lines longer than 65536
 * bytes are refused (AF_ERR_FORMAT); AF_ERR_IO when the file cannot be read.
 * `*names`: malloc'ed array of `*n` malloc'ed strings; free with af_labels_free(names, n). */
af_status af_labels_parse_list(const char *list, char ***names, int32_t *n);
af_status af_labels_read_file(const char *path, char ***names, int32_t *n);
void af_labels_free(char **names, int32_t n);

/* ---- line-level helpers shared by the JSONL readers (jsonl.c, lm_jsonl.c) ---- */
struct cJSON;

/* Reads one line (with its '\n', NUL bytes allowed) into *buf (grown as needed, never beyond
 * maxl + 2 bytes, so a huge line is refused before it is allocated). Returns its length, -1 at end
 * of file with nothing read, -2 when the line is longer than maxl bytes (the rest of it is left
 * unread), -3 when out of memory. */
ssize_t af_jsonl_read_line(FILE *fp, char **buf, size_t *cap, size_t maxl);

/* The next non-blank line of a JSON Lines file: af_jsonl_read_line, *ln counting lines; the first
 * line's encoding checked (a UTF-8 byte-order mark skipped, UTF-16/32 refused by name:
 * af_text_check_encoding); lines of spaces, tabs, CR and LF skipped. *text, *len: the line (without
 * a BOM; points into *line). AF_OK with *text NULL at the end of the file. Errors: AF_ERR_FORMAT
 * ("PATH:LINE: line longer than MAXL bytes", the encoding), AF_ERR_NOMEM. */
af_status af_jsonl_next_line(FILE *fp, const char *path, size_t maxl, char **line, size_t *cap, long *ln, char **text,
                             size_t *len);

/* Parse line[0..len) (line `ln` of `path`, for messages) as ONE JSON object with cJSON. `*out`:
 * the object, caller frees with cJSON_Delete. Errors (AF_ERR_FORMAT): "FILE:LINE: invalid JSON at
 * column C" (1-based byte column where cJSON stopped), "...: unexpected text after the object",
 * "FILE:LINE: expected a JSON object, got array". */
af_status af_jsonl_parse_object(const char *path, long ln, const char *line, size_t len, struct cJSON **out);

/* "string", "number", "boolean", "null", "array", "object" or "invalid value", for messages. */
const char *af_json_type_name(const struct cJSON *v);

#endif /* AF_JSONL_H */
