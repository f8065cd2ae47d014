/* fs.c — small filesystem helpers: whole-buffer I/O retrying EINTR, atomic
 * replace, whole-file reads, mkdir -p, rm -rf without following links, kiln's
 * home directory, sizes, durations and RFC 3339 times; waitpid retrying
 * EINTR, the one way to start a daemon, the monotonic clock and the one sleep. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"

int kiln_write_full(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int kiln_pwrite_full(int fd, const void *data, size_t len, off_t off)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t kiln_read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

ssize_t kiln_pread_full(int fd, void *buf, size_t len, off_t off)
{
	char *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, p + got, len - got, off + (off_t)got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int kiln_copy_data(int in, int out, off_t size, void *buf, size_t len)
{
	for (off_t off = 0; off < size;) {
		off_t data = lseek(in, off, SEEK_DATA), hole;
		if (data < 0)
			return errno == ENXIO ? 0 : -1; /* ENXIO: only a hole is left */
		if ((hole = lseek(in, data, SEEK_HOLE)) < 0)
			return -1;
		if (hole > size)
			hole = size;
		for (off_t p = data; p < hole;) {
			size_t want = (size_t)(hole - p < (off_t)len ? hole - p : (off_t)len);
			ssize_t n = kiln_pread_full(in, buf, want, p);
			if (n <= 0) {
				if (n == 0)
					errno = EIO; /* shorter than it said */
				return -1;
			}
			if (kiln_pwrite_full(out, buf, (size_t)n, p) < 0)
				return -1;
			p += n;
		}
		off = hole;
	}
	return 0;
}

int kiln_copy_sparse(const char *src, const char *dst, bool sync, kiln_error **err)
{
	int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
	size_t len = 1 << 20;
	char *buf = kiln_xmalloc(len);
	struct stat st;

	if (in < 0 || fstat(in, &st) < 0) {
		kiln_err_errno(err, errno, "open %s", src);
		goto out;
	}
	if ((out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 || ftruncate(out, st.st_size) < 0) {
		kiln_err_errno(err, errno, "create %s", dst);
		goto out;
	}
	if (kiln_copy_data(in, out, st.st_size, buf, len) < 0) {
		kiln_err_errno(err, errno, "copy %s to %s", src, dst);
		goto out;
	}
	if ((sync && fsync(out) < 0) || close(out) < 0) {
		out = -1;
		kiln_err_errno(err, errno, "write %s", dst);
		goto out;
	}
	out = -1;
	rc = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	free(buf);
	return rc;
}

ssize_t kiln_read_all(int fd, kiln_buf *b, size_t keep)
{
	char chunk[4096];
	size_t got = 0;

	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return (ssize_t)got;
		if (keep == 0 || got < keep)
			kiln_buf_add(b, chunk, keep == 0 || keep - got >= (size_t)n ? (size_t)n : keep - got);
		got += (size_t)n;
	}
}

pid_t kiln_waitpid(pid_t pid, int *status, int flags)
{
	pid_t r;

	do
		r = waitpid(pid, status, flags);
	while (r < 0 && errno == EINTR);
	return r;
}

int kiln_daemon_fork(int log_fd)
{
	pid_t p = fork();

	if (p < 0)
		return -1;
	if (p > 0) {
		kiln_waitpid(p, NULL, 0); /* the first child exits once the daemon is forked */
		return 1;
	}
	setsid();
	if (fork() != 0)
		_exit(0);
	/* the daemon: init's, in its own session, holding nothing of its
	 * parent's (agent connections, locks, pipes) */
	int null = open("/dev/null", O_RDWR);
	if (null >= 0)
		dup2(null, 0);
	if (log_fd >= 0 || null >= 0) {
		dup2(log_fd >= 0 ? log_fd : null, 1);
		dup2(log_fd >= 0 ? log_fd : null, 2);
	}
	close_range(3, ~0u, 0);
	kiln_child_signals_reset();
	return 0;
}

void kiln_child_signals_reset(void)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
}

