/* proto_msg.c — the agent protocol's typed payloads (HELLO, EXEC, EXIT, STAT,
 * ERROR, UPLOAD/DOWNLOAD) as TLV fields, and their strict decoders: the agent
 * and the host both parse the other side's bytes here, so every length, list
 * size and string is checked before use.  libc only (linked into the agent). */
#include <stdlib.h>
#include <string.h>

#include "guest/guest.h"

/* Field tags, per message. */
enum { HELLO_VERSION = 1, HELLO_CAPS, HELLO_AGENT, HELLO_PID };
enum {
	EXEC_ARG = 1, EXEC_ENV, EXEC_CWD, EXEC_UID, EXEC_GID, EXEC_GROUP, EXEC_ENV_SET, EXEC_TIMEOUT, EXEC_FLAGS,
	EXEC_USER, EXEC_ROOT, EXEC_LOG_DIR,
};
enum { EXIT_CODE = 1, EXIT_SIGNAL, EXIT_TIMED_OUT };
enum { XFER_DIR = 1, XFER_TIMEOUT, XFER_NAME };
enum { STATQ_PATH = 1, STATQ_FOLLOW, STATQ_XATTRS };
enum { STAT_MODE = 1, STAT_UID, STAT_GID, STAT_SIZE, STAT_MTIME, STAT_MTIME_NSEC, STAT_LINK, STAT_XNAME, STAT_XVALUE };
enum { ERR_ERRNO = 1, ERR_MSG };
enum { IDENT_TIME_SEC = 1, IDENT_TIME_NSEC, IDENT_HOSTNAME, IDENT_ENTROPY, IDENT_NET };

struct tlv {
	uint16_t tag;
	uint32_t len;
	const uint8_t *val;
};

/* 1: a field in *t; 0: end of payload; -1: truncated field. */
static int tlv_next(const uint8_t **p, size_t *n, struct tlv *t, const char **why)
{
	if (*n == 0)
		return 0;
	if (*n < 6) {
		*why = "truncated field header";
		return -1;
	}
	t->tag = (uint16_t)((*p)[0] << 8 | (*p)[1]);
	t->len = guest_get_u32(*p + 2);
	if (t->len > *n - 6) {
		*why = "field runs past the end of the frame";
		return -1;
	}
	t->val = *p + 6;
	*p += 6 + (size_t)t->len;
	*n -= 6 + (size_t)t->len;
	return 1;
}

static int get_u64(const struct tlv *t, uint64_t *out, const char **why)
{
	if (t->len != 8) {
		*why = "integer field is not 8 bytes";
		return -1;
	}
	*out = (uint64_t)guest_get_u32(t->val) << 32 | guest_get_u32(t->val + 4);
	return 0;
}

static int get_str(const struct tlv *t, char **out, const char **why)
{
	char *s;

	if (*out != NULL) {
		*why = "duplicate string field";
		return -1;
	}
	if (memchr(t->val, 0, t->len) != NULL) {
		*why = "string field contains a NUL byte";
		return -1;
	}
	s = malloc((size_t)t->len + 1);
	if (s == NULL) {
		*why = "out of memory";
		return -1;
	}
	memcpy(s, t->val, t->len);
	s[t->len] = '\0';
	*out = s;
	return 0;
}

