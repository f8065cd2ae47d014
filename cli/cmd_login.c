/* cmd_login.c — `kiln login`: checks USER and a password (or token) against
 * a registry's /v2/ (running its auth challenge flow), then keeps them in
 * $KILN_HOME/auth.json (0600) for push, pull and FROM. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "regclient/regclient.h"

/* One line from stdin, without its newline; echo off when it is a TTY. */
static char *read_line(const char *prompt, int secret)
{
	struct termios old, quiet;
	int tty = isatty(STDIN_FILENO), restore = 0;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (tty) {
		fputs(prompt, stderr);
		if (secret && tcgetattr(STDIN_FILENO, &old) == 0) {
			quiet = old;
			quiet.c_lflag &= ~(tcflag_t)ECHO;
			restore = tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) == 0;
		}
	}
	n = getline(&line, &cap, stdin);
	if (restore) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
		fputc('\n', stderr);
	}
	if (n < 0) {
		free(line);
		return NULL;
	}
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = 0;
	return line;
}

/* "https://host:5000/v2/" → "host:5000"; Docker Hub's names → docker.io's registry. */
static char *registry_host(const char *arg)
{
	const char *p = strstr(arg, "://");
	p = p ? p + 3 : arg;
	char *h = kiln_xstrndup(p, strcspn(p, "/"));
	if (strcmp(h, "docker.io") == 0 || strcmp(h, "index.docker.io") == 0) {
		free(h);
		h = kiln_xstrdup("registry-1.docker.io");
	}
	return h;
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	const char *user_opt = NULL;
	char *user = NULL, *pass = NULL, *host = NULL;
	bool from_stdin = false;
	int i, rc;
	rc_client *cl = NULL;
	const struct cli_option opts[] = {
		CLI_STRING('u', "username", &user_opt, "USER", "the user name"),
		CLI_BOOL(0, "password-stdin", &from_stdin, "read the password from stdin (one line)"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		goto out;
	if (i + 1 != argc) {
		rc = cli_usage_error(cmd, i >= argc ? "missing REGISTRY" : "unexpected argument '%s'", argv[argc - 1]);
		goto out;
	}
	user = user_opt ? kiln_xstrdup(user_opt) : NULL;
	host = registry_host(argv[i]);
	if (!from_stdin && !isatty(STDIN_FILENO)) {
		rc = cli_usage_error(cmd, "stdin is not a terminal: give the password with --password-stdin");
		goto out;
	}
	if (!user && (from_stdin || !(user = read_line("Username: ", 0)))) {
		rc = cli_usage_error(cmd, "missing user name (-u USER)");
		goto out;
	}
	if (!*user) {
		rc = cli_usage_error(cmd, "empty user name");
		goto out;
	}
	pass = read_line("Password: ", 1);
	if (!pass || !*pass) {
		rc = cli_usage_error(cmd, "no password given");
		goto out;
	}
	struct rc_client_opts o = { .user = user, .pass = pass };
	if (!(cl = rc_client_new(host, &o, &err)) || rc_client_ping(cl, &err) < 0 ||
	    rc_auth_store(host, user, pass, &err) < 0) {
		kiln_error_wrap(&err, "login to %s", host);
		rc = cli_fail(err);
		goto out;
	}
	printf("Login succeeded: %s as %s\n", host, user);
	rc = KILN_EXIT_OK;
out:
	rc_client_free(cl);
	if (pass)
		memset(pass, 0, strlen(pass));
	free(pass);
	free(user);
	free(host);
	return rc;
}

const struct kiln_command kiln_cmd_login = {
	.name = "login",
	.summary = "log in to a registry (credentials for push, pull and FROM)",
	.usage = "Usage: kiln login [-u USER] [--password-stdin] REGISTRY\n\n"
		 "Check USER and a password (or access token) against REGISTRY (HOST[:PORT])\n"
		 "by its /v2/ endpoint and auth challenge, then save them in\n"
		 "$KILN_HOME/auth.json (mode 0600, docker's config.json format). Without\n"
		 "--password-stdin the user name and password are asked on the terminal.\n"
		 "Lookups also read $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json\n"
		 "and ~/.docker/config.json. See also kiln logout.\n",
	.run = run,
};
