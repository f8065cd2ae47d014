/* cmd_sandbox.c — `kiln sandbox create|exec|ls|kill|gc|pool`: sandboxes
 * restored from templates, each a detached QEMU with its state in
 * $KILN_HOME/sandboxes.  Commands get the template's user, workdir and env
 * (with the sandbox's and the exec's env over it).  cp and logs are in
 * sandbox_files.c; timeout, pause, resume and commit in sandbox_state.c. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/sandbox.h"
#include "cli/net_flags.h"
#include "cli/xfer.h"
#include "snapshots/snapshots.h"

int cli_parse_timeout(const char *s, int64_t *out, kiln_error **err)
{
	if (kiln_parse_duration(s, out, err) < 0)
		return kiln_error_wrap(err, "--timeout");
	return 0;
}

/* docker's --env-file: NAME=VALUE lines, NAME alone takes this process's
 * value (skipped when unset), blank lines and # comments ignored. */
static int read_env_file(const char *path, kiln_strv *out, kiln_error **err)
{
	char *data = NULL, *line, *save = NULL;
	size_t len = 0;
	int n = 0;

	if (kiln_read_file(path, &data, &len, 1 << 20, err) < 0)
		return kiln_error_wrap(err, "--env-file");
	for (line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		n++;
		line[strcspn(line, "\r")] = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		if (*line == '\0' || *line == '#')
			continue;
		if (*line == '=') {
			free(data);
			return kiln_err(err, KILN_E_USAGE, "%s:%d: '%s' has no name", path, n, line);
		}
		if (strchr(line, '=')) {
			kiln_strv_push(out, line);
		} else if (getenv(line)) {
			kiln_strv_push_owned(out, kiln_xasprintf("%s=%s", line, getenv(line)));
		}
	}
	free(data);
	return 0;
}

static int opt_env_file(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	kiln_error *err = NULL;

	(void)cmd;
	return read_env_file(arg, opt->value, &err) < 0 ? cli_fail(err) : 0;
}

static int opt_label(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	if (arg[0] == '=' || strchr(arg, '=') == NULL)
		return cli_usage_error(cmd, "--label wants KEY=VALUE, not '%s'", arg);
	kiln_strv_push(opt->value, arg);
	return 0;
}

static void to_stdout(void *user, const void *data, size_t len)
{
	(void)user;
	fwrite(data, 1, len, stdout);
	fflush(stdout);
}

static void to_stderr(void *user, const void *data, size_t len)
{
	(void)user;
	fwrite(data, 1, len, stderr);
}

/* The exit code kiln exits with (128+N for a signal), or -1 with *err. */
static int sandbox_exec(const char *id, const char *const *argv, const struct snap_exec_opts *o, kiln_error **err)
{
	struct guest_result res = { 0 };

	if (snap_sandbox_exec_with(id, argv, o, to_stdout, to_stderr, NULL, &res, err) < 0) {
		if (res.exit_code == 0)
			return -1;
		cli_fail(*err); /* not started: said why, exit like a shell */
		*err = NULL;
	}
	if (res.timed_out)
		return 124;
	return res.signal ? 128 + res.signal : res.exit_code;
}

/* After a claim, top the pool up again in the background (a detached
 * `kiln sandbox pool TEMPLATE`), so the next create finds one too; the
 * caller waits only for the fork of the daemon, not for its work. */
void cli_pool_refill(const char *tmpl);
void cli_pool_refill(const char *tmpl)
{
	if (kiln_daemon_fork(-1) == 0) {
		/* Background work: the sandbox just claimed comes first.  Its
		 * QEMUs inherit the nice value; a claim sets it back to 0,
		 * which only root may do — so only root nices the refill. */
		if (geteuid() == 0 && setpriority(PRIO_PROCESS, 0, 10) < 0) {
			/* not fatal: it only competes more */
		}
		execl("/proc/self/exe", "kiln", "sandbox", "pool", tmpl, (char *)NULL);
		_exit(127);
	}
}

