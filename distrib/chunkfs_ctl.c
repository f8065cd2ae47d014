/* chunkfs_ctl.c — the callers' side of the host's template file server
 * (chunkfs.c): start it, stop it, tell it about a lazily pulled template,
 * and where that template's files are (docs/distribution.md "Lazy
 * templates"); the paths both sides use. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "distrib/internal.h"
#include "vm/vm.h"

#define FUSE_MAGIC 0x65735546

char *dist_cfs_dir(void)
{
	char *home = kiln_home(), *d = kiln_path_join(home, "chunkfs");
	free(home);
	return d;
}

char *dist_cfs_sub(const char *name)
{
	char *d = dist_cfs_dir(), *p = kiln_path_join(d, name);
	free(d);
	return p;
}

char *dist_cfs_record_path(const char *hex)
{
	char *d = dist_cfs_dir(), *p = kiln_xasprintf("%s/templates/%s.json", d, hex);
	free(d);
	return p;
}

bool dist_cfs_valid_hex(const char *s)
{
	return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

bool dist_cfs_is_mounted(const char *mnt, bool *stale)
{
	struct statfs sf;

	*stale = false;
	if (statfs(mnt, &sf) < 0) {
		*stale = errno == ENOTCONN;
		return *stale;
	}
	return sf.f_type == FUSE_MAGIC;
}

int dist_chunkfs_ensure(kiln_error **err)
{
	char *mnt = dist_cfs_sub("mnt"), *logp = dist_cfs_sub("log");
	bool stale;
	int rc = -1;

	if (dist_cfs_is_mounted(mnt, &stale) && !stale) {
		rc = 0;
		goto out;
	}
	/* A server that died (kill -9, OOM) leaves its mount behind, answering
	 * ENOTCONN: nobody serves it any more, so it is detached before a new
	 * server mounts there, or no lazy template would start again. */
	if (stale && umount2(mnt, MNT_DETACH) < 0 && errno != EINVAL) {
		kiln_err_errno(err, errno, "chunkfs: detaching the dead server's mount %s", mnt);
		goto out;
	}
	if (kiln_mkdir_p(mnt, 0755, err) < 0)
		goto out;
	/* detached, in its own session: it outlives this kiln (and serves
	 * every sandbox of the host until `kiln sandbox gc` stops it) */
	int lf = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	int d = kiln_daemon_fork(lf);
	if (d == 0) {
		execl("/proc/self/exe", "kiln", "chunkfs", "serve", (char *)NULL);
		_exit(127);
	}
	if (lf >= 0)
		close(lf);
	if (d < 0) {
		kiln_err_errno(err, errno, "fork");
		goto out;
	}
	for (int i = 0; i < 1000; i++) {
		if (dist_cfs_is_mounted(mnt, &stale) && !stale) {
			rc = 0;
			goto out;
		}
		kiln_sleep_ms(5);
	}
	char *tail = NULL;
	size_t tl = 0;
	kiln_read_file(logp, &tail, &tl, 0, NULL);
	kiln_err(err, KILN_E_IO, "chunkfs: the file server did not come up at %s (log %s: %.400s)", mnt, logp,
		 tail && tl > 400 ? tail + tl - 400 : tail ? tail : "");
	free(tail);
out:
	free(mnt);
	free(logp);
	return rc;
}

/* The start time of pid (vm_proc_start_time) if it is a file server
 * (`kiln chunkfs serve`: the pid file may name a pid since reused), else 0;
 * while it keeps that start time, it is the same process. */
static unsigned long long server_start(pid_t pid)
{
	char path[64], *cmd = NULL;
	size_t len = 0;
	unsigned long long t = vm_proc_start_time(pid);

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if (t == 0 || kiln_read_file(path, &cmd, &len, 4096, NULL) < 0 || len == 0) {
		free(cmd);
		return 0;
	}
	for (size_t i = 0; i + 1 < len; i++)
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	if (strstr(cmd, "chunkfs serve") == NULL)
		t = 0;
	free(cmd);
	return t;
}

