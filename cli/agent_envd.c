/* agent_envd.c — `kiln agent envd`: serve envd's Connect methods (runtime/)
 * on one agent connection, one request per stdin line, for tests and
 * debugging until the HTTP plane mounts them.  Only wiring: lines are
 * "PATH JSON" (answered before the next line), "&PATH JSON" (a stream left
 * running in a thread, as the SDK's for a background command), "sleep MS",
 * "wait" (join the running ones).  Each answer line is "N STATUS BODY" for a
 * unary call, "N MSG JSON" / "N END JSON" for a stream's messages. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "runtime/runtime.h"
#include "snapshots/snapshots.h"

struct job {
	rt_sandbox *sb;
	const struct rt_route *r;
	struct rt_call call;
	kiln_buf body;
	unsigned n;
	struct rt_envelope_reader rd;
	pthread_t t;
	bool threaded;
	struct job *next;
};

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static int j_begin(void *ctx, int status, const char *type)
{
	struct job *j = ctx;
	if (!j->r->streaming) {
		pthread_mutex_lock(&out_mu);
		printf("%u %d ", j->n, status);
		pthread_mutex_unlock(&out_mu);
	}
	return 0;
}

static int j_write(void *ctx, const void *data, size_t len)
{
	struct job *j = ctx;
	kiln_buf m = KILN_BUF_INIT;
	kiln_error *err = NULL;
	uint8_t flags;

	pthread_mutex_lock(&out_mu);
	if (!j->r->streaming) {
		printf("%.*s\n", (int)len, (const char *)data);
	} else {
		rt_envelope_reader_feed(&j->rd, data, len);
		while (rt_envelope_reader_next(&j->rd, &flags, &m, &err) == 1)
			printf("%u %s %.*s\n", j->n, flags & RT_FLAG_END_STREAM ? "END" : "MSG", (int)m.len, m.buf);
		kiln_error_free(err);
	}
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
	kiln_buf_free(&m);
	return 0;
}

static void *job_main(void *arg)
{
	struct job *j = arg;
	struct rt_writer w = { j_begin, j_write, j };
	rt_serve(j->sb, j->r, &j->call, j->body.buf, j->body.len, &w);
	return NULL;
}

static int run_envd(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *socket = NULL, *sandbox = NULL, *user = NULL, *def_user = "root";
	kiln_strv env = { 0 };
	kiln_error *err = NULL;
	struct job *jobs = NULL;
	char *line = NULL;
	size_t cap = 0;
	unsigned n = 0;
	guest_conn *c;
	rt_sandbox *sb;
	int i, rc = KILN_EXIT_OK;
	const struct cli_option opts[] = {
		CLI_STRING(0, "socket", &socket, "PATH", "the agent's unix socket"),
		CLI_STRING(0, "sandbox", &sandbox, "ID", "or a running sandbox's agent"),
		CLI_STRING(0, "user", &user, "USER", "the requests' user (Authorization: Basic)"),
		CLI_STRING(0, "default-user", &def_user, "USER", "who runs requests without a user (default root)"),
		CLI_STRV('e', "env", &env, "NAME=VALUE", "the sandbox's environment (repeatable)"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc || !socket == !sandbox)
		return cli_usage_error(cmd, "give one of --socket PATH and --sandbox ID, and no arguments");
	c = socket ? guest_connect(socket, 30000, &err) : snap_sandbox_connect(sandbox, 30000, &err);
	if (c == NULL || (sb = rt_sandbox_new(c, (const char *const *)env.v, def_user, NULL, &err)) == NULL) {
		kiln_strv_free(&env);
		return cli_fail(err);
	}
	while (getline(&line, &cap, stdin) > 0) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "sleep ", 6) == 0) {
			usleep((useconds_t)atoi(line + 6) * 1000);
			continue;
		}
		if (strcmp(line, "wait") == 0) {
			for (struct job *j = jobs; j; j = j->next)
				if (j->threaded) {
					pthread_join(j->t, NULL);
					j->threaded = false;
				}
			continue;
		}
		bool bg = line[0] == '&';
		char *path = line + bg, *json = strchr(path, ' ');
		if (json)
			*json++ = '\0';
		const struct rt_route *r = rt_route_find(path);
		if (r == NULL) {
			printf("%u unknown method %s\n", ++n, path);
			continue;
		}
		struct job *j = kiln_xcalloc(1, sizeof(*j));
		j->sb = sb;
		j->r = r;
		j->n = ++n;
		j->call.user = user;
		j->call.timeout_ms = 0;
		j->body = (kiln_buf)KILN_BUF_INIT;
		rt_envelope_reader_init(&j->rd, 1 << 24);
		/* an optional "timeout=MS " before the JSON: Connect-Timeout-Ms */
		if (json && strncmp(json, "timeout=", 8) == 0) {
			j->call.timeout_ms = strtoull(json + 8, &json, 10);
			json += *json == ' ';
		}
		if (r->streaming)
			rt_envelope_encode(&j->body, 0, json ? json : "", json ? strlen(json) : 0);
		else
			kiln_buf_adds(&j->body, json ? json : "");
		j->next = jobs;
		jobs = j;
		if (bg && pthread_create(&j->t, NULL, job_main, j) == 0)
			j->threaded = true;
		else
			job_main(j);
	}
	for (struct job *j = jobs; j; j = j->next)
		if (j->threaded)
			pthread_join(j->t, NULL);
	rt_sandbox_free(sb);
	while (jobs) {
		struct job *j = jobs;
		jobs = j->next;
		kiln_buf_free(&j->body);
		rt_envelope_reader_free(&j->rd);
		free(j);
	}
	free(line);
	kiln_strv_free(&env);
	return rc;
}

const struct kiln_command cli_agent_envd = {
	.name = "agent envd",
	.summary = "serve E2B envd's Connect methods on an agent, one request per stdin line",
	.usage = "Usage: kiln agent envd (--socket PATH | --sandbox ID) [--user USER] [-e NAME=VALUE...]\n\n"
		 "Read requests from stdin, one a line: \"PATH JSON\", \"&PATH JSON\" (a stream left\n"
		 "running), \"PATH timeout=MS JSON\", \"sleep MS\", \"wait\"; PATH is a method such as\n"
		 "/process.Process/Start.  Answers: \"N STATUS BODY\", or \"N MSG JSON\" and \"N END JSON\"\n"
		 "for a stream.  For tests and debugging (docs/sandbox-api.md).\n",
	.run = run_envd,
};
