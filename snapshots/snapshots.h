/* snapshots.h — templates and sandboxes.  Finalize boots a rootfs, runs its
 * start command until the ready command succeeds and snapshots the VM into
 * the template store ($KILN_HOME/snapshots); a sandbox is a QEMU restored from
 * a template (RAM mapped private copy-on-write, private disk overlay) that
 * outlives kiln, with its state in $KILN_HOME/sandboxes/ID.  docs/snapshots.md. */
#ifndef KILN_SNAPSHOTS_H
#define KILN_SNAPSHOTS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "guest/guest.h"
#include "kiln.h"
#include "vm/vm.h"

/* ---------------------------------------------------------------------------
 * Templates.
 * ------------------------------------------------------------------------- */
struct snap_finalize_opts {
	const char *rootfs;            /* ext4 image (required) */
	const char *name;              /* NAME[:TAG] to tag the template with, or NULL */
	const char *start_cmd;         /* run with /bin/sh -c in the background; NULL: none */
	const char *ready_cmd;         /* polled with /bin/sh -c until exit 0; NULL: none */
	const char *user;              /* USER (name|uid[:group|gid]); NULL: root */
	const char *workdir;           /* WORKDIR; NULL: / */
	const char *const *env;        /* ENV as NAME=VALUE, NULL-terminated; NULL: default PATH */
	unsigned cpus, memory_mib;     /* 0: 1 vCPU, 256 MiB */
	int ready_timeout_ms;          /* 0: 60 s */
	const char *kernel_dir;        /* NULL: the default kernel */
	/* The template's network, the default of its sandboxes ("network" in
	 * its config); the start command runs with it too.  Every template
	 * has the NIC, so a sandbox may ask for either. */
	enum vm_net_mode network;      /* default VM_NET_NONE */
	/* Called with the rootfs before it is stored and the VM boots, for work
	 * that can go on beside them (kiln build chunks it for a push:
	 * distrib/prechunk.c).  NULL: none. */
	void (*on_rootfs)(void *ud, const char *rootfs);
	void *on_rootfs_ud;
};

/* Boot, start, wait until ready, snapshot, store.  Returns the template's
 * digest ("sha256:...") or NULL.  A ready command that never succeeds is an
 * error quoting its last output. */
char *snap_finalize(const struct snap_finalize_opts *o, kiln_error **err);

/* A template's config blob (docs/snapshots.md "Store layout"): what it runs,
 * its machine, what a restore depends on and its four blobs.  Written only by
 * snap_config_write (canonical JSON: the config's digest is the template's),
 * read only by snap_config_read. */
enum snap_role { SNAP_ROLE_ROOTFS, SNAP_ROLE_DISK, SNAP_ROLE_MEMORY, SNAP_ROLE_STATE, SNAP_NROLES };
struct snap_config_blob {
	char digest[KILN_DIGEST_MAX]; /* sha256:<64 hex> (checked: it names a file of the store) */
	uint64_t size;
};
struct snap_depends {                  /* vm_snapshot_depends plus the QEMU version */
	char *qemu, *machine, *accel, *kernel_digest, *kernel_release;
	char *boot_id;                 /* NULL: not recorded */
	unsigned agent_protocol;
	uint32_t tsc_khz;              /* 0 under KVM */
};
struct snap_config {
	char *created;                 /* "YYYY-MM-DDTHH:MM:SSZ"; NULL: not recorded */
	char *start, *ready, *user, *workdir; /* NULL: none */
	kiln_strv env;                 /* NAME=VALUE */
	unsigned cpus, memory_mib;     /* 0: not recorded */
	bool has_network;              /* false: made before templates had a NIC */
	enum vm_net_mode network;
	bool has_depends;
	struct snap_depends depends;
	struct snap_config_blob blob[SNAP_NROLES];
};
/* Parse and check every field of a config blob (where: the file or what it
 * is, for errors: "WHERE: template config field \"memory.size\" ...");
 * unknown fields, wrong types, blob digests that are not sha256:<64 hex> and
 * sizes below 0 are refused.  c is zeroed first and freed on error. */
