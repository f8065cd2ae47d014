/* xattrs.c — `kiln-agent --xattrs-dump DIR` / `--xattrs-apply DIR`: the
 * extended attributes of a tree, beside the tar stream that carries its
 * files (the guest's tar, busybox, keeps none).  One line per attribute,
 * "PATH NAME VALUE" each in hex, PATH relative to DIR; the host runs these
 * through EXEC so the protocol needs nothing more. */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "guest/agent/agent.h"

static size_t root_len;

static void put_hex(const void *data, size_t len)
{
	const unsigned char *p = data;
	static const char digits[] = "0123456789abcdef";

	if (len == 0)
		putchar('-');
	for (size_t i = 0; i < len; i++) {
		putchar(digits[p[i] >> 4]);
		putchar(digits[p[i] & 15]);
	}
}

static int dump_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	char names[65536], value[65536];
	ssize_t n = llistxattr(path, names, sizeof(names));
	const char *rel = path + root_len;

	(void)st, (void)flag, (void)ftw;
	if (n <= 0)
		return 0; /* none, or not supported there */
	while (*rel == '/')
		rel++;
	if (*rel == '\0')
		return 0; /* the directory itself: its own attributes are not the tree's */
	for (char *nm = names; nm < names + n; nm += strlen(nm) + 1) {
		ssize_t vl = lgetxattr(path, nm, value, sizeof(value));
		if (vl < 0)
			continue;
		put_hex(rel, strlen(rel));
		putchar(' ');
		put_hex(nm, strlen(nm));
		putchar(' ');
		put_hex(value, (size_t)vl);
		putchar('\n');
	}
	return 0;
}

int xattrs_dump(const char *dir)
{
	root_len = strlen(dir);
	if (nftw(dir, dump_one, 64, FTW_PHYS) != 0) {
		fprintf(stderr, "kiln-agent: xattrs of %s: %s\n", dir, strerror(errno));
		return 1;
	}
	return fflush(stdout) == 0 ? 0 : 1;
}

static int unhex(const char *s, size_t n, char *out, size_t cap, size_t *len)
{
	if (n == 1 && s[0] == '-') {
		*len = 0;
		return 0;
	}
	if (n % 2 || n / 2 >= cap)
		return -1;
	for (size_t i = 0; i < n; i += 2) {
		char b[3] = { s[i], s[i + 1], 0 }, *end;
		out[i / 2] = (char)strtoul(b, &end, 16);
		if (*end)
			return -1;
	}
	*len = n / 2;
	out[*len] = '\0';
	return 0;
}

/* No component of rel (under dir) above the last may be a symlink, so a
 * tree's own links never aim an attribute elsewhere. */
static int parents_plain(const char *dir, const char *rel)
{
	char p[PATH_MAX];
	struct stat st;
	int n = snprintf(p, sizeof(p), "%s/%s", dir, rel);

	if (n < 0 || (size_t)n >= sizeof(p))
		return -1;
	for (const char *c = rel; *c; c += strcspn(c, "/"), c += *c == '/') {
		size_t k = strcspn(c, "/");
		if ((k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.') || k == 0)
			return -1;
	}
	for (char *s = p + strlen(dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
		*s = '\0';
		int r = lstat(p, &st);
		*s = '/';
		if (r < 0 || !S_ISDIR(st.st_mode))
			return -1;
	}
	return 0;
}

int xattrs_apply(const char *dir)
{
	char *line = NULL, rel[PATH_MAX], name[XATTR_NAME_MAX + 1], *value = malloc(65537), full[PATH_MAX + 8];
	size_t cap = 0, rl, nl, vl;
	ssize_t n;
	int rc = 0;

	if (value == NULL)
		return 1;
	while ((n = getline(&line, &cap, stdin)) > 0) {
		char *a = line, *b = strchr(a, ' '), *c = b ? strchr(b + 1, ' ') : NULL;
		if (line[n - 1] == '\n')
			line[--n] = '\0';
		if (!b || !c || unhex(a, (size_t)(b - a), rel, sizeof(rel), &rl) < 0 ||
		    unhex(b + 1, (size_t)(c - b - 1), name, sizeof(name), &nl) < 0 ||
		    unhex(c + 1, strlen(c + 1), value, 65537, &vl) < 0 || strlen(rel) != rl || rl == 0) {
			fprintf(stderr, "kiln-agent: xattrs: bad line\n");
			rc = 1;
			break;
		}
		/* what this guest cannot hold is said, not fatal (tmpfs before Linux
		 * 6.6 has no user.* attributes): the files themselves are in place */
		if (parents_plain(dir, rel) < 0) {
			fprintf(stderr, "kiln-agent: xattrs: %s: not a plain path under %s\n", rel, dir);
			continue;
		}
		if ((size_t)snprintf(full, sizeof(full), "%s/%s", dir, rel) >= sizeof(full))
			continue; /* parents_plain already refused it */
		if (lsetxattr(full, name, value, vl, 0) < 0)
			fprintf(stderr, "kiln-agent: xattrs: %s: %s: %s\n", rel, name, strerror(errno));
	}
	free(line);
	free(value);
	return rc;
}
