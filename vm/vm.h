/* vm.h — kiln's microVM layer: the guest kernel (built or fetched by
 * vm/fetch-kernel.sh, found in kiln's installation), the initramfs kiln
 * generates for it, the one QEMU `-M microvm` spawner (KVM when /dev/kvm is
 * usable, TCG otherwise) for boots and snapshot restores, and a
 * small QMP client.  Formats, boot protocol and the clock fix: docs/vm.md. */
#ifndef KILN_VM_H
#define KILN_VM_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "kiln.h"

/* ---------------------------------------------------------------------------
 * Guest kernel.  A kernel directory holds `release` and `root/`: by default
 * the minimal kernel vm/build-kernel.sh builds from Debian's linux-source
 * (release 6.1.N-kiln-HASH; boot/vmlinux-R, the ELF QEMU enters, boot/vmlinuz-R,
 * and lib/modules/R with an empty modules.dep: everything is built in); with
 * KILN_GUEST_KERNEL=cloud, Debian's cloud kernel package unpacked (e.g.
 * 6.1.0-57-cloud-amd64, its modules, and the vmlinux extracted from vmlinuz).
 * ------------------------------------------------------------------------- */
struct vm_kernel {
	char *dir;      /* the kernel directory */
	char *release;
	char *vmlinuz;  /* dir/root/boot/vmlinuz-RELEASE: the package's bzImage, its identity */
	char *image;    /* what QEMU boots: boot/vmlinux-RELEASE (the ELF extracted by
			 * fetch-kernel.sh, entered through PVH: no decompression
			 * under TCG) when present, else vmlinuz */
	char *modules;  /* dir/root/lib/modules/RELEASE */
};

/* Where kiln looks for its guest kernel (vm/locate.c, docs/vm.md), in order:
 * $KILN_KERNEL (or its older name $KILN_KERNEL_DIR) alone when set; else
 * $KILN_HOME/kernel, then the installation's PREFIX/lib/kiln/kernel, then the
 * checkout's build/kernel (both beside the running binary, via /proc/self/exe). */
void vm_kernel_search_path(kiln_strv *out);
/* The first directory of the search path that holds a kernel, or NULL. */
char *vm_kernel_default_dir(void);
/* Where `kiln vm kernel --fetch` puts a kernel: $KILN_KERNEL, else $KILN_HOME/kernel. */
char *vm_kernel_user_dir(void);
/* Set *err (KILN_E_NOTFOUND) to "no guest kernel", listing where kiln looked. */
int vm_kernel_not_found(kiln_error **err);
/* One of kiln's own files: PREFIX/lib/kiln/NAME when it is installed, else
 * CHECKOUT/IN_TREE when run from a checkout; NULL when neither exists. */
char *vm_own_file(const char *name, const char *in_tree);
/* The guest agent kiln puts in a VM: $KILN_AGENT, else kiln's own
 * (PREFIX/lib/kiln/kiln-agent, or the checkout's bin/kiln-agent), which may
 * not exist: callers check. */
char *vm_agent_default_path(void);
/* Check a kernel directory and fill k (dir NULL: the first of the search
 * path holding one).  A missing kernel is KILN_E_NOTFOUND and says where kiln
 * looked and how to fetch one. */
int vm_kernel_open(const char *dir, struct vm_kernel *k, kiln_error **err);
void vm_kernel_free(struct vm_kernel *k);
/* The module files (relative to k->modules) needed for `names` (module names
 * like "virtio_blk"), dependencies first, each once, read from modules.dep. */
int vm_kernel_resolve_modules(const struct vm_kernel *k, const char *const *names, kiln_strv *out,
			      kiln_error **err);

/* ---------------------------------------------------------------------------
 * Initramfs: an uncompressed cpio (newc) archive written with libarchive,
 * holding busybox, the modules (with their dependencies), kiln's init and
 * optionally the guest agent.
 * ------------------------------------------------------------------------- */
struct vm_initramfs_opts {
	const struct vm_kernel *kernel;
	const char *busybox;             /* a static busybox; NULL: /bin/busybox */
	const char *agent;               /* kiln-agent binary, or NULL for none */
	const char *const *modules;      /* module names; NULL: vm_default_modules(false) */
};
/* The modules init needs: virtio-mmio, block, console, overlay (+ net). */
const char *const *vm_default_modules(bool net);
int vm_initramfs_write(const struct vm_initramfs_opts *o, const char *path, kiln_error **err);
/* The init script kiln puts at /init (also documented in docs/vm.md). */
extern const char vm_init_script[];

