/* sandbox.c — restoring a sandbox from a template and running commands in
 * it.  A restore starts a detached QEMU waiting with -incoming defer (RAM
 * file mapped private, the template disk under a private temporary overlay),
 * loads the device state, and gives the resumed guest its own clock, hostname
 * and entropy through the agent.  Signals that arrive meanwhile are held and,
 * if one came, the half-made sandbox is removed before kiln dies of it. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "snapshots/internal.h"

#define AGENT_TIMEOUT_MS 10000

static char *new_id(void)
{
	unsigned char r[6];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		for (size_t i = 0; i < sizeof(r); i++)
			r[i] = (unsigned char)(rand() ^ getpid() ^ (int)time(NULL));
	return kiln_xasprintf("%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4], r[5]);
}

static char *log_tail(const char *dir, const char *name)
{
	char *path = kiln_path_join(dir, name), *data = NULL, *out;
	size_t len = 0;
	kiln_error *e = NULL;

	if (kiln_read_file(path, &data, &len, 0, &e) < 0 || len == 0) {
		kiln_error_free(e);
		free(path);
		free(data);
		return kiln_xstrdup("");
	}
	while (len && (data[len - 1] == '\n' || data[len - 1] == '\r'))
		data[--len] = '\0';
	out = kiln_xstrdup(len > 600 ? data + len - 600 : data);
	free(path);
	free(data);
	return out;
}

/* The guest's identity and clock, one IDENTITY request the agent handles
 * itself (no process): hostname = sandbox id, fresh entropy from the host
 * credited and the guest's CRNG reseeded (each sandbox would otherwise replay
 * the template's random state), and the wall clock, which stood still while
 * the template was stored (the guest's TSC is QEMU's virtual one).  Without
 * wait the request rides along with the next one (snap_run's command). */
