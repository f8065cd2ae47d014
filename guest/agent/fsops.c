/* fsops.c — `kiln-agent --fs OP ARGS`: the filesystem calls of E2B's envd
 * (stat, list to a depth, mkdir -p, move, remove, read, write, watch with
 * inotify), run by the host through EXEC as the caller's user, so permissions
 * are that user's and what is made is owned by them.  Output: entries of
 * GUEST_FS_FIELDS NUL-terminated fields (guest.h), events of 3. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "guest/agent/agent.h"

static int fail(int code, const char *what, const char *path, int errnum)
{
	dprintf(2, "%s %s: %s\n", what, path, strerror(errnum));
	return code;
}

static int code_of(int errnum)
{
	return errnum == ENOENT ? GUEST_FS_EXIT_NOTFOUND
	       : errnum == EEXIST ? GUEST_FS_EXIT_EXISTS
	       : errnum == ENOTDIR || errnum == EISDIR ? GUEST_FS_EXIT_INVALID
							: GUEST_FS_EXIT_FAIL;
}

static void field(const char *s)
{
	fwrite(s, 1, strlen(s) + 1, stdout);
}

static void fieldf(const char *fmt, unsigned long long v)
{
	char b[32];
	snprintf(b, sizeof(b), fmt, v);
	field(b);
}

/* One entry; its name is the last component of path. */
static int print_entry(const char *path)
{
	struct stat st, target;
	char owner[256], group[256], link[PATH_MAX + 1] = "";
	const char *name = strrchr(path, '/');
	char type = 'o';

	if (lstat(path, &st) < 0)
		return -1;
	if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlink(path, link, PATH_MAX);
		link[n > 0 ? n : 0] = '\0';
		/* as envd: a symlink is reported with its target's type */
		type = stat(path, &target) < 0 ? 'l' : S_ISDIR(target.st_mode) ? 'd' : S_ISREG(target.st_mode) ? 'f' : 'o';
	} else if (S_ISDIR(st.st_mode)) {
		type = 'd';
	} else if (S_ISREG(st.st_mode)) {
		type = 'f';
	}
	user_name_of("/etc/passwd", st.st_uid, owner, sizeof(owner));
	user_name_of("/etc/group", st.st_gid, group, sizeof(group));
	field(name && name[1] ? name + 1 : path);
	fputc(type, stdout);
	fputc(0, stdout);
	field(path);
	fieldf("%llu", (unsigned long long)st.st_size);
	fieldf("%llo", (unsigned long long)st.st_mode);
	field(owner);
	field(group);
	fieldf("%llu", (unsigned long long)st.st_mtim.tv_sec);
	fieldf("%llu", (unsigned long long)st.st_mtim.tv_nsec);
	field(link);
	return 0;
}

static int list(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[PATH_MAX];

	if (d == NULL)
		return -1;
	while ((e = readdir(d))) {
		struct stat st;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (snprintf(path, sizeof(path), "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name) >=
		    (int)sizeof(path))
			continue;
		if (print_entry(path) < 0)
			continue; /* gone meanwhile */
		/* never through a symlink: a link to / would list the world */
		if (depth > 1 && lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
			list(path, depth - 1);
	}
	closedir(d);
	return 0;
}

/* mkdir -p of path's parents (leave_last: not path itself). */
static int mkdirs(const char *path, bool leave_last)
{
	char p[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(p))
		return errno = ENAMETOOLONG, -1;
	memcpy(p, path, n + 1);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -1;
		*s = '/';
	}
	if (!leave_last && mkdir(p, 0755) < 0)
		return -1;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

static int copy(int in, int out)
{
	char buf[65536];
	ssize_t n;

	/* One side is the agent's pipe: splice moves the bytes in the kernel,
	 * without a pass through this process (most of a transfer's guest CPU
	 * under TCG); a pair splice cannot take falls back to read/write. */
	while ((n = splice(in, NULL, out, NULL, 1u << 20, SPLICE_F_MOVE)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EINVAL || errno == ESPIPE || errno == ENOSYS))
			break;
		if (n < 0)
			return -1;
	}
	if (n == 0)
		return 0;
	while ((n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0 && errno != EINTR)
				return -1;
			off += w > 0 ? w : 0;
		}
	}
	return 0;
}

static void event(const char *type, const char *name)
{
	field(type);
	field(name);
	field("");
}

struct wd {
	int wd;
	char *rel; /* "" for dir itself */
};
#define WATCH_MASK                                                                                            \
	(IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | \
	 IN_ONLYDIR)

