/*
 * csv.h — tabular data files (CSV, TSV) and the text-encoding check shared by every text data
 * reader (JSONL, CSV, TSV). docs/DATA.md describes the formats for users.
 *
 * CSV / TSV: RFC 4180 (https://www.rfc-editor.org/rfc/rfc4180) with the delimiter ',' (CSV) or
 * TAB (TSV). Parsing is done by libcsv (Debian libcsv-dev; strict mode), this file adds what
 * libcsv leaves to its caller:
 *  - the first row is the header: its cells name the columns (duplicate names are refused; an
 *    empty name is allowed, e.g. the index column pandas writes, but then only once);
 *  - every other row must have as many cells as the header;
 *  - a field may be quoted ("..."): inside it the delimiter, CR/LF (embedded newlines) and ""
 *    (one quote) are data; a quote inside an UNQUOTED field, text after a closing quote and a
 *    quoted field left open at the end of the file are errors (the message names the line);
 *  - spaces around fields are data (not trimmed); lines that are empty (or hold only CR) between
 *    rows are skipped; CRLF and LF line ends are both accepted (CRLF becomes LF, also inside a
 *    quoted field); a lone CR elsewhere is data, so a row always starts on a new line;
 *  - a NUL byte is refused; a row longer than max_row_bytes is refused before it is read whole.
 * Each row is handed to the caller as a cJSON object {"column": "cell", ...} (cells as strings), so
 * the JSONL readers' field checks and messages apply to CSV rows unchanged.
 *
 * Encodings: data files are UTF-8, with or without a byte-order mark (EF BB BF, skipped). A UTF-16
 * or UTF-32 file (with a BOM, or recognised by the NUL bytes of its first characters) is refused
 * with a message naming the encoding and the iconv command that converts it.
 */
#ifndef AF_CSV_H
#define AF_CSV_H

#include "core/core.h"

#include <stddef.h>
#include <sys/types.h>

struct cJSON;

/* How a data file is laid out, from its name: ".csv" (any case) -> ',', ".tsv"/".tab" -> '\t',
 * anything else (".jsonl", ".json", stdin, ...) -> 0 (JSON Lines). */
int af_data_file_delim(const char *path);

/* Check the first bytes head[0..n) of text data file `path` (n may be 0..any; the first line is
 * enough) for the encoding. Returns AF_OK with *bom = the length of a UTF-8 byte-order mark to skip
 * (0 or 3), or AF_ERR_FORMAT "PATH: the file is UTF-16LE, with a byte-order mark; afinar reads
 * UTF-8 data: convert it first, e.g. iconv -f UTF-16LE -t UTF-8 PATH > OUT" (the same for
 * UTF-16BE, UTF-32LE/BE, with or without a byte-order mark). Detection without a BOM follows
 * the JSON rule of RFC 4627 §3 (the NUL pattern of the first four bytes; ASCII first characters). */
af_status af_text_check_encoding(const char *path, const unsigned char *head, size_t n, size_t *bom);

/* Called for each data row: `line` is the 1-based line where the row starts, `row` the object
 * {"header name": "cell", ...} (borrowed: valid during the call). A non-AF_OK return stops the read
 * and is returned by af_csv_read (the callee records its message with af_fail). */
typedef af_status (*af_csv_row_fn)(void *ud, long line, const struct cJSON *row);

/* Read `path` (a regular file or a pipe; af_fopen_regular) as CSV (delim ',') or TSV (delim '\t')
 * and call fn for every row after the header. max_row_bytes (0: 16 MiB) bounds one row (all its
 * lines). If `header` is not NULL it receives the header as a cJSON array of strings (caller frees
 * with cJSON_Delete), also on errors after the header was read (NULL before).
 * Errors (AF_ERR_FORMAT unless said): "PATH: cannot open: ..." (AF_ERR_IO), the encoding errors of
 * af_text_check_encoding, "PATH: empty file (no header row)", "PATH:1: duplicate column name
 * \"x\" in the header", "PATH:L: row has 3 fields but the header has 2 (a delimiter inside an
 * unquoted field? quote it)", "PATH:L: malformed quoting (a '\"' inside an unquoted field, or text
 * after a closing quote): quote the whole field and double the quotes inside it",
 * "PATH:L: a quoted field opened on this line is not closed at the end of the file",
 * "PATH:L: NUL byte", "PATH:L: row longer than N bytes", "PATH: no data rows (only a header)";
 * AF_ERR_NOMEM; whatever fn returns. */
af_status af_csv_read(const char *path, int delim, size_t max_row_bytes, af_csv_row_fn fn, void *ud,
                      struct cJSON **header);

/* Comma-separated list of the keys of a JSON object ("'a', 'b', 'c'"; at most `cap` bytes,
 * "..." when cut), for messages that name the fields a line or row does have. */
void af_json_key_list(const struct cJSON *obj, char *buf, size_t cap);

#endif /* AF_CSV_H */
