/* build_flags.c — --build-arg, --secret and --ssh, parsed as docker buildx
 * does (its listToMap, buildflags.Secret and ParseSSHSpecs, then BuildKit's
 * secret and ssh providers' defaults), for `kiln build` and `kiln dockerfile
 * plan` alike. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/build_flags.h"

static const char *keep(struct cli_build_flags *f, char *s)
{
	kiln_strv_push_owned(&f->strs, s);
	return s;
}

int cli_build_arg(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	struct cli_build_flags *f = opt->value;

	const char *eq = strchr(arg, '=');
	char *key = eq ? kiln_xstrndup(arg, (size_t)(eq - arg)) : kiln_xstrdup(arg);
	const char *value = eq ? eq + 1 : getenv(key);

	if (!*key) {
		free(key);
		return cli_usage_error(cmd, "--build-arg '%s': invalid key-value pair: empty key", arg);
	}
	if (!value) { /* not in the environment either: as if not given */
		free(key);
		return 0;
	}
	f->args = kiln_xrealloc(f->args, (f->n_args + 1) * sizeof(*f->args));
	f->args[f->n_args].key = key;
	f->args[f->n_args].value = kiln_xstrdup(value);
	f->n_args++;
	return 0;
}

/* A secret given as an inherited descriptor (/proc/self/fd/N, /dev/fd/N:
 * what kiln serve hands its build) is read through that path when its step
 * runs; nothing this build starts (QEMU, helpers) is to inherit it. */
static void inherited_fd_cloexec(const char *path)
{
	const char *n = NULL;
	char *end;

	if (path && strncmp(path, "/proc/self/fd/", 14) == 0)
		n = path + 14;
	else if (path && strncmp(path, "/dev/fd/", 8) == 0)
		n = path + 8;
	if (n == NULL || *n < '0' || *n > '9')
		return;
	long fd = strtol(n, &end, 10);
	if (*end == '\0' && fd > 2 && fd < INT_MAX) {
		int fl = fcntl((int)fd, F_GETFD);
		if (fl >= 0)
			fcntl((int)fd, F_SETFD, fl | FD_CLOEXEC);
	}
}

int cli_build_secret(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	struct cli_build_flags *f = opt->value;

	kiln_strv fields = KILN_STRV_INIT;
	const char *id = NULL, *src = NULL, *env = NULL, *type = NULL, *e;
	size_t col = 0;
	int rc = KILN_EXIT_USAGE;

	if ((e = df_csv_fields(arg, &fields, &col)) != NULL) {
		cli_usage_error(cmd, "--secret '%s': failed to parse csv secret: %s", arg, e);
		goto out;
	}
	for (size_t i = 0; i < fields.n; i++) {
		char *fl = fields.v[i], *eq = strchr(fl, '=');
		if (!eq) {
			cli_usage_error(cmd, "--secret '%s': invalid field '%s' must be a key=value pair", arg, fl);
			goto out;
		}
		*eq = '\0';
		for (char *k = fl; *k; k++)
			*k = (char)(*k >= 'A' && *k <= 'Z' ? *k + 32 : *k);
		const char *v = eq + 1;
		if (!strcmp(fl, "type")) {
			if (strcmp(v, "file") && strcmp(v, "env")) {
				cli_usage_error(cmd, "--secret '%s': unsupported secret type \"%s\"", arg, v);
				goto out;
			}
			type = v;
		} else if (!strcmp(fl, "id")) {
			id = v;
		} else if (!strcmp(fl, "source") || !strcmp(fl, "src")) {
			src = v;
		} else if (!strcmp(fl, "env")) {
			env = v;
		} else {
			cli_usage_error(cmd, "--secret '%s': unexpected key '%s' in '%s=%s'", arg, fl, fl, v);
			goto out;
		}
	}
	if (type && !strcmp(type, "env") && (!env || !*env)) {
		env = src;
		src = NULL;
	}
	if (!id || !*id) {
		cli_usage_error(cmd, "--secret '%s': secret missing ID", arg);
		goto out;
	}
	/* BuildKit's store: neither given means $ID if set, else the file ID */
	if ((!env || !*env) && (!src || !*src)) {
		if (getenv(id))
			env = id;
		else
			src = id;
	}
	f->secrets = kiln_xrealloc(f->secrets, (f->n_secrets + 1) * sizeof(*f->secrets));
	struct build_secret *s = &f->secrets[f->n_secrets++];
	memset(s, 0, sizeof(*s));
	s->id = keep(f, kiln_xstrdup(id));
	if (env && *env)
		s->env = keep(f, kiln_xstrdup(env));
	else
		s->file = keep(f, kiln_xstrdup(src));
	inherited_fd_cloexec(s->file);
	rc = 0;
out:
	kiln_strv_free(&fields);
	return rc;
}

int cli_build_ssh(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	struct cli_build_flags *f = opt->value;

	const char *eq = strchr(arg, '=');
	char *id = eq ? kiln_xstrndup(arg, (size_t)(eq - arg)) : kiln_xstrdup(arg);
	const char *path = eq ? eq + 1 : NULL;
	struct stat st;
	int rc = KILN_EXIT_USAGE;

	if (!*id) {
		cli_usage_error(cmd, "--ssh '%s': the id is empty (want default or ID[=SOCKET])", arg);
		goto out;
	}
	if (!path || !*path)
		path = getenv("SSH_AUTH_SOCK");
	if (!path || !*path) {
		cli_usage_error(cmd, "--ssh '%s': invalid empty ssh agent socket: make sure SSH_AUTH_SOCK is set", arg);
		goto out;
	}
	if (strchr(path, ',') || stat(path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		cli_usage_error(cmd, "--ssh '%s': %s is not an ssh-agent socket%s (kiln forwards agents only: "
				"load keys with ssh-add and pass the agent's socket)", arg, path,
				stat(path, &st) < 0 ? ": no such file" : "");
		goto out;
	}
	f->ssh = kiln_xrealloc(f->ssh, (f->n_ssh + 1) * sizeof(*f->ssh));
	f->ssh[f->n_ssh].id = keep(f, id);
	f->ssh[f->n_ssh].socket = keep(f, kiln_xstrdup(path));
	f->n_ssh++;
	id = NULL;
	rc = 0;
out:
	free(id);
	return rc;
}

size_t cli_build_request_options(struct build_request *r, struct cli_build_flags *bf, struct cli_option *out)
{
	size_t n = 0;

	for (size_t i = 0; i < build_nfields; i++) {
		const struct build_field *f = &build_fields[i];
		void *v = (char *)r + f->offset;
		if (f->flag == NULL)
			continue;
		switch (f->kind) {
		case BUILD_FIELD_STRING: out[n++] = (struct cli_option)CLI_STRING(0, f->flag, v, f->argh, f->help); break;
		case BUILD_FIELD_BOOL: out[n++] = (struct cli_option)CLI_BOOL(0, f->flag, v, f->help); break;
		case BUILD_FIELD_UINT:
			out[n++] = (struct cli_option)CLI_UINT(0, f->flag, v, f->argh, f->min, f->max, f->help);
			break;
		case BUILD_FIELD_ARGS: out[n++] = (struct cli_option)CLI_BUILD_ARG_OPTION(bf); break;
		}
	}
	return n;
}

void cli_build_flags_free(struct cli_build_flags *f)
{
	for (size_t i = 0; i < f->n_args; i++) {
		free(f->args[i].key);
		free(f->args[i].value);
	}
	free(f->args);
	free(f->secrets);
	free(f->ssh);
	kiln_strv_free(&f->strs);
	memset(f, 0, sizeof(*f));
}
