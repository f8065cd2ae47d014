/* sandbox_admin.c — the bookkeeping of sandboxes: their directories and
 * state files, whether the recorded QEMU is really alive (pid plus start
 * time, so a reused pid is not mistaken for it), and ls / kill / gc, which also find QEMUs whose directory is gone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "snapshots/internal.h"

static bool valid_id(const char *id)
{
	return strlen(id) == 12 && strspn(id, "0123456789abcdef") == 12;
}

char *snap_sandbox_dir(const char *id)
{
	char *root = snap_sandboxes_dir(), *d = kiln_path_join(root, id);

	free(root);
	return d;
}

int snap_state_write(const char *dir, const json_t *state, kiln_error **err)
{
	char *path = kiln_path_join(dir, "state.json"), *tmp = kiln_path_join(dir, "state.json.tmp");
	char *s = json_dumps(state, JSON_INDENT(2) | JSON_SORT_KEYS);
	size_t len = s ? strlen(s) : 0;
	int fd = -1, rc = -1;

	if (s == NULL) {
		kiln_err(err, KILN_E_INVALID, "encode %s", path);
		goto out;
	}
	/* One writer per sandbox at a time (its creator, claimer or killer). */
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
		kiln_err_errno(err, errno, "create %s", tmp);
		goto out;
	}
	if (kiln_write_full(fd, s, len) < 0) {
		kiln_err_errno(err, errno, "write %s", tmp);
		goto out;
	}
	if (write(fd, "\n", 1) != 1 || close(fd) < 0) {
		fd = -1;
		kiln_err_errno(err, errno, "write %s", tmp);
		goto out;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		kiln_err_errno(err, errno, "rename %s", tmp);
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		unlink(tmp);
	free(s);
	free(path);
	free(tmp);
	return rc;
}

json_t *snap_sandbox_state(const char *id, kiln_error **err)
{
	char *dir, *path;
	json_t *j = NULL;
	struct stat st;

	if (!valid_id(id)) {
		kiln_err(err, KILN_E_NOTFOUND, "no sandbox %s (ids are 12 hex digits; see kiln sandbox ls)", id);
		return NULL;
	}
	dir = snap_sandbox_dir(id);
	path = kiln_path_join(dir, "state.json");
	if (stat(dir, &st) < 0)
		kiln_err(err, KILN_E_NOTFOUND, "no sandbox %s", id);
	else if ((j = kiln_json_load_file(path, err)) == NULL)
		kiln_error_wrap(err, "sandbox %s has no readable state (kiln sandbox gc removes it)", id);
	free(dir);
	free(path);
	return j;
}

static bool recorded_alive(const json_t *state, const char *pid_key, const char *start_key)
{
	pid_t pid = (pid_t)kiln_json_int(state, pid_key, 0);
	unsigned long long start = vm_proc_start_time(pid);

	if (start == 0)
		return false;
	return start_key == NULL || (unsigned long long)kiln_json_int(state, start_key, 0) == start;
}

const char *snap_sandbox_liveness(const json_t *state)
{
	const char *s = kiln_json_str(state, "state");

	if (s && strcmp(s, "creating") == 0)
		return recorded_alive(state, "creator", "creator_start") ? "creating" : "dead";
	if (s && strcmp(s, "running") == 0)
		return recorded_alive(state, "pid", "pid_start") ? "running" : "dead";
	if (s && strcmp(s, "paused") == 0)
		return "paused"; /* no QEMU: its memory, state and disk are in ID/paused */
	if (s && strcmp(s, "pausing") == 0)
		return recorded_alive(state, "creator", "creator_start") ? s : "dead";
	if (s && strcmp(s, "resuming") == 0 && !recorded_alive(state, "creator", "creator_start")) {
		/* an interrupted resume leaves the paused files as they were */
		char *dir = snap_sandbox_dir(kiln_json_str(state, "id") ? kiln_json_str(state, "id") : "-");
		char *f = kiln_path_join(dir, "paused/state");
		const char *what = access(f, F_OK) == 0 ? "paused" : "dead";
		free(dir);
		free(f);
		return what;
	}
	if (s && strcmp(s, "resuming") == 0)
		return s;
	if (s && strcmp(s, "pooled") == 0 && recorded_alive(state, "pid", "pid_start") && kiln_json_str(state, "id")) {
		/* Claimable (the mark is there), being claimed by a live kiln, or lost. */
		char *dir = snap_sandbox_dir(kiln_json_str(state, "id")), *mark = kiln_path_join(dir, SNAP_POOL_MARK);
		const char *what = access(mark, F_OK) == 0 ? "pooled" : "dead";
		DIR *d = *what == 'd' ? opendir(dir) : NULL;
		struct dirent *de;
		while (d && (de = readdir(d)) != NULL)
			if (strncmp(de->d_name, "claim-", 6) == 0 && vm_proc_start_time((pid_t)atol(de->d_name + 6)) != 0)
				what = "creating";
		if (d)
			closedir(d);
		free(dir);
		free(mark);
		return what;
	}
	return "dead";
}

