/* internal.h — what the snapshots/ sources share: the store's paths, blob
 * writing (sparse, hashed on the way in), the template record, the
 * sandboxes' bookkeeping and pools. */
#ifndef KILN_SNAPSHOTS_INTERNAL_H
#define KILN_SNAPSHOTS_INTERNAL_H

#include "snapshots/snapshots.h"
#include "vm/vm.h"

#define SNAP_SCHEMA 1

struct snap_template {
	char *digest;          /* of the config blob */
	struct snap_config cfg;
	char *memory, *state, *disk, *rootfs; /* blob paths (served: the server's files) */
	bool served;           /* rootfs, memory, disk served (snap_set_serve_ops) */
};
/* The depends record of a config (config.c; snap_finalize reads
 * vm_snapshot_depends's through it). */
int snap_depends_read(const json_t *d, const char *where, struct snap_depends *out, kiln_error **err);
void snap_config_set_blob(struct snap_config *c, enum snap_role r, const char *digest, uint64_t size);

/* $KILN_HOME/snapshots and $KILN_HOME/sandboxes (not created). */
char *snap_store_dir(void);
char *snap_sandboxes_dir(void);
/* The path of a blob "sha256:HEX" in the store. */
char *snap_blob_path(const char *digest);
/* Copy src into the blob store, hashing it; with sparse, 4 KiB blocks of
 * zeros become holes.  Fills digest and size. */
int snap_blob_put_file(const char *src, bool sparse, char digest[KILN_DIGEST_MAX], uint64_t *size, kiln_error **err);
int snap_blob_put_data(const void *data, size_t len, char digest[KILN_DIGEST_MAX], kiln_error **err);
/* Move src, already hashed by the caller to digest, into the store (it is
 * gone afterwards); a copy when it is on another filesystem. */
int snap_blob_adopt(const char *src, const char *digest, bool sparse, kiln_error **err);
/* Whether ref is a valid template name: a reference (kiln_ref_parse). */
int snap_ref_check(const char *ref, kiln_error **err);
/* Point a reference ([HOST/]NAME:TAG or [HOST/]NAME@DIGEST) at a config digest. */
int snap_ref_set(const char *name, const char *digest, kiln_error **err);

/* Whether the recorded dependencies match a restore on this host with the
 * QEMU that reported qemu_version (NULL: not checked here). */
int snap_check_depends(const snap_template *t, const char *qemu_version, kiln_error **err);

/* Sandboxes (sandbox_admin.c).  A sandbox directory holds state.json:
 * {"id","template","state":"creating"|"running","creator","pid","pid_start",...}. */
char *snap_sandbox_dir(const char *id);
/* Load state.json of a sandbox; NOTFOUND if the sandbox does not exist. */
json_t *snap_sandbox_state(const char *id, kiln_error **err);
/* Replace dir/state.json atomically (temporary file + rename) but without
 * fsync: it describes processes, which a host crash ends anyway (gc cleans
 * up), and on a busy disk an fsync on the start path costs tens of ms. */
int snap_state_write(const char *dir, const json_t *state, kiln_error **err);
/* "running", "creating" or "dead", from the state and the live processes. */
const char *snap_sandbox_liveness(const json_t *state);
/* Kill a sandbox's QEMU if it is still the recorded process, and wait for it. */
void snap_qemu_stop(const json_t *state);
/* Restore t into an existing sandbox directory (the id's) and give the guest
 * its identity; state gets pid, uid; t's memory/disk/state may be a paused
 * sandbox's files (resume). */
int snap_sandbox_restore_into(snap_template *t, const char *id, const char *dir, json_t *state,
			      const struct snap_net_opts *net, struct snap_create_stats *s, kiln_error **err);
/* Kill a sandbox's QEMU (if it is still the recorded process) and remove its directory. */
int snap_sandbox_remove(const char *id, const json_t *state, kiln_error **err);

/* Pools (pool.c, sandbox.c).  A pooled sandbox is restored, warmed up and
 * paused, state "pooled", with the file SNAP_POOL_MARK in its directory; a
 * claim renames that file to "claim-PID" (one rename wins). */
#define SNAP_POOL_MARK "pool"
/* Restore a sandbox (pooled: warmed up and paused for the pool); o may be NULL. */
char *snap_sandbox_make(snap_template *t, bool pooled, bool defer_setup, const struct snap_net_opts *net,
			struct snap_create_stats *s, guest_conn **conn, kiln_error **err);

