/* sandbox_net.c — a sandbox's network (docs/snapshots.md, "Network"): the
 * mode its template was made with unless the create says otherwise, egress
 * rules and published ports (held by vm/net.c), and the guest's own MAC and
 * address: a restored guest would keep its template's (the snapshot's
 * device state carries the MAC), so the IDENTITY request gives it ones
 * derived from the sandbox id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshots/internal.h"

#define GUEST_NET 0x0a000200u /* 10.0.2.0/24, QEMU user networking's */

bool snap_template_has_nic(const snap_template *t)
{
	return t->cfg.has_network;
}

/* The id's 6 bytes (12 hex digits); false for anything else ("kiln-pool"). */
static bool id_bytes(const char *id, uint8_t b[6])
{
	if (id == NULL || strlen(id) != 12)
		return false;
	for (int i = 0; i < 6; i++) {
		unsigned v;
		if (sscanf(id + 2 * i, "%2x", &v) != 1)
			return false;
		b[i] = (uint8_t)v;
	}
	return true;
}

bool snap_net_identity(const char *id, struct guest_identity *m)
{
	uint8_t b[6];

	if (!id_bytes(id, b))
		return false;
	/* locally administered, unicast; the address avoids .0-.15 (slirp's
	 * gateway .2, DNS .3, and the template's own .15) and the broadcast */
	m->mac[0] = 0x02;
	memcpy(m->mac + 1, b + 1, 5);
	m->ipv4 = GUEST_NET | (16u + b[0] % 224u);
	m->prefix = 24;
	m->gateway = GUEST_NET | 2u;
	m->set_net = true;
	return true;
}

static void addr_str(uint32_t a, char out[16])
{
	snprintf(out, 16, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

bool snap_net_default(const struct snap_net_opts *o)
{
	return o == NULL || (!o->mode_set && o->n_rules == 0 && o->n_ports == 0);
}

int snap_net_resolve(const snap_template *t, const struct snap_net_opts *o, const char *id, struct vm_net_opts *vo,
		     char addr[16], kiln_error **err)
{
	struct guest_identity m;

	memset(vo, 0, sizeof(*vo));
	if (!t->cfg.has_network) {
		if (snap_net_default(o) || (o->mode_set && o->mode == VM_NET_NONE && !o->n_rules && !o->n_ports))
			return 0;
		return kiln_err(err, KILN_E_USAGE, "the template has no network device (it was made by a kiln "
				"without sandbox networking): make it again to give its sandboxes a network");
	}
	vo->mode = t->cfg.network;
	if (o && o->mode_set)
		vo->mode = o->mode;
	if (o) {
		vo->rules = o->rules;
		vo->n_rules = o->n_rules;
		vo->ports = o->ports;
		vo->n_ports = o->n_ports;
	}
	if (vo->n_rules && vo->mode == VM_NET_NONE)
		return kiln_err(err, KILN_E_USAGE, "egress rules need --network outbound (none lets nothing out)");
	memset(&m, 0, sizeof(m));
	if (!snap_net_identity(id, &m))
		return kiln_err(err, KILN_E_INVALID, "sandbox id %s", id);
	addr_str(m.ipv4, addr);
	vo->guest_addr = addr;
	return 1;
}

json_t *snap_net_state(const struct vm_net_opts *vo, const char *id)
{
	struct guest_identity m;
	char addr[16], mac[18];
	json_t *allow = json_array(), *deny = json_array(), *ports = json_array();

	memset(&m, 0, sizeof(m));
	snap_net_identity(id, &m);
	addr_str(m.ipv4, addr);
	snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x", m.mac[0], m.mac[1], m.mac[2], m.mac[3], m.mac[4],
		 m.mac[5]);
	for (size_t i = 0; i < vo->n_rules; i++) {
		char *r = vm_egress_str(&vo->rules[i]);
		json_array_append_new(vo->rules[i].allow ? allow : deny, json_string(r));
		free(r);
	}
	for (size_t i = 0; i < vo->n_ports; i++) {
		char *p = kiln_xasprintf("127.0.0.1:%u:%u", vo->ports[i].host_port, vo->ports[i].guest_port);
		json_array_append_new(ports, json_string(p));
		free(p);
	}
	return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "mode", vm_net_mode_name(vo->mode), "mac", mac, "address",
			 addr, "allow", allow, "deny", deny, "publish", ports);
}

int snap_net_from_state(const json_t *net, struct snap_net_opts *o, struct vm_egress_rule **rules,
			struct vm_port **ports, kiln_error **err)
{
	const char *lists[] = { "allow", "deny" };
	const json_t *v, *pub = json_object_get(net, "publish");
	size_t i, n = json_array_size(json_object_get(net, "allow")) + json_array_size(json_object_get(net, "deny"));

	memset(o, 0, sizeof(*o));
	*rules = NULL;
	*ports = NULL;
	if (net == NULL)
		return 0;
	if (vm_net_mode_parse(kiln_json_str(net, "mode") ? kiln_json_str(net, "mode") : "", &o->mode, err) < 0)
		return kiln_error_wrap(err, "the sandbox's recorded network");
	o->mode_set = true;
	*rules = kiln_xcalloc(n ? n : 1, sizeof(**rules));
	for (int l = 0; l < 2; l++)
		json_array_foreach(json_object_get(net, lists[l]), i, v) {
			if (!json_is_string(v) ||
			    vm_egress_parse(json_string_value(v), l == 0, &(*rules)[o->n_rules], err) < 0)
				return kiln_err(err, KILN_E_INVALID, "the sandbox's recorded %s rule %zu", lists[l], i);
			o->n_rules++;
		}
	*ports = kiln_xcalloc(json_array_size(pub) ? json_array_size(pub) : 1, sizeof(**ports));
	json_array_foreach(pub, i, v) {
		if (!json_is_string(v) || vm_port_parse(json_string_value(v), &(*ports)[o->n_ports], err) < 0)
			return kiln_err(err, KILN_E_INVALID, "the sandbox's recorded published port %zu", i);
		o->n_ports++;
	}
	o->rules = *rules;
	o->ports = *ports;
	return 0;
}
