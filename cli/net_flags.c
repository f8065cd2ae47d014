/* net_flags.c — the sandbox network options of `kiln sandbox create` and
 * `kiln run` into struct snap_net_opts (the syntax lives in vm/net.c). */
#include <stdlib.h>

#include "cli/net_flags.h"

static int usage(const struct kiln_command *cmd, kiln_error *err)
{
	int rc = cli_usage_error(cmd, "%s", kiln_error_message(err));

	kiln_error_free(err);
	return rc;
}

int cli_opt_network(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	struct cli_net_flags *f = opt->value;
	kiln_error *err = NULL;

	if (vm_net_mode_parse(arg, &f->opts.mode, &err) < 0)
		return usage(cmd, err);
	f->opts.mode_set = true;
	return 0;
}

static int egress(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg, bool allow)
{
	struct cli_net_flags *f = opt->value;
	kiln_error *err = NULL;

	f->rules = kiln_xrealloc(f->rules, (f->opts.n_rules + 1) * sizeof(*f->rules));
	if (vm_egress_parse(arg, allow, &f->rules[f->opts.n_rules], &err) < 0)
		return usage(cmd, err);
	f->opts.rules = f->rules;
	f->opts.n_rules++;
	return 0;
}

int cli_opt_allow_egress(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	return egress(cmd, opt, arg, true);
}

int cli_opt_deny_egress(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	return egress(cmd, opt, arg, false);
}

int cli_opt_publish(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	struct cli_net_flags *f = opt->value;
	kiln_error *err = NULL;

	f->ports = kiln_xrealloc(f->ports, (f->opts.n_ports + 1) * sizeof(*f->ports));
	if (vm_port_parse(arg, &f->ports[f->opts.n_ports], &err) < 0)
		return usage(cmd, err);
	f->opts.ports = f->ports;
	f->opts.n_ports++;
	return 0;
}

void cli_net_flags_free(struct cli_net_flags *f)
{
	free(f->rules);
	free(f->ports);
	f->rules = NULL;
	f->ports = NULL;
}