int snap_config_read(const char *data, size_t len, const char *where, struct snap_config *c, kiln_error **err);
/* The canonical JSON of c (malloc'd). */
char *snap_config_write(const struct snap_config *c);
void snap_config_free(struct snap_config *c);
/* "rootfs", "disk", "memory", "state"; the blob of a role by that name (NULL: none). */
const char *snap_role_name(enum snap_role r);
const struct snap_config_blob *snap_config_blob(const struct snap_config *c, const char *role);

typedef struct snap_template snap_template;

/* A template by reference (kiln_ref_parse: [HOST/]NAME[:TAG] with tag
 * "latest" by default, or [HOST/]NAME@DIGEST), by digest "sha256:HEX" or by
 * a unique prefix of at least 8 hex digits.  NAME:TAG without a host that is
 * not a local name finds the one HOST/NAME:TAG pulled (several: USAGE error
 * naming them).  The config blob's digest is checked; NOTFOUND if there is none. */
snap_template *snap_template_open(const char *ref, kiln_error **err);
void snap_template_free(snap_template *t);
const char *snap_template_digest(const snap_template *t);
const struct snap_config *snap_template_config(const snap_template *t);
/* Refuse what this host cannot restore: another QEMU, machine, kernel, agent
 * protocol, TSC rate or accelerator, a state or disk blob whose digest is
 * wrong, a memory file of the wrong size.  With full, the memory and the disk
 * blobs are hashed too (slow; `kiln snapshot verify`). */
int snap_template_check(const snap_template *t, bool full, kiln_error **err);
/* Every tagged template: [{"name","digest","created","memory_bytes",...}]. */
json_t *snap_template_list(kiln_error **err);

/* ---------------------------------------------------------------------------
 * Sandboxes.
 * ------------------------------------------------------------------------- */
struct snap_create_stats {
	double total_ms;     /* request to a sandbox that answered a command */
	double check_ms;     /* template lookup and dependency checks */
	double jail_ms;      /* before QEMU's exec: directory, jail (uid slot, cgroup),
			      * egress chain, RAM file and disks (vm_restore_stats) */
	double spawn_ms;     /* QEMU process start until QMP answers */
	double load_ms;      /* device state load (RAM is mapped, not copied); pooled: QMP cont */
	double agent_ms;     /* connecting to the agent (its HELLO is not awaited: it comes
			      * with the answer to the first request) */
	double setup_ms;     /* clock, hostname and entropy set through the agent */
	bool pooled;         /* claimed from the pool (spawn and load happened before; the
			      * sandbox's identity too: only its clock is left to set) */
};

/* A sandbox's network (docs/snapshots.md "Network"; vm/vm.h): the
 * template's mode unless mode_set; egress rules (denies first; with allows,
 * only what they allow); TCP ports published on the host's 127.0.0.1.  A
 * create asking for anything but the template's default is not served from
 * the pool (its members have the template's network). */
struct snap_net_opts {
	bool mode_set;
	enum vm_net_mode mode;
	const struct vm_egress_rule *rules;
	size_t n_rules;
	const struct vm_port *ports;
	size_t n_ports;
};

/* A new sandbox from a template: one claimed from the template's pool of
 * restored, paused sandboxes if there is one, else restored now.  Returns its
 * id (12 hex digits).  stats may be NULL; with conn, the agent connection is
 * handed over (for a first exec without a second handshake). */
char *snap_sandbox_create(const char *template_ref, struct snap_create_stats *stats, guest_conn **conn,
			  kiln_error **err);
/* What a sandbox gets at creation (docs/snapshots.md, "Sandbox state"). */
#define SNAP_DEFAULT_TIMEOUT_S 300 /* E2B's default: 5 minutes */
struct snap_create_opts {
	const char *const *env;    /* NAME=VALUE over the template's ENV, for every exec; NULL-terminated */
	const char *const *labels; /* KEY=VALUE metadata shown and filtered by ls; NULL-terminated */
	int64_t timeout_s;         /* removed this long after it starts running (a watcher
				    * process enforces it, gc too); 0: never */
	const struct snap_net_opts *net; /* NULL: the template's network */
	bool identity_unawaited;   /* with conn: the identity (hostname, clock, entropy) is
				    * sent, its answer read with the first request's, so
				    * the create does not wait a guest round trip for it */
};
/* snap_sandbox_create with env, labels and a timeout (o NULL: none of them). */
char *snap_sandbox_create_with(const char *template_ref, const struct snap_create_opts *o,
			       struct snap_create_stats *stats, guest_conn **conn, kiln_error **err);
