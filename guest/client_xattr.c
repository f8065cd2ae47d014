/* client_xattr.c — a tree's extended attributes beside its tar stream: the
 * guest's tar (busybox) keeps none, so the agent lists and sets them itself
 * (`kiln-agent --xattrs-dump DIR` / `--xattrs-apply DIR`, hex lines
 * "PATH NAME VALUE"), run through EXEC as /proc/self/exe: the agent's own
 * binary, wherever the guest has it. */
#include <stdlib.h>
#include <string.h>

#include "guest/internal.h"

void guest_xattr_list_add(struct guest_xattr_list *l, const char *path, const char *name, const void *value,
			  size_t len)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->v = kiln_xrealloc(l->v, l->cap * sizeof(*l->v));
	}
	struct guest_path_xattr *p = &l->v[l->n++];
	p->path = kiln_xstrdup(path);
	p->x.name = kiln_xstrdup(name);
	p->x.value = kiln_xmalloc(len ? len : 1);
	memcpy(p->x.value, value, len);
	p->x.len = len;
}

void guest_xattr_list_free(struct guest_xattr_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].path);
		free(l->v[i].x.name);
		free(l->v[i].x.value);
	}
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static void add_hex(kiln_buf *b, const void *data, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *p = data;

	if (len == 0)
		kiln_buf_addc(b, '-');
	for (size_t i = 0; i < len; i++) {
		kiln_buf_addc(b, digits[p[i] >> 4]);
		kiln_buf_addc(b, digits[p[i] & 15]);
	}
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One hex field of [s, e) into out (NUL-terminated); -1 if malformed. */
static int field(const char *s, const char *e, kiln_buf *out)
{
	kiln_buf_reset(out);
	if (e - s == 1 && *s == '-')
		return 0;
	if ((e - s) % 2)
		return -1;
	for (; s < e; s += 2) {
		int hi = hexval(s[0]), lo = hexval(s[1]);
		if (hi < 0 || lo < 0)
			return -1;
		kiln_buf_addc(out, (char)(hi << 4 | lo));
	}
	return 0;
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(((const struct guest_path_xattr *)a)->path, ((const struct guest_path_xattr *)b)->path);
}

struct outs {
	kiln_buf out, err;
};

static void on_out(void *user, const void *data, size_t len)
{
	kiln_buf_add(&((struct outs *)user)->out, data, len);
}

static void on_err(void *user, const void *data, size_t len)
{
	struct outs *o = user;
	if (o->err.len < 4096)
		kiln_buf_add(&o->err, data, len);
}

/* Run the agent's helper MODE on dir, stdin from in (may be NULL). */
static int run_helper(guest_conn *c, const char *mode, const char *dir, const kiln_buf *in, struct outs *io,
		      int timeout_ms, kiln_error **err)
{
	const char *argv[] = { "/proc/self/exe", mode, dir, NULL };
	struct guest_exec_opts o;
	struct guest_result res;

	guest_exec_opts_init(&o);
	o.argv = argv;
	o.want_stdin = in != NULL;
	o.on_stdout = on_out;
	o.on_stderr = on_err;
	o.user = io;
	if (guest_exec(c, &o, in ? in->buf : NULL, in ? in->len : 0, timeout_ms, &res, err) < 0)
		return -1;
	if (res.signal || res.exit_code != 0)
		return kiln_err(err, KILN_E_IO, "kiln-agent %s %s: exit %d: %.*s", mode, dir,
				res.signal ? 128 + res.signal : res.exit_code, (int)strcspn(io->err.buf ? io->err.buf : "", "\n"),
				io->err.buf ? io->err.buf : "");
	return 0;
}

int guest_xattrs_dump(guest_conn *c, const char *guest_dir, struct guest_xattr_list *out, int timeout_ms,
		      kiln_error **err)
{
	struct outs io = { KILN_BUF_INIT, KILN_BUF_INIT };
	kiln_buf path = KILN_BUF_INIT, name = KILN_BUF_INIT, value = KILN_BUF_INIT;
	int rc = -1;

	if (run_helper(c, "--xattrs-dump", guest_dir, NULL, &io, timeout_ms, err) < 0)
		goto out;
	for (const char *l = io.out.buf; l && *l;) {
		const char *nl = strchr(l, '\n'), *a = strchr(l, ' '), *b = a ? strchr(a + 1, ' ') : NULL;
		if (!nl || !a || !b || b > nl || field(l, a, &path) < 0 || field(a + 1, b, &name) < 0 ||
		    field(b + 1, nl, &value) < 0 || !path.len || !name.len || strlen(path.buf) != path.len) {
			kiln_err(err, KILN_E_INVALID, "kiln-agent --xattrs-dump %s: malformed line", guest_dir);
			goto out;
		}
		guest_xattr_list_add(out, path.buf, name.buf, value.buf ? value.buf : "", value.len);
		l = nl + 1;
	}
	if (out->n > 1)
		qsort(out->v, out->n, sizeof(*out->v), cmp_path);
	rc = 0;
out:
	kiln_buf_free(&io.out);
	kiln_buf_free(&io.err);
	kiln_buf_free(&path);
	kiln_buf_free(&name);
	kiln_buf_free(&value);
	if (rc < 0)
		kiln_error_wrap(err, "extended attributes of %s", guest_dir);
	return rc;
}

int guest_xattrs_apply(guest_conn *c, const char *guest_dir, const struct guest_xattr_list *l, int timeout_ms,
		       kiln_error **err)
{
	struct outs io = { KILN_BUF_INIT, KILN_BUF_INIT };
	kiln_buf in = KILN_BUF_INIT;
	int rc;

	if (l->n == 0)
		return 0;
	for (size_t i = 0; i < l->n; i++) {
		add_hex(&in, l->v[i].path, strlen(l->v[i].path));
		kiln_buf_addc(&in, ' ');
		add_hex(&in, l->v[i].x.name, strlen(l->v[i].x.name));
		kiln_buf_addc(&in, ' ');
		add_hex(&in, l->v[i].x.value, l->v[i].x.len);
		kiln_buf_addc(&in, '\n');
	}
	rc = run_helper(c, "--xattrs-apply", guest_dir, &in, &io, timeout_ms, err);
	if (rc == 0 && io.err.len)
		kiln_warn("extended attributes in %s: %.*s", guest_dir, (int)strcspn(io.err.buf, "\n"), io.err.buf);
	kiln_buf_free(&in);
	kiln_buf_free(&io.out);
	kiln_buf_free(&io.err);
	if (rc < 0)
		kiln_error_wrap(err, "extended attributes into %s", guest_dir);
	return rc;
}
