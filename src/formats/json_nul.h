/*
 * json_nul.h — find a NUL character written as the escape \u0000 inside a JSON string. cJSON
 * decodes it into its NUL-terminated strings, so the text after it would be silently dropped;
 * afinar refuses such text instead (every JSONL data reader, every `afinar serve` request body).
 */
#ifndef AF_JSON_NUL_H
#define AF_JSON_NUL_H

#include <stddef.h>

/* Scan the JSON text[0..len) (already parsed successfully, so well formed) for a string value or
 * key holding the escape \u0000. Returns 1 and writes the path of the first one to path[0..cap)
 * (NUL-terminated, truncated to fit): object keys joined by '.', array elements as [i], e.g.
 * "messages[1].content"; a key that holds the NUL is named by the path of its object followed by
 * ".<key>" as far as the key's text before the NUL. "(top level)" for a bare string. Returns 0 when
 * there is none. No allocation; nesting deeper than 64 levels is followed but not named. */
int af_json_nul_path(const char *text, size_t len, char *path, size_t cap);

#endif /* AF_JSON_NUL_H */
