/* afinar devices — the compute devices of every backend built in (cpu, vulkan), with memory and
 * features, and why a backend has none (not built in, no loader, no device). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void mib(char *buf, size_t cap, uint64_t b) {
    if (b >= (uint64_t)1 << 30) snprintf(buf, cap, "%.1f GiB", (double)b / 1073741824.0);
    else snprintf(buf, cap, "%.0f MiB", (double)b / 1048576.0);
}

int cmd_devices(int argc, char **argv) {
    const char *C = "devices";
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: afinar devices\n\n"
               "Lists the compute devices of every backend built into afinar (what --device accepts: cpu,\n"
               "vulkan:N, auto), with memory and features; a backend without devices says why.\n");
        return 0;
    }
    if (argc > 1) {
        cli_error(C, "unexpected argument '%s'", argv[1]);
        return 2;
    }
    for (int32_t i = 0; i < af_backend_count(); i++) {
        const char *nm = af_backend_name(i);
        af_device_info d[16];
        int32_t n = 0;
        char why[512] = "";
        if (af_backend_devices(i, d, 16, &n, why, sizeof why) != AF_OK) return cli_fail(C, AF_ERR_INTERNAL);
        if (n == 0) {
            printf("%s: no device (%s)\n", nm, why[0] ? why : "none found");
            continue;
        }
        printf("%s: %d device%s\n", nm, (int)n, n > 1 ? "s" : "");
        for (int32_t k = 0; k < n && k < 16; k++) {
            char id[40], tot[32], fr[32], mx[32];
            if (!strcmp(nm, "cpu")) snprintf(id, sizeof id, "cpu");
            else snprintf(id, sizeof id, "%s:%d", nm, (int)d[k].index);
            mib(tot, sizeof tot, d[k].mem_total);
            mib(fr, sizeof fr, d[k].mem_free);
            printf("  %-10s %s [%s]\n", id, d[k].name, d[k].kind);
            printf("             memory %s%s%s%s", tot, d[k].mem_free ? " (" : "", d[k].mem_free ? fr : "",
                   d[k].mem_free ? " free)" : "");
            if (d[k].max_alloc != UINT64_MAX) {
                mib(mx, sizeof mx, d[k].max_alloc);
                printf(", largest buffer %s", mx);
            }
            printf("\n");
            if (d[k].driver[0]) printf("             driver %s\n", d[k].driver);
            if (d[k].features[0]) printf("             features %s\n", d[k].features);
        }
    }
    return cli_stdout_failed(C);
}
