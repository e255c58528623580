/*
 * run_lock.h — one writer per run directory. `afinar train -o DIR` (fresh, --overwrite or --resume)
 * holds an exclusive flock(2) on DIR/.afinar.lock from before it looks at DIR until the run ends;
 * a second writer is refused naming the holder's pid. The kernel drops the lock when its holder
 * exits, however it exits (a SIGKILL included), so a lock file left by a killed run is no obstacle.
 * Under MPI only rank 0 (the writer) takes it.
 */
#ifndef AF_RUN_LOCK_H
#define AF_RUN_LOCK_H

#include "afinar.h"

#define AF_RUN_LOCK_FILE ".afinar.lock"

/* Create `dir` if needed and lock it for this process: *fd_out is the lock (>= 0; release with
 * af_run_unlock). Writes this process's pid into the lock file for the message a second writer
 * gets. Errors: AF_ERR_IO "DIR: another afinar run is writing to this directory (pid N); wait for
 * it to end, stop it, or use another -o DIR" (pid "unknown" when it has not written it yet), or a
 * failure to create the directory or the lock file (named, with strerror). *fd_out is -1 on error. */
af_status af_run_lock(const char *dir, int *fd_out);

/* Remove the lock file and release the lock (fd < 0: nothing). `dir` as given to af_run_lock. */
void af_run_unlock(const char *dir, int fd);

#endif /* AF_RUN_LOCK_H */