/* Append a string to a NULL-terminated list, bounded by GUEST_MAX_LIST. */
static int push_str(const struct tlv *t, char ***list, size_t *n, const char **why)
{
	char *s = NULL;
	char **nl;

	if (*n >= GUEST_MAX_LIST) {
		*why = "too many list entries";
		return -1;
	}
	if (get_str(t, &s, why) < 0)
		return -1;
	nl = realloc(*list, (*n + 2) * sizeof(char *));
	if (nl == NULL) {
		free(s);
		*why = "out of memory";
		return -1;
	}
	nl[(*n)++] = s;
	nl[*n] = NULL;
	*list = nl;
	return 0;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* ---- HELLO ---------------------------------------------------------------- */

void guest_encode_hello(struct guest_wbuf *w, uint32_t id, const struct guest_hello *m)
{
	size_t start = guest_frame_begin(w, GUEST_F_HELLO, id);

	guest_tlv_u64(w, HELLO_VERSION, m->version);
	guest_tlv_u64(w, HELLO_CAPS, m->caps);
	if (m->agent)
		guest_tlv_str(w, HELLO_AGENT, m->agent);
	guest_tlv_u64(w, HELLO_PID, (uint64_t)m->pid);
	guest_frame_end(w, start);
}

int guest_decode_hello(const uint8_t *p, size_t n, struct guest_hello *m, const char **why)
{
	struct tlv t;
	uint64_t v;
	bool have_version = false;
	int r;

	memset(m, 0, sizeof(*m));
	while ((r = tlv_next(&p, &n, &t, why)) > 0) {
		switch (t.tag) {
		case HELLO_VERSION:
			if (get_u64(&t, &v, why) < 0)
				goto fail;
			if (v > UINT32_MAX) {
				*why = "protocol version out of range";
				goto fail;
			}
			m->version = (uint32_t)v;
			have_version = true;
			break;
		case HELLO_CAPS:
			if (get_u64(&t, &m->caps, why) < 0)
				goto fail;
			break;
		case HELLO_AGENT:
			if (get_str(&t, &m->agent, why) < 0)
				goto fail;
			break;
		case HELLO_PID:
			if (get_u64(&t, &v, why) < 0)
				goto fail;
			m->pid = (int64_t)v;
			break;
		}
	}
	if (r < 0)
		goto fail;
	if (!have_version) {
		*why = "HELLO without a protocol version";
		goto fail;
	}
	return 0;
fail:
	guest_hello_free(m);
	return -1;
}

void guest_hello_free(struct guest_hello *m)
{
	free(m->agent);
	memset(m, 0, sizeof(*m));
}

/* ---- EXEC ----------------------------------------------------------------- */

void guest_encode_exec(struct guest_wbuf *w, uint32_t id, const struct guest_exec_req *m)
{
	size_t start = guest_frame_begin(w, GUEST_F_EXEC, id);

	for (size_t i = 0; i < m->argc; i++)
		guest_tlv_str(w, EXEC_ARG, m->argv[i]);
	if (m->env) {
		guest_tlv_u64(w, EXEC_ENV_SET, 1);
		for (size_t i = 0; i < m->envc; i++)
			guest_tlv_str(w, EXEC_ENV, m->env[i]);
	}
	if (m->cwd)
		guest_tlv_str(w, EXEC_CWD, m->cwd);
	if (m->uid >= 0)
		guest_tlv_u64(w, EXEC_UID, (uint64_t)m->uid);
	if (m->gid >= 0)
		guest_tlv_u64(w, EXEC_GID, (uint64_t)m->gid);
	for (size_t i = 0; i < m->ngroups; i++)
		guest_tlv_u64(w, EXEC_GROUP, m->groups[i]);
	if (m->timeout_ms)
		guest_tlv_u64(w, EXEC_TIMEOUT, m->timeout_ms);
	if (m->flags)
		guest_tlv_u64(w, EXEC_FLAGS, m->flags);
	if (m->user)
		guest_tlv_str(w, EXEC_USER, m->user);
	if (m->root)
		guest_tlv_str(w, EXEC_ROOT, m->root);
	if (m->log_dir)
		guest_tlv_str(w, EXEC_LOG_DIR, m->log_dir);
	guest_frame_end(w, start);
}

static int get_id(const struct tlv *t, int64_t *out, const char **why)
{
	uint64_t v;

	if (get_u64(t, &v, why) < 0)
		return -1;
	if (v > UINT32_MAX - 1) { /* (uid_t)-1 means "unchanged" to the kernel */
		*why = "uid/gid out of range";
		return -1;
	}
	*out = (int64_t)v;
	return 0;
}

int guest_decode_exec(const uint8_t *p, size_t n, struct guest_exec_req *m, const char **why)
{
	struct tlv t;
	uint64_t v;
	bool env_set = false;
	int r;

	memset(m, 0, sizeof(*m));
	m->uid = m->gid = -1;
	while ((r = tlv_next(&p, &n, &t, why)) > 0) {
		switch (t.tag) {
		case EXEC_ARG:
			if (push_str(&t, &m->argv, &m->argc, why) < 0)
				goto fail;
			break;
		case EXEC_ENV:
			if (push_str(&t, &m->env, &m->envc, why) < 0)
				goto fail;
			break;
		case EXEC_ENV_SET:
			env_set = true;
			break;
		case EXEC_CWD:
			if (get_str(&t, &m->cwd, why) < 0)
				goto fail;
			break;
		case EXEC_UID:
			if (get_id(&t, &m->uid, why) < 0)
				goto fail;
			break;
		case EXEC_GID:
			if (get_id(&t, &m->gid, why) < 0)
				goto fail;
			break;
		case EXEC_GROUP: {
			int64_t g;
			uint32_t *ng;
			if (get_id(&t, &g, why) < 0)
				goto fail;
			if (m->ngroups >= GUEST_MAX_LIST) {
				*why = "too many supplementary groups";
				goto fail;
			}
			ng = realloc(m->groups, (m->ngroups + 1) * sizeof(*ng));
			if (ng == NULL) {
				*why = "out of memory";
				goto fail;
			}
			ng[m->ngroups++] = (uint32_t)g;
			m->groups = ng;
			break;
		}
		case EXEC_TIMEOUT:
			if (get_u64(&t, &m->timeout_ms, why) < 0)
				goto fail;
			break;
		case EXEC_USER:
			if (get_str(&t, &m->user, why) < 0)
				goto fail;
			break;
		case EXEC_ROOT:
			if (get_str(&t, &m->root, why) < 0)
				goto fail;
			break;
		case EXEC_LOG_DIR:
			if (get_str(&t, &m->log_dir, why) < 0)
				goto fail;
			break;
		case EXEC_FLAGS:
			if (get_u64(&t, &v, why) < 0)
				goto fail;
			if (v & ~(uint64_t)(GUEST_EXEC_STDIN | GUEST_EXEC_DETACH | GUEST_EXEC_NONET)) {
				*why = "unknown exec flags";
				goto fail;
			}
			m->flags = (uint32_t)v;
			break;
		}
	}
	if (r < 0)
		goto fail;
	if (m->argc == 0 || m->argv[0][0] == '\0') {
		*why = "exec without a program";
		goto fail;
	}
	if (env_set && m->env == NULL) {
		/* An explicitly empty environment. */
		m->env = calloc(1, sizeof(char *));
		if (m->env == NULL) {
			*why = "out of memory";
			goto fail;
		}
	}
	if (!env_set && m->env != NULL) {
		*why = "env entries without the env flag";
		goto fail;
	}
	for (size_t i = 0; i < m->envc; i++) {
		if (strchr(m->env[i], '=') == NULL || m->env[i][0] == '=') {
			*why = "env entry is not NAME=VALUE";
			goto fail;
		}
	}
	if (m->ngroups > 0 && m->uid < 0) {
		*why = "supplementary groups without a uid";
		goto fail;
	}
	if (m->user && (m->uid >= 0 || m->gid >= 0 || m->ngroups > 0 || m->user[0] == '\0')) {
		*why = "user must be non-empty and excludes uid, gid and groups";
		goto fail;
	}
	if (m->log_dir && (m->log_dir[0] != '/' || !(m->flags & GUEST_EXEC_DETACH))) {
		*why = "a log dir must be absolute and is for detached processes";
		goto fail;
	}
	return 0;
fail:
	guest_exec_req_free(m);
	return -1;
}

void guest_exec_req_free(struct guest_exec_req *m)
{
	free_strv(m->argv, m->argc);
	free_strv(m->env, m->envc);
	free(m->cwd);
	free(m->groups);
	free(m->user);
	free(m->root);
	free(m->log_dir);
	memset(m, 0, sizeof(*m));
	m->uid = m->gid = -1;
}

/* ---- EXIT ----------------------------------------------------------------- */

void guest_encode_exit(struct guest_wbuf *w, uint32_t id, const struct guest_exit *m)
{
	size_t start = guest_frame_begin(w, GUEST_F_EXIT, id);

	guest_tlv_u64(w, EXIT_CODE, (uint64_t)(int64_t)m->code);
	guest_tlv_u64(w, EXIT_SIGNAL, (uint64_t)(int64_t)m->signal);
	if (m->timed_out)
		guest_tlv_u64(w, EXIT_TIMED_OUT, 1);
	guest_frame_end(w, start);
}

int guest_decode_exit(const uint8_t *p, size_t n, struct guest_exit *m, const char **why)
{
	struct tlv t;
	uint64_t v;
	int r;

	memset(m, 0, sizeof(*m));
	while ((r = tlv_next(&p, &n, &t, why)) > 0) {
		if (t.tag != EXIT_CODE && t.tag != EXIT_SIGNAL && t.tag != EXIT_TIMED_OUT)
			continue;
		if (get_u64(&t, &v, why) < 0)
			return -1;
		if (t.tag == EXIT_TIMED_OUT) {
			m->timed_out = v != 0;
			continue;
		}
		if (v > 255) {
			*why = "exit code or signal out of range";
			return -1;
		}
		if (t.tag == EXIT_CODE)
			m->code = (int32_t)v;
		else
			m->signal = (int32_t)v;
	}
	return r;
}

/* ---- UPLOAD / DOWNLOAD ---------------------------------------------------- */

void guest_encode_xfer(struct guest_wbuf *w, uint8_t type, uint32_t id, const struct guest_xfer_req *m)
{
	size_t start = guest_frame_begin(w, type, id);

	guest_tlv_str(w, XFER_DIR, m->dir);
	if (m->timeout_ms)
		guest_tlv_u64(w, XFER_TIMEOUT, m->timeout_ms);
	if (m->name)
		guest_tlv_str(w, XFER_NAME, m->name);
	guest_frame_end(w, start);
}

int guest_decode_xfer(const uint8_t *p, size_t n, struct guest_xfer_req *m, const char **why)
{
	struct tlv t;
	int r;

	memset(m, 0, sizeof(*m));
	while ((r = tlv_next(&p, &n, &t, why)) > 0) {
		if (t.tag == XFER_DIR && get_str(&t, &m->dir, why) < 0)
			goto fail;
		if (t.tag == XFER_TIMEOUT && get_u64(&t, &m->timeout_ms, why) < 0)
			goto fail;
		if (t.tag == XFER_NAME && get_str(&t, &m->name, why) < 0)
			goto fail;
	}
	if (r < 0)
		goto fail;
	if (m->dir == NULL || m->dir[0] != '/') {
		*why = "transfer needs an absolute directory";
		goto fail;
	}
	if (m->name && (m->name[0] == '\0' || strchr(m->name, '/') || strcmp(m->name, ".") == 0 ||
			strcmp(m->name, "..") == 0)) {
		*why = "a transfer's entry name must be one path component";
		goto fail;
	}
	return 0;
fail:
	guest_xfer_req_free(m);
	return -1;
}

void guest_xfer_req_free(struct guest_xfer_req *m)
{
	free(m->dir);
	free(m->name);
	memset(m, 0, sizeof(*m));
}

/* ---- IDENTITY ------------------------------------------------------------- */

void guest_encode_identity(struct guest_wbuf *w, uint32_t id, const struct guest_identity *m)
{
	size_t start = guest_frame_begin(w, GUEST_F_IDENTITY, id);

	if (m->set_time) {
		guest_tlv_u64(w, IDENT_TIME_SEC, (uint64_t)m->time_sec);
		guest_tlv_u64(w, IDENT_TIME_NSEC, m->time_nsec);
	}
	if (m->hostname)
		guest_tlv_str(w, IDENT_HOSTNAME, m->hostname);
	if (m->entropy)
		guest_tlv_bytes(w, IDENT_ENTROPY, m->entropy, m->entropy_len);
	if (m->set_net) {
		/* MAC, address, prefix, gateway: 6 + 4 + 1 + 4 bytes, big-endian */
		uint8_t b[15];
		memcpy(b, m->mac, 6);
		for (int i = 0; i < 4; i++) {
			b[6 + i] = (uint8_t)(m->ipv4 >> (24 - 8 * i));
			b[11 + i] = (uint8_t)(m->gateway >> (24 - 8 * i));
		}
		b[10] = m->prefix;
		guest_tlv_bytes(w, IDENT_NET, b, sizeof(b));
	}
	guest_frame_end(w, start);
}

int guest_decode_identity(const uint8_t *p, size_t n, struct guest_identity *m, const char **why)
{
	struct tlv t;
	uint64_t v;
	bool have_sec = false, have_nsec = false;
	int r;

	memset(m, 0, sizeof(*m));
	while ((r = tlv_next(&p, &n, &t, why)) > 0) {
		switch (t.tag) {
		case IDENT_TIME_SEC:
			if (get_u64(&t, &v, why) < 0)
				goto fail;
			m->time_sec = (int64_t)v;
			have_sec = true;
			break;
		case IDENT_TIME_NSEC:
			if (get_u64(&t, &v, why) < 0)
				goto fail;
			if (v >= 1000000000u) {
				*why = "nanoseconds out of range";
				goto fail;
			}
			m->time_nsec = (uint32_t)v;
			have_nsec = true;
			break;
		case IDENT_HOSTNAME:
			if (get_str(&t, &m->hostname, why) < 0)
				goto fail;
			if (m->hostname[0] == '\0' || strlen(m->hostname) > GUEST_MAX_HOSTNAME) {
				*why = "hostname must be 1-64 bytes";
				goto fail;
			}
			break;
		case IDENT_ENTROPY:
			if (m->entropy) {
				*why = "duplicate entropy field";
				goto fail;
			}
			if (t.len == 0 || t.len > GUEST_MAX_ENTROPY) {
				*why = "entropy must be 1-512 bytes";
				goto fail;
			}
			if ((m->entropy = malloc(t.len)) == NULL) {
				*why = "out of memory";
				goto fail;
			}
			memcpy(m->entropy, t.val, t.len);
			m->entropy_len = t.len;
			break;
		case IDENT_NET: {
			const uint8_t *b = t.val;
			if (t.len != 15 || b[10] == 0 || b[10] > 32 || (b[0] & 1)) {
				*why = "network identity must be a unicast MAC, an address, a prefix 1-32, a gateway";
				goto fail;
			}
			memcpy(m->mac, b, 6);
			m->ipv4 = m->gateway = 0;
			for (int i = 0; i < 4; i++) {
				m->ipv4 = m->ipv4 << 8 | b[6 + i];
				m->gateway = m->gateway << 8 | b[11 + i];
			}
			m->prefix = b[10];
			m->set_net = true;
			break;
		}
		}
	}
	if (r < 0)
		goto fail;
	if (have_sec != have_nsec) {
		*why = "time needs both seconds and nanoseconds";
		goto fail;
	}
	m->set_time = have_sec;
	return 0;
fail:
	guest_identity_free(m);
	return -1;
}

void guest_identity_free(struct guest_identity *m)
{
	free(m->hostname);
	free(m->entropy);
	memset(m, 0, sizeof(*m));
}

/* ---- STAT ----------------------------------------------------------------- */

void guest_encode_stat_req(struct guest_wbuf *w, uint32_t id, const struct guest_stat_req *m)
{
	size_t start = guest_frame_begin(w, GUEST_F_STAT, id);

	guest_tlv_str(w, STATQ_PATH, m->path);
	if (m->follow)
		guest_tlv_u64(w, STATQ_FOLLOW, 1);
	if (m->xattrs)
		guest_tlv_u64(w, STATQ_XATTRS, 1);
	guest_frame_end(w, start);
}

int guest_decode_stat_req(const uint8_t *p, size_t n, struct guest_stat_req *m, const char **why)
{
	struct tlv t;
	uint64_t v;
	int r;

	memset(m, 0, sizeof(*m));
	while ((r = tlv_next(&p, &n, &t, why)) > 0) {
		if (t.tag == STATQ_PATH && get_str(&t, &m->path, why) < 0)
			goto fail;
		if (t.tag == STATQ_FOLLOW || t.tag == STATQ_XATTRS) {
			if (get_u64(&t, &v, why) < 0)
				goto fail;
			if (t.tag == STATQ_FOLLOW)
				m->follow = v != 0;
			else
				m->xattrs = v != 0;
		}
	}
	if (r < 0)
		goto fail;
	if (m->path == NULL || m->path[0] == '\0') {
		*why = "stat without a path";
		goto fail;
	}
	return 0;
fail:
	guest_stat_req_free(m);
	return -1;
}

void guest_stat_req_free(struct guest_stat_req *m)
{
	free(m->path);
	memset(m, 0, sizeof(*m));
}

int guest_encode_stat(struct guest_wbuf *w, uint32_t id, const struct guest_stat *m)
{
	size_t start = guest_frame_begin(w, GUEST_F_STAT_REPLY, id);

	guest_tlv_u64(w, STAT_MODE, m->mode);
	guest_tlv_u64(w, STAT_UID, m->uid);
	guest_tlv_u64(w, STAT_GID, m->gid);
	guest_tlv_u64(w, STAT_SIZE, m->size);
	guest_tlv_u64(w, STAT_MTIME, (uint64_t)m->mtime_sec);
	guest_tlv_u64(w, STAT_MTIME_NSEC, m->mtime_nsec);
	if (m->link)
		guest_tlv_str(w, STAT_LINK, m->link);
	for (size_t i = 0; i < m->nxattrs; i++) {
		guest_tlv_str(w, STAT_XNAME, m->xattrs[i].name);
		guest_tlv_bytes(w, STAT_XVALUE, m->xattrs[i].value, m->xattrs[i].len);
	}
	return guest_frame_end(w, start);
}

int guest_decode_stat(const uint8_t *p, size_t n, struct guest_stat *m, const char **why)
{
	struct tlv t;
	uint64_t v;
	bool have_mode = false;
	int r;

	memset(m, 0, sizeof(*m));
	while ((r = tlv_next(&p, &n, &t, why)) > 0) {
		if (t.tag == STAT_LINK) {
			if (get_str(&t, &m->link, why) < 0)
				goto fail;
			continue;
		}
		if (t.tag == STAT_XNAME) {
			struct guest_xattr *nx;
			if (m->nxattrs > 0 && m->xattrs[m->nxattrs - 1].value == NULL) {
				*why = "xattr name without a value";
				goto fail;
			}
			if (m->nxattrs >= GUEST_MAX_XATTRS) {
				*why = "too many xattrs";
				goto fail;
			}
			nx = realloc(m->xattrs, (m->nxattrs + 1) * sizeof(*nx));
			if (nx == NULL) {
				*why = "out of memory";
				goto fail;
			}
			m->xattrs = nx;
			memset(&nx[m->nxattrs], 0, sizeof(*nx));
			if (get_str(&t, &nx[m->nxattrs].name, why) < 0)
				goto fail;
			m->nxattrs++;
			continue;
		}
		if (t.tag == STAT_XVALUE) {
			struct guest_xattr *x = m->nxattrs ? &m->xattrs[m->nxattrs - 1] : NULL;
			if (x == NULL || x->value != NULL) {
				*why = "xattr value without a name";
				goto fail;
			}
			x->value = malloc(t.len ? t.len : 1);
			if (x->value == NULL) {
				*why = "out of memory";
				goto fail;
			}
			memcpy(x->value, t.val, t.len);
			x->len = t.len;
			continue;
		}
		if (t.tag < STAT_MODE || t.tag > STAT_MTIME_NSEC)
			continue;
		if (get_u64(&t, &v, why) < 0)
			goto fail;
		if (t.tag != STAT_SIZE && t.tag != STAT_MTIME && v > UINT32_MAX) {
			*why = "stat field out of range";
			goto fail;
		}
		switch (t.tag) {
		case STAT_MODE: m->mode = (uint32_t)v; have_mode = true; break;
		case STAT_UID: m->uid = (uint32_t)v; break;
		case STAT_GID: m->gid = (uint32_t)v; break;
		case STAT_SIZE: m->size = v; break;
		case STAT_MTIME: m->mtime_sec = (int64_t)v; break;
		case STAT_MTIME_NSEC: m->mtime_nsec = (uint32_t)v; break;
		}
	}
	if (r < 0)
		goto fail;
	if (!have_mode) {
		*why = "stat reply without a mode";
		goto fail;
	}
	if (m->nxattrs > 0 && m->xattrs[m->nxattrs - 1].value == NULL) {
		*why = "xattr name without a value";
		goto fail;
	}
	return 0;
fail:
	guest_stat_free(m);
	return -1;
}

void guest_stat_free(struct guest_stat *m)
{
	for (size_t i = 0; i < m->nxattrs; i++) {
		free(m->xattrs[i].name);
		free(m->xattrs[i].value);
	}
	free(m->xattrs);
	free(m->link);
	m->xattrs = NULL;
	m->nxattrs = 0;
	m->link = NULL;
}

/* ---- ERROR ---------------------------------------------------------------- */

void guest_encode_error(struct guest_wbuf *w, uint32_t id, const struct guest_error_msg *m)
{
	size_t start = guest_frame_begin(w, GUEST_F_ERROR, id);

	guest_tlv_u64(w, ERR_ERRNO, (uint64_t)(int64_t)m->errnum);
	guest_tlv_str(w, ERR_MSG, m->msg ? m->msg : "unknown error");
	guest_frame_end(w, start);
}

int guest_decode_error(const uint8_t *p, size_t n, struct guest_error_msg *m, const char **why)
{
	struct tlv t;
	uint64_t v;
	int r;

	memset(m, 0, sizeof(*m));
	while ((r = tlv_next(&p, &n, &t, why)) > 0) {
		if (t.tag == ERR_MSG && get_str(&t, &m->msg, why) < 0)
			goto fail;
		if (t.tag == ERR_ERRNO) {
			if (get_u64(&t, &v, why) < 0)
				goto fail;
			if (v > 4095) {
				*why = "errno out of range";
				goto fail;
			}
			m->errnum = (int32_t)v;
		}
	}
	if (r < 0)
		goto fail;
	if (m->msg == NULL) {
		*why = "error without a message";
		goto fail;
	}
	return 0;
fail:
	guest_error_msg_free(m);
	return -1;
}

void guest_error_msg_free(struct guest_error_msg *m)
{
	free(m->msg);
	memset(m, 0, sizeof(*m));
}