static void kill_and_wait(pid_t pid, unsigned long long start)
{
	if (pid <= 0 || vm_proc_start_time(pid) != start)
		return;
	kill(pid, SIGKILL);
	for (int i = 0; i < 400 && vm_proc_start_time(pid) == start; i++)
		kiln_sleep_ms(5);
}

void snap_qemu_stop(const json_t *state)
{
	pid_t pid = (pid_t)kiln_json_int(state, "pid", 0);
	unsigned long long start = (unsigned long long)kiln_json_int(state, "pid_start", 0);

	if (pid > 0 && start == 0)
		start = vm_proc_start_time(pid); /* recorded before its start time was read */
	kill_and_wait(pid, start);
}

int snap_sandbox_remove(const char *id, const json_t *state, kiln_error **err)
{
	char *dir = snap_sandbox_dir(id);
	int rc;

	if (state) {
		snap_qemu_stop(state);
		/* its egress chain goes with it (a slot's next VM rewrites it anyway) */
		const json_t *net = json_object_get(state, "network");
		const char *mode = kiln_json_str(net, "mode");
		if (net && ((mode && strcmp(mode, "outbound") == 0) || json_array_size(json_object_get(net, "publish")) > 0))
			vm_net_release((uid_t)kiln_json_int(state, "uid", 0));
	}
	vm_dir_cleanup(dir); /* the RAM copy outside it */
	rc = kiln_rm_rf(dir, err);
	free(dir);
	return rc;
}

int snap_sandbox_kill(const char *id, kiln_error **err)
{
	json_t *st = snap_sandbox_state(id, err);
	int rc;

	if (st == NULL) {
		if (*err && (*err)->kind == KILN_E_NOTFOUND)
			return -1;
		kiln_error_clear(err); /* unreadable state: remove what is there */
	}
	rc = snap_sandbox_remove(id, st, err);
	json_decref(st);
	return rc;
}

json_t *snap_sandbox_info(const char *id, kiln_error **err)
{
	json_t *st, *item;

	if (!valid_id(id)) {
		kiln_err(err, KILN_E_NOTFOUND, "no sandbox '%.64s'", id);
		return NULL;
	}
	if ((st = snap_sandbox_state(id, err)) == NULL)
		return NULL;
	item = json_pack("{s:s, s:s, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}", "id", id, "state",
			 snap_sandbox_liveness(st), "template", json_object_get(st, "template"), "created",
			 json_object_get(st, "created"), "labels", json_object_get(st, "labels"), "timeout_s",
			 json_object_get(st, "timeout_s"), "expires_ms", json_object_get(st, "expires_ms"), "env",
			 json_object_get(st, "env"), "user", json_object_get(st, "user"), "workdir",
			 json_object_get(st, "workdir"), "cpus", json_object_get(st, "cpus"));
	if (json_object_get(st, "memory_mib"))
		json_object_set(item, "memory_mib", json_object_get(st, "memory_mib"));
	json_decref(st);
	return item;
}

