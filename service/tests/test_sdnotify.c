/*
 * sdnotify: the state reaches a real datagram socket named by NOTIFY_SOCKET,
 * as a path or as an abstract name; no variable means nothing is sent; a
 * malformed name or a socket nobody holds is an error, never a hang; and
 * seckilld, started with NOTIFY_SOCKET as systemd starts a Type=notify unit,
 * says READY=1 once it serves and STOPPING=1 when SIGTERM stops it (against
 * the test stack, which scripts/run-tests.sh starts).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/sdnotify.h"
#include "harness.h"

/* How long the daemon may take to send a notice once expected. */
#define NOTICE_WAIT_S 10

/* A datagram socket bound to 'name' (a path, or '@' and an abstract name),
 * as systemd's manager holds one. */
static int bind_notify_socket(const char *name)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    ck_assert_uint_lt(n, sizeof sa.sun_path);
    memcpy(sa.sun_path, name, n);
    if (name[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(
        bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)),
        0);
    return fd;
}

/* The next datagram on fd is 'want' (none within NOTICE_WAIT_S fails). */
static void expect_datagram(int fd, const char *want)
{
    struct timeval tv = {.tv_sec = NOTICE_WAIT_S};
    ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    ck_assert_str_eq(buf, want);
}

START_TEST(test_ready_reaches_the_socket_named_by_a_path)
{
    char dir[] = "/tmp/seckill-sdnotify-XXXXXX", path[64], err[256] = "";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/notify", dir);
    int fd = bind_notify_socket(path);
    setenv("NOTIFY_SOCKET", path, 1);
    ck_assert_int_eq(sdnotify("READY=1", err, sizeof err), 1);
    expect_datagram(fd, "READY=1");
    ck_assert_int_eq(sdnotify("STOPPING=1", err, sizeof err), 1);
    expect_datagram(fd, "STOPPING=1");
    close(fd);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_an_at_sign_names_an_abstract_socket)
{
    char name[64], err[256] = "";
    snprintf(name, sizeof name, "@seckill-sdnotify-test-%ld", (long)getpid());
    int fd = bind_notify_socket(name);
    setenv("NOTIFY_SOCKET", name, 1);
    ck_assert_int_eq(sdnotify("READY=1", err, sizeof err), 1);
    expect_datagram(fd, "READY=1");
    close(fd);
}
END_TEST

START_TEST(test_without_notify_socket_nothing_is_sent)
{
    char err[256] = "";
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(sdnotify("READY=1", err, sizeof err), 0);
    setenv("NOTIFY_SOCKET", "", 1);
    ck_assert_int_eq(sdnotify("READY=1", err, sizeof err), 0);
    ck_assert_str_eq(err, "");
}
END_TEST

START_TEST(test_a_relative_or_overlong_name_is_refused)
{
    char err[256] = "", longname[200];
    setenv("NOTIFY_SOCKET", "run/notify", 1);
    ck_assert_int_eq(sdnotify("READY=1", err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not an absolute path"));
    memset(longname, 'x', sizeof longname - 1);
    longname[0] = '/';
    longname[sizeof longname - 1] = '\0';
    setenv("NOTIFY_SOCKET", longname, 1);
    err[0] = '\0';
    ck_assert_int_eq(sdnotify("READY=1", err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not an absolute path"));
}
END_TEST

START_TEST(test_a_socket_nobody_holds_is_an_error_not_a_wait)
{
    char name[64], err[256] = "";
    snprintf(name, sizeof name, "@seckill-sdnotify-nobody-%ld", (long)getpid());
    setenv("NOTIFY_SOCKET", name, 1);
    ck_assert_int_eq(sdnotify("READY=1", err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot notify @seckill-sdnotify-nobody-"));
}
END_TEST

START_TEST(test_the_daemon_says_ready_when_it_serves_and_stopping_on_sigterm)
{
    char name[64], env[96];
    snprintf(name, sizeof name, "@seckill-sdnotify-daemon-%ld", (long)getpid());
    snprintf(env, sizeof env, "NOTIFY_SOCKET=%s", name);
    int fd = bind_notify_socket(name);
    const char *extra[] = {env, NULL};
    struct th_daemon d;
    th_daemon_start(&d, extra); /* returns once both listeners accept */
    expect_datagram(fd, "READY=1");
    ck_assert_int_eq(th_daemon_stop(&d), 0);
    expect_datagram(fd, "STOPPING=1");
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sdnotify");
    TCase *tc = tcase_create("sdnotify");
    tcase_add_test(tc, test_ready_reaches_the_socket_named_by_a_path);
    tcase_add_test(tc, test_an_at_sign_names_an_abstract_socket);
    tcase_add_test(tc, test_without_notify_socket_nothing_is_sent);
    tcase_add_test(tc, test_a_relative_or_overlong_name_is_refused);
    tcase_add_test(tc, test_a_socket_nobody_holds_is_an_error_not_a_wait);
    tcase_add_test(tc, test_the_daemon_says_ready_when_it_serves_and_stopping_on_sigterm);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return th_run(s);
}
