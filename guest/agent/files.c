/* files.c — the agent's file requests: STAT answered directly, UPLOAD runs
 * the guest's own tar (GNU tar or busybox) with the stream piped to it, which
 * keeps this static agent free of an archive reader; DOWNLOAD runs the
 * agent's own tar writer (tarc.c, re-executed as --tar-create) unless --tar
 * named a program.  The host side builds and reads the tars with libarchive. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "guest/agent/agent.h"

static char *search_path(const char *name)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (path == NULL || *path == '\0')
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	while (*path) {
		size_t n = strcspn(path, ":");
		if (n > 0 && n + strlen(name) + 2 < sizeof(buf)) {
			snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, path, name);
			if (access(buf, X_OK) == 0)
				return strdup(buf);
		}
		path += n;
		if (*path == ':')
			path++;
	}
	return NULL;
}

void files_find_tar(struct agent *a, const char *opt)
{
	char *prog = NULL;
	const char *base;

	/* downloads: our own writer, found again through /proc (tarc.c) */
	if (!opt && access("/proc/self/exe", X_OK) == 0)
		a->tar_self = true;
	if (opt)
		prog = strchr(opt, '/') ? strdup(opt) : search_path(opt);
	else if ((prog = search_path("tar")) == NULL)
		prog = search_path("busybox");
	if (prog == NULL) {
		if (opt)
			agent_log("tar program %s not found: no uploads/downloads", opt);
		return;
	}
	a->tar[0] = prog;
	base = strrchr(prog, '/');
	base = base ? base + 1 : prog;
	/* busybox is multi-call: it needs the applet name. */
	if (strcmp(base, "busybox") == 0)
		a->tar[1] = strdup("tar");
}

/* The path's extended attributes into out; -1 with errno. */
static int read_xattrs(const char *path, bool follow, struct guest_stat *out)
{
	ssize_t len = follow ? listxattr(path, NULL, 0) : llistxattr(path, NULL, 0);
	char *names = NULL;
	int rc = -1;

	if (len < 0)
		return errno == ENOTSUP ? 0 : -1;
	if (len == 0)
		return 0;
	names = malloc((size_t)len);
	if (names == NULL)
		return -1;
	len = follow ? listxattr(path, names, (size_t)len) : llistxattr(path, names, (size_t)len);
	if (len < 0)
		goto out;
	out->xattrs = calloc(GUEST_MAX_XATTRS, sizeof(*out->xattrs));
	if (out->xattrs == NULL)
		goto out;
	for (char *nm = names; nm < names + len && out->nxattrs < GUEST_MAX_XATTRS; nm += strlen(nm) + 1) {
		struct guest_xattr *x = &out->xattrs[out->nxattrs];
		ssize_t vl = follow ? getxattr(path, nm, NULL, 0) : lgetxattr(path, nm, NULL, 0);
		if (vl < 0)
			continue; /* removed meanwhile */
		x->value = malloc(vl ? (size_t)vl : 1);
		x->name = strdup(nm);
		if (x->value == NULL || x->name == NULL)
			goto out;
		vl = follow ? getxattr(path, nm, x->value, (size_t)vl) : lgetxattr(path, nm, x->value, (size_t)vl);
		if (vl < 0) {
			free(x->value);
			free(x->name);
			x->value = NULL;
			x->name = NULL;
			continue;
		}
		x->len = (size_t)vl;
		out->nxattrs++;
	}
	rc = 0;
out:
	free(names);
	return rc;
}