/* ---------------------------------------------------------------------------
 * Host facts.
 * ------------------------------------------------------------------------- */
/* true when /dev/kvm speaks the stable KVM API and is backed by hardware
 * virtualisation (kvm_intel/kvm_amd).  KILN_ACCEL=tcg|kvm overrides. */
bool vm_kvm_usable(void);
/* The host's TSC rate in kHz, measured against CLOCK_MONOTONIC_RAW (median of
 * several short windows).  Under TCG the guest's TSC ticks at exactly this rate. */
int vm_host_tsc_khz(uint32_t *khz, kiln_error **err);
/* The same, measured once per host boot (~60 ms) and cached in
 * $KILN_HOME/host-tsc.json (and in this process). */
int vm_host_tsc_khz_cached(uint32_t *khz, kiln_error **err);
/* This host boot's id (/proc/sys/kernel/random/boot_id, no newline), or NULL. */
char *vm_host_boot_id(void);
/* The start time (clock ticks since boot) of a process, 0 if it is gone or a
 * zombie: with the pid it names one process, whatever reuses the pid later. */
unsigned long long vm_proc_start_time(pid_t pid);

/* ---------------------------------------------------------------------------
 * QMP client (unix socket, one JSON object per line).  Events that arrive
 * while waiting for a reply are queued for vm_qmp_wait_event().
 * ------------------------------------------------------------------------- */
typedef struct vm_qmp vm_qmp;

/* Connect (retrying until the socket exists and accepts, within timeout_ms),
 * read the greeting and negotiate capabilities. */
vm_qmp *vm_qmp_connect(const char *socket_path, int timeout_ms, kiln_error **err);
/* Connect, run one command without arguments and close, in one round trip
 * (the capabilities negotiation and the command are sent together): for a
 * latency-critical single command such as a pool claim's `cont`.  Returns
 * its "return" value (new reference). */
json_t *vm_qmp_run_once(const char *socket_path, const char *command, uid_t peer_uid, int timeout_ms,
			kiln_error **err);
/* Run a command; args may be NULL (borrowed).  Returns the "return" value (new
 * reference); a QMP error becomes a kiln_error "CMD: CLASS: DESC". */
json_t *vm_qmp_execute(vm_qmp *q, const char *command, json_t *args, int timeout_ms, kiln_error **err);
/* The same, passing fd to QEMU with it (SCM_RIGHTS; e.g. for "getfd"). */
json_t *vm_qmp_execute_fd(vm_qmp *q, const char *command, json_t *args, int fd, int timeout_ms, kiln_error **err);
/* Wait for the next event named `name` (NULL: any); returns the whole event. */
json_t *vm_qmp_wait_event(vm_qmp *q, const char *name, int timeout_ms, kiln_error **err);
/* The greeting's {"qemu": ...} version object (borrowed). */
const json_t *vm_qmp_version(const vm_qmp *q);
void vm_qmp_close(vm_qmp *q);

/* ---------------------------------------------------------------------------
 * A running microVM.
 * ------------------------------------------------------------------------- */
enum vm_accel { VM_ACCEL_AUTO = 0, VM_ACCEL_KVM, VM_ACCEL_TCG };

/* How init mounts the rootfs disk (always a per-VM qcow2 over the base image,
 * so the base is never written).  OVERLAY: the disk read-only under an
 * overlayfs whose upper dir is a tmpfs at /run/kiln/upper — a build step's
 * changes are exactly that directory.  WRITABLE: the disk mounted read-write. */
enum vm_root_mode { VM_ROOT_OVERLAY = 0, VM_ROOT_WRITABLE };

/* Paths inside the guest (see docs/vm.md, "Init protocol"). */
#define VM_GUEST_UPPER_DIR "/run/kiln/upper" /* overlay mode: everything changed
					     * (a symlink into the scratch disk when it has one) */
#define VM_GUEST_LOWER_DIR "/run/kiln/lower" /* overlay mode: the base, read-only */
#define VM_GUEST_BUSYBOX "/run/kiln/bin/busybox"

/* ---------------------------------------------------------------------------
 * Network (vm/net.c, docs/vm.md "Network").  A VM with a NIC has QEMU's
 * user-mode network (libslirp, 10.0.2.0/24: gateway .2 = the host, DNS .3).
 * A sandbox's is shaped by struct vm_net_opts: with no way out (NONE) QEMU
 * stays in the jail's empty network namespace and slirp forwards nothing
 * the guest starts; OUTBOUND (or published ports) puts it in the host's,
 * where its uid's packets pass the egress chain kiln wrote for its slot.
 * ------------------------------------------------------------------------- */
