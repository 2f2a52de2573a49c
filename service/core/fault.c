#include "core/fault.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

static const char *armed;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_env(void)
{
    armed = getenv("SECKILL_FAULT");
}

void fault_point(const char *name)
{
    pthread_once(&once, read_env);
    if (armed && strcmp(armed, name) == 0) {
        log_error("fault point %s reached: killing this process (SECKILL_FAULT)", name);
        raise(SIGKILL);
    }
}
