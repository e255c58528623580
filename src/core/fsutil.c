/*
 * fsutil.c — atomic file replacement and mkdir -p. See fsutil.h for the recipe and guarantees.
 */
#include "core/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

struct af_atomic_file {
    char *path; /* target */
    char *tmp;  /* temporary next to it */
    char *dir;  /* directory holding both (for the final fsync) */
    int fd;
    size_t size;
    int slot;   /* af_remove_temporaries' table (-1: none) */
};

/* ---- the temporaries a signal handler removes (fsutil.h) ---- */
#define TEMP_PATH 1024
#define TEMP_NAMES 8
typedef struct temp_slot {
    atomic_int state; /* 0 free, 1 being filled, 2 ready */
    int is_dir;
    char path[TEMP_PATH];
    char names[TEMP_NAMES][64];
    int n_names;
} temp_slot;
static temp_slot g_temp[AF_TEMP_SLOTS];

static int temp_claim(const char *path) {
    if (!path || strlen(path) >= TEMP_PATH) return -1;
    for (int i = 0; i < AF_TEMP_SLOTS; i++) {
        int free_ = 0;
        if (atomic_compare_exchange_strong(&g_temp[i].state, &free_, 1)) {
            memcpy(g_temp[i].path, path, strlen(path) + 1);
            g_temp[i].is_dir = 0;
            g_temp[i].n_names = 0;
            return i;
        }
    }
    return -1;
}

int af_temp_file_register(const char *path) {
    int s = temp_claim(path);
    if (s >= 0) atomic_store(&g_temp[s].state, 2);
    return s;
}

int af_temp_dir_register(const char *dir, const char *const *names, int n) {
    int s = temp_claim(dir);
    if (s < 0) return -1;
    g_temp[s].is_dir = 1;
    for (int k = 0; k < n && g_temp[s].n_names < TEMP_NAMES; k++)
        if (names[k] && strlen(names[k]) < 64) memcpy(g_temp[s].names[g_temp[s].n_names++], names[k], strlen(names[k]) + 1);
    atomic_store(&g_temp[s].state, 2);
    return s;
}

void af_temp_dir_unregister(int slot) {
    if (slot >= 0 && slot < AF_TEMP_SLOTS) atomic_store(&g_temp[slot].state, 0);
}

void af_remove_temporaries(void) {
    for (int pass = 0; pass < 2; pass++) /* files first, then the directories they may be in */
        for (int i = 0; i < AF_TEMP_SLOTS; i++) {
            temp_slot *t = &g_temp[i];
            if (atomic_load(&t->state) != 2 || t->is_dir != pass) continue;
            if (!t->is_dir) {
                unlink(t->path);
                continue;
            }
            char p[TEMP_PATH + 80];
            size_t l = strlen(t->path);
            for (int k = 0; k < t->n_names; k++) {
                size_t ln = strlen(t->names[k]);
                memcpy(p, t->path, l);
                p[l] = '/';
                memcpy(p + l + 1, t->names[k], ln + 1);
                unlink(p);
            }
            rmdir(t->path);
        }
}

static atomic_uint g_tmp_counter;

char *af_path_join(const char *dir, const char *name) {
    size_t ld = strlen(dir), ln = strlen(name);
    int slash = ld > 0 && dir[ld - 1] != '/';
    char *s = af_malloc(ld + (size_t)slash + ln + 1);
    if (!s) return NULL;
    memcpy(s, dir, ld);
    if (slash) s[ld] = '/';
    memcpy(s + ld + (size_t)slash, name, ln + 1);
    return s;
}

static void atomic_free(af_atomic_file *f) {
    if (!f) return;
    af_temp_dir_unregister(f->slot); /* committed (renamed) or unlinked by now */
    free(f->path);
    free(f->tmp);
    free(f->dir);
    free(f);
}

af_status af_atomic_open(const char *path, af_atomic_file **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_atomic_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return af_fail(AF_ERR_INVALID_ARG, "af_atomic_open: empty path");
    size_t len = strlen(path);
    if (path[len - 1] == '/') return af_fail(AF_ERR_INVALID_ARG, "%s: path names a directory", path);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return af_fail(AF_ERR_IO, "%s: is a directory, cannot be replaced by a file", path);

    af_atomic_file *f = af_calloc(1, sizeof *f);
    if (!f) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    f->fd = -1;
    f->slot = -1;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) : 0;
    f->path = strdup(path);
    f->dir = af_malloc(dlen + 2);
    size_t tcap = len + 64;
    f->tmp = af_malloc(tcap);
    if (!f->path || !f->dir || !f->tmp) {
        atomic_free(f);
        return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    }
    if (slash) {
        memcpy(f->dir, path, dlen);
        f->dir[dlen] = '\0';
        if (dlen == 0) strcpy(f->dir, "/"); /* "/file" */
    } else {
        strcpy(f->dir, ".");
    }
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned c = atomic_fetch_add(&g_tmp_counter, 1u);
        snprintf(f->tmp, tcap, "%.*s%s.%s.tmp-%ld-%u", (int)dlen, path, slash ? "/" : "", base, (long)getpid(), c);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd >= 0 || errno != EEXIST) break;
    }
    if (f->fd < 0) {
        int e = errno;
        af_status st = af_fail(AF_ERR_IO, "%s: cannot create a temporary file in %s: %s", path, f->dir, strerror(e));
        atomic_free(f);
        return st;
    }
    f->slot = temp_claim(f->tmp); /* a fatal signal removes it (af_remove_temporaries) */
    if (f->slot >= 0) atomic_store(&g_temp[f->slot].state, 2);
    *out = f;
    return AF_OK;
}

