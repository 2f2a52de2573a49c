/*
 * sdnotify: tells the service manager what the daemon is doing, for
 * systemd's Type=notify ("READY=1" once it serves, "STOPPING=1" when it
 * begins to stop), without linking libsystemd.
 *
 * The protocol is one datagram of "KEY=value" lines sent to the AF_UNIX
 * socket named by $NOTIFY_SOCKET: a path, or an abstract name written with
 * a leading '@'.  No manager, no variable: nothing to do.
 */
#ifndef SECKILL_SDNOTIFY_H
#define SECKILL_SDNOTIFY_H

#include <stddef.h>

/* Sends 'state' (such as "READY=1") as one datagram to $NOTIFY_SOCKET.
 * Never waits: the send does not block (a manager whose queue is full gets
 * an error, not a stalled daemon).  Returns 1 when sent, 0 when
 * NOTIFY_SOCKET is unset or empty (no manager listens), -1 with a message in
 * err (naming the socket, never the state's values) when the variable is
 * malformed or the send fails. */
int sdnotify(const char *state, char *err, size_t errlen) __attribute__((warn_unused_result));

#endif
