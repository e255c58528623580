/*
 * fuzz_common.h — helpers shared by the libFuzzer targets (tests/fuzz/fuzz_*.c) and by
 * tests/test_fuzz_regress.c, which #includes every target with FZ_NO_MAIN defined so that the
 * regression test replays inputs through exactly the same entry points (fz_<target>_one).
 *
 * Each target file defines
 *     af_status fz_<target>_one(const uint8_t *data, size_t size);   the whole work for one input
 * and, unless FZ_NO_MAIN is defined, LLVMFuzzerTestOneInput calling it (and LLVMFuzzerInitialize
 * where the target needs one-time set-up). Invariant violations (a parser that accepted something
 * it should not have, a pointer outside the input) go through FZ_FAIL: abort() in the fuzzer (so
 * libFuzzer records the input), a failed CHECK in the regression test (which defines FZ_FAIL).
 */
#ifndef AF_FUZZ_COMMON_H
#define AF_FUZZ_COMMON_H

#include "afinar.h"
#include "core/core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef FZ_FAIL
#define FZ_FAIL(msg, file, line) \
    (fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n", (file), (line), (msg)), abort())
#endif
#define FZ_ASSERT(c)                                   \
    do {                                               \
        if (!(c)) FZ_FAIL(#c, __FILE__, __LINE__);     \
    } while (0)

/* Put `size` bytes into an anonymous memory file and write its /proc/self/fd path (64 bytes) to
 * `path`, so path-based readers (mmap or stdio) read exactly these bytes. Returns the descriptor
 * (close it when done) or -1. */
static inline int fz_memfd(const uint8_t *data, size_t size, char path[64]) {
    int fd = memfd_create("afinar-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

/* The /dev/null stream for describe-style printers (opened once, kept open). */
static inline FILE *fz_devnull(void) {
    static FILE *fp;
    if (!fp) fp = fopen("/dev/null", "w");
    return fp;
}

#endif /* AF_FUZZ_COMMON_H */
