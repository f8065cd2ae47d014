/* runtime.h — envd's plane (E2B's in-sandbox daemon) translated on the host:
 * the Connect protocol codec (JSON over HTTP/1.1: unary messages, server
 * streams of 5-byte envelopes closed by an end-stream message) and the
 * handlers of process.Process and filesystem.Filesystem, each run against one
 * sandbox's kiln-agent connection.  No HTTP server here: a route table maps a
 * method path to a handler that takes the request body and a stream writer,
 * which the HTTP plane (service/) mounts (docs/sandbox-api.md). */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "kiln.h"
#include "guest/guest.h"

/* ===========================================================================
 * Connect protocol codec (connect.c)
 * ========================================================================= */
#define RT_ENVELOPE_HEADER 5u
#define RT_FLAG_COMPRESSED 0x01u
#define RT_FLAG_END_STREAM 0x02u
/* A request message is at most this large (envd's messages are small: the
 * biggest is SendInput's stdin, which the SDK sends in small pieces). */
#define RT_MAX_MESSAGE (4u << 20)
/* Longest id, path, tag, user or command string accepted from a request. */
#define RT_MAX_STRING 4096u

/* Connect's error codes (their snake_case names are the wire form). */
enum rt_code {
	RT_OK = 0,
	RT_CANCELED,
	RT_UNKNOWN,
	RT_INVALID_ARGUMENT,
	RT_DEADLINE_EXCEEDED,
	RT_NOT_FOUND,
	RT_ALREADY_EXISTS,
	RT_PERMISSION_DENIED,
	RT_RESOURCE_EXHAUSTED,
	RT_FAILED_PRECONDITION,
	RT_ABORTED,
	RT_OUT_OF_RANGE,
	RT_UNIMPLEMENTED,
	RT_INTERNAL,
	RT_UNAVAILABLE,
	RT_DATA_LOSS,
	RT_UNAUTHENTICATED,
};
const char *rt_code_name(enum rt_code c);
/* The HTTP status a unary error goes with (Connect's table). */
int rt_code_http_status(enum rt_code c);
/* The code for a kiln_error's kind (not found, exists, invalid, limit, ...). */
enum rt_code rt_code_from_error(const kiln_error *e);

/* Parse one whole request body that holds exactly one envelope (a server
 * stream's request).  The message must be an uncompressed data envelope of at
 * most max bytes holding a JSON object; -1 with an error of kind
 * KILN_E_INVALID (KILN_E_LIMIT when too large) naming what is wrong. */
json_t *rt_envelope_decode_request(const void *body, size_t len, size_t max, kiln_error **err);
/* Parse a unary request body: a JSON object (empty body = {}). */
json_t *rt_unary_decode_request(const void *body, size_t len, size_t max, kiln_error **err);
/* Incremental envelope reader for a stream of envelopes (a client reading a
 * server stream, a test): feed bytes, take whole envelopes. */
struct rt_envelope_reader {
	kiln_buf buf;
	size_t max;
};
void rt_envelope_reader_init(struct rt_envelope_reader *r, size_t max);
void rt_envelope_reader_free(struct rt_envelope_reader *r);
void rt_envelope_reader_feed(struct rt_envelope_reader *r, const void *data, size_t len);
/* 1 with *flags and the message (a copy in out) when one is whole, 0 when
 * more bytes are needed, -1 on an envelope over the limit. */
int rt_envelope_reader_next(struct rt_envelope_reader *r, uint8_t *flags, kiln_buf *out, kiln_error **err);

/* Append one envelope (flags, then the message) to out. */
void rt_envelope_encode(kiln_buf *out, uint8_t flags, const void *msg, size_t len);
/* Append a JSON message as a data envelope. */
void rt_envelope_encode_json(kiln_buf *out, const json_t *msg);
/* Append the end-stream envelope: {} or {"error":{"code","message"}}. */
void rt_envelope_encode_end(kiln_buf *out, enum rt_code code, const char *message);
/* A unary error body {"code","message"}. */
char *rt_error_body(enum rt_code code, const char *message);

