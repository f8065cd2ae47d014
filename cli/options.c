/* options.c — every command's options are one declarative table (struct
 * cli_option, git's parse-options model), read by one parser: values land in
 * the command's variables, and --help, the man pages and the bash completion
 * (cli/gen-man.sh, cli/gen-completion.sh) are printed from the same table. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* The table of the command being parsed, so its usage errors (which a
 * command may also raise after parsing) print its options as --help does. */
static const struct kiln_command *cur_cmd;
static const struct cli_option *cur_opts;

static const struct cli_option help_opt = CLI_BOOL('h', "help", NULL, "show this help");

static size_t left_len(const struct cli_option *o)
{
	return 2 + (o->short_name ? 4 : 0) + 2 + strlen(o->long_name) + (o->argh ? 1 + strlen(o->argh) : 0);
}

static void print_one(FILE *out, const struct cli_option *o)
{
	enum { COL = 23 };
	size_t n = left_len(o);
	const char *h = o->help ? o->help : "", *nl;

	fputs("  ", out);
	if (o->short_name)
		fprintf(out, "-%c, ", o->short_name);
	fprintf(out, "--%s", o->long_name);
	if (o->argh)
		fprintf(out, " %s", o->argh);
	if (!*h) {
		fputc('\n', out);
		return;
	}
	fprintf(out, "%*s", n < COL - 1 ? (int)(COL - n) : 2, "");
	/* Lines after the first are indented to the help column. */
	while ((nl = strchr(h, '\n')) != NULL) {
		fprintf(out, "%.*s\n%*s", (int)(nl - h), h, COL, "");
		h = nl + 1;
	}
	fprintf(out, "%s\n", h);
}

static void print_usage(FILE *out, const struct kiln_command *cmd)
{
	fputs(cmd->usage, out);
	if (cmd != cur_cmd || cur_opts == NULL)
		return;
	fputs("\nOptions:\n", out);
	for (const struct cli_option *o = cur_opts; o->type != CLI_OPT_END; o++)
		print_one(out, o);
	print_one(out, &help_opt);
}

int cli_help(const struct kiln_command *cmd)
{
	print_usage(stdout, cmd);
	return KILN_EXIT_OK;
}

int cli_usage_error(const struct kiln_command *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kiln %s: ", cmd->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n", stderr);
	print_usage(stderr, cmd);
	return KILN_EXIT_USAGE;
}

int cli_opt_env(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	if (strchr(arg, '=') == NULL || arg[0] == '=')
		return cli_usage_error(cmd, "--%s wants NAME=VALUE, not '%s'", opt->long_name, arg);
	kiln_strv_push(opt->value, arg);
	return 0;
}

/* Store arg (NULL for a flag) as opt says; 0 or the exit code of a usage error. */
static int take(const struct kiln_command *cmd, const struct cli_option *o, const char *arg)
{
	unsigned long v;
	char *end;

	switch (o->type) {
	case CLI_OPT_BOOL:
		*(bool *)o->value = true;
		return 0;
	case CLI_OPT_STRING:
		*(const char **)o->value = arg;
		return 0;
	case CLI_OPT_STRV:
		kiln_strv_push(o->value, arg);
		return 0;
	case CLI_OPT_UINT:
		errno = 0;
		v = strtoul(arg, &end, 10);
		if (errno || *arg < '0' || *arg > '9' || *end || v < o->min || v > o->max)
			return cli_usage_error(cmd, "--%s wants a number from %u to %u, not '%s'", o->long_name,
					       o->min, o->max, arg);
		*(unsigned *)o->value = (unsigned)v;
		return 0;
	case CLI_OPT_CALLBACK:
		return o->cb(cmd, o, arg);
	case CLI_OPT_END:
		break;
	}
	return 0;
}

/* The long option NAME (len bytes) names: exact, else a unique prefix (as
 * getopt_long allowed).  NULL after printing the usage error. */
static const struct cli_option *find_long(const struct kiln_command *cmd, const struct cli_option *opts,
					  const char *name, size_t len, int *rc)
{
	const struct cli_option *hit = NULL;
	int n = 0;

	for (const struct cli_option *o = opts; o && o->type != CLI_OPT_END; o++) {
		if (strncmp(o->long_name, name, len) != 0)
			continue;
		if (o->long_name[len] == '\0')
			return o;
		hit = o;
		n++;
	}
	if (strncmp("help", name, len) == 0 && len <= 4) {
		if (len == 4)
			return &help_opt;
		hit = &help_opt;
		n++;
	}
	if (n == 1)
		return hit;
	*rc = n ? cli_usage_error(cmd, "ambiguous option --%.*s", (int)len, name)
		: cli_usage_error(cmd, "unknown option --%.*s", (int)len, name);
	return NULL;
}

