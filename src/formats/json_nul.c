/*
 * json_nul.c — the \u0000 scan of json_nul.h. A single pass over well-formed JSON (RFC 8259): a
 * stack of the containers entered (object: the current key; array: the current index) names the
 * place of the first string whose escapes decode to U+0000.
 */
#include "formats/json_nul.h"

#include <stdio.h>
#include <string.h>

#define DEPTH 64
#define KEY 48

typedef struct frame {
    int is_array;
    long index;
    char key[KEY];
} frame;

/* Writes the path of frames st[0..n) (and `extra_key`, when not NULL) to path. */
static void put_path(const frame *st, int n, const char *extra_key, char *path, size_t cap) {
    size_t o = 0;
    path[0] = 0;
    for (int i = 0; i <= n && o + 1 < cap; i++) {
        int w;
        if (i == n) {
            if (!extra_key) break;
            w = snprintf(path + o, cap - o, "%s%s", o ? "." : "", extra_key);
        } else if (st[i].is_array) {
            w = snprintf(path + o, cap - o, "[%ld]", st[i].index);
        } else {
            w = snprintf(path + o, cap - o, "%s%s", o ? "." : "", st[i].key);
        }
        if (w < 0) break;
        o += (size_t)w < cap - o ? (size_t)w : cap - o - 1;
    }
    if (!path[0]) snprintf(path, cap, "(top level)");
}

int af_json_nul_path(const char *text, size_t len, char *path, size_t cap) {
    frame st[DEPTH];
    int depth = 0; /* containers entered (those beyond DEPTH are counted, not named) */
    if (cap) path[0] = 0;
    for (size_t i = 0; i < len; i++) {
        const char ch = text[i];
        if (ch == '{' || ch == '[') {
            if (depth < DEPTH) {
                st[depth].is_array = ch == '[';
                st[depth].index = 0;
                st[depth].key[0] = 0;
            }
            depth++;
        } else if (ch == '}' || ch == ']') {
            if (depth > 0) depth--;
        } else if (ch == ',') {
            if (depth > 0 && depth <= DEPTH && st[depth - 1].is_array) st[depth - 1].index++;
        } else if (ch == '"') {
            i++;
            int nul = 0;
            size_t kl = 0; /* the string's first bytes, for a key (escapes kept as written) */
            char key[KEY];
            for (; i < len && text[i] != '"'; i++) {
                if (text[i] == '\\' && i + 1 < len) {
                    if (text[i + 1] == 'u' && i + 5 < len && !memcmp(text + i + 2, "0000", 4) && !nul) nul = 1;
                    if (!nul && kl + 2 < KEY) key[kl++] = text[i], key[kl++] = text[i + 1];
                    i++;
                    continue;
                }
                if (!nul && kl + 1 < KEY) key[kl++] = text[i];
            }
            key[kl] = 0;
            size_t j = i + 1;
            while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) j++;
            const int is_key = j < len && text[j] == ':' && depth > 0 && (depth > DEPTH || !st[depth - 1].is_array);
            if (nul) {
                if (!cap) return 1;
                const int named = depth < DEPTH ? depth : DEPTH;
                if (is_key) put_path(st, depth <= DEPTH ? depth - 1 : DEPTH, key, path, cap); /* the key replaces its object's */
                else put_path(st, named, NULL, path, cap);
                return 1;
            }
            if (is_key && depth <= DEPTH) snprintf(st[depth - 1].key, KEY, "%s", key);
        }
    }
    return 0;
}
