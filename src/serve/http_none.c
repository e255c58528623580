/* http_none.c — af_server_run when afinar is built without libmicrohttpd (the Makefile did not find
 * it: apt-get install libmicrohttpd-dev, as scripts/setup.sh does). */
#include "serve/serve.h"

#include "core/core.h"

af_status af_server_run(const af_server_opts *o) {
    (void)o;
    return af_fail(AF_ERR_UNSUPPORTED, "afinar serve is not built in: libmicrohttpd was not found when afinar was "
                                       "built (apt-get install libmicrohttpd-dev, then rebuild)");
}

int af_server_available(void) { return 0; }
