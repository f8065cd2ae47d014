/* net.c — a sandbox's network (docs/vm.md, "Network"): QEMU's user-mode
 * network (libslirp) in the VM's own QEMU, its options (no way out, published
 * ports), and the egress rules that hold whatever the guest does: slirp's
 * sockets are QEMU's, QEMU runs as the VM's own uid, and that uid's packets
 * pass a per-slot iptables chain (KILN-VM-N, jumped to from OUTPUT by an
 * owner match) that kiln writes before QEMU starts and no QEMU can change. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vm/internal.h"

/* ---- parsing ------------------------------------------------------------- */

int vm_net_mode_parse(const char *s, enum vm_net_mode *m, kiln_error **err)
{
	if (s && strcmp(s, "none") == 0)
		*m = VM_NET_NONE;
	else if (s && strcmp(s, "outbound") == 0)
		*m = VM_NET_OUTBOUND;
	else
		return kiln_err(err, KILN_E_USAGE, "network '%s': want none or outbound", s ? s : "");
	return 0;
}

const char *vm_net_mode_name(enum vm_net_mode m)
{
	return m == VM_NET_OUTBOUND ? "outbound" : "none";
}

static int parse_port(const char *s, size_t len, uint16_t *out)
{
	unsigned long v = 0;

	if (len == 0 || len > 5)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

int vm_egress_parse(const char *s, bool allow, struct vm_egress_rule *r, kiln_error **err)
{
	char addr[32];
	const char *colon = strchr(s, ':'), *slash;
	size_t alen = colon ? (size_t)(colon - s) : strlen(s);
	struct in_addr in;
	unsigned long prefix = 32;

	memset(r, 0, sizeof(*r));
	r->allow = allow;
	if (alen == 0 || alen >= sizeof(addr))
		goto bad;
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	if ((slash = strchr(addr, '/')) != NULL) {
		char *end;
		prefix = strtoul(slash + 1, &end, 10);
		if (slash[1] == '\0' || *end || prefix > 32)
			goto bad;
		addr[slash - addr] = '\0';
	}
	if (inet_pton(AF_INET, addr, &in) != 1)
		goto bad;
	if (colon && parse_port(colon + 1, strlen(colon + 1), &r->port) < 0)
		goto bad;
	r->prefix = (uint8_t)prefix;
	r->addr = ntohl(in.s_addr) & (prefix ? 0xffffffffu << (32 - prefix) : 0);
	return 0;
bad:
	return kiln_err(err, KILN_E_USAGE, "%s-egress '%s': want an IPv4 CIDR with an optional port, "
			"ADDR[/PREFIX][:PORT] (e.g. 10.0.0.0/8:443)", allow ? "allow" : "deny", s);
}

char *vm_egress_str(const struct vm_egress_rule *r)
{
	char port[8] = "";

	if (r->port)
		snprintf(port, sizeof(port), ":%u", r->port);
	return kiln_xasprintf("%u.%u.%u.%u/%u%s", r->addr >> 24, (r->addr >> 16) & 255, (r->addr >> 8) & 255,
			      r->addr & 255, r->prefix, port);
}

int vm_port_parse(const char *s, struct vm_port *p, kiln_error **err)
{
	const char *rest = s, *colon;

	memset(p, 0, sizeof(*p));
	/* only loopback: a published port is for host processes */
	if (strncmp(s, "127.0.0.1:", 10) == 0)
		rest = s + 10;
	if ((colon = strchr(rest, ':')) == NULL || parse_port(rest, (size_t)(colon - rest), &p->host_port) < 0 ||
	    parse_port(colon + 1, strlen(colon + 1), &p->guest_port) < 0)
		return kiln_err(err, KILN_E_USAGE, "publish '%s': want [127.0.0.1:]HOSTPORT:GUESTPORT (TCP; the host "
				"side listens on 127.0.0.1 only)", s);
	return 0;
}

/* ---- QEMU's side ----------------------------------------------------------- */

char *vm_net_netdev(const struct vm_net_opts *o)
{
	kiln_buf b = KILN_BUF_INIT;

	kiln_buf_adds(&b, "user,id=net0");
	if (o == NULL)
		return kiln_buf_detach(&b); /* a builder VM: the guest reaches what the host does */
	/* No IPv6: the egress chain is IPv4 only.  restrict=on: slirp itself
	 * forwards nothing the guest starts (published ports still work). */
	kiln_buf_adds(&b, ",ipv6=off");
	if (o->mode == VM_NET_NONE)
		kiln_buf_adds(&b, ",restrict=on");
	for (size_t i = 0; i < o->n_ports; i++)
		kiln_buf_addf(&b, ",hostfwd=tcp:127.0.0.1:%u-%s:%u", o->ports[i].host_port,
			      o->guest_addr ? o->guest_addr : VM_GUEST_ADDR_DEFAULT, o->ports[i].guest_port);
	return kiln_buf_detach(&b);
}

bool vm_net_host_ns(bool nic, const struct vm_net_opts *o)
{
	/* QEMU opens sockets in the host's namespace only when something must
	 * come in or go out; otherwise the jail's empty namespace holds it */
	return nic && (o == NULL || o->mode == VM_NET_OUTBOUND || o->n_ports > 0);
}

/* ---- the egress chain ------------------------------------------------------ */

static const char *iptables_restore(void)
{
	const char *e = getenv("KILN_IPTABLES_RESTORE");
	return e && *e ? e : "iptables-restore";
}

static const char *iptables(void)
{
	const char *e = getenv("KILN_IPTABLES");
	return e && *e ? e : "iptables";
}

/* The name servers QEMU's DNS forwarder (10.0.2.3) asks: the host's. */
static void resolvers(kiln_strv *out)
{
	char *data = NULL, *save = NULL;
	size_t len = 0;
	kiln_error *e = NULL;

	if (kiln_read_file("/etc/resolv.conf", &data, &len, 65536, &e) < 0) {
		kiln_error_free(e);
		return;
	}
	for (char *line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char ns[64];
		struct in_addr in;
		if (sscanf(line, " nameserver %63s", ns) == 1 && inet_pton(AF_INET, ns, &in) == 1)
			kiln_strv_push(out, ns);
	}
	free(data);
}

/* A refused TCP connection gets a reset (slirp turns it into one for the
 * guest at once; an ICMP error left the guest's connect waiting for its
 * timeout), anything else an ICMP port unreachable. */
static void refuse(kiln_buf *b, const char *chain, const char *match)
{
	kiln_buf_addf(b, "-A %s%s -p tcp -j REJECT --reject-with tcp-reset\n-A %s%s -j REJECT\n", chain, match, chain,
		      match);
}

static void rule_lines(kiln_buf *b, const char *chain, const struct vm_egress_rule *r, bool accept)
{
	char *cidr = vm_egress_str(r), *colon = strchr(cidr, ':'), *m;

	if (colon)
		*colon = '\0';
	if (r->port == 0) {
		m = kiln_xasprintf(" -d %s", cidr);
		if (accept)
			kiln_buf_addf(b, "-A %s%s -j ACCEPT\n", chain, m);
		else
			refuse(b, chain, m);
		free(m);
	} else {
		kiln_buf_addf(b, "-A %s -d %s -p tcp --dport %u -j %s\n", chain, cidr, r->port,
			      accept ? "ACCEPT" : "REJECT --reject-with tcp-reset");
		kiln_buf_addf(b, "-A %s -d %s -p udp --dport %u -j %s\n", chain, cidr, r->port, accept ? "ACCEPT" : "REJECT");
	}
	free(cidr);
}

/* The chain's rules, in order: replies of connections already made (and of
 * published ports) pass; then the denies, then the allows; then, with no
 * way out or with an allow list, everything else is refused; else the
 * host's name servers pass and the host itself (loopback, where slirp's
 * 10.0.2.2 leads) and link-local addresses (cloud metadata) are refused. */
char *vm_netfw_script(unsigned slot, uid_t uid, const struct vm_net_opts *o, bool jump)
{
	kiln_buf b = KILN_BUF_INIT;
	char chain[32];
	bool allows = false;

	snprintf(chain, sizeof(chain), "KILN-VM-%u", slot);
	if (o == NULL) {
		/* the slot's VM is gone, or has no chain (a builder VM) */
		kiln_buf_addf(&b, "*filter\n-D OUTPUT -m owner --uid-owner %u -j %s\n-F %s\n-X %s\nCOMMIT\n",
			      (unsigned)uid, chain, chain, chain);
		return kiln_buf_detach(&b);
	}
	kiln_buf_addf(&b, "*filter\n:%s - [0:0]\n", chain);
	{
		kiln_buf_addf(&b, "-A %s -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n", chain);
		for (size_t i = 0; i < o->n_rules; i++)
			if (!o->rules[i].allow)
				rule_lines(&b, chain, &o->rules[i], false);
		for (size_t i = 0; i < o->n_rules; i++)
			if (o->rules[i].allow) {
				rule_lines(&b, chain, &o->rules[i], true);
				allows = true;
			}
		if (o->mode == VM_NET_OUTBOUND) {
			kiln_strv ns = KILN_STRV_INIT;
			resolvers(&ns);
			for (size_t i = 0; i < ns.n; i++)
				for (int udp = 0; udp < 2; udp++)
					kiln_buf_addf(&b, "-A %s -d %s/32 -p %s --dport 53 -j ACCEPT\n", chain, ns.v[i],
						      udp ? "udp" : "tcp");
			kiln_strv_free(&ns);
		}
		if (o->mode == VM_NET_OUTBOUND && !allows) {
			refuse(&b, chain, " -d 127.0.0.0/8");
			refuse(&b, chain, " -d 169.254.0.0/16");
			kiln_buf_addf(&b, "-A %s -j ACCEPT\n", chain);
		} else {
			refuse(&b, chain, "");
		}
	}
	if (jump)
		kiln_buf_addf(&b, "-I OUTPUT 1 -m owner --uid-owner %u -j %s\n", (unsigned)uid, chain);
	kiln_buf_adds(&b, "COMMIT\n");
	return kiln_buf_detach(&b);
}

static int run_restore(const char *script, kiln_error **err)
{
	char *tmp = NULL;
	int rc = -1;

	if ((tmp = kiln_mkdtemp("kiln-fw", err)) == NULL)
		return -1;
	char *file = kiln_path_join(tmp, "rules");
	if (kiln_write_atomic(file, script, strlen(script), 0600, err) == 0) {
		char *const av[] = { (char *)iptables_restore(), "--noflush", "-w", "5", file, NULL };
		rc = vm_run_tool(av, err);
	}
	unlink(file);
	rmdir(tmp);
	free(file);
	free(tmp);
	return rc;
}

/* Whether OUTPUT already jumps to the slot's chain for this uid. */
static bool has_jump(unsigned slot, uid_t uid)
{
	char u[16], chain[32];
	kiln_error *e = NULL;

	snprintf(u, sizeof(u), "%u", (unsigned)uid);
	snprintf(chain, sizeof(chain), "KILN-VM-%u", slot);
	char *const av[] = { (char *)iptables(), "-w", "5", "-C", "OUTPUT", "-m", "owner", "--uid-owner", u, "-j",
			     chain, NULL };
	int rc = vm_run_tool(av, &e);
	kiln_error_free(e);
	return rc == 0;
}

int vm_netfw_apply(unsigned slot, uid_t uid, const struct vm_net_opts *o, kiln_error **err)
{
	char *s = vm_netfw_script(slot, uid, o, false);
	int rc = run_restore(s, err);

	free(s);
	/* a first use of the slot (since boot, or since someone flushed the
	 * host's rules) also needs the jump; the chain is whole before it */
	if (rc == 0 && !has_jump(slot, uid)) {
		s = vm_netfw_script(slot, uid, o, true);
		rc = run_restore(s, err);
		free(s);
	}
	if (rc < 0)
		kiln_error_wrap(err, "egress rules for uid %u (%s; deps/vm.txt)", (unsigned)uid, iptables_restore());
	return rc;
}

void vm_netfw_clear(unsigned slot, uid_t uid)
{
	kiln_error *e = NULL;

	/* jump and chain removed: OUTPUT holds live sandboxes' jumps only */
	if (has_jump(slot, uid)) {
		char *s = vm_netfw_script(slot, uid, NULL, false);
		if (run_restore(s, &e) < 0)
			kiln_warn("egress rules of uid %u: %s", (unsigned)uid, kiln_error_message(e));
		free(s);
	}
	kiln_error_free(e);
}

int vm_netfw_slots(unsigned **slots, size_t *n, kiln_error **err)
{
	kiln_buf out = KILN_BUF_INIT;
	char *const av[] = { (char *)iptables(), "-w", "5", "-S", NULL };
	size_t cap = 0;

	*slots = NULL;
	*n = 0;
	if (vm_run_tool_out(av, &out, 16u << 20, err) < 0) {
		kiln_buf_free(&out);
		return kiln_error_wrap(err, "listing the egress chains (%s -S)", iptables());
	}
	char *save = NULL;
	for (char *line = strtok_r(out.buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned s;
		char tail;
		if (sscanf(line, "-N KILN-VM-%u%c", &s, &tail) != 1)
			continue;
		if (*n == cap)
			*slots = kiln_xrealloc(*slots, (cap = cap ? 2 * cap : 16) * sizeof(**slots));
		(*slots)[(*n)++] = s;
	}
	kiln_buf_free(&out);
	return 0;
}

int vm_netfw_remove(unsigned slot, kiln_error **err)
{
	kiln_buf out = KILN_BUF_INIT, b = KILN_BUF_INIT;
	char chain[32], jump[48];
	char *const av[] = { (char *)iptables(), "-w", "5", "-S", "OUTPUT", NULL };
	int rc;

	snprintf(chain, sizeof(chain), "KILN-VM-%u", slot);
	snprintf(jump, sizeof(jump), " -j %s", chain);
	if (vm_run_tool_out(av, &out, 16u << 20, err) < 0) {
		kiln_buf_free(&out);
		return -1;
	}
	/* every jump to it, whatever uid it was for: the chain cannot go before them */
	kiln_buf_adds(&b, "*filter\n");
	char *save = NULL;
	for (char *line = strtok_r(out.buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t len = strlen(line), jl = strlen(jump);
		if (strncmp(line, "-A OUTPUT ", 10) == 0 && len > jl && strcmp(line + len - jl, jump) == 0)
			kiln_buf_addf(&b, "-D %s\n", line + 3);
	}
	kiln_buf_addf(&b, "-F %s\n-X %s\nCOMMIT\n", chain, chain);
	kiln_buf_free(&out);
	rc = run_restore(b.buf, err);
	kiln_buf_free(&b);
	return rc < 0 ? kiln_error_wrap(err, "removing the egress chain %s", chain) : 0;
}