static int setup(guest_conn *c, const char *id, bool clock_only, bool wait, kiln_error **err)
{
	uint8_t seed[64];
	struct timespec now;
	struct guest_identity m = { .hostname = (char *)id, .entropy = seed, .entropy_len = sizeof(seed) };

	for (size_t got = 0; !clock_only && got < sizeof(seed);) {
		ssize_t n = getrandom(seed + got, sizeof(seed) - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			abort(); /* only a bad buffer makes getrandom(2) fail */
		got += (size_t)n;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	m.set_time = true;
	m.time_sec = (int64_t)now.tv_sec;
	m.time_nsec = (uint32_t)now.tv_nsec;
	if (clock_only) {
		m.hostname = NULL;
		m.entropy = NULL;
		m.entropy_len = 0;
	} else {
		snap_net_identity(id, &m); /* eth0's own MAC and address (no eth0: ignored) */
	}
	if (guest_set_identity(c, &m, wait, AGENT_TIMEOUT_MS, err) < 0)
		return kiln_error_wrap(err, "setting the sandbox's identity");
	return 0;
}

int snap_guest_setup(guest_conn *c, const char *id, bool wait, kiln_error **err)
{
	return setup(c, id, false, wait, err);
}

/* A pool member was given its own identity (its id is known when it is
 * made) before it was warmed up and paused: claimed, it only needs the
 * clock, which stood still while it was paused.  The guest is spared a MAC
 * and address change (and the IPv6 and route work that follows it) and
 * two ioctls on the claim's path. */
int snap_guest_setup_claimed(guest_conn *c, bool wait, kiln_error **err)
{
	return setup(c, NULL, true, wait, err);
}

/* Under TCG every guest code path runs slowly the first time (translated,
 * then cached in that QEMU): a pooled sandbox runs, before it is paused,
 * what a user's first command needs — the agent's spawn path into the
 * rootfs, its shell, loader and libc, and output on both pipes through the
 * agent to the host (measured: a first `echo hi` cost the guest 20-24 ms of
 * QEMU CPU after a silent warm-up, 10-14 ms after this one).  Failures
 * (a rootfs without these programs) only mean less is warm.  The last two
 * are what E2B's SDK runs (kiln serve --sandboxes): a login shell as a
 * named user in its home, bash or, without it, sh. */
static void warm_up(const snap_template *t, guest_conn *g, const char *id)
{
	static const char *const echo[] = { "echo", "warm-up", NULL };
	static const char *const bash[] = { "/bin/bash", "-l", "-c", "echo warm-up", NULL };
	static const char *const sh[] = { "/bin/sh", "-l", "-c", "echo warm-up", NULL };
	struct guest_exec_opts x;
	struct guest_result res;
	bool have_bash = true;

	for (int i = 0; i < 4; i++) {
		kiln_error *e = NULL;
		if (i == 3 && have_bash)
			break;
		guest_exec_opts_init(&x);
		if (i == 0)
			x.shell = "echo warm-up; echo warm-up >&2";
		else
			x.argv = i == 1 ? echo : i == 2 ? bash : sh;
		x.env = t->cfg.env.n ? (const char *const *)t->cfg.env.v : NULL;
		x.cwd = i >= 2 ? "." : t->cfg.workdir;
		x.run_as = i >= 2 && t->cfg.user == NULL ? "root" : t->cfg.user;
		if (i == 2) { /* a failure only says to warm sh instead */
			have_bash = guest_exec(g, &x, NULL, 0, AGENT_TIMEOUT_MS, &res, &e) == 0;
			kiln_error_free(e);
			continue;
		}
		if (guest_exec(g, &x, NULL, 0, AGENT_TIMEOUT_MS, &res, &e) < 0) {
			kiln_debug("pool: warm-up in %s: %s", id, kiln_error_message(e));
			kiln_error_free(e);
		}
	}
}

struct restore_ctx {
	const snap_template *t;
	const char *dir;
	json_t *state;
};

/* Recorded before anything waits on QEMU: a kiln killed now leaves a
 * sandbox that gc finds and removes, QEMU and all. */
static int on_spawn(void *ud, pid_t pid, kiln_error **err)
{
	struct restore_ctx *x = ud;

	json_object_set_new(x->state, "pid", json_integer(pid));
	json_object_set_new(x->state, "pid_start", json_integer((json_int_t)vm_proc_start_time(pid)));
	return snap_state_write(x->dir, x->state, err);
}

static int on_version(void *ud, const char *version, kiln_error **err)
{
	struct restore_ctx *x = ud;

	return snap_check_depends(x->t, version, err);
}

/* Start QEMU for a sandbox, load the template and connect to its agent.  A
 * pooled one is warmed up (the same exec a claim runs, so the code it needs
 * is translated already under TCG) and paused; otherwise the guest gets its
 * identity and the connection is handed to *conn (if conn). */
static int restore(snap_template *t, const char *id, const char *dir, json_t *state, const struct snap_net_opts *net,
		   struct snap_create_stats *s, bool pooled, bool defer_setup, guest_conn **conn, kiln_error **err)
{
	struct vm_net_opts vo;
	char addr[16];
	int nic = snap_net_resolve(t, net, id, &vo, addr, err);

	if (nic < 0)
		return -1;
	if (nic)
		json_object_set_new(state, "network", snap_net_state(&vo, id));
	const struct snap_config *cfg = &t->cfg;
	const char *accel = cfg->has_depends ? cfg->depends.accel : NULL;
	struct restore_ctx x = { .t = t, .dir = dir, .state = state };
	struct vm_restore_config rc_ = {
		.accel = accel && strcmp(accel, "kvm") == 0 ? VM_ACCEL_KVM : VM_ACCEL_TCG,
		.cpus = cfg->cpus ? cfg->cpus : 1, .memory_mib = cfg->memory_mib ? cfg->memory_mib : 256,
		.net = nic > 0, .net_opts = nic > 0 ? &vo : NULL,
		.memory_file = t->memory, .memory_direct = t->served, .disk = t->disk, .disk_backing = t->rootfs,
		.state = t->state, .dir = dir, .detached = true, .on_spawn = on_spawn, .on_version = on_version, .ud = &x,
	};
	struct vm_restore_stats rs;
	vm_instance *v = NULL;
	guest_conn *g = NULL;
	double t0;
	int rc = -1;

	if ((v = vm_restore(&rc_, &rs, err)) == NULL)
		goto out;
	if (vm_jailed(v))
		json_object_set_new(state, "uid", json_integer((json_int_t)vm_jail_uid(v)));
	else
		json_object_set_new(state, "unconfined", json_true());
	s->jail_ms = rs.jail_ms;
	s->spawn_ms = rs.spawn_ms;
	s->load_ms = rs.load_ms;
	t0 = kiln_now_ms();
	if ((g = snap_agent_connect(dir, 0, pooled, vm_jail_uid(v), AGENT_TIMEOUT_MS, err)) == NULL)
		goto died;
	s->agent_ms = kiln_now_ms() - t0;
	t0 = kiln_now_ms();
	if ((pooled || !defer_setup) && snap_guest_setup(g, id, true, err) < 0)
		goto died;
	if (pooled) /* a claim then sends only the clock */
		json_object_set_new(state, "identity", json_true());
	s->setup_ms = kiln_now_ms() - t0;
	if (pooled) {
		warm_up(t, g, id);
		json_t *r = vm_qmp_execute(vm_get_qmp(v), "stop", NULL, 5000, err);
		if (r == NULL)
			goto died;
		json_decref(r);
	} else if (conn) {
		*conn = g;
		g = NULL;
	}
	rc = 0;
	goto out;
died:
	if (vm_proc_start_time(vm_qemu_pid(v)) == 0) {
		char *tail = log_tail(dir, "qemu.log");
		kiln_error_wrap(err, "QEMU exited%s%s", *tail ? ": " : "", tail);
		free(tail);
	} else if (g == NULL) {
		kiln_error_wrap(err, "the restored guest did not answer (is the snapshot intact?)");
	}
out:
	guest_close(g);
	/* the sandbox's QEMU lives on; on failure snap_sandbox_remove kills it */
	vm_release(v);
	return rc;
}

int snap_sandbox_restore_into(snap_template *t, const char *id, const char *dir, json_t *state,
			      const struct snap_net_opts *net, struct snap_create_stats *s, kiln_error **err)
{
	return restore(t, id, dir, state, net, s, false, false, NULL, err);
}

json_t *snap_sandbox_new_state(const snap_template *t, const char *id, const char *state)
{
	char *created = snap_utc_now();
	json_t *env = json_array();

	for (size_t i = 0; i < t->cfg.env.n; i++)
		json_array_append_new(env, json_string(t->cfg.env.v[i]));
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:o, s:s?, s:s?, s:I, s:I}", "id", id, "template",
			      t->digest, "state", state, "created", created, "creator", (json_int_t)getpid(),
			      "creator_start", (json_int_t)vm_proc_start_time(getpid()), "env", env, "workdir",
			      t->cfg.workdir, "user", t->cfg.user, "cpus", (json_int_t)t->cfg.cpus, "memory_mib",
			      (json_int_t)t->cfg.memory_mib);
	free(created);
	return j;
}

