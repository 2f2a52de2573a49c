#include "core/fault.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

int fault_pause(const char *name)
{
    static atomic_int paused;
    pthread_once(&once, read_env);
    if (!armed || strcmp(armed, name) != 0 || atomic_exchange(&paused, 1) != 0)
        return 0;
    log_error("fault point %s reached: stopping this process (SECKILL_FAULT)", name);
    raise(SIGSTOP);
    log_warn("fault point %s: continued", name);
    return 1;
}
