/* cmd_serve.c — `kiln serve`: run the OCI registry until SIGINT/SIGTERM.
 * Prints the address it listens on (useful with port 0) once it is ready. */
#include <signal.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "registry/registry.h"
#include "service/service.h"
#include "cli/xfer.h"

/* A template a create names is pulled first, with this host's credentials
 * (kiln login), as kiln run does. */
static int ensure_template(void *ud, const char *ref, kiln_error **err)
{
	return cli_tmpl_need(ref, err);
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *addr = NULL, *data = NULL, *config = NULL, *log_format = NULL;
	bool want_build = false, want_sandboxes = false;
	const struct cli_option opts[] = {
		CLI_STRING('a', "addr", &addr, "HOST:PORT", "listen address (default 127.0.0.1:5000; port 0 picks one)"),
		CLI_STRING('d', "data", &data, "DIR", "data directory"),
		CLI_STRING('c', "config", &config, "FILE", "JSON config file (see docs/registry.md); flags override it"),
		CLI_STRING('L', "log-format", &log_format, "text|json|off",
			   "a line per request on stderr (default text; also \"access_log\" in the config)"),
		CLI_BOOL('b', "build", &want_build, "also run the build service (/build/v1/, docs/service.md; also\n"
						    "\"build\": true or {...} in the config file): kiln build --remote"),
		CLI_BOOL('s', "sandboxes", &want_sandboxes, "also run the sandbox service (E2B's sandbox API and envd's\n"
							     "plane, docs/sandbox-api.md; also \"sandboxes\": true or {...})"),
		CLI_END,
	};
	struct reg_config cfg;
	svc_sandboxes *sandboxes = NULL;
	kiln_error *err = NULL;
	reg_server *srv;
	svc *builds = NULL;
	e2b *e2b_api = NULL;
	struct svc_config sc;
	sigset_t set;
	int i, rc, sig;

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
	reg_config_init(&cfg);
	cfg.access_log = REG_LOG_TEXT; /* the server logs each request unless told not to */
	if (config && reg_config_load(&cfg, config, &err) < 0)
		goto fail;
	if (log_format && reg_access_log_parse(log_format, &cfg.access_log, &err) < 0)
		goto fail;
	if (addr && reg_config_set_addr(&cfg, addr, &err) < 0)
		goto fail;
	if (data) {
		free(cfg.data_dir);
		cfg.data_dir = kiln_xstrdup(data);
	}
	/* Block the signals before threads start so only sigwait sees them. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	want_build |= cfg.build != NULL;
	if (want_build && svc_config_load(&sc, cfg.build, &err) < 0)
		goto fail;
	srv = reg_server_start(&cfg, &err);
	if (srv == NULL)
		goto fail;
	/* the build service mounts its frontends (/build/, E2B's template API:
	 * docs/e2b.md) before the address is announced */
	if (want_build && (builds = svc_start(srv, &sc, &err)) == NULL) {
		reg_server_stop(srv);
		goto fail;
	}
	e2b_api = svc_templates(builds);
	/* and the sandbox service, which knows E2B's template names through it */
	want_sandboxes |= cfg.sandboxes != NULL;
	if (want_sandboxes &&
	    (sandboxes = svc_sandboxes_start(srv, cfg.sandboxes, e2b_api, ensure_template, NULL, &err)) == NULL) {
		svc_stop(builds);
		reg_server_stop(srv);
		svc_free(builds);
		goto fail;
	}
	fprintf(stderr, "kiln serve: listening on http://%s%s%s:%u (data %s)%s%s\n", strchr(cfg.host, ':') ? "[" : "",
		cfg.host, strchr(cfg.host, ':') ? "]" : "", reg_server_port(srv), cfg.data_dir,
		builds ? ", building" : "", sandboxes ? ", sandboxes" : "");
	fflush(stderr);
	sigwait(&set, &sig);
	svc_stop(builds);
	reg_server_stop(srv);
	svc_sandboxes_stop(sandboxes);
	svc_free(builds);
	reg_config_free(&cfg);
	return KILN_EXIT_OK;
fail:
	reg_config_free(&cfg);
	return cli_fail(err);
}

const struct kiln_command kiln_cmd_serve = {
	.name = "serve",
	.summary = "run the OCI registry (distribution v1.1)",
	.usage = "Usage: kiln serve [--addr HOST:PORT] [--data DIR] [--config FILE] [--build] [--sandboxes]\n\n"
		 "Serve the OCI Distribution API v1.1 over HTTP.  Blobs are stored content-addressed\n"
		 "under DIR (default $KILN_HOME/registry), metadata in DIR/meta.db (sqlite, WAL).\n",
	.run = run,
};
