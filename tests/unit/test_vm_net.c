/* test_vm_net.c — the sandbox network's syntax and what it makes: egress
 * rules (CIDR, port, masking, refusals), published ports (loopback only),
 * slirp's -netdev value per mode, and the iptables-restore input of a
 * slot's egress chain (order: replies, denies, allows, the default). */
#include <stdlib.h>
#include <string.h>

#include "vm/internal.h"
#include "test.h"

static void test_egress_parse(void)
{
	struct vm_egress_rule r;
	kiln_error *err = NULL;
	char *s;

	CHECK(vm_egress_parse("10.1.2.3/8:443", true, &r, &err) == 0);
	CHECK(r.allow && r.addr == 0x0a000000u && r.prefix == 8 && r.port == 443);
	CHECK_STR((s = vm_egress_str(&r)), "10.0.0.0/8:443");
	free(s);
	CHECK(vm_egress_parse("127.0.0.1", false, &r, &err) == 0);
	CHECK(!r.allow && r.prefix == 32 && r.port == 0);
	CHECK(vm_egress_parse("0.0.0.0/0", true, &r, &err) == 0 && r.prefix == 0 && r.addr == 0);
	static const char *const bad[] = { "", "300.1.1.1", "10.0.0.0/33", "10.0.0.0/", "10.0.0.1:0", "10.0.0.1:65536",
					   "10.0.0.1:http", "::1", "host.example", "10.0.0.0/8:443:1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(vm_egress_parse(bad[i], true, &r, &err) < 0);
		CHECK(err && err->kind == KILN_E_USAGE && strstr(kiln_error_message(err), "ADDR[/PREFIX][:PORT]"));
		kiln_error_clear(&err);
	}
}

static void test_port_parse(void)
{
	struct vm_port p;
	kiln_error *err = NULL;

	CHECK(vm_port_parse("127.0.0.1:8080:80", &p, &err) == 0 && p.host_port == 8080 && p.guest_port == 80);
	CHECK(vm_port_parse("9000:22", &p, &err) == 0 && p.host_port == 9000 && p.guest_port == 22);
	static const char *const bad[] = { "0.0.0.0:80:80", "80", "80:", ":80", "1:2:3", "127.0.0.1:70000:1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(vm_port_parse(bad[i], &p, &err) < 0);
		CHECK(err && strstr(kiln_error_message(err), "127.0.0.1 only"));
		kiln_error_clear(&err);
	}
	enum vm_net_mode m;
	CHECK(vm_net_mode_parse("outbound", &m, &err) == 0 && m == VM_NET_OUTBOUND);
	CHECK(vm_net_mode_parse("none", &m, &err) == 0 && m == VM_NET_NONE);
	CHECK(vm_net_mode_parse("host", &m, &err) < 0);
	kiln_error_clear(&err);
}

static void test_netdev(void)
{
	struct vm_port ports[] = { { 8080, 80 } };
	struct vm_net_opts o = { .mode = VM_NET_NONE, .ports = ports, .n_ports = 1, .guest_addr = "10.0.2.39" };
	char *s;

	CHECK_STR((s = vm_net_netdev(NULL)), "user,id=net0");
	free(s);
	CHECK_STR((s = vm_net_netdev(&o)), "user,id=net0,ipv6=off,restrict=on,hostfwd=tcp:127.0.0.1:8080-10.0.2.39:80");
	free(s);
	o.mode = VM_NET_OUTBOUND;
	o.n_ports = 0;
	CHECK_STR((s = vm_net_netdev(&o)), "user,id=net0,ipv6=off");
	free(s);
	CHECK(!vm_net_host_ns(false, &o) && vm_net_host_ns(true, &o) && vm_net_host_ns(true, NULL));
	o.mode = VM_NET_NONE;
	CHECK(!vm_net_host_ns(true, &o));
	o.n_ports = 1;
	CHECK(vm_net_host_ns(true, &o));
}

static void test_script(void)
{
	struct vm_egress_rule r[2];
	kiln_error *err = NULL;
	char *s;

	CHECK(vm_egress_parse("10.0.0.0/8", true, &r[0], &err) == 0);
	CHECK(vm_egress_parse("10.9.9.9:22", false, &r[1], &err) == 0);
	struct vm_net_opts o = { .mode = VM_NET_OUTBOUND, .rules = r, .n_rules = 2 };
	s = vm_netfw_script(7, 2000007, &o, true);
	const char *est = strstr(s, "-A KILN-VM-7 -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT");
	const char *deny = strstr(s, "-A KILN-VM-7 -d 10.9.9.9/32 -p tcp --dport 22 -j REJECT --reject-with tcp-reset");
	const char *allow = strstr(s, "-A KILN-VM-7 -d 10.0.0.0/8 -j ACCEPT");
	const char *last = strstr(s, "-A KILN-VM-7 -j REJECT\n");
	CHECK(strncmp(s, "*filter\n:KILN-VM-7 - [0:0]\n", 27) == 0);
	CHECK(est && deny && allow && last && est < deny && deny < allow && allow < last);
	CHECK(strstr(s, "-d 10.9.9.9/32 -p udp --dport 22 -j REJECT\n") != NULL);
	CHECK(strstr(s, "-I OUTPUT 1 -m owner --uid-owner 2000007 -j KILN-VM-7\n") != NULL);
	CHECK(strstr(s, "127.0.0.0/8") == NULL); /* an allow list: everything else is refused */
	free(s);
	/* outbound without allows: the host itself and link-local refused, the rest accepted */
	o.n_rules = 0;
	s = vm_netfw_script(7, 2000007, &o, false);
	CHECK(strstr(s, "-A KILN-VM-7 -d 127.0.0.0/8 -p tcp -j REJECT --reject-with tcp-reset\n") != NULL);
	CHECK(strstr(s, "-d 169.254.0.0/16 -j REJECT\n") != NULL);
	CHECK(strstr(s, "-A KILN-VM-7 -j ACCEPT\nCOMMIT\n") != NULL);
	CHECK(strstr(s, "OUTPUT") == NULL);
	free(s);
	/* none (published ports only): replies, then nothing */
	o.mode = VM_NET_NONE;
	s = vm_netfw_script(7, 2000007, &o, false);
	CHECK(strstr(s, "-A KILN-VM-7 -j ACCEPT") == NULL && strstr(s, "-A KILN-VM-7 -j REJECT\n") != NULL);
	free(s);
	s = vm_netfw_script(7, 2000007, NULL, false);
	CHECK_STR(s, "*filter\n-D OUTPUT -m owner --uid-owner 2000007 -j KILN-VM-7\n-F KILN-VM-7\n-X KILN-VM-7\nCOMMIT\n");
	free(s);
}

int main(void)
{
	RUN(test_egress_parse);
	RUN(test_port_parse);
	RUN(test_netdev);
	RUN(test_script);
	return test_done();
}