/* snap_sandbox_create with a network (snap_sandbox_create_with). */
/* The same with the identity sent but not awaited (conn required). */
char *snap_sandbox_create_sent(const char *template_ref, const struct snap_net_opts *net,
			       struct snap_create_stats *stats, guest_conn **conn, kiln_error **err);
char *snap_sandbox_create_net(const char *template_ref, const struct snap_net_opts *net,
			      struct snap_create_stats *stats, guest_conn **conn, kiln_error **err);

/* Network (sandbox_net.c).  Whether the template was made with a NIC (its
 * config names a "network"); o asks for nothing but the template's default
 * (a pooled sandbox fits it); the VM's options for sandbox id of t (0: no
 * NIC, 1: vo filled, borrowing o's arrays and addr, -1: refused); the
 * "network" record of its state.json; the MAC and address id's guest gets
 * (false: id is no sandbox id, e.g. a pool member's warm-up). */
bool snap_template_has_nic(const snap_template *t);
bool snap_net_default(const struct snap_net_opts *o);
int snap_net_resolve(const snap_template *t, const struct snap_net_opts *o, const char *id, struct vm_net_opts *vo,
		     char addr[16], kiln_error **err);
json_t *snap_net_state(const struct vm_net_opts *vo, const char *id);
/* The options snap_net_state recorded (net NULL: the template's network),
 * for a resume; *rules and *ports are the caller's to free. */
int snap_net_from_state(const json_t *net, struct snap_net_opts *o, struct vm_egress_rule **rules,
			struct vm_port **ports, kiln_error **err);
bool snap_net_identity(const char *id, struct guest_identity *m);
/* Claim a pooled sandbox of t and resume it; NULL without error when the pool is empty. */
char *snap_pool_claim(snap_template *t, bool defer_setup, struct snap_create_stats *s, guest_conn **conn,
		      kiln_error **err);
/* Hostname, entropy (+ CRNG reseed) and clock through the agent's IDENTITY
 * request; without wait it is only queued, to go out with the next request
 * (defer_setup above leaves it to the caller: snap_run sends it with the
 * command). */
int snap_guest_setup(guest_conn *c, const char *id, bool wait, kiln_error **err);
/* Only the clock, for a claimed pool member (made with its identity). */
int snap_guest_setup_claimed(guest_conn *c, bool wait, kiln_error **err);
json_t *snap_sandbox_new_state(const snap_template *t, const char *id, const char *state);

/* Connect to the agent of the VM whose directory is dir (its QEMU running as
 * peer_uid: vm_socket_peer_check), on port port_want
 * (>= 0) or on the first free one, waiting while all are busy; the port's
 * lock is held until the connection is closed (agent_port.c).  Without
 * wait_hello the agent's HELLO is not awaited (guest_connect_nowait): for
 * guests restored from a template, whose agent's version was checked. */
guest_conn *snap_agent_connect(const char *dir, int port_want, bool wait_hello, uid_t peer_uid, int timeout_ms,
			       kiln_error **err);

/* Options of a sandbox (sandbox_opts.c): base's NAME=VALUE entries with
 * over's replacing those of the same NAME; the creation options as state
 * fields; one exec with its options over an open connection. */
void snap_env_merge(kiln_strv *out, const json_t *base, const char *const *over);
int snap_state_apply_opts(json_t *st, const struct snap_create_opts *o, kiln_error **err);
int snap_exec_conn_with(guest_conn *c, const char *id, const char *const *argv, const struct snap_exec_opts *o,
			guest_output_fn on_stdout, guest_output_fn on_stderr, void *user, struct guest_result *res,
			kiln_error **err);

/* Life (sandbox_life.c).  The lock every read-modify-write of a sandbox's
 * state takes (an fd to close, or -1); a timeout as "timeout_s" and
 * "expires_ms" (wall clock, ms) counted from now; the per-sandbox watcher,
 * a detached process that removes the sandbox when it expires (at most one
 * per sandbox: it holds ID/watch.lock) and ends when the sandbox is gone. */
int snap_state_lock(const char *id, kiln_error **err);
void snap_state_set_timeout(json_t *st, int64_t timeout_s);
void snap_watch_start(const char *id);
/* Whether a running sandbox's time is up (expires_ms in the past). */
bool snap_state_expired(const json_t *st);
int64_t snap_wall_ms(void);

/* The serve ops the CLI set (snap_set_serve_ops), or NULL. */
const struct snap_serve_ops *snap_serve(void);

/* The time now as "YYYY-MM-DDTHH:MM:SSZ" (malloc'd): a config's "created". */
char *snap_utc_now(void);

#endif
