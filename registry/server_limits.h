/* server_limits.h — what keeps `kiln serve` answering under hostile load:
 * connection tracking with deadlines (request headers, body rate, idle
 * keep-alive) enforced by a watchdog thread, the total-connection headroom
 * (close the oldest idle connection, else answer 503), and a fixed-size table
 * that rate-limits failed authentications per client address and token name.
 * Per-address connection counts are libmicrohttpd's (PER_IP_CONNECTION_LIMIT). */
#ifndef KILN_REGISTRY_SERVER_LIMITS_H
#define KILN_REGISTRY_SERVER_LIMITS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "registry/registry.h"

/* ---- failed-authentication limiter: a fixed table, no allocation after new ---- */
typedef struct reg_authlim reg_authlim;

/* slots entries (rounded up to a power of two); each key may fail `burst`
 * times, then once per refill_s seconds. */
reg_authlim *reg_authlim_new(unsigned slots, unsigned burst, unsigned refill_s);
void reg_authlim_free(reg_authlim *l);
/* Is key (kind 'a' address, 'n' token name) out of tries at now (seconds)?
 * 0 no; else the seconds until the next try (for Retry-After). */
unsigned reg_authlim_blocked(reg_authlim *l, char kind, const char *key, int64_t now);
/* Record a failure of key. */
void reg_authlim_fail(reg_authlim *l, char kind, const char *key, int64_t now);
/* Does key have a failure on record that is not yet forgiven? */
int reg_authlim_failed(reg_authlim *l, char kind, const char *key, int64_t now);
/* Slots in use (for tests), and the table's fixed size in bytes. */
unsigned reg_authlim_used(reg_authlim *l);
size_t reg_authlim_bytes(const reg_authlim *l);

/* ---- connections ---- */
typedef struct reg_limits reg_limits;
typedef struct reg_conn reg_conn;

struct reg_limits_stats {
	uint64_t accepted, closed_header, closed_body_rate, closed_idle, closed_headroom, refused_503;
	int64_t header_max_ms;     /* longest time a request's headers took to arrive */
	int64_t keepalive_gap_max_ms; /* longest idle gap before a request on a reused connection */
};

/* Reads header_timeout_s, body_min_rate, body_rate_window_s, idle_timeout_s,
 * connection_limit, connection_headroom and the auth_fail_* figures of c. */
reg_limits *reg_limits_new(const struct reg_config *c);
int reg_limits_start(reg_limits *l, kiln_error **err);   /* the watchdog thread */
void reg_limits_free(reg_limits *l);                      /* stops it first */
reg_authlim *reg_limits_auth(reg_limits *l);
void reg_limits_stats(reg_limits *l, struct reg_limits_stats *out);

/* The life of a connection, from the server's callbacks (any thread). */
reg_conn *reg_conn_open(reg_limits *l, int fd);
void reg_conn_closed(reg_limits *l, reg_conn *c);
void reg_conn_request_line(reg_limits *l, reg_conn *c);   /* the request line is in */
/* The headers are in: 0 go on, or Retry-After seconds for a 503 (over the
 * headroom with no idle connection to close). */
unsigned reg_conn_headers(reg_limits *l, reg_conn *c);
void reg_conn_body(reg_limits *l, reg_conn *c, size_t n);
void reg_conn_busy(reg_limits *l, reg_conn *c);           /* the body is in, the answer is being made */
void reg_conn_done(reg_limits *l, reg_conn *c);           /* answered: idle keep-alive from now */

/* Raise the soft RLIMIT_NOFILE so that want descriptors fit (up to the hard
 * limit); returns the soft limit in force. */
uint64_t reg_limits_raise_nofile(uint64_t want);

#endif
