/* manifest.c — manifest.json of a directory: sizes and SHA-256 (FIPS 180-4, by GNU Nettle) of the
 * files afinar wrote into it; writing and verification (see manifest.h). */
#include "formats/manifest.h"

#include "core/fsutil.h"

#include <cJSON.h>
#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(SHA256_DIGEST_SIZE == AF_SHA256_BYTES, "SHA-256 digest size");

af_status af_sha256_file(const char *path, uint8_t out[AF_SHA256_BYTES], uint64_t *bytes) {
    int fd = af_open_regular(path, NULL); /* never blocks; refuses a FIFO, device, directory */
    if (fd < 0) return AF_ERR_IO;         /* af_open_regular recorded "PATH: cannot open: ..." */
    enum { CHUNK = 1 << 18 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    }
    struct sha256_ctx h;
    sha256_init(&h);
    uint64_t total = 0;
    af_status st = AF_OK;
    for (;;) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            st = af_fail(AF_ERR_IO, "%s: read failed at offset %llu: %s", path, (unsigned long long)total,
                         strerror(errno));
            break;
        }
        if (r == 0) break;
        sha256_update(&h, (size_t)r, buf);
        total += (uint64_t)r;
    }
    free(buf);
    close(fd);
    if (st != AF_OK) return st;
    sha256_digest(&h, AF_SHA256_BYTES, out);
    if (bytes) *bytes = total;
    return AF_OK;
}

static void to_hex(const uint8_t *d, char hex[2 * AF_SHA256_BYTES + 1]) {
    static const char k[] = "0123456789abcdef";
    for (int i = 0; i < AF_SHA256_BYTES; i++) {
        hex[2 * i] = k[d[i] >> 4];
        hex[2 * i + 1] = k[d[i] & 15];
    }
    hex[2 * AF_SHA256_BYTES] = 0;
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A plain file name of the directory: not empty, at most 255 bytes, no '/', not hidden. */
static int plain_name(const char *s) {
    size_t n = strlen(s);
    return n > 0 && n < 256 && !strchr(s, '/') && s[0] != '.';
}

af_status af_manifest_parse(const char *text, size_t len, const char *where, af_manifest *out) {
    if (!text || !where || !out) return af_fail(AF_ERR_INVALID_ARG, "af_manifest_parse: NULL argument");
    memset(out, 0, sizeof *out);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        const char *ep = cJSON_GetErrorPtr();
        size_t off = ep && ep >= text && ep <= text + len ? (size_t)(ep - text) : len;
        return af_fail(AF_ERR_FORMAT, "%s: invalid JSON at byte %zu of %zu (truncated or corrupted?)", where, off, len);
    }
    af_status st = AF_OK;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
    const cJSON *alg = cJSON_GetObjectItemCaseSensitive(j, "algorithm");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files");
    if (!cJSON_IsObject(j))
        st = af_fail(AF_ERR_FORMAT, "%s: expected a JSON object", where);
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "afinar-manifest") != 0)
        st = af_fail(AF_ERR_FORMAT, "%s: format: expected \"afinar-manifest\"", where);
    else if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        st = af_fail(AF_ERR_FORMAT, "%s: version: expected 1 (written by a newer afinar?)", where);
    else if (!cJSON_IsString(alg) || strcmp(alg->valuestring, "sha256") != 0)
        st = af_fail(AF_ERR_FORMAT, "%s: algorithm: expected \"sha256\"", where);
    else if (!cJSON_IsObject(files) || !files->child)
        st = af_fail(AF_ERR_FORMAT, "%s: files: expected a non-empty object {\"NAME\": {\"bytes\", \"sha256\"}}", where);
    const cJSON *e;
    if (st == AF_OK) cJSON_ArrayForEach(e, files) {
        if (out->n >= AF_MANIFEST_MAX_FILES) {
            st = af_fail(AF_ERR_FORMAT, "%s: files: more than %d entries", where, AF_MANIFEST_MAX_FILES);
            break;
        }
        if (!e->string || !plain_name(e->string)) {
            st = af_fail(AF_ERR_FORMAT, "%s: files: \"%.64s\" is not a plain file name of the directory", where,
                         e->string ? e->string : "");
            break;
        }
        for (int32_t i = 0; i < out->n; i++)
            if (!strcmp(out->files[i].name, e->string)) {
                st = af_fail(AF_ERR_FORMAT, "%s: files: \"%s\" is listed twice", where, e->string);
                break;
            }
        if (st != AF_OK) break;
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(e, "sha256");
        if (!cJSON_IsNumber(b) || !(b->valuedouble >= 0) || b->valuedouble > 9007199254740992.0 ||
            b->valuedouble != (double)(uint64_t)b->valuedouble) {
            st = af_fail(AF_ERR_FORMAT, "%s: files.%s.bytes: expected an integer >= 0", where, e->string);
            break;
        }
        if (!cJSON_IsString(h) || strlen(h->valuestring) != 2 * AF_SHA256_BYTES) {
            st = af_fail(AF_ERR_FORMAT, "%s: files.%s.sha256: expected 64 hex digits", where, e->string);
            break;
        }
        af_manifest_entry *m = &out->files[out->n];
        for (int i = 0; i < AF_SHA256_BYTES && st == AF_OK; i++) {
            int hi = hex_val(h->valuestring[2 * i]), lo = hex_val(h->valuestring[2 * i + 1]);
            if (hi < 0 || lo < 0) st = af_fail(AF_ERR_FORMAT, "%s: files.%s.sha256: expected 64 hex digits", where, e->string);
            else m->sha256[i] = (uint8_t)(hi << 4 | lo);
        }
        if (st != AF_OK) break;
        snprintf(m->name, sizeof m->name, "%s", e->string);
        m->bytes = (uint64_t)b->valuedouble;
        out->n++;
    }
    cJSON_Delete(j);
    if (st != AF_OK) memset(out, 0, sizeof *out);
    return st;
}

