/*
 * test_json_nul.c — af_json_nul_path (src/formats/json_nul.c): finds a \u0000 escape in any JSON
 * string and names where it is; escaped backslashes, other escapes, keys, nesting, truncation.
 * The readers that use it are tested end to end by test_cli (JSONL data) and test_serve (requests).
 */
#include "testlib.h"

#include "formats/json_nul.h"

#include <stdlib.h>
#include <string.h>

static void one(const char *json, int want, const char *want_path) {
    char path[64] = "untouched";
    const int got = af_json_nul_path(json, strlen(json), path, sizeof path);
    CHECK(got == want && (!want || !strcmp(path, want_path)), "%s: want %d '%s', got %d '%s'", json, want,
          want_path ? want_path : "", got, got ? path : "");
}

int main(void) {
    one("{\"prompt\":\"a\\u0000 the quick brown fox\"}", 1, "prompt");
    one("{\"prompt\":\"plain\"}", 0, NULL);
    one("{\"a\":\"\\\\u0000\"}", 0, NULL);                     /* an escaped backslash, then the text u0000 */
    one("{\"a\":\"\\\\\\u0000\"}", 1, "a");                    /* \\ then \u0000 */
    one("{\"a\":\"\\u00001\"}", 1, "a");                       /* U+0000 then '1' */
    one("{\"a\":\"\\u0001\\u0100\\uD83D\\uDE00\"}", 0, NULL);  /* other escapes */
    one("{\"a\":\"x\\\"\\u0000\"}", 1, "a");                   /* after an escaped quote */
    one("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"user\",\"content\":\"y\\u0000\"}]}", 1,
        "messages[1].content");
    one("{\"m\":[{\"c\":[{\"t\":\"a\"},{\"t\":\"b\\u0000\"}]}]}", 1, "m[0].c[1].t");
    one("{\"input\":[\"ok\",[1,2],\"a\\u0000b\"]}", 1, "input[2]");
    one("{\"na\\u0000me\":\"v\"}", 1, "na");                   /* in a key: the key up to the NUL */
    one("{\"o\":{\"k\\u0000\":1}}", 1, "o.k");
    one("\"\\u0000\"", 1, "(top level)");
    one("[\"a\",\"\\u0000\"]", 1, "[1]");
    one("{\"a\":\"}{][,:\",\"b\":[\"\\u0000\"]}", 1, "b[0]");  /* structure characters inside strings */
    one("{\"a\" : \"x\" , \"b\" :\n\"\\u0000\"}", 1, "b");      /* whitespace around ':' */
    /* deeper than the 64 named levels: found, the first 64 levels named */
    {
        char *j = malloc(400);
        size_t o = 0;
        for (int i = 0; i < 100; i++) j[o++] = '[';
        memcpy(j + o, "\"\\u0000\"", 8), o += 8;
        for (int i = 0; i < 100; i++) j[o++] = ']';
        j[o] = 0;
        char path[1024];
        CHECK(af_json_nul_path(j, o, path, sizeof path) == 1 && !strncmp(path, "[0][0][0]", 9) && strlen(path) == 64 * 3,
              "deep: %s", path);
        free(j);
    }
    /* a small buffer: truncated, NUL-terminated */
    {
        const char *j = "{\"a_long_field_name\":{\"another_long_one\":\"\\u0000\"}}";
        char path[12];
        memset(path, 'x', sizeof path);
        CHECK(af_json_nul_path(j, strlen(j), path, sizeof path) == 1 && strlen(path) == 11 && !strncmp(path, "a_long_fiel", 11),
              "truncated: %.12s", path);
    }
    /* the length bounds the scan: a NUL escape beyond len is not seen */
    {
        const char *j = "{\"a\":\"b\"}{\"c\":\"\\u0000\"}";
        char path[16];
        CHECK(af_json_nul_path(j, 9, path, sizeof path) == 0, "scan past len");
    }
    return tl_finish("json_nul");
}