/* Watch the directories under dir/rel too (never through a symlink). */
static void watch_tree(int fd, const char *dir, const char *rel, struct wd **wds, size_t *nwd, int depth)
{
	char path[PATH_MAX], sub[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (depth > 32 || snprintf(path, sizeof(path), "%s%s%s", dir, *rel ? "/" : "", rel) >= (int)sizeof(path))
		return;
	if ((d = opendir(path)) == NULL)
		return;
	while ((e = readdir(d))) {
		struct stat st;
		char full[PATH_MAX];
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= (int)sizeof(sub) ||
		    snprintf(full, sizeof(full), "%s/%s", dir, sub) >= (int)sizeof(full))
			continue;
		if (lstat(full, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		struct wd *grown = realloc(*wds, (*nwd + 1) * sizeof(**wds));
		if (grown == NULL)
			break;
		*wds = grown;
		(*wds)[*nwd].wd = inotify_add_watch(fd, full, WATCH_MASK);
		(*wds)[*nwd].rel = strdup(sub);
		if ((*wds)[*nwd].wd >= 0 && (*wds)[*nwd].rel)
			(*nwd)++;
		watch_tree(fd, dir, sub, wds, nwd, depth + 1);
	}
	closedir(d);
}

/* Watch dir (and, recursive, every directory under it, also those made
 * later) until killed. */
static int watch(const char *dir, bool recursive)
{
	struct wd *wds = NULL;
	size_t nwd = 0;
	uint32_t mask = WATCH_MASK;
	int fd = inotify_init1(IN_CLOEXEC);
	char buf[16384] __attribute__((aligned(8))), path[PATH_MAX], rel[PATH_MAX];
	struct stat st;

	if (fd < 0)
		return fail(GUEST_FS_EXIT_FAIL, "inotify", dir, errno);
	if (stat(dir, &st) < 0)
		return fail(code_of(errno), "watch", dir, errno);
	if (!S_ISDIR(st.st_mode))
		return fail(GUEST_FS_EXIT_INVALID, "watch", dir, ENOTDIR);
	wds = calloc(1, sizeof(*wds));
	if (wds == NULL || (wds[0].wd = inotify_add_watch(fd, dir, mask)) < 0)
		return fail(GUEST_FS_EXIT_FAIL, "watch", dir, errno);
	wds[0].rel = strdup("");
	nwd = 1;
	if (recursive)
		watch_tree(fd, dir, "", &wds, &nwd, 0);
	event("start", "");
	fflush(stdout);
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return GUEST_FS_EXIT_FAIL;
		}
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			const char *base = NULL;
			p += sizeof(*ev) + ev->len;
			for (size_t i = 0; i < nwd; i++)
				if (wds[i].wd == ev->wd)
					base = wds[i].rel;
			if (ev->mask & IN_DELETE_SELF && base && *base == '\0')
				return GUEST_FS_EXIT_NOTFOUND; /* the watched directory is gone */
			if (base == NULL || ev->len == 0)
				continue;
			snprintf(rel, sizeof(rel), "%s%s%s", base, *base ? "/" : "", ev->name);
			if (ev->mask & IN_CREATE || ev->mask & IN_MOVED_TO)
				event("create", rel);
			if (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE))
				event("write", rel);
			if (ev->mask & IN_DELETE)
				event("remove", rel);
			if (ev->mask & IN_MOVED_FROM)
				event("rename", rel);
			if (ev->mask & IN_ATTRIB)
				event("chmod", rel);
			if (recursive && ev->mask & (IN_CREATE | IN_MOVED_TO) && ev->mask & IN_ISDIR &&
			    snprintf(path, sizeof(path), "%s/%s", dir, rel) < (int)sizeof(path)) {
				struct wd *grown = realloc(wds, (nwd + 1) * sizeof(*wds));
				if (grown == NULL)
					continue;
				wds = grown;
				wds[nwd].wd = inotify_add_watch(fd, path, mask);
				wds[nwd].rel = strdup(rel);
				if (wds[nwd].wd >= 0 && wds[nwd].rel)
					nwd++;
				watch_tree(fd, dir, rel, &wds, &nwd, 1);
			}
		}
		fflush(stdout);
	}
}

/* E2B's SandboxMetric from the guest's own view: "KEY VALUE" lines of
 * bytes and CPU jiffies (the host takes the busy share between two calls). */
