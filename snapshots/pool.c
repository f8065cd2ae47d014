/* pool.c — sandboxes restored ahead of time: restored, warmed up (TCG has
 * translated what a first command runs), paused; a claim is one atomic
 * rename of the pool mark, then `cont`, a handshake and the clock (the rest
 * of its identity was given when it was made).  Fills of a
 * template are serialised by a lock on its record (snapshots/pools/HEX). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include "snapshots/internal.h"

#define AGENT_TIMEOUT_MS 10000

/* Ids of the live pooled sandboxes of template digest.  Only directories
 * with a pool mark are read: a claim should not pay for every running
 * sandbox on the host. */
static void pooled_ids(const char *digest, kiln_strv *out)
{
	char *root = snap_sandboxes_dir();
	DIR *d = opendir(root);
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		char *mark;
		json_t *st;
		kiln_error *e = NULL;
		bool marked;
		if (de->d_name[0] == '.')
			continue;
		mark = kiln_xasprintf("%s/%s/%s", root, de->d_name, SNAP_POOL_MARK);
		marked = access(mark, F_OK) == 0;
		free(mark);
		if (!marked || (st = snap_sandbox_state(de->d_name, &e)) == NULL) {
			kiln_error_free(e);
			continue;
		}
		const char *tp = kiln_json_str(st, "template");
		if (tp && strcmp(tp, digest) == 0 && strcmp(snap_sandbox_liveness(st), "pooled") == 0)
			kiln_strv_push(out, de->d_name);
		json_decref(st);
	}
	if (d)
		closedir(d);
	free(root);
}

static int resume(const char *dir, const char *id, pid_t qemu, uid_t uid, bool own_identity, bool defer_setup,
		  struct snap_create_stats *s, guest_conn **conn, kiln_error **err)
{
	char *qmp_path = kiln_path_join(dir, "qmp.sock");
	guest_conn *g = NULL;
	json_t *r;
	double t0 = kiln_now_ms();
	int rc = -1;

	/* A member made by a background refill runs at its nice value; claimed,
	 * it is foreground work (PGRP: every thread of QEMU, its own group). */
	if (qemu > 0 && getpriority(PRIO_PGRP, qemu) > 0 && setpriority(PRIO_PGRP, qemu, 0) < 0)
		kiln_debug("pool: renice %ld: %s", (long)qemu, strerror(errno));
	/* The agent's socket is connected and our HELLO queued while the guest
	 * is still paused (QEMU accepts meanwhile): once it runs, it finds the
	 * host there and the HELLO, the IDENTITY and a first EXEC in a row. */
	if ((g = snap_agent_connect(dir, 0, false, uid, AGENT_TIMEOUT_MS, err)) == NULL)
		goto out;
	s->agent_ms = kiln_now_ms() - t0;
	t0 = kiln_now_ms();
	if ((r = vm_qmp_run_once(qmp_path, "cont", uid, 5000, err)) == NULL)
		goto out;
	json_decref(r);
	s->load_ms = kiln_now_ms() - t0;
	t0 = kiln_now_ms();
	/* A member an older kiln made went to the pool as "kiln-pool": it gets
	 * its whole identity now, queued ahead of the clock. */
	if (!own_identity && snap_guest_setup(g, id, false, err) < 0)
		goto out;
	if (!defer_setup && snap_guest_setup_claimed(g, true, err) < 0)
		goto out;
	s->setup_ms = kiln_now_ms() - t0;
	if (conn) {
		*conn = g;
		g = NULL;
	}
	rc = 0;
out:
	guest_close(g);
	free(qmp_path);
	return rc;
}