static int run_pool(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	unsigned size = UINT_MAX;
	int i, rc, made;
	const struct cli_option opts[] = {
		CLI_UINT('n', "size", &size, "N", 0, 64, "keep N ready (0 empties the pool; default: the size last set)"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i != argc - 1)
		return cli_usage_error(cmd, "one template, please");
	int n = size == UINT_MAX ? -1 : (int)size;
	if (cli_tmpl_need(argv[i], &err) < 0 || (made = snap_pool_fill(argv[i], n, &err)) < 0)
		return cli_fail(err);
	printf("started %d\n", made);
	return KILN_EXIT_OK;
}

static int run_create(const struct kiln_command *cmd, int argc, char **argv)
{
	struct snap_create_stats st;
	struct cli_net_flags net = { 0 };
	struct snap_create_opts co = { .timeout_s = SNAP_DEFAULT_TIMEOUT_S, .net = &net.opts };
	kiln_strv env = KILN_STRV_INIT, labels = KILN_STRV_INIT;
	kiln_error *err = NULL;
	const char *timeout = NULL;
	bool json = false;
	char *id = NULL;
	int i, rc;
	const struct cli_option opts[] = {
		CLI_BOOL(0, "json", &json, "print the id and where the time went as JSON"),
		CLI_ENV('e', "env", &env, "env for every exec in it (over the template's ENV)"),
		CLI_CALLBACK(0, "env-file", &env, "FILE", opt_env_file,
			     "NAME=VALUE lines (NAME alone: this shell's value; # comments)"),
		CLI_CALLBACK('l', "label", &labels, "KEY=VALUE", opt_label,
			     "metadata, shown and filtered by 'kiln sandbox ls'"),
		CLI_STRING(0, "timeout", &timeout, "DURATION",
			   "remove it this long after it started (90s, 30m, 12h, 7d;\ndefault 5m; 0: never)"),
		CLI_NET_OPTIONS(&net),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		goto out;
	rc = KILN_EXIT_USAGE;
	if (i != argc - 1) {
		rc = cli_usage_error(cmd, "one template, please");
		goto out;
	}
	const char *tmpl = argv[i];
	if (timeout && cli_parse_timeout(timeout, &co.timeout_s, &err) < 0) {
		rc = cli_fail(err);
		goto out;
	}
	co.env = env.n ? (const char *const *)env.v : NULL;
	co.labels = labels.n ? (const char *const *)labels.v : NULL;
	if (cli_tmpl_need(tmpl, &err) < 0 || (id = snap_sandbox_create_with(tmpl, &co, &st, NULL, &err)) == NULL) {
		rc = cli_fail(err);
		goto out;
	}
	if (json) {
		json_t *j = json_pack("{s:s, s:s, s:b, s:I, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f}}", "id", id,
				      "template", tmpl, "pooled", st.pooled, "timeout_s", (json_int_t)co.timeout_s,
				      "timings_ms", "total", st.total_ms, "check", st.check_ms, "jail", st.jail_ms, "spawn",
				      st.spawn_ms, "load", st.load_ms, "agent", st.agent_ms, "setup", st.setup_ms);
		char *s = json_dumps(j, JSON_COMPACT);
		printf("%s\n", s);
		free(s);
		json_decref(j);
	} else {
		printf("%s\n", id);
	}
	fflush(stdout);
	if (st.pooled)
		cli_pool_refill(tmpl);
	rc = KILN_EXIT_OK;
out:
	free(id);
	kiln_strv_free(&env);
	kiln_strv_free(&labels);
	cli_net_flags_free(&net);
	return rc;
}

static int run_exec(const struct kiln_command *cmd, int argc, char **argv)
{
	struct snap_exec_opts o;
	kiln_strv env = KILN_STRV_INIT;
	kiln_error *err = NULL;
	const char *timeout = NULL;
	bool interactive = false;
	int64_t secs;
	pid_t pid = 0;
	int i, code;

	snap_exec_opts_init(&o);
	const struct cli_option opts[] = {
		CLI_BOOL('i', "interactive", &interactive, "copy kiln's stdin to CMD's stdin"),
		CLI_STRING('w', "workdir", &o.cwd, "DIR", "run in DIR"),
		CLI_STRING('u', "user", &o.user, "USER[:GROUP]", "run as USER (resolved in the guest)"),
		CLI_ENV('e', "env", &env, "over the sandbox's env"),
		CLI_STRING(0, "timeout", &timeout, "DURATION", "kill CMD after DURATION (exit 124)"),
		CLI_BOOL('d', "detach", &o.detach, "start CMD in the background, print its pid and return;\n"
			 "'kiln sandbox logs ID PID' shows its output and how it ended"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &code)) < 0)
		goto out;
	code = KILN_EXIT_USAGE;
	if (i >= argc) {
		cli_usage_error(cmd, "which sandbox?");
		goto out;
	}
	const char *id = argv[i++];
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc) {
		cli_usage_error(cmd, "no command given (kiln sandbox exec ID -- CMD [ARG...])");
		goto out;
	}
	if (o.detach && interactive) {
		cli_usage_error(cmd, "--detach and -i do not go together");
		goto out;
	}
	if (timeout) {
		if (cli_parse_timeout(timeout, &secs, &err) < 0) {
			code = cli_fail(err);
			goto out;
		}
		o.timeout_ms = (uint64_t)secs * 1000;
	}
	if (interactive)
		o.stdin_fd = 0;
	o.env = env.n ? (const char *const *)env.v : NULL;
	o.pid = &pid;
	code = sandbox_exec(id, (const char *const *)argv + i, &o, &err);
	if (code < 0)
		code = cli_fail(err);
	else if (o.detach)
		printf("%ld\n", (long)pid);
out:
	kiln_strv_free(&env);
	return code;
}

