/* http.c — the HTTP side of `kiln serve`: the libmicrohttpd daemon (one
 * thread per connection, limits per address and in total, deadlines from
 * server_limits.c), its callbacks feeding the router (router.c), and responses
 * with the spec's JSON error bodies. */
#include <arpa/inet.h>
#include <errno.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "registry/internal.h"
#include "registry/server_limits.h"

#define JSON_TYPE "application/json"

/* ---- responses ---- */

static void set_response(reg_req *r, unsigned status, struct MHD_Response *resp)
{
	if (r->resp)
		MHD_destroy_response(r->resp);
	r->resp = resp;
	r->status = status;
	r->sent = 0;
	MHD_add_response_header(resp, "Docker-Distribution-API-Version", "registry/2.0");
}

void reg_respond(reg_req *r, unsigned status, const void *body, size_t len, const char *content_type)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);

	set_response(r, status, resp);
	r->sent = len;
	if (content_type)
		MHD_add_response_header(resp, "Content-Type", content_type);
}

void reg_respond_with(reg_req *r, unsigned status, struct MHD_Response *resp, uint64_t len)
{
	set_response(r, status, resp);
	r->sent = len;
}

struct stream {
	reg_server *srv;           /* outlives every answer: its count */
	reg_stream_read read;
	void *ud;
	void (*free_ud)(void *ud);
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;
	long n = st->read(st->ud, pos, buf, max);

	if (n > 0)
		reg_metrics_streamed(st->srv, (uint64_t)n);
	return n > 0 ? (ssize_t)n : n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls)
{
	struct stream *st = cls;

	if (st->free_ud)
		st->free_ud(st->ud);
	free(st);
}

void reg_respond_stream(reg_req *r, unsigned status, const char *content_type, reg_stream_read read, void *ud,
			void (*free_ud)(void *ud))
{
	struct stream *st = kiln_xcalloc(1, sizeof(*st));
	struct MHD_Response *resp;

	st->srv = r->srv;
	st->read = read;
	st->ud = ud;
	st->free_ud = free_ud;
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, stream_read, st, stream_free);
	set_response(r, status, resp);
	if (content_type)
		MHD_add_response_header(resp, "Content-Type", content_type);
}

void reg_respond_json(reg_req *r, unsigned status, json_t *body, const char *content_type)
{
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;

	/* A body that cannot be built is a bug, never a crash of the server. */
	if (s == NULL) {
		kiln_warn("registry: %s %s: no JSON body for a %u answer", r->method, r->name ? r->name : "", status);
		status = 500;
		s = kiln_xstrdup("{\"errors\":[{\"code\":\"UNKNOWN\",\"message\":\"internal error\",\"detail\":{}}]}");
		content_type = NULL;
	}
	reg_respond(r, status, s, strlen(s), content_type ? content_type : JSON_TYPE);
	free(s);
	json_decref(body);
}

/* Replaces each byte that is not part of valid UTF-8 with '?': messages
 * quote what the client sent (a method, a name unescaped from %ff), and
 * jansson takes only UTF-8. */
static void utf8_clean(char *s)
{
	unsigned char *p = (unsigned char *)s;

	while (*p) {
		unsigned char c = p[0];
		size_t n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
		unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
		unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
		size_t i;

		for (i = 1; i < n; i++)
			if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xbf))
				break;
		if (n == 0 || i < n) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}

void reg_error(reg_req *r, unsigned status, const char *code, const char *fmt, ...)
{
	kiln_buf msg = KILN_BUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	kiln_buf_vaddf(&msg, fmt, ap);
	va_end(ap);
	utf8_clean(msg.buf);
	reg_respond_json(r, status, json_pack("{s:[{s:s,s:s,s:{}}]}", "errors", "code", code, "message", msg.buf, "detail"),
			 NULL);
	kiln_debug("registry: %s %s -> %u %s: %s", r->method, r->name ? r->name : "", status, code, msg.buf);
	kiln_buf_free(&msg);
}

void reg_internal(reg_req *r, kiln_error *err)
{
	if (err && err->kind == KILN_E_QUOTA) { /* the client's to fix: no server log */
		reg_error(r, 403, "DENIED", "%s: nothing was stored", kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	kiln_warn("registry: %s %s: %s", r->method, r->name ? r->name : "", kiln_error_message(err));
	/* A full disk is the operator's to fix and the client's to retry: say so
	 * (507, RFC 4918), without the server's paths, which the log has. */
	if (kiln_error_disk_full(err))
		reg_error(r, 507, "UNKNOWN", "the registry's storage is full (no space left on device): nothing was stored;"
			  " retry once space is freed");
	else
		reg_error(r, 500, "UNKNOWN", "internal error");
	kiln_error_free(err);
}

void reg_header(reg_req *r, const char *name, const char *value)
{
	if (r->resp)
		MHD_add_response_header(r->resp, name, value);
}

/* ---- the libmicrohttpd side: one router call per callback ---- */

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	reg_req *r = cls;

	if (kind == MHD_HEADER_KIND)
		reg_req_add_header(r, key, value);
	else
		reg_req_add_arg(r, key, value);
	return MHD_YES;
}

static reg_conn *conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *i = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return i ? i->socket_context : NULL;
}