int dist_chunkfs_stop(kiln_error **err)
{
	char *mnt = dist_cfs_sub("mnt"), *pidp = dist_cfs_sub("pid"), *data = NULL;
	size_t len = 0;
	bool stale;
	int rc = 0;

	if (kiln_read_file(pidp, &data, &len, 64, NULL) == 0) {
		long pid = strtol(data, NULL, 10);
		unsigned long long t = pid > 1 ? server_start((pid_t)pid) : 0;
		if (t != 0) {
			kill((pid_t)pid, SIGTERM);
			for (int i = 0; i < 300 && dist_cfs_is_mounted(mnt, &stale) && !stale; i++)
				kiln_sleep_ms(10);
			/* stopped means gone: one still there after its unmount (or
			 * stuck in a request) would serve a mount nobody sees */
			for (int i = 0; i < 100 && vm_proc_start_time((pid_t)pid) == t; i++)
				kiln_sleep_ms(10);
			if (vm_proc_start_time((pid_t)pid) == t) {
				kiln_warn("chunkfs: the file server (pid %ld) did not stop on SIGTERM: killed", pid);
				kill((pid_t)pid, SIGKILL);
				for (int i = 0; i < 100 && vm_proc_start_time((pid_t)pid) == t; i++)
					kiln_sleep_ms(10);
			}
		}
	}
	if (dist_cfs_is_mounted(mnt, &stale) && umount2(mnt, MNT_DETACH) < 0 && errno != EINVAL)
		rc = kiln_err_errno(err, errno, "chunkfs: umount %s", mnt);
	free(data);
	free(mnt);
	free(pidp);
	return rc;
}

bool dist_chunkfs_running(void)
{
	char *mnt = dist_cfs_sub("mnt");
	bool stale, r = dist_cfs_is_mounted(mnt, &stale) && !stale;

	free(mnt);
	return r;
}

int dist_chunkfs_add(const char *template_digest, const char *registry, const char *repo,
		    const struct dist_tmpl *t, kiln_error **err)
{
	const char *hex = kiln_digest_hex(template_digest);
	char *dir = dist_cfs_sub("templates"), *path = NULL, *s = NULL;
	json_t *rec = NULL;
	int rc = -1;

	if (!dist_cfs_valid_hex(hex)) {
		kiln_err(err, KILN_E_INVALID, "chunkfs: bad template digest %.80s", template_digest);
		goto out;
	}
	if (kiln_mkdir_p(dir, 0700, err) < 0)
		goto out;
	path = dist_cfs_record_path(hex);
	rec = json_pack("{s:s, s:s, s:s}", "registry", registry, "repo", repo, "index", t->index);
	s = json_dumps(rec, JSON_COMPACT);
	rc = kiln_write_atomic(path, s, strlen(s), 0600, err);
out:
	json_decref(rec);
	free(s);
	free(dir);
	free(path);
	return rc;
}

char *dist_chunkfs_files(const char *template_digest, kiln_error **err)
{
	const char *hex = kiln_digest_hex(template_digest);
	char *rec = dist_cfs_valid_hex(hex) ? dist_cfs_record_path(hex) : NULL, *mnt = NULL, *dir = NULL;

	if (rec == NULL || access(rec, F_OK) != 0) {
		kiln_err(err, KILN_E_NOTFOUND, "template %.19s is not served from the chunk store", template_digest);
		goto out;
	}
	if (dist_chunkfs_ensure(err) < 0)
		goto out;
	mnt = dist_cfs_sub("mnt");
	dir = kiln_path_join(mnt, hex);
	struct stat st;
	if (stat(dir, &st) < 0) {
		kiln_err_errno(err, errno, "chunkfs: %s (log: %s/chunkfs/log)", dir, "$KILN_HOME");
		free(dir);
		dir = NULL;
	}
out:
	free(rec);
	free(mnt);
	return dir;
}