char *snap_sandbox_make(snap_template *t, bool pooled, bool defer_setup, const struct snap_net_opts *net,
			struct snap_create_stats *s, guest_conn **conn, kiln_error **err)
{
	json_t *state = NULL;
	char *root = snap_sandboxes_dir(), *id = NULL, *dir = NULL, *result = NULL;

	if (kiln_mkdir_p(root, 0755, err) < 0)
		goto out;
	for (int tries = 0; dir == NULL && tries < 5; tries++) {
		free(id);
		id = new_id();
		char *d = kiln_path_join(root, id);
		if (mkdir(d, 0700) == 0)
			dir = d;
		else if (errno != EEXIST) {
			kiln_err_errno(err, errno, "mkdir %s", d);
			free(d);
			goto out;
		} else
			free(d);
	}
	if (dir == NULL) {
		kiln_err(err, KILN_E_GENERIC, "could not pick a sandbox id");
		goto out;
	}
	if (strlen(dir) + sizeof("/agent-99.sock") > sizeof(((struct sockaddr_un *)0)->sun_path)) {
		kiln_err(err, KILN_E_LIMIT, "sandbox directory %s is too long for a unix socket path (set KILN_HOME shorter)",
			 dir);
		goto out;
	}
	state = snap_sandbox_new_state(t, id, "creating");
	if (snap_state_write(dir, state, err) < 0 || restore(t, id, dir, state, net, s, pooled, defer_setup, conn, err) < 0)
		goto out;
	if (pooled) {
		char *mark = kiln_path_join(dir, SNAP_POOL_MARK);
		int r = kiln_write_atomic(mark, "", 0, 0644, err);
		free(mark);
		if (r < 0)
			goto out;
	}
	json_object_set_new(state, "state", json_string(pooled ? "pooled" : "running"));
	if (snap_state_write(dir, state, err) < 0)
		goto out;
	result = id;
	id = NULL;
out:
	if (result == NULL && dir) {
		kiln_error *e = NULL;
		if (conn && *conn) {
			guest_close(*conn);
			*conn = NULL;
		}
		if (snap_sandbox_remove(strrchr(dir, '/') + 1, state, &e) < 0) {
			kiln_warn("sandbox: cleaning up %s: %s", dir, kiln_error_message(e));
			kiln_error_free(e);
		}
	}
	json_decref(state);
	free(root);
	free(id);
	free(dir);
	return result;
}

