/*
 * fsutil.h — crash-safe file writing and directory creation (POSIX).
 *
 * Atomic replace (the classic POSIX recipe, see rename(2) and the "write-temp, fsync, rename,
 * fsync dir" pattern used by e.g. SQLite and git): data goes to a temporary file created with
 * O_EXCL in the SAME directory as the target (so rename(2) never crosses a file system), the
 * temporary is fsync'ed and closed, renamed over the target, and finally the directory is fsync'ed
 * so the new directory entry is durable. A reader therefore sees either the old complete file or
 * the new complete file, never a half-written one; on any failure the temporary is removed and the
 * target is untouched.
 *
 * Temporary names: "<dir>/.<base>.tmp-<pid>-<counter>" (hidden, unique per process and call).
 * Final permissions: 0666 & ~umask, as for a file created with open(2)/fopen(3).
 */
#ifndef AF_FSUTIL_H
#define AF_FSUTIL_H

#include "core/core.h"

#include <stddef.h>
#include <stdio.h>

/* An in-progress atomic write (opaque). */
typedef struct af_atomic_file af_atomic_file;

/* Start an atomic write of `path`: creates the temporary next to it.
 * `*out` is owned by the caller until af_atomic_commit() or af_atomic_abort(), which free it.
 * Errors: AF_ERR_INVALID_ARG (NULL/empty path, path ending in '/'), AF_ERR_IO ("<path>: is a
 * directory, cannot be replaced by a file" when the target is an existing directory; directory missing,
 * not writable, ...; "<path>: cannot create a temporary file in <dir>: <strerror>"), AF_ERR_NOMEM. */
af_status af_atomic_open(const char *path, af_atomic_file **out);

/* Append n bytes (loops over short writes, retries EINTR). On error the file stays open: the
 * caller must still call af_atomic_abort(), which removes the temporary and leaves the target as it
 * was. Errors: AF_ERR_IO "<target>: write failed at offset N: <strerror>" (N = bytes already
 * written; e.g. ENOSPC "No space left on device", EFBIG "File too large" past RLIMIT_FSIZE). */
af_status af_atomic_write(af_atomic_file *f, const void *data, size_t n);

/* Bytes written so far. */
size_t af_atomic_size(const af_atomic_file *f);

/* Finish: fsync + close the temporary, rename it over the target, fsync the directory.
 * Always frees `f` (on failure the temporary is removed and the target is untouched — except
 * that a failing directory fsync after a successful rename is reported while the new file
 * is already in place). Errors: AF_ERR_IO. */
af_status af_atomic_commit(af_atomic_file *f);

/* Give up: close and unlink the temporary, free `f`. The target is untouched. NULL is a no-op. */
void af_atomic_abort(af_atomic_file *f);

/* af_write_file_atomic and af_check_writable: include/afinar.h ("Files"). */

/* Cleanup on a fatal signal: the temporaries of this process that exist right now are
 * remembered in a fixed table: every af_atomic_open temporary until its commit or abort
 * (automatically), and the temporary directories a caller registers with the names of the files it
 * writes into them (af_temp_dir_register; the files being written there are af_atomic
 * temporaries themselves). af_remove_temporaries unlinks them all and removes the registered
 * directories; it is async-signal-safe (unlink(2), rmdir(2) and atomics only), so a SIGINT /
 * SIGTERM handler calls it before _exit. A table with no free slot just remembers nothing more
 * (the next resume or run cleans hidden temporaries, as before). */
#define AF_TEMP_SLOTS 32
/* Register `dir` holding (at most 8 of) `names` [n]; returns the slot (>= 0) or -1. */
int af_temp_dir_register(const char *dir, const char *const *names, int n);
/* Register the temporary file `path` (one the caller or a child process writes); returns the slot. */
int af_temp_file_register(const char *path);
/* Forget slot `slot` (from af_temp_*_register; -1 is ignored). */
void af_temp_dir_unregister(int slot);
/* af_remove_temporaries: include/afinar.h ("Files"). */

/* mkdir -p: create `path` and any missing parents with mode 0777 & ~umask. An existing directory
 * is fine; an existing non-directory is AF_ERR_IO. Errors: AF_ERR_INVALID_ARG (NULL/empty),
 * AF_ERR_IO ("<path>: cannot create directory: <strerror>", "<path>: exists and is not a
 * directory", or the same naming the parent component that failed), AF_ERR_NOMEM. */
af_status af_mkdir_p(const char *path);

/* Join a directory and a file name with one '/': returns a malloc'ed string owned by the caller
 * (free()), or NULL on allocation failure. */
char *af_path_join(const char *dir, const char *name);

/* The whole file `path` in a malloc'ed buffer with a NUL byte after its end (caller frees with
 * free()); `*len` (may be NULL) receives the byte count (the file may itself hold NUL bytes).
 * The file is opened with af_open_regular (never blocks on a FIFO; a non-regular file is refused)
 * and read up to `max_bytes` (0: AF_READ_FILE_DEFAULT_MAX). NULL with errno set when the file cannot
 * be opened or read (EISDIR for a directory, EINVAL for another non-regular file, EFBIG past
 * max_bytes, ENOMEM when out of memory); `*why` (may be NULL) then receives a static reason text
 * ("No such file or directory", "not a regular file (a FIFO or pipe)", "larger than the limit").
 * Records no message: the caller words its own error. */
#define AF_READ_FILE_DEFAULT_MAX ((size_t)64 << 20)
/* af_read_file: no size limit (for afinar's own files, e.g. metrics.jsonl); af_read_file_max for
 * files from outside. */
char *af_read_file(const char *path, size_t *len);
char *af_read_file_max(const char *path, size_t max_bytes, size_t *len, const char **why);

/* Open `path` for reading WITHOUT BLOCKING and refuse anything but a regular file: open(2) with
 * O_RDONLY | O_NONBLOCK | O_CLOEXEC (so a FIFO with no writer does not block), fstat(2), refuse a
 * directory, FIFO, device or socket, then clear O_NONBLOCK. Exception, the stdin convention: the
 * paths "/dev/stdin" and "/dev/fd/0" may also be a pipe, FIFO, socket or terminal (not a directory).
 * Returns the descriptor (caller closes), or -1 with errno set (open's errno; EISDIR for a
 * directory; EINVAL for another non-regular file), `*why` (may be NULL) set to a static reason
 * ("<strerror>" or "not a regular file (a FIFO or pipe)"), and a message recorded (af_fail,
 * AF_ERR_IO): "<path>: cannot open: <strerror>" or "<path>: not a regular file (a directory)". */
int af_open_regular(const char *path, const char **why);
/* The same as a stdio stream opened "rb" (fdopen); NULL on failure as above. */
FILE *af_fopen_regular(const char *path, const char **why);
/* The kind of a non-regular st_mode in words ("a directory", "a FIFO or pipe", "a character device",
 * "a block device", "a socket", "not a regular file"). */
const char *af_file_kind(unsigned mode);

#endif /* AF_FSUTIL_H */