enum vm_net_mode { VM_NET_NONE = 0, VM_NET_OUTBOUND };
#define VM_GUEST_ADDR_DEFAULT "10.0.2.15" /* what init gives eth0 at boot */
struct vm_egress_rule {
	bool allow;      /* else deny (denies are checked first) */
	uint32_t addr;   /* IPv4, host order, masked to prefix */
	uint8_t prefix;  /* 0-32 */
	uint16_t port;   /* TCP and UDP destination port; 0: every port and protocol */
};
struct vm_port {
	uint16_t host_port;  /* on the host's 127.0.0.1 */
	uint16_t guest_port; /* TCP, on the guest's address */
};
struct vm_net_opts {
	enum vm_net_mode mode;
	const struct vm_egress_rule *rules;
	size_t n_rules;
	const struct vm_port *ports;
	size_t n_ports;
	const char *guest_addr; /* where published ports lead; NULL: VM_GUEST_ADDR_DEFAULT */
};
int vm_net_mode_parse(const char *s, enum vm_net_mode *m, kiln_error **err);
const char *vm_net_mode_name(enum vm_net_mode m);
/* ADDR[/PREFIX][:PORT] (IPv4) into r; a usage error says what is wrong. */
int vm_egress_parse(const char *s, bool allow, struct vm_egress_rule *r, kiln_error **err);
char *vm_egress_str(const struct vm_egress_rule *r); /* "A.B.C.D/P[:PORT]" */
/* [127.0.0.1:]HOSTPORT:GUESTPORT into p. */
int vm_port_parse(const char *s, struct vm_port *p, kiln_error **err);
/* The iptables-restore input that makes the egress chain of a slot, with
 * jump also OUTPUT's jump to it for uid; o NULL: removes both. */
char *vm_netfw_script(unsigned slot, uid_t uid, const struct vm_net_opts *o, bool jump);

struct vm_config {
	const char *rootfs;        /* ext4 image (required) */
	unsigned cpus;             /* default 1 */
	unsigned memory_mib;       /* default 256 */
	bool net;                  /* user-mode network (virtio-net), off by default */
	bool net_isolated;         /* with net: the NIC, but no way out (a template whose
				    * network is none: QEMU in the jail's empty namespace) */
	unsigned scratch_mib;      /* overlay mode: >0 puts the upper dir on a fresh, sparse
				    * ext4 disk of this size instead of guest RAM (tmpfs,
				    * at most half the memory) — for builds that write a lot */
	enum vm_accel accel;
	enum vm_root_mode root_mode;
	const char *kernel_dir;    /* NULL: vm_kernel_default_dir() */
	const char *agent;         /* kiln-agent path; NULL: vm_agent_default_path() */
	bool no_agent;             /* boot without the agent (init idles after the marker) */
	const char *busybox;       /* NULL: /bin/busybox */
	int boot_timeout_ms;       /* until init's ready marker; 0: 120 s TCG, 30 s KVM */
	uint32_t tsc_khz;          /* TCG only; 0: measure the host (vm_host_tsc_khz) */
	bool console_verbose;      /* kernel messages on the console (no "quiet") */
	const char *extra_cmdline; /* appended to the kernel command line */
	const char *spare_disk;    /* a raw file attached read-only (serial VM_SPARE_SERIAL) that
				    * init leaves alone, or NULL; a restore of the VM's snapshot
				    * may attach another file of the same size there */
};
void vm_config_init(struct vm_config *c);
/* The spare disk's virtio serial, and its size: a builder VM is snapshotted
 * with a sparse file of this size and restored with the stage's ext4 grown
 * to it (the guest keeps the size it probed). */
#define VM_SPARE_SERIAL "kiln-spare"
#define VM_SPARE_BYTES (64ll << 30)

typedef struct vm_instance vm_instance;
typedef struct guest_conn guest_conn; /* guest/guest.h */

/* Start QEMU, wait until the guest's init prints its ready marker and, when
 * the VM has the agent, connect to it (HELLO exchanged).  On failure
 * everything is cleaned up and the error quotes the console's last lines. */
vm_instance *vm_boot(const struct vm_config *c, kiln_error **err);
/* The agent connection made by vm_boot (owned by the VM), NULL without agent. */
guest_conn *vm_agent(vm_instance *v);
/* Close that connection so another client (e.g. `kiln agent --socket`) can
 * use the agent's socket: QEMU's chardev serves one client at a time. */