static char *create(const char *template_ref, const struct snap_net_opts *net, bool defer_setup,
		    struct snap_create_stats *stats, guest_conn **conn, snap_template **tp, kiln_error **err)
{
	struct snap_create_stats dummy;
	struct snap_create_stats *s = stats ? stats : &dummy;
	double t0 = kiln_now_ms();
	snap_template *t = NULL;
	char *result = NULL;
	sigset_t block, old, pending;

	memset(s, 0, sizeof(*s));
	if (conn)
		*conn = NULL;
	/* A ^C during the restore is held until the sandbox is whole or gone. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	sigprocmask(SIG_BLOCK, &block, &old);

	if ((t = snap_template_open(template_ref, err)) == NULL || snap_template_check(t, false, err) < 0)
		goto out;
	s->check_ms = kiln_now_ms() - t0;
	/* pool members have the template's network: a create asking for
	 * another, egress rules or published ports is restored for itself */
	if (snap_net_default(net))
		result = snap_pool_claim(t, defer_setup, s, conn, err);
	if (result == NULL && *err == NULL)
		result = snap_sandbox_make(t, false, defer_setup, net, s, conn, err);
	s->total_ms = kiln_now_ms() - t0;
out:
	sigpending(&pending);
	if (result && (sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM) || sigismember(&pending, SIGHUP))) {
		kiln_error *e = NULL;
		if (conn && *conn) {
			guest_close(*conn);
			*conn = NULL;
		}
		snap_sandbox_kill(result, &e);
		kiln_error_free(e);
		free(result);
		result = NULL;
		kiln_err(err, KILN_E_GENERIC, "interrupted");
	}
	if (result == NULL)
		kiln_error_wrap(err, "creating a sandbox from %s", template_ref);
	if (tp && result) {
		*tp = t;
		t = NULL;
	}
	snap_template_free(t);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return result;
}

char *snap_sandbox_create(const char *template_ref, struct snap_create_stats *stats, guest_conn **conn,
			  kiln_error **err)
{
	return create(template_ref, NULL, false, stats, conn, NULL, err);
}

char *snap_sandbox_create_net(const char *template_ref, const struct snap_net_opts *net,
			      struct snap_create_stats *stats, guest_conn **conn, kiln_error **err)
{
	return create(template_ref, net, false, stats, conn, NULL, err);
}

/* The identity a new sandbox's first request carries: a claimed pool
 * member's is only the clock (it got the rest when it was made). */
static int queue_identity(guest_conn *c, const char *id, bool pooled, kiln_error **err)
{
	return pooled ? snap_guest_setup_claimed(c, false, err) : snap_guest_setup(c, id, false, err);
}

char *snap_sandbox_create_sent(const char *template_ref, const struct snap_net_opts *net,
			       struct snap_create_stats *stats, guest_conn **conn, kiln_error **err)
{
	struct snap_create_stats own;
	struct snap_create_stats *s = stats ? stats : &own;
	char *id = create(template_ref, net, true, s, conn, NULL, err);

