/* user.c — resolve a Dockerfile-style "user[:group]" against the guest's own
 * /etc/passwd and /etc/group at exec time (an earlier build step may have
 * added the user), with runc's rules: names or numbers, a numeric user need
 * not exist, supplementary groups from /etc/group unless a group is given.
 * Parsed by hand because a static binary cannot use glibc's NSS. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest/agent/agent.h"

/* A decimal id below 2^32-1, or -1. */
static int64_t parse_id(const char *s)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v >= 0xffffffffull)
		return -1;
	return (int64_t)v;
}

/* Split a colon-separated line into at most n fields (in place). */
static int split(char *line, char **f, int n)
{
	int k = 0;

	line[strcspn(line, "\n")] = '\0';
	f[k++] = line;
	for (char *p = line; *p && k < n; p++) {
		if (*p == ':') {
			*p = '\0';
			f[k++] = p + 1;
		}
	}
	return k;
}

int user_resolve(const char *spec, const char *root, struct user_cred *out, char *why, size_t whylen)
{
	char *copy = strdup(spec), *user, *group, line[4096], *f[7], path[4096];
	int64_t uid_num, gid_num;
	bool found = false;
	FILE *fp;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	snprintf(out->home, sizeof(out->home), "/");
	if (copy == NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	user = copy;
	group = strchr(copy, ':');
	if (group)
		*group++ = '\0';
	if (*user == '\0') {
		snprintf(why, whylen, "empty user name in '%s'", spec);
		goto out;
	}
	uid_num = parse_id(user);
	snprintf(path, sizeof(path), "%s/etc/passwd", root ? root : "");
	fp = fopen(path, "re");
	while (fp && !found && fgets(line, sizeof(line), fp)) {
		if (split(line, f, 7) < 7)
			continue;
		if (strcmp(f[0], user) != 0 && (uid_num < 0 || parse_id(f[2]) != uid_num))
			continue;
		if (parse_id(f[2]) < 0 || parse_id(f[3]) < 0)
			continue;
		found = true;
		out->uid = parse_id(f[2]);
		out->gid = parse_id(f[3]);
		snprintf(out->name, sizeof(out->name), "%s", f[0]);
		if (*f[5])
			snprintf(out->home, sizeof(out->home), "%s", f[5]);
	}
	if (fp)
		fclose(fp);
	if (!found) {
		if (uid_num < 0) {
			snprintf(why, whylen, "unable to find user %s: no matching entries in /etc/passwd", user);
			goto out;
		}
		out->uid = uid_num;
		out->gid = 0;
	}
	gid_num = group ? parse_id(group) : -1;
	snprintf(path, sizeof(path), "%s/etc/group", root ? root : "");
	fp = fopen(path, "re");
	found = false;
	while (fp && fgets(line, sizeof(line), fp)) {
		int64_t g;
		if (split(line, f, 4) < 4 || (g = parse_id(f[2])) < 0)
			continue;
		if (group) {
			if (!found && (strcmp(f[0], group) == 0 || g == gid_num)) {
				found = true;
				out->gid = g;
			}
			continue;
		}
		/* Memberships of a named user become supplementary groups. */
		if (out->name[0] == '\0' || out->ngroups >= USER_MAX_GROUPS)
			continue;
		for (char *m = strtok(f[3], ","); m; m = strtok(NULL, ","))
			if (strcmp(m, out->name) == 0)
				out->groups[out->ngroups++] = (uint32_t)g;
	}
	if (fp)
		fclose(fp);
	if (group && !found) {
		if (gid_num < 0) {
			snprintf(why, whylen, "unable to find group %s: no matching entries in /etc/group", group);
			goto out;
		}
		out->gid = gid_num;
	}
	rc = 0;
out:
	free(copy);
	return rc;
}

int user_name_of(const char *file, uint32_t id, char *out, size_t len)
{
	char line[4096], *f[4];
	FILE *fp = fopen(file, "re");
	int rc = -1;

	snprintf(out, len, "%u", id);
	if (fp == NULL)
		return -1;
	while (fgets(line, sizeof(line), fp)) {
		if (split(line, f, 4) >= 3 && parse_id(f[2]) == (int64_t)id) {
			snprintf(out, len, "%s", f[0]);
			rc = 0;
			break;
		}
	}
	fclose(fp);
	return rc;
}