af_status af_atomic_write(af_atomic_file *f, const void *data, size_t n) {
    if (!f || f->fd < 0) return af_fail(AF_ERR_INVALID_ARG, "af_atomic_write: file not open");
    const unsigned char *p = data;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(f->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return af_fail(AF_ERR_IO, "%s: write failed at offset %zu: %s", f->path, f->size, strerror(errno));
        }
        if (w == 0) return af_fail(AF_ERR_IO, "%s: write made no progress at offset %zu", f->path, f->size);
        p += w;
        n -= (size_t)w;
        f->size += (size_t)w;
    }
    return AF_OK;
}

size_t af_atomic_size(const af_atomic_file *f) { return f ? f->size : 0; }

void af_atomic_abort(af_atomic_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    atomic_free(f);
}

/* fsync a directory so a rename inside it is durable. Some file systems refuse fsync on a
 * directory descriptor (EINVAL/ENOTSUP): that is not an error, there is nothing more to do. */
static af_status fsync_dir(const char *dir, const char *path) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return af_fail(AF_ERR_IO, "%s: cannot open directory %s to sync it: %s", path, dir, strerror(errno));
    int rc = fsync(dfd);
    int e = errno;
    close(dfd);
    if (rc != 0 && e != EINVAL && e != ENOTSUP)
        return af_fail(AF_ERR_IO, "%s: fsync of directory %s failed: %s", path, dir, strerror(e));
    return AF_OK;
}

af_status af_atomic_commit(af_atomic_file *f) {
    if (!f) return af_fail(AF_ERR_INVALID_ARG, "af_atomic_commit: NULL file");
    if (f->fd < 0) {
        af_atomic_abort(f);
        return af_fail(AF_ERR_INVALID_ARG, "af_atomic_commit: file not open");
    }
    if (fsync(f->fd) != 0) {
        af_status st = af_fail(AF_ERR_IO, "%s: fsync of %s failed: %s", f->path, f->tmp, strerror(errno));
        af_atomic_abort(f);
        return st;
    }
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) {
        af_status st = af_fail(AF_ERR_IO, "%s: close of %s failed: %s", f->path, f->tmp, strerror(errno));
        af_atomic_abort(f);
        return st;
    }
    if (rename(f->tmp, f->path) != 0) {
        af_status st =
            af_fail(AF_ERR_IO, "%s: rename from %s failed: %s", f->path, f->tmp, strerror(errno));
        af_atomic_abort(f);
        return st;
    }
    af_status st = fsync_dir(f->dir, f->path);
    atomic_free(f); /* the temporary no longer exists under its own name */
    return st;
}

af_status af_write_file_atomic(const char *path, const void *data, size_t n) {
    af_atomic_file *f = NULL;
    AF_TRY(af_atomic_open(path, &f));
    af_status st = af_atomic_write(f, data, n);
    if (st != AF_OK) {
        af_atomic_abort(f);
        return st;
    }
    return af_atomic_commit(f);
}

af_status af_check_writable(const char *path) {
    if (!path || !*path) return af_fail(AF_ERR_INVALID_ARG, "af_check_writable: empty path");
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return af_fail(AF_ERR_IO, "%s: is a directory, cannot be replaced by a file", path);
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    af_status st = AF_OK;
    if (stat(dir, &sb) != 0) st = af_fail(AF_ERR_IO, "%s: directory %s: %s", path, dir, strerror(errno));
    else if (!S_ISDIR(sb.st_mode)) st = af_fail(AF_ERR_IO, "%s: directory %s: %s", path, dir, strerror(ENOTDIR));
    else if (access(dir, W_OK | X_OK) != 0) st = af_fail(AF_ERR_IO, "%s: directory %s: %s", path, dir, strerror(errno));
    free(dir);
    return st;
}

