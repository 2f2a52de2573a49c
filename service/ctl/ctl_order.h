/*
 * ctl_order: seckillctl order show|pay|cancel, sale status and health, over
 * the admin API (ctl_admin.h).  An operator's cancel follows the buyer's
 * rules (only a pending order, or a confirmed one within its payment
 * window) and is idempotent: a repeat answers "replayed".
 */
#ifndef SECKILL_CTL_ORDER_H
#define SECKILL_CTL_ORDER_H

#include <stdio.h>

#include "ctl/ctl.h"

void ctl_order_usage(FILE *out);
int ctl_order_main(struct ctl *ctl, int argc, char **argv);
int ctl_sale_main(struct ctl *ctl, int argc, char **argv);
int ctl_health_main(struct ctl *ctl, int argc, char **argv);

#endif
