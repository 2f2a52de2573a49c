/*
 * proxy_header: the PROXY protocol's version 1 header (HAProxy's), which a
 * load balancer in front of seckilld sends first on each connection to say
 * whom it is forwarding: "PROXY TCP4 <src> <dst> <sport> <dport>\r\n" (or
 * TCP6, or "PROXY UNKNOWN ...\r\n" for its own health checks), at most
 * PROXY_HEADER_MAX bytes.  The server believes it only from the addresses
 * in http_trusted_proxies; from them it is required.  Pure: no I/O.
 */
#ifndef SECKILL_PROXY_HEADER_H
#define SECKILL_PROXY_HEADER_H

#include <stddef.h>

#define PROXY_HEADER_MAX 107 /* the protocol's own bound, CRLF included */
#define PROXY_ADDR_MAX 46    /* INET6_ADDRSTRLEN */

enum proxy_header_result {
    PROXY_HEADER_MORE = 0, /* no CRLF yet, and still within PROXY_HEADER_MAX */
    PROXY_HEADER_DONE = 1, /* *used bytes are the header; src set ("" for UNKNOWN) */
    PROXY_HEADER_BAD = -1, /* not a valid version 1 header */
};

/* Reads the header at the start of buf[0..len).  On DONE, src (cap >=
 * PROXY_ADDR_MAX) is the client's address as the proxy saw it, in the
 * canonical text form (inet_ntop of the parsed address), "" for UNKNOWN;
 * *used is the header's length. */
enum proxy_header_result proxy_header_parse(const char *buf, size_t len, char *src, size_t cap,
                                            size_t *used);

/* Whether addr (text, as the socket's peer is shown) is one of the
 * comma-separated addresses in list ("" or NULL: none). */
int proxy_header_trusted(const char *list, const char *addr);

#endif