/* Give a sandbox a new timeout, counted from now (0: none). */
int snap_sandbox_set_timeout(const char *id, int64_t timeout_s, kiln_error **err);
/* Whether a list item of snap_sandbox_list matches a filter "label=KEY" or
 * "label=KEY=VALUE", "state=S", "template=DIGEST" (USAGE error for others). */
int snap_sandbox_filter(const json_t *item, const char *filter, kiln_error **err);

/* Pause: the guest's memory, device state and disk go to the sandbox's
 * directory and QEMU stops; resume restores them (same processes, same
 * files).  exec and cp on a paused sandbox fail at once saying so. */
int snap_sandbox_pause(const char *id, double *ms, kiln_error **err);
int snap_sandbox_resume(const char *id, double *ms, kiln_error **err);
/* A new template NAME[:TAG] from a running sandbox (it keeps running):
 * its memory, device state and disk now; returns the template's digest. */
char *snap_sandbox_commit(const char *id, const char *name, kiln_error **err);

/* Files between the host and a running sandbox: host_path (a file or a
 * directory tree) to guest_path, and back; owners, modes and names (bytes)
 * kept.  A destination that is an existing directory receives the source
 * under its own name (as cp does). */
int snap_sandbox_cp_in(const char *id, const char *host_path, const char *guest_path, kiln_error **err);
int snap_sandbox_cp_out(const char *id, const char *guest_path, const char *host_path, kiln_error **err);

/* create + exec + kill: run argv in a new sandbox and remove it.  The
 * identity request goes out with argv's EXEC (one round trip). */
int snap_run(const char *template_ref, const char *const *argv, guest_output_fn on_stdout, guest_output_fn on_stderr,
	     void *user, struct guest_result *res, struct snap_create_stats *stats, kiln_error **err);
/* The same with one exec's options (env, workdir, user, stdin, timeout; not detach). */
struct snap_exec_opts;
int snap_run_with(const char *template_ref, const char *const *argv, const struct snap_exec_opts *o,
		  guest_output_fn on_stdout, guest_output_fn on_stderr, void *user, struct guest_result *res,
		  struct snap_create_stats *stats, kiln_error **err);
/* Keep n restored, warmed-up and paused sandboxes of a template ready (n < 0:
 * the size last set for it, 0 if none); extra ones are removed.  Returns how
 * many were started. */
int snap_pool_fill(const char *template_ref, int n, kiln_error **err);
/* Connect to a running sandbox's agent. */
guest_conn *snap_sandbox_connect(const char *id, int timeout_ms, kiln_error **err);
/* Stop a sandbox's QEMU and remove everything it had.  NOTFOUND if unknown. */
int snap_sandbox_kill(const char *id, kiln_error **err);
/* [{"id","template","state":"running"|"pooled"|"creating"|"dead","pid","created"}],
 * checked against the processes that really exist. */
json_t *snap_sandbox_list(kiln_error **err);
/* One sandbox's list item with what an exec starts from: "env" (the
 * template's with create's over it), "user", "workdir", and the template's
 * "cpus" and "memory_mib".  NOTFOUND if there is no such sandbox. */
json_t *snap_sandbox_info(const char *id, kiln_error **err);
/* Remove every sandbox that is not running (dead QEMU, a create that was
 * interrupted); returns how many were removed. */
int snap_sandbox_gc(kiln_error **err);

/* Run argv in a sandbox as the template's USER, in its WORKDIR with its ENV,
 * streaming output to the callbacks (NULL: discard).  Several execs may run
 * in one sandbox at once.  A command the guest could not start is an error
 * with res->exit_code 127 (not found) or 126 (not executable), as a shell
 * (and docker) would exit; other errors leave it 0. */
int snap_sandbox_exec(const char *id, const char *const *argv, guest_output_fn on_stdout, guest_output_fn on_stderr,
		      void *user, struct guest_result *res, kiln_error **err);