static void client_address(struct MHD_Connection *conn, char *out, size_t len)
{
	const union MHD_ConnectionInfo *i = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = i ? i->client_addr : NULL;

	out[0] = '\0';
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)len);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)len);
}

/* Every answer names its request (access_log.c). */
static enum MHD_Result queue(struct MHD_Connection *conn, reg_req *r)
{
	if (r->id[0])
		MHD_add_response_header(r->resp, "X-Request-Id", r->id);
	return MHD_queue_response(conn, r->status, r->resp);
}

/* Over the headroom with no idle connection to close: come back later. */
static enum MHD_Result refuse(reg_req *r, struct MHD_Connection *conn, unsigned retry)
{
	char s[16];

	r->begun = 1;
	r->body_error = 1;
	reg_req_take_id(r);
	reg_error(r, 503, "UNAVAILABLE", "too many connections, retry later");
	snprintf(s, sizeof(s), "%u", retry);
	reg_header(r, "Retry-After", s);
	reg_header(r, "Connection", "close");
	return queue(conn, r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	reg_server *s = cls;
	reg_req *r = *con_cls;
	size_t len = *upload_data_size;
	enum reg_step step;

	if (r == NULL) {
		unsigned retry = reg_conn_headers(s->limits, conn_of(conn));
		r = reg_req_new(s, method, url);
		*con_cls = r;
		MHD_get_connection_values(conn, MHD_HEADER_KIND, collect, r);
		MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect, r);
		client_address(conn, r->client, sizeof(r->client));
		if (retry)
			return refuse(r, conn, retry);
	} else if (len > 0) {
		reg_conn_body(s->limits, conn_of(conn), len);
		*upload_data_size = 0;
	} else if (!r->body_error) {
		reg_conn_busy(s->limits, conn_of(conn));
	}
	step = reg_router_call(r, upload_data, len);
	if (step == REG_STEP_ABORT)
		return MHD_NO;
	if (step == REG_STEP_RESPOND)
		return queue(conn, r);
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	reg_server *s = cls;

	if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		reg_conn_done(s->limits, conn_of(conn));
	reg_req_free(*con_cls);
	*con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	reg_server *s = cls;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *i = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		*socket_context = i ? reg_conn_open(s->limits, i->connect_fd) : NULL;
	} else {
		reg_conn_closed(s->limits, *socket_context);
		*socket_context = NULL;
	}
}

/* Called once the request line is in: the header deadline of a reused
 * connection starts here. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	reg_server *s = cls;

	reg_conn_request_line(s->limits, conn_of(conn));
	return NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	kiln_buf b = KILN_BUF_INIT;

	kiln_buf_vaddf(&b, fmt, ap);
	while (b.len && b.buf[b.len - 1] == '\n')
		b.buf[--b.len] = '\0';
	kiln_debug("microhttpd: %s", b.buf);
	kiln_buf_free(&b);
}

/* Our own listening socket: a clear error (address in use), and socket
 * options that accepted connections inherit. */
static int listen_socket(const struct sockaddr_storage *ss, const struct reg_config *c, kiln_error **err)
{
	socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return kiln_err_errno(err, errno, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* Bounded send buffers share the bandwidth among many concurrent pulls
	 * (measured: 2-3x the throughput and a shorter tail than autotuning). */
	if (c->sndbuf > 0) {
		int sz = (int)c->sndbuf;
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	}
	if (bind(fd, (const struct sockaddr *)ss, len) < 0 || listen(fd, 1024) < 0) {
		kiln_err_errno(err, errno, "listen on %s:%u", c->host, c->port);
		close(fd);
		return -1;
	}
	return fd;
}

static int parse_addr(const struct reg_config *c, struct sockaddr_storage *ss, kiln_error **err)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(c->host, ':')) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(c->port);
		if (inet_pton(AF_INET6, c->host, &a->sin6_addr) == 1)
			return 0;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(c->port);
		if (inet_pton(AF_INET, c->host, &a->sin_addr) == 1)
			return 0;
	}
	return kiln_err(err, KILN_E_USAGE, "listen address '%s' is not an IP address", c->host);
}