/* Request field readers that check type and size: a missing optional field
 * gives the fallback; a wrong type or a string over RT_MAX_STRING bytes (or
 * with a NUL) is an RT_INVALID_ARGUMENT error naming the field. */
int rt_get_string(const json_t *obj, const char *key, bool required, const char **out, kiln_error **err);
int rt_get_int(const json_t *obj, const char *key, int64_t fallback, int64_t *out, kiln_error **err);
int rt_get_bool(const json_t *obj, const char *key, bool fallback, bool *out, kiln_error **err);
/* A base64 "bytes" field, decoded (at most max bytes). */
int rt_get_bytes(const json_t *obj, const char *key, size_t max, kiln_buf *out, kiln_error **err);
/* base64 of data as a JSON string. */
json_t *rt_json_bytes(const void *data, size_t len);

/* ===========================================================================
 * Sandboxes and handlers
 * ========================================================================= */
typedef struct rt_sandbox rt_sandbox;

/* The envd plane of one sandbox over its agent connection, which it takes
 * over.  The connection lives as long as the sandbox does (the daemon's, not
 * an HTTP client's), which is what lets a background process outlive the
 * client that started it: see docs/sandbox-api.md.  env: the template's
 * environment, then create's envVars ("NAME=VALUE", copied; may be NULL);
 * default_user: who runs a request without Authorization (NULL: root). */
rt_sandbox *rt_sandbox_new(guest_conn *conn, const char *const *env, const char *default_user,
			   kiln_error **err);
void rt_sandbox_free(rt_sandbox *sb);

/* What the HTTP plane decoded from the request besides its body. */
struct rt_call {
	const char *user;    /* Authorization: Basic base64("user:"); NULL: the default user */
	uint64_t timeout_ms; /* Connect-Timeout-Ms, 0: none */
	uint32_t keepalive_s; /* Keepalive-Ping-Interval, 0: none */
};

/* Where a handler's answer goes.  begin is called once with the HTTP status
 * and content type before any data; write returns -1 once the client is gone
 * (the handler then stops: nothing is kept for it). */
struct rt_writer {
	int (*begin)(void *ctx, int status, const char *content_type);
	int (*write)(void *ctx, const void *data, size_t len);
	void *ctx;
};

/* A message handler: msg is the decoded request; a unary one sets *reply; a
 * streaming one sends messages through rt_stream_send.  Errors come back as
 * kiln_error with *code set (RT_UNKNOWN if left alone). */
typedef struct rt_stream rt_stream;
typedef int (*rt_handler)(rt_sandbox *sb, const struct rt_call *call, const json_t *msg, json_t **reply,
			  rt_stream *st, enum rt_code *code, kiln_error **err);
int rt_stream_send(rt_stream *st, json_t *msg); /* steals msg; -1: client gone */

struct rt_route {
	const char *path; /* "/process.Process/Start" */
	bool streaming;
	rt_handler fn;
};
/* Every method kiln serves, ended by a zeroed entry. */
extern const struct rt_route rt_routes[];
const struct rt_route *rt_route_find(const char *path);

/* Serve one request: decode body by the route's kind, run the handler, and
 * answer through w — unary: 200 application/json or the error's status with
 * {"code","message"}; stream: 200 application/connect+json, the messages, the
 * end-stream envelope (with the error, if any).  Returns -1 only when the
 * client went away. */
int rt_serve(rt_sandbox *sb, const struct rt_route *r, const struct rt_call *call, const void *body, size_t len,
	     const struct rt_writer *w);

/* Direct use (tests, the CLI): files as the user (the HTTP plane's /files). */
int rt_file_write(rt_sandbox *sb, const char *user, const char *path, const void *data, size_t len,
		  kiln_error **err);
int rt_file_read(rt_sandbox *sb, const char *user, const char *path, kiln_buf *out, kiln_error **err);

#endif