void files_stat(struct agent *a, uint32_t id, const uint8_t *p, size_t n)
{
	struct guest_stat_req req;
	struct guest_stat out = { 0 };
	struct stat st;
	const char *why = NULL;
	char link[PATH_MAX];

	if (id == 0) {
		agent_send_error(a, 0, 0, "request id 0 is reserved");
		return;
	}
	if (guest_decode_stat_req(p, n, &req, &why) < 0) {
		agent_send_error(a, id, 0, "bad STAT frame: %s", why);
		return;
	}
	if ((req.follow ? stat(req.path, &st) : lstat(req.path, &st)) < 0) {
		agent_send_error(a, id, errno, "stat %s: %s", req.path, strerror(errno));
		goto out;
	}
	out.mode = st.st_mode;
	out.uid = st.st_uid;
	out.gid = st.st_gid;
	out.size = (uint64_t)st.st_size;
	out.mtime_sec = st.st_mtim.tv_sec;
	out.mtime_nsec = (uint32_t)st.st_mtim.tv_nsec;
	if (S_ISLNK(st.st_mode)) {
		ssize_t ln = readlink(req.path, link, sizeof(link) - 1);
		if (ln >= 0) {
			link[ln] = '\0';
			out.link = link;
		}
	}
	if (req.xattrs && read_xattrs(req.path, req.follow, &out) < 0) {
		agent_send_error(a, id, errno, "xattrs of %s: %s", req.path, strerror(errno));
		goto out;
	}
	if (guest_encode_stat(&a->out, id, &out) < 0)
		agent_send_error(a, id, E2BIG, "stat %s: the reply exceeds the frame limit", req.path);
out:
	out.link = NULL; /* not ours to free */
	guest_stat_free(&out);
	guest_stat_req_free(&req);
}

static int mkdir_p(char *path)
{
	struct stat st;

	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			*p = c;
			return -1;
		}
		*p = c;
		if (c == '\0')
			break;
	}
	if (stat(path, &st) < 0)
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

void files_xfer(struct agent *a, uint8_t type, uint32_t id, const uint8_t *p, size_t n)
{
	struct guest_xfer_req req;
	const char *why = NULL;
	const char *argv[12];
	struct session *s;
	struct stat st;
	int k = 0;
	bool up = type == GUEST_F_UPLOAD;

	if (guest_decode_xfer(p, n, &req, &why) < 0) {
		agent_send_error(a, id, 0, "bad %s frame: %s", up ? "UPLOAD" : "DOWNLOAD", why);
		return;
	}
	if (a->tar[0] == NULL && (up || !a->tar_self)) {
		agent_send_error(a, id, ENOENT, "no tar program in the guest (looked for tar and busybox in PATH)");
		goto out;
	}
	if (up && mkdir_p(req.dir) < 0) {
		agent_send_error(a, id, errno, "create %s: %s", req.dir, strerror(errno));
		goto out;
	}
	if (!up) {
		int e = stat(req.dir, &st) < 0 ? errno : !S_ISDIR(st.st_mode) ? ENOTDIR : 0;
		if (e) {
			agent_send_error(a, id, e, "download %s: %s", req.dir, strerror(e));
			goto out;
		}
	}
	if (req.name) {
		int dfd = up ? -1 : open(req.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || fstatat(dfd, req.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			int e = up ? EINVAL : errno;
			agent_send_error(a, id, e, "download %s%s%s: %s", req.dir, strcmp(req.dir, "/") ? "/" : "", req.name,
					 strerror(e));
			if (dfd >= 0)
				close(dfd);
			goto out;
		}
		close(dfd);
	}
	if (!up && a->tar_self) {
		argv[k++] = "/proc/self/exe";
		argv[k++] = "--tar-create";
		argv[k++] = req.dir;
		if (req.name)
			argv[k++] = req.name;
		argv[k] = NULL;
		goto spawn;
	}
	argv[k++] = a->tar[0];
	if (a->tar[1])
		argv[k++] = a->tar[1];
	argv[k++] = "--numeric-owner";
	argv[k++] = up ? "-xpf" : "-cf";
	argv[k++] = "-";
	argv[k++] = "-C";
	argv[k++] = req.dir;
	if (!up && req.name) {
		argv[k++] = "--";
		argv[k++] = req.name;
	} else if (!up) {
		argv[k++] = ".";
	}
	argv[k] = NULL;
spawn:
	s = session_spawn(a, id, up ? S_UPLOAD : S_DOWNLOAD, (char *const *)argv, NULL, "/", NULL, up,
			  req.timeout_ms);
	if (s) {
		size_t len = strlen(req.dir) + 32;
		s->what = malloc(len);
		if (s->what)
			snprintf(s->what, len, "%s %s", up ? "tar -x into" : "tar -c of", req.dir);
	}
out:
	guest_xfer_req_free(&req);
}