json_t *snap_sandbox_list(kiln_error **err)
{
	char *root = snap_sandboxes_dir();
	DIR *d = opendir(root);
	struct dirent *de;
	json_t *out = json_array();

	(void)err;
	while (d && (de = readdir(d)) != NULL) {
		if (!valid_id(de->d_name))
			continue;
		kiln_error *e = NULL;
		json_t *st = snap_sandbox_state(de->d_name, &e), *item;
		if (st == NULL) {
			item = json_pack("{s:s, s:s}", "id", de->d_name, "state", "dead");
		} else {
			item = json_pack("{s:s, s:s, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}", "id", de->d_name,
					 "state", snap_sandbox_liveness(st), "template", json_object_get(st, "template"),
					 "pid", json_object_get(st, "pid"), "created", json_object_get(st, "created"),
					 "unconfined", json_object_get(st, "unconfined"), "uid", json_object_get(st, "uid"),
					 "labels", json_object_get(st, "labels"), "timeout_s", json_object_get(st, "timeout_s"),
					 "expires_ms", json_object_get(st, "expires_ms"));
			if (json_object_get(st, "network"))
				json_object_set(item, "network", json_object_get(st, "network"));
			/* what the sandbox service's list says of each (E2B's cpuCount, memoryMB) */
			if (json_object_get(st, "cpus"))
				json_object_set(item, "cpus", json_object_get(st, "cpus"));
			if (json_object_get(st, "memory_mib"))
				json_object_set(item, "memory_mib", json_object_get(st, "memory_mib"));
		}
		kiln_error_free(e);
		json_decref(st);
		json_array_append_new(out, item);
	}
	if (d)
		closedir(d);
	free(root);
	return out;
}

/* QEMUs started for a sandbox whose directory no longer says they run (kiln
 * killed between the spawn and recording the pid, or a directory removed by
 * hand): found by the sandbox path in their command line. */
static int reap_strays(const char *root)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	size_t rl = strlen(root);
	int n = 0;

	while (d && (de = readdir(d)) != NULL) {
		pid_t pid = (pid_t)atol(de->d_name);
		char path[64], *cmd = NULL;
		size_t len = 0;
		kiln_error *e = NULL;
		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/cmdline", (long)pid);
		if (kiln_read_file(path, &cmd, &len, 65536, &e) < 0) {
			kiln_error_free(e);
			continue;
		}
		for (size_t i = 0; i < len; i += strlen(cmd + i) + 1) {
			const char *a = cmd + i;
			if (strncmp(a, "unix:", 5) != 0 || strncmp(a + 5, root, rl) != 0 || a[5 + rl] != '/')
				continue;
			char id[13] = { 0 };
			memcpy(id, a + 6 + rl, strnlen(a + 6 + rl, 12));
			json_t *st = snap_sandbox_state(id, &e);
			kiln_error_clear(&e);
			bool ours = st && (pid_t)kiln_json_int(st, "pid", 0) == pid &&
				    strcmp(snap_sandbox_liveness(st), "dead") != 0;
			if (!ours && strcmp(snap_sandbox_liveness(st), "creating") != 0) {
				kill_and_wait(pid, vm_proc_start_time(pid));
				n++;
			}
			json_decref(st);
			break;
		}
		free(cmd);
	}
	if (d)
		closedir(d);
	return n;
}

int snap_sandbox_gc(kiln_error **err)
{
	json_t *list = snap_sandbox_list(err);
	char *root = snap_sandboxes_dir();
	int n = 0, rc = 0;

	for (size_t i = 0; list && i < json_array_size(list); i++) {
		const json_t *item = json_array_get(list, i);
		const char *id = kiln_json_str(item, "id");
		kiln_error *e = NULL;
		json_t *st = NULL;
		/* dead, or past its timeout (its watcher is gone: a crashed host) */
		if (strcmp(kiln_json_str(item, "state"), "dead") != 0) {
			st = snap_sandbox_state(id, &e);
			bool expired = st && strcmp(kiln_json_str(item, "state"), "running") == 0 && snap_state_expired(st);
			kiln_error_free(e);
			if (!expired) {
				json_decref(st);
				continue;
			}
		} else {
			st = snap_sandbox_state(id, &e);
			kiln_error_free(e);
		}
		if (snap_sandbox_remove(id, st, err) < 0)
			rc = -1;
		else
			n++;
		json_decref(st);
	}
	n += reap_strays(root);
	vm_jail_gc(); /* the cgroups of jails no VM holds */
	json_decref(list);
	free(root);
	return rc < 0 ? -1 : n;
}