	/* sent now, its answer read with the next request's: the caller's
	 * first command does not wait for the guest to apply it first */
	if (id && (queue_identity(*conn, id, s->pooled, err) < 0 ||
		   guest_flush(*conn, AGENT_TIMEOUT_MS, err) < 0)) {
		kiln_error *e = NULL;
		guest_close(*conn);
		*conn = NULL;
		snap_sandbox_kill(id, &e);
		kiln_error_free(e);
		free(id);
		id = NULL;
	}
	return id;
}

int snap_run(const char *template_ref, const char *const *argv, guest_output_fn on_stdout, guest_output_fn on_stderr,
	     void *user, struct guest_result *res, struct snap_create_stats *stats, kiln_error **err)
{
	return snap_run_with(template_ref, argv, NULL, on_stdout, on_stderr, user, res, stats, err);
}

int snap_run_with(const char *template_ref, const char *const *argv, const struct snap_exec_opts *o,
		  guest_output_fn on_stdout, guest_output_fn on_stderr, void *user, struct guest_result *res,
		  struct snap_create_stats *stats, kiln_error **err)
{
	struct snap_create_stats dummy;
	struct snap_create_stats *s = stats ? stats : &dummy;
	snap_template *t = NULL;
	guest_conn *c = NULL;
	kiln_error *e = NULL;
	char *id;
	int rc = -1;

	/* The identity request is queued and goes out with the command's EXEC:
	 * one round trip, and the agent applies it before it forks. */
	if ((id = create(template_ref, o ? o->net : NULL, true, s, &c, &t, err)) == NULL)
		return -1;
	if (queue_identity(c, id, s->pooled, err) == 0)
		rc = snap_exec_conn_with(c, id, argv, o, on_stdout, on_stderr, user, res, err);
	guest_close(c);
	if (snap_sandbox_kill(id, &e) < 0) {
		kiln_warn("removing sandbox %s: %s", id, kiln_error_message(e));
		kiln_error_free(e);
	}
	free(id);
	snap_template_free(t);
	return rc;
}

guest_conn *snap_sandbox_connect(const char *id, int timeout_ms, kiln_error **err)
{
	json_t *st = snap_sandbox_state(id, err);
	char *dir = NULL;
	guest_conn *c = NULL;

	if (st == NULL)
		return NULL;
	if (strcmp(snap_sandbox_liveness(st), "paused") == 0) {
		kiln_err(err, KILN_E_GENERIC, "sandbox %s is paused (kiln sandbox resume %s)", id, id);
		goto out;
	}
	if (strcmp(snap_sandbox_liveness(st), "running") != 0) {
		kiln_err(err, KILN_E_GENERIC, "sandbox %s is %s (kiln sandbox gc removes dead ones)", id,
			 snap_sandbox_liveness(st));
		goto out;
	}
	dir = snap_sandbox_dir(id);
	c = snap_agent_connect(dir, -1, false, (uid_t)kiln_json_int(st, "uid", 0), timeout_ms, err);
	if (c == NULL)
		kiln_error_wrap(err, "sandbox %s", id);
out:
	json_decref(st);
	free(dir);
	return c;
}

int snap_sandbox_exec_conn(guest_conn *c, const char *id, const char *const *argv, guest_output_fn on_stdout,
			   guest_output_fn on_stderr, void *user, struct guest_result *res, kiln_error **err)
{
	return snap_exec_conn_with(c, id, argv, NULL, on_stdout, on_stderr, user, res, err);
}

int snap_sandbox_exec(const char *id, const char *const *argv, guest_output_fn on_stdout, guest_output_fn on_stderr,
		      void *user, struct guest_result *res, kiln_error **err)
{
	guest_conn *c = snap_sandbox_connect(id, AGENT_TIMEOUT_MS, err);
	int rc;

	if (c == NULL)
		return -1;
	rc = snap_sandbox_exec_conn(c, id, argv, on_stdout, on_stderr, user, res, err);
	guest_close(c);
	return rc;
}
