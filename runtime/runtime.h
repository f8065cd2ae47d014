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
#include "snapshots/snapshots.h"

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
 * default_user: who runs a request without Authorization (NULL: root);
 * default_cwd: a command's cwd when it names none (the template's WORKDIR;
 * NULL: the user's home). */
rt_sandbox *rt_sandbox_new(guest_conn *conn, const char *const *env, const char *default_user,
			   const char *default_cwd, kiln_error **err);
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

/* Files as the user (the HTTP plane's /files): path as envd takes it (a
 * relative one is in the user's home), *abs the file written (may be NULL).
 * A missing directory or file is KILN_E_NOTFOUND, a refusal KILN_E_USAGE. */
int rt_file_write(rt_sandbox *sb, const char *user, const char *path, const void *data, size_t len, char **abs,
		  kiln_error **err);
int rt_file_read(rt_sandbox *sb, const char *user, const char *path, kiln_buf *out, kiln_error **err);

/* A TCP connection to PORT on the sandbox's own 127.0.0.1 (E2B's
 * getHost(port)), whatever its network: *socket_name names an abstract unix
 * socket that takes one connection from this process, whose bytes are the
 * guest connection's, until rt_tunnel_close, which returns why the guest side
 * failed (nothing listening, an agent without `--connect`) or NULL. */
/* E2B's SandboxMetric, from the guest's /proc and statvfs("/"): bytes;
 * cpu_pct the busy share since the previous call (the first: since boot). */
struct rt_metrics {
	uint64_t cpus, mem_total, mem_used, mem_cache, disk_total, disk_used;
	double cpu_pct;
};
int rt_sandbox_metrics(rt_sandbox *sb, struct rt_metrics *m, kiln_error **err);

typedef struct rt_tunnel rt_tunnel;
rt_tunnel *rt_tunnel_open(rt_sandbox *sb, unsigned port, const char **socket_name, kiln_error **err);
char *rt_tunnel_close(rt_tunnel *t);

/* ===========================================================================
 * The sandbox service of a runtime host (host.c, host_life.c): sandboxes
 * made for teams, their limits, warm pools and envd planes.  State lives in
 * snapshots/' records (team and metadata as labels), so a restarted daemon
 * serves every sandbox again; service/ mounts it over HTTP.
 * ========================================================================= */
typedef struct rt_host rt_host;

struct rt_limits {           /* 0: no limit */
	unsigned sandboxes;      /* running at once */
	uint64_t memory_mib;     /* the templates' memory of the running ones */
	unsigned vcpus;
};

struct rt_host_config {
	const char *key_path;    /* the secret envd access tokens derive from (made if missing) */
	struct rt_limits host, team;
	int pool_size;           /* warm sandboxes kept per template once used (0: none) */
	const char *const *pool_templates; /* filled at start; NULL-terminated, may be NULL */
	/* Make a template reference restorable here (pull it, lazily) and check
	 * it (the signing policy): NULL when only local templates are served.
	 * Called before each create and each pool refill. */
	int (*ensure_template)(void *ud, const char *ref, kiln_error **err);
	void *ud;
	/* team's own limits (its quotas) over the copy of `team` it is given;
	 * NULL: every team has `team`'s.  Called under the host's lock. */
	void (*team_limits)(void *limits_ud, const char *team, struct rt_limits *l);
	void *limits_ud;
};

struct rt_info {
	char *id, *team;
	char *template_id;       /* as the create named it */
	char *template_digest;
	char *state;             /* "running" | "paused" */
	char *started;           /* RFC 3339 */
	int64_t end_ms;          /* wall clock ms it is removed at; 0: never */
	unsigned cpus;
	uint64_t memory_mib;
	json_t *metadata;        /* object of strings */
	char token[65];          /* its envd access token */
	bool host_limit;         /* a refused create: the host's limit (else the team's) */
	struct snap_create_stats stats;
};
void rt_info_free(struct rt_info *in);
void rt_info_list_free(struct rt_info *v, size_t n);

/* Open the service: removes (and logs) the teams' sandboxes that died while
 * no daemon watched, starts the pool refill thread. */
rt_host *rt_host_open(const struct rt_host_config *c, kiln_error **err);
/* Stops the refill thread and closes the envd planes; sandboxes keep running. */
void rt_host_close(rt_host *h);

struct rt_create {
	const char *team;
	const char *template_ref; /* what snapshots/ opens */
	const char *template_id;  /* shown back (E2B's templateID); NULL: template_ref */
	const char *const *env;   /* NAME=VALUE for every process; NULL-terminated, may be NULL */
	json_t *metadata;         /* object of strings, may be NULL (borrowed) */
	int64_t timeout_s;        /* 0: none */
};
/* What team holds now as its limits count it (running sandboxes and creates
 * under way: their number, memory, vCPUs), and the limits that apply to it
 * (0: none). */
void rt_host_team_usage(rt_host *h, const char *team, struct rt_limits *used, struct rt_limits *limit);
/* KILN_E_LIMIT names the limit (out->host_limit: the host's). */
int rt_host_create(rt_host *h, const struct rt_create *c, struct rt_info *out, kiln_error **err);
/* Another team's sandbox is KILN_E_NOTFOUND, as one that does not exist. */
int rt_host_get(rt_host *h, const char *team, const char *id, struct rt_info *out, kiln_error **err);
/* team NULL: every team's. */
int rt_host_list(rt_host *h, const char *team, struct rt_info **out, size_t *n, kiln_error **err);
int rt_host_kill(rt_host *h, const char *team, const char *id, kiln_error **err);
/* Removed timeout_s from now; extend_only: never sooner than it was. */
int rt_host_set_timeout(rt_host *h, const char *team, const char *id, int64_t timeout_s, bool extend_only,
			kiln_error **err);
/* KILN_E_EXISTS when it is paused already. */
int rt_host_pause(rt_host *h, const char *team, const char *id, kiln_error **err);
/* Running: its timeout extended; paused: resumed (*resumed) with it. */
int rt_host_connect(rt_host *h, const char *team, const char *id, int64_t timeout_s, bool *resumed,
		    struct rt_info *out, kiln_error **err);
/* The envd access token of a sandbox. */
void rt_host_token(const rt_host *h, const char *id, char out[65]);
/* A running sandbox's envd plane, when token is its access token; anything
 * else (unknown, paused, another's token) is the same KILN_E_NOTFOUND.
 * Held until rt_host_release. */
rt_sandbox *rt_host_envd(rt_host *h, const char *id, const char *token, kiln_error **err);
/* The same without the token: for a sandbox's own ports, which E2B serves
 * to whoever names the sandbox (getHost traffic is public). */
rt_sandbox *rt_host_sandbox(rt_host *h, const char *id, kiln_error **err);
void rt_host_release(rt_host *h, rt_sandbox *sb);

#endif
