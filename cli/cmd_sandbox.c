/* cmd_sandbox.c — `kiln sandbox create|exec|ls|kill|gc`: sandboxes restored
 * from templates, each a detached QEMU with its state in $KILN_HOME/sandboxes.
 * Commands get the template's user, workdir and env. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/xfer.h"
#include "snapshots/snapshots.h"

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
static int sandbox_exec(const char *id, const char *const *argv, kiln_error **err)
{
	struct guest_result res = { 0 };

	if (snap_sandbox_exec(id, argv, to_stdout, to_stderr, NULL, &res, err) < 0) {
		if (res.exit_code == 0)
			return -1;
		cli_fail(*err); /* not started: said why, exit like a shell */
		*err = NULL;
	}
	return res.signal ? 128 + res.signal : res.exit_code;
}

/* After a claim, top the pool up again in the background (a detached
 * `kiln sandbox pool TEMPLATE`), so the next create finds one too.  One
 * fork, not waited for: the callers exit right after (the child is then
 * init's), and a start's caller should not wait for even that. */
void cli_pool_refill(const char *tmpl);
void cli_pool_refill(const char *tmpl)
{
	if (fork() == 0) {
		int null = open("/dev/null", O_RDWR);
		setsid();
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
		}
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
	kiln_error *err = NULL;
	bool json = false;
	char *id;
	int i, rc;
	const struct cli_option opts[] = {
		CLI_BOOL(0, "json", &json, "print the id and where the time went as JSON"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i != argc - 1)
		return cli_usage_error(cmd, "one template, please");
	const char *tmpl = argv[i];
	if (cli_tmpl_need(tmpl, &err) < 0 || (id = snap_sandbox_create(tmpl, &st, NULL, &err)) == NULL)
		return cli_fail(err);
	if (json) {
		json_t *j = json_pack("{s:s, s:s, s:b, s:{s:f, s:f, s:f, s:f, s:f, s:f}}", "id", id, "template",
				      tmpl, "pooled", st.pooled, "timings_ms", "total", st.total_ms, "check", st.check_ms, "spawn", st.spawn_ms,
				      "load", st.load_ms, "agent", st.agent_ms, "setup", st.setup_ms);
		char *s = json_dumps(j, JSON_COMPACT);
		printf("%s\n", s);
		free(s);
		json_decref(j);
	} else {
		printf("%s\n", id);
	}
	free(id);
	if (st.pooled)
		cli_pool_refill(tmpl);
	return KILN_EXIT_OK;
}

static int run_exec(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	int i, rc, code;

	if ((i = cli_parse(cmd, NULL, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i >= argc)
		return cli_usage_error(cmd, "which sandbox?");
	const char *id = argv[i++];
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc)
		return cli_usage_error(cmd, "no command given (kiln sandbox exec ID -- CMD [ARG...])");
	code = sandbox_exec(id, (const char *const *)argv + i, &err);
	return code < 0 ? cli_fail(err) : code;
}

static int run_ls(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	bool json;
	json_t *list;
	int c;

	if ((c = cli_list_opts(cmd, argc, argv, &json)) >= 0)
		return c;
	if ((list = snap_sandbox_list(&err)) == NULL)
		return cli_fail(err);
	if (json) {
		cli_print_json(list);
	} else {
		printf("%-12s  %-8s  %-8s  %-20s  %-19s  %s\n", "ID", "STATE", "PID", "CREATED", "TEMPLATE", "JAIL");
		for (size_t i = 0; i < json_array_size(list); i++) {
			const json_t *it = json_array_get(list, i);
			const char *t = kiln_json_str(it, "template"), *cr = kiln_json_str(it, "created");
			json_int_t uid = kiln_json_int(it, "uid", 0);
			printf("%-12s  %-8s  %-8lld  %-20s  %-19.19s  ", kiln_json_str(it, "id"), kiln_json_str(it, "state"),
			       (long long)kiln_json_int(it, "pid", 0), cr ? cr : "-", t ? t : "-");
			if (json_is_true(json_object_get(it, "unconfined")))
				printf("UNCONFINED\n");
			else if (uid > 0)
				printf("uid %lld\n", (long long)uid);
			else
				printf("-\n");
		}
	}
	json_decref(list);
	return KILN_EXIT_OK;
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
	.usage = "Usage: kiln sandbox create [--json] TEMPLATE\n\n"
		 "Restore a new sandbox from TEMPLATE (NAME[:TAG], REGISTRY/REPO[:TAG], either\n"
		 "@sha256:DIGEST, or a template digest) and print its id; with --json, also\n"
		 "where the time went.  A registry reference not on this host is pulled first.\n",
	.run = run_create,
};
static const struct kiln_command sb_exec = {
	.name = "exec",
	.summary = "run a command in a sandbox",
	.usage = "Usage: kiln sandbox exec ID -- CMD [ARG...]\n\n"
		 "Run CMD in the sandbox as the template's user, in its workdir with its env;\n"
		 "stream its output and exit with its exit code (128+N if killed by signal N;\n"
		 "127 if CMD is not found, 126 if it cannot be executed).  Up to 4 execs run in\n"
		 "one sandbox at once; more wait for one of them to end.\n",
	.run = run_exec,
};
static const struct kiln_command sb_ls = {
	.name = "ls",
	.summary = "list sandboxes",
	.usage = "Usage: kiln sandbox ls [--json]\n\n"
		 "List sandboxes with their real state: running, pooled (ready to be claimed),\n"
		 "creating, or dead (its QEMU is gone).\n",
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
		 "Remove dead sandboxes, and kill QEMUs of sandboxes whose state is gone.\n",
	.run = run_gc,
};

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct kiln_command *const subs[] = { &sb_create, &sb_exec, &sb_ls, &sb_kill, &sb_gc, &sb_pool, NULL };

	return cli_dispatch(cmd, subs, argc, argv);
}

const struct kiln_command kiln_cmd_sandbox = {
	.name = "sandbox",
	.summary = "sandboxes restored from templates: create, exec, ls, kill, gc, pool",
	.usage = "Usage: kiln sandbox create [--json] TEMPLATE\n"
		 "       kiln sandbox exec ID -- CMD [ARG...]\n"
		 "       kiln sandbox ls [--json]\n"
		 "       kiln sandbox kill ID [ID...]\n"
		 "       kiln sandbox gc\n"
		 "       kiln sandbox pool [-n N] TEMPLATE\n\n"
		 "Run 'kiln sandbox SUBCOMMAND --help' for details.\n",
	.run = run,
};