af_status af_manifest_write(const char *dir, const char *const *names, int n) {
    if (!dir || !names || n < 1 || n > AF_MANIFEST_MAX_FILES)
        return af_fail(AF_ERR_INVALID_ARG, "af_manifest_write: NULL argument or %d files", n);
    cJSON *j = cJSON_CreateObject();
    cJSON *files = j ? cJSON_CreateObject() : NULL;
    if (!j || !files) {
        cJSON_Delete(j);
        cJSON_Delete(files);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    }
    cJSON_AddStringToObject(j, "format", "afinar-manifest");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "algorithm", "sha256");
    cJSON_AddItemToObject(j, "files", files);
    af_status st = AF_OK;
    for (int i = 0; i < n && st == AF_OK; i++) {
        if (!names[i] || !plain_name(names[i])) {
            st = af_fail(AF_ERR_INVALID_ARG, "af_manifest_write: \"%s\" is not a plain file name", names[i] ? names[i] : "");
            break;
        }
        char *p = af_path_join(dir, names[i]);
        uint8_t d[AF_SHA256_BYTES];
        uint64_t bytes = 0;
        st = p ? af_sha256_file(p, d, &bytes) : af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
        free(p);
        if (st != AF_OK) break;
        char hex[2 * AF_SHA256_BYTES + 1];
        to_hex(d, hex);
        cJSON *f = cJSON_CreateObject();
        if (!f || !cJSON_AddNumberToObject(f, "bytes", (double)bytes) || !cJSON_AddStringToObject(f, "sha256", hex) ||
            !cJSON_AddItemToObject(files, names[i], f)) {
            cJSON_Delete(f);
            st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
        }
    }
    char *txt = st == AF_OK ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (st == AF_OK && !txt) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    char *mp = st == AF_OK ? af_path_join(dir, AF_MANIFEST_FILE) : NULL;
    if (st == AF_OK && !mp) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    if (st == AF_OK) {
        size_t l = strlen(txt);
        txt[l] = '\n'; /* cJSON_Print's buffer ends in the NUL replaced here: a final newline */
        st = af_write_file_atomic(mp, txt, l + 1);
    }
    free(mp);
    free(txt);
    return st;
}

af_status af_manifest_verify(const char *dir, const char *const *must_list, int n_must, int *present) {
    if (!dir || !present) return af_fail(AF_ERR_INVALID_ARG, "af_manifest_verify: NULL argument");
    *present = 0;
    char *mp = af_path_join(dir, AF_MANIFEST_FILE);
    if (!mp) return af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
    struct stat sb;
    if (lstat(mp, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR)) { /* ENOTDIR: `dir` is a file: the reader says so */
        free(mp);
        return AF_OK;
    }
    *present = 1;
    const char *why = NULL;
    size_t len = 0;
    char *txt = af_read_file_max(mp, AF_MANIFEST_MAX_BYTES, &len, &why);
    if (!txt) {
        af_status st = af_fail(errno == ENOMEM ? AF_ERR_NOMEM : AF_ERR_IO, "%s: cannot read: %s", mp,
                               errno == EFBIG ? "larger than 1 MiB (not a manifest afinar wrote)" : why ? why : strerror(errno));
        free(mp);
        return st;
    }
    af_manifest *m = malloc(sizeof *m);
    af_status st = m ? af_manifest_parse(txt, len, mp, m) : af_fail(AF_ERR_NOMEM, "%s: out of memory", mp);
    free(txt);
    for (int i = 0; st == AF_OK && must_list && i < n_must; i++) {
        int listed = 0;
        for (int32_t k = 0; k < m->n && !listed; k++) listed = !strcmp(m->files[k].name, must_list[i]);
        if (listed) continue;
        char *p = af_path_join(dir, must_list[i]);
        if (!p) st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
        else if (lstat(p, &sb) == 0)
            st = af_fail(AF_ERR_FORMAT, "%s: not listed in %s (a file added after the directory was written); "
                                        "remove it or write the directory again", p, AF_MANIFEST_FILE);
        free(p);
    }
    for (int32_t k = 0; st == AF_OK && k < m->n; k++) {
        const af_manifest_entry *e = &m->files[k];
        char *p = af_path_join(dir, e->name);
        if (!p) {
            st = af_fail(AF_ERR_NOMEM, "%s: out of memory", dir);
            break;
        }
        if (lstat(p, &sb) != 0) {
            st = af_fail(AF_ERR_IO, "%s: missing, but listed in %s (an incomplete copy?)", p, AF_MANIFEST_FILE);
        } else if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size != e->bytes) {
            st = af_fail(AF_ERR_FORMAT, "%s: %lld bytes, %s says %llu (truncated, or replaced after it was written)", p,
                         (long long)sb.st_size, AF_MANIFEST_FILE, (unsigned long long)e->bytes);
        } else {
            uint8_t d[AF_SHA256_BYTES];
            uint64_t bytes = 0;
            st = af_sha256_file(p, d, &bytes);
            if (st == AF_OK && (bytes != e->bytes || memcmp(d, e->sha256, AF_SHA256_BYTES) != 0))
                st = af_fail(AF_ERR_FORMAT, "%s: SHA-256 differs from %s (the file changed after it was written: "
                                            "corrupted or edited)", p, AF_MANIFEST_FILE);
        }
        free(p);
    }
    free(m);
    free(mp);
    return st;
}