void vm_agent_release(vm_instance *v);
/* Stop QEMU (QMP quit, then SIGKILL) and remove every file of the VM. */
void vm_destroy(vm_instance *v);

const char *vm_dir(const vm_instance *v);            /* the VM's private directory */
const char *vm_console_path(const vm_instance *v);   /* serial console log */
const char *vm_agent_socket(const vm_instance *v);   /* unix socket of the agent's port */
const char *vm_memory_path(const vm_instance *v);    /* guest RAM file (share=on) */
vm_qmp *vm_get_qmp(vm_instance *v);
pid_t vm_qemu_pid(const vm_instance *v);
bool vm_has_agent(const vm_instance *v);
enum vm_accel vm_accel_used(const vm_instance *v);
uint32_t vm_tsc_khz_used(const vm_instance *v);      /* 0 under KVM */
double vm_boot_ms(const vm_instance *v);             /* QEMU start to init's marker */
double vm_agent_ms(const vm_instance *v);            /* QEMU start to the agent's HELLO (0: none) */
/* Block until QEMU exits on its own (guest poweroff) or timeout_ms passes
 * (<0: forever); returns 1 if it exited, 0 on timeout. */
int vm_wait_exit(vm_instance *v, int timeout_ms, kiln_error **err);

/* Every QEMU runs in a jail (docs/security.md) unless this is set (the
 * CLI's --unconfined) or $KILN_UNCONFINED is non-empty and not "0". */
void vm_set_unconfined(bool on);
bool vm_unconfined(void);
/* Empty the egress chain of a jailed VM's uid once its QEMU is gone (0:
 * unconfined, nothing to do). */
void vm_net_release(uid_t uid);
/* Remove the cgroups and egress chains of uid slots no VM holds; returns
 * how many. */
int vm_jail_gc(void);
/* Remove what a restored VM left outside its directory dir (the RAM copy in
 * /dev/shm that dir/memory points to); the caller removes dir. */
void vm_dir_cleanup(const char *dir);

/* Install SIGINT/SIGTERM/SIGHUP handlers that kill every live VM's QEMU and
 * remove its files before the process dies of the signal.  For programs (the
 * CLI); idempotent. */
void vm_cleanup_on_signals(void);

/* ===========================================================================
 * Snapshot support (vm/snapshot*.c; used by snapshots/).  A snapshot is the
 * guest RAM file of a VM booted by vm_boot plus its device state saved with
 * x-ignore-shared (the RAM is not in the stream).  A restore starts QEMU with
 * the same machine and devices, the RAM file mapped private (copy-on-write)
 * and `-incoming defer`, then loads the state.  docs/snapshots.md.
 * ========================================================================= */
/* The machine and device options that a restore must repeat exactly, as one
 * stable string (recorded in a snapshot and compared on restore). */
char *vm_machine_signature(enum vm_accel accel, unsigned cpus, unsigned memory_mib, bool net);
/* The one fingerprint of what a snapshot made on this host depends on, as a
 * JSON object: kernel_digest, kernel_release, machine (the signature above),
 * agent_protocol, accel ("kvm"|"tcg"), tsc_khz (the host's under TCG, else 0),
 * boot_id, and qemu when qemu_version is given.  Templates record it; the
 * builder VM snapshot's key is a digest of it.  accel AUTO: this host's. */
json_t *vm_snapshot_depends(const char *kernel_dir, enum vm_accel accel, unsigned cpus, unsigned memory_mib, bool net,
			    const char *qemu_version, kiln_error **err);
/* Every VM has this many virtio-serial ports for the agent (guest names
 * org.kiln.agent, org.kiln.agent.1, ...; the agent serves each on its own):
 * QEMU's socket chardev serves one client at a time, so that is how many
 * host clients (e.g. `kiln sandbox exec`s) can talk to one guest at once. */
#define VM_AGENT_PORTS 4u
/* The unix socket of agent port `port` in a VM's directory (agent.sock for
 * port 0, agent-N.sock for the others). */
char *vm_agent_socket_path(const char *dir, unsigned port);
/* The qcow2 overlay of a booted VM (flushed and inactive once saved). */
char *vm_overlay_path(const vm_instance *v);

/* Pause the guest and write its device state to state_path (RAM excluded). */
int vm_snapshot_save(vm_instance *v, const char *state_path, int timeout_ms, kiln_error **err);
/* The same for any QEMU reachable at q (e.g. a restored one); the guest
 * stays paused: "cont" resumes it. */
int vm_snapshot_save_qmp(vm_qmp *q, const char *state_path, int timeout_ms, kiln_error **err);

