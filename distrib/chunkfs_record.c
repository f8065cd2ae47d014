/* chunkfs_record.c — recording a template's working set with the host's file
 * server (chunkfs.c): its stored files are served under a fresh name (so no
 * page of them is cached yet) and every read the server sees is logged; a
 * trial restore and first exec (snapshots/workset.c) then leave the byte
 * ranges that a lazy start must have first. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "distrib/distrib.h"

/* The server was started for a recording (a build host that serves nothing
 * else): stopped again when the recording ends. */
static bool started_for_recording;

static char *templates_dir(void)
{
	char *home = kiln_home(), *d = kiln_path_join(home, "chunkfs/templates");
	free(home);
	return d;
}

char *dist_chunkfs_record_start(const char *template_digest, const char *rootfs, const char *memory, const char *disk,
			       char **key, kiln_error **err)
{
	char *dir = templates_dir(), *path = NULL, *s = NULL, *mnt = NULL, *result = NULL;
	char seed[256], k[KILN_DIGEST_MAX];
	struct timespec ts;
	json_t *rec = NULL;

	*key = NULL;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(seed, sizeof(seed), "%s %ld %ld %ld", template_digest, (long)getpid(), (long)ts.tv_sec, ts.tv_nsec);
	kiln_digest_buf(KILN_SHA256, seed, strlen(seed), k);
	if (kiln_mkdir_p(dir, 0700, err) < 0)
		goto out;
	path = kiln_xasprintf("%s/%s.json", dir, kiln_digest_hex(k));
	rec = json_pack("{s:s, s:{s:s, s:s, s:s}}", "template", template_digest, "local", "rootfs", rootfs, "memory",
			memory, "disk", disk);
	s = json_dumps(rec, JSON_COMPACT);
	bool was_up = dist_chunkfs_running();
	if (kiln_write_atomic(path, s, strlen(s), 0600, err) < 0 || dist_chunkfs_ensure(err) < 0)
		goto out;
	started_for_recording = !was_up;
	char *home = kiln_home();
	mnt = kiln_xasprintf("%s/chunkfs/mnt/%s", home, kiln_digest_hex(k));
	free(home);
	struct stat st;
	if (stat(mnt, &st) < 0) {
		kiln_err_errno(err, errno, "chunkfs: %s", mnt);
		goto out;
	}
	*key = kiln_xstrdup(kiln_digest_hex(k));
	result = mnt;
	mnt = NULL;
out:
	if (result == NULL && path)
		unlink(path);
	json_decref(rec);
	free(s);
	free(dir);
	free(path);
	free(mnt);
	return result;
}

struct range {
	uint64_t off, len;
};

static int by_off(const void *a, const void *b)
{
	const struct range *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

json_t *dist_chunkfs_record_end(const char *key, kiln_error **err)
{
	static const char *const roles[] = { "rootfs", "memory", "disk" };
	char *dir = templates_dir(), *rec = kiln_xasprintf("%s/%s.json", dir, key),
	     *log = kiln_xasprintf("%s/%s.reads", dir, key), *data = NULL;
	size_t len = 0;
	json_t *out = NULL;

	if (kiln_read_file(log, &data, &len, 256 << 20, err) < 0)
		goto done;
	out = json_object();
	for (size_t r = 0; r < 3; r++) {
		struct range *v = NULL;
		size_t n = 0, cap = 0;
		char role[16];
		unsigned long long off, l;
		for (char *line = data; line && *line;) {
			char *nl = strchr(line, '\n');
			if (sscanf(line, "%15s %llu %llu", role, &off, &l) == 3 && strcmp(role, roles[r]) == 0 && l > 0) {
				if (n == cap)
					v = kiln_xrealloc(v, (cap = cap ? 2 * cap : 256) * sizeof(*v));
				v[n++] = (struct range){ off, l };
			}
			line = nl ? nl + 1 : NULL;
		}
		if (n)
			qsort(v, n, sizeof(*v), by_off);
		json_t *arr = json_array();
		for (size_t i = 0; i < n;) {
			uint64_t a = v[i].off, b = v[i].off + v[i].len;
			for (i++; i < n && v[i].off <= b; i++)
				if (v[i].off + v[i].len > b)
					b = v[i].off + v[i].len;
			json_array_append_new(arr, json_pack("[I, I]", (json_int_t)a, (json_int_t)(b - a)));
		}
		json_object_set_new(out, roles[r], arr);
		free(v);
	}
done:
	unlink(rec);
	unlink(log);
	if (started_for_recording) {
		kiln_error *e = NULL;
		if (dist_chunkfs_stop(&e) < 0) {
			kiln_warn("%s", kiln_error_message(e));
			kiln_error_free(e);
		}
		started_for_recording = false;
	}
	free(dir);
	free(rec);
	free(log);
	free(data);
	return out;
}