/* How long until a sandbox's timeout: "4m59s", "12s", "expired", "-". */
static void print_expiry(const json_t *it)
{
	json_int_t at = kiln_json_int(it, "expires_ms", 0), left_ms, left;
	struct timespec now;
	char buf[32];

	clock_gettime(CLOCK_REALTIME, &now);
	left_ms = at - ((json_int_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
	/* "expired" only once it is, as gc decides ("0s" in its last second), not up to 1 s early */
	left = left_ms / 1000;
	if (at <= 0)
		snprintf(buf, sizeof(buf), "-");
	else if (left_ms <= 0)
		snprintf(buf, sizeof(buf), "expired");
	else if (left < 60)
		snprintf(buf, sizeof(buf), "%llds", (long long)left);
	else if (left < 3600)
		snprintf(buf, sizeof(buf), "%lldm%02llds", (long long)(left / 60), (long long)(left % 60));
	else
		snprintf(buf, sizeof(buf), "%lldh%02lldm", (long long)(left / 3600), (long long)(left / 60 % 60));
	printf("%-9s  ", buf);
}

static int run_ls(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_strv filters = KILN_STRV_INIT;
	kiln_error *err = NULL;
	bool json = false;
	json_t *list = NULL, *shown = json_array();
	int i, rc;
	const struct cli_option opts[] = {
		CLI_BOOL(0, "json", &json, "print the list as JSON"),
		CLI_STRV('f', "filter", &filters, "FILTER",
			 "label=KEY[=VALUE], state=STATE, template=DIGEST or id=PREFIX\n(several: all must match)"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		goto out;
	if (i < argc) {
		rc = cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
		goto out;
	}
	if ((list = snap_sandbox_list(&err)) == NULL) {
		rc = cli_fail(err);
		goto out;
	}
	for (size_t k = 0; k < json_array_size(list); k++) {
		const json_t *it = json_array_get(list, k);
		int m = 1;
		for (size_t f = 0; f < filters.n && m == 1; f++)
			if ((m = snap_sandbox_filter(it, filters.v[f], &err)) < 0) {
				rc = cli_fail(err);
				goto out;
			}
		if (m == 1)
			json_array_append(shown, (json_t *)it);
	}
	if (json) {
		cli_print_json(shown);
	} else {
		printf("%-12s  %-8s  %-8s  %-20s  %-19s  %-12s  %-9s  %s\n", "ID", "STATE", "PID", "CREATED", "TEMPLATE",
		       "JAIL", "EXPIRES", "LABELS");
		for (size_t k = 0; k < json_array_size(shown); k++) {
			const json_t *it = json_array_get(shown, k), *labels = json_object_get(it, "labels");
			const char *t = kiln_json_str(it, "template"), *cr = kiln_json_str(it, "created");
			json_int_t uid = kiln_json_int(it, "uid", 0);
			const char *key;
			json_t *v;
			char jail[32];
			bool first = true;
			if (json_is_true(json_object_get(it, "unconfined")))
				snprintf(jail, sizeof(jail), "UNCONFINED");
			else if (uid > 0)
				snprintf(jail, sizeof(jail), "uid %lld", (long long)uid);
			else
				snprintf(jail, sizeof(jail), "-");
			printf("%-12s  %-8s  %-8lld  %-20s  %-19.19s  %-12s  ", kiln_json_str(it, "id"),
			       kiln_json_str(it, "state"), (long long)kiln_json_int(it, "pid", 0), cr ? cr : "-",
			       t ? t : "-", jail);
			print_expiry(it);
			json_object_foreach((json_t *)labels, key, v) {
				printf("%s%s=%s", first ? "" : ",", key, json_is_string(v) ? json_string_value(v) : "");
				first = false;
			}
			printf("%s\n", first ? "-" : "");
		}
	}
	rc = KILN_EXIT_OK;
out:
	json_decref(list);
	json_decref(shown);
	kiln_strv_free(&filters);
	return rc;
}

static int run_kill(const struct kiln_command *cmd, int argc, char **argv)
{
	int i, rc = KILN_EXIT_OK;

	if ((i = cli_parse(cmd, NULL, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i >= argc)
		return cli_usage_error(cmd, "which sandbox?");
	for (; i < argc; i++) {
		kiln_error *err = NULL;
		if (snap_sandbox_kill(argv[i], &err) < 0)
			rc = cli_fail(err);
	}
	return rc;
}

static int run_gc(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	int i, rc, n;

	if ((i = cli_parse(cmd, NULL, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
	if ((n = snap_sandbox_gc(&err)) < 0)
		return cli_fail(err);
	/* the template file server is needed while a sandbox lives */
	json_t *all = snap_sandbox_list(&err);
	if (all == NULL)
		return cli_fail(err);
	if (json_array_size(all) == 0 && dist_chunkfs_running() && dist_chunkfs_stop(&err) < 0) {
		json_decref(all);
		return cli_fail(err);
	}
	json_decref(all);
	printf("removed %d\n", n);
	return KILN_EXIT_OK;
}

static const struct kiln_command sb_pool = {
	.name = "pool",
	.summary = "keep restored sandboxes of a template ready",
	.usage = "Usage: kiln sandbox pool [-n N] TEMPLATE\n\n"
		 "Keep N sandboxes of TEMPLATE restored, warmed up and paused, so that 'kiln sandbox\n"
		 "create' and 'kiln run' only resume one (and refill the pool in the background).\n"
		 "Without -n, refill to the size last set; -n 0 empties the pool.  TEMPLATE is\n"
		 "a reference as kiln run takes it (a registry one not here is pulled first).\n",
	.run = run_pool,
};
static const struct kiln_command sb_create = {
	.name = "create",
	.summary = "restore a sandbox from a template",
	.usage = "Usage: kiln sandbox create [--json] [-e NAME=VALUE]... [--env-file FILE] [-l KEY=VALUE]...\n"
		 "                           [--timeout DURATION] [--network none|outbound] [--allow-egress CIDR[:PORT]]...\n"
		 "                           [--deny-egress CIDR[:PORT]]... [-p 127.0.0.1:HOSTPORT:GUESTPORT]... TEMPLATE\n\n"
		 "Restore a new sandbox from TEMPLATE (NAME[:TAG], REGISTRY/REPO[:TAG], either\n"
		 "@sha256:DIGEST, or a template digest) and print its id; with --json, also\n"
		 "where the time went.  A registry reference not on this host is pulled first.\n"
		 "'kiln sandbox timeout' changes its timeout.\n",
	.run = run_create,
};
static const struct kiln_command sb_exec = {
	.name = "exec",
	.summary = "run a command in a sandbox",
	.usage = "Usage: kiln sandbox exec [-i] [-w DIR] [-u USER] [-e NAME=VALUE]... [--timeout D] [--detach]\n"
		 "                         ID -- CMD [ARG...]\n\n"
		 "Run CMD in the sandbox as the template's user, in its workdir with its env;\n"
		 "stream its output and exit with its exit code (128+N if killed by signal N;\n"
		 "127 if CMD is not found, 126 if it cannot be executed, 124 at --timeout).  Up\n"
		 "to 4 execs run in one sandbox at once; more wait for one of them to end.\n",
	.run = run_exec,
};
static const struct kiln_command sb_ls = {
	.name = "ls",
	.summary = "list sandboxes",
	.usage = "Usage: kiln sandbox ls [--json] [--filter FILTER]...\n\n"
		 "List sandboxes with their real state: running, paused, pooled (ready to be\n"
		 "claimed), creating, or dead (its QEMU is gone); when their timeout comes; labels.\n",
	.run = run_ls,
};
static const struct kiln_command sb_kill = {
	.name = "kill",
	.summary = "stop sandboxes and remove their files",
	.usage = "Usage: kiln sandbox kill ID [ID...]\n",
	.run = run_kill,
};
static const struct kiln_command sb_gc = {
	.name = "gc",
	.summary = "remove what dead sandboxes and interrupted creates left",
	.usage = "Usage: kiln sandbox gc\n\n"
		 "Remove dead sandboxes and those past their timeout (whose watcher died with\n"
		 "the host), and kill QEMUs of sandboxes whose state is gone.\n",
	.run = run_gc,
};

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct kiln_command *const subs[] = { &sb_create, &sb_exec, &sb_ls, &sb_kill, &sb_gc, &sb_pool,
							   &cli_sb_cp, &cli_sb_logs, &cli_sb_timeout, &cli_sb_pause,
							   &cli_sb_resume, &cli_sb_commit, NULL };

	return cli_dispatch(cmd, subs, argc, argv);
}

const struct kiln_command kiln_cmd_sandbox = {
	.name = "sandbox",
	.summary = "sandboxes restored from templates: create, exec, cp, ls, pause, resume, commit, kill, ...",
	.usage = "Usage: kiln sandbox create [--json] [-e K=V]... [-l K=V]... [--timeout D] [--network MODE] [-p ...] TEMPLATE\n"
		 "       kiln sandbox exec [-i] [-w DIR] [-u USER] [-e K=V]... [--detach] ID -- CMD [ARG...]\n"
		 "       kiln sandbox logs ID PID\n"
		 "       kiln sandbox cp SRC ID:DST | ID:SRC DST\n"
		 "       kiln sandbox ls [--json] [--filter label=K[=V]]...\n"
		 "       kiln sandbox timeout ID DURATION\n"
		 "       kiln sandbox pause ID | resume ID\n"
		 "       kiln sandbox commit ID NAME[:TAG]\n"
		 "       kiln sandbox kill ID [ID...]\n"
		 "       kiln sandbox gc\n"
		 "       kiln sandbox pool [-n N] TEMPLATE\n\n"
		 "Run 'kiln sandbox SUBCOMMAND --help' for details.\n",
	.run = run,
};
