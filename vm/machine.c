/* machine.c — the part of QEMU's command line that a boot and a restore of
 * its snapshot share (machine, CPU, memory backend, devices in their order,
 * sockets, console), built by one function so a restore cannot drift from
 * the boot; vm_machine_signature names it in the snapshot's record. */
#include <stdlib.h>

#include "guest/guest.h"
#include "vm/internal.h"

#define MACHINE "microvm,x-option-roms=off,auto-kernel-cmdline=off,memory-backend=mem"

char *vm_machine_signature(enum vm_accel accel, unsigned cpus, unsigned memory_mib, bool net)
{
	bool kvm = accel == VM_ACCEL_KVM;

	return kiln_xasprintf("-M %s -accel %s -cpu %s -smp %u -m %uM virtio-blk-device:kiln-root virtio-serial-device"
			      " virtserialport:" GUEST_PORT_NAME "x%u serial:ttyS0%s",
			      MACHINE, kvm ? "kvm" : "tcg", kvm ? "host" : "max", cpus, memory_mib, VM_AGENT_PORTS,
			      net ? " virtio-net-device:user" : "");
}

char *vm_agent_socket_path(const char *dir, unsigned port)
{
	return port == 0 ? kiln_path_join(dir, "agent.sock") : kiln_xasprintf("%s/agent-%u.sock", dir, port);
}

void vm_machine_argv(const struct vm_machine *m, kiln_strv *av)
{
	const char *qemu = getenv("KILN_QEMU");
	bool kvm = m->accel == VM_ACCEL_KVM;

	kiln_strv_push(av, qemu && *qemu ? qemu : "qemu-system-x86_64");
	kiln_strv_push(av, "-M");
	kiln_strv_push(av, MACHINE);
	kiln_strv_push(av, "-accel");
	if (kvm)
		kiln_strv_push(av, "kvm");
	else
		kiln_strv_push_owned(av, kiln_xasprintf("tcg,tb-size=%u", VM_TCG_TB_MIB));
	kiln_strv_push(av, "-cpu");
	kiln_strv_push(av, kvm ? "host" : "max");
	kiln_strv_push(av, "-smp");
	kiln_strv_push_owned(av, kiln_xasprintf("%u", m->cpus));
	kiln_strv_push(av, "-m");
	kiln_strv_push_owned(av, kiln_xasprintf("%uM", m->memory_mib));
	kiln_strv_push(av, "-object");
	/* share=off for a restore: the snapshot's RAM file mapped private,
	 * copy-on-write, so the sandbox's writes never reach it. */
	kiln_strv_push_owned(av, kiln_xasprintf("memory-backend-file,id=mem,size=%uM,mem-path=%s,share=%s",
						m->memory_mib, m->memory_file, m->memory_private ? "off" : "on"));
	if (m->sandbox) {
		/* QEMU's own seccomp policy: no exec or fork (migration goes
		 * through a passed fd), no set*id, no scheduler or obsolete calls */
		kiln_strv_push(av, "-sandbox");
		kiln_strv_push(av, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	}
	kiln_strv_push(av, "-nodefaults");
	kiln_strv_push(av, "-no-user-config");
	kiln_strv_push(av, "-display");
	kiln_strv_push(av, "none");
	kiln_strv_push(av, "-no-reboot");
	kiln_strv_push(av, "-chardev");
	kiln_strv_push_owned(av, kiln_xasprintf("file,id=con,path=%s/console.log", m->dir));
	kiln_strv_push(av, "-serial");
	kiln_strv_push(av, "chardev:con");
	kiln_strv_push(av, "-qmp");
	kiln_strv_push_owned(av, kiln_xasprintf("unix:%s/qmp.sock,server=on,wait=off", m->dir));
	kiln_strv_push(av, "-drive");
	/* An explicit backing makes the disk's bytes independent of where the
	 * store is: the name in its qcow2 header is never opened. */
	char *backing = m->disk_backing ? kiln_xasprintf(",backing.driver=raw,backing.file.filename=%s", m->disk_backing)
					: kiln_xstrdup("");
	kiln_strv_push_owned(av, kiln_xasprintf("id=root,file=%s,format=qcow2,if=none%s%s", m->disk,
						m->disk_snapshot ? ",snapshot=on" : "", backing));
	free(backing);
	kiln_strv_push(av, "-device");
	/* init finds its disks by serial: virtio-mmio probe order is not a contract. */
	kiln_strv_push(av, "virtio-blk-device,drive=root,serial=kiln-root");
	kiln_strv_push(av, "-device");
	kiln_strv_push(av, "virtio-serial-device");
	/* One port per concurrent host client: QEMU's socket chardev serves one. */
	for (unsigned i = 0; i < VM_AGENT_PORTS; i++) {
		char *sock = vm_agent_socket_path(m->dir, i);
		kiln_strv_push(av, "-chardev");
		kiln_strv_push_owned(av, kiln_xasprintf("socket,id=agent%u,path=%s,server=on,wait=off", i, sock));
		kiln_strv_push(av, "-device");
		if (i == 0)
			kiln_strv_push(av, "virtserialport,chardev=agent0,name=" GUEST_PORT_NAME);
		else
			kiln_strv_push_owned(av, kiln_xasprintf("virtserialport,chardev=agent%u,name=" GUEST_PORT_NAME ".%u",
								i, i));
		free(sock);
	}
	if (m->net) {
		kiln_strv_push(av, "-netdev");
		kiln_strv_push(av, m->netdev ? m->netdev : "user,id=net0");
		kiln_strv_push(av, "-device");
		kiln_strv_push(av, "virtio-net-device,netdev=net0");
	}
	if (m->spare) {
		/* a disk init leaves alone: a restored builder VM mounts what its
		 * restore put there (docs/vm.md, "spare disk") */
		kiln_strv_push(av, "-drive");
		kiln_strv_push_owned(av, kiln_xasprintf("id=spare,file=%s,format=raw,if=none,readonly=on", m->spare));
		kiln_strv_push(av, "-device");
		kiln_strv_push(av, "virtio-blk-device,drive=spare,serial=" VM_SPARE_SERIAL);
	}
	/* Devices no snapshot has come last, so the others keep their slots. */
	if (m->scratch) {
		kiln_strv_push(av, "-drive");
		kiln_strv_push_owned(av, kiln_xasprintf("id=scratch,file=%s,format=raw,if=none,discard=unmap", m->scratch));
		kiln_strv_push(av, "-device");
		kiln_strv_push(av, "virtio-blk-device,drive=scratch,serial=kiln-scratch");
	}
}
