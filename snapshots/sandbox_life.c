/* sandbox_life.c — how long a sandbox lives.  A timeout is a wall-clock
 * expiry in its state; a small detached watcher per sandbox (forked from
 * the kiln that created it, holding ID/watch.lock) re-reads the state as it
 * changes and removes the sandbox — QEMU, disk overlay, RAM copy, jail — when
 * it expires, with no kiln command running.  `kiln sandbox gc` removes
 * expired ones too (a watcher that died with its host). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "snapshots/internal.h"

#define WATCH_POLL_MS 250

int64_t snap_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int snap_state_lock(const char *id, kiln_error **err)
{
	char *dir = snap_sandbox_dir(id), *path = kiln_path_join(dir, "state.lock");
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0 && errno == ENOENT)
		kiln_err(err, KILN_E_NOTFOUND, "no sandbox %s", id);
	else if (fd < 0)
		kiln_err_errno(err, errno, "open %s", path);
	else if (flock(fd, LOCK_EX) < 0) {
		kiln_err_errno(err, errno, "lock %s", path);
		close(fd);
		fd = -1;
	}
	free(dir);
	free(path);
	return fd;
}

void snap_state_set_timeout(json_t *st, int64_t timeout_s)
{
	json_object_set_new(st, "timeout_s", json_integer((json_int_t)timeout_s));
	if (timeout_s > 0)
		json_object_set_new(st, "expires_ms", json_integer((json_int_t)(snap_wall_ms() + timeout_s * 1000)));
	else
		json_object_del(st, "expires_ms");
}

bool snap_state_expired(const json_t *st)
{
	int64_t at = (int64_t)kiln_json_int(st, "expires_ms", 0);
	const char *s = kiln_json_str(st, "state");

	/* a paused sandbox's clock stands still: its timeout restarts at resume */
	return at > 0 && !(s && strcmp(s, "paused") == 0) && snap_wall_ms() >= at;
}

int snap_sandbox_set_timeout(const char *id, int64_t timeout_s, kiln_error **err)
{
	json_t *st = NULL;
	char *dir = NULL;
	int lock, rc = -1;
	bool paused = false;

	if (timeout_s < 0)
		return kiln_err(err, KILN_E_USAGE, "a timeout cannot be negative");
	if ((st = snap_sandbox_state(id, err)) == NULL || (lock = snap_state_lock(id, err)) < 0)
		goto out;
	json_decref(st);
	if ((st = snap_sandbox_state(id, err)) != NULL) {
		const char *live = snap_sandbox_liveness(st);
		paused = strcmp(live, "paused") == 0;
		if (strcmp(live, "running") != 0 && !paused)
			kiln_err(err, KILN_E_GENERIC, "sandbox %s is %s", id, live);
		else {
			dir = snap_sandbox_dir(id);
			if (paused)
				json_object_set_new(st, "timeout_s", json_integer((json_int_t)timeout_s));
			else
				snap_state_set_timeout(st, timeout_s);
			rc = snap_state_write(dir, st, err);
		}
	}
	close(lock);
	if (rc == 0 && timeout_s > 0 && !paused)
		snap_watch_start(id);
out:
	json_decref(st);
	free(dir);
	return rc;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The watcher's loop: reload the state when state.json changes (a rename
 * gives it a new inode), remove the sandbox once it expired, end when the
 * sandbox is gone. */
static void watch(const char *id)
{
	char *dir = snap_sandbox_dir(id), *lockp = kiln_path_join(dir, "watch.lock");
	char *statep = kiln_path_join(dir, "state.json");
	struct stat seen = { 0 }, now;
	json_t *st = NULL;
	/* no O_CREAT: snap_watch_start made it.  A watcher that runs late
	 * (scheduled after its sandbox was killed) must not put a file back
	 * into a directory being removed. */
	int fd = open(lockp, O_RDWR | O_CLOEXEC);

	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		goto out; /* another watcher has it, or the sandbox is gone */
	for (;;) {
		kiln_error *e = NULL;
		if (stat(statep, &now) < 0) {
			if (access(dir, F_OK) < 0)
				break; /* removed */
		} else if (!same_file(&now, &seen)) {
			json_decref(st);
			st = kiln_json_load_file(statep, &e);
			kiln_error_free(e);
			e = NULL;
			seen = now;
		}
		if (st && snap_state_expired(st)) {
			int lock = snap_state_lock(id, &e);
			json_t *cur = lock >= 0 ? snap_sandbox_state(id, &e) : NULL;
			if (cur && snap_state_expired(cur) && snap_sandbox_remove(id, cur, &e) == 0) {
				vm_jail_gc();
				kiln_info("sandbox %s: removed at its timeout", id);
			}
			kiln_error_free(e);
			json_decref(cur);
			if (lock >= 0)
				close(lock);
			if (access(dir, F_OK) < 0)
				break;
			continue;
		}
		int64_t wait = WATCH_POLL_MS, at = st ? (int64_t)kiln_json_int(st, "expires_ms", 0) : 0;
		if (at > 0 && at - snap_wall_ms() < wait)
			wait = at - snap_wall_ms() > 5 ? at - snap_wall_ms() : 5;
		kiln_sleep_ms((long)wait);
	}
out:
	if (fd >= 0)
		close(fd);
	json_decref(st);
	free(dir);
	free(lockp);
	free(statep);
}

void snap_watch_start(const char *id)
{
	char *dir = snap_sandbox_dir(id), *lockp = kiln_path_join(dir, "watch.lock");
	int fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600), p;

	free(dir);
	free(lockp);
	if (fd < 0)
		return; /* the sandbox is gone already */
	close(fd);
	p = kiln_daemon_fork(-1);
	if (p < 0) {
		kiln_warn("sandbox %s: cannot start its timeout watcher: %s (kiln sandbox gc removes it when expired)",
			  id, strerror(errno));
		return;
	}
	if (p == 0) {
		prctl(PR_SET_NAME, "kiln-watch", 0, 0, 0);
		watch(id);
		_exit(0);
	}
}