reg_server *reg_server_open(const struct reg_config *c, kiln_error **err)
{
	reg_server *s = kiln_xcalloc(1, sizeof(*s));
	char *dbpath = NULL;

	s->metrics.started = (int64_t)time(NULL);
	s->cfg = *c;
	s->cfg.host = kiln_xstrdup(c->host);
	s->cfg.data_dir = kiln_xstrdup(c->data_dir);
	s->cfg.realm = c->realm ? kiln_xstrdup(c->realm) : NULL;
	s->cfg.service = kiln_xstrdup(c->service ? c->service : "kiln");
	s->cfg.build = json_incref(c->build);
	s->cfg.sandboxes = json_incref(c->sandboxes);
	s->cfg.quotas = json_incref(c->quotas);
	s->cfg.retention = json_incref(c->retention);
	/* Its own copies of the S3 settings too: reg_server_config() is a whole
	 * configuration (the build service opens the store with it: tag notes). */
#define DUP(f) s->cfg.f = c->f ? kiln_xstrdup(c->f) : NULL
	DUP(s3_endpoint);
	DUP(s3_region);
	DUP(s3_bucket);
	DUP(s3_access_key);
	DUP(s3_secret_key);
#undef DUP
	s->limits = reg_limits_new(c);
	if (reg_quota_backend_check(c, REG_QUOTA_N, err) < 0 || reg_store_open(&s->store, c, err) < 0)
		goto fail;
	reg_uploads_init(&s->uploads, &s->store);
	/* Queueing blocks the request's thread: only with a thread per connection. */
	reg_streams_init(&s->streams, c->threads == 0 ? c->blob_streams : 0);
	dbpath = kiln_path_join(c->data_dir, "meta.db");
	s->db = reg_db_open(dbpath, err);
	if (s->db == NULL)
		goto fail;
	s->db->quotas = s->cfg.quotas;
	if (c->auth && s->store.ops->auth_key(&s->store, s->db, s->auth_key, err) < 0)
		goto fail;
	free(dbpath);
	return s;
fail:
	free(dbpath);
	reg_server_stop(s);
	return NULL;
}

reg_server *reg_server_start(const struct reg_config *c, kiln_error **err)
{
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
	const union MHD_DaemonInfo *info;
	struct sockaddr_storage ss;
	uint64_t nofile;
	reg_server *s;
	int lfd;

	if (parse_addr(c, &ss, err) < 0)
		return NULL;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	if (c->threads > 0)
		flags = (flags & ~(unsigned)(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL)) | MHD_USE_EPOLL;
	/* Each connection is a descriptor (plus a few for the store and db): the
	 * soft limit, often 1024, would otherwise cap connection_limit. */
	nofile = reg_limits_raise_nofile((uint64_t)c->connection_limit + 64);
	if (nofile < (uint64_t)c->connection_limit + 64)
		kiln_warn("registry: RLIMIT_NOFILE is %llu: fewer than connection_limit (%u) connections will fit",
			  (unsigned long long)nofile, c->connection_limit);
	s = reg_server_open(c, err);
	if (s == NULL)
		return NULL;
	if (reg_limits_start(s->limits, err) < 0)
		goto fail;
	lfd = listen_socket(&ss, c, err);
	if (lfd < 0)
		goto fail;
	s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				  MHD_OPTION_THREAD_POOL_SIZE, c->threads > 0 ? c->threads : 0u, MHD_OPTION_LISTEN_SOCKET, lfd,
				  MHD_OPTION_CONNECTION_LIMIT, c->connection_limit, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
				  c->per_ip_connection_limit, MHD_OPTION_CONNECTION_TIMEOUT, c->timeout_s,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
				  MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
				  (size_t)(128 * 1024), MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, MHD_OPTION_END);
	if (s->mhd == NULL) {
		close(lfd);
		kiln_err(err, KILN_E_IO, "cannot start the HTTP server on %s:%u", c->host, c->port);
		goto fail;
	}
	info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : c->port;
	if (reg_gc_timer_start(s, err) < 0)
		goto fail;
	return s;
fail:
	reg_server_stop(s);
	return NULL;
}

uint16_t reg_server_port(const reg_server *s)
{
	return s->port;
}

const struct reg_config *reg_server_config(const reg_server *s)
{
	return &s->cfg;
}

void reg_server_stop(reg_server *s)
{
	if (s == NULL)
		return;
	reg_gc_timer_stop(s);
	if (s->mhd) {
		struct reg_limits_stats st;
		MHD_stop_daemon(s->mhd);
		reg_limits_stats(s->limits, &st);
		kiln_info("registry: %llu connections; closed: %llu header timeout, %llu slow body, %llu idle, %llu "
			   "for headroom; %llu refused 503; longest headers %lld ms, longest keep-alive gap %lld ms",
			   (unsigned long long)st.accepted, (unsigned long long)st.closed_header,
			   (unsigned long long)st.closed_body_rate, (unsigned long long)st.closed_idle,
			   (unsigned long long)st.closed_headroom, (unsigned long long)st.refused_503,
			   (long long)st.header_max_ms, (long long)st.keepalive_gap_max_ms);
	}
	reg_limits_free(s->limits);
	reg_db_close(s->db);
	if (s->uploads.st) {
		reg_uploads_destroy(&s->uploads);
		reg_streams_destroy(&s->streams);
	}
	reg_store_close(&s->store);
	reg_config_free(&s->cfg);
	free(s);
}
