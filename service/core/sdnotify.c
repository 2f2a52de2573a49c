#include "core/sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Fills sa from the variable's value; returns the address length, or 0 when
 * the name is neither an absolute path nor '@' and an abstract name, or too
 * long for sun_path. */
static socklen_t notify_addr(const char *name, struct sockaddr_un *sa)
{
    size_t n = strlen(name);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if ((name[0] != '/' && name[0] != '@') || n < 2 || n >= sizeof sa->sun_path)
        return 0;
    memcpy(sa->sun_path, name, n);
    if (name[0] == '@')
        sa->sun_path[0] = '\0'; /* abstract: its length, not a NUL, ends the name */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/'));
}

int sdnotify(const char *state, char *err, size_t errlen)
{
    const char *name = getenv("NOTIFY_SOCKET");
    if (!name || !name[0])
        return 0;
    struct sockaddr_un sa;
    socklen_t len = notify_addr(name, &sa);
    if (len == 0) {
        snprintf(err, errlen,
                 "NOTIFY_SOCKET \"%s\" is not an absolute path or an @abstract name of at most "
                 "%zu bytes",
                 name, sizeof sa.sun_path - 1);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "NOTIFY_SOCKET: socket: %s", strerror(errno));
        return -1;
    }
    size_t n = strlen(state);
    ssize_t sent = sendto(fd, state, n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    int saved = errno;
    close(fd);
    if (sent < 0 || (size_t)sent != n) {
        snprintf(err, errlen, "cannot notify %s: %s", name,
                 sent < 0 ? strerror(saved) : "short datagram");
        return -1;
    }
    return 1;
}