struct vm_restore_config {
	enum vm_accel accel;       /* KVM or TCG, as recorded */
	unsigned cpus, memory_mib;
	bool net;
	const struct vm_net_opts *net_opts; /* with net: a sandbox's network; NULL: a
				    * builder VM's (the host's network, no egress chain) */
	const char *memory_file;   /* the snapshot's RAM, mapped share=off, or */
	bool memory_shared;        /* share=on: the guest writes into memory_file (a
				    * private copy, in dir) so that it can be saved again */
	bool memory_direct;        /* memory_file refuses every write (a served file):
				    * mapped share=off even when jailed, no private copy */
	const char *disk;          /* qcow2 disk, opened with snapshot=on: writes go to
				    * a temp overlay in dir */
	const char *disk_backing;  /* the disk's raw backing file (its qcow2 header's
				    * backing name is ignored), or NULL: use that name */
	const char *state;         /* the device state to load */
	const char *spare_disk;    /* the spare disk's file, if the snapshot has one
				    * (VM_SPARE_BYTES long, attached read-only) */
	const char *dir;           /* the caller's: qmp.sock, agent*.sock, console.log, qemu.log */
	/* Detached: QEMU outlives kiln (a sandbox; the caller records its pid,
	 * removes dir and kills it).  Otherwise it is kiln's child, killed with
	 * kiln and on SIGINT/SIGTERM/SIGHUP (vm_cleanup_on_signals), and
	 * vm_destroy removes dir. */
	bool detached;
	int qmp_timeout_ms;        /* until QMP answers; 0: 10 s */
	/* Called once QEMU runs, before anything waits on it (a sandbox records
	 * the pid), and with QEMU's version before the state is loaded; either
	 * may be NULL, a negative return fails the restore. */
	int (*on_spawn)(void *ud, pid_t pid, kiln_error **err);
	int (*on_version)(void *ud, const char *qemu_version, kiln_error **err);
	void *ud;
};
struct vm_restore_stats {
	double jail_ms;  /* before QEMU's exec: its directory, the jail's uid slot and
			  * cgroup, the egress chain, the RAM file and disks opened */
	double spawn_ms; /* QEMU started until QMP answered */
	double load_ms;  /* the state loaded and the guest resumed */
};
/* Start QEMU with the snapshot's machine, RAM file and disk, waiting with
 * `-incoming defer`, and load the state: the guest runs when this returns.
 * The VM has no agent connection (vm_agent_socket_path gives its sockets).
 * A refused state is an error quoting QEMU's reason.  stats may be NULL. */
vm_instance *vm_restore(const struct vm_restore_config *c, struct vm_restore_stats *stats, kiln_error **err);
/* Let go of a VM without stopping it (a detached sandbox lives on): closes
 * the QMP and agent connections and frees v; QEMU and the files stay. */
void vm_release(vm_instance *v);
/* A jailed QEMU owns the directory its sockets are in and could replace one
 * with a symlink to another VM's or a host service's socket: a connection to
 * it is kept only if its peer runs as the VM's uid (SO_PEERCRED; uid 0:
 * unconfined, not checked). */
int vm_socket_peer_check(int fd, uid_t uid, const char *what, kiln_error **err);
int vm_qmp_peer_check(const vm_qmp *q, uid_t uid, kiln_error **err);
/* Whether the VM's QEMU runs in a jail, and as which uid (0: unconfined). */
bool vm_jailed(const vm_instance *v);
uid_t vm_jail_uid(const vm_instance *v);
/* Refuse a qcow2 disk whose header names a backing file other than
 * want_backing (a plain name beside it; NULL: none allowed) or an external
 * data file: a disk from the store must not make QEMU open a host file. */
int vm_qcow2_check(const char *path, const char *want_backing, kiln_error **err);
/* Point a qcow2 overlay at another backing file (qemu-img rebase -u); a
 * relative name is resolved against the overlay's own directory when opened. */
int vm_overlay_rebase(const char *overlay, const char *backing_raw, kiln_error **err);
/* Write the qcow2 overlay top (a restored VM's temporary one, copied) into
 * base, a qcow2 whose raw backing is rootfs and whose header names it
 * rootfs_name (relative, as a template's disk): base then holds both, and
 * names rootfs_name again.  For pausing and committing a sandbox. */
int vm_disk_flatten(const char *top, const char *base, const char *rootfs, const char *rootfs_name, kiln_error **err);
/* Ask QEMU for its version string ("7.2.22") from a QMP greeting. */
char *vm_qmp_version_string(const vm_qmp *q);

#endif