char *snap_pool_claim(snap_template *t, bool defer_setup, struct snap_create_stats *s, guest_conn **conn,
		      kiln_error **err)
{
	kiln_strv ids = KILN_STRV_INIT;
	char *result = NULL;

	pooled_ids(t->digest, &ids);
	for (size_t i = 0; i < ids.n && result == NULL; i++) {
		char *dir = snap_sandbox_dir(ids.v[i]), *mark = kiln_path_join(dir, SNAP_POOL_MARK);
		char *claim = kiln_xasprintf("%s/claim-%ld", dir, (long)getpid());
		json_t *st = NULL;
		/* Ours now.  Until the state says "running", the claim file tells
		 * who holds it (ls: "creating" while that kiln lives, else "dead"),
		 * so the state is written once, at the end, and the file stays. */
		if (rename(mark, claim) == 0) {
			st = snap_sandbox_state(ids.v[i], err);
			if (st && resume(dir, ids.v[i], (pid_t)kiln_json_int(st, "pid", 0),
					 (uid_t)kiln_json_int(st, "uid", 0),
					 json_is_true(json_object_get(st, "identity")), defer_setup, s, conn, err) == 0) {
				json_object_set_new(st, "state", json_string("running"));
				json_object_set_new(st, "creator", json_integer(getpid()));
				json_object_set_new(st, "creator_start", json_integer((json_int_t)vm_proc_start_time(getpid())));
				if (snap_state_write(dir, st, err) == 0)
					result = kiln_xstrdup(ids.v[i]);
			}
			if (result == NULL) {
				/* A broken pool member: remove it and fall back to a restore. */
				kiln_warn("sandbox: pooled %s failed: %s", ids.v[i], kiln_error_message(*err));
				kiln_error_clear(err);
				if (conn && *conn) {
					guest_close(*conn);
					*conn = NULL;
				}
				snap_sandbox_remove(ids.v[i], st, err);
				kiln_error_clear(err);
			}
		}
		json_decref(st);
		free(dir);
		free(mark);
		free(claim);
	}
	kiln_strv_free(&ids);
	if (result)
		s->pooled = true;
	return result;
}

int snap_pool_fill(const char *template_ref, int n, kiln_error **err)
{
	snap_template *t = NULL;
	kiln_strv ids = KILN_STRV_INIT;
	char *dir = kiln_home_path(NULL, KILN_PATH_SNAP_POOLS, NULL), *rec = NULL;
	int fd = -1, made = -1;

	if ((t = snap_template_open(template_ref, err)) == NULL || snap_template_check(t, false, err) < 0)
		goto out;
	if (kiln_mkdir_p(dir, 0755, err) < 0)
		goto out;
	rec = kiln_path_join(dir, kiln_digest_hex(t->digest));
	if ((fd = open(rec, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		kiln_err_errno(err, errno, "open %s", rec);
		goto out;
	}
	if (flock(fd, LOCK_EX) < 0) {
		kiln_err_errno(err, errno, "lock %s", rec);
		goto out;
	}
	if (n < 0) {
		char buf[32] = { 0 };
		n = pread(fd, buf, sizeof(buf) - 1, 0) > 0 ? atoi(buf) : 0;
	} else {
		char buf[32];
		int len = snprintf(buf, sizeof(buf), "%d\n", n);
		if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)len, 0) != len) {
			kiln_err_errno(err, errno, "write %s", rec);
			goto out;
		}
	}
	if (n > 64) {
		kiln_err(err, KILN_E_LIMIT, "a pool of %d sandboxes is more than 64", n);
		goto out;
	}
	pooled_ids(t->digest, &ids);
	made = 0;
	for (size_t i = (size_t)n; i < ids.n; i++) {
		/* Shrinking: only what can still be claimed away from claimers. */
		char *d = snap_sandbox_dir(ids.v[i]), *mark = kiln_path_join(d, SNAP_POOL_MARK);
		char *claim = kiln_xasprintf("%s/claim-%ld", d, (long)getpid());
		if (rename(mark, claim) == 0 && snap_sandbox_kill(ids.v[i], err) < 0)
			kiln_error_clear(err);
		free(d);
		free(mark);
		free(claim);
	}
	for (size_t have = ids.n; have < (size_t)n; have++) {
		struct snap_create_stats st;
		char *id = snap_sandbox_make(t, true, false, NULL, &st, NULL, err);
		if (id == NULL) {
			made = -1;
			break;
		}
		kiln_debug("pool: %s ready (qemu %.0f ms, load %.0f ms, warm-up %.0f ms)", id, st.spawn_ms, st.load_ms,
			   st.agent_ms + st.setup_ms);
		free(id);
		made++;
	}
out:
	if (made < 0)
		kiln_error_wrap(err, "filling the pool of %s", template_ref);
	if (fd >= 0)
		close(fd);
	kiln_strv_free(&ids);
	snap_template_free(t);
	free(dir);
	free(rec);
	return made;
}
