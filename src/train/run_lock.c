/*
 * run_lock.c — the run-directory lock of run_lock.h: flock(2) (LOCK_EX | LOCK_NB) on
 * DIR/.afinar.lock. The holder removes the file when it ends; a process that opened the file just
 * before that and then got the lock holds an unlinked file, so after locking the open file's
 * inode is compared with the path's and the attempt is repeated when they differ.
 */
#include "train/run_lock.h"

#include "core/core.h"
#include "core/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

af_status af_run_lock(const char *dir, int *fd_out) {
    *fd_out = -1;
    AF_TRY(af_mkdir_p(dir));
    char *path = af_path_join(dir, AF_RUN_LOCK_FILE);
    if (!path) return af_fail(AF_ERR_NOMEM, "out of memory");
    af_status st = AF_OK;
    for (int attempt = 0; attempt < 100; attempt++) {
        const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
            st = af_fail(AF_ERR_IO, "%s: cannot create the run lock: %s", path, strerror(errno));
            break;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            char pid[32] = "";
            const ssize_t n = e == EWOULDBLOCK ? pread(fd, pid, sizeof pid - 1, 0) : -1;
            close(fd);
            if (e != EWOULDBLOCK) {
                st = af_fail(AF_ERR_IO, "%s: cannot lock: %s", path, strerror(e));
                break;
            }
            pid[n > 0 ? n : 0] = 0;
            pid[strcspn(pid, "\n")] = 0;
            st = af_fail(AF_ERR_IO, "%s: another afinar run is writing to this directory (pid %s); wait for it to end, "
                                    "stop it, or use another -o DIR",
                         dir, pid[0] ? pid : "unknown");
            break;
        }
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            close(fd); /* the holder removed it as we opened it: lock the new one */
            continue;
        }
        char buf[32];
        const int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
            st = af_fail(AF_ERR_IO, "%s: cannot write the run lock: %s", path, strerror(errno));
            unlink(path);
            close(fd);
            break;
        }
        *fd_out = fd;
        break;
    }
    if (st == AF_OK && *fd_out < 0) st = af_fail(AF_ERR_IO, "%s: cannot lock (the file keeps being replaced)", path);
    free(path);
    return st;
}

void af_run_unlock(const char *dir, int fd) {
    if (fd < 0) return;
    char *path = dir ? af_path_join(dir, AF_RUN_LOCK_FILE) : NULL;
    if (path) unlink(path); /* while still holding it: a waiter then sees another inode and retries */
    free(path);
    close(fd);
}