/* What one exec may change (kiln sandbox exec -e/-w/-u/-i/--detach). */
#define SNAP_GUEST_LOG_DIR "/run/kiln/exec" /* a detached process's PID.out/.err/.exit */
struct snap_exec_opts {
	const char *const *env;    /* NAME=VALUE over the sandbox's env; NULL-terminated */
	const char *cwd;           /* NULL: the sandbox's workdir */
	const char *user;          /* NULL: the template's user */
	int stdin_fd;              /* >= 0: copied to the command's stdin until EOF */
	uint64_t timeout_ms;       /* the agent kills it after this long; 0: never */
	bool detach;               /* start it and return: it outlives this exec, its output
				    * is kept in the guest (snap_sandbox_logs) */
	pid_t *pid;                /* with detach: its pid in the guest */
	const struct snap_net_opts *net; /* snap_run_with: the new sandbox's network (NULL: the template's) */
};
void snap_exec_opts_init(struct snap_exec_opts *o);
int snap_sandbox_exec_with(const char *id, const char *const *argv, const struct snap_exec_opts *o,
			   guest_output_fn on_stdout, guest_output_fn on_stderr, void *user, struct guest_result *res,
			   kiln_error **err);
/* The output a detached process wrote so far; *status gets "running",
 * "exit N" or "signal N".  NOTFOUND for a pid that was not started detached. */
int snap_sandbox_logs(const char *id, pid_t pid, guest_output_fn on_stdout, guest_output_fn on_stderr, void *user,
		      char **status, kiln_error **err);
/* The same over a connection from snap_sandbox_create (left open). */
int snap_sandbox_exec_conn(guest_conn *c, const char *id, const char *const *argv, guest_output_fn on_stdout,
			   guest_output_fn on_stderr, void *user, struct guest_result *res, kiln_error **err);

/* ---------------------------------------------------------------------------
 * Distribution hook (distrib/tmpl*.c, docs/distribution.md; snapshots/import.c).
 * ------------------------------------------------------------------------- */
/* The stored file of a template's "config", "rootfs", "memory", "disk" or "state". */
char *snap_template_blob(const snap_template *t, const char *role, kiln_error **err);

struct snap_import {
	const char *config;            /* the template config blob as built */
	size_t config_len;
	const char *rootfs, *memory, *disk, *state; /* assembled files, copied into the store */
	const char *name;              /* NAME[:TAG] to tag, or NULL */
	bool verified;                 /* the files already hash to the config's digests (hashed
					* while written): moved into the store, not copied */
	bool served;                   /* rootfs, memory and disk are not stored: the serve hook
					* (below) gives their files at restore */
};
/* Add a template that arrived from elsewhere: each file must hash to the
 * digest the config names (else nothing is tagged).  Nothing is rewritten
 * (the disk names its backing relative to the store, and a restore gives
 * QEMU the rootfs blob explicitly), so the returned template digest is the
 * config's digest on the builder. */
char *snap_template_import(const struct snap_import *im, kiln_error **err);

/* Templates whose rootfs, memory and disk are not in the store are served
 * from elsewhere (the host's chunk store, distrib/chunkfs.c): the hook
 * returns the directory holding files named rootfs, memory and disk, or NULL
 * (NOTFOUND: not served).  Served files refuse writes, so a restore maps the
 * memory file directly (share=off), jailed or not.  The CLI sets the hook. */
struct snap_serve_ops {
	char *(*files)(const char *template_digest, kiln_error **err);
	/* Working sets (snapshots/workset.c): serve a stored template's files
	 * under a fresh name (*key) recording every read; then the byte ranges
	 * read, {"rootfs"|"memory"|"disk": [[offset, length], ...]}. */
	char *(*record_start)(const char *template_digest, const char *rootfs, const char *memory, const char *disk,
			      char **key, kiln_error **err);
	json_t *(*record_end)(const char *key, kiln_error **err);
};
void snap_set_serve_ops(const struct snap_serve_ops *ops);
/* Record which parts of a template's rootfs, memory and disk a restore and a
 * first exec read (a trial restore served by the ops above), stored beside
 * the template (snapshots/worksets/HEX.json): a lazy start fetches them first.
 * snap_finalize calls it unless $KILN_WORKSET=0. */
int snap_workset_record(const char *template_ref, kiln_error **err);
/* The recorded ranges of a template, or NULL (none recorded). */
json_t *snap_template_workset(const snap_template *t);
/* Whether a template's files are served (lazy) rather than stored. */
bool snap_template_served(const snap_template *t);

#endif
