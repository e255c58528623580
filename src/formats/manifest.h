/*
 * manifest.h — manifest.json: the byte size and SHA-256 of every file afinar wrote into a directory
 * (an adapter directory: best/, final/, merge-adapters' output; a checkpoint-N/ directory), so that
 * a reader can tell a complete, unchanged directory from a corrupted, truncated or edited one
 * before it uses any of it.
 *
 * Format (JSON, written last, atomically, into the directory it describes):
 *   {"format": "afinar-manifest", "version": 1, "algorithm": "sha256",
 *    "files": {"adapter_config.json": {"bytes": 812, "sha256": "<64 hex digits>"}, ...}}
 * SHA-256 is the hash of FIPS 180-4 (NIST, "Secure Hash Standard", 2015), computed by GNU Nettle
 * (Debian nettle-dev; sha256_init / sha256_update / sha256_digest). It guards against accidents
 * (bit rot, a partial copy, a file replaced by hand); it is not a signature: whoever can write the
 * directory can write a matching manifest.
 *
 * Rules a reader applies (af_manifest_verify):
 *   - manifest.json is read without blocking (af_open_regular) and at most AF_MANIFEST_MAX_BYTES;
 *   - "format" must be "afinar-manifest", "version" 1, "algorithm" "sha256"; "files" an object of
 *     1..AF_MANIFEST_MAX_FILES entries, each a plain file name (no '/', not starting with '.', at
 *     most 255 bytes, no duplicate) mapped to {"bytes": integer in [0, 2^53], "sha256": 64 hex};
 *   - every listed file exists as a regular file with that size and that SHA-256;
 *   - every file the caller names in `must_list` that exists in the directory is listed (so a file
 *     the loader reads cannot be swapped in unverified). Files neither listed nor named are ignored.
 */
#ifndef AF_MANIFEST_H
#define AF_MANIFEST_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

#define AF_MANIFEST_FILE "manifest.json"
#define AF_MANIFEST_MAX_FILES 64
#define AF_MANIFEST_MAX_BYTES ((size_t)1 << 20)
#define AF_SHA256_BYTES 32

typedef struct af_manifest_entry {
    char name[256];
    uint64_t bytes;
    uint8_t sha256[AF_SHA256_BYTES];
} af_manifest_entry;

typedef struct af_manifest {
    int32_t n;
    af_manifest_entry files[AF_MANIFEST_MAX_FILES];
} af_manifest;

/* SHA-256 and byte count of the regular file `path` (opened with af_open_regular: a FIFO or device
 * is refused without blocking). Errors: AF_ERR_IO ("PATH: cannot open: ...", "PATH: read failed
 * at offset N: ..."). */
af_status af_sha256_file(const char *path, uint8_t out[AF_SHA256_BYTES], uint64_t *bytes);

/* Parse manifest text (`len` bytes, need not be NUL-terminated) into *out following the rules
 * above; `where` names the file in messages. Errors: AF_ERR_FORMAT ("WHERE: invalid JSON at byte
 * N (truncated?)", "WHERE: files.NAME.sha256: expected 64 hex digits", ...), AF_ERR_NOMEM. */
af_status af_manifest_parse(const char *text, size_t len, const char *where, af_manifest *out);

/* Hash the files `names` [n] of `dir` (each must exist as a regular file) and write
 * dir/manifest.json atomically (af_write_file_atomic). Call it after the last of those files is
 * complete. Errors: AF_ERR_INVALID_ARG (n out of [1, AF_MANIFEST_MAX_FILES], a bad name),
 * AF_ERR_IO, AF_ERR_NOMEM. */
af_status af_manifest_write(const char *dir, const char *const *names, int n);

/* Check dir/manifest.json against the files of `dir` (rules above). No manifest.json: AF_OK with
 * *present = 0 (the caller decides whether one was required); otherwise *present = 1 and AF_OK
 * only when every check passed. `must_list` [n_must] may be NULL. Errors: AF_ERR_FORMAT (a
 * malformed manifest; a size or SHA-256 that differs: "DIR/FILE: SHA-256 differs from
 * manifest.json (the file changed after it was written: corrupted or edited)"; a file in must_list
 * not listed), AF_ERR_IO (a listed file missing or unreadable, manifest.json not a regular file or
 * larger than AF_MANIFEST_MAX_BYTES), AF_ERR_NOMEM. */
af_status af_manifest_verify(const char *dir, const char *const *must_list, int n_must, int *present);

#endif /* AF_MANIFEST_H */