double kiln_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void kiln_sleep_ms(long ms)
{
	if (ms <= 0)
		return;
	struct timespec ts = { (time_t)(ms / 1000), (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int kiln_fsync_parent(const char *path, kiln_error **err)
{
	char *dir = kiln_xstrdup(path);
	char *slash = strrchr(dir, '/');
	int fd, rc = 0;

	if (slash == NULL)
		strcpy(dir, ".");
	else if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		rc = kiln_err_errno(err, errno, "sync directory %s", dir);
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

int kiln_write_atomic(const char *path, const void *data, size_t len, mode_t mode, kiln_error **err)
{
	char *tmp = kiln_xasprintf("%s.tmp.XXXXXX", path);
	int fd, ret = -1;

	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		kiln_err_errno(err, errno, "create temporary file for %s", path);
		goto out;
	}
	if (fchmod(fd, mode) < 0 || kiln_write_full(fd, data, len) < 0 || fsync(fd) < 0) {
		kiln_err_errno(err, errno, "write %s", tmp);
		goto out_unlink;
	}
	if (close(fd) < 0) {
		fd = -1;
		kiln_err_errno(err, errno, "close %s", tmp);
		goto out_unlink;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		kiln_err_errno(err, errno, "rename %s to %s", tmp, path);
		goto out_unlink;
	}
	if (kiln_fsync_parent(path, err) < 0)
		goto out; /* renamed already: the file is there, its name maybe not durable */
	ret = 0;
	goto out;
out_unlink:
	unlink(tmp);
out:
	if (fd >= 0)
		close(fd);
	free(tmp);
	return ret;
}

int kiln_read_file(const char *path, char **data, size_t *len, size_t max, kiln_error **err)
{
	kiln_buf b = KILN_BUF_INIT;
	int fd, ret = -1;

	fd = strcmp(path, "-") == 0 ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return kiln_err_errno(err, errno, "open %s", path);
	for (;;) {
		ssize_t n;

		kiln_buf_grow(&b, 65536);
		n = read(fd, b.buf + b.len, 65536);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			kiln_err_errno(err, errno, "read %s", path);
			goto out;
		}
		if (n == 0)
			break;
		b.len += (size_t)n;
		b.buf[b.len] = '\0';
		if (max > 0 && b.len > max) {
			kiln_err(err, KILN_E_LIMIT, "%s: larger than the limit of %zu bytes", path, max);
			goto out;
		}
	}
	*len = b.len;
	*data = kiln_buf_detach(&b);
	ret = 0;
out:
	kiln_buf_free(&b);
	close(fd);
	return ret;
}

int kiln_mkdir_p(const char *path, mode_t mode, kiln_error **err)
{
	struct stat st;
	char *p;
	int ret = 0;

	if (*path == '\0')
		return kiln_err(err, KILN_E_INVALID, "mkdir: empty path");
	/* most calls find it there, or only it missing: one mkdir, not one per component */
	if (mkdir(path, mode) == 0)
		return 0;
	if (errno == EEXIST)
		goto check;
	if (errno != ENOENT) { /* EACCES, EROFS...: fine if it is there */
		int e = errno;
		return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : kiln_err_errno(err, e, "mkdir %s", path);
	}
	p = kiln_xstrdup(path);
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char saved = *s;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST) {
			ret = kiln_err_errno(err, errno, "mkdir %s", p);
			break;
		}
		*s = saved;
		if (saved == '\0')
			break;
	}
	free(p);
	if (ret < 0)
		return ret;
check:
	if (stat(path, &st) < 0)
		return kiln_err_errno(err, errno, "stat %s", path);
	if (!S_ISDIR(st.st_mode))
		return kiln_err(err, KILN_E_EXISTS, "%s exists and is not a directory", path);
	return 0;
}

static int rm_at(int parent, const char *name, const char *shown, kiln_error **err)
{
	struct stat st;
	int fd, ret = 0;
	DIR *d;

	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : kiln_err_errno(err, errno, "stat %s", shown);
	if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
			return kiln_err_errno(err, errno, "remove %s", shown);
		return 0;
	}
	/* Gone between the stat and the open: another remover of the same tree
	 * got there first (a sandbox killed while its timeout removes it) —
	 * what this call is for, so no error, as for every ENOENT below. */
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : kiln_err_errno(err, errno, "open %s", shown);
	d = fdopendir(fd);
	if (d == NULL) {
		close(fd);
		return kiln_err_errno(err, errno, "open %s", shown);
	}
	/* A file made in it during the walk (a sandbox's lock file, opened by a
	 * process that starts as the sandbox is removed) makes the rmdir fail:
	 * walk again, a few times — a writer that keeps adding wins. */
	for (int pass = 0; ret == 0; pass++) {
		for (struct dirent *de; ret == 0 && (de = readdir(d)) != NULL;) {
			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			char *sub = kiln_path_join(shown, de->d_name);
			ret = rm_at(dirfd(d), de->d_name, sub, err);
			free(sub);
		}
		if (ret < 0 || unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			break;
		if (errno != ENOTEMPTY || pass == 3)
			ret = kiln_err_errno(err, errno, "remove %s", shown);
		rewinddir(d);
	}
	closedir(d);
	return ret;
}

int kiln_rm_rf(const char *path, kiln_error **err)
{
	return rm_at(AT_FDCWD, path, path, err);
}