static int metrics(const char *path)
{
	unsigned long long mem_total = 0, mem_avail = 0, cached = 0, v[8] = { 0 }, busy, total = 0;
	struct statvfs fs;
	char line[256];
	FILE *f;

	if ((f = fopen("/proc/meminfo", "r")) == NULL)
		return fail(GUEST_FS_EXIT_FAIL, "open", "/proc/meminfo", errno);
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "MemTotal: %llu", &mem_total);
		sscanf(line, "MemAvailable: %llu", &mem_avail);
		sscanf(line, "Cached: %llu", &cached);
	}
	fclose(f);
	if ((f = fopen("/proc/stat", "r")) == NULL)
		return fail(GUEST_FS_EXIT_FAIL, "open", "/proc/stat", errno);
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
		   &v[7]) != 8) {
		fclose(f);
		return fail(GUEST_FS_EXIT_FAIL, "read", "/proc/stat", EINVAL);
	}
	fclose(f);
	for (int i = 0; i < 8; i++)
		total += v[i];
	busy = total - v[3] - v[4]; /* all but idle and iowait */
	if (statvfs(path, &fs) < 0)
		return fail(code_of(errno), "statvfs", path, errno);
	printf("cpus %ld\nmem_total %llu\nmem_used %llu\nmem_cache %llu\ndisk_total %llu\ndisk_used %llu\n"
	       "cpu_busy %llu\ncpu_total %llu\n",
	       sysconf(_SC_NPROCESSORS_ONLN), mem_total << 10, (mem_total - mem_avail) << 10, cached << 10,
	       (unsigned long long)fs.f_blocks * fs.f_frsize,
	       (unsigned long long)(fs.f_blocks - fs.f_bfree) * fs.f_frsize, busy, total);
	return fflush(stdout) == 0 ? 0 : GUEST_FS_EXIT_FAIL;
}

int fs_main(int argc, char **argv)
{
	const char *op = argc > 2 ? argv[2] : "", *path = argc > 3 ? argv[3] : NULL;
	struct stat st;
	int fd, rc = 0;

	if (path == NULL || path[0] != '/') {
		dprintf(2, "usage: kiln-agent --fs home|stat|list|mkdir|move|remove|read|write|watch /PATH [ARG]\n");
		return GUEST_FS_EXIT_INVALID;
	}
	if (strcmp(op, "home") == 0 && argc == 4) {
		const char *home = getenv("HOME");
		fputs(home && *home ? home : "/", stdout);
	} else if (strcmp(op, "stat") == 0 && argc == 4) {
		if (print_entry(path) < 0)
			return fail(code_of(errno), "stat", path, errno);
	} else if (strcmp(op, "list") == 0 && argc == 5) {
		if (stat(path, &st) < 0)
			return fail(code_of(errno), "list", path, errno);
		if (!S_ISDIR(st.st_mode))
			return fail(GUEST_FS_EXIT_INVALID, "list", path, ENOTDIR);
		if (list(path, atoi(argv[4]) < 1 ? 1 : atoi(argv[4])) < 0)
			return fail(code_of(errno), "list", path, errno);
	} else if (strcmp(op, "mkdir") == 0 && argc == 4) {
		if (stat(path, &st) == 0)
			return fail(S_ISDIR(st.st_mode) ? GUEST_FS_EXIT_EXISTS : GUEST_FS_EXIT_INVALID, "mkdir", path,
				    EEXIST);
		if (mkdirs(path, false) < 0 || print_entry(path) < 0)
			return fail(code_of(errno), "mkdir", path, errno);
	} else if (strcmp(op, "move") == 0 && argc == 5) {
		if (argv[4][0] != '/')
			return fail(GUEST_FS_EXIT_INVALID, "move to", argv[4], EINVAL);
		if (lstat(path, &st) < 0)
			return fail(code_of(errno), "move", path, errno);
		if (mkdirs(argv[4], true) < 0 || rename(path, argv[4]) < 0)
			return fail(code_of(errno), "move to", argv[4], errno);
		if (print_entry(argv[4]) < 0)
			return fail(code_of(errno), "stat", argv[4], errno);
	} else if (strcmp(op, "remove") == 0 && argc == 4) {
		/* as os.RemoveAll: a missing path is not an error */
		if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
			return fail(code_of(errno), "remove", path, errno);
	} else if (strcmp(op, "read") == 0 && argc == 4) {
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			return fail(code_of(errno), "open", path, errno);
		if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
			rc = fail(GUEST_FS_EXIT_INVALID, "read", path, EISDIR);
		else if (copy(fd, 1) < 0)
			rc = fail(GUEST_FS_EXIT_FAIL, "read", path, errno);
		close(fd);
	} else if (strcmp(op, "write") == 0 && argc == 4) {
		if (mkdirs(path, true) < 0)
			return fail(code_of(errno), "mkdir -p for", path, errno);
		if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
			return fail(code_of(errno), "open", path, errno);
		if (copy(0, fd) < 0 || close(fd) < 0)
			return fail(GUEST_FS_EXIT_FAIL, "write", path, errno);
		if (print_entry(path) < 0)
			return fail(code_of(errno), "stat", path, errno);
	} else if (strcmp(op, "metrics") == 0 && argc == 4) {
		return metrics(path);
	} else if (strcmp(op, "watch") == 0 && argc == 5) {
		return watch(path, strcmp(argv[4], "1") == 0);
	} else {
		dprintf(2, "kiln-agent --fs: unknown operation %s or wrong arguments\n", op);
		return GUEST_FS_EXIT_INVALID;
	}
	if (fflush(stdout) != 0)
		return GUEST_FS_EXIT_FAIL;
	return rc;
}