af_status af_mkdir_p(const char *path) {
    if (!path || !*path) return af_fail(AF_ERR_INVALID_ARG, "af_mkdir_p: empty path");
    char *buf = strdup(path);
    if (!buf) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
    af_status st = AF_OK;
    for (size_t i = 1; i <= len && st == AF_OK; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0) {
            int e = errno;
            struct stat sb;
            /* name the failing component only when it is a parent, not the path itself */
            int whole = i == len;
            if (e == EEXIST || e == EISDIR || e == EACCES || e == EROFS) {
                /* An existing directory is fine (EACCES/EROFS can come from a parent we may not
                 * write but that already exists). */
                if (stat(buf, &sb) != 0) {
                    st = whole ? af_fail(AF_ERR_IO, "%s: cannot create directory: %s", path, strerror(e))
                               : af_fail(AF_ERR_IO, "%s: cannot create directory %s: %s", path, buf, strerror(e));
                } else if (!S_ISDIR(sb.st_mode)) {
                    st = whole ? af_fail(AF_ERR_IO, "%s: exists and is not a directory", path)
                               : af_fail(AF_ERR_IO, "%s: %s exists and is not a directory", path, buf);
                }
            } else {
                st = whole ? af_fail(AF_ERR_IO, "%s: cannot create directory: %s", path, strerror(e))
                           : af_fail(AF_ERR_IO, "%s: cannot create directory %s: %s", path, buf, strerror(e));
            }
        }
        buf[i] = saved;
    }
    free(buf);
    return st;
}

const char *af_file_kind(unsigned mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO or pipe";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

int af_open_regular(const char *path, const char **why) {
    static _Thread_local char reason[160];
    const char *dummy;
    if (!why) why = &dummy;
    if (!path || !*path) {
        *why = "empty path";
        errno = EINVAL;
        af_fail(AF_ERR_INVALID_ARG, "empty file name");
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        *why = strerror(e);
        af_fail(AF_ERR_IO, "%s: cannot open: %s", path, *why);
        errno = e;
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        *why = strerror(e);
        af_fail(AF_ERR_IO, "%s: cannot stat: %s", path, *why);
        errno = e;
        return -1;
    }
    int is_stdin = !strcmp(path, "/dev/stdin") || !strcmp(path, "/dev/fd/0");
    if (!S_ISREG(sb.st_mode) && !(is_stdin && !S_ISDIR(sb.st_mode))) {
        close(fd);
        if (S_ISDIR(sb.st_mode)) snprintf(reason, sizeof reason, "not a regular file (a directory)");
        else snprintf(reason, sizeof reason, "not a regular file (%s)", af_file_kind((unsigned)sb.st_mode));
        *why = reason;
        af_fail(AF_ERR_IO, "%s: %s", path, reason);
        errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *af_fopen_regular(const char *path, const char **why) {
    int fd = af_open_regular(path, why);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        if (why) *why = strerror(e);
        af_fail(AF_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        errno = e;
    }
    return f;
}

/* afinar's own files (metrics.jsonl of a long run): no size limit beyond memory */
char *af_read_file(const char *path, size_t *len) { return af_read_file_max(path, SIZE_MAX - 1, len, NULL); }

char *af_read_file_max(const char *path, size_t max_bytes, size_t *len, const char **why) {
    if (!max_bytes) max_bytes = AF_READ_FILE_DEFAULT_MAX;
    FILE *f = af_fopen_regular(path, why);
    if (!f) return NULL;
    size_t cap = 4096, n = 0, r;
    char *b = malloc(cap + 1);
    if (!b) errno = ENOMEM;
    int too_big = 0;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n > max_bytes) {
            too_big = 1;
            break;
        }
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                errno = ENOMEM;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    int e = too_big ? EFBIG : ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (b && e) {
        free(b);
        b = NULL;
        if (why) {
            static _Thread_local char big[96];
            snprintf(big, sizeof big, "larger than the limit of %zu bytes", max_bytes);
            *why = too_big ? big : strerror(e);
        }
        errno = e;
    } else if (!b && why) {
        *why = strerror(ENOMEM);
    }
    if (b) {
        b[n] = 0;
        if (len) *len = n;
    }
    return b;
}

af_status af_read_text_file(const char *path, size_t max_bytes, char **text, size_t *len) {
    if (!text) return af_fail(AF_ERR_INVALID_ARG, "af_read_text_file: NULL text");
    *text = NULL;
    if (len) *len = 0;
    if (!path || !*path) return af_fail(AF_ERR_INVALID_ARG, "af_read_text_file: empty path");
    const char *why = NULL;
    char *b = af_read_file_max(path, max_bytes, len, &why);
    if (!b) {
        int e = errno;
        if (e == ENOMEM) return af_fail(AF_ERR_NOMEM, "%s: out of memory", path);
        if (e == EFBIG) return af_fail(AF_ERR_RANGE, "%s: %s", path, why ? why : "too large");
        if (e == EISDIR || e == EINVAL) return af_fail(AF_ERR_IO, "%s: %s", path, why ? why : "not a regular file");
        return af_fail(AF_ERR_IO, "%s: cannot open: %s", path, why ? why : strerror(e));
    }
    *text = b;
    return AF_OK;
}