static const struct cli_option *find_short(const struct cli_option *opts, char c)
{
	for (const struct cli_option *o = opts; o && o->type != CLI_OPT_END; o++)
		if (o->short_name == c)
			return o;
	return c == 'h' ? &help_opt : NULL;
}

static bool wants_value(const struct cli_option *o)
{
	return o->type != CLI_OPT_BOOL && !(o->type == CLI_OPT_CALLBACK && o->argh == NULL);
}

/* One option word at argv[*i] (and its value); 0, or an exit code. */
static int parse_word(const struct kiln_command *cmd, const struct cli_option *opts, int argc, char **argv, int *i)
{
	const char *w = argv[*i];
	const struct cli_option *o;
	int rc = KILN_EXIT_USAGE;

	if (w[1] == '-') {
		const char *name = w + 2, *eq = strchr(name, '=');
		if ((o = find_long(cmd, opts, name, eq ? (size_t)(eq - name) : strlen(name), &rc)) == NULL)
			return rc;
		if (o == &help_opt)
			return cli_help(cmd), -1;
		if (!wants_value(o)) {
			if (eq)
				return cli_usage_error(cmd, "option --%s takes no value", o->long_name);
			return take(cmd, o, NULL);
		}
		if (eq)
			return take(cmd, o, eq + 1);
		if (*i + 1 >= argc)
			return cli_usage_error(cmd, "option --%s needs a value", o->long_name);
		return take(cmd, o, argv[++*i]);
	}
	for (const char *p = w + 1; *p; p++) {
		if ((o = find_short(opts, *p)) == NULL)
			return cli_usage_error(cmd, "unknown option -%c", *p);
		if (o == &help_opt)
			return cli_help(cmd), -1;
		if (!wants_value(o)) {
			if ((rc = take(cmd, o, NULL)) != 0)
				return rc;
			continue;
		}
		if (p[1])
			return take(cmd, o, p + 1); /* -fFILE */
		if (*i + 1 >= argc)
			return cli_usage_error(cmd, "option -%c needs a value", *p);
		return take(cmd, o, argv[++*i]);
	}
	return 0;
}

/* The long option names, one a line, for the bash completion. */
static void list_options(const struct cli_option *opts)
{
	for (const struct cli_option *o = opts; o && o->type != CLI_OPT_END; o++)
		printf("--%s\n", o->long_name);
	printf("--help\n");
}

int cli_parse(const struct kiln_command *cmd, const struct cli_option *opts, int argc, char **argv, unsigned flags,
	      int *rc)
{
	char **operands = NULL;
	int n = 0, i;

	static const struct cli_option none[] = { CLI_END };

	cur_cmd = cmd;
	cur_opts = opts ? opts : none;
	*rc = KILN_EXIT_OK;
	if (argc == 2 && strcmp(argv[1], "--list-options") == 0) {
		list_options(opts);
		return -1;
	}
	if (flags & CLI_PARSE_PERMUTE)
		operands = kiln_xcalloc((size_t)argc, sizeof(*operands));
	for (i = 1; i < argc; i++) {
		const char *w = argv[i];
		if (strcmp(w, "--") == 0) {
			i++;
			break;
		}
		if (w[0] != '-' || w[1] == '\0') {
			if (!(flags & CLI_PARSE_PERMUTE))
				break;
			operands[n++] = argv[i];
			continue;
		}
		if ((*rc = parse_word(cmd, opts, argc, argv, &i)) != 0) {
			if (*rc < 0)
				*rc = KILN_EXIT_OK; /* --help */
			free(operands);
			return -1;
		}
	}
	if (operands) {
		/* The operands seen between options go just before the ones
		 * after "--", which are already in place at argv[i...]. */
		int start = i - n;
		memcpy(argv + start, operands, (size_t)n * sizeof(*argv));
		free(operands);
		return start;
	}
	return i;
}

int cli_list_opts(const struct kiln_command *cmd, int argc, char **argv, bool *json)
{
	const struct cli_option opts[] = {
		CLI_BOOL(0, "json", json, "print JSON"),
		CLI_END,
	};
	int rc, i;

	*json = false;
	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
	return -1;
}
