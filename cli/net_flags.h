/* net_flags.h — the network options `kiln sandbox create` and `kiln run`
 * share (--network, --allow-egress, --deny-egress, -p), as entries of their
 * option tables (cli.h), parsed into the sandbox's network options
 * (snapshots/snapshots.h; the syntax lives in vm/net.c). */
#ifndef KILN_CLI_NET_FLAGS_H
#define KILN_CLI_NET_FLAGS_H

#include "cli/cli.h"
#include "snapshots/snapshots.h"

struct cli_net_flags {
	struct snap_net_opts opts;
	struct vm_egress_rule *rules;
	struct vm_port *ports;
};
int cli_opt_network(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
int cli_opt_allow_egress(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
int cli_opt_deny_egress(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
int cli_opt_publish(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg);
void cli_net_flags_free(struct cli_net_flags *f);

/* The table entries; f is a struct cli_net_flags *. */
#define CLI_NET_OPTIONS(f)                                                                                      \
	CLI_CALLBACK(0, "network", (f), "none|outbound", cli_opt_network,                                      \
		     "the sandbox's network (default: its template's)"),                                        \
		CLI_CALLBACK(0, "allow-egress", (f), "CIDR[:PORT]", cli_opt_allow_egress,                      \
			     "allow only these (IPv4, repeatable; without any,\n"                              \
			     "outbound reaches all but the host itself)"),                                      \
		CLI_CALLBACK(0, "deny-egress", (f), "CIDR[:PORT]", cli_opt_deny_egress,                        \
			     "refuse these destinations (checked before the allows)"),                         \
		CLI_CALLBACK('p', "publish", (f), "[127.0.0.1:]HOSTPORT:GUESTPORT", cli_opt_publish,           \
			     "a TCP port of the sandbox on the host's\n127.0.0.1 (repeatable)")

#endif