/* Go's filepath.Clean (lexical: "//", ".", ".." resolved; "" -> "."). */
char *kiln_path_clean(const char *path)
{
	size_t n = strlen(path), r = 0, w = 0, dotdot = 0;
	bool rooted = n > 0 && path[0] == '/';
	char *out = kiln_xmalloc(n + 2);

	/* Go's filepath.Clean, step for step */
	if (rooted) {
		out[w++] = '/';
		r = dotdot = 1;
	}
	while (r < n) {
		if (path[r] == '/') {
			r++;
		} else if (path[r] == '.' && (r + 1 == n || path[r + 1] == '/')) {
			r++;
		} else if (path[r] == '.' && path[r + 1] == '.' && (r + 2 == n || path[r + 2] == '/')) {
			r += 2;
			if (w > dotdot) {
				w--;
				while (w > dotdot && out[w] != '/')
					w--;
			} else if (!rooted) {
				if (w > 0)
					out[w++] = '/';
				out[w++] = '.';
				out[w++] = '.';
				dotdot = w;
			}
		} else {
			if ((rooted && w != 1) || (!rooted && w != 0))
				out[w++] = '/';
			for (; r < n && path[r] != '/'; r++)
				out[w++] = path[r];
		}
	}
	if (w == 0)
		out[w++] = '.';
	out[w] = '\0';
	return out;
}

char *kiln_path_join(const char *a, const char *b)
{
	size_t la = strlen(a);

	while (*b == '/')
		b++;
	if (la > 0 && a[la - 1] == '/')
		return kiln_xasprintf("%s%s", a, b);
	return kiln_xasprintf("%s/%s", a, b);
}

char *kiln_home(void)
{
	const char *env = getenv("KILN_HOME");
	const char *xdg, *home;

	if (env != NULL && *env != '\0')
		return kiln_xstrdup(env);
	if (geteuid() == 0)
		return kiln_xstrdup("/var/lib/kiln");
	xdg = getenv("XDG_DATA_HOME");
	if (xdg != NULL && *xdg != '\0')
		return kiln_path_join(xdg, "kiln");
	home = getenv("HOME");
	if (home == NULL || *home == '\0') {
		struct passwd *pw = getpwuid(geteuid());
		home = pw ? pw->pw_dir : "/tmp";
	}
	return kiln_path_join(home, ".local/share/kiln");
}

char *kiln_mkdtemp(const char *prefix, kiln_error **err)
{
	const char *tmp = getenv("TMPDIR");
	char *path = kiln_xasprintf("%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);

	if (mkdtemp(path) == NULL) {
		kiln_err_errno(err, errno, "create temporary directory %s", path);
		free(path);
		return NULL;
	}
	return path;
}

int kiln_parse_size(const char *s, uint64_t *out, kiln_error **err)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (s == NULL || *s < '0' || *s > '9')
		return kiln_err(err, KILN_E_INVALID, "invalid size \"%s\": want a number with an optional K, M, G or T suffix",
				s ? s : "");
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return kiln_err(err, KILN_E_INVALID, "invalid size \"%s\": too large", s);
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: end = (char *)"?"; break;
	}
	if (*end == 'i' && shift)
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end != '\0')
		return kiln_err(err, KILN_E_INVALID, "invalid size \"%s\": want a number with an optional K, M, G or T suffix", s);
	if (shift && v > (UINT64_MAX >> shift))
		return kiln_err(err, KILN_E_INVALID, "invalid size \"%s\": too large", s);
	*out = (uint64_t)v << shift;
	return 0;
}

int kiln_parse_duration(const char *s, int64_t *out, kiln_error **err)
{
	char *end;
	long long v;
	int64_t mul = 1;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || v < 0 || errno == ERANGE)
		goto bad;
	switch (*end) {
	case 's': case 'S': end++; break;
	case 'm': case 'M': mul = 60; end++; break;
	case 'h': case 'H': mul = 3600; end++; break;
	case 'd': case 'D': mul = 86400; end++; break;
	}
	if (*end || v > INT64_MAX / mul)
		goto bad;
	*out = (int64_t)v * mul;
	return 0;
bad:
	return kiln_err(err, KILN_E_USAGE, "bad duration '%s' (want e.g. 90s, 30m, 12h, 7d)", s);
}

char *kiln_time_rfc3339(int64_t t, char buf[KILN_TIME_MAX])
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (gmtime_r(&tt, &tm) == NULL || strftime(buf, KILN_TIME_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, KILN_TIME_MAX, "%lld", (long long)t); /* a year gmtime cannot hold */
	return buf;
}
