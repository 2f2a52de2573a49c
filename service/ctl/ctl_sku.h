/*
 * ctl_sku: seckillctl sku create|show|list|adjust|reload|patch, over the
 * admin API (ctl_admin.h).  Bodies are checked here by the service's own
 * validators before anything is sent: a bad value is a usage error (exit
 * 2), never a request.
 */
#ifndef SECKILL_CTL_SKU_H
#define SECKILL_CTL_SKU_H

#include <stdio.h>

#include "ctl/ctl.h"

void ctl_sku_usage(FILE *out);
int ctl_sku_main(struct ctl *ctl, int argc, char **argv);

#endif
